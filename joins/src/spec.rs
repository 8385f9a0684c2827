//! What a join is asked to do: its kind, its algorithm, its promises.

use std::fmt;

/// The row id written for "no matching row" on the right side of a left outer join.
pub const NULL_ROW: u32 = u32::MAX;

/// Which rows a join returns. "Left" is the side whose rows are kept by semi, anti and outer
/// joins; the algorithms decide internally which side they build on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JoinKind {
    /// Every (left row, right row) pair with equal keys.
    Inner,
    /// Left rows with at least one match (each once).
    LeftSemi,
    /// Left rows with no match.
    LeftAnti,
    /// Inner pairs, plus every left row without a match paired with [`NULL_ROW`].
    LeftOuter,
}

impl JoinKind {
    /// Every kind, for sweeps and tests.
    pub const ALL: [JoinKind; 4] = [
        JoinKind::Inner,
        JoinKind::LeftSemi,
        JoinKind::LeftAnti,
        JoinKind::LeftOuter,
    ];

    /// Whether the output has a right row id per pair (inner and outer) or only left rows.
    pub fn has_right_rows(self) -> bool {
        matches!(self, JoinKind::Inner | JoinKind::LeftOuter)
    }
}

/// A join algorithm, named as in Wu et al. (VLDB 2024).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// Sort-merge join, GFUR: sort keys with row ids, gather payloads from the untransformed
    /// inputs.
    SmjUm,
    /// Sort-merge join, GFTR: sort payloads along with the keys, gather from the transformed
    /// (sorted) relations, whose match positions are clustered.
    SmjOm,
    /// Non-partitioned hash join on the global open-addressing table (cuDF style).
    NphjOpen,
    /// Non-partitioned hash join on the lock-free chained table (Thostrup et al.).
    NphjChained,
    /// Partitioned hash join, GFUR: bucket-chain partition of keys with row ids (Sioulas et
    /// al.), a hash join per co-partition in shared memory, payloads gathered from the
    /// untransformed inputs.
    PhjUm,
    /// Partitioned hash join, GFTR (Wu et al.'s best): stable radix partition, a hash join per
    /// co-partition in shared memory, payloads gathered from the partitioned relations at
    /// clustered positions.
    PhjOm,
    /// Choose for the caller from the input statistics (see [`crate::choose`]).
    Auto,
}

impl Algorithm {
    /// The concrete algorithms (not [`Algorithm::Auto`]).
    pub const CONCRETE: [Algorithm; 6] = [
        Algorithm::SmjUm,
        Algorithm::SmjOm,
        Algorithm::NphjOpen,
        Algorithm::NphjChained,
        Algorithm::PhjUm,
        Algorithm::PhjOm,
    ];

