//! `joinkit-bench partition`: radix (one 8-bit pass), hash (fan-out 256 and 1024) and
//! bucket-chain partitioning over a sweep of sizes, key/payload widths and key distributions,
//! each reported as elements/s, GB/s and the fraction of the copy bandwidth measured at start.
//!
//! Bytes are counted as the kernels move them: a radix or hash partition reads the keys once
//! for the histogram, then reads keys and payloads and writes them once (`K + 2 (K + V)` per
//! row); a bucket-chain partition reads and writes once (`2 (K + V)`). On CUDA the outputs and
//! scratch are allocated once per case and the view-level entry points are timed, so the
//! figures are the kernels' (histogram, scan, scatter), not the allocator's.

use clap::Args;
use joinkit_cuda::{
    Backend, CpuBackend, Device, DeviceKind, Error, Key, Result, hash, with_backend,
};
use joinkit_partition::{
    BucketChainPartition, Column, HashPartition, Partitioner, RadixPartition, RowIds,
};

use crate::measure::{Ctx, Runs, Timing, host_vec, parse_size, sizes_or, time};
use crate::plot::PlotSpec;
use crate::report::Row;

/// Options of `partition`.
#[derive(Args, Debug)]
pub(crate) struct PartitionArgs {
    /// Sizes (rows), comma separated, as 2^20 or 1048576 (default 2^16, 2^18, ..., 2^28 on a
    /// GPU: from cache-resident to 2^28; 2^12, 2^14, ..., 2^20 on a CPU).
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    sizes: Vec<usize>,
    /// Key x payload widths in bytes, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "4x4,8x8", value_parser = widths)]
    widths: Vec<(usize, usize)>,
    /// Operations, comma separated: radix8, hashN (hash partition at fan-out N, 1 to 1024:
    /// power-of-two fan-outs from 512 run as radix partitions of the hashed keys on CUDA),
    /// bucket.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "radix8,hash256,hash1024,bucket",
        value_parser = Op::parse
    )]
    ops: Vec<Op>,
    /// Key distributions, comma separated: uniform, zipf (hash-based power law).
    #[arg(long, value_delimiter = ',', default_value = "uniform,zipf", value_parser = zipf)]
    dists: Vec<bool>,
    /// Elements (u32) for the copy-bandwidth reference; default 2^28 on a GPU, 2^24 on a CPU.
    #[arg(long, value_parser = parse_size)]
    copy_elements: Option<usize>,
}

/// The plot of partition: G rows/s against the size, a line per operation, widths and keys.
pub(crate) const PLOT: PlotSpec = PlotSpec {
    table: "partition",
    x: "rows",
    x_label: "rows",
    y: &["G rows/s"],
    y_label: "G rows/s",
    series: &["op", "KxV", "keys"],
};

/// One partition operation of the sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// Stable radix partition on bits 0..8.
    Radix8,
    /// Hash partition at this fan-out.
    Hash(usize),
    /// Bucket-chain partition, hash fan-out 256, buckets of 4096 rows.
    Bucket,
}

const BUCKET_FANOUT: usize = 256;
const BUCKET_CAPACITY: usize = 4096;

impl Op {
    /// An operation by name (a clap value parser); a hash fan-out as the library checks it.
    fn parse(s: &str) -> Result<Op> {
        let s = s.trim();
        match s {
            "radix8" => Ok(Op::Radix8),
            "bucket" => Ok(Op::Bucket),
            _ => match s.strip_prefix("hash").map(str::parse::<usize>) {
                Some(Ok(fanout)) => {
                    Partitioner::Hash { fanout, seed: 0 }.fanout::<u32>()?;
                    Ok(Op::Hash(fanout))
                }
                _ => Err(Error::InvalidArgument(format!(
                    "unknown operation {s:?}: radix8, hashN (N the fan-out, 1 to 1024), bucket"
                ))),
            },
        }
    }

    fn name(self) -> String {
        match self {
            Op::Radix8 => "radix8".into(),
            Op::Hash(f) => format!("hash{f}"),
            Op::Bucket => format!("bucket{BUCKET_FANOUT}"),
        }
    }

    /// Bytes read plus written per row for keys of `k` and payloads of `v` bytes.
    fn bytes_per_row(self, k: usize, v: usize) -> usize {
        match self {
            Op::Radix8 | Op::Hash(_) => k + 2 * (k + v),
            Op::Bucket => 2 * (k + v),
        }
    }
}

