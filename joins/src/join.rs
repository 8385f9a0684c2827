//! The join algorithms, written once over the backend traits: each reads as its paper's steps
//! (transform, match, materialize) over the primitives.

use joinkit_cuda::{Backend, Buffer, Column, Error, Key, Result, map_column};
use joinkit_hashtable::{HashTable, HashTables, Matches, TableConfig, TableKind};
use joinkit_partition::{BucketChainPartition, RadixPartition};
use joinkit_primitives::{Bounds, Compact, Gather, Interleave, MergePath, Sort};

use crate::choose::{
    ChoiceParams, ChoiceReason, JoinInputStats, choose, choose_unsampled, sample_stats_and_table,
};
use crate::chunk::Budget;
use crate::copart::{CoPartitionJoin, PairColumns};
use crate::flags::MatchFlags;
use crate::phj::{Layout, PartitionedSide, partitioned_match};
use crate::sample::SampleRuns;
use crate::{Algorithm, JoinKind, JoinOptions, JoinStats, NULL_ROW};

/// Everything a backend needs to run every join algorithm.
pub trait JoinBackend:
    Sort
    + Gather
    + Interleave
    + MergePath
    + Compact
    + HashTables
    + MatchFlags
    + RadixPartition
    + BucketChainPartition
    + CoPartitionJoin
    + SampleRuns
{
}
impl<
    B: Sort
        + Gather
        + Interleave
        + MergePath
        + Compact
        + HashTables
        + MatchFlags
        + RadixPartition
        + BucketChainPartition
        + CoPartitionJoin
        + SampleRuns,
> JoinBackend for B
{
}

/// A relation: a key column and any number of payload columns of the same length.
pub struct Table<B: Backend, K: Key> {
    /// The join keys.
    pub keys: B::Buf<K>,
    /// Payload columns, any element types.
    pub payloads: Vec<Column<B>>,
}

impl<B: Backend, K: Key> Table<B, K> {
    /// A table, checking that every payload has one value per key.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] naming the first payload of another length.
    pub fn new(keys: B::Buf<K>, payloads: Vec<Column<B>>) -> Result<Self> {
        let table = Self { keys, payloads };
        table.check()?;
        Ok(table)
    }

    /// Checks that every payload has one value per key: the fields are public, so the joins
    /// check again what [`Table::new`] checked before gathering unchecked by row id.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] naming the first payload of another length.
    pub(crate) fn check(&self) -> Result<()> {
        for p in &self.payloads {
            Error::check_len("table keys vs payload", self.keys.len(), p.len())?;
        }
        Ok(())
    }

    /// Rows.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the table has no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A join's output as gather maps: row ids into the left and right inputs.
pub struct RowPairs<B: Backend> {
    /// Left row of each output row.
    pub left: B::Buf<u32>,
    /// Right row of each output row (inner and left outer joins; [`NULL_ROW`] where a left
    /// outer row has no match); `None` for semi and anti joins.
    pub right: Option<B::Buf<u32>>,
}

/// A join's output as columns: the payloads of both sides, row by row.
pub struct Materialized<B: Backend> {
    /// Left payload columns of the output rows, in the left table's order of columns.
    pub left: Vec<Column<B>>,
    /// Right payload columns (empty for semi and anti joins). For left outer joins, rows without
    /// a match hold 0 and are marked invalid in `right_valid`.
    pub right: Vec<Column<B>>,
    /// For left outer joins: 1 where the right columns hold a match, 0 where they are null.
    pub right_valid: Option<B::Buf<u32>>,
    /// Output rows.
    pub rows: u64,
}

/// The match phase's result, before assembly. For sort-merge joins the ids are positions in
/// the sorted sides and `sorted` maps them back to row ids; for PHJ-OM's GFTR they are
/// positions in partitioned order (`partitioned`); otherwise they are row ids.
pub(crate) struct Matched<B: Backend, K: Key> {
    /// Matching (left, right) pairs (inner and outer joins).
    pub(crate) pairs: Option<(B::Buf<u32>, B::Buf<u32>)>,
    /// Left rows with a match (semi) or without one (anti, outer).
    pub(crate) left_only: Option<B::Buf<u32>>,
    /// Sort-merge joins: row id of each sorted position, per side, and the sorted keys' row
    /// permutation.
    pub(crate) sorted: Option<(B::Buf<u32>, B::Buf<u32>)>,
    /// PHJ-OM in `join_columns`: how each side's payloads reach partitioned order (left,
    /// right).
    pub(crate) partitioned: Option<(PartitionedSide<B, K>, PartitionedSide<B, K>)>,
    /// Each side's payload columns in output order, written by the match in place of ids
    /// ([`crate::phj::Layout::Payloads`]; `pairs` is then `None`).
    pub(crate) columns: Option<PairColumns<B>>,
}

impl<B: Backend> Matched<B, u32> {
    /// The match of a join whose 8-byte keys were narrowed to `u32`
    /// ([`crate::CoPartitionJoin::narrow_keys`]), as the join of its keys: the same pairs and
    /// rows. Only a match that keeps no keys for later (no partitioned sides) converts.
    pub(crate) fn narrowed<K: Key>(self) -> Result<Matched<B, K>> {
        if self.partitioned.is_some() {
            return Err(Error::Corrupt(
                "a match with narrowed keys kept them for the payloads' transform".into(),
            ));
        }
        Ok(Matched {
            pairs: self.pairs,
            left_only: self.left_only,
            sorted: self.sorted,
            partitioned: None,
            columns: self.columns,
        })
    }
}

/// Times phases and records them in order.
pub(crate) struct Phases<'b, B: Backend> {
    backend: &'b B,
    pub(crate) phases: Vec<(&'static str, f64)>,
    /// Whether the match joined 8-byte keys narrowed to their low 32 bits.
    pub(crate) narrowed_keys: bool,
}

impl<'b, B: Backend> Phases<'b, B> {
    pub(crate) fn new(backend: &'b B) -> Self {
        Self {
            backend,
            phases: Vec::new(),
            narrowed_keys: false,
        }
    }

