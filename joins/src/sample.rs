//! Duplicate statistics of a key sample, for [`crate::Algorithm::Auto`]'s plan: keys at
//! spread positions of a column, in groups of at most [`SAMPLE_GROUP_ROWS`], each group's
//! equal pairs and largest key count. On CUDA one launch (a block a group counts its keys in a
//! shared-memory hash table, `kernels/sample.cu`) and one read of 24 bytes a group: about what
//! a launch costs, where downloading the keys and sorting them on the host took 0.13–0.27 ms
//! of an H200 join's plan. The CPU twin gives the same counts.

use joinkit_cuda::hash::hash64;
use joinkit_cuda::{Backend, CpuBackend, Key, Result};

/// Most sampled rows in a group (a CUDA block's table: 1024 threads × 4 keys).
pub const SAMPLE_GROUP_ROWS: usize = 4096;

/// Seed of the sample positions' hash (`kSampleSeed` in kernels/sample.cu).
const SAMPLE_SEED: u64 = 0x5a3;

/// One group of a key sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SampleGroup {
    /// Rows sampled.
    pub rows: u64,
    /// `Σ c (c - 1)` over the group's distinct keys' counts `c`.
    pub pairs: u64,
    /// The largest count.
    pub top: u64,
}

/// Sampling a key column for its duplicates.
pub trait SampleRuns: Backend {
    /// `samples` rows of `keys` (all of them when it is shorter), sample `j` at
    /// [`sample_row`]`(j, samples, keys.len())`, in `ceil(samples / SAMPLE_GROUP_ROWS)`
    /// groups, sample `j` in group `j mod groups`: each group's statistics. Empty for an
    /// empty column or no samples.
    ///
    /// # Errors
    /// Allocation and driver errors.
    fn sample_runs<K: Key>(&self, keys: &Self::Buf<K>, samples: usize) -> Result<Vec<SampleGroup>> {
        self.sample_runs_while(keys, samples, || Ok(()))
            .map(|(groups, ())| groups)
    }

    /// [`SampleRuns::sample_runs`], with `meanwhile` run once the sample is queued: on CUDA
    /// what it queues runs on the device beside the sample (whose one block a group leaves
    /// the other SMs idle) while the host waits for the sample's statistics alone
    /// (`CudaBackend::download_beside`).
    ///
    /// # Errors
    /// Allocation and driver errors, and `meanwhile`'s.
    fn sample_runs_while<K: Key, R>(
        &self,
        keys: &Self::Buf<K>,
        samples: usize,
        meanwhile: impl FnOnce() -> Result<R>,
    ) -> Result<(Vec<SampleGroup>, R)>;
}

/// The row of sample `j` of `samples` over `n` rows: one row in each of `samples` equal
/// strides, at a hashed offset inside it (`samples <= n`; the hash scaled to the stride by the
/// high word of a product, which the kernel computes without a division).
pub fn sample_row(j: u64, samples: u64, n: u64) -> u64 {
    let (lo, hi) = (j * n / samples, (j + 1) * n / samples);
    lo + ((u128::from(hash64(j, SAMPLE_SEED)) * u128::from(hi - lo)) >> 64) as u64
}

/// Samples and groups for `samples` rows of a column of `n` rows.
fn layout(samples: usize, n: usize) -> (u64, u64) {
    let samples = samples.min(n) as u64;
    (samples, samples.div_ceil(SAMPLE_GROUP_ROWS as u64))
}

