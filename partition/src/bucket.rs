//! Bucket-chain partition (Sioulas et al., ICDE'19): partitions are chains of fixed-size
//! buckets taken from one pool with an atomic bump pointer, so one pass over the input
//! suffices (no histogram pass) at the price of a linked, non-contiguous result.

use joinkit_cuda::{Backend, Buffer, Column, CpuBackend, Element, Error, Key, Result};
use rayon::prelude::*;

use crate::column::{RowIds, check_columns, column_bits};
use crate::digit::Partitioner;
use crate::stable::stable_permutation;

/// End of a chain, and the head of an empty partition.
pub const NO_BUCKET: u32 = u32::MAX;

/// Largest bucket capacity, in rows.
pub const MAX_BUCKET_CAPACITY: usize = 1 << 24;

/// Most columns (payloads plus row ids) one bucket-chain call moves (the kernel gets them all
/// at once: bucket reservations cannot be replayed for a second group).
pub const MAX_BUCKET_COLUMNS: usize = 16;

/// Buckets in the pool of a bucket-chain partition of `rows` rows: every partition's buckets
/// are full but its newest, so `ceil(rows / capacity) + min(fanout, rows)` always suffice.
///
/// # Errors
/// [`Error::InvalidArgument`] for a capacity of 0 or above [`MAX_BUCKET_CAPACITY`];
/// [`Error::SizeOverflow`] when the pool would not be addressable with 32-bit bucket ids.
pub fn bucket_pool_buckets(rows: usize, fanout: usize, bucket_capacity: usize) -> Result<usize> {
    if bucket_capacity == 0 || bucket_capacity > MAX_BUCKET_CAPACITY {
        return Err(Error::InvalidArgument(format!(
            "bucket capacity {bucket_capacity}: 1 to {MAX_BUCKET_CAPACITY} rows"
        )));
    }
    // Saturating: `rows` and `fanout` are the caller's; near `usize::MAX` the sum overflows.
    let buckets = rows
        .div_ceil(bucket_capacity)
        .saturating_add(rows.min(fanout));
    if buckets as u64 >= u64::from(NO_BUCKET - 1) {
        return Err(Error::SizeOverflow(
            "bucket pool of 2^32 - 2 buckets or more",
        ));
    }
    buckets
        .checked_mul(bucket_capacity)
        .ok_or(Error::SizeOverflow("bucket pool slots"))?;
    Ok(buckets)
}

/// A bucket-chain partition: a pool of buckets of `bucket_capacity` slots (bucket `b` is slots
/// `b * capacity .. (b + 1) * capacity` of every pool column) and, per partition, a chain of
/// buckets from `heads[p]` (newest) through `next[b]` to [`NO_BUCKET`]. Every bucket of a chain
/// is full except the head, which holds `((counts[p] - 1) % capacity) + 1` rows in its first
/// slots. Slots past a bucket's rows and buckets past `used` are unspecified.
///
/// **Not deterministic on the GPU**: which bucket a block fills, the bucket order of a chain
/// and the order of rows inside a partition depend on thread scheduling. Only the multiset of
/// each partition's rows (keys with their payloads) is defined; it equals the CPU twin's.
pub struct BucketChains<B: Backend, K: Key> {
    /// Key pool.
    pub keys: B::Buf<K>,
    /// Payload pools, in the order given.
    pub payloads: Vec<Column<B>>,
    /// Row-id pool (input row of each slot), when asked for.
    pub row_ids: Option<Column<B>>,
    /// Per pool bucket: the next (older) bucket of its chain.
    pub next: B::Buf<u32>,
    /// Per partition: its newest bucket, [`NO_BUCKET`] when empty.
    pub heads: B::Buf<u32>,
    /// Per partition: its number of rows.
    pub counts: B::Buf<u64>,
    /// One entry: buckets taken from the pool (above the pool size only if it ran out, which
    /// [`bucket_pool_buckets`] rules out; [`BucketChains::flatten`] reports it).
    pub used: B::Buf<u32>,
    /// Rows per bucket.
    pub bucket_capacity: usize,
}

/// A bucket-chain partition flattened on the host: partition `p` is rows
/// `offsets[p]..offsets[p + 1]`, in chain order (newest bucket first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlatPartitions<K> {
    /// Keys.
    pub keys: Vec<K>,
    /// Payload columns as zero-extended bit patterns.
    pub payloads: Vec<Vec<u64>>,
    /// Row ids, when the partition was asked for them.
    pub row_ids: Option<Vec<u64>>,
    /// `fanout + 1` offsets.
    pub offsets: Vec<u64>,
}

