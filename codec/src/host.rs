//! The host implementation of the format: chunk encode/decode (the CPU twin of
//! `kernels/codec.cu`, decision for decision), stream assembly and directory validation, which
//! both backends share.

use joinkit_cuda::{Element, Error, Result};
use rayon::prelude::*;

use crate::format::{
    ChunkFault, HEADER_WORDS, Layer, MODE_CASCADED, MODE_RAW, Scheme, StreamInfo, ValueType,
    bit_width, check_type, chunk_checksum, chunk_layout, chunk_range, directory_words,
    header_words, packed_words, parse_header, raw_chunk_words,
};

/// All-ones in the low `bits` bits.
#[inline]
pub(crate) fn value_mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// The bit flipped to map signed values to unsigned order (0 for unsigned types).
pub(crate) fn sign_flip<T: Element>() -> u64 {
    if T::NAME.starts_with('i') {
        1u64 << (T::BITS - 1)
    } else {
        0
    }
}

#[inline]
fn zigzag(d: u64, bits: u32) -> u64 {
    if bits == 32 {
        let s = d as u32 as i32;
        ((s << 1) ^ (s >> 31)) as u32 as u64
    } else {
        let s = d as i64;
        ((s << 1) ^ (s >> 63)) as u64
    }
}

#[inline]
fn unzigzag(z: u64, bits: u32) -> u64 {
    ((z >> 1) ^ (z & 1).wrapping_neg()) & value_mask(bits)
}

/// Appends `count` values of `width` bits, little-endian bit order, to `dst`.
fn pack(dst: &mut Vec<u64>, vals: impl Iterator<Item = u64>, count: usize, width: u32) {
    let start = dst.len();
    dst.resize(start + packed_words(count as u64, width) as usize, 0);
    if width == 0 {
        return;
    }
    let w = width as usize;
    for (i, v) in vals.enumerate() {
        let pos = i * w;
        let (wi, sh) = (start + pos / 64, pos % 64);
        dst[wi] |= v << sh;
        if sh + w > 64 {
            dst[wi + 1] |= v >> (64 - sh);
        }
    }
}

/// Value `i` of a packed stream of `width`-bit values.
#[inline]
fn unpack(src: &[u64], i: u64, width: u32) -> u64 {
    if width == 0 {
        return 0;
    }
    let pos = i * u64::from(width);
    let (wi, sh) = ((pos / 64) as usize, (pos % 64) as u32);
    let mut v = src[wi] >> sh;
    if sh + width > 64 {
        v |= src[wi + 1] << (64 - sh);
    }
    v & value_mask(width)
}

fn min_max(v: &[u64]) -> (u64, u64) {
    v.iter()
        .fold((u64::MAX, 0), |(lo, hi), &x| (lo.min(x), hi.max(x)))
}

/// Encodes one chunk (`orig`: the values' bit patterns, `bits` wide) as chunk `chunk` of its
/// stream. Cascaded when that is strictly smaller than the raw copy, else raw.
pub(crate) fn encode_chunk(
    orig: &[u64],
    bits: u32,
    flip: u64,
    scheme: &Scheme,
    chunk: u64,
) -> Vec<u64> {
    let n = orig.len();
    let mask = value_mask(bits);
    let nl = scheme.layers().len();
    let mut words = vec![0u64; 3 + nl];
    let mut cur: Vec<u64> = orig.iter().map(|&v| v ^ flip).collect();
    for (l, layer) in scheme.layers().iter().enumerate() {
        match layer {
            Layer::Rle => {
                let mut vals: Vec<u64> = Vec::new();
                let mut lens: Vec<u64> = Vec::new();
                for &v in &cur {
                    match (vals.last(), lens.last_mut()) {
                        (Some(&last), Some(len)) if last == v => *len += 1,
                        _ => {
                            vals.push(v);
                            lens.push(1);
                        }
                    }
                }
                let (lo, hi) = min_max(&lens);
                let w = bit_width(hi - lo);
                words[2 + l] = lens.len() as u64 | u64::from(w) << 32 | lo << 40;
                let count = lens.len();
                pack(&mut words, lens.into_iter().map(|x| x - lo), count, w);
                cur = vals;
            }
            Layer::Delta => {
                words[2 + l] = cur[0];
                let mut prev = cur[0];
                for x in cur.iter_mut() {
                    let v = *x;
                    *x = zigzag(v.wrapping_sub(prev) & mask, bits);
                    prev = v;
                }
            }
        }
    }
    let (lo, hi) = min_max(&cur);
    let fw = bit_width(hi - lo);
    words[2 + nl] = lo;
    pack(&mut words, cur.iter().map(|&x| x - lo), cur.len(), fw);
    if (words.len() as u64) < raw_chunk_words(n as u64, bits) {
        words[0] = n as u64 | MODE_CASCADED << 32 | u64::from(fw) << 40;
    } else {
        words.clear();
        words.extend([n as u64 | MODE_RAW << 32 | u64::from(bits) << 40, 0]);
        pack(&mut words, orig.iter().copied(), n, bits);
    }
    words[1] = chunk_checksum(&words, chunk);
    words
}

