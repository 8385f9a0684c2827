//! Embedded fatbin modules, loaded once per device on first use.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaModule};
use cudarc::nvrtc::Ptx;

use super::driver_error;
use crate::Result;

/// A crate's kernels: the fatbin its build script compiled (see `joinkit-cuda-build`), embedded
/// in the binary. Declare one per crate with [`crate::kernel_module!`].
#[derive(Debug)]
pub struct KernelModule {
    /// The crate the kernels belong to (for error messages).
    pub crate_name: &'static str,
    /// The fatbin image.
    pub image: &'static [u8],
}

impl KernelModule {
    /// A module from an embedded image.
    pub const fn new(crate_name: &'static str, image: &'static [u8]) -> Self {
        Self { crate_name, image }
    }
}

/// Declares the calling crate's embedded kernel module:
/// `static KERNELS: KernelModule = joinkit_cuda::kernel_module!();`
/// The crate's `build.rs` must call `joinkit_cuda_build::build_kernels()`.
#[macro_export]
macro_rules! kernel_module {
    () => {
        $crate::KernelModule::new(
            env!("CARGO_PKG_NAME"),
            include_bytes!(concat!(env!("OUT_DIR"), "/kernels.fatbin")),
        )
    };
}

/// The modules loaded so far, by device ordinal and module: each holds its device's context.
type ModuleCache = Mutex<HashMap<(usize, usize), Arc<CudaModule>>>;

fn loaded() -> std::sync::MutexGuard<'static, HashMap<(usize, usize), Arc<CudaModule>>> {
    static CACHE: OnceLock<ModuleCache> = OnceLock::new();
    CACHE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// Loads `module` into `ctx`'s device, or returns the copy loaded before.
pub(super) fn load(
    ctx: &Arc<CudaContext>,
    module: &'static KernelModule,
) -> Result<Arc<CudaModule>> {
    let key = (ctx.ordinal(), module as *const KernelModule as usize);
    let mut cache = loaded();
    if let Some(m) = cache.get(&key) {
        return Ok(m.clone());
    }
    let loaded = ctx
        .load_module(Ptx::from_binary(module.image.to_vec()))
        .map_err(|e| driver_error("loading an embedded kernel module", e))?;
    cache.insert(key, loaded.clone());
    Ok(loaded)
}

/// Forgets the modules loaded into device `ordinal`: backends that fetched kernels from them
/// keep those, later fetches load them again, and the device's context no longer stays held
/// by them.
pub(super) fn forget(ordinal: usize) {
    loaded().retain(|&(o, _), _| o != ordinal);
}
