//! Where `Auto`'s plan time goes on CUDA (docs/results/joins.md, "Auto's plan on the GPU:
//! launches, not the sample"): the host time of a launch, a synchronization and a download of
//! one element, of `sample_runs` at 32 … 4096 samples, of the chained table's build, and each
//! join's phases for `Auto`, SMJ-OM and NPHJ-chained at 2^18 and 2^20 rows of 4, 8 and 16 a
//! key (median of 41 or 101 runs, the host clock and the joins' own CUDA events).
//!
//! Brought up to date with `SampleRuns::sample_runs_and_chained_table` (sixteenth session: the
//! sample and the table's emptied heads in one launch, the keys pushed by the next where the
//! sample's pairs are few). To
//! run: copy into `joins/tests/`, `cargo test --release --features cuda -p joinkit --test
//! plan_pieces --no-run`, and on the GPU machine `plan_pieces --nocapture --test-threads 1`;
//! for the kernels' own times, `ncu --kernel-name regex:sample plan_pieces sample_kernels`
//! (the key sample alone and with the chained table, twice at 2^18 and 2^20 rows).
#![cfg(feature = "cuda")]
use std::time::Instant;

use joinkit::{
    Algorithm, Backend, JoinKind, JoinOptions, SampleRuns, join_rows, right_sample_rows,
};
use joinkit_cuda::hash::hash64;
use joinkit_hashtable::{HashTables, TableConfig};

