//! The match step of the partitioned hash joins (PHJ-UM, PHJ-OM): a hash join of every
//! co-partition, one work item at a time. A CUDA kernel pair (count, write) on the GPU, a rayon
//! twin on the CPU, same outputs as multisets.
//!
//! Both sides come partitioned the same way (`fanout` partitions) and cut into **pieces**: runs
//! of consecutive rows of one partition (a capacity-sized slice of a contiguous partition, or
//! one bucket of a bucket chain). A **work item** is one build piece and one probe piece of the
//! same partition: the item builds a small hash table from its build piece (in shared memory on
//! the GPU, in cache on the CPU) and probes it with its probe piece. Every build piece is paired
//! with every probe piece of its partition, so a skewed partition (a hot key, Zipf) is split
//! into many bounded items instead of one unbounded one, and the join stays exact. (The CPU
//! twin cuts probe pieces further where the items are too few for its threads.)
//!
//! The table of an item is open addressing with linear probing over slots that hold a key's
//! newest row and its number of rows; equal keys are chained through a `next` array, so many
//! equal keys cost one slot (no long probe runs) and a probe counts its matches in O(1).

use std::any::Any;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use joinkit_cuda::{Backend, Buffer, Column, CpuBackend, Element, Error, Key, Result, hash};
use joinkit_partition::{BucketChains, NO_BUCKET, Partitioner};
use joinkit_primitives::Interleave;
use rayon::prelude::*;

/// Seed of the key mix ([`CoPartitionJoin::mix_keys`]); the same on every backend.
pub const MIX_SEED: u32 = 0x6a09_e667;

/// Largest build piece any backend accepts (slot words keep a piece row in 16 bits on CUDA).
pub const MAX_BUILD_CAPACITY: usize = 1 << 15;

/// The pieces of one side's partitions: partition `p`'s pieces are entries
/// `offsets[p]..offsets[p + 1]`, and piece `i` is rows `begin[i]..begin[i] + len[i]` of the
/// side's columns. Built by [`CoPartitionJoin::contiguous_pieces`] or
/// [`CoPartitionJoin::chain_pieces`], which also fill in the host-side summary fields.
pub struct Pieces<B: Backend> {
    /// `fanout + 1` offsets into the piece arrays.
    pub offsets: B::Buf<u64>,
    /// First row of each piece.
    pub begin: B::Buf<u64>,
    /// Rows of each piece (at least 1).
    pub len: B::Buf<u32>,
    /// Number of pieces.
    pub total: u64,
    /// Most pieces in one partition.
    pub max_per_partition: u64,
    /// Rows of the longest piece (at most the `max_rows` asked for).
    pub max_len: u64,
    /// Rows in all pieces.
    pub rows: u64,
}

impl<B: Backend> Pieces<B> {
    /// Number of partitions.
    pub fn fanout(&self) -> usize {
        joinkit_cuda::Buffer::len(&self.offsets).saturating_sub(1)
    }
}

/// One side of a co-partitioned join. Made by [`CoSide::new`] and the `with_*` methods, so
/// that a field added later breaks no caller.
#[non_exhaustive]
pub struct CoSide<'a, B: Backend, K: Key> {
    /// The side's keys in partitioned order (the input keys, or their
    /// [`CoPartitionJoin::mix_keys`] form; any keys work).
    pub keys: &'a B::Buf<K>,
    /// The side's pieces; rows index `keys` (and `ids`).
    pub pieces: &'a Pieces<B>,
    /// What the output names a row by: `ids[row]` (row ids carried through the partition, or a
    /// payload column carried in their place: `Column::U32` or `Column::U64`), or the row (its
    /// position in `keys`, a u32) when `None`.
    pub ids: Option<&'a Column<B>>,
    /// `ids` are `Column::U64` words that each pack two 4-byte payloads (low half first, as
    /// `joinkit_primitives::Interleave` makes them): the output names the side by two
    /// `Column::U32` columns, the low halves and the high halves (a wide join's pair of
    /// payload columns; the CUDA match writes the halves directly, the CPU twin splits its
    /// words after matching).
    pub split_words: bool,
    /// A second carried column beside `ids` (a wide join's other payload column, partitioned
    /// in the same order; `Column::U32` or `Column::U64` like `ids`, which it needs, and not
    /// with `split_words`): the output names the side by two columns, `ids`' words and this
    /// column's (the CUDA match writes both; the CPU twin matches by position, then gathers
    /// both).
    pub second: Option<&'a Column<B>>,
    /// `Some(low_bits)`: `ids` are `Column::U32` packed ids (without `split_words` or
    /// `second`), and the output names the side by them widened into a `Column::U64`
    /// ([`joinkit_cuda::Backend::unpack_ids`]; the CUDA match writes them widened, the CPU
    /// twin widens its words after matching).
    pub unpack: Option<u32>,
}

// By hand: a derive would ask `B: Copy`, and every field is a reference or a small value.
impl<B: Backend, K: Key> Clone for CoSide<'_, B, K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend, K: Key> Copy for CoSide<'_, B, K> {}

impl<'a, B: Backend, K: Key> CoSide<'a, B, K> {
    /// A side whose rows the output names by position in `keys`, with no carried column.
    pub fn new(keys: &'a B::Buf<K>, pieces: &'a Pieces<B>) -> Self {
        Self {
            keys,
            pieces,
            ids: None,
            split_words: false,
            second: None,
            unpack: None,
        }
    }

    /// The side named by `ids` (see the field), or by position when `None`.
    #[must_use]
    pub fn with_ids(self, ids: Option<&'a Column<B>>) -> Self {
        Self { ids, ..self }
    }

    /// Whether `ids` are words of two 4-byte payloads (see the field).
    #[must_use]
    pub fn with_split_words(self, split_words: bool) -> Self {
        Self {
            split_words,
            ..self
        }
    }

    /// A second carried column beside `ids` (see the field), or none.
    #[must_use]
    pub fn with_second(self, second: Option<&'a Column<B>>) -> Self {
        Self { second, ..self }
    }

    /// `ids` widened from packed ids with `low_bits` low bits in the output (see the field),
    /// or not.
    #[must_use]
    pub fn with_unpack(self, low_bits: Option<u32>) -> Self {
        Self {
            unpack: low_bits,
            ..self
        }
    }
}

/// What a co-partition join produces (`CoWant::default()`: only the count, then the `with_*`
/// methods; fields may be added, so it is not built from a literal outside this crate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CoWant {
    /// The matching (probe, build) pairs.
    pub pairs: bool,
    /// Flags of `len` entries, 1 at the id of every probe row with a match (semi, anti and
    /// outer joins); ids must be below `len`.
    pub flags_len: Option<usize>,
    /// The build side promises unique keys: a key twice in one build piece is
    /// [`Error::DuplicateKey`] (`side: "build"`), returned instead of any pairs; every
    /// build piece is checked, also where its partition has no probe rows. Equal keys
    /// in two pieces of one partition are not seen reliably here: a caller whose build side
    /// has such partitions (`max_per_partition > 1`) checks with a self-join count.
    pub unique_build: bool,
    /// The most pairs the caller takes (`None`: any number): when the match counts more,
    /// [`CoJoined::pairs`] is `None`, [`CoJoined::total`] says how many there are and no
    /// memory was taken for the pairs (a join's output budget, checked before the pairs take
    /// memory: a match whose pairs could pass the limit counts them first).
    pub max_pairs: Option<u64>,
}

impl CoWant {
    /// With the pairs, or without (only counted).
    #[must_use]
    pub fn with_pairs(self, pairs: bool) -> Self {
        Self { pairs, ..self }
    }

    /// With flags of `len` entries (see [`CoWant::flags_len`]), or none.
    #[must_use]
    pub fn with_flags(self, flags_len: Option<usize>) -> Self {
        Self { flags_len, ..self }
    }

