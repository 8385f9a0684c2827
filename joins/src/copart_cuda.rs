//! [`CoPartitionJoin`] on CUDA: the kernels of `kernels/phj.cu`.
//!
//! A join runs: items per partition (a kernel), a 64-bit scan and a read-back of the item
//! count, the item-to-partition map (a kernel), the count pass, a scan of the per-item counts
//! and a read-back of the total and the status word, then (for pairs) an exactly sized
//! allocation and the write pass. Three synchronizations in all, each reading 8 bytes. Pairs
//! against a unique build side take one pass instead (`phj_join_*`: its outputs are allocated
//! for one pair per probe row and truncated to the count, the allocation kept: copying a
//! short output into an exact one cost 1.7 ms at a match ratio of 0.1 on the H200, far more than
//! its bytes), which builds each table once;
//! the order of those pairs is unspecified (each work item's run lands where an atomic
//! reservation puts it).

use joinkit_cuda::cudarc::driver::{CudaFunction, DeviceRepr, LaunchConfig, PushKernelArg};
use joinkit_cuda::{
    Backend, Column, CudaBackend, DeviceBuffer, Error, Key, Result, driver, each_column, map_column,
};
use joinkit_partition::{BucketChains, Partitioner};
use joinkit_primitives::Scan;

use crate::copart::{
    CoJoined, CoPartitionJoin, CoSide, CoWant, MAX_BUILD_CAPACITY, MIX_SEED, Pieces, RANGE_SAMPLES,
    check_chains, check_piece_args, check_sides, check_wide, within_u32,
};

/// Threads per block of the match kernels (`kJoinBlock` in kernels/phj.cu, which sizes the
/// one-pass join's rounds by it). Three such blocks fit an SM (48 warps; registers,
/// up to 40 a thread, and the shared memory CUDA reserves per block allow no fourth), against
/// four blocks of 256 threads (32 warps): H200, 2^27 ⋈ 2^28, 4-byte match 3.35 ms against 5.0,
/// 8-byte 4.6 against 6.3. The 8-byte-key one-pass join runs two (its early id loads take
/// more registers, `kEarlyIds`); the launch reads the kernel's occupancy.
const BLOCK: u32 = 512;

/// Tables meant to share an SM, by key width: a table takes at most this fraction of the SM's
/// shared memory. Four for 4-byte keys gives 4096-row tables (56 KiB; [`BLOCK`]'s registers
/// let three of them run at once); three for 8-byte keys gives them 4096 rows too (72 KiB;
/// four would halve them), so |R| =
/// 2^27 needs 16 radix bits, two partition passes, not 17 and three (H200, PHJ-OM 2^27 ⋈ 2^28:
/// 8 B narrow 22.8 -> 19.1 ms, 8 B wide 40.4 -> 32.9).
fn blocks_per_sm<K: Key>() -> usize {
    if K::BITS == 32 { 4 } else { 3 }
}

/// Shared memory the kernels declare statically (item, scan and reduction scratch), kept out
/// of the table's budget.
const STATIC_SHARED: usize = 1024;

/// Probe pieces are this many build pieces long; each is a work item (H200, PHJ-OM 2^27 ⋈ 2^28
/// under Zipf 1.0: factors 1 to 16 gave a match of 3.12–3.31 ms, 4 the fastest).
const PROBE_CHUNK_FACTOR: usize = 4;

/// Shared bytes of a table for `capacity` rows of `key_bytes`-byte keys: keys (16-byte
/// aligned), 2 slot words per row, a 16-bit chain link per row.
fn table_bytes(capacity: usize, key_bytes: usize) -> usize {
    (capacity * key_bytes).next_multiple_of(16) + 2 * capacity * 4 + capacity * 2
}

/// The launch arguments of the match kernels (`CoParams` in kernels/phj.cu).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct CoParams {
    probe_keys: u64,
    probe_ids: u64,
    probe_po: u64,
    probe_begin: u64,
    probe_len: u64,
    build_keys: u64,
    build_ids: u64,
    build_po: u64,
    build_begin: u64,
    build_len: u64,
    item_offsets: u64,
    item_part: u64,
    n_items: u64,
    counts: u64,
    flags: u64,
    flags_len: u64,
    out_probe: u64,
    out_build: u64,
    out_probe_hi: u64,
    out_build_hi: u64,
    probe_second: u64,
    build_second: u64,
    out_probe_second: u64,
    out_build_second: u64,
    status: u64,
    out_cursor: u64,
    item_cursor: u64,
    out_capacity: u64,
    capacity: u32,
    unique_build: u32,
    probe_unpack: u32,
    build_unpack: u32,
}

