//! # joinkit-codec
//!
//! The cascaded codec that shrinks shuffled columns (Gao & Sakharnykh, ADMS 2021, §4; the
//! scheme of nvCOMP 2.0's cascaded compressor): any number of RLE and Delta layers in a given
//! order, then frame-of-reference + bitpacking, per chunk of a fixed number of values, on
//! `u32`, `u64`, `i32` and `i64` columns. Chunks that do not shrink are stored raw, so a stream
//! is never larger than the raw column plus its headers.
//!
//! One versioned, self-describing, checksummed format (`FORMAT.md`) is written and read
//! bit-exactly by the CUDA kernels and the CPU twin: the same input gives the same words on
//! both, and either decodes what the other wrote. Truncated or corrupted streams give
//! [`Error::Corrupt`], never a panic or an out-of-bounds read.
//!
//! | operation | where |
//! | --- | --- |
//! | compress / decompress one column | [`Codec::compress`], [`Codec::decompress`] |
//! | one fused launch over many buffers (a shuffle's per-destination slices) | [`Codec::compress_many`], [`Codec::decompress_many`] |
//! | sampled scheme selection | [`Codec::select_scheme`] → [`Selection`] |
//! | host words ↔ bytes, header inspection | [`words_to_bytes`], [`words_from_bytes`], [`inspect`] |
//! | reuse on caller-owned device memory | `cuda` module (feature `cuda`) |
//!
//! Signed columns are mapped to unsigned order by flipping the sign bit; all arithmetic is
//! wrapping in the element width; Delta layers store zigzag-coded differences, so descending
//! runs pack as tightly as ascending ones.
//!
//! ```
//! use joinkit_codec::{Codec, CodecOptions, Scheme, SelectorConfig};
//! use joinkit_cuda::{Backend, CpuBackend};
//!
//! let cpu = CpuBackend::new();
//! // Sorted keys with repeats, like TPC-H's l_orderkey.
//! let keys: Vec<u64> = (0..20_000u64).map(|i| i / 4 * 3).collect();
//! let col = cpu.upload(&keys).unwrap();
//! let choice = cpu.select_scheme(&col, &SelectorConfig::default()).unwrap();
//! println!("{choice}");
//! let enc = cpu.compress(&col, &choice.scheme, &CodecOptions::default()).unwrap();
//! assert!(enc.len() * 8 * 10 < keys.len() * 8);
//! let dec: Vec<u64> = cpu.decompress(&enc).unwrap();
//! assert_eq!(dec, keys);
//!
//! let rle_delta: Scheme = "rle+delta+bp".parse().unwrap();
//! let enc2 = cpu.compress(&col, &rle_delta, &CodecOptions::default()).unwrap();
//! assert_eq!(cpu.decompress::<u64>(&enc2).unwrap(), keys);
//! ```

use std::ops::Range;

use joinkit_cuda::{CpuBackend, Element};

mod format;
mod host;
mod select;

#[cfg(feature = "cuda")]
pub mod cuda;

pub use format::{
    CodecOptions, DEFAULT_CHUNK_VALUES, HEADER_WORDS, Layer, MAGIC, MAX_CHUNK_VALUES, MAX_LAYERS,
    MIN_CHUNK_VALUES, Scheme, StreamInfo, VERSION, inspect, words_from_bytes, words_to_bytes,
};
pub use joinkit_cuda::{Backend, Error, Result};
pub use select::{Selection, SelectorConfig};

/// Streams encoded back to back, with each one's word range (what the many-buffer
/// compressors return).
pub type Compressed<B> = (<B as Backend>::Buf<u64>, Vec<Range<usize>>);

/// Compression and decompression of columns in the cascaded format, on a backend.
///
/// Encoded streams are columns of `u64` words (the format is little-endian bytes; see
/// [`words_to_bytes`]). The CPU and CUDA implementations produce identical words and the same
/// errors for the same input.
pub trait Codec: Backend {
    /// Reusable scratch of the compressor (`()` on the CPU, device slots on CUDA): pass the
    /// same one to [`Codec::compress_many_with`] so repeated calls allocate nothing large.
    type Scratch: Default + Send + std::fmt::Debug;

