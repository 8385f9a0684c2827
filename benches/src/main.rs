//! `joinkit-bench`: joinkit's command line. Runs on the best device (a CUDA GPU where the build
//! has the `cuda` feature and one is present, else the CPU) unless `--device` says otherwise.
//! Every subcommand prints a table, writes its rows as JSON lines and, where an axis varies,
//! plots them; `--sweep` runs any subcommand over the product of option values.

mod chunked_files;
mod codec;
mod distributed;
mod error;
mod files;
mod gather;
mod hashtable;
mod join;
mod launcher;
mod measure;
mod opening;
mod partition;
mod plot;
mod report;
mod sequence;
mod smoke;
mod sort;
mod steal;
mod stream;
mod sweep;
mod tpch_q4;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};

use crate::error::{BenchError, Result};
use crate::measure::{CopyCache, Ctx};
use crate::opening::Opening;
use crate::plot::PlotSpec;
use crate::report::Report;
use crate::sweep::Axis;

/// What `joinkit-bench` with no subcommand runs: a join sweep over sizes with every algorithm.
const TOUR: [&str; 3] = ["join", "--repeat", "3"];
/// The tour's sizes, left out where the command line sweeps `r` itself.
const TOUR_SIZES: [&str; 2] = ["--sweep", "r=2^16..2^20"];

/// Options taking a value that are not sweep axes: they say where a run's files go (or what to
/// sweep), once for the whole run.
const NOT_AXES: [&str; 3] = ["sweep", "out-dir", "name"];

#[derive(Parser, Debug)]
#[command(
    name = "joinkit-bench",
    version,
    args_override_self = true,
    about = "joinkit's joins and microbenchmarks on the best device: tables, JSON lines, plots",
    after_help = "With no subcommand: the tour, `joinkit-bench join --sweep r=2^16..2^20 \
                  --repeat 3` (every join algorithm over |R| = 2^16 to 2^20, |S| = 2 |R|), \
                  taking the options above.\n\
                  Sizes are written 2^27 or 134217728 everywhere."
)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    command: Option<Command>,
}

