//! A hash partition of 8-byte keys that writes them as their low 32 bits, naming each row by
//! its id or by a bit of its partition's membership bitmap: a distributed join's partition by
//! rank, narrowing its keys and numbering its rows in the same pass instead of three, and
//! sending one bit a row for the ids instead of 32.

use joinkit_cuda::{Backend, CpuBackend, Error, Key, PARALLEL_THRESHOLD, Result};
use rayon::prelude::*;

use crate::column::RowIds;
use crate::digit::hash_partition_of;
use crate::stable::cpu_stable_partition;

/// Largest fan-out of [`LowWordsPartition::hash_partition_low_words`] (its kernels are the
/// small fan-out class's).
pub const MAX_LOW_WORDS_FANOUT: usize = 16;

/// What [`LowWordsPartition::hash_partition_low_words`] writes to name the rows it moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowNames {
    /// Nothing: the low words alone.
    None,
    /// The row id `from + row` beside each low word ([`LowWords::row_ids`]).
    Ids {
        /// The id of row 0.
        from: u32,
    },
    /// One bit a row and partition ([`LowWords::members`]) instead of a 4-byte id a row: the
    /// partition is stable, so a partition's rows are its bitmap's set bits in order, and a
    /// receiver rebuilds their ids with [`LowWordsPartition::member_row_ids`]. A distributed
    /// join's shuffle then sends each rank one bit for every row of the sender instead of 32
    /// bits for every row that goes there.
    Members,
}

/// 8-byte keys grouped by partition and written as their low 32 bits, how the rows are named,
/// and whether every key lay in the window asked for.
pub struct LowWords<B: Backend> {
    /// The keys' low 32 bits, grouped by partition, each partition's in input order.
    pub keys: B::Buf<u32>,
    /// With [`RowNames::Ids`]: `from + row` of the input row now at each position.
    pub row_ids: Option<B::Buf<u32>>,
    /// With [`RowNames::Members`]: `fanout` bitmaps of [`member_words`]`(rows)` words each,
    /// partition `p`'s first; bit `i % 32` of its word `i / 32` is set when input row `i` went
    /// to `p`. Bits past the last row are clear.
    pub members: Option<B::Buf<u32>>,
    /// `fanout + 1` offsets: exclusive prefix sums of the partition sizes, on the host. The
    /// CUDA backend reads them (and the window's check) back as soon as its scan has counted
    /// them and returns while its scatter still runs on the stream, so that a caller can agree
    /// on sizes with other ranks meanwhile.
    pub offsets: Vec<u64>,
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

/// Words of one partition's membership bitmap over `rows` input rows ([`LowWords::members`]).
pub fn member_words(rows: usize) -> usize {
    rows.div_ceil(32)
}

/// One sender's membership bitmap among several laid end to end (as an all-to-all delivers
/// them, in rank order): its words, and the id its row 0 takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemberRun {
    /// [`member_words`] of the sender's input rows.
    pub words: usize,
    /// The id of the sender's row 0; row `i` becomes `first_id + i`, wrapping at 2^32 (the
    /// caller keeps ids within 32 bits, as the distributed join's packed ids are).
    pub first_id: u32,
}

/// The hash partition of 8-byte keys by their low 32 bits.
///
/// Row `i` goes to partition [`hash_partition_of`]`(keys[i] as u32, seed, fanout)` (the same
/// partition as the low word's own hash partition as a 4-byte key), written as that low word,
/// named as [`RowNames`] asks; the partition is stable (a partition's rows in input order).
/// Where a caller knows its keys span fewer than 2^32 values (a sample of them, say) it
/// narrows them here instead of in a pass of their own, and the check of the window that comes
/// back tells it whether the sample was right: keys of one window `[w, w + 2^32)` differ in
/// their low words. The CUDA backend checks the window in the histogram pass it reads the keys
/// in anyway, and writes the ids or bitmaps in its scatter rather than reading a column of ids.
pub trait LowWordsPartition: Backend {
    /// Partitions `keys` into `by.0` partitions by the hash (seed `by.1`) of their low words.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for keys other than 8 bytes wide or a fan-out above
    /// [`MAX_LOW_WORDS_FANOUT`]; [`Error::EmptyInput`] for a fan-out of 0;
    /// [`Error::SizeOverflow`] when `from + keys.len()` passes 2^32 ([`RowNames::Ids`]);
    /// [`Error::Corrupt`] when the CUDA backend reads back sizes that do not add up to the
    /// rows; allocation and driver errors.
    fn hash_partition_low_words<K: Key>(
        &self,
        keys: &Self::Buf<K>,
        by: (usize, u32),
        window: u64,
        names: RowNames,
    ) -> Result<LowWords<Self>>;

