//! Hash partition: murmur3 of the key, any fan-out up to 1024.

use joinkit_cuda::{Backend, Column, CpuBackend, Key, Result};

use crate::column::{RowIds, check_columns};
use crate::digit::{hash_fanout, hash_partition_of};
use crate::stable::{Partitioned, cpu_stable_partition};

/// Hash partition: row `i` goes to partition
/// [`hash_partition_of(keys[i], seed, fanout)`](crate::hash_partition_of) (murmur3's finalizer
/// with a seed, `joinkit::hash_key`, mapped onto `[0, fanout)` by a multiply-shift: any fan-out
/// from 1 to [`MAX_FANOUT`](crate::MAX_FANOUT), power of two or not). Partitions are contiguous
/// (`fanout + 1` offsets) and payloads and row ids follow their keys.
///
/// **Order within a partition is unspecified**: the result is a partition of the input, not a
/// particular permutation (compare outputs as multisets per partition). The CUDA kernel stages
/// each tile in shared memory grouped by partition and writes every partition's run of the
/// tile contiguously, so global writes stay coalesced (the shared-memory-buffered scatter of
/// Gao et al., ADMS'21, §3.1, with the tile as the buffer). Power-of-two fan-outs of 512 and
/// more, where a tile's runs get short, run instead as a stable radix partition of the hashed
/// keys (the seeded hash is a bijection of the key, a power-of-two fan-out's partition the top
/// bits of its low 32; the keys are hashed back after), in input order within a partition.
pub trait HashPartition: Backend {
    /// Partitions `keys` and `payloads` into `fanout` partitions by the seeded hash of the key.
    ///
    /// # Errors
    /// [`joinkit_cuda::Error::LengthMismatch`] when a payload's length differs from the keys';
    /// [`joinkit_cuda::Error::EmptyInput`] for a fan-out of 0;
    /// [`joinkit_cuda::Error::InvalidArgument`] for a fan-out above
    /// [`MAX_FANOUT`](crate::MAX_FANOUT); [`joinkit_cuda::Error::SizeOverflow`] for 4-byte row
    /// ids of more than 2^32 rows; allocation and driver errors.
    fn hash_partition<K: Key>(
        &self,
        keys: &Self::Buf<K>,
        payloads: &[Column<Self>],
        fanout: usize,
        seed: u32,
        row_ids: RowIds,
    ) -> Result<Partitioned<Self, K>>;
}

fn check_hash<B: Backend>(
    n: usize,
    payloads: &[Column<B>],
    fanout: usize,
    row_ids: RowIds,
) -> Result<usize> {
    check_columns("hash_partition keys vs payload", n, payloads, row_ids)?;
    hash_fanout(fanout)
}

impl HashPartition for CpuBackend {
    fn hash_partition<K: Key>(
        &self,
        keys: &Vec<K>,
        payloads: &[Column<Self>],
        fanout: usize,
        seed: u32,
        row_ids: RowIds,
    ) -> Result<Partitioned<Self, K>> {
        let fanout = check_hash(keys.len(), payloads, fanout, row_ids)?;
        cpu_stable_partition(keys, payloads, row_ids, fanout, |k| {
            hash_partition_of(k, seed, fanout as u32)
        })
    }
}

#[cfg(feature = "cuda")]
impl HashPartition for joinkit_cuda::CudaBackend {
    fn hash_partition<K: Key>(
        &self,
        keys: &Self::Buf<K>,
        payloads: &[Column<Self>],
        fanout: usize,
        seed: u32,
        row_ids: RowIds,
    ) -> Result<Partitioned<Self, K>> {
        let fanout = check_hash(keys.len(), payloads, fanout, row_ids)?;
        crate::cuda::owned_partition(self, keys, payloads, row_ids, fanout, |mut o| {
            crate::cuda::hash_partition(
                self,
                &keys.view(),
                &mut o.keys,
                &o.pairs,
                o.row_ids,
                &mut o.offsets,
                fanout,
                seed,
                o.scratch,
            )
        })
    }
}
