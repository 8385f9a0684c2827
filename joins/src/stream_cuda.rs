//! [`StreamedJoin`] on CUDA: a pipeline over three streams and a host thread.
//!
//! | who | does, for chunk i |
//! | --- | --- |
//! | filler thread | waits until staging buffer i mod n is copied out, lets the source write chunk i into it (pinned memory) |
//! | copy-in stream | after the probe of the last chunk in device slot i mod n: copies the chunk into the slot |
//! | backend stream | after that copy: probes the slot with the table (count, retrieve, gather) |
//! | copy-out stream | after the probe: copies the output into one of two pinned output buffers |
//! | caller's thread | queues all of it; hands chunk i − 1's output to the callback while chunk i's copies run |
//!
//! The copy of chunk i + 1 is queued before chunk i is probed (the probe waits on the host for
//! its output count), so the link carries the next chunk while the SMs probe this one.

use std::ops::Range;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SendError, Sender, channel};
use std::time::Instant;

use joinkit_cuda::cudarc::driver::sys::CUevent_flags;
use joinkit_cuda::cudarc::driver::{CudaEvent, CudaStream};
use joinkit_cuda::{
    Backend, Column, CpuBackend, CudaBackend, Error, Key, PinnedBuffer, Result, StagingBuffer,
    driver,
};

use crate::stream::{
    Clock, ColumnType, HostColumn, HostColumnMut, Lane, OutputChunk, ProbeSource, Span,
    StreamOptions, StreamStats, StreamedJoin, check_filled, chunk_room,
};
use crate::{JoinKind, Materialized, ProbeTable, Table};

/// A typed pinned staging buffer (one column of a chunk).
enum Staged {
    U32(StagingBuffer<u32>),
    I32(StagingBuffer<i32>),
    U64(StagingBuffer<u64>),
    I64(StagingBuffer<i64>),
}

/// Runs `$body` with `$s` bound to the staging buffer inside a [`Staged`].
macro_rules! each_staged {
    ($staged:expr, $s:ident => $body:expr) => {
        match $staged {
            Staged::U32($s) => $body,
            Staged::I32($s) => $body,
            Staged::U64($s) => $body,
            Staged::I64($s) => $body,
        }
    };
}

/// Runs `$body` with `$s` and `$c` bound to a staging buffer and a device column of one type.
macro_rules! staged_with_column {
    ($staged:expr, $col:expr, $s:ident, $c:ident => $body:expr) => {
        match ($staged, $col) {
            (Staged::U32($s), Column::U32($c)) => $body,
            (Staged::I32($s), Column::I32($c)) => $body,
            (Staged::U64($s), Column::U64($c)) => $body,
            (Staged::I64($s), Column::I64($c)) => $body,
            _ => Err(Error::Corrupt(
                "a staging buffer paired with a column of another type".into(),
            )),
        }
    };
}

impl Staged {
    fn new(g: &CudaBackend, ty: ColumnType, rows: usize) -> Result<Self> {
        Ok(match ty {
            ColumnType::U32 => Self::U32(g.staging(rows)?),
            ColumnType::I32 => Self::I32(g.staging(rows)?),
            ColumnType::U64 => Self::U64(g.staging(rows)?),
            ColumnType::I64 => Self::I64(g.staging(rows)?),
        })
    }

    fn capacity(&self) -> usize {
        each_staged!(self, s => s.capacity())
    }