    /// Compresses a column with `scheme` into one stream.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for bad options; allocation and driver errors.
    fn compress<T: Element>(
        &self,
        input: &Self::Buf<T>,
        scheme: &Scheme,
        options: &CodecOptions,
    ) -> Result<Self::Buf<u64>> {
        let bounds = [0, joinkit_cuda::Buffer::len(input)];
        let mut scratch = Self::Scratch::default();
        Ok(self
            .compress_many_with(input, &bounds, scheme, options, &mut scratch)?
            .0)
    }

    /// Compresses many buffers at once: buffer `k` is `input[bounds[k]..bounds[k + 1]]`
    /// (`bounds` starts at 0, ends at `input.len()` and never decreases). Returns the streams
    /// back to back and each one's word range; stream `k` is exactly what [`Codec::compress`]
    /// gives for buffer `k` alone. On CUDA all buffers are encoded by one fused launch.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for bad bounds or options; allocation and driver errors.
    fn compress_many<T: Element>(
        &self,
        input: &Self::Buf<T>,
        bounds: &[usize],
        scheme: &Scheme,
        options: &CodecOptions,
    ) -> Result<Compressed<Self>> {
        self.compress_many_with(
            input,
            bounds,
            scheme,
            options,
            &mut Self::Scratch::default(),
        )
    }

    /// [`Codec::compress_many`] with caller-held scratch (reused across calls).
    ///
    /// # Errors
    /// As [`Codec::compress_many`].
    fn compress_many_with<T: Element>(
        &self,
        input: &Self::Buf<T>,
        bounds: &[usize],
        scheme: &Scheme,
        options: &CodecOptions,
        scratch: &mut Self::Scratch,
    ) -> Result<Compressed<Self>>;

    /// Decompresses one stream.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a truncated or corrupt stream; [`Error::InvalidArgument`] when it
    /// holds another type than `T`; allocation and driver errors.
    fn decompress<T: Element>(&self, encoded: &Self::Buf<u64>) -> Result<Self::Buf<T>>;

    /// [`Codec::decompress_many`] into a column the caller owns, which must hold exactly the
    /// decoded values (reuse it across calls); returns the buffers' bounds.
    ///
    /// # Errors
    /// As [`Codec::decompress_many`]; [`Error::LengthMismatch`] when `out` has another length
    /// than the streams' values.
    fn decompress_many_into<T: Element>(
        &self,
        encoded: &Self::Buf<u64>,
        ranges: &[Range<usize>],
        out: &mut Self::Buf<T>,
    ) -> Result<Vec<usize>>;

    /// Decompresses the streams at `ranges` of `encoded` (as [`Codec::compress_many`] returns
    /// them) into one column, back to back; returns it with the `ranges.len() + 1` bounds of
    /// each buffer's values. All streams must share one chunk size; their schemes may differ.
    /// On CUDA all buffers are decoded by one fused launch (and one more for the chunks that
    /// launch's warps leave to blocks).
    ///
    /// # Errors
    /// As [`Codec::decompress`], naming the buffer; [`Error::InvalidArgument`] for ranges
    /// outside `encoded` or streams of different chunk sizes.
    fn decompress_many<T: Element>(
        &self,
        encoded: &Self::Buf<u64>,
        ranges: &[Range<usize>],
    ) -> Result<(Self::Buf<T>, Vec<usize>)>;

    /// Samples the column and picks the scheme with the best estimated ratio (cheaper schemes
    /// win near-ties; see [`SelectorConfig`]). The samples are encoded where the column lives
    /// (on the GPU: one encode launch a candidate and one download, no host encoding), and
    /// both backends pick the same scheme with the same estimates.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad configuration; driver errors reading the samples.
    fn select_scheme<T: Element>(
        &self,
        input: &Self::Buf<T>,
        config: &SelectorConfig,
    ) -> Result<Selection>;
}

