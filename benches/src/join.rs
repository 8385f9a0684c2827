//! `joinkit-bench join`: joins on the best device, of two files or of the papers' workloads.
//!
//! Files (`--left`, `--right`, `--on`): Parquet or Arrow IPC inputs, the result written to
//! `--out` (compressed as `--compression` says); the row gives the time of each step (read,
//! the join's phases, write), and a bar on a terminal names the step a run of over a second
//! is at. On a CPU of few cores an inner join written to `--out` runs in chunks of the larger
//! file (`--chunk-rows`, [`crate::chunked_files`]), each chunk's rows written before the next
//! is joined. Both key columns must have the same Arrow type: UInt32 and UInt64 are joinkit's
//! u32 and u64 keys; Int32 and Int64 are bit-cast to them, which keeps equality, the only
//! relation a join compares (output columns keep their signed type). The output has one key
//! column, the left one under its name, as SQL's `join … using (k)` has (in a left outer join
//! it is never null): the left columns, then (inner and left outer joins) the right ones but
//! its key, which is never gathered; `--keep-both-keys` carries the right key too. A right name
//! that is already taken gets `_right` appended. In a left outer join the right columns of
//! unmatched left rows are nulls.
//!
//! Workloads: |R| unique keys shuffled, |S| foreign keys (a match ratio, or Zipf skew), narrow
//! or wide, 4- or 8-byte keys, or TPC-H `orders ⋈ lineitem`, with every algorithm: per-phase
//! times, throughput ((|R| + |S|) / time), peak device memory and the bytes floor. With
//! `--memory-budget` a workload runs the chunked join instead (NPHJ-open and NPHJ-chained),
//! each chunk dropped as it comes, and reports the chunks. With `--gpu-memory` the tables
//! stay in host memory and a workload runs the hybrid GPU/CPU join (`joinkit::hybrid_join`)
//! within that device budget.

use std::path::PathBuf;
use std::time::Instant;

use arrow_buffer::NullBuffer;
use arrow_schema::Field;
use clap::Args;
use joinkit::{
    Algorithm, Column, HybridOptions, HybridSplit, HybridStats, JoinBackend, JoinKind, JoinOptions,
    JoinStats, Table, Worker, check_rows, hybrid_join, join_columns, join_columns_chunked,
    output_row_bytes,
};
use joinkit_cuda::{
    Backend, CpuBackend, Device, DeviceKind, Element, Error, Key, bit_cast_slice, bit_cast_vec,
    each_column, map_column, with_backend,
};
use joinkit_datagen as datagen;
use rayon::prelude::*;

use crate::chunked_files::join_in_chunks;
use crate::error::{BenchError, Result};
use crate::files::{self, Codec, Format, HostTable};
use crate::measure::{self, Ctx, KeyBits, Runs, ms, parse_columns, parse_scale_factor, parse_size};
use crate::opening::Opening;
use crate::plot::PlotSpec;
use crate::report::Row;
use crate::stream::{self, Inputs, StreamBench};

