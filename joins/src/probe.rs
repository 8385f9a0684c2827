//! A hash table on a right side, built once and probed by any number of left chunks: the
//! "unbounded probe side" of Thostrup et al. (SIGMOD'23), which the streamed join (left rows
//! arriving from host memory) and the pipelined distributed join (left rows arriving from
//! the network) are built on.
//!
//! Every join kind decides each left row from that row and the whole right side alone, so a
//! left side cut into chunks and probed chunk by chunk gives, concatenated, the join of the
//! whole left side (as a multiset; left row ids are the chunk's own).

use joinkit_cuda::{Backend, Buffer, Key, Result};
use joinkit_hashtable::HashTable;

use crate::chunk::Budget;
use crate::join::{
    Phases, assemble_rows, begin_join, build_right_table, check_rows, hash_join_algorithm,
    materialize, stats, table_match,
};
use crate::{Algorithm, JoinBackend, JoinOptions, JoinStats, Materialized, RowPairs, Table};

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
    /// NPHJ-chained or auto; [`joinkit_cuda::Error::DuplicateKey`] when `right_unique` was
    /// promised and broken; [`joinkit_cuda::Error::SizeOverflow`] for a right side of 2^32 - 1
    /// rows or more; [`joinkit_cuda::Error::LengthMismatch`] for a payload of another length
    /// than the keys; allocation and driver errors.
    pub fn build(b: &B, right: &'r Table<B, K>, opts: &JoinOptions) -> Result<Self> {
        let (algorithm, chained) = hash_join_algorithm(opts, "a probe table")?;
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
