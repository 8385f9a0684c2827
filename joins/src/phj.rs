//! The partitioned hash joins of Wu et al. (VLDB 2024): PHJ-OM (stable radix partition,
//! GFTR) and PHJ-UM (bucket-chain partition, GFUR), both matching co-partition by
//! co-partition with small per-work-item tables ([`crate::CoPartitionJoin`]).
//!
//! Choices (docs/decisions records why):
//! - **Partition on the key's low bits, as the paper does, and mix when that is unbalanced.**
//!   The low bits are perfect for keys like the benchmark's (a permutation of `0..|R|`) and
//!   cost nothing, but adversarial keys (multiples of `2^bits`, say) land in one partition,
//!   where the capacity split keeps each work item bounded but the items multiply with the
//!   partition's size squared. So R is partitioned first; when some R partition needs more
//!   than one build piece, both sides are partitioned again on their mixed keys
//!   ([`crate::CoPartitionJoin::mix_keys`], a bijection of the key space, so the join compares
//!   mixed keys and stays exact), where only equal keys share a partition beyond chance. Only
//!   R's balance matters: a crowded S partition is cut into probe chunks, linear work.
//! - **Radix bits** from |R|: the fewest bits (at least 1) whose average R partition holds at
//!   most half a build piece ([`crate::CoPartitionJoin::build_capacity`]: from the device's
//!   shared memory on CUDA), so that with mixed keys practically no partition needs two
//!   pieces; one bit fewer where that bit would cost a radix pass of its own and partitions
//!   stay within 3/4 of a piece (`radix_bits`).
//! - **Skew**: an R partition above the capacity is cut into capacity-sized pieces, each joined
//!   with the whole S partition; S partitions are cut into probe chunks; every work item is
//!   bounded.
//! - **`right_unique`**: a duplicate inside one build piece is caught while the piece's table is
//!   built (free); only when some R partition has two pieces does a self-join count of R check
//!   across pieces.
//! - **PHJ-OM's GFTR transform**: the first payload column of each side travels with the keys
//!   through the partition; every further column is partitioned again with the (mixed) keys,
//!   one column at a time (Wu et al. §4.1: at most one transformed column besides the first is
//!   held). The radix partition is deterministic, so every pass puts rows in the same order.
//!   `join_rows` partitions row ids instead, and the match writes row ids directly.
//! - **Payloads written by the match**: an inner join whose sides each have one `u32`/`u64`
//!   payload, two `u32` payloads or two `u64` payloads carries them through the partition
//!   (two `u32` interleaved into one 8-byte word: one CUB pass with 8-byte values costs less
//!   than partitioning the second column again; a second `u64` column partitioned in a pass
//!   of its own) and the match writes them in place of ids, split back into their columns or
//!   copied from the second one (by the CUDA kernels as they write, with no positions and no
//!   gathers; by the CPU twin after matching, by position for a second column) (H200,
//!   2^27 ⋈ 2^28 4 B and 8 B 2+2 wide: see docs/results/joins.md).
//! - **PHJ-UM**: one bucket-chain pass (Sioulas et al.), buckets as build pieces and probe
//!   chunks, row ids carried and written by the match, payloads gathered from the inputs. The
//!   bucket-chain partition offers at most 2^10 partitions per pass and no second pass, so when
//!   |R| needs more bits PHJ-UM partitions with the stable radix passes (keys and row ids only;
//!   still GFUR).

use std::ops::Range;

use joinkit_cuda::{Backend, Buffer, Column, Error, Key, Result};
use joinkit_partition::{
    MAX_FANOUT, MAX_RADIX_BITS, Partitioned, Partitioner, RADIX_PASS_BITS, RowIds,
};

use crate::chunk::Budget;
use crate::copart::{CoSide, CoWant, PairColumns, Pieces};
use crate::join::{Matched, Phases};
use crate::{JoinBackend, JoinKind, JoinOptions};