/// Key x payload widths by name (a clap value parser).
fn widths(s: &str) -> Result<(usize, usize)> {
    match s.trim() {
        "4x4" => Ok((4, 4)),
        "4x8" => Ok((4, 8)),
        "8x4" => Ok((8, 4)),
        "8x8" => Ok((8, 8)),
        w => Err(Error::InvalidArgument(format!(
            "widths {w:?}: KxV with K, V in 4, 8"
        ))),
    }
}

/// Whether a key distribution by name is the power law (a clap value parser).
fn zipf(s: &str) -> Result<bool> {
    match s.trim() {
        "uniform" => Ok(false),
        "zipf" => Ok(true),
        d => Err(Error::InvalidArgument(format!(
            "distribution {d:?}: uniform or zipf"
        ))),
    }
}

pub(crate) fn run(device: &Device, args: &PartitionArgs, ctx: &mut Ctx) -> Result<()> {
    with_backend!(device, b => sweep(b, args, ctx))
}

fn sweep<B: Bench>(b: &B, args: &PartitionArgs, ctx: &mut Ctx) -> Result<()> {
    let gpu = matches!(b.kind(), DeviceKind::Cuda(_));
    let sizes = sizes_or(
        &args.sizes,
        gpu,
        &[16, 18, 20, 22, 24, 26, 28],
        &[12, 14, 16, 18, 20],
    );
    let copy_n = args
        .copy_elements
        .unwrap_or(if gpu { 1 << 28 } else { 1 << 24 });
    if copy_n == 0 {
        return Err(Error::EmptyInput("partition needs a copy size"));
    }
    let runs = ctx.runs(10);
    let (copy_gbps, t) = ctx.copy_bandwidth(b, copy_n, runs.repeat)?;
    ctx.report.note(format!(
        "copy {copy_n} x u32: median {:.3} ms, {copy_gbps:.1} GB/s (read + write): the 100% of \"of copy\"",
        t.median_ms
    ));
    for &(kw, vw) in &args.widths {
        for &zipf in &args.dists {
            for &n in &sizes {
                let case = Case {
                    n,
                    vw,
                    zipf,
                    runs,
                    copy_gbps,
                };
                if kw == 4 {
                    case.run::<B, u32>(b, &args.ops, ctx)?;
                } else {
                    case.run::<B, u64>(b, &args.ops, ctx)?;
                }
            }
        }
    }
    Ok(())
}

/// Keys: uniform random bits, or a hash-based power law (`low bits >> (hash % width)`: half
/// the keys below 2^(W/2), a few values very frequent), generated on the host for the latter.
fn make_keys<B: Backend, K: Key>(b: &B, n: usize, zipf: bool) -> Result<B::Buf<K>> {
    if !zipf {
        let mut k = b.alloc::<K>(n)?;
        b.fill_random(&mut k, 42, u64::MAX)?;
        return Ok(k);
    }
    // Host columns through the backend's fallible allocation: `vec!` aborted on huge sizes.
    let cpu = CpuBackend::new();
    let mut h = cpu.alloc::<u64>(n)?;
    cpu.fill_random(&mut h, 42, u64::MAX)?;
    let host: Vec<K> = host_vec(n, |i| {
        let x = h[i as usize];
        let shift = hash::fmix64(x) % u64::from(K::BITS);
        K::from_u64(K::from_u64(x).to_u64() >> shift)
    })?;
    b.upload(&host)
}

/// One size, payload width and key distribution, measured for every operation.
struct Case {
    n: usize,
    vw: usize,
    zipf: bool,
    runs: Runs,
    copy_gbps: f64,
}

impl Case {
    fn run<B: Bench, K: Key>(&self, b: &B, ops: &[Op], ctx: &mut Ctx) -> Result<()> {
        let Case {
            n,
            vw,
            zipf,
            runs,
            copy_gbps,
        } = *self;
        let keys = make_keys::<B, K>(b, n, zipf)?;
        let vals = if vw == 4 {
            let mut v = b.alloc::<u32>(n)?;
            b.iota(&mut v, 0)?;
            Column::U32(v)
        } else {
            let mut v = b.alloc::<u64>(n)?;
            b.iota(&mut v, 0)?;
            Column::U64(v)
        };
        for &op in ops {
            let t = b.time_partition(op, &keys, &vals, runs)?;
            let secs = t.median_ms * 1e-3;
            let gbps = (op.bytes_per_row(size_of::<K>(), vw) * n) as f64 / secs / 1e9;
            ctx.report.row(
                Row::new("partition")
                    .with("op", op.name())
                    .with("KxV", format!("{}x{vw}", size_of::<K>()))
                    .with("keys", if zipf { "zipf" } else { "uniform" })
                    .with("rows", n)
                    .with("median ms", t.median_ms)
                    .with("G rows/s", n as f64 / secs / 1e9)
                    .with("GB/s", gbps)
                    .with("of copy %", 100.0 * gbps / copy_gbps)
                    .detail("copy GB/s", copy_gbps),
            );
        }
        Ok(())
    }
}

