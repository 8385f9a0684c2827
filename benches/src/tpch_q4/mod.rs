//! `joinkit-bench tpch-q4`: TPC-H Q4 as a composition of joinkit's parts, no query engine.
//!
//! ```sql
//! select o_orderpriority, count(*) as order_count
//! from orders
//! where o_orderdate >= date '[DATE]' and o_orderdate < date '[DATE]' + interval '3' month
//!   and exists (select * from lineitem
//!               where l_orderkey = o_orderkey and l_commitdate < l_receiptdate)
//! group by o_orderpriority order by o_orderpriority;
//! ```
//!
//! The plan ([`q4`]), each step one call of a primitive on the device the columns live on:
//!
//! 1. **filter** `orders`: `o_orderdate` within the quarter ([`Filter::flag_range`]), as flags;
//! 2. **semi join** of the flagged orders with the lines of their key that have
//!    `l_commitdate < l_receiptdate`: `sorted` (default) marks them by a merge of the two key
//!    columns ([`SortedMatch::mark_sorted_matches_where_less`]), which TPC-H's tables allow
//!    (`orders` ascends by key, `lineitem` comes clustered by order), reading the two dates only
//!    for lines of the quarter's orders; `hash` flags the lines ([`Filter::flag_less`], counted
//!    in the filter phase), compacts both sides ([`Compact`]) and runs joinkit's left semi
//!    join (`Algorithm::Auto`), which any order allows. A `sorted` plan over tables out of
//!    order falls back to `hash`;
//! 3. **group by**: the priorities of the joined orders ([`Compact`]) counted in five bins
//!    ([`Histogram`]).
//!
//! Columns come from `tpchgen` at `--sf` (or Parquet files, `--parquet DIR`), encoded as the
//! NVIDIA talk did: 8-byte keys, dates as 4-byte day numbers, the priority as a 4-byte code
//! (joinkit's columns are 4 or 8 bytes wide). By default they are uploaded first, outside the
//! timings: the times are the query's on columns in device memory. With `--inputs host` they
//! stay in pinned host memory (raw, or with `--compress` as cascaded-codec streams) and the
//! query copies them in itself, `lineitem` in chunks under the merge. GB/s is input bytes (the six columns)
//! over the query's time, the talk's metric; the bytes floor is those bytes over the measured
//! copy bandwidth (which counts bytes read and written), i.e. reading every column once.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use joinkit::{Column, JoinBackend, JoinKind, JoinOptions, Table, join_columns};
use joinkit_cuda::{Backend, Buffer, Device, Element, Error, with_backend};
use joinkit_datagen::tpch::{Q4Columns, q4_columns};
use joinkit_primitives::{Compact, Filter, Histogram, SortedMatch};
use rayon::prelude::*;

use crate::error::{BenchError, Result};
use crate::measure::{Ctx, median_run, parse_scale_factor_up_to};
use crate::plot::PlotSpec;
use crate::report::Row;

/// `o_orderpriority`'s values, in code order.
pub(crate) const PRIORITIES: [&str; 5] =
    ["1-URGENT", "2-HIGH", "3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"];

