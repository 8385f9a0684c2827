//! The contiguous partition result shared by radix and hash partitioning, and the CPU twin of
//! the stable partition by digit both are built on.
//!
//! The CPU twin is a parallel counting sort that never builds a permutation: row chunks count
//! their digits (pass 1), prefix sums give every (digit, chunk) pair its first output slot, and
//! each chunk scatters its rows in input order (pass 2), writing keys, payloads and row ids
//! straight to their places, a few thousand rows at a time (the destinations of a block of rows
//! are computed once and reused by every column). Chunks are in input order and each keeps its
//! rows' order, so the result is stable. Fan-outs above 2^[`SINGLE_LEVEL_BITS`] (powers of two)
//! run as two levels, most significant digit first: the first level scatters into at most
//! 2^[`FIRST_LEVEL_BITS`] runs, the second splits each run in place, one run per task, where
//! the run is small enough to stay in cache. A stable split by the high digit followed by a
//! stable split of each run by the low digit is the stable order by the whole digit, so the
//! output is exactly that of one counting sort on the whole range.
//!
//! Output columns of 8 MiB and more ask Linux for transparent huge pages (`madvise`) before
//! their first touch: a scatter into fresh memory is dominated by page faults and TLB misses
//! on 4 KiB pages (measured on a 2-core VM: 2^24 + 2^25 rows partitioned in ~0.4 s instead of
//! ~0.75 s). The kernel may compact memory for the first huge pages of a process (a one-time
//! stall); setting `JOINKIT_NO_THP` turns the advice off.

use joinkit_cuda::{Backend, Column, CpuBackend, Element, Key, Result};
use rayon::prelude::*;

use crate::column::RowIds;

/// A contiguous partition of a key column and its payloads: partition `p` is rows
/// `offsets[p]..offsets[p + 1]` of every output column.
pub struct Partitioned<B: Backend, K: Key> {
    /// The keys, grouped by partition.
    pub keys: B::Buf<K>,
    /// The payload columns, in the order given, permuted like the keys.
    pub payloads: Vec<Column<B>>,
    /// The permutation applied, when asked for: `row_ids[i]` is the input row now at `i`.
    pub row_ids: Option<Column<B>>,
    /// `fanout + 1` offsets: exclusive prefix sums of the partition sizes, ending at the row count.
    pub offsets: B::Buf<u64>,
}

impl<B: Backend, K: Key> std::fmt::Debug for Partitioned<B, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Partitioned")
            .field("rows", &joinkit_cuda::Buffer::len(&self.keys))
            .field("payloads", &self.payloads.len())
            .field("row_ids", &self.row_ids.is_some())
            .field(
                "partitions",
                &joinkit_cuda::Buffer::len(&self.offsets).saturating_sub(1),
            )
            .finish()
    }
}

/// Stable permutation grouping `digits` (each `< fanout`) and the `fanout + 1` offsets: a
/// counting sort, in input order within each digit.
pub(crate) fn stable_permutation(digits: &[u32], fanout: usize) -> (Vec<usize>, Vec<u64>) {
    let mut offsets = vec![0u64; fanout + 1];
    for &d in digits {
        offsets[d as usize + 1] += 1;
    }
    for p in 0..fanout {
        offsets[p + 1] += offsets[p];
    }
    let mut cursor: Vec<usize> = offsets[..fanout].iter().map(|&o| o as usize).collect();
    let mut perm = vec![0usize; digits.len()];
    for (i, &d) in digits.iter().enumerate() {
        perm[cursor[d as usize]] = i;
        cursor[d as usize] += 1;
    }
    (perm, offsets)
}

/// Fan-outs up to `2^SINGLE_LEVEL_BITS` (and every fan-out that is not a power of two) are one
/// scatter level; larger powers of two are two.
pub(crate) const SINGLE_LEVEL_BITS: u32 = 10;

