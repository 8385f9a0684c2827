//! The encoded format (see `FORMAT.md`): schemes, the stream header, checksums, and the
//! per-chunk validation both decoders apply in the same order, so that the CPU and CUDA
//! decoders report the same [`Error::Corrupt`] for the same bad bytes.

use std::fmt;
use std::str::FromStr;

use joinkit_cuda::hash::{fmix64, hash64};
use joinkit_cuda::{Element, Error, Result};

/// The four bytes every encoded stream starts with.
pub const MAGIC: [u8; 4] = *b"JKCC";
/// Format version written by this crate (and the only one it reads).
pub const VERSION: u8 = 1;
/// Words (u64) of the fixed stream header, before the chunk offset table.
pub const HEADER_WORDS: usize = 8;
/// Most RLE/Delta layers a scheme may have.
pub const MAX_LAYERS: usize = 8;
/// Smallest allowed chunk size in values.
pub const MIN_CHUNK_VALUES: u32 = 256;
/// Largest allowed chunk size in values (bounded by shared memory per block on the GPU).
pub const MAX_CHUNK_VALUES: u32 = 8192;
/// Default chunk size in values.
pub const DEFAULT_CHUNK_VALUES: u32 = 4096;

/// Chunk mode byte: the chunk is a raw copy of the values.
pub(crate) const MODE_RAW: u64 = 0;
/// Chunk mode byte: the chunk holds the cascade.
pub(crate) const MODE_CASCADED: u64 = 1;

/// Multiplier that salts each word's position into its checksum term.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// One cascade layer, applied before the final frame-of-reference + bitpacking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// Run-length encoding: the stream becomes its run values; the run lengths are stored
    /// (frame-of-reference + bitpacked) beside it.
    Rle,
    /// Delta encoding: the stream becomes the zigzag-coded differences of consecutive values;
    /// the first value is stored as the base.
    Delta,
}

impl Layer {
    /// The layer's code in the format (`1` RLE, `2` Delta).
    pub const fn code(self) -> u8 {
        match self {
            Layer::Rle => 1,
            Layer::Delta => 2,
        }
    }

    fn from_code(code: u8) -> Option<Layer> {
        match code {
            1 => Some(Layer::Rle),
            2 => Some(Layer::Delta),
            _ => None,
        }
    }

    /// Rough relative decode cost (used to break ties between schemes of similar ratio):
    /// RLE needs a scan and an expansion, Delta a scan.
    pub(crate) const fn cost(self) -> u32 {
        match self {
            Layer::Rle => 2,
            Layer::Delta => 1,
        }
    }
}

/// A cascade: up to [`MAX_LAYERS`] RLE / Delta layers in the order they are applied when
/// encoding, always followed by frame-of-reference + bitpacking.
///
/// Written and parsed as `rle+delta+bp` (`bp` alone is plain frame-of-reference + bitpacking).
///
/// ```
/// use joinkit_codec::{Layer, Scheme};
/// let s: Scheme = "rle+delta+bp".parse().unwrap();
/// assert_eq!(s.layers(), &[Layer::Rle, Layer::Delta]);
/// assert_eq!(s.to_string(), "rle+delta+bp");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Scheme {
    layers: Vec<Layer>,
}

impl Scheme {
    /// A scheme with these layers (applied in order), then bitpacking.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] with more than [`MAX_LAYERS`] layers.
    pub fn new(layers: &[Layer]) -> Result<Scheme> {
        if layers.len() > MAX_LAYERS {
            return Err(Error::InvalidArgument(format!(
                "a scheme has at most {MAX_LAYERS} layers, {} given",
                layers.len()
            )));
        }
        Ok(Scheme {
            layers: layers.to_vec(),
        })
    }

    /// Frame-of-reference + bitpacking alone.
    pub fn bitpack() -> Scheme {
        Scheme::default()
    }

    /// The layers in encoding order.
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// Rough relative decode cost (sum of layer costs).
    pub(crate) fn cost(&self) -> u32 {
        self.layers.iter().map(|l| l.cost()).sum()
    }

    /// The layer codes packed one per byte, layer 0 in the lowest byte (header word 1).
    pub(crate) fn word(&self) -> u64 {
        self.layers
            .iter()
            .enumerate()
            .fold(0, |w, (i, l)| w | u64::from(l.code()) << (8 * i))
    }

