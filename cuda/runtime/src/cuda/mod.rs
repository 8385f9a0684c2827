//! The CUDA backend over cudarc: one device, one stream, typed buffers with memory accounting,
//! fatbin modules loaded once per device, launch shapes from the device's properties, large
//! transfers staged through pinned memory (`transfer`).

mod buffer;
mod cache;
mod module;
mod pinned;
mod scratch;
mod staging;
mod transfer;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering, fence};
use std::sync::{Arc, Mutex};

pub use cudarc;
use cudarc::driver::sys;
use cudarc::driver::sys::CUdevice_attribute as Attr;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaStream, CudaView, DevicePtr, DriverError, LaunchConfig,
    PushKernelArg,
};

pub use buffer::DeviceBuffer;
use cache::BufferCache;
pub use module::KernelModule;
pub use pinned::PinnedBuffer;
pub use scratch::Scratch;
pub use staging::StagingBuffer;
use transfer::StagingRing;
pub use transfer::{NO_STAGING_ENV, STAGED_MIN_BYTES, STAGING_BUFFERS, STAGING_CHUNK_BYTES};

use crate::{Backend, DeviceKind, Element, Error, MemoryStats, Result};

/// A backend keeps freed allocations of up to the device's memory over this for reuse
/// ([`CudaBackend::set_buffer_cache_limit`]).
const CACHE_LIMIT_DIVISOR: usize = 4;

/// This crate's own kernels (fills, iota, reproducible random data).
static RUNTIME_KERNELS: KernelModule = crate::kernel_module!();

/// Whether the CUDA driver library can be loaded at all. Checked before any driver call:
/// without libcuda, cudarc would panic instead of returning an error.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen libcuda under its usual names; no driver call is made.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Number of CUDA devices, or why there are none.
///
/// # Errors
/// [`Error::NoDevice`] without a driver or when the driver fails to initialise.
pub fn device_count() -> Result<usize> {
    if !driver_present() {
        return Err(Error::NoDevice(
            "the CUDA driver (libcuda) is not installed".into(),
        ));
    }
    let n = CudaContext::device_count().map_err(|e| Error::NoDevice(format!("{e:?}")))?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// What the launch heuristics and reports need to know about the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Device ordinal.
    pub ordinal: usize,
    /// Marketing name (`NVIDIA H200`).
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Resident threads per SM.
    pub max_threads_per_sm: u32,
    /// Shared memory a block may opt into, in bytes.
    pub max_shared_per_block_optin: u32,
    /// Shared memory per SM, in bytes.
    pub shared_per_sm: u32,
    /// L2 cache, in bytes.
    pub l2_bytes: usize,
    /// Device memory, in bytes.
    pub total_memory: usize,
}

/// Memory accounting shared by a backend and all its buffers.
#[derive(Debug, Default)]
pub(crate) struct MemoryTracker {
    current: AtomicUsize,
    peak: AtomicUsize,
}

impl MemoryTracker {
    pub(crate) fn add(&self, bytes: usize) {
        let now = self.current.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }
    pub(crate) fn sub(&self, bytes: usize) {
        self.current.fetch_sub(bytes, Ordering::Relaxed);
    }
}

