//! Output budgets and the chunked join.
//!
//! [`JoinOptions::memory_budget`] bounds the bytes of the output buffers one call returns.
//! [`crate::join_rows`] and [`crate::join_columns`] count the output rows (64-bit) before they
//! allocate the output and return [`Error::OutputOverBudget`] when it would not fit.
//!
//! [`join_columns_chunked`] and [`join_rows_chunked`] return the same output in pieces that
//! each fit the budget, for outputs larger than memory: a non-partitioned hash join that builds
//! its table on the right keys once (key-value slots when `right_unique`, hash-row slots
//! otherwise, or chaining for [`Algorithm::NphjChained`]), counts every left row's matches once
//! and then, chunk by chunk, retrieves the next pairs from a cursor into buffers of at most
//! [`RowChunks::chunk_rows`] rows ([`joinkit_hashtable::HashTables::probe_retrieve_chunk`]) and
//! gathers both sides' payloads by them. Left outer joins give their unmatched left rows (found
//! from the same counts) as the last chunks; semi and anti joins cut the list of kept left
//! rows. Concatenated, the chunks are the unchunked join's output (compare as multisets). An
//! empty output gives no chunk; no chunk is empty.
//!
//! Memory held between chunks: the table, a 4-byte match count per left row and the unmatched
//! (outer) or kept (semi, anti) left rows, 4 bytes each; the budget counts only the chunks.

use joinkit_cuda::{Backend, Buffer, Column, Error, Key, Result, map_column};
use joinkit_hashtable::{HashTable, Matches};
use joinkit_primitives::Bounds;

use crate::join::{
    Phases, build_right_table, check_rows, filled, gather_columns, hash_join_algorithm, probe_left,
    row_bytes, stats,
};
use crate::{
    Algorithm, JoinBackend, JoinKind, JoinOptions, JoinStats, Materialized, NULL_ROW, RowPairs,
    Table,
};

/// Bytes of the two `u32` row ids a chunk retrieves per matched row before it gathers.
const PAIR_ID_BYTES: u64 = 8;

/// Bytes of one output row of [`crate::join_columns`] (and of its chunked join), as
/// [`JoinOptions::memory_budget`] counts them: the widths of the left payload columns, plus for
/// inner and left outer joins those of the right ones, plus for left outer joins 4 for the
/// validity word (without [`JoinOptions::unpack_ids`], which widens `u32` columns to 8 bytes).
pub fn output_row_bytes<B: Backend>(
    kind: JoinKind,
    left: &[Column<B>],
    right: &[Column<B>],
) -> u64 {
    let widths = |cols: &[Column<B>]| row_bytes(cols) as u64;
    let right_bytes = match kind {
        JoinKind::Inner => widths(right),
        JoinKind::LeftOuter => widths(right) + 4,
        JoinKind::LeftSemi | JoinKind::LeftAnti => 0,
    };
    widths(left) + right_bytes
}

/// An output's budget: the caller's limit, if any, and the bytes of one output row.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    limit: Option<u64>,
    row_bytes: u64,
    /// Bytes a row is counted as when a chunked join sizes its chunks: the output row, or for
    /// materialized outputs at least the row ids each chunk retrieves before gathering (so
    /// an output of few or no payload bytes does not come in chunks whose ids overrun the
    /// budget).
    chunk_row_bytes: u64,
}

impl Budget {
    /// For row-id outputs: 4 bytes per id column (the ids are the output).
    pub(crate) fn rows(opts: &JoinOptions) -> Self {
        let row_bytes = if opts.kind.has_right_rows() { 8 } else { 4 };
        Self {
            limit: opts.memory_budget,
            row_bytes,
            chunk_row_bytes: row_bytes,
        }
    }

