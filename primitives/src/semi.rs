//! The semi join of co-clustered inputs: a left column of sorted unique keys (TPC-H's
//! `o_orderkey`) and a right column of sorted keys (`l_orderkey`, which arrives clustered by
//! order). Each left row learns whether a right row has its key: a merge, no hash table, every
//! column read once in order. Both sides may carry flags (a filter's output) so a predicate on
//! either side needs no compaction first.

use joinkit_cuda::{Backend, CpuBackend, Element, Error, Key, Result};
use rayon::prelude::*;

/// Left rows per unit of work (one CUDA block's tile; a rayon task on the CPU).
pub const SORTED_MATCH_TILE: usize = 2048; // jkp::kTile in kernels/semi.cu

/// Marks the left rows that have a match in a sorted right column.
pub trait SortedMatch: Backend {
    /// For every left row `i` whose `left_flags[i]` is non-zero (every row without flags),
    /// sets `marks[i] = 1` if some right row `j` with `right_keys[j] == left_keys[i]` has a
    /// non-zero `right_flags[j]` (any right row without flags). Other marks keep their value,
    /// so marks accumulate over chunks of the right side (a caller streaming `lineitem` calls
    /// it once per chunk).
    ///
    /// `left_keys` must be strictly ascending and `right_keys` ascending; both are checked as
    /// they are read (with no left rows nothing is read: there is nothing to mark).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when a side is out of order (marks are then unspecified);
    /// [`Error::LengthMismatch`] when flags or marks differ in length from their keys;
    /// allocation and driver errors.
    fn mark_sorted_matches<K: Key>(
        &self,
        left_keys: &Self::Buf<K>,
        left_flags: Option<&Self::Buf<u32>>,
        right_keys: &Self::Buf<K>,
        right_flags: Option<&Self::Buf<u32>>,
        marks: &mut Self::Buf<u32>,
    ) -> Result<()>;

    /// [`SortedMatch::mark_sorted_matches`] where a right row counts when
    /// `first[j] < second[j]` (TPC-H Q4's `l_commitdate < l_receiptdate`) instead of by a
    /// flag: the predicate is read only for right rows that found a wanted left row, so a
    /// selective left side leaves most of both columns unread, and no flags column is written.
    ///
    /// # Errors
    /// As [`SortedMatch::mark_sorted_matches`]; [`Error::LengthMismatch`] when `first` or
    /// `second` differ in length from the right keys.
    fn mark_sorted_matches_where_less<K: Key, T: Element + Ord>(
        &self,
        left_keys: &Self::Buf<K>,
        left_flags: Option<&Self::Buf<u32>>,
        right_keys: &Self::Buf<K>,
        first: &Self::Buf<T>,
        second: &Self::Buf<T>,
        marks: &mut Self::Buf<u32>,
    ) -> Result<()>;
}

/// The errors of an out-of-order side, the same on both backends.
pub(crate) fn left_unsorted() -> Error {
    Error::InvalidArgument("left keys are not strictly ascending (sorted and unique)".into())
}
pub(crate) fn right_unsorted() -> Error {
    Error::InvalidArgument("right keys are not ascending".into())
}

/// The length checks both backends make.
pub(crate) fn check_lengths(
    left: usize,
    left_flags: Option<usize>,
    right: usize,
    right_flags: Option<usize>,
    marks: usize,
) -> Result<()> {
    if let Some(f) = left_flags {
        Error::check_len("left flags vs left keys", left, f)?;
    }
    if let Some(f) = right_flags {
        Error::check_len("right flags (or first) vs right keys", right, f)?;
    }
    Error::check_len("marks vs left keys", left, marks)
}

/// The CPU twin of both entries: `counts(j)` says whether right row `j` counts; it is asked
/// only for right rows that found a wanted left row, as on the GPU.
fn mark_on_cpu<K: Key>(
    left_keys: &[K],
    left_flags: Option<&[u32]>,
    right_keys: &[K],
    counts: impl Fn(usize) -> bool + Sync,
    marks: &mut [u32],
) -> Result<()> {
    if left_keys.is_empty() {
        return Ok(());
    }
    if left_keys.par_windows(2).any(|w| w[0] >= w[1]) {
        return Err(left_unsorted());
    }
    if right_keys.par_windows(2).any(|w| w[0] > w[1]) {
        return Err(right_unsorted());
    }
    let tiles = left_keys.par_chunks(SORTED_MATCH_TILE);
    tiles
        .zip(marks.par_chunks_mut(SORTED_MATCH_TILE))
        .enumerate()
        .for_each(|(t, (keys, marks))| {
            let first = t * SORTED_MATCH_TILE;
            // The tile's right rows: from its first key to its last.
            let lo = right_keys.partition_point(|r| *r < keys[0]);
            let hi = right_keys.partition_point(|r| *r <= keys[keys.len() - 1]);
            let mut at = 0; // both sides ascend: the left position only moves forward
            for (j, r) in (lo..hi).zip(&right_keys[lo..hi]) {
                while keys[at] < *r {
                    at += 1;
                }
                let wanted = keys[at] == *r && left_flags.is_none_or(|f| f[first + at] != 0);
                if wanted && counts(j) {
                    marks[at] = 1;
                }
            }
        });
    Ok(())
}