    fn from_word(word: u64, count: usize) -> Option<Scheme> {
        if count > MAX_LAYERS || (count < MAX_LAYERS && word >> (8 * count) != 0) {
            return None;
        }
        let layers = (0..count)
            .map(|i| Layer::from_code((word >> (8 * i)) as u8))
            .collect::<Option<Vec<_>>>()?;
        Some(Scheme { layers })
    }

    /// The candidate schemes the selector tries by default.
    pub fn candidates() -> Vec<Scheme> {
        use Layer::{Delta as D, Rle as R};
        [
            &[][..],
            &[D],
            &[R],
            &[R, D],
            &[D, R],
            &[R, R],
            &[D, D],
            &[R, D, R],
        ]
        .iter()
        .map(|l| Scheme { layers: l.to_vec() })
        .collect()
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for l in &self.layers {
            f.write_str(match l {
                Layer::Rle => "rle+",
                Layer::Delta => "delta+",
            })?;
        }
        f.write_str("bp")
    }
}

impl FromStr for Scheme {
    type Err = Error;

    /// Parses `rle+delta+bp`, `delta`, `bp`, ... (the trailing `bp` is optional; `for` is
    /// accepted for it).
    fn from_str(s: &str) -> Result<Scheme> {
        let mut layers = Vec::new();
        let parts: Vec<&str> = s.split('+').map(str::trim).collect();
        for (i, p) in parts.iter().enumerate() {
            match p.to_ascii_lowercase().as_str() {
                "rle" => layers.push(Layer::Rle),
                "delta" => layers.push(Layer::Delta),
                "bp" | "for" | "bitpack" if i + 1 == parts.len() => {}
                _ => {
                    return Err(Error::InvalidArgument(format!(
                        "scheme {s:?}: expected layers `rle`/`delta` joined by `+`, ending in `bp`"
                    )));
                }
            }
        }
        Scheme::new(&layers)
    }
}

/// The element type recorded in a stream header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ValueType {
    U32 = 0,
    U64 = 1,
    I32 = 2,
    I64 = 3,
}

impl ValueType {
    pub(crate) fn of<T: Element>() -> ValueType {
        match T::NAME {
            "u32" => ValueType::U32,
            "i32" => ValueType::I32,
            "i64" => ValueType::I64,
            _ => ValueType::U64,
        }
    }
    fn from_code(c: u8) -> Option<ValueType> {
        Some(match c {
            0 => ValueType::U32,
            1 => ValueType::U64,
            2 => ValueType::I32,
            3 => ValueType::I64,
            _ => return None,
        })
    }
    fn name(self) -> &'static str {
        ["u32", "u64", "i32", "i64"][self as usize]
    }
}

/// Options of the encoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CodecOptions {
    /// Values per chunk: a power of two from [`MIN_CHUNK_VALUES`] to [`MAX_CHUNK_VALUES`].
    pub chunk_values: u32,
}

impl Default for CodecOptions {
    fn default() -> Self {
        CodecOptions {
            chunk_values: DEFAULT_CHUNK_VALUES,
        }
    }
}

impl CodecOptions {
    /// Checks the chunk size.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when it is not a power of two within the limits.
    pub fn check(&self) -> Result<()> {
        check_chunk_values(self.chunk_values).map_err(Error::InvalidArgument)
    }
}

fn check_chunk_values(cv: u32) -> std::result::Result<(), String> {
    if cv.is_power_of_two() && (MIN_CHUNK_VALUES..=MAX_CHUNK_VALUES).contains(&cv) {
        Ok(())
    } else {
        Err(format!(
            "chunk size {cv} is not a power of two from {MIN_CHUNK_VALUES} to {MAX_CHUNK_VALUES}"
        ))
    }
}

/// What a stream header says (the first [`HEADER_WORDS`] words of an encoded stream).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    /// Element type name (`"u32"`, `"u64"`, `"i32"`, `"i64"`).
    pub value_type: &'static str,
    /// The cascade the chunks were encoded with (raw chunks ignore it).
    pub scheme: Scheme,
    /// Number of values.
    pub values: u64,
    /// Values per chunk (the last chunk may hold fewer).
    pub chunk_values: u32,
    /// Number of chunks, `ceil(values / chunk_values)`.
    pub chunks: u64,
    /// Length of the whole stream in 8-byte words.
    pub total_words: u64,
}

