//! The build-once table and the streamed join, on both backends: a left side probed chunk by
//! chunk (from a host table, or a source that writes its chunks) equals the join of the whole
//! left side and the naive reference as a multiset, for every kind, 4- and 8-byte keys,
//! duplicates, extreme keys, empty sides, chunks of one row to more than the side, 2–4
//! buffers in flight; bad options, sources and callbacks are typed errors.

mod common;

use common::{all_unique, expected_rows, keys, pairs_from, rows_of, runner, table};
use joinkit::reference::join_pairs;
use joinkit::{
    Algorithm, Column, ColumnType, CpuBackend, Error, HostColumnMut, HostTableSource, JoinBackend,
    JoinKind, JoinOptions, Lane, OutputChunk, ProbeSource, ProbeTable, StreamOptions, StreamedJoin,
    Table, join_streamed,
};
use joinkit_cuda::{Backend, Key};
use proptest::prelude::*;

/// The algorithms a probe table takes.
const HASHED: [Algorithm; 3] = [Algorithm::NphjOpen, Algorithm::NphjChained, Algorithm::Auto];

/// Rows of an output chunk as `rows_of` lays them out.
fn chunk_rows(c: &OutputChunk<'_>) -> Vec<Vec<u64>> {
    for col in c.left.iter().chain(&c.right) {
        assert_eq!(col.len(), c.rows, "column length vs rows");
    }
    (0..c.rows)
        .map(|i| {
            let mut row: Vec<u64> = c
                .left
                .iter()
                .chain(&c.right)
                .map(|col| col.bits(i).unwrap())
                .collect();
            row.push(c.right_valid.map_or(1, |v| u64::from(v[i])));
            row
        })
        .collect()
}

/// Fills the backend's cache of freed allocations with poisoned buffers of the sizes a
/// streamed join asks for, so that a value it fails to write shows.
fn poison<B: Backend>(b: &B, rows: usize) {
    let bufs: Vec<B::Buf<u64>> = (0..16)
        .map(|_| {
            let mut x = b.alloc::<u64>(rows).unwrap();
            b.fill(&mut x, joinkit_cuda::testing::POISON_U64).unwrap();
            x
        })
        .collect();
    let small: Vec<B::Buf<u32>> = (0..16)
        .map(|_| {
            let mut x = b.alloc::<u32>(rows).unwrap();
            b.fill(&mut x, u32::MAX - 1).unwrap();
            x
        })
        .collect();
    b.synchronize().unwrap();
    drop((bufs, small));
}

/// The streamed join of [`table`]s (salts 10 and 20) with the left side in host memory.
fn streamed_rows<B: StreamedJoin, K: Key>(
    b: &B,
    l: &[K],
    r: &[K],
    opts: &StreamOptions,
) -> Result<(Vec<Vec<u64>>, joinkit::StreamStats), Error> {
    poison(b, opts.chunk_rows);
    let right = table(b, r, 20);
    let left = table(&CpuBackend::new(), l, 10);
    let mut source = HostTableSource::new(&left)?;
    let mut all = Vec::new();
    let mut chunks = 0u64;
    let st = join_streamed(b, &right, &mut source, opts, &mut |c| {
        assert!(c.rows > 0, "an empty chunk was handed on");
        assert_eq!(
            c.right_valid.is_some(),
            opts.join.kind == JoinKind::LeftOuter
        );
        all.extend(chunk_rows(&c));
        chunks += 1;
        Ok(())
    })?;
    assert_eq!(st.left_rows, l.len() as u64);
    assert_eq!(st.output_rows, all.len() as u64);
    assert_eq!(st.chunks, l.len().div_ceil(opts.chunk_rows) as u64);
    assert!(chunks <= st.chunks);
    all.sort_unstable();
    Ok((all, st))
}

