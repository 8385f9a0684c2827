//! Choosing an algorithm from what is known about the inputs: Wu et al.'s decision tree (VLDB
//! 2024: sizes, payload widths, match ratio, skew), calibrated by our H200 measurements
//! (docs/results/joins.md), over statistics [`sample_stats`] takes from the inputs. This is what
//! [`Algorithm::Auto`] runs.
//!
//! **Duplicate right keys (M:N) come first.** Unless the right keys are promised unique
//! ([`crate::JoinOptions::right_unique`]), the right side is sampled (more rows the longer it
//! is, [`right_sample_rows`]; on CUDA one launch, [`SampleRuns`]) for its rows per key as its
//! rows see them ([`JoinInputStats::right_rows_per_key`]). H200 sweeps of |R| = |S| = 2^18 …
//! 2^26 with 1 … 1024 rows a key on both sides (docs/results/joins.md, "M:N joins") give:
//! - **semi and anti joins** need one row of a key: NPHJ-chained finds it at the head of the
//!   key's bucket whatever the key's rows (0.07 ms at 2^18 from 1 to 1024 rows a key). It
//!   runs on a small right side (at most 2^20 rows; unique keys too, where it beats NPHJ-open
//!   by 5-25 % at |S| = |R| and 2|R|) and, with duplicates, while the right
//!   table is cached or its distinct keys are few (at most 1.5 × 2^20: 2^24 rows of 16 a
//!   key, 1.03 ms against PHJ-OM's 1.19; of 8 a key PHJ-OM 1.13 against 1.28); on the CPU,
//!   few distinct keys take NPHJ-open's key-set table instead (ahead on 16 cores);
//! - **inner and outer joins** write every pair: SMJ-OM's merge-path expansion spreads any
//!   run over the threads, where a hash join's probe thread writes its row's pairs one by
//!   one. SMJ-OM from `log2(rows) - 16` rows a key (the sort's cost grows with the size): 6
//!   at 2^22, 8 at 2^24, 10 at 2^26 (PHJ-OM 13.4 against SMJ-OM 15.0 ms at 8, SMJ-OM 17.0
//!   against 20.8 at 12); on a small right side (at most 2^20 rows) NPHJ-chained below `12
//!   sqrt(2^18 / rows)` rows a key (12 at 2^18, 6 at 2^20), SMJ-OM from there. On the CPU,
//!   whose PHJ-OM no longer slows with runs (a partition's table finds a key's rows) and
//!   cuts few partitions' probe rows over the threads, inner joins run PHJ-OM at any rows a
//!   key (beyond a small side both sides skewed still merge, branch 2 below); on a small side
//!   (fewer PHJ-OM partitions than threads, [`ChoiceParams::small_side`]), where a table that
//!   stays in the cache is cheaper, NPHJ-chained below 3 rows a key (left outer joins below
//!   8), and PHJ-OM otherwise, skewed sides too; left outer joins SMJ-OM from 128 rows a key,
//!   on a small side and beyond;
//! - NPHJ-open is left out wherever keys repeat: its (hash, row) slots put a key's rows in a
//!   run that every probe of the key walks (2^22 rows, 2 a key: 0.99 ms against PHJ-OM's
//!   0.51). Its semi and anti joins keep one slot a distinct key instead and stay flat.
//!
//! The unique-key tree's reasoning, with the H200 figures behind each threshold (|R| = 2^27,
//! |S| = 2^28):
//! 1. **Small build side**: a global hash table that stays in the cache (L2 on a GPU) beats
//!    any partitioning pass: NPHJ-open. (NPHJ-open leads up to |R| = 2^22, a 64 MiB table
//!    against 60 MiB of L2.)
//! 2. **Both sides skewed on one key** (a hot key with many build rows, M:N): the sort-merge
//!    join's merge-path expansion balances any multiplicity: SMJ-OM. (Wu's tree; none of the
//!    benchmarked cases has it, so it is not calibrated. Not on a small CPU side, where few
//!    distinct keys trip it and PHJ-OM, which cuts the few partitions over the threads, led.)
//! 3. **Wide payloads and few matches**: GFTR transforms every payload column, most of which
//!    the output throws away; GFUR gathers only the matches' payloads from the inputs: PHJ-UM.
//!    Where the two cross grows with what GFTR's transform moves beyond GFUR's 4-byte row
//!    ids, so the threshold grows with the wider side's payload bytes (0.04 a byte beyond 4 on
//!    CUDA, at most 0.6). H200 crossovers (2026-11-23, `c50ecc2`, freed allocations reused,
//!    which sped GFTR's transform more than GFUR): 8 bytes a side, 0.1–0.14 (4 B 2+2: at match
//!    ratio 0.1 PHJ-UM 11.8 ms against PHJ-OM 12.8, at 0.3 PHJ-OM 12.9 against 17.4; 8 B
//!    narrow: 13.6 against 13.6 at 0.1, PHJ-OM 13.6 against 16.6 at 0.3): threshold 0.16; 12
//!    bytes (4 B 3+3, partitioned column by column), 0.3–0.33 (at 0.2 PHJ-UM 17.6 against
//!    21.8, at 0.3 20.6–21.6 against 22.1–22.2, at 0.4 PHJ-OM 22.5 against 25.7): 0.32 (0.035
//!    a byte had Auto 12.6 % behind PHJ-UM at 0.3); 16 bytes (8 B 2+2, the second `u64`
//!    column in a pass of its own), 0.43 (at 0.4 PHJ-UM 24.1 against 24.7, at 0.5 PHJ-OM 24.9
//!    against 27.0): 0.48. Before that reuse the crossovers were 0.15–0.2, 0.38–0.45 and
//!    0.53–0.63, and 0.05 a byte. A single threshold of 0.25 had Auto 35 % behind PHJ-UM on
//!    8 B 2+2 at 0.3. Not on the CPU, whose bucket-chain partition makes PHJ-UM the slower at
//!    every ratio measured ([`CoPartitionJoin::gfur_ratio_per_payload_byte`] is 0 there, and
//!    the match ratio is not sampled).
//! 4. **Otherwise**: PHJ-OM (GFTR), the fastest narrow join at every match ratio from 0.1 to
//!    1, and in every all-matching case (narrow and wide, 4 and 8 B, Zipf 1.0), on the H200
//!    and on the CPU.

use std::fmt;

use joinkit_cuda::{Backend, Error, Key, Result};
use joinkit_hashtable::{HashTable, HashTables, TableConfig};
use joinkit_primitives::{Bounds, Gather};

use crate::copart::CoPartitionJoin;
use crate::sample::{SampleGroup, SampleRuns, sample_row};
use crate::{Algorithm, JoinKind, JoinOptions};

/// Rows [`sample_stats`] takes from the left side (fewer when it is shorter).
pub const SAMPLE_ROWS: usize = 1 << 12;

/// Right rows up to which an inner or left outer join counts as small on a CPU pool of
/// `threads` threads ([`ChoiceParams::small_side`]): the most that PHJ-OM cuts into fewer
/// partitions than threads (its partitions hold at most `half_piece` rows each and are at least
/// 2, `crate::phj::radix_bits`), so that its match cuts their probe rows over the threads,
/// each range building its partition's table again, and a single table that stays in the
/// cache (NPHJ-chained) can be cheaper: 2^17 rows on 9 to 16 threads, 2^16 on 5 to 8, 2^15 on
/// 3 and 4, none on 2. Exact up to 256 threads; beyond, PHJ-OM keeps a radix bit fewer while
/// its partitions fit 3/4 of a piece, so its fewer partitions reach a little further.
/// Measured on the H200 host's CPU (twentieth and twenty-first sessions, |R| = |S| = 2^14 …
/// 2^20, 2 … 1024 rows a key, 4, 8 and 16 threads; docs/results/joins.md).
fn small_side_rows(threads: usize, half_piece: usize) -> usize {
    match threads.checked_sub(1) {
        Some(below) if below >= 2 => (1usize << below.ilog2()).saturating_mul(half_piece),
        _ => 0,
    }
}

/// Right rows a key from which a CPU left outer join runs SMJ-OM, on a small side and beyond:
/// where the outer join's pass over the left rows, added to PHJ-OM's match, catches up with
/// the merge. H200 host, each algorithm in its own process, since PHJ-OM's item table groups a
/// piece's rows by key (twenty-first and twenty-second sessions; 4, 8 and 16 threads, 2^14 …
/// 2^20 rows): at 64 a key PHJ-OM 1.13-1.23× ahead of SMJ-OM at every size, at 96 level (2^17,
/// 2^18: 0.99-1.00; 2^20 1.03× ahead), at 128 level or ahead (1.03-1.08×; 2^18 0.99), at 256
/// level (0.95-1.08), at 1024 SMJ-OM 1.01-1.04× ahead. Inner joins stay with PHJ-OM, whose
/// match cuts a few partitions' probe rows over the threads.
const CPU_OUTER_MERGE_ROWS_PER_KEY: f64 = 128.0;

