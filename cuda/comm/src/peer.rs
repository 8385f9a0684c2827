//! The copy-engine communicator: ranks are threads of one process, each driving a GPU of its
//! own (or sharing one); host values meet in shared memory as in [`LocalComm`], and buffers move
//! by the GPUs' copy engines. Each rank pushes its rows for a peer straight into the peer's
//! receive buffer (`cuMemcpyDtoDAsync` between allocations the peer's GPU may map), on a stream
//! of its own per peer, and the receiver's stream waits on the senders' events: the host never
//! waits for the data, and no SM moves it, so kernels queued beside a shuffle keep the whole
//! GPU.
//!
//! Why it exists (4 × H200, NV18, 2.4 GB a rank, one process): pushes on a stream per peer
//! move 374 GB/s a rank, NCCL's all-to-all of the same bytes 316, and the distributed join's
//! NCCL shuffle 170–178; a memory-bound kernel running beside the pushes took 4 % longer
//! (`docs/results/distributed.md`). Pulls (the receiver reading its peers' buffers) move half
//! as fast. One process per GPU (a launcher) stays with [`crate::nccl::NcclComm`].

use std::sync::Arc;

use joinkit_cuda::cudarc::driver::sys::{
    self, CUdeviceptr, CUevent, CUmemAccess_flags, CUmemAccessDesc, CUmemLocation,
    CUmemLocationType, CUresult, CUstream,
};
use joinkit_cuda::cudarc::driver::{CudaEvent, CudaStream};
use joinkit_cuda::{ColumnRef, CudaBackend, DeviceBuffer, Element, Error, Result};

use crate::device::{POISON, alloc_like, column_parts, one_column, table_rows};
use crate::{
    CommConfig, Communicator, LocalComm, LocalWorld, ReceivedColumns, TableToSend, send_offsets,
    total,
};

/// One rank of a [`PeerComm`] world: a [`Communicator`] over [`CudaBackend`] buffers.
///
/// Made by [`PeerComm::init_all`]; move each to the thread that drives its rank. Collectives
/// return once the transfers are queued: their outputs are ready on the backend's stream, and
/// send buffers may be reused or freed on it (the stream waits for the pushes out of them).
pub struct PeerComm {
    /// Host values, agreements and splits: the in-process rendezvous.
    host: LocalComm<CudaBackend>,
    /// This rank's device and stream.
    backend: CudaBackend,
    /// A stream per peer (index = peer rank) on this rank's device, and the event that marks
    /// the end of the pushes queued on it by the last collective.
    lanes: Vec<(Arc<CudaStream>, CudaEvent)>,
    /// Recorded on the backend's stream once the send buffers are written and the receive
    /// buffers allocated: the pushes into and out of them wait on it.
    ready: std::mem::ManuallyDrop<CudaEvent>,
    /// Set at a meeting that failed (a peer gone or past the time limit): collectives are
    /// refused, and the events are leaked at drop, since a late peer may still wait on them.
    broken: std::cell::Cell<bool>,
}

impl Drop for PeerComm {
    fn drop(&mut self) {
        if self.broken.get() {
            std::mem::forget(std::mem::take(&mut self.lanes));
        } else {
            // SAFETY: dropped once, here; not used after.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.ready) };
        }
    }
}

impl std::fmt::Debug for PeerComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerComm")
            .field("rank", &self.host.rank())
            .field("size", &self.host.size())
            .field("device", &self.backend.info().ordinal)
            .finish()
    }
}

/// Lets every device of `backends` map the others' memory: peer access between the contexts
/// (plain allocations) and access to each device's default memory pool, which the backends'
/// buffers come from. Ranks on one device need nothing. Leaves the last device's context
/// current on the calling thread.
fn grant_peer_access(backends: &[CudaBackend]) -> Result<()> {
    if let Some((from, to)) = PeerComm::lacking_peer_access(backends)? {
        return Err(Error::InvalidArgument(format!(
            "cuda:{from} cannot map cuda:{to}'s memory (no peer access between them): the \
             copy-engine communicator needs it; NCCL does not"
        )));
    }
    let check = |op: &'static str, code: CUresult| code.result().map_err(joinkit_cuda::driver(op));
    for a in backends {
        for b in backends {
            let (ctx, peer) = (a.context(), b.context());
            if a.info().ordinal == b.info().ordinal {
                continue;
            }
            a.bind_to_thread()?;
            // SAFETY: both contexts are live; the first is current. Past 8 peers a context
            // takes no more: the pools' access below is what the buffers need.
            match unsafe { sys::cuCtxEnablePeerAccess(peer.cu_ctx(), 0) } {
                CUresult::CUDA_SUCCESS
                | CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
                | CUresult::CUDA_ERROR_TOO_MANY_PEERS => {}
                e => check("enabling peer access", e)?,
            }
            let mut pool = std::ptr::null_mut();
            let desc = CUmemAccessDesc {
                location: CUmemLocation {
                    type_: CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
                    id: peer.cu_device(),
                },
                flags: CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            // SAFETY: the out pointer is valid for the call.
            check("reading the memory pool", unsafe {
                sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device())
            })?;
            // SAFETY: the pool is the device's; the one descriptor is valid for the call.
            check("granting a peer the memory pool", unsafe {
                sys::cuMemPoolSetAccess(pool, &desc, 1)
            })?;
        }
    }
    Ok(())
}