    /// For materialized outputs: [`output_row_bytes`], with the `u32` columns that
    /// [`JoinOptions::unpack_ids`] widens counted 8 bytes; chunks sized by at least the row ids.
    pub(crate) fn columns<B: Backend>(
        opts: &JoinOptions,
        left: &[Column<B>],
        right: &[Column<B>],
    ) -> Self {
        let widened = |cols: &[Column<B>]| {
            let narrow = cols.iter().filter(|c| matches!(c, Column::U32(_)));
            4 * narrow.count() as u64
        };
        let widened_bytes = match (opts.unpack_ids, opts.kind.has_right_rows()) {
            (None, _) => 0,
            (Some(_), true) => widened(left) + widened(right),
            (Some(_), false) => widened(left),
        };
        let row_bytes = output_row_bytes(opts.kind, left, right) + widened_bytes;
        Self {
            limit: opts.memory_budget,
            row_bytes,
            chunk_row_bytes: row_bytes.max(PAIR_ID_BYTES),
        }
    }

    /// Whether there is a limit to check against.
    pub(crate) fn limited(&self) -> bool {
        self.limit.is_some()
    }

    /// Checks an output of `rows` rows against the limit.
    ///
    /// # Errors
    /// [`Error::SizeOverflow`] when its bytes overflow 64 bits; [`Error::OutputOverBudget`]
    /// when they are over the limit.
    pub(crate) fn check(&self, rows: u64) -> Result<()> {
        match self.max_rows() {
            Some(most) if rows > most => Err(self.over(rows)),
            _ => Ok(()),
        }
    }

    /// The most output rows the limit holds (`None`: any number).
    pub(crate) fn max_rows(&self) -> Option<u64> {
        let budget = self.limit?;
        budget.checked_div(self.row_bytes)
    }

    /// The error for an output of `rows` rows over the limit: [`Error::OutputOverBudget`], or
    /// [`Error::SizeOverflow`] when its bytes overflow 64 bits.
    pub(crate) fn over(&self, rows: u64) -> Error {
        debug_assert!(self.limit.is_some(), "an output over no limit");
        match rows.checked_mul(self.row_bytes) {
            Some(bytes) => Error::OutputOverBudget {
                rows,
                bytes,
                budget: self.limit.unwrap_or(0),
            },
            None => Error::SizeOverflow("join output bytes"),
        }
    }

    /// Rows of a chunk: as many as the limit holds, counted at `chunk_row_bytes` a row, and at
    /// least one (a limit that holds one output row always makes progress).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without a limit; [`Error::OutputOverBudget`] (of one row)
    /// when the limit does not hold one row.
    fn chunk_rows(&self) -> Result<u64> {
        let budget = self.limit.ok_or_else(|| {
            Error::InvalidArgument("a chunked join needs JoinOptions::memory_budget".into())
        })?;
        self.check(1)?;
        Ok((budget / self.chunk_row_bytes).max(1))
    }
}

/// One chunk before assembly: left row ids, and right row ids for matched pairs (`None` for
/// the left rows of semi and anti joins and a left outer join's unmatched rows).
type Piece<B> = (<B as Backend>::Buf<u32>, Option<<B as Backend>::Buf<u32>>);

/// A chunked join's output as row ids ([`RowPairs`] pieces), from [`join_rows_chunked`]; an
/// [`Iterator`] of `Result<RowPairs<B>>`, or call [`RowChunks::next_chunk`].
pub struct RowChunks<'a, B: JoinBackend, K: Key> {
    b: &'a B,
    opts: JoinOptions,
    algorithm: Algorithm,
    left: &'a B::Buf<K>,
    right_rows: usize,
    /// The table and the left rows' match counts, while pairs remain (inner, left outer).
    probe: Option<(HashTable<'a, B, K>, Matches<B>)>,
    /// Kept (semi, anti) or unmatched (outer) left rows, until their first chunk takes them
    /// whole.
    left_only: Option<B::Buf<u32>>,
    left_only_rows: u64,
    chunk_rows: u64,
    pairs_done: u64,
    left_done: u64,
    output_rows: u64,
    chunks: u64,
    phases: Phases<'a, B>,
    /// The error that ended the join: returned again by every later call.
    failed: Option<Error>,
}

