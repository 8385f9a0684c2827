//! The distributed join, step by step: agree on the inputs, plan (sizes, placement, heavy
//! keys), move the rows (shuffle or replicate), join locally, and report.

use joinkit::{
    CoPartitionJoin, JoinBackend, JoinKind, JoinOptions, JoinStats, Materialized, PartitionedProbe,
    Table, add_phase, check_rows, join_columns,
};
use joinkit_codec::Codec;
use joinkit_comm::Communicator;
use joinkit_cuda::{Backend, Buffer, Column, Error, Key, Result, map_column};
use joinkit_partition::{
    HashPartition, LowWordsPartition, MAX_LOW_WORDS_FANOUT, MemberRun, RowNames, member_words,
};

use crate::pipeline::{Clock, Piped, Pipeline, SideStream, add_stats, probes_partitioned};
use crate::shuffle::{
    SHUFFLE_SEED, TwoLevel, counts_of, partition, row_bytes, settle, settle_gather, shuffle_side,
};
use crate::skew::{heavy_keys, split_heavy};
use crate::wire::{
    Arrival, Level, Links, Pattern, Traffic, Wire, move_raw_tables, move_table, plan_wire,
};
use crate::{
    DistributedOptions, DistributedStats, GlobalRows, Placement, Shuffle, Skew, global_row,
    pipeline,
};

/// Where the rows stand once they have moved: both sides on their rank for the local join, or
/// already joined by the pipeline.
enum Moved<B: JoinBackend, K: Key> {
    Sides(Table<B, K>, Table<B, K>),
    Joined(Box<Piped<B>>),
    /// Joined as the rows arrived (the shuffles beside the computing): the output, the local
    /// join's statistics and the rows it joined of each side.
    Local(Materialized<B>, JoinStats, (usize, usize)),
}

/// Tables (and membership bitmaps) that a second stream moves while the first computes.
/// Whichever way the join leaves, both streams are waited for before any of them is freed: the
/// other stream may still read or write it, and freed memory goes to the next allocation on the
/// stream that freed it.
struct InFlight<'s, B: Backend, K: Key> {
    streams: [&'s B; 2],
    tables: Vec<Table<B, K>>,
    bitmaps: Vec<B::Buf<u32>>,
}

impl<B: Backend, K: Key> Drop for InFlight<'_, B, K> {
    fn drop(&mut self) {
        for s in self.streams {
            // A failure here is the failed work's own, already returned by whoever queued it.
            let _ = s.synchronize();
        }
    }
}

/// Everything a backend needs for the distributed joins: the single-device joins, the hash
/// partitions that pick each row's rank (one narrowing 8-byte keys as it goes), the codec of
/// compressed shuffles, and a second stream for the pipelined shuffle.
pub trait DistributedBackend:
    JoinBackend + HashPartition + LowWordsPartition + Codec + SideStream
{
}
impl<B: JoinBackend + HashPartition + LowWordsPartition + Codec + SideStream> DistributedBackend
    for B
{
}

/// Joins `left` and `right` spread over the ranks of `comm` and returns this rank's part of
/// the output as global row ids ([`crate::global_row`]: the rank that held the row, and its
/// row there), with statistics. Every rank calls it with its own rows and the same options;
/// the inputs are consumed (the shuffle frees them as soon as they are partitioned, while
/// `backend`'s stream may still read them: give buffers made on that stream, whose frees are
/// ordered after its work). The row
/// ids travel 4 bytes wide through the shuffle and the local join where every rank's rows and
/// the ranks fit 32 bits (`rank << row_bits | row`), and the local join writes them widened
/// ([`JoinOptions::unpack_ids`], which this function sets itself: a caller's value is not
/// read), or rank 0 widens them after [`DistributedOptions::gather_to_root`] brought them there.
///
/// # Errors
/// [`Error::RanksDisagree`] when the ranks' options or key widths differ;
/// [`Error::PeerFailed`] when another rank failed; [`Error::Timeout`] when one stopped
/// responding; as [`joinkit::join_columns`] for each rank's local join;
/// [`Error::OutputOverBudget`] when [`DistributedOptions::gather_to_root`] would bring more
/// than the budget to rank 0.
pub fn distributed_join_rows<C, K>(
    comm: &C,
    b: &C::Backend,
    left: <C::Backend as Backend>::Buf<K>,
    right: <C::Backend as Backend>::Buf<K>,
    opts: &DistributedOptions,
) -> Result<(GlobalRows<C::Backend>, DistributedStats)>
where
    C: Communicator,
    C::Backend: DistributedBackend,
    K: Key,
{
    let rows = settle_gather(
        comm,
        "row ids",
        2,
        check_rows(left.len())
            .and_then(|()| check_rows(right.len()))
            .map(|()| vec![left.len() as u64, right.len() as u64]),
    )?;
    let ids = RowIdsToMake {
        packed: packed_row_bits(comm.size(), &rows),
        right: opts.join.kind.has_right_rows(),
    };
    let packed = ids.packed;
    let keys_only = |keys| Table {
        keys,
        payloads: Vec::new(),
    };
    // The local join widens the 4-byte ids into 8-byte global ones as it writes them (its
    // budget counting them 8 bytes wide); an output gathered on rank 0 travels there 4 bytes
    // wide and is widened there, its budget halved (for a left outer join's validity column,
    // conservatively).
    let widen_in_join = packed.filter(|_| !opts.gather_to_root);
    let mut run_opts = *opts;
    run_opts.join.unpack_ids = widen_in_join;
    if packed.is_some() && widen_in_join.is_none() {
        run_opts.join.memory_budget = opts.join.memory_budget.map(|bytes| bytes / 2);
    }
    let (out, stats) = run(
        comm,
        b,
        (keys_only(left), keys_only(right)),
        &run_opts,
        Some(ids),
    )?;
    let u64_of = |mut cols: Vec<Column<C::Backend>>| match (cols.pop(), packed) {
        (Some(Column::U64(c)), _) => Ok(Some(c)),
        (Some(Column::U32(c)), Some(row_bits)) => b.unpack_ids(&c, row_bits).map(Some),
        (None, _) => Ok(None),
        _ => Err(Error::Corrupt("row ids came back as another type".into())),
    };
    let rows = out.rows;
    let left = u64_of(out.left)?.ok_or_else(|| Error::Corrupt("no left row ids".into()))?;
    Ok((
        GlobalRows {
            left,
            right: u64_of(out.right)?,
            right_valid: out.right_valid,
            rows,
        },
        stats,
    ))
}