impl StreamInfo {
    /// Words before the first chunk: the header and the `chunks + 1` offsets.
    pub fn directory_words(&self) -> u64 {
        directory_words(self.chunks)
    }
}

/// Words of header plus offset table for `chunks` chunks.
pub(crate) fn directory_words(chunks: u64) -> u64 {
    HEADER_WORDS as u64 + chunks + 1
}

/// The checksum term of word `w` at position `i` of its chunk (or header).
#[inline]
pub(crate) fn word_term(w: u64, i: u64) -> u64 {
    fmix64(w.wrapping_add(i.wrapping_add(1).wrapping_mul(GOLDEN)))
}

/// Finishes a checksum from the wrapping sum of the terms, seeded with the chunk's index and
/// length in words (so a chunk read at a wrong offset or with a wrong length fails).
#[inline]
pub(crate) fn finish_checksum(sum: u64, chunk: u64, len: u64) -> u64 {
    fmix64(sum ^ hash64(chunk, len))
}

/// Checksum of a chunk's words (word 1, which holds it, is left out).
pub(crate) fn chunk_checksum(words: &[u64], chunk: u64) -> u64 {
    let sum = words
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != 1)
        .fold(0u64, |s, (i, &w)| s.wrapping_add(word_term(w, i as u64)));
    finish_checksum(sum, chunk, words.len() as u64)
}

fn header_checksum(words: &[u64]) -> u64 {
    let sum = words[..HEADER_WORDS - 1]
        .iter()
        .enumerate()
        .fold(0u64, |s, (i, &w)| s.wrapping_add(word_term(w, i as u64)));
    finish_checksum(sum, u64::MAX, (HEADER_WORDS - 1) as u64)
}

/// The header words of a stream.
pub(crate) fn header_words(
    vtype: ValueType,
    scheme: &Scheme,
    values: u64,
    chunk_values: u32,
    total_words: u64,
) -> [u64; HEADER_WORDS] {
    let mut w = [0u64; HEADER_WORDS];
    w[0] = u64::from(u32::from_le_bytes(MAGIC))
        | u64::from(VERSION) << 32
        | (vtype as u64) << 40
        | (scheme.layers.len() as u64) << 48;
    w[1] = scheme.word();
    w[2] = values;
    w[3] = u64::from(chunk_values);
    w[4] = values.div_ceil(u64::from(chunk_values));
    w[5] = total_words;
    w[6] = 0;
    w[7] = header_checksum(&w);
    w
}

fn corrupt(msg: impl Into<String>) -> Error {
    Error::Corrupt(msg.into())
}

/// Parses and validates a stream header against the stream's length in words.
///
/// # Errors
/// [`Error::Corrupt`] for a short stream, a bad magic, version, checksum or field, or a total
/// length other than `len_words`.
pub(crate) fn parse_header(words: &[u64], len_words: u64) -> Result<StreamInfo> {
    if words.len() < HEADER_WORDS {
        return Err(corrupt(format!(
            "stream of {} words is shorter than the {HEADER_WORDS}-word header",
            words.len()
        )));
    }
    let w0 = words[0];
    if (w0 as u32).to_le_bytes() != MAGIC {
        return Err(corrupt("bad magic (not a joinkit-codec stream)"));
    }
    let version = (w0 >> 32) as u8;
    if version != VERSION {
        return Err(corrupt(format!(
            "format version {version}, this reader knows {VERSION}"
        )));
    }
    if header_checksum(words) != words[HEADER_WORDS - 1] {
        return Err(corrupt("header checksum mismatch"));
    }
    let vtype = ValueType::from_code((w0 >> 40) as u8).ok_or_else(|| corrupt("bad value type"))?;
    let nlayers = (w0 >> 48) as u8 as usize;
    let scheme = (w0 >> 56 == 0)
        .then(|| Scheme::from_word(words[1], nlayers))
        .flatten()
        .ok_or_else(|| corrupt("bad scheme"))?;
    let values = words[2];
    let cv = u32::try_from(words[3])
        .ok()
        .filter(|&cv| check_chunk_values(cv).is_ok())
        .ok_or_else(|| corrupt("bad chunk size"))?;
    let chunks = words[4];
    if chunks != values.div_ceil(u64::from(cv)) || words[6] != 0 {
        return Err(corrupt("chunk count does not match the value count"));
    }
    let total = words[5];
    if total != len_words {
        return Err(corrupt(format!(
            "header says {total} words, the stream holds {len_words}"
        )));
    }
    // Named apart: a value count far beyond the stream (2^60 values in 19 words) otherwise
    // read "header says 19 words, the stream holds 19".
    if total < directory_words(chunks) {
        return Err(corrupt(format!(
            "header claims {values} values in {chunks} chunks, more than the {total}-word \
             stream can hold"
        )));
    }
    Ok(StreamInfo {
        value_type: vtype.name(),
        scheme,
        values,
        chunk_values: cv,
        chunks,
        total_words: total,
    })
}

