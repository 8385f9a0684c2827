//! Exclusive prefix sums (offsets from counts).

use joinkit_cuda::{Backend, CpuBackend, Element, Result};
use rayon::prelude::*;

/// An unsigned integer that can be summed (wrapping, as the GPU does).
pub trait Summable: Element {
    /// Wrapping addition.
    fn wrapping_add(self, other: Self) -> Self;
}

impl Summable for u32 {
    fn wrapping_add(self, other: Self) -> Self {
        u32::wrapping_add(self, other)
    }
}

impl Summable for u64 {
    fn wrapping_add(self, other: Self) -> Self {
        u64::wrapping_add(self, other)
    }
}

/// Exclusive prefix sum: `out[i] = in[0] + ... + in[i-1]`, `out[0] = 0`, wrapping on overflow
/// (use 64-bit counts where totals can pass 2^32).
pub trait Scan: Backend {
    /// Returns the exclusive prefix sum of `input` (u32 or u64).
    ///
    /// # Errors
    /// Allocation and driver errors.
    fn exclusive_sum<T: Summable>(&self, input: &Self::Buf<T>) -> Result<Self::Buf<T>>;
}

impl Scan for CpuBackend {
    fn exclusive_sum<T: Summable>(&self, input: &Vec<T>) -> Result<Vec<T>> {
        const CHUNK: usize = joinkit_cuda::PARALLEL_THRESHOLD;
        // Two passes: per-chunk totals, then each chunk scans from its offset.
        let totals: Vec<T> = input
            .par_chunks(CHUNK)
            .map(|c| c.iter().fold(T::default(), |a, &b| a.wrapping_add(b)))
            .collect();
        let mut offsets = Vec::with_capacity(totals.len());
        let mut acc = T::default();
        for t in totals {
            offsets.push(acc);
            acc = acc.wrapping_add(t);
        }
        let mut out = vec![T::default(); input.len()];
        out.par_chunks_mut(CHUNK)
            .zip(input.par_chunks(CHUNK))
            .zip(offsets.into_par_iter())
            .for_each(|((o, i), mut acc)| {
                for (o, &x) in o.iter_mut().zip(i) {
                    *o = acc;
                    acc = acc.wrapping_add(x);
                }
            });
        Ok(out)
    }
}

#[cfg(feature = "cuda")]
impl Scan for joinkit_cuda::CudaBackend {
    fn exclusive_sum<T: Summable>(&self, input: &Self::Buf<T>) -> Result<Self::Buf<T>> {
        let mut out = self.alloc::<T>(input.len())?;
        let mut scratch = joinkit_cuda::Scratch::new();
        crate::cuda::exclusive_sum(self, &input.view(), &mut out.view_mut(), &mut scratch)?;
        Ok(out)
    }
}