    pub(crate) fn run<R>(
        &mut self,
        name: &'static str,
        work: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let (r, ms) = self.backend.timed(work)?;
        crate::add_phase(&mut self.phases, name, ms);
        Ok(r)
    }
}

/// Checks the rows of a join side (or of a sequence's fact or dimension table), as every join
/// does first: row ids are `u32` with [`NULL_ROW`] reserved, so sides are limited to
/// `u32::MAX - 1` rows. Public so that a caller generating inputs can check their sizes first.
///
/// # Errors
/// [`Error::SizeOverflow`] for `2^32 - 1` rows or more.
pub fn check_rows(n: usize) -> Result<()> {
    if n as u64 >= u64::from(NULL_ROW) {
        return Err(Error::SizeOverflow(
            "join sides are limited to 2^32 - 1 rows (u32 row ids)",
        ));
    }
    Ok(())
}

/// The algorithm a join runs and, for [`Algorithm::Auto`], how it was chosen.
pub(crate) struct Resolved<'k, B: Backend, K: Key> {
    /// The algorithm to run.
    pub(crate) algorithm: Algorithm,
    /// The sampled statistics, where the choice took a sample.
    pub(crate) sampled: Option<JoinInputStats>,
    /// Why Auto chose it.
    pub(crate) reason: Option<ChoiceReason>,
    /// NPHJ-chained's table on the right keys, where the plan built it (see [`resolve`]).
    pub(crate) table: Option<HashTable<'k, B, K>>,
    /// The row ids (left, right) SMJ-OM sorts with its keys, where the plan numbered them.
    pub(crate) row_ids: Option<(B::Buf<u32>, B::Buf<u32>)>,
}

impl<B: Backend, K: Key> Resolved<'_, B, K> {
    /// `st` with how Auto chose.
    fn stats(self, st: JoinStats) -> JoinStats {
        JoinStats {
            sampled: self.sampled,
            reason: self.reason,
            ..st
        }
    }
}

/// The algorithm to run: the requested one, or for [`Algorithm::Auto`] the decision tree's
/// choice ([`choose`]): NPHJ-open when right keys promised unique fit a cached table (16 bytes
/// a row at load 0.5), NPHJ-chained for a semi or anti join on a small right side not
/// promised unique, else a choice from sampled statistics, timed as the `plan` phase.
///
/// Where the sample can only choose between NPHJ-chained and SMJ-OM (right keys not promised
/// unique, [`ChoiceParams::chained_or_merge`]), the sample's launch also empties the chained
/// table's heads and the build queued behind it pushes the keys unless the sample's pairs pick
/// SMJ-OM ([`SampleRuns::sample_runs_and_chained_table`](crate::SampleRuns)): one launch
/// before the choice, the build running while the host chooses, and the join keeps the table
/// when the choice is NPHJ-chained. Where SMJ-OM is chosen (many rows a key, joins of 0.25 ms
/// and more) the table is not built: that launch numbers both sides' rows for SMJ-OM instead
/// (sides of at most [`crate::choose::PLAN_NUMBERS_ROWS_UP_TO`] rows together), so the join
/// starts with its sorts.
fn resolve<'k, B: JoinBackend, K: Key>(
    b: &B,
    ph: &mut Phases<'_, B>,
    opts: &JoinOptions,
    left: &B::Buf<K>,
    right: &'k B::Buf<K>,
    payload_bytes: (usize, usize),
) -> Result<Resolved<'k, B, K>> {
    let chosen = |algorithm, reason| Resolved {
        algorithm,
        sampled: None,
        reason,
        table: None,
        row_ids: None,
    };
    if opts.algorithm != Algorithm::Auto {
        return Ok(chosen(opts.algorithm, None));
    }
    let params = ChoiceParams::for_backend(b);
    let sides = (left.len(), right.len());
    let unsampled = choose_unsampled(sides, opts.right_unique, opts.kind, &params);
    if let Some((algorithm, reason)) = unsampled {
        return Ok(chosen(algorithm, Some(reason)));
    }
    let speculate =
        !opts.right_unique && !right.is_empty() && params.chained_or_merge(opts.kind, right.len());
    let sampled = ph.run("plan", || {
        sample_stats_and_table(b, (left, right), payload_bytes, opts, &params, speculate)
    })?;
    let (algorithm, reason) = choose(&sampled.stats, opts.kind, &params);
    Ok(Resolved {
        algorithm,
        sampled: Some(sampled.stats),
        reason: Some(reason),
        table: sampled
            .table
            .filter(|_| algorithm == Algorithm::NphjChained),
        row_ids: sampled.row_ids.filter(|_| algorithm == Algorithm::SmjOm),
    })
}

