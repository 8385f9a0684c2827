//! The in-process communicator against what each collective promises, on the CPU backend and
//! on one GPU shared by every rank where a GPU is present.

use std::time::Duration;

use joinkit_comm::{CommConfig, Communicator, LocalWorld, ReduceOp};
use joinkit_cuda::{Backend, Buffer, Column, ColumnRef, CpuBackend, Error};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// The value rank `from` sends as row `i` of its rows for rank `to`.
fn stamp(from: usize, to: usize, i: usize) -> u64 {
    ((from as u64) << 48) | ((to as u64) << 32) | i as u64
}

/// All-to-all with `counts[from][to]` rows, every rank's receive checked against the stamps,
/// with a poisoned buffer of the receive size allocated and dropped first (so a reused
/// allocation holds garbage).
fn check_all_to_all<B: Backend>(counts: &[Vec<usize>], open: &(dyn Fn() -> B + Sync)) {
    let ranks = counts.len();
    let world = LocalWorld::new(ranks, CommConfig::default()).unwrap();
    let results = world.run(|comm| {
        let b = open();
        let me = comm.rank();
        let expect_len: usize = counts.iter().map(|c| c[me]).sum();
        let mut poison = b.alloc::<u64>(expect_len)?;
        b.fill(&mut poison, u64::MAX)?;
        drop(poison);
        let send: Vec<u64> = (0..ranks)
            .flat_map(|to| (0..counts[me][to]).map(move |i| stamp(me, to, i)))
            .collect();
        let send = b.upload(&send)?;
        let (recv, got) = comm.all_to_all_v(&b, &send, &counts[me])?;
        let want: Vec<u64> = (0..ranks)
            .flat_map(|from| (0..counts[from][me]).map(move |i| stamp(from, me, i)))
            .collect();
        assert_eq!(got, (0..ranks).map(|f| counts[f][me]).collect::<Vec<_>>());
        assert_eq!(b.download(&recv)?, want, "rank {me}");
        // The same rows as a table of two columns (the second each stamp's low word).
        let low: Vec<u32> = b.download(&send)?.iter().map(|&v| v as u32).collect();
        let low = b.upload(&low)?;
        let refs = [ColumnRef::U64(&send), ColumnRef::U32(&low)];
        let (cols, got) = comm.all_to_all_v_columns(&b, &refs, &counts[me])?;
        assert_eq!(got, (0..ranks).map(|f| counts[f][me]).collect::<Vec<_>>());
        match &cols[..] {
            [Column::U64(w), Column::U32(l)] => {
                let (w, l) = (b.download(w)?, b.download(l)?);
                assert_eq!(w, want, "rank {me}");
                assert!(w.iter().zip(&l).all(|(&w, &l)| w as u32 == l), "rank {me}");
            }
            _ => panic!("rank {me}: {} columns of other types", cols.len()),
        }
        // A column shorter than the others: an error wherever one was passed (a peer's may
        // reach the others as theirs).
        let short = b.upload(&vec![0u32; send.len().saturating_sub(1)])?;
        let uneven = [ColumnRef::U64(&send), ColumnRef::U32(&short)];
        let r = comm.all_to_all_v_columns(&b, &uneven, &counts[me]);
        if !send.is_empty() {
            assert!(r.is_err(), "rank {me}");
        }
        // The same rows all-gathered: every rank's send buffer, in rank order.
        let (all, lens) = comm.all_gather_v(&b, &send)?;
        let want: Vec<u64> = (0..ranks)
            .flat_map(|from| {
                (0..ranks)
                    .flat_map(move |to| (0..counts[from][to]).map(move |i| stamp(from, to, i)))
            })
            .collect();
        assert_eq!(
            lens,
            counts
                .iter()
                .map(|c| c.iter().sum())
                .collect::<Vec<usize>>()
        );
        assert_eq!(b.download(&all)?, want, "rank {me}");
        Ok(())
    });
    for r in results {
        r.unwrap();
    }
}

