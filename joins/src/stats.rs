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

/// Adds `ms` to phase `name` of `phases`, appended the first time: how a join's phases, its
/// pieces' and a distributed join's steps add up.
pub fn add_phase(phases: &mut Vec<(&'static str, f64)>, name: &'static str, ms: f64) {
    match phases.iter_mut().find(|p| p.0 == name) {
        Some(p) => p.1 += ms,
        None => phases.push((name, ms)),
    }
}

impl JoinStats {
    /// Adds a later piece of the same join (a chunk of left rows probed against the same right
    /// side): its phases onto those of the same name, its left and output rows, the most
    /// memory either held, whether it narrowed keys.
    pub fn absorb(&mut self, piece: &JoinStats) {
        for &(name, ms) in &piece.phases {
            add_phase(&mut self.phases, name, ms);
        }
        self.left_rows += piece.left_rows;
        self.output_rows += piece.output_rows;
        self.peak_memory_bytes = self.peak_memory_bytes.max(piece.peak_memory_bytes);
        self.narrowed_keys |= piece.narrowed_keys;
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(left_rows: usize, phases: Vec<(&'static str, f64)>, peak: usize) -> JoinStats {
        JoinStats {
            algorithm: Algorithm::PhjOm,
            kind: JoinKind::Inner,
            left_rows,
            right_rows: 100,
            output_rows: 2 * left_rows as u64,
            phases,
            peak_memory_bytes: Some(peak),
            sampled: None,
            reason: None,
            narrowed_keys: false,
        }
    }

    /// A build and two probed chunks: phases summed by name in first-seen order, left and
    /// output rows added, the right side counted once, the most memory kept.
    #[test]
    fn absorbed_pieces_add_up() {
        let mut all = piece(0, vec![("transform", 1.0)], 30);
        all.absorb(&piece(10, vec![("transform", 0.5), ("match", 2.0)], 50));
        let mut last = piece(6, vec![("match", 1.0)], 40);
        last.narrowed_keys = true;
        all.absorb(&last);
        assert_eq!(all.phases, vec![("transform", 1.5), ("match", 3.0)]);
        assert_eq!(
            (all.left_rows, all.right_rows, all.output_rows),
            (16, 100, 32)
        );
        assert_eq!(all.peak_memory_bytes, Some(50));
        assert!(all.narrowed_keys);
    }
}
