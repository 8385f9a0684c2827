//! Moving a table's rows to the ranks that own their keys: hash partition by destination,
//! then one all-to-all per column (one level), or two (across nodes on the rail, then within
//! the node), and the all-gather that replicates a table on every rank.

use joinkit::Table;
use joinkit_comm::Communicator;
use joinkit_cuda::{Backend, Buffer, Column, Error, Key, Result, map_column};
use joinkit_partition::{HashPartition, RowIds};

/// The seed of the hash that picks a key's rank: not the local partitioned joins' mix seed
/// ([`joinkit::MIX_SEED`]), so the keys one rank receives still spread over all of its local
/// join's partitions.
pub const SHUFFLE_SEED: u32 = 0x3c6e_f372;

const _: () = assert!(SHUFFLE_SEED != joinkit::MIX_SEED);

/// Ends a phase alike on every rank: a local failure (bad input, out of memory) or success is
/// agreed on ([`Communicator::agree`]), so every rank returns an error when one fails; a
/// failure of the collective itself (a timeout, a peer gone, a broken communicator) is
/// returned as it is, since the peers saw it too or are gone.
pub(crate) fn settle<C: Communicator, T>(comm: &C, op: &'static str, r: Result<T>) -> Result<T> {
    match r {
        Err(
            e @ (Error::Timeout { .. } | Error::PeerFailed { .. } | Error::Communication { .. }),
        ) => Err(e),
        r => comm.agree(op, r),
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
    let offsets = b.download(&p.offsets)?;
    let counts = offsets
        .windows(2)
        .map(|w| usize::try_from(w[1] - w[0]).map_err(|_| Error::SizeOverflow("partition size")))
        .collect::<Result<Vec<_>>>()?;
    Ok((Table::new(p.keys, p.payloads)?, counts))
}

/// Sends `send_counts[p]` rows of `table` (grouped by destination) to rank `p`, every column;
/// returns the rows received, in rank order. Every column is
/// exchanged even after one fails on this rank, so the ranks' collectives stay in step; the
/// first error is returned.
pub(crate) fn exchange<C, K>(
    comm: &C,
    b: &C::Backend,
    table: &Table<C::Backend, K>,
    send_counts: &[usize],
) -> Result<Table<C::Backend, K>>
where
    C: Communicator,
    K: Key,
{
    let keys = comm.all_to_all_v(b, &table.keys, send_counts);
    let mut first_error = None;
    let mut payloads = Vec::with_capacity(table.payloads.len());
    for c in &table.payloads {
        let moved: Result<Column<C::Backend>> =
            (|| Ok(map_column!(c, c, T => comm.all_to_all_v::<T>(b, c, send_counts)?.0)))();
        match moved {
            Ok(c) => payloads.push(c),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    let (keys, _) = keys?;
    if let Some(e) = first_error {
        return Err(e);
    }
    Table::new(keys, payloads)
}

/// Every rank's `table`, concatenated in rank order, on every rank (a replicated build side).
pub(crate) fn all_gather_table<C, K>(
    comm: &C,
    b: &C::Backend,
    table: &Table<C::Backend, K>,
) -> Result<Table<C::Backend, K>>
where
    C: Communicator,
    K: Key,
{
    let keys = comm.all_gather_v(b, &table.keys);
    let mut first_error = None;
    let mut payloads = Vec::with_capacity(table.payloads.len());
    for c in &table.payloads {
        let moved: Result<Column<C::Backend>> =
            (|| Ok(map_column!(c, c, T => comm.all_gather_v::<T>(b, c)?.0)))();
        match moved {
            Ok(c) => payloads.push(c),
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    let (keys, _) = keys?;
    if let Some(e) = first_error {
        return Err(e);
    }
    Table::new(keys, payloads)
}

/// The communicators of a two-level shuffle: the ranks of this node, and the ranks of this
/// local index on every node (the rail).
pub(crate) struct TwoLevel<C> {
    pub(crate) ranks_per_node: usize,
    pub(crate) node: C,
    pub(crate) rail: C,
}

impl<C: Communicator> TwoLevel<C> {
    /// Splits `comm` into nodes of `ranks_per_node` consecutive ranks and their rails.
    pub(crate) fn split(comm: &C, ranks_per_node: usize) -> Result<Self> {
        if ranks_per_node == 0 || !comm.size().is_multiple_of(ranks_per_node) {
            return Err(Error::InvalidArgument(format!(
                "a two-level shuffle needs the {} ranks in nodes of equal size; {ranks_per_node} \
                 ranks per node do not divide them",
                comm.size()
            )));
        }
        let (node, local) = (comm.rank() / ranks_per_node, comm.rank() % ranks_per_node);
        Ok(Self {
            ranks_per_node,
            node: comm.split(node, local)?,
            rail: comm.split(local, node)?,
        })
    }

    /// Gao's Alg. 2: `send_counts[p]` rows of `table` (grouped by destination rank
    /// `p = node * ranks_per_node + local`) go first over the rail to the destination's node,
    /// arriving at the rank of this local index there, then within that node to the
    /// destination. Returns the rows this rank owns.
    /// Every rank settles each step on `world` ([`settle`]), so a rank that fails in one step
    /// never leaves its peers waiting in the next.
    pub(crate) fn exchange<K: Key>(
        &self,
        world: &C,
        b: &C::Backend,
        table: &Table<C::Backend, K>,
        send_counts: &[usize],
    ) -> Result<Table<C::Backend, K>> {
        let per_node = self.ranks_per_node;
        let nodes = self.rail.size();
        let me = self.node_index();
        // Every rail peer's counts by destination: what each arriving block holds.
        let all = self
            .rail
            .all_gather(&send_counts.iter().map(|&c| c as u64).collect::<Vec<_>>())?;
        let to_node: Vec<usize> = send_counts
            .chunks(per_node)
            .map(|c| c.iter().sum())
            .collect();
        let arrived = settle(
            world,
            "two-level shuffle across nodes",
            exchange(&self.rail, b, table, &to_node),
        )?;
        // Block n (from node n) holds this node's destinations in local order; regroup the
        // rows by local destination, node by node.
        let sub = |n: usize, j: usize| all[n * send_counts.len() + me * per_node + j] as usize;
        let mut segments = Vec::with_capacity(nodes * per_node);
        let mut block_start = 0;
        let mut starts = vec![vec![0usize; per_node]; nodes];
        for (n, s) in starts.iter_mut().enumerate() {
            let mut at = block_start;
            for (j, start) in s.iter_mut().enumerate() {
                *start = at;
                at += sub(n, j);
            }
            block_start = at;
        }
        let mut to_local = vec![0usize; per_node];
        for (j, count) in to_local.iter_mut().enumerate() {
            for (n, s) in starts.iter().enumerate() {
                segments.push(s[j]..s[j] + sub(n, j));
                *count += sub(n, j);
            }
        }
        let regrouped = settle(
            world,
            "two-level shuffle regroup",
            regroup(b, &arrived, &segments),
        )?;
        drop(arrived);
        exchange(&self.node, b, &regrouped, &to_local)
    }

    /// This rank's node (its rank on the rail).
    fn node_index(&self) -> usize {
        self.rail.rank()
    }
}

/// `table`'s rows in `segments`, concatenated in the order given.
fn regroup<B: Backend, K: Key>(
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
