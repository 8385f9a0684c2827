//! `joinkit-bench`: joinkit's command line. Runs on the best device (a CUDA GPU where the build
//! has the `cuda` feature and one is present, else the CPU) unless `--device` says otherwise.

mod codec;
mod gather;
mod hashtable;
mod join;
mod measure;
mod partition;
mod smoke;
mod sort;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use joinkit_cuda::Device;

#[derive(Parser)]
#[command(
    name = "joinkit-bench",
    version,
    about = "joinkit microbenchmarks and joins on the best device"
)]
struct Cli {
    /// Device to run on: `cpu`, `cuda` or `cuda:N` (default: the best available; the
    /// JOINKIT_DEVICE environment variable works too).
    #[arg(long, global = true)]
    device: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
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
    /// The papers' join workloads (or TPC-H orders ⋈ lineitem) with every algorithm: per-phase
    /// times, (|R| + |S|) / time, peak device memory and the fraction of the bytes floor.
    Join(join::JoinArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let device = match &cli.device {
        Some(spec) => match Device::from_spec(spec) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("joinkit-bench: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => Device::best(),
    };
    let result = match cli.command {
        Command::Smoke(args) => smoke::run(&device, &args),
        Command::Gather(args) => gather::run(&device, &args),
        Command::Sort(args) => sort::run(&device, &args),
        Command::Codec(args) => codec::run(&device, &args),
        Command::Partition(args) => partition::run(&device, &args),
        Command::Hashtable(args) => hashtable::run(&device, &args),
        Command::Join(args) => join::run(&device, &args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("joinkit-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
