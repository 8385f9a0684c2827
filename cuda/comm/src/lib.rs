//! # joinkit-comm
//!
//! Communicators for work spread over ranks (one per GPU, or threads on the CPU), reusable
//! without the rest of joinkit: it knows buffers and ranks, nothing of joins.
//!
//! One contract, [`Communicator`], two implementations:
//!
//! | implementation | ranks | buffers | for |
//! | --- | --- | --- | --- |
//! | [`LocalWorld`] / [`LocalComm`] | threads of one process | any [`Backend`]'s: `Vec`s on the CPU, device buffers on CUDA (copied on the device, so N ranks can share one GPU) | the CPU backend, tests on machines without GPUs, multi-rank GPU tests on one GPU |
//! | `NcclComm` (feature `cuda`) | one per GPU: threads of one process (`--gpus 0,1,2,3`) or processes across hosts, bootstrapped from a launcher's environment (`launch`) | CUDA device buffers, moved by NCCL (`libnccl.so.2`, loaded at run time) | multi-GPU runs |
//! | `PeerComm` (feature `cuda`) | threads of one process, a GPU each (or sharing one); host values meet as in `LocalWorld` | CUDA device buffers, pushed by the GPUs' copy engines into the peers' receive buffers (peer access over NVLink or PCIe), no SM used, the host never waiting for the data | the GPUs of one host: faster than NCCL's all-to-all there, and kernels beside a shuffle keep the whole GPU |
//!
//! Collectives: all-gather and all-reduce of small host values (`u64`), a variable-size
//! all-to-all of buffers ([`Communicator::all_to_all_v`]: counts exchanged first, receivers
//! allocate from them, then the data moves; [`Communicator::all_to_all_v_columns`] moves the
//! columns of one table at once), a variable-size all-gather of buffers, and
//! [`Communicator::split`] into sub-communicators (the node-local and same-local-rank "rail"
//! groups of a two-level shuffle). [`Communicator::agree`] turns one rank's error into an error
//! on every rank.
//!
//! Every wait on a peer is bounded ([`CommConfig::timeout`]): a rank that stops responding is
//! [`Error::Timeout`] on the others, a rank that fails or leaves is [`Error::PeerFailed`],
//! never a hang. Every rank must call the same collectives in the same order.
//!
//! ```
//! use joinkit_comm::{Communicator, LocalWorld, ReduceOp};
//! use joinkit_cuda::{Backend, CpuBackend};
//!
//! let world = LocalWorld::new(3, Default::default()).unwrap();
//! let sums = world.run(|comm| {
//!     let cpu = CpuBackend::new();
//!     // Rank r sends r + 1 rows to each peer.
//!     let rows = comm.rank() + 1;
//!     let send = cpu.upload(&vec![comm.rank() as u32; rows * comm.size()])?;
//!     let (recv, counts) = comm.all_to_all_v(&cpu, &send, &vec![rows; comm.size()])?;
//!     assert_eq!(counts, vec![1, 2, 3]);
//!     assert_eq!(cpu.download(&recv)?, vec![0, 1, 1, 2, 2, 2]);
//!     Ok(comm.all_reduce(&[rows as u64], ReduceOp::Sum)?[0])
//! });
//! assert_eq!(sums.into_iter().collect::<Result<Vec<_>, _>>().unwrap(), vec![6, 6, 6]);
//! ```

#[cfg(feature = "cuda")]
mod device;
#[cfg(feature = "cuda")]
pub mod launch;
mod local;
#[cfg(feature = "cuda")]
pub mod nccl;
#[cfg(feature = "cuda")]
pub mod peer;

use std::time::Duration;

pub use joinkit_cuda::{Backend, Column, ColumnRef, Element, Error, Result};
pub use local::{LocalComm, LocalWorld};

/// Settings every communicator takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommConfig {
    /// The longest any collective waits for its peers before it gives up with
    /// [`Error::Timeout`] (a rank that died or hangs). Default 60 s, or `JOINKIT_COMM_TIMEOUT_MS`.
    pub timeout: Duration,
}

/// Environment variable overriding [`CommConfig::timeout`] (milliseconds).
pub const TIMEOUT_ENV: &str = "JOINKIT_COMM_TIMEOUT_MS";

