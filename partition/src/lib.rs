//! # joinkit-partition
//!
//! Partitioning for partitioned joins: stable radix partition by any bit range (multi-pass),
//! hash partition with shared-memory-buffered scatter, bucket-chain partition. Each operation
//! has a CUDA kernel and a CPU twin with one contract, over [`joinkit_cuda::Backend`].

pub use joinkit_cuda::{Backend, Error, Result};