/// How each backend times an operation: the CPU through the backend-level traits; CUDA through
/// the view-level entry points on outputs and scratch allocated once.
trait Bench: RadixPartition + HashPartition + BucketChainPartition {
    fn time_partition<K: Key>(
        &self,
        op: Op,
        keys: &Self::Buf<K>,
        vals: &Column<Self>,
        runs: Runs,
    ) -> Result<Timing>;
}

impl Bench for CpuBackend {
    fn time_partition<K: Key>(
        &self,
        op: Op,
        keys: &Vec<K>,
        vals: &Column<Self>,
        runs: Runs,
    ) -> Result<Timing> {
        let cols = std::slice::from_ref(vals);
        let by = Partitioner::Hash {
            fanout: BUCKET_FANOUT,
            seed: 1,
        };
        time(self, runs, || {
            match op {
                Op::Radix8 => drop(self.radix_partition(keys, cols, 0..8, RowIds::None)?),
                Op::Hash(f) => drop(self.hash_partition(keys, cols, f, 1, RowIds::None)?),
                Op::Bucket => drop(self.bucket_chain_partition(
                    keys,
                    cols,
                    &by,
                    BUCKET_CAPACITY,
                    RowIds::None,
                )?),
            }
            Ok(())
        })
    }
}

#[cfg(feature = "cuda")]
impl Bench for joinkit_cuda::CudaBackend {
    fn time_partition<K: Key>(
        &self,
        op: Op,
        keys: &Self::Buf<K>,
        vals: &Column<Self>,
        runs: Runs,
    ) -> Result<Timing> {
        use joinkit_partition::bucket_pool_buckets;
        use joinkit_partition::cuda::{self as pc, ChainsOut, ColumnIn, ColumnOut};
        let n = keys.len();
        let mut scratch = joinkit_cuda::Scratch::new();
        let by = Partitioner::Hash {
            fanout: BUCKET_FANOUT,
            seed: 1,
        };
        let like = |len: usize| -> Result<Column<Self>> {
            Ok(joinkit_cuda::map_column!(vals, _v, T => self.alloc::<T>(len)?))
        };
        match op {
            Op::Radix8 | Op::Hash(_) => {
                let fanout = if let Op::Hash(f) = op { f } else { 256 };
                let mut keys_out = self.alloc::<K>(n)?;
                let mut vals_out = like(n)?;
                let mut offsets = self.alloc::<u64>(fanout + 1)?;
                time(self, runs, || {
                    let pairs = [(
                        ColumnIn::from_column(vals),
                        ColumnOut::from_column(&mut vals_out),
                    )];
                    let (ki, mut ko, mut off) =
                        (keys.view(), keys_out.view_mut(), offsets.view_mut());
                    match op {
                        Op::Hash(f) => pc::hash_partition(
                            self,
                            &ki,
                            &mut ko,
                            &pairs,
                            None,
                            &mut off,
                            f,
                            1,
                            &mut scratch,
                        ),
                        _ => pc::radix_partition(
                            self,
                            &ki,
                            &mut ko,
                            &pairs,
                            None,
                            &mut off,
                            0..8,
                            &mut scratch,
                        ),
                    }
                })
            }
            Op::Bucket => {
                let pool = bucket_pool_buckets(n, BUCKET_FANOUT, BUCKET_CAPACITY)?;
                let mut pool_keys = self.alloc::<K>(pool * BUCKET_CAPACITY)?;
                let mut pool_vals = like(pool * BUCKET_CAPACITY)?;
                let mut next = self.alloc::<u32>(pool)?;
                let mut heads = self.alloc::<u32>(BUCKET_FANOUT)?;
                let mut counts = self.alloc::<u64>(BUCKET_FANOUT)?;
                let mut used = self.alloc::<u32>(1)?;
                time(self, runs, || {
                    let pairs = [(
                        ColumnIn::from_column(vals),
                        ColumnOut::from_column(&mut pool_vals),
                    )];
                    let out = ChainsOut {
                        keys: pool_keys.view_mut(),
                        next: next.view_mut(),
                        heads: heads.view_mut(),
                        counts: counts.view_mut(),
                        used: used.view_mut(),
                    };
                    pc::bucket_chain_partition(
                        self,
                        &keys.view(),
                        &pairs,
                        None,
                        out,
                        &by,
                        BUCKET_CAPACITY,
                        &mut scratch,
                    )
                })
            }
        }
    }
}
