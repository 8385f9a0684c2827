//! The NCCL communicator: one rank per GPU, buffers moved by NCCL on the rank's stream.
//!
//! NCCL is opened at run time (`libnccl.so.2`, its real soname, or `JOINKIT_NCCL_LIB`), so
//! nothing NCCL is needed to build, and a machine without it gets one clear error
//! ([`Error::Communication`] naming what to install) only when a communicator is made. NCCL
//! 2.18 or newer is required (non-blocking communicators, `ncclCommSplit` with a config).
//!
//! Every communicator is **non-blocking** (`ncclConfig_t::blocking = 0`): no NCCL call waits
//! on a peer. Each collective queues its work on the stream, then this rank polls
//! `ncclCommGetAsyncError` and the stream until the work is done, for at most
//! [`CommConfig::timeout`]; past it the communicator is aborted (`ncclCommAbort`, which stops
//! the rank's kernels) and the collective returns [`Error::Timeout`]. So a peer that died or
//! hangs is an error here, never a hang. An aborted communicator answers every later call with
//! [`Error::Communication`].
//!
//! Host collectives ([`Communicator::all_gather`]) go through small device buffers on the
//! communicator's own backend; the buffer collectives run on the stream of the backend they are
//! given, which must be on the communicator's device.

use std::ffi::{CStr, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use joinkit_cuda::cudarc::driver::sys::{CUdeviceptr, CUresult, CUstream, cuStreamQuery};
use joinkit_cuda::{
    Backend, Column, ColumnRef, CudaBackend, DeviceBuffer, Element, Error, Result, each_column,
};

use crate::device::{POISON, alloc_like, column_parts, one_column, table_rows};
use crate::{CommConfig, Communicator, ReceivedColumns, send_offsets, total};

/// Environment variable naming the NCCL library to open (a path or a file name), tried before
/// the usual names.
pub const LIBRARY_ENV: &str = "JOINKIT_NCCL_LIB";

/// The oldest NCCL this communicator runs on, as NCCL codes versions (2.18.0).
pub const MIN_VERSION: i32 = 21800;

/// Library names tried after `JOINKIT_NCCL_LIB`: the soname the NCCL packages install first
/// (a runtime package has no unversioned `libnccl.so`).
const LIBRARY_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

/// What to tell a user whose NCCL is missing or too old.
const INSTALL_HINT: &str = "install NCCL 2.18 or newer (the libnccl2 package, or `pip install \
    nvidia-nccl-cu13` and put its lib folder on LD_LIBRARY_PATH), or set JOINKIT_NCCL_LIB to \
    the library's path";

type RawComm = *mut c_void;
type NcclResult = c_int;

const NCCL_SUCCESS: NcclResult = 0;
const NCCL_REMOTE_ERROR: NcclResult = 6;
const NCCL_IN_PROGRESS: NcclResult = 7;
/// `ncclUint8`: buffers move as bytes, whatever their element type.
const NCCL_UINT8: c_int = 1;
/// `ncclUint64`: host values.
const NCCL_UINT64: c_int = 5;
/// `NCCL_CONFIG_UNDEF_INT`: "use NCCL's default".
const UNDEF_INT: c_int = c_int::MIN;
/// `NCCL_API_MAGIC`.
const CONFIG_MAGIC: c_uint = 0xcafe_beef;

/// `ncclUniqueId`: 128 opaque bytes.
#[repr(C)]
#[derive(Clone, Copy)]
struct RawUniqueId([u8; 128]);

/// `ncclConfig_t` as NCCL 2.17 laid it out. NCCL reads a config by its `size` and `version`
/// fields and gives the fields added since their defaults, so this older layout stays valid.
#[repr(C)]
struct RawConfig {
    size: usize,
    magic: c_uint,
    version: c_uint,
    blocking: c_int,
    cga_cluster_size: c_int,
    min_ctas: c_int,
    max_ctas: c_int,
    net_name: *const c_char,
    split_share: c_int,
}

impl RawConfig {
    /// A non-blocking communicator, everything else NCCL's default.
    fn non_blocking() -> Self {
        Self {
            size: std::mem::size_of::<Self>(),
            magic: CONFIG_MAGIC,
            version: 21700,
            blocking: 0,
            cga_cluster_size: UNDEF_INT,
            min_ctas: UNDEF_INT,
            max_ctas: UNDEF_INT,
            net_name: std::ptr::null(),
            split_share: UNDEF_INT,
        }
    }
}

/// The NCCL entry points used here, resolved once.
struct Nccl {
    /// Keeps the symbols below valid.
    _library: libloading::Library,
    version: i32,
    get_unique_id: unsafe extern "C" fn(*mut RawUniqueId) -> NcclResult,
    init_rank_config:
        unsafe extern "C" fn(*mut RawComm, c_int, RawUniqueId, c_int, *mut RawConfig) -> NcclResult,
    split: unsafe extern "C" fn(RawComm, c_int, c_int, *mut RawComm, *mut RawConfig) -> NcclResult,
    destroy: unsafe extern "C" fn(RawComm) -> NcclResult,
    abort: unsafe extern "C" fn(RawComm) -> NcclResult,
    async_error: unsafe extern "C" fn(RawComm, *mut NcclResult) -> NcclResult,
    count: unsafe extern "C" fn(RawComm, *mut c_int) -> NcclResult,
    user_rank: unsafe extern "C" fn(RawComm, *mut c_int) -> NcclResult,
    error_string: unsafe extern "C" fn(NcclResult) -> *const c_char,
    last_error: unsafe extern "C" fn(RawComm) -> *const c_char,
    group_start: unsafe extern "C" fn() -> NcclResult,
    group_end: unsafe extern "C" fn() -> NcclResult,
    send: unsafe extern "C" fn(*const c_void, usize, c_int, c_int, RawComm, CUstream) -> NcclResult,
    recv: unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, RawComm, CUstream) -> NcclResult,
    all_gather: unsafe extern "C" fn(
        *const c_void,
        *mut c_void,
        usize,
        c_int,
        RawComm,
        CUstream,
    ) -> NcclResult,
}