/// Options of `join`.
#[derive(Args, Debug)]
pub(crate) struct JoinArgs {
    /// Left input: a Parquet or Arrow IPC file (joins two files, with --right and --on,
    /// instead of a generated workload).
    #[arg(long, requires_all = ["right", "on"], help_heading = "Joining files")]
    left: Option<PathBuf>,
    /// Right input: a Parquet or Arrow IPC file.
    #[arg(long, requires = "left", help_heading = "Joining files")]
    right: Option<PathBuf>,
    /// Key columns, LEFT=RIGHT (or one NAME on both sides); both of one type among Int32,
    /// Int64, UInt32, UInt64.
    #[arg(long, requires = "left", help_heading = "Joining files")]
    on: Option<String>,
    /// Output file: Parquet, or Arrow IPC for a .arrow, .feather or .ipc name (default: no
    /// output, statistics only).
    #[arg(long, requires = "left", help_heading = "Joining files")]
    out: Option<PathBuf>,
    /// Compression of --out: snappy (Parquet's default), zstd, lz4 or none (Arrow IPC's
    /// default); Parquet takes snappy, zstd or none, Arrow IPC lz4, zstd or none.
    #[arg(long, value_enum, requires = "out", help_heading = "Joining files")]
    compression: Option<Codec>,
    /// Carry the right key column to the output too (by default only the left one, equal to it
    /// in every matched row, as SQL's `join … using (k)`).
    #[arg(long, requires = "left", help_heading = "Joining files")]
    keep_both_keys: bool,
    /// Join kind: inner, left-semi, left-anti or left-outer.
    #[arg(long, default_value = "inner", value_parser = parse_kind)]
    kind: JoinKind,
    /// Keep 8-byte keys 8 bytes wide: by default the partitioned joins (PHJ-OM, PHJ-UM) join
    /// 8-byte keys that span at most 2^32 values as their low 32 bits (exact; the row's
    /// `narrowed keys` field says when).
    #[arg(long)]
    no_key_narrowing: bool,
    /// Algorithms by name (SMJ-UM, SMJ-OM, NPHJ-open, NPHJ-chained, PHJ-UM, PHJ-OM, auto), comma separated;
    /// default: all for a workload, auto for files (which take one).
    #[arg(long, value_delimiter = ',', value_parser = parse_algorithm)]
    algorithm: Vec<Algorithm>,
    /// Rows of R, the unique-key (build) side, as 2^27 or 134217728; default 2^27 on a GPU,
    /// 2^20 on a CPU.
    #[arg(long, value_parser = parse_size, conflicts_with = "left", help_heading = "Generated workloads")]
    r: Option<usize>,
    /// Rows of S, the foreign-key (probe) side; default 2 × |R|.
    #[arg(long, value_parser = parse_size, conflicts_with = "left", help_heading = "Generated workloads")]
    s: Option<usize>,
    /// Key width in bits: 32 or 64 (payloads have the same width).
    #[arg(
        long,
        value_enum,
        default_value = "32",
        conflicts_with = "left",
        help_heading = "Generated workloads"
    )]
    key_bits: KeyBits,
    /// Payload columns per side (1 = narrow; 2 = the papers' "2+2 wide"), at most 1024.
    #[arg(
        long,
        default_value_t = 1,
        value_parser = parse_columns,
        conflicts_with = "left",
        help_heading = "Generated workloads"
    )]
    payloads: usize,
    /// Fraction of S rows whose key is in R (uniform over R).
    #[arg(
        long,
        default_value_t = 1.0,
        conflicts_with = "left",
        help_heading = "Generated workloads"
    )]
    match_ratio: f64,
    /// Zipf exponent of S's keys over R (overrides --match-ratio; 0 is uniform).
    #[arg(long, conflicts_with = "left", help_heading = "Generated workloads")]
    zipf: Option<f64>,
    /// Rows per key of R (1: unique keys, a PK-FK join): R holds |R| / M distinct keys, each
    /// on M rows, and S's keys are drawn from those, so each has about |S| M / |R| rows
    /// (with --s equal to --r, M on both sides): an M:N join.
    #[arg(
        long,
        default_value_t = 1,
        value_parser = parse_multiplicity,
        conflicts_with_all = ["left", "tpch"],
        help_heading = "Generated workloads"
    )]
    r_multiplicity: usize,
    /// Zipf exponent of R's keys over its |R| / M distinct keys, instead of M rows each (skew
    /// on the build side too).
    #[arg(long, conflicts_with_all = ["left", "tpch"], help_heading = "Generated workloads")]
    r_zipf: Option<f64>,
    /// R's keys (and S's with them) spread over the 32-bit range by a pseudo-random bijection
    /// instead of `0..|R| / M`: keys random to every hash. `0..|R|` is a kind case for the
    /// partitioned joins, whose partitions on the low bits then hold arithmetic progressions.
    #[arg(long, conflicts_with_all = ["left", "tpch"], help_heading = "Generated workloads")]
    spread_keys: bool,
    /// Join TPC-H orders ⋈ lineitem on the order key at this scale factor instead (above 0, at
    /// most 700: lineitem's rows then near the 2^32 - 1 a join side may have).
    #[arg(
        long,
        value_parser = parse_scale_factor,
        conflicts_with = "left",
        help_heading = "Generated workloads"
    )]
    tpch: Option<f64>,
    /// Output memory budget in bytes (2^30 or 1073741824): run the chunked join, which yields
    /// the output in pieces of at most this many bytes, with NPHJ-open and NPHJ-chained (the
    /// algorithms it takes) unless --algorithm says; reports the number of chunks.
    #[arg(long, value_parser = parse_size, conflicts_with = "left", help_heading = "Generated workloads")]
    memory_budget: Option<usize>,
    /// Device memory budget of the hybrid GPU/CPU join, as 8GiB, 2^30 or bytes: the tables
    /// stay in host memory, are hash-partitioned on the CPU and joined pair by pair on the
    /// device (each pair within this budget) and on the CPU at once; the row gives the
    /// device's share, the bytes over the host link, per-phase times and the peak device
    /// memory. 0 runs the CPU join alone (the baseline); sweep it (`--sweep
    /// gpu-memory=0,2^28..2^33`) for time against the budget.
    #[arg(
        long,
        value_parser = parse_size,
        conflicts_with_all = ["left", "memory_budget"],
        help_heading = "Hybrid GPU/CPU join"
    )]
    gpu_memory: Option<usize>,
    /// How the hybrid join shares partition pairs: shared (one queue, by measured rates;
    /// default), fit-first (every pair that fits on the device) or device-only.
    #[arg(long, value_parser = parse_split, help_heading = "Hybrid GPU/CPU join")]
    hybrid_split: Option<HybridSplit>,
    /// Partitions of the hybrid join, 1 to 1024 (default: from the budget).
    #[arg(long, help_heading = "Hybrid GPU/CPU join")]
    hybrid_partitions: Option<usize>,
    /// Also report every partition pair of the hybrid join's median run (table `hybrid
    /// pairs`: worker, start and end ms, rows, estimated and measured device MiB): the
    /// device's and the CPU's timelines.
    #[arg(long, help_heading = "Hybrid GPU/CPU join")]
    hybrid_timeline: bool,
    /// Do not promise the joins that R's keys are unique where they are (as a join of files,
    /// whose keys nobody vouches for): Auto then samples R for duplicates, and the hash
    /// joins use tables that allow them.
    #[arg(long, conflicts_with = "left", help_heading = "Generated workloads")]
    no_right_unique: bool,
    /// Seed of the generated keys.
    #[arg(
        long,
        default_value_t = 42,
        conflicts_with = "left",
        help_heading = "Generated workloads"
    )]
    seed: u64,
    /// Where S lives: device (both sides in device memory), host (S in host memory, streamed
    /// to the device in chunks through R's table: a join of any |S|), pinned (S in page-locked
    /// host memory, copied straight from it; GPU only), or generated (S written chunk by chunk
    /// into the streamed join's pinned memory: larger than host memory too).
    /// Streamed joins are non-partitioned hash joins (auto: NPHJ-open) of a PK-FK workload.
    #[arg(
        long,
        value_enum,
        default_value = "device",
        conflicts_with_all = ["left", "memory_budget", "tpch", "zipf", "r_zipf", "gpu_memory"],
        help_heading = "Streamed joins"
    )]
    inputs: Inputs,
    /// Rows of S a streamed chunk holds (default 2^24). In a join of files written to --out,
    /// rows of the larger file a chunk probes, each chunk's rows written before the next is
    /// joined (the smaller file partitioned once; inner joins the partitioned probe carries,
    /// see `chunked_files`): default 2^21 a thread on the CPU (2^22 on 2 cores, the whole file
    /// on many), 0 (one piece) on a GPU.
    #[arg(long, value_parser = parse_size, help_heading = "Streamed joins")]
    chunk_rows: Option<usize>,
    /// Chunks of a streamed join in flight at once (filled, copied, probed), at least 2.
    #[arg(long, default_value_t = 3, help_heading = "Streamed joins")]
    buffers: usize,
    /// Rows of S held in pinned memory with --inputs pinned (cycled to |S| rows; default all
    /// of S).
    #[arg(long, value_parser = parse_size, help_heading = "Streamed joins")]
    pinned_rows: Option<usize>,
    /// Draw the last streamed join's timeline (fill, copy in, probe, copy out, callback per
    /// chunk) into this SVG file.
    #[arg(long, help_heading = "Streamed joins")]
    timeline: Option<PathBuf>,
}