/// Right rows a key below which an inner join on a small CPU side runs NPHJ-chained rather
/// than PHJ-OM: at 2 a key NPHJ-chained led by 1.06-1.6× (2^14 on 4, 8, 16 threads), at 4 the
/// two trade places (2^16 on 16 threads NPHJ-chained up to 1.25× ahead; 2^14 and 2^15 on 4
/// threads and 2^17 on 16 PHJ-OM up to 1.23× ahead), from 8 PHJ-OM led (2^17 on 16 threads:
/// 4.25-4.62 ms against 5.16-6.00). 6 instead of 3 picked no better over the twentieth
/// session's runs.
const CPU_CHAINED_INNER_ROWS_PER_KEY: f64 = 3.0;

/// Right rows a key below which a left outer join on a small CPU side runs NPHJ-chained rather
/// than PHJ-OM: between the 4 and 16 measured on either side. At 2 and 4 a key NPHJ-chained
/// led (16 threads, 2^15 of 2: 2.25 ms against PHJ-OM's 3.11), at 16 PHJ-OM led or was near
/// (2^17: 8.54 against NPHJ-chained's 11.47; 2^14: 3.16 against 2.86, 1.10× behind) once its
/// match cut few partitions over the threads, where NPHJ-chained fell to 1.47× behind.
const CPU_CHAINED_OUTER_ROWS_PER_KEY: f64 = 8.0;

/// What is known about a join's inputs (exact sizes, sampled ratios).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JoinInputStats {
    /// Left (probe, S) rows.
    pub left_rows: usize,
    /// Right (build, R) rows.
    pub right_rows: usize,
    /// Key width in bytes (4 or 8).
    pub key_bytes: usize,
    /// Bytes of payload per left row the output carries (all left payload columns).
    pub left_payload_bytes: usize,
    /// Bytes of payload per right row the output carries (0 for semi and anti joins, and for
    /// row-id outputs).
    pub right_payload_bytes: usize,
    /// Fraction of left rows with a match (sampled; 1.0 for PK-FK joins that all match), or
    /// `None` when not measured (it costs a read of the right keys, and only matters to
    /// [`choose`] for wide payloads).
    pub match_ratio: Option<f64>,
    /// Share of the most frequent key among sampled left keys (about `1 / distinct` when
    /// uniform; 0.07 for Zipf 1.0 over 2^20 keys); sampled only when the right side's share
    /// reaches [`ChoiceParams::skew_share`] and the choice turns on it, or the right keys are
    /// promised unique and few enough to look skewed
    /// ([`ChoiceParams::unique_side_can_look_skewed`]; then the left side is sampled first); 0
    /// otherwise.
    pub left_top_key_share: f64,
    /// Share of the most frequent key among sampled right keys (0 or `1 / rows` when unique);
    /// for right keys promised unique, sampled only when the left side's share reaches
    /// [`ChoiceParams::skew_share`] (the tree looks at it only then), 0 otherwise.
    pub right_top_key_share: f64,
    /// The right side's rows per key as its rows see them: `1 + Σ m (m - 1) / rows` over its
    /// keys' row counts `m` (1 for unique keys, `M` when every key has `M` rows; a left key
    /// drawn like the right ones meets this many rows). Estimated from the sampled right keys'
    /// equal pairs (exact when every row is sampled); `None` when the right keys were promised
    /// unique and not sampled for it.
    pub right_rows_per_key: Option<f64>,
}

/// Why [`choose`] picked its algorithm (what a join's statistics report for
/// [`Algorithm::Auto`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChoiceReason {
    /// Right keys promised unique in a table that stays in the cache: NPHJ-open.
    CachedTable,
    /// A small right side not promised unique, few rows a key (or a semi or anti join):
    /// NPHJ-chained, whose table stays in the cache and finds a key's rows from its bucket.
    SmallRightSide,
    /// Duplicate right keys, few distinct ones, and a semi or anti join, which needs one row
    /// of a key: NPHJ-chained finds it at the head of the key's bucket.
    FewDistinctKeys,
    /// Many right rows a key in an inner or outer join: SMJ-OM's merge path spreads each run
    /// over the threads.
    ManyRowsPerKey,
    /// Both sides skewed on one key: SMJ-OM (Wu's tree).
    SkewedSides,
    /// Wide payloads and few matches: GFUR (PHJ-UM) gathers only the matches' payloads.
    WideFewMatches,
    /// None of the above: PHJ-OM (GFTR).
    Partitioned,
}

impl fmt::Display for ChoiceReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::CachedTable => "unique right keys, the table stays in cache",
            Self::SmallRightSide => "small right side, few rows a key",
            Self::FewDistinctKeys => "duplicate right keys, few distinct, one row needed",
            Self::ManyRowsPerKey => "many right rows a key",
            Self::SkewedSides => "both sides skewed on one key",
            Self::WideFewMatches => "wide payloads, few matches",
            Self::Partitioned => "partitioned by default",
        })
    }
}

/// When an inner or outer join with duplicate right keys runs SMJ-OM rather than a hash join:
/// where the hash joins' matches slow with the runs of equal keys more than the sort costs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MergeRule {
    /// From `log2(rows)` minus this many right rows a key, at least 2 (rows: the mean of
    /// both sides): the H200, where the sort's share shrinks as the output grows.
    Log2RowsMinus(f64),
    /// Never: the CPU, where PHJ-OM led SMJ-OM in inner joins at every rows a key measured (up
    /// to 512 with a partition a thread; on small sides, whose few partitions its match cuts
    /// over the threads, up to 128 and 1024 but on 2^15 rows).
    Never,
}

/// The thresholds of [`choose`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChoiceParams {
    /// Build sides up to this many bytes of table (16 bytes a row) stay in the cache: NPHJ-open.
    /// 0 where partitioning wins at every size (the CPU).
    pub cached_table_bytes: usize,
    /// Output payload bytes per row (both sides together) from which GFUR can pay.
    pub wide_payload_bytes: usize,
    /// A wide join runs GFUR (PHJ-UM) below a match ratio of this much per payload byte of
    /// its wider side beyond 4 ([`ChoiceParams::gfur_threshold`]); 0: never.
    pub gfur_ratio_per_payload_byte: f64,
    /// The highest such threshold (the highest crossover measured).
    pub gfur_max_ratio: f64,
    /// Top-key shares from which both sides count as skewed on one key.
    pub skew_share: f64,
    /// Right rows per key ([`JoinInputStats::right_rows_per_key`]) from which the right side
    /// counts as duplicated.
    pub duplicated_rows_per_key: f64,
    /// When inner and outer joins with duplicate right keys run SMJ-OM.
    pub merge: MergeRule,
    /// Right sides up to this many rows run NPHJ-chained for semi and anti joins (unique keys
    /// too); not promised unique, for inner and outer joins below
    /// [`ChoiceParams::chained_merge_threshold`] rows a key, SMJ-OM from there). 0: none.
    pub chained_max_right_rows: usize,
    /// That threshold at 2^18 right rows; it falls with the square root of the rows.
    pub chained_merge_rows_per_key: f64,
    /// Semi and anti joins with duplicate right keys run [`ChoiceParams::few_keys_join`] when
    /// the right side has at most this many distinct keys (estimated).
    pub chained_max_distinct_keys: usize,
    /// The hash join of those: NPHJ-chained (a key's first row at the head of its bucket) or
    /// NPHJ-open (its key-set table, one slot a distinct key).
    pub few_keys_join: Algorithm,
    /// Left outer joins with duplicate right keys run SMJ-OM from this many right rows a key
    /// whatever their pairs (the CPU, on a [`ChoiceParams::small_side`] too); infinite where
    /// [`ChoiceParams::merge`] decides for every kind (the GPU).
    pub outer_merge_rows_per_key: f64,
    /// Inner and left outer joins with duplicate right keys and a right side of at most this
    /// many rows ([`ChoiceParams::small_side`]) run NPHJ-chained on few rows a key, PHJ-OM
    /// above, and left outer ones SMJ-OM from [`ChoiceParams::outer_merge_rows_per_key`]. 0:
    /// none (the GPU, whose small right sides [`ChoiceParams::chained_max_right_rows`] covers).
    pub small_side_max_right_rows: usize,
    /// Right rows a key below which such a small side's inner join runs NPHJ-chained.
    pub small_side_chained_inner_rows_per_key: f64,
    /// Right rows a key below which such a small side's left outer join runs NPHJ-chained.
    pub small_side_chained_outer_rows_per_key: f64,
}