/// The library names to try, `JOINKIT_NCCL_LIB` first.
fn candidates() -> Vec<String> {
    std::env::var(LIBRARY_ENV)
        .ok()
        .filter(|v| !v.is_empty())
        .into_iter()
        .chain(LIBRARY_NAMES.iter().map(|s| (*s).to_string()))
        .collect()
}

impl Nccl {
    /// Opens the first of `names` that loads and checks its version.
    fn open(names: &[String]) -> std::result::Result<Self, String> {
        let mut tried = Vec::new();
        for name in names {
            // SAFETY: loading NCCL runs its initializers, which only set up its own state.
            match unsafe { libloading::Library::new(name) } {
                Ok(library) => return Self::resolve(library, name),
                Err(e) => tried.push(format!("{name}: {e}")),
            }
        }
        Err(format!(
            "NCCL could not be loaded ({}); {INSTALL_HINT}",
            tried.join("; ")
        ))
    }

    fn resolve(library: libloading::Library, name: &str) -> std::result::Result<Self, String> {
        macro_rules! symbol {
            ($sym:literal) => {
                // SAFETY: the symbol is NCCL's, and the field's type is its C signature
                // (nccl.h, stable since 2.18).
                *unsafe { library.get(concat!($sym, "\0").as_bytes()) }
                    .map_err(|e| format!("{name} has no {}: {e}; {INSTALL_HINT}", $sym))?
            };
        }
        let get_version: unsafe extern "C" fn(*mut c_int) -> NcclResult = symbol!("ncclGetVersion");
        let mut version = 0;
        // SAFETY: the out pointer is valid for the call.
        let got = unsafe { get_version(&mut version) };
        if got != NCCL_SUCCESS {
            return Err(format!("ncclGetVersion of {name} failed ({got})"));
        }
        if version < MIN_VERSION {
            return Err(format!(
                "{name} is NCCL {}, too old: joinkit needs 2.18 or newer; {INSTALL_HINT}",
                version_text(version)
            ));
        }
        Ok(Self {
            version,
            get_unique_id: symbol!("ncclGetUniqueId"),
            init_rank_config: symbol!("ncclCommInitRankConfig"),
            split: symbol!("ncclCommSplit"),
            destroy: symbol!("ncclCommDestroy"),
            abort: symbol!("ncclCommAbort"),
            async_error: symbol!("ncclCommGetAsyncError"),
            count: symbol!("ncclCommCount"),
            user_rank: symbol!("ncclCommUserRank"),
            error_string: symbol!("ncclGetErrorString"),
            last_error: symbol!("ncclGetLastError"),
            group_start: symbol!("ncclGroupStart"),
            group_end: symbol!("ncclGroupEnd"),
            send: symbol!("ncclSend"),
            recv: symbol!("ncclRecv"),
            all_gather: symbol!("ncclAllGather"),
            _library: library,
        })
    }

    /// NCCL's message for `code`, with the communicator's last error where there is one.
    fn describe(&self, code: NcclResult, comm: RawComm) -> String {
        // SAFETY: NCCL returns static NUL-terminated strings (or null).
        let text = |p: *const c_char| unsafe { (!p.is_null()).then(|| CStr::from_ptr(p)) };
        // SAFETY: the function takes any result code.
        let mut message = text(unsafe { (self.error_string)(code) }).map_or_else(
            || format!("NCCL error {code}"),
            |s| s.to_string_lossy().into_owned(),
        );
        // SAFETY: `comm` is null or a live communicator.
        if let Some(last) = text(unsafe { (self.last_error)(comm) }) {
            let last = last.to_string_lossy();
            if !last.is_empty() {
                message = format!("{message}: {last}");
            }
        }
        if code == NCCL_REMOTE_ERROR {
            message.push_str(" (another rank failed)");
        }
        message
    }

    /// `ncclGroupStart` (`true`) or `ncclGroupEnd`.
    fn group(&self, start: bool) -> NcclResult {
        // SAFETY: the group calls take no arguments.
        unsafe {
            if start {
                (self.group_start)()
            } else {
                (self.group_end)()
            }
        }
    }

    /// `Ok` for success and for "in progress" (non-blocking calls), the error otherwise.
    fn check(&self, op: &'static str, code: NcclResult, comm: RawComm) -> Result<()> {
        match code {
            NCCL_SUCCESS | NCCL_IN_PROGRESS => Ok(()),
            _ => Err(Error::Communication {
                op,
                message: self.describe(code, comm),
            }),
        }
    }
}

/// `major.minor.patch` of an NCCL version code.
fn version_text(code: i32) -> String {
    format!("{}.{}.{}", code / 10000, code / 100 % 100, code % 100)
}

/// NCCL, opened on first use.
fn library() -> Result<&'static Nccl> {
    static NCCL: OnceLock<std::result::Result<Nccl, String>> = OnceLock::new();
    NCCL.get_or_init(|| Nccl::open(&candidates()))
        .as_ref()
        .map_err(|message| Error::Communication {
            op: "loading NCCL",
            message: message.clone(),
        })
}

/// The NCCL version loaded, as `(major, minor, patch)`.
///
/// # Errors
/// [`Error::Communication`] when NCCL is missing or older than 2.18 (the message names what to
/// install).
pub fn version() -> Result<(u32, u32, u32)> {
    let v = library()?.version.unsigned_abs();
    Ok((v / 10000, v / 100 % 100, v % 100))
}

/// The token every rank of a new communicator must hold the same copy of (`ncclUniqueId`).
///
/// Made once (by rank 0, or by every rank alike when `NCCL_COMM_ID=host:port` is set: NCCL
/// then derives it from that address and rank 0 runs the bootstrap root there) and carried to
/// the others by whatever means the program has ([`UniqueId::to_bytes`]).
#[derive(Clone, Copy)]
pub struct UniqueId(RawUniqueId);

impl std::fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UniqueId(..)")
    }
}

