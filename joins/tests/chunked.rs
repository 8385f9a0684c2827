//! Output budgets and the chunked joins, on both backends: every chunk fits the budget and is
//! not empty, the chunks together equal the unchunked join (and the naive reference) as a
//! multiset, as row ids and as materialized payloads, for every kind, 4- and 8-byte keys,
//! empty sides, duplicates on both sides, no matches, all rows on one key, and budgets from one
//! row to more than the whole output; `join_rows` and `join_columns` refuse an output over the
//! budget and give the same output within it.

mod common;

#[cfg(feature = "cuda")]
use common::gpu;
use common::{all_unique, expected_rows, keys, pairs_from, rows_of, runner, table};
use joinkit::reference::join_pairs;
use joinkit::{
    Algorithm, Column, CpuBackend, Error, JoinBackend, JoinKind, JoinOptions, NULL_ROW, Table,
    join_columns, join_columns_chunked, join_rows, join_rows_chunked,
};
use joinkit_cuda::{Buffer, Key};
use proptest::prelude::*;

/// The algorithms a chunked join takes.
const CHUNKED: [Algorithm; 3] = [Algorithm::NphjOpen, Algorithm::NphjChained, Algorithm::Auto];

/// Bytes of a row-id output row.
fn id_row_bytes(kind: JoinKind) -> u64 {
    if kind.has_right_rows() { 8 } else { 4 }
}

/// Bytes of a materialized output row of [`table`]s (12 payload bytes a side; a validity word
/// for left outer joins).
fn column_row_bytes(kind: JoinKind) -> u64 {
    12 + match kind {
        JoinKind::Inner => 12,
        JoinKind::LeftOuter => 16,
        JoinKind::LeftSemi | JoinKind::LeftAnti => 0,
    }
}

/// Bytes of a materialized output row of [`narrow_table`]s (8 payload bytes a side; a validity
/// word for left outer joins).
fn narrow_row_bytes(kind: JoinKind) -> u64 {
    8 + match kind {
        JoinKind::Inner => 8,
        JoinKind::LeftOuter => 12,
        JoinKind::LeftSemi | JoinKind::LeftAnti => 0,
    }
}

/// Keys and one 8-byte payload (PHJ-OM's inner join writes it in its match).
fn narrow_table<B: JoinBackend>(b: &B, keys: &[u32], salt: u64) -> Table<B, u32> {
    let p: Vec<u64> = (0..keys.len() as u64)
        .map(|i| joinkit_cuda::hash::hash64(i, salt))
        .collect();
    Table::new(
        b.upload(keys).unwrap(),
        vec![Column::U64(b.upload(&p).unwrap())],
    )
    .unwrap()
}

/// The bytes a materialized output's buffers take.
fn output_bytes<B: JoinBackend>(out: &joinkit::Materialized<B>) -> u64 {
    let cols: u64 = out
        .left
        .iter()
        .chain(&out.right)
        .map(|c| (c.len() * c.width()) as u64)
        .sum();
    cols + out.right_valid.as_ref().map_or(0, |v| 4 * v.len() as u64)
}

/// What the chunks of an output must look like: `matched` rows with a right row (inner and
/// outer) in chunks of `chunk_rows`, then `left_only` rows.
struct Expect {
    chunk_rows: u64,
    matched: u64,
    left_only: u64,
    algorithm: Algorithm,
}

impl Expect {
    fn new(pairs: &[(u32, u32)], opts: &JoinOptions, row_bytes: u64) -> Self {
        let matched = pairs.iter().filter(|p| p.1 != NULL_ROW).count() as u64;
        Self {
            chunk_rows: opts.memory_budget.unwrap() / row_bytes,
            matched,
            left_only: pairs.len() as u64 - matched,
            algorithm: match opts.algorithm {
                Algorithm::Auto => Algorithm::NphjOpen,
                a => a,
            },
        }
    }

    fn chunks(&self) -> u64 {
        self.matched.div_ceil(self.chunk_rows) + self.left_only.div_ceil(self.chunk_rows)
    }

    /// Checks a chunk of `n` rows, `matched` or not, after `seen` matched rows (updated).
    fn chunk(&self, n: u64, matched: bool, seen: &mut u64, what: &str) {
        assert!(n > 0, "{what}: an empty chunk");
        assert!(
            n <= self.chunk_rows,
            "{what}: {n} rows, over {}",
            self.chunk_rows
        );
        assert!(
            matched || *seen == self.matched,
            "{what}: unmatched rows before the last matched chunk"
        );
        *seen += if matched { n } else { 0 };
    }

