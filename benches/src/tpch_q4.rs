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

use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, Date32Array, Int32Array, Int64Array, StringArray, UInt32Array, types,
};
use arrow_schema::{DataType, Field};
use clap::{Args, ValueEnum};
use joinkit::{Column, JoinBackend, JoinKind, JoinOptions, Table, join_columns};
use joinkit_cuda::{Backend, Buffer, Device, Element, Error, with_backend};
use joinkit_datagen::tpch::{Q4Columns, q4_columns};
use joinkit_primitives::{Compact, Filter, Histogram, SortedMatch};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rayon::prelude::*;

use crate::error::{BenchError, Result};
use crate::files;
use crate::measure::{Ctx, parse_scale_factor_up_to};
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

/// Runs Q4 for the quarter starting at `date` (days since 1970) with `semi_join`.
///
/// # Errors
/// Allocation and driver errors; joinkit's errors from the semi join.
pub(crate) fn q4<B: Q4Backend>(
    b: &B,
    t: &Q4Tables<B>,
    date: i32,
    semi_join: SemiJoin,
) -> Result<Q4Run> {
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
    let bins = b.download(&bins)?;
    let mut counts = [0u64; 5];
    counts
        .iter_mut()
        .zip(&bins)
        .for_each(|(c, n)| *c = u64::from(*n));
    Ok(Q4Run {
        counts,
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
        for _ in 0..runs.warmup {
            q4(b, &t, args.date, semi)?;
        }
        let mut all = (0..runs.repeat)
            .map(|_| q4(b, &t, args.date, semi))
            .collect::<Result<Vec<_>>>()?;
        all.sort_by(|a, c| {
            a.phases_ms
                .iter()
                .sum::<f64>()
                .total_cmp(&c.phases_ms.iter().sum())
        });
        let median = all.swap_remove(all.len() / 2);
        let total: f64 = median.phases_ms.iter().sum();
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

/// Q4 over columns in pinned host memory, streamed to the GPU inside the query's time.
#[cfg(feature = "cuda")]
mod host {
    use std::ops::Range;
    use std::sync::Arc;

    use joinkit_codec::{Codec, CodecOptions, SelectorConfig};
    use joinkit_cuda::cudarc::driver::{CudaEvent, CudaStream};
    use joinkit_cuda::{CudaBackend, DeviceBuffer, PinnedBuffer, driver};
    use joinkit_primitives::cuda::{OrderCheck, mark_sorted_matches_where_less};

    use super::*;

    /// A column in pinned host memory: raw, or one cascaded stream a chunk of rows.
    enum HostColumn<T: Element> {
        Raw(PinnedBuffer<T>),
        Packed {
            words: PinnedBuffer<u64>,
            /// Each chunk's stream (word range) and rows, in row order; copies of a column that
            /// needs no shift point at the same words.
            chunks: Vec<(Range<usize>, Range<usize>)>,
        },
    }

    impl<T: Element> HostColumn<T> {
        /// Bytes a query moves over the host link for this column.
        fn link_bytes(&self) -> usize {
            match self {
                HostColumn::Raw(p) => p.len() * size_of::<T>(),
                HostColumn::Packed { chunks, .. } => chunks.iter().map(|c| c.0.len() * 8).sum(),
            }
        }
    }

    /// `copies` copies of `host` (keys of copy c plus c × `shift`), compressed on the GPU in
    /// streams of `chunk_rows` rows with a scheme sampled from the column, kept pinned.
    fn pack<T: Element>(
        g: &CudaBackend,
        host: &[T],
        copies: usize,
        shift: Option<fn(T, u64) -> T>,
        span: u64,
        chunk_rows: usize,
    ) -> Result<HostColumn<T>> {
        let bounds: Vec<usize> = (0..host.len())
            .step_by(chunk_rows)
            .chain([host.len()])
            .collect();
        let encode = |col: &[T]| -> Result<(Vec<u64>, Vec<Range<usize>>)> {
            let dev = g.upload(col)?;
            let scheme = g.select_scheme(&dev, &SelectorConfig::default())?.scheme;
            let (words, ranges) =
                g.compress_many(&dev, &bounds, &scheme, &CodecOptions::default())?;
            Ok((g.download(&words)?, ranges))
        };
        let mut all = Vec::new();
        let mut chunks = Vec::new();
        let mut once = None;
        for copy in 0..copies {
            let rows = copy * host.len();
            let (at, ranges) = match (shift, &once) {
                (Some(f), _) => {
                    let c = copy as u64 * span;
                    let (words, ranges) =
                        encode(&host.par_iter().map(|v| f(*v, c)).collect::<Vec<_>>())?;
                    let at = all.len();
                    all.extend_from_slice(&words);
                    (at, ranges)
                }
                (None, Some(ranges)) => (0, Vec::clone(ranges)),
                (None, None) => {
                    let (words, ranges) = encode(host)?;
                    all = words;
                    once = Some(ranges.clone());
                    (0, ranges)
                }
            };
            for (k, r) in ranges.into_iter().enumerate() {
                chunks.push((
                    at + r.start..at + r.end,
                    rows + bounds[k]..rows + bounds[k + 1],
                ));
            }
        }
        Ok(HostColumn::Packed {
            words: g.pin(&all)?,
            chunks,
        })
    }

    /// Q4's columns in pinned host memory.
    pub(super) struct PinnedQ4 {
        o_orderkey: HostColumn<u64>,
        o_orderdate: HostColumn<i32>,
        o_orderpriority: HostColumn<u32>,
        l_orderkey: HostColumn<u64>,
        l_commitdate: HostColumn<i32>,
        l_receiptdate: HostColumn<i32>,
        orders: usize,
        lines: usize,
        /// Lineitem's chunks (rows), the same for its three columns.
        line_chunks: Vec<Range<usize>>,
    }

    impl PinnedQ4 {
        /// Pins the columns raw (`packed` false, one copy) or compressed, `copies` times with
        /// shifted keys (as `--replicate`), lineitem in chunks of `chunk_rows` rows.
        pub(super) fn pin(
            g: &CudaBackend,
            c: &Q4Columns,
            packed: bool,
            copies: usize,
            chunk_rows: usize,
        ) -> Result<Self> {
            let (n, m) = (c.o_orderkey.len(), c.l_orderkey.len());
            Error::check_len("o_orderdate", n, c.o_orderdate.len())?;
            Error::check_len("o_orderpriority", n, c.o_orderpriority.len())?;
            Error::check_len("l_commitdate", m, c.l_commitdate.len())?;
            Error::check_len("l_receiptdate", m, c.l_receiptdate.len())?;
            if chunk_rows == 0 {
                return Err(BenchError::Usage("--chunk-rows must be at least 1".into()));
            }
            let (orders, lines) = (n * copies, m * copies);
            let line_chunks: Vec<Range<usize>> = (0..copies)
                .flat_map(|copy| {
                    (0..m)
                        .step_by(chunk_rows)
                        .map(move |s| copy * m + s..copy * m + (s + chunk_rows).min(m))
                })
                .collect();
            if !packed {
                if copies != 1 {
                    return Err(BenchError::Usage(
                        "--replicate with --inputs host needs --compress".into(),
                    ));
                }
                return Ok(Self {
                    o_orderkey: HostColumn::Raw(g.pin(&c.o_orderkey)?),
                    o_orderdate: HostColumn::Raw(g.pin(&c.o_orderdate)?),
                    o_orderpriority: HostColumn::Raw(g.pin(&c.o_orderpriority)?),
                    l_orderkey: HostColumn::Raw(g.pin(&c.l_orderkey)?),
                    l_commitdate: HostColumn::Raw(g.pin(&c.l_commitdate)?),
                    l_receiptdate: HostColumn::Raw(g.pin(&c.l_receiptdate)?),
                    orders,
                    lines,
                    line_chunks,
                });
            }
            let span = key_span(c, copies)?;
            let shifted: Option<fn(u64, u64) -> u64> = Some(|k, s| k + s);
            let orders_chunk = n.max(1); // orders are decoded whole: one stream a copy
            Ok(Self {
                o_orderkey: pack(g, &c.o_orderkey, copies, shifted, span, orders_chunk)?,
                o_orderdate: pack(g, &c.o_orderdate, copies, None, span, orders_chunk)?,
                o_orderpriority: pack(g, &c.o_orderpriority, copies, None, span, orders_chunk)?,
                l_orderkey: pack(g, &c.l_orderkey, copies, shifted, span, chunk_rows)?,
                l_commitdate: pack(g, &c.l_commitdate, copies, None, span, chunk_rows)?,
                l_receiptdate: pack(g, &c.l_receiptdate, copies, None, span, chunk_rows)?,
                orders,
                lines,
                line_chunks,
            })
        }

        /// Bytes the query moves over the host link.
        pub(super) fn link_bytes(&self) -> usize {
            self.o_orderkey.link_bytes()
                + self.o_orderdate.link_bytes()
                + self.o_orderpriority.link_bytes()
                + self.l_orderkey.link_bytes()
                + self.l_commitdate.link_bytes()
                + self.l_receiptdate.link_bytes()
        }
    }

    type Stream = Arc<CudaStream>;

    fn event(s: &Stream) -> joinkit_cuda::Result<CudaEvent> {
        s.record_event(None).map_err(driver("recording an event"))
    }

    fn wait(s: &Stream, e: &CudaEvent) -> joinkit_cuda::Result<()> {
        s.wait(e).map_err(driver("waiting for an event"))
    }

    /// A packed column's streams on the device, all copied up front on the copy stream (the
    /// device holds them compressed), an event after each chunk's.
    struct OnDevice {
        words: DeviceBuffer<u64>,
        /// Each chunk's stream in `words`.
        streams: Vec<Range<usize>>,
    }

    /// Device room for a packed column's streams (nothing for a raw one).
    fn alloc_packed<T: Element>(
        g: &CudaBackend,
        col: &HostColumn<T>,
    ) -> joinkit_cuda::Result<Option<OnDevice>> {
        let HostColumn::Packed { chunks, .. } = col else {
            return Ok(None);
        };
        let mut streams = Vec::with_capacity(chunks.len());
        let mut at = 0;
        for (w, _) in chunks {
            streams.push(at..at + w.len());
            at += w.len();
        }
        Ok(Some(OnDevice {
            words: g.alloc::<u64>(at)?,
            streams,
        }))
    }

    /// Queues the copy of stream `k` of a packed column on `copy`.
    fn copy_stream<T: Element>(
        col: &HostColumn<T>,
        d: &mut OnDevice,
        k: usize,
        copy: &Stream,
    ) -> joinkit_cuda::Result<()> {
        if let HostColumn::Packed { words, chunks } = col {
            let to = d.streams[k].clone();
            words.copy_range_to(
                chunks[k].0.clone(),
                &mut d.words.view_mut().slice_mut(to),
                copy,
            )?;
        }
        Ok(())
    }

    /// Queues the copy of a whole column: raw straight into `out`, packed as its streams into
    /// the room `alloc_packed` made.
    fn fetch_whole<T: Element>(
        col: &HostColumn<T>,
        packed: Option<&mut OnDevice>,
        out: &mut DeviceBuffer<T>,
        copy: &Stream,
    ) -> joinkit_cuda::Result<()> {
        match (col, packed) {
            (HostColumn::Raw(p), _) => p.copy_range_to(0..p.len(), &mut out.view_mut(), copy),
            (HostColumn::Packed { .. }, Some(d)) => {
                (0..d.streams.len()).try_for_each(|k| copy_stream(col, d, k, copy))
            }
            (HostColumn::Packed { .. }, None) => Err(Error::InvalidArgument(
                "a packed column without its device room".into(),
            )),
        }
    }

    /// Waits for a stream when dropped.
    struct SyncOnDrop<'a>(&'a Stream);

    impl Drop for SyncOnDrop<'_> {
        fn drop(&mut self) {
            // An error here is the context's, reported by its next call.
            let _ = self.0.synchronize();
        }
    }

    /// Decodes a whole packed column (one stream a copy, the copies in row order) into `out`.
    fn decode_whole<T: Element>(
        g: &CudaBackend,
        d: Option<&OnDevice>,
        out: &mut DeviceBuffer<T>,
    ) -> joinkit_cuda::Result<()> {
        let Some(d) = d.filter(|d| !d.streams.is_empty()) else {
            return Ok(());
        };
        let per = out.len() / d.streams.len();
        for k in 0..d.streams.len() {
            decode(
                g,
                d,
                k,
                &mut out.view_mut().slice_mut(k * per..(k + 1) * per),
            )?;
        }
        Ok(())
    }

    /// Decodes stream `k` of a packed column into `out` (on the compute stream; synchronizes
    /// it to read the stream's header).
    fn decode<T: Element>(
        g: &CudaBackend,
        d: &OnDevice,
        k: usize,
        out: &mut joinkit_cuda::cudarc::driver::CudaViewMut<'_, T>,
    ) -> joinkit_cuda::Result<()> {
        let view = d.words.view();
        let plan = joinkit_codec::cuda::plan_decompress::<T>(
            g,
            &view,
            std::slice::from_ref(&d.streams[k]),
            true,
        )?;
        joinkit_codec::cuda::finish_decompress(g, &view, &plan, out).map(drop)
    }

    /// Runs Q4 with the sorted plan from host memory: orders copied (and decoded) whole, then
    /// lineitem chunk by chunk, each chunk's merge overlapping the copies of the next ones
    /// (raw: two device chunk buffers, a chunk copied while the one before is merged; packed:
    /// every stream copied up front, each decoded when it has arrived); marks accumulate over
    /// chunks. Each chunk's order is checked; the order across chunk edges is the caller's
    /// promise.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for tables out of order; [`Error::Corrupt`] for streams that
    /// fail their checks; allocation and driver errors.
    pub(super) fn q4_streamed(
        g: &CudaBackend,
        h: &PinnedQ4,
        date: i32,
    ) -> joinkit_cuda::Result<Q4Run> {
        let compute = g.stream();
        let copy = compute.fork().map_err(driver("forking a copy stream"))?;
        let n = h.orders;
        let (run, ms) = g.timed(|| {
            // Every buffer the copy stream writes is allocated first, on the compute stream,
            // which the copy stream then waits for (also: it starts after the clock does).
            let mut keys = g.alloc::<u64>(n)?;
            let mut dates = g.alloc::<i32>(n)?;
            let mut priorities = g.alloc::<u32>(n)?;
            let mut packed_orders = (
                alloc_packed(g, &h.o_orderkey)?,
                alloc_packed(g, &h.o_orderdate)?,
                alloc_packed(g, &h.o_orderpriority)?,
            );
            let mut packed_lines = (
                alloc_packed(g, &h.l_orderkey)?,
                alloc_packed(g, &h.l_commitdate)?,
                alloc_packed(g, &h.l_receiptdate)?,
            );
            let rows = h
                .line_chunks
                .iter()
                .map(Range::len)
                .max()
                .unwrap_or(0)
                .max(1);
            let mut sets = Vec::with_capacity(2);
            for _ in 0..2 {
                sets.push((
                    g.alloc::<u64>(rows)?,
                    g.alloc::<i32>(rows)?,
                    g.alloc::<i32>(rows)?,
                    None::<CudaEvent>,
                ));
            }
            let mut marks = g.alloc::<u32>(n)?;
            g.fill(&mut marks, 0)?;
            wait(&copy, &event(compute)?)?;
            // Declared after the buffers, so dropped before them: whatever returns early, no
            // buffer goes back while the copy stream may still write into it.
            let _copies_done = SyncOnDrop(&copy);
            fetch_whole(&h.o_orderkey, packed_orders.0.as_mut(), &mut keys, &copy)?;
            fetch_whole(&h.o_orderdate, packed_orders.1.as_mut(), &mut dates, &copy)?;
            fetch_whole(
                &h.o_orderpriority,
                packed_orders.2.as_mut(),
                &mut priorities,
                &copy,
            )?;
            let orders_arrived = event(&copy)?;
            // Packed lineitem: every chunk's three streams queued now, an event after each
            // chunk; raw chunks are copied in the loop below, two buffers taking turns.
            let mut arrived = Vec::new();
            if let (Some(k), Some(c), Some(r)) = &mut packed_lines {
                for i in 0..h.line_chunks.len() {
                    copy_stream(&h.l_orderkey, k, i, &copy)?;
                    copy_stream(&h.l_commitdate, c, i, &copy)?;
                    copy_stream(&h.l_receiptdate, r, i, &copy)?;
                    arrived.push(event(&copy)?);
                }
            }
            wait(compute, &orders_arrived)?;
            decode_whole(g, packed_orders.0.as_ref(), &mut keys)?;
            decode_whole(g, packed_orders.1.as_ref(), &mut dates)?;
            decode_whole(g, packed_orders.2.as_ref(), &mut priorities)?;
            let o_flags = g.flag_range(&dates, date..plus_three_months(date))?;
            let mut check = OrderCheck::new(g)?;
            for (i, range) in h.line_chunks.iter().enumerate() {
                let len = range.len();
                let (lk, lc, lr, read) = &mut sets[i % 2];
                match (
                    &packed_lines,
                    &h.l_orderkey,
                    &h.l_commitdate,
                    &h.l_receiptdate,
                ) {
                    ((Some(k), Some(c), Some(r)), ..) => {
                        wait(compute, &arrived[i])?;
                        decode(g, k, i, &mut lk.view_mut().slice_mut(..len))?;
                        decode(g, c, i, &mut lc.view_mut().slice_mut(..len))?;
                        decode(g, r, i, &mut lr.view_mut().slice_mut(..len))?;
                    }
                    (_, HostColumn::Raw(k), HostColumn::Raw(c), HostColumn::Raw(r)) => {
                        if let Some(e) = read.as_ref() {
                            wait(&copy, e)?;
                        }
                        k.copy_range_to(range.clone(), &mut lk.view_mut().slice_mut(..len), &copy)?;
                        c.copy_range_to(range.clone(), &mut lc.view_mut().slice_mut(..len), &copy)?;
                        r.copy_range_to(range.clone(), &mut lr.view_mut().slice_mut(..len), &copy)?;
                        wait(compute, &event(&copy)?)?;
                    }
                    _ => {
                        return Err(Error::InvalidArgument(
                            "lineitem's columns are stored alike".into(),
                        ));
                    }
                }
                mark_sorted_matches_where_less(
                    g,
                    &keys.view(),
                    Some(&o_flags.view()),
                    &lk.view().slice(..len),
                    (&lc.view().slice(..len), &lr.view().slice(..len)),
                    &mut marks.view_mut(),
                    &mut check,
                )?;
                *read = Some(event(compute)?);
            }
            check.take(g)?;
            let joined = g.compact(&[&priorities], &marks)?.remove(0);
            g.histogram_even(&joined, 5, 0u32, 5)
        })?;
        let bins = g.download(&run)?;
        let mut counts = [0u64; 5];
        counts
            .iter_mut()
            .zip(&bins)
            .for_each(|(c, n)| *c = u64::from(*n));
        Ok(Q4Run {
            counts,
            semi_join: SemiJoin::Sorted,
            phases_ms: [0.0, ms, 0.0],
        })
    }
    /// Pinned host-to-device bandwidth in GB/s: 1 GiB copied, median of 5 after one.
    fn h2d_bandwidth(g: &CudaBackend) -> Result<f64> {
        let n = 1usize << 28;
        let host = g.pin(&vec![1u32; n])?;
        let mut dev = g.alloc::<u32>(n)?;
        let mut ms = (0..6)
            .map(|_| {
                g.timed(|| host.copy_range_to(0..n, &mut dev.view_mut(), g.stream()))
                    .map(|r| r.1)
            })
            .collect::<joinkit_cuda::Result<Vec<_>>>()?;
        ms.remove(0);
        ms.sort_by(f64::total_cmp);
        Ok((n * 4) as f64 / (ms[ms.len() / 2] * 1e-3) / 1e9)
    }

    pub(super) fn measure(
        g: &CudaBackend,
        columns: Q4Columns,
        args: &TpchQ4Args,
        ctx: &mut Ctx,
    ) -> Result<()> {
        if args.semi_join != [SemiJoin::Sorted] {
            return Err(BenchError::Usage(
                "--inputs host runs the sorted plan (--semi-join sorted)".into(),
            ));
        }
        let copies = args.replicate as usize;
        let h = PinnedQ4::pin(g, &columns, args.compress, copies, args.chunk_rows)?;
        drop(columns);
        // Floor: the bytes over the link at its measured rate; input bytes: the raw columns.
        let link = h.link_bytes() as f64;
        let input = ((h.orders + h.lines) * 16) as f64;
        let h2d_gbs = h2d_bandwidth(g)?;
        let floor_ms = link / (h2d_gbs * 1e9) * 1e3;
        let runs = ctx.runs(10);
        g.reset_peak_memory();
        for _ in 0..runs.warmup {
            q4_streamed(g, &h, args.date)?;
        }
        let mut all = (0..runs.repeat)
            .map(|_| q4_streamed(g, &h, args.date))
            .collect::<joinkit_cuda::Result<Vec<_>>>()?;
        all.sort_by(|a, c| a.phases_ms[1].total_cmp(&c.phases_ms[1]));
        let median = all.swap_remove(all.len() / 2);
        let total = median.phases_ms[1];
        let peak = g.memory().map(|m| m.peak_bytes as f64 / f64::from(1 << 20));
        let mut row = Row::new("tpch-q4")
            .with("sf", args.sf.map_or("files".to_string(), |s| s.to_string()))
            .with("copies", args.replicate)
            .with(
                "inputs",
                if args.compress {
                    "host, compressed"
                } else {
                    "host"
                },
            )
            .with("chunk rows", args.chunk_rows)
            .with("orders", h.orders)
            .with("lineitems", h.lines);
        for (name, n) in PRIORITIES.iter().zip(median.counts) {
            row = row.with(name, n);
        }
        ctx.report.row(
            row.with("total ms", total)
                .with("link GB", link / 1e9)
                .with("ratio", input / link)
                .with("input GB/s", input / (total * 1e-3) / 1e9)
                .with("H2D GB/s", h2d_gbs)
                .with("floor ms", floor_ms)
                .with("x floor", total / floor_ms)
                .with_opt("peak MiB", peak),
        );
        Ok(())
    }
}

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

/// Q4 on several GPUs of one process, a rank each, through NCCL.
#[cfg(feature = "cuda")]
mod multi {
    use joinkit_comm::nccl::NcclComm;
    use joinkit_comm::{CommConfig, Communicator, ReduceOp};
    use joinkit_cuda::CudaBackend;

    use super::*;

    /// One rank's runs: its time of each, and the summed counts.
    struct RankRuns {
        ms: Vec<f64>,
        counts: [u64; 5],
        rows: (usize, usize),
    }

    fn rank(
        b: &CudaBackend,
        comm: &NcclComm,
        part: &Q4Columns,
        args: &TpchQ4Args,
        runs: usize,
    ) -> Result<RankRuns> {
        let copies = args.replicate as usize;
        let mut run: Box<dyn FnMut() -> joinkit_cuda::Result<Q4Run>> = match args.inputs {
            Inputs::Device => {
                let t = Q4Tables::upload(b, part, copies)?;
                Box::new(move || {
                    q4(b, &t, args.date, SemiJoin::Sorted).map_err(|e| match e {
                        BenchError::Joinkit(e) => e,
                        e => Error::InvalidArgument(e.to_string()),
                    })
                })
            }
            Inputs::Host => {
                let h = host::PinnedQ4::pin(b, part, args.compress, copies, args.chunk_rows)?;
                Box::new(move || host::q4_streamed(b, &h, args.date))
            }
        };
        let mut ms = Vec::with_capacity(runs);
        let mut counts = [0u64; 5];
        for _ in 0..runs {
            comm.barrier()?; // every rank starts together
            let r = run()?;
            ms.push(r.phases_ms.iter().sum());
            let summed = comm.all_reduce(&r.counts, ReduceOp::Sum)?;
            counts.iter_mut().zip(summed).for_each(|(c, s)| *c = s);
        }
        let rows = (
            part.o_orderkey.len() * copies,
            part.l_orderkey.len() * copies,
        );
        Ok(RankRuns { ms, counts, rows })
    }

    pub(super) fn measure(columns: Q4Columns, args: &TpchQ4Args, ctx: &mut Ctx) -> Result<()> {
        if args.semi_join != [SemiJoin::Sorted] {
            return Err(BenchError::Usage(
                "--gpus runs the sorted plan (--semi-join sorted)".into(),
            ));
        }
        let parts = split_by_order(&columns, args.gpus.len())?;
        drop(columns);
        let backends = args
            .gpus
            .iter()
            .map(|&g| CudaBackend::new(g))
            .collect::<joinkit_cuda::Result<Vec<_>>>()?;
        let comms = NcclComm::init_all(&backends, CommConfig::default())?;
        let runs = ctx.runs(10);
        let total_runs = runs.warmup + runs.repeat;
        let results: Vec<Result<RankRuns>> = std::thread::scope(|s| {
            let handles: Vec<_> = backends
                .iter()
                .zip(comms)
                .zip(&parts)
                .map(|((b, comm), part)| s.spawn(move || rank(b, &comm, part, args, total_runs)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err(BenchError::Ranks("a rank panicked".into())))
                })
                .collect()
        });
        let ranks = results.into_iter().collect::<Result<Vec<_>>>()?;
        // A run's time is its slowest rank's; the median run by that, with its fastest rank.
        let mut by_run: Vec<(f64, f64)> = (runs.warmup..total_runs)
            .map(|i| {
                let ms = ranks.iter().map(|r| r.ms[i]);
                (ms.clone().fold(0.0, f64::max), ms.fold(f64::MAX, f64::min))
            })
            .collect();
        by_run.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (total, fastest) = by_run[by_run.len() / 2];
        let (orders, lines) = ranks
            .iter()
            .fold((0, 0), |a, r| (a.0 + r.rows.0, a.1 + r.rows.1));
        let input = ((orders + lines) * 16) as f64;
        let mut row = Row::new("tpch-q4")
            .with("sf", args.sf.map_or("files".to_string(), |s| s.to_string()))
            .with("copies", args.replicate)
            .with("gpus", args.gpus.len())
            .with(
                "inputs",
                match (args.inputs, args.compress) {
                    (Inputs::Device, _) => "device",
                    (Inputs::Host, false) => "host",
                    (Inputs::Host, true) => "host, compressed",
                },
            )
            .with("orders", orders)
            .with("lineitems", lines);
        for (name, n) in PRIORITIES.iter().zip(ranks[0].counts) {
            row = row.with(name, n);
        }
        ctx.report.row(
            row.with("total ms", total)
                .with("input GB/s", input / (total * 1e-3) / 1e9)
                .with("fastest rank ms", fastest),
        );
        Ok(())
    }
}

