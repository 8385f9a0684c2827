//! View-level CUDA entry points, for reuse inside other GPU projects: they work on cudarc views
//! of buffers the caller owns, queue work on the backend's stream (build one on your own stream
//! with `CudaBackend::with_stream`), take caller-provided [`Scratch`] and never synchronize.
//!
//! Lengths and bit ranges are checked; the caller guarantees the views do not overlap.

use std::ffi::c_void;
use std::ops::Range;

use cub_sys::cubsys_status;
use joinkit_cuda::cudarc::driver::{CudaView, CudaViewMut, DevicePtr, DevicePtrMut};
use joinkit_cuda::{CudaBackend, Element, Error, Key, Result, Scratch};

use crate::scan::Summable;

/// Runs a CUB call under the temporary-storage protocol: a size query, then the call with
/// `scratch` grown to fit.
fn with_temp(
    backend: &CudaBackend,
    scratch: &mut Scratch,
    op: &'static str,
    mut call: impl FnMut(*mut c_void, *mut usize) -> cubsys_status,
) -> Result<()> {
    backend.bind_to_thread()?;
    let mut bytes = 0usize;
    check(op, call(std::ptr::null_mut(), &mut bytes))?;
    let temp = scratch.reserve(backend, bytes)?;
    check(op, call(temp as *mut c_void, &mut bytes))
}

fn check(op: &'static str, status: cubsys_status) -> Result<()> {
    if status == cub_sys::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Runtime { op, code: status })
    }
}

fn stream(backend: &CudaBackend) -> cub_sys::cudaStream_t {
    backend.stream().cu_stream() as cub_sys::cudaStream_t
}

fn ptr<T>(backend: &CudaBackend, v: &impl DevicePtr<T>) -> u64 {
    v.device_ptr(backend.stream()).0
}

fn ptr_mut<T>(backend: &CudaBackend, v: &mut impl DevicePtrMut<T>) -> u64 {
    v.device_ptr_mut(backend.stream()).0
}

fn bit_args(bits: &Range<u32>) -> (i32, i32) {
    (bits.start as i32, bits.end as i32)
}

/// Stable radix sort of pairs by key bits `bits` (CUB `DeviceRadixSort::SortPairs`).
///
/// # Errors
/// [`Error::LengthMismatch`], [`Error::BitRange`], CUB and allocation errors.
pub fn sort_pairs<K: Key, V: Element>(
    backend: &CudaBackend,
    keys_in: &CudaView<'_, K>,
    values_in: &CudaView<'_, V>,
    keys_out: &mut CudaViewMut<'_, K>,
    values_out: &mut CudaViewMut<'_, V>,
    bits: Range<u32>,
    scratch: &mut Scratch,
) -> Result<()> {
    let n = keys_in.len();
    Error::check_len("sort_pairs keys vs values", n, values_in.len())?;
    Error::check_len("sort_pairs keys in vs out", n, keys_out.len())?;
    Error::check_len("sort_pairs values in vs out", n, values_out.len())?;
    Error::check_bits(&bits, K::BITS)?;
    let (b0, b1) = bit_args(&bits);
    let (ki, vi) = (ptr(backend, keys_in), ptr(backend, values_in));
    let (ko, vo) = (ptr_mut(backend, keys_out), ptr_mut(backend, values_out));
    let s = stream(backend);
    let n = n as u64;
    with_temp(backend, scratch, "radix sort pairs", |t, b| {
        // SAFETY: the views hold n elements each (checked above) of the widths named by the
        // function; 4- and 8-byte elements of any signedness sort by their unsigned bits.
        unsafe {
            match (K::BITS, V::BITS) {
                (32, 32) => cub_sys::cubsys_sort_pairs_uint32_uint32(
                    t, b, ki as _, ko as _, vi as _, vo as _, n, b0, b1, s,
                ),
                (32, _) => cub_sys::cubsys_sort_pairs_uint32_uint64(
                    t, b, ki as _, ko as _, vi as _, vo as _, n, b0, b1, s,
                ),
                (_, 32) => cub_sys::cubsys_sort_pairs_uint64_uint32(
                    t, b, ki as _, ko as _, vi as _, vo as _, n, b0, b1, s,
                ),
                _ => cub_sys::cubsys_sort_pairs_uint64_uint64(
                    t, b, ki as _, ko as _, vi as _, vo as _, n, b0, b1, s,
                ),
            }
        }
    })
}