/// Bytes per row of a table's payload columns.
pub(crate) fn row_bytes<B: Backend>(cols: &[Column<B>]) -> usize {
    cols.iter().map(Column::width).sum()
}

/// The hash table on the right keys: chained, or open addressing with (key, row) slots when
/// the keys are promised unique or the join needs one row a key (semi, anti), and (hash, row)
/// slots otherwise; a broken promise is [`Error::DuplicateKey`] on the right side.
pub(crate) fn build_right_table<'k, B: JoinBackend, K: Key>(
    b: &B,
    ph: &mut Phases<'_, B>,
    right: &'k B::Buf<K>,
    opts: &JoinOptions,
    chained: bool,
) -> Result<HashTable<'k, B, K>> {
    let config = match (chained, opts.right_unique, opts.kind.has_right_rows()) {
        (true, ..) => TableConfig::chained(),
        (false, true, _) => TableConfig::key_value(),
        // Semi and anti joins ask only whether a key is there: one slot a distinct key, so a
        // probe never walks a run of equal keys (H200, 2^18 rows of 1024 a key, semi join:
        // 5.92 ms with (hash, row) slots, 0.114 with these).
        (false, false, false) => TableConfig::key_value().keep_first_duplicate(),
        (false, false, true) => TableConfig::hash_row(),
    };
    let table = ph
        .run("transform", || b.build_table(right, &config))
        .map_err(|e| match e {
            // The table calls its input the build side; here that is the right one.
            Error::DuplicateKey { .. } => Error::DuplicateKey { side: "right" },
            e => e,
        })?;
    if opts.right_unique && config.kind() != TableKind::KeyValue {
        // A key-value table refuses duplicates as it builds; other layouts are checked by
        // counting every right key's matches.
        let total = ph.run("transform", || Ok(b.probe_count(&table, right)?.total()))?;
        if total != right.len() as u64 {
            return Err(Error::DuplicateKey { side: "right" });
        }
    }
    Ok(table)
}

/// The non-partitioned hash join a join that keeps one table on the right keys runs
/// (`what`: the chunked join, a [`crate::ProbeTable`]): NPHJ-open for [`Algorithm::Auto`], and
/// whether its table is chained.
///
/// # Errors
/// [`Error::InvalidArgument`] for the sort-merge and partitioned joins.
pub(crate) fn hash_join_algorithm(opts: &JoinOptions, what: &str) -> Result<(Algorithm, bool)> {
    match opts.algorithm {
        Algorithm::Auto | Algorithm::NphjOpen => Ok((Algorithm::NphjOpen, false)),
        Algorithm::NphjChained => Ok((Algorithm::NphjChained, true)),
        a => Err(Error::InvalidArgument(format!(
            "{what} is a non-partitioned hash join (NPHJ-open, NPHJ-chained or auto), not {a}"
        ))),
    }
}

/// What [`probe_left`] finds: match counts, and left rows kept.
pub(crate) type Probed<B> = (Option<Matches<B>>, Option<<B as Backend>::Buf<u32>>);

