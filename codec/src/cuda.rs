//! View-level CUDA entry points, for reuse inside other GPU projects: they read and write
//! cudarc views of memory the caller owns and queue work on the backend's stream (build one on
//! your own stream with `CudaBackend::with_stream`).
//!
//! Both directions are plan, then finish, because sizes depend on the data:
//! - [`plan_compress`] encodes every chunk of every buffer into chunk-aligned slots of
//!   [`CodecScratch`] (one fused launch), scans the sizes and reads the per-stream totals back
//!   (one synchronization); [`CompressPlan::words`] is the output size; [`finish_compress`]
//!   moves the chunks into the caller's output and writes the headers (no synchronization).
//! - [`plan_decompress`] reads every stream header and offset table back and validates them on
//!   the host (synchronizes); [`finish_decompress`] decodes all chunks of all streams in one
//!   launch (a warp per chunk; a second launch, a block per chunk, takes the chunks that do
//!   not suit a warp) and reads the fault word back (synchronizes), so corruption found on
//!   the device is reported as [`Error::Corrupt`] before it returns.

use std::ops::Range;

use joinkit_cuda::cudarc::driver::{
    CudaFunction, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, LaunchConfig, PushKernelArg,
};
use joinkit_cuda::{Backend, CudaBackend, DeviceBuffer, Element, Error, Result, Scratch, driver};

use crate::format::{
    ChunkFault, CodecOptions, HEADER_WORDS, Scheme, ValueType, directory_words, header_words,
    raw_chunk_words,
};
use crate::host::{sign_flip, validate_streams};
use crate::{check_bounds, check_ranges, value_bounds};

static KERNELS: joinkit_cuda::KernelModule = joinkit_cuda::kernel_module!();

/// Values per thread of the chunk kernels (`IPT` in codec.cu): `codec_{encode,decode}_*` for
/// chunks of up to 4096 values, `codec_{encode,decode}_wide_*` for 8192, so blocks have at most
/// 512 threads.
const CHUNK_IPT: u32 = 8;
const CHUNK_IPT_WIDE: u32 = 16;
const WIDE_ABOVE: u32 = 4096;

/// The encode (`encode = true`) or decode kernel for `bits`-bit values in chunks of `cv`, and
/// its block size.
fn chunk_kernel(encode: bool, bits: u32, cv: u32) -> (&'static str, u32) {
    let wide = cv > WIDE_ABOVE;
    let name = match (encode, wide, bits == 32) {
        (true, false, true) => "codec_encode_u32",
        (true, false, false) => "codec_encode_u64",
        (true, true, true) => "codec_encode_wide_u32",
        (true, true, false) => "codec_encode_wide_u64",
        (false, false, true) => "codec_decode_u32",
        (false, false, false) => "codec_decode_u64",
        (false, true, true) => "codec_decode_wide_u32",
        (false, true, false) => "codec_decode_wide_u64",
    };
    (name, cv / if wide { CHUNK_IPT_WIDE } else { CHUNK_IPT })
}
/// Static shared memory of the chunk kernels, rounded up (ptxas reports 1168 bytes).
const STATIC_SHARED: usize = 1280;

/// The warp decoder (`codec_decode_warp_*`) is occupancy-bound: every warp decodes its chunks
/// one after another, so its shared memory is sized to the data. Per warp it stages the
/// longest chunk of the call (at most `WARP_STAGE_WORDS` words) and holds up to
/// `WARP_VALUE_BYTES` of intermediate values; a chunk beyond either goes to the block decoder.
/// l_orderkey's cascade, 4096 values per chunk, needs about 100 words and 1100 values. Measured
/// on an H200 (its decode, GB/s): per-warp stage 256 words, 1536 values, 4 warps a block:
/// 1041; 128 words, 1280 values: 1223, 2 warps a block: 1267, 8: 1210.
const WARP_DECODE_BLOCK: u32 = 64;
const WARP_STAGE_WORDS: u32 = 256;
const WARP_VALUE_BYTES: u32 = 10 << 10;
/// `sizeof(ChunkHeader)` in codec.cu.
const CHUNK_HEADER_BYTES: usize = 304;