impl Default for CommConfig {
    fn default() -> Self {
        let ms = std::env::var(TIMEOUT_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(60_000);
        Self {
            timeout: Duration::from_millis(ms),
        }
    }
}

impl CommConfig {
    /// With a time limit for every wait on a peer.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }
}

/// Link rates a communicator has measured, kept for its life: a set of peers is measured once,
/// and the collectives after it reuse the rate (a measurement is a few all-to-alls, tens of
/// milliseconds over a slow network). Every rank measures together and reads the same rate, so
/// every rank's memo holds the same entries.
#[derive(Debug, Default)]
pub struct LinkRates(std::sync::Mutex<Vec<(Vec<usize>, f64)>>);

impl LinkRates {
    /// The rate measured before to exactly these `peers`, in GB/s a rank sends.
    pub fn get(&self, peers: &[usize]) -> Option<f64> {
        let rates = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        rates.iter().find(|(p, _)| p == peers).map(|&(_, r)| r)
    }

    /// Keeps the rate measured to `peers` (replacing an earlier one).
    pub fn insert(&self, peers: Vec<usize>, gbps: f64) {
        let mut rates = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        rates.retain(|(p, _)| *p != peers);
        rates.push((peers, gbps));
    }
}

/// What a buffer collective returns: the rows received, and how many came from each rank.
pub type Received<B, T> = (<B as Backend>::Buf<T>, Vec<usize>);

/// What [`Communicator::all_to_all_v_columns`] returns: the columns received, in order, and
/// how many rows came from each rank.
pub type ReceivedColumns<B> = (Vec<Column<B>>, Vec<usize>);

/// A table [`Communicator::all_to_all_v_tables`] moves: its columns, and its rows for each rank
/// (grouped by rank, in rank order).
pub type TableToSend<'a, 'c, B> = (&'a [ColumnRef<'c, B>], &'a [usize]);

/// How [`Communicator::all_reduce`] combines the ranks' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// Wrapping sum.
    Sum,
    /// Largest.
    Max,
    /// Smallest.
    Min,
}

impl ReduceOp {
    fn apply(self, a: u64, b: u64) -> u64 {
        match self {
            ReduceOp::Sum => a.wrapping_add(b),
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }
    }
}

/// A group of ranks that exchange host values and buffers of one backend type.
///
/// Every rank calls the same collectives in the same order (as with MPI and NCCL). Host values
/// are ready when a call returns. A buffer collective's outputs are ready, and its send
/// buffers free to reuse, for work queued on `backend`'s stream after the call (or on the
/// host once that stream is synchronized): a transport may return with its transfers only
/// queued (`peer::PeerComm`), so work on another stream waits for `backend`'s first.
pub trait Communicator: Send + Sized {
    /// The backend whose buffers move.
    type Backend: Backend;

    /// This rank, `0..size()`.
    fn rank(&self) -> usize;

    /// Ranks in the communicator.
    fn size(&self) -> usize;

    /// The settings this communicator runs with.
    fn config(&self) -> CommConfig;

    /// The link rates measured over this communicator so far.
    fn link_rates(&self) -> &LinkRates;

    /// Every rank's `values`, concatenated in rank order (`size() * values.len()` values).
    ///
    /// # Errors
    /// [`Error::RanksDisagree`] when the ranks give different lengths; [`Error::Timeout`],
    /// [`Error::PeerFailed`], [`Error::Communication`].
    fn all_gather(&self, values: &[u64]) -> Result<Vec<u64>>;

    /// Element-wise reduction of every rank's `values` (same length on every rank).
    ///
    /// # Errors
    /// As [`Communicator::all_gather`].
    fn all_reduce(&self, values: &[u64], op: ReduceOp) -> Result<Vec<u64>> {
        let all = self.all_gather(values)?;
        let n = values.len();
        let mut out = values.to_vec();
        for (r, chunk) in all.chunks(n.max(1)).enumerate().take(self.size()) {
            if r != self.rank() {
                for (o, &v) in out.iter_mut().zip(chunk) {
                    *o = op.apply(*o, v);
                }
            }
        }
        Ok(out)
    }

    /// Waits for every rank.
    ///
    /// # Errors
    /// As [`Communicator::all_gather`].
    fn barrier(&self) -> Result<()> {
        self.all_gather(&[]).map(drop)
    }

    /// Variable-size all-to-all: `send` holds the rows for rank 0, then those for rank 1, ...
    /// (`send_counts[p]` rows for rank `p`, summing to at most `send.len()`). Returns the rows
    /// every rank sent to this one, concatenated in rank order, and how many came from each.
    /// The counts are exchanged first; the receive buffer is allocated from them on `backend`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `send_counts` has not `size()` entries or sums past
    /// `send.len()`; [`Error::SizeOverflow`] for a total that does not fit memory; allocation
    /// errors; as [`Communicator::all_gather`].
    fn all_to_all_v<T: Element>(
        &self,
        backend: &Self::Backend,
        send: &<Self::Backend as Backend>::Buf<T>,
        send_counts: &[usize],
    ) -> Result<Received<Self::Backend, T>>;