/// The plot of a join sweep: throughput against |R|, a line per requested algorithm (`auto`
/// is one line, whichever algorithm it ran at each point).
pub(crate) const PLOT: PlotSpec = PlotSpec {
    table: "join",
    x: "r",
    x_label: "|R| (rows)",
    y: &["M tuples/s"],
    y_label: "(|R| + |S|) / time (M tuples/s)",
    series: &["requested", "kind"],
};

/// Kinds by their command-line names.
const KINDS: [(&str, JoinKind); 4] = [
    ("inner", JoinKind::Inner),
    ("left-semi", JoinKind::LeftSemi),
    ("left-anti", JoinKind::LeftAnti),
    ("left-outer", JoinKind::LeftOuter),
];

pub(crate) fn parse_kind(s: &str) -> std::result::Result<JoinKind, String> {
    KINDS
        .iter()
        .find(|k| k.0.eq_ignore_ascii_case(s.trim()))
        .map(|k| k.1)
        .ok_or_else(|| format!("{s:?}: use inner, left-semi, left-anti or left-outer"))
}

pub(crate) fn kind_name(kind: JoinKind) -> &'static str {
    KINDS.iter().find(|k| k.1 == kind).map_or("?", |k| k.0)
}

/// A hybrid split by name (see [`HybridSplit::from_name`]; a clap value parser).
fn parse_split(s: &str) -> std::result::Result<HybridSplit, String> {
    HybridSplit::from_name(s).ok_or_else(|| "use shared, fit-first or device-only".to_string())
}

/// Rows per key, at least 1 (a clap value parser).
fn parse_multiplicity(s: &str) -> std::result::Result<usize, String> {
    match parse_size(s)? {
        0 => Err("rows per key start at 1".to_string()),
        m => Ok(m),
    }
}

/// An algorithm by name (see [`Algorithm::from_name`]; a clap value parser).
pub(crate) fn parse_algorithm(s: &str) -> std::result::Result<Algorithm, String> {
    Algorithm::from_name(s).ok_or_else(|| {
        "use SMJ-UM, SMJ-OM, NPHJ-open, NPHJ-chained, PHJ-UM, PHJ-OM or auto".to_string()
    })
}

impl JoinArgs {
    /// Whether the arguments join two files (rather than a generated workload).
    pub(crate) fn joins_files(&self) -> bool {
        self.left.is_some() && self.right.is_some() && self.on.is_some()
    }
}

