//! Timing by the method of docs/results: warm-up runs, then the median of timed repetitions,
//! each timed the backend's way (CUDA events on a GPU, the wall clock on the CPU).

use joinkit_cuda::{Backend, Buffer, Result};

/// Median, minimum and maximum of repeated timings, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub(crate) median_ms: f64,
    pub(crate) min_ms: f64,
    pub(crate) max_ms: f64,
}

/// Runs `work` `warmup` times untimed, then `repeat` times timed.
pub(crate) fn time<B: Backend>(
    backend: &B,
    warmup: usize,
    repeat: usize,
    mut work: impl FnMut() -> Result<()>,
) -> Result<Timing> {
    for _ in 0..warmup {
        work()?;
    }
    backend.synchronize()?;
    let mut ms = Vec::with_capacity(repeat.max(1));
    for _ in 0..repeat.max(1) {
        ms.push(backend.timed(&mut work)?.1);
    }
    ms.sort_by(f64::total_cmp);
    Ok(Timing {
        median_ms: ms[ms.len() / 2],
        min_ms: ms[0],
        max_ms: ms[ms.len() - 1],
    })
}

/// The device-to-device copy bandwidth, counting bytes read plus bytes written, in GB/s: the
/// denominator of every "fraction of copy bandwidth" joinkit reports.
pub(crate) fn copy_bandwidth<B: Backend>(
    backend: &B,
    elements: usize,
    repeat: usize,
) -> Result<(f64, Timing)> {
    let mut src = backend.alloc::<u32>(elements)?;
    backend.fill_random(&mut src, 1, u64::MAX)?;
    let mut dst = backend.alloc::<u32>(src.len())?;
    let t = time(backend, 2, repeat, || backend.copy(&src, &mut dst))?;
    let bytes = 2.0 * 4.0 * elements as f64;
    Ok((bytes / (t.median_ms * 1e-3) / 1e9, t))
}

/// Parses a size written as `2^27`, `134217728` or `1_000_000` (a clap value parser).
pub(crate) fn parse_size(s: &str) -> std::result::Result<usize, String> {
    let t = s.trim().replace('_', "");
    let parsed = match t.split_once('^') {
        Some(("2", e)) => e.parse::<u32>().ok().and_then(|e| 1usize.checked_shl(e)),
        Some(_) => None,
        None => t.parse::<usize>().ok(),
    };
    parsed.ok_or_else(|| format!("{s:?} is not a size (write 2^27 or 134217728)"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_parse() {
        assert_eq!(super::parse_size("2^27"), Ok(1 << 27));
        assert_eq!(super::parse_size("1_000"), Ok(1000));
        assert!(super::parse_size("3^2").is_err());
        assert!(super::parse_size("2^99").is_err());
        assert!(super::parse_size("x").is_err());
    }
}
