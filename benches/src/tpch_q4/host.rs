//! Q4 over columns in pinned host memory, streamed to the GPU inside the query's time: raw
//! columns through two chunk buffers, or cascaded-codec streams decoded on the GPU.

use std::ops::Range;
use std::sync::Arc;

use joinkit_codec::{Codec, CodecOptions, SelectorConfig};
use joinkit_cuda::cudarc::driver::{CudaEvent, CudaStream};
use joinkit_cuda::{CudaBackend, DeviceBuffer, PinnedBuffer, driver};
use joinkit_primitives::cuda::{OrderCheck, mark_sorted_matches_where_less};

use super::*;
use crate::measure::median_run;

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
        let (words, ranges) = g.compress_many(&dev, &bounds, &scheme, &CodecOptions::default())?;
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
pub(super) fn q4_streamed(g: &CudaBackend, h: &PinnedQ4, date: i32) -> joinkit_cuda::Result<Q4Run> {
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
    Ok(Q4Run {
        counts: priority_counts(&g.download(&run)?),
        semi_join: SemiJoin::Sorted,
        phases_ms: [0.0, ms, 0.0],
    })
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
    let h2d_gbs = crate::measure::h2d_bandwidth(g)?;
    let floor_ms = link / (h2d_gbs * 1e9) * 1e3;
    let runs = ctx.runs(10);
    g.reset_peak_memory();
    let ((), median) = median_run(
        runs,
        || Ok(((), q4_streamed(g, &h, args.date)?)),
        Q4Run::total_ms,
    )?;
    let total = median.total_ms();
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