/// Writes `orders.parquet` and `lineitem.parquet` with Q4's columns.
fn write_parquet(dir: &Path, c: &Q4Columns) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| BenchError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let date = |v: &[i32]| -> ArrayRef { std::sync::Arc::new(Date32Array::from(v.to_vec())) };
    let key = |v: &[u64]| -> ArrayRef {
        std::sync::Arc::new(Int64Array::from_iter_values(v.iter().map(|&k| k as i64)))
    };
    let priority: ArrayRef = std::sync::Arc::new(StringArray::from_iter_values(
        c.o_orderpriority
            .iter()
            .map(|&p| PRIORITIES.get(p as usize).copied().unwrap_or("?")),
    ));
    let orders = dir.join("orders.parquet");
    files::write(
        &orders,
        files::Format::of(&orders, None)?,
        vec![
            Field::new("o_orderkey", DataType::Int64, false),
            Field::new("o_orderdate", DataType::Date32, false),
            Field::new("o_orderpriority", DataType::Utf8, false),
        ],
        vec![key(&c.o_orderkey), date(&c.o_orderdate), priority],
    )?;
    let lineitem = dir.join("lineitem.parquet");
    files::write(
        &lineitem,
        files::Format::of(&lineitem, None)?,
        vec![
            Field::new("l_orderkey", DataType::Int64, false),
            Field::new("l_commitdate", DataType::Date32, false),
            Field::new("l_receiptdate", DataType::Date32, false),
        ],
        vec![
            key(&c.l_orderkey),
            date(&c.l_commitdate),
            date(&c.l_receiptdate),
        ],
    )
}