#[derive(Debug)]
struct Inner {
    ctx: Arc<CudaContext>,
    /// The device's default stream-ordered memory pool (cudarc allocates from it).
    pool: MemPool,
    stream: Arc<CudaStream>,
    info: DeviceInfo,
    memory: Arc<MemoryTracker>,
    /// Freed allocations kept for reuse (see [`CudaBackend::set_buffer_cache_limit`]).
    cache: Arc<BufferCache>,
    functions: Mutex<HashMap<(usize, &'static str), LoadedKernel>>,
    /// Pinned buffers that large uploads and downloads go through (see `transfer`); one
    /// transfer at a time holds them.
    staging: Mutex<StagingRing>,
    /// What [`CudaBackend::posted_words`] reads (made on first use); one such read at a time
    /// holds it.
    posted: Mutex<Option<Posted>>,
}

/// The mapped words [`CudaBackend::posted_words`] has the device write, the last ticket it
/// handed out, and the event that tells it the posting work has ended.
#[derive(Debug)]
struct Posted {
    words: MappedWords,
    ticket: u64,
    done: cudarc::driver::CudaEvent,
}

/// A kernel loaded on the device, and whether its dynamic shared-memory limit was raised
/// ([`CudaBackend::function_with_dynamic_shared`]).
type LoadedKernel = (CudaFunction, bool);

/// Mapped host words [`CudaBackend::posted_words`] offers (4 KiB): words and tickets together.
pub const POSTED_WORDS: usize = 512;

/// Polls of the tickets between two queries of whether the posting work has ended.
const POLLS_PER_QUERY: u32 = 64;

/// Page-locked host words mapped into the device's address space.
#[derive(Debug)]
struct MappedWords {
    /// Owns the allocation.
    _pinned: cudarc::driver::PinnedHostSlice<u64>,
    host: *const u64,
    device: sys::CUdeviceptr,
}

// SAFETY: the words are only read under the backend's lock, once the work storing into them
// has posted them (`CudaBackend::posted_words`).
unsafe impl Send for MappedWords {}

/// The CUDA backend: a device, a stream all its work is queued on, and memory accounting.
///
/// Operations queue work on [`CudaBackend::stream`] and return without synchronizing; reading
/// results back ([`Backend::download`]) or [`Backend::synchronize`] waits. Clones share the
/// stream.
#[derive(Debug, Clone)]
pub struct CudaBackend {
    inner: Arc<Inner>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Buffers that outlive the backend free their memory when dropped instead of keeping
        // it where nothing can reuse it.
        self.cache.set_limit(0);
        live_backends(self.info.ordinal, -1);
    }
}

/// Adds `change` to the count of backends alive on device `ordinal` in this process and
/// returns the count (see [`CudaBackend::close`]).
fn live_backends(ordinal: usize, change: isize) -> usize {
    static LIVE: Mutex<Vec<usize>> = Mutex::new(Vec::new());
    let mut live = LIVE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if live.len() <= ordinal {
        live.resize(ordinal + 1, 0);
    }
    live[ordinal] = live[ordinal].saturating_add_signed(change);
    live[ordinal]
}

/// The device's default memory pool, which stream-ordered allocations come from.
#[derive(Debug)]
struct MemPool(cudarc::driver::sys::CUmemoryPool);

// SAFETY: a CUmemoryPool handle is a process-wide driver object usable from any thread.
unsafe impl Send for MemPool {}
// SAFETY: as above; the driver synchronizes operations on the pool.
unsafe impl Sync for MemPool {}

impl MemPool {
    /// The default pool of `ctx`'s device, set to keep freed memory for reuse. By default the
    /// pool returns freed memory to the driver at every synchronization, so the next large
    /// allocation maps fresh pages: for gigabyte buffers that costs milliseconds per call.
    fn keep_freed_memory(ctx: &CudaContext) -> Result<Self> {
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        let mut threshold = u64::MAX;
        // SAFETY: the context is current (bound by the caller's driver calls); the out pointer
        // and the attribute value are valid for the calls' duration.
        unsafe {
            ctx.bind_to_thread()
                .map_err(|e| driver_error("binding the context", e))?;
            sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device())
                .result()
                .map_err(|e| driver_error("getting the memory pool", e))?;
            sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut threshold as *mut u64).cast(),
            )
            .result()
            .map_err(|e| driver_error("configuring the memory pool", e))?;
        }
        Ok(Self(pool))
    }

    /// Returns the memory the pool keeps unused to the driver.
    fn trim(&self) -> Result<()> {
        // SAFETY: the pool handle came from the driver and stays valid for the process.
        unsafe { cudarc::driver::sys::cuMemPoolTrimTo(self.0, 0) }
            .result()
            .map_err(|e| driver_error("trimming the memory pool", e))
    }
}

/// Maps a driver error to [`Error::Driver`] naming the operation `op`.
pub(crate) fn driver_error(op: &'static str, e: DriverError) -> Error {
    Error::Driver {
        op,
        message: format!("{e:?}"),
    }
}

/// For `map_err`: the driver error of operation `op` as [`Error::Driver`] (every crate's
/// launches and copies report through this).
pub fn driver(op: &'static str) -> impl Fn(DriverError) -> Error {
    move |e| driver_error(op, e)
}

