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
        let mut pairs: Vec<(K, V)> = keys.iter().copied().zip(values.iter().copied()).collect();
        // par_sort_by_key is a stable merge sort: equal digits keep their order.
        pairs.par_sort_by_key(|p| p.0.digit(bits.start, bits.end));
        Ok(pairs.into_par_iter().unzip())
    }

    fn sort_keys<K: Key>(&self, keys: &Vec<K>, bits: Range<u32>) -> Result<Vec<K>> {
        Error::check_bits(&bits, K::BITS)?;
        let mut out = keys.clone();
        if bits == (0..K::BITS) {
            // Over the whole key, equal digits are equal keys: stability cannot show.
            out.par_sort_unstable();
        } else {
            out.par_sort_by_key(|k| k.digit(bits.start, bits.end));
        }
        Ok(out)
    }
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