/// Reads Q4's columns from `orders.parquet` and `lineitem.parquet` in `dir`.
fn read_parquet(dir: &Path) -> Result<Q4Columns> {
    let orders = dir.join("orders.parquet");
    let lineitem = dir.join("lineitem.parquet");
    let mut o =
        read_columns(&orders, &["o_orderkey", "o_orderdate", "o_orderpriority"])?.into_iter();
    let mut l =
        read_columns(&lineitem, &["l_orderkey", "l_commitdate", "l_receiptdate"])?.into_iter();
    let next = |it: &mut std::vec::IntoIter<(String, Vec<ArrayRef>)>, path: &Path| {
        it.next().ok_or_else(|| BenchError::File {
            path: path.to_path_buf(),
            message: "a column is missing".into(),
        })
    };
    let (ok, od, op) = (
        next(&mut o, &orders)?,
        next(&mut o, &orders)?,
        next(&mut o, &orders)?,
    );
    let (lk, lc, lr) = (
        next(&mut l, &lineitem)?,
        next(&mut l, &lineitem)?,
        next(&mut l, &lineitem)?,
    );
    Ok(Q4Columns {
        o_orderkey: keys(&orders, ok)?,
        o_orderdate: days(&orders, od)?,
        o_orderpriority: priorities(&orders, op)?,
        l_orderkey: keys(&lineitem, lk)?,
        l_commitdate: days(&lineitem, lc)?,
        l_receiptdate: days(&lineitem, lr)?,
    })
}

