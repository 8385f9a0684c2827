//! Compiles the join crate's own kernels (flag helpers) when the `cuda` feature is on.

fn main() {
    joinkit_cuda_build::build_kernels();
}
