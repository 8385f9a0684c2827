//! `joinkit-bench codec`: the cascaded codec's ratio and throughput per scheme and for the
//! sampled selector on synthetic u64 columns (sorted, runs, random, small range, and an
//! `l_orderkey`-like column), then the fused many-buffer path against one large buffer.
//!
//! Throughput counts input bytes for encode and output bytes for decode (the decoded column);
//! the fraction is (bytes read + bytes written) over the measured copy bandwidth.

use std::ops::Range;

use clap::Args;
use joinkit_codec::{Codec, CodecOptions, Scheme, SelectorConfig};
use joinkit_cuda::{Device, DeviceKind, Error, Result, hash, with_backend};

use crate::measure::{Ctx, Runs, Timing, host_vec, parse_scale_factor, parse_size, time};
use crate::plot::PlotSpec;
use crate::report::{Report, Row};

/// Options of `codec`.
#[derive(Args, Debug)]
pub(crate) struct CodecArgs {
    /// Values (u64) per column, as 2^22 or 4194304; default 2^28 on a GPU, 2^22 on a CPU.
    #[arg(long, value_parser = parse_size)]
    values: Option<usize>,
    /// Values per chunk (a power of two, 256..=8192).
    #[arg(long, default_value_t = joinkit_codec::DEFAULT_CHUNK_VALUES)]
    chunk: u32,
    /// Schemes to measure, comma separated (`bp,delta+bp,rle+delta+bp`); default: the
    /// selector's candidates.
    #[arg(long, value_delimiter = ',', value_parser = str::parse::<Scheme>)]
    schemes: Vec<Scheme>,
    /// Columns to measure, comma separated, from: sorted, runs, random, small, orderkey.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "sorted,runs,random,small,orderkey",
        value_parser = parse_column
    )]
    columns: Vec<String>,
    /// Buffers of the fused many-buffer run (default 1024 on a GPU, 64 on a CPU).
    #[arg(long)]
    buffers: Option<usize>,
    /// Values per buffer of the fused run (default 2^18 on a GPU, 2^16 on a CPU).
    #[arg(long, value_parser = parse_size)]
    buffer_values: Option<usize>,
    /// Skip checking every decode against the input.
    #[arg(long)]
    no_check: bool,
    /// Instead of the synthetic columns: TPC-H's l_orderkey, o_orderkey, o_orderpriority and
    /// l_partkey at this scale factor (from tpchgen), each with the selector's scheme (above 0,
    /// at most 700).
    #[arg(long, value_parser = parse_scale_factor)]
    tpch: Option<f64>,
}

/// The synthetic columns [`column()`] makes.
const COLUMNS: [&str; 5] = ["sorted", "runs", "random", "small", "orderkey"];

/// A synthetic column by name (a clap value parser).
fn parse_column(s: &str) -> std::result::Result<String, String> {
    let s = s.trim();
    if COLUMNS.contains(&s) {
        Ok(s.to_string())
    } else {
        Err(format!("columns are {}", COLUMNS.join(", ")))
    }
}

/// The plot of codec: encode and decode GB/s against the column length, a line per column
/// and scheme.
pub(crate) const PLOT: PlotSpec = PlotSpec {
    table: "codec",
    x: "values",
    x_label: "values per column",
    y: &["encode GB/s", "decode GB/s"],
    y_label: "GB/s (of the decoded column)",
    series: &["column", "scheme"],
};

pub(crate) fn run(device: &Device, args: &CodecArgs, ctx: &mut Ctx) -> Result<()> {
    with_backend!(device, b => bench(b, args, ctx))
}

/// A synthetic column of `n` u64 values.
fn column(name: &str, n: usize) -> Result<Vec<u64>> {
    let h = |i: u64, s: u64| hash::hash64(i, s);
    Ok(match name {
        "sorted" => host_vec(n, |i| 1_000_000 + i * 3 + h(i, 1) % 3)?,
        "runs" => host_vec(n, |i| h(i / (16 + h(i >> 10, 2) % 200), 3) % 1_000_000)?,
        "random" => host_vec(n, |i| h(i, 4))?,
        "small" => host_vec(n, |i| 5_000_000 + h(i, 5) % 1000)?,
        "orderkey" => orderkeys(n)?,
        _ => {
            return Err(Error::InvalidArgument(format!(
                "unknown column {name:?} ({})",
                COLUMNS.join(", ")
            )));
        }
    })
}

