//! The CPU backend: columns are `Vec`s, work runs on rayon's thread pool. It is the default where
//! no GPU is present and the oracle the CUDA backend is tested against.

use std::mem::MaybeUninit;
use std::time::Instant;

use rayon::prelude::*;

use crate::{Backend, DeviceKind, Element, Error, MemoryStats, Result};

/// Below this many elements, host loops stay on one thread: splitting costs more than it saves.
pub const PARALLEL_THRESHOLD: usize = 1 << 15;

/// An empty vector with room for `len` elements, or [`Error::SizeOverflow`] where the host
/// cannot give the memory (a `Vec` would abort the process). Every fallible host allocation goes
/// through here; large reservations are advised onto transparent huge pages before their
/// first touch (see `huge_pages`).
///
/// # Errors
/// [`Error::SizeOverflow`] when `len` elements overflow `usize` bytes or cannot be allocated.
pub fn try_reserved<T>(len: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| Error::SizeOverflow("host allocation failed"))?;
    huge_pages(&v);
    Ok(v)
}

/// `len` zeros, or [`Error::SizeOverflow`] where the host cannot give the memory. A large
/// allocation comes from the kernel already zero (the allocator does not write it), so its pages
/// are first touched by whoever writes them first, across the pool in a parallel scatter or
/// gather, rather than by one thread filling zeros first (on a 2-core VM that serial fill, and
/// the page faults it takes, was most of a one-shot join's partitioning). Large allocations are
/// advised onto huge pages before that first touch, as [`try_reserved`]'s are.
///
/// # Errors
/// [`Error::SizeOverflow`] when `len` elements overflow `usize` bytes or cannot be allocated.
pub fn try_zeroed<T: Element>(len: usize) -> Result<Vec<T>> {
    let v = bytemuck::allocation::try_zeroed_vec(len)
        .map_err(|()| Error::SizeOverflow("host allocation failed"))?;
    huge_pages(&v);
    Ok(v)
}

/// Asks Linux to back a large allocation (8 MiB or more) with transparent huge pages where the
/// system leaves that to `madvise`: its first touch then faults 2 MiB at a time instead of
/// 4 KiB, the page faults that dominate writing into fresh memory (a one-shot join's
/// partitions and outputs), and its TLB misses get cheaper. `JOINKIT_NO_THP` turns it off.
#[cfg(target_os = "linux")]
fn huge_pages<T>(v: &Vec<T>) {
    const MADV_HUGEPAGE: i32 = 14;
    const PAGE: usize = 4096;
    unsafe extern "C" {
        fn madvise(addr: *mut u8, len: usize, advice: i32) -> i32;
    }
    let bytes = v.capacity().saturating_mul(size_of::<T>());
    if bytes < (8 << 20) || std::env::var_os("JOINKIT_NO_THP").is_some() {
        return;
    }
    let ptr = v.as_ptr() as usize;
    let start = ptr.next_multiple_of(PAGE);
    let end = (ptr + bytes) & !(PAGE - 1);
    if end > start {
        // SAFETY: [start, end) lies inside the vector's allocation, page aligned; the advice
        // changes how pages are backed, never their contents, and failure is harmless.
        unsafe { madvise(start as *mut u8, end - start, MADV_HUGEPAGE) };
    }
}

#[cfg(not(target_os = "linux"))]
fn huge_pages<T>(_: &Vec<T>) {}

/// `dst.copy_from_slice(src)` in 1 MiB pieces over the rayon pool: one core copies at a
/// fraction of the host's memory bandwidth (and of a host link's rate).
///
/// # Errors
/// [`Error::LengthMismatch`] when the lengths differ.
pub fn copy_parallel<T: Copy + Send + Sync>(dst: &mut [T], src: &[T]) -> Result<()> {
    // SAFETY: `MaybeUninit<T>` has `T`'s layout, and the copy writes only initialized values
    // (`src`'s), so `dst` stays initialized.
    let dst = unsafe { &mut *(dst as *mut [T] as *mut [MaybeUninit<T>]) };
    copy_parallel_uninit(dst, src)
}

