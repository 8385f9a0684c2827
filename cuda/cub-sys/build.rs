//! Compiles the CUB shim (`csrc/*.cu`) with nvcc through `cc` and links it with
//! `cudart_static`, when the `cuda` feature is on. With `generate-bindings`, also regenerates
//! the Rust declarations from `include/cub_sys.h`.

use std::env;
use std::path::PathBuf;
use std::process::Command;

use joinkit_cuda_build::{Toolkit, archs, extra_flags, gencode_flags};

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    println!("cargo:rerun-if-changed=csrc");
    println!("cargo:rerun-if-changed=include");
    println!("cargo:include={}", manifest.join("include").display());

    #[cfg(feature = "generate-bindings")]
    generate_bindings(&manifest);

    if env::var_os("CARGO_FEATURE_CUDA").is_none() || env::var_os("DOCS_RS").is_some() {
        return;
    }
    let toolkit = Toolkit::find().unwrap_or_else(|msg| panic!("{msg}"));
    let out_dir = PathBuf::from(env::var("OUT_DIR").expect("cargo sets it"));
    let mut sources: Vec<PathBuf> = std::fs::read_dir(manifest.join("csrc"))
        .expect("csrc/ exists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cu"))
        .collect();
    sources.sort();
    // nvcc is run directly rather than through cc's CUDA mode, which adds host-compiler flags
    // nvcc rejects and device debug (-G) in debug builds: the shim is always optimized.
    let mut flags: Vec<String> = vec![
        "-c".into(),
        "-std=c++17".into(),
        "-O3".into(),
        "-Xcompiler=-fPIC".into(),
        format!("-I{}", manifest.join("include").display()),
    ];
    flags.extend(
        toolkit
            .include_dirs()
            .iter()
            .map(|d| format!("-I{}", d.display())),
    );
    flags.extend(gencode_flags(&archs()));
    flags.extend(extra_flags());
    let objects: Vec<PathBuf> = std::thread::scope(|scope| {
        let jobs: Vec<_> = sources
            .iter()
            .map(|src| {
                let obj = out_dir
                    .join(src.file_stem().expect("a file name"))
                    .with_extension("o");
                let (nvcc, flags) = (&toolkit.nvcc, &flags);
                scope.spawn(move || {
                    let status = Command::new(nvcc)
                        .args(flags)
                        .arg("-o")
                        .arg(&obj)
                        .arg(src)
                        .status()
                        .unwrap_or_else(|e| panic!("cub-sys: cannot run {}: {e}", nvcc.display()));
                    assert!(
                        status.success(),
                        "cub-sys: nvcc failed on {}",
                        src.display()
                    );
                    obj
                })
            })
            .collect();
        jobs.into_iter()
            .map(|j| j.join().expect("nvcc thread"))
            .collect()
    });
    let archive = out_dir.join("libcub_sys_shim.a");
    let _ = std::fs::remove_file(&archive);
    let mut ar = cc::Build::new().get_archiver();
    let status = ar
        .arg("crs")
        .arg(&archive)
        .args(&objects)
        .status()
        .expect("run ar");
    assert!(status.success(), "cub-sys: ar failed");
    println!("cargo:rustc-link-search=native={}", out_dir.display());
    println!("cargo:rustc-link-lib=static=cub_sys_shim");
    println!("cargo:rustc-link-lib=dylib=stdc++");

    let libs = toolkit.library_dirs();
    if libs.is_empty() {
        panic!(
            "cub-sys: libcudart_static.a not found under {}; install nvidia-cuda-runtime==13.0.* \
             next to nvcc (see .ci/install-cuda.sh)",
            toolkit.root.display()
        );
    }
    for dir in libs {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
    println!("cargo:rustc-link-lib=static=cudart_static");
    for lib in ["rt", "dl", "pthread"] {
        println!("cargo:rustc-link-lib=dylib={lib}");
    }
}

/// Writes `$OUT_DIR/bindings.rs` from the header; `regenerate-bindings.sh` copies it to
/// `src/bindings.rs`, which is what normal builds use.
#[cfg(feature = "generate-bindings")]
fn generate_bindings(manifest: &std::path::Path) {
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets it")).join("bindings.rs");
    bindgen::Builder::default()
        .header(manifest.join("include/cub_sys.h").display().to_string())
        .allowlist_function("cubsys_.*")
        .allowlist_type("cubsys_status|cudaStream_t")
        .rust_edition(bindgen::RustEdition::Edition2024)
        .rust_target(bindgen::RustTarget::stable(85, 0).expect("a stable Rust version"))
        .layout_tests(false)
        .generate()
        .expect("bindgen could not read include/cub_sys.h")
        .write_to_file(&out)
        .expect("write bindings");
}