impl ChoiceParams {
    /// The thresholds for `b`: its cache size (see [`CoPartitionJoin::cached_table_bytes`]),
    /// GFUR's match ratio per payload byte
    /// ([`CoPartitionJoin::gfur_ratio_per_payload_byte`]), and the payload, GFUR cap and skew
    /// thresholds measured on the H200; the duplicate-key thresholds measured on the H200 and
    /// on the 2-core CPU.
    pub fn for_backend<B: CoPartitionJoin>(b: &B) -> Self {
        let cached = b.cached_table_bytes();
        let gpu = b.kind() != joinkit_cuda::DeviceKind::Cpu;
        Self {
            cached_table_bytes: cached.unwrap_or(0),
            wide_payload_bytes: 16,
            gfur_ratio_per_payload_byte: b.gfur_ratio_per_payload_byte(),
            gfur_max_ratio: 0.6,
            skew_share: 0.01,
            duplicated_rows_per_key: 1.5,
            merge: if gpu {
                MergeRule::Log2RowsMinus(16.0)
            } else {
                MergeRule::Never
            },
            chained_max_right_rows: if gpu { 1 << 20 } else { 0 },
            chained_merge_rows_per_key: 12.0,
            // H200, 2^24 rows: NPHJ-chained ahead at 2^20 distinct keys, behind at 2^21 (a
            // margin for the estimate's error); CPU, 2^16 a side: ahead from 16 rows a key
            // (4096 distinct keys).
            chained_max_distinct_keys: if gpu { 3 << 19 } else { 1 << 13 },
            // CPU, 2^16 rows of 16 … 1024 a key: NPHJ-open's key-set table 1.13-1.94× ahead of
            // NPHJ-chained on 16 cores (two runs); on 2 cores 0.74-1.17× (within its noise).
            few_keys_join: if gpu {
                Algorithm::NphjChained
            } else {
                Algorithm::NphjOpen
            },
            // CPU left outer joins with duplicate right keys: PHJ-OM (or NPHJ-chained on few
            // rows a key of a small side) below [`CPU_OUTER_MERGE_ROWS_PER_KEY`], SMJ-OM from
            // there. Unique keys stay with PHJ-OM (16 cores, 2^18: 5.82 ms against
            // NPHJ-chained's 7.99).
            outer_merge_rows_per_key: if gpu {
                f64::INFINITY
            } else {
                CPU_OUTER_MERGE_ROWS_PER_KEY
            },
            // Small sides: where PHJ-OM's partitions are fewer than the threads
            // ([`small_side_rows`]), a table that stays in the cache (NPHJ-chained) leads on
            // few rows a key, and the merge path (SMJ-OM) on many in left outer joins.
            small_side_max_right_rows: if gpu {
                0
            } else {
                small_side_rows(rayon::current_num_threads(), b.build_capacity::<u32>() / 2)
            },
            small_side_chained_inner_rows_per_key: CPU_CHAINED_INNER_ROWS_PER_KEY,
            small_side_chained_outer_rows_per_key: CPU_CHAINED_OUTER_ROWS_PER_KEY,
        }
    }

    /// Whether an inner or left outer join with duplicate right keys and a right side of
    /// `right_rows` rows counts as small ([`ChoiceParams::small_side_max_right_rows`]).
    pub fn small_side(&self, right_rows: usize) -> bool {
        right_rows <= self.small_side_max_right_rows
    }

    /// Whether a side of `rows` unique keys can look skewed: its most frequent key holds
    /// `1 / rows` of it, which reaches [`ChoiceParams::skew_share`] only up to `1 / skew_share`
    /// rows. Above, the tree's both-sides-skewed branch is out of reach of a join whose right
    /// keys are promised unique, and the plan samples neither side's skew for it.
    pub fn unique_side_can_look_skewed(&self, rows: usize) -> bool {
        rows as f64 * self.skew_share <= 1.0
    }

    /// Whether the tree looks at the match ratio for output rows of `payload_bytes` (both
    /// sides): for wide joins, where GFUR can win on this backend. Sampling it costs a read of
    /// the right keys.
    pub fn wants_match_ratio(&self, payload_bytes: usize) -> bool {
        self.is_wide(payload_bytes) && self.gfur_ratio_per_payload_byte > 0.0
    }

    /// The match ratio below which a join of `left` and `right` payload bytes a row runs GFUR:
    /// [`ChoiceParams::gfur_ratio_per_payload_byte`] for each byte of the wider side beyond a
    /// 4-byte row id, at most [`ChoiceParams::gfur_max_ratio`].
    pub fn gfur_threshold(&self, left: usize, right: usize) -> f64 {
        let beyond_row_id = left.max(right).saturating_sub(4) as f64;
        (self.gfur_ratio_per_payload_byte * beyond_row_id).min(self.gfur_max_ratio)
    }

    /// Whether the global hash table of a build side of `right_rows` (16 bytes a row at load
    /// 0.5) stays in the cache.
    pub fn table_is_cached(&self, right_rows: usize) -> bool {
        right_rows.saturating_mul(16) <= self.cached_table_bytes
    }

    /// Whether an output row carrying `payload_bytes` (both sides) counts as wide.
    pub fn is_wide(&self, payload_bytes: usize) -> bool {
        payload_bytes >= self.wide_payload_bytes
    }

    /// Whether an inner or outer join of `stats` with `per_key` right rows a key runs SMJ-OM
    /// ([`ChoiceParams::merge`]).
    pub fn merges(&self, stats: &JoinInputStats, per_key: f64) -> bool {
        match self.merge {
            MergeRule::Log2RowsMinus(minus) => {
                let rows = (stats.left_rows / 2 + stats.right_rows / 2).max(1) as f64;
                per_key >= (rows.log2() - minus).max(2.0)
            }
            MergeRule::Never => false,
        }
    }

    /// Whether a right side of `right_rows` rows is small enough for NPHJ-chained to run
    /// whatever its rows a key in semi and anti joins and, for few rows a key, in inner and
    /// outer joins ([`ChoiceParams::chained_max_right_rows`]).
    pub fn small_right_side(&self, right_rows: usize) -> bool {
        right_rows <= self.chained_max_right_rows
    }

    /// Whether a join of `kind` with a right side of `right_rows` rows not promised unique runs
    /// NPHJ-chained or SMJ-OM, whichever its sampled rows a key say: an inner or outer join on
    /// a [`ChoiceParams::small_right_side`].
    pub fn chained_or_merge(&self, kind: JoinKind, right_rows: usize) -> bool {
        kind.has_right_rows() && self.small_right_side(right_rows)
    }

    /// Whether a semi or anti join with a right side of `right_rows` rows not promised
    /// unique runs NPHJ-chained whatever its rows a key: at most
    /// [`ChoiceParams::chained_max_right_rows`], or a cached table (H200, 2^22 rows: 0.22-0.31
    /// ms from 2 to 256 rows a key, the best; 1 a key, 0.47-0.51 against NPHJ-open's 0.41-0.45).
    pub fn chained_takes_semi_join(&self, right_rows: usize) -> bool {
        self.small_right_side(right_rows)
            || (self.chained_max_right_rows > 0 && self.table_is_cached(right_rows))
    }

    /// Right rows a key from which an inner or outer join with a small right side of
    /// `right_rows` rows ([`ChoiceParams::chained_max_right_rows`]) runs SMJ-OM instead of
    /// NPHJ-chained.
    pub fn chained_merge_threshold(&self, right_rows: usize) -> f64 {
        self.chained_merge_rows_per_key * ((1u64 << 18) as f64 / right_rows.max(1) as f64).sqrt()
    }
}

/// The algorithm the decision tree picks for `stats` and a join of `kind` (never
/// [`Algorithm::Auto`]), and why; see the module docs for the tree.
pub fn choose(
    stats: &JoinInputStats,
    kind: JoinKind,
    params: &ChoiceParams,
) -> (Algorithm, ChoiceReason) {
    use ChoiceReason as Why;
    // Right keys not promised unique were sampled for their rows per key.
    if let Some(per_key) = stats.right_rows_per_key {
        let duplicated = per_key >= params.duplicated_rows_per_key;
        if duplicated && kind == JoinKind::LeftOuter && per_key >= params.outer_merge_rows_per_key {
            return (Algorithm::SmjOm, Why::ManyRowsPerKey);
        }
        if duplicated && kind.has_right_rows() && params.small_side(stats.right_rows) {
            let chained_below = if kind == JoinKind::LeftOuter {
                params.small_side_chained_outer_rows_per_key
            } else {
                params.small_side_chained_inner_rows_per_key
            };
            // Not the tree's SMJ-OM for both sides skewed either (the left side's share is
            // left out): PHJ-OM's match cuts a few partitions' probe rows over the threads (16
            // threads, 2^16 of 1024 a key, 64 keys: 42.9 ms against SMJ-OM's 57.1).
            let unskewed = JoinInputStats {
                left_top_key_share: 0.0,
                ..*stats
            };
            return if per_key < chained_below {
                (Algorithm::NphjChained, Why::SmallRightSide)
            } else {
                partitioned(&unskewed, params)
            };
        }
        if params.chained_or_merge(kind, stats.right_rows) {
            return if per_key < params.chained_merge_threshold(stats.right_rows) {
                (Algorithm::NphjChained, Why::SmallRightSide)
            } else {
                (Algorithm::SmjOm, Why::ManyRowsPerKey)
            };
        }
        if kind.has_right_rows() {
            if duplicated && params.merges(stats, per_key) {
                return (Algorithm::SmjOm, Why::ManyRowsPerKey);
            }
        } else if params.chained_takes_semi_join(stats.right_rows) {
            return (Algorithm::NphjChained, Why::SmallRightSide);
        } else if duplicated
            && stats.right_rows as f64 / per_key <= params.chained_max_distinct_keys as f64
        {
            return (params.few_keys_join, Why::FewDistinctKeys);
        }
        // Otherwise the partitioned joins where keys repeat, and for inner and outer joins
        // whatever the sample saw: NPHJ-open on keys not promised unique has (hash, row)
        // slots, which put a key's rows in runs its probes walk and re-read the build key at
        // every hash match (H200, 2^22 rows, 1 a key: 0.75 ms against PHJ-OM's 0.48).
        if duplicated || kind.has_right_rows() {
            return partitioned(stats, params);
        }
    }
    if let Some(choice) = choose_unsampled((stats.left_rows, stats.right_rows), true, kind, params)
    {
        return choice;
    }
    partitioned(stats, params)
}