/// The named columns of a Parquet file, each as the record batches' arrays.
fn read_columns(path: &Path, names: &[&str]) -> Result<Vec<(String, Vec<ArrayRef>)>> {
    let bad = |e: &dyn std::fmt::Display| BenchError::File {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let file = std::fs::File::open(path).map_err(|source| BenchError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| bad(&e))?;
    let mask = ProjectionMask::columns(builder.parquet_schema(), names.iter().copied());
    let reader = builder
        .with_projection(mask)
        .with_batch_size(1 << 20)
        .build()
        .map_err(|e| bad(&e))?;
    let mut out: Vec<(String, Vec<ArrayRef>)> = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| bad(&e))?;
        for name in names {
            let col = batch
                .column_by_name(name)
                .ok_or_else(|| bad(&format!("no column {name}")))?;
            match out.iter_mut().find(|(n, _)| n == name) {
                Some((_, chunks)) => chunks.push(col.clone()),
                None => out.push((name.to_string(), vec![col.clone()])),
            }
        }
    }
    // An empty file still names its columns, so the caller finds each one (with no rows).
    for name in names {
        if !out.iter().any(|(n, _)| n == name) {
            out.push((name.to_string(), Vec::new()));
        }
    }
    out.sort_by_key(|(n, _)| names.iter().position(|m| m == n));
    Ok(out)
}