    /// With the build side's promise of unique keys (see [`CoWant::unique_build`]).
    #[must_use]
    pub fn with_unique_build(self, unique_build: bool) -> Self {
        Self {
            unique_build,
            ..self
        }
    }

    /// Taking at most `max_pairs` pairs (see [`CoWant::max_pairs`]).
    #[must_use]
    pub fn with_max_pairs(self, max_pairs: Option<u64>) -> Self {
        Self { max_pairs, ..self }
    }

    /// Whether `total` pairs are more than the caller takes.
    pub(crate) fn too_many(&self, total: u64) -> bool {
        self.max_pairs.is_some_and(|most| total > most)
    }
}

/// (probe, build) output columns of a co-partition join's pairs.
pub type PairColumns<B> = (Vec<Column<B>>, Vec<Column<B>>);

/// The result of a co-partition join.
pub struct CoJoined<B: Backend> {
    /// (probe, build) output columns of every match, grouped by work item (compare as
    /// multisets): a side's ids, one column of their type (`Column::U32` for rows), with
    /// [`CoSide::split_words`] their two halves, with [`CoSide::unpack`] one `Column::U64` of
    /// the ids widened, or with a [`CoSide::second`] column the ids' words and that column's.
    /// `None` when not asked for, or when there are more than [`CoWant::max_pairs`].
    pub pairs: Option<PairColumns<B>>,
    /// Probe match flags, when asked for.
    pub flags: Option<B::Buf<u32>>,
    /// Number of matching pairs (counted even when the pairs are not asked for).
    pub total: u64,
}

/// The partitioned hash join's match step: the hash join of every co-partition, and the
/// pieces and key mixing it works on.
pub trait CoPartitionJoin: Backend {
    /// Bytes of a global hash table that stay in the device's last-level cache, below which a
    /// non-partitioned hash join beats partitioning (measured on an H200: NPHJ-open is faster
    /// up to |R| = 2^22, a 64 MiB table against 60 MiB of L2); `None` where partitioning wins
    /// at every size measured (the CPU).
    fn cached_table_bytes(&self) -> Option<usize>;

    /// How GFUR's (PHJ-UM: gather only the matches' payloads) edge over GFTR (PHJ-OM:
    /// transform every payload column) grows with the payloads on this backend: the match
    /// ratio below which GFUR wins, per payload byte of the wider side beyond a 4-byte row id
    /// (GFTR's transform moves those bytes, GFUR's only row ids); 0 where GFUR never wins (the
    /// CPU, whose bucket-chain partition is slow: 2^20 ⋈ 2^21, 2+2 wide, match ratio 0.1,
    /// PHJ-UM 426 ms against PHJ-OM 140 ms on 2 cores).
    fn gfur_ratio_per_payload_byte(&self) -> f64;

    /// Most rows of a build piece, for keys of type `K`: what one work item's table holds (on
    /// CUDA, from the shared memory the device offers; on the CPU, what stays in cache).
    fn build_capacity<K: Key>(&self) -> usize;

    /// Most rows of a probe piece: what one work item probes with.
    fn probe_chunk<K: Key>(&self) -> usize;

    /// The keys through a fixed bijective mix (murmur3's finalizer with [`MIX_SEED`],
    /// `joinkit::hash32` / `hash64`): equal keys stay equal and distinct keys distinct, and
    /// any bits of a mixed key partition evenly whatever the input's distribution.
    ///
    /// # Errors
    /// Allocation and driver errors.
    fn mix_keys<K: Key>(&self, keys: &Self::Buf<K>) -> Result<Self::Buf<K>>;

    /// Both sides' 8-byte keys as their low 32 bits, when all keys of both lie within a range
    /// of at most 2^32 values (`None` otherwise, and for 4-byte keys). The low 32 bits are then
    /// one-to-one on the keys (two keys of such a range differing in them would differ by less
    /// than 2^32 and by a multiple of it), so joining the narrowed keys joins the keys, and the
    /// partition moves and the match compares 4 bytes a key instead of 8 (frame of reference,
    /// as the codec's, without the subtraction). On CUDA, after a look at a few thousand keys
    /// a side that may already show the range too wide, one pass writes the low bits while it
    /// finds the range, and discards them when it is too wide.
    ///
    /// # Errors
    /// Allocation and driver errors.
    #[allow(clippy::type_complexity)] // the two sides' narrowed keys
    fn narrow_keys<K: Key>(
        &self,
        left: &Self::Buf<K>,
        right: &Self::Buf<K>,
    ) -> Result<Option<(Self::Buf<u32>, Self::Buf<u32>)>>;

    /// The least and greatest of a few thousand evenly spaced keys of 8-byte `keys`
    /// (`(u64::MAX, 0)` for none): the cheap look [`CoPartitionJoin::narrow_keys`] takes
    /// first, for a caller that decides on the range itself (e.g. over every rank's keys).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for keys of another width; allocation and driver errors.
    fn sampled_key_range<K: Key>(&self, keys: &Self::Buf<K>) -> Result<(u64, u64)>;

    /// 8-byte `keys` as their low 32 bits, with their least and greatest key (`(u64::MAX, 0)`
    /// for none), in one pass: [`CoPartitionJoin::narrow_keys`]'s pass for a caller that checks
    /// the range itself. The low bits join as the keys only where every key joined lies within
    /// 2^32 values.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for keys of another width; allocation and driver errors.
    fn low_words<K: Key>(&self, keys: &Self::Buf<K>) -> Result<(Self::Buf<u32>, (u64, u64))>;

    /// Pieces of a contiguous partition (`fanout + 1` offsets, as
    /// `joinkit_partition::Partitioned` has them): each partition cut into pieces of at most
    /// `max_rows` rows, in order.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no offsets or `max_rows` of 0 or above `u32::MAX`;
    /// [`Error::Corrupt`] for decreasing offsets; allocation and driver errors.
    fn contiguous_pieces(&self, offsets: &Self::Buf<u64>, max_rows: usize) -> Result<Pieces<Self>>;

    /// Pieces of a bucket-chain partition made with `by`: every bucket of a chain is a piece
    /// (so pieces hold at most the bucket capacity); the order of a partition's pieces is
    /// unspecified.
    ///
    /// # Errors
    /// [`Error::Corrupt`] when the chains do not account for every bucket taken and every row
    /// counted; the partitioner's errors; allocation and driver errors.
    fn chain_pieces<K: Key>(
        &self,
        chains: &BucketChains<Self, K>,
        by: &Partitioner,
    ) -> Result<Pieces<Self>>;

    /// Joins every co-partition of `probe` and `build` (which must have the same number of
    /// partitions): for every probe row, every build row of its partition with an equal key.
    /// On CUDA: a count pass, a 64-bit scan, then a write pass of exactly that many pairs.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when the sides' partition counts differ, or a side's ids or
    /// [`CoSide::second`] column is not as long as its keys;
    /// [`Error::InvalidArgument`] for build pieces longer than the backend's tables hold
    /// ([`CoPartitionJoin::build_capacity`] on CUDA, [`MAX_BUILD_CAPACITY`] on the CPU), for
    /// ids of a signed type, for [`CoSide::split_words`] on ids that are not `Column::U64`,
    /// for a [`CoSide::second`] column without ids of its type, for [`CoSide::unpack`] on ids
    /// that are not one `Column::U32` or with more than 32 low bits, and for flags asked of a
    /// probe side with split words, a second column or unpacked ids (flags index ids, not
    /// payloads);
    /// [`Error::DuplicateKey`] (`"build"`) as [`CoWant::unique_build`] says;
    /// [`Error::SizeOverflow`] when the pairs do not fit memory addresses; allocation and
    /// driver errors.
    fn copartition_join<K: Key>(
        &self,
        probe: &CoSide<'_, Self, K>,
        build: &CoSide<'_, Self, K>,
        want: CoWant,
    ) -> Result<CoJoined<Self>>;
}