/// A table's pushes: its columns' (address, rows, width) and its (start row, rows) for each
/// peer.
type Pushed<'a> = (&'a [(CUdeviceptr, usize, usize)], &'a [(usize, usize)]);

/// A table [`PeerComm::exchange`] moves: its columns, and the rows for each peer (`sends[p]` =
/// start row, rows).
struct Outgoing<'c, 'b> {
    columns: &'c [ColumnRef<'b, CudaBackend>],
    sends: Vec<(usize, usize)>,
}

impl<'c, 'b> Outgoing<'c, 'b> {
    /// The tables of an all-to-all among `size` ranks (each table's columns, and its rows for
    /// each rank in rank order), and the verdict on them: the first bad table's error (counts
    /// past its rows, or columns of different lengths); such a table sends nothing.
    fn all_to_all(
        size: usize,
        tables: &[TableToSend<'c, 'b, CudaBackend>],
    ) -> (Vec<Self>, Result<()>) {
        let mut checked = Ok(());
        let outgoing = (tables.iter())
            .map(|&(columns, send_counts)| {
                let at = table_rows(&column_parts(columns))
                    .and_then(|rows| send_offsets(size, send_counts, rows));
                let sends = match at {
                    Ok(at) => at.iter().zip(send_counts).map(|(&a, &n)| (a, n)).collect(),
                    Err(e) => {
                        if checked.is_ok() {
                            checked = Err(e);
                        }
                        vec![(0, 0); size]
                    }
                };
                Self { columns, sends }
            })
            .collect();
        (outgoing, checked)
    }
}

impl PeerComm {
    /// The first pair of `backends`' GPUs (ordinals) of which the first cannot map the
    /// second's memory, or `None` when every pair can: what [`PeerComm::init_all`] needs, and
    /// NCCL does not (it stages through host memory there).
    ///
    /// # Errors
    /// Driver errors asking the devices.
    pub fn lacking_peer_access(backends: &[CudaBackend]) -> Result<Option<(usize, usize)>> {
        for a in backends {
            for b in backends {
                let (from, to) = (a.info().ordinal, b.info().ordinal);
                if from == to {
                    continue;
                }
                let mut can = 0;
                // SAFETY: the out pointer is valid; the devices are open.
                unsafe {
                    sys::cuDeviceCanAccessPeer(
                        &mut can,
                        a.context().cu_device(),
                        b.context().cu_device(),
                    )
                }
                .result()
                .map_err(joinkit_cuda::driver("asking for peer access"))?;
                if can == 0 {
                    return Ok(Some((from, to)));
                }
            }
        }
        Ok(None)
    }

    /// One rank per backend (rank = index), all in this process: each on its own GPU, or
    /// several on one. Every pair of GPUs must have peer access (NVLink or PCIe P2P); every
    /// device's memory pool is opened to the others.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no backends or two GPUs without peer access; driver
    /// errors.
    pub fn init_all(backends: &[CudaBackend], config: CommConfig) -> Result<Vec<Self>> {
        let world = LocalWorld::new(backends.len(), config)?;
        grant_peer_access(backends)?;
        world
            .comms::<CudaBackend>()
            .into_iter()
            .zip(backends)
            .map(|(host, backend)| Self::with_host(host, backend.clone()))
            .collect()
    }

    fn with_host(host: LocalComm<CudaBackend>, backend: CudaBackend) -> Result<Self> {
        let ctx = backend.context().clone();
        let op = joinkit_cuda::driver("making the peer streams");
        let lanes = (0..host.size())
            .map(|_| {
                Ok((
                    ctx.new_stream().map_err(&op)?,
                    ctx.new_event(None).map_err(&op)?,
                ))
            })
            .collect::<Result<_>>()?;
        let ready = std::mem::ManuallyDrop::new(ctx.new_event(None).map_err(&op)?);
        Ok(Self {
            host,
            backend,
            lanes,
            ready,
            broken: std::cell::Cell::new(false),
        })
    }