/// Checks the buffer bounds of a many-buffer call.
pub(crate) fn check_bounds(bounds: &[usize], len: usize) -> Result<()> {
    let ok = bounds.first() == Some(&0)
        && bounds.last() == Some(&len)
        && bounds.windows(2).all(|w| w[0] <= w[1]);
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "buffer bounds must start at 0, end at the input length {len} and never decrease"
        )))
    }
}

/// Checks that every range lies inside a stream of `len` words.
pub(crate) fn check_ranges(ranges: &[Range<usize>], len: usize) -> Result<()> {
    match ranges.iter().find(|r| r.start > r.end || r.end > len) {
        Some(r) => Err(Error::InvalidArgument(format!(
            "stream range {r:?} is not inside the {len} encoded words"
        ))),
        None => Ok(()),
    }
}

/// Output bounds from the decoded lengths.
pub(crate) fn value_bounds(infos: &[StreamInfo]) -> Result<Vec<usize>> {
    let mut bounds = Vec::with_capacity(infos.len() + 1);
    let mut at = 0usize;
    bounds.push(0);
    for i in infos {
        let n = usize::try_from(i.values).map_err(|_| Error::SizeOverflow("decoded length"))?;
        at = at
            .checked_add(n)
            .ok_or(Error::SizeOverflow("decoded length"))?;
        bounds.push(at);
    }
    Ok(bounds)
}

/// The CPU's many-stream decode (validation in the shared order, then decoding).
fn cpu_decompress_ranges<T: Element>(
    cpu: &CpuBackend,
    encoded: &[u64],
    ranges: &[Range<usize>],
    single: bool,
    into: Option<&mut Vec<T>>,
) -> Result<(Vec<T>, Vec<usize>)> {
    check_ranges(ranges, encoded.len())?;
    let infos = host::validate_streams::<T>(
        ranges.len(),
        single,
        |k| {
            let s = &encoded[ranges[k].clone()];
            (&s[..s.len().min(HEADER_WORDS)], s.len() as u64)
        },
        |k, info| {
            let s = &encoded[ranges[k].clone()];
            &s[HEADER_WORDS..info.directory_words() as usize]
        },
    )?;
    let bounds = value_bounds(&infos)?;
    let total = bounds[bounds.len() - 1];
    if let Some(out) = into {
        Error::check_len("decompressed output", out.len(), total)?;
        host::decode_streams(encoded, ranges, &infos, single, out)?;
        return Ok((Vec::new(), bounds));
    }
    let mut out = cpu.alloc::<T>(total)?;
    host::decode_streams(encoded, ranges, &infos, single, &mut out)?;
    Ok((out, bounds))
}

impl Codec for CpuBackend {
    type Scratch = ();

    fn compress<T: Element>(
        &self,
        input: &Vec<T>,
        scheme: &Scheme,
        options: &CodecOptions,
    ) -> Result<Vec<u64>> {
        options.check()?;
        Ok(host::encode_stream(input, scheme, options.chunk_values))
    }

    fn compress_many_with<T: Element>(
        &self,
        input: &Vec<T>,
        bounds: &[usize],
        scheme: &Scheme,
        options: &CodecOptions,
        _scratch: &mut (),
    ) -> Result<(Vec<u64>, Vec<Range<usize>>)> {
        options.check()?;
        check_bounds(bounds, input.len())?;
        let mut out = Vec::new();
        let mut ranges = Vec::with_capacity(bounds.len().saturating_sub(1));
        for w in bounds.windows(2) {
            let s = host::encode_stream(&input[w[0]..w[1]], scheme, options.chunk_values);
            ranges.push(out.len()..out.len() + s.len());
            out.extend(s);
        }
        Ok((out, ranges))
    }

