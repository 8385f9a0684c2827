//! `joinkit-bench join --inputs host|generated`: the streamed join. R (the build side) is
//! uploaded and its table built on the device; S (the probe side) streams from host memory
//! in chunks (`host`: S generated into host memory first, read as a user's table would be;
//! `generated`: each chunk written straight into the join's staging memory, so S may be many
//! times the host's memory too), and each chunk's output comes back to host memory. The row
//! compares S's bytes per second of streaming with the host-to-device bandwidth measured in
//! the same run (the floor of any streamed join), and `--timeline` draws when each chunk was
//! filled, copied, probed, copied back and handed on.

use std::path::Path;

use joinkit::{
    Algorithm, ColumnType, HostColumnMut, HostTableSource, JoinKind, JoinOptions, Lane,
    ProbeSource, StreamOptions, StreamStats, StreamedJoin, Table, join_streamed,
};
use joinkit_cuda::hash::hash64;
use joinkit_cuda::{Backend, CpuBackend, DeviceKind, Key};
use joinkit_datagen as datagen;
use rayon::prelude::*;

use crate::error::{BenchError, Result};
use crate::measure::{Ctx, Runs, median_run};
use crate::plot::Bar;
use crate::report::Row;

/// Where S comes from in a streamed join.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Inputs {
    /// Both sides in device memory: the in-memory joins.
    Device,
    /// S in host memory, streamed to the device in chunks.
    Host,
    /// S in page-locked host memory (`--pinned-rows` of it, cycled to |S| rows): chunks cross
    /// the link straight from it, no staging copy (GPU only).
    Pinned,
    /// S written chunk by chunk into the join's pinned staging memory by a generator (any size).
    Generated,
}

/// What a streamed join benchmark runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamBench<'a> {
    pub(crate) inputs: Inputs,
    pub(crate) r: usize,
    pub(crate) s: u64,
    pub(crate) payloads: usize,
    pub(crate) kind: JoinKind,
    pub(crate) seed: u64,
    pub(crate) chunk_rows: usize,
    pub(crate) buffers: usize,
    pub(crate) timeline: Option<&'a Path>,
    /// Rows of S held in pinned memory for `Inputs::Pinned` (cycled to `s` rows).
    pub(crate) pinned_rows: Option<usize>,
}

/// A backend whose link to the host a streamed join crosses.
pub(crate) trait HostLink: StreamedJoin {
    /// Host-to-device bandwidth from pinned memory in GB/s (`None` on the CPU: no link).
    fn h2d_gbps(&self) -> joinkit_cuda::Result<Option<f64>>;

    /// `left` pinned once, then streamed `rows` rows (cycling it) as `runs` says: the
    /// statistics of the median run.
    fn pinned_runs<K: Key>(
        &self,
        right: &Table<Self, K>,
        left: &Table<CpuBackend, K>,
        rows: u64,
        opts_runs: (&StreamOptions, Runs),
    ) -> Result<StreamStats>;
}

impl HostLink for CpuBackend {
    fn h2d_gbps(&self) -> joinkit_cuda::Result<Option<f64>> {
        Ok(None)
    }

    fn pinned_runs<K: Key>(
        &self,
        _: &Table<Self, K>,
        _: &Table<CpuBackend, K>,
        _: u64,
        _: (&StreamOptions, Runs),
    ) -> Result<StreamStats> {
        Err(BenchError::Usage(
            "--inputs pinned needs a GPU (page-locked memory is a CUDA driver's)".into(),
        ))
    }
}

#[cfg(feature = "cuda")]
impl HostLink for joinkit_cuda::CudaBackend {
    fn h2d_gbps(&self) -> joinkit_cuda::Result<Option<f64>> {
        crate::measure::h2d_bandwidth(self).map(Some)
    }

    fn pinned_runs<K: Key>(
        &self,
        right: &Table<Self, K>,
        left: &Table<CpuBackend, K>,
        rows: u64,
        (opts, runs): (&StreamOptions, Runs),
    ) -> Result<StreamStats> {
        let pinned = joinkit::PinnedTable::pin(self, left)?;
        let (pool, chunk) = (pinned.len() as u64, opts.chunk_rows as u64);
        let once = || {
            // Chunks of the pinned rows, cycled until `rows` rows have gone.
            let mut ranges = (0..rows.div_ceil(chunk)).map(|c| {
                let start = (c * chunk) % pool;
                let len = chunk.min(pool - start).min(rows - c * chunk);
                start as usize..(start + len) as usize
            });
            let st = joinkit::join_streamed_pinned(
                self,
                right,
                &pinned,
                &mut ranges,
                opts,
                &mut |_| Ok(()),
            )?;
            Ok(((), st))
        };
        Ok(median_run(runs, once, StreamStats::total_ms)?.1)
    }
}