fn column_error(path: &Path, name: &str, what: &str, a: &dyn Array) -> BenchError {
    BenchError::File {
        path: path.to_path_buf(),
        message: format!("column {name}: {what}, not {}", a.data_type()),
    }
}

/// Non-null values of every chunk, converted by `f`, or an error naming the column.
fn convert<T>(
    path: &Path,
    (name, chunks): &(String, Vec<ArrayRef>),
    what: &str,
    mut f: impl FnMut(&dyn Array, &mut Vec<T>) -> bool,
) -> Result<Vec<T>> {
    let mut out = Vec::with_capacity(chunks.iter().map(|c| c.len()).sum());
    for c in chunks {
        if c.null_count() > 0 {
            return Err(column_error(
                path,
                name,
                "nulls are not allowed",
                c.as_ref(),
            ));
        }
        if !f(c.as_ref(), &mut out) {
            return Err(column_error(path, name, what, c.as_ref()));
        }
    }
    Ok(out)
}

fn keys(path: &Path, col: (String, Vec<ArrayRef>)) -> Result<Vec<u64>> {
    convert(
        path,
        &col,
        "keys are Int32, Int64, UInt32 or UInt64",
        |a, out| {
            match a.data_type() {
                DataType::Int64 => out.extend(
                    a.as_primitive::<types::Int64Type>()
                        .values()
                        .iter()
                        .map(|&v| v as u64),
                ),
                DataType::UInt64 => {
                    out.extend(a.as_primitive::<types::UInt64Type>().values().iter())
                }
                DataType::Int32 => out.extend(
                    a.as_primitive::<types::Int32Type>()
                        .values()
                        .iter()
                        .map(|&v| v as u64),
                ),
                DataType::UInt32 => out.extend(
                    a.as_primitive::<types::UInt32Type>()
                        .values()
                        .iter()
                        .map(|&v| u64::from(v)),
                ),
                _ => return false,
            }
            true
        },
    )
}