impl<B: Backend, K: Key> BucketChains<B, K> {
    /// Copies the chains to the host and walks them into contiguous partitions (for tests and
    /// for callers that want the rows on the host).
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a bucket capacity of 0, pool columns that are not `capacity`
    /// slots per bucket, heads and counts of different lengths, a pool that ran out, a chain
    /// that does not hold its count of rows or a bucket reached twice (a cycle, or two chains
    /// sharing it); driver errors from the downloads.
    pub fn flatten(&self, backend: &B) -> Result<FlatPartitions<K>> {
        self.check_shape()?;
        let keys = backend.download(&self.keys)?;
        let payloads = self
            .payloads
            .iter()
            .map(|c| column_bits(backend, c))
            .collect::<Result<Vec<_>>>()?;
        let row_ids = self
            .row_ids
            .as_ref()
            .map(|c| column_bits(backend, c))
            .transpose()?;
        let (next, heads) = (
            backend.download(&self.next)?,
            backend.download(&self.heads)?,
        );
        let counts = backend.download(&self.counts)?;
        let used = backend.download(&self.used)?.first().copied().unwrap_or(0) as usize;
        if used > next.len() {
            return Err(Error::Corrupt(format!(
                "bucket pool exhausted: {used} buckets taken of {}",
                next.len()
            )));
        }
        let cap = self.bucket_capacity;
        // Counts are not trusted: a corrupt one must not size the allocation.
        let rows = counts.iter().fold(0u64, |s, &c| s.saturating_add(c));
        let mut slots = Vec::with_capacity(rows.min(keys.len() as u64) as usize);
        let mut offsets = vec![0u64];
        // Every bucket belongs to one chain: one reached twice (a cycle, or chains that share
        // buckets) is corrupt, which also bounds the rows read by the pool's size.
        let mut seen = vec![false; used];
        for (p, (&head, &count)) in heads.iter().zip(&counts).enumerate() {
            let mut left = count as usize;
            let mut b = head;
            let mut take = if left == 0 { 0 } else { (left - 1) % cap + 1 };
            while left > 0 {
                if b == NO_BUCKET || b as usize >= used {
                    return Err(Error::Corrupt(format!(
                        "chain of partition {p} ends {left} rows short of its count {count}"
                    )));
                }
                if std::mem::replace(&mut seen[b as usize], true) {
                    return Err(Error::Corrupt(format!(
                        "bucket {b} is reached twice (chain of partition {p})"
                    )));
                }
                let first = b as usize * cap;
                slots.extend(first..first + take);
                left -= take;
                take = cap;
                b = next[b as usize];
            }
            if b != NO_BUCKET {
                return Err(Error::Corrupt(format!(
                    "chain of partition {p} holds more buckets than its {count} rows need"
                )));
            }
            offsets.push(slots.len() as u64);
        }
        let pick = |col: &[u64]| slots.iter().map(|&s| col[s]).collect::<Vec<u64>>();
        Ok(FlatPartitions {
            keys: slots.iter().map(|&s| keys[s]).collect(),
            payloads: payloads.iter().map(|c| pick(c)).collect(),
            row_ids: row_ids.as_deref().map(pick),
            offsets,
        })
    }

    /// Number of partitions.
    pub fn fanout(&self) -> usize {
        Buffer::len(&self.heads)
    }

    /// Checks the lengths [`BucketChains::flatten`] indexes by: every pool column holds
    /// `capacity` slots per bucket of `next`, and there is one count per head.
    fn check_shape(&self) -> Result<()> {
        let cap = self.bucket_capacity;
        if cap == 0 {
            return Err(Error::Corrupt("bucket capacity of 0".into()));
        }
        let buckets = Buffer::len(&self.next);
        let slots = buckets.checked_mul(cap);
        let columns = std::iter::once(("keys", Buffer::len(&self.keys)))
            .chain(self.payloads.iter().map(|c| ("payload", c.len())))
            .chain(self.row_ids.iter().map(|c| ("row ids", c.len())));
        for (what, len) in columns {
            if slots != Some(len) {
                return Err(Error::Corrupt(format!(
                    "{what} pool of {len} slots for {buckets} buckets of {cap}"
                )));
            }
        }
        let (heads, counts) = (Buffer::len(&self.heads), Buffer::len(&self.counts));
        if heads != counts {
            return Err(Error::Corrupt(format!(
                "{heads} chain heads but {counts} partition counts"
            )));
        }
        Ok(())
    }
}