impl CudaBackend {
    /// Opens device `ordinal` with a new stream.
    ///
    /// # Errors
    /// [`Error::NoDevice`] without a driver or device, driver errors otherwise.
    pub fn new(ordinal: usize) -> Result<Self> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(Error::NoDevice(format!(
                "cuda:{ordinal} asked for, {count} device(s) present"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| driver_error("opening the device", e))?;
        // SAFETY: all work of a backend is ordered on its one stream, so cudarc's per-buffer
        // events (which order work across streams) are not needed; callers mixing streams
        // order them themselves, as the reuse API documents.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx
            .new_stream()
            .map_err(|e| driver_error("creating a stream", e))?;
        Self::with_stream(stream)
    }

    /// A backend on a stream the caller already owns (for reuse inside another GPU project):
    /// all work is queued on `stream`.
    ///
    /// # Errors
    /// Driver errors reading the device's properties.
    pub fn with_stream(stream: Arc<CudaStream>) -> Result<Self> {
        Self::on_stream(stream, Arc::default())
    }

    /// A backend on this one's device with a new stream of its own, for work that runs beside
    /// this backend's: its allocations count in the same memory figures ([`Backend::memory`]),
    /// one device's memory held through either. Each keeps its own freed allocations (their
    /// reuse is ordered on the stream that freed them).
    ///
    /// # Errors
    /// Driver errors creating the stream.
    pub fn side_stream(&self) -> Result<Self> {
        self.bind_to_thread()?;
        let stream = (self.inner.ctx)
            .new_stream()
            .map_err(|e| driver_error("creating a stream", e))?;
        Self::on_stream(stream, Arc::clone(&self.inner.memory))
    }

    fn on_stream(stream: Arc<CudaStream>, memory: Arc<MemoryTracker>) -> Result<Self> {
        let ctx = stream.context().clone();
        let info = Self::read_info(&ctx)?;
        let pool = MemPool::keep_freed_memory(&ctx)?;
        let cache = BufferCache::new(stream.clone(), info.total_memory / CACHE_LIMIT_DIVISOR);
        live_backends(info.ordinal, 1);
        Ok(Self {
            inner: Arc::new(Inner {
                ctx,
                pool,
                stream,
                info,
                memory,
                cache,
                functions: Mutex::default(),
                staging: Mutex::new(StagingRing::new()),
                posted: Mutex::default(),
            }),
        })
    }

    /// Closes the device now instead of at the process's exit: frees what the backend holds
    /// and, when it is the process's only backend on the device, destroys the device's primary
    /// context, which the process's loaded kernel modules and the CUDA runtime (CUB's calls)
    /// otherwise hold until the exit. Why: a process that exits with a context open spent
    /// 101–157 ms in the driver's exit on the H200 machine against 36–66 after the context was
    /// destroyed (`docs/results/files.md`), so a command with work left after its last GPU work
    /// (a join of files writing its output) closes the device on another thread meanwhile.
    /// With other backends on the device alive this only drops the backend.
    ///
    /// # Safety
    /// Nothing made from this device outside the process's joinkit backends may be in use:
    /// no buffers or page-locked host buffers ([`PinnedBuffer`], [`StagingBuffer`]) made from
    /// this backend may outlive the call, and no other code may use the device's primary
    /// context (cudarc or the CUDA runtime directly), since destroying it frees their memory,
    /// page-locked host memory included.
    pub unsafe fn close(self) {
        let ordinal = self.inner.info.ordinal;
        let device = self.inner.ctx.cu_device();
        let alone = Arc::strong_count(&self.inner) == 1 && live_backends(ordinal, 0) == 1;
        if alone {
            module::forget(ordinal);
        }
        drop(self);
        if alone {
            // SAFETY: the caller guarantees that nothing but this backend, now dropped, used
            // the device's primary context; a failure leaves it to the exit, as before.
            let _ = unsafe { sys::cuDevicePrimaryCtxReset_v2(device) };
        }
    }

    /// Sets how many bytes of freed allocations the backend keeps to hand to later requests of
    /// exactly their size (by default a quarter of the device's memory), releasing the oldest
    /// kept ones above the new limit; 0 turns the cache off. Without it a request that fits no
    /// free range of the driver's pool has its pages remapped, about a millisecond per few
    /// gigabytes, and joins that free and allocate gigabyte columns meet that often. Kept
    /// allocations are not counted in [`Backend::memory`]; an allocation that fails releases
    /// those of every backend on the device and tries again, and a dropped backend releases its
    /// own. A backend on a stream whose context tracks events ([`CudaBackend::with_stream`])
    /// keeps nothing.
    pub fn set_buffer_cache_limit(&self, bytes: usize) {
        self.inner.cache.set_limit(bytes);
    }

    /// Bytes of freed allocations the backend keeps for reuse now.
    pub fn buffer_cache_bytes(&self) -> usize {
        self.inner.cache.held()
    }

    fn read_info(ctx: &Arc<CudaContext>) -> Result<DeviceInfo> {
        let attr = |a: Attr| -> Result<u32> {
            let v = ctx
                .attribute(a)
                .map_err(|e| driver_error("reading device attributes", e))?;
            Ok(u32::try_from(v).unwrap_or(0))
        };
        Ok(DeviceInfo {
            ordinal: ctx.ordinal(),
            name: ctx
                .name()
                .map_err(|e| driver_error("reading the device name", e))?,
            compute_capability: ctx
                .compute_capability()
                .map_err(|e| driver_error("reading the compute capability", e))?,
            sm_count: attr(Attr::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            max_threads_per_sm: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)?,
            max_shared_per_block_optin: attr(
                Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )?,
            shared_per_sm: attr(Attr::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
            l2_bytes: attr(Attr::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as usize,
            total_memory: ctx
                .total_mem()
                .map_err(|e| driver_error("reading memory size", e))?,
        })
    }

    /// The device's properties.
    pub fn info(&self) -> &DeviceInfo {
        &self.inner.info
    }

    /// The stream all of this backend's work is queued on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.inner.stream
    }

    /// The cudarc context (the device's primary context, which the CUDA runtime shares).
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.inner.ctx
    }

    /// Makes this backend's context current on the calling thread (needed before CUDA runtime
    /// calls, such as CUB's, on a thread that has not used the device yet).
    ///
    /// # Errors
    /// Driver errors.
    pub fn bind_to_thread(&self) -> Result<()> {
        self.inner
            .ctx
            .bind_to_thread()
            .map_err(|e| driver_error("binding the context", e))
    }

    /// Free and total device memory, in bytes.
    ///
    /// # Errors
    /// Driver errors.
    pub fn mem_info(&self) -> Result<(usize, usize)> {
        self.bind_to_thread()?;
        self.inner
            .ctx
            .mem_get_info()
            .map_err(|e| driver_error("reading free memory", e))
    }

    /// A kernel of an embedded module, loading the module on first use on this device.
    ///
    /// # Errors
    /// Driver errors: the module has no code for this device, or no kernel of that name.
    pub fn function(
        &self,
        module: &'static KernelModule,
        name: &'static str,
    ) -> Result<CudaFunction> {
        self.cached_function(module, name, false)
    }

    /// [`CudaBackend::function`], allowed all the dynamic shared memory the device offers a
    /// block beside the kernel's static shared memory (past the 48 KiB a launch gets without
    /// asking). The limit belongs to the kernel, shared by every caller, so it is raised once,
    /// when the kernel is first fetched this way, and never set to one launch's need; setting
    /// it at every launch was a driver call each (8 event calls took 8.5 us of host time on
    /// the H200 machines). A launch asking for more than the device offers fails.
    ///
    /// # Errors
    /// As [`CudaBackend::function`].
    pub fn function_with_dynamic_shared(
        &self,
        module: &'static KernelModule,
        name: &'static str,
    ) -> Result<CudaFunction> {
        self.cached_function(module, name, true)
    }

    /// A kernel from the cache (loaded on first use), with its dynamic shared-memory limit
    /// raised first where `raise_shared` asks and it was not yet.
    fn cached_function(
        &self,
        module: &'static KernelModule,
        name: &'static str,
        raise_shared: bool,
    ) -> Result<CudaFunction> {
        let key = (module as *const KernelModule as usize, name);
        let mut cache = self
            .inner
            .functions
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (f, raised) = match cache.get(&key) {
            Some((f, raised)) if *raised || !raise_shared => return Ok(f.clone()),
            Some((f, raised)) => (f.clone(), *raised),
            None => {
                let f = module::load(&self.inner.ctx, module)?
                    .load_function(name)
                    .map_err(|e| driver_error("looking up a kernel", e))?;
                (f, false)
            }
        };
        if raise_shared && !raised {
            let fixed = f
                .shared_size_bytes()
                .map_err(|e| driver_error("reading a kernel's static shared memory", e))?;
            let offered = i64::from(self.inner.info.max_shared_per_block_optin);
            let allowed = (offered - i64::from(fixed)).max(0);
            f.set_attribute(
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                i32::try_from(allowed).unwrap_or(i32::MAX),
            )
            .map_err(|e| driver_error("allowing dynamic shared memory", e))?;
        }
        cache.insert(key, (f.clone(), raised || raise_shared));
        Ok(f)
    }

    /// A grid-stride launch shape for `n` items: `block` threads per block and as many blocks as
    /// keep every SM full (from the device's SM count and threads per SM), but no more than the
    /// items need. Never an empty grid.
    pub fn grid_stride_config(&self, n: usize, block: u32) -> LaunchConfig {
        let block = block.clamp(32, 1024);
        let per_sm = (self.inner.info.max_threads_per_sm / block).max(1);
        let full = u64::from(self.inner.info.sm_count.max(1)) * u64::from(per_sm);
        let needed = (n as u64).div_ceil(u64::from(block)).max(1);
        LaunchConfig {
            grid_dim: (needed.min(full) as u32, 1, 1),
            block_dim: (block, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// Allocates a buffer from the stream-ordered pool, mapping a failed allocation to
    /// [`Error::OutOfDeviceMemory`].
    fn alloc_tracked<T: Element>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        use cudarc::driver::sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY;
        let bytes = Error::bytes_of::<T>(len)?;
        // SAFETY: the contents are unspecified by the contract of `alloc`; callers write them.
        // At least one element is allocated so a zero-length buffer still has a valid pointer.
        let attempt = || unsafe { self.inner.stream.alloc::<T>(len.max(1)) };
        let cached = self.inner.cache.take::<T>(len.max(1));
        let slice = match cached.map_or_else(attempt, Ok) {
            Err(e) if e.0 == CUDA_ERROR_OUT_OF_MEMORY => {
                // Memory kept for reuse (by every backend's cache on the device, then by the
                // pool, which keeps it from other pools) goes back to the driver once queued
                // work is done, and the allocation is tried again before giving up.
                BufferCache::release_device(self.inner.info.ordinal);
                self.inner
                    .ctx
                    .synchronize()
                    .map_err(|e| driver_error("synchronizing the device", e))?;
                self.inner.pool.trim()?;
                attempt()
            }
            r => r,
        };
        let slice = slice.map_err(|e| match self.mem_info() {
            Ok((free, total)) if e.0 == CUDA_ERROR_OUT_OF_MEMORY => Error::OutOfDeviceMemory {
                requested: bytes,
                free,
                total,
            },
            _ => driver_error("allocating device memory", e),
        })?;
        Ok(DeviceBuffer::new(
            slice,
            len,
            self.inner.memory.clone(),
            self.inner.cache.clone(),
        ))
    }

    /// Launches one of this crate's elementwise kernels over `buf`:
    /// `name(T* out, uint64_t n, extra...)`.
    fn launch_elementwise<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        name: &'static str,
        extra: &[Scalar],
    ) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let f = self.function(&RUNTIME_KERNELS, name)?;
        let cfg = self.grid_stride_config(buf.len(), 256);
        let n = buf.len() as u64;
        let ptr = buf.device_ptr();
        let mut b = self.stream().launch_builder(&f);
        b.arg(&ptr).arg(&n);
        for s in extra {
            match s {
                Scalar::U32(v) => b.arg(v),
                Scalar::U64(v) => b.arg(v),
            };
        }
        // SAFETY: every elementwise kernel of kernels/runtime.cu writes exactly n elements of
        // `out`, which holds n; callers pass the scalars its C signature names, in order.
        unsafe { b.launch(cfg) }
            .map(|_| ())
            .map_err(|e| driver_error("launching a runtime kernel", e))
    }
}

/// A scalar kernel argument of either width.
#[derive(Debug, Clone, Copy)]
enum Scalar {
    U32(u32),
    U64(u64),
}

impl Scalar {
    /// The kernel name and scalar for `T`'s width (the value truncated for 4-byte `T`).
    fn of_width<T: Element>(
        name32: &'static str,
        name64: &'static str,
        v: u64,
    ) -> (&'static str, Scalar) {
        if T::BITS == 32 {
            (name32, Scalar::U32(v as u32))
        } else {
            (name64, Scalar::U64(v))
        }
    }
}

impl CudaBackend {
    /// Element `i` of `view`, read back once the work queued before it is done. The GPU stores
    /// the element into a page-locked word itself and posts it ([`CudaBackend::posted_words`]),
    /// so the read never queues on the copy engines behind bulk copies of other streams (a
    /// streamed join's outputs going back to the host while the next chunk's probe reads its
    /// count).
    ///
    /// # Errors
    /// [`Error::IndexOutOfRange`] when `i` is past the view; driver errors.
    pub fn read_element<T: Element>(&self, view: &CudaView<'_, T>, i: usize) -> Result<T> {
        if i >= view.len() {
            return Err(Error::IndexOutOfRange {
                what: "element read back",
                index: i as u64,
                len: view.len(),
            });
        }
        let name = if T::BITS == 32 {
            "read_element_u32"
        } else {
            "read_element_u64"
        };
        let f = self.function(&RUNTIME_KERNELS, name)?;
        let (src, _guard) = view.device_ptr(self.stream());
        let at = i as u64;
        let words = self.posted_words(1, 1, |stream, words, ticket| {
            let mut b = stream.launch_builder(&f);
            b.arg(&src).arg(&at).arg(&words).arg(&ticket);
            // One thread: a poster's words are all written before its ticket, none after.
            let one = LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (1, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: the kernel reads element `i` of `view` (checked above) and writes the
            // two mapped words posted_words gives room for (the element, then the ticket).
            unsafe { b.launch(one) }
                .map(drop)
                .map_err(|e| driver_error("launching a read-back", e))
        })?;
        Ok(T::from_bits(words[0]))
    }

    /// Words that work queued by `queue` on the backend's stream writes into page-locked host
    /// memory mapped into the device, read as soon as the work posts them, while the rest of
    /// what it queued goes on: a plan's key sample is read while the hash table that the same
    /// launch builds is still being built. `queue` gets the words' device address and a ticket;
    /// its work writes the `len` words, then, for each of `posts` posters (one a block that
    /// writes words), a system-wide fence and the ticket at word `len + poster`
    /// (`joinkit::post_ticket` in `joinkit/device.cuh`). This thread spins on the tickets (no
    /// driver call: a synchronization costs more than the sample takes) and checks now and then
    /// whether the work has ended without posting, which is an error, never a hang. Tickets
    /// grow with every call and this call's ticket words are cleared before its work is
    /// queued, so neither an earlier call's ticket nor its data is taken for this one's post;
    /// where `queue` fails, the stream is drained before the words are given up.
    /// `queue` must not call this method on the same backend (the words are held until read).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no poster or more than [`POSTED_WORDS`] words and
    /// tickets; [`Error::Corrupt`] when the work ended without posting; allocation and
    /// driver errors, and `queue`'s.
    pub fn posted_words(
        &self,
        len: usize,
        posts: usize,
        queue: impl FnOnce(&Arc<CudaStream>, sys::CUdeviceptr, u64) -> Result<()>,
    ) -> Result<Vec<u64>> {
        if posts == 0 || len.saturating_add(posts) > POSTED_WORDS {
            return Err(Error::InvalidArgument(format!(
                "{len} posted words and {posts} tickets: at least one ticket, at most \
                 {POSTED_WORDS} words in all"
            )));
        }
        let mut posted = self
            .inner
            .posted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if posted.is_none() {
            *posted = Some(self.posting()?);
        }
        let Some(p) = posted.as_mut() else {
            return Err(Error::Corrupt("no mapped words".into()));
        };
        p.ticket += 1;
        let ticket = p.ticket;
        // A word that an earlier call posted as data may hold this ticket by chance (a sample's
        // count of equal pairs: 2, read as the next call's ticket, gave a join the sample's row
        // count as its output's), so this call's ticket words start empty: tickets count from
        // 1. Every earlier poster wrote its words before the ticket this thread saw, so no late
        // store of theirs lands here; the fence makes the clearing visible before the launch.
        for i in len..len + posts {
            // SAFETY: inside the mapped allocation (len + posts checked above); no device work
            // writes these words until `queue` launches its own.
            unsafe { std::ptr::write_volatile(p.words.host.add(i).cast_mut(), 0) };
        }
        fence(Ordering::SeqCst);
        if let Err(e) = queue(self.stream(), p.words.device, ticket) {
            // What `queue` launched before it failed may still post: it ends before the words
            // go to the next call (its own error, if any, is the one returned).
            let _ = self.stream().synchronize();
            return Err(e);
        }
        p.done
            .record(self.stream())
            .map_err(|e| driver_error("recording an event", e))?;
        let word = |i: usize| {
            // SAFETY: the mapped allocation holds POSTED_WORDS words (len + posts checked
            // above); the device writes them concurrently, hence volatile reads of whole
            // aligned words.
            unsafe { std::ptr::read_volatile(p.words.host.add(i)) }
        };
        let tickets_posted = || (len..len + posts).all(|i| word(i) == ticket);
        let mut polls = 0u32;
        while !tickets_posted() {
            polls = polls.wrapping_add(1);
            if polls.is_multiple_of(POLLS_PER_QUERY)
                && p.done
                    .try_is_complete()
                    .map_err(|e| driver_error("waiting for posted words", e))?
                && !tickets_posted()
            {
                return Err(Error::Corrupt(
                    "the work queued to post words ended without posting them".into(),
                ));
            }
            std::hint::spin_loop();
        }
        // The words were written before their tickets (the device's system-wide fence): read
        // them after the tickets.
        fence(Ordering::Acquire);
        Ok((0..len).map(word).collect())
    }

    /// What [`CudaBackend::posted_words`] reads: the mapped words and an event.
    fn posting(&self) -> Result<Posted> {
        let done = (self.inner.ctx)
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
            .map_err(|e| driver_error("creating an event", e))?;
        let words = self.mapped_words(POSTED_WORDS)?;
        // SAFETY: the allocation holds POSTED_WORDS words, written by no device work yet;
        // zeroed, no ticket (from 1 up) reads as posted before its work posts it.
        unsafe { std::ptr::write_bytes(words.host.cast_mut(), 0, POSTED_WORDS) };
        Ok(Posted {
            words,
            ticket: 0,
            done,
        })
    }

    /// `n` page-locked host words mapped into the device's address space.
    fn mapped_words(&self, n: usize) -> Result<MappedWords> {
        // SAFETY: plain old data, written by the GPU before any read.
        let pinned = unsafe {
            self.context()
                .alloc_pinned_with_flags::<u64>(n, sys::CU_MEMHOSTALLOC_DEVICEMAP)
        }
        .map_err(|e| driver_error("allocating mapped host words", e))?;
        let host = pinned
            .as_ptr()
            .map_err(|e| driver_error("reading pinned host memory", e))?;
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: `host` is a live mapped pinned allocation of this context.
        unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host as *mut _, 0) }
            .result()
            .map_err(|e| driver_error("mapping host words", e))?;
        Ok(MappedWords {
            _pinned: pinned,
            host,
            device,
        })
    }
}