/// The row bits of 4-byte global row ids, `rank << row_bits | row`, when every rank's rows of
/// both sides (`rows`: each rank's left and right rows) and the `ranks` fit 32 bits together:
/// the shuffle and the local join then move 4 bytes an id instead of 8 (the output is unpacked
/// into [`global_row`]'s layout).
fn packed_row_bits(ranks: usize, rows: &[Vec<u64>]) -> Option<u32> {
    let most = rows.iter().flatten().copied().max().unwrap_or(0);
    // Bits that hold every value below `n`.
    let bits = |n: u64| u64::BITS - n.saturating_sub(1).leading_zeros();
    let row_bits = bits(most);
    (row_bits + bits(ranks as u64) <= 32).then_some(row_bits)
}

/// A join's left and right tables.
type Sides<B, K> = (Table<B, K>, Table<B, K>);

/// The row ids of [`distributed_join_rows`], still to be made: written by the partition by
/// rank that narrows the keys where the join takes it, else attached to the tables up front.
#[derive(Debug, Clone, Copy)]
struct RowIdsToMake {
    /// `Some(row_bits)`: 4-byte ids, `rank << row_bits | row`; `None`: [`global_row`]'s 8 bytes.
    packed: Option<u32>,
    /// Whether the right side carries ids too (joins whose output has right rows).
    right: bool,
}

impl RowIdsToMake {
    /// The id of this rank's first row.
    fn first(self, rank: usize) -> u64 {
        match self.packed {
            Some(row_bits) => (rank as u64) << row_bits,
            None => global_row(rank, 0),
        }
    }

    /// `n` ids from this rank's first.
    fn column<B: Backend>(self, b: &B, rank: usize, n: usize) -> Result<Column<B>> {
        Ok(match self.packed {
            Some(_) => {
                let mut ids = b.alloc::<u32>(n)?;
                b.iota(&mut ids, self.first(rank))?;
                Column::U32(ids)
            }
            None => {
                let mut ids = b.alloc::<u64>(n)?;
                b.iota(&mut ids, self.first(rank))?;
                Column::U64(ids)
            }
        })
    }

    /// Both tables with their ids as their payloads (every rank agreeing that it made them).
    fn attach<C: Communicator, K: Key>(
        self,
        comm: &C,
        b: &C::Backend,
        (left, right): Sides<C::Backend, K>,
    ) -> Result<Sides<C::Backend, K>> {
        let rank = comm.rank();
        let tables = (|| {
            let left_ids = self.column(b, rank, left.len())?;
            let right_ids = match self.right {
                true => vec![self.column(b, rank, right.len())?],
                false => Vec::new(),
            };
            Ok((
                Table::new(left.keys, vec![left_ids])?,
                Table::new(right.keys, right_ids)?,
            ))
        })();
        settle(comm, "row ids", tables)
    }
}

/// Joins two tables spread over the ranks of `comm` and returns this rank's part of the
/// output columns (as [`joinkit::join_columns`] returns them), with statistics. Every rank
/// calls it with its own rows and the same options; the tables are consumed (freed as the
/// join goes, while `backend`'s stream may still read them: give buffers made on that stream).
///
/// # Errors
/// As [`distributed_join_rows`]; [`Error::RanksDisagree`] also when the ranks' payload column
/// types differ.
pub fn distributed_join_columns<C, K>(
    comm: &C,
    b: &C::Backend,
    left: Table<C::Backend, K>,
    right: Table<C::Backend, K>,
    opts: &DistributedOptions,
) -> Result<(Materialized<C::Backend>, DistributedStats)>
where
    C: Communicator,
    C::Backend: DistributedBackend,
    K: Key,
{
    run(comm, b, (left, right), opts, None)
}

/// A fingerprint of what every rank must agree on: options, key width, column types, size.
fn fingerprint<B: Backend, K: Key>(
    opts: &DistributedOptions,
    ranks: usize,
    left: &Table<B, K>,
    right: &Table<B, K>,
) -> (u64, String) {
    let types = |t: &Table<B, K>| {
        t.payloads
            .iter()
            .map(|c| format!("{c:?}").split('[').next().unwrap_or("").to_owned())
            .collect::<Vec<_>>()
            .join(",")
    };
    let text = format!(
        "ranks {ranks}, {}-bit keys, left columns [{}], right columns [{}], {:?}",
        K::BITS,
        types(left),
        types(right),
        opts
    );
    // FNV-1a: ranks compare one word instead of the text.
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, c| {
        (h ^ u64::from(c)).wrapping_mul(0x0100_0000_01b3)
    });
    (hash, text)
}

/// The resolved plan: placement, shuffle, heavy keys.
struct Plan<K> {
    placement: Placement,
    shuffle: Shuffle,
    heavy: Vec<K>,
}

fn run<C, K>(
    comm: &C,
    b: &C::Backend,
    (left, right): Sides<C::Backend, K>,
    opts: &DistributedOptions,
    ids: Option<RowIdsToMake>,
) -> Result<(Materialized<C::Backend>, DistributedStats)>
where
    C: Communicator,
    C::Backend: DistributedBackend,
    K: Key,
{
    let ranks = comm.size();
    let (mine, text) = fingerprint(opts, ranks, &left, &right);
    let local_check = (|| {
        check_rows(left.len())?;
        check_rows(right.len())?;
        left_check(&left)?;
        left_check(&right)?;
        if opts.pipeline_chunks == 0 {
            return Err(Error::InvalidArgument(
                "a pipelined shuffle needs at least one chunk".into(),
            ));
        }
        Ok(())
    })();
    // The timeline starts here; a failure to mark the stream is agreed on with the inputs.
    let clock = Clock::new(b);
    let words = (local_check.and_then(|()| clock.as_ref().map(drop).map_err(Clone::clone)))
        .map(|()| vec![mine, left.len() as u64, right.len() as u64]);
    let all = settle_gather(comm, "input check", 3, words)?;
    if all.iter().any(|w| w[0] != mine) {
        return Err(Error::RanksDisagree(format!(
            "the ranks' inputs or options differ; rank {} has {text}",
            comm.rank()
        )));
    }
    let mut clock = clock?;
    let sizes = [1, 2].map(|i| all.iter().map(|w| w[i]).sum::<u64>());
    let (left, right) = match ids {
        Some(ids) if partitions_into_low_words::<K>(ranks, &sizes, opts, ids) => {
            let window = clock.phase(b, "narrow", || {
                Ok(sampled_span(comm, b, &left, &right)?.map(window_around))
            })?;
            let sides = match window {
                Some(window) => {
                    let inputs = Inputs::LowWords(LowWordSides {
                        left: Some(left),
                        right: Some(right),
                        window,
                        ids,
                        bitmaps: opts.id_bitmaps && comm.any_order_is_rank_order(),
                    });
                    match spread(comm, b, inputs, opts, clock, &sizes)? {
                        Spread::Joined(out, stats) => return Ok((out, *stats)),
                        // A key outside the window (the look missed it), or heavy keys.
                        Spread::Declined(left, right, c) => {
                            clock = c;
                            (left, right)
                        }
                    }
                }
                None => (left, right),
            };
            ids.attach(comm, b, sides)?
        }
        Some(ids) => ids.attach(comm, b, (left, right))?,
        None => (left, right),
    };
    if ranks > 1 && K::BITS == 64 && opts.join.narrow_keys {
        let narrowed = clock.phase(b, "narrow", || narrow_tables(comm, b, left, right))?;
        return match narrowed {
            Narrowed::Low(left, right) => {
                let inputs = Inputs::Tables((left, right));
                joined(spread(comm, b, inputs, opts, clock, &sizes)?).map(|(out, stats)| {
                    let narrowed_keys = true;
                    (
                        out,
                        DistributedStats {
                            narrowed_keys,
                            ..stats
                        },
                    )
                })
            }
            Narrowed::Kept(left, right) => joined(spread(
                comm,
                b,
                Inputs::Tables((left, right)),
                opts,
                clock,
                &sizes,
            )?),
        };
    }
    joined(spread(
        comm,
        b,
        Inputs::Tables((left, right)),
        opts,
        clock,
        &sizes,
    )?)
}

