//! `joinkit-bench hashtable`: hash-table build and probe rates (G keys/s) over sizes, load
//! factors, hit rates and key multiplicity, for every table kind and probing policy, next to
//! the random-access floors measured in the same run (one random 8-byte write per build key,
//! one random 8-byte read per probe key) and reported as a fraction of them.

use clap::Args;
use joinkit_cuda::{Device, DeviceKind, Error, Key, Result, hash, with_backend};
use joinkit_hashtable::{
    BuildOrder, HashTables, Probing, RandomAccessFloors, TableConfig, TableKind,
};

use crate::measure::{Ctx, KeyBits, host_vec, parse_size, sizes_or, time};
use crate::plot::PlotSpec;
use crate::report::Row;

/// Options of `hashtable`.
#[derive(Args, Debug)]
pub(crate) struct HashtableArgs {
    /// Build sizes (rows), comma separated, as 2^20 or 1048576; default 2^20,2^24,2^27 on a
    /// GPU, 2^14,2^18 on a CPU.
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    sizes: Vec<usize>,
    /// Probe rows per build row.
    #[arg(long, default_value_t = 2)]
    probe_factor: usize,
    /// Open-addressing load factors (chaining always runs at 1 row per bucket).
    #[arg(long, value_delimiter = ',', default_value = "0.5,0.7,0.9")]
    load_factors: Vec<f64>,
    /// Probe hit rates in percent (0 to 100).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "100,50",
        value_parser = clap::value_parser!(u32).range(0..=100)
    )]
    hit_rates: Vec<u32>,
    /// Build rows per distinct key (1 = unique; above 1 skips the key-value kind).
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    multiplicity: Vec<usize>,
    /// Key width in bits: 32 or 64.
    #[arg(long, value_enum, default_value = "32")]
    key_bits: KeyBits,
    /// Insert orders of the open-addressing GPU builds: auto (clustered for tables of 4x the
    /// L2 cache and more), input, clustered (keys hash-partitioned by home-slot region first).
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    build_orders: Vec<Order>,
}

/// `--build-orders` values: [`BuildOrder`] by name.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub(crate) enum Order {
    Auto,
    Input,
    Clustered,
}

impl Order {
    fn policy(self) -> BuildOrder {
        match self {
            Order::Auto => BuildOrder::Auto,
            Order::Input => BuildOrder::Input,
            Order::Clustered => BuildOrder::Clustered,
        }
    }
}

/// The plot of hashtable: build, find and count + retrieve rates against the build size, a
/// line per table configuration.
pub(crate) const PLOT: PlotSpec = PlotSpec {
    table: "hashtable",
    x: "build rows",
    x_label: "build rows",
    y: &["build G/s", "find G/s", "cnt+ret G/s"],
    y_label: "G keys/s",
    series: &["kind", "probing", "order", "lf", "mult", "hit %"],
};

pub(crate) fn run(device: &Device, args: &HashtableArgs, ctx: &mut Ctx) -> Result<()> {
    with_backend!(device, b => match args.key_bits {
        KeyBits::U32 => bench::<_, u32>(b, args, ctx),
        KeyBits::U64 => bench::<_, u64>(b, args, ctx),
    })
}

