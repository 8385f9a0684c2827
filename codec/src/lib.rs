//! # joinkit-codec
//!
//! The cascaded codec that shrinks shuffled columns (Gao & Sakharnykh, ADMS 2021): RLE and
//! Delta layers, then frame-of-reference + bitpacking, with sampled scheme selection. One
//! self-describing format written and read bit-exactly by CUDA and CPU, over
//! [`joinkit_cuda::Backend`].

pub use joinkit_cuda::{Backend, Error, Result};