/// Checks shared by both backends (`cap`: the longest build piece the backend's tables hold);
/// returns the fan-out.
pub(crate) fn check_sides<B: CoPartitionJoin, K: Key>(
    probe: &CoSide<'_, B, K>,
    build: &CoSide<'_, B, K>,
    want: &CoWant,
    cap: usize,
) -> Result<usize> {
    let payload_words = probe.split_words || probe.second.is_some() || probe.unpack.is_some();
    if payload_words && want.flags_len.is_some() {
        return Err(Error::InvalidArgument(
            "flags of a probe side whose ids are payload words".into(),
        ));
    }
    let fanout = build.pieces.fanout();
    Error::check_len(
        "co-partition join probe vs build partitions",
        probe.pieces.fanout(),
        fanout,
    )?;
    if build.pieces.max_len > cap as u64 {
        return Err(Error::InvalidArgument(format!(
            "build pieces of {} rows: this backend's tables hold {cap}",
            build.pieces.max_len
        )));
    }
    for side in [probe, build] {
        if let Some(low_bits) = side.unpack {
            joinkit_cuda::check_unpack_low_bits(low_bits)?;
            let narrow = matches!(side.ids, Some(Column::U32(_)));
            if !narrow || side.split_words || side.second.is_some() {
                return Err(Error::InvalidArgument(
                    "co-partition ids unpacked must be one u32 column".into(),
                ));
            }
        }
        if side.split_words && !matches!(side.ids, Some(Column::U64(_))) {
            return Err(Error::InvalidArgument(
                "co-partition ids split in halves must be u64 words".into(),
            ));
        }
        if let Some(second) = side.second {
            let same_type = matches!(
                (side.ids, second),
                (Some(Column::U32(_)), Column::U32(_)) | (Some(Column::U64(_)), Column::U64(_))
            );
            if !same_type || side.split_words {
                return Err(Error::InvalidArgument(
                    "a second carried column needs ids of its type, not split".into(),
                ));
            }
            Error::check_len(
                "co-partition keys vs second column",
                side.keys.len(),
                second.len(),
            )?;
        }
    }
    for (ids, keys) in [(probe.ids, probe.keys.len()), (build.ids, build.keys.len())] {
        let Some(ids) = ids else { continue };
        if !matches!(ids, Column::U32(_) | Column::U64(_)) {
            return Err(Error::InvalidArgument(format!(
                "co-partition ids of {ids:?}: u32 or u64 words only"
            )));
        }
        Error::check_len("co-partition keys vs ids", keys, ids.len())?;
    }
    Ok(fanout)
}

/// Checks bucket chains against the partitioner that made them; returns the fan-out.
pub(crate) fn check_chains<B: Backend, K: Key>(
    chains: &BucketChains<B, K>,
    by: &Partitioner,
) -> Result<usize> {
    let fanout = by.fanout::<K>()?;
    Error::check_len(
        "bucket chains vs partitioner fan-out",
        chains.fanout(),
        fanout,
    )?;
    Ok(fanout)
}

/// Checks the arguments of [`CoPartitionJoin::contiguous_pieces`]; returns the fan-out.
pub(crate) fn check_piece_args(offsets_len: usize, max_rows: usize) -> Result<usize> {
    if offsets_len == 0 {
        return Err(Error::InvalidArgument(
            "partition offsets need fanout + 1 entries".into(),
        ));
    }
    if max_rows == 0 || max_rows as u64 > u64::from(u32::MAX) {
        return Err(Error::InvalidArgument(format!(
            "pieces of {max_rows} rows: 1 to 2^32 - 1"
        )));
    }
    Ok(offsets_len - 1)
}

// ---------------------------------------------------------------------------------------------
// CPU twin.

/// CPU build pieces by default: at most 2^15 keys, so a table (2^16 slots of 12 or 16 bytes)
/// and its chain array stay within a core's L2 and its share of L3.
pub const CPU_BUILD_CAPACITY: usize = MAX_BUILD_CAPACITY;

/// CPU probe pieces by default.
pub const CPU_PROBE_CHUNK: usize = 1 << 18;

static CPU_LIMITS: [AtomicUsize; 2] = [
    AtomicUsize::new(CPU_BUILD_CAPACITY),
    AtomicUsize::new(CPU_PROBE_CHUNK),
];

/// Sets the CPU backend's build piece capacity and probe chunk, which the partitioned joins cut
/// their pieces by (process-wide; for tuning to a machine's caches, and for tests that want
/// many pieces from small inputs). Results do not depend on them, and joins running meanwhile
/// stay correct; `Algorithm::Auto`'s CPU choice does (its small sides are counted in PHJ-OM's
/// partitions, half a build piece each). Returns the previous values.
///
/// # Errors
/// [`Error::InvalidArgument`] for a capacity of 0 or above [`MAX_BUILD_CAPACITY`], or a chunk
/// of 0 or above `u32::MAX`.
pub fn set_cpu_phj_limits(build_capacity: usize, probe_chunk: usize) -> Result<(usize, usize)> {
    if build_capacity == 0 || build_capacity > MAX_BUILD_CAPACITY {
        return Err(Error::InvalidArgument(format!(
            "CPU build capacity {build_capacity}: 1 to {MAX_BUILD_CAPACITY}"
        )));
    }
    if probe_chunk == 0 || probe_chunk as u64 > u64::from(u32::MAX) {
        return Err(Error::InvalidArgument(format!(
            "CPU probe chunk {probe_chunk}: 1 to 2^32 - 1"
        )));
    }
    Ok((
        CPU_LIMITS[0].swap(build_capacity, Ordering::Relaxed),
        CPU_LIMITS[1].swap(probe_chunk, Ordering::Relaxed),
    ))
}

/// The bijective mix of one key (murmur3's finalizer after a seed xor).
#[inline]
pub(crate) fn mix<K: Key>(k: K) -> K {
    if K::BITS == 32 {
        K::from_u64(u64::from(hash::hash32(k.to_u64() as u32, MIX_SEED)))
    } else {
        K::from_u64(hash::hash64(k.to_u64(), u64::from(MIX_SEED)))
    }
}

/// The home slot of a key in a table of `2^bits` slots (multiply-shift on the whole key: the
/// keys of one partition share their low bits).
#[inline]
fn home<K: Key>(k: K, bits: u32) -> usize {
    (k.to_u64().wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - bits)) as usize
}

/// A CPU work item: a build piece and the probe rows `begin..begin + len` it meets (a probe
/// piece, or a sub-range of one: [`split_items`]; none: a build-only item, whose table build
/// still checks the piece's keys for [`CoWant::unique_build`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Item {
    build: u32,
    begin: usize,
    len: usize,
}

/// Fewest probe rows [`split_items`] cuts a range to. A range's thread builds its piece's
/// table (up to [`MAX_BUILD_CAPACITY`] rows) before it probes, so ranges much shorter than a
/// table cost more than they spread; 4096 left the threads idle where few rows hold many pairs
/// (16 threads, 2^14 ⋈ 2^14 of 256 rows a key, 4 ranges: PHJ-OM 7.5 ms against SMJ-OM's 5.1).
const MIN_SPLIT_ROWS: usize = 1024;

/// `items` with their probe rows cut into even ranges where they are fewer than the `threads`
/// (a small build side in few partitions, each partition's probe rows in one piece: a few
/// tasks write all the pairs while the other threads idle): about one range a thread, none
/// under [`MIN_SPLIT_ROWS`] rows (16 threads, 2^16 ⋈ 2^16 in 4 partitions, 64 rows a key: the
/// match 9-10 ms in 4 items, 4.4-4.7 ms in 16 ranges). A range builds its piece's table again,
/// but on a thread that had no item, while the thread that had the item probes less. Not
/// further (as many as the match's tasks, 8 a thread): on 2 threads, those 4 items cut into 16
/// made the match of 4 rows a key half as slow again, all rebuilds. A range keeps its item's
/// place (the order stays partition, build piece, probe rows, the same for a given thread
/// count), so a task's adjacent items still share a table.
fn split_items(items: Vec<Item>, threads: usize) -> Vec<Item> {
    if items.len() >= threads {
        return items;
    }
    let most = item_probe_rows(&items)
        .div_ceil(threads)
        .max(MIN_SPLIT_ROWS);
    (items.into_iter())
        .flat_map(|item| {
            // Whole multiples of `most`: every range of a cut item holds `most` rows or more.
            let step = item.len.div_ceil((item.len / most).max(1)).max(1);
            // A build-only item (no rows) stays one item.
            (0..item.len.max(1)).step_by(step).map(move |at| Item {
                begin: item.begin + at,
                len: step.min(item.len - at),
                ..item
            })
        })
        .collect()
}

