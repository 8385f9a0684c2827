//! Checks every communicator must pass, shared by the test files of each (each file uses
//! some of them).
#![allow(dead_code)]

use joinkit_comm::Communicator;
use joinkit_cuda::{Backend, Buffer, Column, ColumnRef, Error, Result};
use proptest::prelude::*;

/// The value rank `from` sends as row `i` of its rows for rank `to`.
pub(crate) fn stamp(from: usize, to: usize, i: usize) -> u64 {
    ((from as u64) << 48) | ((to as u64) << 32) | i as u64
}

/// All-to-all with `counts[from][to]` rows (this is rank `comm.rank()`), the receive checked
/// against the stamps, with a poisoned buffer of the receive size allocated and dropped first
/// (so a reused allocation holds garbage); the same rows as a table of two columns, a column
/// shorter than the others (an error), and all-gathered.
pub(crate) fn check_exchange<C: Communicator>(
    comm: &C,
    b: &C::Backend,
    counts: &[Vec<usize>],
) -> Result<()> {
    let ranks = counts.len();
    let me = comm.rank();
    let expect_len: usize = counts.iter().map(|c| c[me]).sum();
    let mut poison = b.alloc::<u64>(expect_len)?;
    b.fill(&mut poison, u64::MAX)?;
    drop(poison);
    let send: Vec<u64> = (0..ranks)
        .flat_map(|to| (0..counts[me][to]).map(move |i| stamp(me, to, i)))
        .collect();
    let send = b.upload(&send)?;
    let (recv, got) = comm.all_to_all_v(b, &send, &counts[me])?;
    let want: Vec<u64> = (0..ranks)
        .flat_map(|from| (0..counts[from][me]).map(move |i| stamp(from, me, i)))
        .collect();
    assert_eq!(got, (0..ranks).map(|f| counts[f][me]).collect::<Vec<_>>());
    assert_eq!(b.download(&recv)?, want, "rank {me}");
    // The same rows as a table of two columns (the second each stamp's low word).
    let low: Vec<u32> = b.download(&send)?.iter().map(|&v| v as u32).collect();
    let low = b.upload(&low)?;
    let refs = [ColumnRef::U64(&send), ColumnRef::U32(&low)];
    let (cols, got) = comm.all_to_all_v_columns(b, &refs, &counts[me])?;
    assert_eq!(got, (0..ranks).map(|f| counts[f][me]).collect::<Vec<_>>());
    match &cols[..] {
        [Column::U64(w), Column::U32(l)] => {
            let (w, l) = (b.download(w)?, b.download(l)?);
            assert_eq!(w, want, "rank {me}");
            assert!(w.iter().zip(&l).all(|(&w, &l)| w as u32 == l), "rank {me}");
        }
        _ => panic!("rank {me}: {} columns of other types", cols.len()),
    }
    // Two tables in one call: those columns, and beside them a table of other counts (each
    // rank sends `counts[to][me]` words to `to`: the transposed counts), each as if alone.
    let words_to = |from: usize, to: usize| counts[to][from];
    let word = |from: usize, to: usize, i: usize| ((from << 24) | (to << 16) | i) as u32;
    let words: Vec<u32> = (0..ranks)
        .flat_map(|to| (0..words_to(me, to)).map(move |i| word(me, to, i)))
        .collect();
    let words = b.upload(&words)?;
    let word_counts: Vec<usize> = (0..ranks).map(|to| words_to(me, to)).collect();
    let second = [ColumnRef::U32(&words)];
    let moved = comm.all_to_all_v_tables(b, &[(&refs, &counts[me]), (&second, &word_counts)])?;
    match &moved[..] {
        [(first, got), (second, got_words)] => {
            assert_eq!(got, &(0..ranks).map(|f| counts[f][me]).collect::<Vec<_>>());
            match &first[..] {
                [Column::U64(w), Column::U32(_)] => assert_eq!(b.download(w)?, want),
                _ => panic!("rank {me}: the first table came back as other columns"),
            }
            let from: Vec<usize> = (0..ranks).map(|f| words_to(f, me)).collect();
            assert_eq!(got_words, &from, "rank {me}");
            let want_words: Vec<u32> = (0..ranks)
                .flat_map(|f| (0..words_to(f, me)).map(move |i| word(f, me, i)))
                .collect();
            match &second[..] {
                [Column::U32(w)] => assert_eq!(b.download(w)?, want_words, "rank {me}"),
                _ => panic!("rank {me}: the second table came back as other columns"),
            }
        }
        _ => panic!("rank {me}: {} tables came back", moved.len()),
    }
    // A column shorter than the others: an error wherever one was passed (a peer's may
    // reach the others as theirs).
    let short = b.upload(&vec![0u32; send.len().saturating_sub(1)])?;
    let uneven = [ColumnRef::U64(&send), ColumnRef::U32(&short)];
    let r = comm.all_to_all_v_columns(b, &uneven, &counts[me]);
    if !send.is_empty() {
        assert!(r.is_err(), "rank {me}");
    }
    // No table: nothing moves, and every rank still meets the others.
    assert!(comm.all_to_all_v_tables(b, &[])?.is_empty(), "rank {me}");
    // The same as the second of two tables: the whole call fails.
    let r = comm.all_to_all_v_tables(b, &[(&second, &word_counts), (&uneven, &counts[me])]);
    if !send.is_empty() {
        assert!(r.is_err(), "rank {me}");
    }
    // The same rows all-gathered: every rank's send buffer, in rank order.
    let (all, lens) = comm.all_gather_v(b, &send)?;
    let want: Vec<u64> = (0..ranks)
        .flat_map(|from| {
            (0..ranks).flat_map(move |to| (0..counts[from][to]).map(move |i| stamp(from, to, i)))
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
}

/// Rows `[from][to]` for 1 to 7 ranks: none, a few, or thousands.
pub(crate) fn counts() -> impl Strategy<Value = Vec<Vec<usize>>> {
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

/// Rank 1 of three refused its own bad input, and the other two learned of it.
pub(crate) fn rank_one_refused<T: std::fmt::Debug>(results: &[joinkit_cuda::Result<T>]) {
    assert!(
        matches!(results[1], Err(Error::InvalidArgument(_))),
        "{:?}",
        results[1]
    );
    for r in [&results[0], &results[2]] {
        assert!(matches!(r, Err(Error::PeerFailed { rank: 1, .. })), "{r:?}");
    }
}

/// Helpers for ranks that each drive a GPU.
#[cfg(feature = "cuda")]
mod gpu {
    use super::stamp;
    use joinkit_comm::{Communicator, ReduceOp};
    use joinkit_cuda::{Backend, Column, ColumnRef, CudaBackend, Result};

    /// Runs `work` on every rank, each on a thread of its own (the ranks' collectives must run at
    /// once).
    pub(crate) fn on_every_rank<C: Communicator, T: Send>(
        backends: &[CudaBackend],
        comms: Vec<C>,
        work: impl Fn(&C, &CudaBackend) -> Result<T> + Sync,
    ) -> Vec<Result<T>> {
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

    /// One rank a GPU (`comms[r]` on `backends[r]`): all-to-all of uneven counts (some zero, one
    /// of 2^20 rows), in any order (a second column still beside its row), as one table of three
    /// columns, all-gathers, an all-reduce and a split by parity ranked in reverse.
    pub(crate) fn exchange_on_every_gpu<C: Communicator<Backend = CudaBackend>>(
        backends: &[CudaBackend],
        comms: Vec<C>,
    ) {
        let ranks = comms.len();
        // counts[from][to], some zero, some large; stamps say who sent what to whom.
        let counts: Vec<Vec<usize>> = (0..ranks)
            .map(|f| {
                (0..ranks)
                    .map(|t| [0, 1, 4099, 1 << 20][(f * 3 + t) % 4])
                    .collect()
            })
            .collect();
        let results = on_every_rank(backends, comms, |comm, b| {
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
            let (send_cols, low_cols, neg_cols) =
                (b.upload(&send)?, b.upload(&low)?, b.upload(&neg)?);
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

    /// The last rank stops taking part (alive, its buffers kept): every other rank's
    /// all-to-all ends with a time-out at `limit` (the communicators' limit), its next
    /// collective is refused at once, and the stopped rank's communicator is dropped without
    /// hanging.
    pub(crate) fn last_rank_stops<C: Communicator<Backend = CudaBackend>>(
        backends: &[CudaBackend],
        comms: Vec<C>,
        limit: std::time::Duration,
    ) {
        let started = std::time::Instant::now();
        let results = on_every_rank(backends, comms, |comm, b| {
            comm.barrier()?;
            if comm.rank() == comm.size() - 1 {
                std::thread::sleep(limit * 2);
                return Ok(None);
            }
            let send = b.upload(&vec![1u64; comm.size() * 1000])?;
            let got = comm.all_to_all_v(b, &send, &vec![1000; comm.size()]);
            let took = started.elapsed();
            // The ranks are out of step now: the communicator refuses what comes next.
            let next = comm.barrier();
            Ok(Some((got.map(drop), took, next)))
        });
        let ranks = results.len();
        for (r, res) in results.into_iter().enumerate() {
            match res.unwrap_or_else(|e| panic!("rank {r}: {e}")) {
                None => assert_eq!(r, ranks - 1),
                Some((got, took, next)) => {
                    assert!(
                        matches!(got, Err(joinkit_cuda::Error::Timeout { .. })),
                        "rank {r}: {got:?}"
                    );
                    assert!(took >= limit && took < limit * 4, "rank {r}: {took:?}");
                    assert!(
                        matches!(next, Err(joinkit_cuda::Error::Communication { .. })),
                        "rank {r}: {next:?}"
                    );
                }
            }
        }
    }
}
#[cfg(feature = "cuda")]
#[allow(unused_imports)]
pub(crate) use gpu::{exchange_on_every_gpu, last_rank_stops, on_every_rank};