/// Most bits of the first of two levels (its runs are then split in cache).
pub(crate) const FIRST_LEVEL_BITS: u32 = 8;

/// Rows whose destinations are computed at once, then used by every column.
const BLOCK: usize = 2048;

/// Rows per chunk of the first level's parallel split (at least).
const MIN_CHUNK: usize = 1 << 16;

/// A column's buffer shared by the tasks that write disjoint elements of it.
struct SharedOut<T>(*mut T, usize);

impl<T> Clone for SharedOut<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for SharedOut<T> {}

// SAFETY: the pointer addresses a buffer that outlives every task writing through it, and the
// tasks write disjoint elements (each output row is the destination of exactly one input row).
unsafe impl<T: Send> Send for SharedOut<T> {}
// SAFETY: as above: concurrent use only writes disjoint elements, never reads.
unsafe impl<T: Send> Sync for SharedOut<T> {}

impl<T: Copy> SharedOut<T> {
    fn new(out: &mut [T]) -> Self {
        Self(out.as_mut_ptr(), out.len())
    }

    /// Writes `v` at `i`.
    ///
    /// # Safety
    /// No other task may access element `i` meanwhile, and the buffer must be alive.
    #[inline(always)]
    unsafe fn write(&self, i: usize, v: T) {
        assert!(i < self.1, "partition destination out of range");
        // SAFETY: `i` is in bounds (checked above); exclusivity is the caller's promise.
        unsafe { *self.0.add(i) = v };
    }

    /// A copy of elements `run`.
    ///
    /// # Safety
    /// No other task may write elements of `run` meanwhile, and the buffer must be alive.
    unsafe fn copy_run(&self, run: std::ops::Range<usize>) -> Vec<T> {
        assert!(
            run.start <= run.end && run.end <= self.1,
            "run out of range"
        );
        // SAFETY: in bounds (checked above); nobody writes the run meanwhile (the caller's
        // promise), so a shared view of it is sound while the copy is made.
        unsafe { std::slice::from_raw_parts(self.0.add(run.start), run.len()) }.to_vec()
    }
}

/// Moves one column's block of rows: `mover(first_row, destinations)` writes source rows
/// `first_row..first_row + destinations.len()` to their destinations.
type Mover<'a> = Box<dyn Fn(usize, &[usize]) + Send + Sync + 'a>;

fn mover<'a, T: Element>(src: &'a [T], out: &'a mut [T]) -> Mover<'a> {
    writer(src, SharedOut::new(out))
}

/// As [`mover`], into a buffer other tasks write too (disjoint elements).
fn writer<T: Element>(src: &[T], out: SharedOut<T>) -> Mover<'_> {
    Box::new(move |first, dest| {
        for (&v, &d) in src[first..first + dest.len()].iter().zip(dest) {
            // SAFETY: destinations form a permutation of the output rows across all blocks and
            // tasks, so no other task touches `d`; `out` outlives the scatter.
            unsafe { out.write(d, v) };
        }
    })
}

fn column_mover<'a>(src: &'a Column<CpuBackend>, out: &'a mut Column<CpuBackend>) -> Mover<'a> {
    SharedColumn::new(out).writer(src)
}

/// Writes the row ids of a block (`first_row + i`), for the first (or only) level.
fn row_id_mover<'a>(out: &'a mut Column<CpuBackend>) -> Mover<'a> {
    match out {
        Column::U32(o) => {
            let out = SharedOut::new(o);
            Box::new(move |first, dest| {
                for (i, &d) in dest.iter().enumerate() {
                    // SAFETY: as in `mover`.
                    unsafe { out.write(d, (first + i) as u32) };
                }
            })
        }
        Column::U64(o) => {
            let out = SharedOut::new(o);
            Box::new(move |first, dest| {
                for (i, &d) in dest.iter().enumerate() {
                    // SAFETY: as in `mover`.
                    unsafe { out.write(d, (first + i) as u64) };
                }
            })
        }
        _ => unreachable!("row ids are u32 or u64"),
    }
}