/// Checks that a stream holds `T`.
///
/// # Errors
/// [`Error::InvalidArgument`] when it holds another type.
pub(crate) fn check_type<T: Element>(info: &StreamInfo) -> Result<()> {
    if info.value_type == T::NAME {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "the stream holds {} values, asked to decode {}",
            info.value_type,
            T::NAME
        )))
    }
}

/// Words of a raw chunk of `n` values of `bits` bits.
#[inline]
pub(crate) fn raw_chunk_words(n: u64, bits: u32) -> u64 {
    2 + (n * u64::from(bits)).div_ceil(64)
}

/// Words of a bitpacked stream of `count` values of `width` bits.
#[inline]
pub(crate) fn packed_words(count: u64, width: u32) -> u64 {
    (count * u64::from(width)).div_ceil(64)
}

/// Bits needed for `x` (0 for 0).
#[inline]
pub(crate) fn bit_width(x: u64) -> u32 {
    64 - x.leading_zeros()
}

/// Why a chunk failed validation; the codes are shared with the CUDA decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum ChunkFault {
    /// Offsets out of order or out of the stream.
    Offset = 1,
    /// A header field of the chunk is invalid.
    Header = 2,
    /// The chunk's length disagrees with its header.
    Length = 3,
    /// The chunk's checksum does not match its words.
    Checksum = 4,
    /// The run lengths of an RLE layer do not add up.
    Runs = 5,
}

impl ChunkFault {
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn from_code(c: u8) -> ChunkFault {
        match c {
            1 => ChunkFault::Offset,
            2 => ChunkFault::Header,
            3 => ChunkFault::Length,
            4 => ChunkFault::Checksum,
            _ => ChunkFault::Runs,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            ChunkFault::Offset => {
                "offset out of order, out of the stream, or giving a chunk of impossible length"
            }
            ChunkFault::Header => "invalid chunk header field",
            ChunkFault::Length => "chunk length disagrees with its header",
            ChunkFault::Checksum => "chunk checksum mismatch",
            ChunkFault::Runs => "RLE run lengths do not add up",
        }
    }

    /// The error both backends report for this fault at chunk `chunk` of buffer `buffer`
    /// (`None` for the single-buffer calls).
    pub(crate) fn error(self, buffer: Option<usize>, chunk: u64) -> Error {
        match buffer {
            Some(k) => corrupt(format!("buffer {k}, chunk {chunk}: {}", self.describe())),
            None => corrupt(format!("chunk {chunk}: {}", self.describe())),
        }
    }
}

/// Parsed cascade layer of one chunk.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LayerInfo {
    /// Stream length after this layer.
    pub(crate) count: u64,
    /// RLE: bit width of the packed run lengths.
    pub(crate) width: u32,
    /// RLE: smallest run length; Delta: the base (first value).
    pub(crate) value: u64,
    /// RLE: word offset of the packed run lengths inside the chunk.
    pub(crate) offset: u64,
}

/// A chunk's validated structure.
#[derive(Debug, Clone)]
pub(crate) struct ChunkLayout {
    pub(crate) raw: bool,
    pub(crate) final_width: u32,
    pub(crate) final_min: u64,
    pub(crate) final_count: u64,
    pub(crate) final_offset: u64,
    pub(crate) layers: [LayerInfo; MAX_LAYERS],
}

