//! Merge-path pieces of sort-merge joins: vectorized searchsorted (the lower and upper bound of
//! every key of A in a sorted B) and the load-balanced expansion of the matching ranges into
//! `(a_index, b_index)` pairs (M:N joins), with 64-bit output sizes counted first.

use joinkit_cuda::{Backend, CpuBackend, Error, Key, Result};
use rayon::prelude::*;

/// Bounds in a sorted column, and range expansion.
pub trait MergePath: Backend {
    /// For every key `a[i]`, `lower[i]` = the first position `j` with `b[j] >= a[i]` and
    /// `upper[i]` = the first with `b[j] > a[i]` (so `b[lower..upper]` are the matches).
    ///
    /// `b` must be sorted ascending (not checked: on unsorted input the bounds are unspecified
    /// positions in `0..=b.len()`). `a` needs no order; sorted, it searches faster on CUDA.
    ///
    /// # Errors
    /// [`Error::SizeOverflow`] when `b.len()` or a row id of `a` does not fit `I`;
    /// allocation and driver errors.
    fn sorted_bounds<K: Key, I: Key>(
        &self,
        a: &Self::Buf<K>,
        b: &Self::Buf<K>,
    ) -> Result<(Self::Buf<I>, Self::Buf<I>)>;

    /// The number of pairs [`MergePath::expand_ranges`] produces: the sum of
    /// `upper[i] - lower[i]`.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `lower` and `upper` differ in length;
    /// [`Error::InvalidArgument`] for the first row with `upper < lower`;
    /// [`Error::SizeOverflow`] when the sum passes `u64`; allocation and driver errors.
    fn range_total<I: Key>(&self, lower: &Self::Buf<I>, upper: &Self::Buf<I>) -> Result<u64>;

    /// Every pair `(i, j)` with `j in lower[i]..upper[i]`, ordered by `i` then `j`, written to
    /// the first elements of `a_out` and `b_out`; returns the number of pairs. The rest of the
    /// outputs is left as it was. Balanced over the output, whatever the range lengths.
    ///
    /// # Errors
    /// As [`MergePath::range_total`]; [`Error::OutputTooLarge`] when the pairs do not fit the
    /// shorter output; [`Error::SizeOverflow`] when a row id does not fit `I`.
    fn expand_ranges_into<I: Key>(
        &self,
        lower: &Self::Buf<I>,
        upper: &Self::Buf<I>,
        a_out: &mut Self::Buf<I>,
        b_out: &mut Self::Buf<I>,
    ) -> Result<u64>;

    /// [`MergePath::expand_ranges_into`] into outputs of exactly the needed size.
    ///
    /// # Errors
    /// As [`MergePath::expand_ranges_into`], plus allocation errors ([`Error::SizeOverflow`]
    /// when the total does not fit `usize`).
    fn expand_ranges<I: Key>(
        &self,
        lower: &Self::Buf<I>,
        upper: &Self::Buf<I>,
    ) -> Result<(Self::Buf<I>, Self::Buf<I>)>;
}

/// Row ids of an `na`-row side and positions `0..=nb` of the other must fit `I`.
pub(crate) fn check_positions<I: Key>(na: usize, nb: usize) -> Result<()> {
    crate::select::check_ids::<I>(na)?;
    if nb as u64 > I::MAX.to_u64() {
        return Err(Error::SizeOverflow("positions do not fit the index type"));
    }
    Ok(())
}

fn bad_range<I: Key>(row: usize, lower: I, upper: I) -> Error {
    Error::InvalidArgument(format!(
        "range {row} has upper bound {upper:?} below lower bound {lower:?}"
    ))
}

/// Exclusive offsets of the range lengths (`n + 1` entries, the total last), CPU twin.
fn cpu_offsets<I: Key>(lower: &[I], upper: &[I]) -> Result<Vec<u64>> {
    Error::check_len("ranges lower vs upper", lower.len(), upper.len())?;
    if let Some(row) = lower.par_iter().zip(upper).position_first(|(l, u)| u < l) {
        return Err(bad_range(row, lower[row], upper[row]));
    }
    let mut offsets = Vec::with_capacity(lower.len() + 1);
    let mut acc = 0u64;
    offsets.push(0);
    for (l, u) in lower.iter().zip(upper) {
        acc = acc
            .checked_add(u.to_u64() - l.to_u64())
            .ok_or(Error::SizeOverflow("number of pairs"))?;
        offsets.push(acc);
    }
    Ok(offsets)
}

impl MergePath for CpuBackend {
    fn sorted_bounds<K: Key, I: Key>(&self, a: &Vec<K>, b: &Vec<K>) -> Result<(Vec<I>, Vec<I>)> {
        check_positions::<I>(a.len(), b.len())?;
        Ok(a.par_iter()
            .map(|key| {
                let lo = b.partition_point(|x| x < key);
                let hi = lo + b[lo..].partition_point(|x| x <= key);
                (I::from_u64(lo as u64), I::from_u64(hi as u64))
            })
            .unzip())
    }

    fn range_total<I: Key>(&self, lower: &Vec<I>, upper: &Vec<I>) -> Result<u64> {
        Ok(*cpu_offsets(lower, upper)?.last().unwrap_or(&0))
    }