/// Intermediate values a warp of the warp decoder holds.
fn warp_values(bits: u32) -> u32 {
    WARP_VALUE_BYTES / (bits / 8)
}

/// Shared memory of one warp of the warp decoder: the parsed header, `stage_words` staged
/// words and one of padding, the intermediate values and one run-start bit per value of a
/// chunk.
fn warp_decode_bytes(stage_words: u32, cv: u32) -> usize {
    CHUNK_HEADER_BYTES
        + 8 * (stage_words as usize + 1)
        + WARP_VALUE_BYTES as usize
        + 4 * (cv as usize / 32)
}

/// Device scratch of the compressor: the chunk slots, and CUB's temporary storage for the scan.
/// Reuse one across calls so steady-state compression allocates nothing large.
#[derive(Debug, Default)]
pub struct CodecScratch {
    slots: Scratch,
    cub: Scratch,
}

impl CodecScratch {
    /// Empty scratch; the first call allocates.
    pub fn new() -> Self {
        Self::default()
    }
}

/// Launch shape of a chunk kernel: one block of `block` threads per chunk (grid-stride over
/// chunks, as many blocks as fit on the device), `smem` bytes of dynamic shared memory (`f`
/// from [`CudaBackend::function_with_dynamic_shared`]).
fn chunk_config(
    backend: &CudaBackend,
    f: &CudaFunction,
    cv: u32,
    block: u32,
    smem: usize,
    chunks: u64,
) -> Result<LaunchConfig> {
    let info = backend.info();
    if smem + STATIC_SHARED > info.max_shared_per_block_optin as usize {
        return Err(Error::InvalidArgument(format!(
            "chunks of {cv} values need {smem} bytes of shared memory; the device offers {}",
            info.max_shared_per_block_optin
        )));
    }
    let per_sm = f
        .occupancy_max_active_blocks_per_multiprocessor(block, smem, None)
        .map_err(driver("reading kernel occupancy"))?
        .max(1);
    let grid = (u64::from(info.sm_count.max(1)) * u64::from(per_sm))
        .min(chunks)
        .max(1);
    Ok(LaunchConfig {
        grid_dim: (grid as u32, 1, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: smem as u32,
    })
}

/// Launches `codec_copy_segments`: `(source, destination, count)` word triples.
fn copy_segments(backend: &CudaBackend, src: u64, segs: &[u64], dst: u64) -> Result<()> {
    let nseg = (segs.len() / 3) as u64;
    if nseg == 0 {
        return Ok(());
    }
    let segs_dev = backend.upload(segs)?;
    let f = backend.function(&KERNELS, "codec_copy_segments")?;
    let cfg = backend.grid_stride_config((nseg as usize).saturating_mul(128), 128);
    let sp = segs_dev.device_ptr();
    let mut b = backend.stream().launch_builder(&f);
    b.arg(&src).arg(&sp).arg(&nseg).arg(&dst);
    // SAFETY: every triple was built by this module to lie inside `src` and `dst`; `segs_dev`
    // lives until the launch is queued and is freed stream-ordered after it.
    unsafe { b.launch(cfg) }
        .map(|_| ())
        .map_err(driver("launching codec_copy_segments"))
}

/// Ranges of an input as the chunk kernels read them, each a buffer of its own: each buffer's
/// `(start, values, 0, 0)` and the global index of its first chunk (then the chunk count).
struct BufferChunks {
    desc: Vec<u64>,
    chunk_base: Vec<u64>,
    buffers: u32,
}

/// [`BufferChunks`] uploaded for a launch.
struct BufferChunksOnDevice {
    desc: DeviceBuffer<u64>,
    chunk_base: DeviceBuffer<u64>,
    buffers: u32,
}

impl BufferChunks {
    /// The buffers `ranges` (inside the input: checked by the callers).
    fn of(ranges: &[Range<usize>], cv: u32) -> Result<Self> {
        let nbuf = ranges.len();
        let buffers =
            u32::try_from(nbuf).map_err(|_| Error::InvalidArgument("too many buffers".into()))?;
        let mut chunk_base = Vec::with_capacity(nbuf + 1);
        let mut desc = Vec::with_capacity(4 * nbuf);
        let mut g = 0u64;
        for r in ranges {
            chunk_base.push(g);
            let n = r.len() as u64;
            desc.extend([r.start as u64, n, 0, 0]);
            g += n.div_ceil(u64::from(cv));
        }
        chunk_base.push(g);
        Ok(Self {
            desc,
            chunk_base,
            buffers,
        })
    }

    fn chunks(&self) -> u64 {
        self.chunk_base.last().copied().unwrap_or(0)
    }

    fn upload(&self, backend: &CudaBackend) -> Result<BufferChunksOnDevice> {
        Ok(BufferChunksOnDevice {
            desc: backend.upload(&self.desc.max_len1())?,
            chunk_base: backend.upload(&self.chunk_base)?,
            buffers: self.buffers,
        })
    }
}

/// Bytes of `chunks` slots of `slot_words` words.
fn slot_bytes(chunks: u64, slot_words: u64) -> Result<usize> {
    chunks
        .checked_mul(slot_words * 8)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or(Error::SizeOverflow("compression slots"))
}

/// The chunk encoder (`codec_encode_*`) for `T` in chunks of `cv` values, with its launch
/// shape for `chunks` chunks.
struct Encoder {
    f: CudaFunction,
    cfg: LaunchConfig,
    cv: u32,
    chunks: u64,
}

impl Encoder {
    fn new<T: Element>(backend: &CudaBackend, cv: u32, chunks: u64) -> Result<Self> {
        let (name, block) = chunk_kernel(true, T::BITS, cv);
        let f = backend.function_with_dynamic_shared(&KERNELS, name)?;
        // Two value buffers and one u16 run-start buffer of a chunk each.
        let smem = cv as usize * (2 * (T::BITS as usize / 8) + 2);
        let cfg = chunk_config(backend, &f, cv, block, smem, chunks)?;
        Ok(Self { f, cfg, cv, chunks })
    }

    /// Encodes every chunk of the buffers of `input` that `layout` describes with `scheme`:
    /// chunk `g` into slot `g` of `slots` (a base pointer and words a slot) and its word count
    /// into `sizes[g]` (a device pointer to `chunks` words).
    fn launch<T: Element>(
        &self,
        backend: &CudaBackend,
        input: &CudaView<'_, T>,
        layout: &BufferChunksOnDevice,
        scheme: &Scheme,
        (slots, slot_words): (u64, u64),
        sizes: u64,
    ) -> Result<()> {
        if self.chunks == 0 {
            return Ok(());
        }
        let inp = input.device_ptr(backend.stream()).0;
        let (dp, cb) = (layout.desc.device_ptr(), layout.chunk_base.device_ptr());
        let (layers, nl) = (scheme.word(), scheme.layers().len() as u32);
        let signed = u32::from(sign_flip::<T>() != 0);
        let mut b = backend.stream().launch_builder(&self.f);
        b.arg(&inp)
            .arg(&dp)
            .arg(&cb)
            .arg(&layout.buffers)
            .arg(&self.chunks)
            .arg(&self.cv);
        b.arg(&layers)
            .arg(&nl)
            .arg(&signed)
            .arg(&slots)
            .arg(&slot_words);
        b.arg(&sizes);
        // SAFETY: `layout` describes buffers inside `input` (bounds checked by the callers);
        // the slots hold `chunks * slot_words` words and each block writes at most
        // `slot_words` words of its own slot (a raw chunk is the largest); `sizes` holds
        // `chunks` words.
        unsafe { b.launch(self.cfg) }.map_err(driver("launching codec_encode"))?;
        Ok(())
    }
}

/// Words each of `schemes` encodes the chunks of `input`'s `ranges` into (each range a
/// buffer of its own; the chunks only: no stream headers or offset tables), the counts the
/// sampled selector compares: the encoder reads the ranges where they are, one launch a
/// scheme into the same slots, one download for all.
///
/// # Errors
/// [`Error::InvalidArgument`] for ranges outside `input` or bad options; allocation and
/// driver errors.
pub(crate) fn encoded_chunk_words<T: Element>(
    backend: &CudaBackend,
    input: &DeviceBuffer<T>,
    ranges: &[Range<usize>],
    schemes: &[Scheme],
    options: &CodecOptions,
) -> Result<Vec<u64>> {
    options.check()?;
    check_ranges(ranges, input.len())?;
    let cv = options.chunk_values;
    let layout = BufferChunks::of(ranges, cv)?;
    let chunks = layout.chunks();
    if chunks == 0 || schemes.is_empty() {
        return Ok(vec![0; schemes.len()]);
    }
    let slot_words = raw_chunk_words(u64::from(cv), T::BITS);
    let slots = backend.alloc::<u64>(slot_bytes(chunks, slot_words)? / 8)?;
    let per_scheme = usize::try_from(chunks).map_err(|_| Error::SizeOverflow("chunk count"))?;
    let total = per_scheme
        .checked_mul(schemes.len())
        .ok_or(Error::SizeOverflow("chunk sizes"))?;
    let sizes = backend.alloc::<u64>(total)?;
    let on_device = layout.upload(backend)?;
    let encoder = Encoder::new::<T>(backend, cv, chunks)?;
    let input = input.view();
    for (k, scheme) in schemes.iter().enumerate() {
        // Launches on one stream run in turn, so every scheme may reuse the slots.
        let at = sizes.device_ptr() + (k * per_scheme * 8) as u64;
        let slots_of = (slots.device_ptr(), slot_words);
        encoder.launch(backend, &input, &on_device, scheme, slots_of, at)?;
    }
    let sizes = fetch(backend, &sizes)?;
    Ok(sizes.chunks(per_scheme).map(|c| c.iter().sum()).collect())
}

/// Downloads a device buffer (synchronizes).
fn fetch(backend: &CudaBackend, buf: &DeviceBuffer<u64>) -> Result<Vec<u64>> {
    backend.download(buf)
}

/// What [`plan_compress`] found: the output size and each stream's range; pass it to
/// [`finish_compress`].
#[derive(Debug)]
pub struct CompressPlan<'s> {
    words: usize,
    ranges: Vec<Range<usize>>,
    chunks: u64,
    nbuf: u32,
    slot_words: u64,
    slots: u64,
    sizes: DeviceBuffer<u64>,
    pos: DeviceBuffer<u64>,
    chunk_base: DeviceBuffer<u64>,
    starts: DeviceBuffer<u64>,
    headers: DeviceBuffer<u64>,
    segs: Vec<u64>,
    _scratch: &'s CodecScratch,
}

