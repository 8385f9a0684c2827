//! Interleaving of two `u32` columns into one `u64` column, and back.

use joinkit_cuda::{Backend, CpuBackend, Error, PARALLEL_THRESHOLD, Result, try_reserved};
use rayon::prelude::*;

/// Two `u32` columns as one column of `u64` words and back: word `i` is `lo[i] | hi[i] << 32`.
/// The partitioned hash join carries a pair of 4-byte payload columns through its radix
/// partition as one 8-byte column (one CUB sort with 8-byte values instead of two partitions).
pub trait Interleave: Backend {
    /// `words[i] = u64::from(lo[i]) | u64::from(hi[i]) << 32`.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `lo` and `hi` differ in length; allocation and driver
    /// errors.
    fn interleave(&self, lo: &Self::Buf<u32>, hi: &Self::Buf<u32>) -> Result<Self::Buf<u64>>;

    /// The inverse of [`Interleave::interleave`]: (low halves, high halves).
    ///
    /// # Errors
    /// Allocation and driver errors.
    fn deinterleave(&self, words: &Self::Buf<u64>) -> Result<(Self::Buf<u32>, Self::Buf<u32>)>;
}

impl Interleave for CpuBackend {
    fn interleave(&self, lo: &Vec<u32>, hi: &Vec<u32>) -> Result<Vec<u64>> {
        Error::check_len("interleave lo vs hi", lo.len(), hi.len())?;
        // Reserved fallibly up front; `collect_into_vec` then writes in place.
        let mut words = try_reserved(lo.len())?;
        lo.par_iter()
            .zip(hi)
            .with_min_len(PARALLEL_THRESHOLD)
            .map(|(&l, &h)| u64::from(l) | u64::from(h) << 32)
            .collect_into_vec(&mut words);
        Ok(words)
    }

    fn deinterleave(&self, words: &Vec<u64>) -> Result<(Vec<u32>, Vec<u32>)> {
        let (mut lo, mut hi) = (try_reserved(words.len())?, try_reserved(words.len())?);
        words
            .par_iter()
            .with_min_len(PARALLEL_THRESHOLD)
            .map(|&w| (w as u32, (w >> 32) as u32))
            .unzip_into_vecs(&mut lo, &mut hi);
        Ok((lo, hi))
    }
}

#[cfg(feature = "cuda")]
mod on_cuda {
    use super::*;
    use crate::cuda;
    use joinkit_cuda::{CudaBackend, DeviceBuffer};

    impl Interleave for CudaBackend {
        fn interleave(
            &self,
            lo: &DeviceBuffer<u32>,
            hi: &DeviceBuffer<u32>,
        ) -> Result<DeviceBuffer<u64>> {
            Error::check_len("interleave lo vs hi", lo.len(), hi.len())?;
            let mut words = self.alloc::<u64>(lo.len())?;
            cuda::interleave(self, &lo.view(), &hi.view(), &mut words.view_mut())?;
            Ok(words)
        }

        fn deinterleave(
            &self,
            words: &DeviceBuffer<u64>,
        ) -> Result<(DeviceBuffer<u32>, DeviceBuffer<u32>)> {
            let (mut lo, mut hi) = (self.alloc::<u32>(words.len())?, self.alloc(words.len())?);
            cuda::deinterleave(self, &words.view(), &mut lo.view_mut(), &mut hi.view_mut())?;
            Ok((lo, hi))
        }
    }
}
