//! What a join reports about itself: the algorithm it ran, per-phase times, peak memory.

use std::fmt;

use crate::{Algorithm, ChoiceReason, JoinInputStats, JoinKind};

/// Timings and sizes of one join.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinStats {
    /// The algorithm that ran (never [`Algorithm::Auto`]).
    pub algorithm: Algorithm,
    /// The join kind.
    pub kind: JoinKind,
    /// Left rows.
    pub left_rows: usize,
    /// Right rows.
    pub right_rows: usize,
    /// Output rows.
    pub output_rows: u64,
    /// Phases in order with their times in milliseconds: `transform` (sort, build),
    /// `match` (merge, probe), `materialize` (row ids to output, gathers).
    pub phases: Vec<(&'static str, f64)>,
    /// Most device memory held at once during the join (bytes), where the backend counts it.
    pub peak_memory_bytes: Option<usize>,
    /// For [`Algorithm::Auto`]: the sampled statistics the choice was made from (`None` when
    /// the algorithm was given, or the choice needed no sample: a cached table of keys
    /// promised unique, a small right side).
    pub sampled: Option<JoinInputStats>,
    /// For [`Algorithm::Auto`]: why it ran [`JoinStats::algorithm`].
    pub reason: Option<ChoiceReason>,
    /// Whether 8-byte keys were joined as their low 32 bits ([`crate::JoinOptions::narrow_keys`]).
    pub narrowed_keys: bool,
}

impl JoinStats {
    /// Sum of the phase times.
    pub fn total_ms(&self) -> f64 {
        self.phases.iter().map(|p| p.1).sum()
    }

    /// The time of one phase (0 when it did not run).
    pub fn phase_ms(&self, name: &str) -> f64 {
        self.phases
            .iter()
            .filter(|p| p.0 == name)
            .map(|p| p.1)
            .sum()
    }

    /// The papers' throughput: (|R| + |S|) / time, in million tuples per second.
    pub fn mtuples_per_s(&self) -> f64 {
        (self.left_rows + self.right_rows) as f64 / (self.total_ms() * 1e-3) / 1e6
    }
}

impl fmt::Display for JoinStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {:?}: {} ⋈ {} -> {} rows in {:.3} ms (",
            self.algorithm,
            self.kind,
            self.left_rows,
            self.right_rows,
            self.output_rows,
            self.total_ms()
        )?;
        for (i, (name, ms)) in self.phases.iter().enumerate() {
            write!(f, "{}{name} {ms:.3}", if i > 0 { ", " } else { "" })?;
        }
        write!(f, ")")?;
        if let Some(reason) = self.reason {
            write!(f, ", auto: {reason}")?;
        }
        if let Some(peak) = self.peak_memory_bytes {
            write!(f, ", peak {:.1} MiB", peak as f64 / (1 << 20) as f64)?;
        }
        Ok(())
    }
}
