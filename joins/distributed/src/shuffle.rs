//! Moving a table's rows to the ranks that own their keys: hash partition by destination,
//! then the columns' all-to-all (one level), or two (across nodes to the rail peers, then
//! within the node), and the all-gather that replicates a table on every rank; each column
//! raw or compressed ([`crate::wire`]: raw columns in one collective a table where their rows
//! may arrive in any order, else one a column; compressed ones packed in one).

use joinkit::Table;
use joinkit_codec::Codec;
use joinkit_comm::Communicator;
use joinkit_cuda::{Backend, Buffer, Column, Error, Key, Result, map_column};
use joinkit_partition::{HashPartition, RowIds};

use crate::wire::{Arrival, Level, Pattern, Traffic, Wire, move_table};

/// The seed of the hash that picks a key's rank: not the local partitioned joins' mix seed
/// ([`joinkit::MIX_SEED`]), so the keys one rank receives still spread over all of its local
/// join's partitions.
pub const SHUFFLE_SEED: u32 = 0x3c6e_f372;

const _: () = assert!(SHUFFLE_SEED != joinkit::MIX_SEED);

/// Ends a phase alike on every rank: a local failure (bad input, out of memory), a peer's
/// failure reported by a collective ([`Error::PeerFailed`]: the failing rank holds its own
/// error and agrees too) or success is agreed on ([`Communicator::agree`]), so every rank
/// returns an error when one fails; a communicator that timed out or broke is not used again.
pub(crate) fn settle<C: Communicator, T>(comm: &C, op: &'static str, r: Result<T>) -> Result<T> {
    match r {
        Err(e @ (Error::Timeout { .. } | Error::Communication { .. })) => Err(e),
        r => comm.agree(op, r),
    }
}

/// [`settle`] and an all-gather in one collective ([`Communicator::agree_gather`]): every
/// rank's `words` values where every rank computed its own.
pub(crate) fn settle_gather<C: Communicator>(
    comm: &C,
    op: &'static str,
    words: usize,
    local: Result<Vec<u64>>,
) -> Result<Vec<Vec<u64>>> {
    match local {
        Err(e @ (Error::Timeout { .. } | Error::Communication { .. })) => Err(e),
        local => comm.agree_gather(op, words, local),
    }
}

/// Bytes a row of `table` takes (key and every column).
pub(crate) fn row_bytes<B: Backend, K: Key>(table: &Table<B, K>) -> usize {
    K::BITS as usize / 8 + table.payloads.iter().map(Column::width).sum::<usize>()
}

/// `table`'s rows grouped by destination rank (`ranks` hash partitions) and how many go to
/// each. Consumes the table: its memory is freed once partitioned.
pub(crate) fn partition<B: Backend + HashPartition, K: Key>(
    b: &B,
    table: Table<B, K>,
    ranks: usize,
) -> Result<(Table<B, K>, Vec<usize>)> {
    let p = b.hash_partition(
        &table.keys,
        &table.payloads,
        ranks,
        SHUFFLE_SEED,
        RowIds::None,
    )?;
    drop(table);
    let counts = counts_of(&b.download(&p.offsets)?)?;
    Ok((Table::new(p.keys, p.payloads)?, counts))
}

/// The rows of each partition, from its `fanout + 1` offsets.
pub(crate) fn counts_of(offsets: &[u64]) -> Result<Vec<usize>> {
    offsets
        .windows(2)
        .map(|w| usize::try_from(w[1] - w[0]).map_err(|_| Error::SizeOverflow("partition size")))
        .collect()
}

/// One side's rows (grouped by destination, `send_counts` a rank) to their ranks, on backend
/// `on`'s stream: by the two-level shuffle when `two` is given, else by one all-to-all, each
/// column as `wire` says; every rank ends the step alike ([`settle`], named `what`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn shuffle_side<C, K>(
    comm: &C,
    on: &C::Backend,
    two: Option<&TwoLevel>,
    table: &Table<C::Backend, K>,
    send_counts: &[usize],
    wire: &Wire,
    traffic: &mut Traffic,
    what: &'static str,
) -> Result<Table<C::Backend, K>>
where
    C: Communicator,
    C::Backend: Codec,
    K: Key,
{
    match two {
        Some(two) => two.exchange(comm, on, table, send_counts, wire, traffic),
        None => settle(
            comm,
            what,
            move_table(
                comm,
                on,
                table,
                (Pattern::AllToAll(send_counts), Arrival::Any),
                wire,
                traffic,
            ),
        ),
    }
}

/// A two-level shuffle's layout: ranks are `nodes × ranks_per_node`, rank
/// `node * ranks_per_node + local`. Both steps are all-to-alls of the whole communicator in
/// which each rank sends only to its rail peers (the ranks of its local index on every node),
/// then only to the ranks of its node: the same messages as over sub-communicators, without
/// making and freeing them at every join (`ncclCommSplit` costs more than a shuffle of
/// millions of rows), and every collective on one communicator.
pub(crate) struct TwoLevel {
    pub(crate) ranks_per_node: usize,
}