impl UniqueId {
    /// A new token (`ncclGetUniqueId`).
    ///
    /// # Errors
    /// [`Error::Communication`]: NCCL missing, no network interface, a bad `NCCL_COMM_ID`.
    pub fn new() -> Result<Self> {
        let nccl = library()?;
        let mut id = RawUniqueId([0; 128]);
        // SAFETY: the out pointer is valid for the call.
        let code = unsafe { (nccl.get_unique_id)(&mut id) };
        nccl.check("ncclGetUniqueId", code, std::ptr::null_mut())?;
        Ok(Self(id))
    }

    /// The token's bytes, to send to the other ranks.
    pub fn to_bytes(&self) -> [u8; 128] {
        self.0.0
    }

    /// A token received from another rank.
    pub fn from_bytes(bytes: [u8; 128]) -> Self {
        Self(RawUniqueId(bytes))
    }
}

/// Sleeps a little longer each round while a poll finds nothing done: a few microseconds at
/// first, so short collectives return promptly, at most 100 µs.
fn back_off(round: &mut u32) {
    *round = round.saturating_add(1);
    if *round < 64 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(u64::from((*round - 63).min(100))));
    }
}

/// One NCCL rank: a [`Communicator`] over [`CudaBackend`] buffers.
///
/// Made by [`NcclComm::init_rank`] (one rank, for a process per GPU), [`NcclComm::init_all`]
/// (every GPU of this process) or [`crate::launch::Launch::nccl_comm`] (from a launcher's
/// environment). Move each to the thread that drives its rank: the collectives of different
/// ranks must run concurrently. Dropping it frees the NCCL communicator.
pub struct NcclComm {
    nccl: &'static Nccl,
    comm: RawComm,
    backend: CudaBackend,
    rank: usize,
    size: usize,
    config: CommConfig,
    /// Set once the communicator has been aborted (after a failure or a time-out): `comm` is
    /// freed and must not be used again.
    aborted: std::cell::Cell<bool>,
    link_rates: crate::LinkRates,
}

// SAFETY: an NCCL communicator may be used from any thread, one at a time; `NcclComm` is not
// `Sync`, so only its one owner calls it.
unsafe impl Send for NcclComm {}

impl std::fmt::Debug for NcclComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NcclComm")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("device", &self.backend.info().ordinal)
            .field("aborted", &self.aborted.get())
            .finish()
    }
}

/// The checks of a new world's shape.
fn check_world(size: usize, rank: usize) -> Result<c_int> {
    if size == 0 || rank >= size {
        return Err(Error::InvalidArgument(format!(
            "rank {rank} of a world of {size}"
        )));
    }
    c_int::try_from(size).map_err(|_| Error::InvalidArgument(format!("a world of {size} ranks")))
}

/// One grouped exchange: for the send and the receive buffer, its address, then each peer's
/// start row and row count.
struct Exchange<'a> {
    send: (CUdeviceptr, &'a [usize], &'a [usize]),
    recv: (CUdeviceptr, &'a [usize], &'a [usize]),
    element_bytes: usize,
}

impl Exchange<'_> {
    /// Each peer's send, then its receive; none of no rows.
    fn transfers(&self) -> Vec<Transfer> {
        let mut out = Vec::new();
        for peer in 0..self.send.1.len() {
            for (send, (base, at, rows)) in [(true, self.send), (false, self.recv)] {
                out.push(Transfer {
                    send,
                    peer,
                    ptr: base + (at[peer] * self.element_bytes) as u64,
                    bytes: rows[peer] * self.element_bytes,
                });
            }
        }
        out.retain(|t| t.bytes > 0);
        out
    }
}

/// One `ncclSend` (`send`) or `ncclRecv` of a grouped exchange. Several with one peer are
/// matched in the order they are queued, on both sides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Transfer {
    send: bool,
    peer: usize,
    ptr: CUdeviceptr,
    bytes: usize,
}

/// Rows a large transfer of the any-order collectives starts on: 16 rows are a multiple of 16
/// bytes at every element size. NCCL moves segments that are not 16-byte aligned at about half
/// the rate (4 H200s, 2 GiB a rank: 175 against 300 GB/s a rank, 8-byte misaligned against
/// aligned), and the segments of a shuffle start wherever the previous rank's rows end.
const ALIGN_ROWS: usize = 16;

/// One rank's rows for one peer, starting at row `start` of its buffer, cut so that the long
/// middle (`body`, a multiple of [`ALIGN_ROWS`]) starts on an aligned row: `head` rows before
/// it, `tail` after. Both sides compute it from `start % ALIGN_ROWS` and the count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cut {
    head: usize,
    body: usize,
    tail: usize,
}

impl Cut {
    fn of(start: usize, rows: usize) -> Self {
        let head = ((ALIGN_ROWS - start % ALIGN_ROWS) % ALIGN_ROWS).min(rows);
        let body = (rows - head) / ALIGN_ROWS * ALIGN_ROWS;
        Cut {
            head,
            body,
            tail: rows - head - body,
        }
    }
}

/// The transfers of an any-order exchange of `element_bytes`-byte rows: to each peer `p` the
/// rows `sent[p]` (start row, cut), from each the rows cut as `got[p]`. The receive buffer
/// holds every peer's body first, in rank order (so each starts on an aligned row), then each
/// peer's head and tail; the bodies move first, aligned on both sides.
fn any_order_transfers(
    (send_base, sent): (CUdeviceptr, &[(usize, Cut)]),
    (recv_base, got): (CUdeviceptr, &[Cut]),
    element_bytes: usize,
) -> Vec<Transfer> {
    let at = |base: CUdeviceptr, row: usize| base + (row * element_bytes) as u64;
    let mut body_at = 0;
    let mut rest_at: usize = got.iter().map(|c| c.body).sum();
    let mut out = Vec::new();
    for (peer, (&(start, s), r)) in sent.iter().zip(got).enumerate() {
        let mut push = |send: bool, ptr: CUdeviceptr, rows: usize| {
            out.push(Transfer {
                send,
                peer,
                ptr,
                bytes: rows * element_bytes,
            });
        };
        push(true, at(send_base, start + s.head), s.body);
        push(true, at(send_base, start), s.head);
        push(true, at(send_base, start + s.head + s.body), s.tail);
        push(false, at(recv_base, body_at), r.body);
        push(false, at(recv_base, rest_at), r.head);
        push(false, at(recv_base, rest_at + r.head), r.tail);
        body_at += r.body;
        rest_at += r.head + r.tail;
    }
    out.retain(|t| t.bytes > 0);
    out
}

