//! `joinkit-bench join`: the papers' join workloads on the best device — |R| unique keys
//! shuffled, |S| foreign keys (a match ratio, or Zipf skew), narrow or wide, 4- or 8-byte keys,
//! or TPC-H `orders ⋈ lineitem` — every algorithm, per-phase times, throughput
//! ((|R| + |S|) / time), peak device memory and the bytes floor.

use clap::Args;
use joinkit::{Algorithm, Column, JoinBackend, JoinKind, JoinOptions, Table, join_columns};
use joinkit_cuda::{Backend, Device, DeviceKind, Error, Key, Result, with_backend};
use joinkit_datagen as datagen;

use crate::measure::{copy_bandwidth, parse_size};

/// Options of `join`.
#[derive(Args, Debug)]
pub(crate) struct JoinArgs {
    /// Rows of R, the unique-key (build) side; default 2^27 on a GPU, 2^20 on a CPU.
    #[arg(long, value_parser = parse_size)]
    r: Option<usize>,
    /// Rows of S, the foreign-key (probe) side; default 2 × |R|.
    #[arg(long, value_parser = parse_size)]
    s: Option<usize>,
    /// Key width in bits: 32 or 64 (payloads have the same width).
    #[arg(long, default_value_t = 32)]
    key_bits: u32,
    /// Payload columns per side (1 = narrow; 2 = the papers' "2+2 wide").
    #[arg(long, default_value_t = 1)]
    payloads: usize,
    /// Fraction of S rows whose key is in R (uniform over R).
    #[arg(long, default_value_t = 1.0)]
    match_ratio: f64,
    /// Zipf exponent of S's keys over R (overrides --match-ratio; 0 is uniform).
    #[arg(long)]
    zipf: Option<f64>,
    /// Join TPC-H orders ⋈ lineitem on the order key at this scale factor instead.
    #[arg(long)]
    tpch: Option<f64>,
    /// Algorithms to run, by name (SMJ-UM, SMJ-OM, NPHJ-open, NPHJ-chained, auto); default all.
    #[arg(long, value_delimiter = ',')]
    algorithm: Vec<String>,
    /// Untimed runs before timing.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Timed runs (the median run is reported).
    #[arg(long, default_value_t = 10)]
    repeat: usize,
    /// Seed of the generated keys.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

pub(crate) fn run(device: &Device, args: &JoinArgs) -> Result<()> {
    let algorithms = if args.algorithm.is_empty() {
        Algorithm::CONCRETE.to_vec()
    } else {
        args.algorithm
            .iter()
            .map(|n| {
                Algorithm::from_name(n)
                    .ok_or_else(|| Error::InvalidArgument(format!("unknown algorithm {n:?}")))
            })
            .collect::<Result<Vec<_>>>()?
    };
    match args.key_bits {
        32 => with_backend!(device, b => bench::<_, u32>(b, args, &algorithms)),
        64 => with_backend!(device, b => bench::<_, u64>(b, args, &algorithms)),
        w => Err(Error::InvalidArgument(format!(
            "--key-bits {w}: use 32 or 64"
        ))),
    }
}

/// The workload: R's and S's keys on the host.
fn workload<K: Key>(args: &JoinArgs, gpu: bool) -> Result<(Vec<K>, Vec<K>, String)> {
    if let Some(sf) = args.tpch {
        let o = datagen::tpch::column(datagen::tpch::Column::OOrderkey, sf);
        let l = datagen::tpch::column(datagen::tpch::Column::LOrderkey, sf);
        let fit = |v: Vec<u64>| v.into_iter().map(K::from_u64).collect::<Vec<K>>();
        return Ok((
            fit(o),
            fit(l),
            format!("TPC-H SF {sf} orders ⋈ lineitem on the order key"),
        ));
    }
    let nr = args.r.unwrap_or(if gpu { 1 << 27 } else { 1 << 20 });
    let ns = args.s.unwrap_or(2 * nr);
    if nr == 0 || ns == 0 {
        return Err(Error::EmptyInput("join benchmark sides need rows"));
    }
    let r = datagen::unique_keys::<K>(nr, args.seed);
    let (s, shape) = match args.zipf {
        Some(theta) => (
            datagen::zipf_foreign_keys::<K>(nr, ns, theta, args.seed + 1),
            format!("Zipf {theta}"),
        ),
        None => {
            if !(0.0..=1.0).contains(&args.match_ratio) {
                return Err(Error::InvalidArgument(
                    "--match-ratio must be in [0, 1]".into(),
                ));
            }
            (
                datagen::foreign_keys::<K>(nr, ns, args.match_ratio, args.seed + 1),
                format!("match ratio {}", args.match_ratio),
            )
        }
    };
    Ok((r, s, format!("|R| = {nr}, |S| = {ns}, {shape}")))
}

fn table<B: Backend, K: Key>(b: &B, keys: &[K], payloads: usize, salt: u64) -> Result<Table<B, K>> {
    let cols = (0..payloads as u64)
        .map(|c| {
            Ok(if K::BITS == 32 {
                Column::U32(b.upload(&datagen::payload::<K, u32>(keys, salt + c))?)
            } else {
                Column::U64(b.upload(&datagen::payload::<K, u64>(keys, salt + c))?)
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Table::new(b.upload(keys)?, cols)
}

fn bench<B: JoinBackend, K: Key>(b: &B, args: &JoinArgs, algorithms: &[Algorithm]) -> Result<()> {
    let gpu = matches!(b.kind(), DeviceKind::Cuda(_));
    println!("device: {}", b.describe());
    let (bw, _) = copy_bandwidth(b, if gpu { 1 << 28 } else { 1 << 24 }, 10)?;
    println!("copy bandwidth: {bw:.1} GB/s (read + write)");
    let (r, s, shape) = workload::<K>(args, gpu)?;
    println!(
        "workload: {shape}, {}-bit keys, {} payload column(s) per side",
        K::BITS,
        args.payloads
    );
    let (right, left) = (
        table(b, &r, args.payloads, 100)?,
        table(b, &s, args.payloads, 200)?,
    );
    let width = (K::BITS / 8) as f64;
    println!(
        "{:<13} {:>9} {:>9} {:>9} {:>9} {:>10} {:>9} {:>9} {:>12}",
        "algorithm",
        "total ms",
        "transf.",
        "match",
        "mater.",
        "M tuples/s",
        "out rows",
        "floor %",
        "peak MiB"
    );
    for &algorithm in algorithms {
        let opts = JoinOptions::new(JoinKind::Inner)
            .algorithm(algorithm)
            .right_unique(true); // R's keys are unique in every workload here
        for _ in 0..args.warmup {
            join_columns(b, &left, &right, &opts)?;
        }
        let mut runs = Vec::with_capacity(args.repeat.max(1));
        for _ in 0..args.repeat.max(1) {
            let (out, stats) = join_columns(b, &left, &right, &opts)?;
            drop(out);
            runs.push(stats);
        }
        runs.sort_by(|a, c| a.total_ms().total_cmp(&c.total_ms()));
        let st = &runs[runs.len() / 2];
        // Bytes floor: inputs read once (keys and payloads) plus the output written once
        // (the payloads of both sides per output row), over the measured copy bandwidth.
        let inputs = (r.len() + s.len()) as f64 * width * (1 + args.payloads) as f64;
        let output = st.output_rows as f64 * width * (2 * args.payloads) as f64;
        let floor_ms = (inputs + output) / (bw * 1e9) * 1e3;
        println!(
            "{:<13} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>10.1} {:>9} {:>8.1}% {:>12}",
            st.algorithm.name(),
            st.total_ms(),
            st.phase_ms("transform"),
            st.phase_ms("match"),
            st.phase_ms("materialize"),
            st.mtuples_per_s(),
            st.output_rows,
            100.0 * floor_ms / st.total_ms(),
            st.peak_memory_bytes.map_or("-".to_string(), |p| format!(
                "{:.0}",
                p as f64 / (1 << 20) as f64
            )),
        );
    }
    Ok(())
}