/// Bucket-chain partition (Sioulas et al., ICDE'19; the partitioning of the PHJ-UM baseline):
/// one pass, no histogram. Each partition is a chain of buckets of `bucket_capacity` rows
/// taken from one pool with an atomic bump pointer. See [`BucketChains`] for the layout and
/// for what is (not) deterministic.
///
/// On the GPU, each block ranks a tile of keys by partition in shared memory, then reserves
/// each partition's run of the tile at once with one atomic add on the partition's packed
/// (head bucket, fill) word; the add that crosses the head's end links fresh buckets from the
/// pool and installs the new head, adds past the end wait for it and retry. The pool is sized
/// by [`bucket_pool_buckets`], so it cannot run out.
pub trait BucketChainPartition: Backend {
    /// Partitions `keys` and `payloads` (and row ids, if asked) by `by` into bucket chains.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when a payload's length differs from the keys';
    /// [`Error::BitRange`], [`Error::EmptyInput`] and [`Error::InvalidArgument`] for a bad
    /// partitioner (see [`Partitioner::fanout`]); [`Error::InvalidArgument`] for a bucket
    /// capacity of 0 or above [`MAX_BUCKET_CAPACITY`] or more than [`MAX_BUCKET_COLUMNS`]
    /// columns; [`Error::SizeOverflow`] for a pool beyond 32-bit bucket ids or 4-byte row ids
    /// of more than 2^32 rows; allocation errors for a pool the memory cannot hold
    /// ([`Error::OutOfDeviceMemory`] on the GPU, [`Error::SizeOverflow`] on the CPU, never an
    /// abort); driver errors.
    fn bucket_chain_partition<K: Key>(
        &self,
        keys: &Self::Buf<K>,
        payloads: &[Column<Self>],
        by: &Partitioner,
        bucket_capacity: usize,
        row_ids: RowIds,
    ) -> Result<BucketChains<Self, K>>;
}

impl BucketChainPartition for CpuBackend {
    fn bucket_chain_partition<K: Key>(
        &self,
        keys: &Vec<K>,
        payloads: &[Column<Self>],
        by: &Partitioner,
        bucket_capacity: usize,
        row_ids: RowIds,
    ) -> Result<BucketChains<Self, K>> {
        let n = keys.len();
        let (fanout, pool) = check_bucket::<K, Self>(n, payloads, by, bucket_capacity, row_ids)?;
        let cap = bucket_capacity;
        // Partitions in input order, then buckets allocated partition by partition
        // (`check_bucket` validated `by`).
        let digits: Vec<u32> = keys
            .par_iter()
            .map(|&k| by.partition_of_unchecked(k) as u32)
            .collect();
        let (perm, offsets) = stable_permutation(&digits, fanout);
        let mut slot_of = vec![0usize; n]; // pool slot of the i-th row of `perm`
        let mut next = vec![NO_BUCKET; pool];
        let mut heads = vec![NO_BUCKET; fanout];
        let mut counts = vec![0u64; fanout];
        let mut used = 0usize;
        for p in 0..fanout {
            let (lo, hi) = (offsets[p] as usize, offsets[p + 1] as usize);
            counts[p] = (hi - lo) as u64;
            for (r, slot) in slot_of[lo..hi].iter_mut().enumerate() {
                let b = used + r / cap;
                if r % cap == 0 {
                    next[b] = heads[p];
                    heads[p] = b as u32;
                }
                *slot = b * cap + r % cap;
            }
            used += (hi - lo).div_ceil(cap);
        }
        let at = Placement {
            perm,
            slot_of,
            slots: pool * cap, // `bucket_pool_buckets` checked the product
        };
        let pools = payloads
            .iter()
            .map(|c| Ok(joinkit_cuda::map_column!(c, b, T => at.column::<T>(self, |i| b[i])?)))
            .collect::<Result<Vec<_>>>()?;
        let ids = match row_ids {
            RowIds::None => None,
            RowIds::U32 => Some(Column::U32(at.column(self, |i| i as u32)?)),
            RowIds::U64 => Some(Column::U64(at.column(self, |i| i as u64)?)),
        };
        Ok(BucketChains {
            keys: at.column(self, |i| keys[i])?,
            payloads: pools,
            row_ids: ids,
            next,
            heads,
            counts,
            used: vec![used as u32],
            bucket_capacity,
        })
    }
}

/// Where the CPU twin puts the rows: the `k`-th row of `perm` (an input row) goes to pool slot
/// `slot_of[k]` of a pool of `slots` slots.
struct Placement {
    perm: Vec<usize>,
    slot_of: Vec<usize>,
    slots: usize,
}

