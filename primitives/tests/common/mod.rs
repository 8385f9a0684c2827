//! Helpers shared by the property-test binaries.
#![allow(dead_code, unreachable_pub)]

use proptest::test_runner::{Config, TestRunner};

pub type Gpu = Option<joinkit_cuda::testing::TestGpu>;

/// The GPU for a test, or `None` (printed; a failure when `JOINKIT_REQUIRE_GPU` is set).
pub fn gpu(test: &str) -> Gpu {
    joinkit_cuda::testing::gpu_or_skip(test)
}

/// 48 cases, no failure files.
pub fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    })
}