impl Backend for CudaBackend {
    type Buf<T: Element> = DeviceBuffer<T>;

    fn kind(&self) -> DeviceKind {
        DeviceKind::Cuda(self.inner.info.ordinal)
    }

    fn describe(&self) -> String {
        let i = &self.inner.info;
        format!(
            "cuda:{} {} (sm_{}{}, {} SMs, {:.1} GiB, L2 {} MiB)",
            i.ordinal,
            i.name,
            i.compute_capability.0,
            i.compute_capability.1,
            i.sm_count,
            i.total_memory as f64 / (1u64 << 30) as f64,
            i.l2_bytes >> 20
        )
    }

    fn alloc<T: Element>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        self.alloc_tracked(len)
    }

    fn upload<T: Element>(&self, host: &[T]) -> Result<DeviceBuffer<T>> {
        let mut buf = self.alloc_tracked::<T>(host.len())?;
        if let Some(mut ring) = self.staging_ring(size_of_val(host)) {
            self.upload_staged(&mut ring, host, &mut buf)?;
        } else if !host.is_empty() {
            self.inner
                .stream
                .memcpy_htod(host, &mut buf.view_mut())
                .map_err(|e| driver_error("copying to the device", e))?;
        }
        Ok(buf)
    }

    fn download<T: Element>(&self, buf: &DeviceBuffer<T>) -> Result<Vec<T>> {
        let host = if let Some(mut ring) = self.staging_ring(buf.len() * size_of::<T>()) {
            self.download_staged(&mut ring, buf)?
        } else {
            let mut host = vec![T::default(); buf.len()];
            if !host.is_empty() {
                self.inner
                    .stream
                    .memcpy_dtoh(&buf.view(), &mut host)
                    .map_err(|e| driver_error("copying to the host", e))?;
            }
            host
        };
        self.synchronize()?;
        Ok(host)
    }

    fn fill<T: Element>(&self, buf: &mut DeviceBuffer<T>, value: T) -> Result<()> {
        // cuMemset has no 8-byte form: a kernel fills either width with the value's bits.
        let (name, v) = Scalar::of_width::<T>("fill_u32", "fill_u64", value.to_bits());
        self.launch_elementwise(buf, name, &[v])
    }

    fn iota<T: Element>(&self, buf: &mut DeviceBuffer<T>, start: u64) -> Result<()> {
        let (name, start) = Scalar::of_width::<T>("iota_u32", "iota_u64", start);
        self.launch_elementwise(buf, name, &[start])
    }

    fn unpack_ids(&self, packed: &DeviceBuffer<u32>, low_bits: u32) -> Result<DeviceBuffer<u64>> {
        crate::check_unpack_low_bits(low_bits)?;
        let out = self.alloc_tracked::<u64>(packed.len())?;
        if packed.is_empty() {
            return Ok(out);
        }
        let f = self.function(&RUNTIME_KERNELS, "unpack_ids")?;
        let cfg = self.grid_stride_config(packed.len(), 256);
        let n = packed.len() as u64;
        let (dst, src) = (out.device_ptr(), packed.device_ptr());
        let mut b = self.stream().launch_builder(&f);
        b.arg(&dst).arg(&n).arg(&src).arg(&low_bits);
        // SAFETY: the kernel reads n elements of `packed` and writes n of `out`, both of n.
        unsafe { b.launch(cfg) }
            .map(|_| ())
            .map_err(|e| driver_error("launching unpack_ids", e))?;
        Ok(out)
    }

    fn fill_random<T: Element>(
        &self,
        buf: &mut DeviceBuffer<T>,
        seed: u64,
        mask: u64,
    ) -> Result<()> {
        let (name, mask) = Scalar::of_width::<T>("random_bits_u32", "random_bits_u64", mask);
        self.launch_elementwise(buf, name, &[Scalar::U64(seed), mask])
    }

    fn copy<T: Element>(&self, src: &DeviceBuffer<T>, dst: &mut DeviceBuffer<T>) -> Result<()> {
        Error::check_len("copy source vs destination", src.len(), dst.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.inner
            .stream
            .memcpy_dtod(&src.view(), &mut dst.view_mut())
            .map_err(|e| driver_error("copying on the device", e))
    }

    fn copy_range_into<T: Element>(
        &self,
        src: &DeviceBuffer<T>,
        range: std::ops::Range<usize>,
        dst: &mut DeviceBuffer<T>,
        offset: usize,
    ) -> Result<()> {
        crate::backend::check_range(&range, src.len())?;
        let end = crate::backend::check_fits(range.len(), dst.len(), offset)?;
        if range.is_empty() {
            return Ok(());
        }
        // The driver copies by unified address, so `src` may live on another backend's stream
        // (or device); the caller has ordered its writes before this copy.
        self.inner
            .stream
            .memcpy_dtod(
                &src.view().slice(range),
                &mut dst.view_mut().slice_mut(offset..end),
            )
            .map_err(|e| driver_error("copying on the device", e))
    }

    fn synchronize(&self) -> Result<()> {
        self.inner
            .stream
            .synchronize()
            .map_err(|e| driver_error("synchronizing the stream", e))
    }

    fn timed<R>(&self, work: impl FnOnce() -> Result<R>) -> Result<(R, f64)> {
        // cudarc's default event flags disable timing: ask for timing events.
        let ev = |op| {
            self.inner
                .ctx
                .new_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(|e| driver_error(op, e))
        };
        let (start, end) = (ev("creating an event")?, ev("creating an event")?);
        start
            .record(&self.inner.stream)
            .map_err(|e| driver_error("recording an event", e))?;
        let r = work()?;
        end.record(&self.inner.stream)
            .map_err(|e| driver_error("recording an event", e))?;
        end.synchronize()
            .map_err(|e| driver_error("waiting for an event", e))?;
        let ms = start
            .elapsed_ms(&end)
            .map_err(|e| driver_error("reading an event", e))?;
        Ok((r, f64::from(ms)))
    }

    fn memory(&self) -> Option<MemoryStats> {
        let m = &self.inner.memory;
        Some(MemoryStats {
            current_bytes: m.current.load(Ordering::Relaxed),
            peak_bytes: m.peak.load(Ordering::Relaxed),
        })
    }

    fn reset_peak_memory(&self) {
        let m = &self.inner.memory;
        m.peak
            .store(m.current.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}