impl NcclComm {
    /// Rank `rank` of a world of `size`, on `backend`'s device; every rank calls it with the
    /// same `id` and returns once all have joined (or the time limit passes).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a rank outside the world; [`Error::Communication`] (NCCL
    /// missing or failing, e.g. two ranks on one GPU); [`Error::Timeout`] when peers do not
    /// join in time.
    pub fn init_rank(
        backend: &CudaBackend,
        size: usize,
        rank: usize,
        id: &UniqueId,
        config: CommConfig,
    ) -> Result<Self> {
        let nranks = check_world(size, rank)?;
        let nccl = library()?;
        backend.bind_to_thread()?;
        let mut comm: RawComm = std::ptr::null_mut();
        let mut raw = RawConfig::non_blocking();
        // SAFETY: the out pointers are valid for the call; NCCL reads the device from the
        // context just made current.
        let code =
            unsafe { (nccl.init_rank_config)(&mut comm, nranks, id.0, rank as c_int, &mut raw) };
        nccl.check("ncclCommInitRankConfig", code, comm)?;
        let made = Self::adopt(nccl, comm, backend, rank, size, config);
        made.settle("ncclCommInitRankConfig", None)?;
        Ok(made)
    }

    /// One rank per backend (rank = index), all in this process: each backend on its own GPU
    /// (NCCL takes one rank per GPU). Move each communicator to a thread of its own.
    ///
    /// # Errors
    /// As [`NcclComm::init_rank`]; [`Error::InvalidArgument`] for no backends.
    pub fn init_all(backends: &[CudaBackend], config: CommConfig) -> Result<Vec<Self>> {
        let nranks = check_world(backends.len(), 0)?;
        let nccl = library()?;
        let id = UniqueId::new()?;
        let mut raws = vec![std::ptr::null_mut::<c_void>(); backends.len()];
        let mut raw_config = RawConfig::non_blocking();
        // Ranks of one process join in one group: NCCL waits for all of them at its end.
        nccl.check("ncclGroupStart", nccl.group(true), std::ptr::null_mut())?;
        let mut issued = Ok(());
        for (rank, (backend, comm)) in backends.iter().zip(raws.iter_mut()).enumerate() {
            issued = backend.bind_to_thread().and_then(|()| {
                // SAFETY: the out pointers are valid for the call; the device is the current
                // context's.
                let code = unsafe {
                    (nccl.init_rank_config)(comm, nranks, id.0, rank as c_int, &mut raw_config)
                };
                nccl.check("ncclCommInitRankConfig", code, *comm)
            });
            if issued.is_err() {
                break;
            }
        }
        let ended = nccl.check("ncclGroupEnd", nccl.group(false), std::ptr::null_mut());
        let comms: Vec<Self> = raws
            .into_iter()
            .zip(backends)
            .enumerate()
            .filter(|(_, (c, _))| !c.is_null())
            .map(|(rank, (c, b))| Self::adopt(nccl, c, b, rank, backends.len(), config))
            .collect();
        // A failed or timed-out join aborts every rank's communicator: the others' joins
        // could never finish, and freeing one that is still joining waits for it.
        let joined = issued.and(ended).and_then(|()| {
            comms
                .iter()
                .try_for_each(|c| c.settle("ncclCommInitRankConfig", None))
        });
        if let Err(e) = joined {
            comms.iter().for_each(Self::abort);
            return Err(e);
        }
        Ok(comms)
    }

    fn adopt(
        nccl: &'static Nccl,
        comm: RawComm,
        backend: &CudaBackend,
        rank: usize,
        size: usize,
        config: CommConfig,
    ) -> Self {
        Self {
            nccl,
            comm,
            backend: backend.clone(),
            rank,
            size,
            config,
            aborted: std::cell::Cell::new(false),
            link_rates: crate::LinkRates::default(),
        }
    }

    /// The backend this rank's host collectives run on (the one it was made with).
    pub fn backend(&self) -> &CudaBackend {
        &self.backend
    }

    /// The communicator, unless it was aborted.
    fn live(&self, op: &'static str) -> Result<RawComm> {
        if self.aborted.get() {
            Err(Error::Communication {
                op,
                message: "the communicator was aborted after an earlier failure or time-out".into(),
            })
        } else {
            Ok(self.comm)
        }
    }

    fn abort(&self) {
        if !self.aborted.replace(true) {
            // SAFETY: the communicator is live (not aborted before); it is not used again.
            unsafe { (self.nccl.abort)(self.comm) };
        }
    }

    /// Waits until the communicator has finished its queued NCCL calls and, with a stream,
    /// until the stream is idle; aborts it on an error or past the time limit.
    fn settle(&self, op: &'static str, stream: Option<CUstream>) -> Result<()> {
        let comm = self.live(op)?;
        let deadline = Instant::now() + self.config.timeout;
        let mut round = 0;
        loop {
            let mut state = NCCL_SUCCESS;
            // SAFETY: the communicator is live; the out pointer is valid.
            let code = unsafe { (self.nccl.async_error)(comm, &mut state) };
            let status = if code == NCCL_SUCCESS { state } else { code };
            match status {
                NCCL_SUCCESS => match stream {
                    None => return Ok(()),
                    // SAFETY: the stream belongs to a live backend.
                    Some(s) => match unsafe { cuStreamQuery(s) } {
                        CUresult::CUDA_SUCCESS => return Ok(()),
                        CUresult::CUDA_ERROR_NOT_READY => {}
                        e => {
                            self.abort();
                            return Err(Error::Driver {
                                op,
                                message: format!("{e:?}"),
                            });
                        }
                    },
                },
                NCCL_IN_PROGRESS => {}
                failed => {
                    let message = self.nccl.describe(failed, comm);
                    self.abort();
                    return Err(Error::Communication { op, message });
                }
            }
            if Instant::now() >= deadline {
                self.abort();
                return Err(Error::Timeout {
                    op,
                    millis: u64::try_from(self.config.timeout.as_millis()).unwrap_or(u64::MAX),
                });
            }
            back_off(&mut round);
        }
    }