/// A payload or row-id column written by several tasks, each its own rows (the second level's
/// tasks split their runs in place).
enum SharedColumn {
    U32(SharedOut<u32>),
    I32(SharedOut<i32>),
    U64(SharedOut<u64>),
    I64(SharedOut<i64>),
}

impl SharedColumn {
    fn new(c: &mut Column<CpuBackend>) -> Self {
        match c {
            Column::U32(v) => Self::U32(SharedOut::new(v)),
            Column::I32(v) => Self::I32(SharedOut::new(v)),
            Column::U64(v) => Self::U64(SharedOut::new(v)),
            Column::I64(v) => Self::I64(SharedOut::new(v)),
        }
    }

    /// A copy of rows `run`, the source its run is scattered back from.
    ///
    /// # Safety
    /// As [`SharedOut::copy_run`].
    unsafe fn copy_run(&self, run: std::ops::Range<usize>) -> Column<CpuBackend> {
        // SAFETY: the caller's promise.
        unsafe {
            match self {
                Self::U32(o) => Column::U32(o.copy_run(run)),
                Self::I32(o) => Column::I32(o.copy_run(run)),
                Self::U64(o) => Column::U64(o.copy_run(run)),
                Self::I64(o) => Column::I64(o.copy_run(run)),
            }
        }
    }

    /// Writes `src` (a copy of one of its runs) back to its destinations.
    fn writer<'a>(&self, src: &'a Column<CpuBackend>) -> Mover<'a> {
        match (self, src) {
            (Self::U32(o), Column::U32(s)) => writer(s, *o),
            (Self::I32(o), Column::I32(s)) => writer(s, *o),
            (Self::U64(o), Column::U64(s)) => writer(s, *o),
            (Self::I64(o), Column::I64(s)) => writer(s, *o),
            _ => unreachable!("outputs and run copies have their column's type"),
        }
    }
}

/// Output columns like `cols` (same lengths and types).
fn likes(cols: &[Column<CpuBackend>]) -> Result<Vec<Column<CpuBackend>>> {
    cols.iter()
        .map(|c| Ok(joinkit_cuda::map_column!(c, v, T => output::<T>(v.len())?)))
        .collect()
}

fn row_id_buffer(row_ids: RowIds, n: usize) -> Result<Option<Column<CpuBackend>>> {
    Ok(match row_ids {
        RowIds::None => None,
        RowIds::U32 => Some(Column::U32(output(n)?)),
        RowIds::U64 => Some(Column::U64(output(n)?)),
    })
}

/// A buffer of `n` zeros for an output column, from `joinkit_cuda::try_zeroed`: fallible, and
/// its pages first touched by the scatter's tasks, not by a serial zero fill.
fn output<T: Element>(n: usize) -> Result<Vec<T>> {
    joinkit_cuda::try_zeroed(n)
}

