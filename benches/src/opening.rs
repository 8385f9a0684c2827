//! Devices opened on threads of their own. Why: opening a CUDA device (the driver's start and
//! the context's creation) took about 0.3 s on the H200 machine, with nothing else running; a
//! join of files reads its files in the meantime now, and only then waits for the device.

use std::cell::{Cell, OnceCell};
use std::thread::JoinHandle;

use joinkit_cuda::{Device, Error, Result};

/// What an opening thread hands back.
type Opened = Result<Device>;

/// A device being opened on another thread, waited for at its first use ([`Opening::get`]).
pub(crate) struct Opening {
    /// The thread, until [`Opening::get`] has joined it.
    thread: Cell<Option<JoinHandle<Opened>>>,
    opened: OnceCell<Opened>,
}

impl Opening {
    /// Starts opening the device `spec` names (`cpu`, `cuda`, `cuda:N`), or the best one
    /// ([`Device::best`]) without a spec. Where no thread can be started, opens it here.
    pub(crate) fn start(spec: Option<String>) -> Self {
        let open = move || match spec {
            Some(s) => Device::from_spec(&s),
            None => Ok(Device::best()),
        };
        let (thread, opened) = match std::thread::Builder::new()
            .name("joinkit-device".into())
            .spawn(open.clone())
        {
            Ok(handle) => (Some(handle), OnceCell::new()),
            Err(_) => (None, OnceCell::from(open())),
        };
        Self {
            thread: Cell::new(thread),
            opened,
        }
    }

    /// The device, once its thread has opened it (waiting for that the first time), current on
    /// this thread; or why it could not be opened.
    ///
    /// # Errors
    /// As [`Device::from_spec`]; driver errors making the device current on this thread.
    ///
    /// # Panics
    /// Where opening the device panicked, with that panic.
    pub(crate) fn get(&self) -> Result<&Device> {
        let opened = self.opened.get_or_init(|| {
            let opened = match self.thread.take() {
                Some(handle) => handle
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                None => Err(Error::NoDevice("the device's opening was lost".into())),
            };
            // The context was made current on the opening thread; operations that call the
            // driver directly expect it current on the thread that uses it.
            opened.and_then(|d| {
                bind(&d)?;
                Ok(d)
            })
        });
        opened.as_ref().map_err(Clone::clone)
    }

    /// Ends the run with the device left open: the driver reclaims a process's device memory
    /// and contexts as it exits, and tearing them down first (the memory pool's and the
    /// buffer cache's allocations freed one by one, the context released) took about 0.05 s of
    /// a 0.6–0.9 s one-shot command on the H200. The driver's own exit handlers still run
    /// (profilers flush there). A device still opening is waited for, as dropping does.
    pub(crate) fn close_at_exit(self) {
        if self.opened.get().is_some() {
            std::mem::forget(self);
        }
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        // A run that ends before using its device (a file that cannot be read) lets the
        // opening finish before the process exits, not in the middle of the driver's start.
        if let Some(handle) = self.thread.take() {
            let _ = handle.join();
        }
    }
}

/// Makes a CUDA device's context current on the calling thread.
fn bind(device: &Device) -> Result<()> {
    match device {
        Device::Cpu(_) => Ok(()),
        #[cfg(feature = "cuda")]
        Device::Cuda(g) => g.bind_to_thread(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_open_on_a_thread() {
        let cpu = Opening::start(Some("cpu".into()));
        assert!(matches!(cpu.get(), Ok(Device::Cpu(_))));
        // Waited for once; the device stays.
        assert!(matches!(cpu.get(), Ok(Device::Cpu(_))));
        let bad = Opening::start(Some("tpu:0".into()));
        assert!(matches!(bad.get(), Err(Error::InvalidArgument(_))));
        assert!(matches!(bad.get(), Err(Error::InvalidArgument(_))));
        // One that is never used is waited for when dropped.
        drop(Opening::start(Some("cuda:4096".into())));
    }
}
