//! `joinkit-bench sort`: sort-pairs throughput of joinkit (the `Sort` trait, which allocates its
//! outputs and scratch per call, and the view-level entry with reused buffers) against CUB
//! called directly through raw `cub-sys` on the same keys.

use std::ops::Range;

use clap::Args;
use joinkit_cuda::{Backend, Device, DeviceKind, Error, Key, Result, with_backend};
use joinkit_primitives::Sort;

use crate::measure::{Ctx, Runs, parse_size, parse_width, sizes_or, time};
use crate::plot::PlotSpec;
use crate::report::Row;

/// Options of `sort`.
#[derive(Args, Debug)]
pub(crate) struct SortArgs {
    /// Sizes (keys), comma separated, as 2^24 or 16777216 (default 2^20,2^24,2^26,2^28 on a
    /// GPU, 2^16,2^20,2^22 on a CPU).
    #[arg(long, value_delimiter = ',', value_parser = parse_size)]
    sizes: Vec<usize>,
    /// Key widths in bytes (4, 8); values are 4-byte row ids.
    #[arg(long, value_delimiter = ',', default_value = "4,8", value_parser = parse_width)]
    key_widths: Vec<u32>,
    /// Key bits to sort by, as `lo..hi` (default: the whole key); `0..8` times one stable 8-bit
    /// partition pass.
    #[arg(long, value_parser = parse_bits)]
    bits: Option<Range<u32>>,
}

fn parse_bits(s: &str) -> std::result::Result<Range<u32>, String> {
    let (lo, hi) = s
        .split_once("..")
        .ok_or_else(|| format!("bits are written lo..hi, not {s:?}"))?;
    let num = |v: &str| {
        v.trim()
            .parse::<u32>()
            .map_err(|e| format!("bits {s:?}: {e}"))
    };
    let (lo, hi) = (num(lo)?, num(hi)?);
    if lo >= hi {
        return Err(format!("bits {s:?}: an empty range"));
    }
    Ok(lo..hi)
}

/// The plot of sort: M keys/s against the size, a line per implementation and key width.
pub(crate) const PLOT: PlotSpec = PlotSpec {
    table: "sort",
    x: "n",
    x_label: "keys",
    y: &["trait M/s", "view M/s", "CUB M/s"],
    y_label: "M keys/s (sort-pairs, 4-byte values)",
    series: &["key B"],
};

pub(crate) fn run(device: &Device, args: &SortArgs, ctx: &mut Ctx) -> Result<()> {
    with_backend!(device, b => sweep(b, args, device, ctx))
}

fn sweep<B: Sort>(b: &B, args: &SortArgs, device: &Device, ctx: &mut Ctx) -> Result<()> {
    let gpu = matches!(b.kind(), DeviceKind::Cuda(_));
    let sizes = sizes_or(&args.sizes, gpu, &[20, 24, 26, 28], &[16, 20, 22]);
    let t = ctx.runs(10);
    for n in sizes {
        for &w in &args.key_widths {
            let bits = args.bits.clone().unwrap_or(0..w * 8);
            Error::check_bits(&bits, w * 8)?;
            let trait_ms = match w {
                4 => trait_sort::<B, u32>(b, n, bits.clone(), t)?,
                8 => trait_sort::<B, u64>(b, n, bits.clone(), t)?,
                _ => return Err(Error::InvalidArgument("key widths are 4 or 8 bytes".into())),
            };
            let (view_ms, cub_ms) = direct(device, w, n, bits.clone(), t)?;
            let rate = |ms: f64| n as f64 / (ms * 1e-3) / 1e6;
            ctx.report.row(
                Row::new("sort")
                    .with("key B", w)
                    .with("n", n)
                    .with("bits", format!("{}..{}", bits.start, bits.end))
                    .with("trait M/s", rate(trait_ms))
                    .with_opt("view M/s", view_ms.map(rate))
                    .with_opt("CUB M/s", cub_ms.map(rate))
                    .with_opt("view/CUB", view_ms.zip(cub_ms).map(|(v, c)| c / v)),
            );
        }
    }
    Ok(())
}

fn inputs<B: Backend, K: Key>(b: &B, n: usize) -> Result<(B::Buf<K>, B::Buf<u32>)> {
    let mut keys = b.alloc::<K>(n)?;
    b.fill_random(&mut keys, 42, u64::MAX)?;
    let mut vals = b.alloc::<u32>(n)?;
    b.iota(&mut vals, 0)?;
    Ok((keys, vals))
}