    /// The backend this rank was made with.
    pub fn backend(&self) -> &CudaBackend {
        &self.backend
    }

    /// The device of `backend` must be this rank's.
    fn check_backend(&self, backend: &CudaBackend) -> Result<()> {
        let (mine, theirs) = (self.backend.info().ordinal, backend.info().ordinal);
        if mine == theirs {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "a buffer collective on cuda:{theirs} for a communicator on cuda:{mine}"
            )))
        }
    }

    /// Moves every table of `tables`: the rows `sends[p]` = (start row, rows) of its columns to
    /// peer `p`, into receive columns allocated like them, each peer's rows in rank order.
    /// `checked` is the caller's verdict on its input: a rank with bad input sends [`POISON`]
    /// counts, so every rank fails instead of waiting for it.
    ///
    /// Four meetings of the ranks, however many tables (none too): the tables' shapes and
    /// counts; the receive buffers' addresses and each rank's ready event, or its failure to
    /// allocate (then no one pushes); each rank's push events, which the receiver's stream
    /// waits on; and one once every rank has queued those waits (so no event is destroyed
    /// before it).
    /// A rank that failed to queue its pushes waits for the ones it queued before the third
    /// meeting, so no buffer is freed while a push may still read or write it. A meeting that
    /// fails (a peer gone or past the time limit) leaves the receive buffers allocated and the
    /// communicator broken.
    fn exchange(
        &self,
        op: &'static str,
        backend: &CudaBackend,
        tables: &[Outgoing<'_, '_>],
        checked: Result<()>,
    ) -> Result<Vec<ReceivedColumns<CudaBackend>>> {
        self.live(op)?;
        let (me, size) = (self.rank(), self.size());
        let parts: Vec<_> = tables.iter().map(|t| column_parts(t.columns)).collect();
        let checked = checked.and_then(|()| self.check_backend(backend));
        // The number of tables, each table's columns and their widths, then the rows for each
        // rank by table: ranks must send alike tables (another shape is another length, which
        // the gather refuses, or other words, which every rank sees).
        let shape: Vec<u64> = std::iter::once(tables.len() as u64)
            .chain(parts.iter().map(|p| p.len() as u64))
            .chain(parts.iter().flatten().map(|p| p.2 as u64))
            .collect();
        let counts: Vec<u64> = match &checked {
            Ok(()) => (tables.iter())
                .flat_map(|t| t.sends.iter().map(|&(_, rows)| rows as u64))
                .collect(),
            Err(_) => vec![POISON; size * tables.len()],
        };
        let header: Vec<u64> = shape.iter().chain(&counts).copied().collect();
        let all = self.meet(self.host.all_gather(&header))?;
        checked?;
        let rows: Vec<&[u64]> = all.chunks(header.len()).collect();
        let at = shape.len();
        if rows.iter().any(|r| r[..at] != shape[..]) {
            return Err(Error::RanksDisagree(format!(
                "{op}: tables, their columns and widths {:?}",
                rows.iter().map(|r| &r[..at]).collect::<Vec<_>>()
            )));
        }
        if let Some(rank) = rows.iter().position(|r| r[at..].contains(&POISON)) {
            return Err(Error::PeerFailed { rank, op });
        }
        let count = |table: usize, from: usize, to: usize| {
            usize::try_from(rows[from][at + table * size + to]).unwrap_or(usize::MAX)
        };
        let recv_counts: Vec<Vec<usize>> = (0..tables.len())
            .map(|t| (0..size).map(|from| count(t, from, me)).collect())
            .collect();
        let local = (tables.iter().zip(&recv_counts))
            .map(|(t, counts)| total(counts).and_then(|n| alloc_like(backend, t.columns, n)))
            .collect::<Result<Vec<_>>>()
            .and_then(|cols| {
                self.ready
                    .record(backend.stream())
                    .map_err(joinkit_cuda::driver("recording the ready event"))?;
                Ok(cols)
            });
        // A failure word, the ready event, every table's columns' addresses.
        let columns = parts.iter().map(Vec::len).sum::<usize>();
        let words: Vec<u64> = match &local {
            Ok(received) => [0, self.ready.cu_event() as u64]
                .into_iter()
                .chain(
                    received
                        .iter()
                        .flatten()
                        .map(|c| joinkit_cuda::each_column!(c, b => b.device_ptr())),
                )
                .collect(),
            Err(_) => [1, 0].into_iter().chain((0..columns).map(|_| 0)).collect(),
        };
        let peers = match self.meet(self.host.all_gather(&words)) {
            Ok(all) => all,
            Err(e) => {
                // A peer past the time limit may still read these addresses and push.
                std::mem::forget(local);
                return Err(e);
            }
        };
        let received = local?;
        let peers: Vec<&[u64]> = peers.chunks(2 + columns).collect();
        if let Some(rank) = peers.iter().position(|w| w[0] != 0) {
            return Err(Error::PeerFailed { rank, op });
        }
        let sends: Vec<_> = (parts.iter().zip(tables))
            .map(|(p, t)| (&p[..], &t.sends[..]))
            .collect();
        let queued = self.push(backend, &sends, &peers, |t, p| {
            (0..me).map(|from| count(t, from, p)).sum()
        });
        let done: Vec<u64> = [u64::from(queued.is_err())]
            .into_iter()
            .chain(self.lanes.iter().map(|(_, e)| e.cu_event() as u64))
            .collect();
        let all_done = match self.meet(self.host.all_gather(&done)) {
            Ok(all) => all,
            Err(e) => {
                // A peer that never arrives may still be pushing into these buffers: keep them.
                std::mem::forget(received);
                return Err(queued.err().unwrap_or(e));
            }
        };
        let waited = backend.bind_to_thread().and_then(|()| {
            let stream = backend.stream().cu_stream();
            all_done.chunks(size + 1).try_for_each(|from| {
                // SAFETY: the event is a live peer's: it cannot record again, nor be destroyed
                // with its communicator, before every rank has passed the meeting below, and a
                // broken peer leaks its events; the stream is this rank's, its context current.
                let code = unsafe { sys::cuStreamWaitEvent(stream, from[1 + me] as CUevent, 0) };
                code.result()
                    .map_err(joinkit_cuda::driver("waiting for a peer"))
            })
        });
        // Every rank has queued its waits on the others' events before any returns (and may
        // drop its communicator, destroying them).
        let met = self.meet(self.host.barrier());
        if let Err(e) = waited.and(met) {
            // Not known to be ordered after the pushes into them: keep the buffers.
            std::mem::forget(received);
            self.broken.set(true);
            return Err(e);
        }
        queued?;
        if let Some(rank) = all_done.chunks(size + 1).position(|d| d[0] != 0) {
            return Err(Error::PeerFailed { rank, op });
        }
        Ok(received.into_iter().zip(recv_counts).collect())
    }

    /// Refuses a collective once the communicator is broken.
    fn live(&self, op: &'static str) -> Result<()> {
        if self.broken.get() {
            Err(Error::Communication {
                op,
                message: "the communicator broke at an earlier time-out or lost peer".into(),
            })
        } else {
            Ok(())
        }
    }

    /// `met`, the outcome of a meeting of the ranks; a peer gone or past the time limit
    /// breaks the communicator: the ranks no longer call the same collectives in step, and a
    /// late peer may still use this rank's buffers and events.
    fn meet<T>(&self, met: Result<T>) -> Result<T> {
        if matches!(met, Err(Error::Timeout { .. } | Error::PeerFailed { .. })) {
            self.broken.set(true);
        }
        met
    }

    /// Queues this rank's pushes: to each peer `p` (from the next rank on, so the ranks start
    /// on different links), on lane `p` after this rank's and `p`'s ready events, for each
    /// table `t` of `tables` (its columns' parts and sends), every column's rows `sends[p]` to
    /// row `landing(t, p)` of `p`'s receive columns (`peers[p]`: a failure word, its ready
    /// event, then every table's columns' addresses); then the backend's stream waits for
    /// them. On a failure, waits for every lane (the pushes queued before it must end before
    /// the peers, told of the failure, free their buffers).
    fn push(
        &self,
        backend: &CudaBackend,
        tables: &[Pushed<'_>],
        peers: &[&[u64]],
        landing: impl Fn(usize, usize) -> usize,
    ) -> Result<()> {
        let check =
            |op: &'static str, code: CUresult| code.result().map_err(joinkit_cuda::driver(op));
        let size = self.size();
        backend.bind_to_thread()?;
        let mut queued = Ok(());
        for k in 0..size {
            let p = (self.rank() + k) % size;
            let (lane, done) = &self.lanes[p];
            let s: CUstream = lane.cu_stream();
            let copies = || -> Result<()> {
                for ready in [self.ready.cu_event(), peers[p][1] as CUevent] {
                    // SAFETY: the events are live (this rank's, and `p`'s until the next
                    // meeting); the stream is this rank's lane.
                    check("waiting for a ready event", unsafe {
                        sys::cuStreamWaitEvent(s, ready, 0)
                    })?;
                }
                let mut dsts = peers[p][2..].iter();
                for (t, &(parts, sends)) in tables.iter().enumerate() {
                    let (start, rows) = sends[p];
                    for (&(src, _, width), &dst) in parts.iter().zip(dsts.by_ref()) {
                        if rows == 0 {
                            continue;
                        }
                        // SAFETY: the source rows lie inside this rank's column (checked
                        // against its length); the destination rows inside `p`'s, allocated
                        // from the exchanged counts, which `p` keeps until its stream has
                        // waited for this lane's event.
                        check("pushing rows to a peer", unsafe {
                            sys::cuMemcpyDtoDAsync_v2(
                                dst + (landing(t, p) * width) as u64,
                                src + (start * width) as u64,
                                rows * width,
                                s,
                            )
                        })?;
                    }
                }
                Ok(())
            };
            queued = queued.and(copies());
            // Recorded whatever was queued, so `p` waits for every push that was.
            queued = queued.and(
                done.record(lane)
                    .map_err(joinkit_cuda::driver("recording a push event")),
            );
            queued = queued.and(
                backend
                    .stream()
                    .wait(done)
                    .map_err(joinkit_cuda::driver("waiting for a push")),
            );
        }
        if queued.is_err() {
            for (lane, _) in &self.lanes {
                if lane.synchronize().is_err() {
                    // Not known to have ended: the peers' buffers may still be written.
                    self.broken.set(true);
                }
            }
        }
        queued
    }
}