/// Runs `join`: the device is waited for first, but by a join of files, after reading them.
pub(crate) fn run(device: &mut Opening, args: &JoinArgs, ctx: &mut Ctx) -> Result<()> {
    let mut algorithms = args.algorithm.clone();
    if args.gpu_memory.is_none()
        && (args.hybrid_split.is_some() || args.hybrid_partitions.is_some() || args.hybrid_timeline)
    {
        return Err(BenchError::Usage(
            "--hybrid-split, --hybrid-partitions and --hybrid-timeline go with --gpu-memory".into(),
        ));
    }
    if let (Some(left), Some(right), Some(on)) = (&args.left, &args.right, &args.on) {
        let algorithm = match algorithms[..] {
            [] => Algorithm::Auto,
            [a] => a,
            _ => {
                return Err(BenchError::Usage(
                    "a join of files takes one --algorithm (sweep to compare them)".into(),
                ));
            }
        };
        let opts = JoinOptions::new(args.kind)
            .algorithm(algorithm)
            .narrow_keys(!args.no_key_narrowing);
        // The output's format is checked before anything is read.
        let out = match &args.out {
            Some(path) => Some((path.as_path(), Format::of(path, args.compression)?)),
            None => None,
        };
        return join_files(
            device,
            (left, right, on.as_str()),
            out,
            (&opts, args.keep_both_keys, args.chunk_rows),
            ctx,
        );
    }
    let device = ctx.device(device)?;
    if args.inputs != Inputs::Device {
        return streamed(device, args, &algorithms, ctx);
    }
    if args.gpu_memory.is_some() {
        if algorithms.is_empty() {
            algorithms = vec![Algorithm::Auto];
        }
        return match args.key_bits {
            KeyBits::U32 => with_backend!(device, b => hybrid::<_, u32>(b, args, &algorithms, ctx)),
            KeyBits::U64 => with_backend!(device, b => hybrid::<_, u64>(b, args, &algorithms, ctx)),
        }
        .map_err(Into::into);
    }
    if algorithms.is_empty() {
        algorithms = match args.memory_budget {
            Some(_) => vec![Algorithm::NphjOpen, Algorithm::NphjChained],
            None => Algorithm::CONCRETE.to_vec(),
        };
    }
    match args.key_bits {
        KeyBits::U32 => with_backend!(device, b => bench::<_, u32>(b, args, &algorithms, ctx))?,
        KeyBits::U64 => with_backend!(device, b => bench::<_, u64>(b, args, &algorithms, ctx))?,
    }
    Ok(())
}

/// A streamed join of a generated PK-FK workload (R: |R| unique keys; S: foreign keys over
/// them, every one matching).
fn streamed(
    device: &Device,
    args: &JoinArgs,
    algorithms: &[Algorithm],
    ctx: &mut Ctx,
) -> Result<()> {
    if args.r_multiplicity != 1
        || args.match_ratio != 1.0
        || args.no_right_unique
        || args.spread_keys
    {
        return Err(BenchError::Usage(
            "a streamed join runs a PK-FK workload of the keys 0..|R| with every S key matching"
                .into(),
        ));
    }
    let gpu = !matches!(device, Device::Cpu(_));
    let r = args.r.unwrap_or(if gpu { 1 << 27 } else { 1 << 20 });
    if r == 0 || args.s == Some(0) {
        return Err(NO_ROWS.into());
    }
    check_rows(r)?;
    let bench = StreamBench {
        inputs: args.inputs,
        r,
        s: args.s.unwrap_or(r.saturating_mul(2)) as u64,
        payloads: args.payloads,
        kind: args.kind,
        seed: args.seed,
        chunk_rows: args.chunk_rows.unwrap_or(1 << 24),
        buffers: args.buffers,
        timeline: args.timeline.as_deref(),
        pinned_rows: args.pinned_rows,
    };
    let algorithms = if algorithms.is_empty() {
        &[Algorithm::Auto][..]
    } else {
        algorithms
    };
    match args.key_bits {
        KeyBits::U32 => {
            with_backend!(device, b => stream::run::<_, u32>(b, &bench, algorithms, ctx))
        }
        KeyBits::U64 => {
            with_backend!(device, b => stream::run::<_, u64>(b, &bench, algorithms, ctx))
        }
    }
}

/// Runs a join as `runs` says and returns the last output with the statistics of the median
/// timed run (by total time). Each output is freed before the next run.
fn median_run<O>(
    join: impl FnMut() -> joinkit_cuda::Result<(O, JoinStats)>,
    runs: Runs,
) -> joinkit_cuda::Result<(O, JoinStats)> {
    measure::median_run(runs, join, JoinStats::total_ms)
}

/// A join's statistics as row fields, after the row's own: the algorithm `requested` (`auto`,
/// or the one given) and the one that ran.
fn with_stats(mut row: Row, requested: Algorithm, st: &JoinStats) -> Row {
    if let Some(reason) = st.reason {
        row = row.detail("auto reason", reason.to_string());
    }
    if let Some(m) = st.sampled.and_then(|s| s.right_rows_per_key) {
        row = row.detail("sampled right rows/key", m);
    }
    row.with("requested", requested.name())
        .with("algorithm", st.algorithm.name())
        .with("kind", kind_name(st.kind))
        .with("total ms", st.total_ms())
        .with("plan ms", st.phase_ms("plan"))
        .with("transform ms", st.phase_ms("transform"))
        .with("match ms", st.phase_ms("match"))
        .with("materialize ms", st.phase_ms("materialize"))
        .with("M tuples/s", st.mtuples_per_s())
        .with("out rows", st.output_rows)
        .with_opt(
            "peak MiB",
            st.peak_memory_bytes.map(|p| p as f64 / (1 << 20) as f64),
        )
        .detail("narrowed keys", if st.narrowed_keys { "yes" } else { "no" })
}