fn streamed_equals_the_join<B: StreamedJoin, K: Key>(
    b: &B,
    (l, r): (&[K], &[K]),
    (chunk, buffers): (usize, usize),
    what: &str,
) -> Result<(), TestCaseError> {
    let unique = all_unique(r);
    for kind in JoinKind::ALL {
        let want = expected_rows(l, r, kind);
        for algorithm in HASHED {
            for right_unique in [false, true].into_iter().filter(|&u| !u || unique) {
                let join = JoinOptions::new(kind)
                    .algorithm(algorithm)
                    .right_unique(right_unique);
                let opts = StreamOptions::new(join)
                    .chunk_rows(chunk)
                    .buffers(buffers)
                    .timeline(true);
                let why =
                    format!("{what} {algorithm} {kind:?} unique {right_unique} chunk {chunk}");
                let (got, st) = streamed_rows(b, l, r, &opts).unwrap();
                prop_assert_eq!(&got, &want, "{}", why);
                // Every chunk was probed, and no span ends before it starts.
                let probes = st.timeline.iter().filter(|s| s.lane == Lane::Probe).count();
                prop_assert_eq!(probes as u64, st.chunks, "{}", why);
                prop_assert!(
                    st.timeline.iter().all(|s| s.end_ms >= s.start_ms),
                    "{}",
                    why
                );
            }
        }
    }
    Ok(())
}

/// Chunks of one row, a few, about a third of the side, more than all of it (at least 1/40
/// of the side, so that debug runs stay fast).
fn chunk_of(len: usize, (mode, x): (u8, usize)) -> usize {
    let rows = match mode {
        0 => 1,
        1 => x,
        2 => len.div_ceil(3),
        _ => len + x,
    };
    rows.max(len.div_ceil(40)).max(1)
}