/// Whether the rows of [`distributed_join_rows`] take the partition by rank that narrows the
/// keys and writes the row ids in the pass that groups them ([`LowWordsPartition`]), instead
/// of a pass for the ids, one for the keys and one for the partition: 8-byte keys the options
/// narrow, 4-byte ids, 2 to [`MAX_LOW_WORDS_FANOUT`] ranks, and the shuffles beside the
/// computing (a partitioned, one-level shuffle in one chunk; heavy keys are found later).
fn partitions_into_low_words<K: Key>(
    ranks: usize,
    sizes: &[u64],
    opts: &DistributedOptions,
    ids: RowIdsToMake,
) -> bool {
    K::BITS == 64
        && opts.join.narrow_keys
        && ids.packed.is_some()
        && (2..=MAX_LOW_WORDS_FANOUT).contains(&ranks)
        && opts.pipeline_chunks == 1
        && placement_of(opts, ranks, sizes) == Placement::Partitioned
        && shuffle_of(opts, ranks) == Shuffle::OneLevel
}

/// The window of 2^32 values that a span of fewer (the least and greatest keys sampled) lies
/// in the middle of, so that keys the sample missed may fall a little outside the span.
fn window_around((least, greatest): (u64, u64)) -> u64 {
    const WIDTH_LESS_ONE: u64 = u32::MAX as u64;
    if least > greatest {
        return 0; // no keys sampled anywhere
    }
    let slack = WIDTH_LESS_ONE - (greatest - least);
    least
        .saturating_sub(slack / 2)
        .min(u64::MAX - WIDTH_LESS_ONE)
}

/// The output and statistics of a [`spread`] that the inputs of
/// [`Inputs::Tables`] always join.
fn joined<B: SideStream, K: Key>(s: Spread<B, K>) -> Result<(Materialized<B>, DistributedStats)> {
    match s {
        Spread::Joined(out, stats) => Ok((out, *stats)),
        Spread::Declined(..) => Err(Error::Corrupt("tables declined a join".into())),
    }
}

/// Both sides' keys after [`narrow_tables`]: their low 32 bits, or as they were.
enum Narrowed<B: Backend, K: Key> {
    Low(Table<B, u32>, Table<B, u32>),
    Kept(Table<B, K>, Table<B, K>),
}

/// Both tables with their 8-byte keys as the low 32 bits where every rank's keys of both
/// sides lie within 2^32 values (one-to-one there, so the same rows join): the shuffle then
/// moves 4 bytes a key instead of 8 and the local joins narrow nothing themselves. A look at
/// a few thousand keys a side first, so keys spread too wide (random 64-bit keys) cost no pass.
/// The ranks decide together (their ranges reduced), so every rank hashes the same key words.
fn narrow_tables<C, K>(
    comm: &C,
    b: &C::Backend,
    left: Table<C::Backend, K>,
    right: Table<C::Backend, K>,
) -> Result<Narrowed<C::Backend, K>>
where
    C: Communicator,
    C::Backend: DistributedBackend,
    K: Key,
{
    if sampled_span(comm, b, &left, &right)?.is_none() {
        return Ok(Narrowed::Kept(left, right));
    }
    let low = (|| {
        let (l, l_range) = b.low_words(&left.keys)?;
        let (r, r_range) = b.low_words(&right.keys)?;
        Ok((l, r, span(l_range, r_range)))
    })();
    // The narrowed keys stay here; their range goes to the others.
    let (range, low) = match low {
        Ok((l, r, (least, greatest))) => (Ok(vec![least, greatest]), Some((l, r))),
        Err(e) => (Err(e), None),
    };
    let ranges = settle_gather(comm, NARROWING, 2, range)?;
    let (Some((l, r)), Some(_)) = (low, within_2_32(&ranges)) else {
        return Ok(Narrowed::Kept(left, right));
    };
    // As many keys as before: the payloads still fit them.
    let table = |keys, payloads| Table { keys, payloads };
    Ok(Narrowed::Low(
        table(l, left.payloads),
        table(r, right.payloads),
    ))
}

const NARROWING: &str = "narrowing keys";

/// The least and greatest of two ranges.
fn span(a: (u64, u64), c: (u64, u64)) -> (u64, u64) {
    (a.0.min(c.0), a.1.max(c.1))
}

/// The span of every rank's range (`[least, greatest]` each) where it lies within 2^32 values.
fn within_2_32(ranges: &[Vec<u64>]) -> Option<(u64, u64)> {
    let all = ranges
        .iter()
        .fold((u64::MAX, 0), |acc, r| span(acc, (r[0], r[1])));
    joinkit::within_u32(all).then_some(all)
}

/// The span of a few thousand keys of each side on every rank, where it lies within 2^32
/// values (agreed on by every rank): a look that shows most keys too wide to narrow for
/// tens of microseconds, before a pass over every key.
fn sampled_span<C, K>(
    comm: &C,
    b: &C::Backend,
    left: &Table<C::Backend, K>,
    right: &Table<C::Backend, K>,
) -> Result<Option<(u64, u64)>>
where
    C: Communicator,
    C::Backend: DistributedBackend,
    K: Key,
{
    let look = (|| {
        let l = b.sampled_key_range(&left.keys)?;
        let (least, greatest) = span(l, b.sampled_key_range(&right.keys)?);
        Ok(vec![least, greatest])
    })();
    Ok(within_2_32(&settle_gather(comm, NARROWING, 2, look)?))
}

/// What [`spread`] joins: tables as they are (keys narrowed or not, payloads attached), or
/// 8-byte keys that the partition by rank narrows and numbers ([`partitions_into_low_words`]).
enum Inputs<B: Backend, K: Key> {
    Tables(Sides<B, K>),
    LowWords(LowWordSides<B, K>),
}