impl CoParams {
    /// Points the kernel at each side's output columns ([`side_outputs`]).
    fn set_outputs<K: Key>(
        &mut self,
        probe: &CoSide<'_, CudaBackend, K>,
        out_probe: &[Column<CudaBackend>],
        build: &CoSide<'_, CudaBackend, K>,
        out_build: &[Column<CudaBackend>],
    ) {
        (self.out_probe, self.out_probe_hi, self.out_probe_second) = output_ptrs(probe, out_probe);
        (self.out_build, self.out_build_hi, self.out_build_second) = output_ptrs(build, out_build);
    }
}

const _: () = assert!(std::mem::size_of::<CoParams>() == 28 * 8 + 4 * 4);

// SAFETY: a repr(C) struct of integers without padding (28 x 8 + 4 x 4 bytes), laid out as
// `CoParams` in kernels/phj.cu; any bit pattern is valid.
unsafe impl DeviceRepr for CoParams {}

/// Whether a side's id words are 8 bytes (`Column::U64` ids) rather than 4 (rows and
/// `Column::U32`; check_sides refuses other columns).
fn wide(ids: Option<&Column<CudaBackend>>) -> bool {
    matches!(ids, Some(Column::U64(_)))
}

/// The match kernel of `pass` for `K` and the sides' id words (kernels/phj.cu's
/// `MATCH_KERNELS`: `_4` for u32 ids, `_8` for u64; the count pass names the probe side's).
fn match_kernel<K: Key>(pass: MatchPass, probe_wide: bool, build_wide: bool) -> &'static str {
    const NAMES: [[[&str; 4]; 3]; 2] = [
        [
            [
                "phj_count_u32_4",
                "phj_count_u32_4",
                "phj_count_u32_8",
                "phj_count_u32_8",
            ],
            [
                "phj_write_u32_4_4",
                "phj_write_u32_4_8",
                "phj_write_u32_8_4",
                "phj_write_u32_8_8",
            ],
            [
                "phj_join_u32_4_4",
                "phj_join_u32_4_8",
                "phj_join_u32_8_4",
                "phj_join_u32_8_8",
            ],
        ],
        [
            [
                "phj_count_u64_4",
                "phj_count_u64_4",
                "phj_count_u64_8",
                "phj_count_u64_8",
            ],
            [
                "phj_write_u64_4_4",
                "phj_write_u64_4_8",
                "phj_write_u64_8_4",
                "phj_write_u64_8_8",
            ],
            [
                "phj_join_u64_4_4",
                "phj_join_u64_4_8",
                "phj_join_u64_8_4",
                "phj_join_u64_8_8",
            ],
        ],
    ];
    let key = usize::from(K::BITS == 64);
    NAMES[key][pass as usize][2 * usize::from(probe_wide) + usize::from(build_wide)]
}

/// The passes of the match (kernels/phj.cu).
#[derive(Clone, Copy)]
enum MatchPass {
    /// Counts each item's pairs (and marks flags).
    Count = 0,
    /// Writes each item's pairs at its scanned count.
    Write = 1,
    /// Counts and writes in one pass (unique build side).
    Join = 2,
}

/// The device address of a column of ids.
fn column_ptr(c: &Column<CudaBackend>) -> u64 {
    each_column!(c, b => b.device_ptr())
}