    fn expand_ranges_into<I: Key>(
        &self,
        lower: &Vec<I>,
        upper: &Vec<I>,
        a_out: &mut Vec<I>,
        b_out: &mut Vec<I>,
    ) -> Result<u64> {
        let offsets = cpu_offsets(lower, upper)?;
        check_positions::<I>(lower.len(), 0)?;
        let total = *offsets.last().unwrap_or(&0);
        let capacity = a_out.len().min(b_out.len()) as u64;
        if total > capacity {
            return Err(Error::OutputTooLarge {
                needed: total,
                capacity,
            });
        }
        let total = total as usize;
        // Balanced like the kernel: chunks of the output, each finds its first row by binary
        // search and walks.
        const CHUNK: usize = joinkit_cuda::PARALLEL_THRESHOLD;
        a_out[..total]
            .par_chunks_mut(CHUNK)
            .zip(b_out[..total].par_chunks_mut(CHUNK))
            .enumerate()
            .for_each(|(c, (a, b))| {
                let first = (c * CHUNK) as u64;
                // The last row whose offset is <= first (rows are non-empty where outputs are).
                let mut r = offsets[..lower.len()].partition_point(|&o| o <= first) - 1;
                for (k, (a, b)) in (first..).zip(a.iter_mut().zip(b.iter_mut())) {
                    while offsets[r + 1] <= k {
                        r += 1;
                    }
                    *a = I::from_u64(r as u64);
                    *b = I::from_u64(lower[r].to_u64() + (k - offsets[r]));
                }
            });
        Ok(total as u64)
    }

    fn expand_ranges<I: Key>(&self, lower: &Vec<I>, upper: &Vec<I>) -> Result<(Vec<I>, Vec<I>)> {
        let total = self.range_total(lower, upper)?;
        let len = usize::try_from(total).map_err(|_| Error::SizeOverflow("number of pairs"))?;
        let (mut a, mut b) = (self.alloc::<I>(len)?, self.alloc::<I>(len)?);
        self.expand_ranges_into(lower, upper, &mut a, &mut b)?;
        Ok((a, b))
    }
}

#[cfg(feature = "cuda")]
mod on_cuda {
    use super::*;
    use crate::cuda;
    use joinkit_cuda::{CudaBackend, DeviceBuffer, Scratch};

    /// Offsets of the ranges and the total (one synchronization to read it and the check).
    fn offsets<I: Key>(
        b: &CudaBackend,
        lower: &DeviceBuffer<I>,
        upper: &DeviceBuffer<I>,
        scratch: &mut Scratch,
    ) -> Result<(DeviceBuffer<u64>, u64)> {
        Error::check_len("ranges lower vs upper", lower.len(), upper.len())?;
        let n = lower.len();
        let mut offsets = b.alloc::<u64>(n + 1)?;
        let mut check = cuda::BoundsCheck::new(b)?;
        cuda::range_offsets(
            b,
            &lower.view(),
            &upper.view(),
            &mut offsets.view_mut(),
            &mut check,
            scratch,
        )?;
        if let Some(row) = check.take(b)? {
            let row = row as usize;
            let l = cuda::read_at(b, &lower.view(), row)?;
            let u = cuda::read_at(b, &upper.view(), row)?;
            return Err(bad_range(row, l, u));
        }
        let total = cuda::read_at(b, &offsets.view(), n)?;
        Ok((offsets, total))
    }

    fn expand<I: Key>(
        b: &CudaBackend,
        lower: &DeviceBuffer<I>,
        offsets: &DeviceBuffer<u64>,
        total: u64,
        a_out: &mut DeviceBuffer<I>,
        b_out: &mut DeviceBuffer<I>,
        scratch: &mut Scratch,
    ) -> Result<()> {
        cuda::expand_ranges(
            b,
            &lower.view(),
            &offsets.view(),
            total,
            &mut a_out.view_mut(),
            &mut b_out.view_mut(),
            scratch,
        )
    }

    impl MergePath for CudaBackend {
        fn sorted_bounds<K: Key, I: Key>(
            &self,
            a: &DeviceBuffer<K>,
            b: &DeviceBuffer<K>,
        ) -> Result<(DeviceBuffer<I>, DeviceBuffer<I>)> {
            check_positions::<I>(a.len(), b.len())?;
            let mut lower = self.alloc::<I>(a.len())?;
            let mut upper = self.alloc::<I>(a.len())?;
            cuda::sorted_bounds(
                self,
                &a.view(),
                &b.view(),
                &mut lower.view_mut(),
                &mut upper.view_mut(),
            )?;
            Ok((lower, upper))
        }

        fn range_total<I: Key>(
            &self,
            lower: &DeviceBuffer<I>,
            upper: &DeviceBuffer<I>,
        ) -> Result<u64> {
            Ok(offsets(self, lower, upper, &mut Scratch::new())?.1)
        }

        fn expand_ranges_into<I: Key>(
            &self,
            lower: &DeviceBuffer<I>,
            upper: &DeviceBuffer<I>,
            a_out: &mut DeviceBuffer<I>,
            b_out: &mut DeviceBuffer<I>,
        ) -> Result<u64> {
            let mut scratch = Scratch::new();
            let (offs, total) = offsets(self, lower, upper, &mut scratch)?;
            expand(self, lower, &offs, total, a_out, b_out, &mut scratch)?;
            Ok(total)
        }

        fn expand_ranges<I: Key>(
            &self,
            lower: &DeviceBuffer<I>,
            upper: &DeviceBuffer<I>,
        ) -> Result<(DeviceBuffer<I>, DeviceBuffer<I>)> {
            let mut scratch = Scratch::new();
            let (offs, total) = offsets(self, lower, upper, &mut scratch)?;
            let len = usize::try_from(total).map_err(|_| Error::SizeOverflow("number of pairs"))?;
            let (mut a, mut b) = (self.alloc::<I>(len)?, self.alloc::<I>(len)?);
            expand(self, lower, &offs, total, &mut a, &mut b, &mut scratch)?;
            Ok((a, b))
        }
    }
}
