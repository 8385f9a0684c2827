//! Duplicate statistics of a key sample, for [`crate::Algorithm::Auto`]'s plan: keys at
//! spread positions of a column, in groups of at most [`SAMPLE_GROUP_ROWS`], each group's
//! equal pairs and largest key count. On CUDA one launch (a cluster of blocks a group, each
//! counting its share of the group's distinct keys in a shared-memory hash table,
//! `kernels/sample.cu`) whose words the host reads as soon as they are posted: about what a
//! launch costs, where downloading the keys and sorting them on the host took 0.13–0.27 ms of
//! an H200 join's plan. The same launch can empty the heads of the chained hash table on the
//! sampled keys, built after the sample only where it is wanted
//! ([`SampleRuns::sample_runs_and_chained_table`]). The CPU twin gives the same counts.

use joinkit_cuda::hash::hash64;
use joinkit_cuda::{CpuBackend, Error, Key, Result};
use joinkit_hashtable::{HashTable, HashTables, TableConfig};

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

/// Most rows a sample takes: 128 groups (the host words the CUDA launch posts them into).
pub const MAX_SAMPLES: usize = 128 * SAMPLE_GROUP_ROWS;

/// A key sample's groups, and the chained table on its keys where it was built
/// ([`SampleRuns::sample_runs_and_chained_table`]).
pub type SampleAndTable<'k, B, K> = (Vec<SampleGroup>, Option<HashTable<'k, B, K>>);

/// The two row-id columns (left, right) that [`SampleRuns::sample_runs_and_chained_table`]
/// numbers `0..len` where it skips the table's build.
pub type RowIdsToNumber<'a, B> = (
    &'a mut <B as joinkit_cuda::Backend>::Buf<u32>,
    &'a mut <B as joinkit_cuda::Backend>::Buf<u32>,
);

/// Sampling a key column for its duplicates.
pub trait SampleRuns: HashTables {
    /// `samples` rows of `keys` (all of them when it is shorter), sample `j` at
    /// [`sample_row`]`(j, samples, keys.len())`, in `ceil(samples / SAMPLE_GROUP_ROWS)`
    /// groups, sample `j` in group `j mod groups`: each group's statistics. Empty for an
    /// empty column or no samples.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] past [`MAX_SAMPLES`] rows sampled; allocation and driver
    /// errors.
    fn sample_runs<K: Key>(&self, keys: &Self::Buf<K>, samples: usize) -> Result<Vec<SampleGroup>>;

    /// [`SampleRuns::sample_runs`] of `keys`, and the chained hash table on them
    /// ([`TableConfig::chained`]) that NPHJ-chained probes where the sample's equal pairs (its
    /// groups' [`SampleGroup::pairs`]) are at most `most_pairs`: `Auto`'s plan, whose choice
    /// between that join and SMJ-OM follows the pairs. Where the pairs exceed `most_pairs`,
    /// `row_ids` (if given) are numbered `0..len` instead: the row ids SMJ-OM sorts with each
    /// side's keys. On CUDA, for one group's sample, one launch samples and empties the
    /// table's heads, and the next builds the table or numbers the rows by the posted pairs
    /// (`kernels/sample.cu`): it runs while the host reads the sample and chooses, so the
    /// join chosen starts with its own work. Otherwise the sample, then the table or the
    /// numbering.
    ///
    /// # Errors
    /// As [`SampleRuns::sample_runs`] and [`HashTables::build_table`], and the numbering's
    /// driver errors.
    fn sample_runs_and_chained_table<'k, K: Key>(
        &self,
        keys: &'k Self::Buf<K>,
        samples: usize,
        most_pairs: u64,
        row_ids: Option<RowIdsToNumber<'_, Self>>,
    ) -> Result<SampleAndTable<'k, Self, K>> {
        sample_then_chained_table(self, keys, samples, most_pairs, row_ids)
    }
}