/// Options of every subcommand (before or after its name).
#[derive(Args, Debug)]
#[command(next_help_heading = "Every subcommand")]
struct Common {
    /// Device to run on: `cpu`, `cuda` or `cuda:N` (default: the best available; the
    /// JOINKIT_DEVICE environment variable works too).
    #[arg(long, global = true)]
    device: Option<String>,
    /// Timed runs of each measurement, 1 to 10^6; the median is reported (default: 10; codec
    /// on a CPU: 3; a join of files: 1).
    #[arg(long, global = true, value_parser = measure::parse_repeat)]
    repeat: Option<usize>,
    /// Untimed runs before timing, at most 10^6 (default: 1; a join of files: 0).
    #[arg(long, global = true, value_parser = measure::parse_warmup)]
    warmup: Option<usize>,
    /// A sweep axis NAME=V1,V2,...: runs the subcommand once per value, as if `--NAME V` were
    /// given. NAME is any option taking a value (r, s, algorithm, kind, sizes, device, ...)
    /// but out-dir and name; `2^A..2^B` stands for every power of two between. Repeat for more
    /// axes: every combination runs. Example: --sweep r=2^16..2^20 --sweep key-bits=32,64.
    #[arg(long, global = true, value_parser = sweep::parse_axis)]
    sweep: Vec<Axis>,
    /// Directory for `<name>.jsonl` (every row with the device, git revision and command
    /// line) and the plots `<name>.svg` and `.png`; each run replaces its three files (give
    /// runs to keep apart their own `--name`, or one run several values with `--sweep`).
    #[arg(long, global = true, default_value = "target/joinkit-bench")]
    out_dir: PathBuf,
    /// Stem of the output files instead of the subcommand's name (for example `join-h200`).
    #[arg(long, global = true, value_parser = parse_name)]
    name: Option<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Measure the device's copy bandwidth, then sort and check a large random array.
    Smoke(smoke::SmokeArgs),
    /// Gather throughput over sizes, widths and map shapes (identity, i/2, windowed, random),
    /// as GB/s and the fraction of the copy bandwidth.
    Gather(gather::GatherArgs),
    /// Sort-pairs throughput: joinkit's `Sort` and view-level entry against CUB called directly.
    Sort(sort::SortArgs),
    /// Cascaded codec: ratio and GB/s per scheme and for the selector on synthetic columns,
    /// and the fused many-buffer path against one large buffer.
    Codec(codec::CodecArgs),
    /// Radix (8-bit pass), hash (fan-out 256, 1024) and bucket-chain partitioning over sizes,
    /// widths and key distributions, as rows/s, GB/s and the fraction of the copy bandwidth.
    Partition(partition::PartitionArgs),
    /// Hash tables (open addressing, chained): build, find and count + retrieve rates over
    /// sizes, load factors, hit rates and multiplicity, as G keys/s and the fraction of the
    /// random-access floors (one random 8-byte write / read per key) measured in the same run.
    Hashtable(hashtable::HashtableArgs),
    /// Join two Parquet or Arrow IPC files (--left, --right, --on, --out), or run the papers'
    /// join workloads (or TPC-H orders ⋈ lineitem) with every algorithm: per-phase times,
    /// (|R| + |S|) / time, peak device memory and the fraction of the bytes floor.
    Join(join::JoinArgs),
    /// Sequences of joins (Wu et al. §5.2.7): a fact table joined with k dimension tables in
    /// turn, each foreign key materialized just before its join or all up front: total and
    /// per-join times, (|S| + k |R|) / time, peak device memory.
    Sequence(sequence::SequenceArgs),
    /// Joins spread over ranks (in-process threads on the CPU or one GPU, or NCCL over
    /// several GPUs or processes): one- or two-level shuffle, replicated or partitioned build
    /// side, heavy keys; per-phase times of the slowest rank, (|R| + |S|) / time, the
    /// shuffle's GB/s against a raw all-to-all measured in the same run, imbalance.
    Distributed(distributed::DistributedArgs),
    /// TPC-H Q4 (filter, semi join, group by) composed of joinkit's primitives, on tables
    /// generated at a scale factor or read from Parquet: the answer, per-phase times, input
    /// GB/s and the bytes floor.
    TpchQ4(tpch_q4::TpchQ4Args),
}

impl Command {
    /// The subcommand's name: the stem of its output files.
    fn name(&self) -> &'static str {
        match self {
            Command::Smoke(_) => "smoke",
            Command::Gather(_) => "gather",
            Command::Sort(_) => "sort",
            Command::Codec(_) => "codec",
            Command::Partition(_) => "partition",
            Command::Hashtable(_) => "hashtable",
            Command::Join(_) => "join",
            Command::Sequence(_) => "sequence",
            Command::Distributed(_) => "distributed",
            Command::TpchQ4(_) => "tpch-q4",
        }
    }

    fn plot(&self) -> Option<PlotSpec> {
        match self {
            Command::Smoke(_) => None,
            Command::Gather(_) => Some(gather::PLOT),
            Command::Sort(_) => Some(sort::PLOT),
            Command::Codec(_) => Some(codec::PLOT),
            Command::Partition(_) => Some(partition::PLOT),
            Command::Hashtable(_) => Some(hashtable::PLOT),
            Command::Join(_) => Some(join::PLOT),
            Command::Sequence(_) => Some(sequence::PLOT),
            Command::Distributed(_) => Some(distributed::PLOT),
            Command::TpchQ4(_) => Some(tpch_q4::PLOT),
        }
    }

    /// Runs the subcommand on `device` (waited for first, but by a join of files, which
    /// reads its files meanwhile).
    fn run(&self, device: &mut Opening, ctx: &mut Ctx) -> Result<()> {
        match self {
            Command::Smoke(args) => Ok(smoke::run(ctx.device(device)?, args, ctx)?),
            Command::Gather(args) => Ok(gather::run(ctx.device(device)?, args, ctx)?),
            Command::Sort(args) => Ok(sort::run(ctx.device(device)?, args, ctx)?),
            Command::Codec(args) => Ok(codec::run(ctx.device(device)?, args, ctx)?),
            Command::Partition(args) => Ok(partition::run(ctx.device(device)?, args, ctx)?),
            Command::Hashtable(args) => Ok(hashtable::run(ctx.device(device)?, args, ctx)?),
            Command::Join(args) => join::run(device, args, ctx),
            Command::Sequence(args) => sequence::run(ctx.device(device)?, args, ctx),
            Command::Distributed(args) => distributed::run(ctx.device(device)?, args, ctx),
            Command::TpchQ4(args) => tpch_q4::run(ctx.device(device)?, args, ctx),
        }
    }

    /// Whether this is a join of files (whose device opens while it reads them).
    fn joins_files(&self) -> bool {
        matches!(self, Command::Join(args) if args.joins_files())
    }
}