    /// The short name used in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::SmjUm => "SMJ-UM",
            Algorithm::SmjOm => "SMJ-OM",
            Algorithm::NphjOpen => "NPHJ-open",
            Algorithm::NphjChained => "NPHJ-chained",
            Algorithm::PhjUm => "PHJ-UM",
            Algorithm::PhjOm => "PHJ-OM",
            Algorithm::Auto => "auto",
        }
    }

    /// Parses a name as written by [`Algorithm::name`] (case-insensitive, surrounding spaces
    /// ignored, as in a list typed `SMJ-UM, PHJ-OM`).
    pub fn from_name(name: &str) -> Option<Algorithm> {
        let name = name.trim();
        Algorithm::CONCRETE
            .into_iter()
            .chain([Algorithm::Auto])
            .find(|a| a.name().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Options of a join.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JoinOptions {
    /// The rows to return.
    pub kind: JoinKind,
    /// The algorithm ([`Algorithm::Auto`] chooses).
    pub algorithm: Algorithm,
    /// The right side promises unique keys (a primary key: PK-FK and PK-PK joins). Checked:
    /// a duplicate is [`crate::Error::DuplicateKey`].
    pub right_unique: bool,
    /// Most bytes the output buffers of one call may take (`None`: no limit). Output bytes
    /// are rows times the bytes of a row: for [`crate::join_rows`], 4 per row-id column (two
    /// for inner and left outer joins, one for semi and anti); for [`crate::join_columns`],
    /// the widths of the left payload columns, plus for inner and left outer joins those of
    /// the right ones, plus for left outer joins 4 for the validity word. The rows are
    /// counted (64-bit) before the output is allocated (the partitioned joins count inside
    /// their match and refuse before the pairs take memory); only the left rows a semi, anti
    /// or left outer join keeps (one 4-byte id per row, at most the left side) are selected
    /// before the check. An output over the budget is [`crate::Error::OutputOverBudget`].
    /// Working memory (hash tables, sorted or partitioned copies, match counts) is not
    /// counted.
    ///
    /// The chunked joins ([`crate::join_columns_chunked`], [`crate::join_rows_chunked`]) need
    /// a budget and yield the output in pieces that each fit it.
    pub memory_budget: Option<u64>,
    /// Let the partitioned joins (PHJ-OM, PHJ-UM) join 8-byte keys as their low 32 bits when
    /// the keys of both sides lie within a range of at most 2^32 values, which makes the
    /// result exact ([`crate::CoPartitionJoin::narrow_keys`]; [`crate::JoinStats::narrowed_keys`]
    /// says whether it happened). On by default; off keeps the keys' width (to measure it).
    /// The distributed joins read it too: they narrow every rank's keys before the shuffle.
    /// Not taken by a PHJ-OM `join_columns` whose match does not write the payloads itself
    /// (anything but an inner join with one `u32`/`u64` payload column a side, or two of one
    /// of those types): its payload columns are partitioned after the match with the keys.
    pub narrow_keys: bool,
    /// `Some(low_bits)`: every `u32` payload column holds packed ids `high << low_bits | low`
    /// ([`joinkit_cuda::Backend::unpack_ids`]), and the output gives each as a `u64` column
    /// `high << 32 | low`. Why: ids that name a rank and a row travel through the distributed
    /// joins' shuffle and partitions 4 bytes wide and come out 8 wide; PHJ-OM's match writes
    /// them widened where it writes the payloads itself (one `u32` column a side), saving a
    /// pass over the output, and other algorithms widen after the join.
    /// [`JoinOptions::memory_budget`] counts such a column 8 bytes a row. Taken by
    /// [`crate::join_columns`], [`crate::ProbeTable::probe_columns`] and
    /// [`crate::PartitionedProbe::probe_columns`]; [`crate::join_columns_chunked`], the streamed
    /// and hybrid joins and [`crate::join_sequence`] refuse it ([`crate::Error::InvalidArgument`]),
    /// as do the joins that take it for a `low_bits` above 32. Outputs of row ids
    /// ([`crate::join_rows`], [`crate::join_rows_chunked`], [`crate::ProbeTable::probe_rows`])
    /// have no payload columns: it does not apply to them.
    pub unpack_ids: Option<u32>,
}

impl JoinOptions {
    /// An inner join with automatic algorithm choice and no uniqueness promise.
    pub fn new(kind: JoinKind) -> Self {
        Self {
            kind,
            algorithm: Algorithm::Auto,
            right_unique: false,
            memory_budget: None,
            narrow_keys: true,
            unpack_ids: None,
        }
    }

    /// With the given algorithm.
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.algorithm = algorithm;
        self
    }

    /// Promising (and checking) unique right keys.
    pub fn right_unique(mut self, unique: bool) -> Self {
        self.right_unique = unique;
        self
    }

    /// With a budget of `bytes` for the output buffers (see [`JoinOptions::memory_budget`]).
    pub fn memory_budget(mut self, bytes: u64) -> Self {
        self.memory_budget = Some(bytes);
        self
    }

    /// Allowing 8-byte keys to be narrowed or not (see [`JoinOptions::narrow_keys`]).
    pub fn narrow_keys(mut self, narrow: bool) -> Self {
        self.narrow_keys = narrow;
        self
    }

    /// With `u32` payloads widened from packed ids (see [`JoinOptions::unpack_ids`]), or not.
    pub fn unpack_ids(mut self, low_bits: Option<u32>) -> Self {
        self.unpack_ids = low_bits;
        self
    }

    /// Refuses [`JoinOptions::unpack_ids`] in a join that does not take it (`join`: its name).
    pub(crate) fn refuse_unpack_ids(&self, join: &str) -> crate::Result<()> {
        match self.unpack_ids {
            Some(_) => Err(crate::Error::InvalidArgument(format!(
                "{join} does not take JoinOptions::unpack_ids"
            ))),
            None => Ok(()),
        }
    }

    /// Checks [`JoinOptions::unpack_ids`]' low bits.
    pub(crate) fn check_unpack_ids(&self) -> crate::Result<()> {
        self.unpack_ids
            .map_or(Ok(()), joinkit_cuda::check_unpack_low_bits)
    }
}