/// A slot of a CPU item table: a key, where its build rows are and their number (0: empty).
/// `first` is the key's row itself (relative to the piece) in a table without equal keys, and
/// otherwise, with [`GROUPED`] set, where the key's rows start in [`ItemTable::rows`].
#[derive(Clone, Copy, Default)]
#[repr(C)]
struct Slot<K> {
    key: K,
    first: u32,
    count: u32,
}

/// Marks a slot's `first` as a place in [`ItemTable::rows`] (pieces hold at most
/// [`MAX_BUILD_CAPACITY`] rows, far below it).
const GROUPED: u32 = 1 << 31;

/// A thread's reusable table ([`with_item_table`]).
struct ItemTable<K> {
    slots: Vec<Slot<K>>,
    /// Each row's slot, while building.
    slot_of: Vec<u32>,
    /// Where a piece's keys repeat: its rows grouped by key, each key's newest first.
    rows: Vec<u32>,
    bits: u32,
}

impl<K: Key> ItemTable<K> {
    fn new() -> Self {
        Self {
            slots: Vec::new(),
            slot_of: Vec::new(),
            rows: Vec::new(),
            bits: 0,
        }
    }

    /// Builds from `keys` (row `r` is `keys[r]`, at most [`MAX_BUILD_CAPACITY`] of them);
    /// returns whether a key came twice. Slots: 4 a row up to the 2 a row of the largest piece,
    /// so the average piece (half full) probes at load 1/4 and no table outgrows the largest
    /// one's (2-core development machine, 2^22 ⋈ 2^23: the match of random keys a sixth faster
    /// than at load 1/2, of `0..|R|` a tenth slower). Where keys repeat, their rows are then
    /// grouped by key, so that a probe reads a key's rows one after another instead of
    /// chasing them through a chain (a load waiting on the load before it at every pair).
    fn build(&mut self, keys: &[K]) -> bool {
        let bits = (4 * keys.len())
            .min(2 * MAX_BUILD_CAPACITY)
            .next_power_of_two()
            .max(16)
            .trailing_zeros();
        let size = 1usize << bits;
        self.bits = bits;
        self.slots.clear();
        self.slots.resize(size, Slot::default());
        self.slot_of.clear();
        let mask = size - 1;
        let mut dup = false;
        for (r, &k) in keys.iter().enumerate() {
            let mut s = home(k, bits);
            // Load factor at most 1/2: an empty slot is always reached.
            loop {
                let slot = &mut self.slots[s];
                if slot.count == 0 {
                    *slot = Slot {
                        key: k,
                        first: r as u32,
                        count: 1,
                    };
                    break;
                }
                if slot.key == k {
                    slot.count += 1;
                    dup = true;
                    break;
                }
                s = (s + 1) & mask;
            }
            self.slot_of.push(s as u32);
        }
        if dup {
            self.group(keys.len());
        }
        dup
    }

    /// Groups the rows by key: each key's run ends where the runs of the keys first seen
    /// before it end (`first` marked [`GROUPED`] and pointed at its run's end), then the rows,
    /// oldest first, fill each run from its end down, leaving `first` at its start.
    fn group(&mut self, n: usize) {
        self.rows.clear();
        self.rows.resize(n, 0);
        let mut end = 0u32;
        for (r, &s) in self.slot_of.iter().enumerate() {
            let slot = &mut self.slots[s as usize];
            if slot.first == r as u32 {
                end += slot.count;
                slot.first = end | GROUPED;
            }
        }
        for (r, &s) in self.slot_of.iter().enumerate() {
            let slot = &mut self.slots[s as usize];
            slot.first -= 1;
            self.rows[(slot.first & !GROUPED) as usize] = r as u32;
        }
    }

    /// Where the rows of `k` are (a slot's `first`) and their number.
    #[inline]
    fn find(&self, k: K) -> Option<(u32, u32)> {
        let mask = self.slots.len() - 1;
        let mut s = home(k, self.bits);
        loop {
            let slot = &self.slots[s];
            if slot.count == 0 {
                return None;
            }
            if slot.key == k {
                return Some((slot.first, slot.count));
            }
            s = (s + 1) & mask;
        }
    }

    /// Calls `f` with each of the `count` rows at `first` ([`ItemTable::find`]), newest first.
    #[inline]
    fn each_row(&self, first: u32, count: u32, mut f: impl FnMut(u32)) {
        if first & GROUPED == 0 {
            f(first);
        } else {
            let at = (first & !GROUPED) as usize;
            self.rows[at..at + count as usize]
                .iter()
                .for_each(|&r| f(r));
        }
    }
}

/// Runs `f` with this thread's item table for `K` keys, kept from task to task and from join
/// to join: a match then neither allocates its tables nor takes their page faults again (up to
/// 0.9 MiB each, 1.1 with 8-byte keys, a task's worth of allocations a time, which the
/// allocator served from fresh mappings or from its arenas as the process's history had it).
/// Each thread that ran a match keeps its last table for the life of the thread. A table
/// already in use on this thread gives way to a new one.
fn with_item_table<K: Key, R>(f: impl FnOnce(&mut ItemTable<K>) -> R) -> R {
    thread_local! {
        static TABLE: RefCell<Option<Box<dyn Any>>> = const { RefCell::new(None) };
    }
    TABLE.with(|kept| {
        let Ok(mut kept) = kept.try_borrow_mut() else {
            return f(&mut ItemTable::new());
        };
        if !kept.as_ref().is_some_and(|t| t.is::<ItemTable<K>>()) {
            *kept = Some(Box::new(ItemTable::<K>::new()));
        }
        match kept.as_mut().and_then(|t| t.downcast_mut::<ItemTable<K>>()) {
            Some(table) => f(table),
            None => f(&mut ItemTable::new()),
        }
    })
}

/// A word the CPU match writes for a row: a row (`u32`), a carried row id, or a narrow join's
/// 4- or 8-byte payload.
trait IdWord: Element {
    /// A column of these words.
    fn column(words: Vec<Self>) -> Column<CpuBackend>;
}

impl IdWord for u32 {
    fn column(words: Vec<Self>) -> Column<CpuBackend> {
        Column::U32(words)
    }
}

impl IdWord for u64 {
    fn column(words: Vec<Self>) -> Column<CpuBackend> {
        Column::U64(words)
    }
}

/// Runs `$body` with `$t` the word type of `$ids` (an `Option<&Column<CpuBackend>>` that
/// [`check_sides`] accepted) and `$w` its words (`None`: rows, as `u32`).
macro_rules! with_words {
    ($ids:expr, $t:ident, $w:ident => $body:expr) => {
        match $ids {
            Some(Column::U64(v)) => {
                type $t = u64;
                let $w: Option<&[u64]> = Some(v);
                $body
            }
            Some(Column::U32(v)) => {
                type $t = u32;
                let $w: Option<&[u32]> = Some(v);
                $body
            }
            _ => {
                type $t = u32;
                let $w: Option<&[u32]> = None;
                $body
            }
        }
    };
}

/// A task's output on the CPU: the pairs written into its region, and where the region ran
/// out, what is left for the write pass ([`cpu_match`]).
#[derive(Default)]
struct Part {
    written: usize,
    rest: Option<Rest>,
    total: u64,
}