/// Joins two files on their key columns and writes the result (see the module's docs). The
/// device opens while the files are read.
fn join_files(
    opening: &mut Opening,
    (left, right, on): (&PathBuf, &PathBuf, &str),
    out: Option<(&std::path::Path, Format)>,
    (opts, keep_both_keys, chunk_rows): (&JoinOptions, bool, Option<usize>),
    ctx: &mut Ctx,
) -> Result<()> {
    let (lk, rk) = on.split_once('=').unwrap_or((on, on));
    let started = Instant::now();
    let mut read = |path: &std::path::Path| {
        ctx.report.step(&format!("reading {}", path.display()));
        files::read(path)
    };
    let (mut left, mut right) = (read(left)?, read(right)?);
    let read_ms = ms(started);
    // What of the device's opening the reading did not cover.
    let waited = Instant::now();
    let device = ctx.device(opening)?;
    let device_wait_ms = ms(waited);
    ctx.report.step("joining");
    let (li, ri) = (left.find(lk.trim())?, right.find(rk.trim())?);
    let (lt, rt) = (left.fields[li].data_type(), right.fields[ri].data_type());
    if lt != rt {
        return Err(BenchError::Usage(format!(
            "key types differ: {}'s {lk:?} is {lt}, {}'s {rk:?} is {rt}; cast one side",
            left.path.display(),
            right.path.display()
        )));
    }
    // The join takes the tables' columns.
    let (left_rows, right_rows) = (left.rows(), right.rows());
    // The right key is the join's key only, not a payload, unless asked for.
    let right_key = (!keep_both_keys).then_some(ri);
    let steps = || {
        Row::new("join")
            .with("left rows", left_rows)
            .with("right rows", right_rows)
            .with("read ms", read_ms)
    };
    let on_cpu = with_backend!(device, b => b.kind()) == DeviceKind::Cpu;
    let chunk_rows = chunk_rows.unwrap_or(if on_cpu { cpu_chunk_rows() } else { 0 });
    if let Some((path, format)) = out {
        let (l, r) = ((&mut left, li), (&mut right, ri, right_key));
        let written = if l.0.columns[li].width() == 4 {
            with_backend!(device, b => join_in_chunks::<_, u32>(b, l, r, opts, chunk_rows, (path, format)))?
        } else {
            with_backend!(device, b => join_in_chunks::<_, u64>(b, l, r, opts, chunk_rows, (path, format)))?
        };
        if let Some(w) = written {
            let row = steps()
                .with("join step ms", w.join_ms)
                .with("write ms", w.write_ms)
                .detail("device wait ms", device_wait_ms)
                .detail("chunks", w.chunks);
            let chunks = format!(", joined and written in {} chunks", w.chunks);
            report_file_join(ctx, (&w.fields, &w.stats), Some(path), &chunks, row, opts);
            return Ok(());
        }
    }
    let joined = Instant::now();
    let (fields, columns, st) = if left.columns[li].width() == 4 {
        with_backend!(device, b => join_tables::<_, u32>(b, (&mut left, li), (&mut right, ri, right_key), opts, ctx))?
    } else {
        with_backend!(device, b => join_tables::<_, u64>(b, (&mut left, li), (&mut right, ri, right_key), opts, ctx))?
    };
    // The join's own phases and around them the keys' conversion and the output's arrays.
    let join_step_ms = ms(joined);
    // The output is on the host: a one-shot command's device closes while it is written.
    // SAFETY: `join_tables` dropped every device buffer it made (the tables moved in, the
    // join's output brought back), and this command reaches the device through `opening`
    // only.
    unsafe { opening.close_early() };
    let written = Instant::now();
    if let Some((path, format)) = out {
        ctx.report.step(&format!("writing {}", path.display()));
        files::write(path, format, fields.clone(), columns)?;
    }
    let row = steps()
        .with("join step ms", join_step_ms)
        .with_opt("write ms", out.map(|_| ms(written)))
        .detail("device wait ms", device_wait_ms);
    report_file_join(ctx, (&fields, &st), out.map(|o| o.0), "", row, opts);
    Ok(())
}

/// Reports a join of files: a note with the output's rows and columns (`written` where they
/// went, then `more`), and `row`, its steps, with the join's statistics.
fn report_file_join(
    ctx: &mut Ctx,
    (fields, st): (&[Field], &JoinStats),
    written: Option<&std::path::Path>,
    more: &str,
    row: Row,
    opts: &JoinOptions,
) {
    let names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
    let note = format!(
        "{} rows, columns {}{more}",
        st.output_rows,
        names.join(", ")
    );
    ctx.report.note(match written {
        Some(path) => format!("wrote {}: {note}", path.display()),
        None => note,
    });
    ctx.report.row(with_stats(row, opts.algorithm, st));
}

/// Rows a chunk of a join of files written as it goes probes on the CPU by default
/// (`--chunk-rows`): eight output row groups for each thread of the pool, so that every thread
/// has row groups to encode and rows to join in each chunk. On the 2-core development machine
/// (2^22 rows, 8 chunks of the issue's files) chunks beat the one-piece join, whose fresh
/// memory costs more there than its work; on 32 cores the one-piece join was faster
/// (0.68–0.83 s against 0.94–1.11 in 16 chunks), and there a chunk holds the whole file.
/// docs/results/files.md.
fn cpu_chunk_rows() -> usize {
    files::GROUP_ROWS * 8 * rayon::current_num_threads()
}

/// The output columns of a join of files: names, types, values.
type Output = (Vec<Field>, Vec<arrow_array::ArrayRef>, JoinStats);

