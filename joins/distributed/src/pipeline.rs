//! The pipelined shuffle (Thostrup et al., SIGMOD'23, §4): the build side has been shuffled;
//! the probe side, partitioned once by destination, moves in chunks (a slice of every
//! destination's rows each), and each chunk is probed while the next one is in flight.
//!
//! Two lanes per rank. The calling thread keeps the communicator (collectives stay on one
//! thread, in the same order on every rank) and moves the chunks on a stream of its own
//! ([`SideStream`]: the collectives run on the stream of the backend they are given). A second
//! thread builds the hash table on the caller's backend and probes each chunk as it arrives.
//! The lanes meet in a rendezvous channel: a chunk is handed over only when the probe lane
//! takes it, so at most two received chunks exist at once (the one probed, the one arriving),
//! the double buffering of the paper; the probe side is never received whole.
//!
//! Failures: before each chunk moves, the ranks agree that every rank assembled it and that no
//! probe lane has failed ([`Communicator::agree`]), so all stop at the same chunk; a probe
//! lane's failure after the last chunk is agreed on at the end. Never a hang.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, sync_channel};
use std::time::Instant;

use joinkit::{
    Algorithm, JoinBackend, JoinOptions, JoinStats, Materialized, PartitionedProbe, ProbeTable,
    Table, add_phase, join_columns,
};
use joinkit_comm::Communicator;
use joinkit_cuda::{Backend, Column, CpuBackend, Element, Error, Key, Result};

use crate::driver::check_output_budget;
use crate::shuffle::{regroup, settle};
use crate::stats::{PipelineStats, Span};

/// A second queue of work on a backend's device, so rows move while the caller's stream
/// computes.
pub trait SideStream: Backend {
    /// A backend on the same device with a stream of its own (the CPU backend: itself).
    ///
    /// # Errors
    /// Driver errors creating the stream.
    fn side_stream(&self) -> Result<Self>;

    /// Makes the backend usable on the calling thread (CUDA: binds its context, which CUB's
    /// runtime calls need).
    ///
    /// # Errors
    /// Driver errors.
    fn enter(&self) -> Result<()>;

    /// A point in this backend's queue (CUDA: an event recorded on its stream; the CPU: the
    /// time), for other streams to wait for and spans of queued work to be timed by.
    type Mark;

    /// Marks the work queued on this backend so far.
    ///
    /// # Errors
    /// Driver errors.
    fn mark(&self) -> Result<Self::Mark>;

    /// Makes the work queued on this backend from now on wait for the work before `mark`
    /// (a mark of any backend of the same device).
    ///
    /// # Errors
    /// Driver errors.
    fn wait_for(&self, mark: &Self::Mark) -> Result<()>;

    /// Milliseconds from mark `from` to mark `to` (marks of any backends of the same device),
    /// once `to` is reached (the caller waits for it).
    ///
    /// # Errors
    /// Driver errors.
    fn ms_between(from: &Self::Mark, to: &Self::Mark) -> Result<f64>;
}

impl SideStream for CpuBackend {
    fn side_stream(&self) -> Result<Self> {
        Ok(*self)
    }

    fn enter(&self) -> Result<()> {
        Ok(())
    }

    type Mark = Instant;

    fn mark(&self) -> Result<Instant> {
        Ok(Instant::now())
    }

    fn wait_for(&self, _: &Instant) -> Result<()> {
        // The CPU backend's work is done when its calls return.
        Ok(())
    }

    fn ms_between(from: &Instant, to: &Instant) -> Result<f64> {
        Ok(to.saturating_duration_since(*from).as_secs_f64() * 1e3)
    }
}

#[cfg(feature = "cuda")]
impl SideStream for joinkit_cuda::CudaBackend {
    fn side_stream(&self) -> Result<Self> {
        joinkit_cuda::CudaBackend::side_stream(self)
    }

    fn enter(&self) -> Result<()> {
        self.bind_to_thread()
    }

