//! The NCCL communicator: on one GPU a world of one rank (a real `ncclCommInitRank`, grouped
//! send and receive to itself) against what each collective promises, and a world whose other
//! rank never comes (a time-out, not a hang); on a host with several GPUs one rank per GPU
//! (all-to-all of uneven counts, all-gather, splits, a rank that stops); where NCCL is missing,
//! the one error that says what to install.
#![cfg(feature = "cuda")]

use std::time::{Duration, Instant};

use joinkit_comm::nccl::{NcclComm, UniqueId, version};
use joinkit_comm::{CommConfig, Communicator, ReduceOp};
use joinkit_cuda::testing::{cuda_or_skip, gpu_required, gpus_or_skip};
use joinkit_cuda::{Backend, Column, ColumnRef, CudaBackend, Error};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// The tests of this file run one at a time: NCCL kernels of concurrent communicators on one
/// GPU may wait on each other, and a test that stops a rank must not stall another's.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn nccl_loads_or_says_what_to_install() {
    match version() {
        Ok((major, minor, _)) => assert!((major, minor) >= (2, 18), "{major}.{minor}"),
        Err(Error::Communication { message, .. }) => {
            assert!(
                !gpu_required(),
                "a GPU run needs NCCL, and it did not load: {message}"
            );
            assert!(message.contains("NCCL 2.18 or newer"), "{message}");
            assert!(message.contains("libnccl.so.2"), "{message}");
        }
        Err(e) => panic!("not a communication error: {e}"),
    }
}

fn world_of_one(test: &str) -> Option<(CudaBackend, NcclComm)> {
    let gpu = cuda_or_skip(test)?;
    let id = UniqueId::new().expect("NCCL loads where a GPU is");
    let comm = NcclComm::init_rank(&gpu, 1, 0, &id, CommConfig::default()).unwrap();
    Some((gpu, comm))
}

