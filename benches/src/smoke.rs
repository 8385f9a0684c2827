//! `joinkit-bench smoke`: is the device there and sane? Copy bandwidth, then a large random sort
//! checked for order and content.

use clap::Args;
use joinkit_cuda::{Device, DeviceKind, Error, Result, hash, with_backend};
use joinkit_primitives::Sort;

use crate::measure::{Ctx, Timing, copy_bandwidth, parse_size, time};
use crate::report::Row;

/// Options of `smoke`.
#[derive(Args, Debug)]
pub(crate) struct SmokeArgs {
    /// Elements (u32) for the copy-bandwidth test; default 2^28 on a GPU (1 GiB), 2^24 on a CPU.
    #[arg(long, value_parser = parse_size)]
    copy_elements: Option<usize>,
    /// Keys (u64) to sort; default 2^26 on a GPU, 2^22 on a CPU.
    #[arg(long, value_parser = parse_size)]
    sort_elements: Option<usize>,
    /// Seed of the random keys.
    #[arg(long, default_value_t = 42)]
    seed: u64,
}

pub(crate) fn run(device: &Device, args: &SmokeArgs, ctx: &mut Ctx) -> Result<()> {
    with_backend!(device, b => smoke(b, args, ctx))
}

/// A row of the smoke table.
fn row(test: &str, n: usize, t: &Timing, rate: f64, unit: &str) -> Row {
    Row::new("smoke")
        .with("test", test)
        .with("n", n)
        .with("median ms", t.median_ms)
        .with("min ms", t.min_ms)
        .with("max ms", t.max_ms)
        .with("rate", rate)
        .with("unit", unit)
}

fn smoke<B: Sort>(b: &B, args: &SmokeArgs, ctx: &mut Ctx) -> Result<()> {
    let gpu = matches!(b.kind(), DeviceKind::Cuda(_));
    let copy_n = args
        .copy_elements
        .unwrap_or(if gpu { 1 << 28 } else { 1 << 24 });
    let sort_n = args
        .sort_elements
        .unwrap_or(if gpu { 1 << 26 } else { 1 << 22 });
    if copy_n == 0 || sort_n == 0 {
        return Err(Error::EmptyInput(
            "smoke needs at least one element to copy and to sort",
        ));
    }
    let runs = ctx.runs(10);
    let (gbps, t) = copy_bandwidth(b, copy_n, runs.repeat)?;
    ctx.report
        .row(row("copy u32", copy_n, &t, gbps, "GB/s (read + write)"));

    let mut keys = b.alloc::<u64>(sort_n)?;
    b.fill_random(&mut keys, args.seed, u64::MAX)?;
    let mut sorted = b.sort_keys(&keys, 0..64)?;
    let t = time(b, runs, || {
        sorted = b.sort_keys(&keys, 0..64)?;
        Ok(())
    })?;
    let rate = sort_n as f64 / (t.median_ms * 1e-3) / 1e9;
    ctx.report
        .row(row("sort u64", sort_n, &t, rate, "G keys/s"));

    // Check: non-decreasing, and the same multiset as the generated keys (count, sum and a hash
    // sum, each order-independent).
    let out = b.download(&sorted)?;
    let ordered = out.windows(2).all(|w| w[0] <= w[1]);
    let fingerprint = |v: &mut dyn Iterator<Item = u64>| {
        v.fold((0u64, 0u64, 0u64), |(n, s, h), x| {
            (n + 1, s.wrapping_add(x), h.wrapping_add(hash::fmix64(x)))
        })
    };
    let want = fingerprint(&mut (0..sort_n as u64).map(|i| hash::hash64(i, args.seed)));
    let got = fingerprint(&mut out.iter().copied());
    if !ordered || want != got {
        return Err(Error::InvalidArgument(format!(
            "sort check FAILED on {}: ordered={ordered}, content matches={}",
            b.describe(),
            want == got
        )));
    }
    ctx.report.note("check: sorted order and content ok");
    Ok(())
}