fn days(path: &Path, col: (String, Vec<ArrayRef>)) -> Result<Vec<i32>> {
    convert(path, &col, "dates are Date32 or Int32 days", |a, out| {
        match a.data_type() {
            DataType::Date32 => out.extend(a.as_primitive::<types::Date32Type>().values().iter()),
            DataType::Int32 => out.extend(a.as_primitive::<types::Int32Type>().values().iter()),
            _ => return false,
        }
        true
    })
}

fn priorities(path: &Path, col: (String, Vec<ArrayRef>)) -> Result<Vec<u32>> {
    let text = |s: &str| PRIORITIES.iter().position(|p| *p == s).map(|p| p as u32);
    let mut unknown = None;
    let out = convert(
        path,
        &col,
        "priorities are text or UInt32 codes",
        |a, out| {
            if let Some(s) = a.as_string_opt::<i32>() {
                for v in s.iter().flatten() {
                    match text(v) {
                        Some(c) => out.push(c),
                        None => unknown = Some(v.to_string()),
                    }
                }
            } else if let Some(v) = a.as_any().downcast_ref::<UInt32Array>() {
                out.extend(v.values().iter());
            } else if let Some(v) = a.as_any().downcast_ref::<Int32Array>() {
                out.extend(v.values().iter().map(|&c| c as u32));
            } else {
                return false;
            }
            true
        },
    )?;
    if let Some(v) = unknown {
        return Err(BenchError::File {
            path: path.to_path_buf(),
            message: format!("o_orderpriority {v:?} is not a TPC-H priority"),
        });
    }
    if out.iter().any(|&c| c >= 5) {
        return Err(BenchError::File {
            path: path.to_path_buf(),
            message: "o_orderpriority codes are 0..5".into(),
        });
    }
    Ok(out)
}

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
