//! # joinkit-cuda
//!
//! The device runtime every joinkit crate stands on:
//!
//! - the [`Backend`] contract: buffers, upload/download, fill, copy, timing and memory
//!   accounting, implemented by [`CpuBackend`] (rayon; always there) and, with the `cuda`
//!   feature, `CudaBackend` (cudarc, loading libcuda dynamically);
//! - [`Device`]: run-time choice of backend (`Device::best()`, `JOINKIT_DEVICE=cpu|cuda:N`);
//! - the element and key types ([`Element`], [`Key`]) and one [`Error`] type;
//! - with `cuda`: typed device buffers with a peak-memory counter, freed allocations kept for
//!   requests of the same size (`CudaBackend::set_buffer_cache_limit`), embedded fatbin modules
//!   loaded once per device (`kernel_module!`), launch shapes from device properties, the
//!   `Scratch` temp-storage protocol, and large uploads and downloads staged through a ring of
//!   pinned buffers (pageable copies ran at a twentieth of the link's rate);
//! - shared device headers in `include/joinkit/` (`hash.cuh`: murmur3 fmix32/fmix64 with seeds;
//!   `device.cuh`: grid-stride, warp and block scans, 64-bit atomics) with CPU twins in [`hash`].
//!
//! Operations (sort, gather, partition, hash tables, codec, joins) live in their own crates as
//! traits with one implementation per backend.
//!
//! ```
//! use joinkit_cuda::{Backend, Device, with_backend};
//! let device = Device::from_spec("cpu").unwrap();
//! let n = with_backend!(&device, b => {
//!     let buf = b.upload(&[1u32, 2, 3]).unwrap();
//!     b.download(&buf).unwrap().len()
//! });
//! assert_eq!(n, 3);
//! ```

mod backend;
mod column;
mod cpu;
#[cfg(feature = "cuda")]
mod cuda;
mod device;
mod element;
mod error;
pub mod hash;
pub mod testing;

pub use backend::{Backend, Buffer, DeviceKind, MemoryStats, check_unpack_low_bits};
pub use column::{Column, ColumnRef};
pub use cpu::{
    CpuBackend, PARALLEL_THRESHOLD, copy_parallel, copy_parallel_uninit, try_reserved, try_zeroed,
};
#[cfg(feature = "cuda")]
pub use cuda::{
    CudaBackend, DeviceBuffer, DeviceInfo, KernelModule, NO_STAGING_ENV, POSTED_WORDS,
    PinnedBuffer, STAGED_MIN_BYTES, STAGING_BUFFERS, STAGING_CHUNK_BYTES, Scratch, StagingBuffer,
    cudarc, device_count, driver, driver_present,
};
pub use device::{DEVICE_ENV, Device};
pub use element::{DeviceElement, Element, Key, bit_cast_slice, bit_cast_vec};
pub use error::{Error, Result};