/// A [`spread`]'s end: joined, or the 8-byte keys handed back untouched for the tables' path
/// (a key outside the window the sample chose, or heavy keys), with the time spent so far.
enum Spread<B: SideStream, K: Key> {
    Joined(Materialized<B>, Box<DistributedStats>),
    Declined(Table<B, K>, Table<B, K>, Clock<B>),
}

/// Both sides' 8-byte keys (tables without payloads) for the partition by rank that writes
/// their low 32 bits, where every key lies in `[window, window + 2^32)`, and the row ids. The
/// keys are kept until every rank has found every key of both sides in the window, so that
/// the join can still go the tables' way where one has not.
struct LowWordSides<B: Backend, K: Key> {
    left: Option<Table<B, K>>,
    right: Option<Table<B, K>>,
    window: u64,
    ids: RowIdsToMake,
    /// Whether the ids go as membership bitmaps ([`DistributedOptions::id_bitmaps`], where
    /// the communicator keeps rank order).
    bitmaps: bool,
}

/// The side a partition by rank is asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Right,
    Left,
}

impl Side {
    fn partitioning(self) -> &'static str {
        match self {
            Side::Right => "partitioning the right side",
            Side::Left => "partitioning the left side",
        }
    }
}

/// A side's rows grouped by rank: the table, the rows for each rank, and, where the rows are
/// named by membership bitmaps instead of an id column ([`RowNames::Members`]), those.
struct GroupedSide<B: Backend, K: Key> {
    table: Table<B, K>,
    counts: Vec<usize>,
    members: Option<Members<B>>,
}

/// A side's membership bitmaps: one a rank, rank 0's first, each of `words` words; and the id
/// of each rank's row 0, which a receiver adds to the positions of the bits it gets.
struct Members<B: Backend> {
    bitmaps: B::Buf<u32>,
    words: usize,
    first_ids: Vec<u32>,
}

impl<B: Backend> Members<B> {
    /// Bytes of bitmaps this rank sends to the other `ranks - 1`.
    fn bytes_away(&self, ranks: usize) -> u64 {
        (self.words * size_of::<u32>() * (ranks - 1)) as u64
    }
}

/// A side grouped by rank; `None` where the ranks found keys outside the window they were
/// narrowed into.
type Grouped<B, K> = Option<GroupedSide<B, K>>;

/// What groups a side's rows by rank for [`beside`], on the compute stream: the stream it
/// gets (the one that moves the side) waits for that work before the ranks agree on it.
type ByRank<'a, B, K> = dyn FnMut(&mut Clock<B>, Side, &B) -> Result<Grouped<B, K>> + 'a;

impl<B: DistributedBackend, K: Key> LowWordSides<B, K> {
    /// One side grouped by rank, its keys narrowed and its rows named by ids or membership
    /// bitmaps in one pass (a right side without ids: not named); every rank learns whether
    /// every rank's keys lay in the window. The 8-byte keys go once both sides' did. The
    /// sizes come back before the partition's scatter ends: `mover`, the stream that moves the
    /// side, waits for it.
    fn partition<C: Communicator<Backend = B>>(
        &mut self,
        comm: &C,
        (b, mover): (&B, &B),
        clock: &mut Clock<B>,
        side: Side,
    ) -> Result<Grouped<B, u32>> {
        let (table, named) = match side {
            Side::Right => (&self.right, self.ids.right),
            Side::Left => (&self.left, true),
        };
        let table = table
            .as_ref()
            .ok_or_else(|| Error::Corrupt("a side partitioned twice".into()))?;
        let ranks = comm.size();
        let first_ids = (0..ranks)
            .map(|r| u32::try_from(self.ids.first(r)))
            .collect::<std::result::Result<Vec<u32>, _>>()
            .map_err(|_| Error::SizeOverflow("4-byte row ids"))?;
        let names = match (named, self.bitmaps) {
            (true, true) => RowNames::Members,
            (true, false) => RowNames::Ids {
                from: first_ids[comm.rank()],
            },
            (false, _) => RowNames::None,
        };
        let by = (ranks, SHUFFLE_SEED);
        let grouped = clock.phase(b, "partition", || {
            let mut kept = None;
            let inside = (|| {
                let p = b.hash_partition_low_words(&table.keys, by, self.window, names)?;
                mover.wait_for(&b.mark()?)?;
                let counts = counts_of(&p.offsets)?;
                let inside = u64::from(p.within_window);
                let members = p.members.map(|bitmaps| Members {
                    bitmaps,
                    words: member_words(table.keys.len()),
                    first_ids,
                });
                let ids = p.row_ids.map(Column::U32).into_iter().collect();
                kept = Some(GroupedSide {
                    table: Table::new(p.keys, ids)?,
                    counts,
                    members,
                });
                Ok(vec![inside])
            })();
            let all = settle_gather(comm, side.partitioning(), 1, inside)?;
            Ok(kept.filter(|_| all.iter().all(|w| w[0] == 1)))
        })?;
        if side == Side::Left && grouped.is_some() {
            self.left = None;
            self.right = None;
        }
        Ok(grouped)
    }
}

/// The placement the options ask for, `Auto` resolved: the right side replicated where it is
/// smaller than the left side a rank would otherwise receive.
fn placement_of(opts: &DistributedOptions, ranks: usize, sizes: &[u64]) -> Placement {
    match opts.placement {
        Placement::Auto if ranks > 1 && sizes[1] * (ranks as u64 - 1) < sizes[0] => {
            Placement::Replicated
        }
        Placement::Auto => Placement::Partitioned,
        p => p,
    }
}

/// The shuffle the options ask for, `Auto` resolved: two levels where the ranks form nodes.
fn shuffle_of(opts: &DistributedOptions, ranks: usize) -> Shuffle {
    match (opts.shuffle, opts.ranks_per_node) {
        (Shuffle::Auto, Some(per_node)) if per_node > 1 && per_node < ranks => Shuffle::TwoLevel {
            ranks_per_node: per_node,
        },
        (Shuffle::Auto, _) => Shuffle::OneLevel,
        (s, _) => s,
    }
}

/// Bytes of rows grouped by rank (`counts` a rank, `width` bytes a row) that leave `rank`.
fn bytes_away(rank: usize, counts: &[usize], width: usize) -> u64 {
    counts
        .iter()
        .enumerate()
        .filter(|&(p, _)| p != rank)
        .map(|(_, &c)| (c * width) as u64)
        .sum()
}

/// Bytes a side grouped by rank sends to the other ranks: its rows, and its membership bitmaps.
fn grouped_bytes_away<C: Communicator, K: Key>(comm: &C, g: &GroupedSide<C::Backend, K>) -> u64 {
    let bitmaps = (g.members.as_ref()).map_or(0, |m| m.bytes_away(comm.size()));
    bytes_away(comm.rank(), &g.counts, row_bytes(&g.table)) + bitmaps
}

