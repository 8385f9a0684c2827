//! Page-locked (pinned) host memory: the source of asynchronous host-to-device copies, which
//! run at the link's full rate while kernels run (copies from pageable memory are staged by
//! the driver and return only when done).

use cudarc::driver::{CudaStream, CudaViewMut, DevicePtrMut, HostSlice, PinnedHostSlice};
use rayon::prelude::*;

use super::{CudaBackend, driver};
use crate::{Element, Error, Result};

/// A pinned host column of `T`, allocated on a backend's device context.
pub struct PinnedBuffer<T: Element> {
    slice: PinnedHostSlice<T>,
}

impl<T: Element> std::fmt::Debug for PinnedBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PinnedBuffer<{}>[{}]", T::NAME, self.slice.len())
    }
}

impl CudaBackend {
    /// `host` copied into pinned memory (the copy spread over the rayon pool).
    ///
    /// # Errors
    /// [`Error::SizeOverflow`] when the bytes overflow; driver errors (pinning fails when the
    /// host cannot lock that much memory).
    pub fn pin<T: Element>(&self, host: &[T]) -> Result<PinnedBuffer<T>> {
        host.len()
            .checked_mul(size_of::<T>())
            .filter(|b| *b < isize::MAX as usize)
            .ok_or(Error::SizeOverflow("pinned host buffer"))?;
        // SAFETY: `T` is plain old data; every element is written below before any read.
        let mut slice = unsafe { self.context().alloc_pinned_with_flags::<T>(host.len(), 0) }
            .map_err(driver("allocating pinned host memory"))?;
        let dst = slice
            .as_mut_slice()
            .map_err(driver("reading pinned host memory"))?;
        dst.par_chunks_mut(1 << 20)
            .zip(host.par_chunks(1 << 20))
            .for_each(|(d, s)| d.copy_from_slice(s));
        Ok(PinnedBuffer { slice })
    }
}

impl<T: Element> PinnedBuffer<T> {
    /// Elements held.
    pub fn len(&self) -> usize {
        self.slice.len()
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.slice.len() == 0
    }

    /// The elements (waits for copies queued from them).
    ///
    /// # Errors
    /// Driver errors.
    pub fn as_slice(&self) -> Result<&[T]> {
        self.slice
            .as_slice()
            .map_err(driver("reading pinned host memory"))
    }

    /// Queues an asynchronous copy of `self[range]` into `dst` on `stream` and returns at once.
    /// The buffer records the copy: reading it on the host, or dropping it, waits for the copy.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] when `range` is reversed or reaches past the buffer;
    /// [`Error::LengthMismatch`] when `dst` differs in length from the range; driver errors.
    pub fn copy_range_to(
        &self,
        range: std::ops::Range<usize>,
        dst: &mut CudaViewMut<'_, T>,
        stream: &std::sync::Arc<CudaStream>,
    ) -> Result<()> {
        if range.start > range.end || range.end > self.len() {
            return Err(Error::IndexOutOfRange {
                what: "pinned copy range",
                index: range.end as u64,
                len: self.len(),
            });
        }
        Error::check_len("pinned copy", range.len(), dst.len())?;
        if range.is_empty() {
            return Ok(());
        }
        stream
            .context()
            .bind_to_thread()
            .map_err(driver("binding the context"))?;
        // SAFETY: the slice is used on `stream` only; the guard records an event after the
        // copy, which host reads and the buffer's drop wait for, so the memory outlives it.
        let (host, _guard) = unsafe { self.slice.stream_synced_slice(stream) };
        let (dptr, _dguard) = dst.device_ptr_mut(stream);
        // SAFETY: `host[range]` and `dst` hold range.len() elements each (checked above); the
        // host memory is page-locked, so the driver copies asynchronously from it.
        unsafe { cudarc::driver::result::memcpy_htod_async(dptr, &host[range], stream.cu_stream()) }
            .map_err(driver("copying pinned memory to the device"))
    }
}