    /// The device of `backend` must be this communicator's.
    fn check_backend(&self, backend: &CudaBackend) -> Result<()> {
        let (mine, theirs) = (self.backend.info().ordinal, backend.info().ordinal);
        if mine == theirs {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "a buffer collective on cuda:{theirs} for a communicator on cuda:{mine}"
            )))
        }
    }

    /// Queues one grouped set of sends and receives on `backend`'s stream and waits for it.
    fn exchange(&self, op: &'static str, backend: &CudaBackend, ex: &Exchange<'_>) -> Result<()> {
        self.transfer(op, backend, &ex.transfers())
    }

    /// Queues `transfers` as one group on `backend`'s stream, in their order, and waits for it.
    fn transfer(
        &self,
        op: &'static str,
        backend: &CudaBackend,
        transfers: &[Transfer],
    ) -> Result<()> {
        let comm = self.live(op)?;
        backend.bind_to_thread()?;
        let stream = backend.stream().cu_stream();
        let nccl = self.nccl;
        nccl.check(op, nccl.group(true), comm)?;
        let mut issued = Ok(());
        for t in transfers {
            issued = issued.and(self.p2p(op, t.send, t.ptr, t.bytes, t.peer, stream));
        }
        // The group opened above is closed whatever was issued.
        let ended = nccl.check(op, nccl.group(false), comm);
        if let Err(e) = issued.and(ended) {
            self.abort();
            return Err(e);
        }
        self.settle(op, Some(stream))
    }

    /// Queues one `ncclSend` (`send`) or `ncclRecv` of `bytes` bytes at `ptr` with `peer`, in
    /// the group the caller has open.
    fn p2p(
        &self,
        op: &'static str,
        send: bool,
        ptr: CUdeviceptr,
        bytes: usize,
        peer: usize,
        stream: CUstream,
    ) -> Result<()> {
        let (nccl, peer) = (self.nccl, peer as c_int);
        // SAFETY: the caller's offsets keep `ptr..ptr + bytes` inside a buffer sized from the
        // exchanged counts, which outlives the wait that follows the group; the communicator
        // is live (checked by the caller).
        let code = unsafe {
            if send {
                (nccl.send)(
                    ptr as *const c_void,
                    bytes,
                    NCCL_UINT8,
                    peer,
                    self.comm,
                    stream,
                )
            } else {
                (nccl.recv)(
                    ptr as *mut c_void,
                    bytes,
                    NCCL_UINT8,
                    peer,
                    self.comm,
                    stream,
                )
            }
        };
        nccl.check(op, code, self.comm)
    }

    /// Moves `send`'s rows, cut for each peer as `sent` says, into `recv`, cut for each peer as
    /// `got` says ([`any_order_transfers`]), in one group.
    fn move_cut<T: Element>(
        &self,
        op: &'static str,
        backend: &CudaBackend,
        (send, sent): (&DeviceBuffer<T>, &[(usize, Cut)]),
        (recv, got): (&DeviceBuffer<T>, &[Cut]),
    ) -> Result<()> {
        let transfers = any_order_transfers(
            (send.device_ptr(), sent),
            (recv.device_ptr(), got),
            std::mem::size_of::<T>(),
        );
        self.transfer(op, backend, &transfers)
    }

    /// An all-to-all's count exchange and receive buffer: checks the input, sends every peer
    /// (rows, element size, start row modulo [`ALIGN_ROWS`]) — a rank with bad input sends
    /// [`POISON`], so every peer fails with it instead of waiting on data that never comes —
    /// and allocates the receive buffer, agreed by every rank (none sends into nothing).
    /// Returns this rank's send offsets, the receive buffer, the rows from each peer and where
    /// each peer's rows for this rank start in its buffer (modulo [`ALIGN_ROWS`]).
    #[allow(clippy::type_complexity)]
    fn prepare_all_to_all<T: Element>(
        &self,
        op: &'static str,
        backend: &CudaBackend,
        send: &DeviceBuffer<T>,
        send_counts: &[usize],
    ) -> Result<(Vec<usize>, DeviceBuffer<T>, Vec<usize>, Vec<usize>)> {
        let (offsets_sent, recv_counts, starts) = self.exchange_counts(
            op,
            backend,
            (send.len(), std::mem::size_of::<T>() as u64),
            send_counts,
            Ok(()),
        )?;
        let recv = self.agree(op, total(&recv_counts).and_then(|n| backend.alloc::<T>(n)))?;
        Ok((offsets_sent, recv, recv_counts, starts))
    }

    /// The count exchange of [`Self::prepare_all_to_all`] for `rows` rows of `row_bytes` bytes
    /// (the same on every rank: an element size, or a table's row width), after the caller's
    /// own check of its input (`checked`): this rank's send offsets, the rows from each peer
    /// and where each peer's rows start (modulo [`ALIGN_ROWS`]).
    #[allow(clippy::type_complexity)]
    fn exchange_counts(
        &self,
        op: &'static str,
        backend: &CudaBackend,
        (rows, row_bytes): (usize, u64),
        send_counts: &[usize],
        checked: Result<()>,
    ) -> Result<(Vec<usize>, Vec<usize>, Vec<usize>)> {
        const WORDS: usize = 3;
        let local = checked
            .and_then(|()| self.check_backend(backend))
            .and_then(|()| send_offsets(self.size, send_counts, rows));
        let header: Vec<u64> = (0..self.size)
            .flat_map(|p| match &local {
                Ok(at) => [
                    send_counts[p] as u64,
                    row_bytes,
                    (at[p] % ALIGN_ROWS) as u64,
                ],
                Err(_) => [POISON, row_bytes, 0],
            })
            .collect();
        let per_peer = vec![WORDS; self.size];
        let at: Vec<usize> = (0..self.size).map(|p| WORDS * p).collect();
        let header_send = self.backend.upload(&header)?;
        let header_recv = self.backend.alloc::<u64>(WORDS * self.size)?;
        self.exchange(
            op,
            &self.backend,
            &Exchange {
                send: (header_send.device_ptr(), &at, &per_peer),
                recv: (header_recv.device_ptr(), &at, &per_peer),
                element_bytes: 8,
            },
        )?;
        let got = self.backend.download(&header_recv)?;
        let offsets_sent = local?;
        let recv_counts = received_counts(op, &got, WORDS, row_bytes)?;
        let starts = got
            .chunks(WORDS)
            .map(|w| w[2] as usize % ALIGN_ROWS)
            .collect();
        Ok((offsets_sent, recv_counts, starts))
    }

    /// An all-gather's length exchange and receive buffer (as [`Self::prepare_all_to_all`]).
    fn prepare_all_gather<T: Element>(
        &self,
        op: &'static str,
        backend: &CudaBackend,
        send: &DeviceBuffer<T>,
    ) -> Result<(DeviceBuffer<T>, Vec<usize>)> {
        let local = self.check_backend(backend);
        let element = std::mem::size_of::<T>() as u64;
        let mine = if local.is_ok() {
            send.len() as u64
        } else {
            POISON
        };
        let got = self.all_gather(&[mine, element])?;
        local?;
        let counts = received_counts(op, &got, 2, element)?;
        let recv = self.agree(op, total(&counts).and_then(|n| backend.alloc::<T>(n)))?;
        Ok((recv, counts))
    }

    /// `ncclAllGather` of `values.len()` host values per rank (the same on every rank).
    fn all_gather_fixed(&self, op: &'static str, values: &[u64]) -> Result<Vec<u64>> {
        let comm = self.live(op)?;
        let b = &self.backend;
        let send = b.upload(values)?;
        let recv = b.alloc::<u64>(values.len() * self.size)?;
        b.bind_to_thread()?;
        let stream = b.stream().cu_stream();
        // SAFETY: both buffers hold the counts given and live past the wait below.
        let code = unsafe {
            (self.nccl.all_gather)(
                send.device_ptr() as *const c_void,
                recv.device_ptr() as *mut c_void,
                values.len(),
                NCCL_UINT64,
                comm,
                stream,
            )
        };
        if let Err(e) = self.nccl.check(op, code, comm) {
            self.abort();
            return Err(e);
        }
        self.settle(op, Some(stream))?;
        b.download(&recv)
    }
}

