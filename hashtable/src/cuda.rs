//! CUDA implementation and view-level entry points for reuse inside other GPU projects.
//!
//! The probe operations here work on a built [`HashTable`] and on cudarc views of buffers the
//! caller owns, queue work on the backend's stream (build a backend on your own stream with
//! `CudaBackend::with_stream`), take caller-provided [`Scratch`] where they need any, and never
//! synchronize. [`HashTables`] for `CudaBackend` is built on them.
//!
//! Probing a table from your own kernel: pass [`raw_table`]'s [`RawTable`] by value (it is
//! `DeviceRepr`) and build the matching view of `joinkit/hashtable.cuh` from it
//! (`joinkit::ht::KeyValueTable<K, LinearProbing>`, `HashRowTable<K, DoubleHashing>`,
//! `ChainedTable<K>`, ...); [`device_view_type`] names the one to use. The header's folder is
//! exported by this crate's build script as `DEP_JOINKIT_HASHTABLE_INCLUDE`: add
//! `joinkit-hashtable` as a dependency and pass that folder (and `DEP_JOINKIT_CUDA_INCLUDE`) to
//! nvcc with `-I`.

use joinkit_cuda::cudarc::driver::{
    CudaFunction, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig,
    PushKernelArg,
};
use joinkit_cuda::{
    Backend, CudaBackend, DeviceBuffer, Error, KernelModule, Key, Result, Scratch, driver,
};
use joinkit_partition::cuda::ColumnOut;

use crate::config::{BuildOrder, MAX_BUILD_ROWS, Probing, TableConfig, TableKind};
use crate::cpu::{EMPTY_ROW, EMPTY_WORD, slot_words, status_error, words_per_slot};
use crate::table::{
    HashTable, HashTables, Matches, Storage, check_probe_rows, check_retrieve, tiles,
};

pub(crate) static KERNELS: KernelModule = joinkit_cuda::kernel_module!();

/// Threads per block of the tiled count / retrieve kernels (`kBlock`); a tile is
/// `TILE_ROWS` = 4 rounds of it.
const PROBE_BLOCK: u32 = 256;

/// A table as device code sees it (`joinkit::ht::RawTable` in `joinkit/hashtable.cuh`):
/// device addresses as integers, sizes, the hash seed and the probe bound.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawTable {
    /// Slot words (`uint64_t*`, open addressing) or bucket heads (`uint32_t*`, chaining).
    pub slots: u64,
    /// Chain array (`uint32_t*`, chaining), else 0.
    pub next: u64,
    /// Build key column (`const K*`).
    pub keys: u64,
    /// Slots (open addressing, not counting the sentinel-key slot) or buckets.
    pub capacity: u64,
    /// Build rows.
    pub rows: u64,
    /// Hash seed.
    pub seed: u32,
    /// Longest insert probe sequence, in slots (open addressing).
    pub max_probe: u32,
}

// SAFETY: a repr(C) struct of integers with no padding (5 x 8 + 2 x 4 bytes), laid out as
// `joinkit::ht::RawTable`; any bit pattern is valid.
unsafe impl DeviceRepr for RawTable {}

/// The device-side view type (in `joinkit/hashtable.cuh`, namespace `joinkit::ht`) that reads
/// a table of this kind, for code generation or documentation: `"KeyValueTable<uint32_t,
/// LinearProbing>"` and so on.
pub fn device_view_type(kind: TableKind, probing: Probing, key_bits: u32) -> String {
    let k = if key_bits == 32 {
        "uint32_t"
    } else {
        "uint64_t"
    };
    let p = match probing {
        Probing::Linear => "LinearProbing",
        Probing::Double => "DoubleHashing",
    };
    match kind {
        TableKind::KeyValue => format!("KeyValueTable<{k}, {p}>"),
        TableKind::HashRow => format!("HashRowTable<{k}, {p}>"),
        TableKind::Chained => format!("ChainedTable<{k}>"),
    }
}