/// S's rows written chunk by chunk: row i's key uniform over R's keys `0..r` (every row
/// matches; `foreign_keys` at match ratio 1 draws alike), payload c a hash of the key, as the
/// in-memory workload's payloads are.
struct GeneratedProbe {
    rows: u64,
    next: u64,
    r: u64,
    payloads: usize,
    seed: u64,
}

impl<K: Key> ProbeSource<K> for GeneratedProbe {
    fn payload_types(&self) -> Vec<ColumnType> {
        let t = if K::BITS == 32 {
            ColumnType::U32
        } else {
            ColumnType::U64
        };
        vec![t; self.payloads]
    }

    fn fill(
        &mut self,
        keys: &mut [K],
        payloads: &mut [HostColumnMut<'_>],
    ) -> joinkit_cuda::Result<usize> {
        let n = (keys.len() as u64).min(self.rows - self.next) as usize;
        let (first, r, seed) = (self.next, self.r, self.seed);
        // Multiply-shift maps a 64-bit hash onto 0..r without a division.
        let key_of =
            |row: u64| K::from_u64(((u128::from(hash64(row, seed)) * u128::from(r)) >> 64) as u64);
        keys[..n]
            .par_chunks_mut(1 << 16)
            .enumerate()
            .for_each(|(c, part)| {
                let base = first + (c << 16) as u64;
                for (i, k) in part.iter_mut().enumerate() {
                    *k = key_of(base + i as u64);
                }
            });
        for (c, room) in payloads.iter_mut().enumerate() {
            let salt = 200 + c as u64;
            let keys = &keys[..n];
            match room {
                HostColumnMut::U32(p) => datagen::payload_into(&mut p[..n], keys, salt),
                HostColumnMut::U64(p) => datagen::payload_into(&mut p[..n], keys, salt),
                _ => {
                    return Err(joinkit_cuda::Error::Corrupt(
                        "payload room of another type".into(),
                    ));
                }
            }
        }
        self.next += n as u64;
        Ok(n)
    }
}

/// Runs the streamed join of `bench` with `algorithm` and reports it.
pub(crate) fn run<B: HostLink, K: Key>(
    b: &B,
    bench: &StreamBench<'_>,
    algorithms: &[Algorithm],
    ctx: &mut Ctx,
) -> Result<()> {
    let gpu = matches!(b.kind(), DeviceKind::Cuda(_));
    let link = b.h2d_gbps()?;
    let r_keys = datagen::unique_keys::<K>(bench.r, bench.seed)?;
    let right = crate::join::table(b, &r_keys, bench.payloads, 100)?;
    drop(r_keys);
    let host_left = match bench.inputs {
        Inputs::Host | Inputs::Pinned => {
            let rows = match bench.inputs {
                Inputs::Pinned => bench.pinned_rows.map_or(bench.s, |p| bench.s.min(p as u64)),
                _ => bench.s,
            };
            let rows = usize::try_from(rows)
                .map_err(|_| BenchError::Usage("--s too large for host memory".into()))?;
            let keys = datagen::foreign_keys::<K>(bench.r, rows, 1.0, bench.seed.wrapping_add(1))?;
            Some(crate::join::table(
                &CpuBackend::new(),
                &keys,
                bench.payloads,
                200,
            )?)
        }
        _ => None,
    };
    ctx.report.note(
        "link %: S's bytes per second of streaming over the pinned host-to-device bandwidth \
         measured at start (the floor of a streamed join)",
    );
    let runs = ctx.runs(10);
    for &algorithm in algorithms {
        let join = JoinOptions::new(bench.kind)
            .algorithm(algorithm)
            .right_unique(true);
        let opts = StreamOptions::new(join)
            .chunk_rows(bench.chunk_rows)
            .buffers(bench.buffers)
            .timeline(bench.timeline.is_some());
        let once = || -> joinkit_cuda::Result<((), StreamStats)> {
            let mut source: Box<dyn ProbeSource<K>> = match &host_left {
                Some(t) => Box::new(HostTableSource::new(t)?),
                None => Box::new(GeneratedProbe {
                    rows: bench.s,
                    next: 0,
                    r: bench.r as u64,
                    payloads: bench.payloads,
                    seed: bench.seed.wrapping_add(1),
                }),
            };
            let st = join_streamed(b, &right, source.as_mut(), &opts, &mut |_| Ok(()))?;
            Ok(((), st))
        };
        let st = match (&host_left, bench.inputs) {
            (Some(left), Inputs::Pinned) => b.pinned_runs(&right, left, bench.s, (&opts, runs))?,
            _ => median_run(runs, once, StreamStats::total_ms)?.1,
        };
        if let Some(path) = bench.timeline {
            write_timeline(path, &st, &b.describe())?;
        }
        ctx.report
            .row(row(b, bench, algorithm, &st, link, (gpu, K::BITS)));
    }
    Ok(())
}

fn row<B: Backend>(
    b: &B,
    bench: &StreamBench<'_>,
    requested: Algorithm,
    st: &StreamStats,
    link: Option<f64>,
    (gpu, key_bits): (bool, u32),
) -> Row {
    let total_ms = st.total_ms();
    let device_bytes = match b.kind() {
        DeviceKind::Cuda(_) => describe_memory(b),
        DeviceKind::Cpu => None,
    };
    Row::new("join")
        .with("r", bench.r)
        .with("s", st.left_rows)
        .with("inputs", format!("{:?}", bench.inputs).to_lowercase())
        .with("requested", requested.name())
        .with("algorithm", st.build.algorithm.name())
        .with("kind", crate::join::kind_name(bench.kind))
        .with("total ms", total_ms)
        .with("build ms", st.build.total_ms())
        .with("setup ms", st.setup_ms)
        .with("stream ms", st.wall_ms)
        .with("probe ms", st.probe_ms)
        .with("chunks", st.chunks)
        .with("S GB", st.bytes_in as f64 / 1e9)
        .with("out GB", st.bytes_out as f64 / 1e9)
        .with_opt("S GB/s", gpu.then(|| st.left_gbps()))
        .with_opt("link GB/s", link)
        .with_opt("link %", link.map(|l| 100.0 * st.left_gbps() / l))
        .with_opt(
            "S / GPU memory",
            device_bytes.map(|m| st.bytes_in as f64 / m),
        )
        .with(
            "M tuples/s",
            (bench.r as f64 + st.left_rows as f64) / (total_ms * 1e-3) / 1e6,
        )
        .with("out rows", st.output_rows)
        .with_opt(
            "peak MiB",
            st.peak_memory_bytes.map(|p| p as f64 / (1 << 20) as f64),
        )
        .detail("chunk rows", bench.chunk_rows)
        .detail("buffers", bench.buffers)
        .detail("payloads", bench.payloads)
        .detail("key-bits", key_bits)
}

/// The device's memory in bytes, from its description (the streamed joins report S against it).
fn describe_memory<B: Backend>(b: &B) -> Option<f64> {
    let d = b.describe();
    let gib = d.split(", ").find_map(|p| p.strip_suffix(" GiB"))?;
    gib.trim()
        .parse::<f64>()
        .ok()
        .map(|g| g * (1u64 << 30) as f64)
}

/// Draws the timeline of a streamed join (SVG, and PNG beside it): a lane per step of the
/// pipeline, a bar per chunk.
fn write_timeline(path: &Path, st: &StreamStats, device: &str) -> Result<()> {
    let rows: Vec<String> = Lane::ALL.iter().map(|l| l.name().to_string()).collect();
    let bars: Vec<Bar<'_>> = st
        .timeline
        .iter()
        .map(|s| Bar {
            row: Lane::ALL.iter().position(|l| *l == s.lane).unwrap_or(0),
            what: s.lane.name(),
            start_ms: s.start_ms,
            end_ms: s.end_ms,
        })
        .collect();
    let title = format!(
        "Streamed join on {device}: {} chunks, {:.1} GB of S in {:.1} ms ({:.1} GB/s)",
        st.chunks,
        st.bytes_in as f64 / 1e9,
        st.wall_ms,
        st.left_gbps()
    );
    crate::plot::timeline(path, &title, "ms since the stream began", &rows, &bars)
}
