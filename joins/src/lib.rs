//! # joinkit
//!
//! The thin composition crate: relational joins over any [`joinkit_cuda::Backend`], written
//! once and run on the CPU (rayon) or CUDA from the same code, each algorithm as its paper's
//! steps over the primitives of `joinkit-primitives` and `joinkit-hashtable`.
//!
//! | algorithm | transform | match | materialize |
//! | --- | --- | --- | --- |
//! | SMJ-UM (GFUR) | sort keys with row ids | merge-path bounds + balanced range expansion | gather payloads from the inputs by row id |
//! | SMJ-OM (GFTR) | sort keys with row ids; payloads into sorted order, one column at a time | same | gather transformed payloads at clustered positions |
//! | NPHJ-open | build the global open-addressing table | count + retrieve | gather by row id |
//! | NPHJ-chained | build the lock-free chained table | count + retrieve | gather by row id |
//!
//! Kinds: inner, left semi, left anti, left outer; PK-FK, PK-PK (`right_unique`, checked) and
//! M:N. Outputs: row-id gather maps ([`join_rows`]) or payload columns ([`join_columns`]), with
//! [`JoinStats`] (per-phase times, peak device memory, the algorithm chosen).
//!
//! ```
//! use joinkit::{JoinKind, JoinOptions, join_rows};
//! use joinkit_cuda::{Backend, CpuBackend};
//! let cpu = CpuBackend::new();
//! let left = cpu.upload(&[3u32, 1, 4, 1]).unwrap();
//! let right = cpu.upload(&[1u32, 5, 3]).unwrap();
//! let (rows, stats) = join_rows(&cpu, &left, &right, &JoinOptions::new(JoinKind::Inner)).unwrap();
//! let mut pairs: Vec<(u32, u32)> = rows.left.iter().copied().zip(rows.right.unwrap()).collect();
//! pairs.sort();
//! assert_eq!(pairs, vec![(0, 2), (1, 0), (3, 0)]);
//! assert_eq!(stats.output_rows, 3);
//! ```

mod flags;
mod join;
pub mod reference;
mod spec;
mod stats;

pub use flags::MatchFlags;
pub use join::{JoinBackend, Materialized, RowPairs, Table, join_columns, join_rows};
pub use joinkit_cuda::{Backend, Column, CpuBackend, Device, Error, Result};
pub use spec::{Algorithm, JoinKind, JoinOptions, NULL_ROW};
pub use stats::JoinStats;

/// [`Algorithm::Auto`]'s choice, from the sizes and payload count (Wu et al.'s decision tree,
/// reduced to the algorithms implemented so far): GFTR (SMJ-OM) for wide joins, where gathering
/// transformed, clustered payloads pays; the open-addressing hash join otherwise. To be
/// calibrated against measurements.
pub fn choose_algorithm(
    left_rows: usize,
    right_rows: usize,
    payload_columns: usize,
    opts: &JoinOptions,
) -> Algorithm {
    let _ = (left_rows, right_rows);
    if payload_columns > 2 && matches!(opts.kind, JoinKind::Inner | JoinKind::LeftOuter) {
        Algorithm::SmjOm
    } else {
        Algorithm::NphjOpen
    }
}
