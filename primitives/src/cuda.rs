//! View-level CUDA entry points, for reuse inside other GPU projects: they work on cudarc views
//! of buffers the caller owns, queue work on the backend's stream (build one on your own stream
//! with `CudaBackend::with_stream`), take caller-provided [`Scratch`] and never synchronize.
//!
//! Lengths and bit ranges are checked; the caller guarantees the views do not overlap. Kernels
//! never read or write outside the views they are given, whatever the data: index-driven
//! kernels (gather, scatter, compaction, expansion) compare every index against its target's
//! length and record the first bad input position in a [`BoundsCheck`] the caller reads when
//! it chooses to synchronize.
//!
//! `cub_sys` is re-exported for callers (benchmarks) that want CUB without joinkit's wrappers.

use std::ffi::c_void;
use std::ops::Range;

pub use cub_sys;
use cub_sys::cubsys_status;
use joinkit_cuda::cudarc::driver::{
    CudaFunction, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceRepr, LaunchConfig,
    PushKernelArg,
};
use joinkit_cuda::{
    Backend, CudaBackend, DeviceBuffer, Element, Error, Key, Result, Scratch, driver,
};

use crate::scan::Summable;

/// This crate's kernels (`kernels/*.cu`).
static KERNELS: joinkit_cuda::KernelModule = joinkit_cuda::kernel_module!();

/// Threads per block of the tiled kernels (`jkp::kBlock`).
const BLOCK: u32 = 256;
/// Elements per tile of the tiled kernels (`jkp::kTile`).
pub const TILE: usize = 2048;
/// Columns one multi-column launch handles (`jkp::kMaxCols`); more columns take more launches,
/// each reading the map or flags again.
pub const MAX_COLUMNS: usize = 8;

/// Column addresses passed to a kernel by value (mirrors `jkp::ColumnPtrs`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ColumnPtrs {
    src: [u64; MAX_COLUMNS],
    out: [u64; MAX_COLUMNS],
}

// SAFETY: plain old data (16 device addresses) with the layout of `jkp::ColumnPtrs`, which the
// kernels take by value.
unsafe impl DeviceRepr for ColumnPtrs {}