/// Probes the table with the left keys: the match counts (inner and left outer joins), and the
/// left rows a semi, anti or outer join keeps; a left outer join takes its unmatched rows from
/// the counts instead of probing a second time.
pub(crate) fn probe_left<B: JoinBackend, K: Key>(
    b: &B,
    table: &HashTable<'_, B, K>,
    left: &B::Buf<K>,
    kind: JoinKind,
) -> Result<Probed<B>> {
    Ok(match kind {
        JoinKind::Inner => (Some(b.probe_count(table, left)?), None),
        JoinKind::LeftOuter => {
            let matches = b.probe_count(table, left)?;
            let unmatched = b.count_flags(matches.counts(), false)?;
            let rows = b.flagged_indices::<u32>(&unmatched)?;
            (Some(matches), Some(rows))
        }
        JoinKind::LeftSemi | JoinKind::LeftAnti => {
            let found = b.contains(table, left)?;
            let keep = if kind == JoinKind::LeftSemi {
                found
            } else {
                b.count_flags(&found, false)?
            };
            (None, Some(b.flagged_indices::<u32>(&keep)?))
        }
    })
}

/// Hash joins: build on the right keys, probe with the left; count, check the budget,
/// allocate, retrieve.
fn hash_match<B: JoinBackend, K: Key>(
    b: &B,
    ph: &mut Phases<'_, B>,
    left: &B::Buf<K>,
    right: &B::Buf<K>,
    opts: &JoinOptions,
    chained: bool,
    budget: &Budget,
) -> Result<Matched<B, K>> {
    let table = build_right_table(b, ph, right, opts, chained)?;
    table_match(b, ph, &table, left, opts, budget)
}

/// A hash join's match against a built table: probe with the left keys, count, check the
/// budget, allocate, retrieve.
pub(crate) fn table_match<B: JoinBackend, K: Key>(
    b: &B,
    ph: &mut Phases<'_, B>,
    table: &HashTable<'_, B, K>,
    left: &B::Buf<K>,
    opts: &JoinOptions,
    budget: &Budget,
) -> Result<Matched<B, K>> {
    ph.run("match", || {
        let (matches, left_only) = probe_left(b, table, left, opts.kind)?;
        let pairs = matches.as_ref().map_or(0, Matches::total);
        budget.check(pairs.saturating_add(left_only.as_ref().map_or(0, |u| u.len() as u64)))?;
        let pairs = match matches {
            Some(matches) => {
                let total =
                    usize::try_from(pairs).map_err(|_| Error::SizeOverflow("join output rows"))?;
                let (mut lp, mut rp) = (b.alloc::<u32>(total)?, b.alloc::<u32>(total)?);
                b.probe_retrieve(table, left, &matches, &mut lp, &mut rp)?;
                Some((lp, rp))
            }
            None => None,
        };
        Ok(Matched {
            pairs,
            left_only,
            sorted: None,
            partitioned: None,
            columns: None,
        })
    })
}

/// Sort-merge joins: sort both sides with their row ids (`row_ids`, where the plan numbered
/// them), search each left key's range in the right, expand the ranges into pairs.
fn merge_match<B: JoinBackend, K: Key>(
    b: &B,
    ph: &mut Phases<'_, B>,
    left: &B::Buf<K>,
    right: &B::Buf<K>,
    row_ids: Option<(B::Buf<u32>, B::Buf<u32>)>,
    opts: &JoinOptions,
    budget: &Budget,
) -> Result<Matched<B, K>> {
    let sort = |keys: &B::Buf<K>, rows: Option<B::Buf<u32>>| -> Result<(B::Buf<K>, B::Buf<u32>)> {
        let rows = match rows {
            Some(rows) => rows,
            None => {
                let mut rows = b.alloc::<u32>(keys.len())?;
                b.iota(&mut rows, 0)?;
                rows
            }
        };
        b.sort_pairs(keys, &rows, 0..K::BITS)
    };
    let (left_ids, right_ids) = row_ids.unzip();
    let ((lk, lr), (rk, rr)) = ph.run("transform", || {
        Ok((sort(left, left_ids)?, sort(right, right_ids)?))
    })?;
    if opts.right_unique {
        let total = ph.run("transform", || {
            let (lo, hi) = b.sorted_bounds::<K, u32>(&rk, &rk)?;
            b.range_total(&lo, &hi)
        })?;
        if total != rk.len() as u64 {
            return Err(Error::DuplicateKey { side: "right" });
        }
    }
    ph.run("match", || {
        let (lo, hi) = b.sorted_bounds::<K, u32>(&lk, &rk)?;
        let left_only = match opts.kind {
            JoinKind::Inner => None,
            JoinKind::LeftSemi => Some(b.flagged_indices::<u32>(&b.range_flags(&lo, &hi, true)?)?),
            JoinKind::LeftAnti | JoinKind::LeftOuter => {
                Some(b.flagged_indices::<u32>(&b.range_flags(&lo, &hi, false)?)?)
            }
        };
        let pairs = match opts.kind {
            JoinKind::Inner | JoinKind::LeftOuter => {
                if budget.limited() {
                    let unmatched = left_only.as_ref().map_or(0, |u| u.len() as u64);
                    budget.check(b.range_total(&lo, &hi)?.saturating_add(unmatched))?;
                }
                Some(b.expand_ranges::<u32>(&lo, &hi)?)
            }
            _ => None,
        };
        Ok(Matched {
            pairs,
            left_only,
            sorted: Some((lr, rr)),
            partitioned: None,
            columns: None,
        })
    })
}