/// The tree's choices that no sample would change (a plan costs 30-50 us on an H200, a third of
/// such a join), for sides of `left_rows` and `right_rows` rows (`right_unique`: right keys
/// promised unique), or `None`: sample first.
/// - Semi and anti joins on a small right side need one row a key, which NPHJ-chained finds at
///   the head of its bucket ([`ChoiceParams::chained_takes_semi_join`]; for unique keys only up
///   to [`ChoiceParams::chained_max_right_rows`], where it beats NPHJ-open's probe: H200, 2^18
///   rows 0.098-0.107 ms against 0.120-0.143, 2^20 0.141-0.197 against 0.165-0.211, at
///   |S| = |R| and 2|R|).
/// - Inner and outer joins of a small unique right side: NPHJ-chained where the left side is
///   no longer (H200, |S| = |R|: 2^18 rows 0.116 / 0.186 ms inner / outer against NPHJ-open's
///   0.137 / 0.200, 2^20 0.187 / 0.281 against 0.199 / 0.290), NPHJ-open, the cached table,
///   where it is longer (|S| = 2|R|: open ahead in 3 of 4 cells by 3-9 %, behind by 5 % in the
///   fourth).
/// - Unique keys in a cached table: NPHJ-open.
pub fn choose_unsampled(
    (left_rows, right_rows): (usize, usize),
    right_unique: bool,
    kind: JoinKind,
    params: &ChoiceParams,
) -> Option<(Algorithm, ChoiceReason)> {
    let small = if right_unique {
        params.small_right_side(right_rows)
    } else {
        params.chained_takes_semi_join(right_rows)
    };
    let chained = !kind.has_right_rows() || (right_unique && left_rows <= right_rows);
    if small && chained {
        return Some((Algorithm::NphjChained, ChoiceReason::SmallRightSide));
    }
    (right_unique && params.table_is_cached(right_rows))
        .then_some((Algorithm::NphjOpen, ChoiceReason::CachedTable))
}

/// The tree below its cached-table branch: SMJ-OM for both sides skewed, GFUR for wide
/// payloads with few matches, GFTR otherwise.
fn partitioned(stats: &JoinInputStats, params: &ChoiceParams) -> (Algorithm, ChoiceReason) {
    if stats.left_top_key_share >= params.skew_share
        && stats.right_top_key_share >= params.skew_share
    {
        return (Algorithm::SmjOm, ChoiceReason::SkewedSides);
    }
    let wide = params.is_wide(stats.left_payload_bytes + stats.right_payload_bytes);
    let threshold = params.gfur_threshold(stats.left_payload_bytes, stats.right_payload_bytes);
    let few_matches = stats.match_ratio.is_some_and(|r| r < threshold);
    if wide && few_matches {
        return (Algorithm::PhjUm, ChoiceReason::WideFewMatches);
    }
    (Algorithm::PhjOm, ChoiceReason::Partitioned)
}

/// Right rows [`sample_stats`] takes from a right side of `rows` rows: `4 sqrt(rows)`, at
/// least 1024 and at most 2^16 (all rows of a shorter side). The equal pairs a sample of `n`
/// rows sees are `n^2 / rows` per extra row a key, so this keeps 16 of them per extra row a
/// key at every size up to 2^28 rows (a relative error near a quarter at 2 rows a key, an
/// eighth from 5); on CUDA the groups of 4096 sort side by side in one launch.
pub fn right_sample_rows(rows: usize) -> usize {
    let scaled = (4.0 * (rows as f64).sqrt()) as usize;
    rows.min(scaled.clamp(1 << 10, 1 << 16))
}

/// Input statistics for [`choose`], from keys of each side at spread positions
/// ([`SampleRuns::sample_runs`]: on CUDA a launch and a read of a few words a side). Right
/// keys not promised unique (`right_unique` false) give their rows per key and most frequent
/// key from [`right_sample_rows`] rows, and the left side's most frequent key is sampled only
/// when the right one's reaches `params.skew_share` and the tree's choice turns on it; right
/// keys promised unique are not sampled unless [`SAMPLE_ROWS`] left rows show the left side
/// skewed, and those left rows only where the unique side is short enough to look skewed too
/// ([`ChoiceParams::unique_side_can_look_skewed`]: on a CPU the left sample was a tenth of a
/// 1 ms join that it could not change). When `params` wants
/// it for these payloads ([`ChoiceParams::wants_match_ratio`]) and the rest leaves the
/// choice to the wide-payload branch, the match ratio: [`SAMPLE_ROWS`]
/// left keys downloaded, their distinct values in a small key-value table (64 KiB for 4-byte
/// keys: cached; distinct, so a hot key makes no probe chain), every right key marks the one
/// it matches (one read of the right keys), and the marked keys' sample counts add up to the
/// matching fraction. 4096 rows put the match ratio within about ±0.02 (two standard errors)
/// and see a key with a 1 % share about 40 times. Only what the tree will look at is sampled
/// (the match ratio's read of the right keys costs 0.9–1.25 ms at 2^28 keys on the H200).
/// Deterministic for the same inputs.
///
/// # Errors
/// Allocation, driver and primitive errors.
pub fn sample_stats<B, K>(
    b: &B,
    left: &B::Buf<K>,
    right: &B::Buf<K>,
    payload_bytes: (usize, usize),
    opts: &JoinOptions,
    params: &ChoiceParams,
) -> Result<JoinInputStats>
where
    B: Gather + HashTables + CoPartitionJoin + SampleRuns,
    K: Key,
{
    let sampled = sample_stats_and_table(b, (left, right), payload_bytes, opts, params, false);
    sampled.map(|s| s.stats)
}

/// Most rows of both sides together whose row ids the plan numbers for SMJ-OM where the
/// sample picks that join ([`sample_stats_and_table`]): there the numbering's own launch is a
/// measurable part of the join (4–5 µs of host time a launch against SMJ-OM joins of 0.25 ms
/// at 2^18 rows a side, H200); above, it is not, and NPHJ-chained, where chosen, is spared
/// holding ids it does not use.
pub(crate) const PLAN_NUMBERS_ROWS_UP_TO: usize = 1 << 22;

/// What [`sample_stats_and_table`] gives: the statistics, and where the plan made them, the
/// chained table NPHJ-chained probes or the row ids (left, right) SMJ-OM sorts with its keys.
pub(crate) struct Sampled<'k, B: Backend, K: Key> {
    pub(crate) stats: JoinInputStats,
    pub(crate) table: Option<HashTable<'k, B, K>>,
    pub(crate) row_ids: Option<(B::Buf<u32>, B::Buf<u32>)>,
}