/// Where a side's rows came named by membership bitmaps: the received bitmaps (in
/// [`InFlight::bitmaps`]) and each sender's run of them.
struct Naming {
    bitmaps: usize,
    runs: Vec<MemberRun>,
}

/// A side's rows as they arrived: the table, and where its rows came named by membership
/// bitmaps, those.
type Arrived<B, K> = (Table<B, K>, Option<Naming>);

/// Moves a side grouped by rank to its ranks on `cb`, by [`shuffle_side`]; where its rows are
/// named by membership bitmaps, its keys in rank order and then the bitmaps, which name the
/// rows received in the order they came ([`name_rows`]): a bit a row for each rank instead of
/// a 4-byte id. What the transfers read and write stays in `flight`. Returns the rows received
/// and, where they came named by bitmaps, those.
#[allow(clippy::too_many_arguments)] // the step's inputs and the records it adds to
fn move_grouped<C, K>(
    comm: &C,
    cb: &C::Backend,
    two: Option<&TwoLevel>,
    flight: &mut InFlight<'_, C::Backend, K>,
    g: GroupedSide<C::Backend, K>,
    wire: &Wire,
    traffic: &mut Traffic,
    what: &'static str,
) -> Result<Arrived<C::Backend, K>>
where
    C: Communicator,
    C::Backend: DistributedBackend,
    K: Key,
{
    let GroupedSide {
        table,
        counts,
        members,
    } = g;
    let Some(m) = members else {
        let got = shuffle_side(comm, cb, two, &table, &counts, wire, traffic, what);
        flight.tables.push(table);
        return got.map(|t| (t, None));
    };
    let ranks = comm.size();
    let words_to_each = vec![m.words; ranks];
    let moved = match two {
        // The keys and the bitmaps in one exchange: the copy engines' ranks meet once for
        // both, leaving the compute stream idle for one round of meetings instead of two. The
        // bitmaps name rows in the order they come, so only where it is rank order.
        None if !wire.compresses() && comm.any_order_is_rank_order() => {
            let moved = move_raw_tables(
                comm,
                cb,
                (&table, &counts),
                Some((&m.bitmaps, &words_to_each)),
                (wire, traffic),
            )
            .and_then(|(keys, bitmaps)| {
                let bitmaps = bitmaps.ok_or_else(|| Error::Corrupt("no bitmaps came back".into()));
                Ok((keys, bitmaps?))
            });
            settle(comm, what, moved)
        }
        None => {
            let pattern = (Pattern::AllToAll(&counts), Arrival::RankOrder);
            let keys = move_table(comm, cb, &table, pattern, wire, traffic);
            settle(comm, what, keys).and_then(|keys| {
                let moved = comm.all_to_all_v(cb, &m.bitmaps, &words_to_each);
                Ok((keys, settle(comm, "moving the membership bitmaps", moved)?))
            })
        }
        Some(_) => settle(
            comm,
            what,
            Err(Error::Corrupt(
                "membership bitmaps on a two-level shuffle".into(),
            )),
        ),
    };
    flight.tables.push(table);
    let sent = m.bytes_away(ranks);
    flight.bitmaps.push(m.bitmaps);
    let (keys, (received, words_from_each)) = moved?;
    flight.bitmaps.push(received);
    let raw = bytes_away(comm.rank(), &counts, size_of::<u32>());
    traffic.add_members(wire.side, raw, sent);
    let runs = (words_from_each.iter().zip(&m.first_ids))
        .map(|(&words, &first_id)| MemberRun { words, first_id })
        .collect();
    let naming = Naming {
        bitmaps: flight.bitmaps.len() - 1,
        runs,
    };
    Ok((keys, Some(naming)))
}

/// Puts the ids of `table`'s rows beside its keys where they came named by membership bitmaps
/// (`naming`, into `bitmaps`), decoded on `b`, which has waited for them: on the stream that
/// joins next rather than the one that moved them, whose kernels would wait for the join's to
/// leave SMs free.
fn name_rows<B: DistributedBackend, K: Key>(
    b: &B,
    table: &mut Table<B, K>,
    bitmaps: &[B::Buf<u32>],
    naming: Option<&Naming>,
) -> Result<()> {
    let Some(n) = naming else {
        return Ok(());
    };
    let members = (bitmaps.get(n.bitmaps))
        .ok_or_else(|| Error::Corrupt("membership bitmaps went missing".into()))?;
    let ids = b.member_row_ids(members, &n.runs, table.len())?;
    table.payloads.push(Column::U32(ids));
    Ok(())
}

/// What the shuffles beside the computing leave: the local join's output and statistics, the
/// rows it joined of each side, and the bytes of rows sent.
struct Beside<B: Backend> {
    out: Materialized<B>,
    local: JoinStats,
    local_rows: (usize, usize),
    bytes_sent: u64,
}