    /// The row ids of the rows one partition received from each of `runs` (its senders), in
    /// the order they sent them: for each run in turn, `first_id + i` for every set bit `i` of
    /// its bitmap. `members` holds the runs' bitmaps end to end; `rows` is how many bits are
    /// set (the rows received), the length of the output.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when the runs' words are not `members`' length;
    /// [`Error::InvalidArgument`] for more than [`MAX_LOW_WORDS_FANOUT`] runs; on the CPU,
    /// [`Error::Corrupt`] when other than `rows` bits are set (the CUDA backend, which does not
    /// wait for its kernels, writes at most `rows` ids, and where fewer bits are set leaves the
    /// output's end unwritten); allocation and driver errors.
    fn member_row_ids(
        &self,
        members: &Self::Buf<u32>,
        runs: &[MemberRun],
        rows: usize,
    ) -> Result<Self::Buf<u32>>;
}

/// The checks of [`LowWordsPartition::member_row_ids`] on both backends.
pub(crate) fn check_member_runs(words: usize, runs: &[MemberRun]) -> Result<()> {
    if runs.len() > MAX_LOW_WORDS_FANOUT {
        return Err(Error::InvalidArgument(format!(
            "membership bitmaps of at most {MAX_LOW_WORDS_FANOUT} senders, not {}",
            runs.len()
        )));
    }
    let total = runs
        .iter()
        .try_fold(0usize, |a, r| a.checked_add(r.words))
        .ok_or(Error::SizeOverflow("membership bitmap words"))?;
    Error::check_len("membership bitmaps vs their runs' words", total, words)
}

/// The checks both backends make; returns the fan-out.
pub(crate) fn check_low_words<K: Key>(n: usize, fanout: usize, names: RowNames) -> Result<usize> {
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
    if let RowNames::Ids { from } = names
        && u64::from(from) + n as u64 > 1 << 32
    {
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
        names: RowNames,
    ) -> Result<LowWords<Self>> {
        let fanout = check_low_words::<K>(keys.len(), fanout, names)?;
        let within_window = keys
            .par_iter()
            .with_min_len(PARALLEL_THRESHOLD)
            .all(|k| in_window(k.to_u64(), window));
        let low: Vec<u32> = keys
            .par_iter()
            .with_min_len(PARALLEL_THRESHOLD)
            .map(|k| k.to_u64() as u32)
            .collect();
        let digit = |k: u32| hash_partition_of(k, seed, fanout as u32);
        let ids = match names {
            RowNames::Ids { .. } => RowIds::U32,
            RowNames::None | RowNames::Members => RowIds::None,
        };
        let members = match names {
            RowNames::Members => Some(cpu_members(&low, fanout, digit)?),
            RowNames::None | RowNames::Ids { .. } => None,
        };
        let p = cpu_stable_partition(&low, &[], ids, fanout, digit)?;
        let row_ids = match (p.row_ids, names) {
            (Some(joinkit_cuda::Column::U32(mut ids)), RowNames::Ids { from }) => {
                ids.par_iter_mut()
                    .with_min_len(PARALLEL_THRESHOLD)
                    .for_each(|i| *i += from);
                Some(ids)
            }
            (None, RowNames::None | RowNames::Members) => None,
            _ => return Err(Error::Corrupt("4-byte row ids asked for".into())),
        };
        Ok(LowWords {
            keys: p.keys,
            row_ids,
            members,
            offsets: p.offsets,
            within_window,
        })
    }

    fn member_row_ids(
        &self,
        members: &Vec<u32>,
        runs: &[MemberRun],
        rows: usize,
    ) -> Result<Vec<u32>> {
        check_member_runs(members.len(), runs)?;
        let mut ids = joinkit_cuda::try_reserved(rows)?;
        let mut at = 0;
        for run in runs {
            let words = &members[at..at + run.words];
            at += run.words;
            let first = run.first_id;
            ids.par_extend(
                words
                    .par_iter()
                    .enumerate()
                    .with_min_len(PARALLEL_THRESHOLD / 32)
                    .flat_map_iter(|(w, &word)| {
                        set_bits(word).map(move |b| first.wrapping_add((w * 32 + b) as u32))
                    }),
            );
        }
        if ids.len() != rows {
            return Err(Error::Corrupt(format!(
                "membership bitmaps with {} rows where {rows} were received",
                ids.len()
            )));
        }
        Ok(ids)
    }
}

/// The positions of `word`'s set bits, ascending.
fn set_bits(mut word: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (word != 0).then(|| {
            let b = word.trailing_zeros() as usize;
            word &= word - 1;
            b
        })
    })
}