/// Like TPC-H's `l_orderkey`: sorted order keys, 1 to 7 lines each, keys in the sparse
/// pattern of `o_orderkey` (8 used out of every 32).
fn orderkeys(n: usize) -> Result<Vec<u64>> {
    // Reserved the fallible way: `--buffers` × `--buffer-values` can ask for any size.
    let mut v = joinkit_cuda::try_reserved(n)?;
    let mut order = 0u64;
    while v.len() < n {
        let key = (order / 8) * 32 + order % 8 + 1;
        // The last order's lines stop at n: pushing past the capacity would reallocate.
        let lines = (1 + hash::hash64(order, 6) % 7).min((n - v.len()) as u64);
        for _ in 0..lines {
            v.push(key);
        }
        order += 1;
    }
    Ok(v)
}

struct Measured {
    ratio: f64,
    encode: Timing,
    decode: Timing,
    encoded_words: usize,
}

/// How every measurement of one run is made.
struct Settings {
    opts: CodecOptions,
    runs: Runs,
    /// Check each decode against the input.
    check: bool,
}

/// Encodes and decodes `input` split at `bounds` with `scheme`, timing both; checks the
/// decode against `host` unless told not to.
fn measure<B: Codec>(
    b: &B,
    input: &B::Buf<u64>,
    host: &[u64],
    bounds: &[usize],
    scheme: &Scheme,
    set: &Settings,
) -> Result<Measured> {
    let (opts, runs, check) = (&set.opts, set.runs, set.check);
    let mut scratch = B::Scratch::default();
    let (mut enc, mut ranges): (B::Buf<u64>, Vec<Range<usize>>) =
        b.compress_many_with(input, bounds, scheme, opts, &mut scratch)?;
    let encode = time(b, runs, || {
        (enc, ranges) = b.compress_many_with(input, bounds, scheme, opts, &mut scratch)?;
        Ok(())
    })?;
    let mut out = b.alloc::<u64>(host.len())?;
    let decode = time(b, runs, || {
        b.decompress_many_into(&enc, &ranges, &mut out).map(|_| ())
    })?;
    if check && b.download(&out)? != host {
        return Err(Error::InvalidArgument(format!(
            "codec check FAILED: {scheme} did not round-trip on {}",
            b.describe()
        )));
    }
    let words = joinkit_cuda::Buffer::len(&enc);
    Ok(Measured {
        ratio: (host.len() * 8) as f64 / (words * 8).max(1) as f64,
        encode,
        decode,
        encoded_words: words,
    })
}

fn report(r: &mut Report, label: &str, scheme: &str, m: &Measured, values: usize, copy_gbps: f64) {
    let raw = (values * 8) as f64;
    let enc = m.encoded_words as f64 * 8.0;
    let gbps = |bytes: f64, t: &Timing| bytes / (t.median_ms * 1e-3) / 1e9;
    r.row(
        Row::new("codec")
            .with("column", label)
            .with("scheme", scheme)
            .with("values", values)
            .with("ratio", m.ratio)
            .with("encode ms", m.encode.median_ms)
            .with("encode GB/s", gbps(raw, &m.encode))
            .with("enc/copy", gbps(raw + enc, &m.encode) / copy_gbps)
            .with("decode ms", m.decode.median_ms)
            .with("decode GB/s", gbps(raw, &m.decode))
            .with("dec/copy", gbps(raw + enc, &m.decode) / copy_gbps)
            .detail("copy GB/s", copy_gbps),
    );
}