/// [`sample_stats`], and with `chained_table` (right keys not promised unique) the chained
/// table on the right keys that NPHJ-chained probes, where the sample picks that join: on CUDA
/// its heads emptied in the sample's launch and its keys pushed by the next, which instead
/// numbers both sides' rows for SMJ-OM where the sample shows too many pairs (sides of at most
/// [`PLAN_NUMBERS_ROWS_UP_TO`] rows together; [`SampleRuns::sample_runs_and_chained_table`],
/// [`most_pairs_for_chained`]).
///
/// # Errors
/// As [`sample_stats`], and the table's build errors.
pub(crate) fn sample_stats_and_table<'k, B, K>(
    b: &B,
    (left, right): (&B::Buf<K>, &'k B::Buf<K>),
    (left_payload_bytes, right_payload_bytes): (usize, usize),
    opts: &JoinOptions,
    params: &ChoiceParams,
    chained_table: bool,
) -> Result<Sampled<'k, B, K>>
where
    B: Gather + HashTables + CoPartitionJoin + SampleRuns,
    K: Key,
{
    use joinkit_cuda::Buffer as _;
    let right_unique = opts.right_unique;
    let match_ratio = params.wants_match_ratio(left_payload_bytes + right_payload_bytes);
    let mut stats = JoinInputStats {
        left_rows: left.len(),
        right_rows: right.len(),
        key_bytes: std::mem::size_of::<K>(),
        left_payload_bytes,
        right_payload_bytes,
        match_ratio: match_ratio.then_some(0.0),
        left_top_key_share: 0.0,
        right_top_key_share: 0.0,
        right_rows_per_key: (!right_unique).then_some(1.0),
    };
    let chained_table = chained_table && !right_unique;
    if left.is_empty() || right.is_empty() {
        let table = chained_table
            .then(|| b.build_table(right, &TableConfig::chained()))
            .transpose()?;
        return Ok(Sampled {
            stats,
            table,
            row_ids: None,
        });
    }
    // Measured below only where the tree will look at it.
    stats.match_ratio = None;
    let sample_right = |stats: &mut JoinInputStats, groups: &[SampleGroup]| {
        stats.right_top_key_share = top_share(groups);
        if !right_unique {
            stats.right_rows_per_key = Some(rows_per_key(groups, right.len()));
        }
    };
    let right_rows = right_sample_rows(right.len());
    let (mut table, mut row_ids) = (None, None);
    if !right_unique {
        // The right side's statistics, and the left side's top key where the right one is
        // skewed and the tree's choice turns on it (a semi join on few keys does not: on a
        // CPU the second sample was a tenth of a 1 ms join).
        let sampled = |stats: &mut JoinInputStats, groups: &[SampleGroup]| {
            sample_right(stats, groups);
            let with_left_share = |share| {
                let stats = JoinInputStats {
                    left_top_key_share: share,
                    ..*stats
                };
                choose(&stats, opts.kind, params)
            };
            if stats.right_top_key_share >= params.skew_share
                && with_left_share(0.0) != with_left_share(1.0)
            {
                stats.left_top_key_share = top_share(&b.sample_runs(left, SAMPLE_ROWS)?);
            }
            Ok(())
        };
        if chained_table {
            // The table is built where the sample's pairs pick the join that probes it.
            let most_pairs = most_pairs_for_chained(&stats, right_rows, opts.kind, params);
            // Where it does not, the sort-merge join's row ids, numbered by the same launch.
            let (groups, built) = match most_pairs {
                Some(most) => {
                    let mut ids = (left.len() + right.len() <= PLAN_NUMBERS_ROWS_UP_TO)
                        .then(|| Ok::<_, Error>((b.alloc(left.len())?, b.alloc(right.len())?)))
                        .transpose()?;
                    let numbering = ids.as_mut().map(|(l, r)| (l, r));
                    let planned =
                        b.sample_runs_and_chained_table(right, right_rows, most, numbering)?;
                    row_ids = ids.filter(|_| planned.1.is_none());
                    planned
                }
                None => (b.sample_runs(right, right_rows)?, None),
            };
            sampled(&mut stats, &groups)?;
            table = built;
        } else {
            sampled(&mut stats, &b.sample_runs(right, right_rows)?)?;
        }
    } else if params.unique_side_can_look_skewed(right.len()) {
        stats.left_top_key_share = top_share(&b.sample_runs(left, SAMPLE_ROWS)?);
        if stats.left_top_key_share >= params.skew_share {
            sample_right(&mut stats, &b.sample_runs(right, right_rows)?);
        }
    }
    // The match ratio only where the tree will look at it (it costs a read of the right keys):
    // where, without it, the choice falls to the last branch.
    if match_ratio && choose(&stats, opts.kind, params).1 == ChoiceReason::Partitioned {
        let (keys, counts) = distinct_counts(b.download(&sample(b, left)?)?);
        let rows: usize = counts.iter().sum();
        let keys = b.upload(&keys)?;
        let table = b.build_table(&keys, &TableConfig::key_value())?;
        let mut marks = b.alloc::<u32>(keys.len())?;
        b.fill(&mut marks, 0)?;
        b.mark_matched(&table, right, &mut marks)?;
        let matched: usize = b
            .download(&marks)?
            .iter()
            .zip(&counts)
            .filter(|(m, _)| **m != 0)
            .map(|(_, c)| c)
            .sum();
        stats.match_ratio = Some(matched as f64 / rows as f64);
    }
    Ok(Sampled {
        stats,
        table,
        row_ids,
    })
}

/// The most frequent key's share of a sample: the groups' largest counts over their rows.
fn top_share(groups: &[SampleGroup]) -> f64 {
    let top: u64 = groups.iter().map(|g| g.top).sum();
    let rows: u64 = groups.iter().map(|g| g.rows).sum();
    top as f64 / rows.max(1) as f64
}

/// `1 + Σ m (m - 1) / rows` of a side of `rows` rows from its sample's groups, the mean of
/// each group's estimate: a group of `n` rows sampled without replacement sees
/// `n (n - 1) / (rows (rows - 1))` of the side's equal pairs in expectation, so its pairs
/// scale back by the inverse (exact when the group is the whole side). A side stored
/// clustered by key (sorted) shows no pairs to samples at spread positions unless its runs
/// span more than a stride.
fn rows_per_key(groups: &[SampleGroup], rows: usize) -> f64 {
    let estimates: Vec<f64> = groups
        .iter()
        .filter(|g| g.rows >= 2)
        .map(|g| {
            let n = g.rows as f64;
            1.0 + g.pairs as f64 * (rows as f64 - 1.0) / (n * (n - 1.0))
        })
        .collect();
    if estimates.is_empty() {
        return 1.0;
    }
    estimates.iter().sum::<f64>() / estimates.len() as f64
}

/// The tree's choice for `stats` where a one-group sample of `samples` right rows shows
/// `pairs` equal pairs (the rows a key estimated from them).
fn choice_at_pairs(
    stats: &JoinInputStats,
    samples: usize,
    pairs: u64,
    kind: JoinKind,
    params: &ChoiceParams,
) -> Algorithm {
    let group = SampleGroup {
        rows: samples.min(stats.right_rows) as u64,
        pairs,
        top: 0,
    };
    let sampled = JoinInputStats {
        right_rows_per_key: Some(rows_per_key(&[group], stats.right_rows)),
        ..*stats
    };
    choose(&sampled, kind, params).0
}

