//! # joinkit-primitives
//!
//! The building blocks joins are made of, each with one contract and two implementations: a
//! CPU twin (rayon) and a CUDA one (CUB through `cub-sys`, or this crate's kernels).
//!
//! | operation | trait | CUDA path |
//! | --- | --- | --- |
//! | stable radix sort of pairs / keys by a bit range (CPU: parallel LSD radix, 8-bit digits) | [`Sort`] | CUB `DeviceRadixSort` |
//! | exclusive prefix sum (offsets from counts) | [`Scan`] | CUB `DeviceScan` |
//! | even-width histogram | [`Histogram`] | CUB `DeviceHistogram` |
//! | gather of one or many columns by a `u32`/`u64` map, scatter; checked bounds | [`Gather`] | `kernels/gather.cu`: 16-byte map/output vectors, eight loads in flight per thread; clustered maps take the same kernel (they hit L2: no flag, no staging) |
//! | predicate flags: a column within bounds, one column less than another (signed columns as signed) | [`Filter`] | `kernels/filter.cu`: grid-stride, one read of each column, one write of the flags |
//! | stable compaction of columns by flags, row ids of set flags | [`Compact`] | `kernels/select.cu` (+ CUB scan); byte flags: CUB `DeviceSelect` in `cuda::select_flagged_u8` |
//! | semi join of co-clustered inputs: marks of the (flagged) left rows of sorted unique keys with a match in a sorted right column among rows flagged or passing `first < second` (read only where a wanted left row matched), order checked | [`SortedMatch`] | `kernels/semi.cu`: a block a tile of left rows in shared memory; each thread's run of right rows searched there, then galloped |
//! | two `u32` columns as one `u64` column (`lo \| hi << 32`) and back | [`Interleave`] | `kernels/interleave.cu`: grid-stride, four rows per thread through 16-byte loads and stores |
//! | lower/upper bounds in a sorted column, M:N range expansion into pairs | [`MergePath`] | `kernels/merge.cu`: binary search + gallop; expansion balanced over the output |
//! | row ids (iota) | `Backend::iota` | `joinkit-cuda` runtime kernel |
//!
//! Every CUDA operation also has a view-level entry in the `cuda` module that works on buffers the
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

mod filter;
mod gather;
mod histogram;
mod interleave;
mod merge;
mod scan;
mod select;
mod semi;
mod sort;

#[cfg(feature = "cuda")]
pub mod cuda;

pub use filter::Filter;
pub use gather::{Bounds, Gather};
pub use histogram::Histogram;
pub use interleave::Interleave;
pub use merge::MergePath;
pub use scan::{Scan, Summable};
pub use select::Compact;
pub use semi::{SORTED_MATCH_TILE, SortedMatch};
pub use sort::Sort;
