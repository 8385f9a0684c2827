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
    /// Whether the run now starting is the device's last ([`Opening::close_early`] may then
    /// close it).
    last_run: bool,
    /// The thread closing the device, once [`Opening::close_early`] has started it.
    closing: Option<JoinHandle<()>>,
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
            last_run: false,
            closing: None,
        }
    }

    /// Says whether the run about to start is the last to use this device.
    pub(crate) fn set_last_run(&mut self, last: bool) {
        self.last_run = last;
    }

    /// In the device's last run, once nothing will use it again, closes it on a thread of its
    /// own while the run goes on (a join of files writes its output meanwhile). Why: a CUDA
    /// context's teardown took 66–94 ms on the H200 machine, and a process that exits with its
    /// context open spent 101–157 ms in the driver's exit against 36–66 after that teardown
    /// (`docs/results/files.md`): closed beside the write, most of it leaves the command's
    /// wall clock. Elsewhere (a run that is not the last, a device not opened, or its opening
    /// failed) it does nothing; after it [`Opening::get`] fails.
    ///
    /// # Safety
    /// Every buffer made on the device (page-locked host buffers included) is dropped, and
    /// nothing uses the device but through this opening (`Device::close`'s contract).
    pub(crate) unsafe fn close_early(&mut self) {
        if !self.last_run || self.closing.is_some() {
            return;
        }
        if let Some(Ok(device)) = self.opened.take() {
            self.opened = OnceCell::from(Err(Error::NoDevice("the device was closed".into())));
            self.closing = std::thread::Builder::new()
                .name("joinkit-device-close".into())
                // SAFETY: the caller's promise: no buffer of the device is left, and nothing
                // else uses it.
                .spawn(move || unsafe { device.close() })
                .ok();
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
    /// A device [`Opening::close_early`] closes is waited for instead: its teardown is over
    /// by then or nearly.
    pub(crate) fn close_at_exit(mut self) {
        if let Some(handle) = self.closing.take() {
            let _ = handle.join();
        } else if self.opened.get().is_some() {
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
