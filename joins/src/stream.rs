//! Joins whose left (probe) side streams from host memory: the right side's table stays on
//! the backend ([`ProbeTable`]) while the left side arrives in chunks from a [`ProbeSource`]
//! and each chunk's output leaves through a callback, so the left side may be any size
//! (Thostrup et al., SIGMOD'23: the "unbounded probe side").
//!
//! On CUDA ([`StreamedJoin`] for `CudaBackend`), chunks are filled into a ring of pinned
//! staging buffers by a host thread, copied to the device on a stream of their own, probed on
//! the backend's stream and copied back on a third, so that filling, both copies and the probe
//! of consecutive chunks overlap and a fast probe runs at the host link's rate. The CPU
//! backend runs the same contract chunk after chunk: the oracle of the tests and the default
//! without a GPU.

use std::time::Instant;

use joinkit_cuda::{Backend, Column, CpuBackend, Error, Key, Result, copy_parallel};

use crate::{JoinBackend, JoinOptions, JoinStats, Materialized, ProbeTable, Table};

/// The element type of a payload column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// 4-byte unsigned.
    U32,
    /// 4-byte signed.
    I32,
    /// 8-byte unsigned.
    U64,
    /// 8-byte signed.
    I64,
}

impl ColumnType {
    /// The type of `c`.
    pub fn of<B: Backend>(c: &Column<B>) -> Self {
        match c {
            Column::U32(_) => Self::U32,
            Column::I32(_) => Self::I32,
            Column::U64(_) => Self::U64,
            Column::I64(_) => Self::I64,
        }
    }

    /// Bytes a value.
    pub fn width(self) -> usize {
        match self {
            Self::U32 | Self::I32 => 4,
            Self::U64 | Self::I64 => 8,
        }
    }

    /// A column of `len` values on `b`, unwritten.
    pub(crate) fn alloc<B: Backend>(self, b: &B, len: usize) -> Result<Column<B>> {
        Ok(match self {
            Self::U32 => Column::U32(b.alloc(len)?),
            Self::I32 => Column::I32(b.alloc(len)?),
            Self::U64 => Column::U64(b.alloc(len)?),
            Self::I64 => Column::I64(b.alloc(len)?),
        })
    }
}

