//! Helpers shared by the property-test binaries.
#![allow(dead_code, unreachable_pub)]

use proptest::test_runner::{Config, TestRunner};

#[cfg(feature = "cuda")]
pub type Gpu = Option<joinkit_cuda::CudaBackend>;
#[cfg(not(feature = "cuda"))]
pub type Gpu = Option<joinkit_cuda::CpuBackend>;

/// The GPU for a test, or `None` (printed) where there is none.
pub fn gpu(test: &str) -> Gpu {
    #[cfg(feature = "cuda")]
    {
        joinkit_cuda::testing::cuda_or_skip(test)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = test;
        None
    }
}

/// 48 cases, no failure files.
pub fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    })
}