/// Where a task's region ran out: the first probe row whose pairs did not fit (none of its
/// pairs written) and the pairs from there on.
#[derive(Clone, Copy)]
struct Rest {
    from: At,
    pairs: u64,
}

/// A point in a task's walk over its items: an item (its index among the task's items) and a
/// probe row of it.
#[derive(Clone, Copy, Default)]
struct At {
    item: usize,
    pos: usize,
}

/// The flags as atomics, so items sharing probe rows may set them concurrently.
fn atomic_flags(flags: &mut [u32]) -> &[AtomicU32] {
    // SAFETY: AtomicU32 has the size, alignment and bit validity of u32, and the exclusive
    // borrow of `flags` makes the atomics the only access for the returned lifetime.
    unsafe { &*(flags as *mut [u32] as *const [AtomicU32]) }
}

impl CoPartitionJoin for CpuBackend {
    fn cached_table_bytes(&self) -> Option<usize> {
        None
    }

    fn gfur_ratio_per_payload_byte(&self) -> f64 {
        0.0
    }

    fn build_capacity<K: Key>(&self) -> usize {
        CPU_LIMITS[0].load(Ordering::Relaxed)
    }

    fn probe_chunk<K: Key>(&self) -> usize {
        CPU_LIMITS[1].load(Ordering::Relaxed)
    }

    fn mix_keys<K: Key>(&self, keys: &Vec<K>) -> Result<Vec<K>> {
        Ok(keys
            .par_iter()
            .with_min_len(joinkit_cuda::PARALLEL_THRESHOLD)
            .map(|&k| mix(k))
            .collect())
    }

    fn narrow_keys<K: Key>(
        &self,
        left: &Vec<K>,
        right: &Vec<K>,
    ) -> Result<Option<(Vec<u32>, Vec<u32>)>> {
        if K::BITS != 64 {
            return Ok(None);
        }
        let ((ll, lg), (rl, rg)) = (key_range(left), key_range(right));
        if !within_u32((ll.min(rl), lg.max(rg))) {
            return Ok(None);
        }
        Ok(Some((low_bits(left)?, low_bits(right)?)))
    }

    fn sampled_key_range<K: Key>(&self, keys: &Vec<K>) -> Result<(u64, u64)> {
        check_wide::<K>()?;
        let (n, taken) = (keys.len(), keys.len().min(RANGE_SAMPLES));
        Ok((0..taken)
            .map(|s| keys[s * n / taken].to_u64())
            .fold((u64::MAX, 0), |(l, g), k| (l.min(k), g.max(k))))
    }

    fn low_words<K: Key>(&self, keys: &Vec<K>) -> Result<(Vec<u32>, (u64, u64))> {
        check_wide::<K>()?;
        Ok((low_bits(keys)?, key_range(keys)))
    }

    fn contiguous_pieces(&self, offsets: &Vec<u64>, max_rows: usize) -> Result<Pieces<Self>> {
        let fanout = check_piece_args(offsets.len(), max_rows)?;
        let max = max_rows as u64;
        let mut piece_offsets = Vec::with_capacity(fanout + 1);
        let (mut begin, mut len) = (Vec::new(), Vec::new());
        let (mut most, mut longest) = (0u64, 0u64);
        piece_offsets.push(0u64);
        for w in offsets.windows(2) {
            if w[1] < w[0] {
                return Err(Error::Corrupt(format!(
                    "partition offsets decrease: {} then {}",
                    w[0], w[1]
                )));
            }
            let (mut at, end) = (w[0], w[1]);
            most = most.max((end - at).div_ceil(max));
            while at < end {
                let l = (end - at).min(max);
                begin.push(at);
                len.push(l as u32);
                longest = longest.max(l);
                at += l;
            }
            piece_offsets.push(begin.len() as u64);
        }
        Ok(Pieces {
            offsets: piece_offsets,
            total: begin.len() as u64,
            begin,
            len,
            max_per_partition: most,
            max_len: longest,
            rows: offsets[fanout] - offsets[0],
        })
    }

    fn chain_pieces<K: Key>(
        &self,
        chains: &BucketChains<Self, K>,
        by: &Partitioner,
    ) -> Result<Pieces<Self>> {
        check_chains(chains, by)?;
        let cap = chains.bucket_capacity as u64;
        let used = chains.used.first().copied().unwrap_or(0) as usize;
        if used > chains.next.len() {
            return Err(Error::Corrupt(format!(
                "bucket pool exhausted: {used} buckets taken of {}",
                chains.next.len()
            )));
        }
        let mut piece_offsets = vec![0u64];
        let (mut begin, mut len) = (Vec::new(), Vec::new());
        let (mut most, mut rows) = (0u64, 0u64);
        for (p, (&head, &count)) in chains.heads.iter().zip(&chains.counts).enumerate() {
            let mut left = count;
            let mut b = head;
            let mut take = if count == 0 { 0 } else { (count - 1) % cap + 1 };
            let mut n = 0u64;
            while left > 0 {
                if b == NO_BUCKET || b as usize >= used || n >= used as u64 {
                    return Err(Error::Corrupt(format!(
                        "chain of partition {p} ends {left} rows short of its count {count}"
                    )));
                }
                begin.push(u64::from(b) * cap);
                len.push(take as u32);
                left -= take;
                take = cap;
                b = chains.next[b as usize];
                n += 1;
            }
            most = most.max(n);
            rows += count;
            piece_offsets.push(begin.len() as u64);
        }
        if begin.len() != used {
            return Err(Error::Corrupt(format!(
                "{used} buckets taken, {} on chains",
                begin.len()
            )));
        }
        Ok(Pieces {
            offsets: piece_offsets,
            total: begin.len() as u64,
            max_len: len.iter().copied().max().map_or(0, u64::from),
            begin,
            len,
            max_per_partition: most,
            rows,
        })
    }

    fn copartition_join<K: Key>(
        &self,
        probe: &CoSide<'_, Self, K>,
        build: &CoSide<'_, Self, K>,
        want: CoWant,
    ) -> Result<CoJoined<Self>> {
        // CPU tables take any piece up to the common limit; the capacity setting only decides
        // how the joins cut pieces.
        let fanout = check_sides(probe, build, &want, MAX_BUILD_CAPACITY)?;
        let (pp, bp) = (probe.pieces, build.pieces);
        // Ids are as long as their keys (check_sides): pieces inside the keys are inside both.
        for (side, keys, pieces) in [("probe", probe.keys, pp), ("build", build.keys, bp)] {
            let offsets_ok = pieces.offsets.first() == Some(&0)
                && pieces.offsets.windows(2).all(|w| w[0] <= w[1])
                && pieces.offsets.last().copied() == Some(pieces.begin.len() as u64)
                && pieces.begin.len() == pieces.len.len();
            if !offsets_ok {
                return Err(Error::Corrupt(format!(
                    "{side} pieces: offsets do not index their piece arrays"
                )));
            }
            for (&b, &l) in pieces.begin.iter().zip(&pieces.len) {
                let end = b + u64::from(l);
                if end > keys.len() as u64 {
                    return Err(Error::IndexOutOfRange {
                        what: "co-partition piece",
                        index: end,
                        len: keys.len(),
                    });
                }
            }
        }
        // Work items in order: partition, build piece, probe piece (a build piece's items are
        // adjacent, so a task builds its table once for all of them). Checking uniqueness, a
        // build piece without probe pieces still gets an item (build only, no probe rows).
        // Pieces lie inside their keys (checked above), so their rows are addresses.
        let mut items: Vec<Item> = Vec::new();
        for p in 0..fanout {
            let probes = pp.offsets[p] as usize..pp.offsets[p + 1] as usize;
            for i in bp.offsets[p]..bp.offsets[p + 1] {
                let build = i as u32;
                if probes.is_empty() && want.unique_build {
                    items.push(Item {
                        build,
                        begin: 0,
                        len: 0,
                    });
                }
                for j in probes.clone() {
                    items.push(Item {
                        build,
                        begin: pp.begin[j] as usize,
                        len: pp.len[j] as usize,
                    });
                }
            }
        }
        let items = split_items(items, rayon::current_num_threads());
        // A side with a second column is matched by position, both columns gathered after.
        let (probe_words, build_words) = (
            probe.ids.filter(|_| probe.second.is_none()),
            build.ids.filter(|_| build.second.is_none()),
        );
        with_words!(probe_words, P, probe_ids => with_words!(build_words, Q, build_ids => {
            let sides = CpuSides {
                probe_keys: probe.keys,
                build_keys: build.keys,
                bp,
                probe_ids,
                build_ids,
            };
            // One pass, unless its pairs could pass the caller's limit (a unique build side
            // matches each probe row of an item at most once): then counted first, and written
            // into regions of each task's exact count, when they fit.
            let bound = if want.unique_build {
                item_probe_rows(&items) as u64
            } else {
                u64::MAX
            };
            let m = if want.pairs && want.too_many(bound) {
                let counted = cpu_match::<K, P, Q>(&sides, &items, want.with_pairs(false), None)?;
                if want.too_many(counted.total) {
                    counted
                } else {
                    let exact = Some(&counted.task_totals[..]);
                    CpuMatched {
                        flags: counted.flags,
                        ..cpu_match::<K, P, Q>(&sides, &items, want.with_flags(None), exact)?
                    }
                }
            } else {
                cpu_match::<K, P, Q>(&sides, &items, want, None)?
            };
            let pairs = m
                .pairs
                .map(|(p, b)| {
                    Ok::<_, Error>((
                        side_columns(self, P::column(p), probe)?,
                        side_columns(self, Q::column(b), build)?,
                    ))
                })
                .transpose()?;
            Ok(CoJoined {
                pairs,
                flags: m.flags,
                total: m.total,
            })
        }))
    }
}