/// A chunked join's output as payload columns ([`Materialized`] pieces), from
/// [`join_columns_chunked`]; an [`Iterator`] of `Result<Materialized<B>>`, or call
/// [`ColumnChunks::next_chunk`].
pub struct ColumnChunks<'a, B: JoinBackend, K: Key> {
    rows: RowChunks<'a, B, K>,
    left: &'a [Column<B>],
    right: &'a [Column<B>],
}

/// A chunked join of two tables: the output of [`crate::join_columns`] in pieces of at most
/// `opts.memory_budget` bytes each (as [`JoinOptions::memory_budget`] counts them). Builds the
/// hash table and counts the matches here; each [`ColumnChunks::next_chunk`] retrieves and
/// gathers one piece. Left outer chunks carry `right_valid`; their unmatched rows come last.
///
/// `opts.algorithm` is [`Algorithm::NphjOpen`] (also what [`Algorithm::Auto`] runs) or
/// [`Algorithm::NphjChained`]. Chunks are sized as if a row took at least 8 bytes, the two
/// `u32` row ids a chunk retrieves before it gathers: an output of fewer bytes a row (no
/// payload columns, or one narrow column of a semi or anti join) comes in chunks of at most
/// `budget / 8` rows (one at least).
///
/// ```
/// use joinkit::{Column, JoinKind, JoinOptions, Table, join_columns_chunked};
/// use joinkit_cuda::{Backend, CpuBackend};
/// let cpu = CpuBackend::new();
/// let table = |keys: &[u32]| {
///     let payload = Column::U32(cpu.upload(keys).unwrap());
///     Table::new(cpu.upload(keys).unwrap(), vec![payload]).unwrap()
/// };
/// let (left, right) = (table(&[1, 2, 2, 3]), table(&[2, 2, 3]));
/// // 8 bytes a row (a u32 payload from each side): chunks of at most 2 rows.
/// let opts = JoinOptions::new(JoinKind::Inner).memory_budget(16);
/// let mut chunks = join_columns_chunked(&cpu, &left, &right, &opts).unwrap();
/// assert_eq!(chunks.output_rows(), 5);
/// let sizes: Vec<u64> = chunks.by_ref().map(|c| c.unwrap().rows).collect();
/// assert_eq!(sizes, vec![2, 2, 1]);
/// assert_eq!(chunks.stats().output_rows, 5);
/// ```
///
/// # Errors
/// [`Error::InvalidArgument`] without a memory budget, for another algorithm or with
/// [`JoinOptions::unpack_ids`]; [`Error::OutputOverBudget`] (of one row) when the budget does
/// not hold a single output row; [`Error::SizeOverflow`] for a side of `2^32 - 1` rows or
/// more; [`Error::LengthMismatch`] for a payload column of another length than its table's
/// keys; [`Error::DuplicateKey`] when `right_unique` was promised and broken; allocation,
/// driver and primitive errors. Each chunk can fail with allocation and driver errors.
pub fn join_columns_chunked<'a, B: JoinBackend, K: Key>(
    b: &'a B,
    left: &'a Table<B, K>,
    right: &'a Table<B, K>,
    opts: &JoinOptions,
) -> Result<ColumnChunks<'a, B, K>> {
    opts.refuse_unpack_ids("the chunked join")?;
    left.check()?;
    right.check()?;
    let budget = Budget::columns(opts, &left.payloads, &right.payloads);
    Ok(ColumnChunks {
        rows: RowChunks::start(b, &left.keys, &right.keys, opts, budget)?,
        left: &left.payloads,
        right: &right.payloads,
    })
}

/// A chunked join of two key columns: the output of [`crate::join_rows`] in pieces of at most
/// `opts.memory_budget` bytes each (4 bytes per row-id column). As
/// [`join_columns_chunked`], without payloads; the unmatched rows of a left outer join get
/// [`NULL_ROW`] as their right row.
///
/// # Errors
/// As [`join_columns_chunked`] ([`JoinOptions::unpack_ids`] aside: row ids are not payloads).
pub fn join_rows_chunked<'a, B: JoinBackend, K: Key>(
    b: &'a B,
    left: &'a B::Buf<K>,
    right: &'a B::Buf<K>,
    opts: &JoinOptions,
) -> Result<RowChunks<'a, B, K>> {
    RowChunks::start(b, left, right, opts, Budget::rows(opts))
}

