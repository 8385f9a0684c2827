//! `joinkit-bench gather`: gather throughput over sizes, value widths and map shapes, as
//! elements/s, GB/s (map + values read + output written) and the fraction of the measured copy
//! bandwidth. The main table times `Gather::gather_into` into a preallocated output with
//! `Bounds::Trust` (no allocation, no status read-back: the kernel); on CUDA a view-level row per
//! map shape and width at the largest size follows (the number the results quote).

use clap::Args;
use joinkit_cuda::{Buffer, Device, DeviceKind, Element, Error, Key, Result, hash, with_backend};
use joinkit_primitives::{Bounds, Gather, Sort};

use crate::measure::{Ctx, Runs, host_vec, parse_size, parse_width, sizes_or, time};
use crate::plot::PlotSpec;
use crate::report::Row;

/// Options of `gather`.
#[derive(Args, Debug)]
pub(crate) struct GatherArgs {
    /// Sizes (elements), comma separated, as 2^24 or 16777216 (default 2^16,2^20,2^24,2^26,2^28
    /// on a GPU, 2^16,2^20,2^22 on a CPU).
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    sizes: Vec<usize>,
    /// Value widths in bytes (4, 8).
    #[arg(long, value_delimiter = ',', default_value = "4,8", value_parser = parse_width)]
    widths: Vec<u32>,
    /// Map index widths in bytes (4, 8).
    #[arg(long, value_delimiter = ',', default_value = "4", value_parser = parse_width)]
    map_widths: Vec<u32>,
    /// Map shapes: identity, half (i/2), window (shuffles inside 1024-element windows),
    /// random (a random permutation).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "identity,half,window,random",
        value_parser = parse_map
    )]
    maps: Vec<String>,
}

/// The map shapes [`make_map`] builds.
const MAPS: [&str; 4] = ["identity", "half", "window", "random"];

/// A map shape by name (a clap value parser).
fn parse_map(s: &str) -> std::result::Result<String, String> {
    let s = s.trim();
    if MAPS.contains(&s) {
        Ok(s.to_string())
    } else {
        Err(format!("map shapes are {}", MAPS.join(", ")))
    }
}

/// The plot of gather: GB/s against the size, a line per map shape and widths.
pub(crate) const PLOT: PlotSpec = PlotSpec {
    table: "gather",
    x: "n",
    x_label: "elements",
    y: &["GB/s"],
    y_label: "GB/s (map and values read, output written)",
    series: &["map", "value B", "index B"],
};

pub(crate) fn run(device: &Device, args: &GatherArgs, ctx: &mut Ctx) -> Result<()> {
    with_backend!(device, b => sweep(b, args, ctx))?;
    #[cfg(feature = "cuda")]
    if let Device::Cuda(g) = device {
        gpu_view_level(g, args, ctx)?;
    }
    Ok(())
}

fn sizes(args: &GatherArgs, gpu: bool) -> Vec<usize> {
    sizes_or(&args.sizes, gpu, &[16, 20, 24, 26, 28], &[16, 20, 22])
}