/// Values per rank an all-gather of host values carries in its first (and usually only) round:
/// a length, then the values when fewer than this. Every round costs a transport round trip
/// (a third of a millisecond over sockets) and these bytes are few: room for the distributed
/// join's agreements (the heavy keys' 35 words; a compressed shuffle's plan, 3 + 2 a payload
/// column, up to 18 payload columns).
const INLINE_SLOT: usize = 40;

/// The row counts of exchanged headers of `words` words each, one per rank, (rows, element
/// size, ...): a peer that sent [`POISON`] failed, element sizes must be this rank's. A count
/// past `usize` saturates, so `total` reports it.
fn received_counts(
    op: &'static str,
    headers: &[u64],
    words: usize,
    element: u64,
) -> Result<Vec<usize>> {
    if let Some(rank) = headers.chunks(words).position(|c| c[0] == POISON) {
        return Err(Error::PeerFailed { rank, op });
    }
    if headers.chunks(words).any(|c| c[1] != element) {
        return Err(Error::RanksDisagree(format!(
            "{op}: element sizes {:?} bytes",
            headers.chunks(words).map(|c| c[1]).collect::<Vec<_>>()
        )));
    }
    Ok(headers
        .chunks(words)
        .map(|c| usize::try_from(c[0]).unwrap_or(usize::MAX))
        .collect())
}

/// Start offsets of `counts` (no overflow: they were summed by `total` first).
fn offsets(counts: &[usize]) -> Vec<usize> {
    counts
        .iter()
        .scan(0, |at, &c| {
            let start = *at;
            *at += c;
            Some(start)
        })
        .collect()
}

impl Communicator for NcclComm {
    type Backend = CudaBackend;

    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn config(&self) -> CommConfig {
        self.config
    }

    fn link_rates(&self) -> &crate::LinkRates {
        &self.link_rates
    }

    fn all_gather(&self, values: &[u64]) -> Result<Vec<u64>> {
        // Round one carries every rank's length (and short values inline), so ranks that
        // disagree on the length all see it; a second round only for long values.
        let mut slot = [0u64; INLINE_SLOT];
        slot[0] = values.len() as u64;
        let inline = values.len() < INLINE_SLOT;
        if inline {
            slot[1..=values.len()].copy_from_slice(values);
        }
        let first = self.all_gather_fixed("all_gather", &slot)?;
        let lengths: Vec<u64> = first.chunks(INLINE_SLOT).map(|c| c[0]).collect();
        if lengths.iter().any(|&l| l != values.len() as u64) {
            return Err(Error::RanksDisagree(format!(
                "all_gather: rank lengths {lengths:?}"
            )));
        }
        if inline {
            return Ok(first
                .chunks(INLINE_SLOT)
                .flat_map(|c| c[1..=values.len()].iter().copied())
                .collect());
        }
        self.all_gather_fixed("all_gather", values)
    }