/// The kernel of `names` (`[u32_u32, u32_u64, u64_u32, u64_u64]`) for two type widths.
fn typed2(names: [&'static str; 4], a: u32, b: u32) -> &'static str {
    names[usize::from(a == 64) * 2 + usize::from(b == 64)]
}

/// The kernel of `names` (`[u32, u64]`) for a type width.
fn typed1(names: [&'static str; 2], a: u32) -> &'static str {
    names[usize::from(a == 64)]
}

/// A persistent-block launch for `tiles` tiles: as many blocks as the device keeps resident
/// (SM count times the kernel's occupancy; the tiled kernels use no dynamic shared memory), no
/// more than there are tiles.
fn tiled_config(backend: &CudaBackend, f: &CudaFunction, tiles: u64) -> Result<LaunchConfig> {
    let per_sm = f
        .occupancy_max_active_blocks_per_multiprocessor(BLOCK, 0, None)
        .map_err(driver("reading kernel occupancy"))?
        .max(1);
    let resident = u64::from(backend.info().sm_count.max(1)) * u64::from(per_sm);
    Ok(LaunchConfig {
        grid_dim: (resident.min(tiles).max(1) as u32, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    })
}

fn tiles_of(n: usize) -> u64 {
    (n as u64).div_ceil(TILE as u64)
}

/// The kernel of `names` (`[u32, u64, i32, i64]`) for an element type (sealed: these four).
fn by_type<T: Element>(names: [&'static str; 4]) -> &'static str {
    match T::NAME {
        "u32" => names[0],
        "u64" => names[1],
        "i32" => names[2],
        _ => names[3],
    }
}

/// Whether every address is 16-byte aligned (the kernels' vector path).
fn aligned(addresses: &[u64]) -> i32 {
    i32::from(addresses.iter().all(|a| a % 16 == 0))
}

/// Reads element `i` of a view back to the host (synchronizes the stream).
pub(crate) fn read_at<T: Element>(
    backend: &CudaBackend,
    view: &CudaView<'_, T>,
    i: usize,
) -> Result<T> {
    backend.read_element(view, i)
}

/// A device status word that index-driven kernels record bad input positions in: the first
/// (smallest) bad position wins, so both backends report the same element. Reading it back
/// ([`BoundsCheck::take`]) synchronizes the stream; not reading it costs nothing beyond one
/// compare per element in the kernels, which never touch memory outside their views anyway.
#[derive(Debug)]
pub struct BoundsCheck {
    /// `None`: nothing is recorded (trusted input; the kernels get a null status pointer).
    word: Option<DeviceBuffer<u64>>,
}

impl BoundsCheck {
    /// A status word with nothing recorded.
    ///
    /// # Errors
    /// Allocation and driver errors.
    pub fn new(backend: &CudaBackend) -> Result<Self> {
        let mut word = backend.alloc::<u64>(1)?;
        backend.fill(&mut word, u64::MAX)?;
        Ok(Self { word: Some(word) })
    }

    /// A check that records nothing and allocates nothing (for trusted input: the kernels still
    /// never touch memory outside their views, but nobody learns of bad entries).
    pub(crate) fn disabled() -> Self {
        Self { word: None }
    }

    fn ptr(&self) -> u64 {
        self.word.as_ref().map_or(0, DeviceBuffer::device_ptr)
    }

    /// The first bad input position recorded since creation or the last `take`, and clears
    /// it. Waits for the stream.
    ///
    /// # Errors
    /// Driver errors (including ones from earlier asynchronous launches).
    pub fn take(&mut self, backend: &CudaBackend) -> Result<Option<u64>> {
        let Some(word) = self.word.as_mut() else {
            return Ok(None);
        };
        let v = backend.download(word)?[0];
        if v == u64::MAX {
            return Ok(None);
        }
        backend.fill(word, u64::MAX)?;
        Ok(Some(v))
    }

    /// [`BoundsCheck::take`], turned into [`Error::IndexOutOfRange`] naming the offending index
    /// of `map` (read back from the device) and the indexed length `len`.
    pub(crate) fn take_index_error<I: Key>(
        &mut self,
        backend: &CudaBackend,
        what: &'static str,
        map: &CudaView<'_, I>,
        len: usize,
    ) -> Result<()> {
        match self.take(backend)? {
            None => Ok(()),
            Some(pos) => Err(Error::IndexOutOfRange {
                what,
                index: read_at(backend, map, pos as usize)?.to_u64(),
                len,
            }),
        }
    }
}

/// `outs[c][i] = srcs[c][map[i]]` for every column `c`, reading each map element once per
/// [`MAX_COLUMNS`] columns: 16-byte map loads and output stores where the addresses allow,
/// eight independent loads in flight per thread. Clustered maps (i/2, sorted row ids, small
/// shuffles) take the same kernel: their source lines hit L2, so no flag and no staging is
/// needed. Out-of-range map entries are recorded in `check` and get 0.
///
/// # Errors
/// [`Error::LengthMismatch`] when the columns differ in length, when there are not as many
/// outputs as sources, or an output's length differs from the map's; driver errors.
pub fn gather_columns<T: Element, I: Key>(
    backend: &CudaBackend,
    srcs: &[CudaView<'_, T>],
    map: &CudaView<'_, I>,
    outs: &mut [CudaViewMut<'_, T>],
    check: &mut BoundsCheck,
) -> Result<()> {
    Error::check_len("gather columns vs outputs", srcs.len(), outs.len())?;
    let src_len = srcs.first().map_or(0, CudaView::len);
    for s in srcs {
        Error::check_len("gather source columns", src_len, s.len())?;
    }
    for o in outs.iter() {
        Error::check_len("gather map vs output", map.len(), o.len())?;
    }
    if map.is_empty() {
        return Ok(());
    }
    let f = backend.function(
        &KERNELS,
        typed2(
            [
                "gather_u32_u32",
                "gather_u32_u64",
                "gather_u64_u32",
                "gather_u64_u64",
            ],
            T::BITS,
            I::BITS,
        ),
    )?;
    let cfg = tiled_config(backend, &f, tiles_of(map.len()))?;
    let map_ptr = ptr(backend, map);
    let (n, src_len, status) = (map.len() as u64, src_len as u64, check.ptr());
    // Zero columns still run once: the launch checks the map.
    let groups = srcs.len().div_ceil(MAX_COLUMNS).max(1);
    for g in 0..groups {
        let range = (g * MAX_COLUMNS).min(srcs.len())..((g + 1) * MAX_COLUMNS).min(srcs.len());
        let mut cols = ColumnPtrs::default();
        let mut addresses = vec![map_ptr];
        for (slot, c) in range.clone().enumerate() {
            cols.src[slot] = ptr(backend, &srcs[c]);
            cols.out[slot] = ptr_mut(backend, &mut outs[c]);
            addresses.push(cols.out[slot]);
        }
        let ncols = range.len() as i32;
        let vector = aligned(&addresses);
        let mut b = backend.stream().launch_builder(&f);
        b.arg(&cols)
            .arg(&ncols)
            .arg(&src_len)
            .arg(&map_ptr)
            .arg(&n)
            .arg(&vector)
            .arg(&status);
        // SAFETY: the kernel reads n map entries, src_len elements of each of the ncols source
        // columns (only at indices it has checked against src_len) and writes n elements of each
        // output; all lengths were checked above. `status` is the check's live status word or
        // null (the kernel then records nothing).
        unsafe { b.launch(cfg) }.map_err(driver("launching gather"))?;
    }
    Ok(())
}

/// `out[i] = src[map[i]]` (one column of [`gather_columns`]).
///
/// # Errors
/// As [`gather_columns`].
pub fn gather<T: Element, I: Key>(
    backend: &CudaBackend,
    src: &CudaView<'_, T>,
    map: &CudaView<'_, I>,
    out: &mut CudaViewMut<'_, T>,
    check: &mut BoundsCheck,
) -> Result<()> {
    gather_columns(
        backend,
        std::slice::from_ref(src),
        map,
        std::slice::from_mut(out),
        check,
    )
}

/// `out[map[i]] = src[i]`: the inverse of [`gather`] for a permutation. Out-of-range map entries
/// are recorded in `check` and not written. With duplicate targets, which source lands is
/// unspecified.
///
/// # Errors
/// [`Error::LengthMismatch`] when `src` and `map` differ in length; driver errors.
pub fn scatter<T: Element, I: Key>(
    backend: &CudaBackend,
    src: &CudaView<'_, T>,
    map: &CudaView<'_, I>,
    out: &mut CudaViewMut<'_, T>,
    check: &mut BoundsCheck,
) -> Result<()> {
    Error::check_len("scatter source vs map", src.len(), map.len())?;
    if map.is_empty() {
        return Ok(());
    }
    let f = backend.function(
        &KERNELS,
        typed2(
            [
                "scatter_u32_u32",
                "scatter_u32_u64",
                "scatter_u64_u32",
                "scatter_u64_u64",
            ],
            T::BITS,
            I::BITS,
        ),
    )?;
    let cfg = tiled_config(backend, &f, tiles_of(map.len()))?;
    let (sp, mp, op) = (ptr(backend, src), ptr(backend, map), ptr_mut(backend, out));
    let (n, out_len, status) = (map.len() as u64, out.len() as u64, check.ptr());
    let vector = aligned(&[sp, mp]);
    let mut b = backend.stream().launch_builder(&f);
    b.arg(&sp)
        .arg(&mp)
        .arg(&n)
        .arg(&op)
        .arg(&out_len)
        .arg(&vector)
        .arg(&status);
    // SAFETY: reads n elements of src and map (lengths checked), writes `out` only at indices
    // below out_len.
    unsafe { b.launch(cfg) }.map_err(driver("launching scatter"))?;
    Ok(())
}

/// `words[i] = lo[i] | hi[i] << 32` (see [`crate::Interleave`]): four rows per thread through
/// 16-byte loads and stores where all three views are 16-byte aligned, row by row otherwise.
///
/// # Errors
/// [`Error::LengthMismatch`] when `lo`, `hi` and `words` differ in length; driver errors.
pub fn interleave(
    backend: &CudaBackend,
    lo: &CudaView<'_, u32>,
    hi: &CudaView<'_, u32>,
    words: &mut CudaViewMut<'_, u64>,
) -> Result<()> {
    Error::check_len("interleave lo vs hi", lo.len(), hi.len())?;
    Error::check_len("interleave lo vs words", lo.len(), words.len())?;
    let columns = [ptr(backend, lo), ptr(backend, hi), ptr_mut(backend, words)];
    launch_interleave(backend, "interleave_u32", columns, lo.len())
}

/// The inverse of [`interleave`]: `lo[i]` and `hi[i]` are the low and high halves of
/// `words[i]`.
///
/// # Errors
/// [`Error::LengthMismatch`] when `words`, `lo` and `hi` differ in length; driver errors.
pub fn deinterleave(
    backend: &CudaBackend,
    words: &CudaView<'_, u64>,
    lo: &mut CudaViewMut<'_, u32>,
    hi: &mut CudaViewMut<'_, u32>,
) -> Result<()> {
    Error::check_len("deinterleave words vs lo", words.len(), lo.len())?;
    Error::check_len("deinterleave words vs hi", words.len(), hi.len())?;
    let columns = [
        ptr_mut(backend, lo),
        ptr_mut(backend, hi),
        ptr(backend, words),
    ];
    launch_interleave(backend, "deinterleave_u32", columns, words.len())
}

/// Launches `kernel` of `kernels/interleave.cu` on the addresses of `n` rows of lo, hi and
/// words (both kernels take them in that order); nothing for no rows.
fn launch_interleave(
    backend: &CudaBackend,
    kernel: &'static str,
    [lo, hi, words]: [u64; 3],
    n: usize,
) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let f = backend.function(&KERNELS, kernel)?;
    // One thread per four rows: the vector path's unit of work.
    let cfg = backend.grid_stride_config(n.div_ceil(4), BLOCK);
    let (n64, vector) = (n as u64, aligned(&[lo, hi, words]));
    let mut b = backend.stream().launch_builder(&f);
    b.arg(&lo).arg(&hi).arg(&words).arg(&n64).arg(&vector);
    // SAFETY: both kernels touch n elements of each of lo, hi and words, which the callers
    // checked hold n; 16-byte accesses only when `aligned` saw every address aligned.
    unsafe { b.launch(cfg) }.map_err(driver("launching interleave"))?;
    Ok(())
}

/// `flags[i] = range.start <= column[i] < range.end` ([`crate::Filter::flag_range`] on views).
///
/// # Errors
/// [`Error::LengthMismatch`] when `flags` and `column` differ in length; driver errors.
pub fn flag_range<T: Element + Ord>(
    backend: &CudaBackend,
    column: &CudaView<'_, T>,
    range: Range<T>,
    flags: &mut CudaViewMut<'_, u32>,
) -> Result<()> {
    Error::check_len("flag_range column vs flags", column.len(), flags.len())?;
    let n = column.len();
    if n == 0 {
        return Ok(());
    }
    let f = backend.function(
        &KERNELS,
        by_type::<T>([
            "flag_range_u32",
            "flag_range_u64",
            "flag_range_i32",
            "flag_range_i64",
        ]),
    )?;
    let (cp, fp, n64) = (ptr(backend, column), ptr_mut(backend, flags), n as u64);
    let mut b = backend.stream().launch_builder(&f);
    b.arg(&cp)
        .arg(&range.start)
        .arg(&range.end)
        .arg(&fp)
        .arg(&n64);
    // SAFETY: reads n elements of `column`, writes n flags; both lengths checked above.
    unsafe { b.launch(backend.grid_stride_config(n, BLOCK)) }
        .map_err(driver("launching flag_range"))?;
    Ok(())
}

/// `flags[i] = left[i] < right[i]` ([`crate::Filter::flag_less`] on views).
///
/// # Errors
/// [`Error::LengthMismatch`] when the three views differ in length; driver errors.
pub fn flag_less<T: Element + Ord>(
    backend: &CudaBackend,
    left: &CudaView<'_, T>,
    right: &CudaView<'_, T>,
    flags: &mut CudaViewMut<'_, u32>,
) -> Result<()> {
    Error::check_len("flag_less left vs right", left.len(), right.len())?;
    Error::check_len("flag_less left vs flags", left.len(), flags.len())?;
    let n = left.len();
    if n == 0 {
        return Ok(());
    }
    let f = backend.function(
        &KERNELS,
        by_type::<T>([
            "flag_less_u32",
            "flag_less_u64",
            "flag_less_i32",
            "flag_less_i64",
        ]),
    )?;
    let (lp, rp) = (ptr(backend, left), ptr(backend, right));
    let (fp, n64) = (ptr_mut(backend, flags), n as u64);
    let mut b = backend.stream().launch_builder(&f);
    b.arg(&lp).arg(&rp).arg(&fp).arg(&n64);
    // SAFETY: reads n elements of `left` and `right`, writes n flags; lengths checked above.
    unsafe { b.launch(backend.grid_stride_config(n, BLOCK)) }
        .map_err(driver("launching flag_less"))?;
    Ok(())
}

/// The order check of [`mark_sorted_matches`]: a device word its kernel sets a bit of when a
/// side is out of order, read back (synchronizing) by [`OrderCheck::take`].
///
/// A check also remembers the left column it has read (address and length): later launches
/// through it over the same column skip the left side's check, and their tiles without right
/// rows do nothing (a caller streaming the right side in chunks pays for the left side once).
/// Use a new check when a left column's contents change.
#[derive(Debug)]
pub struct OrderCheck {
    word: DeviceBuffer<u32>,
    checked_left: Option<(u64, usize)>,
}

impl OrderCheck {
    /// A check with nothing recorded.
    ///
    /// # Errors
    /// Allocation and driver errors.
    pub fn new(backend: &CudaBackend) -> Result<Self> {
        let mut word = backend.alloc::<u32>(1)?;
        backend.fill(&mut word, 0)?;
        Ok(Self {
            word,
            checked_left: None,
        })
    }

    /// `Ok` when both sides were in order since creation or the last `take`; clears the word.
    /// Waits for the stream.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the side out of order; driver errors (including ones
    /// from earlier asynchronous launches).
    pub fn take(&mut self, backend: &CudaBackend) -> Result<()> {
        let bits = backend.download(&self.word)?[0];
        if bits == 0 {
            return Ok(());
        }
        backend.fill(&mut self.word, 0)?;
        self.checked_left = None;
        Err(if bits & 1 != 0 {
            crate::semi::left_unsorted()
        } else {
            crate::semi::right_unsorted()
        })
    }
}

/// [`crate::SortedMatch::mark_sorted_matches`] on views, the order violations recorded in
/// `check` (read it when you choose to synchronize). Queues two launches and allocates the
/// tiles' bounds (8 bytes a [`crate::SORTED_MATCH_TILE`] left rows).
///
/// # Errors
/// [`Error::LengthMismatch`] when flags or marks differ in length from their keys; allocation
/// and driver errors.
pub fn mark_sorted_matches<K: Key>(
    backend: &CudaBackend,
    left_keys: &CudaView<'_, K>,
    left_flags: Option<&CudaView<'_, u32>>,
    right_keys: &CudaView<'_, K>,
    right_flags: Option<&CudaView<'_, u32>>,
    marks: &mut CudaViewMut<'_, u32>,
    check: &mut OrderCheck,
) -> Result<()> {
    crate::semi::check_lengths(
        left_keys.len(),
        left_flags.map(CudaView::len),
        right_keys.len(),
        right_flags.map(CudaView::len),
        marks.len(),
    )?;
    let kernel = typed1(["sorted_match_u32", "sorted_match_u64"], K::BITS);
    let counts = [right_flags.map_or(0, |f| ptr(backend, f))];
    launch_sorted_match(
        backend, kernel, left_keys, left_flags, right_keys, &counts, marks, check,
    )
}

/// [`crate::SortedMatch::mark_sorted_matches_where_less`] on views: a right row counts when
/// `first[j] < second[j]`; otherwise as [`mark_sorted_matches`].
///
/// # Errors
/// As [`mark_sorted_matches`]; [`Error::LengthMismatch`] when `first` or `second` differ in
/// length from the right keys.
pub fn mark_sorted_matches_where_less<K: Key, T: Element + Ord>(
    backend: &CudaBackend,
    left_keys: &CudaView<'_, K>,
    left_flags: Option<&CudaView<'_, u32>>,
    right_keys: &CudaView<'_, K>,
    (first, second): (&CudaView<'_, T>, &CudaView<'_, T>),
    marks: &mut CudaViewMut<'_, u32>,
    check: &mut OrderCheck,
) -> Result<()> {
    let m = right_keys.len();
    crate::semi::check_lengths(
        left_keys.len(),
        left_flags.map(CudaView::len),
        m,
        Some(first.len()),
        marks.len(),
    )?;
    Error::check_len("second vs right keys", m, second.len())?;
    let names = if K::BITS == 32 {
        [
            "sorted_match_less_u32_u32",
            "sorted_match_less_u32_u64",
            "sorted_match_less_u32_i32",
            "sorted_match_less_u32_i64",
        ]
    } else {
        [
            "sorted_match_less_u64_u32",
            "sorted_match_less_u64_u64",
            "sorted_match_less_u64_i32",
            "sorted_match_less_u64_i64",
        ]
    };
    let counts = [ptr(backend, first), ptr(backend, second)];
    let kernel = by_type::<T>(names);
    launch_sorted_match(
        backend, kernel, left_keys, left_flags, right_keys, &counts, marks, check,
    )
}

/// The two launches of a sorted match: the tiles' bounds, then `kernel`, which takes the
/// addresses in `counts` (what makes a right row count) after the right keys. Lengths are
/// checked by the callers.
#[allow(clippy::too_many_arguments)]
fn launch_sorted_match<K: Key>(
    backend: &CudaBackend,
    kernel: &'static str,
    left_keys: &CudaView<'_, K>,
    left_flags: Option<&CudaView<'_, u32>>,
    right_keys: &CudaView<'_, K>,
    counts: &[u64],
    marks: &mut CudaViewMut<'_, u32>,
    check: &mut OrderCheck,
) -> Result<()> {
    let (n, m) = (left_keys.len() as u64, right_keys.len() as u64);
    if n == 0 {
        return Ok(());
    }
    let tiles = n.div_ceil(crate::SORTED_MATCH_TILE as u64);
    let mut bounds = backend.alloc::<u64>(tiles as usize + 1)?;
    let (lp, rp) = (ptr(backend, left_keys), ptr(backend, right_keys));
    let bp = ptr_mut(backend, &mut bounds.view_mut());
    let f = backend.function(
        &KERNELS,
        typed1(
            ["sorted_match_bounds_u32", "sorted_match_bounds_u64"],
            K::BITS,
        ),
    )?;
    let mut b = backend.stream().launch_builder(&f);
    b.arg(&lp).arg(&n).arg(&rp).arg(&m).arg(&bp).arg(&tiles);
    // SAFETY: reads left rows at multiples of the tile (< n) and binary-searches the m right
    // rows; writes tiles + 1 bounds, the length allocated above.
    unsafe { b.launch(backend.grid_stride_config(tiles as usize + 1, BLOCK)) }
        .map_err(driver("launching sorted-match bounds"))?;
    let lf = left_flags.map_or(0, |f| ptr(backend, f));
    let (mp, sp) = (
        ptr_mut(backend, marks),
        ptr_mut(backend, &mut check.word.view_mut()),
    );
    let f = backend.function(&KERNELS, kernel)?;
    let grid = u32::try_from(tiles).map_err(|_| Error::SizeOverflow("sorted match tiles"))?;
    let cfg = LaunchConfig {
        grid_dim: (grid, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    let check_left = i32::from(check.checked_left != Some((lp, left_keys.len())));
    check.checked_left = Some((lp, left_keys.len()));
    let mut b = backend.stream().launch_builder(&f);
    b.arg(&lp).arg(&lf).arg(&n).arg(&rp);
    for c in counts {
        b.arg(c);
    }
    b.arg(&bp).arg(&mp).arg(&sp).arg(&check_left);
    // SAFETY: a block a tile reads its left rows (< n), their flags (n, checked) and the right
    // rows between its bounds, with their flags or predicate columns (m each, checked); bounds
    // outside 0..=m cannot occur (lower bounds of the right side, 0 and m), a reversed pair
    // reads nothing; marks are written only at left rows.
    unsafe { b.launch(cfg) }.map_err(driver("launching sorted match"))?;
    Ok(())
}

/// Length of the per-tile offsets array the compaction functions use for `n` flags: one entry
/// per tile of [`TILE`] flags, plus one for the total.
pub fn compaction_offsets_len(n: usize) -> usize {
    tiles_of(n) as usize + 1
}

/// First step of compaction: per-tile counts of non-zero `flags`, scanned into
/// `tile_offsets` ([`compaction_offsets_len`] entries). The number of kept rows lands in the
/// last entry (read it back to size outputs).
///
/// # Errors
/// [`Error::LengthMismatch`] when `tile_offsets` has the wrong length; CUB, allocation and
/// driver errors.
pub fn compaction_offsets(
    backend: &CudaBackend,
    flags: &CudaView<'_, u32>,
    tile_offsets: &mut CudaViewMut<'_, u64>,
    scratch: &mut Scratch,
) -> Result<()> {
    let n = flags.len();
    Error::check_len(
        "compaction offsets",
        compaction_offsets_len(n),
        tile_offsets.len(),
    )?;
    let f = backend.function(&KERNELS, "flag_counts_u32")?;
    let cfg = tiled_config(backend, &f, tiles_of(n))?;
    let (fp, op) = (ptr(backend, flags), ptr_mut(backend, tile_offsets));
    let (n64, vector) = (n as u64, aligned(&[ptr(backend, flags)]));
    let mut b = backend.stream().launch_builder(&f);
    b.arg(&fp).arg(&n64).arg(&vector).arg(&op);
    // SAFETY: reads n flags, writes tiles + 1 counts (the length checked above).
    unsafe { b.launch(cfg) }.map_err(driver("launching flag counts"))?;
    exclusive_sum_raw::<u64>(backend, op, op, tile_offsets.len(), scratch)
}

/// Stable compaction of columns: the rows of `srcs` whose flag is non-zero, in order, into
/// `outs`, given [`compaction_offsets`] of the same flags. Rows past an output's length are
/// not written; the first such row is recorded in `check`.
///
/// # Errors
/// [`Error::LengthMismatch`] for columns whose length differs from the flags', a count of
/// outputs different from the sources', or offsets of the wrong length; driver errors.
pub fn compact_columns<T: Element>(
    backend: &CudaBackend,
    flags: &CudaView<'_, u32>,
    tile_offsets: &CudaView<'_, u64>,
    srcs: &[CudaView<'_, T>],
    outs: &mut [CudaViewMut<'_, T>],
    check: &mut BoundsCheck,
) -> Result<()> {
    let n = flags.len();
    Error::check_len("compaction columns vs outputs", srcs.len(), outs.len())?;
    Error::check_len(
        "compaction offsets",
        compaction_offsets_len(n),
        tile_offsets.len(),
    )?;
    for s in srcs {
        Error::check_len("compaction column vs flags", n, s.len())?;
    }
    if n == 0 || srcs.is_empty() {
        return Ok(());
    }
    let f = backend.function(&KERNELS, typed1(["compact_u32", "compact_u64"], T::BITS))?;
    let cfg = tiled_config(backend, &f, tiles_of(n))?;
    let (fp, offp, status) = (ptr(backend, flags), ptr(backend, tile_offsets), check.ptr());
    let n64 = n as u64;
    for g in 0..srcs.len().div_ceil(MAX_COLUMNS) {
        let range = g * MAX_COLUMNS..((g + 1) * MAX_COLUMNS).min(srcs.len());
        let mut cols = ColumnPtrs::default();
        let mut addresses = vec![fp];
        let mut out_len = u64::MAX;
        for (slot, c) in range.clone().enumerate() {
            cols.src[slot] = ptr(backend, &srcs[c]);
            cols.out[slot] = ptr_mut(backend, &mut outs[c]);
            addresses.push(cols.src[slot]);
            out_len = out_len.min(outs[c].len() as u64);
        }
        let (ncols, vector) = (range.len() as i32, aligned(&addresses));
        let mut b = backend.stream().launch_builder(&f);
        b.arg(&cols)
            .arg(&ncols)
            .arg(&fp)
            .arg(&n64)
            .arg(&offp)
            .arg(&out_len)
            .arg(&vector)
            .arg(&status);
        // SAFETY: reads n flags, n elements of each source and tiles + 1 offsets (lengths
        // checked); writes each output only below out_len, the shortest output's length.
        unsafe { b.launch(cfg) }.map_err(driver("launching compaction"))?;
    }
    Ok(())
}

/// Row ids of the non-zero `flags`, ascending, into `out` (a `select_if` producing row ids),
/// given [`compaction_offsets`] of the same flags. Ids past `out`'s length are not written; the
/// first such row is recorded in `check`.
///
/// # Errors
/// [`Error::LengthMismatch`] for offsets of the wrong length; [`Error::SizeOverflow`] when row
/// ids do not fit `I`; driver errors.
pub fn flagged_indices<I: Key>(
    backend: &CudaBackend,
    flags: &CudaView<'_, u32>,
    tile_offsets: &CudaView<'_, u64>,
    out: &mut CudaViewMut<'_, I>,
    check: &mut BoundsCheck,
) -> Result<()> {
    let n = flags.len();
    Error::check_len(
        "compaction offsets",
        compaction_offsets_len(n),
        tile_offsets.len(),
    )?;
    crate::select::check_ids::<I>(n)?;
    if n == 0 {
        return Ok(());
    }
    let f = backend.function(
        &KERNELS,
        typed1(["flagged_ids_u32", "flagged_ids_u64"], I::BITS),
    )?;
    let cfg = tiled_config(backend, &f, tiles_of(n))?;
    let (fp, offp, op) = (
        ptr(backend, flags),
        ptr(backend, tile_offsets),
        ptr_mut(backend, out),
    );
    let (n64, out_len, status, vector) = (
        n as u64,
        out.len() as u64,
        check.ptr(),
        aligned(&[ptr(backend, flags)]),
    );
    let mut b = backend.stream().launch_builder(&f);
    b.arg(&fp)
        .arg(&n64)
        .arg(&offp)
        .arg(&op)
        .arg(&out_len)
        .arg(&vector)
        .arg(&status);
    // SAFETY: reads n flags and tiles + 1 offsets (checked), writes `out` only below out_len.
    unsafe { b.launch(cfg) }.map_err(driver("launching flagged ids"))?;
    Ok(())
}

/// CUB `DeviceSelect::Flagged` with byte flags, for callers that hold `u8` flags: the elements
/// of `input` whose flag is non-zero, in order, into `out` (as long as `input`); the count goes
/// to `num_selected[0]` on the device.
///
/// # Errors
/// [`Error::LengthMismatch`] when `flags` or `out` differ from `input` in length or
/// `num_selected` is empty; CUB and allocation errors.
pub fn select_flagged_u8<T: Element>(
    backend: &CudaBackend,
    input: &CudaView<'_, T>,
    flags: &CudaView<'_, u8>,
    out: &mut CudaViewMut<'_, T>,
    num_selected: &mut CudaViewMut<'_, u64>,
    scratch: &mut Scratch,
) -> Result<()> {
    Error::check_len("select input vs flags", input.len(), flags.len())?;
    Error::check_len("select input vs output", input.len(), out.len())?;
    Error::check_len("select count word", 1, num_selected.len().min(1))?;
    let (ip, fp) = (ptr(backend, input), ptr(backend, flags));
    let (op, cp) = (ptr_mut(backend, out), ptr_mut(backend, num_selected));
    let (s, n) = (stream(backend), input.len() as u64);
    with_temp(backend, scratch, "select flagged", |t, b| {
        // SAFETY: input, flags and out hold n elements (checked), num_selected one word.
        unsafe {
            if T::BITS == 32 {
                cub_sys::cubsys_select_flagged_uint32(
                    t, b, ip as _, fp as _, op as _, cp as _, n, s,
                )
            } else {
                cub_sys::cubsys_select_flagged_uint64(
                    t, b, ip as _, fp as _, op as _, cp as _, n, s,
                )
            }
        }
    })
}

/// Vectorized searchsorted: for every key of `a`, the lower (`first b[j] >= key`) and upper
/// (`first b[j] > key`) bound in the ascending `b`. One thread per key of `a`: a binary search
/// for the lower bound, then a gallop from it for the upper (cheap for short runs, logarithmic
/// for giant ones). `a` needs no order, but a sorted `a` keeps neighbouring searches in cache.
///
/// # Errors
/// [`Error::LengthMismatch`] when `lower` or `upper` differ from `a` in length;
/// [`Error::SizeOverflow`] when positions in `b` do not fit `I`; driver errors.
pub fn sorted_bounds<K: Key, I: Key>(
    backend: &CudaBackend,
    a: &CudaView<'_, K>,
    b: &CudaView<'_, K>,
    lower: &mut CudaViewMut<'_, I>,
    upper: &mut CudaViewMut<'_, I>,
) -> Result<()> {
    Error::check_len("bounds keys vs lower", a.len(), lower.len())?;
    Error::check_len("bounds keys vs upper", a.len(), upper.len())?;
    crate::merge::check_positions::<I>(a.len(), b.len())?;
    if a.is_empty() {
        return Ok(());
    }
    let f = backend.function(
        &KERNELS,
        typed2(
            [
                "bounds_u32_u32",
                "bounds_u32_u64",
                "bounds_u64_u32",
                "bounds_u64_u64",
            ],
            K::BITS,
            I::BITS,
        ),
    )?;
    let cfg = backend.grid_stride_config(a.len(), BLOCK);
    let (ap, bp) = (ptr(backend, a), ptr(backend, b));
    let (lp, up) = (ptr_mut(backend, lower), ptr_mut(backend, upper));
    let (na, nb) = (a.len() as u64, b.len() as u64);
    let mut l = backend.stream().launch_builder(&f);
    l.arg(&ap).arg(&na).arg(&bp).arg(&nb).arg(&lp).arg(&up);
    // SAFETY: reads na keys of a and, by binary search, positions below nb of b; writes na
    // elements of lower and upper (lengths checked).
    unsafe { l.launch(cfg) }.map_err(driver("launching sorted bounds"))?;
    Ok(())
}

/// Offsets of the pair ranges `[lower[i], upper[i])`: `offsets[i]` is the sum of the counts
/// before row `i`; `offsets[n]` the total number of pairs (read it back to size outputs). Rows
/// with `upper < lower` count 0 and the first is recorded in `check`.
///
/// # Errors
/// [`Error::LengthMismatch`] when `lower` and `upper` differ in length or `offsets` does not
/// hold `n + 1` entries; CUB, allocation and driver errors.
pub fn range_offsets<I: Key>(
    backend: &CudaBackend,
    lower: &CudaView<'_, I>,
    upper: &CudaView<'_, I>,
    offsets: &mut CudaViewMut<'_, u64>,
    check: &mut BoundsCheck,
    scratch: &mut Scratch,
) -> Result<()> {
    let n = lower.len();
    Error::check_len("ranges lower vs upper", n, upper.len())?;
    Error::check_len("range offsets", n + 1, offsets.len())?;
    let f = backend.function(
        &KERNELS,
        typed1(["range_counts_u32", "range_counts_u64"], I::BITS),
    )?;
    let cfg = backend.grid_stride_config(n + 1, BLOCK);
    let (lp, up, op) = (
        ptr(backend, lower),
        ptr(backend, upper),
        ptr_mut(backend, offsets),
    );
    let (n64, status) = (n as u64, check.ptr());
    let mut b = backend.stream().launch_builder(&f);
    b.arg(&lp).arg(&up).arg(&n64).arg(&op).arg(&status);
    // SAFETY: reads n elements of lower and upper, writes n + 1 counts (lengths checked).
    unsafe { b.launch(cfg) }.map_err(driver("launching range counts"))?;
    exclusive_sum_raw::<u64>(backend, op, op, n + 1, scratch)
}

/// Load-balanced expansion of ranges into pairs: for every row `i` and every
/// `j in lower[i]..upper[i]`, the pair `(i, j)`, ordered by `i` then `j`, into the first
/// `total` elements of `a_out` and `b_out`. `offsets` comes from [`range_offsets`] and `total`
/// is its last entry (a larger value is clamped to it on the device). Work is split over the
/// output index space (see `kernels/merge.cu`), so skew cannot serialize it.
///
/// # Errors
/// [`Error::LengthMismatch`] when `offsets` does not hold `n + 1` entries;
/// [`Error::OutputTooLarge`] when an output holds fewer than `total` elements;
/// [`Error::SizeOverflow`] when row ids do not fit `I`; allocation and driver errors.
pub fn expand_ranges<I: Key>(
    backend: &CudaBackend,
    lower: &CudaView<'_, I>,
    offsets: &CudaView<'_, u64>,
    total: u64,
    a_out: &mut CudaViewMut<'_, I>,
    b_out: &mut CudaViewMut<'_, I>,
    scratch: &mut Scratch,
) -> Result<()> {
    let n = lower.len();
    Error::check_len("range offsets", n + 1, offsets.len())?;
    crate::merge::check_positions::<I>(n, 0)?;
    let capacity = a_out.len().min(b_out.len()) as u64;
    if total > capacity {
        return Err(Error::OutputTooLarge {
            needed: total,
            capacity,
        });
    }
    if total == 0 || n == 0 {
        return Ok(());
    }
    let tiles = total.div_ceil(TILE as u64);
    let rows_len = usize::try_from(tiles + 1).map_err(|_| Error::SizeOverflow("expand tiles"))?;
    let tile_rows = scratch.reserve(backend, Error::bytes_of::<u64>(rows_len)?)?;
    let offp = ptr(backend, offsets);
    let n64 = n as u64;
    let part = backend.function(&KERNELS, "expand_partition_u64")?;
    let mut b = backend.stream().launch_builder(&part);
    b.arg(&offp).arg(&n64).arg(&tiles).arg(&tile_rows);
    // SAFETY: binary searches n offsets, writes tiles + 1 words of scratch (reserved above).
    unsafe { b.launch(backend.grid_stride_config(rows_len, BLOCK)) }
        .map_err(driver("launching expand partition"))?;
    let f = backend.function(&KERNELS, typed1(["expand_u32", "expand_u64"], I::BITS))?;
    let cfg = tiled_config(backend, &f, tiles)?;
    let (lp, ap, bp) = (
        ptr(backend, lower),
        ptr_mut(backend, a_out),
        ptr_mut(backend, b_out),
    );
    let vector = aligned(&[ap, bp]);
    let mut b = backend.stream().launch_builder(&f);
    b.arg(&lp)
        .arg(&offp)
        .arg(&n64)
        .arg(&total)
        .arg(&tile_rows)
        .arg(&vector)
        .arg(&ap)
        .arg(&bp);
    // SAFETY: reads n lower bounds and n + 1 offsets at rows the partition found (all below
    // n), tiles + 1 tile rows; writes `total` elements of each output (capacity checked).
    unsafe { b.launch(cfg) }.map_err(driver("launching expand"))?;
    Ok(())
}

/// Runs a CUB call under the temporary-storage protocol: a size query, then the call with
/// `scratch` grown to fit.
fn with_temp(
    backend: &CudaBackend,
    scratch: &mut Scratch,
    op: &'static str,
    mut call: impl FnMut(*mut c_void, *mut usize) -> cubsys_status,
) -> Result<()> {
    backend.bind_to_thread()?;
    let mut bytes = 0usize;
    check(op, call(std::ptr::null_mut(), &mut bytes))?;
    let temp = scratch.reserve(backend, bytes)?;
    check(op, call(temp as *mut c_void, &mut bytes))
}

fn check(op: &'static str, status: cubsys_status) -> Result<()> {
    if status == cub_sys::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(Error::Runtime { op, code: status })
    }
}

fn stream(backend: &CudaBackend) -> cub_sys::cudaStream_t {
    backend.stream().cu_stream() as cub_sys::cudaStream_t
}

fn ptr<T>(backend: &CudaBackend, v: &impl DevicePtr<T>) -> u64 {
    v.device_ptr(backend.stream()).0
}

fn ptr_mut<T>(backend: &CudaBackend, v: &mut impl DevicePtrMut<T>) -> u64 {
    v.device_ptr_mut(backend.stream()).0
}

/// A stable CUB radix sort (`DeviceRadixSort::SortPairs`, or `SortKeys` without values) at raw
/// device addresses, for callers that carve their buffers out of their own scratch: the radix
/// partition of `joinkit-partition` moves one column with it, since CUB's onesweep passes are
/// faster than a multi-column scatter for a single column. Keys and values are 4 or 8 bytes
/// wide and sort by their unsigned bits.
#[derive(Clone, Debug)]
pub struct RawRadixSort {
    /// Key width in bytes (4 or 8).
    pub key_bytes: usize,
    /// Device address of the `n` input keys.
    pub keys_in: u64,
    /// Device address of the `n` output keys.
    pub keys_out: u64,
    /// Width in bytes (4 or 8), input address and output address of the values; `None` sorts
    /// keys alone.
    pub values: Option<(usize, u64, u64)>,
    /// Rows.
    pub n: usize,
    /// The key bits to sort by.
    pub bits: Range<u32>,
}

impl RawRadixSort {
    /// Bytes of temporary device storage [`Self::run`] needs.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for widths other than 4 and 8 bytes, [`Error::BitRange`] and
    /// CUB errors.
    pub fn temp_bytes(&self, backend: &CudaBackend) -> Result<usize> {
        self.check()?;
        backend.bind_to_thread()?;
        let mut bytes = 0usize;
        // SAFETY: a null temp pointer makes CUB only compute the size; nothing is accessed.
        check(self.op(), unsafe {
            self.call(std::ptr::null_mut(), &mut bytes, backend)
        })?;
        Ok(bytes)
    }

    /// Queues the sort on the backend's stream, with `temp_bytes` bytes of temporary storage
    /// at `temp`.
    ///
    /// # Safety
    /// The key and value addresses hold `n` elements of their widths, inputs and outputs do
    /// not overlap, and `temp` holds at least [`Self::temp_bytes`] bytes, none of them in use
    /// by other queued work.
    ///
    /// # Errors
    /// As [`Self::temp_bytes`].
    pub unsafe fn run(&self, backend: &CudaBackend, temp: u64, temp_bytes: usize) -> Result<()> {
        self.check()?;
        backend.bind_to_thread()?;
        let mut bytes = temp_bytes;
        // SAFETY: the caller's contract above.
        check(self.op(), unsafe {
            self.call(temp as *mut c_void, &mut bytes, backend)
        })
    }

    /// Queues the sort with its temporary storage taken from `scratch`.
    ///
    /// # Safety
    /// As [`Self::run`], without the condition on `temp`.
    ///
    /// # Errors
    /// As [`Self::temp_bytes`], and allocation errors.
    pub unsafe fn run_with(&self, backend: &CudaBackend, scratch: &mut Scratch) -> Result<()> {
        let bytes = self.temp_bytes(backend)?;
        let temp = scratch.reserve(backend, bytes)?;
        // SAFETY: the caller's contract, and `temp` holds `bytes` bytes of this scratch.
        unsafe { self.run(backend, temp, bytes) }
    }

    fn check(&self) -> Result<()> {
        let width = |w: usize| {
            if w == 4 || w == 8 {
                Ok(())
            } else {
                Err(Error::InvalidArgument(format!(
                    "radix sort of {w}-byte elements: 4 or 8 bytes"
                )))
            }
        };
        width(self.key_bytes)?;
        if let Some((w, _, _)) = self.values {
            width(w)?;
        }
        Error::check_bits(&self.bits, self.key_bytes as u32 * 8)
    }

    fn op(&self) -> &'static str {
        if self.values.is_some() {
            "radix sort pairs"
        } else {
            "radix sort keys"
        }
    }

    /// One CUB call (a size query when `t` is null).
    ///
    /// # Safety
    /// As [`Self::run`] when `t` is not null.
    unsafe fn call(&self, t: *mut c_void, b: *mut usize, backend: &CudaBackend) -> cubsys_status {
        let (b0, b1) = (self.bits.start as i32, self.bits.end as i32);
        let (ki, ko, n, s) = (self.keys_in, self.keys_out, self.n as u64, stream(backend));
        // SAFETY: forwarded from the caller; widths were checked, so each call names the
        // element types the addresses hold.
        unsafe {
            match (self.key_bytes, self.values) {
                (4, None) => cub_sys::cubsys_sort_keys_uint32(t, b, ki as _, ko as _, n, b0, b1, s),
                (_, None) => cub_sys::cubsys_sort_keys_uint64(t, b, ki as _, ko as _, n, b0, b1, s),
                (4, Some((4, vi, vo))) => cub_sys::cubsys_sort_pairs_uint32_uint32(
                    t, b, ki as _, ko as _, vi as _, vo as _, n, b0, b1, s,
                ),
                (4, Some((_, vi, vo))) => cub_sys::cubsys_sort_pairs_uint32_uint64(
                    t, b, ki as _, ko as _, vi as _, vo as _, n, b0, b1, s,
                ),
                (_, Some((4, vi, vo))) => cub_sys::cubsys_sort_pairs_uint64_uint32(
                    t, b, ki as _, ko as _, vi as _, vo as _, n, b0, b1, s,
                ),
                (_, Some((_, vi, vo))) => cub_sys::cubsys_sort_pairs_uint64_uint64(
                    t, b, ki as _, ko as _, vi as _, vo as _, n, b0, b1, s,
                ),
            }
        }
    }
}

/// Stable radix sort of pairs by key bits `bits` (CUB `DeviceRadixSort::SortPairs`).
///
/// # Errors
/// [`Error::LengthMismatch`], [`Error::BitRange`], CUB and allocation errors.
pub fn sort_pairs<K: Key, V: Element>(
    backend: &CudaBackend,
    keys_in: &CudaView<'_, K>,
    values_in: &CudaView<'_, V>,
    keys_out: &mut CudaViewMut<'_, K>,
    values_out: &mut CudaViewMut<'_, V>,
    bits: Range<u32>,
    scratch: &mut Scratch,
) -> Result<()> {
    let n = keys_in.len();
    Error::check_len("sort_pairs keys vs values", n, values_in.len())?;
    Error::check_len("sort_pairs keys in vs out", n, keys_out.len())?;
    Error::check_len("sort_pairs values in vs out", n, values_out.len())?;
    let sort = RawRadixSort {
        key_bytes: size_of::<K>(),
        keys_in: ptr(backend, keys_in),
        keys_out: ptr_mut(backend, keys_out),
        values: Some((
            size_of::<V>(),
            ptr(backend, values_in),
            ptr_mut(backend, values_out),
        )),
        n,
        bits,
    };
    // SAFETY: the views hold n elements each (checked above) of the widths given; 4- and
    // 8-byte elements of any signedness sort by their unsigned bits.
    unsafe { sort.run_with(backend, scratch) }
}

/// Stable radix sort of keys by bits `bits` (CUB `DeviceRadixSort::SortKeys`).
///
/// # Errors
/// [`Error::LengthMismatch`], [`Error::BitRange`], CUB and allocation errors.
pub fn sort_keys<K: Key>(
    backend: &CudaBackend,
    keys_in: &CudaView<'_, K>,
    keys_out: &mut CudaViewMut<'_, K>,
    bits: Range<u32>,
    scratch: &mut Scratch,
) -> Result<()> {
    Error::check_len("sort_keys in vs out", keys_in.len(), keys_out.len())?;
    let sort = RawRadixSort {
        key_bytes: size_of::<K>(),
        keys_in: ptr(backend, keys_in),
        keys_out: ptr_mut(backend, keys_out),
        values: None,
        n: keys_in.len(),
        bits,
    };
    // SAFETY: both views hold n keys of the width given.
    unsafe { sort.run_with(backend, scratch) }
}

/// Exclusive prefix sum (CUB `DeviceScan::ExclusiveSum`); `output` may be the input's buffer.
///
/// # Errors
/// [`Error::LengthMismatch`], CUB and allocation errors.
pub fn exclusive_sum<T: Summable>(
    backend: &CudaBackend,
    input: &CudaView<'_, T>,
    output: &mut CudaViewMut<'_, T>,
    scratch: &mut Scratch,
) -> Result<()> {
    Error::check_len("exclusive_sum in vs out", input.len(), output.len())?;
    let (i, o) = (ptr(backend, input), ptr_mut(backend, output));
    exclusive_sum_raw::<T>(backend, i, o, input.len(), scratch)
}

/// Exclusive sum of `n` elements at device address `i` into `o` (which may equal `i`).
fn exclusive_sum_raw<T: Summable>(
    backend: &CudaBackend,
    i: u64,
    o: u64,
    n: usize,
    scratch: &mut Scratch,
) -> Result<()> {
    let (s, n) = (stream(backend), n as u64);
    with_temp(backend, scratch, "exclusive sum", |t, b| {
        // SAFETY: callers pass addresses of n elements of the width named by the function
        // (CUB allows in == out).
        unsafe {
            if T::BITS == 32 {
                cub_sys::cubsys_exclusive_sum_uint32(t, b, i as _, o as _, n, s)
            } else {
                cub_sys::cubsys_exclusive_sum_uint64(t, b, i as _, o as _, n, s)
            }
        }
    })
}

/// Even-width histogram into `histogram.len()` bins over `[lower, upper)` (CUB
/// `DeviceHistogram::HistogramEven`); samples outside the range are not counted.
///
/// # Errors
/// As [`crate::Histogram::histogram_even`].
pub fn histogram_even<K: Key>(
    backend: &CudaBackend,
    samples: &CudaView<'_, K>,
    histogram: &mut CudaViewMut<'_, u32>,
    lower: K,
    upper: K,
    scratch: &mut Scratch,
) -> Result<()> {
    crate::histogram::check_histogram(samples.len(), histogram.len(), lower, upper)?;
    let (sp, hp) = (ptr(backend, samples), ptr_mut(backend, histogram));
    let levels = histogram.len() as i32 + 1;
    let (s, n) = (stream(backend), samples.len() as u64);
    let (lo, hi) = (lower.to_u64(), upper.to_u64());
    with_temp(backend, scratch, "histogram even", |t, b| {
        // SAFETY: `samples` holds n keys, `histogram` levels - 1 counters.
        unsafe {
            if K::BITS == 32 {
                cub_sys::cubsys_histogram_even_uint32(
                    t, b, sp as _, hp as _, levels, lo as u32, hi as u32, n, s,
                )
            } else {
                cub_sys::cubsys_histogram_even_uint64(t, b, sp as _, hp as _, levels, lo, hi, n, s)
            }
        }
    })
}
