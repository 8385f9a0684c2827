//! Flags from match counts: which rows a semi, anti or outer join keeps. A kernel on CUDA, a
//! rayon loop on the CPU, same output.

use joinkit_cuda::{Backend, CpuBackend, Error, Result};
use rayon::prelude::*;

/// Turns match counts or ranges into 0/1 row flags for compaction.
pub trait MatchFlags: Backend {
    /// `flags[i] = (upper[i] > lower[i]) == want_match` (ranges from a sorted search).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`]; allocation and driver errors.
    fn range_flags(
        &self,
        lower: &Self::Buf<u32>,
        upper: &Self::Buf<u32>,
        want_match: bool,
    ) -> Result<Self::Buf<u32>>;

    /// `flags[i] = (counts[i] != 0) == want_match`.
    ///
    /// # Errors
    /// Allocation and driver errors.
    fn count_flags(&self, counts: &Self::Buf<u32>, want_match: bool) -> Result<Self::Buf<u32>>;
}

impl MatchFlags for CpuBackend {
    fn range_flags(
        &self,
        lower: &Vec<u32>,
        upper: &Vec<u32>,
        want_match: bool,
    ) -> Result<Vec<u32>> {
        Error::check_len("range flags lower vs upper", lower.len(), upper.len())?;
        Ok(lower
            .par_iter()
            .zip(upper)
            .map(|(l, u)| u32::from((u > l) == want_match))
            .collect())
    }

    fn count_flags(&self, counts: &Vec<u32>, want_match: bool) -> Result<Vec<u32>> {
        Ok(counts
            .par_iter()
            .map(|&c| u32::from((c != 0) == want_match))
            .collect())
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use joinkit_cuda::cudarc::driver::PushKernelArg;
    use joinkit_cuda::{Backend, CudaBackend, DeviceBuffer, Error, Result};

    fn launch(
        b: &CudaBackend,
        name: &'static str,
        inputs: &[&DeviceBuffer<u32>],
        n: usize,
        want_match: bool,
    ) -> Result<DeviceBuffer<u32>> {
        let out = b.alloc::<u32>(n)?;
        if n == 0 {
            return Ok(out);
        }
        let f = b.function(&crate::KERNELS, name)?;
        let ptrs: Vec<u64> = inputs.iter().map(|i| i.device_ptr()).collect();
        let (out_ptr, n64, want) = (out.device_ptr(), n as u64, u32::from(want_match));
        let mut args = b.stream().launch_builder(&f);
        for p in &ptrs {
            args.arg(p);
        }
        args.arg(&out_ptr).arg(&n64).arg(&want);
        // SAFETY: the kernels (kernels/flags.cu) read n elements of each input and write n of
        // `out`; every buffer holds n elements and the arguments follow the C signatures.
        unsafe { args.launch(b.grid_stride_config(n, 256)) }.map_err(|e| Error::Driver {
            op: "launching a flag kernel",
            message: format!("{e:?}"),
        })?;
        Ok(out)
    }

    impl super::MatchFlags for CudaBackend {
        fn range_flags(
            &self,
            lower: &DeviceBuffer<u32>,
            upper: &DeviceBuffer<u32>,
            want_match: bool,
        ) -> Result<DeviceBuffer<u32>> {
            Error::check_len("range flags lower vs upper", lower.len(), upper.len())?;
            launch(
                self,
                "range_flags_u32",
                &[lower, upper],
                lower.len(),
                want_match,
            )
        }

        fn count_flags(
            &self,
            counts: &DeviceBuffer<u32>,
            want_match: bool,
        ) -> Result<DeviceBuffer<u32>> {
            launch(self, "count_flags_u32", &[counts], counts.len(), want_match)
        }
    }
}