fn trait_sort<B: Sort, K: Key>(b: &B, n: usize, bits: Range<u32>, runs: Runs) -> Result<f64> {
    let (keys, vals) = inputs::<B, K>(b, n)?;
    let t = time(b, runs, || {
        b.sort_pairs(&keys, &vals, bits.clone()).map(drop)
    })?;
    Ok(t.median_ms)
}

/// View-level joinkit and raw CUB on the GPU (None, None on the CPU).
#[cfg(feature = "cuda")]
fn direct(
    device: &Device,
    w: u32,
    n: usize,
    bits: Range<u32>,
    runs: Runs,
) -> Result<(Option<f64>, Option<f64>)> {
    let Device::Cuda(g) = device else {
        return Ok((None, None));
    };
    let (v, c) = if w == 4 {
        let v = view_sort::<u32>(g, n, bits.clone(), runs)?;
        (v, cub_sort::<u32>(g, n, bits, runs)?)
    } else {
        let v = view_sort::<u64>(g, n, bits.clone(), runs)?;
        (v, cub_sort::<u64>(g, n, bits, runs)?)
    };
    Ok((Some(v), Some(c)))
}

#[cfg(not(feature = "cuda"))]
fn direct(
    _: &Device,
    _: u32,
    _: usize,
    _: Range<u32>,
    _: Runs,
) -> Result<(Option<f64>, Option<f64>)> {
    Ok((None, None))
}

#[cfg(feature = "cuda")]
fn view_sort<K: Key>(
    g: &joinkit_cuda::CudaBackend,
    n: usize,
    bits: Range<u32>,
    runs: Runs,
) -> Result<f64> {
    let (keys, vals) = inputs::<_, K>(g, n)?;
    let (mut ko, mut vo) = (g.alloc::<K>(n)?, g.alloc::<u32>(n)?);
    let mut scratch = joinkit_cuda::Scratch::new();
    let t = time(g, runs, || {
        joinkit_primitives::cuda::sort_pairs(
            g,
            &keys.view(),
            &vals.view(),
            &mut ko.view_mut(),
            &mut vo.view_mut(),
            bits.clone(),
            &mut scratch,
        )
    })?;
    Ok(t.median_ms)
}

/// CUB `DeviceRadixSort::SortPairs` through raw `cub-sys`, temp storage allocated once.
#[cfg(feature = "cuda")]
fn cub_sort<K: Key>(
    g: &joinkit_cuda::CudaBackend,
    n: usize,
    bits: Range<u32>,
    runs: Runs,
) -> Result<f64> {
    use joinkit_primitives::cuda::cub_sys;
    let (keys, vals) = inputs::<_, K>(g, n)?;
    let (ko, vo) = (g.alloc::<K>(n)?, g.alloc::<u32>(n)?);
    g.bind_to_thread()?;
    let s = g.stream().cu_stream() as cub_sys::cudaStream_t;
    let (ki, vi) = (keys.device_ptr(), vals.device_ptr());
    let (kp, vp) = (ko.device_ptr(), vo.device_ptr());
    let (b0, b1) = (bits.start as i32, bits.end as i32);
    let call = |t: *mut std::ffi::c_void, bytes: *mut usize| {
        // SAFETY: keys/values in and out hold n elements of the named widths; `t` is null (a
        // size query) or `*bytes` bytes of device memory.
        unsafe {
            if K::BITS == 32 {
                cub_sys::cubsys_sort_pairs_uint32_uint32(
                    t, bytes, ki as _, kp as _, vi as _, vp as _, n as u64, b0, b1, s,
                )
            } else {
                cub_sys::cubsys_sort_pairs_uint64_uint32(
                    t, bytes, ki as _, kp as _, vi as _, vp as _, n as u64, b0, b1, s,
                )
            }
        }
    };
    let status = |code: i32| {
        if code == 0 {
            Ok(())
        } else {
            Err(Error::Runtime {
                op: "CUB sort pairs (direct)",
                code,
            })
        }
    };
    let mut bytes = 0usize;
    status(call(std::ptr::null_mut(), &mut bytes))?;
    let temp = g.alloc::<u64>(bytes.div_ceil(8).max(1))?;
    let tp = temp.device_ptr() as *mut std::ffi::c_void;
    let t = time(g, runs, || {
        let mut b = bytes;
        status(call(tp, &mut b))
    })?;
    Ok(t.median_ms)
}
