//! Page-locked (pinned) host memory: the source of asynchronous host-to-device copies, which
//! run at the link's full rate while kernels run (copies from pageable memory are staged by
//! the driver and return only when done).

use std::sync::atomic::{AtomicBool, Ordering};

use cudarc::driver::{CudaStream, CudaViewMut, DevicePtrMut, PinnedHostSlice};

use super::{CudaBackend, driver};
use crate::{Element, Error, Result};

/// A pinned host column of `T`, allocated on a backend's device context.
///
/// Copies from it run asynchronously; reading it on the host or dropping it first waits for
/// every copy queued from it (the backends turn cudarc's per-buffer events off, so the buffer
/// keeps this order itself: it synchronizes the context when a copy may be in flight).
pub struct PinnedBuffer<T: Element> {
    /// At least one element long (pinning zero bytes is not portable); `len` counts.
    slice: PinnedHostSlice<T>,
    /// The allocation's address (read once at `pin`: reading it through cudarc waits on an
    /// event).
    address: usize,
    len: usize,
    /// Set when a copy was queued and not yet waited for.
    in_flight: AtomicBool,
}

impl<T: Element> PinnedBuffer<T> {
    /// Waits for the copies queued from this buffer, if any.
    fn settle(&self) -> Result<()> {
        if self.in_flight.swap(false, Ordering::AcqRel) {
            self.slice
                .context()
                .synchronize()
                .map_err(driver("waiting for copies from pinned memory"))?;
        }
        Ok(())
    }
}

impl<T: Element> Drop for PinnedBuffer<T> {
    fn drop(&mut self) {
        // A failure here is the context's own, reported by its next call.
        let _ = self.settle();
    }
}

impl<T: Element> std::fmt::Debug for PinnedBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PinnedBuffer<{}>[{}]", T::NAME, self.len)
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
        // SAFETY: `T` is plain old data; the first `host.len()` elements are written below
        // before any read, and only those are ever read.
        let mut slice = unsafe {
            self.context()
                .alloc_pinned_with_flags::<T>(host.len().max(1), 0)
        }
        .map_err(driver("allocating pinned host memory"))?;
        let dst = slice
            .as_mut_slice()
            .map_err(driver("reading pinned host memory"))?;
        crate::copy_parallel(&mut dst[..host.len()], host)?;
        let address = slice
            .as_ptr()
            .map_err(driver("reading pinned host memory"))? as usize;
        Ok(PinnedBuffer {
            slice,
            address,
            len: host.len(),
            in_flight: AtomicBool::new(false),
        })
    }
}

impl<T: Element> PinnedBuffer<T> {
    /// Elements held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements (waits for copies queued from them).
    ///
    /// # Errors
    /// Driver errors.
    pub fn as_slice(&self) -> Result<&[T]> {
        self.settle()?;
        let all = self
            .slice
            .as_slice()
            .map_err(driver("reading pinned host memory"))?;
        Ok(&all[..self.len])
    }

    /// Queues an asynchronous copy of `self[range]` into `dst` on `stream` and returns at once.
    /// Reading the buffer on the host, or dropping it, waits for the copy. `dst`'s memory is
    /// the caller's to keep alive and unused by other streams until the copy is done (order
    /// `stream` against them with events, or synchronize it).
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
        self.in_flight.store(true, Ordering::Release);
        let host = &self.as_pinned()[range];
        let (dptr, _dguard) = dst.device_ptr_mut(stream);
        // SAFETY: `host` and `dst` hold range.len() elements each (checked above); the host
        // memory is page-locked, so the driver copies asynchronously from it, and it outlives
        // the copy: host reads and the drop wait for the context first (`in_flight`).
        unsafe { cudarc::driver::result::memcpy_htod_async(dptr, host, stream.cu_stream()) }
            .map_err(driver("copying pinned memory to the device"))
    }

    /// The elements without waiting for copies (which only read them).
    fn as_pinned(&self) -> &[T] {
        // SAFETY: the allocation holds at least `len` elements, all written by `pin`, and
        // nothing writes them afterwards: copies only read.
        unsafe { std::slice::from_raw_parts(self.address as *const T, self.len) }
    }
}