impl<'a, B: JoinBackend, K: Key> RowChunks<'a, B, K> {
    /// Builds the table on the right keys and counts the matches of the left ones.
    fn start(
        b: &'a B,
        left: &'a B::Buf<K>,
        right: &'a B::Buf<K>,
        opts: &JoinOptions,
        budget: Budget,
    ) -> Result<Self> {
        let chunk_rows = budget.chunk_rows()?;
        let (algorithm, chained) = hash_join_algorithm(opts, "the chunked join")?;
        check_rows(left.len())?;
        check_rows(right.len())?;
        crate::join::begin_join(b)?;
        let mut phases = Phases::new(b);
        let table = build_right_table(b, &mut phases, right, opts, chained)?;
        let (matches, left_only) =
            phases.run("match", || probe_left(b, &table, left, opts.kind))?;
        let pairs = matches.as_ref().map_or(0, Matches::total);
        let left_only_rows = left_only.as_ref().map_or(0, |l| l.len() as u64);
        let output_rows = pairs
            .checked_add(left_only_rows)
            .ok_or(Error::SizeOverflow("join output rows"))?;
        Ok(Self {
            b,
            opts: *opts,
            algorithm,
            left,
            right_rows: right.len(),
            probe: matches.map(|m| (table, m)),
            left_only,
            left_only_rows,
            chunk_rows,
            pairs_done: 0,
            left_done: 0,
            output_rows,
            chunks: 0,
            phases,
            failed: None,
        })
    }

    /// The next chunk of row ids, or `None` after the last.
    ///
    /// # Errors
    /// Allocation and driver errors; after an error, every call returns it again.
    pub fn next_chunk(&mut self) -> Result<Option<RowPairs<B>>> {
        self.fused(|s| {
            let Some((left, right)) = s.next_piece()? else {
                return Ok(None);
            };
            let (b, outer) = (s.b, s.opts.kind == JoinKind::LeftOuter);
            let right = s.phases.run("materialize", || match right {
                None if outer => Ok(Some(filled(b, left.len(), NULL_ROW)?)),
                r => Ok(r),
            })?;
            Ok(Some(RowPairs { left, right }))
        })
    }

    /// Output rows of the whole join (counted before the first chunk).
    pub fn output_rows(&self) -> u64 {
        self.output_rows
    }

    /// Most rows of a chunk (what the budget holds).
    pub fn chunk_rows(&self) -> u64 {
        self.chunk_rows
    }

    /// Chunks returned so far.
    pub fn chunks(&self) -> u64 {
        self.chunks
    }

    /// The statistics of the whole join: phase times summed over the chunks so far (complete
    /// once the last chunk is out), output rows of the whole join, the peak memory since the
    /// join started (the chunks the caller still holds included).
    pub fn stats(&self) -> JoinStats {
        stats(
            self.b,
            self.algorithm,
            &self.opts,
            self.left.len(),
            self.right_rows,
            self.output_rows,
            &self.phases,
        )
    }

