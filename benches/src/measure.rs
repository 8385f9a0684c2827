//! Timing by the method of docs/results: warm-up runs, then the median of timed repetitions,
//! each timed the backend's way (CUDA events on a GPU, the wall clock on the CPU).

use std::collections::HashMap;

use joinkit_cuda::{Backend, Buffer, Device, Result};

use crate::opening::Opening;
use crate::report::Report;

/// Copy bandwidths measured in a run, by device description and size.
pub(crate) type CopyCache = HashMap<(String, usize), (f64, Timing)>;

/// What every measurement of a run shares: the timing options (`--repeat`, `--warmup`, whose
/// defaults each subcommand chooses), the report the results go to, and the reference copy
/// bandwidths measured so far (a sweep's points share them).
pub(crate) struct Ctx<'a> {
    pub(crate) repeat: Option<usize>,
    pub(crate) warmup: Option<usize>,
    pub(crate) report: &'a mut Report,
    pub(crate) copies: &'a mut CopyCache,
}

impl Ctx<'_> {
    /// The run's device, waiting for it to open, and named in the report: every subcommand
    /// calls this before its first row (a join of files after reading its files, which the
    /// opening overlaps).
    ///
    /// # Errors
    /// Why the device could not be opened.
    pub(crate) fn device<'d>(&mut self, opening: &'d Opening) -> Result<&'d Device> {
        let device = opening.get()?;
        self.report.on_device(device.describe());
        Ok(device)
    }

    /// [`copy_bandwidth`] of `b` over `elements`, measured once per device and size in a run.
    pub(crate) fn copy_bandwidth<B: Backend>(
        &mut self,
        b: &B,
        elements: usize,
        repeat: usize,
    ) -> Result<(f64, Timing)> {
        let key = (b.describe(), elements);
        if let Some(&known) = self.copies.get(&key) {
            return Ok(known);
        }
        let measured = copy_bandwidth(b, elements, repeat)?;
        self.copies.insert(key, measured);
        Ok(measured)
    }

    /// The runs of each measurement: `--warmup` (default 1) and `--repeat`, else `repeat`.
    pub(crate) fn runs(&self, repeat: usize) -> Runs {
        self.runs_or(1, repeat)
    }

    /// The runs of each measurement, `warmup` and `repeat` where the options are not given.
    pub(crate) fn runs_or(&self, warmup: usize, repeat: usize) -> Runs {
        Runs {
            warmup: self.warmup.unwrap_or(warmup),
            repeat: self.repeat.unwrap_or(repeat),
        }
    }
}

/// How often a measurement runs: `warmup` times untimed, then `repeat` times timed (at least
/// once: `--repeat` refuses 0, and no default is 0).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Runs {
    pub(crate) warmup: usize,
    pub(crate) repeat: usize,
}

/// Median, minimum and maximum of repeated timings, in milliseconds.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub(crate) median_ms: f64,
    pub(crate) min_ms: f64,
    pub(crate) max_ms: f64,
}

/// Runs `work` as `runs` says and times the timed runs.
pub(crate) fn time<B: Backend>(
    backend: &B,
    Runs { warmup, repeat }: Runs,
    mut work: impl FnMut() -> Result<()>,
) -> Result<Timing> {
    for _ in 0..warmup {
        work()?;
    }
    backend.synchronize()?;
    let mut ms = Vec::with_capacity(repeat);
    for _ in 0..repeat {
        ms.push(backend.timed(&mut work)?.1);
    }
    ms.sort_by(f64::total_cmp);
    Ok(Timing {
        median_ms: ms[ms.len() / 2],
        min_ms: ms[0],
        max_ms: ms[ms.len() - 1],
    })
}

/// Runs `work` as `runs` says and returns the last output with the statistics of the median
/// timed run (by `total_ms` of the statistics). Each output is freed before the next run.
pub(crate) fn median_run<O, S>(
    Runs { warmup, repeat }: Runs,
    mut work: impl FnMut() -> Result<(O, S)>,
    total_ms: impl Fn(&S) -> f64,
) -> Result<(O, S)> {
    for _ in 0..warmup {
        work()?;
    }
    let (mut out, first) = work()?;
    let mut runs = vec![first];
    for _ in 1..repeat {
        drop(out);
        let (o, st) = work()?;
        out = o;
        runs.push(st);
    }
    Ok((out, median_of(runs, &total_ms)))
}

/// The median of `runs` (at least one) by `total_ms`.
fn median_of<S>(mut runs: Vec<S>, total_ms: &impl Fn(&S) -> f64) -> S {
    runs.sort_by(|a, c| total_ms(a).total_cmp(&total_ms(c)));
    runs.swap_remove(runs.len() / 2)
}

