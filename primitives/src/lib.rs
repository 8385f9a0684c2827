//! # joinkit-primitives
//!
//! The building blocks joins are made of, each with one contract and two implementations: a
//! CPU twin (rayon) and a CUDA one (CUB through `cub-sys`, or this crate's kernels).
//!
//! | operation | trait | CUDA path |
//! | --- | --- | --- |
//! | stable radix sort of pairs / keys by a bit range | [`Sort`] | CUB `DeviceRadixSort` |
//! | exclusive prefix sum | [`Scan`] | CUB `DeviceScan` |
//! | even-width histogram | [`Histogram`] | CUB `DeviceHistogram` |
//!
//! Every CUDA operation also has a view-level entry in [`cuda`] that works on buffers the
//! caller owns (cudarc views on the caller's stream) with caller-provided scratch.
//!
//! ```
//! use joinkit_cuda::{Backend, CpuBackend};
//! use joinkit_primitives::Sort;
//! let cpu = CpuBackend::new();
//! let keys = cpu.upload(&[3u32, 1, 2, 1]).unwrap();
//! let vals = cpu.upload(&[0u32, 1, 2, 3]).unwrap();
//! let (k, v) = cpu.sort_pairs(&keys, &vals, 0..32).unwrap();
//! assert_eq!((k, v), (vec![1, 1, 2, 3], vec![1, 3, 2, 0]));
//! ```

mod histogram;
mod scan;
mod sort;

#[cfg(feature = "cuda")]
pub mod cuda;

pub use histogram::Histogram;
pub use scan::{Scan, Summable};
pub use sort::Sort;