#[allow(clippy::too_many_arguments)] // the sides, the choices, the output's layout and budget
fn run_match<'k, B: JoinBackend, K: Key>(
    b: &B,
    ph: &mut Phases<'_, B>,
    plan: &mut Resolved<'k, B, K>,
    left: &B::Buf<K>,
    right: &'k B::Buf<K>,
    opts: &JoinOptions,
    layout: Layout<'_, B>,
    budget: &Budget,
) -> Result<Matched<B, K>> {
    let algorithm = plan.algorithm;
    let m = match (algorithm, plan.table.take()) {
        (Algorithm::NphjChained, Some(table)) => table_match(b, ph, &table, left, opts, budget)?,
        (Algorithm::NphjOpen, _) => hash_match(b, ph, left, right, opts, false, budget)?,
        (Algorithm::NphjChained, None) => hash_match(b, ph, left, right, opts, true, budget)?,
        (Algorithm::PhjUm | Algorithm::PhjOm, _) => partitioned_match(
            b,
            ph,
            algorithm == Algorithm::PhjUm,
            left,
            right,
            opts,
            layout,
            budget,
        )?,
        (Algorithm::SmjUm | Algorithm::SmjOm | Algorithm::Auto, _) => {
            merge_match(b, ph, left, right, plan.row_ids.take(), opts, budget)?
        }
    };
    // Checked again with the left rows a semi, anti or outer join keeps (the partitioned
    // joins refused pairs over the budget inside their match), before materializing.
    let pairs = match (&m.pairs, &m.columns) {
        (Some(p), _) => p.0.len() as u64,
        (None, Some((l, _))) => l.first().map_or(0, |c| c.len() as u64),
        (None, None) => 0,
    };
    budget.check(pairs + m.left_only.as_ref().map_or(0, |u| u.len() as u64))?;
    Ok(m)
}

/// `n` copies of `value`.
pub(crate) fn filled<B: Backend, T: joinkit_cuda::Element>(
    b: &B,
    n: usize,
    value: T,
) -> Result<B::Buf<T>> {
    let mut out = b.alloc::<T>(n)?;
    b.fill(&mut out, value)?;
    Ok(out)
}

/// `head` then `total - head.len()` copies of `fill`.
fn pad<B: Backend, T: joinkit_cuda::Element>(
    b: &B,
    head: &B::Buf<T>,
    total: usize,
    fill: T,
) -> Result<B::Buf<T>> {
    let mut out = filled(b, total, fill)?;
    b.copy_into(head, &mut out, 0)?;
    Ok(out)
}

pub(crate) fn stats<B: Backend>(
    b: &B,
    algorithm: Algorithm,
    opts: &JoinOptions,
    left_rows: usize,
    right_rows: usize,
    output_rows: u64,
    ph: &Phases<'_, B>,
) -> JoinStats {
    JoinStats {
        algorithm,
        kind: opts.kind,
        left_rows,
        right_rows,
        output_rows,
        phases: ph.phases.clone(),
        peak_memory_bytes: b.memory().map(|m| m.peak_bytes),
        sampled: None,
        reason: None,
        narrowed_keys: ph.narrowed_keys,
    }
}

/// Starts a join: waits for the work queued on the device, then counts peak memory from here.
/// The wait is measured, not only tidy: memory the caller freed just before (a previous
/// join's output) is then settled in the pool, which hands it out alike every time; joins
/// started without it placed their buffers differently from run to run, and the H200's
/// 2^27 ⋈ 2^28 4 B 2+2 wide match took 4.4–4.5 ms in most processes against 3.4 with it
/// (docs/results/joins.md). Every join synchronizes several times anyway.
pub(crate) fn begin_join<B: Backend>(b: &B) -> Result<()> {
    b.synchronize()?;
    b.reset_peak_memory();
    Ok(())
}

