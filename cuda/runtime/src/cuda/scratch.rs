//! One temporary-storage protocol for everything that needs scratch space (CUB's two-phase
//! query, our own multi-pass kernels): the caller owns a [`Scratch`] and passes it in; it grows
//! to the largest request and is reused, so steady-state calls allocate nothing.

use cudarc::driver::sys::CUdeviceptr;

use super::{CudaBackend, DeviceBuffer};
use crate::{Backend, Error, Result};

/// Reusable device scratch memory, 256-byte aligned (it is one allocation of 8-byte words; the
/// driver aligns allocations to at least 256 bytes).
#[derive(Debug, Default)]
pub struct Scratch {
    buf: Option<DeviceBuffer<u64>>,
}

impl Scratch {
    /// Empty scratch; the first request allocates.
    pub fn new() -> Self {
        Self::default()
    }

    /// Bytes currently held.
    pub fn capacity_bytes(&self) -> usize {
        self.buf.as_ref().map_or(0, |b| crate::Buffer::len(b) * 8)
    }

    /// Makes at least `bytes` available and returns their device address. Growing drops the
    /// old allocation first (stream-ordered, so earlier queued work that used it is safe).
    ///
    /// # Errors
    /// [`Error::OutOfDeviceMemory`] and driver errors.
    pub fn reserve(&mut self, backend: &CudaBackend, bytes: usize) -> Result<CUdeviceptr> {
        if self.capacity_bytes() < bytes.max(1) {
            self.buf = None;
            let words = bytes.div_ceil(8).max(1);
            self.buf = Some(backend.alloc::<u64>(words)?);
        }
        self.buf
            .as_ref()
            .map(DeviceBuffer::device_ptr)
            .ok_or(Error::SizeOverflow("scratch allocation"))
    }
}