impl SampleRuns for CpuBackend {
    fn sample_runs_while<K: Key, R>(
        &self,
        keys: &Vec<K>,
        samples: usize,
        meanwhile: impl FnOnce() -> Result<R>,
    ) -> Result<(Vec<SampleGroup>, R)> {
        let n = keys.len() as u64;
        let (samples, groups) = layout(samples, keys.len());
        let groups = (0..groups)
            .map(|g| {
                let mut sample: Vec<K> = (g..samples)
                    .step_by(groups as usize)
                    .map(|j| keys[sample_row(j, samples, n) as usize])
                    .collect();
                sample.sort_unstable();
                let counts = sample.chunk_by(|a, b| a == b).map(|r| r.len() as u64);
                let (pairs, top) = counts.fold((0, 0), |(p, t), c| (p + c * (c - 1), t.max(c)));
                SampleGroup {
                    rows: sample.len() as u64,
                    pairs,
                    top,
                }
            })
            .collect();
        Ok((groups, meanwhile()?))
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::sync::Arc;

    use joinkit_cuda::cudarc::driver::sys::CUdeviceptr;
    use joinkit_cuda::cudarc::driver::{CudaStream, LaunchConfig, PushKernelArg};
    use joinkit_cuda::{CudaBackend, DeviceBuffer, Error, Key, Result};

    use super::{SAMPLE_GROUP_ROWS, SampleGroup, layout};

    /// Threads of a group's block (`kSampleThreads` in kernels/sample.cu).
    const THREADS: u32 = 1024;

    /// Slots of a group's table (`kSampleSlots`): twice its keys.
    const SLOTS: usize = 2 * SAMPLE_GROUP_ROWS;

    /// Dynamic shared memory of a group's block: its keys and its table's 4-byte slots (48 KiB
    /// for 4-byte keys, 64 for 8-byte; past the 48 KiB a launch gets without asking).
    fn sample_shared_bytes<K: Key>() -> usize {
        SAMPLE_GROUP_ROWS * size_of::<K>() + SLOTS * size_of::<u32>()
    }

    impl super::SampleRuns for CudaBackend {
        fn sample_runs_while<K: Key, R>(
            &self,
            keys: &DeviceBuffer<K>,
            samples: usize,
            meanwhile: impl FnOnce() -> Result<R>,
        ) -> Result<(Vec<SampleGroup>, R)> {
            let (samples, groups) = layout(samples, keys.len());
            if groups == 0 {
                return Ok((Vec::new(), meanwhile()?));
            }
            let name = if K::BITS == 32 {
                "sample_runs_u32"
            } else {
                "sample_runs_u64"
            };
            let f = self.function_with_dynamic_shared(&crate::KERNELS, name)?;
            let smem = sample_shared_bytes::<K>();
            let launch = |stream: &Arc<CudaStream>, op: CUdeviceptr| {
                let (kp, n) = (keys.device_ptr(), keys.len() as u64);
                let mut args = stream.launch_builder(&f);
                args.arg(&kp).arg(&n).arg(&samples).arg(&groups).arg(&op);
                let config = LaunchConfig {
                    grid_dim: (groups as u32, 1, 1),
                    block_dim: (THREADS, 1, 1),
                    shared_mem_bytes: smem as u32,
                };
                // SAFETY: the kernel reads `samples` keys at rows below n (sample_row's
                // strides lie inside the column, samples <= n) and writes 3 words per group at
                // `op`, which download_beside gives room for 3 * groups; the arguments follow
                // its C signature.
                unsafe { args.launch(config) }
                    .map(drop)
                    .map_err(|e| Error::Driver {
                        op: "launching the key-sample kernel",
                        message: format!("{e:?}"),
                    })
            };
            // One block a group: beside the work queued meanwhile, not before it.
            let (words, r) = self.download_beside(3 * groups as usize, launch, meanwhile)?;
            let groups = words.chunks_exact(3).map(|w| SampleGroup {
                rows: w[0],
                pairs: w[1],
                top: w[2],
            });
            Ok((groups.collect(), r))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_count_pairs_and_the_top_key() {
        let b = CpuBackend::new();
        // Every row sampled: 3 keys of 4, 2 and 1 rows.
        let g = b.sample_runs(&vec![7u32, 1, 7, 7, 2, 1, 7], 100).unwrap();
        assert_eq!(
            g,
            [SampleGroup {
                rows: 7,
                pairs: 12 + 2,
                top: 4
            }]
        );
        // 10 000 rows in three groups of at most 4096.
        let keys: Vec<u64> = (0..100_000u64).map(|i| i % 50).collect();
        let g = b.sample_runs(&keys, 10_000).unwrap();
        assert_eq!(g.len(), 3);
        assert_eq!(g.iter().map(|g| g.rows).sum::<u64>(), 10_000);
        assert!(g.iter().all(|g| g.top >= g.rows / 50));
        assert!(b.sample_runs(&Vec::<u32>::new(), 10).unwrap().is_empty());
        assert!(b.sample_runs(&vec![1u32], 0).unwrap().is_empty());
        // Rows stay inside their strides.
        for (j, s, n) in [(0, 1, 1), (4, 5, 5), (9, 10, 1 << 33), (3, 7, 100)] {
            let r = sample_row(j, s, n);
            assert!(r >= j * n / s && r < (j + 1) * n / s);
        }
    }
}