/// The table as its device views read it. Valid while `table` (and its build keys) live.
pub fn raw_table<K: Key>(table: &HashTable<'_, CudaBackend, K>) -> RawTable {
    let (slots, next) = match &table.storage {
        Storage::Open(s) => (s.device_ptr(), 0),
        Storage::Chained { heads, next } => (heads.device_ptr(), next.device_ptr()),
    };
    RawTable {
        slots,
        next,
        keys: table.keys.device_ptr(),
        capacity: table.capacity as u64,
        rows: table.keys.len() as u64,
        seed: table.seed,
        max_probe: table.max_probe,
    }
}

macro_rules! names {
    ($op:literal) => {
        [
            [
                concat!("ht_", $op, "_kv_linear_u32"),
                concat!("ht_", $op, "_kv_linear_u64"),
            ],
            [
                concat!("ht_", $op, "_kv_double_u32"),
                concat!("ht_", $op, "_kv_double_u64"),
            ],
            [
                concat!("ht_", $op, "_hr_linear_u32"),
                concat!("ht_", $op, "_hr_linear_u64"),
            ],
            [
                concat!("ht_", $op, "_hr_double_u32"),
                concat!("ht_", $op, "_hr_double_u64"),
            ],
            [
                concat!("ht_", $op, "_chained_u32"),
                concat!("ht_", $op, "_chained_u64"),
            ],
        ]
    };
}

