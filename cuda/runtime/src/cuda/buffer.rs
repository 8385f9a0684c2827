//! Typed device buffers that count themselves in their backend's memory accounting.

use std::mem::ManuallyDrop;
use std::sync::Arc;

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaSlice, CudaView, CudaViewMut, DevicePtr};

use super::MemoryTracker;
use super::cache::BufferCache;
use crate::{Buffer, Element, Error, Result};

/// A column in device memory, owned by a [`super::CudaBackend`].
///
/// Gives out cudarc views ([`DeviceBuffer::view`], [`DeviceBuffer::view_mut`]) so joinkit's
/// view-level functions and a caller's own kernels can work on it directly.
#[derive(Debug)]
pub struct DeviceBuffer<T> {
    /// Handed to `cache` when the buffer drops.
    slice: ManuallyDrop<CudaSlice<T>>,
    len: usize,
    tracker: Arc<MemoryTracker>,
    cache: Arc<BufferCache>,
    bytes: usize,
}

impl<T: Element> DeviceBuffer<T> {
    /// Wraps an allocation of at least `len` elements (one more may be held so that an empty
    /// buffer still owns a valid pointer), counts it, and hands it to `cache` when dropped.
    pub(super) fn new(
        slice: CudaSlice<T>,
        len: usize,
        tracker: Arc<MemoryTracker>,
        cache: Arc<BufferCache>,
    ) -> Self {
        let bytes = slice.len() * std::mem::size_of::<T>();
        tracker.add(bytes);
        Self {
            slice: ManuallyDrop::new(slice),
            len,
            tracker,
            cache,
            bytes,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keeps the first `len` elements (no effect when `len` is not shorter); the allocation
    /// stays as it was until the buffer is dropped. For outputs allocated at a bound and
    /// filled to a count known only afterwards.
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }

    /// Elements the allocation holds (at least `len`).
    pub fn capacity(&self) -> usize {
        self.slice.len()
    }

    /// Sets the length to `len` elements, at most [`DeviceBuffer::capacity`]: for a buffer
    /// refilled again and again with contents of varying length (the staging areas of a
    /// stream of chunks), without allocating each time. Elements past the old length hold
    /// whatever the allocation held.
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] when `len` passes the capacity.
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        if len > self.capacity() {
            return Err(Error::IndexOutOfRange {
                what: "device buffer length",
                index: len as u64,
                len: self.capacity(),
            });
        }
        self.len = len;
        Ok(())
    }

    /// A read-only view of the `len` elements.
    pub fn view(&self) -> CudaView<'_, T> {
        self.slice.slice(0..self.len)
    }

    /// A writable view of the `len` elements.
    pub fn view_mut(&mut self) -> CudaViewMut<'_, T> {
        self.slice.slice_mut(0..self.len)
    }

    /// The raw device address of element 0, for kernels and FFI calls. Valid while `self` is.
    pub fn device_ptr(&self) -> CUdeviceptr {
        let (ptr, _no_sync) = self.slice.device_ptr(self.slice.stream());
        ptr
    }
}

impl<T: Element> Buffer<T> for DeviceBuffer<T> {
    fn len(&self) -> usize {
        self.len
    }
}

impl<T> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        self.tracker.sub(self.bytes);
        // SAFETY: the slice is taken once, here, and not used after.
        self.cache
            .keep(unsafe { ManuallyDrop::take(&mut self.slice) });
    }
}
