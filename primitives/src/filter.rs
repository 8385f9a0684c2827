//! Predicate flags: the `u32` flags column that [`Compact`](crate::Compact) keeps rows by, for
//! the two predicate shapes a scan filter needs: a column within constant bounds
//! (`o_orderdate >= d and o_orderdate < d + 3 months`) and one column less than another
//! (`l_commitdate < l_receiptdate`). Signed columns compare as signed.

use std::ops::Range;

use joinkit_cuda::{Backend, CpuBackend, Element, Error, PARALLEL_THRESHOLD, Result, try_reserved};
use rayon::prelude::*;

/// Flags (1 = the row passes, 0 = it does not) from a predicate over columns.
pub trait Filter: Backend {
    /// `flags[i] = range.start <= column[i] < range.end` (all 0 for an empty range).
    ///
    /// # Errors
    /// Allocation and driver errors.
    fn flag_range<T: Element + Ord>(
        &self,
        column: &Self::Buf<T>,
        range: Range<T>,
    ) -> Result<Self::Buf<u32>>;

    /// `flags[i] = left[i] < right[i]`.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when the columns differ in length; allocation and driver
    /// errors.
    fn flag_less<T: Element + Ord>(
        &self,
        left: &Self::Buf<T>,
        right: &Self::Buf<T>,
    ) -> Result<Self::Buf<u32>>;
}

impl Filter for CpuBackend {
    fn flag_range<T: Element + Ord>(&self, column: &Vec<T>, range: Range<T>) -> Result<Vec<u32>> {
        let mut flags = try_reserved(column.len())?;
        column
            .par_iter()
            .with_min_len(PARALLEL_THRESHOLD)
            .map(|v| u32::from(range.contains(v)))
            .collect_into_vec(&mut flags);
        Ok(flags)
    }

    fn flag_less<T: Element + Ord>(&self, left: &Vec<T>, right: &Vec<T>) -> Result<Vec<u32>> {
        Error::check_len("flag_less left vs right", left.len(), right.len())?;
        let mut flags = try_reserved(left.len())?;
        left.par_iter()
            .zip(right)
            .with_min_len(PARALLEL_THRESHOLD)
            .map(|(a, b)| u32::from(a < b))
            .collect_into_vec(&mut flags);
        Ok(flags)
    }
}

#[cfg(feature = "cuda")]
mod on_cuda {
    use super::*;
    use crate::cuda;
    use joinkit_cuda::{CudaBackend, DeviceBuffer};

    impl Filter for CudaBackend {
        fn flag_range<T: Element + Ord>(
            &self,
            column: &DeviceBuffer<T>,
            range: Range<T>,
        ) -> Result<DeviceBuffer<u32>> {
            let mut flags = self.alloc::<u32>(column.len())?;
            cuda::flag_range(self, &column.view(), range, &mut flags.view_mut())?;
            Ok(flags)
        }

        fn flag_less<T: Element + Ord>(
            &self,
            left: &DeviceBuffer<T>,
            right: &DeviceBuffer<T>,
        ) -> Result<DeviceBuffer<u32>> {
            Error::check_len("flag_less left vs right", left.len(), right.len())?;
            let mut flags = self.alloc::<u32>(left.len())?;
            cuda::flag_less(self, &left.view(), &right.view(), &mut flags.view_mut())?;
            Ok(flags)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signed_ranges_compare_as_signed() {
        let cpu = CpuBackend::new();
        let col = vec![-5i32, -1, 0, 3, i32::MIN, i32::MAX];
        assert_eq!(cpu.flag_range(&col, -1..4).unwrap(), vec![0, 1, 1, 1, 0, 0]);
        let (hi, lo) = (4, -1); // a reversed range is empty: nothing passes
        assert_eq!(cpu.flag_range(&col, hi..lo).unwrap(), vec![0; 6]);
        let other = vec![-6i32, 0, 0, 4, i32::MAX, i32::MAX];
        assert_eq!(cpu.flag_less(&col, &other).unwrap(), vec![0, 1, 0, 1, 1, 0]);
        assert!(matches!(
            cpu.flag_less(&col, &other[..5].to_vec()),
            Err(Error::LengthMismatch { .. })
        ));
    }
}