/// Options of `tpch-q4`.
#[derive(Args, Debug)]
pub(crate) struct TpchQ4Args {
    /// Scale factor of the generated tables (default 10 on a GPU, 1 on a CPU), at most 10000
    /// (the sorted plan has no row limit a side; the host's memory is the limit: SF 1000's
    /// columns take 120 GB, twice that while generated).
    #[arg(long, value_parser = |s: &str| parse_scale_factor_up_to(s, 10_000.0), conflicts_with = "parquet")]
    sf: Option<f64>,
    /// First day of the quarter, YYYY-MM-DD (the spec's validation value by default).
    #[arg(long, default_value = "1993-07-01", value_parser = parse_date)]
    date: i32,
    /// Semi-join strategies, comma separated: sorted (a merge of the clustered key columns),
    /// hash (compaction and joinkit's left semi join).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "sorted")]
    semi_join: Vec<SemiJoin>,
    /// Where the columns live while the query runs: `device` (uploaded before the clock
    /// starts) or `host` (pinned host memory, a GPU only: orders copied in, then lineitem
    /// streamed through in chunks on a copy stream while the merge runs on the last chunk;
    /// the sorted plan).
    #[arg(long, value_enum, default_value = "device")]
    inputs: Inputs,
    /// With `--inputs host`: every column stored in host memory compressed by the cascaded
    /// codec (a scheme sampled per column, a stream per chunk), copied compressed and decoded
    /// on the GPU: fewer bytes over the host link (the talk compressed `l_orderkey`).
    #[arg(long)]
    compress: bool,
    /// GPUs to spread the query over, ordinals comma separated (0,1,2,3): the tables are split
    /// by order key (both are sorted on it, so no row moves between GPUs), each GPU runs the
    /// sorted plan on its part, and the five counts are summed by an all-reduce over NCCL.
    #[arg(long, value_delimiter = ',')]
    gpus: Vec<usize>,
    /// Lineitem rows a streamed chunk (`--inputs host`), as 2^26 or 67108864.
    #[arg(long, default_value = "2^26", value_parser = crate::measure::parse_size)]
    chunk_rows: usize,
    /// Join this many copies of the tables, the keys of copy c shifted by c times one more than
    /// the largest key, so that both tables stay sorted and no order meets another copy's lines: tables of
    /// N × SF rows with SF's distributions (where generating N × SF would not fit the host or
    /// the time), whose answer is N times SF's.
    #[arg(long, default_value = "1", value_parser = clap::value_parser!(u32).range(1..=1000))]
    replicate: u32,
    /// Read `orders.parquet` and `lineitem.parquet` from this folder instead of generating:
    /// integer keys, `Date32` (or integer day) dates, the priority as text or as its code.
    #[arg(long)]
    parquet: Option<PathBuf>,
    /// Write the generated columns as `orders.parquet` and `lineitem.parquet` into this folder
    /// (dates as `Date32`, priorities as text), e.g. to run the spec's Q4 text in DuckDB on
    /// the same data.
    #[arg(long)]
    write_parquet: Option<PathBuf>,
}

/// Where the columns live while the query runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Inputs {
    /// Device memory, uploaded before the clock starts.
    Device,
    /// Pinned host memory, streamed to the GPU inside the timed query.
    Host,
}

/// How the plan semi-joins orders with lineitem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum SemiJoin {
    /// A merge of the two sorted key columns ([`SortedMatch`]).
    Sorted,
    /// Compaction of both sides and joinkit's left semi join (`Algorithm::Auto`).
    Hash,
}

/// The plot of tpch-q4: the query's time against the scale factor, a line per strategy.
pub(crate) const PLOT: PlotSpec = PlotSpec {
    table: "tpch-q4",
    x: "sf",
    x_label: "scale factor",
    y: &["total ms"],
    y_label: "ms (TPC-H Q4, columns in device memory)",
    series: &["semi join"],
};

/// Parses `YYYY-MM-DD` into days since 1970-01-01.
pub(crate) fn parse_date(s: &str) -> std::result::Result<i32, String> {
    let bad = || format!("a date is written YYYY-MM-DD, not {s:?}");
    let mut parts = s.trim().splitn(3, '-').map(str::parse::<i32>);
    let (Some(Ok(y)), Some(Ok(m)), Some(Ok(d))) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad());
    };
    if !(1..=9999).contains(&y) || !(1..=12).contains(&m) || d < 1 || d > days_in_month(y, m) {
        return Err(bad());
    }
    Ok(days_from_civil(y, m, d))
}

fn is_leap(y: i32) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i32, m: i32) -> i32 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(y: i32, m: i32, d: i32) -> i32 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(z: i32) -> (i32, i32, i32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i32::from(m <= 2), m, d)
}

