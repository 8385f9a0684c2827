//! Compiles kernels/*.cu into the crate's embedded fatbin when the `cuda` feature is on.

fn main() {
    joinkit_cuda_build::build_kernels();
}