fn keys(n: usize, m: usize, seed: u64) -> Vec<u32> {
    let mut v: Vec<u32> = (0..n).map(|i| (i / m) as u32).collect();
    for i in (1..n).rev() {
        let j = (hash64(i as u64, seed) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}

fn med(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn plan_cost() {
    let Some(b) = joinkit_cuda::testing::cuda_or_skip("plan_cost") else {
        return;
    };
    let reps = 41;
    // timed() around nothing
    let mut w = vec![];
    let mut e = vec![];
    for _ in 0..reps {
        let t = Instant::now();
        let ((), ms) = b.timed(|| Ok(())).unwrap();
        w.push(t.elapsed().as_secs_f64() * 1e6);
        e.push(ms * 1e3);
    }
    println!(
        "timed(nothing): host {:.1} us, events {:.1} us",
        med(w),
        med(e)
    );
    for n in [18usize, 20] {
        for m in [4usize, 8, 16] {
            let rows = 1usize << n;
            let r = b.upload(&keys(rows, m, 1)).unwrap();
            let l = b.upload(&keys(rows, m, 2)).unwrap();
            let s = right_sample_rows(rows);
            let (mut sw, mut bw, mut bt, mut both) = (vec![], vec![], vec![], vec![]);
            for _ in 0..reps {
                b.synchronize().unwrap();
                let t = Instant::now();
                let g = b.sample_runs(&r, s).unwrap();
                sw.push(t.elapsed().as_secs_f64() * 1e6);
                assert!(!g.is_empty());
                b.synchronize().unwrap();
                let t = Instant::now();
                let (tb, ms) = b
                    .timed(|| b.build_table(&r, &TableConfig::chained()))
                    .unwrap();
                bw.push(t.elapsed().as_secs_f64() * 1e6);
                bt.push(ms * 1e3);
                drop(tb);
                b.synchronize().unwrap();
                let t = Instant::now();
                let (_g, tb) = b.sample_runs_and_chained_table(&r, s, u64::MAX, None).unwrap();
                b.synchronize().unwrap();
                both.push(t.elapsed().as_secs_f64() * 1e6);
                drop(tb);
            }
            println!(
                "2^{n} m={m} samples={s}: sample_runs host {:.1} us; chained build host {:.1} us events {:.1} us; sample and chained table + sync host {:.1} us",
                med(sw),
                med(bw),
                med(bt),
                med(both)
            );
            for algorithm in [Algorithm::Auto, Algorithm::SmjOm, Algorithm::NphjChained] {
                let opts = JoinOptions {
                    algorithm,
                    ..JoinOptions::new(JoinKind::Inner)
                };
                let (mut wall, mut tot, mut plan, mut ph) = (vec![], vec![], vec![], String::new());
                for i in 0..reps {
                    b.synchronize().unwrap();
                    let t = Instant::now();
                    let (rows_out, st) = join_rows(&b, &l, &r, &opts).unwrap();
                    b.synchronize().unwrap();
                    wall.push(t.elapsed().as_secs_f64() * 1e3);
                    tot.push(st.phases.iter().map(|p| p.1).sum::<f64>());
                    plan.push(
                        st.phases
                            .iter()
                            .find(|p| p.0 == "plan")
                            .map_or(0.0, |p| p.1)
                            * 1e3,
                    );
                    if i == 0 {
                        ph = format!("{:?} {:?}", st.algorithm, st.phases);
                    }
                    drop(rows_out);
                }
                println!(
                    "   {algorithm:?}: wall {:.3} ms, phases {:.3} ms, plan {:.1} us  [{ph}]",
                    med(wall),
                    med(tot),
                    med(plan)
                );
            }
        }
    }
}

#[test]
fn plan_pieces() {
    let Some(b) = joinkit_cuda::testing::cuda_or_skip("plan_pieces") else {
        return;
    };
    let reps = 101;
    let host = |f: &mut dyn FnMut()| {
        let mut w = vec![];
        for _ in 0..reps {
            b.synchronize().unwrap();
            let t = Instant::now();
            f();
            w.push(t.elapsed().as_secs_f64() * 1e6);
        }
        med(w)
    };
    println!(
        "synchronize idle: {:.1} us",
        host(&mut || b.synchronize().unwrap())
    );
    let mut one = b.alloc::<u32>(1).unwrap();
    println!(
        "fill 1 + sync: {:.1} us",
        host(&mut || {
            b.fill(&mut one, 3).unwrap();
            b.synchronize().unwrap();
        })
    );
    println!(
        "fill 1 no sync: {:.1} us",
        host(&mut || {
            b.fill(&mut one, 3).unwrap();
        })
    );
    println!(
        "download 1: {:.1} us",
        host(&mut || {
            b.download(&one).unwrap();
        })
    );
    println!(
        "alloc 2^18 u32 + drop: {:.1} us",
        host(&mut || {
            drop(b.alloc::<u32>(1 << 18).unwrap());
        })
    );
    for n in [18usize, 20] {
        let rows = 1usize << n;
        let r = b.upload(&keys(rows, 16, 1)).unwrap();
        for s in [32usize, 512, 2048, 4096] {
            println!(
                "2^{n} sample_runs({s}): {:.1} us",
                host(&mut || {
                    b.sample_runs(&r, s).unwrap();
                })
            );
        }
        let s = right_sample_rows(rows);
        println!(
            "2^{n} sample_runs_and_chained_table({s}), build skipped, until the sample is read: {:.1} us",
            host(&mut || {
                drop(b.sample_runs_and_chained_table(&r, s, 0, None).unwrap());
            })
        );
        println!(
            "2^{n} sample_runs_and_chained_table({s}), built, + sync: {:.1} us",
            host(&mut || {
                let t = b.sample_runs_and_chained_table(&r, s, u64::MAX, None).unwrap();
                b.synchronize().unwrap();
                drop(t);
            })
        );
        println!(
            "2^{n} build chained, no sync: {:.1} us",
            host(&mut || {
                drop(b.build_table(&r, &TableConfig::chained()).unwrap());
            })
        );
        println!(
            "2^{n} build chained + sync: {:.1} us",
            host(&mut || {
                let t = b.build_table(&r, &TableConfig::chained()).unwrap();
                b.synchronize().unwrap();
                drop(t);
            })
        );
    }
}

#[test]
fn sample_kernels() {
    let Some(b) = joinkit_cuda::testing::cuda_or_skip("sample_kernels") else {
        return;
    };
    for n in [18usize, 20] {
        let rows = 1usize << n;
        let r = b.upload(&keys(rows, 16, 1)).unwrap();
        let s = right_sample_rows(rows);
        for _ in 0..2 {
            b.sample_runs(&r, s).unwrap();
            drop(b.sample_runs_and_chained_table(&r, s, u64::MAX, None).unwrap());
            b.synchronize().unwrap();
        }
    }
}