/// `day + interval '3' month`, the day of the month kept (clamped to the month's last day, as
/// SQL engines do).
pub(crate) fn plus_three_months(day: i32) -> i32 {
    let (y, m, d) = civil_from_days(day);
    let (y, m) = if m > 9 { (y + 1, m - 9) } else { (y, m + 3) };
    days_from_civil(y, m, d.min(days_in_month(y, m)))
}

/// Q4's columns on a backend.
pub(crate) struct Q4Tables<B: Backend> {
    o_orderkey: B::Buf<u64>,
    o_orderdate: B::Buf<i32>,
    o_orderpriority: B::Buf<u32>,
    l_orderkey: B::Buf<u64>,
    l_commitdate: B::Buf<i32>,
    l_receiptdate: B::Buf<i32>,
}

impl<B: Backend> Q4Tables<B> {
    /// Uploads `copies` copies of the host columns (see `--replicate`), each column assembled
    /// on the device from one upload a copy (keys) or one upload in all (the rest): the host
    /// holds one copy, the device one column's upload beside the tables.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when a table's columns differ in length;
    /// [`Error::SizeOverflow`] when the copies' rows or shifted keys overflow; allocation and
    /// driver errors.
    pub(crate) fn upload(b: &B, c: &Q4Columns, copies: usize) -> Result<Self> {
        let (orders, lines) = (c.o_orderkey.len(), c.l_orderkey.len());
        Error::check_len("o_orderdate vs o_orderkey", orders, c.o_orderdate.len())?;
        Error::check_len(
            "o_orderpriority vs o_orderkey",
            orders,
            c.o_orderpriority.len(),
        )?;
        Error::check_len("l_commitdate vs l_orderkey", lines, c.l_commitdate.len())?;
        Error::check_len("l_receiptdate vs l_orderkey", lines, c.l_receiptdate.len())?;
        let span = key_span(c, copies)?;
        let keys = |k: &[u64]| -> Result<B::Buf<u64>> {
            copied(b, k.len(), copies, |copy| {
                let shift = span * copy as u64;
                b.upload(&k.par_iter().map(|v| v + shift).collect::<Vec<_>>())
            })
        };
        Ok(Self {
            o_orderkey: keys(&c.o_orderkey)?,
            o_orderdate: same(b, &c.o_orderdate, copies)?,
            o_orderpriority: same(b, &c.o_orderpriority, copies)?,
            l_orderkey: keys(&c.l_orderkey)?,
            l_commitdate: same(b, &c.l_commitdate, copies)?,
            l_receiptdate: same(b, &c.l_receiptdate, copies)?,
        })
    }

    fn rows(&self) -> (usize, usize) {
        (self.o_orderkey.len(), self.l_orderkey.len())
    }
}

/// The shift between copies of the tables (`--replicate`): one more than the largest key.
///
/// # Errors
/// [`Error::SizeOverflow`] when the last copy's keys would pass `u64::MAX`.
fn key_span(c: &Q4Columns, copies: usize) -> Result<u64> {
    let top = c
        .o_orderkey
        .iter()
        .chain(&c.l_orderkey)
        .max()
        .copied()
        .unwrap_or(0);
    let span = top
        .checked_add(1)
        .ok_or(Error::SizeOverflow("shifted keys"))?;
    let last = span.checked_mul(copies.saturating_sub(1) as u64);
    match last.and_then(|s| s.checked_add(top)) {
        Some(_) => Ok(span),
        None => Err(Error::SizeOverflow("shifted keys").into()),
    }
}