/// Moves both files' columns into the backend (every column a payload but the right key when
/// `dropped` names it, the key also as `K`), joins them and takes the output back.
fn join_tables<B: JoinBackend, K: Key>(
    b: &B,
    (left, li): (&mut HostTable, usize),
    (right, ri, dropped): (&mut HostTable, usize, Option<usize>),
    opts: &JoinOptions,
    ctx: &mut Ctx,
) -> joinkit_cuda::Result<Output> {
    // The file's columns move into the backend's buffers (the CPU's keep them as they are);
    // a dropped column is not moved (nor gathered). The key is handed over bit for bit (see
    // `keys_of`), moved in where it is dropped as a payload (the right key, but with
    // --keep-both-keys).
    let table = |t: &mut HostTable,
                 key: usize,
                 dropped: Option<usize>|
     -> joinkit_cuda::Result<Table<B, K>> {
        let mut columns = std::mem::take(&mut t.columns);
        let moved = dropped == Some(key);
        let keys = if moved {
            each_column!(columns.remove(key), c => keys_moved::<B, _, K>(b, c))?
        } else {
            each_column!(&columns[key], c => keys_of::<B, _, K>(b, c.as_slice()))?
        };
        let payloads = columns
            .into_iter()
            .enumerate()
            .filter(|&(i, _)| moved || Some(i) != dropped)
            .map(|(_, c)| Ok(map_column!(c, c, T => b.upload_owned::<T>(c)?)))
            .collect::<joinkit_cuda::Result<Vec<_>>>()?;
        Table::new(keys, payloads)
    };
    let (l, r) = (table(left, li, None)?, table(right, ri, dropped)?);
    let (m, st) = median_run(|| join_columns(b, &l, &r, opts), ctx.runs_or(0, 1))?;
    drop((l, r));
    let down = |c: Column<B>| -> joinkit_cuda::Result<Column<CpuBackend>> {
        Ok(map_column!(c, c, T => b.download_owned::<T>(c)?))
    };
    let nulls = match &m.right_valid {
        Some(v) => Some(NullBuffer::from(
            b.download(v)?
                .iter()
                .map(|&x| x != 0)
                .collect::<Vec<bool>>(),
        )),
        None => None,
    };
    let mut fields: Vec<Field> = Vec::new();
    let mut columns = Vec::new();
    for (f, c) in left.fields.iter().zip(m.left) {
        fields.push(f.as_ref().clone());
        columns.push(files::to_arrow(down(c)?, None));
    }
    let right_fields = (right.fields.iter().enumerate())
        .filter(|&(i, _)| Some(i) != dropped)
        .map(|(_, f)| f);
    for (f, c) in right_fields.zip(m.right) {
        let mut name = f.name().clone();
        while fields.iter().any(|g| *g.name() == name) {
            name.push_str("_right");
        }
        let nullable = f.is_nullable() || nulls.is_some();
        fields.push(f.as_ref().clone().with_name(name).with_nullable(nullable));
        columns.push(files::to_arrow(down(c)?, nulls.clone()));
    }
    Ok((fields, columns, st))
}

/// A key column of `T` as keys of `K` on `b`. Where the widths agree (always, for a join of
/// files: the key type follows the column's width) the column is handed over bit for bit, the
/// bit cast joinkit keys signed columns by, with no converted copy on the host (a GPU uploads
/// it straight from the column); otherwise it is converted in parallel.
fn keys_of<B: Backend, T: Element, K: Key>(b: &B, c: &[T]) -> joinkit_cuda::Result<B::Buf<K>> {
    match bit_cast_slice::<T, K>(c) {
        Some(keys) => b.upload(keys),
        None => b.upload_owned(c.par_iter().map(|x| K::from_u64(x.to_bits())).collect()),
    }
}

/// [`keys_of`] of a column that is not needed afterwards: where the widths agree it becomes the
/// keys in place (the CPU backend keeps it without any copy).
fn keys_moved<B: Backend, T: Element, K: Key>(b: &B, c: Vec<T>) -> joinkit_cuda::Result<B::Buf<K>> {
    match bit_cast_vec::<T, K>(c) {
        Ok(keys) => b.upload_owned(keys),
        Err(c) => keys_of(b, &c),
    }
}

/// A workload side without rows (a join of nothing measures nothing).
const NO_ROWS: Error = Error::EmptyInput("join benchmark sides need rows");

/// A generated workload: both sides' keys on the host, a description, and whether R's keys are
/// unique.
struct Workload<K> {
    r: Vec<K>,
    s: Vec<K>,
    shape: String,
    r_unique: bool,
}