impl CompressPlan<'_> {
    /// Words the output needs.
    pub fn words(&self) -> usize {
        self.words
    }
    /// Each stream's word range in the output.
    pub fn ranges(&self) -> &[Range<usize>] {
        &self.ranges
    }
}

/// Pass 1 of compression: encodes every chunk of the buffers `input[bounds[k]..bounds[k+1]]`
/// into slots of `scratch` with one fused launch, scans the chunk sizes (CUB) and reads the
/// stream sizes back (synchronizes once).
///
/// # Errors
/// [`Error::InvalidArgument`] for bad bounds or options; allocation and driver errors.
pub fn plan_compress<'s, T: Element>(
    backend: &CudaBackend,
    input: &CudaView<'_, T>,
    bounds: &[usize],
    scheme: &Scheme,
    options: &CodecOptions,
    scratch: &'s mut CodecScratch,
) -> Result<CompressPlan<'s>> {
    options.check()?;
    check_bounds(bounds, input.len())?;
    let cv = options.chunk_values;
    let buffers: Vec<Range<usize>> = bounds.windows(2).map(|w| w[0]..w[1]).collect();
    let layout = BufferChunks::of(&buffers, cv)?;
    let (nbuf, chunks) = (buffers.len(), layout.chunks());
    let slot_words = raw_chunk_words(u64::from(cv), T::BITS);
    let slots = scratch
        .slots
        .reserve(backend, slot_bytes(chunks, slot_words)?)?;
    let g_len = usize::try_from(chunks + 1).map_err(|_| Error::SizeOverflow("chunk count"))?;
    let mut sizes = backend.alloc::<u64>(g_len)?;
    backend.fill(&mut sizes, 0)?;
    let mut pos = backend.alloc::<u64>(g_len)?;
    let on_device = layout.upload(backend)?;
    if chunks > 0 {
        let slots_of = (slots, slot_words);
        let encoder = Encoder::new::<T>(backend, cv, chunks)?;
        encoder.launch(
            backend,
            input,
            &on_device,
            scheme,
            slots_of,
            sizes.device_ptr(),
        )?;
    }
    joinkit_primitives::cuda::exclusive_sum(
        backend,
        &sizes.view(),
        &mut pos.view_mut(),
        &mut scratch.cub,
    )?;
    // Scanned position of each buffer's first chunk (and the end).
    let segs: Vec<u64> = (layout.chunk_base.iter())
        .enumerate()
        .flat_map(|(k, &c)| [c, k as u64, 1])
        .collect();
    let bpos_dev = backend.alloc::<u64>(nbuf + 1)?;
    copy_segments(backend, pos.device_ptr(), &segs, bpos_dev.device_ptr())?;
    let bpos = fetch(backend, &bpos_dev)?;

    let vtype = ValueType::of::<T>();
    let mut ranges = Vec::with_capacity(nbuf);
    let mut starts = Vec::with_capacity(nbuf);
    let mut headers = Vec::with_capacity(9 * nbuf);
    let mut segs = Vec::with_capacity(6 * nbuf);
    let mut at = 0u64;
    for k in 0..nbuf {
        let c = layout.chunk_base[k + 1] - layout.chunk_base[k];
        let total = directory_words(c) + (bpos[k + 1] - bpos[k]);
        let n = layout.desc[4 * k + 1];
        headers.extend(header_words(vtype, scheme, n, cv, total));
        headers.push(total);
        let h = 9 * k as u64;
        segs.extend([
            h,
            at,
            HEADER_WORDS as u64,
            h + 8,
            at + HEADER_WORDS as u64 + c,
            1,
        ]);
        starts.push(at);
        let end = at + total;
        ranges.push(at as usize..end as usize);
        at = end;
    }
    let words = usize::try_from(at).map_err(|_| Error::SizeOverflow("compressed size"))?;
    Ok(CompressPlan {
        words,
        ranges,
        chunks,
        nbuf: layout.buffers,
        slot_words,
        slots,
        sizes,
        pos,
        chunk_base: on_device.chunk_base,
        starts: backend.upload(&starts.max_len1())?,
        headers: backend.upload(&headers.max_len1())?,
        segs,
        _scratch: scratch,
    })
}