/// Where the match's ids point.
#[derive(Clone, Copy)]
pub(crate) enum Layout<'a, B: Backend> {
    /// Row ids of the inputs (join_rows; GFUR).
    RowIds,
    /// Positions in partitioned order (PHJ-OM's GFTR in join_columns), carrying each side's
    /// first payload column (if it has one and the output needs it) through the partition.
    Positions {
        left: Option<&'a Column<B>>,
        right: Option<&'a Column<B>>,
    },
    /// Each side's payload columns, all of them carried (PHJ-OM's inner join in join_columns
    /// when [`Layout::carries_all`] holds for both sides): through the partition as in
    /// `Positions`, then written by the match in place of ids, so the pairs are the output
    /// columns and no gather follows.
    Payloads {
        left: &'a [Column<B>],
        right: &'a [Column<B>],
    },
}

impl<B: Backend> Layout<'_, B> {
    /// Whether the match can write all of `cols` in place of ids: one `Column::U32` or
    /// `Column::U64`, two `Column::U32` interleaved into one 8-byte word a row (so a 2+2
    /// wide join carries both payloads through one partition), or two `Column::U64`, the
    /// second partitioned in a pass of its own; either way the CUDA match gathers nothing (the
    /// CPU twin gathers a second column's pair by position inside its match).
    pub(crate) fn carries_all(cols: &[Column<B>]) -> bool {
        matches!(
            cols,
            [Column::U32(_) | Column::U64(_)]
                | [Column::U32(_), Column::U32(_)]
                | [Column::U64(_), Column::U64(_)]
        )
    }
}

/// The words a side carries through the partition: none, one of its columns, its two `u32`
/// payload columns interleaved (made here, in the transform phase), or two `u64` columns (the
/// second partitioned in a pass of its own, [`partition_column`]: a 16-byte word would need a
/// radix sort of 16-byte values).
enum Carried<'a, B: Backend> {
    Column(&'a Column<B>),
    Interleaved(Column<B>),
    Two(&'a Column<B>, &'a Column<B>),
}

impl<'a, B: JoinBackend> Carried<'a, B> {
    /// Whether `cols` are carried as interleaved words.
    fn splits(cols: &[Column<B>]) -> bool {
        matches!(cols, [Column::U32(_), Column::U32(_)])
    }

    fn of(b: &B, cols: &'a [Column<B>]) -> Result<Option<Self>> {
        Ok(match cols {
            [] => None,
            [c] => Some(Self::Column(c)),
            [Column::U32(lo), Column::U32(hi)] => {
                Some(Self::Interleaved(Column::U64(b.interleave(lo, hi)?)))
            }
            [first @ Column::U64(_), second @ Column::U64(_)] => Some(Self::Two(first, second)),
            _ => {
                return Err(Error::InvalidArgument(
                    "the match carries one payload column a side, or two u32 or u64 columns".into(),
                ));
            }
        })
    }

    /// The column partitioned with the keys.
    fn column(&self) -> &Column<B> {
        match self {
            Self::Column(c) | Self::Two(c, _) => c,
            Self::Interleaved(c) => c,
        }
    }

    /// The column partitioned in a pass of its own, if any.
    fn second(&self) -> Option<&'a Column<B>> {
        match self {
            Self::Two(_, c) => Some(c),
            _ => None,
        }
    }
}

/// `col` in the order a radix partition of `keys` on `bits` puts rows in: partitioned again
/// with the keys (the radix partition is deterministic, so every pass puts rows alike).
fn partition_column<B: JoinBackend, K: Key>(
    b: &B,
    keys: &B::Buf<K>,
    col: &Column<B>,
    bits: Range<u32>,
) -> Result<Column<B>> {
    b.radix_partition(keys, std::slice::from_ref(col), bits, RowIds::None)?
        .payloads
        .pop()
        .ok_or_else(|| Error::Corrupt("partition returned no payload".into()))
}

