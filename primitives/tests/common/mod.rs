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

/// A device buffer of `len` elements poisoned with `POISON_U64`, so an element a kernel fails
/// to write is caught.
#[cfg(feature = "cuda")]
pub fn poisoned<T: joinkit_cuda::Element>(
    g: &joinkit_cuda::CudaBackend,
    len: usize,
) -> joinkit_cuda::DeviceBuffer<T> {
    use joinkit_cuda::Backend;
    let mut b = g.alloc::<T>(len).unwrap();
    g.fill(&mut b, T::from_bits(joinkit_cuda::testing::POISON_U64))
        .unwrap();
    b
}