/// [`SampleRuns::sample_runs_and_chained_table`] in two steps: the sample, then the table
/// where its pairs are at most `most_pairs`, else the row ids numbered.
fn sample_then_chained_table<'k, B: SampleRuns, K: Key>(
    b: &B,
    keys: &'k B::Buf<K>,
    samples: usize,
    most_pairs: u64,
    row_ids: Option<RowIdsToNumber<'_, B>>,
) -> Result<SampleAndTable<'k, B, K>> {
    let groups = b.sample_runs(keys, samples)?;
    if groups.iter().map(|g| g.pairs).sum::<u64>() <= most_pairs {
        let table = b.build_table(keys, &TableConfig::chained())?;
        return Ok((groups, Some(table)));
    }
    if let Some((left, right)) = row_ids {
        b.iota(left, 0)?;
        b.iota(right, 0)?;
    }
    Ok((groups, None))
}

/// The row of sample `j` of `samples` over `n` rows: one row in each of `samples` equal
/// strides, at a hashed offset inside it (`samples <= n`, at most [`MAX_SAMPLES`]; the hash
/// scaled to the stride by the high word of a product). Stride `j` starts at
/// `floor(j n / samples)`, computed as `j q + floor(j r / samples)` for `n = q samples + r`,
/// as the kernel does (with no 64-bit division there).
pub fn sample_row(j: u64, samples: u64, n: u64) -> u64 {
    let start = |j: u64| j * (n / samples) + j * (n % samples) / samples;
    let (lo, hi) = (start(j), start(j + 1));
    lo + ((u128::from(hash64(j, SAMPLE_SEED)) * u128::from(hi - lo)) >> 64) as u64
}

/// Samples and groups for `samples` rows of a column of `n` rows.
///
/// # Errors
/// [`Error::InvalidArgument`] past [`MAX_SAMPLES`].
fn layout(samples: usize, n: usize) -> Result<(u64, u64)> {
    let samples = samples.min(n);
    if samples > MAX_SAMPLES {
        return Err(Error::InvalidArgument(format!(
            "a key sample of {samples} rows: at most {MAX_SAMPLES}"
        )));
    }
    let samples = samples as u64;
    Ok((samples, samples.div_ceil(SAMPLE_GROUP_ROWS as u64)))
}

