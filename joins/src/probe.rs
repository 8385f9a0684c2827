//! A hash table on a right side, built once and probed by any number of left chunks: the
//! "unbounded probe side" of Thostrup et al. (SIGMOD'23), which the streamed join (left rows
//! arriving from host memory) and the pipelined distributed join (left rows arriving from
//! the network) are built on.
//!
//! Every join kind decides each left row from that row and the whole right side alone, so a
//! left side cut into chunks and probed chunk by chunk gives, concatenated, the join of the
//! whole left side (as a multiset; left row ids are the chunk's own).

use joinkit_cuda::{Backend, Buffer, Column, Error, Key, Result};
use joinkit_hashtable::HashTable;

use crate::chunk::Budget;
use crate::copart::Pieces;
use crate::join::{
    Phases, assemble_rows, begin_join, build_right_table, check_rows, hash_join_algorithm,
    materialize, stats, table_match, unpack_ids,
};
use crate::phj::{Layout, OmShape, OmSide, om_left, om_match, om_right};
use crate::{
    Algorithm, JoinBackend, JoinKind, JoinOptions, JoinStats, Materialized, RowPairs, Table,
};

/// A hash table on a right table's keys (NPHJ-open or NPHJ-chained, as
/// [`JoinOptions::algorithm`] says; [`Algorithm::Auto`] builds NPHJ-open), kept on the backend
/// and probed by left chunks with [`ProbeTable::probe_rows`] or [`ProbeTable::probe_columns`].
///
/// ```
/// use joinkit::{JoinKind, JoinOptions, ProbeTable, Table};
/// use joinkit_cuda::{Backend, Column, CpuBackend};
/// let cpu = CpuBackend::new();
/// let right = Table::new(cpu.upload(&[1u32, 5, 3])?, vec![Column::U32(cpu.upload(&[10, 50, 30])?)])?;
/// let table = ProbeTable::build(&cpu, &right, &JoinOptions::new(JoinKind::Inner))?;
/// // Two chunks of a left side that never needs to be whole anywhere.
/// let mut total = 0;
/// for chunk in [[3u32, 1], [4, 1]] {
///     let left = Table::new(cpu.upload(&chunk)?, vec![])?;
///     let (out, _) = table.probe_columns(&left)?;
///     total += out.rows;
/// }
/// assert_eq!(total, 3);
/// # Ok::<(), joinkit::Error>(())
/// ```
pub struct ProbeTable<'r, B: JoinBackend, K: Key> {
    backend: B,
    right: &'r Table<B, K>,
    table: HashTable<'r, B, K>,
    opts: JoinOptions,
    algorithm: Algorithm,
    build: JoinStats,
}

impl<'r, B: JoinBackend, K: Key> ProbeTable<'r, B, K> {
    /// Builds the table on `right`'s keys with `opts` (its kind decides the table's layout:
    /// one slot a distinct key for semi and anti joins).
    ///
    /// # Errors
    /// [`joinkit_cuda::Error::InvalidArgument`] for an algorithm other than NPHJ-open,
    /// NPHJ-chained or auto, or [`JoinOptions::unpack_ids`] of more than 32 low bits;
    /// [`joinkit_cuda::Error::DuplicateKey`] when `right_unique` was promised and broken;
    /// [`joinkit_cuda::Error::SizeOverflow`] for a right side of 2^32 - 1 rows or more;
    /// [`joinkit_cuda::Error::LengthMismatch`] for a payload of another length than the keys;
    /// allocation and driver errors.
    pub fn build(b: &B, right: &'r Table<B, K>, opts: &JoinOptions) -> Result<Self> {
        let (algorithm, chained) = hash_join_algorithm(opts, "a probe table")?;
        opts.check_unpack_ids()?;
        right.check()?;
        check_rows(right.len())?;
        begin_join(b)?;
        let mut ph = Phases::new(b);
        let table = build_right_table(b, &mut ph, &right.keys, opts, chained)?;
        let build = stats(b, algorithm, opts, 0, right.len(), 0, &ph);
        Ok(Self {
            backend: b.clone(),
            right,
            table,
            opts: *opts,
            algorithm,
            build,
        })
    }

    /// The build's statistics: its `transform` phase, the right rows, peak memory so far.
    pub fn build_stats(&self) -> &JoinStats {
        &self.build
    }