    /// As [`Communicator::all_to_all_v`], but the rows need not arrive grouped in rank order:
    /// they arrive in an order fixed by every rank's send counts alone, so buffers exchanged
    /// with the same counts (the columns of one table) stay row-aligned with each other. A
    /// transport may use the freedom to keep its large transfers aligned (NCCL moves
    /// misaligned segments at about half the rate); the default keeps rank order.
    ///
    /// # Errors
    /// As [`Communicator::all_to_all_v`].
    fn all_to_all_v_any_order<T: Element>(
        &self,
        backend: &Self::Backend,
        send: &<Self::Backend as Backend>::Buf<T>,
        send_counts: &[usize],
    ) -> Result<Received<Self::Backend, T>> {
        self.all_to_all_v(backend, send, send_counts)
    }

    /// Whether [`Communicator::all_to_all_v_any_order`] and
    /// [`Communicator::all_to_all_v_columns`] deliver every rank's rows together and in rank
    /// order, as [`Communicator::all_to_all_v`] does (the default). A caller that needs rank
    /// order loses nothing asking for it then; where not (NCCL cuts every rank's rows for
    /// aligned transfers), rank order costs the transport's unaligned rate.
    fn any_order_is_rank_order(&self) -> bool {
        true
    }

    /// [`Communicator::all_to_all_v_any_order`] of the columns of one table at once: the rows
    /// of every column go alike (`send_counts` of each to each rank), and come back in order,
    /// row-aligned with each other. A transport may exchange the counts and agree on the
    /// receives once and move every column in one group (NCCL: one group of larger messages,
    /// where a call per column pays a count exchange and an agreement each); the default moves
    /// column after column.
    ///
    /// # Errors
    /// As [`Communicator::all_to_all_v`]; [`Error::LengthMismatch`] for columns of different
    /// lengths (by default on the rank that passed them, after the exchange).
    fn all_to_all_v_columns(
        &self,
        backend: &Self::Backend,
        columns: &[ColumnRef<'_, Self::Backend>],
        send_counts: &[usize],
    ) -> Result<ReceivedColumns<Self::Backend>> {
        fn one<C: Communicator, T: Element>(
            comm: &C,
            backend: &C::Backend,
            send: &<C::Backend as Backend>::Buf<T>,
            send_counts: &[usize],
        ) -> Result<ReceivedColumns<C::Backend>> {
            let (recv, counts) = comm.all_to_all_v_any_order(backend, send, send_counts)?;
            Ok((vec![T::into_column(recv)], counts))
        }
        // Every column moves, whatever happened to the ones before (collectives stay in step).
        let moved: Vec<_> = columns
            .iter()
            .map(|c| match c {
                ColumnRef::U32(b) => one(self, backend, *b, send_counts),
                ColumnRef::I32(b) => one(self, backend, *b, send_counts),
                ColumnRef::U64(b) => one(self, backend, *b, send_counts),
                ColumnRef::I64(b) => one(self, backend, *b, send_counts),
            })
            .collect();
        let mut counts = Vec::new();
        let mut out = Vec::with_capacity(columns.len());
        for m in moved {
            let (column, n) = m?;
            counts = n;
            out.extend(column);
        }
        for c in &out {
            Error::check_len(
                "all_to_all_v_columns: columns of one table",
                out[0].len(),
                c.len(),
            )?;
        }
        Ok((out, counts))
    }

    /// [`Communicator::all_to_all_v_columns`] of several tables at once, each with its own send
    /// counts (`tables[t]`: its columns, and its rows for each rank); what came back for each
    /// table, in order. A transport may exchange every table's counts and agree on the
    /// receives once: the copy engines' ranks then meet four times for all the tables instead
    /// of four times for each, and every meeting leaves the ranks' streams without queued
    /// work while their hosts wait for each other (a shuffle's keys and their membership
    /// bitmaps: two tables of different lengths). The default moves table after table.
    ///
    /// # Errors
    /// As [`Communicator::all_to_all_v_columns`], for any table.
    fn all_to_all_v_tables(
        &self,
        backend: &Self::Backend,
        tables: &[TableToSend<'_, '_, Self::Backend>],
    ) -> Result<Vec<ReceivedColumns<Self::Backend>>> {
        // Every table moves, whatever happened to the ones before (collectives stay in step).
        let moved: Vec<_> = (tables.iter())
            .map(|&(columns, send_counts)| self.all_to_all_v_columns(backend, columns, send_counts))
            .collect();
        moved.into_iter().collect()
    }

    /// As [`Communicator::all_gather_v`], with the freedom of
    /// [`Communicator::all_to_all_v_any_order`]: the rows arrive in an order fixed by every
    /// rank's length alone.
    ///
    /// # Errors
    /// As [`Communicator::all_gather_v`].
    fn all_gather_v_any_order<T: Element>(
        &self,
        backend: &Self::Backend,
        send: &<Self::Backend as Backend>::Buf<T>,
    ) -> Result<Received<Self::Backend, T>> {
        self.all_gather_v(backend, send)
    }

    /// Variable-size all-gather: every rank's `send`, concatenated in rank order, on every
    /// rank, with each rank's length.
    ///
    /// # Errors
    /// As [`Communicator::all_to_all_v`].
    fn all_gather_v<T: Element>(
        &self,
        backend: &Self::Backend,
        send: &<Self::Backend as Backend>::Buf<T>,
    ) -> Result<Received<Self::Backend, T>>;

    /// Splits into sub-communicators: ranks giving the same `color` form one, ranked by
    /// `(key, rank)`. Every rank must call it.
    ///
    /// # Errors
    /// As [`Communicator::all_gather`].
    fn split(&self, color: usize, key: usize) -> Result<Self>;

    /// Turns one rank's failure into a failure on every rank: every rank says whether `local`
    /// is an error; when any is, each rank returns its own error, or [`Error::PeerFailed`]
    /// naming the first failed rank. Called at the end of every phase that can fail on one
    /// rank alone (an allocation, bad input), so no rank waits on a peer that gave up.
    ///
    /// # Errors
    /// `local`'s error; [`Error::PeerFailed`]; as [`Communicator::all_gather`].
    fn agree<T>(&self, op: &'static str, local: Result<T>) -> Result<T> {
        let (status, value) = match local {
            Ok(v) => (Ok(Vec::new()), Some(v)),
            Err(e) => (Err(e), None),
        };
        self.agree_gather(op, 0, status)?;
        value.ok_or_else(|| Error::Corrupt(format!("{op}: an error agreed on as success")))
    }

    /// [`Communicator::agree`] and an all-gather in one collective: every rank's `words`
    /// values (`local`'s) where every rank computed its own, else as `agree`. Saves a
    /// collective where a step's agreement is followed by an exchange of what it computed.
    ///
    /// # Errors
    /// As [`Communicator::agree`]; [`Error::InvalidArgument`] for values of another length
    /// than `words`.
    fn agree_gather(
        &self,
        op: &'static str,
        words: usize,
        local: Result<Vec<u64>>,
    ) -> Result<Vec<Vec<u64>>> {
        let local = local.and_then(|v| {
            if v.len() == words {
                Ok(v)
            } else {
                Err(Error::InvalidArgument(format!(
                    "{op}: {} values to gather, {words} expected",
                    v.len()
                )))
            }
        });
        // A failure word, then the values.
        let mine: Vec<u64> = match &local {
            Ok(v) => std::iter::once(0).chain(v.iter().copied()).collect(),
            Err(_) => std::iter::once(1)
                .chain(std::iter::repeat_n(0, words))
                .collect(),
        };
        let all = match self.all_gather(&mine) {
            Ok(all) => all,
            Err(e) => return Err(local.err().unwrap_or(e)),
        };
        local?;
        let per_rank: Vec<&[u64]> = all.chunks(words + 1).collect();
        if let Some(rank) = per_rank.iter().position(|c| c[0] != 0) {
            return Err(Error::PeerFailed { rank, op });
        }
        Ok(per_rank.iter().map(|c| c[1..].to_vec()).collect())
    }
}

/// Checks `send_counts` against the communicator size and the send buffer; returns the rows'
/// start offsets (`size + 1` entries).
///
/// # Errors
/// [`Error::InvalidArgument`] when the counts are not one per rank or pass `send_len`.
pub fn send_offsets(size: usize, send_counts: &[usize], send_len: usize) -> Result<Vec<usize>> {
    if send_counts.len() != size {
        return Err(Error::InvalidArgument(format!(
            "all_to_all_v: {} send counts for {size} ranks",
            send_counts.len()
        )));
    }
    let mut offsets = Vec::with_capacity(size + 1);
    let mut at = 0usize;
    offsets.push(0);
    for &c in send_counts {
        at = at
            .checked_add(c)
            .filter(|&e| e <= send_len)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "all_to_all_v: send counts sum past the {send_len} rows sent"
                ))
            })?;
        offsets.push(at);
    }
    Ok(offsets)
}

/// The sum of `counts`, or [`Error::SizeOverflow`].
///
/// # Errors
/// [`Error::SizeOverflow`] when the sum does not fit `usize`.
pub fn total(counts: &[usize]) -> Result<usize> {
    counts.iter().try_fold(0usize, |a, &c| {
        a.checked_add(c)
            .ok_or(Error::SizeOverflow("rows received by a collective"))
    })
}
