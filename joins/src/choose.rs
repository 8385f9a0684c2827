//! Choosing an algorithm from what is known about the inputs: Wu et al.'s decision tree (VLDB
//! 2024: sizes, payload widths, match ratio, skew), calibrated by our H200 measurements
//! (docs/results/joins.md), over statistics [`sample_stats`] takes from the inputs. This is what
//! [`Algorithm::Auto`] runs.
//!
//! The tree's reasoning, with the H200 figures behind each threshold (|R| = 2^27, |S| = 2^28):
//! 1. **Small build side**: a global hash table that stays in the cache (L2 on a GPU) beats
//!    any partitioning pass: NPHJ-open. (NPHJ-open leads up to |R| = 2^22, a 64 MiB table
//!    against 60 MiB of L2.)
//! 2. **Both sides skewed on one key** (a hot key with many build rows, M:N): the sort-merge
//!    join's merge-path expansion balances any multiplicity: SMJ-OM. (Wu's tree; none of the
//!    benchmarked cases has it, so it is not calibrated.)
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

use joinkit_cuda::{Key, Result};
use joinkit_hashtable::{HashTables, TableConfig};
use joinkit_primitives::{Bounds, Gather};

use crate::Algorithm;
use crate::copart::CoPartitionJoin;

/// Rows [`sample_stats`] takes from each side (fewer when a side is shorter).
pub const SAMPLE_ROWS: usize = 1 << 12;

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
    /// uniform; 0.07 for Zipf 1.0 over 2^20 keys).
    pub left_top_key_share: f64,
    /// Share of the most frequent key among sampled right keys (0 or `1 / rows` when unique);
    /// sampled only when the left side's reaches [`ChoiceParams::skew_share`] (the tree looks
    /// at it only then), 0 otherwise.
    pub right_top_key_share: f64,
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
}