/// How PHJ-OM's payload columns reach partitioned order: partitioned again with the keys the
/// match partitioned (the radix partition is deterministic, so the rows land alike).
pub(crate) struct PartitionedSide<B: Backend, K: Key> {
    /// The side's mixed keys (input order), when the join partitioned mixed keys.
    pub(crate) mixed: Option<B::Buf<K>>,
    /// The first payload column, partitioned with the keys (when carried).
    pub(crate) first: Option<Column<B>>,
    /// The radix bits partitioned on.
    pub(crate) bits: Range<u32>,
}

impl<B: JoinBackend, K: Key> PartitionedSide<B, K> {
    /// Column `index` of `cols` in partitioned order: the carried one (`None`), or a new
    /// partition pass with `keys` (the side's input keys) or their mixed form.
    pub(crate) fn transform(
        &self,
        b: &B,
        keys: &B::Buf<K>,
        cols: &[Column<B>],
        index: usize,
    ) -> Result<Option<Column<B>>> {
        if index == 0 && self.first.is_some() {
            return Ok(None);
        }
        let keys = self.mixed.as_ref().unwrap_or(keys);
        partition_column(b, keys, &cols[index], self.bits.clone()).map(Some)
    }
}

/// The fewest radix bits (at least 1) whose average partition of `rows` rows holds at most
/// `capacity / 2`, within the radix partition's and the key's limits; but one bit fewer where
/// that bit would start a radix pass of its own and the average partition then stays within
/// `3 capacity / 4` (random keys then still fit a piece; partitions that do not are handled as
/// ever, on mixed keys). Why: the GPU's partition moves 8 bits a pass, and the bit past 16 also
/// halves every partition; 2^27 + 2^14 right rows took 17 bits where 2^27 took 16, and the join
/// 35 % longer (H200: transform 9.5 against 7.1 ms, match 8.2 against 5.9) — the slower rank of
/// every partitioned distributed join at Gao's shape, whose shuffle leaves half the ranks a few
/// rows above 2^27.
pub(crate) fn radix_bits<K: Key>(rows: usize, capacity: usize) -> u32 {
    let fits = |bits: u32, most: usize| (rows as u64).div_ceil(1 << bits) <= most.max(1) as u64;
    let mut bits = 1;
    while bits < MAX_RADIX_BITS.min(K::BITS) && !fits(bits, capacity / 2) {
        bits += 1;
    }
    if bits > RADIX_PASS_BITS && bits % RADIX_PASS_BITS == 1 && fits(bits - 1, 3 * capacity / 4) {
        bits - 1
    } else {
        bits
    }
}

/// Bucket capacity for a side of `rows` rows in `fanout` chains: twice the average partition,
/// a power of two within `[32, max]` (so the pool, which may waste a bucket per partition, stays
/// within a few times the input).
fn bucket_capacity(rows: usize, fanout: usize, max: usize) -> usize {
    (2 * rows.div_ceil(fanout.max(1)))
        .next_power_of_two()
        .clamp(32.min(max), max)
}

/// What a join keeps: pairs (inner, outer) and left rows (semi, anti, outer).
type Selected<B> = (Option<PairColumns<B>>, Option<<B as Backend>::Buf<u32>>);

/// (left, right) ids of matching pairs: row ids or positions.
type IdPairs<B> = (<B as Backend>::Buf<u32>, <B as Backend>::Buf<u32>);

/// A side's ids (row ids or positions) as the one u32 buffer the match wrote.
fn only_u32<B: Backend>(mut side: Vec<Column<B>>) -> Result<B::Buf<u32>> {
    match (side.pop(), side.is_empty()) {
        (Some(Column::U32(ids)), true) => Ok(ids),
        _ => Err(Error::Corrupt(
            "the match wrote ids other than one u32 column".into(),
        )),
    }
}

/// Pairs of ids (row ids or positions) as buffers.
fn id_pairs<B: Backend>(pairs: Option<PairColumns<B>>) -> Result<Option<IdPairs<B>>> {
    pairs
        .map(|(l, r)| Ok((only_u32(l)?, only_u32(r)?)))
        .transpose()
}

