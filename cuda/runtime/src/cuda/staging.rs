//! Reusable page-locked host buffers for streams of chunks: written on the host, copied to or
//! from the device asynchronously, written again once their own copy is done. Each buffer
//! waits for its own event, never for the whole context (as [`super::PinnedBuffer`] does), so
//! copies of the other buffers of a ring keep flowing.

use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream, PinnedHostSlice};

use super::{CudaBackend, DeviceBuffer, driver};
use crate::{Element, Error, Result};

/// A pinned host buffer of `capacity` elements with the event of its last copy.
pub struct StagingBuffer<T: Element> {
    /// Owns the allocation (at least one element long: pinning zero bytes is not portable);
    /// read through `address`.
    _pinned: PinnedHostSlice<T>,
    /// The allocation's address (read once: reading it through cudarc waits on an event).
    address: usize,
    capacity: usize,
    /// Recorded after the last copy queued from or into the buffer.
    done: CudaEvent,
    /// Whether a copy was queued and not yet waited for.
    pending: bool,
}

impl<T: Element> std::fmt::Debug for StagingBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StagingBuffer<{}>[{}]", T::NAME, self.capacity)
    }
}

impl CudaBackend {
    /// A staging buffer of `capacity` elements in pinned memory on this backend's context.
    ///
    /// # Errors
    /// [`Error::SizeOverflow`] when the bytes overflow; driver errors (pinning fails when the
    /// host cannot lock that much memory).
    pub fn staging<T: Element>(&self, capacity: usize) -> Result<StagingBuffer<T>> {
        capacity
            .checked_mul(size_of::<T>())
            .filter(|b| *b < isize::MAX as usize)
            .ok_or(Error::SizeOverflow("staging buffer"))?;
        // SAFETY: `T` is plain old data, so any bytes are a valid `T`; nothing reads the
        // buffer before the caller writes it or a copy fills it.
        let slice = unsafe {
            self.context()
                .alloc_pinned_with_flags::<T>(capacity.max(1), 0)
        }
        .map_err(driver("allocating pinned host memory"))?;
        let address = slice
            .as_ptr()
            .map_err(driver("reading pinned host memory"))? as usize;
        let done = self
            .context()
            .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .map_err(driver("creating an event"))?;
        Ok(StagingBuffer {
            _pinned: slice,
            address,
            capacity,
            done,
            pending: false,
        })
    }
}

impl<T: Element> StagingBuffer<T> {
    /// Elements the buffer holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Waits for the last copy queued from or into the buffer, if any.
    ///
    /// # Errors
    /// Driver errors (a failed copy).
    pub fn wait(&mut self) -> Result<()> {
        if self.pending {
            self.done
                .synchronize()
                .map_err(driver("waiting for a staging copy"))?;
            self.pending = false;
        }
        Ok(())
    }

    /// The elements, to read (after a copy into them) or write (before a copy from them):
    /// waits for the last copy first.
    ///
    /// # Errors
    /// Driver errors (a failed copy).
    pub fn host_mut(&mut self) -> Result<&mut [T]> {
        self.wait()?;
        // SAFETY: the allocation holds `capacity` elements of plain old data, no copy is in
        // flight (waited for above), and `&mut self` keeps the slice unique.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.address as *mut T, self.capacity) })
    }

    /// Queues a copy of the first `dst.len()` elements into `dst` on `stream` and returns at
    /// once. `dst` is the caller's to keep unused by other streams until the copy is done
    /// (order them after `stream` with an event).
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] when `dst` is longer than the buffer; driver errors.
    pub fn copy_to_device(
        &mut self,
        dst: &mut DeviceBuffer<T>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let n = self.checked(dst.len())?;
        if n > 0 {
            let ptr = dst.device_ptr();
            let host = &self.host_mut()?[..n];
            // SAFETY: `host` is pinned and `n` elements long, as is `dst`; the buffer is not
            // written again before the copy is done (`host_mut` and the drop wait for `done`).
            unsafe { cudarc::driver::result::memcpy_htod_async(ptr, host, stream.cu_stream()) }
                .map_err(driver("copying staged chunks to the device"))?;
        }
        self.record(stream)
    }

    /// Queues a copy of `src` into the first `src.len()` elements on `stream` and returns at
    /// once; [`StagingBuffer::host_mut`] waits for it. `src` must stay alive and unwritten
    /// until then.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] when `src` is longer than the buffer; driver errors.
    pub fn copy_from_device(
        &mut self,
        src: &DeviceBuffer<T>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let n = self.checked(src.len())?;
        if n > 0 {
            let ptr = src.device_ptr();
            let host = &mut self.host_mut()?[..n];
            // SAFETY: `host` is pinned and `n` elements long, as is `src`; nothing reads or
            // writes the buffer on the host before the copy is done (`host_mut` waits).
            unsafe { cudarc::driver::result::memcpy_dtoh_async(host, ptr, stream.cu_stream()) }
                .map_err(driver("copying chunks to staging memory"))?;
        }
        self.record(stream)
    }

    fn checked(&self, n: usize) -> Result<usize> {
        if n > self.capacity {
            return Err(Error::IndexOutOfRange {
                what: "staging copy",
                index: n as u64,
                len: self.capacity,
            });
        }
        Ok(n)
    }

    fn record(&mut self, stream: &Arc<CudaStream>) -> Result<()> {
        self.done
            .record(stream)
            .map_err(driver("recording a staging event"))?;
        self.pending = true;
        Ok(())
    }
}

impl<T: Element> Drop for StagingBuffer<T> {
    fn drop(&mut self) {
        // The pinned memory must outlive its copies; a failure here is the context's own,
        // reported by its next call.
        let _ = self.wait();
    }
}