impl SampleRuns for CpuBackend {
    fn sample_runs<K: Key>(&self, keys: &Vec<K>, samples: usize) -> Result<Vec<SampleGroup>> {
        let n = keys.len() as u64;
        let (samples, groups) = layout(samples, keys.len())?;
        let groups = (0..groups)
            .map(|g| {
                // The rows found first, then read in a loop of loads alone, so that the core
                // has many of their cache misses in flight at once (a column out of the cache:
                // the misses cost more than sorting the sample).
                let rows: Vec<usize> = (g..samples)
                    .step_by(groups as usize)
                    .map(|j| sample_row(j, samples, n) as usize)
                    .collect();
                let mut sample: Vec<K> = rows.iter().map(|&r| keys[r]).collect();
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
        Ok(groups)
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use joinkit_cuda::cudarc::driver::CudaFunction;
    use joinkit_cuda::cudarc::driver::sys::CUfunction_attribute;
    use joinkit_cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
    use joinkit_cuda::{Backend as _, CudaBackend, DeviceBuffer, Error, Key, Result};
    use joinkit_hashtable::TableConfig;
    use joinkit_hashtable::cuda::{chained_table_unemptied, raw_table};

    use super::{
        RowIdsToNumber, SAMPLE_GROUP_ROWS, SampleAndTable, SampleGroup, layout,
        sample_then_chained_table,
    };

    /// Threads of a group's blocks (`kSampleThreads` in kernels/sample.cu).
    const THREADS: u32 = 1024;

    /// Blocks a group counts with: the kernel's cluster width (8 where compiled for sm_90 and
    /// later, `JOINKIT_SAMPLE_CLUSTER`), 1 where it has none.
    fn cluster_of(f: &CudaFunction) -> Result<u32> {
        let width = f
            .get_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH)
            .map_err(|e| Error::Driver {
                op: "reading the key-sample kernel's cluster width",
                message: format!("{e:?}"),
            })?;
        Ok(width.max(1) as u32)
    }

    /// Dynamic shared memory of a group's block in a cluster of `cluster`: its share of the
    /// group's keys and its table's 4-byte slots, a group's keys of them and at least four
    /// times the block's share (`kSampleSlots`): 18 KiB for 4-byte keys in a cluster of 8, 20
    /// for 8-byte; 80 and 96 in one block.
    fn sample_shared_bytes<K: Key>(cluster: u32) -> u32 {
        let share = SAMPLE_GROUP_ROWS / cluster as usize;
        let slots = SAMPLE_GROUP_ROWS * (4 / cluster as usize).max(1);
        (share * size_of::<K>() + slots * size_of::<u32>()) as u32
    }

    fn launch_error(e: impl std::fmt::Debug) -> Error {
        Error::Driver {
            op: "launching the key-sample kernel",
            message: format!("{e:?}"),
        }
    }

    /// The groups' statistics from the words the kernel posted.
    fn groups_of(words: &[u64]) -> Vec<SampleGroup> {
        let group = |w: &[u64]| SampleGroup {
            rows: w[0],
            pairs: w[1],
            top: w[2],
        };
        words.chunks_exact(3).map(group).collect()
    }

    impl super::SampleRuns for CudaBackend {
        fn sample_runs<K: Key>(
            &self,
            keys: &DeviceBuffer<K>,
            samples: usize,
        ) -> Result<Vec<SampleGroup>> {
            let (samples, groups) = layout(samples, keys.len())?;
            if groups == 0 {
                return Ok(Vec::new());
            }
            let name = if K::BITS == 32 {
                "sample_runs_u32"
            } else {
                "sample_runs_u64"
            };
            let f = self.function_with_dynamic_shared(&crate::KERNELS, name)?;
            let cluster = cluster_of(&f)?;
            let config = LaunchConfig {
                grid_dim: (groups as u32 * cluster, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: sample_shared_bytes::<K>(cluster),
            };
            let words = self.posted_words(
                3 * groups as usize,
                groups as usize,
                |stream, out, ticket| {
                    let (kp, n) = (keys.device_ptr(), keys.len() as u64);
                    let mut args = stream.launch_builder(&f);
                    args.arg(&kp)
                        .arg(&n)
                        .arg(&samples)
                        .arg(&groups)
                        .arg(&out)
                        .arg(&ticket);
                    // SAFETY: the kernel reads `samples` keys at rows below n (sample_row's
                    // strides lie inside the column, samples <= n) and writes 3 words and posts a
                    // ticket per group at `out`, which posted_words gives room for (4 * groups is
                    // at most 512: layout's MAX_SAMPLES); a cluster a group, its blocks' shared
                    // memory as the kernel lays it out; the arguments follow its C signature.
                    unsafe { args.launch(config) }
                        .map(drop)
                        .map_err(launch_error)
                },
            )?;
            Ok(groups_of(&words))
        }

        fn sample_runs_and_chained_table<'k, K: Key>(
            &self,
            keys: &'k DeviceBuffer<K>,
            samples: usize,
            most_pairs: u64,
            row_ids: Option<RowIdsToNumber<'_, Self>>,
        ) -> Result<SampleAndTable<'k, Self, K>> {
            let (samples, groups) = layout(samples, keys.len())?;
            if groups != 1 {
                // No sample, or more than one group (past SAMPLE_GROUP_ROWS).
                return sample_then_chained_table(
                    self,
                    keys,
                    samples as usize,
                    most_pairs,
                    row_ids,
                );
            }
            let (sample_name, push_name) = if K::BITS == 32 {
                (
                    "sample_and_empty_heads_u32",
                    "push_chained_or_number_rows_u32",
                )
            } else {
                (
                    "sample_and_empty_heads_u64",
                    "push_chained_or_number_rows_u64",
                )
            };
            let sample_and_empty =
                self.function_with_dynamic_shared(&crate::KERNELS, sample_name)?;
            let push = self.function(&crate::KERNELS, push_name)?;
            let cluster = cluster_of(&sample_and_empty)?;
            // SAFETY: the first launch below empties the heads, and the second pushes the keys
            // unless the table is dropped unread.
            let table = unsafe { chained_table_unemptied(self, keys, &TableConfig::chained()) }?;
            let raw = raw_table(&table);
            // The sample's pairs, in device memory for the build's blocks to read.
            let pairs = self.alloc::<u64>(1)?;
            let pairs_ptr = pairs.device_ptr();
            // Enough blocks beside the sample's to empty the heads in a few passes, in whole
            // clusters; builders as many as the device holds at once (two of 1024 threads a
            // SM), each reading the sample's pairs once.
            let resident = 2 * u64::from(self.info().sm_count);
            let emptiers = (raw.capacity.div_ceil(4 * u64::from(THREADS)))
                .clamp(1, resident)
                .next_multiple_of(u64::from(cluster)) as u32;
            // The row ids to number where the build is skipped (a null pointer: none).
            let (left_ids, left_rows, right_ids, right_rows) = match &row_ids {
                Some((l, r)) => (
                    l.device_ptr(),
                    l.len() as u64,
                    r.device_ptr(),
                    r.len() as u64,
                ),
                None => (0, 0, 0, 0),
            };
            let builders = raw
                .rows
                .max(left_rows)
                .max(right_rows)
                .div_ceil(u64::from(THREADS))
                .clamp(1, resident) as u32;
            let sample_config = LaunchConfig {
                grid_dim: (cluster + emptiers, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: sample_shared_bytes::<K>(cluster),
            };
            let push_config = LaunchConfig {
                grid_dim: (builders, 1, 1),
                block_dim: (THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            let words = self.posted_words(3, 1, |stream, out, ticket| {
                let mut args = stream.launch_builder(&sample_and_empty);
                args.arg(&raw)
                    .arg(&samples)
                    .arg(&out)
                    .arg(&ticket)
                    .arg(&pairs_ptr);
                // SAFETY: `raw` holds the table's `capacity` heads and the keys; the first
                // cluster reads `samples` keys below `rows`, writes 3 words and a ticket at
                // `out` (posted_words' room) and the pairs into `pairs`' one word; the others
                // write the heads.
                unsafe { args.launch(sample_config) }.map_err(launch_error)?;
                let mut args = stream.launch_builder(&push);
                args.arg(&raw)
                    .arg(&pairs_ptr)
                    .arg(&most_pairs)
                    .arg(&left_ids)
                    .arg(&left_rows)
                    .arg(&right_ids)
                    .arg(&right_rows);
                // SAFETY: the launch above emptied the heads and wrote the pairs before this one
                // begins; this reads that word and the keys, and writes the heads and
                // next[0..rows], or the row ids below their columns' lengths. It may still run
                // after this call returns (the host reads the sample's post, not its end): like
                // the table, the id columns are used, reused or freed only in this stream's
                // order.
                unsafe { args.launch(push_config) }
                    .map(drop)
                    .map_err(launch_error)
            })?;
            let groups = groups_of(&words);
            // The device skipped the build on the same comparison.
            let built = groups[0].pairs <= most_pairs;
            Ok((groups, built.then_some(table)))
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
        // Past MAX_SAMPLES rows sampled: refused, not cut short.
        let many = vec![0u32; MAX_SAMPLES + 1];
        assert!(b.sample_runs(&many, MAX_SAMPLES).is_ok());
        assert!(matches!(
            b.sample_runs(&many, MAX_SAMPLES + 1),
            Err(Error::InvalidArgument(_))
        ));
        assert!(b.sample_runs(&vec![1u32], 0).unwrap().is_empty());
        // Rows stay inside their strides.
        for (j, s, n) in [(0, 1, 1), (4, 5, 5), (9, 10, 1 << 33), (3, 7, 100)] {
            let r = sample_row(j, s, n);
            assert!(r >= j * n / s && r < (j + 1) * n / s);
        }
    }
}
