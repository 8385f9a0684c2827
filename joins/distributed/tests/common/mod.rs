//! What the test binaries share.

use joinkit_cuda::testing::{TestGpu, gpu_or_skip};

/// A backend for each in-process rank on the test's GPU (each opened anew, so with a stream
/// of its own), or `None` after saying why the GPU part of `test` is skipped.
pub(crate) fn gpu_ranks(test: &str) -> Option<impl Fn() -> TestGpu + Sync> {
    let _gpu = gpu_or_skip(test)?;
    #[cfg(feature = "cuda")]
    return Some(|| joinkit_cuda::CudaBackend::new(0).expect("the GPU opened once already"));
    #[cfg(not(feature = "cuda"))]
    Some(joinkit_cuda::CpuBackend::new)
}