fn counts() -> impl Strategy<Value = Vec<Vec<usize>>> {
    (1usize..8).prop_flat_map(|ranks| {
        proptest::collection::vec(
            proptest::collection::vec(
                prop_oneof![Just(0usize), 0usize..50, 1000usize..3000],
                ranks,
            ),
            ranks,
        )
    })
}

#[test]
fn all_to_all_and_all_gather_move_every_row_on_the_cpu() {
    runner(64)
        .run(&counts(), |c| {
            check_all_to_all(&c, &CpuBackend::new);
            Ok(())
        })
        .unwrap();
}

#[test]
fn all_to_all_and_all_gather_move_every_row_between_gpu_ranks() {
    let Some(_gpu) = joinkit_cuda::testing::gpu_or_skip(
        "all_to_all_and_all_gather_move_every_row_between_gpu_ranks",
    ) else {
        return;
    };
    #[cfg(feature = "cuda")]
    let open = || joinkit_cuda::CudaBackend::new(0).unwrap();
    #[cfg(not(feature = "cuda"))]
    let open = CpuBackend::new;
    runner(24)
        .run(&counts(), |c| {
            check_all_to_all(&c, &open);
            Ok(())
        })
        .unwrap();
}

#[test]
fn host_collectives_and_splits() {
    let world = LocalWorld::new(6, CommConfig::default()).unwrap();
    let results = world.run::<CpuBackend, _, _>(|comm| {
        let r = comm.rank() as u64;
        assert_eq!(
            comm.all_gather(&[r, 10 * r])?,
            (0..6).flat_map(|x| [x, 10 * x]).collect::<Vec<_>>()
        );
        assert_eq!(comm.all_reduce(&[r, r], ReduceOp::Sum)?, vec![15, 15]);
        assert_eq!(comm.all_reduce(&[r + 1], ReduceOp::Max)?, vec![6]);
        assert_eq!(comm.all_reduce(&[r + 1], ReduceOp::Min)?, vec![1]);
        comm.barrier()?;
        // Nodes of 3 (color = node) ranked by local index, and rails (color = local index)
        // ranked by node, keys given in reverse to check the ordering by key.
        let node = comm.split(comm.rank() / 3, comm.rank() % 3)?;
        let rail = comm.split(comm.rank() % 3, 10 - comm.rank() / 3)?;
        assert_eq!((node.size(), node.rank()), (3, comm.rank() % 3));
        assert_eq!((rail.size(), rail.rank()), (2, 1 - comm.rank() / 3));
        // The sub-communicators work, and do not mix with each other.
        let members = node.all_gather(&[r])?;
        let base = 3 * (r / 3);
        assert_eq!(members, vec![base, base + 1, base + 2]);
        let members = rail.all_gather(&[r])?;
        assert_eq!(members, vec![r % 3 + 3, r % 3]);
        Ok(())
    });
    for r in results {
        r.unwrap();
    }
}

/// Rank 1 of three refused its own bad input, and the other two learned of it.
fn rank_one_refused<T: std::fmt::Debug>(results: &[joinkit_cuda::Result<T>]) {
    assert!(
        matches!(results[1], Err(Error::InvalidArgument(_))),
        "{:?}",
        results[1]
    );
    for r in [&results[0], &results[2]] {
        assert!(matches!(r, Err(Error::PeerFailed { rank: 1, .. })), "{r:?}");
    }
}

