//! Choosing an algorithm from what is known about the inputs: a decision tree after Wu et al.
//! (VLDB 2024: sizes, payload widths, match ratio, skew), as a function with its thresholds in
//! one calibratable struct. Not wired into [`Algorithm::Auto`] yet, which stays
//! [`crate::AUTO_CHOICE`] until the thresholds are calibrated on a GPU.
//!
//! The tree's reasoning:
//! 1. **Small build side**: a global hash table that stays in the cache (L2 on a GPU) beats
//!    any partitioning pass: NPHJ-open.
//! 2. **No payloads to move** (row ids out, or no payload columns): GFTR has nothing to
//!    transform, the radix partition's row ids are written by the match directly: PHJ-OM.
//! 3. **Wide payloads and a high match ratio**: most payload bytes end up in the output, and
//!    gathering them from partitioned (clustered) columns beats random gathers from the inputs
//!    even after transforming every column: PHJ-OM (GFTR).
//! 4. **Otherwise** (narrow, or few matches): transforming payloads that mostly get thrown away
//!    costs more than random gathers of the few that are kept: PHJ-UM (GFUR).
//! 5. **Heavy skew** of the probe keys keeps the partitioned joins (their work items are
//!    bounded by piece capacity, S partitions are chunked), but a hot key with many build rows
//!    favours the sort-merge join, whose merge-path expansion balances any multiplicity:
//!    SMJ-OM when the sampled hot key also repeats on the build side.
//!
//! The thresholds in [`ChoiceParams::default`] are first guesses, not measurements: calibrate
//! them per device (docs/results/joins.md) before trusting `Auto` with them.

use crate::Algorithm;

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
    /// Fraction of left rows with a match (sampled; 1.0 for PK-FK joins that all match).
    pub match_ratio: f64,
    /// Share of the most frequent key among sampled left keys (about `1 / distinct` when
    /// uniform; 0.07 for Zipf 1.0 over 2^20 keys).
    pub left_top_key_share: f64,
    /// Share of the most frequent key among sampled right keys (0 or `1 / rows` when unique).
    pub right_top_key_share: f64,
}

/// The thresholds of [`choose`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChoiceParams {
    /// Build sides up to this many bytes of table (16 bytes a row) stay in the cache: NPHJ.
    pub cached_table_bytes: usize,
    /// Output payload bytes per row from which GFTR pays (both sides together).
    pub wide_payload_bytes: usize,
    /// Match ratio from which GFTR pays.
    pub gftr_match_ratio: f64,
    /// Top-key shares from which both sides count as skewed on one key.
    pub skew_share: f64,
}

impl Default for ChoiceParams {
    fn default() -> Self {
        Self {
            cached_table_bytes: 16 << 20,
            wide_payload_bytes: 16,
            gftr_match_ratio: 0.5,
            skew_share: 0.01,
        }
    }
}

/// The algorithm the decision tree picks for `stats` (never [`Algorithm::Auto`]); see the
/// module docs for the tree.
pub fn choose(stats: &JoinInputStats, params: &ChoiceParams) -> Algorithm {
    if stats.right_rows.saturating_mul(16) <= params.cached_table_bytes {
        return Algorithm::NphjOpen;
    }
    if stats.left_top_key_share >= params.skew_share
        && stats.right_top_key_share >= params.skew_share
    {
        return Algorithm::SmjOm;
    }
    let payload = stats.left_payload_bytes + stats.right_payload_bytes;
    if payload == 0 {
        return Algorithm::PhjOm;
    }
    if payload >= params.wide_payload_bytes && stats.match_ratio >= params.gftr_match_ratio {
        Algorithm::PhjOm
    } else {
        Algorithm::PhjUm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(right_rows: usize, payload: usize, ratio: f64) -> JoinInputStats {
        JoinInputStats {
            left_rows: 2 * right_rows,
            right_rows,
            key_bytes: 4,
            left_payload_bytes: payload,
            right_payload_bytes: payload,
            match_ratio: ratio,
            left_top_key_share: 0.0,
            right_top_key_share: 0.0,
        }
    }

    #[test]
    fn the_tree_branches() {
        let p = ChoiceParams::default();
        assert_eq!(choose(&stats(1000, 4, 1.0), &p), Algorithm::NphjOpen);
        assert_eq!(choose(&stats(1 << 27, 0, 1.0), &p), Algorithm::PhjOm);
        assert_eq!(choose(&stats(1 << 27, 8, 1.0), &p), Algorithm::PhjOm);
        assert_eq!(choose(&stats(1 << 27, 4, 1.0), &p), Algorithm::PhjUm);
        assert_eq!(choose(&stats(1 << 27, 8, 0.1), &p), Algorithm::PhjUm);
        let mut skewed = stats(1 << 27, 4, 1.0);
        skewed.left_top_key_share = 0.2;
        assert_eq!(choose(&skewed, &p), Algorithm::PhjUm);
        skewed.right_top_key_share = 0.05;
        assert_eq!(choose(&skewed, &p), Algorithm::SmjOm);
    }
}
