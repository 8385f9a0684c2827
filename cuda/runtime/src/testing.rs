//! Helpers for tests that need a GPU: they skip, visibly, where there is none, and fail instead
//! when `JOINKIT_REQUIRE_GPU=1` (set by the GPU bundle's runner), so a GPU run cannot pass by
//! skipping.

/// Name of the environment variable that turns GPU-test skips into failures.
pub const REQUIRE_GPU_ENV: &str = "JOINKIT_REQUIRE_GPU";

/// Whether GPU tests must run (`JOINKIT_REQUIRE_GPU` set to anything but `0` or empty).
pub fn gpu_required() -> bool {
    std::env::var(REQUIRE_GPU_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The CUDA backend for a GPU test, or `None` after printing why the test is skipped.
///
/// # Panics
/// When no GPU can be opened and [`gpu_required`] is true: the test fails.
#[cfg(feature = "cuda")]
pub fn cuda_or_skip(test: &str) -> Option<crate::CudaBackend> {
    match crate::CudaBackend::new(0) {
        Ok(b) => Some(b),
        Err(e) if gpu_required() => {
            panic!("{test}: {REQUIRE_GPU_ENV} is set but no GPU can be used: {e}")
        }
        Err(e) => {
            say_skipped(test, &e.to_string());
            None
        }
    }
}

/// A backend on every GPU of the machine (index = ordinal) for a test that needs at least
/// `min` of them, or `None` after printing why it is skipped: fewer GPUs (a one-GPU machine
/// passes such a test by skipping it, even with [`gpu_required`]), or none as in
/// [`cuda_or_skip`].
///
/// # Panics
/// As [`cuda_or_skip`]; when a GPU that is present cannot be opened.
#[cfg(feature = "cuda")]
pub fn gpus_or_skip(test: &str, min: usize) -> Option<Vec<crate::CudaBackend>> {
    cuda_or_skip(test)?;
    let gpus = crate::device_count().unwrap_or(0);
    if gpus < min {
        say_skipped(test, &format!("{gpus} GPU(s), needs {min} or more"));
        return None;
    }
    Some(
        (0..gpus)
            .map(|g| crate::CudaBackend::new(g).unwrap_or_else(|e| panic!("{test}: cuda:{g}: {e}")))
            .collect(),
    )
}

/// The backend a GPU test runs on: CUDA in builds with the `cuda` feature; in builds without
/// it the CPU backend stands in as a type only ([`gpu_or_skip`] never returns one).
#[cfg(feature = "cuda")]
pub type TestGpu = crate::CudaBackend;
/// The backend a GPU test runs on: CUDA in builds with the `cuda` feature; in builds without
/// it the CPU backend stands in as a type only ([`gpu_or_skip`] never returns one).
#[cfg(not(feature = "cuda"))]
pub type TestGpu = crate::CpuBackend;

/// The GPU for a test, or `None` after printing why the test's GPU part is skipped: no GPU can
/// be opened, or the build has no `cuda` feature.
///
/// # Panics
/// When the GPU part cannot run and [`gpu_required`] is true: the test fails.
pub fn gpu_or_skip(test: &str) -> Option<TestGpu> {
    #[cfg(feature = "cuda")]
    {
        cuda_or_skip(test)
    }
    #[cfg(not(feature = "cuda"))]
    {
        if gpu_required() {
            panic!("{test}: {REQUIRE_GPU_ENV} is set but this build has no `cuda` feature");
        }
        say_skipped(test, "built without the `cuda` feature");
        None
    }
}

/// Prints a skip notice straight to stderr, past the test harness's output capture, so a skipped
/// GPU test is visible in `cargo test` output even when it passes.
pub fn say_skipped(test: &str, why: &str) {
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED (GPU part of {test}): {why}; set {REQUIRE_GPU_ENV}=1 to make this a failure"
    );
}

/// The value outputs are poisoned with before a kernel runs, so an element the kernel fails to
/// write is caught (all ones: unlikely as a real result, not zero).
pub const POISON_U64: u64 = 0xDEAD_BEEF_DEAD_BEEF;
