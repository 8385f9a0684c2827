//! The copy-engine communicator against what each collective promises: ranks sharing one GPU
//! (random counts, and the whole every-GPU check), every GPU of the host a rank each, one
//! rank's bad input, a rank that stops.
#![cfg(feature = "cuda")]

mod common;

use std::time::Duration;

use joinkit_comm::peer::PeerComm;
use joinkit_comm::{CommConfig, Communicator};
use joinkit_cuda::testing::{cuda_or_skip, gpus_or_skip};
use joinkit_cuda::{Backend, CudaBackend, Error};
use proptest::test_runner::{Config, TestRunner};

/// `ranks` backends on the GPU of `gpu`, a stream each.
fn sharing(gpu: &CudaBackend, ranks: usize) -> Vec<CudaBackend> {
    (0..ranks)
        .map(|_| CudaBackend::new(gpu.info().ordinal).unwrap())
        .collect()
}

fn world(backends: &[CudaBackend], config: CommConfig) -> Vec<PeerComm> {
    PeerComm::init_all(backends, config).unwrap()
}

#[test]
fn ranks_sharing_one_gpu_move_every_row() {
    let Some(gpu) = cuda_or_skip("ranks_sharing_one_gpu_move_every_row") else {
        return;
    };
    let mut runner = TestRunner::new(Config {
        cases: 24,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&common::counts(), |counts| {
            let backends = sharing(&gpu, counts.len());
            let comms = world(&backends, CommConfig::default());
            let results = common::on_every_rank(&backends, comms, |comm, b| {
                common::check_exchange(comm, b, &counts)
            });
            for (r, res) in results.into_iter().enumerate() {
                res.unwrap_or_else(|e| panic!("rank {r}: {e}"));
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn four_ranks_on_one_gpu_exchange_gather_and_split() {
    let Some(gpu) = cuda_or_skip("four_ranks_on_one_gpu_exchange_gather_and_split") else {
        return;
    };
    let backends = sharing(&gpu, 4);
    common::exchange_on_every_gpu(&backends, world(&backends, CommConfig::default()));
}

#[test]
fn every_gpu_exchanges_gathers_and_splits() {
    let Some(backends) = gpus_or_skip("every_gpu_exchanges_gathers_and_splits", 2) else {
        return;
    };
    common::exchange_on_every_gpu(&backends, world(&backends, CommConfig::default()));
}

#[test]
fn bad_input_on_one_rank_fails_every_rank_and_the_world_goes_on() {
    let Some(gpu) = cuda_or_skip("bad_input_on_one_rank_fails_every_rank_and_the_world_goes_on")
    else {
        return;
    };
    let backends = sharing(&gpu, 3);
    let results = common::on_every_rank(
        &backends,
        world(&backends, CommConfig::default()),
        |comm, b| {
            let send = b.upload(&[1u32, 2, 3])?;
            // Rank 1 asks to send more rows than it has.
            let counts = if comm.rank() == 1 {
                vec![2, 2, 2]
            } else {
                vec![1, 1, 1]
            };
            let refused = comm.all_to_all_v(b, &send, &counts).map(drop);
            // Ranks that send buffers of different widths.
            let wide = b.upload(&[7u64; 3])?;
            let mixed = if comm.rank() == 0 {
                comm.all_to_all_v(b, &wide, &[1, 1, 1]).map(drop)
            } else {
                comm.all_to_all_v(b, &send, &[1, 1, 1]).map(drop)
            };
            // The world goes on: every rank gets one row from each.
            let (got, from) = comm.all_to_all_v(b, &send, &[1, 1, 1])?;
            assert_eq!(from, vec![1, 1, 1]);
            let want: Vec<u32> = vec![1 + comm.rank() as u32; 3];
            assert_eq!(b.download(&got)?, want, "rank {}", comm.rank());
            Ok((refused, mixed))
        },
    );
    let results: Vec<_> = results.into_iter().map(Result::unwrap).collect();
    let (refused, mixed): (Vec<_>, Vec<_>) = results.into_iter().unzip();
    common::rank_one_refused(&refused);
    for r in mixed {
        assert!(matches!(r, Err(Error::RanksDisagree(_))), "{r:?}");
    }
}

#[test]
fn a_rank_that_stops_is_a_timeout_on_the_others() {
    let test = "a_rank_that_stops_is_a_timeout_on_the_others";
    let Some(gpu) = cuda_or_skip(test) else {
        return;
    };
    let backends = if joinkit_cuda::device_count().unwrap_or(1) >= 2 {
        gpus_or_skip(test, 2).unwrap_or_default()
    } else {
        sharing(&gpu, 2)
    };
    let limit = Duration::from_secs(2);
    let comms = world(&backends, CommConfig::default().timeout(limit));
    common::last_rank_stops(&backends, comms, limit);
}