/// [`copy_parallel`] into memory that may be uninitialized, such as a fresh vector's spare
/// capacity: every element of `dst` is written (it is all initialized afterwards), each piece
/// by the thread that copies it. Why: writing a fresh allocation is mostly page faults, and
/// here they are taken by every thread of the pool instead of by one thread zero-filling the
/// vector first (which also writes every byte twice).
///
/// # Errors
/// [`Error::LengthMismatch`] when the lengths differ (then nothing is written).
pub fn copy_parallel_uninit<T: Copy + Send + Sync>(
    dst: &mut [MaybeUninit<T>],
    src: &[T],
) -> Result<()> {
    const PIECE_BYTES: usize = 1 << 20;
    Error::check_len("parallel copy", src.len(), dst.len())?;
    let piece = (PIECE_BYTES / size_of::<T>().max(1)).max(1);
    dst.par_chunks_mut(piece)
        .zip(src.par_chunks(piece))
        .for_each(|(d, s)| {
            // SAFETY: `d` and `s` are pieces of equal length (equal-length slices cut at the
            // same size), `MaybeUninit<T>` has `T`'s layout, and a `&mut` and a `&` never
            // overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(s.as_ptr(), d.as_mut_ptr().cast::<T>(), s.len())
            }
        });
    Ok(())
}

/// The CPU (rayon) backend.
///
/// Its buffers come from the global allocator, large ones advised onto transparent huge pages
/// before their first touch. Its joins are measured with the system allocator: under mimalloc
/// as the global allocator, joins with large outputs ran 2.4–3× slower on a 16-core host
/// (`docs/results/joins.md`), so an application that installs its own allocator should
/// measure with it.
#[derive(Debug, Clone, Copy, Default)]
pub struct CpuBackend;

impl CpuBackend {
    /// A CPU backend on rayon's global pool.
    pub fn new() -> Self {
        CpuBackend
    }
}

impl Backend for CpuBackend {
    type Buf<T: Element> = Vec<T>;

    fn kind(&self) -> DeviceKind {
        DeviceKind::Cpu
    }

    fn describe(&self) -> String {
        format!("CPU ({} rayon threads)", rayon::current_num_threads())
    }

    fn alloc<T: Element>(&self, len: usize) -> Result<Vec<T>> {
        Error::bytes_of::<T>(len)?;
        try_zeroed(len)
    }

    // Copies are allocated fallibly too: a column the host cannot hold twice is an error,
    // not an abort. Large ones are copied (and their pages first touched) by every thread.
    fn upload<T: Element>(&self, host: &[T]) -> Result<Vec<T>> {
        let mut v = try_reserved(host.len())?;
        if host.len() < PARALLEL_THRESHOLD {
            v.extend_from_slice(host);
        } else {
            v.par_extend(host.par_iter().copied());
        }
        Ok(v)
    }

    fn download<T: Element>(&self, buf: &Vec<T>) -> Result<Vec<T>> {
        self.upload(buf)
    }

    fn upload_owned<T: Element>(&self, host: Vec<T>) -> Result<Vec<T>> {
        Ok(host)
    }

    fn download_owned<T: Element>(&self, buf: Vec<T>) -> Result<Vec<T>> {
        Ok(buf)
    }

    fn fill<T: Element>(&self, buf: &mut Vec<T>, value: T) -> Result<()> {
        if buf.len() < PARALLEL_THRESHOLD {
            buf.fill(value);
        } else {
            buf.par_chunks_mut(PARALLEL_THRESHOLD)
                .for_each(|c| c.fill(value));
        }
        Ok(())
    }