/// The shuffles beside the computing: the right side partitioned (`by_rank`) and sent first,
/// on a stream of its own, while the left side partitions; the left side sent while the right
/// side's partitions for the local join are built. Where the communicator's collectives return
/// once their transfers are queued (the copy engines') the transfers run under the kernels;
/// where they wait for them (NCCL) the steps run in turn. `None` where `by_rank` gave none.
/// `partitionable`: whether [`PartitionedProbe`] supports the join of these columns.
#[allow(clippy::too_many_arguments)] // the step's inputs and the records it adds to
fn beside<C, K>(
    comm: &C,
    b: &C::Backend,
    two: Option<&TwoLevel>,
    clock: &mut Clock<C::Backend>,
    opts: &DistributedOptions,
    (traffic, links, per_node): (&mut Traffic, &mut Links, usize),
    partitionable: bool,
    by_rank: &mut ByRank<'_, C::Backend, K>,
) -> Result<Option<Beside<C::Backend>>>
where
    C: Communicator,
    C::Backend: DistributedBackend,
    K: Key,
{
    let cb = settle(comm, "opening the communication stream", b.side_stream())?;
    let mut flight = InFlight {
        streams: [b, &cb],
        tables: Vec::with_capacity(4),
        bitmaps: Vec::new(),
    };
    let level = match two {
        Some(_) => Level::AcrossNodes,
        None => Level::AllToAll,
    };
    // Compression decisions (sampling, a link measured) are part of the plan.
    let mut wire = |clock: &mut Clock<C::Backend>, t: &Table<C::Backend, K>, side| {
        clock.phase(b, "plan", || {
            plan_wire(comm, b, t, side, level, opts.compress, per_node, links)
        })
    };
    // Each shuffle's marks on the communication stream around it; a mark's failure is said
    // at the local join's agreement.
    let mut shuffled = Vec::new();
    let mut shuffle =
        |flight: &mut InFlight<'_, C::Backend, K>, g: GroupedSide<C::Backend, K>, w, what| {
            let from = cb.mark();
            let got = move_grouped(comm, &cb, two, flight, g, w, traffic, what)?;
            shuffled.push((from, cb.mark()));
            Ok::<_, Error>(got)
        };
    let Some(right) = by_rank(clock, Side::Right, &cb)? else {
        return Ok(None);
    };
    let mut bytes_sent = grouped_bytes_away(comm, &right);
    let w = wire(clock, &right.table, "right")?;
    let (right_in, right_names) = shuffle(&mut flight, right, &w, "shuffling the right side")?;
    flight.tables.push(right_in);
    let Some(left) = by_rank(clock, Side::Left, &cb)? else {
        // The right side's transfers may still read and write this rank's buffers, some on
        // other ranks' streams: every rank waits for its own, then for the others, before the
        // buffers are freed.
        let moved = cb.synchronize();
        settle(comm, "abandoning the right side's shuffle", moved)?;
        return Ok(None);
    };
    bytes_sent += grouped_bytes_away(comm, &left);
    let w = wire(clock, &left.table, "left")?;
    let (left_in, left_names) = shuffle(&mut flight, left, &w, "shuffling the left side")?;
    flight.tables.push(left_in);
    let moved: Result<Vec<_>> = (shuffled.into_iter())
        .map(|(from, to)| Ok((from?, to?)))
        .collect();
    let InFlight {
        tables, bitmaps, ..
    } = &mut flight;
    let [_, right_in, _, left_in] = &mut tables[..] else {
        return Err(Error::Corrupt("two sides sent, two received".into()));
    };
    let (out, local) = clock.phase(b, "local join", || {
        let joined = (|| {
            let moved = moved.as_ref().map_err(Clone::clone)?;
            let [(_, right_moved), (_, left_moved)] = &moved[..] else {
                return Err(Error::Corrupt("two shuffles, two marks".into()));
            };
            b.wait_for(right_moved)?;
            name_rows(b, right_in, bitmaps, right_names.as_ref())?;
            let right_in = &*right_in;
            let (out, stats) = if probes_partitioned(&opts.join, right_in.len(), partitionable) {
                let probe = PartitionedProbe::build(b, right_in, &opts.join)?;
                let mut stats = Some(probe.build_stats().clone());
                b.wait_for(left_moved)?;
                name_rows(b, left_in, bitmaps, left_names.as_ref())?;
                let (out, probed) = probe.probe_columns(left_in)?;
                add_stats(&mut stats, probed);
                let stats = stats.ok_or_else(|| Error::Corrupt("no local join ran".into()))?;
                (out, stats)
            } else {
                b.wait_for(left_moved)?;
                name_rows(b, left_in, bitmaps, left_names.as_ref())?;
                join_columns(b, left_in, right_in, &opts.join)?
            };
            // The local join's work ends inside this agreement, so that a device error it
            // meets late is every rank's error, not one rank's at the end.
            b.synchronize()?;
            Ok((out, stats))
        })();
        settle(comm, "local join", joined)
    })?;
    // Agreed on above: every mark was made.
    for (from, to) in moved? {
        clock.queued("shuffle", from, to);
    }
    Ok(Some(Beside {
        out,
        local,
        local_rows: (left_in.len(), right_in.len()),
        bytes_sent,
    }))
}

