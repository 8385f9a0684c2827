//! View-level CUDA entry points, for reuse inside other GPU projects: they work on cudarc views
//! of buffers the caller owns (or raw device pointers, through [`ColumnIn::from_raw`] and
//! [`ColumnOut::from_raw`]), queue work on the backend's stream (build one on your own stream
//! with `CudaBackend::with_stream`), take caller-provided [`Scratch`] and never synchronize.
//!
//! Lengths, widths and bit ranges are checked; the caller guarantees that outputs overlap
//! neither each other nor the inputs.
//!
//! A radix partition that moves at most one column (a payload or the row ids) is CUB's stable
//! radix sort on the bit range (onesweep passes, faster for one column), followed by each
//! partition's start: a binary search per partition, or one pass over the sorted keys where
//! that reads fewer keys (many partitions, few rows). Everything else runs this crate's kernels
//! (`kernels/partition.cu`): a per-chunk histogram of the digits, a per-digit scan of those
//! histograms, and a scatter that copies each tile of up to 8192 rows into shared memory
//! (cp.async), ranks it stably and writes each partition's run of the tile contiguously, every
//! column through one ranking. The grid is as many blocks as fit the device at once (occupancy
//! × SM count), each owning one contiguous chunk of rows, so the histogram is `fanout × blocks`
//! counters, not one per tile. Columns that do not fit one launch's shared memory go to further
//! launches over the same histogram.

use std::marker::PhantomData;
use std::ops::Range;

use joinkit_cuda::cudarc::driver::{
    CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig, PushKernelArg,
};
use joinkit_cuda::{
    Backend, Column, CudaBackend, DeviceBuffer, Element, Error, Key, Result, Scratch,
};

use joinkit_primitives::cuda::RawRadixSort;

use crate::column::RowIds;
use crate::digit::{Partitioner, hash_fanout, pass_widths, radix_fanout};
use crate::stable::Partitioned;
use crate::{MAX_BUCKET_COLUMNS, bucket_pool_buckets};

static KERNELS: joinkit_cuda::KernelModule = joinkit_cuda::kernel_module!();

/// Threads per block of every partition kernel (`kThreads`).
const THREADS: u32 = 256;
/// Columns one scatter launch moves (`kMaxColumns`).
const MAX_COLUMNS: usize = 16;

/// Mirrors `DigitFn` in kernels/partition.cu.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct DigitFn {
    kind: u32,
    shift: u32,
    mask: u32,
    seed: u32,
    fanout: u32,
}
// SAFETY: a plain repr(C) struct of u32s, laid out as the kernel's `DigitFn`.
unsafe impl DeviceRepr for DigitFn {}

impl DigitFn {
    fn radix(shift: u32, width: u32) -> Self {
        DigitFn {
            kind: 0,
            shift,
            mask: (1u32 << width) - 1,
            seed: 0,
            fanout: 1u32 << width,
        }
    }
    fn hash(fanout: usize, seed: u32) -> Self {
        DigitFn {
            kind: 1,
            shift: 0,
            mask: 0,
            seed,
            fanout: fanout as u32,
        }
    }
    /// The hash partition of a key's low 32 bits as a 4-byte key.
    fn hash_low_words(fanout: usize, seed: u32) -> Self {
        DigitFn {
            kind: 2,
            ..Self::hash(fanout, seed)
        }
    }
    /// Counters the kernels keep per digit: 256 or 1024.
    fn radix_size(&self) -> u32 {
        if self.fanout <= 256 { 256 } else { 1024 }
    }

    /// The fan-out class of a histogram-and-scatter pass moving `cols`: the small class (16
    /// counters, a ballot per digit bit, [`SMALL_TILE_BYTES`] tiles so that four blocks share
    /// an SM) for fan-outs up to 16 whose rows one such launch moves, else
    /// [`DigitFn::radix_size`]. Why: a fan-out of 4 (the distributed join's partition by rank)
    /// ran the 256-counter scatter at 49 % of the copy bandwidth, its ranking and two blocks an
    /// SM the bound (ncu: 23 % occupancy, barrier stalls).
    fn sweep_class(&self, key_bits: u32, cols: &[ColSpec]) -> u32 {
        let one_launch = matches!(
            sweep_groups(SMALL_RADIX, key_bits, cols).as_deref(),
            Ok([_])
        );
        if self.fanout <= SMALL_RADIX && one_launch {
            return SMALL_RADIX;
        }
        self.radix_size()
    }
}

/// Counters of the small fan-out class (`part_hist16_*`, `part_sweep16x*_*`).
const SMALL_RADIX: u32 = 16;

/// Mirrors `Columns` in kernels/partition.cu (passed by value).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct Columns {
    src: [u64; MAX_COLUMNS],
    dst: [u64; MAX_COLUMNS],
    width: [u32; MAX_COLUMNS],
    count: u32,
    /// Added to the row index of generated row ids.
    id_base: u64,
}
// SAFETY: a plain repr(C) struct of integers, laid out as the kernel's `Columns`.
unsafe impl DeviceRepr for Columns {}

impl Columns {
    fn of(specs: &[ColSpec]) -> Self {
        let mut c = Columns {
            src: [0; MAX_COLUMNS],
            dst: [0; MAX_COLUMNS],
            width: [0; MAX_COLUMNS],
            count: specs.len().min(MAX_COLUMNS) as u32,
            id_base: 0,
        };
        for (i, s) in specs.iter().take(MAX_COLUMNS).enumerate() {
            c.src[i] = s.src;
            c.dst[i] = s.dst;
            c.width[i] = s.width;
        }
        c
    }
}

/// One column to move: source address (0: write the row index), destination, width in bytes.
#[derive(Debug, Clone, Copy)]
struct ColSpec {
    src: u64,
    dst: u64,
    width: u32,
}

/// An input column of any element type for the view-level entry points.
#[derive(Debug, Clone, Copy)]
pub struct ColumnIn<'a> {
    ptr: u64,
    len: usize,
    width: u32,
    _data: PhantomData<&'a ()>,
}

/// An output column of any element type for the view-level entry points.
#[derive(Debug)]
pub struct ColumnOut<'a> {
    ptr: u64,
    len: usize,
    width: u32,
    _data: PhantomData<&'a mut ()>,
}

fn check_width(width_bytes: usize) -> Result<u32> {
    match width_bytes {
        4 | 8 => Ok(width_bytes as u32),
        w => Err(Error::InvalidArgument(format!(
            "column width of {w} bytes: 4 or 8 supported"
        ))),
    }
}

impl<'a> ColumnIn<'a> {
    /// A column from a cudarc view.
    pub fn new<T: Element>(backend: &CudaBackend, view: &CudaView<'a, T>) -> Self {
        Self::at(
            view.device_ptr(backend.stream()).0,
            view.len(),
            size_of::<T>(),
        )
    }

    /// A column from a joinkit device buffer.
    pub fn from_buffer<T: Element>(buf: &'a DeviceBuffer<T>) -> Self {
        Self::at(buf.device_ptr(), buf.len(), size_of::<T>())
    }

