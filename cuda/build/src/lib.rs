//! Build-script helper for joinkit's kernel crates.
//!
//! Every crate with CUDA kernels keeps them in `kernels/*.cu` beside its Rust sources and calls
//! [`build_kernels`] from its `build.rs`. With the crate's `cuda` feature on, the kernels are
//! compiled by `nvcc` into **one fatbin per crate** (SASS for each listed architecture plus PTX
//! for the newest, so later GPUs can JIT it) written to `$OUT_DIR/kernels.fatbin`, which the crate
//! embeds with `include_bytes!` (see `joinkit_cuda::kernel_module!`). No build machine path ends
//! up in the binary.
//!
//! nvcc is looked up in this order: `$NVCC`, `$CUDA_HOME/bin/nvcc`, `$CUDA_PATH/bin/nvcc`, `nvcc`
//! on `PATH`, `/usr/local/cuda/bin/nvcc`. With the feature on and no nvcc, the build fails with
//! a message saying what to install: a CUDA build is never silently downgraded to CPU-only.
//!
//! Environment knobs: `JOINKIT_CUDA_ARCHS` (comma-separated compute capabilities, default
//! `80,90`; the last also gets PTX), `JOINKIT_NVCC_FLAGS` (extra flags, whitespace separated).

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Default SASS targets: Ampere (sm_80) and Hopper (sm_90); PTX for compute_90 is added.
pub const DEFAULT_ARCHS: &str = "80,90";

/// A located CUDA toolkit: the `nvcc` binary and the folders around it.
#[derive(Debug, Clone)]
pub struct Toolkit {
    /// Path of the `nvcc` executable.
    pub nvcc: PathBuf,
    /// Toolkit root (the folder holding `bin/nvcc`).
    pub root: PathBuf,
}

impl Toolkit {
    /// Finds nvcc (see the crate docs for the search order). Returns a message saying what to
    /// install when none is found.
    pub fn find() -> Result<Toolkit, String> {
        for var in ["NVCC", "CUDA_HOME", "CUDA_PATH", "PATH"] {
            println!("cargo:rerun-if-env-changed={var}");
        }
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(p) = env::var_os("NVCC") {
            candidates.push(PathBuf::from(p));
        }
        for var in ["CUDA_HOME", "CUDA_PATH"] {
            if let Some(p) = env::var_os(var) {
                candidates.push(Path::new(&p).join("bin").join("nvcc"));
            }
        }
        if let Some(path) = env::var_os("PATH") {
            candidates.extend(env::split_paths(&path).map(|d| d.join("nvcc")));
        }
        candidates.push(PathBuf::from("/usr/local/cuda/bin/nvcc"));
        let nvcc = candidates
            .into_iter()
            .find(|p| p.is_file())
            .ok_or_else(|| {
                "joinkit: the `cuda` feature is on but nvcc was not found (looked at $NVCC, \
             $CUDA_HOME/bin, $CUDA_PATH/bin, PATH, /usr/local/cuda/bin). Install a CUDA 13.0 \
             toolkit, or without a system toolkit: `pip install --target DIR \
             nvidia-cuda-nvcc==13.0.* nvidia-cuda-runtime==13.0.* nvidia-cuda-cccl==13.0.* \
             nvidia-cuda-crt==13.0.* nvidia-nvvm==13.0.*` and set CUDA_HOME=DIR/nvidia/cu13 \
             (`.ci/install-cuda.sh` does exactly that). Or build without `--features cuda`."
                    .to_string()
            })?;
        let nvcc = nvcc.canonicalize().unwrap_or(nvcc);
        let root = nvcc
            .parent()
            .and_then(Path::parent)
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/usr/local/cuda"));
        Ok(Toolkit { nvcc, root })
    }

    /// Include folders every kernel build needs: CCCL (CUB, libcu++), which CUDA 13 keeps in
    /// `include/cccl`, and the toolkit's own `include`.
    pub fn include_dirs(&self) -> Vec<PathBuf> {
        ["include/cccl", "include"]
            .iter()
            .map(|d| self.root.join(d))
            .filter(|d| d.is_dir())
            .collect()
    }

    /// Folders that may hold `libcudart_static.a` (system toolkits use `lib64`, the Python
    /// packages `lib`).
    pub fn library_dirs(&self) -> Vec<PathBuf> {
        ["lib64", "lib", "targets/x86_64-linux/lib"]
            .iter()
            .map(|d| self.root.join(d))
            .filter(|d| d.join("libcudart_static.a").is_file())
            .collect()
    }
}