    /// The right table the probes join with.
    pub fn right(&self) -> &'r Table<B, K> {
        self.right
    }

    /// The options the table was built with.
    pub fn options(&self) -> &JoinOptions {
        &self.opts
    }

    /// The join of `left_keys` with the right side as row ids: left ids are rows of
    /// `left_keys`, right ids rows of the right table; the output's order and budget are
    /// [`crate::join_rows`]'s.
    ///
    /// # Errors
    /// [`joinkit_cuda::Error::OutputOverBudget`] when this chunk's output would pass
    /// [`JoinOptions::memory_budget`] (probe smaller chunks);
    /// [`joinkit_cuda::Error::SizeOverflow`] for a chunk of 2^32 - 1 rows or more;
    /// allocation and driver errors.
    pub fn probe_rows(&self, left_keys: &B::Buf<K>) -> Result<(RowPairs<B>, JoinStats)> {
        let b = &self.backend;
        check_rows(left_keys.len())?;
        let mut ph = Phases::new(b);
        let m = table_match(
            b,
            &mut ph,
            &self.table,
            left_keys,
            &self.opts,
            &Budget::rows(&self.opts),
        )?;
        let rows = ph.run("materialize", || assemble_rows(b, self.opts.kind, m))?;
        let n = rows.left.len() as u64;
        Ok((rows, self.probe_stats(left_keys.len(), n, &ph)))
    }

    /// The join of the `left` chunk with the right side as payload columns, as
    /// [`crate::join_columns`] gives them for a non-partitioned hash join.
    ///
    /// # Errors
    /// As [`ProbeTable::probe_rows`]; [`joinkit_cuda::Error::LengthMismatch`] for a payload of
    /// another length than the chunk's keys.
    pub fn probe_columns(&self, left: &Table<B, K>) -> Result<(Materialized<B>, JoinStats)> {
        let b = &self.backend;
        left.check()?;
        check_rows(left.len())?;
        let mut ph = Phases::new(b);
        let budget = Budget::columns(&self.opts, &left.payloads, &self.right.payloads);
        let m = table_match(b, &mut ph, &self.table, &left.keys, &self.opts, &budget)?;
        let out = materialize(b, &mut ph, self.algorithm, &self.opts, left, self.right, &m)?;
        let out = unpack_ids(b, &mut ph, &self.opts, out)?;
        let n = out.rows;
        Ok((out, self.probe_stats(left.len(), n, &ph)))
    }

    /// One probe's statistics (peak memory: the most held since the build began).
    fn probe_stats(&self, left_rows: usize, output_rows: u64, ph: &Phases<'_, B>) -> JoinStats {
        let b = &self.backend;
        let opts = &self.opts;
        stats(
            b,
            self.algorithm,
            opts,
            left_rows,
            self.right.len(),
            output_rows,
            ph,
        )
    }
}

impl<B: JoinBackend + Backend, K: Key> std::fmt::Debug for ProbeTable<'_, B, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeTable")
            .field("algorithm", &self.algorithm)
            .field("kind", &self.opts.kind)
            .field("right_rows", &self.right.len())
            .finish()
    }
}

/// A right side partitioned once as PHJ-OM partitions it (radix partition, build pieces cut),
/// probed by left chunks that are each partitioned alike and joined co-partition by
/// co-partition ([`PartitionedProbe::probe_columns`]). Where the right side is far larger than
/// the L2 cache, every probe of a [`ProbeTable`] is a miss; here each co-partition's build piece
/// is a small table in shared memory, as in the whole PHJ-OM join, and the right side's
/// partition is paid once, not once a chunk. The pipelined distributed join probes its chunks
/// with it.
///
/// Inner joins whose payloads the match writes itself ([`PartitionedProbe::supports`]: one
/// `u32` or `u64` payload column a side, two `u32` or two `u64`), the shape of row ids and of
/// narrow joins; other joins take a [`ProbeTable`] or [`crate::join_columns`] per chunk.
///
/// ```
/// use joinkit::{JoinKind, JoinOptions, PartitionedProbe, Table};
/// use joinkit_cuda::{Backend, Column, CpuBackend};
/// let cpu = CpuBackend::new();
/// let right = Table::new(cpu.upload(&[1u64, 5, 3])?, vec![Column::U64(cpu.upload(&[10, 50, 30])?)])?;
/// let opts = JoinOptions::new(JoinKind::Inner);
/// let probe = PartitionedProbe::build(&cpu, &right, &opts)?;
/// let mut total = 0;
/// for chunk in [[3u64, 1], [4, 1]] {
///     let left = Table::new(cpu.upload(&chunk)?, vec![Column::U64(cpu.upload(&[7, 8])?)])?;
///     let (out, _) = probe.probe_columns(&left)?;
///     total += out.rows;
/// }
/// assert_eq!(total, 3);
/// # Ok::<(), joinkit::Error>(())
/// ```
pub struct PartitionedProbe<'r, B: JoinBackend, K: Key> {
    backend: B,
    right: &'r Table<B, K>,
    opts: JoinOptions,
    shape: OmShape,
    side: OmSide<B, K>,
    pieces: Pieces<B>,
    build: JoinStats,
}