/// [`LowWords::members`] of the low words `low` and their partitions by `digit`.
fn cpu_members(
    low: &[u32],
    fanout: usize,
    digit: impl Fn(u32) -> usize + Sync,
) -> Result<Vec<u32>> {
    let words = member_words(low.len());
    let digits: Vec<u8> = low
        .par_iter()
        .with_min_len(PARALLEL_THRESHOLD)
        .map(|&k| digit(k) as u8)
        .collect();
    let mut out = joinkit_cuda::try_zeroed::<u32>(fanout * words)?;
    if words == 0 {
        return Ok(out);
    }
    out.par_chunks_mut(words)
        .enumerate()
        .for_each(|(p, bitmap)| {
            bitmap
                .par_iter_mut()
                .enumerate()
                .with_min_len(PARALLEL_THRESHOLD / 32)
                .for_each(|(w, word)| {
                    *word = (digits[w * 32..digits.len().min(w * 32 + 32)].iter())
                        .enumerate()
                        .filter(|&(_, &d)| usize::from(d) == p)
                        .fold(0, |acc, (b, _)| acc | 1 << b);
                });
        });
    Ok(out)
}

#[cfg(feature = "cuda")]
impl LowWordsPartition for joinkit_cuda::CudaBackend {
    fn hash_partition_low_words<K: Key>(
        &self,
        keys: &Self::Buf<K>,
        (fanout, seed): (usize, u32),
        window: u64,
        names: RowNames,
    ) -> Result<LowWords<Self>> {
        use crate::cuda::RowNamesOut;
        let n = keys.len();
        let fanout = check_low_words::<K>(n, fanout, names)?;
        let mut keys_out = self.alloc::<u32>(n)?;
        let (mut row_ids, mut members) = match names {
            RowNames::None => (None, None),
            RowNames::Ids { .. } => (Some(self.alloc::<u32>(n)?), None),
            RowNames::Members => (None, Some(self.alloc::<u32>(fanout * member_words(n))?)),
        };
        if n == 0 {
            // Nothing to count, so nothing is posted.
            return Ok(LowWords {
                keys: keys_out,
                row_ids,
                members,
                offsets: vec![0; fanout + 1],
                within_window: true,
            });
        }
        let mut device_offsets = self.alloc::<u64>(fanout + 1)?;
        let mut outside = self.alloc::<u32>(1)?;
        self.fill(&mut outside, 0)?;
        let lost = || Error::Corrupt("a partition's names went missing".into());
        let out = match names {
            RowNames::None => RowNamesOut::None,
            RowNames::Ids { from } => RowNamesOut::Ids {
                out: row_ids.as_mut().ok_or_else(lost)?.view_mut(),
                from,
            },
            RowNames::Members => {
                RowNamesOut::Members(members.as_mut().ok_or_else(lost)?.view_mut())
            }
        };
        // The sizes and the flag come back as soon as the scan has counted them; the scatter
        // goes on behind this call.
        let posted = self.posted_words(fanout + 1, 1, |_, words, ticket| {
            // SAFETY: posted_words gives room for the fanout + 1 words asked for and the
            // ticket, held until it has read them.
            let post = unsafe { crate::cuda::PostSizes::new(words, ticket) };
            crate::cuda::hash_partition_low_words(
                self,
                &keys.view(),
                &mut keys_out.view_mut(),
                out,
                &mut device_offsets.view_mut(),
                (fanout, seed),
                (window, &mut outside.view_mut()),
                Some(post),
                &mut joinkit_cuda::Scratch::new(),
            )
        })?;
        let mut offsets = Vec::with_capacity(fanout + 1);
        let mut at = 0u64;
        offsets.push(at);
        for &size in &posted[..fanout] {
            at = at
                .checked_add(size)
                .filter(|&end| end <= n as u64)
                .ok_or_else(|| Error::Corrupt("partition sizes past the rows".into()))?;
            offsets.push(at);
        }
        if at != n as u64 {
            return Err(Error::Corrupt(format!(
                "partition sizes sum to {at} of {n} rows"
            )));
        }
        Ok(LowWords {
            keys: keys_out,
            row_ids,
            members,
            offsets,
            within_window: posted[fanout] == 0,
        })
    }

    fn member_row_ids(
        &self,
        members: &Self::Buf<u32>,
        runs: &[MemberRun],
        rows: usize,
    ) -> Result<Self::Buf<u32>> {
        check_member_runs(members.len(), runs)?;
        let mut ids = self.alloc::<u32>(rows)?;
        crate::cuda::member_row_ids(
            self,
            &members.view(),
            runs,
            &mut ids.view_mut(),
            &mut joinkit_cuda::Scratch::new(),
        )?;
        Ok(ids)
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