/// A vector with at least one element (device buffers of length 0 are fine, but uploads of
/// nothing are pointless work; kernels never read the padding).
trait MaxLen1 {
    fn max_len1(&self) -> Vec<u64>;
}
impl MaxLen1 for Vec<u64> {
    fn max_len1(&self) -> Vec<u64> {
        if self.is_empty() {
            vec![0]
        } else {
            self.clone()
        }
    }
}

/// Pass 2 of compression: moves the chunks into `out` (exactly [`CompressPlan::words`] words)
/// and writes the stream headers and offsets. Queued, not synchronized. Returns each stream's
/// range in `out`.
///
/// # Errors
/// [`Error::LengthMismatch`] when `out` has another length; driver errors.
pub fn finish_compress(
    backend: &CudaBackend,
    plan: &CompressPlan<'_>,
    out: &mut CudaViewMut<'_, u64>,
) -> Result<Vec<Range<usize>>> {
    Error::check_len("compressed output", out.len(), plan.words)?;
    let op = out.device_ptr_mut(backend.stream()).0;
    if plan.chunks > 0 {
        let f = backend.function(&KERNELS, "codec_compact")?;
        let cfg = backend.grid_stride_config((plan.chunks as usize).saturating_mul(256), 256);
        let (sz, ps, cb, st) = (
            plan.sizes.device_ptr(),
            plan.pos.device_ptr(),
            plan.chunk_base.device_ptr(),
            plan.starts.device_ptr(),
        );
        let mut b = backend.stream().launch_builder(&f);
        b.arg(&plan.slots)
            .arg(&plan.slot_words)
            .arg(&sz)
            .arg(&ps)
            .arg(&cb)
            .arg(&st);
        b.arg(&plan.nbuf).arg(&plan.chunks).arg(&op);
        // SAFETY: sizes, positions and stream starts come from pass 1 of this plan, so every
        // chunk lands inside its stream's range of `out` (whose length was checked); the slots
        // are still reserved (the plan borrows the scratch).
        unsafe { b.launch(cfg) }.map_err(driver("launching codec_compact"))?;
    }
    copy_segments(backend, plan.headers.device_ptr(), &plan.segs, op)?;
    Ok(plan.ranges.clone())
}