    /// Runs one step unless an earlier one failed; remembers a failure.
    fn fused<T>(&mut self, step: impl FnOnce(&mut Self) -> Result<Option<T>>) -> Result<Option<T>> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let r = step(self);
        if let Err(e) = &r {
            self.failed = Some(e.clone());
        }
        r
    }

    /// The next chunk's row ids: retrieved pairs first, then left rows.
    fn next_piece(&mut self) -> Result<Option<Piece<B>>> {
        let b = self.b;
        if let Some((table, matches)) = &self.probe {
            let n = (matches.total() - self.pairs_done).min(self.chunk_rows);
            if n > 0 {
                let (left, cursor) = (self.left, self.pairs_done);
                let piece = self.phases.run("match", || {
                    let len = usize::try_from(n).map_err(|_| Error::SizeOverflow("chunk rows"))?;
                    let (mut lp, mut rp) = (b.alloc::<u32>(len)?, b.alloc::<u32>(len)?);
                    let written =
                        b.probe_retrieve_chunk(table, left, matches, cursor, &mut lp, &mut rp)?;
                    if written != n {
                        return Err(Error::Corrupt(format!(
                            "a chunked retrieve wrote {written} of {n} pairs"
                        )));
                    }
                    Ok((lp, Some(rp)))
                })?;
                self.pairs_done += n;
                self.chunks += 1;
                return Ok(Some(piece));
            }
            // Every pair is out: the table and the counts are not needed any more.
            self.probe = None;
        }
        let n = (self.left_only_rows - self.left_done).min(self.chunk_rows);
        if n == 0 {
            return Ok(None);
        }
        let (start, whole) = (self.left_done, n == self.left_only_rows);
        let left_only = &mut self.left_only;
        let ids = self.phases.run("materialize", || {
            let taken = || Error::Corrupt("the kept left rows were handed out".into());
            if whole {
                // One chunk takes them all: hand the list over.
                return left_only.take().ok_or_else(taken);
            }
            let all = left_only.as_ref().ok_or_else(taken)?;
            let len = usize::try_from(n).map_err(|_| Error::SizeOverflow("chunk rows"))?;
            let mut at = b.alloc::<u32>(len)?;
            b.iota(&mut at, start)?;
            b.gather(all, &at, Bounds::Trust)
        })?;
        self.left_done += n;
        self.chunks += 1;
        Ok(Some((ids, None)))
    }
}

impl<B: JoinBackend, K: Key> Iterator for RowChunks<'_, B, K> {
    type Item = Result<RowPairs<B>>;

    /// The next chunk; after an error (yielded once), `None`.
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed.is_some() {
            return None;
        }
        self.next_chunk().transpose()
    }
}

impl<B: JoinBackend, K: Key> ColumnChunks<'_, B, K> {
    /// The next chunk of payload columns, or `None` after the last.
    ///
    /// # Errors
    /// Allocation and driver errors; after an error, every call returns it again.
    pub fn next_chunk(&mut self) -> Result<Option<Materialized<B>>> {
        let (lcols, rcols) = (self.left, self.right);
        self.rows.fused(|s| {
            let Some((left, right)) = s.next_piece()? else {
                return Ok(None);
            };
            let (b, outer) = (s.b, s.opts.kind == JoinKind::LeftOuter);
            let m = s.phases.run("materialize", || {
                let n = left.len();
                let right_cols = match &right {
                    Some(r) => gather_columns(b, rcols, r)?,
                    None if outer => rcols
                        .iter()
                        .map(|c| Ok(map_column!(c, c, T => filled(b, n, T::default())?)))
                        .collect::<Result<Vec<_>>>()?,
                    None => Vec::new(),
                };
                let right_valid = outer
                    .then(|| filled(b, n, u32::from(right.is_some())))
                    .transpose()?;
                Ok(Materialized {
                    left: gather_columns(b, lcols, &left)?,
                    right: right_cols,
                    right_valid,
                    rows: n as u64,
                })
            })?;
            Ok(Some(m))
        })
    }

    /// Output rows of the whole join (counted before the first chunk).
    pub fn output_rows(&self) -> u64 {
        self.rows.output_rows()
    }

    /// Most rows of a chunk (what the budget holds).
    pub fn chunk_rows(&self) -> u64 {
        self.rows.chunk_rows()
    }

    /// Chunks returned so far.
    pub fn chunks(&self) -> u64 {
        self.rows.chunks()
    }

    /// The statistics of the whole join, as [`RowChunks::stats`].
    pub fn stats(&self) -> JoinStats {
        self.rows.stats()
    }
}

impl<B: JoinBackend, K: Key> Iterator for ColumnChunks<'_, B, K> {
    type Item = Result<Materialized<B>>;

    /// The next chunk; after an error (yielded once), `None`.
    fn next(&mut self) -> Option<Self::Item> {
        if self.rows.failed.is_some() {
            return None;
        }
        self.next_chunk().transpose()
    }
}
