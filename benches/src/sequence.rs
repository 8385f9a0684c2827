//! `joinkit-bench sequence`: sequences of joins (Wu et al., VLDB 2024, §5.2.7), a fact table
//! joined with `k` dimension tables one after the other, with each foreign-key column
//! materialized just before its join or (the baseline) all carried from the start.
//!
//! The workload: `k` dimensions of |R| unique keys each (shuffled `0..|R|`), a fact table of
//! |S| rows with one foreign-key column per dimension (each key in its dimension with the
//! join's match ratio, uniform over it, independently per column, so about |S| · Π ratios rows
//! survive) and `--payloads` payload columns per table, of the keys' width. The fact payloads
//! and every dimension's payloads are materialized at the end. Reported: total time, the
//! foreign-key, join, compose and materialize times, each join's time, throughput
//! ((|S| + k |R|) / time), output rows and peak device memory.

use clap::Args;
use joinkit::{
    Algorithm, ColumnKey, DimensionJoin, FkMaterialization, JoinBackend, SequenceOptions,
    SequenceStats, check_rows, join_sequence,
};
use joinkit_cuda::{Device, DeviceKind, Error, with_backend};
use joinkit_datagen as datagen;

use crate::error::{BenchError, Result};
use crate::join::{parse_algorithm, payload_columns, table};
use crate::measure::{self, Ctx, KeyBits, parse_columns, parse_size};
use crate::plot::PlotSpec;
use crate::report::Row;

/// Options of `sequence`.
#[derive(Args, Debug)]
pub(crate) struct SequenceArgs {
    /// Rows of S, the fact table, as 2^27 or 134217728; default 2^27 on a GPU, 2^20 on a CPU.
    #[arg(long, value_parser = parse_size)]
    s: Option<usize>,
    /// Rows of each dimension table R_i (unique keys); default |S| / 2, so the first join is
    /// the papers' |S| = 2 |R| join.
    #[arg(long, value_parser = parse_size)]
    r: Option<usize>,
    /// Dimension tables joined in turn, k, 1 to 1024 (one foreign-key column of the fact table
    /// each).
    #[arg(long, default_value_t = 3, value_parser = parse_columns)]
    dims: usize,
    /// Fraction of fact rows whose foreign key is in the dimension: one value for every join,
    /// or k values comma separated, one per join in order. Below 1 each join drops rows, which
    /// the just-before materialization profits from.
    #[arg(long, value_delimiter = ',', default_value = "0.5")]
    match_ratio: Vec<f64>,
    /// Algorithms of the joins by name (SMJ-UM, SMJ-OM, NPHJ-open, NPHJ-chained, PHJ-UM,
    /// PHJ-OM, auto), comma separated; default: every concrete one.
    #[arg(long, value_delimiter = ',', value_parser = parse_algorithm)]
    algorithm: Vec<Algorithm>,
    /// Foreign-key materializations, comma separated: `just-before` (gather each join's
    /// foreign keys at the surviving fact rows right before it) and `up-front` (the baseline:
    /// every foreign key is a column of the intermediate result from the start, gathered by
    /// each join's output); default both.
    #[arg(long, value_delimiter = ',', value_parser = parse_fk)]
    fk: Vec<FkMaterialization>,
    /// Key width in bits: 32 or 64 (payloads have the same width).
    #[arg(long, value_enum, default_value = "32")]
    key_bits: KeyBits,
    /// Payload columns of the fact table and of each dimension, materialized at the end (0:
    /// the gather maps only), at most 1024.
    #[arg(long, default_value_t = 1, value_parser = parse_columns)]
    payloads: usize,
    /// Seed of the generated keys.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Keep 8-byte keys 8 bytes wide in the partitioned joins (see `join --help`; each row's
    /// `jN narrowed keys` field says when they were narrowed).
    #[arg(long)]
    no_key_narrowing: bool,
}

/// The plot of a sequence sweep: throughput against |S|, a line per algorithm and
/// materialization.
pub(crate) const PLOT: PlotSpec = PlotSpec {
    table: "sequence",
    x: "s",
    x_label: "|S| (fact rows)",
    y: &["M tuples/s"],
    y_label: "(|S| + k |R|) / time (M tuples/s)",
    series: &["algorithm", "fk"],
};

fn parse_fk(s: &str) -> std::result::Result<FkMaterialization, String> {
    FkMaterialization::from_name(s).ok_or_else(|| format!("{s:?}: use just-before or up-front"))
}

pub(crate) fn run(device: &Device, args: &SequenceArgs, ctx: &mut Ctx) -> Result<()> {
    let mut algorithms = args.algorithm.clone();
    if algorithms.is_empty() {
        algorithms = Algorithm::CONCRETE.to_vec();
    }
    let fks = if args.fk.is_empty() {
        FkMaterialization::ALL.to_vec()
    } else {
        args.fk.clone()
    };
    if args.dims == 0 {
        return Err(BenchError::Usage(
            "--dims: join at least one dimension".into(),
        ));
    }
    let ratios = match args.match_ratio[..] {
        [one] => vec![one; args.dims],
        ref each if each.len() == args.dims => each.to_vec(),
        ref each => {
            return Err(BenchError::Usage(format!(
                "--match-ratio: give one value or {} (one per dimension), not {}",
                args.dims,
                each.len()
            )));
        }
    };
    if let Some(r) = ratios.iter().find(|r| !(0.0..=1.0).contains(*r)) {
        return Err(BenchError::Usage(format!(
            "--match-ratio {r}: ratios are in [0, 1]"
        )));
    }
    let plan = Plan {
        algorithms: &algorithms,
        fks: &fks,
        ratios: &ratios,
    };
    match args.key_bits {
        KeyBits::U32 => with_backend!(device, b => bench::<_, u32>(b, args, &plan, ctx))?,
        KeyBits::U64 => with_backend!(device, b => bench::<_, u64>(b, args, &plan, ctx))?,
    }
    Ok(())
}