/// The join after the inputs are agreed on: plan, move the rows, join locally, report.
fn spread<C, K>(
    comm: &C,
    b: &C::Backend,
    inputs: Inputs<C::Backend, K>,
    opts: &DistributedOptions,
    mut clock: Clock<C::Backend>,
    sizes: &[u64],
) -> Result<Spread<C::Backend, K>>
where
    C: Communicator,
    C::Backend: DistributedBackend,
    K: Key,
{
    let ranks = comm.size();
    let input_rows = match &inputs {
        Inputs::Tables((left, right)) => (left.len(), right.len()),
        Inputs::LowWords(sides) => {
            let rows = |t: &Option<Table<C::Backend, K>>| t.as_ref().map_or(0, Table::len);
            (rows(&sides.left), rows(&sides.right))
        }
    };
    let left_keys = match &inputs {
        Inputs::Tables((left, _)) => Some(&left.keys),
        Inputs::LowWords(sides) => sides.left.as_ref().map(|t| &t.keys),
    };
    let plan = clock.phase(b, "plan", || {
        let placement = placement_of(opts, ranks, sizes);
        let heavy = match (opts.skew, placement, left_keys) {
            (Skew::Replicate { load }, Placement::Partitioned, Some(keys)) if ranks > 1 => {
                heavy_keys(comm, b, keys, load)?
            }
            _ => Vec::new(),
        };
        Ok(Plan {
            placement,
            shuffle: shuffle_of(opts, ranks),
            heavy,
        })
    })?;
    let two_level = match plan.shuffle {
        Shuffle::TwoLevel { ranks_per_node } if ranks > 1 => {
            Some(TwoLevel::new(comm, ranks_per_node)?)
        }
        _ => None,
    };

    let per_node = two_level.as_ref().map_or(ranks, |t| t.ranks_per_node);
    let (mut traffic, mut links) = (Traffic::default(), Links::default());
    let (left, right, narrowed_here) = match inputs {
        Inputs::Tables((left, right)) => (left, right, false),
        Inputs::LowWords(mut sides) => {
            let taken = |t: Option<Table<C::Backend, K>>| {
                t.ok_or_else(|| Error::Corrupt("a side's keys went missing".into()))
            };
            if !plan.heavy.is_empty() || two_level.is_some() {
                return Ok(Spread::Declined(
                    taken(sides.left)?,
                    taken(sides.right)?,
                    clock,
                ));
            }
            // Every kind of join: a right side without ids is not one PartitionedProbe takes.
            let partitionable = opts.join.kind == JoinKind::Inner && sides.ids.right;
            let done = beside(
                comm,
                b,
                None,
                &mut clock,
                opts,
                (&mut traffic, &mut links, per_node),
                partitionable,
                &mut |clock, side, mover| sides.partition(comm, (b, mover), clock, side),
            )?;
            let Some(done) = done else {
                return Ok(Spread::Declined(
                    taken(sides.left)?,
                    taken(sides.right)?,
                    clock,
                ));
            };
            let moved = Moved::<C::Backend, u32>::Local(done.out, done.local, done.local_rows);
            let planned = (plan.placement, plan.shuffle, 0);
            let stats = (traffic, links, done.bytes_sent, input_rows, sizes);
            return finish(comm, b, opts, planned, clock, moved, stats, true)
                .map(|(out, stats)| Spread::Joined(out, Box::new(stats)));
        }
    };
    let row_bytes = (row_bytes(&left), row_bytes(&right));
    let mut wire = |clock: &mut Clock<C::Backend>, t: &Table<C::Backend, K>, side, level| {
        clock.phase(b, "plan", || {
            plan_wire(comm, b, t, side, level, opts.compress, per_node, &mut links)
        })
    };
    let mut bytes_sent = 0u64;
    let away = |counts: &[usize], width: usize| bytes_away(comm.rank(), counts, width);
    // One side's rows grouped by the rank they go to, with the rows for each.
    // With `mover`, the stream that moves the rows waits for them.
    let by_rank = |clock: &mut Clock<C::Backend>, t, what, mover: Option<&C::Backend>| {
        clock.phase(b, "partition", || {
            let grouped = partition(b, t, ranks).and_then(|grouped| {
                if let Some(m) = mover {
                    m.wait_for(&b.mark()?)?;
                }
                Ok(grouped)
            });
            settle(comm, what, grouped)
        })
    };
    let moved = if ranks == 1 {
        Moved::Sides(left, right)
    } else if plan.placement == Placement::Replicated {
        let w = wire(&mut clock, &right, "right", Level::AllGather)?;
        let right = clock.phase(b, "shuffle", || {
            settle(
                comm,
                "replicating the right side",
                move_table(
                    comm,
                    b,
                    &right,
                    (Pattern::AllGather, Arrival::Any),
                    &w,
                    &mut traffic,
                ),
            )
        })?;
        bytes_sent += (input_rows.1 * row_bytes.1 * (ranks - 1)) as u64;
        Moved::Sides(left, right)
    } else if plan.heavy.is_empty()
        && opts.pipeline_chunks == 1
        && PartitionedProbe::<C::Backend, K>::supports(&opts.join, &left.payloads, &right.payloads)
    {
        let mut sides = (Some(left), Some(right));
        let mut by_side = |clock: &mut Clock<C::Backend>, side, mover: &C::Backend| {
            let table = match side {
                Side::Right => sides.1.take(),
                Side::Left => sides.0.take(),
            };
            let table = table.ok_or_else(|| Error::Corrupt("a side partitioned twice".into()))?;
            let (table, counts) = by_rank(clock, table, side.partitioning(), Some(mover))?;
            Ok(Some(GroupedSide {
                table,
                counts,
                members: None,
            }))
        };
        let done = beside(
            comm,
            b,
            two_level.as_ref(),
            &mut clock,
            opts,
            (&mut traffic, &mut links, per_node),
            true,
            &mut by_side,
        )?
        .ok_or_else(|| Error::Corrupt("a partition by rank gave no rows".into()))?;
        bytes_sent += done.bytes_sent;
        Moved::Local(done.out, done.local, done.local_rows)
    } else {
        // Heavy rows split off: left ones stay, right ones go to every rank.
        let (left, right, kept) = clock.phase(b, "partition", || {
            let split = (|| {
                if plan.heavy.is_empty() {
                    return Ok((left, right, None));
                }
                let (left, left_heavy) = split_heavy(b, left, &plan.heavy)?;
                let (right, right_heavy) = split_heavy(b, right, &plan.heavy)?;
                Ok((left, right, Some((left_heavy, right_heavy))))
            })();
            settle(comm, "splitting heavy keys", split)
        })?;
        let (left, left_counts) = by_rank(&mut clock, left, "partitioning the left side", None)?;
        let (right, right_counts) =
            by_rank(&mut clock, right, "partitioning the right side", None)?;
        bytes_sent += away(&left_counts, row_bytes.0) + away(&right_counts, row_bytes.1);
        let level = match two_level {
            Some(_) => Level::AcrossNodes,
            None => Level::AllToAll,
        };
        let two = two_level.as_ref();
        let w = wire(&mut clock, &right, "right", level)?;
        let right = clock.phase(b, "shuffle", || {
            let what = "shuffling the right side";
            shuffle_side(comm, b, two, &right, &right_counts, &w, &mut traffic, what)
        })?;
        // Heavy keys' right rows go to every rank; their left rows stay.
        let (right, left_heavy) = match kept {
            None => (right, None),
            Some((left_heavy, right_heavy)) => {
                let w = wire(&mut clock, &right_heavy, "right", Level::AllGather)?;
                clock.phase(b, "shuffle", || {
                    let right_heavy = settle(
                        comm,
                        "replicating heavy keys' right rows",
                        move_table(
                            comm,
                            b,
                            &right_heavy,
                            (Pattern::AllGather, Arrival::Any),
                            &w,
                            &mut traffic,
                        ),
                    )?;
                    bytes_sent += (right_heavy.len() * row_bytes.1) as u64;
                    let right = settle(
                        comm,
                        "assembling the right side",
                        concat_tables(b, &right, &right_heavy),
                    )?;
                    Ok((right, Some(left_heavy)))
                })?
            }
        };
        let left_wire = wire(&mut clock, &left, "left", level)?;
        if opts.pipeline_chunks > 1 {
            let piped = pipeline::run(
                comm,
                b,
                Pipeline {
                    left,
                    counts: left_counts,
                    kept: left_heavy,
                    right: &right,
                    chunks: opts.pipeline_chunks,
                },
                &opts.join,
                &mut clock,
                &mut |on, t, counts| {
                    let what = "shuffling a chunk";
                    shuffle_side(comm, on, two, t, counts, &left_wire, &mut traffic, what)
                },
            )?;
            add_phase(&mut clock.phases, "pipelined probe", piped.stats.wall_ms);
            Moved::Joined(Box::new(piped))
        } else {
            let left = clock.phase(b, "shuffle", || {
                let what = "shuffling the left side";
                shuffle_side(
                    comm,
                    b,
                    two,
                    &left,
                    &left_counts,
                    &left_wire,
                    &mut traffic,
                    what,
                )
            })?;
            let left = match left_heavy {
                None => left,
                Some(left_heavy) => clock.phase(b, "shuffle", || {
                    settle(
                        comm,
                        "assembling the left side",
                        concat_tables(b, &left, &left_heavy),
                    )
                })?,
            };
            Moved::Sides(left, right)
        }
    };

    let stats = (traffic, links, bytes_sent, input_rows, sizes);
    let planned = (plan.placement, plan.shuffle, plan.heavy.len());
    finish(comm, b, opts, planned, clock, moved, stats, narrowed_here)
        .map(|(out, stats)| Spread::Joined(out, Box::new(stats)))
}

/// What [`finish`] reports of the steps before it: the shuffles' traffic, the links measured,
/// the bytes of rows sent, this rank's input rows and every rank's input rows of each side.
type Moves<'a> = (Traffic, Links, u64, (usize, usize), &'a [u64]);