/// Row `i`'s distinct key: an odd multiplier is a bijection, so keys `0..n` are distinct and
/// keys `n..` are misses.
fn key_of<K: Key>(i: u64) -> K {
    K::from_u64(i.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

fn rate(keys: usize, ms: f64) -> f64 {
    keys as f64 / (ms * 1e-3) / 1e9
}

fn bench<B: HashTables + RandomAccessFloors, K: Key>(
    b: &B,
    args: &HashtableArgs,
    ctx: &mut Ctx,
) -> Result<()> {
    let gpu = matches!(b.kind(), DeviceKind::Cuda(_));
    let sizes = sizes_or(&args.sizes, gpu, &[20, 24, 27], &[14, 18]);
    if args.probe_factor == 0 || sizes.iter().any(|&s| s == 0 || s > 1 << 31) {
        return Err(Error::InvalidArgument(
            "hashtable needs sizes from 1 to 2^31 and a probe factor of at least 1".into(),
        ));
    }
    let copy_n = if gpu { 1 << 28 } else { 1 << 24 };
    let (gbps, _) = ctx.copy_bandwidth(b, copy_n, ctx.runs(10).repeat)?;
    ctx.report.note(format!(
        "copy bandwidth {gbps:.1} GB/s (read + write); key u{}; the floors: one random 8-byte \
         write per build key (wr-floor), one random 8-byte read per probe key (rd-floor)",
        K::BITS
    ));
    for &n in &sizes {
        // A huge probe factor overflowed here, then aborted the process allocating the keys.
        let probes = n
            .checked_mul(args.probe_factor)
            .ok_or(Error::SizeOverflow("probe keys (size × probe factor)"))?;
        for &mult in &args.multiplicity {
            let mult = mult.max(1);
            let distinct = (n / mult).max(1) as u64;
            let build: Vec<K> = host_vec(n, |i| key_of(i / mult as u64))?;
            let keys = b.upload(&build)?;
            drop(build);
            for &hit in &args.hit_rates {
                let probe: Vec<K> = host_vec(probes, |j| {
                    let h = hash::hash64(j, 7);
                    if h % 100 < u64::from(hit) {
                        key_of((h >> 8) % distinct)
                    } else {
                        key_of(n as u64 + j)
                    }
                })?;
                let probe = b.upload(&probe)?;
                let mut configs = Vec::new();
                for kind in [TableKind::KeyValue, TableKind::HashRow] {
                    if kind == TableKind::KeyValue && mult > 1 {
                        continue;
                    }
                    for probing in [Probing::Linear, Probing::Double] {
                        for &lf in &args.load_factors {
                            for order in &args.build_orders {
                                let c = TableConfig::new(kind).probing(probing).load_factor(lf);
                                configs.push(c.build_order(order.policy()));
                            }
                        }
                    }
                }
                configs.push(TableConfig::chained());
                for config in configs {
                    row(b, ctx, &keys, &probe, &config, mult, hit)?;
                }
            }
        }
    }
    Ok(())
}

fn row<B: HashTables + RandomAccessFloors, K: Key>(
    b: &B,
    ctx: &mut Ctx,
    keys: &B::Buf<K>,
    probe: &B::Buf<K>,
    config: &TableConfig,
    mult: usize,
    hit: u32,
) -> Result<()> {
    use joinkit_cuda::Buffer as _;
    let runs = ctx.runs(10);
    let (n, probes) = (keys.len(), probe.len());
    // Floors over a table of as many 8-byte words as the table has slots.
    let words = config.capacity_for(n)?;
    let mut floor_table = b.alloc::<u64>(words)?;
    b.fill(&mut floor_table, 0)?;
    let mut floor_out = b.alloc::<u32>(probes)?;
    let fw = time(b, runs, || b.floor_random_write(keys, &mut floor_table, 1))?;
    let fr = time(b, runs, || {
        b.floor_random_read(probe, &floor_table, &mut floor_out, 1)
    })?;
    drop((floor_table, floor_out));
    let (wr_floor, rd_floor) = (rate(n, fw.median_ms), rate(probes, fr.median_ms));

    let tb = time(b, runs, || b.build_table(keys, config).map(drop))?;
    let table = b.build_table(keys, config)?;
    // The build's clearing of its slots (or chain heads), timed alone as the same fill, so the
    // inserts can be compared with insert-only figures such as cuCollections'.
    let tc = if config.kind() == TableKind::Chained {
        let mut heads = b.alloc::<u32>(table.capacity())?;
        time(b, runs, || b.fill(&mut heads, u32::MAX))?
    } else {
        let mut slots = b.alloc::<u64>(table.table_bytes() / 8)?;
        time(b, runs, || b.fill(&mut slots, u64::MAX))?
    };
    let tf = time(b, runs, || b.find(&table, probe).map(drop))?;
    let tr = time(b, runs, || b.probe_pairs(&table, probe).map(drop))?;
    let (build, find, pairs) = (
        rate(n, tb.median_ms),
        rate(probes, tf.median_ms),
        rate(probes, tr.median_ms),
    );
    let (kind, probing, lf) = match config.kind() {
        TableKind::Chained => ("chained", "-", table.load_factor()),
        k => (
            if k == TableKind::KeyValue {
                "key_value"
            } else {
                "hash_row"
            },
            match config.probing_policy() {
                Probing::Linear => "linear",
                Probing::Double => "double",
            },
            table.load_factor(),
        ),
    };
    // The order the build used, and whether Auto chose it.
    let used = match table.build_order() {
        BuildOrder::Clustered => "clustered",
        _ => "input",
    };
    let order = match (config.kind(), config.build_order_policy()) {
        (TableKind::Chained, _) => "-".to_string(),
        (_, BuildOrder::Auto) => format!("auto: {used}"),
        _ => used.to_string(),
    };
    ctx.report.row(
        Row::new("hashtable")
            .with("kind", kind)
            .with("probing", probing)
            .with("order", order)
            .with("lf", lf)
            .with("mult", mult)
            .with("hit %", hit)
            .with("build rows", n)
            .with("probe rows", probes)
            .with("build G/s", build)
            .with("build/floor", build / wr_floor)
            .with("clear ms", tc.median_ms)
            .with(
                "build-clear G/s",
                rate(n, (tb.median_ms - tc.median_ms).max(1e-6)),
            )
            .with("find G/s", find)
            .with("find/floor", find / rd_floor)
            .with("cnt+ret G/s", pairs)
            .with("cnt+ret/floor", pairs / rd_floor)
            .with("wr-floor", wr_floor)
            .with("rd-floor", rd_floor),
    );
    Ok(())
}
