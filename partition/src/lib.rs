//! # joinkit-partition
//!
//! Partitioning for partitioned joins, each operation a trait with a CUDA implementation and
//! a CPU (rayon) twin under one contract (same outputs, ordering guarantees and errors):
//!
//! | operation | trait | result | order within a partition |
//! | --- | --- | --- | --- |
//! | stable radix partition by any bit range (LSD passes of ≤ 8 bits) | [`RadixPartition`] | [`Partitioned`]: contiguous columns + `fanout + 1` offsets | input order; identical on both backends, run after run |
//! | hash partition (seeded murmur3, fan-out 1..=1024) | [`HashPartition`] | [`Partitioned`] | unspecified |
//! | bucket-chain partition (Sioulas et al.) | [`BucketChainPartition`] | [`BucketChains`]: bucket pool + chains | unspecified, scheduling-dependent on the GPU |
//! | hash partition of 8-byte keys written as their low 32 bits, with row ids or membership bitmaps (fan-out 1..=16) | [`LowWordsPartition`] | [`LowWords`]: keys, row ids or bitmaps, offsets, whether the keys lay in one 2^32 window | input order |
//!
//! Keys are [`Key`](joinkit_cuda::Key)s (`u32`, `u64`); any number of payload columns of any
//! [`Element`](joinkit_cuda::Element) type, mixed widths, move with their keys (the shared
//! [`Column`] type, re-exported here), and the permutation itself can come back as row ids
//! ([`RowIds`]) so other columns can be gathered later.
//!
//! With the `cuda` feature, the `cuda` module has view-level entry points for reuse inside other GPU
//! projects: caller's buffers (cudarc views or raw pointers), caller's stream, caller-provided
//! `Scratch`, no synchronization.
//!
//! ```
//! use joinkit_cuda::{Backend, CpuBackend};
//! use joinkit_partition::{Column, RadixPartition, RowIds};
//!
//! let cpu = CpuBackend::new();
//! let keys = cpu.upload(&[0x12u32, 0x03, 0x11, 0x02]).unwrap();
//! let payload = Column::U64(cpu.upload(&[10u64, 11, 12, 13]).unwrap());
//! // Partition on the low 4 bits: 16 partitions, stable.
//! let p = cpu
//!     .radix_partition(&keys, &[payload], 0..4, RowIds::U32)
//!     .unwrap();
//! assert_eq!(p.keys, vec![0x11, 0x12, 0x02, 0x03]);
//! assert!(matches!(&p.payloads[0], Column::U64(v) if *v == vec![12, 10, 13, 11]));
//! assert!(matches!(&p.row_ids, Some(Column::U32(v)) if *v == vec![2, 0, 3, 1]));
//! assert_eq!(&p.offsets[..5], &[0, 0, 1, 3, 4]);
//! assert_eq!(p.offsets.len(), 17);
//! ```

mod bucket;
mod column;
mod digit;
mod hash;
mod low_words;
mod radix;
mod stable;

#[cfg(feature = "cuda")]
pub mod cuda;

pub use bucket::{
    BucketChainPartition, BucketChains, FlatPartitions, MAX_BUCKET_CAPACITY, MAX_BUCKET_COLUMNS,
    NO_BUCKET, bucket_pool_buckets,
};
pub use column::RowIds;
pub use digit::{MAX_FANOUT, MAX_RADIX_BITS, Partitioner, RADIX_PASS_BITS, hash_partition_of};
pub use hash::HashPartition;
pub use joinkit_cuda::{Backend, Column, Error, Result};
pub use low_words::{
    LowWords, LowWordsPartition, MAX_LOW_WORDS_FANOUT, MemberRun, RowNames, member_words,
};
pub use radix::RadixPartition;
pub use stable::Partitioned;