/// A side's output columns from the words the CPU match wrote: the words, their halves
/// ([`CoSide::split_words`]), the words widened ([`CoSide::unpack`]), or, for a side with a
/// [`CoSide::second`] column (matched by position), both carried columns gathered at the
/// positions.
fn side_columns<K: Key>(
    b: &CpuBackend,
    words: Column<CpuBackend>,
    side: &CoSide<'_, CpuBackend, K>,
) -> Result<Vec<Column<CpuBackend>>> {
    Ok(match (words, side.ids, side.second, side.unpack) {
        (Column::U32(positions), Some(first), Some(second), _) => {
            crate::join::gather_columns(b, [first, second], &positions)?
        }
        (Column::U64(w), ..) if side.split_words => {
            let (lo, hi) = b.deinterleave(&w)?;
            vec![Column::U32(lo), Column::U32(hi)]
        }
        (Column::U32(packed), _, _, Some(low_bits)) => {
            vec![Column::U64(b.unpack_ids(&packed, low_bits)?)]
        }
        (words, ..) => vec![words],
    })
}

/// The CPU match's view of both sides: keys, pieces and the words it writes for their rows.
struct CpuSides<'a, K, P, Q> {
    probe_keys: &'a [K],
    build_keys: &'a [K],
    bp: &'a Pieces<CpuBackend>,
    probe_ids: Option<&'a [P]>,
    build_ids: Option<&'a [Q]>,
}

impl<K, P: IdWord, Q: IdWord> CpuSides<'_, K, P, Q> {
    /// The word the match writes for probe row `pos`: its id, or the row.
    #[inline]
    fn probe_word(&self, pos: usize) -> P {
        self.probe_ids
            .map_or(P::from_bits(pos as u64), |ids| ids[pos])
    }

    /// The word the match writes for build row `row`: its id, or the row.
    #[inline]
    fn build_word(&self, row: usize) -> Q {
        self.build_ids
            .map_or(Q::from_bits(row as u64), |ids| ids[row])
    }
}

/// (probe words, build words) of every match, as [`CoJoined::pairs`].
type WordPairs<P, Q> = (Vec<P>, Vec<Q>);

/// [`CoJoined`] on the CPU, its pairs as words.
struct CpuMatched<P, Q> {
    pairs: Option<WordPairs<P, Q>>,
    flags: Option<Vec<u32>>,
    total: u64,
    /// Matches of each task (run of items), in task order.
    task_totals: Vec<u64>,
}

/// Probe rows of the work items (a probe piece counted once per build piece it meets).
fn item_probe_rows(items: &[Item]) -> usize {
    items.iter().map(|item| item.len).sum()
}

/// The CPU co-partition join over `items` (checked by the caller): the pairs (when wanted), the
/// probe flags (when wanted) and the number of matches.
///
/// Tasks are runs of items. The match pass writes each task's pairs straight into the output,
/// in a region as long as its probe rows (enough where the build keys are unique per piece, the
/// common case) or of its `exact` count from a count pass of the same items. Where a task's
/// region runs out, the task counts the rest of its pairs (a lookup gives a key's rows) and a
/// write pass ([`assemble`]) writes them, from the probe row where the region ran out, into an
/// output of exactly the pairs counted. Why not a spill a task grows: on many threads the
/// spills' growth, copies and page faults made M:N matches several times slower than writing
/// their pairs, and slower by a different amount in each process (docs/results/joins.md).
fn cpu_match<K: Key, P: IdWord, Q: IdWord>(
    sides: &CpuSides<'_, K, P, Q>,
    items: &[Item],
    want: CoWant,
    exact: Option<&[u64]>,
) -> Result<CpuMatched<P, Q>> {
    let mut flags = want
        .flags_len
        .map(joinkit_cuda::try_zeroed::<u32>)
        .transpose()?;
    let dup = AtomicBool::new(false);
    let bad_id = AtomicBool::new(false);
    let per_task = items
        .len()
        .div_ceil(8 * rayon::current_num_threads().max(1))
        .max(1);
    let tasks: Vec<&[Item]> = items.chunks(per_task).collect();
    let exact = exact.filter(|e| e.len() == tasks.len());
    let regions: Vec<usize> = match exact {
        Some(e) => (e.iter().map(|&t| usize::try_from(t)))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| Error::SizeOverflow("join output rows"))?,
        None => tasks.iter().map(|t| item_probe_rows(t)).collect(),
    };
    let room = (regions.iter())
        .try_fold(0usize, |room, &r| room.checked_add(r))
        .ok_or(Error::SizeOverflow("join output rows"))?;
    // Regions of exact counts, or of probe rows while they stay within a few times the probe
    // side (many build pieces per partition multiply them) and within the pairs the caller
    // takes; otherwise every pair waits for the write pass.
    let in_place = want.pairs
        && (exact.is_some()
            || (room <= 2 * sides.probe_keys.len() + 1024 && !want.too_many(room as u64)));
    let regions = if in_place {
        regions
    } else {
        vec![0; tasks.len()]
    };
    let (mut out_p, mut out_b) = if in_place {
        // Zeroed memory advised onto huge pages (`try_zeroed`): the tasks' writes take its
        // page faults, 2 MiB at a time.
        (
            joinkit_cuda::try_zeroed(room)?,
            joinkit_cuda::try_zeroed(room)?,
        )
    } else {
        (Vec::new(), Vec::new())
    };
    let starts: Vec<usize> = (regions.iter())
        .scan(0, |at, &r| {
            let start = *at;
            *at += r;
            Some(start)
        })
        .collect();
    let parts: Vec<Part> = {
        let flags = flags.as_deref_mut().map(atomic_flags);
        let (dst_p, dst_b) = (SharedOut::new(&mut out_p), SharedOut::new(&mut out_b));
        let (dst_p, dst_b) = (&dst_p, &dst_b);
        tasks
            .par_iter()
            .zip(regions.par_iter().zip(starts.par_iter()))
            .map(|(group, (&region, &start))| {
                let mut part = Part::default();
                let unique = (want.unique_build, &dup);
                walk_items(sides, group, At::default(), unique, |at, found| {
                    let count = u64::from(found.count);
                    part.total += count;
                    let pid = sides.probe_word(at.pos);
                    if let Some(f) = flags {
                        match usize::try_from(pid.to_bits()).ok().and_then(|i| f.get(i)) {
                            Some(f) => f.store(1, Ordering::Relaxed),
                            None => bad_id.store(true, Ordering::Relaxed),
                        }
                    }
                    if !want.pairs {
                        return;
                    }
                    match &mut part.rest {
                        Some(rest) => rest.pairs += count,
                        None if found.count as usize <= region - part.written => {
                            found.each_row(|row| {
                                // SAFETY: rows start..start + region of the outputs belong to
                                // this task alone, and this row's pairs fit in what is left.
                                unsafe {
                                    dst_p.write(start + part.written, pid);
                                    dst_b.write(start + part.written, sides.build_word(row));
                                }
                                part.written += 1;
                            });
                        }
                        None => {
                            part.rest = Some(Rest {
                                from: at,
                                pairs: count,
                            })
                        }
                    }
                });
                part
            })
            .collect()
    };
    if want.unique_build && dup.load(Ordering::Relaxed) {
        return Err(Error::DuplicateKey { side: "build" });
    }
    if bad_id.load(Ordering::Relaxed) {
        return Err(Error::IndexOutOfRange {
            what: "co-partition probe id",
            index: u64::from(u32::MAX),
            len: want.flags_len.unwrap_or(0),
        });
    }
    let total: u64 = parts.iter().map(|p| p.total).sum();
    let pairs = if want.pairs {
        let n = usize::try_from(total).map_err(|_| Error::SizeOverflow("join output rows"))?;
        let written = Written {
            pairs: (out_p, out_b),
            parts: &parts,
            starts: &starts,
        };
        Some(assemble(sides, &tasks, written, n)?)
    } else {
        None
    };
    Ok(CpuMatched {
        pairs,
        flags,
        total,
        task_totals: parts.iter().map(|p| p.total).collect(),
    })
}