#[test]
fn disagreements_and_bad_counts_are_errors_on_every_rank() {
    let world = LocalWorld::new(3, CommConfig::default()).unwrap();
    let results = world.run::<CpuBackend, _, _>(|comm| {
        let values = vec![1u64; comm.rank() + 1];
        comm.all_gather(&values).map(drop)
    });
    for r in results {
        assert!(matches!(r, Err(Error::RanksDisagree(_))), "{r:?}");
    }
    // Rank 1 asks to send more rows than it has.
    let results = world.run(|comm| {
        let cpu = CpuBackend::new();
        let send = cpu.upload(&[1u32, 2, 3])?;
        let counts = if comm.rank() == 1 {
            vec![2, 2, 2]
        } else {
            vec![1, 1, 1]
        };
        comm.all_to_all_v(&cpu, &send, &counts).map(drop)
    });
    rank_one_refused(&results);
    // Ranks that send buffers of different types.
    let results = world.run(|comm| {
        let cpu = CpuBackend::new();
        if comm.rank() == 0 {
            let send = cpu.upload(&[1u64; 3])?;
            comm.all_to_all_v(&cpu, &send, &[1, 1, 1]).map(drop)
        } else {
            let send = cpu.upload(&[1u32; 3])?;
            comm.all_to_all_v(&cpu, &send, &[1, 1, 1]).map(drop)
        }
    });
    for r in results {
        assert!(matches!(r, Err(Error::RanksDisagree(_))), "{r:?}");
    }
    // One rank's failure reaches the others through `agree`.
    let results = world.run::<CpuBackend, _, _>(|comm| {
        let local = if comm.rank() == 2 {
            Err(Error::EmptyInput("test"))
        } else {
            Ok(())
        };
        comm.agree("test phase", local)
    });
    assert_eq!(results[2], Err(Error::EmptyInput("test")));
    for r in &results[..2] {
        assert_eq!(
            *r,
            Err(Error::PeerFailed {
                rank: 2,
                op: "test phase"
            })
        );
    }
    // `agree_gather`: every rank's values when all computed them; rank 1's failure, or its
    // values of the wrong length, everywhere otherwise.
    for failing in [None, Some(Error::EmptyInput("test"))] {
        let results = world.run::<CpuBackend, _, _>(|comm| {
            let r = comm.rank() as u64;
            let local = match (&failing, comm.rank()) {
                (Some(e), 1) => Err(e.clone()),
                _ => Ok(vec![r, 10 * r]),
            };
            comm.agree_gather("gather phase", 2, local)
        });
        for (rank, got) in results.into_iter().enumerate() {
            match (&failing, rank) {
                (None, _) => assert_eq!(got, Ok(vec![vec![0, 0], vec![1, 10], vec![2, 20]])),
                (Some(e), 1) => assert_eq!(got, Err(e.clone())),
                (Some(_), _) => assert_eq!(
                    got,
                    Err(Error::PeerFailed {
                        rank: 1,
                        op: "gather phase"
                    })
                ),
            }
        }
    }
    let results = world.run::<CpuBackend, _, _>(|comm| {
        let local = vec![0; if comm.rank() == 1 { 3 } else { 2 }];
        comm.agree_gather("gather phase", 2, Ok(local))
    });
    rank_one_refused(&results);
    assert!(matches!(
        LocalWorld::new(0, CommConfig::default()),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn a_missing_rank_times_out_and_a_departed_one_fails() {
    let world =
        LocalWorld::new(2, CommConfig::default().timeout(Duration::from_millis(200))).unwrap();
    let hold = std::sync::Barrier::new(2);
    let results = world.run::<CpuBackend, _, _>(|comm| {
        if comm.rank() == 1 {
            // Keeps its communicator, never joins the collective, until rank 0 has given up.
            hold.wait();
            return Ok(());
        }
        let r = comm.barrier();
        hold.wait();
        r
    });
    assert!(
        matches!(results[0], Err(Error::Timeout { millis: 200, .. })),
        "{:?}",
        results[0]
    );

    let results = world.run::<CpuBackend, _, _>(|comm| {
        if comm.rank() == 1 {
            return Ok(());
        }
        comm.barrier()
    });
    assert!(
        matches!(results[0], Err(Error::PeerFailed { rank: 1, .. })),
        "{:?}",
        results[0]
    );
}

#[test]
#[should_panic(expected = "rank 1 panics")]
fn a_panicking_rank_is_raised_again_after_the_others_end() {
    let world = LocalWorld::new(2, CommConfig::default()).unwrap();
    let _ = world.run::<CpuBackend, (), _>(|comm| {
        if comm.rank() == 1 {
            panic!("rank 1 panics");
        }
        // Rank 0 sees rank 1 leave instead of waiting for it.
        assert!(matches!(
            comm.barrier(),
            Err(Error::PeerFailed { rank: 1, .. })
        ));
        Ok(())
    });
}