/// Scatters rows `range` with cursors `cur` (the next output row of each digit), block by
/// block: destinations once, then every column.
fn scatter_range<K: Key>(
    keys: &[K],
    range: std::ops::Range<usize>,
    cur: &mut [usize],
    digit: &(impl Fn(K) -> usize + Sync),
    movers: &[Mover<'_>],
) {
    let mut dest = [0usize; BLOCK];
    let mut first = range.start;
    while first < range.end {
        let len = (range.end - first).min(BLOCK);
        for (d, &k) in dest[..len].iter_mut().zip(&keys[first..first + len]) {
            let c = &mut cur[digit(k)];
            *d = *c;
            *c += 1;
        }
        for m in movers {
            m(first, &dest[..len]);
        }
        first += len;
    }
}

fn histogram<K: Key>(
    keys: &[K],
    fanout: usize,
    digit: &(impl Fn(K) -> usize + Sync),
) -> Vec<usize> {
    let mut h = vec![0usize; fanout];
    for &k in keys {
        h[digit(k)] += 1;
    }
    h
}

/// One parallel stable scatter level over the whole input: chunks count, prefix sums, chunks
/// scatter. Returns the `fanout + 1` offsets.
fn split_level<K: Key>(
    keys: &[K],
    fanout: usize,
    digit: &(impl Fn(K) -> usize + Sync),
    movers: &[Mover<'_>],
) -> Vec<u64> {
    let n = keys.len();
    let chunks = (n / MIN_CHUNK).clamp(1, 4 * rayon::current_num_threads().max(1));
    let size = n.div_ceil(chunks).max(1);
    let ranges: Vec<std::ops::Range<usize>> =
        (0..n).step_by(size).map(|s| s..(s + size).min(n)).collect();
    let mut cursors: Vec<Vec<usize>> = ranges
        .par_iter()
        .map(|r| histogram(&keys[r.clone()], fanout, digit))
        .collect();
    let mut offsets = vec![0u64; fanout + 1];
    for h in &cursors {
        for (o, &c) in offsets[1..].iter_mut().zip(h) {
            *o += c as u64;
        }
    }
    for p in 0..fanout {
        offsets[p + 1] += offsets[p];
    }
    // Each chunk starts each digit where the earlier chunks' rows of that digit end.
    let mut run: Vec<usize> = offsets[..fanout].iter().map(|&o| o as usize).collect();
    for h in &mut cursors {
        for (c, r) in h.iter_mut().zip(&mut run) {
            let count = *c;
            *c = *r;
            *r += count;
        }
    }
    cursors
        .into_par_iter()
        .zip(ranges)
        .for_each(|(mut cur, r)| scatter_range(keys, r, &mut cur, digit, movers));
    offsets
}

/// The CPU twin of the stable scatter: partition `keys` (and payloads) by `digit` into
/// `fanout` contiguous partitions, keeping input order within each.
pub(crate) fn cpu_stable_partition<K: Key>(
    keys: &[K],
    payloads: &[Column<CpuBackend>],
    row_ids: RowIds,
    fanout: usize,
    digit: impl Fn(K) -> usize + Sync,
) -> Result<Partitioned<CpuBackend, K>> {
    let n = keys.len();
    let bits = fanout.trailing_zeros();
    if !fanout.is_power_of_two() || bits <= SINGLE_LEVEL_BITS {
        let mut out_keys = output::<K>(n)?;
        let mut out_payloads = likes(payloads)?;
        let mut out_rows = row_id_buffer(row_ids, n)?;
        let offsets = {
            let mut movers = vec![mover(keys, &mut out_keys)];
            movers.extend(
                payloads
                    .iter()
                    .zip(&mut out_payloads)
                    .map(|(s, o)| column_mover(s, o)),
            );
            movers.extend(out_rows.as_mut().map(row_id_mover));
            split_level(keys, fanout, &digit, &movers)
        };
        return Ok(Partitioned {
            keys: out_keys,
            payloads: out_payloads,
            row_ids: out_rows,
            offsets,
        });
    }

    // Two levels: the high digit first, into temporaries, with row ids if asked for.
    let low_bits = bits - bits.min(FIRST_LEVEL_BITS);
    let low_mask = (1usize << low_bits) - 1;
    let high = |k: K| digit(k) >> low_bits;
    let mut mid_keys = output::<K>(n)?;
    let mut mid_payloads = likes(payloads)?;
    let mut mid_rows = row_id_buffer(row_ids, n)?;
    let runs = {
        let mut movers = vec![mover(keys, &mut mid_keys)];
        movers.extend(
            payloads
                .iter()
                .zip(&mut mid_payloads)
                .map(|(s, o)| column_mover(s, o)),
        );
        movers.extend(mid_rows.as_mut().map(row_id_mover));
        split_level(keys, fanout >> low_bits, &high, &movers)
    };

    // Then each run of the first level by the low digit, one task a run: the run is copied out
    // (it is small enough to stay in cache) and scattered back in place, so the first level's
    // buffers are the output and no second set of fresh memory is first-touched.
    let mut offsets = vec![0u64; fanout + 1];
    offsets[fanout] = n as u64;
    {
        let keys_out = SharedOut::new(&mut mid_keys);
        let columns: Vec<SharedColumn> = mid_payloads
            .iter_mut()
            .chain(mid_rows.as_mut())
            .map(SharedColumn::new)
            .collect();
        let low = |k: K| digit(k) & low_mask;
        offsets[..fanout]
            .par_chunks_mut(1 << low_bits)
            .zip(runs.par_windows(2))
            .for_each(|(offs, w)| {
                let (lo, hi) = (w[0] as usize, w[1] as usize);
                // SAFETY: runs are disjoint and this task is the only one that reads or writes
                // rows `lo..hi` of any column.
                let run_keys = unsafe { keys_out.copy_run(lo..hi) };
                let run_columns: Vec<Column<CpuBackend>> = columns
                    .iter()
                    // SAFETY: as for the keys.
                    .map(|c| unsafe { c.copy_run(lo..hi) })
                    .collect();
                let h = histogram(&run_keys, 1 << low_bits, &low);
                let mut cur = Vec::with_capacity(h.len());
                let mut at = lo;
                for (o, &c) in offs.iter_mut().zip(&h) {
                    *o = at as u64;
                    cur.push(at);
                    at += c;
                }
                let mut movers = vec![writer(&run_keys, keys_out)];
                movers.extend(columns.iter().zip(&run_columns).map(|(o, s)| o.writer(s)));
                scatter_range(&run_keys, 0..hi - lo, &mut cur, &low, &movers);
            });
    }
    Ok(Partitioned {
        keys: mid_keys,
        payloads: mid_payloads,
        row_ids: mid_rows,
        offsets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use joinkit_cuda::Error;

    /// An output no host can hold (2^61 bytes) is an error from the allocator, not an abort.
    #[test]
    fn an_output_beyond_memory_is_an_error() {
        let r = output::<u64>(1 << 58);
        assert!(matches!(r, Err(Error::SizeOverflow(_))), "{r:?}");
    }

    /// Large enough for several parallel chunks; fan-outs of one and two levels, not powers of
    /// two, and skew: the same result as the permutation of one counting sort.
    #[test]
    fn chunked_and_two_level_splits_equal_one_counting_sort() {
        let n = 3 * MIN_CHUNK + 123;
        let keys: Vec<u32> = (0..n as u64)
            .map(|i| joinkit_cuda::hash::hash64(i, 5) as u32)
            .map(|k| if k % 7 == 0 { 42 } else { k })
            .collect();
        let pay: Vec<i64> = (0..n as i64).map(|i| -i).collect();
        for fanout in [1usize, 3, 256, 1000, 1 << 10, 1 << 11, 1 << 17] {
            let digit = |k: u32| (k as usize * 31) % fanout;
            let p = cpu_stable_partition(
                &keys,
                &[Column::I64(pay.clone())],
                RowIds::U32,
                fanout,
                digit,
            )
            .unwrap();
            let digits: Vec<u32> = keys.iter().map(|&k| digit(k) as u32).collect();
            let (perm, offsets) = stable_permutation(&digits, fanout);
            assert_eq!(p.offsets, offsets, "fanout {fanout}");
            let want: Vec<u32> = perm.iter().map(|&i| keys[i]).collect();
            assert_eq!(p.keys, want, "fanout {fanout}");
            let want_rows: Vec<u32> = perm.iter().map(|&i| i as u32).collect();
            assert!(matches!(&p.row_ids, Some(Column::U32(r)) if *r == want_rows));
            let want_pay: Vec<i64> = perm.iter().map(|&i| pay[i]).collect();
            assert!(matches!(&p.payloads[0], Column::I64(v) if *v == want_pay));
        }
    }
}
