//! The contract every operation is written against: a [`Backend`] owns buffers and moves data
//! between them and the host. Operations (sort, gather, partition, join) are traits in their own
//! crates with one implementation per backend and the same outputs, ordering and errors.

use crate::{Element, Result};

/// A column of elements owned by a backend (a `Vec` on the CPU, device memory on CUDA).
pub trait Buffer<T: Element>: Send + Sync {
    /// Number of elements.
    fn len(&self) -> usize;
    /// Whether the buffer holds no element.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Element> Buffer<T> for Vec<T> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
}

/// Which kind of device a backend runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// Host CPU, rayon's thread pool.
    Cpu,
    /// A CUDA device, by ordinal.
    Cuda(usize),
}

/// Device memory accounting: bytes held now and the most held at once since the last reset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes allocated through the backend and not yet freed.
    pub current_bytes: usize,
    /// High-water mark of `current_bytes` since creation or [`Backend::reset_peak_memory`].
    pub peak_bytes: usize,
}

/// A place where columns live and operations run.
///
/// Implemented by [`crate::CpuBackend`] and, with the `cuda` feature, `CudaBackend`. Cheap to
/// clone (handles share the device, stream and accounting).
pub trait Backend: Clone + Send + Sync + std::fmt::Debug + 'static {
    /// A column of `T` on this backend.
    type Buf<T: Element>: Buffer<T>;

    /// The device this backend runs on.
    fn kind(&self) -> DeviceKind;

    /// A human-readable description (device name, memory, SM count or thread count).
    fn describe(&self) -> String;

    /// Allocates `len` elements whose contents are unspecified (callers write them all).
    ///
    /// # Errors
    /// [`crate::Error::SizeOverflow`] when the size in bytes overflows,
    /// [`crate::Error::OutOfDeviceMemory`] when the device cannot hold it.
    fn alloc<T: Element>(&self, len: usize) -> Result<Self::Buf<T>>;

    /// Copies a host slice into a new buffer.
    ///
    /// # Errors
    /// As [`Backend::alloc`], plus driver errors during the copy.
    fn upload<T: Element>(&self, host: &[T]) -> Result<Self::Buf<T>>;

    /// A buffer holding `host`'s values, taking the vector: the CPU backend keeps it as it is
    /// (no copy, no second first touch of its pages); a device copies it like
    /// [`Backend::upload`].
    ///
    /// # Errors
    /// As [`Backend::upload`].
    fn upload_owned<T: Element>(&self, host: Vec<T>) -> Result<Self::Buf<T>> {
        self.upload(&host)
    }

    /// `buf`'s values on the host, taking the buffer: the CPU backend hands its vector over
    /// (no copy); a device copies it like [`Backend::download`].
    ///
    /// # Errors
    /// As [`Backend::download`].
    fn download_owned<T: Element>(&self, buf: Self::Buf<T>) -> Result<Vec<T>> {
        self.download(&buf)
    }

    /// Copies a buffer back to the host (waits for pending work on it).
    ///
    /// # Errors
    /// Driver errors during the copy; [`crate::Error::SizeOverflow`] when the CPU backend's host
    /// cannot hold the copy.
    fn download<T: Element>(&self, buf: &Self::Buf<T>) -> Result<Vec<T>>;

    /// Sets every element of `buf` to `value` (used to poison outputs in tests, and to clear).
    ///
    /// # Errors
    /// Driver errors.
    fn fill<T: Element>(&self, buf: &mut Self::Buf<T>, value: T) -> Result<()>;

    /// Writes `start, start + 1, ...` (wrapping at the element width) into `buf`: row ids.
    ///
    /// # Errors
    /// Driver errors.
    fn iota<T: Element>(&self, buf: &mut Self::Buf<T>, start: u64) -> Result<()>;

    /// Packed 32-bit ids `high << low_bits | low` widened to `high << 32 | low` (`low_bits`
    /// at most 32): ids that name a rank and a row of it travel 4 bytes wide when both fit
    /// there, and come back in the 8-byte global row id layout.
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] for `low_bits` above 32; allocation and driver errors.
    fn unpack_ids(&self, packed: &Self::Buf<u32>, low_bits: u32) -> Result<Self::Buf<u64>>;

    /// Writes reproducible pseudo-random data: element `i` gets the bits of
    /// `hash64(i, seed) & mask` (see [`crate::hash::hash64`]). Every backend writes the same
    /// values, so tests and benchmarks can generate inputs where they run.
    ///
    /// # Errors
    /// Driver errors.
    fn fill_random<T: Element>(&self, buf: &mut Self::Buf<T>, seed: u64, mask: u64) -> Result<()>;

    /// Copies `src` into `dst` (same length), device to device.
    ///
    /// # Errors
    /// [`crate::Error::LengthMismatch`] when the lengths differ; driver errors.
    fn copy<T: Element>(&self, src: &Self::Buf<T>, dst: &mut Self::Buf<T>) -> Result<()>;

    /// Copies `src` into `dst[offset..offset + src.len()]`, device to device (assembling
    /// outputs from parts).
    ///
    /// # Errors
    /// [`crate::Error::OutputTooLarge`] when `src` does not fit `dst` at `offset`; driver errors.
    fn copy_into<T: Element>(
        &self,
        src: &Self::Buf<T>,
        dst: &mut Self::Buf<T>,
        offset: usize,
    ) -> Result<()> {
        self.copy_range_into(src, 0..src.len(), dst, offset)
    }

    /// `a`'s elements followed by `c`'s, in a new buffer.
    ///
    /// # Errors
    /// [`crate::Error::SizeOverflow`] when the lengths' sum does not fit; allocation and driver
    /// errors.
    fn concat<T: Element>(&self, a: &Self::Buf<T>, c: &Self::Buf<T>) -> Result<Self::Buf<T>> {
        let len = a
            .len()
            .checked_add(c.len())
            .ok_or(crate::Error::SizeOverflow("concatenated length"))?;
        let mut out = self.alloc::<T>(len)?;
        self.copy_into(a, &mut out, 0)?;
        self.copy_into(c, &mut out, a.len())?;
        Ok(out)
    }

    /// Copies `src[range]` into `dst[offset..offset + range.len()]`, device to device, queued
    /// on this backend's stream. `src` may belong to another backend of the same type (another
    /// rank's buffer in an in-process communicator): the caller orders the two (the writer of
    /// `src` has finished, and `src` outlives the copy).
    ///
    /// # Errors
    /// [`crate::Error::IndexOutOfRange`] when `range` is reversed or reaches past `src`;
    /// [`crate::Error::OutputTooLarge`] when it does not fit `dst` at `offset`; driver errors.
    fn copy_range_into<T: Element>(
        &self,
        src: &Self::Buf<T>,
        range: std::ops::Range<usize>,
        dst: &mut Self::Buf<T>,
        offset: usize,
    ) -> Result<()>;

    /// Waits until all work queued on this backend has finished.
    ///
    /// # Errors
    /// Driver errors, including ones from earlier asynchronous launches.
    fn synchronize(&self) -> Result<()>;

    /// Runs `work` and returns its result with the elapsed time in milliseconds, measured the
    /// backend's way: CUDA events around the queued work on CUDA, the wall clock on the CPU.
    ///
    /// # Errors
    /// Whatever `work` returns, and driver errors from the timing itself.
    fn timed<R>(&self, work: impl FnOnce() -> Result<R>) -> Result<(R, f64)>;

    /// Device memory held through this backend now and at most; `None` where it is not counted
    /// (the CPU backend: host `Vec`s are the allocator's business).
    fn memory(&self) -> Option<MemoryStats>;

    /// Restarts the peak-memory count from the current holding.
    fn reset_peak_memory(&self);
}

