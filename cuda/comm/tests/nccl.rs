//! The NCCL communicator: on one GPU a world of one rank (a real `ncclCommInitRank`, grouped
//! send and receive to itself) against what each collective promises, and a world whose other
//! rank never comes (a time-out, not a hang); on a host with several GPUs one rank per GPU
//! (all-to-all of uneven counts, all-gather, splits, a rank that stops); where NCCL is missing,
//! the one error that says what to install.
#![cfg(feature = "cuda")]

mod common;

use std::time::{Duration, Instant};

use joinkit_comm::nccl::{NcclComm, UniqueId, version};
use joinkit_comm::{CommConfig, Communicator, ReduceOp};
use joinkit_cuda::testing::{cuda_or_skip, gpu_required, gpus_or_skip};
use joinkit_cuda::{Backend, CudaBackend, Error};
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
    // Host values: inline (short, up to the first round's slot) and in a second round (long),
    // and none.
    assert_eq!(
        comm.all_gather(&[3, u64::MAX, 0]).unwrap(),
        vec![3, u64::MAX, 0]
    );
    for n in [39, 40, 1000] {
        let long: Vec<u64> = (0..n).map(|i| i * 7919).collect();
        assert_eq!(comm.all_gather(&long).unwrap(), long, "{n} values");
    }
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

#[test]
fn every_gpu_exchanges_random_counts_and_splits() {
    let _serial = serial();
    let Some((backends, comms)) = every_gpu("every_gpu_exchanges_random_counts_and_splits") else {
        return;
    };
    common::exchange_on_every_gpu(&backends, comms);
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
    let limit = Duration::from_secs(3);
    let comms = NcclComm::init_all(&backends, CommConfig::default().timeout(limit)).unwrap();
    common::last_rank_stops(&backends, comms, limit);
}
