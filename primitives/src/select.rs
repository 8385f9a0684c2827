//! Stable compaction (select) by a flags column: many columns at once, or the row ids of the
//! set flags (`select_if` producing row ids). Flags are `u32`, non-zero meaning keep; callers
//! holding byte flags use CUB's select through `cuda::select_flagged_u8`.

use joinkit_cuda::{Backend, CpuBackend, Element, Error, Key, Result};
use rayon::prelude::*;

/// Stable compaction by flags. Outputs keep the input order.
pub trait Compact: Backend {
    /// The number of non-zero flags.
    ///
    /// # Errors
    /// Allocation and driver errors.
    fn count_flagged(&self, flags: &Self::Buf<u32>) -> Result<u64>;

    /// For every column, the elements whose flag is non-zero, in order (one pass over the
    /// flags for up to `cuda::MAX_COLUMNS` columns on CUDA, plus one to count).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when a column's length differs from the flags'; allocation
    /// and driver errors.
    fn compact<T: Element>(
        &self,
        columns: &[&Self::Buf<T>],
        flags: &Self::Buf<u32>,
    ) -> Result<Vec<Self::Buf<T>>>;

    /// The row ids `i` with `flags[i] != 0`, ascending, as `u32` or `u64`.
    ///
    /// # Errors
    /// [`Error::SizeOverflow`] when a row id does not fit `I`; allocation and driver errors.
    fn flagged_indices<I: Key>(&self, flags: &Self::Buf<u32>) -> Result<Self::Buf<I>>;
}

/// Row ids `0..n` must fit `I`.
pub(crate) fn check_ids<I: Key>(n: usize) -> Result<()> {
    if n == 0 || (n as u64 - 1) <= I::MAX.to_u64() {
        Ok(())
    } else {
        Err(Error::SizeOverflow("row ids do not fit the index type"))
    }
}

impl Compact for CpuBackend {
    fn count_flagged(&self, flags: &Vec<u32>) -> Result<u64> {
        Ok(flags.par_iter().filter(|&&f| f != 0).count() as u64)
    }

    fn compact<T: Element>(&self, columns: &[&Vec<T>], flags: &Vec<u32>) -> Result<Vec<Vec<T>>> {
        for c in columns {
            Error::check_len("compaction column vs flags", flags.len(), c.len())?;
        }
        Ok(columns
            .iter()
            .map(|c| {
                // rayon's collect keeps the input order: the compaction is stable.
                c.par_iter()
                    .zip(flags.par_iter())
                    .filter(|(_, f)| **f != 0)
                    .map(|(v, _)| *v)
                    .collect()
            })
            .collect())
    }

    fn flagged_indices<I: Key>(&self, flags: &Vec<u32>) -> Result<Vec<I>> {
        check_ids::<I>(flags.len())?;
        Ok(flags
            .par_iter()
            .enumerate()
            .filter(|(_, f)| **f != 0)
            .map(|(i, _)| I::from_u64(i as u64))
            .collect())
    }
}

#[cfg(feature = "cuda")]
mod on_cuda {
    use super::*;
    use crate::cuda;
    use joinkit_cuda::{CudaBackend, DeviceBuffer, Scratch};

    /// Per-tile offsets of `flags` and the total (one synchronization to read it).
    fn plan(b: &CudaBackend, flags: &DeviceBuffer<u32>) -> Result<(DeviceBuffer<u64>, u64)> {
        let len = cuda::compaction_offsets_len(flags.len());
        let mut offsets = b.alloc::<u64>(len)?;
        let mut scratch = Scratch::new();
        cuda::compaction_offsets(b, &flags.view(), &mut offsets.view_mut(), &mut scratch)?;
        let total = cuda::read_at(b, &offsets.view(), len - 1)?;
        Ok((offsets, total))
    }

    fn to_len(total: u64) -> Result<usize> {
        usize::try_from(total).map_err(|_| Error::SizeOverflow("compaction output"))
    }

    /// A kernel's recorded overflow would mean the counts and the placement disagree: a bug,
    /// reported rather than hidden.
    fn no_overflow(b: &CudaBackend, check: &mut cuda::BoundsCheck, total: u64) -> Result<()> {
        match check.take(b)? {
            None => Ok(()),
            Some(_) => Err(Error::OutputTooLarge {
                needed: total + 1,
                capacity: total,
            }),
        }
    }

    impl Compact for CudaBackend {
        fn count_flagged(&self, flags: &DeviceBuffer<u32>) -> Result<u64> {
            Ok(plan(self, flags)?.1)
        }

        fn compact<T: Element>(
            &self,
            columns: &[&DeviceBuffer<T>],
            flags: &DeviceBuffer<u32>,
        ) -> Result<Vec<DeviceBuffer<T>>> {
            for c in columns {
                Error::check_len("compaction column vs flags", flags.len(), c.len())?;
            }
            let (offsets, total) = plan(self, flags)?;
            let mut outs = columns
                .iter()
                .map(|_| self.alloc::<T>(to_len(total)?))
                .collect::<Result<Vec<_>>>()?;
            let mut check = cuda::BoundsCheck::new(self)?;
            let srcs: Vec<_> = columns.iter().map(|c| c.view()).collect();
            let mut views: Vec<_> = outs.iter_mut().map(|o| o.view_mut()).collect();
            cuda::compact_columns(
                self,
                &flags.view(),
                &offsets.view(),
                &srcs,
                &mut views,
                &mut check,
            )?;
            drop(views);
            no_overflow(self, &mut check, total)?;
            Ok(outs)
        }

        fn flagged_indices<I: Key>(&self, flags: &DeviceBuffer<u32>) -> Result<DeviceBuffer<I>> {
            check_ids::<I>(flags.len())?;
            let (offsets, total) = plan(self, flags)?;
            let mut out = self.alloc::<I>(to_len(total)?)?;
            let mut check = cuda::BoundsCheck::new(self)?;
            cuda::flagged_indices(
                self,
                &flags.view(),
                &offsets.view(),
                &mut out.view_mut(),
                &mut check,
            )?;
            no_overflow(self, &mut check, total)?;
            Ok(out)
        }
    }
}
