//! Exports the shared device headers and compiles this crate's runtime kernels.

fn main() {
    // Exported to crates that depend on this one as DEP_JOINKIT_CUDA_INCLUDE, so their kernels
    // can `#include "joinkit/hash.cuh"`.
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it");
    println!("cargo:include={manifest}/include");
    joinkit_cuda_build::build_kernels();
}