/// A device column of `copies` copies of `len` rows, copy `c` uploaded by `piece(c)`.
fn copied<B: Backend, T: Element>(
    b: &B,
    len: usize,
    copies: usize,
    piece: impl Fn(usize) -> joinkit_cuda::Result<B::Buf<T>>,
) -> Result<B::Buf<T>> {
    if copies == 1 {
        return Ok(piece(0)?);
    }
    let rows = len
        .checked_mul(copies)
        .ok_or(Error::SizeOverflow("replicated rows"))?;
    let mut out = b.alloc::<T>(rows)?;
    for copy in 0..copies {
        b.copy_into(&piece(copy)?, &mut out, copy * len)?;
    }
    Ok(out)
}

/// `copies` copies of a column that needs no shift: one upload, then device copies.
fn same<B: Backend, T: Element>(b: &B, host: &[T], copies: usize) -> Result<B::Buf<T>> {
    let one = b.upload(host)?;
    if copies == 1 {
        return Ok(one);
    }
    let rows = host
        .len()
        .checked_mul(copies)
        .ok_or(Error::SizeOverflow("replicated rows"))?;
    let mut out = b.alloc::<T>(rows)?;
    for copy in 0..copies {
        b.copy_into(&one, &mut out, copy * host.len())?;
    }
    Ok(out)
}

/// Q4's answer (orders a priority, in [`PRIORITIES`] order) and how the plan went.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Q4Run {
    pub(crate) counts: [u64; 5],
    /// The strategy that ran: `Hash` where `Sorted` met tables out of order.
    pub(crate) semi_join: SemiJoin,
    /// Milliseconds of filter, semi join and group by.
    pub(crate) phases_ms: [f64; 3],
}

/// Every backend Q4 runs on.
pub(crate) trait Q4Backend:
    JoinBackend + Filter + SortedMatch + Compact + Histogram
{
}
impl<B: JoinBackend + Filter + SortedMatch + Compact + Histogram> Q4Backend for B {}

impl Q4Run {
    /// The query's time: its phases' sum.
    pub(crate) fn total_ms(&self) -> f64 {
        self.phases_ms.iter().sum()
    }
}

/// The group-by's five bins as counts.
fn priority_counts(bins: &[u32]) -> [u64; 5] {
    let mut counts = [0u64; 5];
    counts
        .iter_mut()
        .zip(bins)
        .for_each(|(c, n)| *c = u64::from(*n));
    counts
}

/// Runs Q4 for the quarter starting at `date` (days since 1970) with `semi_join`.
///
/// # Errors
/// Allocation and driver errors; joinkit's errors from the semi join.
pub(crate) fn q4<B: Q4Backend>(
    b: &B,
    t: &Q4Tables<B>,
    date: i32,
    semi_join: SemiJoin,
) -> joinkit_cuda::Result<Q4Run> {
    let (o_flags, mut filter_ms) =
        b.timed(|| b.flag_range(&t.o_orderdate, date..plus_three_months(date)))?;
    // Sorted: the lineitem predicate is evaluated inside the merge, for the lines of the
    // quarter's orders only.
    let sorted = || -> joinkit_cuda::Result<Option<B::Buf<u32>>> {
        let mut marks = b.alloc::<u32>(t.o_orderkey.len())?;
        b.fill(&mut marks, 0)?;
        match b.mark_sorted_matches_where_less(
            &t.o_orderkey,
            Some(&o_flags),
            &t.l_orderkey,
            &t.l_commitdate,
            &t.l_receiptdate,
            &mut marks,
        ) {
            Ok(()) => Ok(Some(b.compact(&[&t.o_orderpriority], &marks)?.remove(0))),
            Err(Error::InvalidArgument(_)) => Ok(None), // out of order: the hash join takes it
            Err(e) => Err(e),
        }
    };
    let hash = |l_flags: &B::Buf<u32>| -> joinkit_cuda::Result<B::Buf<u32>> {
        let keys = b.compact(&[&t.o_orderkey], &o_flags)?.remove(0);
        let priorities = b.compact(&[&t.o_orderpriority], &o_flags)?.remove(0);
        let left = Table::new(keys, vec![Column::U32(priorities)])?;
        let right = Table::new(b.compact(&[&t.l_orderkey], l_flags)?.remove(0), vec![])?;
        let (joined, _) = join_columns(b, &left, &right, &JoinOptions::new(JoinKind::LeftSemi))?;
        match joined.left.into_iter().next() {
            Some(Column::U32(p)) => Ok(p),
            _ => Err(Error::InvalidArgument(
                "the semi join lost the priority column".into(),
            )),
        }
    };
    let mut semi_ms = 0.0;
    let mut ran = None;
    if semi_join == SemiJoin::Sorted {
        let (p, ms) = b.timed(sorted)?;
        semi_ms += ms; // a fallback counts the failed try
        ran = p.map(|p| (p, SemiJoin::Sorted));
    }
    let (priorities, ran) = match ran {
        Some(done) => done,
        None => {
            let (l_flags, ms) = b.timed(|| b.flag_less(&t.l_commitdate, &t.l_receiptdate))?;
            filter_ms += ms;
            let (p, ms) = b.timed(|| hash(&l_flags))?;
            semi_ms += ms;
            (p, SemiJoin::Hash)
        }
    };
    let (bins, group_ms) = b.timed(|| b.histogram_even(&priorities, 5, 0u32, 5))?;
    Ok(Q4Run {
        counts: priority_counts(&b.download(&bins)?),
        semi_join: ran,
        phases_ms: [filter_ms, semi_ms, group_ms],
    })
}

