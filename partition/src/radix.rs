//! Stable radix partition by any bit range of the key (LSD passes of at most 8 bits).

use std::ops::Range;

use joinkit_cuda::{Backend, Column, CpuBackend, Key, Result};

use crate::column::{RowIds, check_columns};
use crate::digit::radix_fanout;
use crate::stable::{Partitioned, cpu_stable_partition};

/// Stable radix partition: rows are grouped by the key bits `bits` (partition `p` holds the
/// rows whose digit is `p`), keeping input order within each partition; every payload column
/// and the optional row ids follow their keys.
///
/// The result is fully determined by the input: the CPU and CUDA backends return identical
/// columns, run after run (GFTR joins rely on this to line partitions of both sides up).
///
/// Ranges of more than 8 bits run as least-significant-digit passes of at most 8 bits each
/// (`ceil(width / 8)` passes of near-equal width, low bits first); each pass is stable, so the
/// last one leaves the rows ordered by the whole range, input order kept among equal digits.
/// LSD is chosen over MSD because every pass is one flat, evenly loaded scatter with no
/// per-partition recursion, and skew in the high bits cannot unbalance it.
pub trait RadixPartition: Backend {
    /// Partitions `keys` and `payloads` by the key bits `bits` into `2^(bits.end - bits.start)`
    /// partitions; returns the permuted columns and `2^width + 1` offsets.
    ///
    /// # Errors
    /// [`joinkit_cuda::Error::LengthMismatch`] when a payload's length differs from the keys';
    /// [`joinkit_cuda::Error::BitRange`] when `bits` is empty or reaches past the key width;
    /// [`joinkit_cuda::Error::InvalidArgument`] for more than
    /// [`MAX_RADIX_BITS`](crate::MAX_RADIX_BITS) bits;
    /// [`joinkit_cuda::Error::SizeOverflow`] for 4-byte row ids of more than 2^32 rows;
    /// allocation and driver errors.
    fn radix_partition<K: Key>(
        &self,
        keys: &Self::Buf<K>,
        payloads: &[Column<Self>],
        bits: Range<u32>,
        row_ids: RowIds,
    ) -> Result<Partitioned<Self, K>>;
}

/// Validation shared by both backends, so they fail alike; returns the fan-out.
pub(crate) fn check_radix<K: Key, B: Backend>(
    n: usize,
    payloads: &[Column<B>],
    bits: &Range<u32>,
    row_ids: RowIds,
) -> Result<usize> {
    check_columns("radix_partition keys vs payload", n, payloads, row_ids)?;
    radix_fanout::<K>(bits)
}

impl RadixPartition for CpuBackend {
    fn radix_partition<K: Key>(
        &self,
        keys: &Vec<K>,
        payloads: &[Column<Self>],
        bits: Range<u32>,
        row_ids: RowIds,
    ) -> Result<Partitioned<Self, K>> {
        let fanout = check_radix::<K, Self>(keys.len(), payloads, &bits, row_ids)?;
        // One stable counting sort on the whole range gives what the LSD passes give.
        cpu_stable_partition(keys, payloads, row_ids, fanout, |k| {
            k.digit(bits.start, bits.end) as usize
        })
    }
}

#[cfg(feature = "cuda")]
impl RadixPartition for joinkit_cuda::CudaBackend {
    fn radix_partition<K: Key>(
        &self,
        keys: &Self::Buf<K>,
        payloads: &[Column<Self>],
        bits: Range<u32>,
        row_ids: RowIds,
    ) -> Result<Partitioned<Self, K>> {
        let fanout = check_radix::<K, Self>(keys.len(), payloads, &bits, row_ids)?;
        crate::cuda::owned_partition(self, keys, payloads, row_ids, fanout, |mut o| {
            crate::cuda::radix_partition(
                self,
                &keys.view(),
                &mut o.keys,
                &o.pairs,
                o.row_ids,
                &mut o.offsets,
                bits,
                o.scratch,
            )
        })
    }
}