/// [`median_run`] of `n` measurements side by side, `work(i)` the i-th's run: each warms up as
/// `runs` says, then the timed runs go round all `n` in turn, so that what drifts over a
/// sweep (clocks, the host's other load, the allocator's state) weighs on each alike. Why: run
/// one after another, `Auto` measured last of four trailed its own explicit runs of the same
/// algorithm by 10–17 % in 5–10 of 66 cells on a 16-core host (docs/results/joins.md). The
/// statistics of each one's median run, by `total_ms` (each run's output is dropped as it
/// comes).
pub(crate) fn median_runs_side_by_side<S>(
    Runs { warmup, repeat }: Runs,
    n: usize,
    mut work: impl FnMut(usize) -> Result<S>,
    total_ms: impl Fn(&S) -> f64,
) -> Result<Vec<S>> {
    for i in 0..n {
        for _ in 0..warmup {
            work(i)?;
        }
    }
    let mut runs: Vec<Vec<S>> = (0..n).map(|_| Vec::with_capacity(repeat)).collect();
    for _ in 0..repeat.max(1) {
        for (i, timed) in runs.iter_mut().enumerate() {
            timed.push(work(i)?);
        }
    }
    Ok(runs
        .into_iter()
        .map(|timed| median_of(timed, &total_ms))
        .collect())
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
    let runs = Runs { warmup: 2, repeat };
    let t = time(backend, runs, || backend.copy(&src, &mut dst))?;
    let bytes = 2.0 * 4.0 * elements as f64;
    Ok((bytes / (t.median_ms * 1e-3) / 1e9, t))
}

/// Pinned host-to-device bandwidth in GB/s: 1 GiB copied, median of 5 after one.
#[cfg(feature = "cuda")]
pub(crate) fn h2d_bandwidth(g: &joinkit_cuda::CudaBackend) -> Result<f64> {
    let n = 1usize << 28;
    let host = g.pin(&vec![1u32; n])?;
    let mut dev = g.alloc::<u32>(n)?;
    let mut ms = (0..6)
        .map(|_| {
            g.timed(|| host.copy_range_to(0..n, &mut dev.view_mut(), g.stream()))
                .map(|r| r.1)
        })
        .collect::<Result<Vec<_>>>()?;
    ms.remove(0);
    ms.sort_by(f64::total_cmp);
    Ok((n * 4) as f64 / (ms[ms.len() / 2] * 1e-3) / 1e9)
}

/// The sizes asked for, else `2^l` for each `l` of the defaults for a GPU or a CPU.
pub(crate) fn sizes_or(asked: &[usize], on_gpu: bool, gpu: &[u32], cpu: &[u32]) -> Vec<usize> {
    if !asked.is_empty() {
        return asked.to_vec();
    }
    let logs = if on_gpu { gpu } else { cpu };
    logs.iter().map(|&l| 1 << l).collect()
}

/// Binary units a size may end in, by their power of 1024.
const UNITS: [(&str, u32); 4] = [("KiB", 1), ("MiB", 2), ("GiB", 3), ("TiB", 4)];

/// Parses a size written as `2^27`, `134217728` or `1_000_000`, optionally in a binary unit
/// (`8GiB`, `2^4 MiB`; KiB, MiB, GiB, TiB) (a clap value parser).
pub(crate) fn parse_size(s: &str) -> std::result::Result<usize, String> {
    let t = s.trim().replace('_', "");
    let (number, scale) = UNITS
        .iter()
        .find_map(|&(unit, power)| {
            t.strip_suffix(unit)
                .map(|n| (n.trim_end(), 1usize.checked_shl(10 * power)))
        })
        .unwrap_or((t.as_str(), Some(1)));
    let parsed = match number.split_once('^') {
        Some(("2", e)) => e.parse::<u32>().ok().and_then(|e| 1usize.checked_shl(e)),
        Some(_) => None,
        None => number.parse::<usize>().ok(),
    };
    parsed
        .zip(scale)
        .and_then(|(n, scale)| n.checked_mul(scale))
        .ok_or_else(|| format!("{s:?} is not a size (write 2^27, 134217728 or 8GiB)"))
}

/// Most runs `--repeat` and `--warmup` take: more is a typo that would run for days (and
/// `--repeat`'s timings are held in memory: a giant one aborted the process).
pub(crate) const MAX_RUNS: usize = 1_000_000;

/// Parses `--repeat`: timed runs, at least one and at most [`MAX_RUNS`] (a clap value parser).
pub(crate) fn parse_repeat(s: &str) -> std::result::Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_RUNS).contains(&n) => Ok(n),
        Ok(0) | Err(_) => Err("a median needs at least 1 timed run".into()),
        Ok(_) => Err(format!("at most {MAX_RUNS} timed runs")),
    }
}