/// Decodes one chunk of `n` values into `out` (bit patterns), checking its structure, its
/// checksum and its run sums, in that order (as the CUDA decoder does).
pub(crate) fn decode_chunk(
    words: &[u64],
    bits: u32,
    flip: u64,
    scheme: &Scheme,
    chunk: u64,
    out: &mut [u64],
) -> std::result::Result<(), ChunkFault> {
    let n = out.len() as u64;
    let lay = chunk_layout(words, n, bits, scheme)?;
    if chunk_checksum(words, chunk) != words[1] {
        return Err(ChunkFault::Checksum);
    }
    if lay.raw {
        for (i, o) in out.iter_mut().enumerate() {
            *o = unpack(&words[2..], i as u64, bits);
        }
        return Ok(());
    }
    let mask = value_mask(bits);
    let fs = &words[lay.final_offset as usize..];
    let mut cur: Vec<u64> = (0..lay.final_count)
        .map(|i| lay.final_min.wrapping_add(unpack(fs, i, lay.final_width)) & mask)
        .collect();
    for (l, layer) in scheme.layers().iter().enumerate().rev() {
        let info = lay.layers[l];
        match layer {
            Layer::Delta => {
                let mut acc = info.value;
                for x in cur.iter_mut() {
                    acc = acc.wrapping_add(unzigzag(*x, bits)) & mask;
                    *x = acc;
                }
            }
            Layer::Rle => {
                let before = if l == 0 { n } else { lay.layers[l - 1].count };
                let runs = &words[info.offset as usize..];
                let lens: Vec<u64> = (0..info.count)
                    .map(|k| info.value + unpack(runs, k, info.width))
                    .collect();
                if lens.iter().sum::<u64>() != before {
                    return Err(ChunkFault::Runs);
                }
                let mut next = Vec::with_capacity(before as usize);
                for (&v, &len) in cur.iter().zip(&lens) {
                    next.extend(std::iter::repeat_n(v, len as usize));
                }
                cur = next;
            }
        }
    }
    for (o, &v) in out.iter_mut().zip(&cur) {
        *o = v ^ flip;
    }
    Ok(())
}

/// Encodes a whole column as one stream.
pub(crate) fn encode_stream<T: Element>(values: &[T], scheme: &Scheme, cv: u32) -> Vec<u64> {
    let (bits, flip) = (T::BITS, sign_flip::<T>());
    let chunks: Vec<Vec<u64>> = values
        .par_chunks(cv as usize)
        .enumerate()
        .map(|(c, ch)| {
            let orig: Vec<u64> = ch.iter().map(|v| v.to_bits()).collect();
            encode_chunk(&orig, bits, flip, scheme, c as u64)
        })
        .collect();
    let dir = directory_words(chunks.len() as u64);
    let total = dir + chunks.iter().map(|c| c.len() as u64).sum::<u64>();
    let mut out = Vec::with_capacity(total as usize);
    out.extend(header_words(
        ValueType::of::<T>(),
        scheme,
        values.len() as u64,
        cv,
        total,
    ));
    let mut at = dir;
    for c in &chunks {
        out.push(at);
        at += c.len() as u64;
    }
    out.push(at);
    for c in chunks {
        out.extend(c);
    }
    out
}

/// Validates a stream header (`header`: the stream's first words, at most [`HEADER_WORDS`])
/// against the stream's length and the type `T`; `buffer` names the stream in errors.
///
/// # Errors
/// [`Error::Corrupt`] for a bad header; [`Error::InvalidArgument`] when the stream holds
/// another type than `T`.
pub(crate) fn validate_header<T: Element>(
    header: &[u64],
    len_words: u64,
    buffer: Option<usize>,
) -> Result<StreamInfo> {
    let info = parse_header(header, len_words).map_err(|e| match (buffer, e) {
        (Some(k), Error::Corrupt(m)) => Error::Corrupt(format!("buffer {k}: {m}")),
        (_, e) => e,
    })?;
    check_type::<T>(&info)?;
    Ok(info)
}