/// Validates the structure of a chunk of `n` values (`bits` wide) encoded with `scheme`
/// (everything but the checksum and the run sums). Mirrored by `chunk_layout` in
/// `kernels/codec.cu`.
pub(crate) fn chunk_layout(
    words: &[u64],
    n: u64,
    bits: u32,
    scheme: &Scheme,
) -> std::result::Result<ChunkLayout, ChunkFault> {
    let len = words.len() as u64;
    if len < 2 {
        return Err(ChunkFault::Length);
    }
    let w0 = words[0];
    let mode = (w0 >> 32) & 0xff;
    let fw = ((w0 >> 40) & 0xff) as u32;
    if w0 as u32 as u64 != n || mode > MODE_CASCADED || w0 >> 48 != 0 || fw > bits {
        return Err(ChunkFault::Header);
    }
    let value_mask = if bits == 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let mut layout = ChunkLayout {
        raw: mode == MODE_RAW,
        final_width: fw,
        final_min: 0,
        final_count: n,
        final_offset: 2,
        layers: [LayerInfo::default(); MAX_LAYERS],
    };
    if layout.raw {
        if fw != bits {
            return Err(ChunkFault::Header);
        }
        return if len == raw_chunk_words(n, bits) {
            Ok(layout)
        } else {
            Err(ChunkFault::Length)
        };
    }
    let nl = scheme.layers.len();
    let head = 3 + nl as u64;
    if len < head {
        return Err(ChunkFault::Length);
    }
    let mut m = n;
    let mut at = head;
    for (l, layer) in scheme.layers.iter().enumerate() {
        let hw = words[2 + l];
        let info = &mut layout.layers[l];
        match layer {
            Layer::Rle => {
                let r = hw & 0xffff_ffff;
                let w = ((hw >> 32) & 0xff) as u32;
                let min = hw >> 40;
                if r == 0 || r > m || w > 32 || min == 0 || min > m {
                    return Err(ChunkFault::Header);
                }
                *info = LayerInfo {
                    count: r,
                    width: w,
                    value: min,
                    offset: at,
                };
                at += packed_words(r, w);
                m = r;
            }
            Layer::Delta => {
                if hw & !value_mask != 0 {
                    return Err(ChunkFault::Header);
                }
                *info = LayerInfo {
                    count: m,
                    width: 0,
                    value: hw,
                    offset: 0,
                };
            }
        }
    }
    let fmin = words[2 + nl];
    if fmin & !value_mask != 0 {
        return Err(ChunkFault::Header);
    }
    layout.final_min = fmin;
    layout.final_count = m;
    layout.final_offset = at;
    if at + packed_words(m, fw) != len {
        return Err(ChunkFault::Length);
    }
    Ok(layout)
}

/// Words of the shortest valid chunk: its two header words and one more (a raw chunk holds at
/// least one value, a cascaded one at least the final stream's minimum). Shorter chunks are
/// refused with the offsets, before any output is allocated.
pub(crate) const MIN_CHUNK_WORDS: u64 = 3;

/// Validates the offset of chunk `c` of a stream (`offsets` is the table of `chunks + 1`
/// entries) and returns its word range.
pub(crate) fn chunk_range(
    offsets: &[u64],
    c: usize,
    chunks: u64,
    total: u64,
    max_len: u64,
) -> std::result::Result<(u64, u64), ChunkFault> {
    let (a, b) = (offsets[c], offsets[c + 1]);
    if a < directory_words(chunks)
        || b < a.saturating_add(MIN_CHUNK_WORDS)
        || b > total
        || b - a > max_len
    {
        return Err(ChunkFault::Offset);
    }
    Ok((a, b))
}

/// Converts little-endian bytes to stream words.
///
/// # Errors
/// [`Error::Corrupt`] when the length is not a multiple of 8.
pub fn words_from_bytes(bytes: &[u8]) -> Result<Vec<u64>> {
    if !bytes.len().is_multiple_of(8) {
        return Err(corrupt(format!(
            "{} bytes is not a whole number of 8-byte words",
            bytes.len()
        )));
    }
    Ok(bytes
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default()))
        .collect())
}

/// Converts stream words to their little-endian bytes (the format's byte order).
pub fn words_to_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// Reads the header of a whole encoded stream (host words): the header's word count must be
/// the stream's length, so a header alone does not pass. Its value count is what a decode
/// allocates, so callers decoding untrusted streams can bound that before decoding.
///
/// # Errors
/// [`Error::Corrupt`] when the header is truncated or invalid, or names another length.
pub fn inspect(words: &[u64]) -> Result<StreamInfo> {
    parse_header(words, words.len() as u64)
}