type Names = [[&'static str; 2]; 5];
const BUILD: Names = names!("build");
const COUNT: Names = names!("count");
const RETRIEVE: Names = names!("retrieve");
const CONTAINS: Names = names!("contains");
const FIND: Names = names!("find");
const MARK: Names = names!("mark");
const MARK_FILTERED: Names = names!("mark_filtered");
/// Most build rows for which `mark_matched` filters probes through a shared-memory bitmap
/// (`mark_filtered` in kernels/hashtable.cu: 256 Ki bits, two a key, at most an eighth set).
const FILTER_ROWS: usize = 1 << 14;

/// The kernel of an operation for a table kind, probing and key width.
fn kernel<K: Key>(
    backend: &CudaBackend,
    names: &Names,
    kind: TableKind,
    probing: Probing,
) -> Result<CudaFunction> {
    let table = match (kind, probing) {
        (TableKind::KeyValue, Probing::Linear) => 0,
        (TableKind::KeyValue, Probing::Double) => 1,
        (TableKind::HashRow, Probing::Linear) => 2,
        (TableKind::HashRow, Probing::Double) => 3,
        (TableKind::Chained, _) => 4,
    };
    backend.function(&KERNELS, names[table][usize::from(K::BITS == 64)])
}

fn ptr<T>(backend: &CudaBackend, v: &impl DevicePtr<T>) -> u64 {
    v.device_ptr(backend.stream()).0
}

fn ptr_mut<T>(backend: &CudaBackend, v: &mut impl DevicePtrMut<T>) -> u64 {
    v.device_ptr_mut(backend.stream()).0
}

/// Launch shape of the tiled kernels: `PROBE_BLOCK` threads, one block per tile up to a full
/// device (blocks loop over tiles).
fn tile_config(backend: &CudaBackend, tiles: usize) -> LaunchConfig {
    backend.grid_stride_config(tiles.saturating_mul(PROBE_BLOCK as usize), PROBE_BLOCK)
}

/// Queues the build kernel of an open-addressing table whose slots are already empty:
/// `status` (2 words, zeroed by the caller) gets the status bits and the longest probe.
/// `rows[i]` is the build row of `keys[i]` (keys reordered, as [`build_clustered_raw`] does),
/// or `None`: `keys[i]` is row `i`.
///
/// # Errors
/// [`Error::LengthMismatch`] when `status` does not hold 2 words or `rows` not one per key;
/// [`Error::SizeOverflow`] for more than [`MAX_BUILD_ROWS`] keys; driver errors.
///
/// # Safety
/// `raw` must describe live device memory of the layout `kind`, `probing` and `K` name, with
/// `raw.capacity` slots plus the sentinel slot for [`TableKind::KeyValue`]; `keys` must hold
/// the table's build keys (in any order `rows` describes), every row below `raw.rows`;
/// `raw.keys` stays the build key column in input order (probes of [`TableKind::HashRow`]
/// read `keys[row]` from it).
pub unsafe fn build_open_raw<K: Key>(
    backend: &CudaBackend,
    kind: TableKind,
    probing: Probing,
    raw: RawTable,
    keys: &CudaView<'_, K>,
    rows: Option<&CudaView<'_, u32>>,
    status: &mut CudaViewMut<'_, u32>,
) -> Result<()> {
    check_build_args(keys.len(), rows.map(|r| r.len()), status.len())?;
    if keys.is_empty() || kind == TableKind::Chained {
        return Ok(());
    }
    let f = kernel::<K>(backend, &BUILD, kind, probing)?;
    let (kp, rp, sp, n) = (
        ptr(backend, keys),
        rows.map_or(0, |r| ptr(backend, r)),
        ptr_mut(backend, status),
        keys.len() as u64,
    );
    // Clustered keys: short tiles, so the blocks in flight (which start in index order) work
    // on a narrow band of the input and so of the table; input order: one tile per resident
    // block, so warps run long. Measured on an H200, 2^27 keys at load 0.5 (0.8): 8-byte
    // slots, 4096 rows 16.1 (15.0) G keys/s against 2048 14.9 (13.2) and 8192 12.8 (15.4);
    // 16-byte slots, 2048 rows 11.5 against 4096 10.6; input order in whole chunks 11.2
    // against 9.5 in 4096-row tiles.
    let tile = if rows.is_some() {
        CLUSTERED_TILE_SLOT_BYTES / (8 * words_per_slot::<K>(kind))
    } else {
        let blocks = backend
            .grid_stride_config(keys.len(), BUILD_BLOCK)
            .grid_dim
            .0 as usize;
        keys.len()
            .div_ceil(blocks)
            .next_multiple_of(BUILD_BLOCK as usize)
    };
    let t64 = tile as u64;
    let mut b = backend.stream().launch_builder(&f);
    b.arg(&raw).arg(&kp).arg(&rp).arg(&n).arg(&t64).arg(&sp);
    let cfg = LaunchConfig {
        // Under 2^24 blocks: fewer than 2^32 rows (checked above), tiles of 256 or more.
        grid_dim: (keys.len().div_ceil(tile) as u32, 1, 1),
        block_dim: (BUILD_BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: per this function's contract `raw` describes a table the kernel may write and
    // `keys` holds n keys, `rows` (checked) n rows or nothing (a null pointer); `status` holds
    // the 2 words the kernel updates.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(driver("launching a hash-table kernel"))
}

/// The argument checks of [`build_open_raw`] and [`build_clustered_raw`].
fn check_build_args(keys: usize, rows: Option<usize>, status: usize) -> Result<()> {
    Error::check_len("build status words", status, 2)?;
    if keys > MAX_BUILD_ROWS {
        return Err(Error::SizeOverflow("build side over 2^32 - 2 rows"));
    }
    if let Some(rows) = rows {
        Error::check_len("build rows vs keys", keys, rows)?;
    }
    Ok(())
}

/// Threads per block of the open-addressing build.
const BUILD_BLOCK: u32 = 256;

/// The slot bytes of the rows of a block's tile of clustered keys: 4096 rows of 8-byte slots,
/// 2048 of 16-byte slots (the tile's keys land in a band of the table `1 / load factor`
/// times as wide).
const CLUSTERED_TILE_SLOT_BYTES: usize = 32 << 10;

/// [`BuildOrder::Auto`] clusters tables of at least this many times the L2 cache. Measured on
/// an H200 (60 MiB L2), load 0.5: clustering wins from 128 MiB tables of 4-byte keys (15.0
/// against 14.2 G keys/s) and loses at 64 MiB (13.8 against 16.7); for 8-byte keys it loses at
/// 128 MiB (9.6 against 11.3) and wins at 512 MiB (10.9 against 9.4).
const CLUSTER_FROM_L2S: usize = 4;

/// Most partitions of a clustered build: the hash partition's cost climbs steeply past it
/// (`docs/results/primitives.md`: 3.6 ms at fan-out 256, 9.9 ms at 1024 for 2^28 rows).
const MAX_CLUSTERS: usize = 256;

/// Partitions of a clustered build of a table of `table_bytes`: regions of at most a quarter
/// of the L2 cache, so the one being filled and its neighbours stay resident, up to
/// [`MAX_CLUSTERS`] (past 64 times the L2 the regions grow instead).
fn cluster_fanout(table_bytes: usize, l2_bytes: usize) -> usize {
    let region = (l2_bytes / 4).max(1);
    table_bytes
        .div_ceil(region)
        .next_power_of_two()
        .clamp(2, MAX_CLUSTERS)
}

/// [`build_open_raw`] in [`BuildOrder::Clustered`] order: hash-partitions (key, row) by the
/// hash bits that choose the home slot (the partition's multiply-shift of the same seeded
/// hash maps onto slot ranges in order), then inserts them in that order in one launch whose
/// tiles start in index order, so the inserts in flight fall in a narrow band of the table.
/// Allocates `keys.len()` keys and row ids and the partition's scratch, freed when the queued
/// work ends; an allocation failure leaves nothing queued.
///
/// # Errors
/// As [`build_open_raw`]; allocation and driver errors.
///
/// # Safety
/// As [`build_open_raw`], with `keys` in input order (key `i` is row `i`).
pub unsafe fn build_clustered_raw<K: Key>(
    backend: &CudaBackend,
    kind: TableKind,
    probing: Probing,
    raw: RawTable,
    keys: &CudaView<'_, K>,
    status: &mut CudaViewMut<'_, u32>,
) -> Result<()> {
    check_build_args(keys.len(), None, status.len())?;
    if keys.is_empty() || kind == TableKind::Chained {
        return Ok(());
    }
    let n = keys.len();
    let words = slot_words::<K>(kind, raw.capacity as usize)?;
    let fanout = cluster_fanout(words.saturating_mul(8), backend.info().l2_bytes);
    let mut clustered = backend.alloc::<K>(n)?;
    let mut rows = backend.alloc::<u32>(n)?;
    let mut offsets = backend.alloc::<u64>(fanout + 1)?;
    joinkit_partition::cuda::hash_partition(
        backend,
        keys,
        &mut clustered.view_mut(),
        &[],
        Some(ColumnOut::from_buffer(&mut rows)),
        &mut offsets.view_mut(),
        fanout,
        raw.seed,
        &mut Scratch::new(),
    )?;
    // SAFETY: the caller's contract, with the keys permuted and `rows` naming each one's row.
    unsafe {
        build_open_raw(
            backend,
            kind,
            probing,
            raw,
            &clustered.view(),
            Some(&rows.view()),
            status,
        )
    }
}

/// Counts matches per probe row into `counts` and per tile into `tile_totals` (`tiles + 1`
/// entries, the last set to 0), then scans the tile totals into `tile_offsets` (`tiles + 1`
/// entries; the last is the grand total). Does not synchronize.
///
/// # Errors
/// [`Error::LengthMismatch`] for outputs of the wrong length; [`Error::SizeOverflow`] for more
/// than 2^32 probe rows; CUB, allocation and driver errors.
pub fn probe_count<K: Key>(
    backend: &CudaBackend,
    table: &HashTable<'_, CudaBackend, K>,
    probe: &CudaView<'_, K>,
    counts: &mut CudaViewMut<'_, u32>,
    tile_totals: &mut CudaViewMut<'_, u64>,
    tile_offsets: &mut CudaViewMut<'_, u64>,
    scratch: &mut Scratch,
) -> Result<()> {
    let n = probe.len();
    check_probe_rows(n)?;
    let t = tiles(n);
    Error::check_len("match counts vs probe rows", counts.len(), n)?;
    Error::check_len("tile totals vs tiles + 1", tile_totals.len(), t + 1)?;
    Error::check_len("tile offsets vs tiles + 1", tile_offsets.len(), t + 1)?;
    let f = kernel::<K>(backend, &COUNT, table.kind, table.probing)?;
    let raw = raw_table(table);
    let (pp, cp, tp) = (
        ptr(backend, probe),
        ptr_mut(backend, counts),
        ptr_mut(backend, tile_totals),
    );
    let (n64, t64) = (n as u64, t as u64);
    let mut b = backend.stream().launch_builder(&f);
    b.arg(&raw).arg(&pp).arg(&n64).arg(&cp).arg(&tp).arg(&t64);
    // SAFETY: `raw` describes the live table; the kernel reads n probe keys, writes n counts
    // and t + 1 tile totals (lengths checked above) and runs with PROBE_BLOCK threads a block.
    unsafe { b.launch(tile_config(backend, t)) }
        .map_err(driver("launching a hash-table kernel"))?;
    joinkit_primitives::cuda::exclusive_sum(backend, &tile_totals.as_view(), tile_offsets, scratch)
}

/// Writes the pairs at output positions `cursor..cursor + out_probe.len()` (which must not pass
/// the total) into `out_probe` and `out_build`. Does not synchronize.
///
/// # Errors
/// [`Error::LengthMismatch`] for inputs of the wrong length; [`Error::IndexOutOfRange`] when
/// the window passes the total; driver errors.
#[allow(clippy::too_many_arguments)]
pub fn probe_retrieve<K: Key>(
    backend: &CudaBackend,
    table: &HashTable<'_, CudaBackend, K>,
    probe: &CudaView<'_, K>,
    counts: &CudaView<'_, u32>,
    tile_offsets: &CudaView<'_, u64>,
    total: u64,
    cursor: u64,
    out_probe: &mut CudaViewMut<'_, u32>,
    out_build: &mut CudaViewMut<'_, u32>,
) -> Result<()> {
    let n = probe.len();
    Error::check_len("probe column vs the column counted", n, counts.len())?;
    let t = tiles(n);
    Error::check_len("tile offsets vs tiles + 1", tile_offsets.len(), t + 1)?;
    Error::check_len(
        "retrieve outputs (probe vs build rows)",
        out_probe.len(),
        out_build.len(),
    )?;
    let len = out_probe.len() as u64;
    if cursor.checked_add(len).is_none_or(|end| end > total) {
        return Err(Error::IndexOutOfRange {
            what: "retrieve window end (output position)",
            index: cursor.saturating_add(len),
            len: usize::try_from(total).unwrap_or(usize::MAX),
        });
    }
    if len == 0 {
        return Ok(());
    }
    let f = kernel::<K>(backend, &RETRIEVE, table.kind, table.probing)?;
    let raw = raw_table(table);
    let (pp, cp, op) = (
        ptr(backend, probe),
        ptr(backend, counts),
        ptr(backend, tile_offsets),
    );
    let (ap, bp) = (ptr_mut(backend, out_probe), ptr_mut(backend, out_build));
    let (n64, t64) = (n as u64, t as u64);
    let mut b = backend.stream().launch_builder(&f);
    b.arg(&raw).arg(&pp).arg(&n64).arg(&cp).arg(&op).arg(&t64);
    b.arg(&cursor).arg(&len).arg(&ap).arg(&bp);
    // SAFETY: `raw` describes the live table; the kernel reads n keys and counts and t + 1
    // offsets, and writes only output positions inside the window, `len` entries per output
    // (lengths checked above).
    unsafe { b.launch(tile_config(backend, t)) }
        .map(|_| ())
        .map_err(driver("launching a hash-table kernel"))
}

/// One grid-stride probe kernel `(RawTable, const K* probe, uint64_t n, uint32_t* out)`.
fn launch_rowwise<K: Key>(
    backend: &CudaBackend,
    names: &Names,
    table: &HashTable<'_, CudaBackend, K>,
    probe: &CudaView<'_, K>,
    out: &mut CudaViewMut<'_, u32>,
) -> Result<()> {
    check_probe_rows(probe.len())?;
    if probe.is_empty() {
        return Ok(());
    }
    let f = kernel::<K>(backend, names, table.kind, table.probing)?;
    let raw = raw_table(table);
    let (pp, op, n) = (
        ptr(backend, probe),
        ptr_mut(backend, out),
        probe.len() as u64,
    );
    let mut b = backend.stream().launch_builder(&f);
    b.arg(&raw).arg(&pp).arg(&n).arg(&op);
    // SAFETY: `raw` describes the live table; the kernel reads n probe keys and writes `out`
    // only at indexes the callers checked: n entries (contains, find) or build rows (mark).
    unsafe { b.launch(backend.grid_stride_config(probe.len(), 256)) }
        .map(|_| ())
        .map_err(driver("launching a hash-table kernel"))
}

/// `out[r]` = 1 when probe row `r` has a match, else 0. Does not synchronize.
///
/// # Errors
/// [`Error::LengthMismatch`] when `out` does not have one entry per probe row; driver errors.
pub fn contains<K: Key>(
    backend: &CudaBackend,
    table: &HashTable<'_, CudaBackend, K>,
    probe: &CudaView<'_, K>,
    out: &mut CudaViewMut<'_, u32>,
) -> Result<()> {
    Error::check_len("contains output vs probe rows", out.len(), probe.len())?;
    launch_rowwise(backend, &CONTAINS, table, probe, out)
}

/// `out[r]` = a build row matching probe row `r`, or [`crate::NOT_FOUND`]. Does not
/// synchronize.
///
/// # Errors
/// [`Error::LengthMismatch`] when `out` does not have one entry per probe row; driver errors.
pub fn find<K: Key>(
    backend: &CudaBackend,
    table: &HashTable<'_, CudaBackend, K>,
    probe: &CudaView<'_, K>,
    out: &mut CudaViewMut<'_, u32>,
) -> Result<()> {
    Error::check_len("find output vs probe rows", out.len(), probe.len())?;
    launch_rowwise(backend, &FIND, table, probe, out)
}

/// Sets `build_flags[b] = 1` for each build row matched by a probe row. Does not synchronize.
///
/// # Errors
/// [`Error::LengthMismatch`] when `build_flags` does not have one entry per build row; driver
/// errors.
pub fn mark_matched<K: Key>(
    backend: &CudaBackend,
    table: &HashTable<'_, CudaBackend, K>,
    probe: &CudaView<'_, K>,
    build_flags: &mut CudaViewMut<'_, u32>,
) -> Result<()> {
    Error::check_len("build flags vs build rows", build_flags.len(), table.rows())?;
    // A small table probed by many rows: probes go through a filter of the build keys first
    // (each block builds it from the build keys, so the probes must outnumber them well).
    let rows = table.rows();
    if rows == 0 || rows > FILTER_ROWS || probe.len() / 64 < rows {
        return launch_rowwise(backend, &MARK, table, probe, build_flags);
    }
    check_probe_rows(probe.len())?;
    let f = kernel::<K>(backend, &MARK_FILTERED, table.kind, table.probing)?;
    let raw = raw_table(table);
    let (bp, pp, op) = (
        ptr(backend, &table.keys.view()),
        ptr(backend, probe),
        ptr_mut(backend, build_flags),
    );
    let (nb, np) = (rows as u64, probe.len() as u64);
    // Every block builds the filter, so no more blocks than run at once (its 32 KiB of shared
    // memory and its registers allow fewer than the threads do: a second, partial wave of
    // blocks left most SMs idle at the end).
    let per_sm = f
        .occupancy_max_active_blocks_per_multiprocessor(PROBE_BLOCK, 0, None)
        .map_err(driver("querying a hash-table kernel's occupancy"))?
        .max(1);
    let mut cfg = backend.grid_stride_config(probe.len(), PROBE_BLOCK);
    cfg.grid_dim.0 = cfg.grid_dim.0.min(backend.info().sm_count.max(1) * per_sm);
    let mut b = backend.stream().launch_builder(&f);
    b.arg(&raw).arg(&bp).arg(&nb).arg(&pp).arg(&np).arg(&op);
    // SAFETY: `raw` describes the live table built from the `rows` keys of `table.keys`; the
    // kernel reads those and n probe keys, and writes flags only at build rows, which
    // `build_flags` holds (checked above).
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(driver("launching a hash-table kernel"))
}

/// A chained table ([`TableConfig::chained`]'s layout, `config`'s capacity and seed) on `keys`
/// whose bucket heads and chains are allocated, neither emptied nor written, for another
/// crate's kernels to empty the heads and push the keys in launches of their own: `Auto`'s plan
/// empties them in the launch of its key sample, and builds where the sample picks
/// NPHJ-chained. The kernels write [`raw_table`]'s `capacity` heads with the empty row
/// (`joinkit::ht::kEmptyRow`, `joinkit/hashtable.cuh`), then push every key with
/// `ChainedTable::insert`.
///
/// # Safety
/// Nothing may read the table before such kernels, queued on the backend's stream after this
/// call, have emptied its heads and pushed its keys (dropping it needs nothing).
///
/// # Errors
/// [`Error::InvalidArgument`] when `config` is not chained; capacity and allocation errors.
pub unsafe fn chained_table_unemptied<'k, K: Key>(
    b: &CudaBackend,
    keys: &'k DeviceBuffer<K>,
    config: &TableConfig,
) -> Result<HashTable<'k, CudaBackend, K>> {
    if config.kind() != TableKind::Chained {
        return Err(Error::InvalidArgument(format!(
            "a chained table to build from a {:?} configuration",
            config.kind()
        )));
    }
    let capacity = config.capacity_for(keys.len())?;
    Ok(HashTable {
        storage: Storage::Chained {
            heads: b.alloc::<u32>(capacity)?,
            next: b.alloc::<u32>(keys.len())?,
        },
        keys,
        kind: TableKind::Chained,
        probing: config.probing_policy(),
        capacity,
        seed: config.hash_seed(),
        max_probe: 0,
        order: BuildOrder::Input,
    })
}

/// Queues the build of a chained table whose heads are empty: every key pushed on its bucket's
/// chain (one atomic exchange a key, Thostrup et al.'s lock-free chaining).
///
/// # Safety
/// `table` must be chained, its heads holding the empty row when the build runs (emptied by
/// work queued before it on the backend's stream).
unsafe fn push_chained_keys<K: Key>(
    b: &CudaBackend,
    table: &HashTable<'_, CudaBackend, K>,
) -> Result<()> {
    if table.keys.is_empty() {
        return Ok(());
    }
    let f = kernel::<K>(b, &BUILD, TableKind::Chained, table.probing)?;
    let (raw, kp, n) = (
        raw_table(table),
        table.keys.device_ptr(),
        table.keys.len() as u64,
    );
    let mut args = b.stream().launch_builder(&f);
    args.arg(&raw).arg(&kp).arg(&n);
    // SAFETY: `raw` holds `capacity` heads and one chain entry per key; the kernel reads n keys
    // and writes heads and next[0..n].
    unsafe { args.launch(b.grid_stride_config(table.keys.len(), 256)) }
        .map(drop)
        .map_err(driver("launching a hash-table kernel"))
}

impl HashTables for CudaBackend {
    fn build_table<'k, K: Key>(
        &self,
        keys: &'k Self::Buf<K>,
        config: &TableConfig,
    ) -> Result<HashTable<'k, Self, K>> {
        if config.kind() == TableKind::Chained {
            // SAFETY: the heads are emptied and the keys pushed, in stream order, before the
            // table is returned.
            let mut table = unsafe { chained_table_unemptied(self, keys, config) }?;
            if let Storage::Chained { heads, .. } = &mut table.storage {
                self.fill(heads, EMPTY_ROW)?;
            }
            // SAFETY: the heads were emptied just before, on this stream.
            unsafe { push_chained_keys(self, &table) }?;
            return Ok(table);
        }
        let capacity = config.capacity_for(keys.len())?;
        let (kind, probing, seed) = (config.kind(), config.probing_policy(), config.hash_seed());
        let mut slots = self.alloc::<u64>(slot_words::<K>(kind, capacity)?)?;
        self.fill(&mut slots, EMPTY_WORD)?;
        let mut table = HashTable {
            storage: Storage::Open(slots),
            keys,
            kind,
            probing,
            capacity,
            seed,
            max_probe: 0,
            order: BuildOrder::Input,
        };
        if keys.is_empty() {
            return Ok(table);
        }
        let raw = raw_table(&table);
        let mut status = self.upload(&[0u32, 0])?;
        let clustered = match config.build_order_policy() {
            BuildOrder::Input => false,
            BuildOrder::Clustered => true,
            BuildOrder::Auto => table.table_bytes() >= CLUSTER_FROM_L2S * self.info().l2_bytes,
        };
        let (view, mut status_view) = (keys.view(), status.view_mut());
        // SAFETY: `raw` describes the slots just allocated and emptied for this kind, probing
        // and key width (with the sentinel slot), and the build keys in input order.
        unsafe {
            let clustered_done = clustered
                && match build_clustered_raw(self, kind, probing, raw, &view, &mut status_view) {
                    Ok(()) => true,
                    // Auto's clustering found no room for its copy of the keys (nothing was
                    // queued): input order needs none.
                    Err(Error::OutOfDeviceMemory { .. })
                        if config.build_order_policy() == BuildOrder::Auto =>
                    {
                        false
                    }
                    Err(e) => return Err(e),
                };
            if clustered_done {
                table.order = BuildOrder::Clustered;
            } else {
                build_open_raw(self, kind, probing, raw, &view, None, &mut status_view)?;
            }
        }
        let status = self.download(&status)?;
        status_error(status[0], config, capacity, keys.len())?;
        table.max_probe = status[1];
        Ok(table)
    }

    fn probe_count<K: Key>(
        &self,
        table: &HashTable<'_, Self, K>,
        probe: &Self::Buf<K>,
    ) -> Result<Matches<Self>> {
        check_probe_rows(probe.len())?;
        let t = tiles(probe.len());
        let mut counts = self.alloc::<u32>(probe.len())?;
        let mut tile_totals = self.alloc::<u64>(t + 1)?;
        let mut tile_offsets = self.alloc::<u64>(t + 1)?;
        let mut scratch = Scratch::new();
        probe_count(
            self,
            table,
            &probe.view(),
            &mut counts.view_mut(),
            &mut tile_totals.view_mut(),
            &mut tile_offsets.view_mut(),
            &mut scratch,
        )?;
        let total = self.read_element(&tile_offsets.view(), tile_offsets.len() - 1)?;
        Ok(Matches {
            counts,
            tile_offsets,
            total,
        })
    }

    fn probe_retrieve_chunk<K: Key>(
        &self,
        table: &HashTable<'_, Self, K>,
        probe: &Self::Buf<K>,
        matches: &Matches<Self>,
        cursor: u64,
        out_probe: &mut Self::Buf<u32>,
        out_build: &mut Self::Buf<u32>,
    ) -> Result<u64> {
        let n = check_retrieve(
            probe.len(),
            matches.probe_rows(),
            matches.total,
            cursor,
            out_probe.len(),
            out_build.len(),
        )?;
        if n > 0 {
            let len = n as usize;
            probe_retrieve(
                self,
                table,
                &probe.view(),
                &matches.counts.view(),
                &matches.tile_offsets.view(),
                matches.total,
                cursor,
                &mut out_probe.view_mut().slice_mut(..len),
                &mut out_build.view_mut().slice_mut(..len),
            )?;
        }
        Ok(n)
    }

    fn contains<K: Key>(
        &self,
        table: &HashTable<'_, Self, K>,
        probe: &Self::Buf<K>,
    ) -> Result<Self::Buf<u32>> {
        check_probe_rows(probe.len())?;
        let mut out = self.alloc::<u32>(probe.len())?;
        contains(self, table, &probe.view(), &mut out.view_mut())?;
        Ok(out)
    }

    fn find<K: Key>(
        &self,
        table: &HashTable<'_, Self, K>,
        probe: &Self::Buf<K>,
    ) -> Result<Self::Buf<u32>> {
        check_probe_rows(probe.len())?;
        let mut out = self.alloc::<u32>(probe.len())?;
        find(self, table, &probe.view(), &mut out.view_mut())?;
        Ok(out)
    }

    fn mark_matched<K: Key>(
        &self,
        table: &HashTable<'_, Self, K>,
        probe: &Self::Buf<K>,
        build_flags: &mut Self::Buf<u32>,
    ) -> Result<()> {
        Error::check_len("build flags vs build rows", build_flags.len(), table.rows())?;
        check_probe_rows(probe.len())?;
        mark_matched(self, table, &probe.view(), &mut build_flags.view_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_fanout_keeps_regions_to_a_quarter_of_l2() {
        let l2 = 60 << 20;
        assert_eq!(cluster_fanout(1, l2), 2);
        assert_eq!(cluster_fanout(100 << 20, l2), 8);
        assert_eq!(cluster_fanout(1 << 30, l2), 128);
        assert_eq!(cluster_fanout(2 << 30, l2), 256);
        assert_eq!(cluster_fanout(64 << 30, l2), MAX_CLUSTERS);
    }
}