/// Joins two key columns and returns the output as row ids (gather maps), with statistics.
///
/// Output order: inner pairs (and, for left outer joins, the unmatched left rows after them);
/// within that, the order depends on the algorithm, and for the partitioned hash joins on
/// CUDA with `right_unique` it may differ from run to run (work items reserve their output
/// rows atomically): compare outputs as multisets.
///
/// # Errors
/// [`Error::SizeOverflow`] for a side of `2^32 - 1` rows or more, or an output that does not fit
/// memory addresses; [`Error::OutputOverBudget`] when the output would take more bytes than
/// [`JoinOptions::memory_budget`] (see there what counts; [`crate::join_rows_chunked`] gives it
/// in pieces); [`Error::DuplicateKey`] when `right_unique` was promised and broken;
/// allocation, driver and primitive errors.
pub fn join_rows<B: JoinBackend, K: Key>(
    b: &B,
    left: &B::Buf<K>,
    right: &B::Buf<K>,
    opts: &JoinOptions,
) -> Result<(RowPairs<B>, JoinStats)> {
    begin_join(b)?;
    check_rows(left.len())?;
    check_rows(right.len())?;
    let mut ph = Phases::new(b);
    let mut plan = resolve(b, &mut ph, opts, left, right, (0, 0))?;
    let budget = Budget::rows(opts);
    let m = run_match(
        b,
        &mut ph,
        &mut plan,
        left,
        right,
        opts,
        Layout::RowIds,
        &budget,
    )?;
    let rows = ph.run("materialize", || assemble_rows(b, opts.kind, m))?;
    let n = rows.left.len() as u64;
    let st = stats(b, plan.algorithm, opts, left.len(), right.len(), n, &ph);
    Ok((rows, plan.stats(st)))
}

/// A join's row-id output from its match: ids mapped to row ids where they are sorted
/// positions, a left outer join's unmatched rows after its pairs (right id [`NULL_ROW`]).
pub(crate) fn assemble_rows<B: JoinBackend, K: Key>(
    b: &B,
    kind: JoinKind,
    m: Matched<B, K>,
) -> Result<RowPairs<B>> {
    let (lmap, rmap) = match &m.sorted {
        Some((l, r)) => (Some(l), Some(r)),
        None => (None, None),
    };
    let ids = |v: B::Buf<u32>, rows_of| -> Result<B::Buf<u32>> {
        Ok(to_row_ids(b, &v, rows_of)?.unwrap_or(v))
    };
    let pairs = match m.pairs {
        Some((l, r)) => Some((ids(l, lmap)?, ids(r, rmap)?)),
        None => None,
    };
    let left_only = m.left_only.map(|l| ids(l, lmap)).transpose()?;
    Ok(match (kind, pairs, left_only) {
        (JoinKind::Inner, Some((l, r)), _) => RowPairs {
            left: l,
            right: Some(r),
        },
        (JoinKind::LeftOuter, Some((l, r)), Some(u)) => {
            let left = b.concat(&l, &u)?;
            let right = pad(b, &r, left.len(), NULL_ROW)?;
            RowPairs {
                left,
                right: Some(right),
            }
        }
        (_, _, Some(u)) => RowPairs {
            left: u,
            right: None,
        },
        _ => return Err(Error::Corrupt("a join kind's match lacks its parts".into())),
    })
}

/// Gathers every column of `cols` by `map` (the map's ids are valid by construction).
pub(crate) fn gather_columns<'a, B: JoinBackend>(
    b: &B,
    cols: impl IntoIterator<Item = &'a Column<B>>,
    map: &B::Buf<u32>,
) -> Result<Vec<Column<B>>> {
    cols.into_iter()
        .map(|c| Ok(map_column!(c, c, T => b.gather::<T, u32>(c, map, Bounds::Trust)?)))
        .collect()
}