    /// Room for the source to write (waits for the last copy out of it).
    fn room(&mut self) -> Result<HostColumnMut<'_>> {
        Ok(match self {
            Self::U32(s) => HostColumnMut::U32(s.host_mut()?),
            Self::I32(s) => HostColumnMut::I32(s.host_mut()?),
            Self::U64(s) => HostColumnMut::U64(s.host_mut()?),
            Self::I64(s) => HostColumnMut::I64(s.host_mut()?),
        })
    }

    /// The first `rows` values (waits for the last copy into them).
    fn values(&mut self, rows: usize) -> Result<HostColumn<'_>> {
        Ok(match self {
            Self::U32(s) => HostColumn::U32(&s.host_mut()?[..rows]),
            Self::I32(s) => HostColumn::I32(&s.host_mut()?[..rows]),
            Self::U64(s) => HostColumn::U64(&s.host_mut()?[..rows]),
            Self::I64(s) => HostColumn::I64(&s.host_mut()?[..rows]),
        })
    }

    fn copy_to(&mut self, dst: &mut Column<CudaBackend>, stream: &Arc<CudaStream>) -> Result<()> {
        staged_with_column!(self, dst, s, c => s.copy_to_device(c, stream))
    }

    fn copy_from(&mut self, src: &Column<CudaBackend>, stream: &Arc<CudaStream>) -> Result<()> {
        staged_with_column!(self, src, s, c => s.copy_from_device(c, stream))
    }
}

/// A chunk's pinned staging: keys and payload columns, and which device slot it feeds.
struct StagedChunk<K: Key> {
    slot: usize,
    keys: StagingBuffer<K>,
    payloads: Vec<Staged>,
}

impl<K: Key> StagedChunk<K> {
    /// Lets `source` write the next chunk (after the last copy out of this staging is done).
    fn fill(&mut self, source: &mut dyn ProbeSource<K>) -> Result<usize> {
        let room = self.keys.capacity();
        let keys = self.keys.host_mut()?;
        let mut rooms = self
            .payloads
            .iter_mut()
            .map(Staged::room)
            .collect::<Result<Vec<_>>>()?;
        check_filled(source.fill(keys, &mut rooms)?, room)
    }
}

/// A device slot: a chunk's columns on the device, with the events that order its reuse.
struct DeviceSlot<K: Key> {
    chunk: Table<CudaBackend, K>,
    /// Recorded on the copy-in stream after the chunk arrived.
    copied: CudaEvent,
    /// Recorded on the backend's stream after the probe read the chunk.
    consumed: CudaEvent,
}

/// A pinned output buffer: one chunk's output columns, and the device output they are copied
/// from (kept until the copy is done).
struct OutputSlot {
    left: Vec<Staged>,
    right: Vec<Staged>,
    valid: Option<StagingBuffer<u32>>,
    rows: usize,
    device: Option<Materialized<CudaBackend>>,
    chunk: u64,
}

impl OutputSlot {
    /// Room for `rows` rows of the given left and right types (and validity words).
    fn new(
        g: &CudaBackend,
        (left, right): (&[ColumnType], &[ColumnType]),
        valid: bool,
        rows: usize,
    ) -> Result<Self> {
        let staged = |types: &[ColumnType]| {
            types
                .iter()
                .map(|&t| Staged::new(g, t, rows))
                .collect::<Result<Vec<_>>>()
        };
        Ok(Self {
            left: staged(left)?,
            right: staged(right)?,
            valid: valid.then(|| g.staging(rows)).transpose()?,
            rows: 0,
            device: None,
            chunk: 0,
        })
    }

