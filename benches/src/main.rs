//! `joinkit-bench`: joinkit's command line. Runs on the best device (a CUDA GPU where the build
//! has the `cuda` feature and one is present, else the CPU) unless `--device` says otherwise.

mod measure;
mod smoke;

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
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("joinkit-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
