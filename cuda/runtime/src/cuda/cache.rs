//! Freed device allocations kept for reuse at the same size.
//!
//! The stream-ordered pool keeps freed memory mapped, but a request that fits no free range of
//! its virtual address space makes the driver remap pages into a new one, which costs about a
//! millisecond per few gigabytes. A join frees and allocates gigabyte columns of a few sizes in
//! the same order every time it runs, so the pool's free ranges rarely line up: on an H200 the
//! 2^27 ⋈ 2^28 8-byte 2+2 wide join spent 1.5 ms allocating its four output columns and about
//! as long again in its partition calls. Handing a freed allocation back to the next request of
//! exactly its size, as a caching allocator does, takes no driver call at all.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaSlice, CudaStream};

/// Every live cache of the process, so that an allocation that fails can empty the caches of
/// all backends on its device, not only its own.
static CACHES: Mutex<Vec<Weak<BufferCache>>> = Mutex::new(Vec::new());

/// Locks `m`, taking the data of a poisoned lock as it is (no critical section here leaves it
/// half-updated).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Freed allocations of one stream, by size, up to a limit in bytes; every allocation and free
/// of a [`super::CudaBackend`] goes through it.
#[derive(Debug)]
pub(crate) struct BufferCache {
    stream: Arc<CudaStream>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Most bytes held; 0 keeps nothing.
    limit: usize,
    /// Bytes held.
    held: usize,
    /// (bytes, address) of each allocation held, oldest first.
    kept: Vec<(usize, CUdeviceptr)>,
}

impl BufferCache {
    /// A cache of allocations made on `stream`, holding at most `limit` bytes.
    pub(crate) fn new(stream: Arc<CudaStream>, limit: usize) -> Arc<Self> {
        let cache = Arc::new(Self {
            stream,
            state: Mutex::new(State {
                limit,
                ..State::default()
            }),
        });
        let mut all = lock(&CACHES);
        all.retain(|c| c.strong_count() > 0);
        all.push(Arc::downgrade(&cache));
        cache
    }

    /// Releases everything the process's caches on device `ordinal` hold (their limits stay).
    pub(crate) fn release_device(ordinal: usize) {
        let live: Vec<Arc<Self>> = lock(&CACHES).iter().filter_map(Weak::upgrade).collect();
        for c in live
            .iter()
            .filter(|c| c.stream.context().ordinal() == ordinal)
        {
            c.release_all();
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Whether the stream's context tracks events: then nothing is kept, since a reused pointer
    /// would need new events (which cudarc creates by unwrapping).
    fn tracks_events(&self) -> bool {
        self.stream.context().is_event_tracking()
    }

    /// A kept allocation of exactly `len` elements of `T` (the newest such), as a slice on the
    /// cache's stream.
    pub(crate) fn take<T>(&self, len: usize) -> Option<CudaSlice<T>> {
        if self.tracks_events() {
            return None;
        }
        let bytes = len.checked_mul(std::mem::size_of::<T>())?;
        let ptr = {
            let mut s = self.state();
            let i = s.kept.iter().rposition(|&(b, _)| b == bytes)?;
            s.held -= bytes;
            s.kept.remove(i).1
        };
        // SAFETY: `ptr` is an allocation of `bytes` bytes from this stream's pool that no buffer
        // owns (its buffer was dropped into the cache), so it holds `len` elements of `T`; its
        // contents are unspecified, as `Backend::alloc` documents. The stream's context tracks no
        // events (checked above), so the upgrade creates none. Work queued on the stream by the
        // buffer's last owner runs before anything queued by the new one.
        Some(unsafe { self.stream.upgrade_device_ptr(ptr, len) })
    }

    /// Keeps `slice`'s allocation for a later [`BufferCache::take`] of its size, releasing the
    /// oldest kept ones when the limit requires; frees it instead when it alone exceeds the
    /// limit or the context tracks events.
    pub(crate) fn keep<T>(&self, slice: CudaSlice<T>) {
        let bytes = slice.len() * std::mem::size_of::<T>();
        let mut released = Vec::new();
        {
            let mut s = self.state();
            if bytes > s.limit || self.tracks_events() {
                drop(s);
                drop(slice); // freed on its stream
                return;
            }
            while s.held + bytes > s.limit {
                let (b, p) = s.kept.remove(0);
                s.held -= b;
                released.push((b, p));
            }
            s.held += bytes;
            s.kept.push((bytes, slice.leak()));
        }
        self.free(&released);
    }

    /// Sets the limit, releasing the oldest kept allocations above it (0 releases all).
    pub(crate) fn set_limit(&self, limit: usize) {
        self.state().limit = limit;
        self.release_above(limit);
    }

    /// Releases every kept allocation; the limit stays.
    pub(crate) fn release_all(&self) {
        self.release_above(0);
    }

    /// Releases the oldest kept allocations until at most `bytes` are held.
    fn release_above(&self, bytes: usize) {
        let released = {
            let mut s = self.state();
            let mut released = Vec::new();
            while s.held > bytes {
                let (b, p) = s.kept.remove(0);
                s.held -= b;
                released.push((b, p));
            }
            released
        };
        self.free(&released);
    }

    /// Bytes held.
    pub(crate) fn held(&self) -> usize {
        self.state().held
    }

    /// Frees released allocations as cudarc frees a dropped slice (stream-ordered, after the
    /// work queued before; errors recorded on the context, since this runs inside drops).
    fn free(&self, released: &[(usize, CUdeviceptr)]) {
        for &(bytes, p) in released {
            // SAFETY: each pointer is an allocation of `bytes` bytes from this stream that
            // nothing owns; the slice made of it is dropped at once, which frees it. Nothing is
            // kept while the context tracks events, so the upgrade creates none.
            drop(unsafe { self.stream.upgrade_device_ptr::<u8>(p, bytes) });
        }
    }
}

impl Drop for BufferCache {
    fn drop(&mut self) {
        self.release_all();
    }
}