#[test]
fn a_world_of_one_gathers_reduces_and_exchanges() {
    let _serial = serial();
    let Some((gpu, comm)) = world_of_one("a_world_of_one_gathers_reduces_and_exchanges") else {
        return;
    };
    assert_eq!((comm.rank(), comm.size()), (0, 1));
    // Host values: inline (short) and in a second round (long), and none.
    assert_eq!(
        comm.all_gather(&[3, u64::MAX, 0]).unwrap(),
        vec![3, u64::MAX, 0]
    );
    let long: Vec<u64> = (0..1000).map(|i| i * 7919).collect();
    assert_eq!(comm.all_gather(&long).unwrap(), long);
    assert_eq!(comm.all_gather(&[]).unwrap(), Vec::<u64>::new());
    assert_eq!(comm.all_reduce(&[5, 9], ReduceOp::Max).unwrap(), vec![5, 9]);
    comm.barrier().unwrap();
    // Buffers of random sizes, of four- and eight-byte elements, into poisoned memory.
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(
            &(
                proptest::collection::vec(any::<u64>(), 0..5000),
                0usize..5000,
            ),
            |(rows, take)| {
                let take = take.min(rows.len());
                let mut poison = gpu.alloc::<u64>(take.max(1)).unwrap();
                gpu.fill(&mut poison, 0xdead_beef).unwrap();
                drop(poison);
                let send = gpu.upload(&rows).unwrap();
                let (got, counts) = comm.all_to_all_v(&gpu, &send, &[take]).unwrap();
                prop_assert_eq!(counts, vec![take]);
                prop_assert_eq!(gpu.download(&got).unwrap(), rows[..take].to_vec());
                // Any order, one rank: its aligned body, then its tail, i.e. in order.
                let (got, counts) = comm.all_to_all_v_any_order(&gpu, &send, &[take]).unwrap();
                prop_assert_eq!(counts, vec![take]);
                prop_assert_eq!(gpu.download(&got).unwrap(), rows[..take].to_vec());
                let narrow: Vec<i32> = rows.iter().map(|&v| v as i32).collect();
                let send = gpu.upload(&narrow).unwrap();
                let (got, counts) = comm.all_gather_v(&gpu, &send).unwrap();
                prop_assert_eq!(counts, vec![narrow.len()]);
                prop_assert_eq!(gpu.download(&got).unwrap(), narrow.clone());
                let (got, counts) = comm.all_gather_v_any_order(&gpu, &send).unwrap();
                prop_assert_eq!(counts, vec![narrow.len()]);
                prop_assert_eq!(gpu.download(&got).unwrap(), narrow);
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn bad_counts_are_an_error_and_the_communicator_goes_on() {
    let _serial = serial();
    let Some((gpu, comm)) = world_of_one("bad_counts_are_an_error_and_the_communicator_goes_on")
    else {
        return;
    };
    let send = gpu.upload(&[1u32, 2, 3]).unwrap();
    for counts in [&[4usize][..], &[1, 1], &[]] {
        assert!(
            matches!(
                comm.all_to_all_v(&gpu, &send, counts),
                Err(Error::InvalidArgument(_))
            ),
            "{counts:?}"
        );
    }
    let (got, _) = comm.all_to_all_v(&gpu, &send, &[2]).unwrap();
    assert_eq!(gpu.download(&got).unwrap(), vec![1, 2]);
}

#[test]
fn split_makes_a_working_sub_communicator() {
    let _serial = serial();
    let Some((gpu, comm)) = world_of_one("split_makes_a_working_sub_communicator") else {
        return;
    };
    let sub = comm.split(3, 0).unwrap();
    assert_eq!((sub.rank(), sub.size()), (0, 1));
    let send = gpu.upload(&[9u64, 8, 7]).unwrap();
    let (got, counts) = sub.all_to_all_v(&gpu, &send, &[3]).unwrap();
    assert_eq!(counts, vec![3]);
    assert_eq!(gpu.download(&got).unwrap(), vec![9, 8, 7]);
    assert!(matches!(
        comm.split(usize::MAX, 0),
        Err(Error::InvalidArgument(_))
    ));
    // The parent still works after the sub-communicator is dropped.
    drop(sub);
    assert_eq!(comm.all_gather(&[1]).unwrap(), vec![1]);
}

#[test]
fn init_all_with_one_gpu_is_a_world_of_one() {
    let _serial = serial();
    let Some(gpu) = cuda_or_skip("init_all_with_one_gpu_is_a_world_of_one") else {
        return;
    };
    let comms = NcclComm::init_all(std::slice::from_ref(&gpu), CommConfig::default()).unwrap();
    assert_eq!(comms.len(), 1);
    assert_eq!(comms[0].all_reduce(&[4], ReduceOp::Sum).unwrap(), vec![4]);
    assert!(matches!(
        NcclComm::init_all(&[], CommConfig::default()),
        Err(Error::InvalidArgument(_))
    ));
}

/// Rank 0 of a world of two whose rank 1 never joins: the join gives up at the time limit
/// (the communicator aborted), and the process goes on.
#[test]
fn a_rank_that_never_joins_is_a_timeout() {
    let _serial = serial();
    let Some(gpu) = cuda_or_skip("a_rank_that_never_joins_is_a_timeout") else {
        return;
    };
    let limit = Duration::from_secs(3);
    let id = UniqueId::new().unwrap();
    let started = Instant::now();
    let got = NcclComm::init_rank(&gpu, 2, 0, &id, CommConfig::default().timeout(limit));
    let took = started.elapsed();
    assert!(matches!(got, Err(Error::Timeout { .. })), "{got:?}");
    assert!(took >= limit && took < limit * 4, "{took:?}");
    assert!(matches!(
        NcclComm::init_rank(&gpu, 2, 2, &id, CommConfig::default()),
        Err(Error::InvalidArgument(_))
    ));
}

/// Every GPU of the host as one rank (`NcclComm::init_all`; skipped below two GPUs).
fn every_gpu(test: &str) -> Option<(Vec<CudaBackend>, Vec<NcclComm>)> {
    let backends = gpus_or_skip(test, 2)?;
    let comms = NcclComm::init_all(&backends, CommConfig::default()).unwrap();
    Some((backends, comms))
}

/// Runs `work` on every rank, each on a thread of its own (NCCL ranks must run at once).
fn on_every_rank<T: Send>(
    backends: &[CudaBackend],
    comms: Vec<NcclComm>,
    work: impl Fn(&NcclComm, &CudaBackend) -> joinkit_cuda::Result<T> + Sync,
) -> Vec<joinkit_cuda::Result<T>> {
    let work = &work;
    std::thread::scope(|s| {
        let handles: Vec<_> = comms
            .into_iter()
            .zip(backends)
            .map(|(comm, b)| {
                s.spawn(move || {
                    b.bind_to_thread()?;
                    work(&comm, b)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn every_gpu_exchanges_random_counts_and_splits() {
    let _serial = serial();
    let Some((backends, comms)) = every_gpu("every_gpu_exchanges_random_counts_and_splits") else {
        return;
    };
    let ranks = comms.len();
    // counts[from][to], some zero, some large; stamps say who sent what to whom.
    let counts: Vec<Vec<usize>> = (0..ranks)
        .map(|f| {
            (0..ranks)
                .map(|t| [0, 1, 4099, 1 << 20][(f * 3 + t) % 4])
                .collect()
        })
        .collect();
    let stamp = |f: usize, t: usize, i: usize| ((f as u64) << 48) | ((t as u64) << 32) | i as u64;
    let results = on_every_rank(&backends, comms, |comm, b| {
        let me = comm.rank();
        let send: Vec<u64> = (0..ranks)
            .flat_map(|t| (0..counts[me][t]).map(move |i| stamp(me, t, i)))
            .collect();
        let want: Vec<u64> = (0..ranks)
            .flat_map(|f| (0..counts[f][me]).map(move |i| stamp(f, me, i)))
            .collect();
        let mut poison = b.alloc::<u64>(want.len().max(1))?;
        b.fill(&mut poison, u64::MAX)?;
        drop(poison);
        let (got, from) = comm.all_to_all_v(b, &b.upload(&send)?, &counts[me])?;
        assert_eq!(from, (0..ranks).map(|f| counts[f][me]).collect::<Vec<_>>());
        assert_eq!(b.download(&got)?, want, "rank {me}");
        // Any order: the same rows, and a second column sent with the same counts (each
        // stamp's low word) still beside its row.
        let low: Vec<u32> = send.iter().map(|&v| v as u32).collect();
        let (got, from) = comm.all_to_all_v_any_order(b, &b.upload(&send)?, &counts[me])?;
        let (got_low, _) = comm.all_to_all_v_any_order(b, &b.upload(&low)?, &counts[me])?;
        assert_eq!(from, (0..ranks).map(|f| counts[f][me]).collect::<Vec<_>>());
        let (got, got_low) = (b.download(&got)?, b.download(&got_low)?);
        assert!(
            got.iter().zip(&got_low).all(|(&w, &l)| w as u32 == l),
            "rank {me}"
        );
        // The same rows as one table of three columns in one call: the single calls' order.
        let neg: Vec<i64> = send.iter().map(|&v| -(v as i64)).collect();
        let (send_cols, low_cols, neg_cols) = (b.upload(&send)?, b.upload(&low)?, b.upload(&neg)?);
        let refs = [
            ColumnRef::U64(&send_cols),
            ColumnRef::U32(&low_cols),
            ColumnRef::I64(&neg_cols),
        ];
        let (cols, from) = comm.all_to_all_v_columns(b, &refs, &counts[me])?;
        assert_eq!(from, (0..ranks).map(|f| counts[f][me]).collect::<Vec<_>>());
        match &cols[..] {
            [Column::U64(w), Column::U32(l), Column::I64(n)] => {
                assert_eq!(b.download(w)?, got, "rank {me}");
                assert_eq!(b.download(l)?, got_low, "rank {me}");
                let n = b.download(n)?;
                assert!(got.iter().zip(&n).all(|(&w, &n)| n == -(w as i64)));
            }
            other => panic!("rank {me}: {} columns of other types", other.len()),
        }
        let mut sorted = got;
        sorted.sort_unstable();
        let mut want_sorted = want;
        want_sorted.sort_unstable();
        assert_eq!(sorted, want_sorted, "rank {me}");
        let mine = vec![me as u32; me + 1];
        let (all, lens) = comm.all_gather_v(b, &b.upload(&mine)?)?;
        assert_eq!(lens, (1..=ranks).collect::<Vec<_>>());
        let flat: Vec<u32> = (0..ranks).flat_map(|r| vec![r as u32; r + 1]).collect();
        assert_eq!(b.download(&all)?, flat);
        let (all, lens) = comm.all_gather_v_any_order(b, &b.upload(&mine)?)?;
        assert_eq!(lens, (1..=ranks).collect::<Vec<_>>());
        let mut all = b.download(&all)?;
        all.sort_unstable();
        assert_eq!(all, flat);
        assert_eq!(
            comm.all_reduce(&[me as u64], ReduceOp::Sum)?,
            vec![(ranks * (ranks - 1) / 2) as u64]
        );
        // Halves by parity, ranked in reverse: the sub-communicator's order follows the key.
        let sub = comm.split(me % 2, ranks - me)?;
        let members: Vec<usize> = (0..ranks).filter(|r| r % 2 == me % 2).collect();
        assert_eq!(sub.size(), members.len());
        assert_eq!(
            sub.rank(),
            members.iter().rev().position(|&r| r == me).unwrap()
        );
        let order: Vec<u64> = members.iter().rev().map(|&r| r as u64).collect();
        assert_eq!(sub.all_gather(&[me as u64])?, order);
        Ok(())
    });
    for (r, res) in results.into_iter().enumerate() {
        res.unwrap_or_else(|e| panic!("rank {r}: {e}"));
    }
}

/// The last rank stops taking part: every other rank's collective ends with a time-out at the
/// limit, and the stopped rank's communicator is dropped without hanging.
#[test]
fn a_rank_that_stops_is_a_timeout_on_every_other_gpu() {
    let _serial = serial();
    let test = "a_rank_that_stops_is_a_timeout_on_every_other_gpu";
    let Some(backends) = gpus_or_skip(test, 2) else {
        return;
    };
    let gpus = backends.len();
    let limit = Duration::from_secs(3);
    let comms = NcclComm::init_all(&backends, CommConfig::default().timeout(limit)).unwrap();
    let started = Instant::now();
    let results = on_every_rank(&backends, comms, |comm, b| {
        comm.barrier()?;
        if comm.rank() == comm.size() - 1 {
            // Stopped, but alive: its buffers stay mapped while the peers' kernels wait on it.
            std::thread::sleep(limit * 2);
            return Ok(None);
        }
        let send = b.upload(&vec![1u64; comm.size() * 1000])?;
        let got = comm.all_to_all_v(b, &send, &vec![1000; comm.size()]);
        Ok(Some((got.map(drop), started.elapsed())))
    });
    for (r, res) in results.into_iter().enumerate() {
        match res.unwrap_or_else(|e| panic!("rank {r}: {e}")) {
            None => assert_eq!(r, gpus - 1),
            Some((got, took)) => {
                assert!(
                    matches!(got, Err(Error::Timeout { .. })),
                    "rank {r}: {got:?}"
                );
                assert!(took >= limit && took < limit * 4, "rank {r}: {took:?}");
            }
        }
    }
}