/// Stable radix sort of keys by bits `bits` (CUB `DeviceRadixSort::SortKeys`).
///
/// # Errors
/// [`Error::LengthMismatch`], [`Error::BitRange`], CUB and allocation errors.
pub fn sort_keys<K: Key>(
    backend: &CudaBackend,
    keys_in: &CudaView<'_, K>,
    keys_out: &mut CudaViewMut<'_, K>,
    bits: Range<u32>,
    scratch: &mut Scratch,
) -> Result<()> {
    Error::check_len("sort_keys in vs out", keys_in.len(), keys_out.len())?;
    Error::check_bits(&bits, K::BITS)?;
    let (b0, b1) = bit_args(&bits);
    let (ki, ko) = (ptr(backend, keys_in), ptr_mut(backend, keys_out));
    let (s, n) = (stream(backend), keys_in.len() as u64);
    with_temp(backend, scratch, "radix sort keys", |t, b| {
        // SAFETY: both views hold n keys of the width named by the function.
        unsafe {
            if K::BITS == 32 {
                cub_sys::cubsys_sort_keys_uint32(t, b, ki as _, ko as _, n, b0, b1, s)
            } else {
                cub_sys::cubsys_sort_keys_uint64(t, b, ki as _, ko as _, n, b0, b1, s)
            }
        }
    })
}

/// Exclusive prefix sum (CUB `DeviceScan::ExclusiveSum`); `output` may be the input's buffer.
///
/// # Errors
/// [`Error::LengthMismatch`], CUB and allocation errors.
pub fn exclusive_sum<T: Summable>(
    backend: &CudaBackend,
    input: &CudaView<'_, T>,
    output: &mut CudaViewMut<'_, T>,
    scratch: &mut Scratch,
) -> Result<()> {
    Error::check_len("exclusive_sum in vs out", input.len(), output.len())?;
    let (i, o) = (ptr(backend, input), ptr_mut(backend, output));
    let (s, n) = (stream(backend), input.len() as u64);
    with_temp(backend, scratch, "exclusive sum", |t, b| {
        // SAFETY: both views hold n elements of the width named by the function.
        unsafe {
            if T::BITS == 32 {
                cub_sys::cubsys_exclusive_sum_uint32(t, b, i as _, o as _, n, s)
            } else {
                cub_sys::cubsys_exclusive_sum_uint64(t, b, i as _, o as _, n, s)
            }
        }
    })
}

/// Even-width histogram into `histogram.len()` bins over `[lower, upper)` (CUB
/// `DeviceHistogram::HistogramEven`); samples outside the range are not counted.
///
/// # Errors
/// As [`crate::Histogram::histogram_even`].
pub fn histogram_even<K: Key>(
    backend: &CudaBackend,
    samples: &CudaView<'_, K>,
    histogram: &mut CudaViewMut<'_, u32>,
    lower: K,
    upper: K,
    scratch: &mut Scratch,
) -> Result<()> {
    crate::histogram::check_histogram(samples.len(), histogram.len(), lower, upper)?;
    let (sp, hp) = (ptr(backend, samples), ptr_mut(backend, histogram));
    let levels = histogram.len() as i32 + 1;
    let (s, n) = (stream(backend), samples.len() as u64);
    let (lo, hi) = (lower.to_u64(), upper.to_u64());
    with_temp(backend, scratch, "histogram even", |t, b| {
        // SAFETY: `samples` holds n keys, `histogram` levels - 1 counters.
        unsafe {
            if K::BITS == 32 {
                cub_sys::cubsys_histogram_even_uint32(
                    t, b, sp as _, hp as _, levels, lo as u32, hi as u32, n, s,
                )
            } else {
                cub_sys::cubsys_histogram_even_uint64(t, b, sp as _, hp as _, levels, lo, hi, n, s)
            }
        }
    })
}