pub(crate) fn run(device: &Device, args: &TpchQ4Args, ctx: &mut Ctx) -> Result<()> {
    let columns = match &args.parquet {
        Some(dir) => read_parquet(dir)?,
        None => q4_columns(args.sf.unwrap_or(if matches!(device, Device::Cpu(_)) {
            1.0
        } else {
            10.0
        }))?,
    };
    if let Some(dir) = &args.write_parquet {
        write_parquet(dir, &columns)?;
    }
    if !args.gpus.is_empty() {
        #[cfg(feature = "cuda")]
        return multi::measure(columns, args, ctx);
        #[cfg(not(feature = "cuda"))]
        return Err(BenchError::Usage(
            "--gpus needs a build with the cuda feature".into(),
        ));
    }
    match (args.inputs, device) {
        (Inputs::Device, _) => with_backend!(device, b => measure(b, &columns, args, ctx)),
        #[cfg(feature = "cuda")]
        (Inputs::Host, Device::Cuda(g)) => host::measure(g, columns, args, ctx),
        (Inputs::Host, _) => Err(BenchError::Usage(
            "--inputs host streams host memory to a GPU; on the CPU every column is in host \
             memory already (--inputs device)"
                .into(),
        )),
    }
}

fn measure<B: Q4Backend>(
    b: &B,
    columns: &Q4Columns,
    args: &TpchQ4Args,
    ctx: &mut Ctx,
) -> Result<()> {
    let t = Q4Tables::upload(b, columns, args.replicate as usize)?;
    let (orders, lines) = t.rows();
    // Input bytes: every column once (8-byte keys, 4-byte dates and codes).
    let bytes = (orders * 16 + lines * 16) as f64;
    let (copy_gbs, _) = ctx.copy_bandwidth(b, 1 << 28, 10)?;
    let floor_ms = bytes / (copy_gbs * 1e9) * 1e3;
    let runs = ctx.runs(10);
    for &semi in &args.semi_join {
        b.reset_peak_memory();
        let ((), median) = median_run(
            runs,
            || Ok(((), q4(b, &t, args.date, semi)?)),
            Q4Run::total_ms,
        )?;
        let total = median.total_ms();
        let peak = b.memory().map(|m| m.peak_bytes as f64 / f64::from(1 << 20));
        let mut row = Row::new("tpch-q4")
            .with("sf", args.sf.map_or("files".to_string(), |s| s.to_string()))
            .with("date", {
                let (y, m, d) = civil_from_days(args.date);
                format!("{y:04}-{m:02}-{d:02}")
            })
            .with(
                "semi join",
                format!("{:?}", median.semi_join).to_lowercase(),
            )
            .with("orders", orders)
            .with("lineitems", lines);
        for (name, n) in PRIORITIES.iter().zip(median.counts) {
            row = row.with(name, n);
        }
        ctx.report.row(
            row.with("total ms", total)
                .with("filter ms", median.phases_ms[0])
                .with("semi join ms", median.phases_ms[1])
                .with("group ms", median.phases_ms[2])
                .with("input GB/s", bytes / (total * 1e-3) / 1e9)
                .with("floor ms", floor_ms)
                .with("x floor", total / floor_ms)
                .with_opt("peak MiB", peak),
        );
    }
    Ok(())
}