    /// Queues the copy of `out` on `stream` (waits, if it must grow, for nothing in flight:
    /// the slot's last output was handed on before).
    fn stage(
        &mut self,
        g: &CudaBackend,
        out: Materialized<CudaBackend>,
        chunk: u64,
        stream: &Arc<CudaStream>,
    ) -> Result<u64> {
        let rows = usize::try_from(out.rows).map_err(|_| Error::SizeOverflow("output rows"))?;
        let fits = |s: &[Staged], cols: &[Column<CudaBackend>]| {
            s.len() == cols.len()
                && s.iter()
                    .zip(cols)
                    .all(|(s, c)| s.capacity() >= rows && ColumnType::of(c) == staged_type(s))
        };
        if !fits(&self.left, &out.left) || !fits(&self.right, &out.right) {
            // Room for twice as many rows, so that outputs growing slowly reallocate rarely
            // (pinning costs about a millisecond per 100 MB).
            let capacity = rows
                .checked_mul(2)
                .ok_or(Error::SizeOverflow("output staging rows"))?;
            let staged = |cols: &[Column<CudaBackend>]| {
                cols.iter()
                    .map(|c| Staged::new(g, ColumnType::of(c), capacity))
                    .collect::<Result<Vec<_>>>()
            };
            self.left = staged(&out.left)?;
            self.right = staged(&out.right)?;
            self.valid = None;
        }
        for (s, c) in self.left.iter_mut().zip(&out.left) {
            s.copy_from(c, stream)?;
        }
        for (s, c) in self.right.iter_mut().zip(&out.right) {
            s.copy_from(c, stream)?;
        }
        let mut bytes: u64 = out
            .left
            .iter()
            .chain(&out.right)
            .map(|c| (c.len() * c.width()) as u64)
            .sum();
        if let Some(v) = &out.right_valid {
            let room = self.left.first().map_or(rows, Staged::capacity).max(rows);
            if self.valid.as_ref().is_none_or(|s| s.capacity() < rows) {
                self.valid = Some(g.staging(room)?);
            }
            if let Some(s) = &mut self.valid {
                s.copy_from_device(v, stream)?;
            }
            bytes += 4 * v.len() as u64;
        }
        self.rows = rows;
        self.chunk = chunk;
        self.device = Some(out);
        Ok(bytes)
    }

    /// Waits for the copy and hands the output to `sink`; frees the device output.
    fn deliver(&mut self, sink: &mut dyn FnMut(OutputChunk<'_>) -> Result<()>) -> Result<()> {
        let Some(out) = self.device.take() else {
            return Ok(());
        };
        let rows = self.rows;
        let valid = match (&out.right_valid, &mut self.valid) {
            (Some(_), Some(s)) => Some(&s.host_mut()?[..rows]),
            _ => None,
        };
        let left = self
            .left
            .iter_mut()
            .map(|s| s.values(rows))
            .collect::<Result<Vec<_>>>()?;
        let right = self
            .right
            .iter_mut()
            .map(|s| s.values(rows))
            .collect::<Result<Vec<_>>>()?;
        drop(out);
        sink(OutputChunk {
            left,
            right,
            right_valid: valid,
            rows,
        })
    }
}

fn staged_type(s: &Staged) -> ColumnType {
    match s {
        Staged::U32(_) => ColumnType::U32,
        Staged::I32(_) => ColumnType::I32,
        Staged::U64(_) => ColumnType::U64,
        Staged::I64(_) => ColumnType::I64,
    }
}

/// Device spans by CUDA events, on the host clock's time base.
struct DeviceTimeline {
    base: CudaEvent,
    spans: Vec<(Lane, u64, CudaEvent, CudaEvent)>,
    on: bool,
}

impl DeviceTimeline {
    /// Starts at the same moment as a host clock made right after.
    fn start(g: &CudaBackend, on: bool) -> Result<Self> {
        let base = timing_event(g)?;
        if on {
            base.record(g.stream())
                .map_err(driver("recording an event"))?;
            base.synchronize().map_err(driver("waiting for an event"))?;
        }
        Ok(Self {
            base,
            spans: Vec::new(),
            on,
        })
    }

    /// Queues `work` on `stream` between two events of `lane` when the timeline is on.
    fn span<R>(
        &mut self,
        g: &CudaBackend,
        (lane, chunk): (Lane, u64),
        stream: &Arc<CudaStream>,
        work: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        if !self.on {
            return work();
        }
        let (start, end) = (timing_event(g)?, timing_event(g)?);
        start.record(stream).map_err(driver("recording an event"))?;
        let r = work()?;
        end.record(stream).map_err(driver("recording an event"))?;
        self.spans.push((lane, chunk, start, end));
        Ok(r)
    }

