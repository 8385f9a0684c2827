//! Compiles `kernels/*.cu` into the embedded fatbin when the `cuda` feature is on.

fn main() {
    joinkit_cuda_build::build_kernels();
}
