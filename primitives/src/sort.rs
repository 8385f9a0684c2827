//! Stable radix sort of (key, value) pairs and of keys alone, by any bit range of the key.

use std::ops::Range;

use joinkit_cuda::{Backend, CpuBackend, Element, Error, Key, Result};
use rayon::prelude::*;

/// Stable sort by the key bits `bits` (LSD radix semantics): equal digits keep their input
/// order, bits outside the range are ignored.
pub trait Sort: Backend {
    /// Sorts `values` along with `keys`; returns new sorted columns.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when the columns differ in length; [`Error::BitRange`] when
    /// `bits` is empty or reaches past the key width; allocation and driver errors.
    fn sort_pairs<K: Key, V: Element>(
        &self,
        keys: &Self::Buf<K>,
        values: &Self::Buf<V>,
        bits: Range<u32>,
    ) -> Result<(Self::Buf<K>, Self::Buf<V>)>;

    /// Sorts keys alone.
    ///
    /// # Errors
    /// [`Error::BitRange`]; allocation and driver errors.
    fn sort_keys<K: Key>(&self, keys: &Self::Buf<K>, bits: Range<u32>) -> Result<Self::Buf<K>>;
}

impl Sort for CpuBackend {
    fn sort_pairs<K: Key, V: Element>(
        &self,
        keys: &Vec<K>,
        values: &Vec<V>,
        bits: Range<u32>,
    ) -> Result<(Vec<K>, Vec<V>)> {
        Error::check_len("sort_pairs keys vs values", keys.len(), values.len())?;
        Error::check_bits(&bits, K::BITS)?;
        Ok(radix_sort(keys.clone(), values.clone(), bits))
    }

    fn sort_keys<K: Key>(&self, keys: &Vec<K>, bits: Range<u32>) -> Result<Vec<K>> {
        Error::check_bits(&bits, K::BITS)?;
        // `()` values cost nothing: the same radix sort moves keys only.
        Ok(radix_sort(keys.clone(), vec![(); keys.len()], bits).0)
    }
}

/// Bits per LSD radix digit of the CPU sort (256 bins: per-chunk histograms stay in L1).
const DIGIT_BITS: u32 = 8;
const BINS: usize = 1 << DIGIT_BITS;

/// A raw pointer that scatter tasks share; each task writes a disjoint set of positions.
#[derive(Clone, Copy)]
struct SharedMut<T>(*mut T);
// SAFETY: only used by `scatter_pass`, whose tasks write pairwise disjoint positions (see there).
unsafe impl<T: Send> Send for SharedMut<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Sync for SharedMut<T> {}

/// Stable LSD radix sort of `(keys, values)` by key bits `bits`, `DIGIT_BITS` per pass over
/// only the requested range. Each pass: per-chunk digit histograms (parallel), digit-major /
/// chunk-minor offsets, then every chunk scatters its elements in input order (parallel), so
/// equal digits keep their order. Passes whose digit is the same for every key are skipped.
pub(crate) fn radix_sort<K: Key, V: Copy + Send + Sync>(
    mut keys: Vec<K>,
    mut values: Vec<V>,
    bits: Range<u32>,
) -> (Vec<K>, Vec<V>) {
    let n = keys.len();
    if n <= 1 {
        return (keys, values);
    }
    let chunk = if n < joinkit_cuda::PARALLEL_THRESHOLD {
        n
    } else {
        n.div_ceil(4 * rayon::current_num_threads()).max(1 << 14)
    };
    let mut keys_tmp: Vec<K> = keys.clone();
    let mut values_tmp: Vec<V> = values.clone();
    let mut begin = bits.start;
    while begin < bits.end {
        let end = (begin + DIGIT_BITS).min(bits.end);
        let histograms: Vec<[usize; BINS]> = keys
            .par_chunks(chunk)
            .map(|c| {
                let mut h = [0usize; BINS];
                for k in c {
                    h[k.digit(begin, end) as usize] += 1;
                }
                h
            })
            .collect();
        // Skip a pass that would not move anything: every key has the same digit.
        let single_digit = (0..BINS).any(|d| histograms.iter().map(|h| h[d]).sum::<usize>() == n);
        if !single_digit {
            // starts[c][d]: where chunk c writes its first element of digit d.
            let mut starts = vec![[0usize; BINS]; histograms.len()];
            let mut at = 0usize;
            for d in 0..BINS {
                for (c, h) in histograms.iter().enumerate() {
                    starts[c][d] = at;
                    at += h[d];
                }
            }
            scatter_pass(
                &keys,
                &values,
                &mut keys_tmp,
                &mut values_tmp,
                chunk,
                &starts,
                begin,
                end,
            );
            std::mem::swap(&mut keys, &mut keys_tmp);
            std::mem::swap(&mut values, &mut values_tmp);
        }
        begin = end;
    }
    (keys, values)
}