/// The workload of `args`. Generated sizes are checked before anything is generated: rows on
/// both sides, no more than a join takes.
fn workload<K: Key>(args: &JoinArgs, gpu: bool) -> joinkit_cuda::Result<Workload<K>> {
    if let Some(sf) = args.tpch {
        let o = datagen::tpch::column(datagen::tpch::Column::OOrderkey, sf)?;
        let l = datagen::tpch::column(datagen::tpch::Column::LOrderkey, sf)?;
        if o.is_empty() || l.is_empty() {
            return Err(NO_ROWS);
        }
        let fit = |v: Vec<u64>| v.into_iter().map(K::from_u64).collect::<Vec<K>>();
        return Ok(Workload {
            r: fit(o),
            s: fit(l),
            shape: format!("TPC-H SF {sf} orders ⋈ lineitem on the order key"),
            r_unique: true,
        });
    }
    let nr = args.r.unwrap_or(if gpu { 1 << 27 } else { 1 << 20 });
    // Saturating: 2 × 2^63 wrapped to 0 and was reported as a side without rows.
    let ns = args.s.unwrap_or(nr.saturating_mul(2));
    if nr == 0 || ns == 0 {
        return Err(NO_ROWS);
    }
    check_rows(nr)?;
    check_rows(ns)?;
    // R's distinct keys, 0..distinct; S draws from them.
    let distinct = nr.div_ceil(args.r_multiplicity);
    let (mut r, r_shape) = match args.r_zipf {
        Some(theta) => (
            datagen::zipf_foreign_keys::<K>(distinct, nr, theta, args.seed)?,
            format!("R Zipf {theta} over {distinct} keys, "),
        ),
        None if distinct == nr => (datagen::unique_keys::<K>(nr, args.seed)?, String::new()),
        None => (
            datagen::repeated_keys::<K>(distinct, nr, args.seed)?,
            format!("R {} rows a key, ", args.r_multiplicity),
        ),
    };
    let (mut s, s_shape) = match args.zipf {
        Some(theta) => (
            datagen::zipf_foreign_keys::<K>(distinct, ns, theta, args.seed.wrapping_add(1))?,
            format!("Zipf {theta}"),
        ),
        None => {
            if !(0.0..=1.0).contains(&args.match_ratio) {
                return Err(Error::InvalidArgument(
                    "--match-ratio must be in [0, 1]".into(),
                ));
            }
            (
                datagen::foreign_keys::<K>(
                    distinct,
                    ns,
                    args.match_ratio,
                    args.seed.wrapping_add(1),
                )?,
                format!("match ratio {}", args.match_ratio),
            )
        }
    };
    let spread = if args.spread_keys {
        datagen::spread_keys(&mut r, args.seed.wrapping_add(2));
        datagen::spread_keys(&mut s, args.seed.wrapping_add(2));
        ", keys spread over 32 bits"
    } else {
        ""
    };
    Ok(Workload {
        r,
        s,
        shape: format!("|R| = {nr}, |S| = {ns}, {r_shape}{s_shape}{spread}"),
        r_unique: args.r_zipf.is_none() && distinct == nr,
    })
}

/// A workload's join options: `algorithm`, R's keys promised unique where they are (unless
/// `--no-right-unique`).
fn workload_options(args: &JoinArgs, algorithm: Algorithm, r_unique: bool) -> JoinOptions {
    JoinOptions::new(args.kind)
        .algorithm(algorithm)
        .narrow_keys(!args.no_key_narrowing)
        .right_unique(r_unique && !args.no_right_unique)
}

/// `payloads` generated payload columns of the keys' width, functions of the key.
pub(crate) fn payload_columns<B: Backend, K: Key>(
    b: &B,
    keys: &[K],
    payloads: usize,
    salt: u64,
) -> joinkit_cuda::Result<Vec<Column<B>>> {
    (0..payloads as u64)
        .map(|c| {
            Ok(if K::BITS == 32 {
                Column::U32(b.upload(&datagen::payload::<K, u32>(keys, salt + c)?)?)
            } else {
                Column::U64(b.upload(&datagen::payload::<K, u64>(keys, salt + c)?)?)
            })
        })
        .collect()
}

/// A generated table: `keys` and `payloads` columns of their width, functions of the key.
pub(crate) fn table<B: Backend, K: Key>(
    b: &B,
    keys: &[K],
    payloads: usize,
    salt: u64,
) -> joinkit_cuda::Result<Table<B, K>> {
    Table::new(b.upload(keys)?, payload_columns(b, keys, payloads, salt)?)
}

fn bench<B: JoinBackend, K: Key>(
    b: &B,
    args: &JoinArgs,
    algorithms: &[Algorithm],
    ctx: &mut Ctx,
) -> joinkit_cuda::Result<()> {
    let gpu = matches!(b.kind(), DeviceKind::Cuda(_));
    let (bw, _) = ctx.copy_bandwidth(b, if gpu { 1 << 28 } else { 1 << 24 }, 10)?;
    let Workload {
        r,
        s,
        shape,
        r_unique,
    } = workload::<K>(args, gpu)?;
    let (right, left) = (
        table(b, &r, args.payloads, 100)?,
        table(b, &s, args.payloads, 200)?,
    );
    ctx.report.note(
        "floor %: the time to read the inputs and write the output once at the copy bandwidth \
         measured at start, over the join's time",
    );
    let width = (K::BITS / 8) as f64;
    let output_row = output_row_bytes(args.kind, &left.payloads, &right.payloads) as f64;
    let runs = ctx.runs(10);
    let options: Vec<JoinOptions> = algorithms
        .iter()
        .map(|&algorithm| {
            let opts = workload_options(args, algorithm, r_unique);
            match args.memory_budget {
                Some(budget) => opts.memory_budget(budget as u64),
                None => opts,
            }
        })
        .collect();
    // The algorithms' runs take turns (see `median_runs_side_by_side`); a chunked join also
    // reports its chunks.
    let measured = measure::median_runs_side_by_side(
        runs,
        options.len(),
        |i| match args.memory_budget {
            Some(_) => chunked(b, &left, &right, &options[i]).map(|(c, st)| (Some(c), st)),
            None => join_columns(b, &left, &right, &options[i]).map(|(_, st)| (None, st)),
        },
        |(_, st): &(Option<u64>, JoinStats)| st.total_ms(),
    )?;
    for (&algorithm, (chunks, st)) in algorithms.iter().zip(measured) {
        // Bytes floor: inputs read once (keys and payloads) plus the output written once (its
        // rows' bytes as the memory budget counts them), over the measured copy bandwidth.
        let inputs = (r.len() + s.len()) as f64 * width * (1 + args.payloads) as f64;
        let output = st.output_rows as f64 * output_row;
        let floor_ms = (inputs + output) / (bw * 1e9) * 1e3;
        let row = Row::new("join").with("r", r.len()).with("s", s.len());
        ctx.report.row(
            with_stats(row, algorithm, &st)
                .with("floor %", 100.0 * floor_ms / st.total_ms())
                .with_opt("chunks", chunks)
                .with_opt(
                    "budget MiB",
                    args.memory_budget.map(|m| m as f64 / (1 << 20) as f64),
                )
                .detail("key-bits", K::BITS)
                .detail("payloads", args.payloads)
                .detail("r-multiplicity", args.r_multiplicity)
                .detail("workload", shape.as_str())
                .detail("copy GB/s", bw),
        );
    }
    Ok(())
}