/// What [`plan_decompress`] validated; pass it to [`finish_decompress`].
#[derive(Debug)]
pub struct DecompressPlan {
    bounds: Vec<usize>,
    chunk_base: Vec<u64>,
    chunk_base_dev: DeviceBuffer<u64>,
    desc: DeviceBuffer<u64>,
    chunks: u64,
    chunk_values: u32,
    /// Words the warp decoder stages per chunk: the longest chunk of the streams whose
    /// scheme it takes (two layers or more), rounded up, at most [`WARP_STAGE_WORDS`]; 0 when
    /// no stream has such a scheme.
    warp_stage_words: u32,
    encoded_len: usize,
    single: bool,
    bits: u32,
    signed: bool,
}

impl DecompressPlan {
    /// Values the output needs.
    pub fn values(&self) -> usize {
        self.bounds[self.bounds.len() - 1]
    }
    /// Bounds of each stream's values in the output.
    pub fn bounds(&self) -> &[usize] {
        &self.bounds
    }
}

/// Reads the headers and offset tables of the streams `ranges` of `encoded` back and validates
/// them on the host (synchronizes). `single` names errors as for one stream (no buffer index).
///
/// # Errors
/// [`Error::Corrupt`] for a bad header or offset table; [`Error::InvalidArgument`] for ranges
/// outside `encoded`, another type than `T` or mixed chunk sizes; driver errors.
pub fn plan_decompress<T: Element>(
    backend: &CudaBackend,
    encoded: &CudaView<'_, u64>,
    ranges: &[Range<usize>],
    single: bool,
) -> Result<DecompressPlan> {
    check_ranges(ranges, encoded.len())?;
    let nbuf = ranges.len();
    let enc = encoded.device_ptr(backend.stream()).0;
    // Headers, gathered into one download.
    let segs: Vec<u64> = ranges
        .iter()
        .enumerate()
        .flat_map(|(k, r)| {
            [
                r.start as u64,
                (HEADER_WORDS * k) as u64,
                r.len().min(HEADER_WORDS) as u64,
            ]
        })
        .collect();
    let mut heads = backend.alloc::<u64>(HEADER_WORDS * nbuf)?;
    backend.fill(&mut heads, 0)?;
    copy_segments(backend, enc, &segs, heads.device_ptr())?;
    let heads = fetch(backend, &heads)?;
    let header = |k: usize| {
        let h = &heads[HEADER_WORDS * k..HEADER_WORDS * (k + 1)];
        (
            &h[..ranges[k].len().min(HEADER_WORDS)],
            ranges[k].len() as u64,
        )
    };
    // Offset tables of the streams whose headers pass, gathered into a second download (the
    // shared validation below repeats the header checks, in the order both backends use).
    let mut segs = Vec::new();
    let mut table_at = vec![0usize; nbuf];
    let mut at = 0u64;
    for (k, slot) in table_at.iter_mut().enumerate() {
        let (h, len) = header(k);
        if let Ok(info) = crate::host::validate_header::<T>(h, len, None) {
            *slot = at as usize;
            let words = info.chunks + 1;
            segs.extend([ranges[k].start as u64 + HEADER_WORDS as u64, at, words]);
            at += words;
        }
    }
    let tables_dev = backend.alloc::<u64>(at as usize)?;
    copy_segments(backend, enc, &segs, tables_dev.device_ptr())?;
    let tables = fetch(backend, &tables_dev)?;
    let infos = validate_streams::<T>(nbuf, single, header, |k, info| {
        &tables[table_at[k]..table_at[k] + info.chunks as usize + 1]
    })?;
    let bounds = value_bounds(&infos)?;
    let longest_chunk = infos
        .iter()
        .enumerate()
        .filter(|(_, info)| info.scheme.layers().len() >= 2)
        .flat_map(|(k, info)| {
            let table = &tables[table_at[k]..table_at[k] + info.chunks as usize + 1];
            table.windows(2).map(|w| w[1] - w[0])
        })
        .max()
        .unwrap_or(0);
    let warp_stage_words = longest_chunk
        .next_multiple_of(8)
        .min(u64::from(WARP_STAGE_WORDS)) as u32;
    let mut chunk_base = Vec::with_capacity(nbuf + 1);
    let mut desc = Vec::with_capacity(8 * nbuf);
    let mut g = 0u64;
    for (k, info) in infos.iter().enumerate() {
        chunk_base.push(g);
        desc.extend([
            ranges[k].start as u64,
            ranges[k].len() as u64,
            bounds[k] as u64,
            info.values,
            0,
            info.scheme.word(),
            info.scheme.layers().len() as u64,
            0,
        ]);
        g += info.chunks;
    }
    chunk_base.push(g);
    Ok(DecompressPlan {
        bounds,
        chunk_base_dev: backend.upload(&chunk_base)?,
        chunk_base,
        desc: backend.upload(&desc.max_len1())?,
        chunks: g,
        chunk_values: infos
            .first()
            .map_or(crate::DEFAULT_CHUNK_VALUES, |i| i.chunk_values),
        warp_stage_words,
        encoded_len: encoded.len(),
        single,
        bits: T::BITS,
        signed: sign_flip::<T>() != 0,
    })
}