impl ChoiceParams {
    /// The thresholds for `b`: its cache size (see [`CoPartitionJoin::cached_table_bytes`]),
    /// GFUR's match ratio per payload byte
    /// ([`CoPartitionJoin::gfur_ratio_per_payload_byte`]), and the payload, GFUR cap and skew
    /// thresholds measured on the H200.
    pub fn for_backend<B: CoPartitionJoin>(b: &B) -> Self {
        Self {
            cached_table_bytes: b.cached_table_bytes().unwrap_or(0),
            wide_payload_bytes: 16,
            gfur_ratio_per_payload_byte: b.gfur_ratio_per_payload_byte(),
            gfur_max_ratio: 0.6,
            skew_share: 0.01,
        }
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
}

/// The algorithm the decision tree picks for `stats` (never [`Algorithm::Auto`]); see the
/// module docs for the tree.
pub fn choose(stats: &JoinInputStats, params: &ChoiceParams) -> Algorithm {
    if params.table_is_cached(stats.right_rows) {
        return Algorithm::NphjOpen;
    }
    if stats.left_top_key_share >= params.skew_share
        && stats.right_top_key_share >= params.skew_share
    {
        return Algorithm::SmjOm;
    }
    let wide = params.is_wide(stats.left_payload_bytes + stats.right_payload_bytes);
    let threshold = params.gfur_threshold(stats.left_payload_bytes, stats.right_payload_bytes);
    let few_matches = stats.match_ratio.is_some_and(|r| r < threshold);
    if wide && few_matches {
        return Algorithm::PhjUm;
    }
    Algorithm::PhjOm
}

/// Input statistics for [`choose`], from [`SAMPLE_ROWS`] rows of each side at spread
/// positions: the left side's most frequent sampled key, the right side's when the left's
/// reaches `params.skew_share`, and, when `params` wants it for these payloads
/// ([`ChoiceParams::wants_match_ratio`]), the match ratio: the sampled left keys' distinct
/// values go into a small key-value table (64 KiB for 4-byte keys: cached; distinct, so a hot
/// key makes no probe chain), every right key marks the one it matches (one read of the right
/// keys), and the marked keys' sample counts add up to the matching fraction. 4096 rows put
/// the match ratio within about ±0.02 (two standard errors) and see a key with a 1 % share
/// about 40 times. The plan is a fixed cost, mostly host work (on the H200's host 0.26–0.30
/// ms for a narrow join, each sample's sort about 0.1 ms of it), so only what the tree will
/// look at is sampled. Deterministic for the same inputs.
///
/// # Errors
/// Allocation, driver and primitive errors.
pub fn sample_stats<B, K>(
    b: &B,
    left: &B::Buf<K>,
    right: &B::Buf<K>,
    left_payload_bytes: usize,
    right_payload_bytes: usize,
    params: &ChoiceParams,
) -> Result<JoinInputStats>
where
    B: Gather + HashTables + CoPartitionJoin,
    K: Key,
{
    use joinkit_cuda::Buffer as _;
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
    };
    if left.is_empty() || right.is_empty() {
        return Ok(stats);
    }
    let (keys, counts) = distinct_counts(b.download(&sample(b, left)?)?);
    let rows: usize = counts.iter().sum();
    stats.left_top_key_share = counts.iter().copied().max().unwrap_or(0) as f64 / rows as f64;
    if match_ratio {
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
    if stats.left_top_key_share >= params.skew_share {
        let (_, right_counts) = distinct_counts(b.download(&sample(b, right)?)?);
        let right_rows: usize = right_counts.iter().sum();
        stats.right_top_key_share =
            right_counts.iter().copied().max().unwrap_or(0) as f64 / right_rows as f64;
    }
    Ok(stats)
}

/// [`SAMPLE_ROWS`] keys of `keys` (all of them when shorter), one from each of as many equal
/// strides, at a hashed offset inside its stride.
fn sample<B: Gather, K: Key>(b: &B, keys: &B::Buf<K>) -> Result<B::Buf<K>> {
    use joinkit_cuda::Buffer as _;
    let n = keys.len() as u64;
    let rows = n.min(SAMPLE_ROWS as u64);
    let map: Vec<u64> = (0..rows)
        .map(|i| {
            let (lo, hi) = (i * n / rows, (i + 1) * n / rows);
            lo + joinkit_cuda::hash::hash64(i, 0x5a3) % (hi - lo)
        })
        .collect();
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
        }
    }

    #[test]
    fn the_tree_branches() {
        let p = ChoiceParams {
            cached_table_bytes: 16 << 20,
            wide_payload_bytes: 16,
            gfur_ratio_per_payload_byte: 0.125,
            gfur_max_ratio: 0.7,
            skew_share: 0.01,
        };
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
        let cpu = ChoiceParams::for_backend(&CpuBackend::new());
        assert_eq!(choose(&stats(1000, 4, 1.0), &cpu), Algorithm::PhjOm);
        // GFUR never wins on the CPU: wide joins with few matches stay GFTR, unsampled.
        assert_eq!(choose(&stats(1 << 27, 8, 0.1), &cpu), Algorithm::PhjOm);
        assert!(!cpu.wants_match_ratio(16) && p.wants_match_ratio(16) && !p.wants_match_ratio(8));
    }

    #[test]
    fn sampling_measures_match_ratio_and_skew() {
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
        let s = sample_stats(&b, &left, &right, 8, 8, &p).unwrap();
        assert!((s.match_ratio.unwrap() - 0.2).abs() < 0.03, "{s:?}");
        assert!(s.left_top_key_share < 0.001, "{s:?}");
        // The left side is not skewed: the right side's skew is not sampled.
        assert_eq!(s.right_top_key_share, 0.0, "{s:?}");
        assert_eq!(
            (s.left_rows, s.right_rows, s.key_bytes),
            (40_000, 53_333, 4)
        );
        // Key 3 on a tenth of the left rows: the right side's skew is sampled too.
        let hot_left: Vec<u32> = (0..40_000u32)
            .map(|i| if i % 10 == 0 { 3 } else { i })
            .collect();
        let s = sample_stats(&b, &hot_left, &right, 8, 8, &p).unwrap();
        assert!((s.left_top_key_share - 0.1).abs() < 0.02, "{s:?}");
        assert!((s.right_top_key_share - 0.25).abs() < 0.03, "{s:?}");
        // Short and empty sides: every row sampled, no division by zero.
        let s = sample_stats(&b, &vec![1u64, 2, 3], &vec![3u64], 8, 8, &p).unwrap();
        assert!((s.match_ratio.unwrap() - 1.0 / 3.0).abs() < 1e-9);
        let s = sample_stats(&b, &Vec::<u64>::new(), &vec![3u64], 8, 8, &p).unwrap();
        assert_eq!(s.match_ratio, Some(0.0));
        // Narrow payloads: no match ratio.
        let s = sample_stats(&b, &vec![1u64, 2, 3], &vec![3u64], 0, 0, &p).unwrap();
        assert_eq!(s.match_ratio, None);
    }
}
