//! Large uploads and downloads staged through page-locked memory.
//!
//! Why: a copy from or to pageable memory goes through the driver's own staging, synchronously,
//! and ran at about 2.5 GB/s on the H200 machine, where copies from pinned memory reach about
//! 50 GB/s; a one-shot join of files spent most of its 0.66 s join step moving its 1.6 GB
//! that way. So [`CudaBackend`]'s `upload` and `download` of
//! [`STAGED_MIN_BYTES`] or more go through a ring of [`STAGING_BUFFERS`] reusable pinned
//! [`StagingBuffer`]s of [`STAGING_CHUNK_BYTES`] each, owned by the backend and pinned once, on
//! the first such transfer:
//!
//! - upload: the rayon pool copies chunk i + 1 of the host slice into the next staging buffer
//!   (once that buffer's previous copy is done) while chunk i's asynchronous copy to the device
//!   runs;
//! - download: the device copies chunk i + 1 into staging while the pool copies chunk i out
//!   into the output vector, whose pages the pool so touches first, in parallel (nothing
//!   zero-fills it first).
//!
//! Smaller transfers, and those that find the ring busy with another thread's transfer, copy
//! directly as before. `JOINKIT_NO_STAGING=1` turns staging off for the backends made
//! afterwards, to compare the two.

use std::sync::{MutexGuard, TryLockError};

use cudarc::driver::{DevicePtr, DevicePtrMut};

use super::staging::Way;
use super::{CudaBackend, DeviceBuffer, StagingBuffer};
use crate::{Element, Error, Result};

/// Transfers of at least this many bytes are staged; below it a chunk's fixed costs (an event,
/// a rayon dispatch) weigh more and the driver's own staging is fast enough.
pub const STAGED_MIN_BYTES: usize = 4 << 20;

/// Bytes of one staging buffer, the chunk a staged transfer moves at a time: large enough that
/// a chunk's fixed costs are small against its copies (about 0.7 ms on the link), small enough
/// that the ring pins little memory.
pub const STAGING_CHUNK_BYTES: usize = 32 << 20;

/// Staging buffers in the ring: two overlap the host's copy of one chunk with the link's copy
/// of another; a third absorbs jitter between them.
pub const STAGING_BUFFERS: usize = 3;

/// Name of the environment variable that turns staging off (set to anything but `0` or empty;
/// read when a backend is made).
pub const NO_STAGING_ENV: &str = "JOINKIT_NO_STAGING";

/// A backend's staging buffers: none until the first staged transfer, then
/// [`STAGING_BUFFERS`]. Words (`u64`) so that columns of every element type share them.
#[derive(Debug)]
pub(super) struct StagingRing {
    buffers: Vec<StagingBuffer<u64>>,
    /// Transfers copy directly: staging was turned off, or pinning the ring failed.
    off: bool,
}

impl StagingRing {
    /// An empty ring, off where [`NO_STAGING_ENV`] says so.
    pub(super) fn new() -> Self {
        Self {
            buffers: Vec::new(),
            off: std::env::var(NO_STAGING_ENV).is_ok_and(|v| !v.is_empty() && v != "0"),
        }
    }

    /// Whether staged transfers can run, pinning the buffers on the first call. A ring that
    /// cannot be pinned turns staging off for good instead of failing the transfer: direct
    /// copies still work (and report the context's error, if that is what failed).
    fn ready(&mut self, b: &CudaBackend) -> bool {
        if self.buffers.is_empty() && !self.off {
            let words = STAGING_CHUNK_BYTES / size_of::<u64>();
            match (0..STAGING_BUFFERS)
                .map(|_| b.staging::<u64>(words))
                .collect::<Result<Vec<_>>>()
            {
                Ok(buffers) => self.buffers = buffers,
                Err(_) => self.off = true,
            }
        }
        !self.off
    }

    /// The buffer chunk `i` of a transfer goes through.
    fn slot(&mut self, i: usize) -> &mut StagingBuffer<u64> {
        &mut self.buffers[i % STAGING_BUFFERS]
    }
}

/// A staging buffer's words as elements of `T` (4 or 8 bytes, so they always fit exactly).
fn as_elements<T: Element>(words: &mut [u64]) -> Result<&mut [T]> {
    bytemuck::try_cast_slice_mut(words)
        .map_err(|e| Error::Corrupt(format!("staging words as {}: {e:?}", T::NAME)))
}

/// Elements of `T` in one chunk.
fn chunk_len<T: Element>() -> usize {
    STAGING_CHUNK_BYTES / size_of::<T>()
}

/// The device address of element `at` of a buffer of `T` starting at `base`.
fn address<T: Element>(base: u64, at: usize) -> u64 {
    base + (at * size_of::<T>()) as u64
}

