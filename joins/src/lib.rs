//! # joinkit
//!
//! The thin composition crate: sort-merge and partitioned hash joins with GFUR and GFTR
//! materialization, non-partitioned hash joins, all join kinds, over any
//! [`joinkit_cuda::Backend`]: the same algorithm runs on the CPU (rayon) and on CUDA.

pub use joinkit_cuda::{Backend, CpuBackend, Device, Error, Result};
pub use joinkit_primitives as primitives;