/// A map of shape `kind` over `0..n` (a permutation except for `half`), built on the backend
/// (on the host first where the host can hold it: see [`host_vec`]).
pub(crate) fn make_map<B: Sort, I: Key>(b: &B, kind: &str, n: usize) -> Result<B::Buf<I>> {
    // Indices past the index type would wrap onto other rows (and the check after each run
    // would read the same wrapped map).
    if n as u64 > I::MAX.to_u64().saturating_add(1) {
        return Err(Error::InvalidArgument(format!(
            "a map over {n} rows needs indices wider than {} bits",
            I::BITS
        )));
    }
    let host: Vec<I> = match kind {
        "identity" => host_vec(n, I::from_u64)?,
        "half" => host_vec(n, |i| I::from_u64(i / 2))?,
        "window" => host_vec(n, |i| {
            // x -> (a x + c) mod 1024 with odd a is a bijection of each aligned window;
            // the tail window past the last multiple of 1024 keeps identity.
            let w = i >> 10;
            if (w + 1) << 10 > n as u64 {
                return I::from_u64(i);
            }
            let h = hash::hash64(w, 11);
            I::from_u64((w << 10) | ((i & 1023).wrapping_mul(h | 1).wrapping_add(h >> 32) & 1023))
        })?,
        "random" => {
            // A random permutation: row ids sorted by random keys, on the backend.
            let mut keys = b.alloc::<u64>(n)?;
            b.fill_random(&mut keys, 5, u64::MAX)?;
            let mut ids = b.alloc::<I>(n)?;
            b.iota(&mut ids, 0)?;
            return Ok(b.sort_pairs(&keys, &ids, 0..64)?.1);
        }
        other => {
            return Err(Error::InvalidArgument(format!(
                "unknown map shape {other:?} ({})",
                MAPS.join(", ")
            )));
        }
    };
    b.upload(&host)
}

fn sweep<B: Gather + Sort>(b: &B, args: &GatherArgs, ctx: &mut Ctx) -> Result<()> {
    let gpu = matches!(b.kind(), DeviceKind::Cuda(_));
    let sizes = sizes(args, gpu);
    let largest = *sizes
        .iter()
        .max()
        .ok_or(Error::EmptyInput("no sizes to measure"))?;
    let runs = ctx.runs(10);
    let (copy_gbps, _) = ctx.copy_bandwidth(b, largest.max(1 << 20), runs.repeat)?;
    ctx.report.note(
        "gather: gather_into, preallocated output, Bounds::Trust (map valid by construction; \
         checked outside the timed loop)",
    );
    for &n in &sizes {
        for &w in &args.widths {
            for &iw in &args.map_widths {
                for kind in &args.maps {
                    let (ms, bytes) = match (w, iw) {
                        (4, 4) => one::<B, u32, u32>(b, kind, n, runs)?,
                        (4, 8) => one::<B, u32, u64>(b, kind, n, runs)?,
                        (8, 4) => one::<B, u64, u32>(b, kind, n, runs)?,
                        (8, 8) => one::<B, u64, u64>(b, kind, n, runs)?,
                        _ => return Err(Error::InvalidArgument("widths are 4 or 8 bytes".into())),
                    };
                    let gbps = bytes / (ms * 1e-3) / 1e9;
                    ctx.report.row(
                        Row::new("gather")
                            .with("map", kind.as_str())
                            .with("value B", w)
                            .with("index B", iw)
                            .with("n", n)
                            .with("median ms", ms)
                            .with("G elem/s", n as f64 / (ms * 1e-3) / 1e9)
                            .with("GB/s", gbps)
                            .with("of copy %", 100.0 * gbps / copy_gbps)
                            .detail("copy GB/s", copy_gbps),
                    );
                }
            }
        }
    }
    Ok(())
}

/// Median milliseconds and bytes moved of one gather configuration; the output is checked
/// against the CPU after the timed runs.
fn one<B: Gather + Sort, T: Element, I: Key>(
    b: &B,
    kind: &str,
    n: usize,
    runs: Runs,
) -> Result<(f64, f64)> {
    let mut src = b.alloc::<T>(n)?;
    b.fill_random(&mut src, 1, u64::MAX)?;
    let map = make_map::<B, I>(b, kind, n)?;
    let mut out = b.alloc::<T>(map.len())?;
    let t = time(b, runs, || {
        b.gather_into(&src, &map, &mut out, Bounds::Trust)
    })?;
    verify(b, &src, &map, &out)?;
    let bytes = n as f64 * (2 * std::mem::size_of::<T>() + std::mem::size_of::<I>()) as f64;
    Ok((t.median_ms, bytes))
}