fn check_streamed<K: Key + Arbitrary>(test: &str) {
    let gpu = joinkit_cuda::testing::gpu_or_skip(test);
    runner(16)
        .run(
            &(keys::<K>(), keys::<K>(), (0u8..4, 1usize..50), 2usize..5),
            |(l, r, shape, buffers)| {
                let chunk = chunk_of(l.len(), shape);
                streamed_equals_the_join(&CpuBackend::new(), (&l, &r), (chunk, buffers), "cpu")?;
                if let Some(g) = &gpu {
                    streamed_equals_the_join(g, (&l, &r), (chunk, buffers), "cuda")?;
                }
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn streamed_join_equals_the_join_u32() {
    check_streamed::<u32>("streamed_join_equals_the_join_u32");
}

#[test]
fn streamed_join_equals_the_join_u64() {
    check_streamed::<u64>("streamed_join_equals_the_join_u64");
}

/// A probe table probed chunk by chunk: row ids (left ids offset by the chunk's start) and
/// columns equal the whole join's.
fn probe_table_chunks<B: JoinBackend, K: Key>(
    b: &B,
    (l, r): (&[K], &[K]),
    chunk: usize,
    what: &str,
) -> Result<(), TestCaseError> {
    let right = table(b, r, 20);
    for kind in JoinKind::ALL {
        for algorithm in HASHED {
            let opts = JoinOptions::new(kind).algorithm(algorithm);
            let why = format!("{what} {algorithm} {kind:?} chunk {chunk}");
            let t = ProbeTable::build(b, &right, &opts).unwrap();
            prop_assert_eq!(t.build_stats().right_rows, r.len(), "{}", why);
            let (mut pairs, mut rows) = (Vec::new(), Vec::new());
            for (i, part) in l.chunks(chunk).enumerate() {
                let start = (i * chunk) as u32;
                let (ids, st) = t.probe_rows(&b.upload(part).unwrap()).unwrap();
                let got = pairs_from(b, &ids);
                prop_assert_eq!(st.output_rows, got.len() as u64, "{}", why);
                pairs.extend(got.into_iter().map(|(li, ri)| (li + start, ri)));
                let (out, _) = t.probe_columns(&table(b, part, 10)).unwrap();
                rows.extend(rows_of(b, &out));
            }
            pairs.sort_unstable();
            rows.sort_unstable();
            prop_assert_eq!(pairs, join_pairs(l, r, kind), "{}", why);
            prop_assert_eq!(rows, expected_rows(l, r, kind), "{}", why);
        }
    }
    Ok(())
}

#[test]
fn probe_table_chunks_equal_the_join() {
    let gpu = joinkit_cuda::testing::gpu_or_skip("probe_table_chunks_equal_the_join");
    runner(16)
        .run(
            &(keys::<u64>(), keys::<u64>(), (0u8..4, 1usize..50)),
            |(l, r, shape)| {
                let chunk = chunk_of(l.len(), shape);
                probe_table_chunks(&CpuBackend::new(), (&l, &r), chunk, "cpu")?;
                if let Some(g) = &gpu {
                    probe_table_chunks(g, (&l, &r), chunk, "cuda")?;
                }
                Ok(())
            },
        )
        .unwrap();
}

/// A source that writes `rows` rows of key `i % keys` and payload `i` in chunks it chooses
/// (`short` rows fewer than the room every other chunk), or fails at chunk `fail_at`, or
/// writes more rows than its room.
struct Generated {
    next: u64,
    rows: u64,
    keys: u64,
    short: usize,
    chunk: u64,
    fail_at: Option<u64>,
    overfill: bool,
}

impl Generated {
    fn new(rows: u64, keys: u64) -> Self {
        Self {
            next: 0,
            rows,
            keys,
            short: 0,
            chunk: 0,
            fail_at: None,
            overfill: false,
        }
    }
}

impl ProbeSource<u64> for Generated {
    fn payload_types(&self) -> Vec<ColumnType> {
        vec![ColumnType::U64]
    }

    fn fill(
        &mut self,
        keys: &mut [u64],
        payloads: &mut [HostColumnMut<'_>],
    ) -> joinkit::Result<usize> {
        if self.fail_at == Some(self.chunk) {
            return Err(Error::InvalidArgument("the source's own error".into()));
        }
        let short = if self.chunk % 2 == 1 { self.short } else { 0 };
        self.chunk += 1;
        let room = keys.len().saturating_sub(short).max(1);
        let n = room.min((self.rows - self.next) as usize);
        let HostColumnMut::U64(p) = &mut payloads[0] else {
            return Err(Error::Corrupt("payload type".into()));
        };
        for i in 0..n {
            let row = self.next + i as u64;
            keys[i] = row % self.keys;
            p[i] = row;
        }
        self.next += n as u64;
        Ok(if self.overfill && n > 0 {
            keys.len() + 1
        } else {
            n
        })
    }
}

/// A generated left side of `rows` rows over `keys` keys against a right side of those keys
/// once each (payload 3 × key): every row matches, output rows = left rows.
fn generated_join<B: StreamedJoin>(b: &B, src: &mut Generated, chunk: usize) -> Result<u64, Error> {
    let keys: Vec<u64> = (0..src.keys).collect();
    let pay: Vec<u64> = keys.iter().map(|k| 3 * k).collect();
    let right = Table::new(b.upload(&keys)?, vec![Column::U64(b.upload(&pay)?)])?;
    let opts =
        StreamOptions::new(JoinOptions::new(JoinKind::Inner).right_unique(true)).chunk_rows(chunk);
    let mut seen = 0u64;
    let key_count = src.keys;
    join_streamed(b, &right, src, &opts, &mut |c| {
        let (l, r) = (c.left[0], c.right[0]);
        for i in 0..c.rows {
            let row = l.bits(i).unwrap();
            assert_eq!(r.bits(i).unwrap(), 3 * (row % key_count), "row {row}");
        }
        seen += c.rows as u64;
        Ok(())
    })?;
    Ok(seen)
}

fn generated_and_refused<B: StreamedJoin>(b: &B) {
    // Short chunks every other chunk, many chunks in flight: every row arrives once.
    let mut src = Generated::new(10_000, 1000);
    src.short = 100;
    assert_eq!(generated_join(b, &mut src, 1024), Ok(10_000));
    let mut empty = Generated::new(0, 5);
    assert_eq!(generated_join(b, &mut empty, 7), Ok(0));
    // The source's error stops the join and comes back as it was.
    let mut failing = Generated::new(10_000, 1000);
    failing.fail_at = Some(3);
    assert_eq!(
        generated_join(b, &mut failing, 1000),
        Err(Error::InvalidArgument("the source's own error".into()))
    );
    let mut overfilling = Generated::new(10_000, 1000);
    overfilling.overfill = true;
    assert!(matches!(
        generated_join(b, &mut overfilling, 1000),
        Err(Error::InvalidArgument(m)) if m.contains("wrote")
    ));
    // The callback's error too.
    let keys: Vec<u64> = (0..1000).collect();
    let right = Table::new(b.upload(&keys).unwrap(), vec![]).unwrap();
    let opts = StreamOptions::new(JoinOptions::new(JoinKind::LeftSemi)).chunk_rows(100);
    let mut calls = 0;
    let r = join_streamed(
        b,
        &right,
        &mut Generated::new(5000, 1000),
        &opts,
        &mut |_| {
            calls += 1;
            if calls == 2 {
                Err(Error::InvalidArgument("the sink's own error".into()))
            } else {
                Ok(())
            }
        },
    );
    assert_eq!(
        r.err(),
        Some(Error::InvalidArgument("the sink's own error".into()))
    );
    // Widened ids are not the streamed join's (its chunks' room is the input's types).
    let unpacking = StreamOptions::new(JoinOptions::new(JoinKind::Inner).unpack_ids(Some(20)));
    let r = join_streamed(
        b,
        &right,
        &mut Generated::new(10, 5),
        &unpacking,
        &mut |_| Ok(()),
    );
    assert!(matches!(r, Err(Error::InvalidArgument(m)) if m.contains("unpack_ids")));
    // Options a streamed join cannot run.
    for bad in [
        opts.chunk_rows(0),
        opts.buffers(1),
        StreamOptions::new(JoinOptions::new(JoinKind::Inner).algorithm(Algorithm::SmjOm)),
        StreamOptions::new(JoinOptions::new(JoinKind::Inner).algorithm(Algorithm::PhjOm)),
    ] {
        let r = join_streamed(b, &right, &mut Generated::new(10, 5), &bad, &mut |_| Ok(()));
        assert!(
            matches!(r, Err(Error::InvalidArgument(_))),
            "{bad:?}: {r:?}"
        );
    }
}

#[test]
fn generated_sources_short_chunks_and_refusals() {
    on_cpu_and_gpu!(
        "generated_sources_short_chunks_and_refusals",
        generated_and_refused
    );
}

/// A left side in pinned memory streamed by ranges, some repeated: the output is the join of
/// the rows the ranges name, in order.
#[cfg(feature = "cuda")]
#[test]
fn pinned_left_sides_stream_by_ranges() {
    use joinkit::{PinnedTable, join_streamed_pinned};
    let Some(g) = common::gpu("pinned_left_sides_stream_by_ranges") else {
        return;
    };
    runner(12)
        .run(
            &(keys::<u64>(), keys::<u64>(), 1usize..40, 2usize..5),
            |(l, r, chunk, buffers)| {
                let right = table(&g, &r, 20);
                let left = PinnedTable::pin(&g, &table(&CpuBackend::new(), &l, 10)).unwrap();
                // The whole side in chunks, then its first half again.
                let ranges: Vec<std::ops::Range<usize>> = (0..l.len())
                    .step_by(chunk)
                    .map(|s| s..(s + chunk).min(l.len()))
                    .chain(
                        (0..l.len() / 2)
                            .step_by(chunk)
                            .map(|s| s..(s + chunk).min(l.len() / 2)),
                    )
                    .collect();
                let streamed: Vec<u64> =
                    ranges.iter().flat_map(|r| l[r.clone()].to_vec()).collect();
                for kind in JoinKind::ALL {
                    let opts = StreamOptions::new(JoinOptions::new(kind))
                        .chunk_rows(chunk)
                        .buffers(buffers);
                    poison(&g, chunk);
                    let mut got = Vec::new();
                    let st = join_streamed_pinned(
                        &g,
                        &right,
                        &left,
                        &mut ranges.clone().into_iter(),
                        &opts,
                        &mut |c| {
                            got.extend(chunk_rows(&c));
                            Ok(())
                        },
                    )
                    .unwrap();
                    got.sort_unstable();
                    prop_assert_eq!(
                        &got,
                        &expected_rows(&streamed, &r, kind),
                        "{:?} chunk {}",
                        kind,
                        chunk
                    );
                    prop_assert_eq!(st.left_rows, streamed.len() as u64);
                    prop_assert_eq!(st.bytes_in, streamed.len() as u64 * 20);
                }
                Ok(())
            },
        )
        .unwrap();
    // Ranges past the end, reversed or longer than a chunk are refused.
    let right = table(&g, &[1u64, 2, 3], 20);
    let left = PinnedTable::pin(&g, &table(&CpuBackend::new(), &[1u64, 2, 3, 4], 10)).unwrap();
    let opts = StreamOptions::new(JoinOptions::new(JoinKind::Inner)).chunk_rows(2);
    for (bad, what) in [
        (3..5, "past"),
        (std::ops::Range { start: 3, end: 1 }, "reversed"),
        (0..3, "long"),
    ] {
        let r = join_streamed_pinned(
            &g,
            &right,
            &left,
            &mut [bad].into_iter(),
            &opts,
            &mut |_| Ok(()),
        );
        assert!(
            matches!(
                r,
                Err(Error::IndexOutOfRange { .. } | Error::InvalidArgument(_))
            ),
            "{what}: {r:?}"
        );
    }
}