/// A side's output columns of `rows` rows: one of its ids' type (`u32` for rows), with
/// `split_words` two `u32` columns for the halves of its words, with `unpack` one `u64` column,
/// or with a `second` column one of each carried column's type.
fn side_outputs<K: Key>(
    b: &CudaBackend,
    side: &CoSide<'_, CudaBackend, K>,
    rows: usize,
) -> Result<Vec<Column<CudaBackend>>> {
    let like =
        |c: &Column<CudaBackend>| Ok::<_, Error>(map_column!(c, _c, T => b.alloc::<T>(rows)?));
    Ok(match side.ids {
        _ if side.split_words => vec![
            Column::U32(b.alloc::<u32>(rows)?),
            Column::U32(b.alloc::<u32>(rows)?),
        ],
        _ if side.unpack.is_some() => vec![Column::U64(b.alloc::<u64>(rows)?)],
        Some(c) => std::iter::once(c)
            .chain(side.second)
            .map(like)
            .collect::<Result<_>>()?,
        None => vec![Column::U32(b.alloc::<u32>(rows)?)],
    })
}

/// A side's `CoParams::*_unpack` word: 0, or 1 + the low bits of its packed ids
/// ([`CoSide::unpack`]; check_sides keeps them at most 32).
fn unpack_word<K: Key>(side: &CoSide<'_, CudaBackend, K>) -> u32 {
    side.unpack.map_or(0, |low_bits| low_bits + 1)
}

/// A side's output addresses for the kernel: (whole or low-half words, high halves or 0,
/// second column's words or 0).
fn output_ptrs<K: Key>(
    side: &CoSide<'_, CudaBackend, K>,
    cols: &[Column<CudaBackend>],
) -> (u64, u64, u64) {
    let (first, next) = (
        cols.first().map_or(0, column_ptr),
        cols.get(1).map_or(0, column_ptr),
    );
    if side.second.is_some() {
        (first, 0, next)
    } else {
        (first, next, 0)
    }
}

/// A zeroed buffer.
fn zeros<T: joinkit_cuda::Element>(b: &CudaBackend, n: usize) -> Result<DeviceBuffer<T>> {
    let mut buf = b.alloc::<T>(n)?;
    b.fill(&mut buf, T::default())?;
    Ok(buf)
}

fn key_name<K: Key>(n32: &'static str, n64: &'static str) -> &'static str {
    if K::BITS == 32 { n32 } else { n64 }
}

/// Folds up to [`RANGE_SAMPLES`] evenly spaced 8-byte `keys` into `range` (least, greatest).
fn sample_range<K: Key>(
    b: &CudaBackend,
    keys: &DeviceBuffer<K>,
    range: &DeviceBuffer<u64>,
) -> Result<()> {
    let args = [
        Arg::U64(keys.device_ptr()),
        Arg::U64(keys.len() as u64),
        Arg::U64(RANGE_SAMPLES as u64),
        Arg::U64(range.device_ptr()),
    ];
    // Reads up to RANGE_SAMPLES keys of the side and writes the two range words.
    launch_small(b, "phj_sample_range", RANGE_SAMPLES, false, &args)
}

/// The low 32 bits of 8-byte `keys`, folding every key into `range` (least, greatest).
fn narrow_into<K: Key>(
    b: &CudaBackend,
    keys: &DeviceBuffer<K>,
    range: &DeviceBuffer<u64>,
) -> Result<DeviceBuffer<u32>> {
    let out = b.alloc::<u32>(keys.len())?;
    if !keys.is_empty() {
        let args = [
            Arg::U64(keys.device_ptr()),
            Arg::U64(keys.len() as u64),
            Arg::U64(out.device_ptr()),
            Arg::U64(range.device_ptr()),
        ];
        // Reads the side's keys, writes as many u32 and the two range words.
        launch_small(b, "phj_narrow_keys", keys.len().div_ceil(4), false, &args)?;
    }
    Ok(out)
}

/// The two words of a range the kernels folded keys into.
fn read_range(b: &CudaBackend, range: &DeviceBuffer<u64>) -> Result<(u64, u64)> {
    match b.download(range)?[..] {
        [least, greatest] => Ok((least, greatest)),
        _ => Err(Error::Corrupt("the key range is two words".into())),
    }
}

/// A scalar argument of a bookkeeping kernel (device addresses are `U64`).
#[derive(Debug, Clone, Copy)]
enum Arg {
    U64(u64),
    U32(u32),
}

