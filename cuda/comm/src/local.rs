//! The in-process communicator: ranks are threads of one process, collectives meet in shared
//! memory, and buffers move by the backend's own device-to-device copy
//! ([`Backend::copy_range_into`]), so the same code runs N ranks on the CPU backend, or N CUDA
//! ranks sharing one GPU. A test and CPU-backend aid, not a network engine: nothing leaves the
//! process.
//!
//! Every collective is a rendezvous: each rank posts its part (host values, or the address of
//! its send buffer and its counts) under the collective's sequence number, waits until every
//! rank has posted, reads what it needs, and for buffers copies the peers' rows into its own
//! receive buffer, then waits at a second rendezvous so no send buffer is freed while a peer
//! still copies from it. A rank whose communicator is dropped (its thread returned or
//! panicked) is a left rank: peers waiting on it get [`Error::PeerFailed`]; a rank that does
//! not arrive within [`CommConfig::timeout`] is [`Error::Timeout`].

use std::any::TypeId;
use std::cell::Cell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use joinkit_cuda::{Backend, Buffer, Element, Error, Result};

use crate::{CommConfig, Communicator, send_offsets, total};

/// A world of in-process ranks: [`LocalWorld::comms`] makes one communicator per rank for
/// threads the caller runs, [`LocalWorld::run`] runs a closure on every rank's thread.
#[derive(Debug, Clone, Copy)]
pub struct LocalWorld {
    size: usize,
    config: CommConfig,
}

impl LocalWorld {
    /// A world of `size` ranks.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a world of no rank.
    pub fn new(size: usize, config: CommConfig) -> Result<Self> {
        if size == 0 {
            return Err(Error::InvalidArgument(
                "a communicator needs at least one rank".into(),
            ));
        }
        Ok(Self { size, config })
    }

    /// Ranks in the world.
    pub fn size(&self) -> usize {
        self.size
    }

    /// One communicator per rank (index = rank), joined to a new group: move each to the
    /// thread that runs its rank.
    pub fn comms<B: Backend>(&self) -> Vec<LocalComm<B>> {
        let group = Arc::new(Group::new(self.size, self.config));
        (0..self.size)
            .map(|rank| LocalComm::new(Arc::clone(&group), rank))
            .collect()
    }

    /// Runs `work` on every rank, each on a thread of its own, and returns each rank's result
    /// in rank order. A rank that panics leaves the group (its peers get
    /// [`Error::PeerFailed`]); the panic is raised again here once every rank has finished.
    pub fn run<B, T, F>(&self, work: F) -> Vec<Result<T>>
    where
        B: Backend,
        T: Send,
        F: Fn(LocalComm<B>) -> Result<T> + Sync,
    {
        let work = &work;
        let outcomes: Vec<std::thread::Result<Result<T>>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .comms::<B>()
                .into_iter()
                .map(|comm| {
                    std::thread::Builder::new()
                        .name(format!("rank-{}", comm.rank))
                        .stack_size(RANK_STACK_BYTES)
                        .spawn_scoped(s, move || work(comm))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| match h {
                    Ok(h) => h.join(),
                    Err(e) => Ok(Err(Error::InvalidArgument(format!(
                        "cannot start a rank's thread: {e}"
                    )))),
                })
                .collect()
        });
        let mut results = Vec::with_capacity(outcomes.len());
        let mut panic = None;
        for o in outcomes {
            match o {
                Ok(r) => results.push(r),
                Err(p) => {
                    panic.get_or_insert(p);
                }
            }
        }
        if let Some(p) = panic {
            std::panic::resume_unwind(p);
        }
        results
    }
}

/// Stack of a rank's thread in [`LocalWorld::run`] (the joins' recursion stays well inside).
const RANK_STACK_BYTES: usize = 16 << 20;

/// What a rank posts at a rendezvous.
#[derive(Debug, Clone)]
struct Post {
    /// Host values (all-gather), send counts (all-to-all), a length (all-gather of buffers),
    /// or `[color, key]` (split).
    values: Vec<u64>,
    /// The address of the rank's send buffer (`&B::Buf<T>`), valid until the collective's
    /// second rendezvous; 0 for collectives of host values.
    buffer: usize,
    /// The send buffer's type: ranks that disagree on it must not read each other's buffers.
    buffer_type: Option<TypeId>,
}

impl Post {
    fn values(values: Vec<u64>) -> Self {
        Self {
            values,
            buffer: 0,
            buffer_type: None,
        }
    }
}

/// One collective's meeting point.
#[derive(Debug)]
struct Round {
    posts: Vec<Option<Post>>,
    arrived: usize,
    departed: usize,
}