impl CudaBackend {
    /// The staging ring for a transfer of `bytes`, or `None` where the transfer copies
    /// directly: it is small, staging is off, or another transfer holds the ring. Why not wait
    /// for the ring: the link is busy with that transfer anyway, and a rayon worker that holds
    /// the ring may, while waiting for its parallel copy, run a job that transfers too, on the
    /// same thread: waiting there would deadlock.
    pub(super) fn staging_ring(&self, bytes: usize) -> Option<MutexGuard<'_, StagingRing>> {
        if bytes < STAGED_MIN_BYTES {
            return None;
        }
        let mut ring = match self.inner.staging.try_lock() {
            Ok(ring) => ring,
            // A transfer that panicked left at worst copies in flight, which the buffers wait
            // for before their next use.
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        ring.ready(self).then_some(ring)
    }

    /// Bytes of page-locked host memory the backend holds to stage large transfers: 0 until
    /// the first one, then [`STAGING_BUFFERS`] × [`STAGING_CHUNK_BYTES`] for the backend's
    /// life. Waits for a staged transfer in progress.
    pub fn staging_bytes(&self) -> usize {
        let ring = self
            .inner
            .staging
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        ring.buffers.len() * STAGING_CHUNK_BYTES
    }

    /// Copies `host` into `dst` (of its length) chunk by chunk through `ring`, each chunk's
    /// host copy overlapping the previous chunk's copy to the device. Returns once `host` is
    /// read: the last copies to the device are queued on the backend's stream, so what runs
    /// after them there sees `dst` whole.
    pub(super) fn upload_staged<T: Element>(
        &self,
        ring: &mut StagingRing,
        host: &[T],
        dst: &mut DeviceBuffer<T>,
    ) -> Result<()> {
        Error::check_len("upload source vs buffer", host.len(), dst.len())?;
        self.bind_to_thread()?;
        let stream = self.stream();
        let mut view = dst.view_mut();
        // Held over the copies: on a context that tracks events, the buffer's write is
        // recorded after the last one.
        let (base, _written) = view.device_ptr_mut(stream);
        for (i, chunk) in host.chunks(chunk_len::<T>()).enumerate() {
            let staging = ring.slot(i);
            // Waits for the copy of chunk i − STAGING_BUFFERS out of this buffer.
            let room = as_elements::<T>(staging.host_mut()?)?;
            crate::copy_parallel(&mut room[..chunk.len()], chunk)?;
            let at = address::<T>(base, i * chunk_len::<T>());
            // SAFETY: chunk i is elements [i · chunk_len, i · chunk_len + chunk.len()) of
            // `dst`, which holds host.len() (checked above); `dst`'s memory goes back to the
            // pool, or is reused, only in this stream's order, after the copy.
            unsafe { staging.copy_bytes(Way::ToDevice, at, size_of_val(chunk), stream)? };
        }
        Ok(())
    }

    /// `src`'s elements on the host, chunk by chunk through `ring`: the copy of chunk i + 1
    /// into staging overlaps the pool's copy of chunk i into the output, which is allocated
    /// without being written and filled by those copies (its pages first touched by every
    /// thread).
    pub(super) fn download_staged<T: Element>(
        &self,
        ring: &mut StagingRing,
        src: &DeviceBuffer<T>,
    ) -> Result<Vec<T>> {
        self.bind_to_thread()?;
        let stream = self.stream();
        let n = src.len();
        let per = chunk_len::<T>();
        let chunks = n.div_ceil(per);
        let rows = |i: usize| i * per..((i + 1) * per).min(n);
        let view = src.view();
        // Held over the copies: on a context that tracks events, the stream first waits for
        // the buffer's last write and the read is recorded after the last copy.
        let (base, _read) = view.device_ptr(stream);
        let queue = |ring: &mut StagingRing, i: usize| -> Result<()> {
            let r = rows(i);
            // SAFETY: rows r lie inside `src` (r.end ≤ n), which the caller keeps alive, and
            // this stream keeps unwritten, until the copy is done: the chunk's wait below.
            unsafe {
                ring.slot(i).copy_bytes(
                    Way::FromDevice,
                    address::<T>(base, r.start),
                    r.len() * size_of::<T>(),
                    stream,
                )
            }
        };
        // Allocated (not touched) before any copy is queued: a host that cannot hold the
        // output fails the download with nothing in flight.
        let mut host = crate::try_reserved::<T>(n)?;
        for i in 0..chunks.min(STAGING_BUFFERS) {
            queue(ring, i)?;
        }
        let out = &mut host.spare_capacity_mut()[..n];
        for i in 0..chunks {
            let r = rows(i);
            // Waits for chunk i's copy into its buffer.
            let staged = as_elements::<T>(ring.slot(i).host_mut()?)?;
            crate::copy_parallel_uninit(&mut out[r.clone()], &staged[..r.len()])?;
            if i + STAGING_BUFFERS < chunks {
                queue(ring, i + STAGING_BUFFERS)?;
            }
        }
        // SAFETY: the chunks' rows cover 0..n, and each chunk's copy above wrote all of its
        // rows; the capacity is at least n (`try_reserved`).
        unsafe { host.set_len(n) };
        Ok(host)
    }
}