    fn all_to_all_v<T: Element>(
        &self,
        backend: &CudaBackend,
        send: &DeviceBuffer<T>,
        send_counts: &[usize],
    ) -> Result<(DeviceBuffer<T>, Vec<usize>)> {
        const OP: &str = "all_to_all_v";
        let (offsets_sent, recv, recv_counts, _) =
            self.prepare_all_to_all(OP, backend, send, send_counts)?;
        self.exchange(
            OP,
            backend,
            &Exchange {
                send: (send.device_ptr(), &offsets_sent[..self.size], send_counts),
                recv: (recv.device_ptr(), &offsets(&recv_counts), &recv_counts),
                element_bytes: std::mem::size_of::<T>(),
            },
        )?;
        Ok((recv, recv_counts))
    }

    fn all_gather_v<T: Element>(
        &self,
        backend: &CudaBackend,
        send: &DeviceBuffer<T>,
    ) -> Result<(DeviceBuffer<T>, Vec<usize>)> {
        const OP: &str = "all_gather_v";
        let (recv, counts) = self.prepare_all_gather(OP, backend, send)?;
        let to_every = vec![send.len(); self.size];
        self.exchange(
            OP,
            backend,
            &Exchange {
                send: (send.device_ptr(), &vec![0; self.size], &to_every),
                recv: (recv.device_ptr(), &offsets(&counts), &counts),
                element_bytes: std::mem::size_of::<T>(),
            },
        )?;
        Ok((recv, counts))
    }

    fn all_to_all_v_any_order<T: Element>(
        &self,
        backend: &CudaBackend,
        send: &DeviceBuffer<T>,
        send_counts: &[usize],
    ) -> Result<(DeviceBuffer<T>, Vec<usize>)> {
        // A table of one column.
        let moved = self.all_to_all_v_columns(backend, &[T::column_ref(send)], send_counts)?;
        one_column("all_to_all_v", moved)
    }

    fn any_order_is_rank_order(&self) -> bool {
        false
    }