    type Mark = joinkit_cuda::cudarc::driver::CudaEvent;

    fn mark(&self) -> Result<Self::Mark> {
        use joinkit_cuda::cudarc::driver::sys::CUevent_flags;
        let op = joinkit_cuda::driver("marking the stream");
        // Timing events (cudarc's default disables timing).
        let event = (self.context())
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(&op)?;
        event.record(self.stream()).map_err(&op)?;
        Ok(event)
    }

    fn wait_for(&self, mark: &Self::Mark) -> Result<()> {
        (self.stream())
            .wait(mark)
            .map_err(joinkit_cuda::driver("waiting for another stream"))
    }

    fn ms_between(from: &Self::Mark, to: &Self::Mark) -> Result<f64> {
        let op = joinkit_cuda::driver("timing queued work");
        to.synchronize().map_err(&op)?;
        Ok(f64::from(from.elapsed_ms(to).map_err(&op)?))
    }
}

/// Stack of the probe lane's thread: what an in-process rank's thread gets (the local joins'
/// recursion stays well inside).
const PROBE_STACK_BYTES: usize = 16 << 20;

/// A join's phases (the backend's timing) and its timeline (milliseconds since it began).
///
/// Work queued on a stream is timed between two marks and read once the join is done
/// ([`Clock::finish`]): timing a phase never waits for its work, so the next phase's kernels
/// are queued while the host agrees with the other ranks on the last one's sizes. Its span on
/// the timeline runs between its marks, counted from a mark queued when the join began.
pub(crate) struct Clock<B: SideStream> {
    start: Instant,
    pub(crate) phases: Phases,
    pub(crate) spans: Vec<Span>,
    /// Where the timeline's spans of queued work count from.
    origin: B::Mark,
    /// Work queued and not read yet, in queue order.
    queued: Vec<Queued<B::Mark>>,
    /// The first failure to mark the stream around a phase. It is said by [`Clock::finish`],
    /// which the ranks agree on, so that a rank whose stream fails leaves with the others at
    /// the same step instead of alone (where the others would see only a timeout).
    failed: Option<Error>,
}