    fn iota<T: Element>(&self, buf: &mut Vec<T>, start: u64) -> Result<()> {
        buf.par_iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = T::from_bits(start.wrapping_add(i as u64)));
        Ok(())
    }

    fn unpack_ids(&self, packed: &Vec<u32>, low_bits: u32) -> Result<Vec<u64>> {
        let (shift, mask) = unpack_shift_and_mask(low_bits)?;
        let mut out = crate::try_reserved(packed.len())?;
        packed
            .par_iter()
            .with_min_len(crate::PARALLEL_THRESHOLD)
            .map(|&v| (u64::from(v).checked_shr(shift).unwrap_or(0) << 32) | u64::from(v & mask))
            .collect_into_vec(&mut out);
        Ok(out)
    }

    fn fill_random<T: Element>(&self, buf: &mut Vec<T>, seed: u64, mask: u64) -> Result<()> {
        buf.par_iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = T::from_bits(crate::hash::hash64(i as u64, seed) & mask));
        Ok(())
    }

    fn copy<T: Element>(&self, src: &Vec<T>, dst: &mut Vec<T>) -> Result<()> {
        Error::check_len("copy source vs destination", src.len(), dst.len())?;
        dst.par_chunks_mut(PARALLEL_THRESHOLD)
            .zip(src.par_chunks(PARALLEL_THRESHOLD))
            .for_each(|(d, s)| d.copy_from_slice(s));
        Ok(())
    }

    fn copy_range_into<T: Element>(
        &self,
        src: &Vec<T>,
        range: std::ops::Range<usize>,
        dst: &mut Vec<T>,
        offset: usize,
    ) -> Result<()> {
        crate::backend::check_range(&range, src.len())?;
        let end = crate::backend::check_fits(range.len(), dst.len(), offset)?;
        dst[offset..end]
            .par_chunks_mut(PARALLEL_THRESHOLD)
            .zip(src[range].par_chunks(PARALLEL_THRESHOLD))
            .for_each(|(d, s)| d.copy_from_slice(s));
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }

    fn timed<R>(&self, work: impl FnOnce() -> Result<R>) -> Result<(R, f64)> {
        let start = Instant::now();
        let r = work()?;
        Ok((r, start.elapsed().as_secs_f64() * 1e3))
    }

    fn memory(&self) -> Option<MemoryStats> {
        None
    }

    fn reset_peak_memory(&self) {}
}

/// The shift and mask of [`Backend::unpack_ids`] for `low_bits` (a shift of 32 leaves no high
/// part).
fn unpack_shift_and_mask(low_bits: u32) -> Result<(u32, u32)> {
    crate::check_unpack_low_bits(low_bits)?;
    Ok((low_bits, u32::MAX.checked_shr(32 - low_bits).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use std::mem::MaybeUninit;

    use super::{copy_parallel, copy_parallel_uninit};
    use crate::Error;

    /// Both copies write every element, across piece boundaries, and refuse other lengths
    /// without writing.
    #[test]
    fn parallel_copies_write_everything() {
        for n in [0usize, 1, (1 << 18) - 1, (1 << 18) + 5, 3 << 18] {
            let src: Vec<u32> = (0..n as u32)
                .map(|i| i.wrapping_mul(2_654_435_761))
                .collect();
            let mut dst = vec![0u32; n];
            copy_parallel(&mut dst, &src).unwrap();
            assert_eq!(dst, src, "n={n}");
            let mut fresh: Vec<u32> = Vec::with_capacity(n);
            copy_parallel_uninit(&mut fresh.spare_capacity_mut()[..n], &src).unwrap();
            // SAFETY: the copy wrote all n elements.
            unsafe { fresh.set_len(n) };
            assert_eq!(fresh, src, "uninit n={n}");
        }
        let mut short = [MaybeUninit::<u64>::uninit(); 2];
        assert!(matches!(
            copy_parallel_uninit(&mut short, &[1, 2, 3]),
            Err(Error::LengthMismatch { .. })
        ));
    }
}
