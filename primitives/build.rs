//! Compiles this crate's kernels (`kernels/*.cu`) into one embedded fatbin when `cuda` is on.

fn main() {
    joinkit_cuda_build::build_kernels();
}