/// `out == src[map]`, on the host (outside any timed loop).
fn verify<B: Gather, T: Element, I: Key>(
    b: &B,
    src: &B::Buf<T>,
    map: &B::Buf<I>,
    out: &B::Buf<T>,
) -> Result<()> {
    let (src, map, out) = (b.download(src)?, b.download(map)?, b.download(out)?);
    let ok = map.len() == out.len()
        && map
            .iter()
            .zip(&out)
            .all(|(i, o)| src.get(i.to_u64() as usize) == Some(o));
    if ok {
        Ok(())
    } else {
        Err(Error::Corrupt(
            "gather benchmark output differs from src[map]".into(),
        ))
    }
}

/// The view-level entry point on the device (reused bounds check, read once at the end): one
/// row per map shape, value width and index width at the largest size.
#[cfg(feature = "cuda")]
fn gpu_view_level(g: &joinkit_cuda::CudaBackend, args: &GatherArgs, ctx: &mut Ctx) -> Result<()> {
    let n = *sizes(args, true)
        .iter()
        .max()
        .ok_or(Error::EmptyInput("no sizes"))?;
    let runs = ctx.runs(10);
    ctx.report.note(
        "gather view level: cuda::gather_columns, one column, reused BoundsCheck, at the \
         largest size",
    );
    for &w in &args.widths {
        for &iw in &args.map_widths {
            for kind in &args.maps {
                let ms = match (w, iw) {
                    (4, 4) => view_level::<u32, u32>(g, kind, n, runs)?,
                    (4, 8) => view_level::<u32, u64>(g, kind, n, runs)?,
                    (8, 4) => view_level::<u64, u32>(g, kind, n, runs)?,
                    (8, 8) => view_level::<u64, u64>(g, kind, n, runs)?,
                    _ => return Err(Error::InvalidArgument("widths are 4 or 8 bytes".into())),
                };
                let bytes = n as f64 * f64::from(2 * w + iw);
                ctx.report.row(
                    Row::new("gather view level")
                        .with("map", kind.as_str())
                        .with("value B", w)
                        .with("index B", iw)
                        .with("n", n)
                        .with("median ms", ms)
                        .with("GB/s", bytes / (ms * 1e-3) / 1e9),
                );
            }
        }
    }
    Ok(())
}

/// Median milliseconds of the view-level gather of one configuration.
#[cfg(feature = "cuda")]
fn view_level<T: Element, I: Key>(
    g: &joinkit_cuda::CudaBackend,
    kind: &str,
    n: usize,
    runs: Runs,
) -> Result<f64> {
    use joinkit_cuda::Backend;
    use joinkit_primitives::cuda::{BoundsCheck, gather_columns};
    let mut src = g.alloc::<T>(n)?;
    g.fill_random(&mut src, 1, u64::MAX)?;
    let map = make_map::<_, I>(g, kind, n)?;
    let mut out = g.alloc::<T>(n)?;
    let mut check = BoundsCheck::new(g)?;
    let t = time(g, runs, || {
        let mut ov = out.view_mut();
        gather_columns(
            g,
            &[src.view()],
            &map.view(),
            std::slice::from_mut(&mut ov),
            &mut check,
        )
    })?;
    if check.take(g)?.is_some() {
        return Err(Error::InvalidArgument("benchmark map out of range".into()));
    }
    verify(g, &src, &map, &out)?;
    Ok(t.median_ms)
}

#[cfg(test)]
mod tests {
    use joinkit_cuda::{CpuBackend, Error};

    #[test]
    fn maps_past_their_index_type_are_refused() {
        let b = CpuBackend::new();
        let too_many = (1usize << 32) + 1;
        assert!(matches!(
            super::make_map::<_, u32>(&b, "identity", too_many),
            Err(Error::InvalidArgument(_))
        ));
        assert_eq!(
            super::make_map::<_, u32>(&b, "half", 5).unwrap(),
            [0, 0, 1, 1, 2]
        );
    }
}