    /// Checks the end of a chunked join; returns its rows sorted.
    fn end<T: Ord>(&self, st: &joinkit::JoinStats, chunks: u64, mut all: Vec<T>) -> Vec<T> {
        assert_eq!(chunks, self.chunks(), "chunks");
        assert_eq!(st.output_rows, self.matched + self.left_only);
        assert_eq!(all.len() as u64, st.output_rows);
        assert_eq!(st.algorithm, self.algorithm);
        assert!(st.phases.iter().any(|p| p.0 == "transform"));
        assert!(st.phases.iter().any(|p| p.0 == "match"));
        all.sort_unstable();
        all
    }
}

/// The chunked row-id join, every chunk checked; its pairs, sorted.
fn chunked_pairs<B: JoinBackend, K: Key>(
    b: &B,
    l: &[K],
    r: &[K],
    opts: &JoinOptions,
    want: &Expect,
) -> Vec<(u32, u32)> {
    let (dl, dr) = (b.upload(l).unwrap(), b.upload(r).unwrap());
    let mut chunks = join_rows_chunked(b, &dl, &dr, opts).unwrap();
    assert_eq!(chunks.chunk_rows(), want.chunk_rows);
    assert_eq!(chunks.output_rows(), want.matched + want.left_only);
    let (mut all, mut seen) = (Vec::new(), 0);
    while let Some(c) = chunks.next_chunk().unwrap() {
        let n = c.left.len() as u64;
        assert!(n * id_row_bytes(opts.kind) <= opts.memory_budget.unwrap());
        assert_eq!(c.right.is_some(), opts.kind.has_right_rows());
        let pairs = pairs_from(b, &c);
        let matched = opts.kind.has_right_rows() && pairs[0].1 != NULL_ROW;
        assert!(pairs.iter().all(|p| (p.1 != NULL_ROW) == matched));
        want.chunk(n, matched, &mut seen, "rows");
        all.extend(pairs);
    }
    assert!(chunks.next_chunk().unwrap().is_none());
    assert!(chunks.next().is_none());
    want.end(&chunks.stats(), chunks.chunks(), all)
}

/// The chunked materialized join of [`table`]s, every chunk checked; its rows, sorted.
fn chunked_rows<B: JoinBackend, K: Key>(
    b: &B,
    l: &[K],
    r: &[K],
    opts: &JoinOptions,
    want: &Expect,
) -> Vec<Vec<u64>> {
    let (lt, rt) = (table(b, l, 10), table(b, r, 20));
    let mut chunks = join_columns_chunked(b, &lt, &rt, opts).unwrap();
    assert_eq!(chunks.chunk_rows(), want.chunk_rows);
    let (mut all, mut seen) = (Vec::new(), 0);
    let outer = opts.kind == JoinKind::LeftOuter;
    for c in chunks.by_ref() {
        let c = c.unwrap();
        assert!(output_bytes(&c) <= opts.memory_budget.unwrap());
        assert_eq!(output_bytes(&c), c.rows * column_row_bytes(opts.kind));
        assert_eq!(c.right_valid.is_some(), outer);
        let rows = rows_of(b, &c);
        let matched = opts.kind.has_right_rows() && rows[0].last() == Some(&1);
        assert!(
            rows.iter()
                .all(|row| (row.last() == Some(&1)) == matched || !outer)
        );
        want.chunk(c.rows, matched, &mut seen, "columns");
        all.extend(rows);
    }
    assert!(chunks.next_chunk().unwrap().is_none());
    want.end(&chunks.stats(), chunks.chunks(), all)
}

fn unchunked_pairs<B: JoinBackend, K: Key>(
    b: &B,
    l: &[K],
    r: &[K],
    opts: &JoinOptions,
) -> Result<Vec<(u32, u32)>, Error> {
    let (out, st) = join_rows(b, &b.upload(l)?, &b.upload(r)?, opts)?;
    let mut p = pairs_from(b, &out);
    assert_eq!(st.output_rows, p.len() as u64);
    p.sort_unstable();
    Ok(p)
}

/// The rows `join_columns` gives for two tables, sorted.
fn sorted_rows<B: JoinBackend, K: Key>(
    b: &B,
    left: &Table<B, K>,
    right: &Table<B, K>,
    opts: &JoinOptions,
) -> Result<Vec<Vec<u64>>, Error> {
    let (out, st) = join_columns(b, left, right, opts)?;
    assert_eq!(st.output_rows, out.rows);
    let mut rows = rows_of(b, &out);
    rows.sort_unstable();
    Ok(rows)
}