/// Parses `--warmup`: untimed runs, at most [`MAX_RUNS`] (a clap value parser).
pub(crate) fn parse_warmup(s: &str) -> std::result::Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n <= MAX_RUNS => Ok(n),
        Ok(_) => Err(format!("at most {MAX_RUNS} warm-up runs")),
        Err(e) => Err(e.to_string()),
    }
}

/// Most generated columns of one kind (payload columns per table, dimension tables): each is
/// generated and joined in turn, so a typo such as 1000000000 ran for hours before the host
/// ran out of memory.
pub(crate) const MAX_COLUMNS: usize = 1024;

/// Parses a count of generated columns or tables, at most [`MAX_COLUMNS`] (a clap value
/// parser).
pub(crate) fn parse_columns(s: &str) -> std::result::Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n <= MAX_COLUMNS => Ok(n),
        Ok(_) => Err(format!("at most {MAX_COLUMNS}")),
        Err(e) => Err(e.to_string()),
    }
}

/// `n` host values, value `i` from `f(i)`, in memory asked for the fallible way: a size past
/// the host's memory is [`joinkit_cuda::Error::SizeOverflow`], where `collect` would abort.
pub(crate) fn host_vec<T>(n: usize, f: impl FnMut(u64) -> T) -> Result<Vec<T>> {
    let mut v = joinkit_cuda::try_reserved(n)?;
    v.extend((0..n as u64).map(f));
    Ok(v)
}

/// Parses a width in bytes: 4 or 8 (a clap value parser).
pub(crate) fn parse_width(s: &str) -> std::result::Result<u32, String> {
    match s.trim() {
        "4" => Ok(4),
        "8" => Ok(8),
        _ => Err("widths are 4 or 8 bytes".into()),
    }
}

/// `--key-bits`: the width of the generated keys (and payloads).
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub(crate) enum KeyBits {
    #[value(name = "32")]
    U32,
    #[value(name = "64")]
    U64,
}

/// Largest TPC-H scale factor taken: `lineitem` has about 6 million rows per unit of scale
/// factor, so past 700 it outgrows the `2^32 - 1` rows a join side may have (its key column
/// alone is then some 34 GB on the host).
pub(crate) const MAX_SCALE_FACTOR: f64 = 700.0;

/// Parses a TPC-H scale factor: a number above 0 and at most [`MAX_SCALE_FACTOR`] (a clap
/// value parser; 0, NaN and infinity generate nothing or never end).
pub(crate) fn parse_scale_factor(s: &str) -> std::result::Result<f64, String> {
    parse_scale_factor_up_to(s, MAX_SCALE_FACTOR)
}

/// Parses a TPC-H scale factor: a number above 0 and at most `max`.
pub(crate) fn parse_scale_factor_up_to(s: &str, max: f64) -> std::result::Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(sf) if sf > 0.0 && sf <= max => Ok(sf),
        _ => Err(format!(
            "a scale factor is a number above 0 and at most {max}"
        )),
    }
}

/// Milliseconds since `t` (the wall clock: a command's steps, not device work).
pub(crate) fn ms(t: std::time::Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
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
        assert_eq!(super::parse_size("8GiB"), Ok(8 << 30));
        assert_eq!(super::parse_size("2^4 MiB"), Ok(16 << 20));
        assert_eq!(super::parse_size("3 KiB"), Ok(3 << 10));
        assert!(super::parse_size("GiB").is_err());
        assert!(super::parse_size("2^60TiB").is_err());
    }

    #[test]
    fn run_and_column_counts_are_bounded() {
        assert_eq!(super::parse_repeat("3"), Ok(3));
        assert!(super::parse_repeat("0").is_err());
        assert!(super::parse_repeat("1000000000000").is_err());
        assert_eq!(super::parse_warmup("0"), Ok(0));
        assert!(super::parse_warmup("1000000000000").is_err());
        assert_eq!(super::parse_columns("1024"), Ok(1024));
        assert!(super::parse_columns("1025").is_err());
        assert!(super::host_vec::<u64>(usize::MAX, |i| i).is_err());
        assert_eq!(super::host_vec(3, |i| i * 2).unwrap(), [0, 2, 4]);
    }

    #[test]
    fn scale_factors_are_finite_and_bounded() {
        assert_eq!(super::parse_scale_factor("0.01"), Ok(0.01));
        for bad in ["0", "-1", "nan", "inf", "1e12", "x"] {
            assert!(super::parse_scale_factor(bad).is_err(), "{bad}");
        }
    }
}