/// The most equal pairs a one-group sample of `samples` right rows may show for the tree to
/// pick NPHJ-chained from `stats` (sides and payloads; rows a key from the pairs), or `None`
/// where no pairs do. The choice between NPHJ-chained and SMJ-OM follows the rows a key, which
/// grow with the pairs, so the largest such count is the one where the rows a key reach the
/// tree's merge threshold where the tree agrees, else found by bisection; the plan builds the
/// chained table beside the sample where the sample shows at most that many
/// ([`SampleRuns::sample_runs_and_chained_table`]), and the tree's choice from the sampled
/// statistics stays the one that counts.
fn most_pairs_for_chained(
    stats: &JoinInputStats,
    samples: usize,
    kind: JoinKind,
    params: &ChoiceParams,
) -> Option<u64> {
    let rows = samples.min(stats.right_rows) as u64;
    let picks_chained =
        |pairs| choice_at_pairs(stats, samples, pairs, kind, params) == Algorithm::NphjChained;
    if !picks_chained(0) {
        return None;
    }
    // picks_chained(lo) holds; the most pairs a sample can show is rows (rows - 1).
    let (mut lo, mut hi) = (0u64, rows * rows.saturating_sub(1));
    if picks_chained(hi) {
        return Some(hi);
    }
    // Where the tree splits the two joins at the threshold on the rows a key, the pairs that
    // reach it, checked by the tree itself: two choices where the bisection takes 20 or more
    // (1.6 µs of a plan's host time on the H200 machines, before the sample's launch).
    if rows >= 2 {
        let per_pair = (stats.right_rows as f64 - 1.0) / (rows as f64 * (rows as f64 - 1.0));
        let reach = (params.chained_merge_threshold(stats.right_rows) - 1.0) / per_pair;
        let guess = (reach.ceil() as u64).saturating_sub(1).min(hi - 1);
        if picks_chained(guess) && !picks_chained(guess + 1) {
            return Some(guess);
        }
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if picks_chained(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Some(lo)
}

/// [`SAMPLE_ROWS`] keys of `keys` (all of them when shorter), at [`sample_row`]'s positions.
fn sample<B: Gather, K: Key>(b: &B, keys: &B::Buf<K>) -> Result<B::Buf<K>> {
    use joinkit_cuda::Buffer as _;
    let n = keys.len() as u64;
    let rows = n.min(SAMPLE_ROWS as u64);
    let map: Vec<u64> = (0..rows).map(|j| sample_row(j, rows, n)).collect();
    b.gather(keys, &b.upload(&map)?, Bounds::Trust)
}

/// The distinct values of `keys`, ascending, and how often each occurs.
fn distinct_counts<K: Key>(mut keys: Vec<K>) -> (Vec<K>, Vec<usize>) {
    keys.sort_unstable();
    let runs: Vec<&[K]> = keys.chunk_by(|a, b| a == b).collect();
    (
        runs.iter().map(|r| r[0]).collect(),
        runs.iter().map(|r| r.len()).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use joinkit_cuda::CpuBackend;

    fn stats(right_rows: usize, payload: usize, ratio: f64) -> JoinInputStats {
        JoinInputStats {
            left_rows: 2 * right_rows,
            right_rows,
            key_bytes: 4,
            left_payload_bytes: payload,
            right_payload_bytes: payload,
            match_ratio: Some(ratio),
            left_top_key_share: 0.0,
            right_top_key_share: 0.0,
            right_rows_per_key: None,
        }
    }

    fn gpu_like() -> ChoiceParams {
        ChoiceParams {
            cached_table_bytes: 64 << 20,
            wide_payload_bytes: 16,
            gfur_ratio_per_payload_byte: 0.125,
            gfur_max_ratio: 0.7,
            skew_share: 0.01,
            duplicated_rows_per_key: 1.5,
            merge: MergeRule::Log2RowsMinus(16.0),
            chained_max_right_rows: 1 << 20,
            chained_merge_rows_per_key: 12.0,
            chained_max_distinct_keys: 1 << 20,
            few_keys_join: Algorithm::NphjChained,
            outer_merge_rows_per_key: f64::INFINITY,
            small_side_max_right_rows: 0,
            small_side_chained_inner_rows_per_key: 0.0,
            small_side_chained_outer_rows_per_key: 0.0,
        }
    }

    /// The pairs limit equals the one a bisection alone finds, for right sides of 2 … 5000 rows
    /// and a few larger ones, inner and left outer joins, at the GPU's merge threshold and at
    /// 40 rows a key: the first guess (the threshold's pairs) misses at floating-point edges
    /// (841 rows, all sampled, at 40), where the bisection answers.
    #[test]
    fn the_pairs_limit_equals_a_bisection() {
        for threshold in [gpu_like().chained_merge_rows_per_key, 40.0] {
            let p = ChoiceParams {
                chained_merge_rows_per_key: threshold,
                ..gpu_like()
            };
            let sizes = (2..5000).chain([1 << 14, 1 << 18, (1 << 18) + 1, 1 << 20]);
            for (right_rows, kind) in
                sizes.flat_map(|n| [(n, JoinKind::Inner), (n, JoinKind::LeftOuter)])
            {
                let s = JoinInputStats {
                    left_rows: right_rows,
                    match_ratio: None,
                    ..stats(right_rows, 4, 1.0)
                };
                let samples = right_sample_rows(right_rows);
                let rows = samples.min(right_rows) as u64;
                let picks =
                    |pairs| choice_at_pairs(&s, samples, pairs, kind, &p) == Algorithm::NphjChained;
                let bisected = picks(0).then(|| {
                    let (mut lo, mut hi) = (0, rows * (rows - 1) + 1);
                    while hi - lo > 1 {
                        let mid = lo + (hi - lo) / 2;
                        if picks(mid) { lo = mid } else { hi = mid }
                    }
                    lo
                });
                assert_eq!(
                    most_pairs_for_chained(&s, samples, kind, &p),
                    bisected,
                    "{kind:?} {right_rows} at {threshold}"
                );
            }
        }
    }

    /// The plan's numbering on the CPU twin with the GPU's parameters (where the plan speculates
    /// on a small right side): SMJ-OM's row ids `0..len` a side exactly where the sample's pairs
    /// skip the chained table, none past `PLAN_NUMBERS_ROWS_UP_TO` rows.
    #[test]
    fn the_plan_numbers_the_rows_where_it_skips_the_table() {
        let b = CpuBackend::new();
        let p = gpu_like();
        let opts = JoinOptions::new(JoinKind::Inner);
        let keys =
            |rows: u32, per_key: u32| -> Vec<u32> { (0..rows).map(|i| i / per_key).collect() };
        for (left_rows, per_key, numbered) in [
            (1000, 256, true),
            (1000, 2, false),
            (PLAN_NUMBERS_ROWS_UP_TO as u32 - 4096, 256, true),
            (PLAN_NUMBERS_ROWS_UP_TO as u32 - 4096 + 1, 256, false),
        ] {
            let (left, right) = (keys(left_rows, per_key), keys(4096, per_key));
            let sampled =
                sample_stats_and_table(&b, (&left, &right), (0, 0), &opts, &p, true).unwrap();
            let many_pairs = per_key > 2;
            assert_eq!(
                sampled.table.is_some(),
                !many_pairs,
                "{left_rows} {per_key}"
            );
            match sampled.row_ids {
                Some((l, r)) => {
                    assert!(numbered, "{left_rows} {per_key}");
                    assert!(l.iter().copied().eq(0..left_rows));
                    assert!(r.iter().copied().eq(0..4096));
                }
                None => assert!(!numbered, "{left_rows} {per_key}"),
            }
        }
    }

    /// The pairs limit under which the plan builds NPHJ-chained's table beside the sample is
    /// where the tree's choice turns: NPHJ-chained at the limit, SMJ-OM one pair above, on
    /// either backend's parameters, inner and left outer joins, 1000 … 2^20 right rows.
    #[test]
    fn the_pairs_limit_is_where_the_choice_turns() {
        let cpu = ChoiceParams::for_backend(&CpuBackend::new());
        for (p, kind, right_rows, cpu_case) in [
            (gpu_like(), JoinKind::Inner, 1 << 18, false),
            (gpu_like(), JoinKind::LeftOuter, 1 << 20, false),
            (gpu_like(), JoinKind::Inner, 1 << 14, false),
            (gpu_like(), JoinKind::LeftOuter, 1000, false),
            (gpu_like(), JoinKind::Inner, (1 << 18) + 12_345, false),
            (cpu, JoinKind::Inner, 1 << 16, true),
        ] {
            let s = JoinInputStats {
                left_rows: right_rows,
                match_ratio: None,
                ..stats(right_rows, 4, 1.0)
            };
            let samples = right_sample_rows(right_rows);
            let most = most_pairs_for_chained(&s, samples, kind, &p);
            let pick = |pairs| choice_at_pairs(&s, samples, pairs, kind, &p);
            let Some(most) = most else {
                // The CPU's parameters: this shape does not pick NPHJ-chained even without pairs.
                assert!(cpu_case, "{kind:?} {right_rows}: no limit");
                assert_ne!(pick(0), Algorithm::NphjChained);
                continue;
            };
            assert_eq!(pick(0), Algorithm::NphjChained, "{kind:?} {right_rows}");
            assert_eq!(pick(most), Algorithm::NphjChained, "{kind:?} {right_rows}");
            assert_eq!(pick(most + 1), Algorithm::SmjOm, "{kind:?} {right_rows}");
        }
        // No pairs pick NPHJ-chained past its right sides: no table beside the sample.
        let mut s = stats(1 << 24, 4, 1.0);
        s.match_ratio = None;
        let samples = right_sample_rows(1 << 24);
        assert_eq!(
            most_pairs_for_chained(&s, samples, JoinKind::Inner, &gpu_like()),
            None
        );
    }

    #[test]
    fn the_tree_branches() {
        let p = gpu_like();
        let choose = |s: &JoinInputStats, p: &ChoiceParams| choose(s, JoinKind::Inner, p).0;
        assert_eq!(choose(&stats(1000, 4, 1.0), &p), Algorithm::NphjOpen);
        assert_eq!(choose(&stats(1 << 27, 0, 0.1), &p), Algorithm::PhjOm);
        assert_eq!(choose(&stats(1 << 27, 4, 0.1), &p), Algorithm::PhjOm);
        assert_eq!(choose(&stats(1 << 27, 8, 1.0), &p), Algorithm::PhjOm);
        assert_eq!(choose(&stats(1 << 27, 8, 0.5), &p), Algorithm::PhjOm);
        assert_eq!(choose(&stats(1 << 27, 8, 0.3), &p), Algorithm::PhjUm);
        // Wider sides, higher thresholds (0.125 a byte beyond 4: 0.5 at 8 bytes), capped at
        // 0.7; the wider side decides.
        assert_eq!(choose(&stats(1 << 27, 16, 0.6), &p), Algorithm::PhjUm);
        assert_eq!(choose(&stats(1 << 27, 16, 0.7), &p), Algorithm::PhjOm);
        let mut one_wide_side = stats(1 << 27, 8, 0.6);
        one_wide_side.right_payload_bytes = 12;
        assert_eq!(choose(&one_wide_side, &p), Algorithm::PhjUm);
        assert!((p.gfur_threshold(8, 6) - 0.5).abs() < 1e-12);
        assert_eq!(p.gfur_threshold(2, 0), 0.0);
        let mut skewed = stats(1 << 27, 4, 1.0);
        skewed.left_top_key_share = 0.2;
        assert_eq!(choose(&skewed, &p), Algorithm::PhjOm);
        skewed.right_top_key_share = 0.05;
        assert_eq!(choose(&skewed, &p), Algorithm::SmjOm);
        // Semi and anti joins of small unique right sides take NPHJ-chained; inner and outer
        // joins NPHJ-open; past the small sides, the cached table.
        for kind in [JoinKind::LeftSemi, JoinKind::LeftAnti] {
            assert_eq!(
                super::choose(&stats(1 << 20, 4, 1.0), kind, &p).0,
                Algorithm::NphjChained
            );
            assert_eq!(
                super::choose(&stats(1 << 21, 4, 1.0), kind, &p).0,
                Algorithm::NphjOpen
            );
        }
        assert_eq!(
            super::choose(&stats(1 << 18, 4, 1.0), JoinKind::LeftOuter, &p).0,
            Algorithm::NphjOpen
        );
        // The same choices without a sample, and none where a sample would decide.
        let unsampled = |rows: usize, unique, kind, p: &ChoiceParams| {
            choose_unsampled((2 * rows, rows), unique, kind, p).map(|c| c.0)
        };
        let (semi, inner) = (JoinKind::LeftSemi, JoinKind::Inner);
        assert_eq!(
            unsampled(1 << 20, true, semi, &p),
            Some(Algorithm::NphjChained)
        );
        assert_eq!(
            unsampled(1 << 21, true, semi, &p),
            Some(Algorithm::NphjOpen)
        );
        assert_eq!(
            unsampled(1 << 21, false, semi, &p),
            Some(Algorithm::NphjChained)
        );
        assert_eq!(
            unsampled(1 << 18, true, inner, &p),
            Some(Algorithm::NphjOpen)
        );
        assert_eq!(unsampled(1 << 18, false, inner, &p), None);
        // A left side no longer than a small unique right side: NPHJ-chained for every kind.
        let outer = JoinKind::LeftOuter;
        for (rows, kind, algorithm) in [
            (1 << 20, inner, Some(Algorithm::NphjChained)),
            (1 << 20, outer, Some(Algorithm::NphjChained)),
            (1 << 21, inner, Some(Algorithm::NphjOpen)),
        ] {
            assert_eq!(
                choose_unsampled((rows, rows), true, kind, &p).map(|c| c.0),
                algorithm
            );
        }
        let mut same_sizes = stats(1 << 18, 4, 1.0);
        same_sizes.left_rows = 1 << 18;
        assert_eq!(choose(&same_sizes, &p), Algorithm::NphjChained);
        assert_eq!(unsampled(1 << 27, true, semi, &p), None);
        let cpu = ChoiceParams::for_backend(&CpuBackend::new());
        assert_eq!(unsampled(1000, true, semi, &cpu), None);
        assert_eq!(choose(&stats(1000, 4, 1.0), &cpu), Algorithm::PhjOm);
        assert_eq!(
            super::choose(&stats(1000, 4, 1.0), JoinKind::LeftSemi, &cpu).0,
            Algorithm::PhjOm
        );
        // GFUR never wins on the CPU: wide joins with few matches stay GFTR, unsampled.
        assert_eq!(choose(&stats(1 << 27, 8, 0.1), &cpu), Algorithm::PhjOm);
        assert!(!cpu.wants_match_ratio(16) && p.wants_match_ratio(16) && !p.wants_match_ratio(8));
    }

    #[test]
    fn duplicate_right_keys_branch_by_kind_and_rows_per_key() {
        let p = gpu_like();
        let mn = |rows: usize, per_key: f64| JoinInputStats {
            left_rows: rows,
            right_rows: rows,
            right_rows_per_key: Some(per_key),
            ..stats(rows, 4, 1.0)
        };
        use Algorithm::{NphjChained, NphjOpen, PhjOm, SmjOm};
        use ChoiceReason as Why;
        use JoinKind::*;
        assert!(p.merges(&mn(1 << 26, 1.0), 10.0) && !p.merges(&mn(1 << 26, 1.0), 9.9));
        assert!(p.merges(&mn(1 << 10, 1.0), 2.0));
        assert!((p.chained_merge_threshold(1 << 18) - 12.0).abs() < 1e-9);
        assert!((p.chained_merge_threshold(1 << 20) - 6.0).abs() < 1e-9);
        // (rows a side, right rows a key, kind) -> choice.
        let cases = [
            // Inner and outer joins: SMJ-OM from log2(rows) - 16 rows a key, PHJ-OM below
            // (NPHJ-open never: its runs of equal keys, or its re-read of every build key).
            (1 << 26, 12.0, Inner, SmjOm, Why::ManyRowsPerKey),
            (1 << 26, 8.0, LeftOuter, PhjOm, Why::Partitioned),
            (1 << 22, 2.0, Inner, PhjOm, Why::Partitioned),
            (1 << 21, 1.2, Inner, PhjOm, Why::Partitioned),
            // A small right side: NPHJ-chained below 12 sqrt(2^18 / rows) rows a key.
            (1 << 20, 4.0, Inner, NphjChained, Why::SmallRightSide),
            (1 << 20, 1.0, LeftOuter, NphjChained, Why::SmallRightSide),
            (1 << 20, 8.0, Inner, SmjOm, Why::ManyRowsPerKey),
            // Semi and anti joins: NPHJ-chained on a small side or a cached table, or with few
            // distinct keys.
            (1 << 20, 1.0, LeftSemi, NphjChained, Why::SmallRightSide),
            (1 << 22, 1.0, LeftSemi, NphjChained, Why::SmallRightSide),
            (1 << 23, 8.0, LeftSemi, NphjChained, Why::FewDistinctKeys),
            (1 << 24, 16.0, LeftAnti, NphjChained, Why::FewDistinctKeys),
            (1 << 24, 8.0, LeftAnti, PhjOm, Why::Partitioned),
            (1 << 24, 1.0, LeftAnti, PhjOm, Why::Partitioned),
        ];
        let expect = |cases: &[(usize, f64, JoinKind, Algorithm, Why)], p: &ChoiceParams| {
            for &(rows, per_key, kind, algorithm, why) in cases {
                let got = choose(&mn(rows, per_key), kind, p);
                assert_eq!(
                    got,
                    (algorithm, why),
                    "{rows} rows, {per_key} a key, {kind:?}"
                );
            }
        };
        expect(&cases, &p);
        // Unique keys promised: the cached table.
        let promised = |rows| JoinInputStats {
            right_rows_per_key: None,
            ..mn(rows, 1.0)
        };
        assert_eq!(
            choose(&promised(1 << 21), Inner, &p),
            (NphjOpen, Why::CachedTable)
        );
        // The CPU: semi and anti joins take NPHJ-open's key-set table from few distinct keys;
        // its small sides follow the pool and the partitions PHJ-OM would make.
        let cpu = ChoiceParams::for_backend(&CpuBackend::new());
        assert_eq!(cpu.chained_max_right_rows, 0);
        assert_eq!(cpu.merge, MergeRule::Never);
        let half_piece = CpuBackend::new().build_capacity::<u32>() / 2;
        let threads = rayon::current_num_threads();
        assert_eq!(
            cpu.small_side_max_right_rows,
            small_side_rows(threads, half_piece)
        );
        assert_eq!(
            [1, 2, 3, 4, 5, 8, 9, 16, 17, 32].map(|t| small_side_rows(t, 1 << 14)),
            [
                0,
                0,
                1 << 15,
                1 << 15,
                1 << 16,
                1 << 16,
                1 << 17,
                1 << 17,
                1 << 18,
                1 << 18
            ]
        );
        // A small side is the most rows PHJ-OM cuts into fewer partitions than threads.
        for t in 3..=256 {
            let rows = small_side_rows(t, half_piece);
            let partitions = |rows| 1usize << crate::phj::radix_bits::<u32>(rows, 2 * half_piece);
            assert!(
                partitions(rows) < t && partitions(rows + 1) >= t,
                "{t} threads"
            );
        }
        let few = ChoiceParams {
            small_side_max_right_rows: 0,
            ..cpu
        };
        // No small side (2 threads): inner joins PHJ-OM at any rows a key, left outer joins
        // SMJ-OM from 128.
        let few_threads = [
            (1 << 16, 64.0, Inner, PhjOm, Why::Partitioned),
            (1 << 20, 512.0, Inner, PhjOm, Why::Partitioned),
            (1 << 12, 2.0, Inner, PhjOm, Why::Partitioned),
            (1 << 16, 256.0, LeftOuter, SmjOm, Why::ManyRowsPerKey),
            (1 << 12, 128.0, LeftOuter, SmjOm, Why::ManyRowsPerKey),
            (1 << 17, 127.0, LeftOuter, PhjOm, Why::Partitioned),
            (1 << 16, 4.0, Inner, PhjOm, Why::Partitioned),
        ];
        expect(&few_threads, &few);
        // 16 threads: up to 2^17 right rows (8 partitions) NPHJ-chained below 3 rows a key
        // (left outer joins below 8), PHJ-OM above, and left outer joins SMJ-OM from 128;
        // beyond, as with no small side.
        let many = ChoiceParams {
            small_side_max_right_rows: small_side_rows(16, half_piece),
            ..cpu
        };
        let many_threads = [
            (1 << 16, 1.0, LeftOuter, PhjOm, Why::Partitioned),
            (1 << 16, 2.0, LeftOuter, NphjChained, Why::SmallRightSide),
            (1 << 16, 2.9, Inner, NphjChained, Why::SmallRightSide),
            (1 << 16, 3.0, Inner, PhjOm, Why::Partitioned),
            (1 << 17, 32.0, Inner, PhjOm, Why::Partitioned),
            (1 << 16, 7.9, LeftOuter, NphjChained, Why::SmallRightSide),
            (1 << 16, 8.0, LeftOuter, PhjOm, Why::Partitioned),
            (1 << 17, 64.0, LeftOuter, PhjOm, Why::Partitioned),
            (1 << 17, 127.0, LeftOuter, PhjOm, Why::Partitioned),
            (1 << 16, 48.0, Inner, PhjOm, Why::Partitioned),
            (1 << 16, 1024.0, Inner, PhjOm, Why::Partitioned),
            (1 << 17, 128.0, LeftOuter, SmjOm, Why::ManyRowsPerKey),
            (1 << 18, 2.0, Inner, PhjOm, Why::Partitioned),
            (1 << 18, 512.0, Inner, PhjOm, Why::Partitioned),
            (1 << 18, 8.0, LeftOuter, PhjOm, Why::Partitioned),
            (1 << 18, 64.0, LeftOuter, PhjOm, Why::Partitioned),
            (1 << 18, 96.0, LeftOuter, PhjOm, Why::Partitioned),
            (1 << 18, 128.0, LeftOuter, SmjOm, Why::ManyRowsPerKey),
            (1 << 20, 128.0, Inner, PhjOm, Why::Partitioned),
        ];
        expect(&many_threads, &many);
        // Promised unique: PHJ-OM.
        assert_eq!(choose(&promised(1 << 16), LeftOuter, &many).0, PhjOm);
        assert_eq!(
            choose(&mn(1 << 16, 64.0), LeftSemi, &cpu).0,
            Algorithm::NphjOpen
        );
        assert_eq!(
            choose(&mn(1 << 16, 4.0), LeftSemi, &cpu).0,
            Algorithm::PhjOm
        );
    }

    #[test]
    fn both_sides_skewed_merge_beyond_a_small_side() {
        let cpu = ChoiceParams {
            small_side_max_right_rows: 1 << 16,
            ..ChoiceParams::for_backend(&CpuBackend::new())
        };
        // One key with a quarter of each side's rows, 16 rows a key as the right rows see
        // them: below the rows a key that merge. A small side keeps PHJ-OM (its match cuts the
        // few partitions' probe rows over the threads); every join beyond it merges.
        let skewed = |right_rows| JoinInputStats {
            left_top_key_share: 0.25,
            right_top_key_share: 0.25,
            right_rows_per_key: Some(16.0),
            ..stats(right_rows, 4, 1.0)
        };
        for kind in [JoinKind::Inner, JoinKind::LeftOuter] {
            assert_eq!(
                choose(&skewed(1 << 10), kind, &cpu),
                (Algorithm::PhjOm, ChoiceReason::Partitioned)
            );
            assert_eq!(
                choose(&skewed(1 << 20), kind, &cpu),
                (Algorithm::SmjOm, ChoiceReason::SkewedSides)
            );
        }
    }

    #[test]
    fn rows_per_key_is_estimated_from_equal_pairs() {
        let group = |rows, pairs| SampleGroup {
            rows,
            pairs,
            top: 0,
        };
        // Every row sampled: exact.
        assert_eq!(rows_per_key(&[group(12, 3 * 12)], 12), 4.0);
        assert_eq!(rows_per_key(&[group(3, 0)], 3), 1.0);
        assert_eq!(rows_per_key(&[group(1, 0)], 1), 1.0);
        assert_eq!(rows_per_key(&[], 5), 1.0);
        // Keys of 1 and 9 rows: rows meet 1 + (0 + 72) / 10.
        assert!((rows_per_key(&[group(10, 72)], 10) - 8.2).abs() < 1e-12);
        // Groups average.
        assert!((rows_per_key(&[group(12, 36), group(12, 0)], 12) - 2.5).abs() < 1e-12);
        // Sampled: 2^22 rows, 16 a key, shuffled.
        let b = CpuBackend::new();
        let n = 1usize << 22;
        let keys: Vec<u32> = (0..n as u64)
            .map(|i| (joinkit_cuda::hash::hash64(i, 9) % (n as u64 / 16)) as u32)
            .collect();
        let p = ChoiceParams::for_backend(&b);
        let unique = JoinOptions::new(JoinKind::Inner).right_unique(true);
        let s = sample_stats(
            &b,
            &vec![1u32],
            &keys,
            (0, 0),
            &JoinOptions::new(JoinKind::Inner),
            &p,
        )
        .unwrap();
        // About 30 equal pairs in each of two groups of 4096 (a standard error near an eighth
        // for their mean): within 3 of them.
        let m = s.right_rows_per_key.unwrap();
        assert!((10.0..22.0).contains(&m), "{s:?}");
        assert_eq!(right_sample_rows(n), 8192);
        assert_eq!(right_sample_rows(1 << 10), 1 << 10);
        assert_eq!(right_sample_rows(1 << 18), 2048);
        assert_eq!(right_sample_rows(1 << 34), 1 << 16);
        // Promised unique: not sampled for it.
        let s = sample_stats(&b, &vec![1u32], &keys, (0, 0), &unique, &p).unwrap();
        assert_eq!(s.right_rows_per_key, None);
    }

    #[test]
    fn sampling_measures_match_ratio_and_skew() {
        let unique = JoinOptions::new(JoinKind::Inner).right_unique(true);
        let b = CpuBackend::new();
        // 40 000 left keys, a fifth of them (every fifth row) in the right side; key 7 on a
        // quarter of the right rows.
        let left: Vec<u32> = (0..40_000u32)
            .map(|i| if i % 5 == 0 { i } else { 1_000_000 + i })
            .collect();
        let right: Vec<u32> = (0..40_000u32)
            .chain(std::iter::repeat_n(7, 13_333))
            .collect();
        let p = ChoiceParams {
            gfur_ratio_per_payload_byte: 0.05,
            ..ChoiceParams::for_backend(&b)
        };
        let s = sample_stats(&b, &left, &right, (8, 8), &unique, &p).unwrap();
        assert!((s.match_ratio.unwrap() - 0.2).abs() < 0.03, "{s:?}");
        assert!(s.left_top_key_share < 0.001, "{s:?}");
        // The left side is not skewed: the right side's skew is not sampled.
        assert_eq!(s.right_top_key_share, 0.0, "{s:?}");
        assert_eq!(
            (s.left_rows, s.right_rows, s.key_bytes),
            (40_000, 53_333, 4)
        );
        // Key 3 on a tenth of the left rows. A right side of 53 333 keys promised unique cannot
        // look skewed (its top key would hold 1/53 333 of it): neither side's skew is sampled.
        let hot_left: Vec<u32> = (0..40_000u32)
            .map(|i| if i % 10 == 0 { 3 } else { i })
            .collect();
        assert!(!p.unique_side_can_look_skewed(right.len()));
        let s = sample_stats(&b, &hot_left, &right, (8, 8), &unique, &p).unwrap();
        assert_eq!((s.left_top_key_share, s.right_top_key_share), (0.0, 0.0));
        assert!(s.match_ratio.is_some(), "{s:?}");
        // 50 unique keys can (each holds 2 %): the left side's skew is sampled, then the
        // right side's.
        let short_right: Vec<u32> = (0..50).collect();
        assert!(p.unique_side_can_look_skewed(short_right.len()));
        let s = sample_stats(&b, &hot_left, &short_right, (8, 8), &unique, &p).unwrap();
        assert!((s.left_top_key_share - 0.1).abs() < 0.02, "{s:?}");
        assert!((s.right_top_key_share - 0.02).abs() < 1e-9, "{s:?}");
        // Both skewed: SMJ-OM whatever the match ratio, which is not sampled.
        assert_eq!(s.match_ratio, None);
        // Short and empty sides: no division by zero (every key of a 3-row side holds a third:
        // skewed, so no match ratio either).
        let s = sample_stats(&b, &vec![1u64, 2, 3], &vec![3u64], (8, 8), &unique, &p).unwrap();
        assert_eq!((s.left_top_key_share, s.match_ratio), (1.0 / 3.0, None));
        let s = sample_stats(&b, &Vec::<u64>::new(), &vec![3u64], (8, 8), &unique, &p).unwrap();
        assert_eq!(s.match_ratio, Some(0.0));
        // Narrow payloads: no match ratio.
        let s = sample_stats(&b, &vec![1u64, 2, 3], &vec![3u64], (0, 0), &unique, &p).unwrap();
        assert_eq!(s.match_ratio, None);
    }
}