/// Phases by name with their milliseconds, in the order they first ran.
pub(crate) type Phases = Vec<(&'static str, f64)>;

/// Work queued on a stream of the join's device: its phase and the marks around it.
struct Queued<M> {
    what: &'static str,
    from: M,
    to: M,
}

impl<B: SideStream> Clock<B> {
    /// A clock whose timeline starts now, on `b`'s stream.
    ///
    /// # Errors
    /// Driver errors marking the stream.
    pub(crate) fn new(b: &B) -> Result<Self> {
        Ok(Self {
            start: Instant::now(),
            phases: Vec::new(),
            spans: Vec::new(),
            origin: b.mark()?,
            queued: Vec::new(),
            failed: None,
        })
    }

    /// Milliseconds since the join began.
    pub(crate) fn now(&self) -> f64 {
        ms_since(self.start)
    }

    /// Times the work `work` queues on `b`'s stream as phase `name` (on the communication lane
    /// for the shuffle and the gather, else on the compute lane), without waiting for it.
    ///
    /// # Errors
    /// `work`'s. A failure to mark the stream is kept for [`Clock::finish`].
    pub(crate) fn phase<R>(
        &mut self,
        b: &B,
        name: &'static str,
        work: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        self.phase_marked(|| b.mark(), name, work)
    }

    /// [`Clock::phase`] with the stream marked by `mark`: a phase whose marks fail still runs
    /// its work and returns its result, and is left out of the timing.
    fn phase_marked<R>(
        &mut self,
        mut mark: impl FnMut() -> Result<B::Mark>,
        name: &'static str,
        work: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let from = self.kept(mark());
        let r = work()?;
        let to = self.kept(mark());
        if let (Some(from), Some(to)) = (from, to) {
            self.queued(name, from, to);
        }
        Ok(r)
    }

    /// `mark`'s value, or `None` with its error kept for [`Clock::finish`].
    fn kept(&mut self, mark: Result<B::Mark>) -> Option<B::Mark> {
        mark.map_err(|e| {
            self.failed.get_or_insert(e);
        })
        .ok()
    }

    /// Adds the work between marks `from` and `to` (of any stream of the device) as phase
    /// `name`, timed at the end.
    pub(crate) fn queued(&mut self, what: &'static str, from: B::Mark, to: B::Mark) {
        // The phase keeps its place among the phases now; its time comes at the end.
        add_phase(&mut self.phases, what, 0.0);
        self.queued.push(Queued { what, from, to });
    }

    /// The phases' times and the timeline, once the queued work is done (this waits for it).
    ///
    /// # Errors
    /// The first failure to mark the stream around a phase, once the work marked before it
    /// is done (the ranks free their buffers after agreeing on it); driver errors reading the
    /// marks.
    pub(crate) fn finish(mut self) -> Result<(Phases, Vec<Span>)> {
        if let Some(e) = self.failed.take() {
            for q in &self.queued {
                // Only the wait matters; the failure said is the first one.
                let _ = B::ms_between(&q.from, &q.to);
            }
            return Err(e);
        }
        for q in std::mem::take(&mut self.queued) {
            let ms = B::ms_between(&q.from, &q.to)?;
            add_phase(&mut self.phases, q.what, ms);
            let start_ms = B::ms_between(&self.origin, &q.from)?.max(0.0);
            let lane = match q.what {
                "shuffle" | "gather" => "communication",
                _ => "compute",
            };
            self.spans.push(Span {
                lane,
                what: q.what,
                chunk: None,
                start_ms,
                end_ms: start_ms + ms,
            });
        }
        self.spans.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
        Ok((self.phases, self.spans))
    }
}

fn ms_since(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

/// `s`'s figures added to `acc`'s (left rows, output rows, phase times; the most memory).
pub(crate) fn add_stats(acc: &mut Option<JoinStats>, s: JoinStats) {
    match acc {
        Some(a) => a.absorb(&s),
        None => *acc = Some(s),
    }
}

/// Right sides from which [`Algorithm::Auto`] probes chunks against a partitioned right side
/// ([`PartitionedProbe`]) rather than a hash table of it ([`ProbeTable`]): 2^22 rows are 32 MiB
/// of 8-byte keys, about the L2 cache of an H100/H200, past which every probe of a table misses
/// it (4 H200s, 2^28 right rows a rank: a table probed by chunks was 4× slower than PHJ-OM).
pub(crate) const PARTITIONED_PROBE_ROWS: usize = 1 << 22;

/// Whether probes of a right side of `right_rows` rows go to a [`PartitionedProbe`]: PHJ-OM,
/// or `Auto` from [`PARTITIONED_PROBE_ROWS`], for the joins it supports (`partitionable`).
pub(crate) fn probes_partitioned(
    opts: &JoinOptions,
    right_rows: usize,
    partitionable: bool,
) -> bool {
    partitionable
        && match opts.algorithm {
            Algorithm::PhjOm => true,
            Algorithm::Auto => right_rows >= PARTITIONED_PROBE_ROWS,
            _ => false,
        }
}

/// What probes the chunks: the right side partitioned once ([`PartitionedProbe`]: PHJ-OM, or
/// [`Algorithm::Auto`] on a large right side, for the joins it supports), a hash table on the
/// whole right side built once ([`ProbeTable`]: a non-partitioned hash join, or `Auto`
/// otherwise), or, for another local algorithm the caller named, that algorithm per chunk
/// against the whole right side.
enum Prober<'r, B: JoinBackend, K: Key> {
    Partitioned(PartitionedProbe<'r, B, K>),
    Table(ProbeTable<'r, B, K>),
    Each {
        b: B,
        right: &'r Table<B, K>,
        opts: JoinOptions,
    },
}

impl<'r, B: JoinBackend, K: Key> Prober<'r, B, K> {
    /// The prober, with its build statistics where it built something (`partitionable`:
    /// whether [`PartitionedProbe::supports`] the join).
    fn new(
        b: &B,
        right: &'r Table<B, K>,
        partitionable: bool,
        opts: &JoinOptions,
    ) -> Result<(Self, Option<JoinStats>)> {
        if probes_partitioned(opts, right.len(), partitionable) {
            let p = PartitionedProbe::build(b, right, opts)?;
            let build = p.build_stats().clone();
            return Ok((Self::Partitioned(p), Some(build)));
        }
        match opts.algorithm {
            Algorithm::Auto | Algorithm::NphjOpen | Algorithm::NphjChained => {
                let table = ProbeTable::build(b, right, opts)?;
                let build = table.build_stats().clone();
                Ok((Self::Table(table), Some(build)))
            }
            _ => Ok((
                Self::Each {
                    b: b.clone(),
                    right,
                    opts: *opts,
                },
                None,
            )),
        }
    }

    fn probe(&self, left: &Table<B, K>) -> Result<(Materialized<B>, JoinStats)> {
        match self {
            Self::Partitioned(p) => p.probe_columns(left),
            Self::Table(t) => t.probe_columns(left),
            Self::Each { b, right, opts } => join_columns(b, left, right, opts),
        }
    }
}

/// The probe side of a pipelined join on one rank.
pub(crate) struct Pipeline<'r, B: Backend, K: Key> {
    /// The left rows that move, grouped by destination rank.
    pub(crate) left: Table<B, K>,
    /// Rows of `left` for each rank.
    pub(crate) counts: Vec<usize>,
    /// Left rows probed where they are (heavy keys' rows), while the first chunk moves.
    pub(crate) kept: Option<Table<B, K>>,
    /// The whole right side this rank joins with.
    pub(crate) right: &'r Table<B, K>,
    /// Chunks the left rows move in.
    pub(crate) chunks: usize,
}

/// What a pipeline gives: the output, the probes' statistics, the pipeline's account, and the
/// rows this rank joined of each side.
pub(crate) struct Piped<B: Backend> {
    pub(crate) out: Materialized<B>,
    pub(crate) local: JoinStats,
    pub(crate) stats: PipelineStats,
    pub(crate) left_rows: usize,
    pub(crate) right_rows: usize,
}

/// Moves a chunk (rows grouped by destination, so many a rank) to its ranks on the given
/// backend's stream.
pub(crate) type Exchange<'a, B, K> =
    dyn FnMut(&B, &Table<B, K>, &[usize]) -> Result<Table<B, K>> + 'a;

/// Chunk `i` of `chunks` of each destination's rows of a table grouped by `counts`: the row
/// ranges, in destination order.
fn chunk_segments(counts: &[usize], i: usize, chunks: usize) -> Vec<std::ops::Range<usize>> {
    let cut = |c: usize, k: usize| (c as u128 * k as u128 / chunks as u128) as usize;
    let mut at = 0usize;
    counts
        .iter()
        .map(|&c| {
            let s = at + cut(c, i)..at + cut(c, i + 1);
            at += c;
            s
        })
        .collect()
}

/// Runs the pipeline: moves the chunks with `exchange` (on the communication stream it is
/// given) on this thread, probes them on a second one, and returns the outputs concatenated.
///
/// # Errors
/// As the exchange and [`joinkit::join_columns`]; a failure on any rank is an error on every
/// rank.
pub(crate) fn run<C, K>(
    comm: &C,
    b: &C::Backend,
    p: Pipeline<'_, C::Backend, K>,
    opts: &JoinOptions,
    clock: &mut Clock<C::Backend>,
    exchange: &mut Exchange<'_, C::Backend, K>,
) -> Result<Piped<C::Backend>>
where
    C: Communicator,
    C::Backend: JoinBackend + SideStream,
    K: Key,
{
    const PROBE_FAILED: &str = "probing a chunk";
    // The partitions are written before the other stream reads them.
    let cb = settle(
        comm,
        "opening the communication stream",
        b.synchronize().and_then(|()| b.side_stream()),
    )?;
    let Pipeline {
        left,
        counts,
        kept,
        right,
        chunks,
    } = p;
    let partitionable =
        PartitionedProbe::<C::Backend, K>::supports(opts, &left.payloads, &right.payloads);
    let failed = AtomicBool::new(false);
    let wall_start = clock.now();
    let start = clock.start;
    let (tx, rx) = sync_channel::<(usize, Table<C::Backend, K>)>(0);
    let mut moved = Vec::with_capacity(chunks);
    let (outcome, lane) = std::thread::scope(|s| {
        let worker = std::thread::Builder::new()
            .name(format!("rank-{}-probe", comm.rank()))
            .stack_size(PROBE_STACK_BYTES)
            .spawn_scoped(s, || {
                probe_lane(b, (right, partitionable), kept, rx, opts, start, &failed)
            });
        let outcome = (|| {
            // This rank's failure not yet told to the others: said at the next agreement.
            let mut pending = worker.as_ref().map(drop).map_err(|e| {
                Error::InvalidArgument(format!("cannot start the probe lane's thread: {e}"))
            });
            for i in 0..chunks {
                let t = ms_since(start);
                let segments = chunk_segments(&counts, i, chunks);
                let assembled = std::mem::replace(&mut pending, Ok(()))
                    .and_then(|()| {
                        if failed.load(Ordering::Acquire) {
                            Err(Error::PeerFailed {
                                rank: comm.rank(),
                                op: PROBE_FAILED,
                            })
                        } else {
                            Ok(())
                        }
                    })
                    .and_then(|()| regroup(&cb, &left, &segments));
                let chunk = settle(comm, "assembling a chunk", assembled)?;
                let sizes: Vec<usize> = segments.iter().map(|s| s.len()).collect();
                let got = exchange(&cb, &chunk, &sizes)?;
                drop(chunk);
                // The chunk's last writes (a decode) finish before the other stream reads it;
                // a probe lane that has ended (failed) is said at the next agreement.
                let synced = cb.synchronize();
                moved.push(Span {
                    lane: "communication",
                    what: "shuffle",
                    chunk: Some(i),
                    start_ms: t,
                    end_ms: ms_since(start),
                });
                match synced {
                    Ok(()) => {
                        if tx.send((i, got)).is_err() {
                            failed.store(true, Ordering::Release);
                        }
                    }
                    Err(e) => pending = Err(e),
                }
            }
            Ok(pending)
        })();
        drop(tx);
        // `None`: the lane never started (the outcome says why).
        let lane = worker.ok().map(|w| {
            w.join()
                .unwrap_or_else(|_| Err(Error::InvalidArgument("the probe lane panicked".into())))
        });
        (outcome, lane)
    });
    let lane = match (outcome, lane) {
        // Every rank stopped at the same chunk; this rank's own probe error says more.
        (Err(e), lane) => return Err(lane.and_then(Result::err).unwrap_or(e)),
        (Ok(pending), lane) => settle(
            comm,
            PROBE_FAILED,
            pending.and_then(|()| {
                lane.unwrap_or_else(|| Err(Error::Corrupt("no probe lane ran".into())))
            }),
        )?,
    };
    let wall_ms = ms_since(start) - wall_start;
    let shuffle_ms = moved.iter().map(Span::ms).sum();
    let compute_ms = lane.spans.iter().map(Span::ms).sum();
    clock.spans.extend(moved);
    clock.spans.extend(lane.spans);
    let left_rows = lane.parts.iter().map(|p| p.1).sum();
    let parts: Vec<Materialized<C::Backend>> = lane.parts.into_iter().map(|p| p.0).collect();
    let out = settle(
        comm,
        "concatenating the chunks' outputs",
        concat_outputs(b, parts, opts),
    )?;
    Ok(Piped {
        out,
        local: lane
            .stats
            .ok_or_else(|| Error::Corrupt("no probe ran".into()))?,
        stats: PipelineStats {
            chunks,
            wall_ms,
            shuffle_ms,
            compute_ms,
        },
        left_rows,
        right_rows: right.len(),
    })
}

/// What the probe lane gives back: each probe's output with its left rows, their statistics
/// added up, and its spans.
struct Lane<B: Backend> {
    parts: Vec<(Materialized<B>, usize)>,
    stats: Option<JoinStats>,
    spans: Vec<Span>,
}

/// The probe lane: builds the table, probes the rows kept here, then each chunk as it
/// arrives (waiting for its GPU work before the chunk is freed: it lives on the other
/// stream). Sets `failed` when it fails, so the communication lane says so to the others.
fn probe_lane<B: JoinBackend + SideStream, K: Key>(
    b: &B,
    (right, partitionable): (&Table<B, K>, bool),
    kept: Option<Table<B, K>>,
    chunks: Receiver<(usize, Table<B, K>)>,
    opts: &JoinOptions,
    start: Instant,
    failed: &AtomicBool,
) -> Result<Lane<B>> {
    let mut lane = Lane {
        parts: Vec::new(),
        stats: None,
        spans: Vec::new(),
    };
    let span = |lane: &mut Lane<B>, what, chunk, t| {
        lane.spans.push(Span {
            lane: "compute",
            what,
            chunk,
            start_ms: t,
            end_ms: ms_since(start),
        });
    };
    let r = (|| {
        b.enter()?;
        let t = ms_since(start);
        let (prober, build) = Prober::new(b, right, partitionable, opts)?;
        if let Some(build) = build {
            add_stats(&mut lane.stats, build);
        }
        span(&mut lane, "build", None, t);
        let probe = |lane: &mut Lane<B>, left: Table<B, K>, chunk| -> Result<()> {
            let t = ms_since(start);
            let (out, st) = prober.probe(&left)?;
            b.synchronize()?;
            lane.parts.push((out, left.len()));
            add_stats(&mut lane.stats, st);
            span(lane, "probe", chunk, t);
            Ok(())
        };
        if let Some(k) = kept {
            probe(&mut lane, k, None)?;
        }
        for (i, chunk) in chunks {
            probe(&mut lane, chunk, Some(i))?;
        }
        Ok(())
    })();
    match r {
        Ok(()) => Ok(lane),
        Err(e) => {
            failed.store(true, Ordering::Release);
            Err(e)
        }
    }
}

/// The parts' rows one after another (each part's first `rows` rows: a column may hold
/// more). Each part fitted the output budget alone; the whole must too, as the blocking
/// join's output does.
fn concat_outputs<B: Backend>(
    b: &B,
    mut parts: Vec<Materialized<B>>,
    opts: &JoinOptions,
) -> Result<Materialized<B>> {
    let first = parts
        .first()
        .ok_or_else(|| Error::Corrupt("no output".into()))?;
    check_output_budget(opts, first, parts.iter().map(|p| p.rows).sum())?;
    if parts.len() == 1 {
        return parts
            .pop()
            .ok_or_else(|| Error::Corrupt("no output".into()));
    }
    let rows = parts
        .iter()
        .map(|p| usize::try_from(p.rows).map_err(|_| Error::SizeOverflow("output rows")))
        .collect::<Result<Vec<usize>>>()?;
    let first = &parts[0];
    let side = |pick: fn(&Materialized<B>) -> &Vec<Column<B>>| {
        (0..pick(first).len())
            .map(|j| {
                let cols: Vec<&Column<B>> = parts.iter().map(|p| &pick(p)[j]).collect();
                concat_columns(b, &cols, &rows)
            })
            .collect::<Result<Vec<_>>>()
    };
    let left = side(|p| &p.left)?;
    let right = side(|p| &p.right)?;
    let right_valid = match first.right_valid {
        Some(_) => Some(cat(
            b,
            &parts
                .iter()
                .map(|p| p.right_valid.as_ref())
                .collect::<Vec<_>>(),
            &rows,
        )?),
        None => None,
    };
    Ok(Materialized {
        left,
        right,
        right_valid,
        rows: parts.iter().map(|p| p.rows).sum(),
    })
}

/// The first `rows[k]` values of each `parts[k]`, one after another.
fn cat<B: Backend, T: Element>(
    b: &B,
    parts: &[Option<&B::Buf<T>>],
    rows: &[usize],
) -> Result<B::Buf<T>> {
    let mut out = b.alloc::<T>(joinkit_comm::total(rows)?)?;
    let mut at = 0;
    for (p, &n) in parts.iter().zip(rows) {
        let p = p.ok_or_else(|| Error::Corrupt("chunk outputs of different columns".into()))?;
        b.copy_range_into(p, 0..n, &mut out, at)?;
        at += n;
    }
    Ok(out)
}

/// [`cat`] of one column of every part (all of the first's type).
fn concat_columns<B: Backend>(b: &B, cols: &[&Column<B>], rows: &[usize]) -> Result<Column<B>> {
    macro_rules! of {
        ($variant:ident) => {
            Column::$variant(cat(
                b,
                &cols
                    .iter()
                    .map(|c| match c {
                        Column::$variant(x) => Some(x),
                        _ => None,
                    })
                    .collect::<Vec<_>>(),
                rows,
            )?)
        };
    }
    Ok(match cols.first() {
        Some(Column::U32(_)) => of!(U32),
        Some(Column::I32(_)) => of!(I32),
        Some(Column::U64(_)) => of!(U64),
        Some(Column::I64(_)) => of!(I64),
        None => return Err(Error::Corrupt("no column to concatenate".into())),
    })
}

#[cfg(test)]
mod tests {
    use joinkit_cuda::{CpuBackend, Error};

    use super::Clock;

    /// A failed mark does not fail its phase, which the other ranks would pass to meet this one
    /// at their next step: the phase's work still runs and returns, the phase is left out of
    /// the timing, and the first such failure is said when the phases are read.
    #[test]
    fn a_failed_mark_is_said_when_the_phases_are_read() {
        let b = CpuBackend::new();
        let mut clock = Clock::new(&b).unwrap();
        assert_eq!(clock.phase(&b, "partition", || Ok(7)).unwrap(), 7);
        let mut marks = 0;
        let failing = || {
            marks += 1;
            Err(Error::Corrupt(format!("mark {marks}")))
        };
        let mut ran = false;
        let got = clock.phase_marked(failing, "shuffle", || {
            ran = true;
            Ok(8)
        });
        assert_eq!(got.unwrap(), 8);
        assert!(ran, "the phase's work runs though its marks fail");
        assert_eq!(clock.phase(&b, "local join", || Ok(9)).unwrap(), 9);
        assert_eq!(
            clock.queued.len(),
            2,
            "the phase without marks is not timed"
        );
        match clock.finish() {
            Err(Error::Corrupt(why)) => assert_eq!(why, "mark 1"),
            other => panic!("expected the first failure, got {other:?}"),
        }

        let mut clock = Clock::new(&b).unwrap();
        clock.phase(&b, "partition", || Ok(())).unwrap();
        clock.phase(&b, "local join", || Ok(())).unwrap();
        let (phases, spans) = clock.finish().unwrap();
        let names: Vec<_> = phases.iter().map(|p| p.0).collect();
        assert_eq!(names, ["partition", "local join"]);
        assert_eq!(spans.len(), 2);
    }
}