impl Communicator for PeerComm {
    type Backend = CudaBackend;

    fn rank(&self) -> usize {
        self.host.rank()
    }

    fn size(&self) -> usize {
        self.host.size()
    }

    fn config(&self) -> CommConfig {
        self.host.config()
    }

    fn link_rates(&self) -> &crate::LinkRates {
        self.host.link_rates()
    }

    fn all_gather(&self, values: &[u64]) -> Result<Vec<u64>> {
        self.live("all_gather")?;
        self.meet(self.host.all_gather(values))
    }

    fn all_to_all_v<T: Element>(
        &self,
        backend: &CudaBackend,
        send: &DeviceBuffer<T>,
        send_counts: &[usize],
    ) -> Result<(DeviceBuffer<T>, Vec<usize>)> {
        let moved = self.all_to_all_v_columns(backend, &[T::column_ref(send)], send_counts)?;
        one_column("all_to_all_v", moved)
    }

    fn all_to_all_v_columns(
        &self,
        backend: &CudaBackend,
        columns: &[ColumnRef<'_, CudaBackend>],
        send_counts: &[usize],
    ) -> Result<ReceivedColumns<CudaBackend>> {
        const OP: &str = "all_to_all_v_columns";
        let (outgoing, checked) = Outgoing::all_to_all(self.size(), &[(columns, send_counts)]);
        let moved = self.exchange(OP, backend, &outgoing, checked)?;
        moved
            .into_iter()
            .next()
            .ok_or_else(|| Error::Corrupt(format!("{OP}: no table came back")))
    }

    fn all_to_all_v_tables(
        &self,
        backend: &CudaBackend,
        tables: &[TableToSend<'_, '_, CudaBackend>],
    ) -> Result<Vec<ReceivedColumns<CudaBackend>>> {
        let (outgoing, checked) = Outgoing::all_to_all(self.size(), tables);
        self.exchange("all_to_all_v_tables", backend, &outgoing, checked)
    }

    fn all_gather_v<T: Element>(
        &self,
        backend: &CudaBackend,
        send: &DeviceBuffer<T>,
    ) -> Result<(DeviceBuffer<T>, Vec<usize>)> {
        let outgoing = Outgoing {
            columns: &[T::column_ref(send)],
            sends: vec![(0, send.len()); self.size()],
        };
        let moved = self.exchange("all_gather_v", backend, &[outgoing], Ok(()))?;
        let table = moved.into_iter().next();
        one_column(
            "all_gather_v",
            table.ok_or_else(|| Error::Corrupt("all_gather_v: nothing came back".into()))?,
        )
    }

    fn split(&self, color: usize, key: usize) -> Result<Self> {
        self.live("split")?;
        let host = self.meet(self.host.split(color, key))?;
        // A rank that cannot make its streams leaves the new group (its rendezvous is
        // dropped): the others' agreement fails with `PeerFailed`.
        let comm = Self::with_host(host, self.backend.clone())?;
        comm.meet(comm.host.agree("split", Ok(())))?;
        Ok(comm)
    }
}