/// Joins two tables and returns the payload columns of the output rows, with statistics.
///
/// GFUR algorithms (SMJ-UM, PHJ-UM, the non-partitioned hash joins) find row ids, then gather
/// each payload from the untransformed input. GFTR algorithms transform each payload column
/// into the order their match works in and gather from there at the matched positions, which
/// are clustered: SMJ-OM gathers each column into sorted order, one column at a time; PHJ-OM
/// carries each side's first payload column through its radix partition and partitions every
/// further column again with the keys, one at a time. So SMJ-OM holds at most one transformed
/// column per side, PHJ-OM at most two (the carried one and the current one) (Wu et al. §4.1).
/// A PHJ-OM inner join with one unsigned payload a side (`Column::U32` or `Column::U64`), two
/// `Column::U32` (carried as one interleaved 8-byte word) or two `Column::U64` (the second
/// partitioned in a pass of its own) has its match write the carried payloads themselves, so
/// nothing is gathered; with `right_unique` on CUDA, those output columns keep an allocation of
/// one row per left row, however few match. With [`JoinOptions::unpack_ids`] the `u32` payload
/// columns come back as `u64` ones, widened by that match as it writes one `u32` column a side,
/// else after the join.
///
/// # Errors
/// As [`join_rows`] ([`crate::join_columns_chunked`] gives an output over the budget in
/// pieces); [`Error::LengthMismatch`] for a payload column of another length than its table's
/// keys; [`Error::InvalidArgument`] for [`JoinOptions::unpack_ids`] of more than 32 low bits.
pub fn join_columns<B: JoinBackend, K: Key>(
    b: &B,
    left: &Table<B, K>,
    right: &Table<B, K>,
    opts: &JoinOptions,
) -> Result<(Materialized<B>, JoinStats)> {
    begin_join(b)?;
    opts.check_unpack_ids()?;
    left.check()?;
    right.check()?;
    check_rows(left.len())?;
    check_rows(right.len())?;
    let mut ph = Phases::new(b);
    let right_payload_bytes = if opts.kind.has_right_rows() {
        row_bytes(&right.payloads)
    } else {
        0
    };
    let mut plan = resolve(
        b,
        &mut ph,
        opts,
        &left.keys,
        &right.keys,
        (row_bytes(&left.payloads), right_payload_bytes),
    )?;
    let layout = match (
        plan.algorithm,
        opts.kind,
        &left.payloads[..],
        &right.payloads[..],
    ) {
        // The match writes the payloads themselves (narrow, and 2+2 wide of u32 or u64 columns).
        (Algorithm::PhjOm, JoinKind::Inner, l, r)
            if Layout::carries_all(l) && Layout::carries_all(r) =>
        {
            Layout::Payloads { left: l, right: r }
        }
        (Algorithm::PhjOm, ..) => Layout::Positions {
            left: left.payloads.first(),
            right: right
                .payloads
                .first()
                .filter(|_| opts.kind.has_right_rows()),
        },
        _ => Layout::RowIds,
    };
    let budget = Budget::columns(opts, &left.payloads, &right.payloads);
    let mut m = run_match(
        b,
        &mut ph,
        &mut plan,
        &left.keys,
        &right.keys,
        opts,
        layout,
        &budget,
    )?;
    let result = if let Some((l, r)) = m.columns.take() {
        let rows = l.first().map_or(0, |c| c.len() as u64);
        Materialized {
            left: l,
            right: r,
            right_valid: None,
            rows,
        }
    } else {
        materialize(b, &mut ph, plan.algorithm, opts, left, right, &m)?
    };
    let result = unpack_ids(b, &mut ph, opts, result)?;
    let st = stats(
        b,
        plan.algorithm,
        opts,
        left.len(),
        right.len(),
        result.rows,
        &ph,
    );
    Ok((result, plan.stats(st)))
}

/// `out` with its `u32` payload columns widened as [`JoinOptions::unpack_ids`] asks (none
/// where it is `None`; those the match wrote widened are `u64` already).
pub(crate) fn unpack_ids<B: JoinBackend>(
    b: &B,
    ph: &mut Phases<'_, B>,
    opts: &JoinOptions,
    mut out: Materialized<B>,
) -> Result<Materialized<B>> {
    let Some(low_bits) = opts.unpack_ids else {
        return Ok(out);
    };
    for col in out.left.iter_mut().chain(out.right.iter_mut()) {
        if let Column::U32(packed) = col {
            let wide = ph.run("materialize", || b.unpack_ids(packed, low_bits))?;
            *col = Column::U64(wide);
        }
    }
    Ok(out)
}