/// Q4 over columns in pinned host memory.
#[cfg(feature = "cuda")]
mod host;

/// The tables split into `parts` by order key: `orders` in parts of equal rows, `lineitem` at
/// the first line of each part's first order, so every line lies with its order.
///
/// # Errors
/// [`Error::InvalidArgument`] when `o_orderkey` is not strictly ascending or `l_orderkey` not
/// ascending (a split by key would separate lines from their orders), or for no parts.
#[cfg(any(feature = "cuda", test))] // the multi-GPU run and its test
pub(crate) fn split_by_order(c: &Q4Columns, parts: usize) -> Result<Vec<Q4Columns>> {
    if parts == 0 {
        return Err(Error::InvalidArgument("split into no parts".into()).into());
    }
    let sorted = !c.o_orderkey.par_windows(2).any(|w| w[0] >= w[1])
        && !c.l_orderkey.par_windows(2).any(|w| w[0] > w[1]);
    if !sorted {
        return Err(Error::InvalidArgument(
            "splitting Q4 over GPUs needs orders and lineitem sorted by order key".into(),
        )
        .into());
    }
    let n = c.o_orderkey.len();
    let order_at = |p: usize| p * n / parts;
    let line_at = |p: usize| match p {
        0 => 0,
        p if p == parts => c.l_orderkey.len(),
        p => c
            .l_orderkey
            .partition_point(|k| *k < c.o_orderkey.get(order_at(p)).copied().unwrap_or(u64::MAX)),
    };
    Ok((0..parts)
        .map(|p| {
            let (o, l) = (order_at(p)..order_at(p + 1), line_at(p)..line_at(p + 1));
            Q4Columns {
                o_orderkey: c.o_orderkey[o.clone()].to_vec(),
                o_orderdate: c.o_orderdate[o.clone()].to_vec(),
                o_orderpriority: c.o_orderpriority[o].to_vec(),
                l_orderkey: c.l_orderkey[l.clone()].to_vec(),
                l_commitdate: c.l_commitdate[l.clone()].to_vec(),
                l_receiptdate: c.l_receiptdate[l].to_vec(),
            }
        })
        .collect())
}

/// Q4 on several GPUs.
#[cfg(feature = "cuda")]
mod multi;