impl SortedMatch for CpuBackend {
    fn mark_sorted_matches<K: Key>(
        &self,
        left_keys: &Vec<K>,
        left_flags: Option<&Vec<u32>>,
        right_keys: &Vec<K>,
        right_flags: Option<&Vec<u32>>,
        marks: &mut Vec<u32>,
    ) -> Result<()> {
        check_lengths(
            left_keys.len(),
            left_flags.map(Vec::len),
            right_keys.len(),
            right_flags.map(Vec::len),
            marks.len(),
        )?;
        let counts = |j: usize| right_flags.is_none_or(|f| f[j] != 0);
        mark_on_cpu(
            left_keys,
            left_flags.map(Vec::as_slice),
            right_keys,
            counts,
            marks,
        )
    }

    fn mark_sorted_matches_where_less<K: Key, T: Element + Ord>(
        &self,
        left_keys: &Vec<K>,
        left_flags: Option<&Vec<u32>>,
        right_keys: &Vec<K>,
        first: &Vec<T>,
        second: &Vec<T>,
        marks: &mut Vec<u32>,
    ) -> Result<()> {
        let (n, m) = (left_keys.len(), right_keys.len());
        check_lengths(
            n,
            left_flags.map(Vec::len),
            m,
            Some(first.len()),
            marks.len(),
        )?;
        Error::check_len("second vs right keys", m, second.len())?;
        let counts = |j: usize| first[j] < second[j];
        mark_on_cpu(
            left_keys,
            left_flags.map(Vec::as_slice),
            right_keys,
            counts,
            marks,
        )
    }
}

#[cfg(feature = "cuda")]
mod on_cuda {
    use super::*;
    use crate::cuda;
    use joinkit_cuda::{CudaBackend, DeviceBuffer};

    impl SortedMatch for CudaBackend {
        fn mark_sorted_matches<K: Key>(
            &self,
            left_keys: &DeviceBuffer<K>,
            left_flags: Option<&DeviceBuffer<u32>>,
            right_keys: &DeviceBuffer<K>,
            right_flags: Option<&DeviceBuffer<u32>>,
            marks: &mut DeviceBuffer<u32>,
        ) -> Result<()> {
            let mut check = cuda::OrderCheck::new(self)?;
            cuda::mark_sorted_matches(
                self,
                &left_keys.view(),
                left_flags.map(|f| f.view()).as_ref(),
                &right_keys.view(),
                right_flags.map(|f| f.view()).as_ref(),
                &mut marks.view_mut(),
                &mut check,
            )?;
            check.take(self)
        }

        fn mark_sorted_matches_where_less<K: Key, T: Element + Ord>(
            &self,
            left_keys: &DeviceBuffer<K>,
            left_flags: Option<&DeviceBuffer<u32>>,
            right_keys: &DeviceBuffer<K>,
            first: &DeviceBuffer<T>,
            second: &DeviceBuffer<T>,
            marks: &mut DeviceBuffer<u32>,
        ) -> Result<()> {
            let mut check = cuda::OrderCheck::new(self)?;
            cuda::mark_sorted_matches_where_less(
                self,
                &left_keys.view(),
                left_flags.map(|f| f.view()).as_ref(),
                &right_keys.view(),
                (&first.view(), &second.view()),
                &mut marks.view_mut(),
                &mut check,
            )?;
            check.take(self)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_gate_both_sides_and_marks_accumulate() {
        let cpu = CpuBackend::new();
        let left = vec![2u64, 5, 9, 12];
        let right = vec![1u64, 2, 2, 5, 9, 9, 13];
        let mut marks = vec![0u32; 4];
        let right_flags = vec![1, 0, 1, 0, 0, 1, 1];
        cpu.mark_sorted_matches(&left, None, &right, Some(&right_flags), &mut marks)
            .unwrap();
        assert_eq!(marks, vec![1, 0, 1, 0]);
        let left_flags = vec![0, 1, 1, 1];
        let mut marks = vec![0, 0, 0, 7];
        cpu.mark_sorted_matches(&left, Some(&left_flags), &right, None, &mut marks)
            .unwrap();
        assert_eq!(marks, vec![0, 1, 1, 7], "unmatched marks keep their value");
        let err = cpu.mark_sorted_matches(&vec![3u64, 3], None, &right, None, &mut vec![0; 2]);
        assert!(matches!(err, Err(Error::InvalidArgument(_))));
        let err = cpu.mark_sorted_matches(&left, None, &vec![2u64, 1], None, &mut marks);
        assert!(matches!(err, Err(Error::InvalidArgument(_))));
        let err = cpu.mark_sorted_matches(&left, None, &right, None, &mut vec![0; 3]);
        assert!(matches!(err, Err(Error::LengthMismatch { .. })));
    }
}