/// The chunked join, each chunk dropped as it comes: the number of chunks, and the statistics.
fn chunked<B: JoinBackend, K: Key>(
    b: &B,
    left: &Table<B, K>,
    right: &Table<B, K>,
    opts: &JoinOptions,
) -> joinkit_cuda::Result<(u64, JoinStats)> {
    let mut chunks = join_columns_chunked(b, left, right, opts)?;
    for chunk in chunks.by_ref() {
        drop(chunk?);
    }
    Ok((chunks.chunks(), chunks.stats()))
}

/// The hybrid GPU/CPU join of a workload whose tables stay in host memory, `b` the device:
/// a row per algorithm with the device/CPU split, link bytes, per-phase times and the peak
/// device memory, timed on the wall clock (median of the runs).
fn hybrid<B: JoinBackend, K: Key>(
    b: &B,
    args: &JoinArgs,
    algorithms: &[Algorithm],
    ctx: &mut Ctx,
) -> joinkit_cuda::Result<()> {
    let w = workload::<K>(args, matches!(b.kind(), DeviceKind::Cuda(_)))?;
    let cpu = CpuBackend::new();
    let (right, left) = (
        table(&cpu, &w.r, args.payloads, 100)?,
        table(&cpu, &w.s, args.payloads, 200)?,
    );
    let budget = args.gpu_memory.unwrap_or(0) as u64;
    let split = args.hybrid_split.unwrap_or(HybridSplit::Shared);
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    for &algorithm in algorithms {
        let join = workload_options(args, algorithm, w.r_unique);
        let mut opts = HybridOptions::new(join, budget).split(split);
        opts.partitions = args.hybrid_partitions;
        let (_, st) = measure::median_run(
            ctx.runs(5),
            || hybrid_join(b, &left, &right, &opts),
            |st: &HybridStats| st.wall_ms,
        )?;
        let fallback = match st.fallback {
            None => "no".to_string(),
            Some(f) => format!("{f:?}"),
        };
        let row = Row::new("join")
            .with("r", w.r.len())
            .with("s", w.s.len())
            .with("requested", algorithm.name())
            .with("kind", kind_name(args.kind))
            .with("gpu memory MiB", mib(budget))
            .with("split", split.name())
            .with("total ms", st.wall_ms)
            .with("M tuples/s", st.mtuples_per_s())
            .with("partition ms", st.partition_ms)
            .with("device ms", st.device.busy_ms)
            .with("cpu ms", st.cpu.busy_ms)
            .with("assemble ms", st.assemble_ms)
            .with("device share %", 100.0 * st.device_share())
            .with("partitions", st.partitions)
            .with("device pairs", st.device.pairs)
            .with("cpu pairs", st.cpu.pairs)
            .with("link MiB", mib(st.link_bytes))
            .with_opt("peak MiB", st.peak_device_bytes.map(mib))
            .with("out rows", st.output_rows)
            .detail("refused pairs", st.refused)
            .detail("fallback", fallback)
            .detail("key-bits", K::BITS)
            .detail("payloads", args.payloads)
            .detail("r-multiplicity", args.r_multiplicity)
            .detail("workload", w.shape.as_str());
        ctx.report.row(row);
        if args.hybrid_timeline {
            for p in &st.pairs {
                let worker = match p.worker {
                    Worker::Device => "device",
                    Worker::Cpu => "cpu",
                };
                ctx.report.row(
                    Row::new("hybrid pairs")
                        .with("requested", algorithm.name())
                        .with("worker", worker)
                        .with("partition", p.partition)
                        .with("start ms", p.start_ms)
                        .with("end ms", p.end_ms)
                        .with("left rows", p.left_rows)
                        .with("right rows", p.right_rows)
                        .with("out rows", p.output_rows)
                        .with("estimate MiB", mib(p.estimate_bytes))
                        .with_opt("peak MiB", p.peak_bytes.map(mib))
                        .with("refused", if p.refused { "yes" } else { "no" }),
                );
            }
        }
    }
    Ok(())
}