/// Validates a stream's offset table (`chunks + 1` entries): starts right after the table,
/// ends at the stream's end, every chunk at least [`MIN_CHUNK_WORDS`](crate::format::MIN_CHUNK_WORDS) and at most a raw chunk
/// long.
///
/// # Errors
/// [`Error::Corrupt`] naming the first bad chunk.
pub(crate) fn validate_offsets(
    info: &StreamInfo,
    offsets: &[u64],
    bits: u32,
    buffer: Option<usize>,
) -> Result<()> {
    let chunks = info.chunks;
    let last = chunks.saturating_sub(1);
    if (offsets.len() as u64) < chunks + 1 || offsets[0] != directory_words(chunks) {
        return Err(ChunkFault::Offset.error(buffer, 0));
    }
    let max_len = raw_chunk_words(u64::from(info.chunk_values), bits);
    for c in 0..chunks as usize {
        chunk_range(offsets, c, chunks, info.total_words, max_len)
            .map_err(|f| f.error(buffer, c as u64))?;
    }
    // After the chunks, so a bad earlier chunk is the one reported (FORMAT.md, validation 3).
    if offsets[chunks as usize] != info.total_words {
        return Err(ChunkFault::Offset.error(buffer, last));
    }
    Ok(())
}

/// Checks that all streams of a many-buffer decode share one chunk size (the fused decoder
/// sizes its blocks once).
///
/// # Errors
/// [`Error::InvalidArgument`] otherwise.
pub(crate) fn check_same_chunking(infos: &[StreamInfo]) -> Result<()> {
    match infos
        .windows(2)
        .find(|w| w[0].chunk_values != w[1].chunk_values)
    {
        Some(w) => Err(Error::InvalidArgument(format!(
            "decompress_many needs one chunk size for all buffers ({} and {} found)",
            w[0].chunk_values, w[1].chunk_values
        ))),
        None => Ok(()),
    }
}

/// Validates many streams the way both backends do: every header first, then the chunk
/// sizes, then every offset table. `stream(k)` gives stream `k`'s words.
///
/// # Errors
/// As [`validate_header`], [`check_same_chunking`] and [`validate_offsets`].
pub(crate) fn validate_streams<'a, T: Element>(
    count: usize,
    single: bool,
    header: impl Fn(usize) -> (&'a [u64], u64),
    offsets: impl Fn(usize, &StreamInfo) -> &'a [u64],
) -> Result<Vec<StreamInfo>> {
    let name = |k: usize| (!single).then_some(k);
    let infos = (0..count)
        .map(|k| {
            let (h, len) = header(k);
            validate_header::<T>(h, len, name(k))
        })
        .collect::<Result<Vec<_>>>()?;
    check_same_chunking(&infos)?;
    for (k, info) in infos.iter().enumerate() {
        validate_offsets(info, offsets(k, info), T::BITS, name(k))?;
    }
    Ok(infos)
}

/// Decodes a validated stream (see [`validate_streams`]) into `out`.
///
/// # Errors
/// [`Error::Corrupt`] for the first (lowest) chunk that fails.
pub(crate) fn decode_stream<T: Element>(
    words: &[u64],
    info: &StreamInfo,
    buffer: Option<usize>,
    out: &mut [T],
) -> Result<()> {
    let (bits, flip) = (T::BITS, sign_flip::<T>());
    let offsets = &words[HEADER_WORDS..];
    let cv = info.chunk_values as usize;
    let faults: Vec<Option<ChunkFault>> = out
        .par_chunks_mut(cv)
        .enumerate()
        .map(|(c, o)| {
            let (a, b) = (offsets[c] as usize, offsets[c + 1] as usize);
            let mut vals = vec![0u64; o.len()];
            match decode_chunk(&words[a..b], bits, flip, &info.scheme, c as u64, &mut vals) {
                Ok(()) => {
                    for (o, v) in o.iter_mut().zip(vals) {
                        *o = T::from_bits(v);
                    }
                    None
                }
                Err(f) => Some(f),
            }
        })
        .collect();
    match faults
        .iter()
        .enumerate()
        .find_map(|(c, f)| f.map(|f| (c, f)))
    {
        Some((c, f)) => Err(f.error(buffer, c as u64)),
        None => Ok(()),
    }
}

/// Decodes host streams `ranges` of `words` into `out` (which holds their values back to
/// back), after [`validate_streams`].
///
/// # Errors
/// [`Error::Corrupt`] for the first failing chunk of the first failing stream.
pub(crate) fn decode_streams<T: Element>(
    words: &[u64],
    ranges: &[std::ops::Range<usize>],
    infos: &[StreamInfo],
    single: bool,
    out: &mut [T],
) -> Result<()> {
    let mut at = 0usize;
    for (k, (r, info)) in ranges.iter().zip(infos).enumerate() {
        let n = info.values as usize;
        decode_stream(
            &words[r.clone()],
            info,
            (!single).then_some(k),
            &mut out[at..at + n],
        )?;
        at += n;
    }
    Ok(())
}
