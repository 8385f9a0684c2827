//! The contiguous partition result shared by radix and hash partitioning, and the CPU twin of
//! the stable partition by digit both are built on.

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

/// Gathers `col` by `perm` (`out[i] = col[perm[i]]`).
pub(crate) fn gather<T: Element>(col: &[T], perm: &[usize]) -> Vec<T> {
    perm.par_iter().map(|&i| col[i]).collect()
}

/// Row ids of a permutation in the asked width.
pub(crate) fn row_id_column(perm: &[usize], row_ids: RowIds) -> Option<Column<CpuBackend>> {
    match row_ids {
        RowIds::None => None,
        RowIds::U32 => Some(Column::U32(perm.par_iter().map(|&i| i as u32).collect())),
        RowIds::U64 => Some(Column::U64(perm.par_iter().map(|&i| i as u64).collect())),
    }
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
    let digits: Vec<u32> = keys.par_iter().map(|&k| digit(k) as u32).collect();
    let (perm, offsets) = stable_permutation(&digits, fanout);
    Ok(Partitioned {
        keys: gather(keys, &perm),
        payloads: payloads
            .iter()
            .map(|c| joinkit_cuda::map_column!(c, b, T => gather::<T>(b, &perm)))
            .collect(),
        row_ids: row_id_column(&perm, row_ids),
        offsets,
    })
}