/// Launches a small bookkeeping kernel: one thread per element of `n` (grid-stride), or a warp
/// per element when `warps`.
fn launch_small(
    b: &CudaBackend,
    name: &'static str,
    n: usize,
    warps: bool,
    args: &[Arg],
) -> Result<()> {
    let f = b.function(&crate::KERNELS, name)?;
    let threads = if warps { n.saturating_mul(32) } else { n };
    let cfg = b.grid_stride_config(threads.max(1), 256);
    let mut builder = b.stream().launch_builder(&f);
    for a in args {
        match a {
            Arg::U64(v) => builder.arg(v),
            Arg::U32(v) => builder.arg(v),
        };
    }
    // SAFETY: every bookkeeping kernel of kernels/phj.cu bounds its loops by the sizes passed
    // and reads and writes only the buffers passed, which the callers size as the kernel's
    // comment says; arguments follow its C signature.
    unsafe { builder.launch(cfg) }
        .map(|_| ())
        .map_err(driver("launching a PHJ bookkeeping kernel"))
}

/// The pieces with their statistics words (most per partition, longest, -, rows).
fn finish_pieces(
    offsets: DeviceBuffer<u64>,
    begin: DeviceBuffer<u64>,
    len: DeviceBuffer<u32>,
    stats: [u64; 4],
) -> Result<Pieces<CudaBackend>> {
    let total = begin.len() as u64;
    Ok(Pieces {
        offsets,
        begin,
        len,
        total,
        max_per_partition: stats[0],
        max_len: stats[1],
        rows: stats[3],
    })
}

fn stats_of(b: &CudaBackend, stats: &DeviceBuffer<u64>) -> Result<[u64; 4]> {
    let s = b.download(stats)?;
    Ok([s[0], s[1], s[2], s[3]])
}

/// Words of a pieces computation's stats buffer: the four the kernels write (see
/// `phj_piece_counts`) and the pieces' total copied beside them.
const STATS_WORDS: usize = 5;

/// The pieces' total (the last of the scanned counts `po`) and the kernels' four stats words,
/// read back with one synchronization (the total is copied beside the stats first).
fn total_and_stats(
    b: &CudaBackend,
    po: &DeviceBuffer<u64>,
    fanout: usize,
    stats: &mut DeviceBuffer<u64>,
) -> Result<(u64, [u64; 4])> {
    b.stream()
        .memcpy_dtod(
            &po.view().slice(fanout..fanout + 1),
            &mut stats.view_mut().slice_mut(4..STATS_WORDS),
        )
        .map_err(driver("copying the pieces' total"))?;
    let s = b.download(stats)?;
    Ok((s[4], [s[0], s[1], s[2], s[3]]))
}