#[derive(Debug)]
struct State {
    /// Rendezvous in progress, by sequence number.
    rounds: HashMap<u64, Round>,
    /// Ranks whose communicator has been dropped.
    left: Vec<bool>,
    /// Sub-groups made by `split`, by (sequence number, color), with how many members have
    /// taken theirs.
    splits: HashMap<(u64, u64), (Arc<Group>, usize)>,
}

/// The shared side of a group of in-process ranks.
#[derive(Debug)]
struct Group {
    size: usize,
    config: CommConfig,
    state: Mutex<State>,
    changed: Condvar,
}

impl Group {
    fn new(size: usize, config: CommConfig) -> Self {
        Self {
            size,
            config,
            state: Mutex::new(State {
                rounds: HashMap::new(),
                left: vec![false; size],
                splits: HashMap::new(),
            }),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A rank that panicked while holding the lock left the state consistent (every
        // update is a single assignment or push), so carry on with it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Posts `post` as `rank`'s part of collective `seq` and waits for every rank's: the
    /// posts in rank order.
    fn rendezvous(&self, op: &'static str, seq: u64, rank: usize, post: Post) -> Result<Vec<Post>> {
        let deadline = Instant::now() + self.config.timeout;
        let mut st = self.lock();
        let size = self.size;
        let round = st.rounds.entry(seq).or_insert_with(|| Round {
            posts: vec![None; size],
            arrived: 0,
            departed: 0,
        });
        round.posts[rank] = Some(post);
        round.arrived += 1;
        self.changed.notify_all();
        loop {
            let round = &st.rounds[&seq];
            if round.arrived == size {
                break;
            }
            if let Some(gone) = (0..size).find(|&r| round.posts[r].is_none() && st.left[r]) {
                return Err(Error::PeerFailed { rank: gone, op });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Timeout {
                    op,
                    millis: self.config.timeout.as_millis() as u64,
                });
            }
            st = self
                .changed
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        let round = st
            .rounds
            .get_mut(&seq)
            .expect("the round is present until all depart");
        let posts = round
            .posts
            .iter()
            .map(|p| p.clone().expect("every rank has posted"))
            .collect();
        round.departed += 1;
        if round.departed == size {
            st.rounds.remove(&seq);
        }
        Ok(posts)
    }
}

/// One rank of a [`LocalWorld`]: a [`Communicator`] over backend `B`'s buffers.
///
/// Dropping it leaves the group: peers still waiting on this rank get [`Error::PeerFailed`].
#[derive(Debug)]
pub struct LocalComm<B: Backend> {
    group: Arc<Group>,
    rank: usize,
    /// Sequence number of this rank's next collective (every rank counts alike).
    next: Cell<u64>,
    link_rates: crate::LinkRates,
    _backend: PhantomData<fn() -> B>,
}

impl<B: Backend> LocalComm<B> {
    fn new(group: Arc<Group>, rank: usize) -> Self {
        Self {
            group,
            rank,
            next: Cell::new(0),
            link_rates: crate::LinkRates::default(),
            _backend: PhantomData,
        }
    }

    fn seq(&self) -> u64 {
        let s = self.next.get();
        self.next.set(s + 1);
        s
    }

    fn rendezvous(&self, op: &'static str, post: Post) -> Result<Vec<Post>> {
        self.group.rendezvous(op, self.seq(), self.rank, post)
    }

    /// Posts `send`'s address with `values`, lets `copy` read the peers' buffers, then waits
    /// until every rank has copied (so `send` may be freed). The second rendezvous happens
    /// whatever `copy` returns, so a failing copy on one rank never leaves its peers waiting.
    fn with_peer_buffers<T: Element, R>(
        &self,
        op: &'static str,
        backend: &B,
        send: &B::Buf<T>,
        values: Vec<u64>,
        copy: impl FnOnce(&[Post], &[&B::Buf<T>]) -> Result<R>,
    ) -> Result<R> {
        // The writes into `send` queued on this rank's stream finish before peers read it.
        backend.synchronize()?;
        let post = Post {
            values,
            buffer: std::ptr::from_ref(send) as usize,
            buffer_type: Some(TypeId::of::<B::Buf<T>>()),
        };
        let posts = self.rendezvous(op, post)?;
        let result = if posts
            .iter()
            .any(|p| p.buffer_type != Some(TypeId::of::<B::Buf<T>>()))
        {
            Err(Error::RanksDisagree(format!(
                "{op}: ranks sent buffers of different types"
            )))
        } else {
            // SAFETY: every rank posted the address of a live `B::Buf<T>` (the type was just
            // checked), which its owner keeps alive and unwritten until the second rendezvous
            // below, which this rank reaches only after its copies have finished. Buffers are
            // `Sync`, so shared references from other threads are sound.
            let peers: Vec<&B::Buf<T>> = posts
                .iter()
                .map(|p| unsafe { &*(p.buffer as *const B::Buf<T>) })
                .collect();
            copy(&posts, &peers).and_then(|r| backend.synchronize().map(|()| r))
        };
        self.rendezvous(op, Post::values(Vec::new()))?;
        result
    }
}

impl<B: Backend> Drop for LocalComm<B> {
    fn drop(&mut self) {
        let mut st = self.group.lock();
        st.left[self.rank] = true;
        self.group.changed.notify_all();
    }
}

/// Widens counts for posting.
fn as_u64(counts: &[usize]) -> Vec<u64> {
    counts.iter().map(|&c| c as u64).collect()
}

/// Narrows a posted count back (posted from a `usize` on this machine, so it fits).
fn as_usize(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

impl<B: Backend> Communicator for LocalComm<B> {
    type Backend = B;

    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.group.size
    }

    fn config(&self) -> CommConfig {
        self.group.config
    }

    fn link_rates(&self) -> &crate::LinkRates {
        &self.link_rates
    }

    fn all_gather(&self, values: &[u64]) -> Result<Vec<u64>> {
        let posts = self.rendezvous("all_gather", Post::values(values.to_vec()))?;
        if posts.iter().any(|p| p.values.len() != values.len()) {
            return Err(Error::RanksDisagree(format!(
                "all_gather: rank lengths {:?}",
                posts.iter().map(|p| p.values.len()).collect::<Vec<_>>()
            )));
        }
        Ok(posts.into_iter().flat_map(|p| p.values).collect())
    }

    fn all_to_all_v<T: Element>(
        &self,
        backend: &B,
        send: &B::Buf<T>,
        send_counts: &[usize],
    ) -> Result<(B::Buf<T>, Vec<usize>)> {
        let local = send_offsets(self.size(), send_counts, send.len());
        // Bad counts on one rank are an error on every rank, not a hang on the others.
        let counts = match &local {
            Ok(_) => as_u64(send_counts),
            Err(_) => Vec::new(),
        };
        let me = self.rank;
        self.with_peer_buffers("all_to_all_v", backend, send, counts, |posts, peers| {
            if let Some(bad) = posts.iter().position(|p| p.values.len() != posts.len()) {
                return local.and(Err(Error::PeerFailed {
                    rank: bad,
                    op: "all_to_all_v",
                }));
            }
            let recv_counts: Vec<usize> = posts.iter().map(|p| as_usize(p.values[me])).collect();
            let mut recv = backend.alloc::<T>(total(&recv_counts)?)?;
            let mut at = 0;
            for ((p, src), &n) in posts.iter().zip(peers).zip(&recv_counts) {
                let start = p.values[..me].iter().map(|&c| as_usize(c)).sum::<usize>();
                backend.copy_range_into(src, start..start + n, &mut recv, at)?;
                at += n;
            }
            Ok((recv, recv_counts))
        })
    }

    fn all_gather_v<T: Element>(
        &self,
        backend: &B,
        send: &B::Buf<T>,
    ) -> Result<(B::Buf<T>, Vec<usize>)> {
        let len = vec![send.len() as u64];
        self.with_peer_buffers("all_gather_v", backend, send, len, |posts, peers| {
            let counts: Vec<usize> = posts.iter().map(|p| as_usize(p.values[0])).collect();
            let mut recv = backend.alloc::<T>(total(&counts)?)?;
            let mut at = 0;
            for (src, &n) in peers.iter().zip(&counts) {
                backend.copy_range_into(src, 0..n, &mut recv, at)?;
                at += n;
            }
            Ok((recv, counts))
        })
    }

    fn split(&self, color: usize, key: usize) -> Result<Self> {
        let seq = self.seq();
        let post = Post::values(vec![color as u64, key as u64]);
        let posts = self.group.rendezvous("split", seq, self.rank, post)?;
        let mut members: Vec<(u64, usize)> = posts
            .iter()
            .enumerate()
            .filter(|(_, p)| p.values[0] == color as u64)
            .map(|(r, p)| (p.values[1], r))
            .collect();
        members.sort_unstable();
        let rank = members
            .iter()
            .position(|&(_, r)| r == self.rank)
            .expect("a rank is a member of its own color");
        let size = members.len();
        let mut st = self.group.lock();
        let entry = st
            .splits
            .entry((seq, color as u64))
            .or_insert_with(|| (Arc::new(Group::new(size, self.group.config)), 0));
        let group = Arc::clone(&entry.0);
        entry.1 += 1;
        if entry.1 == size {
            st.splits.remove(&(seq, color as u64));
        }
        Ok(LocalComm::new(group, rank))
    }
}