/// Host values of a column, borrowed (an output chunk's, from the join's staging memory).
#[derive(Debug, Clone, Copy)]
pub enum HostColumn<'a> {
    /// 4-byte unsigned.
    U32(&'a [u32]),
    /// 4-byte signed.
    I32(&'a [i32]),
    /// 8-byte unsigned.
    U64(&'a [u64]),
    /// 8-byte signed.
    I64(&'a [i64]),
}

impl<'a> HostColumn<'a> {
    /// `c`'s values where `c` lives on the host.
    pub fn of(c: &'a Column<CpuBackend>) -> Self {
        match c {
            Column::U32(v) => Self::U32(v),
            Column::I32(v) => Self::I32(v),
            Column::U64(v) => Self::U64(v),
            Column::I64(v) => Self::I64(v),
        }
    }

    /// Rows.
    pub fn len(&self) -> usize {
        match self {
            Self::U32(v) => v.len(),
            Self::I32(v) => v.len(),
            Self::U64(v) => v.len(),
            Self::I64(v) => v.len(),
        }
    }

    /// Whether the column has no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `i`'s bit pattern, zero-extended (`None` past the end).
    pub fn bits(&self, i: usize) -> Option<u64> {
        match self {
            Self::U32(v) => v.get(i).map(|&x| u64::from(x)),
            Self::I32(v) => v.get(i).map(|&x| u64::from(x as u32)),
            Self::U64(v) => v.get(i).copied(),
            Self::I64(v) => v.get(i).map(|&x| x as u64),
        }
    }
}

/// Host room for a column's values, borrowed (where a [`ProbeSource`] writes a chunk).
#[derive(Debug)]
pub enum HostColumnMut<'a> {
    /// 4-byte unsigned.
    U32(&'a mut [u32]),
    /// 4-byte signed.
    I32(&'a mut [i32]),
    /// 8-byte unsigned.
    U64(&'a mut [u64]),
    /// 8-byte signed.
    I64(&'a mut [i64]),
}

impl<'a> HostColumnMut<'a> {
    /// Room in `c`'s values where `c` lives on the host.
    pub fn of(c: &'a mut Column<CpuBackend>) -> Self {
        match c {
            Column::U32(v) => Self::U32(v),
            Column::I32(v) => Self::I32(v),
            Column::U64(v) => Self::U64(v),
            Column::I64(v) => Self::I64(v),
        }
    }

    /// Copies `src[range]` to the front of this room, spread over the rayon pool.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the types differ or the room is too small;
    /// [`Error::IndexOutOfRange`] when `range` passes the end of `src`.
    pub fn copy_from(
        &mut self,
        src: &Column<CpuBackend>,
        range: std::ops::Range<usize>,
    ) -> Result<()> {
        fn copy<T: Copy + Send + Sync>(
            dst: &mut [T],
            src: &[T],
            range: std::ops::Range<usize>,
        ) -> Result<()> {
            let rows = range.len();
            let src = src.get(range).ok_or(Error::IndexOutOfRange {
                what: "host column rows",
                index: rows as u64,
                len: src.len(),
            })?;
            let room = dst.len();
            let dst = dst
                .get_mut(..rows)
                .ok_or_else(|| Error::InvalidArgument(format!("{rows} rows for room of {room}")))?;
            copy_parallel(dst, src)
        }
        match (self, src) {
            (Self::U32(d), Column::U32(s)) => copy(d, s, range),
            (Self::I32(d), Column::I32(s)) => copy(d, s, range),
            (Self::U64(d), Column::U64(s)) => copy(d, s, range),
            (Self::I64(d), Column::I64(s)) => copy(d, s, range),
            (d, s) => Err(Error::InvalidArgument(format!(
                "a {:?} column copied into room for {:?}",
                ColumnType::of(s),
                d.column_type()
            ))),
        }
    }

    /// The values' type.
    pub fn column_type(&self) -> ColumnType {
        match self {
            Self::U32(_) => ColumnType::U32,
            Self::I32(_) => ColumnType::I32,
            Self::U64(_) => ColumnType::U64,
            Self::I64(_) => ColumnType::I64,
        }
    }
}

/// Where a streamed join's left side comes from, chunk by chunk.
pub trait ProbeSource<K: Key>: Send {
    /// The types of the left side's payload columns, in order (the same for every chunk).
    fn payload_types(&self) -> Vec<ColumnType>;

    /// Writes the next left rows to the front of `keys` and of each of `payloads` (as long as
    /// `keys`, of [`ProbeSource::payload_types`]) and returns how many it wrote; 0 ends the
    /// left side. A chunk may be shorter than the room.
    ///
    /// # Errors
    /// The source's own (reading a file, say): the join stops and returns it.
    fn fill(&mut self, keys: &mut [K], payloads: &mut [HostColumnMut<'_>]) -> Result<usize>;
}

/// A left side already in host memory, read chunk by chunk.
pub struct HostTableSource<'a, K: Key> {
    table: &'a Table<CpuBackend, K>,
    next: usize,
}

impl<'a, K: Key> HostTableSource<'a, K> {
    /// Reads `table` from its first row.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] for a payload of another length than the keys.
    pub fn new(table: &'a Table<CpuBackend, K>) -> Result<Self> {
        table.check()?;
        Ok(Self { table, next: 0 })
    }
}

impl<K: Key> ProbeSource<K> for HostTableSource<'_, K> {
    fn payload_types(&self) -> Vec<ColumnType> {
        self.table.payloads.iter().map(ColumnType::of).collect()
    }

    fn fill(&mut self, keys: &mut [K], payloads: &mut [HostColumnMut<'_>]) -> Result<usize> {
        let rows = keys.len().min(self.table.len() - self.next);
        let range = self.next..self.next + rows;
        copy_parallel(&mut keys[..rows], &self.table.keys[range.clone()])?;
        for (room, col) in payloads.iter_mut().zip(&self.table.payloads) {
            room.copy_from(col, range.clone())?;
        }
        self.next += rows;
        Ok(rows)
    }
}

/// One chunk of a streamed join's output in host memory, as [`crate::join_columns`] lays out
/// its columns; borrowed for the callback's duration.
#[derive(Debug)]
pub struct OutputChunk<'a> {
    /// Left payload columns.
    pub left: Vec<HostColumn<'a>>,
    /// Right payload columns (inner and left outer joins).
    pub right: Vec<HostColumn<'a>>,
    /// Left outer joins: 1 where the right columns hold a match.
    pub right_valid: Option<&'a [u32]>,
    /// Rows.
    pub rows: usize,
}

impl<'a> OutputChunk<'a> {
    /// The chunk of a host output.
    pub fn of(out: &'a Materialized<CpuBackend>) -> Self {
        Self {
            left: out.left.iter().map(HostColumn::of).collect(),
            right: out.right.iter().map(HostColumn::of).collect(),
            right_valid: out.right_valid.as_deref(),
            rows: out.rows as usize,
        }
    }

    /// Bytes of the chunk's columns.
    pub fn bytes(&self) -> u64 {
        let cols: usize = self.left.iter().chain(&self.right).map(column_bytes).sum();
        (cols + self.right_valid.map_or(0, |v| 4 * v.len())) as u64
    }
}

fn column_bytes(c: &HostColumn<'_>) -> usize {
    match c {
        HostColumn::U32(v) => 4 * v.len(),
        HostColumn::I32(v) => 4 * v.len(),
        HostColumn::U64(v) => 8 * v.len(),
        HostColumn::I64(v) => 8 * v.len(),
    }
}

/// How a streamed join runs.
#[derive(Debug, Clone, Copy)]
pub struct StreamOptions {
    /// The join (kind, algorithm: NPHJ-open, NPHJ-chained or auto, `right_unique`; a memory
    /// budget bounds each chunk's output).
    pub join: JoinOptions,
    /// Left rows a chunk holds at most.
    pub chunk_rows: usize,
    /// Chunks in flight at once on CUDA (filled, copied, probed): at least 2.
    pub buffers: usize,
    /// Record when each chunk's steps ran ([`StreamStats::timeline`]).
    pub timeline: bool,
}

impl StreamOptions {
    /// `join` in chunks of 2^24 rows, three in flight, no timeline.
    pub fn new(join: JoinOptions) -> Self {
        Self {
            join,
            chunk_rows: 1 << 24,
            buffers: 3,
            timeline: false,
        }
    }

    /// Left rows a chunk holds at most.
    pub fn chunk_rows(mut self, rows: usize) -> Self {
        self.chunk_rows = rows;
        self
    }

    /// Chunks in flight at once.
    pub fn buffers(mut self, buffers: usize) -> Self {
        self.buffers = buffers;
        self
    }

    /// Record the timeline.
    pub fn timeline(mut self, on: bool) -> Self {
        self.timeline = on;
        self
    }

    /// Checks the sizes.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for chunks of no row, fewer than 2 buffers, or chunks the
    /// joins' 32-bit row ids cannot address, or with [`JoinOptions::unpack_ids`].
    pub(crate) fn check(&self) -> Result<()> {
        crate::check_rows(self.chunk_rows)?;
        self.join.refuse_unpack_ids("a streamed join")?;
        if self.chunk_rows == 0 || self.buffers < 2 {
            return Err(Error::InvalidArgument(format!(
                "a streamed join needs chunks of at least one row and 2 buffers, not {} rows \
                 and {} buffers",
                self.chunk_rows, self.buffers
            )));
        }
        Ok(())
    }
}

/// A step of a streamed join's pipeline, for its timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// The source writes a chunk into host (staging) memory.
    Fill,
    /// The chunk crosses the host link to the device.
    CopyIn,
    /// The chunk is probed and its output materialized.
    Probe,
    /// The output crosses the link back to the host.
    CopyOut,
    /// The callback takes the output.
    Sink,
}

impl Lane {
    /// Every lane, in pipeline order.
    pub const ALL: [Lane; 5] = [
        Lane::Fill,
        Lane::CopyIn,
        Lane::Probe,
        Lane::CopyOut,
        Lane::Sink,
    ];

    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            Lane::Fill => "fill",
            Lane::CopyIn => "copy in",
            Lane::Probe => "probe",
            Lane::CopyOut => "copy out",
            Lane::Sink => "sink",
        }
    }
}

/// When one step of one chunk ran, in milliseconds from the stream's start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Span {
    /// The step.
    pub lane: Lane,
    /// The chunk, from 0.
    pub chunk: u64,
    /// Start.
    pub start_ms: f64,
    /// End.
    pub end_ms: f64,
}

/// What a streamed join reports.
#[derive(Debug, Clone)]
pub struct StreamStats {
    /// The right side's table build.
    pub build: JoinStats,
    /// Chunks probed (chunks with an empty output included).
    pub chunks: u64,
    /// Left rows streamed.
    pub left_rows: u64,
    /// Output rows.
    pub output_rows: u64,
    /// Left bytes that crossed the host link (keys and payloads; 0 on the CPU).
    pub bytes_in: u64,
    /// Output bytes that crossed it back (0 on the CPU).
    pub bytes_out: u64,
    /// Allocating the pipeline's buffers before the first chunk (ms; pinned host memory
    /// takes about a millisecond per 3 MB).
    pub setup_ms: f64,
    /// Time of the probes themselves, summed over the chunks (ms).
    pub probe_ms: f64,
    /// Wall time from the first fill to the last callback's return, the build and the setup
    /// not counted.
    pub wall_ms: f64,
    /// Most backend memory held at once, the table included.
    pub peak_memory_bytes: Option<usize>,
    /// When each step of each chunk ran ([`StreamOptions::timeline`]), host steps by the
    /// host's clock and device steps by CUDA events on the same time base.
    pub timeline: Vec<Span>,
}

impl StreamStats {
    /// Left bytes streamed per second of wall time, in GB/s.
    pub fn left_gbps(&self) -> f64 {
        self.bytes_in as f64 / (self.wall_ms * 1e-3) / 1e9
    }

    /// The whole join: build, setup and streaming (ms).
    pub fn total_ms(&self) -> f64 {
        self.build.total_ms() + self.setup_ms + self.wall_ms
    }
}

/// Backends that run a join whose left side streams from host memory.
pub trait StreamedJoin: JoinBackend {
    /// Builds the table on `right` (on this backend), then joins the left side `source`
    /// gives chunk by chunk and hands each chunk's output to `sink`, in the source's order
    /// of chunks (within a chunk, the order of a non-partitioned hash join: compare as
    /// multisets). Chunks with no output row are not handed on.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for bad [`StreamOptions`], an algorithm other than a
    /// non-partitioned hash join or auto, payload types of the source that change, or a
    /// source that writes more rows than its room; [`ProbeTable::build`]'s and
    /// [`ProbeTable::probe_columns`]'s errors; the source's and the sink's own. The join
    /// stops at the first.
    fn join_streamed<K: Key>(
        &self,
        right: &Table<Self, K>,
        source: &mut dyn ProbeSource<K>,
        opts: &StreamOptions,
        sink: &mut dyn FnMut(OutputChunk<'_>) -> Result<()>,
    ) -> Result<StreamStats>;
}

/// [`StreamedJoin::join_streamed`] on `b`.
///
/// # Errors
/// As [`StreamedJoin::join_streamed`].
pub fn join_streamed<B: StreamedJoin, K: Key>(
    b: &B,
    right: &Table<B, K>,
    source: &mut dyn ProbeSource<K>,
    opts: &StreamOptions,
    sink: &mut dyn FnMut(OutputChunk<'_>) -> Result<()>,
) -> Result<StreamStats> {
    b.join_streamed(right, source, opts, sink)
}

/// Room on `b` for a chunk of `rows` left rows with payloads of `types` (unwritten).
pub(crate) fn chunk_room<B: Backend, K: Key>(
    b: &B,
    types: &[ColumnType],
    rows: usize,
) -> Result<Table<B, K>> {
    Ok(Table {
        keys: b.alloc::<K>(rows)?,
        payloads: types
            .iter()
            .map(|t| t.alloc(b, rows))
            .collect::<Result<_>>()?,
    })
}

/// Checks what a source wrote: at most `room` rows.
pub(crate) fn check_filled(rows: usize, room: usize) -> Result<usize> {
    if rows > room {
        return Err(Error::InvalidArgument(format!(
            "a probe source wrote {rows} rows into room for {room}"
        )));
    }
    Ok(rows)
}

/// A clock for host spans, from the stream's start.
pub(crate) struct Clock {
    start: Instant,
    pub(crate) spans: Option<Vec<Span>>,
}

impl Clock {
    pub(crate) fn new(timeline: bool) -> Self {
        Self {
            start: Instant::now(),
            spans: timeline.then(Vec::new),
        }
    }

    /// A clock of the same start (for another thread), recording alike.
    #[cfg(feature = "cuda")]
    pub(crate) fn twin(&self) -> Self {
        Self {
            start: self.start,
            spans: self.spans.as_ref().map(|_| Vec::new()),
        }
    }

    /// Milliseconds since the start.
    pub(crate) fn now_ms(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1e3
    }

    /// Runs `work` as `lane` of `chunk`, recorded when the timeline is on.
    pub(crate) fn span<R>(&mut self, lane: Lane, chunk: u64, work: impl FnOnce() -> R) -> R {
        let start_ms = self.now_ms();
        let r = work();
        let end_ms = self.now_ms();
        if let Some(s) = &mut self.spans {
            s.push(Span {
                lane,
                chunk,
                start_ms,
                end_ms,
            });
        }
        r
    }
}

/// The CPU twin: chunk after chunk, the source writing straight into the columns probed.
impl StreamedJoin for CpuBackend {
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
        let room = opts.chunk_rows;
        let setup = Instant::now();
        let mut chunk = chunk_room(self, &types, room)?;
        let setup_ms = setup.elapsed().as_secs_f64() * 1e3;
        let mut clock = Clock::new(opts.timeline);
        let (mut chunks, mut left_rows, mut output_rows, mut probe_ms) = (0, 0, 0, 0.0);
        loop {
            chunk.keys.resize(room, K::default());
            for c in &mut chunk.payloads {
                joinkit_cuda::each_column!(c, v => v.resize(room, Default::default()));
            }
            let rows = clock.span(Lane::Fill, chunks, || {
                let mut rooms: Vec<HostColumnMut<'_>> =
                    chunk.payloads.iter_mut().map(HostColumnMut::of).collect();
                source.fill(&mut chunk.keys, &mut rooms)
            })?;
            if check_filled(rows, room)? == 0 {
                break;
            }
            chunk.keys.truncate(rows);
            for c in &mut chunk.payloads {
                joinkit_cuda::each_column!(c, v => v.truncate(rows));
            }
            let (out, st) = clock.span(Lane::Probe, chunks, || table.probe_columns(&chunk))?;
            probe_ms += st.total_ms();
            if out.rows > 0 {
                clock.span(Lane::Sink, chunks, || sink(OutputChunk::of(&out)))?;
            }
            chunks += 1;
            left_rows += rows as u64;
            output_rows += out.rows;
        }
        Ok(StreamStats {
            build: table.build_stats().clone(),
            chunks,
            left_rows,
            output_rows,
            bytes_in: 0,
            bytes_out: 0,
            setup_ms,
            probe_ms,
            wall_ms: clock.now_ms(),
            peak_memory_bytes: None,
            timeline: clock.spans.unwrap_or_default(),
        })
    }
}
