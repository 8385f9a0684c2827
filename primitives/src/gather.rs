//! Gather (`out[i] = src[map[i]]`) of one or many columns with one map, and scatter
//! (`out[map[i]] = src[i]`), for 4- and 8-byte values and `u32`/`u64` maps.

use joinkit_cuda::{Backend, Buffer, CpuBackend, Element, Error, Key, Result};
use rayon::prelude::*;

/// How out-of-range map indices are reported.
///
/// Neither backend ever reads or writes outside a column, whatever the map holds: the CUDA
/// kernels compare every index (one compare per element, free in a memory-bound kernel) and
/// give a bad row 0 (gather) or skip it (scatter). The difference is whether the caller learns
/// about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Bounds {
    /// Return [`Error::IndexOutOfRange`] naming the first bad map entry. On CUDA this reads an
    /// 8-byte status word back after the kernel: one stream synchronization per call (a few
    /// microseconds; the main cost for small inputs, noise at millions of rows).
    #[default]
    Check,
    /// The caller vouches for the map: in release builds CUDA allocates no status word and
    /// reads nothing back (no synchronization), and rows with bad indices get unspecified
    /// values (the kernels never dereference them). Debug builds check as [`Bounds::Check`]
    /// does, and the CPU twin always checks (it costs it nothing), so both return the error.
    Trust,
}

/// Gathers and scatters by an index map.
///
/// On error the contents of outputs are unspecified.
pub trait Gather: Backend {
    /// `out[i] = src[map[i]]`.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `out` and `map` differ in length;
    /// [`Error::IndexOutOfRange`] for the first map entry `>= src.len()` (see [`Bounds`]);
    /// driver errors.
    fn gather_into<T: Element, I: Key>(
        &self,
        src: &Self::Buf<T>,
        map: &Self::Buf<I>,
        out: &mut Self::Buf<T>,
        bounds: Bounds,
    ) -> Result<()>;

    /// `outs[c][i] = srcs[c][map[i]]` for every column `c` (the columns of one table, so of one
    /// length), reading the map once for up to `cuda::MAX_COLUMNS` columns on CUDA.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when the sources differ in length, the number of outputs
    /// differs from the number of sources, or an output's length from the map's;
    /// [`Error::IndexOutOfRange`] as [`Gather::gather_into`]; driver errors.
    fn gather_columns_into<T: Element, I: Key>(
        &self,
        srcs: &[&Self::Buf<T>],
        map: &Self::Buf<I>,
        outs: &mut [&mut Self::Buf<T>],
        bounds: Bounds,
    ) -> Result<()>;

    /// `out[map[i]] = src[i]`; elements of `out` no entry targets keep their values. Targets
    /// should be distinct: with duplicates, which source lands is unspecified (the CPU twin
    /// keeps the last).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `src` and `map` differ in length;
    /// [`Error::IndexOutOfRange`] for the first map entry `>= out.len()` (see [`Bounds`]);
    /// driver errors.
    fn scatter_into<T: Element, I: Key>(
        &self,
        src: &Self::Buf<T>,
        map: &Self::Buf<I>,
        out: &mut Self::Buf<T>,
        bounds: Bounds,
    ) -> Result<()>;

    /// `src[map[i]]` for every `i`, in a new column.
    ///
    /// # Errors
    /// As [`Gather::gather_into`], plus allocation errors.
    fn gather<T: Element, I: Key>(
        &self,
        src: &Self::Buf<T>,
        map: &Self::Buf<I>,
        bounds: Bounds,
    ) -> Result<Self::Buf<T>> {
        let mut out = self.alloc::<T>(map.len())?;
        self.gather_into(src, map, &mut out, bounds)?;
        Ok(out)
    }
}

/// The first position of `map` whose index is `>= len` (rayon), if any.
fn first_out_of_range<I: Key>(map: &[I], len: usize) -> Option<usize> {
    // A branch-free check per chunk first: rayon's `position_first` splits and synchronizes
    // per element range and cost more than the gather itself on 2^25-row maps.
    let bad = map
        .par_chunks(joinkit_cuda::PARALLEL_THRESHOLD.max(1))
        .any(|c| c.iter().fold(false, |b, i| b | (i.to_u64() >= len as u64)));
    if !bad {
        return None;
    }
    map.iter().position(|i| i.to_u64() >= len as u64)
}

fn index_error<I: Key>(what: &'static str, map: &[I], pos: usize, len: usize) -> Error {
    Error::IndexOutOfRange {
        what,
        index: map[pos].to_u64(),
        len,
    }
}