mod parquet_io;
use parquet_io::{read_parquet, write_parquet};

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use joinkit_cuda::CpuBackend;

    use super::*;

    /// The plain reference: a hash set of the quarter's orders, the lines that qualify, a count.
    fn reference(c: &Q4Columns, date: i32) -> [u64; 5] {
        let end = plus_three_months(date);
        let orders: HashMap<u64, u32> = (0..c.o_orderkey.len())
            .filter(|&i| (date..end).contains(&c.o_orderdate[i]))
            .map(|i| (c.o_orderkey[i], c.o_orderpriority[i]))
            .collect();
        let late: HashSet<u64> = (0..c.l_orderkey.len())
            .filter(|&j| {
                c.l_commitdate[j] < c.l_receiptdate[j] && orders.contains_key(&c.l_orderkey[j])
            })
            .map(|j| c.l_orderkey[j])
            .collect();
        let mut counts = [0u64; 5];
        late.iter().for_each(|k| counts[orders[k] as usize] += 1);
        counts
    }

    /// Every quarter of the seven years (1992-01 … 1998-10).
    fn quarters() -> impl Iterator<Item = i32> {
        (1992..=1998).flat_map(|y| [1, 4, 7, 10].map(move |m| days_from_civil(y, m, 1)))
    }

    fn check_every_quarter<B: Q4Backend>(b: &B, c: &Q4Columns) {
        let t = Q4Tables::upload(b, c, 1).unwrap();
        for date in quarters() {
            let want = reference(c, date);
            for semi in [SemiJoin::Sorted, SemiJoin::Hash] {
                let got = q4(b, &t, date, semi).unwrap();
                assert_eq!(got.counts, want, "{date} {semi:?}");
                assert_eq!(got.semi_join, semi);
            }
        }
    }

    #[test]
    fn every_quarter_equals_the_reference_at_sf_0_1() {
        every_quarter_on_both_backends(0.1);
    }

    /// SF 1, every quarter: run by the GPU suite (`--ignored`, release build); minutes in a
    /// debug build on two cores.
    #[test]
    #[ignore]
    fn every_quarter_equals_the_reference_at_sf_1() {
        every_quarter_on_both_backends(1.0);
    }

    fn every_quarter_on_both_backends(sf: f64) {
        let c = q4_columns(sf).unwrap();
        check_every_quarter(&CpuBackend::new(), &c);
        if let Some(g) = &joinkit_cuda::testing::gpu_or_skip("tpch_q4_every_quarter") {
            check_every_quarter(g, &c);
        }
    }

    /// The spec's validation answer at SF 1 (TPC-H 2.18, Q4: 1993-07-01).
    #[test]
    fn validation_date_gives_the_spec_answer_at_sf_1() {
        let c = q4_columns(1.0).unwrap();
        let t = Q4Tables::upload(&CpuBackend::new(), &c, 1).unwrap();
        let got = q4(
            &CpuBackend::new(),
            &t,
            parse_date("1993-07-01").unwrap(),
            SemiJoin::Sorted,
        )
        .unwrap();
        assert_eq!(got.counts, [10594, 10476, 10410, 10556, 10487]);
    }

    /// Tables out of order: the sorted plan falls back to the hash join, same answer.
    #[test]
    fn unsorted_tables_fall_back_to_the_hash_join() {
        let mut c = q4_columns(0.01).unwrap();
        c.o_orderkey.reverse();
        c.o_orderdate.reverse();
        c.o_orderpriority.reverse();
        let date = parse_date("1994-01-01").unwrap();
        let cpu = CpuBackend::new();
        let got = q4(
            &cpu,
            &Q4Tables::upload(&cpu, &c, 1).unwrap(),
            date,
            SemiJoin::Sorted,
        )
        .unwrap();
        assert_eq!(got.semi_join, SemiJoin::Hash);
        assert_eq!(got.counts, reference(&c, date));
    }

    /// Copies with shifted keys: both tables stay sorted (the merge runs, no fallback) and
    /// the answer is the copies times one copy's, on both backends.
    #[test]
    fn replicated_tables_answer_copies_times() {
        let c = q4_columns(0.01).unwrap();
        let date = parse_date("1995-04-01").unwrap();
        let one = reference(&c, date);
        let check = |b: &dyn Fn(usize) -> Q4Run| {
            let got = b(3);
            assert_eq!(got.semi_join, SemiJoin::Sorted);
            assert_eq!(got.counts, one.map(|n| 3 * n));
        };
        let cpu = CpuBackend::new();
        check(&|n| {
            q4(
                &cpu,
                &Q4Tables::upload(&cpu, &c, n).unwrap(),
                date,
                SemiJoin::Sorted,
            )
            .unwrap()
        });
        if let Some(g) = &joinkit_cuda::testing::gpu_or_skip("tpch_q4_replicated") {
            check(&|n| {
                q4(
                    g,
                    &Q4Tables::upload(g, &c, n).unwrap(),
                    date,
                    SemiJoin::Sorted,
                )
                .unwrap()
            });
        }
    }

    /// Streamed from pinned host memory, raw or compressed, in chunks of odd sizes (many,
    /// one, a partial last), and compressed copies with shifted keys: the reference's answer
    /// (times the copies) for four quarters.
    #[cfg(feature = "cuda")]
    #[test]
    fn streamed_from_host_memory_equals_in_memory() {
        let Some(g) = joinkit_cuda::testing::gpu_or_skip("tpch_q4_streamed") else {
            return;
        };
        let c = q4_columns(0.01).unwrap();
        for (packed, copies) in [(false, 1), (true, 1), (true, 3)] {
            for chunk in [997, 1 << 14, c.l_orderkey.len(), usize::MAX / 2] {
                let h = host::PinnedQ4::pin(&g, &c, packed, copies, chunk).unwrap();
                for date in (1..=10).step_by(3).map(|m| days_from_civil(1996, m, 1)) {
                    let got = host::q4_streamed(&g, &h, date).unwrap();
                    let want = reference(&c, date).map(|n| n * copies as u64);
                    assert_eq!(got.counts, want, "{date} {chunk} {packed} {copies}");
                }
            }
        }
        assert!(host::PinnedQ4::pin(&g, &c, false, 1, 0).is_err());
        assert!(host::PinnedQ4::pin(&g, &c, false, 2, 1 << 14).is_err());
    }

    /// Parts split by order key answer, summed, what the whole tables answer; out-of-order
    /// tables are refused, not split wrongly.
    #[test]
    fn split_parts_sum_to_the_whole() {
        let c = q4_columns(0.01).unwrap();
        let cpu = CpuBackend::new();
        let date = parse_date("1996-07-01").unwrap();
        for parts in [1, 2, 3, 7] {
            let mut sum = [0u64; 5];
            for p in split_by_order(&c, parts).unwrap() {
                let got = q4(
                    &cpu,
                    &Q4Tables::upload(&cpu, &p, 1).unwrap(),
                    date,
                    SemiJoin::Sorted,
                );
                sum.iter_mut()
                    .zip(got.unwrap().counts)
                    .for_each(|(s, n)| *s += n);
            }
            assert_eq!(sum, reference(&c, date), "{parts}");
        }
        let mut unsorted = c.clone();
        unsorted.l_orderkey.swap(0, 100);
        assert!(split_by_order(&unsorted, 2).is_err());
        assert!(split_by_order(&c, 0).is_err());
    }

    #[test]
    fn dates_parse_and_add_months() {
        assert_eq!(parse_date("1970-01-01"), Ok(0));
        assert_eq!(parse_date("1992-01-01"), Ok(8035));
        let d = parse_date("1993-07-01").unwrap();
        assert_eq!(plus_three_months(d), parse_date("1993-10-01").unwrap());
        assert_eq!(
            plus_three_months(parse_date("1997-10-01").unwrap()),
            parse_date("1998-01-01").unwrap()
        );
        assert_eq!(
            plus_three_months(parse_date("2000-11-30").unwrap()),
            parse_date("2001-02-28").unwrap()
        );
        for bad in ["1993-02-29", "1993-13-01", "1993-7", "x", "1993-00-10"] {
            assert!(parse_date(bad).is_err(), "{bad}");
        }
        assert_eq!(
            civil_from_days(parse_date("2024-02-29").unwrap()),
            (2024, 2, 29)
        );
    }

    #[test]
    fn parquet_round_trip_keeps_the_answer() {
        let c = q4_columns(0.01).unwrap();
        let dir = std::env::temp_dir().join(format!("joinkit-q4-{}", std::process::id()));
        write_parquet(&dir, &c).unwrap();
        let back = read_parquet(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(back, c);
    }
}