    /// A column from a raw device address, for callers outside cudarc.
    ///
    /// # Safety
    /// `ptr` must address `len` readable elements of `width_bytes` bytes on the backend's
    /// device, valid for `'a` and for as long as the work queued with it runs.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `width_bytes` is 4 or 8.
    pub unsafe fn from_raw(ptr: u64, len: usize, width_bytes: usize) -> Result<Self> {
        Ok(Self::at(ptr, len, check_width(width_bytes)? as usize))
    }

    fn at(ptr: u64, len: usize, width: usize) -> Self {
        ColumnIn {
            ptr,
            len,
            width: width as u32,
            _data: PhantomData,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the column is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<'a> ColumnOut<'a> {
    /// A column from a writable cudarc view.
    pub fn new<T: Element>(backend: &CudaBackend, view: &mut CudaViewMut<'a, T>) -> Self {
        let len = view.len();
        Self::at(view.device_ptr_mut(backend.stream()).0, len, size_of::<T>())
    }

    /// A column from a joinkit device buffer.
    pub fn from_buffer<T: Element>(buf: &'a mut DeviceBuffer<T>) -> Self {
        Self::at(buf.device_ptr(), buf.len(), size_of::<T>())
    }

    /// A column from a raw device address, for callers outside cudarc.
    ///
    /// # Safety
    /// `ptr` must address `len` writable elements of `width_bytes` bytes on the backend's
    /// device, valid for `'a` and for as long as the work queued with it runs, and used by
    /// nothing else meanwhile.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `width_bytes` is 4 or 8.
    pub unsafe fn from_raw(ptr: u64, len: usize, width_bytes: usize) -> Result<Self> {
        Ok(Self::at(ptr, len, check_width(width_bytes)? as usize))
    }

    fn at(ptr: u64, len: usize, width: usize) -> Self {
        ColumnOut {
            ptr,
            len,
            width: width as u32,
            _data: PhantomData,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the column is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<'a> ColumnIn<'a> {
    /// A column from a joinkit [`Column`] of any element type.
    pub fn from_column(c: &'a Column<CudaBackend>) -> Self {
        joinkit_cuda::each_column!(c, b => ColumnIn::from_buffer(b))
    }
}

impl<'a> ColumnOut<'a> {
    /// A column from a joinkit [`Column`] of any element type.
    pub fn from_column(c: &'a mut Column<CudaBackend>) -> Self {
        joinkit_cuda::each_column!(c, b => ColumnOut::from_buffer(b))
    }
}

fn alloc_like(
    backend: &CudaBackend,
    c: &Column<CudaBackend>,
    len: usize,
) -> Result<Column<CudaBackend>> {
    Ok(joinkit_cuda::map_column!(c, _b, T => backend.alloc::<T>(len)?))
}

fn alloc_row_ids(
    backend: &CudaBackend,
    n: usize,
    row_ids: RowIds,
) -> Result<Option<Column<CudaBackend>>> {
    Ok(match row_ids {
        RowIds::None => None,
        RowIds::U32 => Some(Column::U32(backend.alloc(n)?)),
        RowIds::U64 => Some(Column::U64(backend.alloc(n)?)),
    })
}

/// Checks the view-level columns: every pair and the row ids have `n` rows; returns the moves.
fn col_specs(
    what: &'static str,
    n: usize,
    out_len: usize,
    payloads: &[(ColumnIn<'_>, ColumnOut<'_>)],
    row_ids: &Option<ColumnOut<'_>>,
) -> Result<(Vec<ColSpec>, Option<ColSpec>)> {
    let mut specs = Vec::with_capacity(payloads.len());
    for (i, o) in payloads {
        Error::check_len(what, n, i.len)?;
        Error::check_len(what, out_len, o.len)?;
        if i.width != o.width {
            return Err(Error::InvalidArgument(format!(
                "payload of {} bytes written to a column of {} bytes",
                i.width, o.width
            )));
        }
        specs.push(ColSpec {
            src: i.ptr,
            dst: o.ptr,
            width: i.width,
        });
    }
    let ids = match row_ids {
        None => None,
        Some(o) => {
            Error::check_len(what, out_len, o.len)?;
            if o.width == 4 && n as u64 > 1u64 << 32 {
                return Err(Error::SizeOverflow(
                    "more than 2^32 rows do not fit 4-byte row ids",
                ));
            }
            Some(ColSpec {
                src: 0,
                dst: o.ptr,
                width: o.width,
            })
        }
    };
    Ok((specs, ids))
}

/// Launches kernel `$name` of this crate's module with these arguments; `shared:` first fetches
/// it with its dynamic shared-memory limit raised (`CudaBackend::function_with_dynamic_shared`).
macro_rules! launch {
    (@with $f:expr, $backend:expr, $name:expr, $cfg:expr, $($arg:expr),*) => {{
        let f = $f;
        let mut b = $backend.stream().launch_builder(&f);
        $( b.arg($arg); )*
        // SAFETY: every call site passes the arguments of the kernel's C signature in order,
        // with device addresses valid for the element counts it states (checked by the caller).
        unsafe { b.launch($cfg) }
            .map(|_| ())
            .map_err(|e| Error::Driver { op: $name, message: format!("{e:?}") })
    }};
    (shared: $backend:expr, $name:expr, $cfg:expr, $($arg:expr),* $(,)?) => {
        launch!(@with $backend.function_with_dynamic_shared(&KERNELS, $name)?, $backend, $name,
            $cfg, $($arg),*)
    };
    ($backend:expr, $name:expr, $cfg:expr, $($arg:expr),* $(,)?) => {
        launch!(@with $backend.function(&KERNELS, $name)?, $backend, $name, $cfg, $($arg),*)
    };
}

fn hist_name(radix: u32, key_bits: u32) -> &'static str {
    match (radix, key_bits == 32) {
        (SMALL_RADIX, true) => "part_hist16_u32",
        (SMALL_RADIX, false) => "part_hist16_u64",
        (256, true) => "part_hist256_u32",
        (256, false) => "part_hist256_u64",
        (_, true) => "part_hist1024_u32",
        (_, false) => "part_hist1024_u64",
    }
}

fn bucket_name(radix: u32, key_bits: u32) -> &'static str {
    match (radix == 256, key_bits == 32) {
        (true, true) => "part_bucket256_u32",
        (true, false) => "part_bucket256_u64",
        (false, true) => "part_bucket1024_u32",
        (false, false) => "part_bucket1024_u64",
    }
}

/// Chunks are whole multiples of every tile size (the largest is 8192 rows), so that one
/// histogram serves every scatter launch of a pass.
const CHUNK_ALIGN: u64 = 8192;

/// Shared memory for the scatter's tile (keys and the moved columns). Measured on an H200
/// (docs/results/primitives.md): the largest tile that fits this wins, because each digit's run
/// in a tile is what the writes coalesce over; 64 KiB leaves room for two blocks per SM next to
/// the ranking's arrays. Double-buffering the tiles instead (half the rows) was slower.
const SWEEP_TILE_BYTES: usize = 64 << 10;

/// The small class's tile: 4096 rows of at most 8 bytes (a 4-byte key and one 4-byte column or
/// row ids), four blocks an SM, a digit's run in a tile still long (a fan-out of 4: about 1024
/// rows). H200, 2^28 rows, fan-out 4: 4-byte keys and values 2.62 → 2.19 ms (49 → 58 % of
/// copy); wider rows measured level or slower with the small class (8-byte keys and 4-byte
/// values 2.64 → 2.71, 8 and 8 bytes 3.38 → 3.24 with 2048-row tiles), so they keep the
/// 256-counter scatter.
const SMALL_TILE_BYTES: usize = 32 << 10;

/// A scatter kernel (fan-out class and rows per thread) and its shared memory.
#[derive(Debug, Clone, Copy)]
struct Sweep {
    name: &'static str,
    /// Dynamic shared memory: one tile of `row_bytes` rows.
    smem: usize,
}

impl Sweep {
    /// The largest tile of fan-out class `radix` that fits its limit ([`SWEEP_TILE_BYTES`],
    /// [`SMALL_TILE_BYTES`]) for rows of `row_bytes` (key plus columns read from memory);
    /// `None` when even the smallest (2048 rows; 4096 for the small class) does not.
    fn pick(radix: u32, key_bits: u32, row_bytes: usize) -> Option<Sweep> {
        // (rows per thread, kernel for u32 keys, for u64 keys), largest tile first.
        let (kernels, limit): (&[(u32, &'static str, &'static str)], usize) = match radix {
            SMALL_RADIX => (
                &[(16, "part_sweep16x16_u32", "part_sweep16x16_u64")],
                SMALL_TILE_BYTES,
            ),
            256 => (
                &[
                    (32, "part_sweep256x32_u32", "part_sweep256x32_u64"),
                    (16, "part_sweep256x16_u32", "part_sweep256x16_u64"),
                    (8, "part_sweep256x8_u32", "part_sweep256x8_u64"),
                ],
                SWEEP_TILE_BYTES,
            ),
            _ => (
                &[
                    (16, "part_sweep1024x16_u32", "part_sweep1024x16_u64"),
                    (8, "part_sweep1024x8_u32", "part_sweep1024x8_u64"),
                ],
                SWEEP_TILE_BYTES,
            ),
        };
        kernels.iter().find_map(|&(items, n32, n64)| {
            let smem = (THREADS * items) as usize * row_bytes;
            (smem <= limit).then_some(Sweep {
                name: if key_bits == 32 { n32 } else { n64 },
                smem,
            })
        })
    }
}

/// Splits the moved columns into scatter launches: consecutive columns as long as the rows
/// (key included: every launch ranks the keys) fit the smallest tile, at most 16 per launch.
/// Row ids are generated, not read, and cost no shared memory.
fn sweep_groups(radix: u32, key_bits: u32, cols: &[ColSpec]) -> Result<Vec<(usize, Sweep)>> {
    let key_bytes = (key_bits / 8) as usize;
    let read = |c: &ColSpec| if c.src == 0 { 0 } else { c.width as usize };
    let mut groups = Vec::new();
    let mut at = 0;
    loop {
        let mut row = key_bytes;
        let mut end = at;
        while end < cols.len()
            && end - at < MAX_COLUMNS
            && Sweep::pick(radix, key_bits, row + read(&cols[end])).is_some()
        {
            row += read(&cols[end]);
            end += 1;
        }
        let sweep = Sweep::pick(radix, key_bits, row)
            .filter(|_| end > at || cols.is_empty())
            .ok_or(Error::InvalidArgument(
                "partition rows too wide for the scatter's shared memory".into(),
            ))?;
        groups.push((end, sweep));
        if end >= cols.len() {
            return Ok(groups);
        }
        at = end;
    }
}

/// Grid of a chunked kernel: `chunks` blocks, each owning `chunk_rows` consecutive rows.
#[derive(Debug, Clone, Copy)]
struct Plan {
    chunks: u32,
    chunk_rows: u64,
}

impl Plan {
    /// As many blocks as the device runs at once (occupancy of `kernel` with `smem` bytes of
    /// dynamic shared memory × SMs), chunks of whole [`CHUNK_ALIGN`] rows and below 2^31 rows
    /// (the histogram's 32-bit counters).
    fn new(backend: &CudaBackend, n: usize, kernel: &'static str, smem: usize) -> Result<Plan> {
        let f = backend.function_with_dynamic_shared(&KERNELS, kernel)?;
        let per_sm = f
            .occupancy_max_active_blocks_per_multiprocessor(THREADS, smem, None)
            .map_err(|e| Error::Driver {
                op: "querying kernel occupancy",
                message: format!("{e:?}"),
            })?
            .max(1);
        let want = u64::from(backend.info().sm_count.max(1)) * u64::from(per_sm);
        let n = (n as u64).max(1);
        let chunk_rows = n.div_ceil(want).next_multiple_of(CHUNK_ALIGN).min(1 << 30);
        let chunks = u32::try_from(n.div_ceil(chunk_rows))
            .map_err(|_| Error::SizeOverflow("partition grid"))?;
        Ok(Plan { chunks, chunk_rows })
    }

    fn grid(&self, smem: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (self.chunks, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: smem as u32,
        }
    }

    /// Bytes of the per-chunk histogram plus the per-digit totals for `fanout` digits.
    fn histogram_bytes(&self, fanout: u32) -> usize {
        let counts = u64::from(fanout) * u64::from(self.chunks) * 8;
        align(counts as usize) + align(fanout as usize * 8)
    }
}

fn align(bytes: usize) -> usize {
    bytes.div_ceil(256) * 256
}

/// One histogram + scan + scatter pass over raw addresses.
struct Pass<'c> {
    key_bits: u32,
    keys_in: u64,
    keys_out: u64,
    n: u64,
    digit: DigitFn,
    cols: &'c [ColSpec],
    /// Where chunk 0 writes the `fanout + 1` offsets; 0 for none.
    offsets: u64,
    /// Scratch for `fanout * chunks` counts and `fanout` totals.
    counts: u64,
    totals: u64,
    plan: Plan,
    /// Set for 8-byte keys written as their low 32 bits ([`hash_partition_low_words`]).
    low_words: Option<LowWordsPass>,
}

/// What a pass that narrows its 8-byte keys adds: the window every key must lie in, the flag
/// it sets when one does not, the first generated row id, and the membership bitmaps.
#[derive(Debug, Clone, Copy)]
struct LowWordsPass {
    window: u64,
    outside: u64,
    id_base: u64,
    /// Where the scatter writes the membership bitmaps; 0 for none.
    members: u64,
    /// Words of each partition's bitmap.
    member_words: u64,
    /// Where the sizes and the flag are posted before the scatter; none for no post.
    post: Option<PostSizes>,
}

/// Where [`hash_partition_low_words`] posts the partition sizes and the window's flag as soon
/// as its scan has counted them, before its scatter: words mapped into the device and the
/// ticket of [`CudaBackend::posted_words`] (`fanout + 1` words and one ticket). Why: the caller
/// (a distributed join agreeing on what each rank sends) learns the sizes while the scatter
/// runs, instead of waiting for it.
#[derive(Debug, Clone, Copy)]
pub struct PostSizes {
    /// The device address of the mapped words: the `fanout` sizes, the flag (non-zero where a
    /// key lay outside the window), then the ticket.
    words: u64,
    /// The ticket written after them.
    ticket: u64,
}

impl PostSizes {
    /// Posts to `words` with `ticket`, as `posted_words`' `queue` gets them.
    ///
    /// # Safety
    /// `words` must address at least `fanout + 2` writable 8-byte words of host memory mapped
    /// into the device (the `fanout` of the partition that posts), valid until the post is
    /// read: the words of [`CudaBackend::posted_words`].
    pub unsafe fn new(words: u64, ticket: u64) -> Self {
        Self { words, ticket }
    }
}

/// The histogram and scatter of a pass narrowing 8-byte keys (the small fan-out class only).
const LOW_WORDS_HIST: &str = "part_hist16_low_u64";
const LOW_WORDS_SWEEP: &str = "part_sweep16x16_low_u64";

impl Pass<'_> {
    /// The plan of a pass moving `cols`: sized for its first scatter launch.
    fn plan(
        backend: &CudaBackend,
        n: usize,
        digit: &DigitFn,
        key_bits: u32,
        cols: &[ColSpec],
    ) -> Result<Plan> {
        let (_, first) = sweep_groups(digit.sweep_class(key_bits, cols), key_bits, cols)?[0];
        Plan::new(backend, n, first.name, first.smem)
    }

    fn run(&self, backend: &CudaBackend) -> Result<()> {
        let radix = self.digit.sweep_class(self.key_bits, self.cols);
        match &self.low_words {
            // part_histR_K(keys[n], n, fn, counts[fanout * chunks], chunk_rows)
            None => launch!(
                backend,
                hist_name(radix, self.key_bits),
                self.plan.grid(0),
                &self.keys_in,
                &self.n,
                &self.digit,
                &self.counts,
                &self.plan.chunk_rows
            )?,
            // part_hist16_low_u64(..., window, outside[1])
            Some(low) => launch!(
                backend,
                LOW_WORDS_HIST,
                self.plan.grid(0),
                &self.keys_in,
                &self.n,
                &self.digit,
                &self.counts,
                &self.plan.chunk_rows,
                &low.window,
                &low.outside
            )?,
        }
        // part_scan_counts(counts[fanout * chunks], totals[fanout], chunks): one block per row.
        let chunks = u64::from(self.plan.chunks);
        let scan_cfg = LaunchConfig {
            grid_dim: (self.digit.fanout, 1, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        launch!(
            backend,
            "part_scan_counts",
            scan_cfg,
            &self.counts,
            &self.totals,
            &chunks
        )?;
        if let Some((post, low)) = self.low_words.and_then(|l| l.post.map(|p| (p, l))) {
            // part_post_sizes(totals[fanout], fanout, outside[1], words, ticket): one thread.
            let one = LaunchConfig {
                grid_dim: (1, 1, 1),
                block_dim: (1, 1, 1),
                shared_mem_bytes: 0,
            };
            launch!(
                backend,
                "part_post_sizes",
                one,
                &self.totals,
                &self.digit.fanout,
                &low.outside,
                &post.words,
                &post.ticket
            )?;
        }
        // part_sweepRxI_K(keys[n], keys_out[n] or 0, n, fn, counts, totals, chunk_rows,
        // offsets[fanout + 1] or 0, cols): one launch per group, keys with the first.
        let mut at = 0;
        for (g, (end, sweep)) in sweep_groups(radix, self.key_bits, self.cols)?
            .into_iter()
            .enumerate()
        {
            let mut cols = Columns::of(&self.cols[at..end]);
            cols.id_base = self.low_words.map_or(0, |l| l.id_base);
            at = end;
            let (keys_out, offsets) = if g == 0 {
                (self.keys_out, self.offsets)
            } else {
                (0u64, 0u64)
            };
            // part_sweepRxI_K(..., cols), and the low words' part_sweep16x16_low_u64(..., cols,
            // members or 0, member_words).
            let name = match self.low_words {
                Some(_) => LOW_WORDS_SWEEP,
                None => sweep.name,
            };
            let f = backend.function_with_dynamic_shared(&KERNELS, name)?;
            let mut l = backend.stream().launch_builder(&f);
            l.arg(&self.keys_in)
                .arg(&keys_out)
                .arg(&self.n)
                .arg(&self.digit)
                .arg(&self.counts)
                .arg(&self.totals)
                .arg(&self.plan.chunk_rows)
                .arg(&offsets)
                .arg(&cols);
            if let Some(low) = &self.low_words {
                l.arg(&low.members).arg(&low.member_words);
            }
            // SAFETY: the arguments are the kernel's C signature in order, with device
            // addresses valid for the element counts it states (checked by the callers).
            unsafe { l.launch(self.plan.grid(sweep.smem)) }.map_err(|e| Error::Driver {
                op: name,
                message: format!("{e:?}"),
            })?;
        }
        Ok(())
    }
}

fn ptr_in<T>(backend: &CudaBackend, v: &CudaView<'_, T>) -> u64 {
    v.device_ptr(backend.stream()).0
}

fn ptr_out<T>(backend: &CudaBackend, v: &mut CudaViewMut<'_, T>) -> u64 {
    v.device_ptr_mut(backend.stream()).0
}

fn zero_offsets(backend: &CudaBackend, offsets: &mut CudaViewMut<'_, u64>) -> Result<()> {
    backend
        .stream()
        .memset_zeros(offsets)
        .map_err(|e| Error::Driver {
            op: "clearing partition offsets",
            message: format!("{e:?}"),
        })
}

/// Stable radix partition by key bits `bits` (see [`crate::RadixPartition`]): writes the keys
/// to `keys_out`, each payload pair's input to its output, the row ids (when given) and the
/// `2^width + 1` offsets. With at most one column (a payload or the row ids) this is CUB's
/// radix sort on `bits`, its temporary storage in `scratch` (row ids are generated into a
/// buffer of their own, freed in stream order); otherwise ranges over 8 bits run as LSD passes
/// through temporary columns held in `scratch`.
///
/// # Errors
/// As [`crate::RadixPartition::radix_partition`], plus [`Error::LengthMismatch`] for outputs of
/// the wrong length and [`Error::InvalidArgument`] for a payload pair of two widths.
#[allow(clippy::too_many_arguments)] // inputs, three kinds of outputs, bits, scratch
pub fn radix_partition<K: Key>(
    backend: &CudaBackend,
    keys_in: &CudaView<'_, K>,
    keys_out: &mut CudaViewMut<'_, K>,
    payloads: &[(ColumnIn<'_>, ColumnOut<'_>)],
    row_ids: Option<ColumnOut<'_>>,
    offsets: &mut CudaViewMut<'_, u64>,
    bits: Range<u32>,
    scratch: &mut Scratch,
) -> Result<()> {
    let n = keys_in.len();
    const WHAT: &str = "radix_partition keys vs column";
    Error::check_len(WHAT, n, keys_out.len())?;
    let (specs, ids) = col_specs(WHAT, n, n, payloads, &row_ids)?;
    let fanout = radix_fanout::<K>(&bits)?;
    Error::check_len(
        "radix_partition offsets vs fan-out + 1",
        fanout + 1,
        offsets.len(),
    )?;
    if n == 0 {
        return zero_offsets(backend, offsets);
    }
    let mut moved: Vec<ColSpec> = specs.iter().copied().chain(ids).collect();
    let (in_keys, out_keys) = (ptr_in(backend, keys_in), ptr_out(backend, keys_out));
    let out_offsets = ptr_out(backend, offsets);
    // The output keys, sorted by the digit of `bits` once the passes are done.
    let sorted = SortedKeys {
        key_bytes: size_of::<K>(),
        keys: out_keys,
        n,
        shift: bits.start,
        fanout,
    };
    if let [] | [_] = moved[..] {
        sort_partition(backend, in_keys, &sorted, moved.first(), bits, scratch)?;
        return sorted.offsets(backend, out_offsets);
    }
    let widths = pass_widths(bits.end - bits.start);
    let passes = widths.len();
    let plan = Pass::plan(
        backend,
        n,
        &DigitFn::radix(bits.start, widths[0]),
        K::BITS,
        &moved,
    )?;
    // Scratch: histogram, then (more than one pass) a temporary copy of every column.
    let hist = plan.histogram_bytes(256);
    let tmp_bytes = |w: usize| align(n * w);
    let mut total = hist;
    if passes > 1 {
        total += tmp_bytes(size_of::<K>());
        total += moved
            .iter()
            .map(|c| tmp_bytes(c.width as usize))
            .sum::<usize>();
    }
    let base = scratch.reserve(backend, total)?;
    let counts = base;
    let totals = base + align(256 * 8 * plan.chunks as usize) as u64;
    // Temporary twin of each column (keys first), and the final destinations.
    let mut at = base + hist as u64;
    let mut tmp = |w: usize| {
        let p = at;
        at += tmp_bytes(w) as u64;
        p
    };
    let tmp_keys = if passes > 1 { tmp(size_of::<K>()) } else { 0 };
    let tmp_cols: Vec<u64> = if passes > 1 {
        moved.iter().map(|c| tmp(c.width as usize)).collect()
    } else {
        vec![0; moved.len()]
    };
    let final_cols: Vec<u64> = moved.iter().map(|c| c.dst).collect();
    let mut src_keys = in_keys;
    let mut shift = bits.start;
    for (p, &w) in widths.iter().enumerate() {
        // The pass that writes the final columns alternates so that the last pass does.
        let to_final = (passes - 1 - p) & 1 == 0;
        let dst_keys = if to_final { out_keys } else { tmp_keys };
        for (i, c) in moved.iter_mut().enumerate() {
            c.dst = if to_final { final_cols[i] } else { tmp_cols[i] };
        }
        Pass {
            key_bits: K::BITS,
            keys_in: src_keys,
            keys_out: dst_keys,
            n: n as u64,
            digit: DigitFn::radix(shift, w),
            cols: &moved,
            offsets: if passes == 1 { out_offsets } else { 0 },
            counts,
            totals,
            plan,
            low_words: None,
        }
        .run(backend)?;
        // This pass's outputs are the next one's inputs (row ids included).
        src_keys = dst_keys;
        for c in moved.iter_mut() {
            c.src = c.dst;
        }
        shift += w;
    }
    if passes > 1 {
        sorted.offsets(backend, out_offsets)?;
    }
    Ok(())
}

/// Keys at a device address, sorted by the digit of `log2(fanout)` bits at `shift`.
struct SortedKeys {
    key_bytes: usize,
    keys: u64,
    n: usize,
    shift: u32,
    fanout: usize,
}

impl SortedKeys {
    /// Writes the `fanout + 1` partition offsets (each digit's first position, then `n`) to
    /// `offsets`: by a binary search per offset when those read fewer keys than a pass over
    /// them, else by the pass.
    fn offsets(&self, backend: &CudaBackend, offsets: u64) -> Result<()> {
        let searches = (self.fanout as u64 + 1) * u64::from(usize::BITS - self.n.leading_zeros());
        let (name, threads) = match (searches <= self.n as u64, self.key_bytes == 4) {
            (true, true) => ("part_offsets_sorted_u32", self.fanout + 1),
            (true, false) => ("part_offsets_sorted_u64", self.fanout + 1),
            (false, true) => ("part_offsets_linear_u32", self.n + 1),
            (false, false) => ("part_offsets_linear_u64", self.n + 1),
        };
        // part_offsets_*_K(keys[n], n, shift, mask, offsets[fanout + 1], fanout)
        let (n, mask, fanout) = (self.n as u64, self.fanout as u64 - 1, self.fanout as u64);
        launch!(
            backend,
            name,
            backend.grid_stride_config(threads, THREADS),
            &self.keys,
            &n,
            &self.shift,
            &mask,
            &offsets,
            &fanout
        )
    }
}

/// The radix partition of keys with at most one column (a payload, or row ids) as CUB's stable
/// radix sort on the bit range (`joinkit_primitives::cuda::RawRadixSort`): for one column its
/// onesweep passes beat the multi-column scatter (on an H200, one 8-bit pass of 2^28 4-byte
/// keys and values 2.29 against 3.39 ms). CUB's temporary storage holds a second copy of the
/// keys and the column; row ids are generated into a buffer first.
fn sort_partition(
    backend: &CudaBackend,
    keys_in: u64,
    sorted: &SortedKeys,
    column: Option<&ColSpec>,
    bits: Range<u32>,
    scratch: &mut Scratch,
) -> Result<()> {
    let row_ids = match column {
        Some(c) if c.src == 0 => Some(iota(backend, sorted.n, c.width)?),
        _ => None,
    };
    let sort = RawRadixSort {
        key_bytes: sorted.key_bytes,
        keys_in,
        keys_out: sorted.keys,
        values: column.map(|c| {
            let src = row_ids
                .as_ref()
                .map_or(c.src, |ids| ColumnIn::from_column(ids).ptr);
            (c.width as usize, src, c.dst)
        }),
        n: sorted.n,
        bits,
    };
    // SAFETY: the caller checked that keys and column hold n rows of these widths in and out,
    // and outputs overlap no input; the row ids live until the stream-ordered free below.
    unsafe { sort.run_with(backend, scratch) }?;
    drop(row_ids);
    Ok(())
}

/// `0, 1, ..., n - 1` in a new column of `width` bytes.
fn iota(backend: &CudaBackend, n: usize, width: u32) -> Result<Column<CudaBackend>> {
    Ok(if width == 4 {
        let mut ids = backend.alloc::<u32>(n)?;
        backend.iota(&mut ids, 0)?;
        Column::U32(ids)
    } else {
        let mut ids = backend.alloc::<u64>(n)?;
        backend.iota(&mut ids, 0)?;
        Column::U64(ids)
    })
}

/// Power-of-two hash fan-outs from this one up run as radix partitions of the hashed keys
/// (CUB's passes for one moved column), where the one-pass kernel's runs of a partition in a
/// tile get short (H200, 2^28 rows, 4-byte keys and payloads: see docs/results/primitives.md).
const RADIX_HASH_FANOUT: usize = 512;

/// `keys_out[i]` = the seeded hash of `keys_in[i]` at the key's width
/// (`joinkit_cuda::hash::hash32` / `hash64`, whose low 32 bits [`crate::hash_partition_of`]
/// partitions by): a bijection of the key, undone by [`unhash_keys`].
///
/// # Errors
/// [`Error::LengthMismatch`] when the lengths differ; driver errors.
pub fn hash_keys<K: Key>(
    backend: &CudaBackend,
    keys_in: &CudaView<'_, K>,
    keys_out: &mut CudaViewMut<'_, K>,
    seed: u32,
) -> Result<()> {
    let n = keys_in.len();
    Error::check_len("hash_keys input vs output", n, keys_out.len())?;
    if n == 0 {
        return Ok(());
    }
    let name = if K::BITS == 32 {
        "part_hash_keys_u32"
    } else {
        "part_hash_keys_u64"
    };
    let (src, dst, n64) = (
        ptr_in(backend, keys_in),
        ptr_out(backend, keys_out),
        n as u64,
    );
    launch!(
        backend,
        name,
        backend.grid_stride_config(n, THREADS),
        &src,
        &dst,
        &n64,
        &seed
    )
}

/// Undoes [`hash_keys`] with the same `seed`, in place.
///
/// # Errors
/// Driver errors.
pub fn unhash_keys<K: Key>(
    backend: &CudaBackend,
    keys: &mut CudaViewMut<'_, K>,
    seed: u32,
) -> Result<()> {
    let n = keys.len();
    if n == 0 {
        return Ok(());
    }
    let name = if K::BITS == 32 {
        "part_unhash_keys_u32"
    } else {
        "part_unhash_keys_u64"
    };
    let (ptr, n64) = (ptr_out(backend, keys), n as u64);
    launch!(
        backend,
        name,
        backend.grid_stride_config(n, THREADS),
        &ptr,
        &n64,
        &seed
    )
}

/// Hash partition into `fanout` partitions by [`crate::hash_partition_of`] with `seed` (see
/// [`crate::HashPartition`]): writes keys, payloads, row ids and `fanout + 1` offsets.
///
/// # Errors
/// As [`crate::HashPartition::hash_partition`], plus [`Error::LengthMismatch`] for outputs of
/// the wrong length and [`Error::InvalidArgument`] for a payload pair of two widths.
#[allow(clippy::too_many_arguments)] // inputs, three kinds of outputs, fan-out, seed, scratch
pub fn hash_partition<K: Key>(
    backend: &CudaBackend,
    keys_in: &CudaView<'_, K>,
    keys_out: &mut CudaViewMut<'_, K>,
    payloads: &[(ColumnIn<'_>, ColumnOut<'_>)],
    row_ids: Option<ColumnOut<'_>>,
    offsets: &mut CudaViewMut<'_, u64>,
    fanout: usize,
    seed: u32,
    scratch: &mut Scratch,
) -> Result<()> {
    let n = keys_in.len();
    const WHAT: &str = "hash_partition keys vs column";
    Error::check_len(WHAT, n, keys_out.len())?;
    let (mut specs, ids) = col_specs(WHAT, n, n, payloads, &row_ids)?;
    let fanout = hash_fanout(fanout)?;
    Error::check_len(
        "hash_partition offsets vs fan-out + 1",
        fanout + 1,
        offsets.len(),
    )?;
    if n == 0 {
        return zero_offsets(backend, offsets);
    }
    if fanout.is_power_of_two() && fanout >= RADIX_HASH_FANOUT {
        // A power-of-two fan-out's partition is the top bits of the hash's low 32 bits, and the
        // hash is a bijection of the key: a stable radix partition of the hashed keys, whose
        // keys are then hashed back.
        let bits = 32 - fanout.trailing_zeros()..32;
        let mut hashed = backend.alloc::<K>(n)?;
        hash_keys(backend, keys_in, &mut hashed.view_mut(), seed)?;
        radix_partition(
            backend,
            &hashed.view(),
            keys_out,
            payloads,
            row_ids,
            offsets,
            bits,
            scratch,
        )?;
        return unhash_keys(backend, keys_out, seed);
    }
    specs.extend(ids);
    let digit = DigitFn::hash(fanout, seed);
    let plan = Pass::plan(backend, n, &digit, K::BITS, &specs)?;
    let counts = scratch.reserve(backend, plan.histogram_bytes(digit.fanout))?;
    Pass {
        key_bits: K::BITS,
        keys_in: ptr_in(backend, keys_in),
        keys_out: ptr_out(backend, keys_out),
        n: n as u64,
        digit,
        cols: &specs,
        offsets: ptr_out(backend, offsets),
        counts,
        totals: counts + align(fanout * 8 * plan.chunks as usize) as u64,
        plan,
        low_words: None,
    }
    .run(backend)
}

/// How [`hash_partition_low_words`] names the rows it moves (see [`crate::RowNames`]).
#[derive(Debug)]
pub enum RowNamesOut<'a> {
    /// Nothing.
    None,
    /// The row ids `from + row` into `out` (as long as the keys).
    Ids {
        /// One id a row.
        out: CudaViewMut<'a, u32>,
        /// The id of row 0.
        from: u32,
    },
    /// The partitions' membership bitmaps ([`crate::LowWords::members`]): `fanout` times
    /// [`crate::member_words`] of the rows.
    Members(CudaViewMut<'a, u32>),
}

/// The partition by `fanout` (at most 16) of 8-byte keys by the seeded hash of their low 32
/// bits as 4-byte keys ([`crate::hash_partition_of`] of those), stable: writes the low words to
/// `keys_out`, the rows' names as `names` asks and the `fanout + 1` offsets, and sets
/// `outside[0]` to a non-zero value when a key lies outside `[window, window + 2^32)` (the
/// caller clears it first). The low words are one-to-one on keys of one such window; the flag
/// tells the caller whether its keys were. With `post`, also posts the partition sizes and
/// the flag before the scatter ([`PostSizes`]); where there are no keys, nothing is posted.
/// See [`crate::LowWordsPartition`].
///
/// # Errors
/// As [`crate::LowWordsPartition::hash_partition_low_words`], plus [`Error::LengthMismatch`] for
/// outputs of another length than the keys (the bitmaps than theirs) or offsets of another
/// length than `fanout + 1`.
#[allow(clippy::too_many_arguments)] // keys in and out, names, offsets, the window, its flag and post
pub fn hash_partition_low_words<K: Key>(
    backend: &CudaBackend,
    keys_in: &CudaView<'_, K>,
    keys_out: &mut CudaViewMut<'_, u32>,
    names: RowNamesOut<'_>,
    offsets: &mut CudaViewMut<'_, u64>,
    (fanout, seed): (usize, u32),
    (window, outside): (u64, &mut CudaViewMut<'_, u32>),
    post: Option<PostSizes>,
    scratch: &mut Scratch,
) -> Result<()> {
    let n = keys_in.len();
    const WHAT: &str = "hash_partition_low_words keys vs output";
    Error::check_len(WHAT, n, keys_out.len())?;
    Error::check_len("the window's flag", 1, outside.len())?;
    let asked = match &names {
        RowNamesOut::None => crate::RowNames::None,
        RowNamesOut::Ids { from, .. } => crate::RowNames::Ids { from: *from },
        RowNamesOut::Members(_) => crate::RowNames::Members,
    };
    let fanout = crate::low_words::check_low_words::<K>(n, fanout, asked)?;
    Error::check_len(
        "hash_partition_low_words offsets vs fan-out + 1",
        fanout + 1,
        offsets.len(),
    )?;
    let member_words = crate::member_words(n);
    let (ids, members, id_base) = match names {
        RowNamesOut::None => (Vec::new(), 0, 0),
        RowNamesOut::Ids { mut out, from } => {
            Error::check_len(WHAT, n, out.len())?;
            let ids = ColSpec {
                src: 0,
                dst: ptr_out(backend, &mut out),
                width: 4,
            };
            (vec![ids], 0, u64::from(from))
        }
        RowNamesOut::Members(mut out) => {
            Error::check_len(
                "hash_partition_low_words bitmaps vs fan-out times their words",
                fanout * member_words,
                out.len(),
            )?;
            (Vec::new(), ptr_out(backend, &mut out), 0)
        }
    };
    if n == 0 {
        return zero_offsets(backend, offsets);
    }
    let digit = DigitFn::hash_low_words(fanout, seed);
    let plan = Plan::new(backend, n, LOW_WORDS_SWEEP, THREADS as usize * 16 * 8)?;
    let counts = scratch.reserve(backend, plan.histogram_bytes(digit.fanout))?;
    Pass {
        key_bits: 64,
        keys_in: ptr_in(backend, keys_in),
        keys_out: ptr_out(backend, keys_out),
        n: n as u64,
        digit,
        cols: &ids,
        offsets: ptr_out(backend, offsets),
        counts,
        totals: counts + align(fanout * 8 * plan.chunks as usize) as u64,
        plan,
        low_words: Some(LowWordsPass {
            window,
            outside: ptr_out(backend, outside),
            id_base,
            members,
            member_words: member_words as u64,
            post,
        }),
    }
    .run(backend)
}

/// Words of membership bitmaps a block of [`member_row_ids`] reads (`kMemberTile`).
const MEMBER_TILE_WORDS: usize = THREADS as usize * 8;

/// The senders of [`member_row_ids`]' bitmaps, passed by value (`MemberRuns` in the kernels):
/// each run's first word (and the end), and the id of its row 0.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct MemberRuns {
    start: [u64; crate::MAX_LOW_WORDS_FANOUT + 1],
    first: [u32; crate::MAX_LOW_WORDS_FANOUT],
    count: u32,
}
// SAFETY: a plain repr(C) struct of integers, laid out as the kernel's `MemberRuns`.
unsafe impl DeviceRepr for MemberRuns {}

/// The row ids named by `runs`' membership bitmaps, laid end to end in `members`, into `ids`
/// (see [`crate::LowWordsPartition::member_row_ids`]): a count of each tile's set bits, their
/// exclusive sum, and a pass writing each set bit's id at its place. Writes at most
/// `ids.len()` ids.
///
/// # Errors
/// As [`crate::LowWordsPartition::member_row_ids`]; allocation and driver errors.
pub fn member_row_ids(
    backend: &CudaBackend,
    members: &CudaView<'_, u32>,
    runs: &[crate::MemberRun],
    ids: &mut CudaViewMut<'_, u32>,
    scratch: &mut Scratch,
) -> Result<()> {
    crate::low_words::check_member_runs(members.len(), runs)?;
    let words = members.len();
    if words == 0 || ids.is_empty() {
        return Ok(());
    }
    let mut table = MemberRuns {
        start: [0; crate::MAX_LOW_WORDS_FANOUT + 1],
        first: [0; crate::MAX_LOW_WORDS_FANOUT],
        count: runs.len() as u32,
    };
    let mut at = 0u64;
    for (i, r) in runs.iter().enumerate() {
        table.start[i] = at;
        table.first[i] = r.first_id;
        at += r.words as u64;
    }
    table.start[runs.len()] = at;
    let tiles = words.div_ceil(MEMBER_TILE_WORDS);
    let grid = LaunchConfig {
        grid_dim: (
            u32::try_from(tiles).map_err(|_| Error::SizeOverflow("membership bitmap tiles"))?,
            1,
            1,
        ),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    };
    let counts = backend.alloc::<u64>(tiles)?;
    let mut starts = backend.alloc::<u64>(tiles)?;
    let (words_in, n_words, out, out_len) = (
        ptr_in(backend, members),
        words as u64,
        ptr_out(backend, ids),
        ids.len() as u64,
    );
    let counts_out = counts.device_ptr();
    // part_member_tile_counts(words[n_words], n_words, counts[tiles])
    launch!(
        backend,
        "part_member_tile_counts",
        grid,
        &words_in,
        &n_words,
        &counts_out
    )?;
    joinkit_primitives::cuda::exclusive_sum(
        backend,
        &counts.view(),
        &mut starts.view_mut(),
        scratch,
    )?;
    let starts_in = starts.device_ptr();
    // part_member_row_ids(words[n_words], n_words, starts[tiles], runs, out[out_len], out_len)
    launch!(
        backend,
        "part_member_row_ids",
        grid,
        &words_in,
        &n_words,
        &starts_in,
        &table,
        &out,
        &out_len
    )
}

/// Output views of a bucket-chain partition (see [`crate::BucketChains`] for their meaning and
/// [`crate::bucket_pool_buckets`] for the pool size).
#[derive(Debug)]
pub struct ChainsOut<'a, K> {
    /// Key pool: `pool_buckets * bucket_capacity` slots.
    pub keys: CudaViewMut<'a, K>,
    /// Next (older) bucket of each pool bucket's chain: `pool_buckets` entries.
    pub next: CudaViewMut<'a, u32>,
    /// Newest bucket of each partition: `fanout` entries.
    pub heads: CudaViewMut<'a, u32>,
    /// Rows of each partition: `fanout` entries.
    pub counts: CudaViewMut<'a, u64>,
    /// One entry: buckets taken from the pool.
    pub used: CudaViewMut<'a, u32>,
}

/// Bucket-chain partition (see [`crate::BucketChainPartition`]); payload and row-id outputs
/// are pools of `pool_buckets * bucket_capacity` slots like `out.keys`.
///
/// # Errors
/// As [`crate::BucketChainPartition::bucket_chain_partition`], plus
/// [`Error::LengthMismatch`] for outputs of the wrong length.
#[allow(clippy::too_many_arguments)] // inputs, outputs, partitioner, capacity, scratch
pub fn bucket_chain_partition<K: Key>(
    backend: &CudaBackend,
    keys_in: &CudaView<'_, K>,
    payloads: &[(ColumnIn<'_>, ColumnOut<'_>)],
    row_ids: Option<ColumnOut<'_>>,
    mut out: ChainsOut<'_, K>,
    by: &Partitioner,
    bucket_capacity: usize,
    scratch: &mut Scratch,
) -> Result<()> {
    let n = keys_in.len();
    let fanout = by.fanout::<K>()?;
    let pool = bucket_pool_buckets(n, fanout, bucket_capacity)?;
    let slots = pool * bucket_capacity;
    const WHAT: &str = "bucket_chain_partition pool slots vs column";
    Error::check_len(WHAT, slots, out.keys.len())?;
    let (mut specs, ids) = col_specs(WHAT, n, slots, payloads, &row_ids)?;
    specs.extend(ids);
    if specs.len() > MAX_BUCKET_COLUMNS {
        return Err(crate::bucket::too_many_columns(specs.len()));
    }
    Error::check_len(
        "bucket_chain_partition next vs pool buckets",
        pool,
        out.next.len(),
    )?;
    Error::check_len(
        "bucket_chain_partition heads vs fan-out",
        fanout,
        out.heads.len(),
    )?;
    Error::check_len(
        "bucket_chain_partition counts vs fan-out",
        fanout,
        out.counts.len(),
    )?;
    Error::check_len("bucket_chain_partition used", 1, out.used.len())?;
    let digit = match by {
        Partitioner::Radix(bits) => DigitFn::radix(bits.start, bits.end - bits.start),
        Partitioner::Hash { fanout, seed } => DigitFn::hash(*fanout, *seed),
    };
    let state = scratch.reserve(backend, fanout * 8)?;
    let (heads, counts, used) = (
        ptr_out(backend, &mut out.heads),
        ptr_out(backend, &mut out.counts),
        ptr_out(backend, &mut out.used),
    );
    let (f32_, cap32) = (fanout as u32, bucket_capacity as u32);
    // part_bucket_init(state[fanout], counts[fanout], used[1], fanout, cap)
    let small = backend.grid_stride_config(fanout, THREADS);
    launch!(
        backend,
        "part_bucket_init",
        small,
        &state,
        &counts,
        &used,
        &f32_,
        &cap32
    )?;
    if n > 0 {
        let radix = digit.radix_size();
        let name = bucket_name(radix, K::BITS);
        let plan = Plan::new(backend, n, name, 0)?;
        let cols = Columns::of(&specs);
        let (keys, pool_keys, next) = (
            ptr_in(backend, keys_in),
            ptr_out(backend, &mut out.keys),
            ptr_out(backend, &mut out.next),
        );
        let (n64, pool32) = (n as u64, pool as u32);
        // part_bucketR_K(keys[n], pool_keys[pool * cap], n, fn, state, next[pool], counts,
        // used, pool, cap, chunk_rows, cols (pools of pool * cap))
        launch!(
            backend,
            name,
            plan.grid(0),
            &keys,
            &pool_keys,
            &n64,
            &digit,
            &state,
            &next,
            &counts,
            &used,
            &pool32,
            &cap32,
            &plan.chunk_rows,
            &cols
        )?;
    }
    // part_bucket_heads(state[fanout], heads[fanout], fanout)
    launch!(backend, "part_bucket_heads", small, &state, &heads, &f32_)
}

/// Output buffers of a contiguous partition call, borrowed for the view-level function.
pub(crate) struct Outs<'a, K> {
    pub(crate) keys: CudaViewMut<'a, K>,
    pub(crate) pairs: Vec<(ColumnIn<'a>, ColumnOut<'a>)>,
    pub(crate) row_ids: Option<ColumnOut<'a>>,
    pub(crate) offsets: CudaViewMut<'a, u64>,
    pub(crate) scratch: &'a mut Scratch,
}

/// Allocates the outputs of a contiguous partition, runs the view-level `run` on them.
pub(crate) fn owned_partition<K: Key>(
    backend: &CudaBackend,
    keys: &DeviceBuffer<K>,
    payloads: &[Column<CudaBackend>],
    row_ids: RowIds,
    fanout: usize,
    run: impl FnOnce(Outs<'_, K>) -> Result<()>,
) -> Result<Partitioned<CudaBackend, K>> {
    let n = keys.len();
    let mut keys_out = backend.alloc::<K>(n)?;
    let mut cols = payloads
        .iter()
        .map(|c| alloc_like(backend, c, n))
        .collect::<Result<Vec<_>>>()?;
    let mut ids = alloc_row_ids(backend, n, row_ids)?;
    let mut offsets = backend.alloc::<u64>(fanout + 1)?;
    let mut scratch = Scratch::new();
    run(Outs {
        keys: keys_out.view_mut(),
        pairs: payloads
            .iter()
            .zip(cols.iter_mut())
            .map(|(i, o)| (ColumnIn::from_column(i), ColumnOut::from_column(o)))
            .collect(),
        row_ids: ids.as_mut().map(ColumnOut::from_column),
        offsets: offsets.view_mut(),
        scratch: &mut scratch,
    })?;
    Ok(Partitioned {
        keys: keys_out,
        payloads: cols,
        row_ids: ids,
        offsets,
    })
}

/// Allocates the outputs of a bucket-chain partition and fills them.
pub(crate) fn owned_bucket_chains<K: Key>(
    backend: &CudaBackend,
    keys: &DeviceBuffer<K>,
    payloads: &[Column<CudaBackend>],
    by: &Partitioner,
    bucket_capacity: usize,
    row_ids: RowIds,
) -> Result<crate::BucketChains<CudaBackend, K>> {
    let n = keys.len();
    let (fanout, pool) =
        crate::bucket::check_bucket::<K, CudaBackend>(n, payloads, by, bucket_capacity, row_ids)?;
    let slots = pool * bucket_capacity;
    let mut pool_keys = backend.alloc::<K>(slots)?;
    let mut cols = payloads
        .iter()
        .map(|c| alloc_like(backend, c, slots))
        .collect::<Result<Vec<_>>>()?;
    let mut ids = alloc_row_ids(backend, slots, row_ids)?;
    let mut next = backend.alloc::<u32>(pool)?;
    let mut heads = backend.alloc::<u32>(fanout)?;
    let mut counts = backend.alloc::<u64>(fanout)?;
    let mut used = backend.alloc::<u32>(1)?;
    let pairs: Vec<(ColumnIn<'_>, ColumnOut<'_>)> = payloads
        .iter()
        .zip(cols.iter_mut())
        .map(|(i, o)| (ColumnIn::from_column(i), ColumnOut::from_column(o)))
        .collect();
    bucket_chain_partition(
        backend,
        &keys.view(),
        &pairs,
        ids.as_mut().map(ColumnOut::from_column),
        ChainsOut {
            keys: pool_keys.view_mut(),
            next: next.view_mut(),
            heads: heads.view_mut(),
            counts: counts.view_mut(),
            used: used.view_mut(),
        },
        by,
        bucket_capacity,
        &mut Scratch::new(),
    )?;
    drop(pairs);
    Ok(crate::BucketChains {
        keys: pool_keys,
        payloads: cols,
        row_ids: ids,
        next,
        heads,
        counts,
        used,
        bucket_capacity,
    })
}