impl Placement {
    /// A pool column holding `src(row)` at each row's slot, in its own element width. The
    /// backend allocates it fallibly: a pool beyond host memory is an error (as the GPU's
    /// out-of-memory is), not an abort.
    fn column<T: Element>(&self, cpu: &CpuBackend, src: impl Fn(usize) -> T) -> Result<Vec<T>> {
        let mut out = cpu.alloc::<T>(self.slots)?;
        for (&i, &s) in self.perm.iter().zip(&self.slot_of) {
            out[s] = src(i);
        }
        Ok(out)
    }
}

/// Validation shared by both backends, so they fail alike; returns the fan-out and pool size.
pub(crate) fn check_bucket<K: Key, B: Backend>(
    n: usize,
    payloads: &[Column<B>],
    by: &Partitioner,
    bucket_capacity: usize,
    row_ids: RowIds,
) -> Result<(usize, usize)> {
    let fanout = by.fanout::<K>()?;
    let moved = check_columns(
        "bucket_chain_partition keys vs payload",
        n,
        payloads,
        row_ids,
    )?;
    if moved > MAX_BUCKET_COLUMNS {
        return Err(too_many_columns(moved));
    }
    Ok((fanout, bucket_pool_buckets(n, fanout, bucket_capacity)?))
}

pub(crate) fn too_many_columns(count: usize) -> Error {
    Error::InvalidArgument(format!(
        "bucket-chain partition moves at most {MAX_BUCKET_COLUMNS} columns (payloads and row \
         ids), {count} given: move row ids and gather the rest"
    ))
}

#[cfg(feature = "cuda")]
impl BucketChainPartition for joinkit_cuda::CudaBackend {
    fn bucket_chain_partition<K: Key>(
        &self,
        keys: &Self::Buf<K>,
        payloads: &[Column<Self>],
        by: &Partitioner,
        bucket_capacity: usize,
        row_ids: RowIds,
    ) -> Result<BucketChains<Self, K>> {
        crate::cuda::owned_bucket_chains(self, keys, payloads, by, bucket_capacity, row_ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pool no host can hold (2^58 8-byte slots, 2^61 bytes) is refused by the allocator up
    /// front: an error, not an abort, and nothing is touched.
    #[test]
    fn a_pool_beyond_memory_is_an_error() {
        let at = Placement {
            perm: vec![0],
            slot_of: vec![0],
            slots: 1 << 58,
        };
        let r = at.column::<u64>(&CpuBackend::new(), |i| i as u64);
        assert!(matches!(r, Err(Error::SizeOverflow(_))), "{r:?}");
    }

    /// Two buckets of 2 slots holding one partition of 3 rows (a full bucket, then the head).
    fn chains() -> BucketChains<CpuBackend, u32> {
        BucketChains {
            keys: vec![1, 2, 3, 0],
            payloads: vec![Column::U64(vec![10, 20, 30, 0])],
            row_ids: Some(Column::U32(vec![0, 1, 2, 0])),
            next: vec![NO_BUCKET, 0],
            heads: vec![1],
            counts: vec![3],
            used: vec![2],
            bucket_capacity: 2,
        }
    }

    #[test]
    fn flatten_refuses_a_pool_of_the_wrong_shape() {
        let cpu = CpuBackend::new();
        let flat = chains().flatten(&cpu).unwrap();
        assert_eq!(flat.keys, vec![3, 1, 2]);
        assert_eq!(flat.payloads, vec![vec![30, 10, 20]]);
        assert_eq!(flat.row_ids, Some(vec![2, 0, 1]));
        assert_eq!(flat.offsets, vec![0, 3]);
        let corrupt =
            |c: BucketChains<CpuBackend, u32>| matches!(c.flatten(&cpu), Err(Error::Corrupt(_)));
        let mut c = chains();
        c.bucket_capacity = 0;
        assert!(corrupt(c));
        let mut c = chains();
        c.bucket_capacity = 3;
        assert!(corrupt(c));
        let mut c = chains();
        c.keys.pop();
        assert!(corrupt(c));
        let mut c = chains();
        c.payloads[0] = Column::U64(vec![10, 20, 30]);
        assert!(corrupt(c));
        let mut c = chains();
        c.row_ids = Some(Column::U32(vec![0, 1, 2, 0, 0]));
        assert!(corrupt(c));
        let mut c = chains();
        c.counts.push(0);
        assert!(corrupt(c));
        let mut c = chains();
        c.counts = vec![u64::MAX];
        assert!(corrupt(c));
        // A cycle, and two chains sharing a bucket: many heads on one bucket once flattened to
        // heads x capacity rows from a pool of one bucket (an abort for enough heads).
        let mut c = chains();
        c.next = vec![1, 0];
        assert!(corrupt(c));
        let mut c = chains();
        c.heads = vec![0; 1000];
        c.counts = vec![2; 1000];
        assert!(corrupt(c));
    }
}