/// One scatter of a radix pass: chunk `c` writes its elements of digit `d`, in input order, to
/// `starts[c][d]..`.
#[allow(clippy::too_many_arguments)]
fn scatter_pass<K: Key, V: Copy + Send + Sync>(
    keys: &[K],
    values: &[V],
    keys_out: &mut [K],
    values_out: &mut [V],
    chunk: usize,
    starts: &[[usize; BINS]],
    begin: u32,
    end: u32,
) {
    let (ko, vo) = (
        SharedMut(keys_out.as_mut_ptr()),
        SharedMut(values_out.as_mut_ptr()),
    );
    keys.par_chunks(chunk)
        .zip(values.par_chunks(chunk))
        .zip(starts.par_iter())
        .for_each(|((kc, vc), start)| {
            let (ko, vo) = (ko, vo);
            let mut at = *start;
            for (&k, &v) in kc.iter().zip(vc) {
                let d = k.digit(begin, end) as usize;
                // SAFETY: the ranges starts[c][d]..starts[c][d] + hist[c][d] partition 0..n
                // (an exclusive scan of the histograms in digit-major, chunk-minor order), and
                // chunk c writes exactly hist[c][d] elements of digit d from starts[c][d]: every
                // write is in bounds and no two tasks write the same position. Both outputs
                // hold n elements.
                unsafe {
                    ko.0.add(at[d]).write(k);
                    vo.0.add(at[d]).write(v);
                }
                at[d] += 1;
            }
        });
}

#[cfg(feature = "cuda")]
impl Sort for joinkit_cuda::CudaBackend {
    fn sort_pairs<K: Key, V: Element>(
        &self,
        keys: &Self::Buf<K>,
        values: &Self::Buf<V>,
        bits: Range<u32>,
    ) -> Result<(Self::Buf<K>, Self::Buf<V>)> {
        Error::check_len("sort_pairs keys vs values", keys.len(), values.len())?;
        Error::check_bits(&bits, K::BITS)?;
        let mut keys_out = self.alloc::<K>(keys.len())?;
        let mut values_out = self.alloc::<V>(values.len())?;
        let mut scratch = joinkit_cuda::Scratch::new();
        crate::cuda::sort_pairs(
            self,
            &keys.view(),
            &values.view(),
            &mut keys_out.view_mut(),
            &mut values_out.view_mut(),
            bits,
            &mut scratch,
        )?;
        Ok((keys_out, values_out))
    }

    fn sort_keys<K: Key>(&self, keys: &Self::Buf<K>, bits: Range<u32>) -> Result<Self::Buf<K>> {
        Error::check_bits(&bits, K::BITS)?;
        let mut out = self.alloc::<K>(keys.len())?;
        let mut scratch = joinkit_cuda::Scratch::new();
        crate::cuda::sort_keys(self, &keys.view(), &mut out.view_mut(), bits, &mut scratch)?;
        Ok(out)
    }
}
