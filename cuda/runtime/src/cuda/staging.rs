//! Reusable page-locked host buffers for streams of chunks: written on the host, copied to or
//! from the device asynchronously, written again once their own copy is done. Each buffer
//! waits for its own event, never for the whole context (as [`super::PinnedBuffer`] does), so
//! copies of the other buffers of a ring keep flowing.

use std::sync::Arc;

use cudarc::driver::result::{memcpy_dtoh_async, memcpy_htod_async};
use cudarc::driver::sys::{CUdeviceptr, CUevent_flags};
use cudarc::driver::{CudaEvent, CudaStream, PinnedHostSlice};

use super::{CudaBackend, DeviceBuffer, driver};
use crate::{Element, Error, Result};

/// Which way a staged copy goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Way {
    /// From the staging buffer to device memory.
    ToDevice,
    /// From device memory into the staging buffer.
    FromDevice,
}

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
        // SAFETY: `dst` holds `n` elements of `T`, and stays alive until the copy is done:
        // the caller keeps it unused by other streams until then, and its memory goes back
        // to the pool in `stream`'s order.
        unsafe { self.copy_bytes(Way::ToDevice, dst.device_ptr(), n * size_of::<T>(), stream) }
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
        // SAFETY: `src` holds `n` elements of `T`; the caller keeps it alive and unwritten
        // until the copy is done.
        unsafe {
            self.copy_bytes(
                Way::FromDevice,
                src.device_ptr(),
                n * size_of::<T>(),
                stream,
            )
        }
    }

    /// Queues a copy between the buffer's first `bytes` bytes and `bytes` bytes at device
    /// address `device`, the way `way` says, on `stream`, and returns at once;
    /// [`StagingBuffer::host_mut`] and the drop wait for it. Byte counts, not elements: the
    /// backend's transfers stage columns of every element type through one ring of buffers.
    ///
    /// # Safety
    /// `device` is `bytes` bytes of device memory that stay allocated until the copy is done,
    /// and unused by other streams (to the device) or unwritten (from it) until then.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] when `bytes` passes the buffer; driver errors.
    pub(super) unsafe fn copy_bytes(
        &mut self,
        way: Way,
        device: CUdeviceptr,
        bytes: usize,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        let bytes = self.checked_bytes(bytes)?;
        if bytes > 0 {
            let host = &mut bytemuck::cast_slice_mut::<T, u8>(self.host_mut()?)[..bytes];
            let s = stream.cu_stream();
            // SAFETY: `host` is pinned and `bytes` long, `device` too (the caller's contract);
            // nothing reads or writes the buffer on the host before the copy is done
            // (`host_mut` and the drop wait for `done`, recorded below).
            let copied = unsafe {
                match way {
                    Way::ToDevice => memcpy_htod_async(device, &*host, s),
                    Way::FromDevice => memcpy_dtoh_async(host, device, s),
                }
            };
            copied.map_err(driver(match way {
                Way::ToDevice => "copying staged chunks to the device",
                Way::FromDevice => "copying chunks to staging memory",
            }))?;
        }
        self.record(stream)
    }

    /// `n` elements when they fit the buffer.
    fn checked(&self, n: usize) -> Result<usize> {
        fits(n, self.capacity)
    }

    /// `bytes` when they fit the buffer.
    fn checked_bytes(&self, bytes: usize) -> Result<usize> {
        fits(bytes, self.capacity * size_of::<T>())
    }

    fn record(&mut self, stream: &Arc<CudaStream>) -> Result<()> {
        self.done
            .record(stream)
            .map_err(driver("recording a staging event"))?;
        self.pending = true;
        Ok(())
    }
}

/// `n` when it is at most `room` (elements or bytes of a staging buffer).
fn fits(n: usize, room: usize) -> Result<usize> {
    if n > room {
        return Err(Error::IndexOutOfRange {
            what: "staging copy",
            index: n as u64,
            len: room,
        });
    }
    Ok(n)
}

impl<T: Element> Drop for StagingBuffer<T> {
    fn drop(&mut self) {
        // The pinned memory must outlive its copies; a failure here is the context's own,
        // reported by its next call.
        let _ = self.wait();
    }
}
