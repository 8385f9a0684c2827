//! The naive reference every algorithm is tested against: a host hash map, no cleverness.

use std::collections::HashMap;

use crate::{JoinKind, NULL_ROW};

/// The output of `left ⋈ right` as sorted (left row, right row) pairs; semi and anti joins give
/// [`NULL_ROW`] as the right row.
pub fn join_pairs<K: std::hash::Hash + Eq + Copy>(
    left: &[K],
    right: &[K],
    kind: JoinKind,
) -> Vec<(u32, u32)> {
    let mut index: HashMap<K, Vec<u32>> = HashMap::new();
    for (r, k) in right.iter().enumerate() {
        index.entry(*k).or_default().push(r as u32);
    }
    let mut out = Vec::new();
    for (l, k) in left.iter().enumerate() {
        let l = l as u32;
        match (kind, index.get(k)) {
            (JoinKind::Inner | JoinKind::LeftOuter, Some(rs)) => {
                out.extend(rs.iter().map(|&r| (l, r)))
            }
            (JoinKind::LeftSemi, Some(_)) | (JoinKind::LeftAnti | JoinKind::LeftOuter, None) => {
                out.push((l, NULL_ROW))
            }
            _ => {}
        }
    }
    out.sort_unstable();
    out
}