/// A probe row's matches in an item's table: where its key's build rows are
/// ([`ItemTable::find`]; rows relative to the item's build piece, which starts at row `piece`),
/// and their number.
struct Found<'t, K> {
    table: &'t ItemTable<K>,
    first: u32,
    count: u32,
    piece: usize,
}

impl<K: Key> Found<'_, K> {
    /// Calls `f` with each build row of the key, newest first.
    #[inline]
    fn each_row(&self, mut f: impl FnMut(usize)) {
        (self.table).each_row(self.first, self.count, |r| f(self.piece + r as usize));
    }
}

/// Walks `group`'s items from `from` on, building each item's build piece into a table (once
/// for a run of items of one piece), and calls `visit` for every probe row whose key the table
/// holds, in order. Returns early once a build key came twice (recorded in `dup`) where
/// `unique` says the build keys are unique.
fn walk_items<K: Key, P: IdWord, Q: IdWord>(
    sides: &CpuSides<'_, K, P, Q>,
    group: &[Item],
    from: At,
    (unique, dup): (bool, &AtomicBool),
    visit: impl FnMut(At, Found<'_, K>),
) {
    with_item_table::<K, _>(|table| {
        walk_items_with(sides, group, from, (unique, dup), table, visit)
    })
}

/// [`walk_items`] with `table`, whatever it held before.
fn walk_items_with<K: Key, P: IdWord, Q: IdWord>(
    sides: &CpuSides<'_, K, P, Q>,
    group: &[Item],
    from: At,
    (unique, dup): (bool, &AtomicBool),
    table: &mut ItemTable<K>,
    mut visit: impl FnMut(At, Found<'_, K>),
) {
    let bp = sides.bp;
    let mut built = None;
    for (item, it) in group.iter().enumerate().skip(from.item) {
        let i = it.build as usize;
        let (bb, bl) = (bp.begin[i] as usize, bp.len[i] as usize);
        if built != Some(it.build) {
            built = Some(it.build);
            if table.build(&sides.build_keys[bb..bb + bl]) {
                dup.store(true, Ordering::Relaxed);
            }
        }
        if unique && dup.load(Ordering::Relaxed) {
            return;
        }
        let end = it.begin + it.len;
        let first = if item == from.item {
            from.pos.clamp(it.begin, end)
        } else {
            it.begin
        };
        for (pos, &k) in (first..).zip(&sides.probe_keys[first..end]) {
            if let Some((first, count)) = table.find(k) {
                let found = Found {
                    table,
                    first,
                    count,
                    piece: bb,
                };
                visit(At { item, pos }, found);
            }
        }
    }
}

/// What the match pass left: the pairs it wrote into the tasks' regions, each task's part, and
/// where each region starts.
struct Written<'a, P, Q> {
    pairs: WordPairs<P, Q>,
    parts: &'a [Part],
    starts: &'a [usize],
}

/// The pairs in task order: each task's pairs from its region, then, where the region ran
/// out, the rest, written by a second walk of its items from where it did into an output of
/// exactly `n` rows. Where no region ran out, the regions are closed up in place.
///
/// # Errors
/// [`Error::Corrupt`] where the second walk finds other pairs than the first counted.
fn assemble<K: Key, P: IdWord, Q: IdWord>(
    sides: &CpuSides<'_, K, P, Q>,
    tasks: &[&[Item]],
    written: Written<'_, P, Q>,
    n: usize,
) -> Result<WordPairs<P, Q>> {
    let Written {
        pairs: (mut out_p, mut out_b),
        parts,
        starts,
    } = written;
    if parts.iter().all(|p| p.rest.is_none()) {
        let mut at = 0;
        for (p, &start) in parts.iter().zip(starts) {
            if start != at {
                out_p.copy_within(start..start + p.written, at);
                out_b.copy_within(start..start + p.written, at);
            }
            at += p.written;
        }
        out_p.truncate(at);
        out_b.truncate(at);
        return Ok((out_p, out_b));
    }
    let mut all_p = joinkit_cuda::try_zeroed::<P>(n)?;
    let mut all_b = joinkit_cuda::try_zeroed::<Q>(n)?;
    let mut pieces = Vec::with_capacity(parts.len());
    let (mut rest_p, mut rest_b) = (&mut all_p[..], &mut all_b[..]);
    for p in parts {
        let len = p.rest.map_or(Some(0), |r| usize::try_from(r.pairs).ok());
        let Some(len) = len.and_then(|l| l.checked_add(p.written)) else {
            return Err(Error::SizeOverflow("join output rows"));
        };
        if len > rest_p.len() {
            return Err(Error::Corrupt(
                "the tasks' pairs exceed the pairs counted".into(),
            ));
        }
        let (head_p, tail_p) = std::mem::take(&mut rest_p).split_at_mut(len);
        let (head_b, tail_b) = std::mem::take(&mut rest_b).split_at_mut(len);
        pieces.push((head_p, head_b));
        (rest_p, rest_b) = (tail_p, tail_b);
    }
    let (out_p, out_b) = (&out_p, &out_b);
    let none = AtomicBool::new(false);
    (pieces.into_par_iter())
        .zip(
            parts
                .par_iter()
                .zip(starts.par_iter().zip(tasks.par_iter())),
        )
        .map(|((dst_p, dst_b), (part, (&start, group)))| {
            let (head_p, tail_p) = dst_p.split_at_mut(part.written);
            let (head_b, tail_b) = dst_b.split_at_mut(part.written);
            head_p.copy_from_slice(&out_p[start..start + part.written]);
            head_b.copy_from_slice(&out_b[start..start + part.written]);
            let Some(rest) = part.rest else {
                return Ok(());
            };
            let mut at = 0;
            walk_items(sides, group, rest.from, (false, &none), |a, found| {
                let pid = sides.probe_word(a.pos);
                found.each_row(|row| {
                    if let (Some(p), Some(b)) = (tail_p.get_mut(at), tail_b.get_mut(at)) {
                        (*p, *b) = (pid, sides.build_word(row));
                    }
                    at += 1;
                });
            });
            if at == tail_p.len() {
                Ok(())
            } else {
                Err(Error::Corrupt(format!(
                    "the write pass found {at} pairs where the match pass counted {}",
                    tail_p.len()
                )))
            }
        })
        .collect::<Result<()>>()?;
    Ok((all_p, all_b))
}

/// A column's buffer shared by the tasks that write disjoint elements of it.
struct SharedOut<T>(*mut T, usize);

// SAFETY: the pointer addresses a buffer that outlives every task writing through it, and the
// tasks write disjoint elements (each owns a region).
unsafe impl<T: Send> Send for SharedOut<T> {}
// SAFETY: as above: concurrent use only writes disjoint elements, never reads.
unsafe impl<T: Send> Sync for SharedOut<T> {}

impl<T> SharedOut<T> {
    fn new(out: &mut [T]) -> Self {
        Self(out.as_mut_ptr(), out.len())
    }

    /// Writes `v` at `i`.
    ///
    /// # Safety
    /// No other task may access element `i` meanwhile, and the buffer must be alive.
    #[inline(always)]
    unsafe fn write(&self, i: usize, v: T) {
        assert!(i < self.1, "join output row out of range");
        // SAFETY: `i` is in bounds (checked above); exclusivity is the caller's promise.
        unsafe { *self.0.add(i) = v };
    }
}

/// Evenly spaced keys [`CoPartitionJoin::sampled_key_range`] looks at, on each side before
/// [`CoPartitionJoin::narrow_keys`]' pass over all of them (on CUDA the look costs a launch and
/// a read-back: tens of microseconds against the pass's 1.2-1.4 ms on an H200 at 2^27 + 2^28
/// keys).
pub(crate) const RANGE_SAMPLES: usize = 4096;

/// Whether keys from `least` to `greatest` (none when `least > greatest`) span at most 2^32
/// values, so their low 32 bits are one-to-one on them.
pub fn within_u32((least, greatest): (u64, u64)) -> bool {
    least > greatest || greatest - least <= u64::from(u32::MAX)
}

/// [`Error::InvalidArgument`] unless `K` is 8 bytes wide (the narrowing's keys).
pub(crate) fn check_wide<K: Key>() -> Result<()> {
    if K::BITS == 64 {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "narrowing takes 8-byte keys, not {}-byte ones",
            K::BITS / 8
        )))
    }
}