/// What the match writes for a partitioned side: its row ids, its carried payload (with
/// `payloads`), or, when it carried neither, its partitioned positions (`None`).
fn match_ids<B: Backend, K: Key>(p: &Partitioned<B, K>, payloads: bool) -> Option<&Column<B>> {
    if payloads {
        p.payloads.first()
    } else {
        p.row_ids.as_ref()
    }
}

fn no_ids() -> Error {
    Error::Corrupt("a partition asked for row ids returned none".into())
}

/// The co-partition join and its row selections, as [`Matched`] parts: pairs (inner, outer)
/// and the left rows a semi, anti or outer join keeps, named as the sides' `ids` name them.
/// More pairs than `budget` holds are refused once counted, before they take memory.
fn co_match<B: JoinBackend, K: Key>(
    b: &B,
    probe: &CoSide<'_, B, K>,
    build: &CoSide<'_, B, K>,
    opts: &JoinOptions,
    budget: &Budget,
    left_rows: usize,
) -> Result<Selected<B>> {
    let as_right = |e| match e {
        Error::DuplicateKey { .. } => Error::DuplicateKey { side: "right" },
        e => e,
    };
    if opts.right_unique && build.pieces.max_per_partition > 1 {
        // Pieces of one partition build separate tables: count R against itself instead.
        let myself = CoSide::new(build.keys, build.pieces);
        let total = b.copartition_join(&myself, build, CoWant::default())?.total;
        if total != build.pieces.rows {
            return Err(Error::DuplicateKey { side: "right" });
        }
    }
    let want = CoWant::default()
        .with_pairs(opts.kind.has_right_rows())
        .with_flags((opts.kind != JoinKind::Inner).then_some(left_rows))
        .with_unique_build(opts.right_unique)
        .with_max_pairs(budget.max_rows());
    let out = b.copartition_join(probe, build, want).map_err(as_right)?;
    let left_only = match (opts.kind, &out.flags) {
        (JoinKind::Inner, _) | (_, None) => None,
        (JoinKind::LeftSemi, Some(f)) => Some(b.flagged_indices::<u32>(f)?),
        (JoinKind::LeftAnti | JoinKind::LeftOuter, Some(f)) => {
            Some(b.flagged_indices::<u32>(&b.count_flags(f, false)?)?)
        }
    };
    if want.pairs && out.pairs.is_none() {
        // Refused inside the match; the output would also hold a left outer join's unmatched
        // rows.
        let unmatched = left_only.as_ref().map_or(0, |u| u.len() as u64);
        return Err(budget.over(out.total.saturating_add(unmatched)));
    }
    Ok((out.pairs, left_only))
}

/// PHJ-UM (`um`) or PHJ-OM, on the keys' low 32 bits when they are 8-byte keys that
/// [`crate::CoPartitionJoin::narrow_keys`] finds in a range of at most 2^32 values and `opts`
/// allows it (`ph.narrowed_keys` then says so). A PHJ-OM whose payload columns are partitioned
/// after the match ([`Layout::Positions`]) keeps the keys, which that transform partitions with.
#[allow(clippy::too_many_arguments)] // the sides, the choices, the output's layout and budget
pub(crate) fn partitioned_match<B: JoinBackend, K: Key>(
    b: &B,
    ph: &mut Phases<'_, B>,
    um: bool,
    left: &B::Buf<K>,
    right: &B::Buf<K>,
    opts: &JoinOptions,
    layout: Layout<'_, B>,
    budget: &Budget,
) -> Result<Matched<B, K>> {
    let narrowed =
        if opts.narrow_keys && K::BITS == 64 && !matches!(layout, Layout::Positions { .. }) {
            ph.run("transform", || b.narrow_keys(left, right))?
        } else {
            None
        };
    match (narrowed, um) {
        (Some((l, r)), true) => {
            ph.narrowed_keys = true;
            phj_um(b, ph, &l, &r, opts, budget)?.narrowed()
        }
        (Some((l, r)), false) => {
            ph.narrowed_keys = true;
            phj_om(b, ph, &l, &r, opts, layout, budget)?.narrowed()
        }
        (None, true) => phj_um(b, ph, left, right, opts, budget),
        (None, false) => phj_om(b, ph, left, right, opts, layout, budget),
    }
}