/// The local join where the rows moved to their ranks without one, every rank's share
/// gathered, the output gathered to rank 0 where asked, and the statistics.
#[allow(clippy::too_many_arguments)] // the plan, the clock and what each step left
fn finish<C, K>(
    comm: &C,
    b: &C::Backend,
    opts: &DistributedOptions,
    (placement, shuffle, heavy_keys): (Placement, Shuffle, usize),
    mut clock: Clock<C::Backend>,
    moved: Moved<C::Backend, K>,
    (traffic, links, bytes_sent, input_rows, sizes): Moves<'_>,
    narrowed_by_partition: bool,
) -> Result<(Materialized<C::Backend>, DistributedStats)>
where
    C: Communicator,
    C::Backend: DistributedBackend,
    K: Key,
{
    let ranks = comm.size();
    let (out, local, local_rows, pipeline) = match moved {
        Moved::Sides(left, right) => {
            let local_rows = (left.len(), right.len());
            let (out, local) = clock.phase(b, "local join", || {
                settle(
                    comm,
                    "local join",
                    join_columns(b, &left, &right, &opts.join),
                )
            })?;
            (out, local, local_rows, None)
        }
        Moved::Joined(piped) => {
            let local_rows = (piped.left_rows, piped.right_rows);
            (piped.out, piped.local, local_rows, Some(piped.stats))
        }
        Moved::Local(out, local, local_rows) => (out, local, local_rows, None),
    };
    let shared = comm.all_gather(&[
        (local_rows.0 + local_rows.1) as u64,
        out.rows,
        local.total_ms().to_bits(),
    ])?;
    let per_rank: Vec<&[u64]> = shared.chunks(3).collect();
    let global_output_rows = per_rank.iter().map(|r| r[1]).sum::<u64>();
    let heaviest = per_rank.iter().map(|r| r[0]).max().unwrap_or(0) as f64;
    let mean = per_rank.iter().map(|r| r[0]).sum::<u64>() as f64 / ranks as f64;
    let out = if opts.gather_to_root && ranks > 1 {
        clock.phase(b, "gather", || {
            gather_to_root(comm, b, out, global_output_rows, opts)
        })?
    } else {
        out
    };
    // Reading the marks can meet a device error too: every rank learns of it.
    let (phases, timeline) = settle(comm, "timing the phases", clock.finish())?;
    let stats = DistributedStats {
        rank: comm.rank(),
        ranks,
        placement,
        shuffle: if ranks > 1 {
            shuffle
        } else {
            Shuffle::OneLevel
        },
        heavy_keys,
        narrowed_keys: narrowed_by_partition,
        narrowed_by_partition,
        phases,
        timeline,
        pipeline,
        bytes_sent,
        bytes_on_wire: traffic.columns.iter().map(|c| c.sent_bytes).sum(),
        traffic: traffic.columns,
        link_gbps: links.rates,
        links_measured: links.measured,
        input_rows,
        local_rows,
        output_rows: out.rows,
        global_output_rows,
        global_input_rows: sizes[0] + sizes[1],
        imbalance: if mean > 0.0 { heaviest / mean } else { 1.0 },
        slowest_local_join_ms: per_rank
            .iter()
            .map(|r| f64::from_bits(r[2]))
            .fold(0.0, f64::max),
        local,
    };
    Ok((out, stats))
}

/// The table's payload columns have one value per key (its fields are public).
fn left_check<B: Backend, K: Key>(t: &Table<B, K>) -> Result<()> {
    for p in &t.payloads {
        Error::check_len("table keys vs payload", t.keys.len(), p.len())?;
    }
    Ok(())
}

/// `a`'s rows followed by `c`'s (same columns).
fn concat_tables<B: Backend, K: Key>(
    b: &B,
    a: &Table<B, K>,
    c: &Table<B, K>,
) -> Result<Table<B, K>> {
    let payloads = a
        .payloads
        .iter()
        .zip(&c.payloads)
        .map(|(x, y)| x.concat(b, y))
        .collect::<Result<Vec<_>>>()?;
    Table::new(b.concat(&a.keys, &c.keys)?, payloads)
}

/// Checks `rows` rows shaped like `out` (its columns and validity word) against the output
/// budget of `opts`.
///
/// # Errors
/// [`Error::OutputOverBudget`] when they take more bytes than the budget.
pub(crate) fn check_output_budget<B: Backend>(
    opts: &JoinOptions,
    out: &Materialized<B>,
    rows: u64,
) -> Result<()> {
    let Some(budget) = opts.memory_budget else {
        return Ok(());
    };
    let width = out
        .left
        .iter()
        .chain(&out.right)
        .map(Column::width)
        .sum::<usize>()
        + if out.right_valid.is_some() { 4 } else { 0 };
    let bytes = rows.saturating_mul(width as u64);
    if bytes > budget {
        return Err(Error::OutputOverBudget {
            rows,
            bytes,
            budget,
        });
    }
    Ok(())
}

/// Every rank's output on rank 0 (the others keep empty columns of the same types), after
/// checking the whole output against the budget.
fn gather_to_root<C: Communicator>(
    comm: &C,
    b: &C::Backend,
    out: Materialized<C::Backend>,
    global_rows: u64,
    opts: &DistributedOptions,
) -> Result<Materialized<C::Backend>> {
    check_output_budget(&opts.join, &out, global_rows)?;
    let mut counts = vec![0usize; comm.size()];
    counts[0] = usize::try_from(out.rows).map_err(|_| Error::SizeOverflow("output rows"))?;
    let moved = (|| {
        let cols = |cols: &[Column<C::Backend>]| {
            cols.iter()
                .map(|c| Ok(map_column!(c, c, T => comm.all_to_all_v::<T>(b, c, &counts)?.0)))
                .collect::<Result<Vec<_>>>()
        };
        let left = cols(&out.left)?;
        let right = cols(&out.right)?;
        let right_valid = match &out.right_valid {
            Some(v) => Some(comm.all_to_all_v(b, v, &counts)?.0),
            None => None,
        };
        let rows = if comm.rank() == 0 { global_rows } else { 0 };
        Ok(Materialized {
            left,
            right,
            right_valid,
            rows,
        })
    })();
    settle(comm, "gathering the output on rank 0", moved)
}

#[cfg(test)]
mod tests {
    use super::packed_row_bits;

    /// 4-byte ids where the largest side's rows and the ranks fit 32 bits, else none.
    #[test]
    fn row_ids_pack_where_rows_and_ranks_fit_32_bits() {
        for (ranks, rows, want) in [
            (4, (1u64 << 28, 1u64 << 27), Some(28)),
            (4, (3, 1 << 30), Some(30)),
            (4, ((1 << 30) + 1, 0), None),
            (1, ((1 << 32) - 1, 0), Some(32)),
            (1, (0, 0), Some(0)),
            (3, (5, 0), Some(3)),
        ] {
            // Only rank 0 holds the rows: the largest count decides.
            let all: Vec<Vec<u64>> = (0..ranks)
                .map(|r| match r {
                    0 => vec![rows.0, rows.1],
                    _ => vec![0, 0],
                })
                .collect();
            assert_eq!(
                packed_row_bits(ranks, &all),
                want,
                "{ranks} ranks, rows {rows:?}"
            );
        }
    }
}
