//! Even-width histograms (partition sizes, key distributions).

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use joinkit_cuda::{Backend, CpuBackend, Error, Key, Result, try_reserved};
use rayon::prelude::*;

/// Counts samples into `bins` equal-width bins over `[lower, upper)`; samples outside the range
/// are not counted. Bin `b` covers `[lower + b*w, lower + (b+1)*w)` with `w = (upper-lower)/bins`
/// when the range divides evenly (CUB's rule for uneven ranges is followed by both backends:
/// `bin = (sample - lower) * bins / (upper - lower)`).
pub trait Histogram: Backend {
    /// Returns `bins` 32-bit counts.
    ///
    /// # Errors
    /// [`Error::EmptyInput`] when `bins` is 0; [`Error::InvalidArgument`] when
    /// `lower >= upper` or `(upper - lower) * bins` overflows 64 bits; [`Error::SizeOverflow`]
    /// for more than `u32::MAX` samples (32-bit counts) or `i32::MAX` bins or more (CUB's
    /// bin count is an `int`); allocation errors ([`Error::SizeOverflow`] on the host, never an
    /// abort) and driver errors.
    fn histogram_even<K: Key>(
        &self,
        samples: &Self::Buf<K>,
        bins: usize,
        lower: K,
        upper: K,
    ) -> Result<Self::Buf<u32>>;
}

/// Validates histogram arguments; shared by both backends so they fail alike.
pub(crate) fn check_histogram<K: Key>(
    samples: usize,
    bins: usize,
    lower: K,
    upper: K,
) -> Result<()> {
    if bins == 0 {
        return Err(Error::EmptyInput("histogram with zero bins"));
    }
    if lower >= upper {
        return Err(Error::InvalidArgument(format!(
            "histogram range {lower:?}..{upper:?} is empty"
        )));
    }
    if bins >= i32::MAX as usize {
        return Err(Error::SizeOverflow(
            "histogram bins are counted in an i32 (CUB's)",
        ));
    }
    if samples > u32::MAX as usize {
        return Err(Error::SizeOverflow("histogram counts are 32-bit"));
    }
    // The bin of a sample is (sample - lower) * bins / (upper - lower) in 64-bit arithmetic
    // (CUB's rule); ranges where that product could overflow are refused, as CUB does.
    if upper.to_u64() - lower.to_u64() > u64::MAX / bins as u64 {
        return Err(Error::InvalidArgument(format!(
            "histogram range {lower:?}..{upper:?} times {bins} bins overflows 64-bit bin arithmetic"
        )));
    }
    Ok(())
}

/// The bin of one sample, `None` outside `[lower, upper)` (the CPU twin of CUB's rule).
fn bin_of(sample: u64, bins: u64, lower: u64, upper: u64) -> Option<usize> {
    if sample < lower || sample >= upper {
        return None;
    }
    let b = u128::from(sample - lower) * u128::from(bins) / u128::from(upper - lower);
    Some(b as usize)
}

/// Bins up to which each worker counts into a histogram of its own (one per rayon thread,
/// allocated fallibly, summed after): shared counters would bounce cache lines between the
/// cores (3× slower at 2^14–2^16 bins on two). Wider histograms count into one shared array of
/// atomics, one histogram's memory whatever the number of threads (per-chunk copies of 2^31
/// bins once took 8 GiB each and aborted the process).
const PRIVATE_BINS: usize = 1 << 20;

/// `bins` zero counts, allocated fallibly.
fn zeroed(bins: usize) -> Result<Vec<u32>> {
    let mut h = try_reserved(bins)?;
    h.resize(bins, 0);
    Ok(h)
}

impl Histogram for CpuBackend {
    fn histogram_even<K: Key>(
        &self,
        samples: &Vec<K>,
        bins: usize,
        lower: K,
        upper: K,
    ) -> Result<Vec<u32>> {
        check_histogram(samples.len(), bins, lower, upper)?;
        let (lo, hi, n) = (lower.to_u64(), upper.to_u64(), bins as u64);
        let bin = |s: &K| bin_of(s.to_u64(), n, lo, hi);
        if bins > PRIVATE_BINS {
            let mut counts = try_reserved::<AtomicU32>(bins)?;
            counts.resize_with(bins, || AtomicU32::new(0));
            samples
                .par_chunks(joinkit_cuda::PARALLEL_THRESHOLD)
                .for_each(|chunk| {
                    for b in chunk.iter().filter_map(bin) {
                        counts[b].fetch_add(1, Relaxed);
                    }
                });
            return Ok(counts.into_iter().map(AtomicU32::into_inner).collect());
        }
        let workers = rayon::current_num_threads().max(1);
        let per_worker = samples
            .len()
            .div_ceil(workers)
            .max(joinkit_cuda::PARALLEL_THRESHOLD);
        let parts = samples
            .par_chunks(per_worker)
            .map(|chunk| {
                let mut h = zeroed(bins)?;
                for b in chunk.iter().filter_map(bin) {
                    h[b] += 1;
                }
                Ok(h)
            })
            .collect::<Result<Vec<_>>>()?;
        let mut parts = parts.into_iter();
        let mut total = match parts.next() {
            Some(h) => h,
            None => zeroed(bins)?,
        };
        for h in parts {
            total.iter_mut().zip(h).for_each(|(x, y)| *x += y);
        }
        Ok(total)
    }
}

#[cfg(feature = "cuda")]
impl Histogram for joinkit_cuda::CudaBackend {
    fn histogram_even<K: Key>(
        &self,
        samples: &Self::Buf<K>,
        bins: usize,
        lower: K,
        upper: K,
    ) -> Result<Self::Buf<u32>> {
        check_histogram(samples.len(), bins, lower, upper)?;
        let mut out = self.alloc::<u32>(bins)?;
        let mut scratch = joinkit_cuda::Scratch::new();
        crate::cuda::histogram_even(
            self,
            &samples.view(),
            &mut out.view_mut(),
            lower,
            upper,
            &mut scratch,
        )?;
        Ok(out)
    }
}