impl<'r, B: JoinBackend, K: Key> PartitionedProbe<'r, B, K> {
    /// Whether a join of `opts` between sides of these payload columns can be probed this way.
    pub fn supports(opts: &JoinOptions, left: &[Column<B>], right: &[Column<B>]) -> bool {
        opts.kind == JoinKind::Inner && Layout::carries_all(left) && Layout::carries_all(right)
    }

    /// Partitions `right` (keys and payloads) for probes with `opts`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a join other than an inner join, payloads the match does
    /// not carry ([`PartitionedProbe::supports`]) or [`JoinOptions::unpack_ids`] of more than
    /// 32 low bits; [`Error::SizeOverflow`] for a right
    /// side of 2^32 - 1 rows or more; [`Error::LengthMismatch`] for a payload of another
    /// length than the keys; allocation and driver errors.
    pub fn build(b: &B, right: &'r Table<B, K>, opts: &JoinOptions) -> Result<Self> {
        if opts.kind != JoinKind::Inner || !Layout::carries_all(&right.payloads) {
            return Err(unsupported());
        }
        opts.check_unpack_ids()?;
        right.check()?;
        check_rows(right.len())?;
        begin_join(b)?;
        let mut ph = Phases::new(b);
        let shape = OmShape::new::<B, K>(b, right.len(), false);
        let (side, pieces) = ph.run("transform", || {
            om_right(b, &shape, &right.keys, &right.payloads)
        })?;
        let build = stats(b, Algorithm::PhjOm, opts, 0, right.len(), 0, &ph);
        Ok(Self {
            backend: b.clone(),
            right,
            opts: *opts,
            shape,
            side,
            pieces,
            build,
        })
    }

    /// The build's statistics: its `transform` phase, the right rows, peak memory so far.
    pub fn build_stats(&self) -> &JoinStats {
        &self.build
    }

    /// The right table the probes join with.
    pub fn right(&self) -> &'r Table<B, K> {
        self.right
    }

    /// The join of the `left` chunk with the right side as payload columns, as
    /// [`crate::join_columns`] gives them (rows in no particular order).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for left payloads the match does not carry;
    /// [`Error::OutputOverBudget`] when this chunk's output would pass
    /// [`JoinOptions::memory_budget`]; [`Error::DuplicateKey`] when `right_unique` was promised
    /// and broken; [`Error::LengthMismatch`], [`Error::SizeOverflow`] as
    /// [`crate::join_columns`]; allocation and driver errors.
    pub fn probe_columns(&self, left: &Table<B, K>) -> Result<(Materialized<B>, JoinStats)> {
        let b = &self.backend;
        if !Layout::carries_all(&left.payloads) {
            return Err(unsupported());
        }
        left.check()?;
        check_rows(left.len())?;
        let mut ph = Phases::new(b);
        let budget = Budget::columns(&self.opts, &left.payloads, &self.right.payloads);
        let pl = ph.run("transform", || {
            om_left(b, &self.shape, &left.keys, &left.payloads, &self.side)
        })?;
        let (pairs, _) = ph.run("match", || {
            om_match(
                b,
                (&pl, &self.side, &self.pieces),
                true,
                &self.opts,
                &budget,
                left.len(),
            )
        })?;
        let (l, r) = pairs.ok_or_else(|| Error::Corrupt("an inner join without pairs".into()))?;
        let rows = l.first().map_or(0, |c| c.len() as u64);
        let out = Materialized {
            left: l,
            right: r,
            right_valid: None,
            rows,
        };
        let out = unpack_ids(b, &mut ph, &self.opts, out)?;
        let st = stats(
            b,
            Algorithm::PhjOm,
            &self.opts,
            left.len(),
            self.right.len(),
            rows,
            &ph,
        );
        Ok((out, st))
    }
}

fn unsupported() -> Error {
    Error::InvalidArgument(
        "a partitioned probe joins inner joins of one u32/u64 payload column a side, two u32 or \
         two u64 (PartitionedProbe::supports)"
            .into(),
    )
}

impl<B: JoinBackend + Backend, K: Key> std::fmt::Debug for PartitionedProbe<'_, B, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionedProbe")
            .field("radix_bits", &self.shape.bits)
            .field("right_rows", &self.right.len())
            .finish()
    }
}