/// The output columns of a join whose match found ids (row ids, sorted or partitioned
/// positions): each side's payloads gathered, transformed first where the algorithm is GFTR.
pub(crate) fn materialize<B: JoinBackend, K: Key>(
    b: &B,
    ph: &mut Phases<'_, B>,
    algorithm: Algorithm,
    opts: &JoinOptions,
    left: &Table<B, K>,
    right: &Table<B, K>,
    m: &Matched<B, K>,
) -> Result<Materialized<B>> {
    // For one side's columns: the output rows' values of each column, with `ids` positions
    // (GFTR) or row ids (GFUR).
    let side = |ph: &mut Phases<'_, B>,
                cols: &[Column<B>],
                src: Source<'_, B, K>,
                ids: &[&B::Buf<u32>]|
     -> Result<Vec<Vec<Column<B>>>> {
        let mut out: Vec<Vec<Column<B>>> = ids.iter().map(|_| Vec::new()).collect();
        // GFTR: transform one column at a time, take what the output needs, drop it.
        let take = |ph: &mut Phases<'_, B>, out: &mut Vec<Vec<Column<B>>>, t: &Column<B>| {
            for (o, pos) in out.iter_mut().zip(ids) {
                o.push(ph.run("materialize", || {
                    Ok(map_column!(t, t, T => b.gather::<T, u32>(t, pos, Bounds::Trust)?))
                })?);
            }
            Ok::<(), Error>(())
        };
        match src {
            Source::Sorted(perm) => {
                for c in cols {
                    let t: Column<B> = ph.run("transform", || {
                        Ok(map_column!(c, c, T => b.gather::<T, u32>(c, perm, Bounds::Trust)?))
                    })?;
                    take(ph, &mut out, &t)?;
                }
            }
            Source::Partitioned(g, keys) => {
                for index in 0..cols.len() {
                    let owned = ph.run("transform", || g.transform(b, keys, cols, index))?;
                    let t = owned
                        .as_ref()
                        .or(g.first.as_ref())
                        .ok_or_else(|| Error::Corrupt("no partitioned payload column".into()))?;
                    take(ph, &mut out, t)?;
                }
            }
            Source::Rows(rows_of) => {
                for (o, map) in out.iter_mut().zip(ids) {
                    let rows = ph.run("materialize", || to_row_ids(b, map, rows_of))?;
                    *o = ph.run("materialize", || {
                        gather_columns(b, cols, rows.as_ref().unwrap_or(map))
                    })?;
                }
            }
        }
        Ok(out)
    };

    let (lmap, rmap) = match (&m.partitioned, &m.sorted) {
        (Some((l, r)), _) => (
            Source::Partitioned(l, &left.keys),
            Source::Partitioned(r, &right.keys),
        ),
        (None, Some((l, r))) if algorithm == Algorithm::SmjOm => {
            (Source::Sorted(l), Source::Sorted(r))
        }
        (None, Some((l, r))) => (Source::Rows(Some(l)), Source::Rows(Some(r))),
        (None, None) => (Source::Rows(None), Source::Rows(None)),
    };
    Ok(match (opts.kind, &m.pairs, &m.left_only) {
        (JoinKind::Inner, Some((pl, pr)), _) => {
            let l = side(ph, &left.payloads, lmap, &[pl])?
                .pop()
                .unwrap_or_default();
            let r = side(ph, &right.payloads, rmap, &[pr])?
                .pop()
                .unwrap_or_default();
            Materialized {
                left: l,
                right: r,
                right_valid: None,
                rows: pl.len() as u64,
            }
        }
        (JoinKind::LeftOuter, Some((pl, pr)), Some(u)) => {
            let mut parts = side(ph, &left.payloads, lmap, &[pl, u])?;
            let unmatched = parts.pop().unwrap_or_default();
            let matched = parts.pop().unwrap_or_default();
            let r = side(ph, &right.payloads, rmap, &[pr])?
                .pop()
                .unwrap_or_default();
            let total = pl.len() + u.len();
            ph.run("materialize", || {
                let left = matched
                    .iter()
                    .zip(&unmatched)
                    .map(|(a, c)| a.concat(b, c))
                    .collect::<Result<Vec<_>>>()?;
                let right = r
                    .iter()
                    .map(|c| Ok(map_column!(c, c, T => pad(b, c, total, T::default())?)))
                    .collect::<Result<Vec<_>>>()?;
                let valid = pad(b, &filled(b, pl.len(), 1u32)?, total, 0u32)?;
                Ok(Materialized {
                    left,
                    right,
                    right_valid: Some(valid),
                    rows: total as u64,
                })
            })?
        }
        (_, _, Some(u)) => {
            let l = side(ph, &left.payloads, lmap, &[u])?
                .pop()
                .unwrap_or_default();
            Materialized {
                left: l,
                right: Vec::new(),
                right_valid: None,
                rows: u.len() as u64,
            }
        }
        _ => return Err(Error::Corrupt("a join kind's match lacks its parts".into())),
    })
}

/// Where one side's output ids point, for materialization.
enum Source<'a, B: Backend, K: Key> {
    /// Row ids, or (GFUR sort-merge joins) sorted positions mapped through these row ids.
    Rows(Option<&'a B::Buf<u32>>),
    /// SMJ-OM (GFTR): sorted positions; payload columns are transformed with the permutation.
    Sorted(&'a B::Buf<u32>),
    /// PHJ-OM (GFTR): partitioned positions; payload columns are partitioned like the keys
    /// (the side's input keys, given here, or their mixed form).
    Partitioned(&'a PartitionedSide<B, K>, &'a B::Buf<K>),
}

impl<B: Backend, K: Key> Clone for Source<'_, B, K> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend, K: Key> Copy for Source<'_, B, K> {}

/// Row ids for sorted positions: `ids` mapped through the sorted row ids (sort-merge joins), or
/// `None` when `ids` are row ids already (hash joins).
fn to_row_ids<B: JoinBackend>(
    b: &B,
    ids: &B::Buf<u32>,
    rows_of: Option<&B::Buf<u32>>,
) -> Result<Option<B::Buf<u32>>> {
    rows_of
        .map(|rows| b.gather(rows, ids, Bounds::Trust))
        .transpose()
}