fn unchunked_narrow_rows<B: JoinBackend>(
    b: &B,
    l: &[u32],
    r: &[u32],
    opts: &JoinOptions,
) -> Result<Vec<Vec<u64>>, Error> {
    sorted_rows(b, &narrow_table(b, l, 10), &narrow_table(b, r, 20), opts)
}

fn unchunked_rows<B: JoinBackend, K: Key>(
    b: &B,
    l: &[K],
    r: &[K],
    opts: &JoinOptions,
) -> Result<Vec<Vec<u64>>, Error> {
    sorted_rows(b, &table(b, l, 10), &table(b, r, 20), opts)
}

/// Rows per chunk: one, a few, a fraction of the output, more than all of it; at least 1/48
/// of the output, so that debug runs on the CPU stay fast.
fn chunk_rows(total: u64, (mode, x): (u8, u64)) -> u64 {
    let rows = match mode {
        0 => 1,
        1 => x,
        2 => total.div_ceil(x),
        _ => total + x,
    };
    rows.max(total.div_ceil(48)).max(1)
}

/// A budget of `rows` rows of `row_bytes`, plus up to a row's bytes less one.
fn budget(rows: u64, row_bytes: u64, slack: u64) -> u64 {
    rows * row_bytes + slack % row_bytes
}

fn chunks_equal_the_join<B: JoinBackend, K: Key>(
    b: &B,
    (l, r): (&[K], &[K]),
    (shape, slack): ((u8, u64), u64),
    what: &str,
) -> Result<(), TestCaseError> {
    let unique = all_unique(r);
    for kind in JoinKind::ALL {
        let pairs = join_pairs(l, r, kind);
        let rows = expected_rows(l, r, kind);
        let n = chunk_rows(pairs.len() as u64, shape);
        for algorithm in CHUNKED {
            for right_unique in [false, true].into_iter().filter(|&u| !u || unique) {
                let base = JoinOptions::new(kind)
                    .algorithm(algorithm)
                    .right_unique(right_unique);
                let why = format!("{what} {algorithm} {kind:?} unique {right_unique} chunk {n}");

                let opts = base.memory_budget(budget(n, id_row_bytes(kind), slack));
                let want = Expect::new(&pairs, &opts, id_row_bytes(kind));
                let got = chunked_pairs(b, l, r, &opts, &want);
                prop_assert_eq!(&got, &pairs, "{}", why);
                prop_assert_eq!(&got, &unchunked_pairs(b, l, r, &base).unwrap(), "{}", why);

                let opts = base.memory_budget(budget(n, column_row_bytes(kind), slack));
                let want = Expect::new(&pairs, &opts, column_row_bytes(kind));
                let got = chunked_rows(b, l, r, &opts, &want);
                prop_assert_eq!(&got, &rows, "{}", why);
                prop_assert_eq!(&got, &unchunked_rows(b, l, r, &base).unwrap(), "{}", why);
            }
        }
    }
    Ok(())
}

fn shapes() -> impl Strategy<Value = ((u8, u64), u64)> {
    ((0u8..4, 1u64..40), any::<u64>())
}