/// Decodes every chunk of every planned stream into `out` (exactly
/// [`DecompressPlan::values`] values) with one fused launch (and one more for the chunks a
/// warp does not take: one layer or none, raw, or too long), then reads the fault word back
/// (synchronizes). `encoded` must be the stream the plan was made from. Returns the bounds of
/// each stream's values.
///
/// # Errors
/// [`Error::Corrupt`] for the first chunk (of the first stream) that fails its checks;
/// [`Error::LengthMismatch`] for an output or stream of the wrong length;
/// [`Error::InvalidArgument`] when `T` is not the planned type; driver errors.
pub fn finish_decompress<T: Element>(
    backend: &CudaBackend,
    encoded: &CudaView<'_, u64>,
    plan: &DecompressPlan,
    out: &mut CudaViewMut<'_, T>,
) -> Result<Vec<usize>> {
    Error::check_len("decompressed output", out.len(), plan.values())?;
    Error::check_len("planned stream", encoded.len(), plan.encoded_len)?;
    if T::BITS != plan.bits || (sign_flip::<T>() != 0) != plan.signed {
        return Err(Error::InvalidArgument(
            "finish_decompress called with another type than planned".into(),
        ));
    }
    if plan.chunks == 0 {
        return Ok(plan.bounds.clone());
    }
    // The fault word (lowest failing chunk << 8 | code) and the warp decoder's deferred count.
    let status = backend.upload(&[u64::MAX, 0])?;
    let cv = plan.chunk_values;
    let enc = encoded.device_ptr(backend.stream()).0;
    let op = out.device_ptr_mut(backend.stream()).0;
    let (dp, cb, ep) = (
        plan.desc.device_ptr(),
        plan.chunk_base_dev.device_ptr(),
        status.device_ptr(),
    );
    let nbuf = u32::try_from(plan.chunk_base.len() - 1)
        .map_err(|_| Error::InvalidArgument("too many buffers".into()))?;
    let signed = u32::from(plan.signed);
    // Chunks of up to 4096 values of a scheme with two layers or more: the warp decoder
    // first; the block decoder then takes the chunks it deferred. Otherwise the block decoder
    // takes all.
    let mut deferred = None;
    if cv <= WIDE_ABOVE && plan.warp_stage_words > 0 {
        let list = backend.alloc::<u64>(plan.chunks as usize)?;
        let name = if T::BITS == 32 {
            "codec_decode_warp_u32"
        } else {
            "codec_decode_warp_u64"
        };
        let f = backend.function_with_dynamic_shared(&KERNELS, name)?;
        let (w_cap, a_cap) = (plan.warp_stage_words, warp_values(T::BITS));
        let warps = (WARP_DECODE_BLOCK / 32) as usize;
        let smem = warps * warp_decode_bytes(w_cap, cv);
        let cfg = chunk_config(backend, &f, cv, WARP_DECODE_BLOCK, smem, plan.chunks)?;
        let (lp, lenp) = (list.device_ptr(), ep + 8);
        let mut b = backend.stream().launch_builder(&f);
        b.arg(&enc).arg(&dp).arg(&cb).arg(&nbuf).arg(&plan.chunks);
        b.arg(&plan.chunk_values)
            .arg(&signed)
            .arg(&w_cap)
            .arg(&a_cap);
        b.arg(&op).arg(&ep).arg(&lp).arg(&lenp);
        // SAFETY: as the block decoder's launch below; the kernel stages only chunks of at
        // most `w_cap` words and decodes only chunks whose inner layers fit `a_cap` values (its
        // shared memory, sized by warp_decode_bytes for both), and appends every other chunk
        // id once to `list`, which holds one slot per chunk.
        unsafe { b.launch(cfg) }.map_err(driver("launching codec_decode_warp"))?;
        deferred = Some(list);
    }
    let (name, block) = chunk_kernel(false, T::BITS, cv);
    let f = backend.function_with_dynamic_shared(&KERNELS, name)?;
    // The chunk's words (a raw chunk is the longest valid one) and a word of padding for the
    // unpacker's reads past them, one value buffer and one byte of run-start flags per value
    // of a chunk.
    let smem = (raw_chunk_words(u64::from(cv), T::BITS) as usize + 1) * 8
        + cv as usize * (T::BITS as usize / 8 + 1);
    let cfg = chunk_config(backend, &f, cv, block, smem, plan.chunks)?;
    let (lp, lenp) = deferred
        .as_ref()
        .map_or((0, 0), |list| (list.device_ptr(), ep + 8));
    let mut b = backend.stream().launch_builder(&f);
    b.arg(&enc).arg(&dp).arg(&cb).arg(&nbuf).arg(&plan.chunks);
    b.arg(&plan.chunk_values)
        .arg(&signed)
        .arg(&lp)
        .arg(&lenp)
        .arg(&op)
        .arg(&ep);
    // SAFETY: every stream's header and offset table were validated on the host against the
    // stream's range inside `encoded` (same length as planned); the kernel re-checks each
    // chunk's offsets (so the chunk fits its shared-memory copy) before reading it once, checks
    // its header and checksum before decoding, and writes only its chunk's values at the
    // stream's output offset, inside `out` (length checked). The list, when given, holds
    // `*lenp` chunk ids below `plan.chunks`, written by the warp decoder queued before.
    unsafe { b.launch(cfg) }.map_err(driver("launching codec_decode"))?;
    drop(deferred);
    let fault = fetch(backend, &status)?[0];
    if fault != u64::MAX {
        let g = fault >> 8;
        let k = plan.chunk_base.partition_point(|&c| c <= g) - 1;
        let c = g - plan.chunk_base[k];
        let f = ChunkFault::from_code((fault & 0xff) as u8);
        return Err(f.error((!plan.single).then_some(k), c));
    }
    Ok(plan.bounds.clone())
}
