//! Sampled scheme selection: encode evenly spaced windows of the column with every candidate
//! scheme and keep the best ratio, preferring cheaper schemes among near-ties. Each backend
//! encodes where the column lives (the CUDA backend runs its chunk encoder once a scheme over
//! the windows where they lie in the column; the CPU twin encodes on the host) and both decide
//! in [`pick`] from the same word counts: the chunk formats are the same word for word.

use std::fmt;
use std::ops::Range;

use joinkit_cuda::{Element, Error, Result};
use rayon::prelude::*;

use crate::format::{CodecOptions, Scheme};
use crate::host::{encode_chunk, sign_flip};

/// How the selector samples and decides.
#[derive(Debug, Clone, PartialEq)]
pub struct SelectorConfig {
    /// Number of windows sampled from the column (evenly spaced, first and last included).
    pub samples: usize,
    /// Values per window.
    pub sample_values: usize,
    /// Speed-aware tie-break: among schemes whose estimated ratio is within this fraction of
    /// the best (0.05 = 5 %), the one with the cheapest decode wins (fewest and cheapest layers:
    /// Delta costs 1, RLE 2), then the better ratio.
    pub tolerance: f64,
    /// Schemes to try (default: [`Scheme::candidates`]).
    pub candidates: Vec<Scheme>,
    /// Chunking the samples are encoded with (use the one you will compress with).
    pub options: CodecOptions,
}

impl Default for SelectorConfig {
    fn default() -> Self {
        SelectorConfig {
            samples: 16,
            sample_values: 4096,
            tolerance: 0.05,
            candidates: Scheme::candidates(),
            options: CodecOptions::default(),
        }
    }
}

impl SelectorConfig {
    /// Checks the configuration.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for zero samples or sample size, no candidates, a tolerance
    /// outside `0..1`, or bad options.
    pub fn check(&self) -> Result<()> {
        self.options.check()?;
        if self.samples == 0 || self.sample_values == 0 || self.candidates.is_empty() {
            return Err(Error::InvalidArgument(
                "the selector needs at least one sample of at least one value and one candidate"
                    .into(),
            ));
        }
        if !(0.0..1.0).contains(&self.tolerance) {
            return Err(Error::InvalidArgument(format!(
                "selector tolerance {} is not in 0..1",
                self.tolerance
            )));
        }
        Ok(())
    }
}

/// The selector's choice.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    /// The scheme picked.
    pub scheme: Scheme,
    /// Its estimated compression ratio (raw bytes over encoded chunk bytes on the samples).
    pub estimated_ratio: f64,
    /// Values the estimate is based on.
    pub sampled_values: usize,
    /// Every candidate with its estimated ratio, in the order tried.
    pub candidates: Vec<(Scheme, f64)>,
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (estimated ratio {:.2}x from {} sampled values)",
            self.scheme, self.estimated_ratio, self.sampled_values
        )
    }
}

/// The windows sampled from a column of `n` values.
pub(crate) fn windows(n: usize, cfg: &SelectorConfig) -> Vec<Range<usize>> {
    let (s, w) = (cfg.samples, cfg.sample_values);
    if n == 0 {
        return Vec::new();
    }
    if s.saturating_mul(w) >= n {
        return std::iter::once(0..n).collect();
    }
    if s == 1 {
        return std::iter::once(0..w).collect();
    }
    let span = (n - w) as u128;
    (0..s)
        .map(|i| {
            let start = (span * i as u128 / (s - 1) as u128) as usize;
            start..start + w
        })
        .collect()
}

/// Picks a scheme from the sampled windows' values, encoding them on the host.
///
/// # Errors
/// [`Error::InvalidArgument`] for a bad configuration.
pub(crate) fn choose<T: Element>(samples: &[Vec<T>], cfg: &SelectorConfig) -> Result<Selection> {
    cfg.check()?;
    let (bits, flip) = (T::BITS, sign_flip::<T>());
    let cv = cfg.options.chunk_values as usize;
    let chunks: Vec<Vec<u64>> = samples
        .iter()
        .flat_map(|s| s.chunks(cv))
        .map(|c| c.iter().map(|v| v.to_bits()).collect())
        .collect();
    // Every (scheme, chunk) pair at once: a scheme at a time left most of a wide machine idle.
    let words: Vec<u64> = cfg
        .candidates
        .par_iter()
        .map(|scheme| {
            chunks
                .par_iter()
                .enumerate()
                .map(|(c, ch)| encode_chunk(ch, bits, flip, scheme, c as u64).len() as u64)
                .sum()
        })
        .collect();
    let sampled = samples.iter().map(Vec::len).sum();
    pick(cfg, sampled, bits, &words)
}

/// Picks among `cfg.candidates` from the words each encoded the `sampled` values' chunks into
/// (`words[i]` for candidate `i`; every window chunked on its own): the best ratio, or the
/// cheapest decode among near-ties. Both backends decide here, from the same counts.
///
/// # Errors
/// [`Error::InvalidArgument`] for a bad configuration; [`Error::LengthMismatch`] where
/// `words` does not hold a count for every candidate.
pub(crate) fn pick(
    cfg: &SelectorConfig,
    sampled: usize,
    bits: u32,
    words: &[u64],
) -> Result<Selection> {
    cfg.check()?;
    if sampled == 0 {
        return Ok(Selection {
            scheme: Scheme::bitpack(),
            estimated_ratio: 1.0,
            sampled_values: 0,
            candidates: Vec::new(),
        });
    }
    Error::check_len(
        "encoded sizes vs candidates",
        words.len(),
        cfg.candidates.len(),
    )?;
    let raw_bytes = (sampled * (bits as usize / 8)) as f64;
    let candidates: Vec<(Scheme, f64)> = (cfg.candidates.iter().zip(words))
        .map(|(scheme, &w)| (scheme.clone(), raw_bytes / (w.max(1) * 8) as f64))
        .collect();
    let best = candidates.iter().map(|c| c.1).fold(0.0, f64::max);
    let floor = best * (1.0 - cfg.tolerance);
    let pick = candidates
        .iter()
        .filter(|c| c.1 >= floor)
        .min_by(|a, b| a.0.cost().cmp(&b.0.cost()).then(b.1.total_cmp(&a.1)))
        .unwrap_or(&candidates[0]);
    Ok(Selection {
        scheme: pick.0.clone(),
        estimated_ratio: pick.1,
        sampled_values: sampled,
        candidates,
    })
}
