//! Picking the backend at run time: `JOINKIT_DEVICE=cpu|cuda:N`, else CUDA device 0 when the
//! `cuda` feature is on and a driver and device are present, else the CPU.

use crate::{CpuBackend, Error, Result};

/// A backend chosen at run time. Generic code runs on either through [`crate::with_backend!`].
#[derive(Debug, Clone)]
pub enum Device {
    /// The CPU (rayon) backend.
    Cpu(CpuBackend),
    /// A CUDA device.
    #[cfg(feature = "cuda")]
    Cuda(crate::CudaBackend),
}

/// Name of the environment variable that overrides device selection.
pub const DEVICE_ENV: &str = "JOINKIT_DEVICE";

impl Device {
    /// The best device available: `JOINKIT_DEVICE` if set (falling back to the CPU, with a
    /// message, when it names a device that cannot be opened), else CUDA device 0 if usable,
    /// else the CPU. Says once on stderr when a CUDA build finds no usable GPU.
    pub fn best() -> Device {
        match std::env::var(DEVICE_ENV) {
            Ok(spec) => Device::from_spec(&spec).unwrap_or_else(|e| {
                eprintln!("joinkit: {DEVICE_ENV}={spec:?} cannot be used ({e}); using the CPU");
                Device::Cpu(CpuBackend::new())
            }),
            Err(_) => Self::default_device(),
        }
    }

    #[cfg(feature = "cuda")]
    fn default_device() -> Device {
        match crate::CudaBackend::new(0) {
            Ok(b) => Device::Cuda(b),
            Err(e) => {
                static SAID: std::sync::Once = std::sync::Once::new();
                SAID.call_once(|| eprintln!("joinkit: no usable GPU ({e}); using the CPU backend"));
                Device::Cpu(CpuBackend::new())
            }
        }
    }

    #[cfg(not(feature = "cuda"))]
    fn default_device() -> Device {
        Device::Cpu(CpuBackend::new())
    }

    /// Closes the device now (see `CudaBackend::close`); the CPU has nothing to close.
    ///
    /// # Safety
    /// As `CudaBackend::close`: nothing made from the device outside joinkit's backends is in
    /// use, and no buffer of this backend outlives the call.
    pub unsafe fn close(self) {
        match self {
            Device::Cpu(_) => {}
            // SAFETY: the caller's guarantee.
            #[cfg(feature = "cuda")]
            Device::Cuda(g) => unsafe { g.close() },
        }
    }

    /// Opens the device a spec names: `cpu`, `cuda` (device 0) or `cuda:N`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown spec; [`Error::NoDevice`] when the device cannot
    /// be opened or this build has no CUDA support.
    pub fn from_spec(spec: &str) -> Result<Device> {
        let spec = spec.trim();
        if spec.eq_ignore_ascii_case("cpu") {
            return Ok(Device::Cpu(CpuBackend::new()));
        }
        let ordinal = match spec.strip_prefix("cuda") {
            Some("") => 0,
            Some(rest) => rest
                .strip_prefix(':')
                .and_then(|n| n.parse::<usize>().ok())
                .ok_or_else(|| {
                    Error::InvalidArgument(format!("unknown device {spec:?}; use cpu or cuda:N"))
                })?,
            None => {
                return Err(Error::InvalidArgument(format!(
                    "unknown device {spec:?}; use cpu or cuda:N"
                )));
            }
        };
        Self::open_cuda(ordinal)
    }

    #[cfg(feature = "cuda")]
    fn open_cuda(ordinal: usize) -> Result<Device> {
        crate::CudaBackend::new(ordinal).map(Device::Cuda)
    }

    #[cfg(not(feature = "cuda"))]
    fn open_cuda(ordinal: usize) -> Result<Device> {
        Err(Error::NoDevice(format!(
            "cuda:{ordinal} asked for, but this build has no CUDA support (build with --features cuda)"
        )))
    }

    /// A human-readable description of the device.
    pub fn describe(&self) -> String {
        crate::with_backend!(self, b => crate::Backend::describe(b))
    }
}

/// Runs an expression generic over the backend on whichever backend a [`Device`] holds:
/// `with_backend!(device, b => run_join(b, &args))`.
#[macro_export]
macro_rules! with_backend {
    ($device:expr, $b:ident => $body:expr) => {
        match $device {
            $crate::Device::Cpu($b) => $body,
            #[cfg(feature = "cuda")]
            $crate::Device::Cuda($b) => $body,
        }
    };
}