/// How PHJ-OM partitions both sides: radix bits from the right side's rows, what a
/// partition carries besides the keys (row ids with [`Layout::RowIds`]), and the build pieces'
/// capacity.
pub(crate) struct OmShape {
    pub(crate) bits: Range<u32>,
    row_ids: RowIds,
    capacity: usize,
}

impl OmShape {
    pub(crate) fn new<B: JoinBackend, K: Key>(b: &B, right_rows: usize, row_ids: bool) -> Self {
        let capacity = b.build_capacity::<K>();
        Self {
            bits: 0..radix_bits::<K>(right_rows, capacity),
            row_ids: if row_ids { RowIds::U32 } else { RowIds::None },
            capacity,
        }
    }

    /// `keys` partitioned with a side's carried words (their first column), and its second
    /// carried column by a pass of its own ([`Carried::Two`]).
    fn partition<B: JoinBackend, K: Key>(
        &self,
        b: &B,
        keys: &B::Buf<K>,
        carry: &Option<Carried<'_, B>>,
    ) -> Result<PartitionedWords<B, K>> {
        let first = carry
            .as_ref()
            .map_or(&[][..], |c| std::slice::from_ref(c.column()));
        let parts = b.radix_partition(keys, first, self.bits.clone(), self.row_ids)?;
        let second = carry
            .as_ref()
            .and_then(Carried::second)
            .map(|c| partition_column(b, keys, c, self.bits.clone()))
            .transpose()?;
        Ok((parts, second))
    }
}

/// A side's keys partitioned with its carried words, and its second carried column.
type PartitionedWords<B, K> = (Partitioned<B, K>, Option<Column<B>>);

/// One side of PHJ-OM in partitioned order: keys with carried words (or row ids), the second
/// carried column, whether its carried words are two payloads interleaved (the match splits
/// them), and its mixed keys in input order when it was partitioned on those.
pub(crate) struct OmSide<B: Backend, K: Key> {
    parts: Partitioned<B, K>,
    second: Option<Column<B>>,
    split: bool,
    mixed: Option<B::Buf<K>>,
}

/// PHJ-OM's right side partitioned and cut into build pieces: on its keys, or, when some
/// partition needs more than one piece, again on its mixed keys (the left sides matched with it
/// are then partitioned on mixed keys too). Carries `carry` (its payloads) through.
pub(crate) fn om_right<B: JoinBackend, K: Key>(
    b: &B,
    shape: &OmShape,
    right: &B::Buf<K>,
    carry: &[Column<B>],
) -> Result<(OmSide<B, K>, Pieces<B>)> {
    let words = Carried::of(b, carry)?;
    let split = Carried::splits(carry);
    let (parts, second) = shape.partition(b, right, &words)?;
    let pieces = b.contiguous_pieces(&parts.offsets, shape.capacity)?;
    if pieces.max_per_partition <= 1 {
        let side = OmSide {
            parts,
            second,
            split,
            mixed: None,
        };
        return Ok((side, pieces));
    }
    drop((parts, second, pieces));
    let mixed = b.mix_keys(right)?;
    let (parts, second) = shape.partition(b, &mixed, &words)?;
    let pieces = b.contiguous_pieces(&parts.offsets, shape.capacity)?;
    let side = OmSide {
        parts,
        second,
        split,
        mixed: Some(mixed),
    };
    Ok((side, pieces))
}

/// A left side partitioned as `right` was (on mixed keys when it was), carrying `carry`.
pub(crate) fn om_left<B: JoinBackend, K: Key>(
    b: &B,
    shape: &OmShape,
    left: &B::Buf<K>,
    carry: &[Column<B>],
    right: &OmSide<B, K>,
) -> Result<OmSide<B, K>> {
    let words = Carried::of(b, carry)?;
    let mixed = right.mixed.as_ref().map(|_| b.mix_keys(left)).transpose()?;
    let (parts, second) = shape.partition(b, mixed.as_ref().unwrap_or(left), &words)?;
    Ok(OmSide {
        parts,
        second,
        split: Carried::splits(carry),
        mixed,
    })
}