/// The launch shape of the match kernels: as many blocks as the SMs hold at once (or fewer
/// items), each joining one work item at a time (the one-pass join takes runs of them); `f`
/// from [`CudaBackend::function_with_dynamic_shared`].
fn join_config(b: &CudaBackend, f: &CudaFunction, smem: usize, items: u64) -> Result<LaunchConfig> {
    // The kernel's static shared memory counts against the same per-block limit as the tables.
    debug_assert!(
        f.shared_size_bytes()
            .is_ok_and(|fixed| fixed as usize <= STATIC_SHARED),
        "the tables' budget leaves {STATIC_SHARED} bytes"
    );
    let per_sm = f
        .occupancy_max_active_blocks_per_multiprocessor(BLOCK, smem, None)
        .map_err(driver("reading kernel occupancy"))?
        .max(1);
    let grid = (u64::from(b.info().sm_count.max(1)) * u64::from(per_sm))
        .min(items)
        .max(1);
    Ok(LaunchConfig {
        grid_dim: (grid as u32, 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: smem as u32,
    })
}

/// Bits of a match kernel's status word (`kStatus*` in kernels/phj.cu).
const STATUS_DUPLICATE: u32 = 1;
const STATUS_BAD_ID: u32 = 2;
const STATUS_OVERFLOW: u32 = 4;
const STATUS_LAUNCH: u32 = 8;

/// The status word (the low half of word 0) and the total (word 1) of a match's read-back
/// words.
fn status_and_total(b: &CudaBackend, words: &DeviceBuffer<u64>) -> Result<(u32, u64)> {
    let w = b.download(words)?;
    Ok((w[0] as u32, w[1]))
}

/// The error a match kernel's status word reports, if any.
fn check_status(status: u32, want: &CoWant) -> Result<()> {
    if status & STATUS_LAUNCH != 0 {
        return Err(Error::InvalidArgument(format!(
            "the one-pass match kernel needs blocks of {BLOCK} threads"
        )));
    }
    // An overflow of the one-pass join's outputs means some probe row matched twice: equal
    // build keys in two pieces.
    if want.unique_build && status & (STATUS_DUPLICATE | STATUS_OVERFLOW) != 0 {
        return Err(Error::DuplicateKey { side: "build" });
    }
    if status & STATUS_BAD_ID != 0 {
        return Err(Error::IndexOutOfRange {
            what: "co-partition probe id",
            index: u64::from(u32::MAX),
            len: want.flags_len.unwrap_or(0),
        });
    }
    Ok(())
}

/// Launches the match kernel `name` (from [`match_kernel`]) over the items.
///
/// # Safety
/// `params` names buffers as that kernel reads and writes them (see each call).
unsafe fn launch_pass(
    b: &CudaBackend,
    name: &'static str,
    params: &CoParams,
    smem: usize,
    what: &'static str,
) -> Result<()> {
    let f = b.function_with_dynamic_shared(&crate::KERNELS, name)?;
    let cfg = join_config(b, &f, smem, params.n_items)?;
    let mut args = b.stream().launch_builder(&f);
    args.arg(params);
    // SAFETY: the caller's contract.
    unsafe { args.launch(cfg) }
        .map(|_| ())
        .map_err(driver(what))
}

impl CoPartitionJoin for CudaBackend {
    fn cached_table_bytes(&self) -> Option<usize> {
        // The table at load 0.5 with 8-byte slots: 16 bytes a build row. Up to L2's size plus
        // a few MiB (64 MiB at 2^22 rows still won on a 60 MiB L2; 128 MiB lost).
        Some(self.info().l2_bytes + (self.info().l2_bytes >> 3))
    }

    fn gfur_ratio_per_payload_byte(&self) -> f64 {
        // H200 crossovers: 0.1-0.14 at 8 payload bytes a side (4 B 2+2, 8 B narrow), 0.3-0.33
        // at 12 (4 B 3+3), 0.43 at 16 (8 B 2+2): 0.04 per byte beyond 4 (choose.rs).
        0.04
    }

    fn build_capacity<K: Key>(&self) -> usize {
        let info = self.info();
        let budget = (info.shared_per_sm as usize / blocks_per_sm::<K>())
            .min(info.max_shared_per_block_optin as usize)
            .saturating_sub(STATIC_SHARED);
        let key_bytes = (K::BITS / 8) as usize;
        let mut c = MAX_BUILD_CAPACITY;
        while c > 256 && table_bytes(c, key_bytes) > budget {
            c /= 2;
        }
        c
    }

    fn probe_chunk<K: Key>(&self) -> usize {
        PROBE_CHUNK_FACTOR * self.build_capacity::<K>()
    }

    fn mix_keys<K: Key>(&self, keys: &DeviceBuffer<K>) -> Result<DeviceBuffer<K>> {
        let mut out = self.alloc::<K>(keys.len())?;
        joinkit_partition::cuda::hash_keys(self, &keys.view(), &mut out.view_mut(), MIX_SEED)?;
        Ok(out)
    }

    fn narrow_keys<K: Key>(
        &self,
        left: &DeviceBuffer<K>,
        right: &DeviceBuffer<K>,
    ) -> Result<Option<(DeviceBuffer<u32>, DeviceBuffer<u32>)>> {
        if K::BITS != 64 {
            return Ok(None);
        }
        // Least and greatest key so far; the kernels only lower and raise them.
        let range = self.upload(&[u64::MAX, 0])?;
        // A look at a few keys first: the pass below is wasted on keys too spread to narrow.
        for keys in [left, right] {
            sample_range(self, keys, &range)?;
        }
        if !within_u32(read_range(self, &range)?) {
            return Ok(None);
        }
        let (l, r) = (
            narrow_into(self, left, &range)?,
            narrow_into(self, right, &range)?,
        );
        Ok(within_u32(read_range(self, &range)?).then_some((l, r)))
    }

    fn sampled_key_range<K: Key>(&self, keys: &DeviceBuffer<K>) -> Result<(u64, u64)> {
        check_wide::<K>()?;
        let range = self.upload(&[u64::MAX, 0])?;
        sample_range(self, keys, &range)?;
        read_range(self, &range)
    }

    fn low_words<K: Key>(&self, keys: &DeviceBuffer<K>) -> Result<(DeviceBuffer<u32>, (u64, u64))> {
        check_wide::<K>()?;
        let range = self.upload(&[u64::MAX, 0])?;
        let low = narrow_into(self, keys, &range)?;
        Ok((low, read_range(self, &range)?))
    }

    fn contiguous_pieces(
        &self,
        offsets: &DeviceBuffer<u64>,
        max_rows: usize,
    ) -> Result<Pieces<Self>> {
        let fanout = check_piece_args(offsets.len(), max_rows)?;
        let counts = self.alloc::<u64>(fanout + 1)?;
        let mut stats = zeros::<u64>(self, STATS_WORDS)?;
        let (op, cp, sp) = (
            offsets.device_ptr(),
            counts.device_ptr(),
            stats.device_ptr(),
        );
        let (f64_, max64) = (fanout as u64, max_rows as u64);
        launch_small(
            self,
            "phj_piece_counts",
            fanout + 1,
            false,
            &[
                Arg::U64(op),
                Arg::U64(f64_),
                Arg::U64(max64),
                Arg::U64(cp),
                Arg::U64(sp),
            ],
        )?;
        let po = self.exclusive_sum(&counts)?;
        let (total, st) = total_and_stats(self, &po, fanout, &mut stats)?;
        if st[2] != 0 {
            return Err(Error::Corrupt("partition offsets decrease".into()));
        }
        let n = usize::try_from(total).map_err(|_| Error::SizeOverflow("pieces"))?;
        let (begin, len) = (self.alloc::<u64>(n)?, self.alloc::<u32>(n)?);
        if n > 0 {
            let (pp, bp, lp) = (po.device_ptr(), begin.device_ptr(), len.device_ptr());
            launch_small(
                self,
                "phj_piece_fill",
                fanout,
                true,
                &[
                    Arg::U64(op),
                    Arg::U64(pp),
                    Arg::U64(f64_),
                    Arg::U64(max64),
                    Arg::U64(bp),
                    Arg::U64(lp),
                ],
            )?;
        }
        finish_pieces(po, begin, len, st)
    }

    fn chain_pieces<K: Key>(
        &self,
        chains: &BucketChains<Self, K>,
        by: &Partitioner,
    ) -> Result<Pieces<Self>> {
        let fanout = check_chains(chains, by)?;
        let cap = chains.bucket_capacity as u64;
        let counts = self.alloc::<u64>(fanout + 1)?;
        let stats = zeros::<u64>(self, 4)?;
        let (rp, cp, sp) = (
            chains.counts.device_ptr(),
            counts.device_ptr(),
            stats.device_ptr(),
        );
        let f64_ = fanout as u64;
        launch_small(
            self,
            "phj_chain_counts",
            fanout + 1,
            false,
            &[
                Arg::U64(rp),
                Arg::U64(f64_),
                Arg::U64(cap),
                Arg::U64(cp),
                Arg::U64(sp),
            ],
        )?;
        let po = self.exclusive_sum(&counts)?;
        let total = self.read_element(&po.view(), fanout)?;
        let used = u64::from(self.read_element(&chains.used.view(), 0)?);
        if used != total || used > joinkit_cuda::Buffer::len(&chains.next) as u64 {
            return Err(Error::Corrupt(format!(
                "{used} buckets taken, {total} needed by the chains' row counts"
            )));
        }
        let n = total as usize;
        let (begin, len) = (self.alloc::<u64>(n)?, self.alloc::<u32>(n)?);
        if n > 0 {
            let cursor = zeros::<u32>(self, fanout)?;
            let (use_hash, seed, bits_begin) = match by {
                Partitioner::Radix(bits) => (0u32, 0u32, bits.start),
                Partitioner::Hash { seed, .. } => (1, *seed, 0),
            };
            let (kp, hp, pp) = (
                chains.keys.device_ptr(),
                chains.heads.device_ptr(),
                po.device_ptr(),
            );
            let (cu, bp, lp) = (cursor.device_ptr(), begin.device_ptr(), len.device_ptr());
            launch_small(
                self,
                key_name::<K>("phj_chain_fill_u32", "phj_chain_fill_u64"),
                n,
                false,
                &[
                    Arg::U64(kp),
                    Arg::U64(hp),
                    Arg::U64(rp),
                    Arg::U64(pp),
                    Arg::U64(used),
                    Arg::U64(cap),
                    Arg::U64(f64_),
                    Arg::U32(seed),
                    Arg::U32(use_hash),
                    Arg::U32(bits_begin),
                    Arg::U64(cu),
                    Arg::U64(bp),
                    Arg::U64(lp),
                    Arg::U64(sp),
                ],
            )?;
        }
        let st = stats_of(self, &stats)?;
        if st[2] != 0 {
            return Err(Error::Corrupt(
                "a bucket's first key names a partition whose chain does not hold it".into(),
            ));
        }
        finish_pieces(po, begin, len, st)
    }

    fn copartition_join<K: Key>(
        &self,
        probe: &CoSide<'_, Self, K>,
        build: &CoSide<'_, Self, K>,
        want: CoWant,
    ) -> Result<CoJoined<Self>> {
        let fanout = check_sides(probe, build, &want, self.build_capacity::<K>())?;
        let flags = match want.flags_len {
            Some(n) => Some(zeros::<u32>(self, n)?),
            None => None,
        };
        let empty = |flags| -> Result<CoJoined<Self>> {
            Ok(CoJoined {
                pairs: want
                    .pairs
                    .then(|| {
                        Ok::<_, Error>((
                            side_outputs(self, probe, 0)?,
                            side_outputs(self, build, 0)?,
                        ))
                    })
                    .transpose()?,
                flags,
                total: 0,
            })
        };
        if fanout == 0 || build.pieces.total == 0 || (probe.pieces.total == 0 && !want.unique_build)
        {
            return empty(flags);
        }
        // Work items: per partition, build pieces x probe pieces.
        let item_counts = self.alloc::<u64>(fanout + 1)?;
        let (ppo, bpo, icp, f64_) = (
            probe.pieces.offsets.device_ptr(),
            build.pieces.offsets.device_ptr(),
            item_counts.device_ptr(),
            fanout as u64,
        );
        let unique = u32::from(want.unique_build);
        launch_small(
            self,
            "phj_item_counts",
            fanout + 1,
            false,
            &[
                Arg::U64(ppo),
                Arg::U64(bpo),
                Arg::U64(f64_),
                Arg::U32(unique),
                Arg::U64(icp),
            ],
        )?;
        let item_offsets = self.exclusive_sum(&item_counts)?;
        drop(item_counts);
        let n_items = self.read_element(&item_offsets.view(), fanout)?;
        if n_items == 0 {
            return empty(flags);
        }
        let items = usize::try_from(n_items).map_err(|_| Error::SizeOverflow("work items"))?;
        let item_part = self.alloc::<u32>(items)?;
        let (iop, ipp) = (item_offsets.device_ptr(), item_part.device_ptr());
        launch_small(
            self,
            "phj_item_parts",
            fanout,
            true,
            &[Arg::U64(iop), Arg::U64(f64_), Arg::U64(ipp)],
        )?;

        // Word 0: the status (kStatus* bits, its low half); word 1: the one-pass join's output
        // cursor, or the count pass's total copied in (read back together: one synchronization);
        // word 2: the one-pass join's cursor of item runs.
        let mut words = zeros::<u64>(self, 3)?;
        let capacity = self.build_capacity::<K>();
        let smem = table_bytes(capacity, (K::BITS / 8) as usize);
        let ids = |i: Option<&Column<Self>>| i.map_or(0, column_ptr);
        let mut params = CoParams {
            probe_keys: probe.keys.device_ptr(),
            probe_ids: ids(probe.ids),
            probe_po: ppo,
            probe_begin: probe.pieces.begin.device_ptr(),
            probe_len: probe.pieces.len.device_ptr(),
            build_keys: build.keys.device_ptr(),
            build_ids: ids(build.ids),
            build_po: bpo,
            build_begin: build.pieces.begin.device_ptr(),
            build_len: build.pieces.len.device_ptr(),
            item_offsets: iop,
            item_part: ipp,
            n_items,
            counts: 0,
            flags: flags.as_ref().map_or(0, |f| f.device_ptr()),
            flags_len: want.flags_len.unwrap_or(0) as u64,
            out_probe: 0,
            out_build: 0,
            out_probe_hi: 0,
            out_build_hi: 0,
            probe_second: ids(probe.second),
            build_second: ids(build.second),
            out_probe_second: 0,
            out_build_second: 0,
            status: words.device_ptr(),
            out_cursor: 0,
            item_cursor: 0,
            out_capacity: 0,
            capacity: capacity as u32,
            unique_build: u32::from(want.unique_build),
            probe_unpack: unpack_word(probe),
            build_unpack: unpack_word(build),
        };
        if want.pairs && want.unique_build && !want.too_many(probe.pieces.rows) {
            // Every probe row matches at most once: one pass, into outputs of the probe rows
            // (when the caller takes that many; else counted first, below).
            let bound = usize::try_from(probe.pieces.rows)
                .map_err(|_| Error::SizeOverflow("probe rows"))?;
            let (mut out_p, mut out_b) = (
                side_outputs(self, probe, bound)?,
                side_outputs(self, build, bound)?,
            );
            params.out_cursor = words.device_ptr() + 8;
            params.item_cursor = words.device_ptr() + 16;
            params.out_capacity = bound as u64;
            params.set_outputs(probe, &out_p, build, &out_b);
            let name = match_kernel::<K>(MatchPass::Join, wide(probe.ids), wide(build.ids));
            // SAFETY: as the count pass below, plus the zeroed cursor word; each item writes its
            // pairs at the rows it reserved below `bound` (checked in the kernel, which flags
            // an overflow instead of writing past it).
            unsafe { launch_pass(self, name, &params, smem, "launching the PHJ match") }?;
            let (status, total) = status_and_total(self, &words)?;
            check_status(status, &want)?;
            let rows = usize::try_from(total).map_err(|_| Error::SizeOverflow("join output"))?;
            for col in out_p.iter_mut().chain(&mut out_b) {
                each_column!(col, c => c.truncate(rows));
            }
            return Ok(CoJoined {
                pairs: Some((out_p, out_b)),
                flags,
                total,
            });
        }
        let counts = zeros::<u64>(self, items + 1)?;
        params.counts = counts.device_ptr();
        let name = match_kernel::<K>(MatchPass::Count, wide(probe.ids), wide(build.ids));
        // SAFETY: the count pass reads the pieces (built by this backend, inside their key and
        // id columns), the items (n_items of them, each naming an existing piece pair) and
        // writes n_items counts, flags below flags_len and the status word; the dynamic shared
        // memory holds a table of `capacity` rows, and build pieces are at most that long
        // (check_sides).
        unsafe { launch_pass(self, name, &params, smem, "launching the PHJ count pass") }?;
        let offsets = self.exclusive_sum(&counts)?;
        drop(counts);
        self.stream()
            .memcpy_dtod(
                &offsets.view().slice(items..items + 1),
                &mut words.view_mut().slice_mut(1..2),
            )
            .map_err(driver("copying the match total"))?;
        let (status, total) = status_and_total(self, &words)?;
        check_status(status, &want)?;
        if !want.pairs || want.too_many(total) {
            return Ok(CoJoined {
                pairs: None,
                flags,
                total,
            });
        }

        // Write pass: exactly `total` pairs.
        let n = usize::try_from(total).map_err(|_| Error::SizeOverflow("join output rows"))?;
        let (out_p, out_b) = (side_outputs(self, probe, n)?, side_outputs(self, build, n)?);
        if n > 0 {
            params.counts = offsets.device_ptr();
            params.flags = 0;
            params.set_outputs(probe, &out_p, build, &out_b);
            let name = match_kernel::<K>(MatchPass::Write, wide(probe.ids), wide(build.ids));
            // SAFETY: as the count pass; each item writes its pairs at its scanned offset, the
            // same number the count pass counted for it (the counts depend on the pieces' keys
            // only), so all writes fall inside the `total` rows of `out_p` and `out_b`.
            unsafe { launch_pass(self, name, &params, smem, "launching the PHJ write pass") }?;
        }
        Ok(CoJoined {
            pairs: Some((out_p, out_b)),
            flags,
            total,
        })
    }
}
