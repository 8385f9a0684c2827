//! The in-process communicator against what each collective promises, on the CPU backend and
//! on one GPU shared by every rank where a GPU is present.

use std::time::Duration;

mod common;

use joinkit_comm::{CommConfig, Communicator, LocalWorld, ReduceOp};
use joinkit_cuda::{Backend, CpuBackend, Error};
use proptest::test_runner::{Config, TestRunner};

fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// All-to-all with `counts[from][to]` rows on in-process ranks of `open`'s backend
/// ([`common::check_exchange`]).
fn check_all_to_all<B: Backend>(counts: &[Vec<usize>], open: &(dyn Fn() -> B + Sync)) {
    let world = LocalWorld::new(counts.len(), CommConfig::default()).unwrap();
    let results = world.run(|comm| common::check_exchange(&comm, &open(), counts));
    for r in results {
        r.unwrap();
    }
}

#[test]
fn all_to_all_and_all_gather_move_every_row_on_the_cpu() {
    runner(64)
        .run(&common::counts(), |c| {
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
        .run(&common::counts(), |c| {
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
    common::rank_one_refused(&results);
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
    common::rank_one_refused(&results);
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
