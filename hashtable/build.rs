//! Exports the device-side table header and compiles this crate's kernels.

fn main() {
    // Exported to crates that depend on this one as DEP_JOINKIT_HASHTABLE_INCLUDE, so their
    // kernels can `#include "joinkit/hashtable.cuh"` (which itself includes
    // "joinkit/hash.cuh" from joinkit-cuda's DEP_JOINKIT_CUDA_INCLUDE).
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it");
    println!("cargo:include={manifest}/include");
    joinkit_cuda_build::build_kernels();
}