    fn decompress<T: Element>(&self, encoded: &Vec<u64>) -> Result<Vec<T>> {
        Ok(cpu_decompress_ranges(
            self,
            encoded,
            std::slice::from_ref(&(0..encoded.len())),
            true,
            None,
        )?
        .0)
    }

    fn decompress_many<T: Element>(
        &self,
        encoded: &Vec<u64>,
        ranges: &[Range<usize>],
    ) -> Result<(Vec<T>, Vec<usize>)> {
        cpu_decompress_ranges(self, encoded, ranges, false, None)
    }

    fn decompress_many_into<T: Element>(
        &self,
        encoded: &Vec<u64>,
        ranges: &[Range<usize>],
        out: &mut Vec<T>,
    ) -> Result<Vec<usize>> {
        Ok(cpu_decompress_ranges(self, encoded, ranges, false, Some(out))?.1)
    }

    fn select_scheme<T: Element>(
        &self,
        input: &Vec<T>,
        config: &SelectorConfig,
    ) -> Result<Selection> {
        config.check()?;
        let samples: Vec<Vec<T>> = select::windows(input.len(), config)
            .into_iter()
            .map(|r| input[r].to_vec())
            .collect();
        select::choose(&samples, config)
    }
}

#[cfg(feature = "cuda")]
impl Codec for joinkit_cuda::CudaBackend {
    type Scratch = cuda::CodecScratch;

    fn compress_many_with<T: Element>(
        &self,
        input: &Self::Buf<T>,
        bounds: &[usize],
        scheme: &Scheme,
        options: &CodecOptions,
        scratch: &mut cuda::CodecScratch,
    ) -> Result<Compressed<Self>> {
        let plan = cuda::plan_compress(self, &input.view(), bounds, scheme, options, scratch)?;
        let mut out = self.alloc::<u64>(plan.words())?;
        let ranges = cuda::finish_compress(self, &plan, &mut out.view_mut())?;
        Ok((out, ranges))
    }

    fn decompress<T: Element>(&self, encoded: &Self::Buf<u64>) -> Result<Self::Buf<T>> {
        let plan = cuda::plan_decompress::<T>(
            self,
            &encoded.view(),
            std::slice::from_ref(&(0..encoded.len())),
            true,
        )?;
        let mut out = self.alloc::<T>(plan.values())?;
        cuda::finish_decompress(self, &encoded.view(), &plan, &mut out.view_mut())?;
        Ok(out)
    }

    fn decompress_many<T: Element>(
        &self,
        encoded: &Self::Buf<u64>,
        ranges: &[Range<usize>],
    ) -> Result<(Self::Buf<T>, Vec<usize>)> {
        let plan = cuda::plan_decompress::<T>(self, &encoded.view(), ranges, false)?;
        let mut out = self.alloc::<T>(plan.values())?;
        let bounds = cuda::finish_decompress(self, &encoded.view(), &plan, &mut out.view_mut())?;
        Ok((out, bounds))
    }

    fn decompress_many_into<T: Element>(
        &self,
        encoded: &Self::Buf<u64>,
        ranges: &[Range<usize>],
        out: &mut Self::Buf<T>,
    ) -> Result<Vec<usize>> {
        let plan = cuda::plan_decompress::<T>(self, &encoded.view(), ranges, false)?;
        cuda::finish_decompress(self, &encoded.view(), &plan, &mut out.view_mut())
    }

    fn select_scheme<T: Element>(
        &self,
        input: &Self::Buf<T>,
        config: &SelectorConfig,
    ) -> Result<Selection> {
        config.check()?;
        // The windows encoded where they lie with every candidate; one download of the chunk
        // sizes (the host's encoder took milliseconds of a busy host's cores for a column).
        let windows = select::windows(input.len(), config);
        let words =
            cuda::encoded_chunk_words(self, input, &windows, &config.candidates, &config.options)?;
        let sampled = windows.iter().map(|r| r.len()).sum();
        select::pick(config, sampled, T::BITS, &words)
    }
}