/// Checks that `range` lies inside a source of `len` elements.
pub(crate) fn check_range(range: &std::ops::Range<usize>, len: usize) -> Result<()> {
    if range.start <= range.end && range.end <= len {
        Ok(())
    } else {
        Err(crate::Error::IndexOutOfRange {
            what: "copy source",
            index: range.end.max(range.start) as u64,
            len,
        })
    }
}

/// `offset + len` when `len` elements fit a buffer of `capacity` at `offset`.
pub(crate) fn check_fits(len: usize, capacity: usize, offset: usize) -> Result<usize> {
    match offset.checked_add(len) {
        Some(end) if end <= capacity => Ok(end),
        _ => Err(crate::Error::OutputTooLarge {
            needed: offset as u64 + len as u64,
            capacity: capacity as u64,
        }),
    }
}

/// Checks the low bits of packed ids ([`Backend::unpack_ids`]): at most 32. Every backend and
/// the joins that widen ids check with it, so they agree on what `low_bits` allows.
///
/// # Errors
/// [`crate::Error::InvalidArgument`] for more than 32.
pub fn check_unpack_low_bits(low_bits: u32) -> Result<()> {
    if low_bits > 32 {
        return Err(crate::Error::InvalidArgument(format!(
            "unpacking ids with {low_bits} low bits: at most 32"
        )));
    }
    Ok(())
}