    fn finish(self) -> Result<Vec<Span>> {
        self.spans
            .iter()
            .map(|(lane, chunk, start, end)| {
                let at = |e: &CudaEvent| {
                    e.synchronize().map_err(driver("waiting for an event"))?;
                    self.base
                        .elapsed_ms(e)
                        .map(f64::from)
                        .map_err(driver("reading an event"))
                };
                Ok(Span {
                    lane: *lane,
                    chunk: *chunk,
                    start_ms: at(start)?,
                    end_ms: at(end)?,
                })
            })
            .collect()
    }
}

/// Left rows' bytes: the key and every payload column.
fn left_row_bytes<K: Key>(types: &[ColumnType]) -> usize {
    size_of::<K>() + types.iter().map(|t| t.width()).sum::<usize>()
}

fn timing_event(g: &CudaBackend) -> Result<CudaEvent> {
    g.context()
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(driver("creating an event"))
}

fn sync_event(g: &CudaBackend) -> Result<CudaEvent> {
    g.context()
        .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
        .map_err(driver("creating an event"))
}

/// What the filler thread hands over: a filled staging and its rows (0: the left side ended).
type Filled<K> = Result<(StagedChunk<K>, usize)>;

/// The filler thread: fills each staging buffer it gets back, until the source ends, fails,
/// or the pipeline stops taking chunks.
fn fill_chunks<K: Key>(
    g: &CudaBackend,
    source: &mut dyn ProbeSource<K>,
    free: Receiver<StagedChunk<K>>,
    filled: Sender<Filled<K>>,
    mut clock: Clock,
) -> Vec<Span> {
    if let Err(e) = g.bind_to_thread() {
        let _ = filled.send(Err(e));
        return Vec::new();
    }
    let mut chunk = 0;
    while let Ok(mut staged) = free.recv() {
        let r = clock.span(Lane::Fill, chunk, || staged.fill(source));
        let end = !matches!(r, Ok(rows) if rows > 0);
        if filled.send(r.map(|rows| (staged, rows))).is_err() || end {
            break;
        }
        chunk += 1;
    }
    clock.spans.unwrap_or_default()
}

/// The state of one streamed join on the caller's thread.
struct Pipeline<'t, 'r, K: Key> {
    g: &'t CudaBackend,
    table: &'t ProbeTable<'r, CudaBackend, K>,
    copy_in: Arc<CudaStream>,
    copy_out: Arc<CudaStream>,
    slots: Vec<DeviceSlot<K>>,
    outputs: [OutputSlot; 2],
    next_output: usize,
    probed: CudaEvent,
    /// Bytes of a left row (key and payloads).
    row_bytes: usize,
    timeline: DeviceTimeline,
    /// Host spans of this thread (the callback's).
    clock: Clock,
    /// Staging the filler no longer takes (the source ended).
    retired: Vec<StagedChunk<K>>,
    stats: StreamStats,
}

impl<'t, 'r, K: Key> Pipeline<'t, 'r, K> {
    /// Device slots for `opts.buffers` chunks of `opts.chunk_rows` rows of `types`, the
    /// copy streams, and a host clock started with the device timeline.
    fn new(
        g: &'t CudaBackend,
        table: &'t ProbeTable<'r, CudaBackend, K>,
        types: &[ColumnType],
        opts: &StreamOptions,
    ) -> Result<Self> {
        let room = opts.chunk_rows;
        let new_stream = || {
            g.context()
                .new_stream()
                .map_err(driver("creating a stream"))
        };
        let slots = (0..opts.buffers)
            .map(|_| {
                Ok(DeviceSlot {
                    chunk: chunk_room(g, types, room)?,
                    copied: sync_event(g)?,
                    consumed: sync_event(g)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        // Output buffers for a chunk's rows up front (pinning takes about 3 GB/s, which would
        // stall the first chunks); an M:N join's larger outputs grow them.
        let join = table.options();
        let right_types: Vec<ColumnType> = if join.kind.has_right_rows() {
            table.right().payloads.iter().map(ColumnType::of).collect()
        } else {
            Vec::new()
        };
        let outputs = [
            OutputSlot::new(
                g,
                (types, &right_types),
                join.kind == JoinKind::LeftOuter,
                room,
            )?,
            OutputSlot::new(
                g,
                (types, &right_types),
                join.kind == JoinKind::LeftOuter,
                room,
            )?,
        ];
        // The slots come from the backend's stream-ordered pool (perhaps memory the table's
        // build freed while its kernels still ran): the copy-in stream may write them only
        // once the backend's stream has reached their allocation.
        g.synchronize()?;
        let timeline = DeviceTimeline::start(g, opts.timeline)?;
        Ok(Self {
            g,
            table,
            copy_in: new_stream()?,
            copy_out: new_stream()?,
            slots,
            outputs,
            next_output: 0,
            probed: sync_event(g)?,
            row_bytes: left_row_bytes::<K>(types),
            timeline,
            clock: Clock::new(opts.timeline),
            retired: Vec::new(),
            stats: StreamStats {
                build: table.build_stats().clone(),
                chunks: 0,
                left_rows: 0,
                output_rows: 0,
                bytes_in: 0,
                bytes_out: 0,
                setup_ms: 0.0,
                probe_ms: 0.0,
                wall_ms: 0.0,
                peak_memory_bytes: None,
                timeline: Vec::new(),
            },
        })
    }

    /// Queues `copy` of a chunk of `rows` rows into device slot `id` on the copy-in stream,
    /// after the probe that last read the slot.
    fn copy_into_slot(
        &mut self,
        (id, rows, chunk): (usize, usize, u64),
        copy: impl FnOnce(&mut Table<CudaBackend, K>, &Arc<CudaStream>) -> Result<()>,
    ) -> Result<()> {
        let slot = &mut self.slots[id];
        self.copy_in
            .wait(&slot.consumed)
            .map_err(driver("ordering a copy after a probe"))?;
        slot.chunk.keys.set_len(rows)?;
        for c in &mut slot.chunk.payloads {
            joinkit_cuda::each_column!(c, c => c.set_len(rows))?;
        }
        let stream = self.copy_in.clone();
        self.timeline
            .span(self.g, (Lane::CopyIn, chunk), &stream, || {
                copy(&mut slot.chunk, &stream)
            })?;
        slot.copied
            .record(&stream)
            .map_err(driver("recording a copy's event"))?;
        self.stats.bytes_in += (rows * self.row_bytes) as u64;
        Ok(())
    }

    /// Queues the copy of a filled staging into its device slot and gives the staging back
    /// to the filler; returns the slot.
    fn copy_staged(
        &mut self,
        mut staged: StagedChunk<K>,
        (rows, chunk): (usize, u64),
        free: &Sender<StagedChunk<K>>,
    ) -> Result<usize> {
        let id = staged.slot;
        self.copy_into_slot((id, rows, chunk), |dst, stream| {
            staged.keys.copy_to_device(&mut dst.keys, stream)?;
            for (s, c) in staged.payloads.iter_mut().zip(&mut dst.payloads) {
                s.copy_to(c, stream)?;
            }
            Ok(())
        })?;
        // The filler waits for the copy out of this staging before writing it again; once the
        // source has ended it takes no more, and the staging is kept (not dropped, which
        // would wait for its copy here) until the end.
        if let Err(SendError(staged)) = free.send(staged) {
            self.retired.push(staged);
        }
        Ok(id)
    }

    /// Takes chunks from `next` (which queues each one's copy into a slot and returns the
    /// slot and rows, or `None` at the end) and probes them in order.
    fn run(
        &mut self,
        mut next: impl FnMut(&mut Self, u64) -> Result<Option<(usize, usize)>>,
        sink: &mut dyn FnMut(OutputChunk<'_>) -> Result<()>,
    ) -> Result<()> {
        // Every other slot's chunk is queued before a chunk is probed, so the link stays busy
        // while the probe waits for its counts.
        let ahead = self.slots.len() - 1;
        let mut queued = std::collections::VecDeque::with_capacity(self.slots.len());
        let (mut chunk, mut asked, mut ended) = (0, 0, false);
        loop {
            while !ended && queued.len() <= ahead {
                match next(self, asked)? {
                    Some(slot_rows) => queued.push_back(slot_rows),
                    None => ended = true,
                }
                asked += 1;
            }
            let Some((slot, rows)) = queued.pop_front() else {
                break;
            };
            self.probe(slot, rows, chunk, sink)?;
            chunk += 1;
        }
        self.deliver(1 - self.next_output, sink)
    }

    /// The statistics, once every copy is done; `host_spans` from other threads join the
    /// timeline.
    fn finish(mut self, host_spans: Vec<Span>) -> Result<StreamStats> {
        for o in &mut self.outputs {
            o.device = None;
        }
        self.g.synchronize()?;
        drop(self.retired);
        let mut stats = self.stats;
        stats.wall_ms = self.clock.now_ms();
        stats.peak_memory_bytes = self.g.memory().map(|m| m.peak_bytes);
        if self.timeline.on {
            let mut spans = self.timeline.finish()?;
            spans.extend(host_spans);
            spans.extend(self.clock.spans.unwrap_or_default());
            spans.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
            stats.timeline = spans;
        }
        Ok(stats)
    }

    /// Probes the chunk in slot `id` and queues its output's copy back; hands the previous
    /// output to `sink` meanwhile.
    fn probe(
        &mut self,
        id: usize,
        rows: usize,
        chunk: u64,
        sink: &mut dyn FnMut(OutputChunk<'_>) -> Result<()>,
    ) -> Result<()> {
        let compute = self.g.stream().clone();
        let slot = &self.slots[id];
        compute
            .wait(&slot.copied)
            .map_err(driver("ordering a probe after its copy"))?;
        let table = self.table;
        let (out, st) = self
            .timeline
            .span(self.g, (Lane::Probe, chunk), &compute, || {
                table.probe_columns(&slot.chunk)
            })?;
        slot.consumed
            .record(&compute)
            .map_err(driver("recording a probe's event"))?;
        self.stats.probe_ms += st.total_ms();
        self.stats.chunks += 1;
        self.stats.left_rows += rows as u64;
        self.stats.output_rows += out.rows;
        let previous = 1 - self.next_output;
        if out.rows > 0 {
            self.probed
                .record(&compute)
                .map_err(driver("recording a probe's event"))?;
            self.copy_out
                .wait(&self.probed)
                .map_err(driver("ordering a copy after a probe"))?;
            let stream = self.copy_out.clone();
            let o = &mut self.outputs[self.next_output];
            let bytes = self
                .timeline
                .span(self.g, (Lane::CopyOut, chunk), &stream, || {
                    o.stage(self.g, out, chunk, &stream)
                })?;
            self.stats.bytes_out += bytes;
            self.next_output = previous;
        }
        self.deliver(previous, sink)
    }

    /// Hands output slot `o`'s chunk, if any, to `sink`.
    fn deliver(
        &mut self,
        o: usize,
        sink: &mut dyn FnMut(OutputChunk<'_>) -> Result<()>,
    ) -> Result<()> {
        let out = &mut self.outputs[o];
        if out.device.is_none() {
            return Ok(());
        }
        self.clock.span(Lane::Sink, out.chunk, || out.deliver(sink))
    }
}

impl StreamedJoin for CudaBackend {
    fn join_streamed<K: Key>(
        &self,
        right: &Table<Self, K>,
        source: &mut dyn ProbeSource<K>,
        opts: &StreamOptions,
        sink: &mut dyn FnMut(OutputChunk<'_>) -> Result<()>,
    ) -> Result<StreamStats> {
        opts.check()?;
        let table = ProbeTable::build(self, right, &opts.join)?;
        let types = source.payload_types();
        let setup = Instant::now();
        let staged = (0..opts.buffers)
            .map(|slot| {
                Ok(StagedChunk {
                    slot,
                    keys: self.staging::<K>(opts.chunk_rows)?,
                    payloads: types
                        .iter()
                        .map(|&t| Staged::new(self, t, opts.chunk_rows))
                        .collect::<Result<_>>()?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut p = Pipeline::new(self, &table, &types, opts)?;
        p.stats.setup_ms = setup.elapsed().as_secs_f64() * 1e3;
        let (free_tx, free_rx) = channel();
        let (filled_tx, filled_rx) = channel::<Filled<K>>();
        for s in staged {
            free_tx
                .send(s)
                .map_err(|_| Error::Corrupt("a staging ring's channel closed".into()))?;
        }
        let clock = p.clock.twin();
        let (run, fill_spans) = std::thread::scope(|scope| {
            let filler = scope.spawn(|| fill_chunks(self, source, free_rx, filled_tx, clock));
            let filled = &filled_rx;
            let next = |p: &mut Pipeline<'_, '_, K>, chunk: u64| {
                let (staged, rows) = filled
                    .recv()
                    .map_err(|_| Error::Corrupt("the filler thread stopped early".into()))??;
                if rows == 0 {
                    return Ok(None);
                }
                Ok(Some((
                    p.copy_staged(staged, (rows, chunk), &free_tx)?,
                    rows,
                )))
            };
            let run = p.run(next, sink);
            // Ends the filler if the pipeline stopped first.
            drop(free_tx);
            drop(filled_rx);
            (run, filler.join().unwrap_or_default())
        });
        run?;
        p.finish(fill_spans)
    }
}

/// A column in page-locked host memory.
#[derive(Debug)]
pub enum PinnedColumn {
    /// 4-byte unsigned.
    U32(PinnedBuffer<u32>),
    /// 4-byte signed.
    I32(PinnedBuffer<i32>),
    /// 8-byte unsigned.
    U64(PinnedBuffer<u64>),
    /// 8-byte signed.
    I64(PinnedBuffer<i64>),
}

/// A left side in page-locked host memory: its chunks cross the link straight from it, with
/// no staging copy on the host ([`join_streamed_pinned`]).
#[derive(Debug)]
pub struct PinnedTable<K: Key> {
    /// The join keys.
    pub keys: PinnedBuffer<K>,
    /// Payload columns, each as long as the keys.
    pub payloads: Vec<PinnedColumn>,
}

impl<K: Key> PinnedTable<K> {
    /// `t` copied into pinned memory on `g`'s context.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] for a payload of another length than the keys; pinning's
    /// errors (the host cannot lock that much memory).
    pub fn pin(g: &CudaBackend, t: &Table<CpuBackend, K>) -> Result<Self> {
        t.check()?;
        let payloads = t
            .payloads
            .iter()
            .map(|c| {
                Ok(match c {
                    Column::U32(v) => PinnedColumn::U32(g.pin(v)?),
                    Column::I32(v) => PinnedColumn::I32(g.pin(v)?),
                    Column::U64(v) => PinnedColumn::U64(g.pin(v)?),
                    Column::I64(v) => PinnedColumn::I64(g.pin(v)?),
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            keys: g.pin(&t.keys)?,
            payloads,
        })
    }

    /// Rows.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether the table has no row.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn payload_types(&self) -> Vec<ColumnType> {
        self.payloads
            .iter()
            .map(|c| match c {
                PinnedColumn::U32(_) => ColumnType::U32,
                PinnedColumn::I32(_) => ColumnType::I32,
                PinnedColumn::U64(_) => ColumnType::U64,
                PinnedColumn::I64(_) => ColumnType::I64,
            })
            .collect()
    }

    /// Queues the copy of rows `range` into `dst` (of as many rows) on `stream`.
    fn copy_rows(
        &self,
        range: Range<usize>,
        dst: &mut Table<CudaBackend, K>,
        stream: &Arc<CudaStream>,
    ) -> Result<()> {
        self.keys
            .copy_range_to(range.clone(), &mut dst.keys.view_mut(), stream)?;
        for (p, c) in self.payloads.iter().zip(&mut dst.payloads) {
            match (p, c) {
                (PinnedColumn::U32(p), Column::U32(c)) => {
                    p.copy_range_to(range.clone(), &mut c.view_mut(), stream)
                }
                (PinnedColumn::I32(p), Column::I32(c)) => {
                    p.copy_range_to(range.clone(), &mut c.view_mut(), stream)
                }
                (PinnedColumn::U64(p), Column::U64(c)) => {
                    p.copy_range_to(range.clone(), &mut c.view_mut(), stream)
                }
                (PinnedColumn::I64(p), Column::I64(c)) => {
                    p.copy_range_to(range.clone(), &mut c.view_mut(), stream)
                }
                _ => Err(Error::Corrupt(
                    "a pinned column paired with a slot of another type".into(),
                )),
            }?;
        }
        Ok(())
    }
}

/// The streamed join of [`StreamedJoin::join_streamed`] for a left side in pinned memory:
/// the left side is the rows `chunks` names, in order (each range at most
/// [`StreamOptions::chunk_rows`] long; ranges may repeat, to stream more rows than the host
/// holds; empty ones are skipped), each copied straight from `left` to the device while the
/// chunk before it is probed.
///
/// # Errors
/// As [`StreamedJoin::join_streamed`]; [`Error::IndexOutOfRange`] for a range past `left`'s
/// end or reversed; [`Error::InvalidArgument`] for a range longer than a chunk.
pub fn join_streamed_pinned<K: Key>(
    g: &CudaBackend,
    right: &Table<CudaBackend, K>,
    left: &PinnedTable<K>,
    chunks: &mut dyn Iterator<Item = Range<usize>>,
    opts: &StreamOptions,
    sink: &mut dyn FnMut(OutputChunk<'_>) -> Result<()>,
) -> Result<StreamStats> {
    opts.check()?;
    for p in &left.payloads {
        let n = match p {
            PinnedColumn::U32(b) => b.len(),
            PinnedColumn::I32(b) => b.len(),
            PinnedColumn::U64(b) => b.len(),
            PinnedColumn::I64(b) => b.len(),
        };
        Error::check_len("pinned table keys vs payload", left.len(), n)?;
    }
    let table = ProbeTable::build(g, right, &opts.join)?;
    let setup = Instant::now();
    let mut p = Pipeline::new(g, &table, &left.payload_types(), opts)?;
    p.stats.setup_ms = setup.elapsed().as_secs_f64() * 1e3;
    let next = |p: &mut Pipeline<'_, '_, K>, chunk: u64| {
        // Empty ranges are skipped: no chunk is empty.
        let range = loop {
            match chunks.next() {
                None => return Ok(None),
                Some(r) if r.start > r.end => {
                    return Err(Error::IndexOutOfRange {
                        what: "pinned chunk range (reversed)",
                        index: r.end as u64,
                        len: left.len(),
                    });
                }
                Some(r) if r.is_empty() => {}
                Some(r) => break r,
            }
        };
        let rows = check_filled(range.len(), opts.chunk_rows)?;
        let id = (chunk % opts.buffers as u64) as usize;
        p.copy_into_slot((id, rows, chunk), |dst, stream| {
            left.copy_rows(range, dst, stream)
        })?;
        Ok(Some((id, rows)))
    };
    p.run(next, sink)?;
    p.finish(Vec::new())
}