fn check_chunks<K: Key + Arbitrary>(test: &str) {
    #[cfg(feature = "cuda")]
    let gpu = gpu(test);
    #[cfg(not(feature = "cuda"))]
    let _ = test;
    runner(20)
        .run(&(keys::<K>(), keys::<K>(), shapes()), |(l, r, shape)| {
            chunks_equal_the_join(&CpuBackend::new(), (&l, &r), shape, "cpu")?;
            #[cfg(feature = "cuda")]
            if let Some(g) = &gpu {
                chunks_equal_the_join(g, (&l, &r), shape, "cuda")?;
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn chunks_equal_the_unchunked_join_u32() {
    check_chunks::<u32>("chunks_equal_the_unchunked_join_u32");
}

#[test]
fn chunks_equal_the_unchunked_join_u64() {
    check_chunks::<u64>("chunks_equal_the_unchunked_join_u64");
}

/// Every algorithm and kind: the exact budget gives the unbudgeted output, a byte less is
/// `OutputOverBudget` with the output's rows and bytes.
fn budgets_hold<B: JoinBackend>(
    b: &B,
    l: &[u32],
    r: &[u32],
    what: &str,
) -> Result<(), TestCaseError> {
    for kind in JoinKind::ALL {
        for algorithm in Algorithm::CONCRETE.into_iter().chain([Algorithm::Auto]) {
            let opts = JoinOptions::new(kind).algorithm(algorithm);
            let why = format!("{what} {algorithm} {kind:?}");
            let pairs = unchunked_pairs(b, l, r, &opts).unwrap();
            let rows = unchunked_rows(b, l, r, &opts).unwrap();
            let n = pairs.len() as u64;
            for (row_bytes, columns) in
                [(id_row_bytes(kind), false), (column_row_bytes(kind), true)]
            {
                let bytes = n * row_bytes;
                let exact = opts.memory_budget(bytes);
                if columns {
                    prop_assert_eq!(&unchunked_rows(b, l, r, &exact).unwrap(), &rows, "{}", why);
                } else {
                    prop_assert_eq!(
                        &unchunked_pairs(b, l, r, &exact).unwrap(),
                        &pairs,
                        "{}",
                        why
                    );
                }
                if n == 0 {
                    continue;
                }
                let under = opts.memory_budget(bytes - 1);
                let err = if columns {
                    unchunked_rows(b, l, r, &under).err()
                } else {
                    unchunked_pairs(b, l, r, &under).err()
                };
                prop_assert_eq!(
                    err,
                    Some(Error::OutputOverBudget {
                        rows: n,
                        bytes,
                        budget: bytes - 1
                    }),
                    "{} columns {}",
                    why,
                    columns
                );
            }
            // One payload a side: PHJ-OM's inner join writes the payloads in its match.
            let narrow = unchunked_narrow_rows(b, l, r, &opts).unwrap();
            let bytes = n * narrow_row_bytes(kind);
            let exact = opts.memory_budget(bytes);
            prop_assert_eq!(
                &unchunked_narrow_rows(b, l, r, &exact).unwrap(),
                &narrow,
                "{}",
                why
            );
            if n > 0 {
                prop_assert_eq!(
                    unchunked_narrow_rows(b, l, r, &opts.memory_budget(bytes - 1)).err(),
                    Some(Error::OutputOverBudget {
                        rows: n,
                        bytes,
                        budget: bytes - 1
                    }),
                    "{} narrow",
                    why
                );
            }
        }
    }
    Ok(())
}

#[test]
fn joins_over_the_budget_are_refused() {
    #[cfg(feature = "cuda")]
    let gpu = gpu("joins_over_the_budget_are_refused");
    runner(12)
        .run(&(keys::<u32>(), keys::<u32>()), |(l, r)| {
            budgets_hold(&CpuBackend::new(), &l, &r, "cpu")?;
            #[cfg(feature = "cuda")]
            if let Some(g) = &gpu {
                budgets_hold(g, &l, &r, "cuda")?;
            }
            Ok(())
        })
        .unwrap();
}

fn bad_input<B: JoinBackend>(b: &B) {
    let l = b.upload(&[1u32, 2, 3, 2]).unwrap();
    let r = b.upload(&[2u32, 9, 2]).unwrap();
    let inner = JoinOptions::new(JoinKind::Inner);
    let invalid = |o: &JoinOptions| {
        matches!(
            join_rows_chunked(b, &l, &r, o).err(),
            Some(Error::InvalidArgument(_))
        )
    };
    // No budget; an algorithm other than the non-partitioned hash joins.
    assert!(invalid(&inner));
    for a in [
        Algorithm::SmjUm,
        Algorithm::SmjOm,
        Algorithm::PhjUm,
        Algorithm::PhjOm,
    ] {
        assert!(invalid(&inner.algorithm(a).memory_budget(1 << 20)), "{a}");
    }
    // A budget under one output row.
    assert_eq!(
        join_rows_chunked(b, &l, &r, &inner.memory_budget(7)).err(),
        Some(Error::OutputOverBudget {
            rows: 1,
            bytes: 8,
            budget: 7
        })
    );
    let (lt, rt) = (table(b, &[1u32, 2], 10), table(b, &[2u32], 20));
    let outer = JoinOptions::new(JoinKind::LeftOuter).memory_budget(27);
    assert_eq!(
        join_columns_chunked(b, &lt, &rt, &outer).err(),
        Some(Error::OutputOverBudget {
            rows: 1,
            bytes: 28,
            budget: 27
        })
    );
    // The partitioned joins refuse an output over the budget once counted, before the pairs
    // take memory (30 × 40 pairs of one key), and a PK-FK join whose probe side is longer
    // than the budget holds runs when its matches fit (10 of 100 left rows match).
    let (many_l, many_r) = (
        b.upload(&[7u32; 30]).unwrap(),
        b.upload(&[7u32; 40]).unwrap(),
    );
    let (fk, pk) = (
        b.upload(&(0..100).collect::<Vec<u32>>()).unwrap(),
        b.upload(&(0..10).map(|i| i * 10).collect::<Vec<u32>>())
            .unwrap(),
    );
    for a in [Algorithm::PhjOm, Algorithm::PhjUm] {
        assert_eq!(
            join_rows(b, &many_l, &many_r, &inner.algorithm(a).memory_budget(9599)).err(),
            Some(Error::OutputOverBudget {
                rows: 1200,
                bytes: 9600,
                budget: 9599
            }),
            "{a}"
        );
        let exact = inner.algorithm(a).right_unique(true).memory_budget(80);
        let (rows, stats) = join_rows(b, &fk, &pk, &exact).unwrap();
        assert_eq!((rows.left.len(), stats.output_rows), (10, 10), "{a}");
        assert_eq!(
            join_rows(b, &fk, &pk, &exact.memory_budget(79)).err(),
            Some(Error::OutputOverBudget {
                rows: 10,
                bytes: 80,
                budget: 79
            }),
            "{a}"
        );
    }
    // Under the budget by more than the unmatched rows, a left outer join's error counts them
    // too, as the output would (10 pairs, 90 unmatched left rows; the partitioned joins refuse
    // it inside their match), whichever algorithm refuses it; a broken uniqueness promise is
    // found under a budget smaller than the probe side.
    let outer = JoinOptions::new(JoinKind::LeftOuter).memory_budget(40);
    for a in Algorithm::CONCRETE {
        assert_eq!(
            join_rows(b, &fk, &pk, &outer.algorithm(a)).err(),
            Some(Error::OutputOverBudget {
                rows: 100,
                bytes: 800,
                budget: 40
            }),
            "{a}"
        );
    }
    let repeated = b.upload(&[5u32, 5, 7]).unwrap();
    for a in [Algorithm::PhjOm, Algorithm::PhjUm] {
        let o = inner.algorithm(a).right_unique(true).memory_budget(16);
        assert_eq!(
            join_rows(b, &fk, &repeated, &o).err(),
            Some(Error::DuplicateKey { side: "right" }),
            "{a}"
        );
    }
    // A broken uniqueness promise.
    for a in CHUNKED {
        let o = inner.algorithm(a).right_unique(true).memory_budget(64);
        assert_eq!(
            join_rows_chunked(b, &l, &r, &o).err(),
            Some(Error::DuplicateKey { side: "right" }),
            "{a}"
        );
    }
    // No output: no chunk.
    let none = b.upload(&[5u32, 6]).unwrap();
    let mut chunks = join_rows_chunked(b, &l, &none, &inner.memory_budget(8)).unwrap();
    assert!(chunks.next_chunk().unwrap().is_none());
    assert_eq!((chunks.output_rows(), chunks.chunks()), (0, 0));
    assert_eq!(chunks.stats().output_rows, 0);
    let empty = b.upload::<u32>(&[]).unwrap();
    assert_eq!(
        join_rows_chunked(b, &empty, &r, &inner.memory_budget(8))
            .unwrap()
            .count(),
        0
    );
    // Rows of no payload bytes are sized by the two u32 row ids a chunk retrieves (8 bytes; a
    // left outer row's 4-byte validity word is under that): a 16-byte budget gives chunks of
    // 2 rows, a budget under 8 bytes (which holds an output row of none) chunks of 1.
    let bare = |keys: &[u32]| Table::<B, u32>::new(b.upload(keys).unwrap(), Vec::new()).unwrap();
    let (lt, rt) = (bare(&[1, 2, 3, 2]), bare(&[2, 9, 2]));
    for kind in JoinKind::ALL {
        let mut chunks =
            join_columns_chunked(b, &lt, &rt, &JoinOptions::new(kind).memory_budget(16)).unwrap();
        assert_eq!(chunks.chunk_rows(), 2, "{kind:?}");
        let sizes: Vec<(u64, usize, usize)> = chunks
            .by_ref()
            .map(|c| {
                let c = c.unwrap();
                (c.rows, c.left.len(), c.right.len())
            })
            .collect();
        // Every kind's matched and unmatched rows come in even numbers here.
        let want = join_pairs(&[1u32, 2, 3, 2], &[2, 9, 2], kind).len();
        assert_eq!(sizes, vec![(2, 0, 0); want / 2], "{kind:?}");
    }
    let tiny = JoinOptions::new(JoinKind::Inner).memory_budget(0);
    let chunks = join_columns_chunked(b, &lt, &rt, &tiny).unwrap();
    assert_eq!((chunks.chunk_rows(), chunks.count()), (1, 4));
    // A table put together from its public fields with a short payload: refused by both joins
    // (as Table::new refuses it), not gathered unchecked.
    let short = Table::<B, u32> {
        keys: b.upload(&[1u32, 2]).unwrap(),
        payloads: vec![Column::U32(b.upload(&[1u32]).unwrap())],
    };
    let whole = table(b, &[2u32], 20);
    let mismatch = Some(Error::LengthMismatch {
        what: "table keys vs payload",
        left: 2,
        right: 1,
    });
    assert_eq!(join_columns(b, &short, &whole, &inner).err(), mismatch);
    assert_eq!(
        join_columns_chunked(b, &whole, &short, &inner.memory_budget(64)).err(),
        mismatch
    );
    // An over-budget join_columns is refused before anything is gathered, also with columns.
    let cols = join_columns(
        b,
        &table(b, &[7u32; 30], 1),
        &table(b, &[7u32; 40], 2),
        &inner.memory_budget(1200 * 24 - 1),
    );
    assert_eq!(
        cols.err(),
        Some(Error::OutputOverBudget {
            rows: 1200,
            bytes: 1200 * 24,
            budget: 1200 * 24 - 1
        })
    );
}

#[test]
fn bad_input_is_a_typed_error() {
    on_cpu_and_gpu!("bad_input_is_a_typed_error", bad_input);
}

/// An M:N join of 2^22 left rows in about a hundred chunks (and a few more of unmatched rows) per
/// kind on the GPU, each against the GPU's unchunked join and (inner) the CPU's, as multisets;
/// materialized for the left outer join.
#[cfg(feature = "cuda")]
#[test]
fn large_chunked_joins_match_the_unchunked_join() {
    let Some(g) = gpu("large_chunked_joins_match_the_unchunked_join") else {
        return;
    };
    // Right: 2^19 distinct keys, each twice, and one hot key 300 times; left: foreign keys over
    // them (0.75 matching) and the hot key every 4096th row.
    let distinct: Vec<u32> = joinkit_datagen::unique_keys(1 << 19, 21).unwrap();
    let mut r: Vec<u32> = distinct.iter().chain(&distinct).copied().collect();
    r.extend([distinct[0]; 300]);
    let mut l: Vec<u32> = joinkit_datagen::foreign_keys(1 << 19, 1 << 22, 0.75, 22).unwrap();
    for k in l.iter_mut().step_by(4096) {
        *k = distinct[0];
    }
    let cpu = CpuBackend::new();
    let inner = JoinOptions::new(JoinKind::Inner);
    let cpu_inner = unchunked_pairs(&cpu, &l, &r, &inner).unwrap();
    for algorithm in [Algorithm::NphjOpen, Algorithm::NphjChained] {
        for kind in JoinKind::ALL {
            let base = JoinOptions::new(kind).algorithm(algorithm);
            let pairs = unchunked_pairs(&g, &l, &r, &base).unwrap();
            if kind == JoinKind::Inner {
                assert!(pairs == cpu_inner, "{algorithm}: GPU vs CPU");
            }
            let n = (pairs.len() as u64).div_ceil(100);
            let why = format!("{algorithm} {kind:?}");
            let opts = base.memory_budget(budget(n, id_row_bytes(kind), 5));
            let want = Expect::new(&pairs, &opts, id_row_bytes(kind));
            let got = chunked_pairs(&g, &l, &r, &opts, &want);
            assert_eq!(got.len(), pairs.len(), "{why}");
            assert!(got == pairs, "{why}: rows");
            if algorithm == Algorithm::NphjOpen && kind == JoinKind::LeftOuter {
                let opts = base.memory_budget(budget(n, column_row_bytes(kind), 7));
                let want = Expect::new(&pairs, &opts, column_row_bytes(kind));
                let got = chunked_rows(&g, &l, &r, &opts, &want);
                let rows = unchunked_rows(&g, &l, &r, &base).unwrap();
                assert!(got == rows, "{why}: columns");
            }
        }
    }
}