/// What to run, parsed from the options.
struct Plan<'a> {
    algorithms: &'a [Algorithm],
    fks: &'a [FkMaterialization],
    /// One match ratio per dimension.
    ratios: &'a [f64],
}

fn bench<B: JoinBackend, K: ColumnKey>(
    b: &B,
    args: &SequenceArgs,
    plan: &Plan<'_>,
    ctx: &mut Ctx,
) -> joinkit_cuda::Result<()> {
    let gpu = matches!(b.kind(), DeviceKind::Cuda(_));
    let ns = args.s.unwrap_or(if gpu { 1 << 27 } else { 1 << 20 });
    let nr = args.r.unwrap_or(ns / 2);
    if ns == 0 {
        return Err(Error::EmptyInput("sequence benchmark tables need rows"));
    }
    if nr == 0 {
        // |S| = 1 without --r: the default |S| / 2 leaves the dimensions empty.
        return Err(Error::EmptyInput(
            "sequence benchmark tables need rows (--r, default |S| / 2)",
        ));
    }
    // Before generating: what the joins would refuse.
    check_rows(ns)?;
    check_rows(nr)?;
    let k = plan.ratios.len();
    // The fact table: foreign-key column i for dimension i, then the payloads.
    let mut fact = Vec::with_capacity(k + args.payloads);
    let mut tables = Vec::with_capacity(k);
    let mut fact_payloads = Vec::new();
    for (i, &ratio) in plan.ratios.iter().enumerate() {
        let seed = args.seed.wrapping_add(10 * i as u64);
        let keys = datagen::unique_keys::<K>(nr, seed)?;
        tables.push(table(b, &keys, args.payloads, 100 + 10 * i as u64)?);
        drop(keys);
        let fk = datagen::foreign_keys::<K>(nr, ns, ratio, seed.wrapping_add(1))?;
        if i == 0 {
            fact_payloads = payload_columns(b, &fk, args.payloads, 200)?;
        }
        fact.push(K::column(b.upload(&fk)?));
    }
    fact.extend(fact_payloads);
    let dims: Vec<DimensionJoin<'_, B, K>> = tables
        .iter()
        .enumerate()
        .map(|(i, t)| DimensionJoin::new(i, t))
        .collect();
    let ratio_text: Vec<String> = plan.ratios.iter().map(f64::to_string).collect();
    let workload = format!(
        "|S| = {ns} fact rows ⋈ {k} dimensions of |R| = {nr}, match ratios {}, {} payload \
         column(s) per table, {}-bit keys",
        ratio_text.join(", "),
        args.payloads,
        K::BITS
    );
    ctx.report.note(format!("workload: {workload}"));
    ctx.report.note(
        "fk: just-before gathers each join's foreign keys at the surviving fact rows right \
         before it; up-front carries every later join's foreign keys through each join \
         (Wu et al. §5.2.7). jN ms: join N with its foreign-key gathers and map composition",
    );
    let runs = ctx.runs(10);
    for &algorithm in plan.algorithms {
        for &fk in plan.fks {
            let mut opts = SequenceOptions::new(algorithm).fk(fk); // unique dimension keys
            opts.join = opts.join.narrow_keys(!args.no_key_narrowing);
            if args.payloads > 0 {
                opts = opts.materialize(k..k + args.payloads);
            }
            let (out, st) = measure::median_run(
                runs,
                || join_sequence(b, &fact, &dims, &opts),
                SequenceStats::total_ms,
            )?;
            drop(out);
            let mut row = Row::new("sequence")
                .with("s", ns)
                .with("r", nr)
                .with("dims", k)
                .with("algorithm", algorithm.name())
                .with("fk", fk.name())
                .with("total ms", st.total_ms())
                .with("fk ms", st.fk_ms())
                .with("join ms", st.join_ms())
                .with("compose ms", st.compose_ms())
                .with("materialize ms", st.materialize_ms);
            for (i, step) in st.steps.iter().enumerate() {
                row = row.with(&format!("j{} ms", i + 1), step.total_ms());
            }
            row = row
                .with("M tuples/s", st.mtuples_per_s())
                .with("out rows", st.output_rows)
                .with_opt(
                    "peak MiB",
                    st.peak_memory_bytes.map(|p| p as f64 / (1 << 20) as f64),
                )
                .detail("key-bits", K::BITS)
                .detail("payloads", args.payloads)
                .detail("match ratios", ratio_text.join(","))
                .detail("workload", workload.as_str());
            for (i, step) in st.steps.iter().enumerate() {
                let j = i + 1;
                row = row
                    .detail(&format!("j{j} algorithm"), step.join.algorithm.name())
                    .detail(&format!("j{j} rows in"), step.join.left_rows)
                    .detail(&format!("j{j} rows out"), step.join.output_rows)
                    .detail(&format!("j{j} fk ms"), step.fk_ms)
                    .detail(&format!("j{j} join ms"), step.join.total_ms())
                    .detail(&format!("j{j} compose ms"), step.compose_ms)
                    .detail(
                        &format!("j{j} narrowed keys"),
                        if step.join.narrowed_keys { "yes" } else { "no" },
                    );
            }
            ctx.report.row(row);
        }
    }
    Ok(())
}