fn bench<B: Codec>(b: &B, args: &CodecArgs, ctx: &mut Ctx) -> Result<()> {
    let gpu = matches!(b.kind(), DeviceKind::Cuda(_));
    let n = args.values.unwrap_or(if gpu { 1 << 28 } else { 1 << 22 });
    let runs = ctx.runs(if gpu { 10 } else { 3 });
    if n == 0 {
        return Err(Error::EmptyInput("codec needs at least one value"));
    }
    let opts = CodecOptions {
        chunk_values: args.chunk,
    };
    opts.check()?;
    let schemes = if args.schemes.is_empty() {
        Scheme::candidates()
    } else {
        args.schemes.clone()
    };
    let (copy_gbps, _) = ctx.copy_bandwidth(b, n.max(1 << 20), runs.repeat)?;
    let set = Settings {
        opts,
        runs,
        check: !args.no_check,
    };
    let selector = SelectorConfig {
        options: opts,
        ..SelectorConfig::default()
    };
    if let Some(sf) = args.tpch {
        return tpch(b, sf, &set, &selector, copy_gbps, ctx.report);
    }
    ctx.report.note(format!(
        "copy bandwidth {copy_gbps:.1} GB/s (read + write); {n} u64 values per column, chunks of {}; \
         enc/copy and dec/copy: (bytes read + written) / time over the copy bandwidth",
        opts.chunk_values
    ));
    let whole = [0, n];
    let mut orderkey_input: Option<(B::Buf<u64>, Vec<u64>, Scheme)> = None;
    for name in args.columns.iter().map(String::as_str) {
        let host = column(name, n)?;
        let input = b.upload(&host)?;
        for s in &schemes {
            let m = measure(b, &input, &host, &whole, s, &set)?;
            report(ctx.report, name, &s.to_string(), &m, n, copy_gbps);
        }
        let sel = b.select_scheme(&input, &selector)?;
        let m = measure(b, &input, &host, &whole, &sel.scheme, &set)?;
        report(ctx.report, name, "selector", &m, n, copy_gbps);
        ctx.report.note(format!("{name}: selector chose {sel}"));
        if name == "orderkey" {
            orderkey_input = Some((input, host, sel.scheme));
        }
    }

    // Fused many-buffer path: the orderkey column in buffers of varying size against one
    // buffer of the same values.
    let k = args.buffers.unwrap_or(if gpu { 1024 } else { 64 });
    let per = args
        .buffer_values
        .unwrap_or(if gpu { 1 << 18 } else { 1 << 16 });
    let total = k
        .checked_mul(per)
        .ok_or(Error::SizeOverflow("buffers x values"))?;
    if k == 0 || total == 0 {
        return Ok(());
    }
    let (input, host, scheme) = match orderkey_input {
        Some(x) if x.1.len() == total => x,
        _ => {
            let host = orderkeys(total)?;
            let input = b.upload(&host)?;
            let scheme = b.select_scheme(&input, &selector)?.scheme;
            (input, host, scheme)
        }
    };
    // Interior cuts jittered by up to a sixteenth of a buffer: buffers of different sizes.
    let jitter = (per / 16).max(1) as u64;
    let bounds: Vec<usize> = host_vec(k.saturating_add(1), |i| {
        let i = i as usize;
        if i == 0 || i == k {
            i * per
        } else {
            i * per - (hash::hash64(i as u64, 7) % jitter) as usize
        }
    })?;
    let one = measure(b, &input, &host, &[0, total], &scheme, &set)?;
    let r = &mut *ctx.report;
    report(
        r,
        "orderkey",
        &format!("{scheme} x1"),
        &one,
        total,
        copy_gbps,
    );
    let many = measure(b, &input, &host, &bounds, &scheme, &set)?;
    report(
        r,
        "orderkey",
        &format!("{scheme} x{k}"),
        &many,
        total,
        copy_gbps,
    );
    r.note(format!(
        "fused {k} buffers vs one: encode {:.2}x the time, decode {:.2}x the time",
        many.encode.median_ms / one.encode.median_ms,
        many.decode.median_ms / one.decode.median_ms
    ));
    Ok(())
}

/// The selector's scheme, ratio and speed on TPC-H key columns at scale factor `sf`.
fn tpch<B: Codec>(
    b: &B,
    sf: f64,
    set: &Settings,
    selector: &SelectorConfig,
    copy_gbps: f64,
    r: &mut Report,
) -> Result<()> {
    use joinkit_datagen::tpch::{Column, column};
    for c in [
        Column::LOrderkey,
        Column::OOrderkey,
        Column::OOrderpriority,
        Column::LPartkey,
    ] {
        let host = column(c, sf)?;
        if host.is_empty() {
            return Err(Error::EmptyInput("TPC-H column at this scale factor"));
        }
        let input = b.upload(&host)?;
        let sel = b.select_scheme(&input, selector)?;
        let m = measure(b, &input, &host, &[0, host.len()], &sel.scheme, set)?;
        let label = format!("SF{sf} {}", c.name());
        report(
            r,
            &label,
            &sel.scheme.to_string(),
            &m,
            host.len(),
            copy_gbps,
        );
        r.note(format!(
            "{label} ({} values): selector chose {sel}",
            host.len()
        ));
    }
    Ok(())
}