fn main() -> ExitCode {
    launcher::default_comm_id();
    match run(std::env::args_os().collect()) {
        Ok(()) => ExitCode::SUCCESS,
        // The reader stopped reading (`| head`): its files are written, nothing is wrong.
        Err(BenchError::Stdout(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            // One line, whatever the source error's formatting.
            let text = e.to_string();
            let lines: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            eprintln!("joinkit-bench: {}", lines.join("; "));
            ExitCode::FAILURE
        }
    }
}

fn run(mut argv: Vec<OsString>) -> Result<()> {
    let mut cli = parse(&argv).map_err(BenchError::Usage)?;
    if cli.command.is_none() {
        let sizes = !cli.common.sweep.iter().any(|a| a.name == "r");
        let tour = TOUR
            .iter()
            .chain(sizes.then_some(&TOUR_SIZES).into_iter().flatten());
        argv.splice(1..1, tour.map(OsString::from));
        cli = parse(&argv).map_err(BenchError::Usage)?;
    }
    let command = subcommand(&cli)?;
    let options = long_options(command.name());
    if let Some(a) = cli.common.sweep.iter().find(|a| !options.contains(&a.name)) {
        return Err(BenchError::Usage(format!(
            "sweep axis {:?} is not an option of `{}` taking a value",
            a.name,
            command.name()
        )));
    }
    if let Some(a) = cli
        .common
        .sweep
        .iter()
        .find(|a| NOT_AXES.contains(&a.name.as_str()))
    {
        return Err(BenchError::Usage(format!(
            "sweep axis {:?}: --{} is given once for the whole run, not swept",
            a.name, a.name
        )));
    }
    // Parse every run before the first starts: a bad value fails now, not an hour in.
    let runs = sweep::points(&argv, &cli.common.sweep)?
        .into_iter()
        .map(|p| {
            let c =
                parse(&p.argv).map_err(|e| BenchError::Usage(format!("sweep {}: {e}", p.label)))?;
            Ok((p, c))
        })
        .collect::<Result<Vec<_>>>()?;
    // Open every run's device before the first starts too (`on`: each run's, by index), each
    // on a thread of its own; a join of files starts reading while its first device opens.
    let mut devices: Vec<(&Option<String>, Opening)> = Vec::new();
    let mut on = Vec::with_capacity(runs.len());
    for (_, c) in &runs {
        let spec = &c.common.device;
        let i = match devices.iter().position(|(s, _)| *s == spec) {
            Some(i) => i,
            None => {
                devices.push((spec, Opening::start(spec.clone())));
                devices.len() - 1
            }
        };
        on.push(i);
    }
    let first_reads_files = runs
        .first()
        .and_then(|(_, c)| c.command.as_ref())
        .is_some_and(Command::joins_files);
    for (i, (_, d)) in devices.iter().enumerate() {
        if !(first_reads_files && on.first() == Some(&i)) {
            d.get()?;
        }
    }

    let mut report = Report::new(command.name(), command_line(&argv), runs.len());
    let mut copies = CopyCache::new();
    let mut run_point = |point: &sweep::Point, c: &Cli, d: &mut Opening| -> Result<()> {
        report.start_point(&point.label, point.values.clone());
        let mut ctx = Ctx {
            repeat: c.common.repeat,
            warmup: c.common.warmup,
            report: &mut report,
            copies: &mut copies,
        };
        subcommand(c)?.run(d, &mut ctx)?;
        report.end_point();
        Ok(())
    };
    // A failure ends the sweep, and what was measured before it is still reported (the
    // failure is the error then, whatever the report's files and printing say).
    let failed = runs
        .iter()
        .zip(&on)
        .enumerate()
        .try_for_each(|(k, ((p, c), &i))| {
            devices[i].1.set_last_run(!on[k + 1..].contains(&i));
            run_point(p, c, &mut devices[i].1)
        })
        .err();
    let finished = if failed.is_none() || report.has_rows() {
        let axes: Vec<String> = cli.common.sweep.iter().map(|a| a.name.clone()).collect();
        let stem = cli.common.name.as_deref().unwrap_or(command.name());
        let out_dir = launcher::rank_out_dir(&cli.common.out_dir);
        report.finish(&out_dir, stem, command.plot().as_ref(), &axes)
    } else {
        Ok(())
    };
    for (_, device) in devices {
        device.close_at_exit();
    }
    failed.map_or(finished, Err)
}

/// Parses a command line: `--help` and `--version` print and exit; a bad one is clap's first
/// paragraph (the error and any possible values, not the usage hints after), to be reported
/// as one line like every error.
fn parse(argv: &[OsString]) -> std::result::Result<Cli, String> {
    Cli::try_parse_from(argv).map_err(|e| {
        if !e.use_stderr() {
            e.exit();
        }
        let text = e.to_string();
        let error: Vec<&str> = text
            .lines()
            .map(str::trim)
            .take_while(|l| !l.is_empty())
            .collect();
        error.join("; ").trim_start_matches("error: ").to_string()
    })
}

/// Parses `--name`: an empty stem would write the hidden files `.jsonl`, `.svg` and `.png`
/// (a clap value parser).
fn parse_name(s: &str) -> std::result::Result<String, String> {
    if s.trim().is_empty() {
        Err("the output files need a name".into())
    } else {
        Ok(s.to_string())
    }
}

/// The subcommand of a parsed command line (the tour's insertion gives every one its own).
fn subcommand(cli: &Cli) -> Result<&Command> {
    cli.command
        .as_ref()
        .ok_or_else(|| BenchError::Usage("no subcommand".into()))
}

/// The long options taking a value of subcommand `name`, the global ones included.
fn long_options(name: &str) -> Vec<String> {
    let cli = Cli::command();
    let takes_value = |a: &clap::Arg| a.get_action().takes_values();
    let global = cli.get_arguments().filter(|a| takes_value(a));
    let own = cli
        .find_subcommand(name)
        .into_iter()
        .flat_map(|s| s.get_arguments().filter(|a| takes_value(a)));
    global
        .chain(own)
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect()
}

/// The command line as a shell would take it, for the JSON lines.
fn command_line(argv: &[OsString]) -> String {
    let quote = |s: String| {
        if !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "_./=:,^+-".contains(c))
        {
            s
        } else {
            format!("'{}'", s.replace('\'', r"'\''"))
        }
    };
    std::iter::once("joinkit-bench".to_string())
        .chain(
            argv.iter()
                .skip(1)
                .map(|a| quote(a.to_string_lossy().into_owned())),
        )
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_axes_are_long_options() {
        let join = long_options("join");
        for name in ["r", "algorithm", "kind", "device", "repeat", "left"] {
            assert!(join.contains(&name.to_string()), "{name}");
        }
        assert!(!join.contains(&"help".to_string()));
    }

    #[test]
    fn command_lines_are_quoted() {
        let argv: Vec<OsString> = ["/x/joinkit-bench", "join", "--on", "a b"]
            .map(OsString::from)
            .to_vec();
        assert_eq!(command_line(&argv), "joinkit-bench join --on 'a b'");
    }

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_option_is_documented() {
        let mut cli = Cli::command();
        cli.build();
        let subs: Vec<&clap::Command> = cli.get_subcommands().chain([&cli]).collect();
        for sub in subs {
            for a in sub.get_arguments() {
                if !["help", "version"].contains(&a.get_id().as_str()) {
                    assert!(
                        a.get_help().is_some(),
                        "{} --{}",
                        sub.get_name(),
                        a.get_id()
                    );
                }
            }
        }
    }
}