    fn all_to_all_v_columns(
        &self,
        backend: &CudaBackend,
        columns: &[ColumnRef<'_, CudaBackend>],
        send_counts: &[usize],
    ) -> Result<ReceivedColumns<CudaBackend>> {
        const OP: &str = "all_to_all_v_columns";
        let parts = column_parts(columns);
        let (rows, checked) = match table_rows(&parts) {
            Ok(rows) => (rows, Ok(())),
            Err(e) => (0, Err(e)),
        };
        let row_bytes = parts.iter().map(|p| p.2 as u64).sum();
        let (offsets_sent, recv_counts, starts) =
            self.exchange_counts(OP, backend, (rows, row_bytes), send_counts, checked)?;
        let received: Vec<Column<CudaBackend>> = self.agree(
            OP,
            total(&recv_counts).and_then(|n| alloc_like(backend, columns, n)),
        )?;
        let sent: Vec<(usize, Cut)> = (0..self.size)
            .map(|p| (offsets_sent[p], Cut::of(offsets_sent[p], send_counts[p])))
            .collect();
        let got: Vec<Cut> = (starts.iter().zip(&recv_counts))
            .map(|(&start, &rows)| Cut::of(start, rows))
            .collect();
        // Every column's transfers in one group: with each peer, column after column, alike
        // on both sides.
        let transfers: Vec<Transfer> = parts
            .iter()
            .zip(&received)
            .flat_map(|(&(send, _, width), recv)| {
                let recv = each_column!(recv, c => c.device_ptr());
                any_order_transfers((send, &sent), (recv, &got), width)
            })
            .collect();
        self.transfer(OP, backend, &transfers)?;
        Ok((received, recv_counts))
    }

    fn all_gather_v_any_order<T: Element>(
        &self,
        backend: &CudaBackend,
        send: &DeviceBuffer<T>,
    ) -> Result<(DeviceBuffer<T>, Vec<usize>)> {
        const OP: &str = "all_gather_v";
        let (recv, counts) = self.prepare_all_gather(OP, backend, send)?;
        // Every rank sends its whole buffer, from row 0.
        let sent = vec![(0, Cut::of(0, send.len())); self.size];
        let got: Vec<Cut> = counts.iter().map(|&rows| Cut::of(0, rows)).collect();
        self.move_cut(OP, backend, (send, &sent), (&recv, &got))?;
        Ok((recv, counts))
    }

    fn split(&self, color: usize, key: usize) -> Result<Self> {
        const OP: &str = "ncclCommSplit";
        let args = match (c_int::try_from(color), c_int::try_from(key)) {
            (Ok(c), Ok(k)) => Ok((c, k)),
            _ => Err(Error::InvalidArgument(format!(
                "split color {color} and key {key} must fit a C int"
            ))),
        };
        let (color, key) = self.agree(OP, args)?;
        let comm = self.live(OP)?;
        self.backend.bind_to_thread()?;
        // NCCL writes the child's handle when the split completes, after this call returns
        // (non-blocking): into a slot that outlives a failed wait.
        let mut slot: Box<RawComm> = Box::new(std::ptr::null_mut());
        let mut raw = RawConfig::non_blocking();
        // SAFETY: the parent is live; the out pointers are valid for the call and after it.
        let code = unsafe { (self.nccl.split)(comm, color, key, &mut *slot, &mut raw) };
        if let Err(e) = self.nccl.check(OP, code, comm) {
            self.abort();
            return Err(e);
        }
        if let Err(e) = self.settle(OP, None) {
            // The child's join cannot finish without the parent (aborted by the failed wait,
            // which ends its pending work): abort the child too, and keep the slot in case
            // NCCL still writes it.
            let child = Self::adopt(self.nccl, *slot, &self.backend, 0, 0, self.config);
            child.abort();
            Box::leak(slot);
            return Err(e);
        }
        let child = *slot;
        let mut made = Self::adopt(self.nccl, child, &self.backend, 0, 0, self.config);
        made.settle(OP, None)?;
        let (mut rank, mut size) = (0, 0);
        // SAFETY: the child is live; the out pointers are valid.
        let codes = unsafe {
            [
                (self.nccl.user_rank)(child, &mut rank),
                (self.nccl.count)(child, &mut size),
            ]
        };
        for code in codes {
            self.nccl.check(OP, code, child)?;
        }
        made.rank = usize::try_from(rank).unwrap_or(0);
        made.size = usize::try_from(size).unwrap_or(0);
        Ok(made)
    }
}

impl Drop for NcclComm {
    fn drop(&mut self) {
        if self.aborted.get() {
            return;
        }
        // Every collective has finished on this rank before it returned, so the communicator
        // holds no work of ours: `ncclCommDestroy` frees it (NCCL syncs and frees a process's
        // ranks together when its last one is destroyed). `ncclCommFinalize` first would wait
        // for the communicator to be quiescent on every rank, which a rank that drops its
        // sub-communicators before its peers would wait out.
        // SAFETY: the communicator is live and not used again.
        unsafe { (self.nccl.destroy)(self.comm) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_aligns_its_body_and_loses_no_row() {
        for start in 0..40 {
            for rows in (0..70).chain([1000, 4099, 1 << 20]) {
                let c = Cut::of(start, rows);
                assert_eq!(c.head + c.body + c.tail, rows, "{start} {rows}");
                assert_eq!(c.body % ALIGN_ROWS, 0);
                assert!(c.head < ALIGN_ROWS && c.tail < ALIGN_ROWS, "{c:?}");
                if c.body > 0 {
                    assert_eq!((start + c.head) % ALIGN_ROWS, 0, "{start} {rows}");
                }
                assert_eq!(c, Cut::of(start % ALIGN_ROWS, rows));
            }
        }
    }

    /// Ranks with uneven counts, the transfers of each matched as NCCL matches them (the k-th
    /// send from a to b with b's k-th receive from a) and carried out on host memory (rows of
    /// one byte at address = row): every rank gets exactly the rows sent to it, and every
    /// transfer of 16 rows or more starts on an aligned row at both ends.
    #[test]
    fn any_order_transfers_deliver_every_row_aligned() {
        for ranks in 1..=5usize {
            let counts: Vec<Vec<usize>> = (0..ranks)
                .map(|f| {
                    (0..ranks)
                        .map(|t| [0, 1, 15, 17, 4099, 64][(f * 7 + t * 3) % 6])
                        .collect()
                })
                .collect();
            // Each rank's send rows: (from, to, index).
            let sends: Vec<Vec<(usize, usize, usize)>> = (0..ranks)
                .map(|f| {
                    (0..ranks)
                        .flat_map(|t| (0..counts[f][t]).map(move |i| (f, t, i)))
                        .collect()
                })
                .collect();
            let starts = |f: usize| -> Vec<usize> {
                counts[f]
                    .iter()
                    .scan(0, |a, &c| {
                        let s = *a;
                        *a += c;
                        Some(s)
                    })
                    .collect()
            };
            let transfers: Vec<Vec<Transfer>> = (0..ranks)
                .map(|me| {
                    let sent: Vec<(usize, Cut)> = (0..ranks)
                        .map(|p| (starts(me)[p], Cut::of(starts(me)[p], counts[me][p])))
                        .collect();
                    let got: Vec<Cut> = (0..ranks)
                        .map(|p| Cut::of(starts(p)[me], counts[p][me]))
                        .collect();
                    any_order_transfers((0, &sent), (0, &got), 1)
                })
                .collect();
            for t in transfers.iter().flatten() {
                if t.bytes >= ALIGN_ROWS {
                    assert_eq!(t.ptr as usize % ALIGN_ROWS, 0, "{t:?}");
                }
            }
            for me in 0..ranks {
                let total: usize = (0..ranks).map(|p| counts[p][me]).sum();
                let mut recv = vec![None; total];
                for from in 0..ranks {
                    let s: Vec<_> = transfers[from]
                        .iter()
                        .filter(|t| t.send && t.peer == me)
                        .collect();
                    let r: Vec<_> = transfers[me]
                        .iter()
                        .filter(|t| !t.send && t.peer == from)
                        .collect();
                    assert_eq!(s.len(), r.len(), "{from} -> {me}");
                    for (s, r) in s.iter().zip(&r) {
                        assert_eq!(s.bytes, r.bytes, "{from} -> {me}");
                        for i in 0..s.bytes {
                            let slot = &mut recv[r.ptr as usize + i];
                            assert!(slot.is_none(), "row {} written twice", r.ptr as usize + i);
                            *slot = Some(sends[from][s.ptr as usize + i]);
                        }
                    }
                }
                let mut got: Vec<_> = recv
                    .into_iter()
                    .map(|v| v.expect("a row not written"))
                    .collect();
                got.sort_unstable();
                let mut want: Vec<_> = (0..ranks)
                    .flat_map(|f| (0..counts[f][me]).map(move |i| (f, me, i)))
                    .collect();
                want.sort_unstable();
                assert_eq!(got, want, "rank {me} of {ranks}");
            }
        }
    }

    #[test]
    fn a_missing_library_is_one_error_naming_what_to_install() {
        let Err(message) = Nccl::open(&["/nonexistent/libnccl.so.2".to_string()]) else {
            panic!("a library that does not exist loaded");
        };
        assert!(message.contains("/nonexistent/libnccl.so.2"), "{message}");
        assert!(message.contains("NCCL 2.18 or newer"), "{message}");
        assert!(message.contains(LIBRARY_ENV), "{message}");
    }

    #[test]
    fn the_soname_is_tried_first() {
        let names = candidates();
        let first_default = names.iter().position(|n| n == "libnccl.so.2");
        let unversioned = names.iter().position(|n| n == "libnccl.so");
        assert!(first_default < unversioned, "{names:?}");
    }

    #[test]
    fn versions_read_as_nccl_codes_them() {
        assert_eq!(version_text(21800), "2.18.0");
        assert_eq!(version_text(22807), "2.28.7");
    }

    #[test]
    fn the_config_is_the_2_17_layout() {
        // size_t, 2 × unsigned, 4 × int, a pointer, an int (padded to 8 bytes).
        assert_eq!(std::mem::size_of::<RawConfig>(), 48);
        assert_eq!(std::mem::offset_of!(RawConfig, net_name), 32);
        assert_eq!(std::mem::size_of::<RawUniqueId>(), 128);
    }
}