/// The least and greatest of `keys` (`(u64::MAX, 0)` for none).
fn key_range<K: Key>(keys: &[K]) -> (u64, u64) {
    keys.par_iter()
        .with_min_len(joinkit_cuda::PARALLEL_THRESHOLD)
        .map(|&k| (k.to_u64(), k.to_u64()))
        .reduce(|| (u64::MAX, 0), |a, b| (a.0.min(b.0), a.1.max(b.1)))
}

/// The low 32 bits of every key.
fn low_bits<K: Key>(keys: &[K]) -> Result<Vec<u32>> {
    let mut out = joinkit_cuda::try_reserved(keys.len())?;
    keys.par_iter()
        .with_min_len(joinkit_cuda::PARALLEL_THRESHOLD)
        .map(|&k| k.to_u64() as u32)
        .collect_into_vec(&mut out);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixing_is_a_bijection_on_a_sample() {
        let mut seen = std::collections::HashSet::new();
        for k in (0u32..1 << 16).chain([u32::MAX, u32::MAX - 1]) {
            assert!(seen.insert(mix(k)));
        }
        assert_ne!(mix(1u64), mix(2u64));
    }

    #[test]
    fn low_words_keep_the_low_bits_and_find_the_range() {
        let cpu = CpuBackend::new();
        let keys = vec![u64::MAX, 5, 1 << 40, 7];
        let (low, range) = cpu.low_words(&keys).unwrap();
        assert_eq!(low, vec![u32::MAX, 5, 0, 7]);
        assert_eq!(range, (5, u64::MAX));
        // Fewer keys than samples: every key is looked at.
        assert_eq!(cpu.sampled_key_range(&keys).unwrap(), (5, u64::MAX));
        assert_eq!(cpu.low_words(&Vec::<u64>::new()).unwrap().1, (u64::MAX, 0));
        assert!(within_u32((u64::MAX, 0)));
        assert!(within_u32((7, 7 + u64::from(u32::MAX))));
        assert!(!within_u32((7, 8 + u64::from(u32::MAX))));
        for e in [
            cpu.low_words(&vec![1u32]).map(drop),
            cpu.sampled_key_range(&vec![1u32]).map(drop),
        ] {
            assert!(matches!(e, Err(Error::InvalidArgument(_))), "{e:?}");
        }
    }

    #[test]
    fn few_items_split_their_probe_rows() {
        let item = |build, begin, len| Item { build, begin, len };
        // 3 items on 8 threads: 40_000 probe rows in ranges of at most 5_000 (the minimum is
        // less): each probe piece in 4 even ranges, the build-only item kept, the order kept.
        let items = vec![item(0, 100, 20_000), item(0, 0, 0), item(1, 30_000, 20_000)];
        let split = split_items(items.clone(), 8);
        let want: Vec<Item> = (0..4)
            .map(|k| item(0, 100 + 5_000 * k, 5_000))
            .chain([item(0, 0, 0)])
            .chain((0..4).map(|k| item(1, 30_000 + 5_000 * k, 5_000)))
            .collect();
        assert_eq!(split, want);
        // Uneven: 3_071 rows with at least 1_024 a range: 1_536 and 1_535.
        let split = split_items(vec![item(2, 7, 3_071)], 100);
        let lens: Vec<usize> = split.iter().map(|i| i.len).collect();
        assert_eq!(lens, [1_536, 1_535]);
        assert_eq!(split[1].begin + split[1].len, 7 + 3_071);
        // As many items as threads, or pieces no longer than the minimum: unchanged.
        assert_eq!(split_items(items.clone(), 3), items);
        let short = vec![item(0, 0, MIN_SPLIT_ROWS), item(1, MIN_SPLIT_ROWS, 1)];
        assert_eq!(split_items(short.clone(), 1000), short);
    }

    #[test]
    fn tables_group_equal_keys() {
        let mut t = ItemTable::<u32>::new();
        let rows_of = |t: &ItemTable<u32>, k| {
            let (first, count) = t.find(k).unwrap();
            let mut rows = Vec::new();
            t.each_row(first, count, |r| rows.push(r));
            assert_eq!(rows.len(), count as usize);
            rows
        };
        // Each key's rows together, newest first, whatever the keys between them.
        assert!(t.build(&[5, 7, 5, 5, 0, u32::MAX, 7, 9]));
        assert_eq!(rows_of(&t, 5), [3, 2, 0]);
        assert_eq!(rows_of(&t, 7), [6, 1]);
        assert_eq!(rows_of(&t, u32::MAX), [5]);
        assert_eq!(rows_of(&t, 0), [4]);
        assert_eq!(rows_of(&t, 9), [7]);
        assert_eq!(t.find(6), None);
        // No key twice: each slot names its row; a table kept from a build with equal keys.
        assert!(!t.build(&[1, 2, 3]));
        assert_eq!(t.find(2), Some((1, 1)));
        assert_eq!(rows_of(&t, 3), [2]);
        // Every row of a piece of the largest size in one key, then all distinct.
        let same = vec![4u32; MAX_BUILD_CAPACITY];
        assert!(t.build(&same));
        let all: Vec<u32> = (0..MAX_BUILD_CAPACITY as u32).rev().collect();
        assert_eq!(rows_of(&t, 4), all);
        let distinct: Vec<u32> = (0..MAX_BUILD_CAPACITY as u32).collect();
        assert!(!t.build(&distinct));
        assert_eq!(rows_of(&t, 77), [77]);
    }
}