/// The co-partition join of a partitioned left side with the right side's pieces: pairs of
/// what each side carried (`payloads`: its payloads, else row ids or partitioned positions)
/// and the left rows a semi, anti or outer join keeps.
pub(crate) fn om_match<B: JoinBackend, K: Key>(
    b: &B,
    (left, right, right_pieces): (&OmSide<B, K>, &OmSide<B, K>, &Pieces<B>),
    payloads: bool,
    opts: &JoinOptions,
    budget: &Budget,
    left_rows: usize,
) -> Result<Selected<B>> {
    let left_pieces = b.contiguous_pieces(&left.parts.offsets, b.probe_chunk::<K>())?;
    let probe = CoSide::new(&left.parts.keys, &left_pieces)
        .with_ids(match_ids(&left.parts, payloads))
        .with_split_words(left.split)
        .with_second(left.second.as_ref());
    let build = CoSide::new(&right.parts.keys, right_pieces)
        .with_ids(match_ids(&right.parts, payloads))
        .with_split_words(right.split)
        .with_second(right.second.as_ref());
    // Packed ids the output widens: written widened by the match where a side carries one
    // u32 payload column (join::unpack_ids widens the rest after the join).
    let unpack = |side: &CoSide<'_, B, K>| {
        let one_u32 =
            matches!(side.ids, Some(Column::U32(_))) && !side.split_words && side.second.is_none();
        opts.unpack_ids.filter(|_| payloads && one_u32)
    };
    let (probe, build) = (
        probe.with_unpack(unpack(&probe)),
        build.with_unpack(unpack(&build)),
    );
    co_match(b, &probe, &build, opts, budget, left_rows)
}

/// PHJ-OM: stable radix partition (of the keys, or of the mixed keys when R's partitions come
/// out unbalanced; carrying row ids, each side's first payload column, or all of its payloads
/// as [`Layout`] says), co-partition join.
fn phj_om<B: JoinBackend, K: Key>(
    b: &B,
    ph: &mut Phases<'_, B>,
    left: &B::Buf<K>,
    right: &B::Buf<K>,
    opts: &JoinOptions,
    layout: Layout<'_, B>,
    budget: &Budget,
) -> Result<Matched<B, K>> {
    let shape = OmShape::new::<B, K>(b, right.len(), matches!(layout, Layout::RowIds));
    let (carry_l, carry_r) = match layout {
        Layout::RowIds => (&[][..], &[][..]),
        Layout::Positions { left, right } => (
            left.map_or(&[][..], std::slice::from_ref),
            right.map_or(&[][..], std::slice::from_ref),
        ),
        Layout::Payloads { left, right } => (left, right),
    };
    let payloads = matches!(layout, Layout::Payloads { .. });
    let (pl, pr, rp) = ph.run("transform", || {
        let (pr, rp) = om_right(b, &shape, right, carry_r)?;
        let pl = om_left(b, &shape, left, carry_l, &pr)?;
        Ok((pl, pr, rp))
    })?;
    let (pairs, left_only) = ph.run("match", || {
        om_match(b, (&pl, &pr, &rp), payloads, opts, budget, left.len())
    })?;
    let partitioned = match layout {
        Layout::RowIds | Layout::Payloads { .. } => None,
        Layout::Positions { .. } => {
            let side = |mut s: OmSide<B, K>| PartitionedSide {
                mixed: s.mixed,
                first: s.parts.payloads.pop(),
                bits: shape.bits.clone(),
            };
            Some((side(pl), side(pr)))
        }
    };
    let (pairs, columns) = if payloads {
        (None, pairs)
    } else {
        (id_pairs(pairs)?, None)
    };
    Ok(Matched {
        pairs,
        left_only,
        sorted: None,
        partitioned,
        columns,
    })
}

