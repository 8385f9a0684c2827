//! A hash partition of 8-byte keys that writes them as their low 32 bits, with row ids: a
//! distributed join's partition by rank, narrowing its keys and numbering its rows in the same
//! pass instead of three.

use joinkit_cuda::{Backend, CpuBackend, Error, Key, PARALLEL_THRESHOLD, Result};
use rayon::prelude::*;

use crate::column::RowIds;
use crate::digit::hash_partition_of;
use crate::stable::cpu_stable_partition;

/// Largest fan-out of [`LowWordsPartition::hash_partition_low_words`] (its kernels are the
/// small fan-out class's).
pub const MAX_LOW_WORDS_FANOUT: usize = 16;

/// 8-byte keys grouped by partition and written as their low 32 bits, each beside its row id,
/// and whether every key lay in the window asked for.
pub struct LowWords<B: Backend> {
    /// The keys' low 32 bits, grouped by partition.
    pub keys: B::Buf<u32>,
    /// `ids_from + row` of the input row now at each position.
    pub row_ids: B::Buf<u32>,
    /// `fanout + 1` offsets: exclusive prefix sums of the partition sizes.
    pub offsets: B::Buf<u64>,
    /// Whether every key lay in `[window, window + 2^32)`, so that the low words are
    /// one-to-one on the keys. When not, the output is still the partition of the low words,
    /// but two keys may share one.
    pub within_window: bool,
}

impl<B: Backend> std::fmt::Debug for LowWords<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LowWords")
            .field("rows", &joinkit_cuda::Buffer::len(&self.keys))
            .field("within_window", &self.within_window)
            .finish()
    }
}

/// The hash partition of 8-byte keys by their low 32 bits.
///
/// Row `i` goes to partition [`hash_partition_of`]`(keys[i] as u32, seed, fanout)` (the same
/// partition as the low word's own hash partition as a 4-byte key), written as that low word
/// with the row id `ids_from + i`; order within a partition is unspecified. Where a caller
/// knows its keys span fewer than 2^32 values (a sample of them, say) it narrows them here
/// instead of in a pass of their own, and the check of the window that comes back tells it
/// whether the sample was right: keys of one window `[w, w + 2^32)` differ in their low words.
/// The CUDA backend checks the window in the histogram pass it reads the keys in anyway, and
/// writes the ids rather than reading a column of them.
pub trait LowWordsPartition: Backend {
    /// Partitions `keys` into `by.0` partitions by the hash (seed `by.1`) of their low words.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for keys other than 8 bytes wide or a fan-out above
    /// [`MAX_LOW_WORDS_FANOUT`]; [`Error::EmptyInput`] for a fan-out of 0;
    /// [`Error::SizeOverflow`] when `ids_from + keys.len()` passes 2^32; allocation and driver
    /// errors.
    fn hash_partition_low_words<K: Key>(
        &self,
        keys: &Self::Buf<K>,
        by: (usize, u32),
        window: u64,
        ids_from: u32,
    ) -> Result<LowWords<Self>>;
}

/// The checks both backends make; returns the fan-out.
pub(crate) fn check_low_words<K: Key>(n: usize, fanout: usize, ids_from: u32) -> Result<usize> {
    if K::BITS != 64 {
        return Err(Error::InvalidArgument(format!(
            "a partition into low words takes 8-byte keys, not {}-byte ones",
            K::BITS / 8
        )));
    }
    if fanout == 0 {
        return Err(Error::EmptyInput("partition fan-out of 0"));
    }
    if fanout > MAX_LOW_WORDS_FANOUT {
        return Err(Error::InvalidArgument(format!(
            "a partition into low words has at most {MAX_LOW_WORDS_FANOUT} partitions, not \
             {fanout}"
        )));
    }
    if u64::from(ids_from) + n as u64 > 1 << 32 {
        return Err(Error::SizeOverflow(
            "row ids from the first one asked for pass 2^32",
        ));
    }
    Ok(fanout)
}

/// Whether `key` lies in `[window, window + 2^32)`.
fn in_window(key: u64, window: u64) -> bool {
    key.wrapping_sub(window) >> 32 == 0
}

impl LowWordsPartition for CpuBackend {
    fn hash_partition_low_words<K: Key>(
        &self,
        keys: &Vec<K>,
        (fanout, seed): (usize, u32),
        window: u64,
        ids_from: u32,
    ) -> Result<LowWords<Self>> {
        let fanout = check_low_words::<K>(keys.len(), fanout, ids_from)?;
        let within_window = keys
            .par_iter()
            .with_min_len(PARALLEL_THRESHOLD)
            .all(|k| in_window(k.to_u64(), window));
        let low: Vec<u32> = keys
            .par_iter()
            .with_min_len(PARALLEL_THRESHOLD)
            .map(|k| k.to_u64() as u32)
            .collect();
        let p = cpu_stable_partition(&low, &[], RowIds::U32, fanout, |k| {
            hash_partition_of(k, seed, fanout as u32)
        })?;
        let row_ids = match p.row_ids {
            Some(joinkit_cuda::Column::U32(mut ids)) => {
                ids.par_iter_mut()
                    .with_min_len(PARALLEL_THRESHOLD)
                    .for_each(|i| *i += ids_from);
                ids
            }
            _ => return Err(Error::Corrupt("4-byte row ids asked for".into())),
        };
        Ok(LowWords {
            keys: p.keys,
            row_ids,
            offsets: p.offsets,
            within_window,
        })
    }
}

#[cfg(feature = "cuda")]
impl LowWordsPartition for joinkit_cuda::CudaBackend {
    fn hash_partition_low_words<K: Key>(
        &self,
        keys: &Self::Buf<K>,
        (fanout, seed): (usize, u32),
        window: u64,
        ids_from: u32,
    ) -> Result<LowWords<Self>> {
        let n = keys.len();
        let fanout = check_low_words::<K>(n, fanout, ids_from)?;
        let mut keys_out = self.alloc::<u32>(n)?;
        let mut row_ids = self.alloc::<u32>(n)?;
        let mut offsets = self.alloc::<u64>(fanout + 1)?;
        let mut outside = self.upload(&[0u32])?;
        crate::cuda::hash_partition_low_words(
            self,
            &keys.view(),
            &mut keys_out.view_mut(),
            &mut row_ids.view_mut(),
            ids_from,
            &mut offsets.view_mut(),
            (fanout, seed),
            (window, &mut outside.view_mut()),
            &mut joinkit_cuda::Scratch::new(),
        )?;
        let within_window = self.download(&outside)?[0] == 0;
        Ok(LowWords {
            keys: keys_out,
            row_ids,
            offsets,
            within_window,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::in_window;

    #[test]
    fn the_window_holds_2_to_the_32_keys_from_its_start() {
        assert!(in_window(5, 5));
        assert!(in_window(5 + u64::from(u32::MAX), 5));
        assert!(!in_window(5 + (1 << 32), 5));
        assert!(!in_window(4, 5));
        assert!(in_window(u64::MAX, u64::MAX - 3));
    }
}
