//! Random-access floors: the memory traffic a hash-table build or probe cannot avoid, measured
//! on its own. The write floor makes one random 8-byte store per key, the read floor one random
//! 8-byte load per key (plus a 4-byte result), at the slot a table of `table.len()` words would
//! try first. Benchmarks report build and probe rates as a fraction of these.

use std::sync::atomic::Ordering::Relaxed;

use joinkit_cuda::{Backend, CpuBackend, Error, Key, PARALLEL_THRESHOLD, Result};
use rayon::prelude::*;

use crate::cpu::{atomic_u64, hash_key, reduce};

/// Random-access floor kernels, one per backend.
pub trait RandomAccessFloors: Backend {
    /// `table[slot(key_i)] = key_i ^ (i << 32)` for every key: one random 8-byte write each
    /// (unordered, racing writes to one word keep any one of them).
    ///
    /// # Errors
    /// [`Error::EmptyInput`] for an empty table when there are keys; [`Error::SizeOverflow`]
    /// for a table of more than 2^32 words; driver errors.
    fn floor_random_write<K: Key>(
        &self,
        keys: &Self::Buf<K>,
        table: &mut Self::Buf<u64>,
        seed: u32,
    ) -> Result<()>;

    /// `out[i] = low 32 bits of table[slot(key_i)]`: one random 8-byte read each.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `out` and `keys` differ in length; [`Error::EmptyInput`]
    /// for an empty table when there are keys; [`Error::SizeOverflow`] for a table of more
    /// than 2^32 words; driver errors.
    fn floor_random_read<K: Key>(
        &self,
        keys: &Self::Buf<K>,
        table: &Self::Buf<u64>,
        out: &mut Self::Buf<u32>,
        seed: u32,
    ) -> Result<()>;
}

fn check_table(keys: usize, table: usize) -> Result<()> {
    if keys > 0 && table == 0 {
        Err(Error::EmptyInput("random-access floor table"))
    } else if table as u64 > 1 << 32 {
        // The 32-bit hash is reduced onto the table (Lemire): at most 2^32 words.
        Err(Error::SizeOverflow(
            "random-access floor tables hold at most 2^32 words",
        ))
    } else {
        Ok(())
    }
}

impl RandomAccessFloors for CpuBackend {
    fn floor_random_write<K: Key>(
        &self,
        keys: &Vec<K>,
        table: &mut Vec<u64>,
        seed: u32,
    ) -> Result<()> {
        check_table(keys.len(), table.len())?;
        let m = table.len() as u64;
        let t = atomic_u64(table);
        keys.par_iter()
            .with_min_len(PARALLEL_THRESHOLD)
            .enumerate()
            .for_each(|(i, &k)| {
                let slot = reduce(hash_key(k, seed), m) as usize;
                t[slot].store(k.to_u64() ^ ((i as u64) << 32), Relaxed);
            });
        Ok(())
    }

    fn floor_random_read<K: Key>(
        &self,
        keys: &Vec<K>,
        table: &Vec<u64>,
        out: &mut Vec<u32>,
        seed: u32,
    ) -> Result<()> {
        Error::check_len("floor output vs keys", out.len(), keys.len())?;
        check_table(keys.len(), table.len())?;
        let m = table.len() as u64;
        out.par_iter_mut()
            .with_min_len(PARALLEL_THRESHOLD)
            .zip(keys.par_iter())
            .for_each(|(o, &k)| *o = table[reduce(hash_key(k, seed), m) as usize] as u32);
        Ok(())
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use joinkit_cuda::cudarc::driver::PushKernelArg;
    use joinkit_cuda::{CudaBackend, Error, Key, Result};

    use super::check_table;

    impl super::RandomAccessFloors for CudaBackend {
        fn floor_random_write<K: Key>(
            &self,
            keys: &Self::Buf<K>,
            table: &mut Self::Buf<u64>,
            seed: u32,
        ) -> Result<()> {
            check_table(keys.len(), table.len())?;
            if keys.is_empty() {
                return Ok(());
            }
            let name = if K::BITS == 32 {
                "ht_floor_write_u32"
            } else {
                "ht_floor_write_u64"
            };
            let f = self.function(&crate::cuda::KERNELS, name)?;
            let (kp, n, tp, m) = (
                keys.device_ptr(),
                keys.len() as u64,
                table.device_ptr(),
                table.len() as u64,
            );
            let mut b = self.stream().launch_builder(&f);
            b.arg(&kp).arg(&n).arg(&tp).arg(&m).arg(&seed);
            // SAFETY: the kernel reads n keys and writes slots below m of the m-word table.
            unsafe { b.launch(self.grid_stride_config(keys.len(), 256)) }
                .map(|_| ())
                .map_err(joinkit_cuda::driver("launching a floor kernel"))
        }

        fn floor_random_read<K: Key>(
            &self,
            keys: &Self::Buf<K>,
            table: &Self::Buf<u64>,
            out: &mut Self::Buf<u32>,
            seed: u32,
        ) -> Result<()> {
            Error::check_len("floor output vs keys", out.len(), keys.len())?;
            check_table(keys.len(), table.len())?;
            if keys.is_empty() {
                return Ok(());
            }
            let name = if K::BITS == 32 {
                "ht_floor_read_u32"
            } else {
                "ht_floor_read_u64"
            };
            let f = self.function(&crate::cuda::KERNELS, name)?;
            let (kp, n, tp, m, op) = (
                keys.device_ptr(),
                keys.len() as u64,
                table.device_ptr(),
                table.len() as u64,
                out.device_ptr(),
            );
            let mut b = self.stream().launch_builder(&f);
            b.arg(&kp).arg(&n).arg(&tp).arg(&m).arg(&seed).arg(&op);
            // SAFETY: the kernel reads n keys and slots below m, and writes n results.
            unsafe { b.launch(self.grid_stride_config(keys.len(), 256)) }
                .map(|_| ())
                .map_err(joinkit_cuda::driver("launching a floor kernel"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_past_the_hash_range_are_refused() {
        assert!(check_table(1, 1 << 32).is_ok());
        assert!(matches!(
            check_table(1, (1 << 32) + 1),
            Err(Error::SizeOverflow(_))
        ));
        assert!(matches!(check_table(1, 0), Err(Error::EmptyInput(_))));
        assert!(check_table(0, 0).is_ok());
    }
}