impl TwoLevel {
    /// Checks that nodes of `ranks_per_node` ranks tile `comm`.
    pub(crate) fn new<C: Communicator>(comm: &C, ranks_per_node: usize) -> Result<Self> {
        if ranks_per_node == 0 || !comm.size().is_multiple_of(ranks_per_node) {
            return Err(Error::InvalidArgument(format!(
                "a two-level shuffle needs the {} ranks in nodes of equal size; {ranks_per_node} \
                 ranks per node do not divide them",
                comm.size()
            )));
        }
        Ok(Self { ranks_per_node })
    }

    /// Gao's Alg. 2: `send_counts[p]` rows of `table` (grouped by destination rank
    /// `p = node * ranks_per_node + local`) go first over the rail to the destination's node,
    /// arriving at the rank of this local index there, then within that node to the
    /// destination. Returns the rows this rank owns.
    /// Every rank settles each step ([`settle`]), so a rank that fails in one step never
    /// leaves its peers waiting in the next.
    pub(crate) fn exchange<C: Communicator, K: Key>(
        &self,
        comm: &C,
        b: &C::Backend,
        table: &Table<C::Backend, K>,
        send_counts: &[usize],
        wire: &Wire,
        traffic: &mut Traffic,
    ) -> Result<Table<C::Backend, K>>
    where
        C::Backend: Codec,
    {
        let per_node = self.ranks_per_node;
        let (node, local) = (comm.rank() / per_node, comm.rank() % per_node);
        let nodes = comm.size() / per_node;
        let rail_peer = |n: usize| n * per_node + local;
        // Each rail peer learns how the block it receives splits by its node's ranks: this
        // rank's counts for that node's destinations.
        let breakdown = settle(
            comm,
            "two-level shuffle counts",
            (|| {
                let words: Vec<u64> = send_counts.iter().map(|&c| c as u64).collect();
                let meta_counts =
                    only_to(comm.size(), (0..nodes).map(|n| (rail_peer(n), per_node)));
                let (got, _) = comm.all_to_all_v(b, &b.upload(&words)?, &meta_counts)?;
                b.download(&got)
            })(),
        )?;
        let to_node = only_to(
            comm.size(),
            send_counts
                .chunks(per_node)
                .enumerate()
                .map(|(n, c)| (rail_peer(n), c.iter().sum())),
        );
        let arrived = settle(
            comm,
            "two-level shuffle across nodes",
            move_table(
                comm,
                b,
                table,
                (Pattern::AllToAll(&to_node), Arrival::RankOrder),
                &wire.at(Level::AcrossNodes),
                traffic,
            ),
        )?;
        // Block n (from node n) holds this node's destinations in local order; regroup the
        // rows by local destination, node by node.
        let sub = |n: usize, j: usize| breakdown[n * per_node + j] as usize;
        let mut starts = vec![vec![0usize; per_node]; nodes];
        let mut at = 0;
        for (n, s) in starts.iter_mut().enumerate() {
            for (j, start) in s.iter_mut().enumerate() {
                *start = at;
                at += sub(n, j);
            }
        }
        let mut segments = Vec::with_capacity(nodes * per_node);
        let mut to_local = vec![0usize; per_node];
        for (j, count) in to_local.iter_mut().enumerate() {
            for (n, s) in starts.iter().enumerate() {
                segments.push(s[j]..s[j] + sub(n, j));
                *count += sub(n, j);
            }
        }
        let regrouped = settle(
            comm,
            "two-level shuffle regroup",
            regroup(b, &arrived, &segments),
        )?;
        drop(arrived);
        let within = only_to(
            comm.size(),
            to_local
                .iter()
                .enumerate()
                .map(|(j, &c)| (node * per_node + j, c)),
        );
        move_table(
            comm,
            b,
            &regrouped,
            (Pattern::AllToAll(&within), Arrival::Any),
            &wire.at(Level::WithinNode),
            traffic,
        )
    }
}

/// Send counts of `size` ranks that are zero but for the `(rank, count)` pairs given.
fn only_to(size: usize, pairs: impl IntoIterator<Item = (usize, usize)>) -> Vec<usize> {
    let mut counts = vec![0; size];
    for (rank, count) in pairs {
        counts[rank] = count;
    }
    counts
}

/// `table`'s rows in `segments`, concatenated in the order given.
pub(crate) fn regroup<B: Backend, K: Key>(
    b: &B,
    table: &Table<B, K>,
    segments: &[std::ops::Range<usize>],
) -> Result<Table<B, K>> {
    fn pick<B: Backend, T: joinkit_cuda::Element>(
        b: &B,
        src: &B::Buf<T>,
        segments: &[std::ops::Range<usize>],
    ) -> Result<B::Buf<T>> {
        let mut out = b.alloc::<T>(segments.iter().map(|s| s.len()).sum())?;
        let mut at = 0;
        for s in segments {
            b.copy_range_into(src, s.clone(), &mut out, at)?;
            at += s.len();
        }
        Ok(out)
    }
    let keys = pick(b, &table.keys, segments)?;
    let payloads = table
        .payloads
        .iter()
        .map(|c| Ok(map_column!(c, c, T => pick::<B, T>(b, c, segments)?)))
        .collect::<Result<Vec<_>>>()?;
    debug_assert_eq!(keys.len(), segments.iter().map(|s| s.len()).sum::<usize>());
    Table::new(keys, payloads)
}