/// The compute capabilities to build for, from `JOINKIT_CUDA_ARCHS` or [`DEFAULT_ARCHS`]; 80
/// (Ampere) or newer.
pub fn archs() -> Vec<String> {
    println!("cargo:rerun-if-env-changed=JOINKIT_CUDA_ARCHS");
    let spec = env::var("JOINKIT_CUDA_ARCHS").unwrap_or_else(|_| DEFAULT_ARCHS.to_string());
    let archs: Vec<String> = spec
        .split(',')
        .map(|s| s.trim().trim_start_matches("sm_").to_string())
        .filter(|s| !s.is_empty())
        .collect();
    if archs.is_empty()
        || archs
            .iter()
            .any(|a| !a.chars().all(|c| c.is_ascii_alphanumeric()))
    {
        panic!("joinkit: JOINKIT_CUDA_ARCHS={spec:?} is not a list like `80,90`");
    }
    // The kernels use sm_80 warp reductions (`__reduce_*_sync`) and cp.async.
    if let Some(old) = archs.iter().find(|a| {
        let digits: String = a.chars().take_while(char::is_ascii_digit).collect();
        digits.parse::<u32>().is_ok_and(|v| v < 80)
    }) {
        panic!(
            "joinkit: JOINKIT_CUDA_ARCHS={spec:?} names sm_{old}; the kernels need sm_80 or newer"
        );
    }
    archs
}

/// `-gencode` flags: SASS for every arch, plus PTX for the last one.
pub fn gencode_flags(archs: &[String]) -> Vec<String> {
    let mut flags: Vec<String> = archs
        .iter()
        .map(|a| format!("-gencode=arch=compute_{a},code=sm_{a}"))
        .collect();
    if let Some(last) = archs.last() {
        flags.push(format!("-gencode=arch=compute_{last},code=compute_{last}"));
    }
    flags
}

/// Extra flags from `JOINKIT_NVCC_FLAGS`.
pub fn extra_flags() -> Vec<String> {
    println!("cargo:rerun-if-env-changed=JOINKIT_NVCC_FLAGS");
    env::var("JOINKIT_NVCC_FLAGS")
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

/// Folders of shared device headers: this crate's caller's `include/` (if any) and those its
/// joinkit dependencies export, `DEP_JOINKIT_<LINKS>_INCLUDE` (the runtime's
/// `DEP_JOINKIT_CUDA_INCLUDE`, the hash tables' `DEP_JOINKIT_HASHTABLE_INCLUDE`), in name order.
pub fn joinkit_include_dirs(manifest_dir: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    let own = manifest_dir.join("include");
    if own.is_dir() {
        dirs.push(own);
    }
    let mut exported: Vec<(String, PathBuf)> = env::vars_os()
        .filter_map(|(name, dir)| {
            let name = name.into_string().ok()?;
            (name.starts_with("DEP_JOINKIT_") && name.ends_with("_INCLUDE"))
                .then(|| (name, PathBuf::from(dir)))
        })
        .collect();
    exported.sort();
    for (_, dir) in exported {
        if !dirs.contains(&dir) {
            dirs.push(dir);
        }
    }
    dirs
}

/// Compiles `kernels/*.cu` of the calling crate into `$OUT_DIR/kernels.fatbin` when the crate's
/// `cuda` feature is on; does nothing otherwise. Call from `build.rs`.
///
/// All `.cu` files become one translation unit (a generated file that `#include`s each), so the
/// crate gets one module with one load. Cargo reruns the build only when something under
/// `kernels/` or an include folder changes, or one of the environment knobs.
///
/// # Panics
/// Panics (failing the build, as build scripts do) when nvcc is missing or compilation fails.
pub fn build_kernels() {
    if env::var_os("CARGO_FEATURE_CUDA").is_none() {
        return;
    }
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets it"));
    let kernel_dir = manifest_dir.join("kernels");
    println!("cargo:rerun-if-changed={}", kernel_dir.display());
    let mut sources: Vec<PathBuf> = std::fs::read_dir(&kernel_dir)
        .unwrap_or_else(|e| panic!("joinkit: cannot read {}: {e}", kernel_dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    sources.sort();
    let toolkit = Toolkit::find().unwrap_or_else(|msg| panic!("{msg}"));
    let includes = joinkit_include_dirs(&manifest_dir);
    for dir in &includes {
        println!("cargo:rerun-if-changed={}", dir.display());
    }

    let mut unit = String::from("// generated by joinkit-cuda-build: one module per crate\n");
    for s in &sources {
        writeln!(unit, "#include \"{}\"", s.display()).expect("write to String");
    }
    let unit_path = out_dir.join("kernels_all.cu");
    std::fs::write(&unit_path, unit).expect("write generated kernel unit");
    let fatbin = out_dir.join("kernels.fatbin");

    let mut cmd = Command::new(&toolkit.nvcc);
    cmd.arg("-fatbin")
        .args(gencode_flags(&archs()))
        .args(["-std=c++17", "-O3", "--expt-relaxed-constexpr", "-lineinfo"])
        .arg("-I")
        .arg(&kernel_dir);
    for dir in includes.iter().chain(toolkit.include_dirs().iter()) {
        cmd.arg("-I").arg(dir);
    }
    cmd.args(extra_flags())
        .arg("-o")
        .arg(&fatbin)
        .arg(&unit_path);
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("joinkit: cannot run {}: {e}", toolkit.nvcc.display()));
    if !status.success() {
        panic!(
            "joinkit: nvcc failed ({status}) compiling {}",
            kernel_dir.display()
        );
    }
}