impl Gather for CpuBackend {
    fn gather_into<T: Element, I: Key>(
        &self,
        src: &Vec<T>,
        map: &Vec<I>,
        out: &mut Vec<T>,
        bounds: Bounds,
    ) -> Result<()> {
        self.gather_columns_into(&[src], map, &mut [out], bounds)
    }

    fn gather_columns_into<T: Element, I: Key>(
        &self,
        srcs: &[&Vec<T>],
        map: &Vec<I>,
        outs: &mut [&mut Vec<T>],
        _bounds: Bounds,
    ) -> Result<()> {
        Error::check_len("gather columns vs outputs", srcs.len(), outs.len())?;
        let len = srcs.first().map_or(0, |s| s.len());
        for s in srcs {
            Error::check_len("gather source columns", len, s.len())?;
        }
        for o in outs.iter() {
            Error::check_len("gather map vs output", map.len(), o.len())?;
        }
        if let Some(pos) = first_out_of_range(map, len) {
            return Err(index_error("gather map", map, pos, len));
        }
        const CHUNK: usize = joinkit_cuda::PARALLEL_THRESHOLD;
        for (src, out) in srcs.iter().zip(outs.iter_mut()) {
            out.par_chunks_mut(CHUNK)
                .zip(map.par_chunks(CHUNK))
                .for_each(|(o, m)| {
                    for (o, i) in o.iter_mut().zip(m) {
                        // In range: checked above.
                        *o = src[i.to_u64() as usize];
                    }
                });
        }
        Ok(())
    }

    fn scatter_into<T: Element, I: Key>(
        &self,
        src: &Vec<T>,
        map: &Vec<I>,
        out: &mut Vec<T>,
        _bounds: Bounds,
    ) -> Result<()> {
        Error::check_len("scatter source vs map", src.len(), map.len())?;
        if let Some(pos) = first_out_of_range(map, out.len()) {
            return Err(index_error("scatter map", map, pos, out.len()));
        }
        // Sequential: duplicate targets would race in parallel, and the twin must be safe.
        for (&v, i) in src.iter().zip(map) {
            out[i.to_u64() as usize] = v;
        }
        Ok(())
    }
}

/// The status word of one trait-level call: a fresh one when the caller asked for checking (or
/// trusts the map in a debug build), none (no allocation, no fill) when it trusts the map.
#[cfg(feature = "cuda")]
fn bounds_check(
    backend: &joinkit_cuda::CudaBackend,
    bounds: Bounds,
) -> Result<crate::cuda::BoundsCheck> {
    match bounds {
        Bounds::Check => crate::cuda::BoundsCheck::new(backend),
        Bounds::Trust if cfg!(debug_assertions) => crate::cuda::BoundsCheck::new(backend),
        Bounds::Trust => Ok(crate::cuda::BoundsCheck::disabled()),
    }
}

#[cfg(feature = "cuda")]
impl Gather for joinkit_cuda::CudaBackend {
    fn gather_into<T: Element, I: Key>(
        &self,
        src: &Self::Buf<T>,
        map: &Self::Buf<I>,
        out: &mut Self::Buf<T>,
        bounds: Bounds,
    ) -> Result<()> {
        self.gather_columns_into(&[src], map, &mut [out], bounds)
    }

    fn gather_columns_into<T: Element, I: Key>(
        &self,
        srcs: &[&Self::Buf<T>],
        map: &Self::Buf<I>,
        outs: &mut [&mut Self::Buf<T>],
        bounds: Bounds,
    ) -> Result<()> {
        let mut check = bounds_check(self, bounds)?;
        let views: Vec<_> = srcs.iter().map(|s| s.view()).collect();
        let mut out_views: Vec<_> = outs.iter_mut().map(|o| o.view_mut()).collect();
        let mv = map.view();
        crate::cuda::gather_columns(self, &views, &mv, &mut out_views, &mut check)?;
        if bounds == Bounds::Check {
            let len = views.first().map_or(0, |v| v.len());
            check.take_index_error(self, "gather map", &mv, len)?;
        }
        Ok(())
    }

    fn scatter_into<T: Element, I: Key>(
        &self,
        src: &Self::Buf<T>,
        map: &Self::Buf<I>,
        out: &mut Self::Buf<T>,
        bounds: Bounds,
    ) -> Result<()> {
        let mut check = bounds_check(self, bounds)?;
        let mv = map.view();
        crate::cuda::scatter(self, &src.view(), &mv, &mut out.view_mut(), &mut check)?;
        if bounds == Bounds::Check {
            check.take_index_error(self, "scatter map", &mv, out.len())?;
        }
        Ok(())
    }
}