/// PHJ-UM: bucket-chain partition with row ids (of the keys, or of the mixed keys when R's
/// chains come out unbalanced), co-partition join writing row ids. When
/// |R| needs more than the bucket chains' 2^10 partitions, the stable radix partition (keys and
/// row ids) takes their place.
fn phj_um<B: JoinBackend, K: Key>(
    b: &B,
    ph: &mut Phases<'_, B>,
    left: &B::Buf<K>,
    right: &B::Buf<K>,
    opts: &JoinOptions,
    budget: &Budget,
) -> Result<Matched<B, K>> {
    let cap = b.build_capacity::<K>();
    let chunk = b.probe_chunk::<K>();
    let bits = radix_bits::<K>(right.len(), cap);
    if 1usize << bits > MAX_FANOUT {
        return phj_om(b, ph, left, right, opts, Layout::RowIds, budget);
    }
    let by = Partitioner::Radix(0..bits);
    let fanout = 1usize << bits;
    let chains =
        |keys: &B::Buf<K>, cap: usize| b.bucket_chain_partition(keys, &[], &by, cap, RowIds::U32);
    let (cap_r, cap_l) = (
        bucket_capacity(right.len(), fanout, cap),
        bucket_capacity(left.len(), fanout, chunk),
    );
    let (cl, cr, rp) = ph.run("transform", || {
        let cr = chains(right, cap_r)?;
        let rp: Pieces<B> = b.chain_pieces(&cr, &by)?;
        if rp.max_per_partition <= 1 {
            return Ok((chains(left, cap_l)?, cr, rp));
        }
        drop((cr, rp));
        let cr = chains(&b.mix_keys(right)?, cap_r)?;
        let rp = b.chain_pieces(&cr, &by)?;
        Ok((chains(&b.mix_keys(left)?, cap_l)?, cr, rp))
    })?;
    let (pairs, left_only) = ph.run("match", || {
        let lp: Pieces<B> = b.chain_pieces(&cl, &by)?;
        let probe =
            CoSide::new(&cl.keys, &lp).with_ids(Some(cl.row_ids.as_ref().ok_or_else(no_ids)?));
        let build =
            CoSide::new(&cr.keys, &rp).with_ids(Some(cr.row_ids.as_ref().ok_or_else(no_ids)?));
        co_match(b, &probe, &build, opts, budget, left.len())
    })?;
    Ok(Matched {
        pairs: id_pairs(pairs)?,
        left_only,
        sorted: None,
        partitioned: None,
        columns: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn radix_bits_keep_partitions_at_half_a_piece() {
        assert_eq!(radix_bits::<u32>(0, 4096), 1);
        assert_eq!(radix_bits::<u32>(4096, 4096), 1);
        assert_eq!(radix_bits::<u32>(4097, 4096), 2);
        assert_eq!(radix_bits::<u32>(1 << 27, 4096), 16);
        // No 17th bit (a radix pass of its own) while 16 keep partitions within 3/4 of a piece.
        assert_eq!(radix_bits::<u32>((1 << 27) + (1 << 14), 4096), 16);
        assert_eq!(radix_bits::<u32>(3 << 26, 4096), 16);
        assert_eq!(radix_bits::<u32>((3 << 26) + 1, 4096), 17);
        assert_eq!(radix_bits::<u32>((1 << 19) + 1, 4096), 8);
        assert_eq!(radix_bits::<u32>((3 << 18) + 1, 4096), 9);
        assert_eq!(radix_bits::<u64>(usize::MAX, 2), MAX_RADIX_BITS);
    }

    #[test]
    fn bucket_capacities_stay_in_range() {
        assert_eq!(bucket_capacity(0, 2, 4096), 32);
        assert_eq!(bucket_capacity(1 << 20, 512, 4096), 4096);
        assert_eq!(bucket_capacity(1000, 2, 4096), 1024);
        assert_eq!(bucket_capacity(1 << 30, 2, 1 << 18), 1 << 18);
    }
}
