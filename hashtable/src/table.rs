//! The table type, the match counts of a probe, and the [`HashTables`] operations trait.

use joinkit_cuda::{Backend, Buffer, Error, Key, Result};

use crate::config::{BuildOrder, MAX_PROBE_ROWS, Probing, TableConfig, TableKind};

/// Probe rows per tile: match counts are summed per tile so that retrieve places matches by
/// (tile offset + in-tile prefix) without a per-row offset array. The CUDA kernels use the same
/// tile (256 threads x 4 rows).
pub const TILE_ROWS: usize = 1024;

/// Where a table's entries live.
pub(crate) enum Storage<B: Backend> {
    /// Open addressing: slot words (see [`TableKind`] for the layouts).
    Open(B::Buf<u64>),
    /// Chaining: bucket heads and the chain (one `next` per build row).
    Chained {
        heads: B::Buf<u32>,
        next: B::Buf<u32>,
    },
}

/// A built hash table over a build key column, which it borrows: [`TableKind::HashRow`] and
/// [`TableKind::Chained`] probes re-check keys against it, and the build row ids it returns
/// index it (and any payload column of the build side).
pub struct HashTable<'k, B: Backend, K: Key> {
    pub(crate) storage: Storage<B>,
    pub(crate) keys: &'k B::Buf<K>,
    pub(crate) kind: TableKind,
    pub(crate) probing: Probing,
    pub(crate) capacity: usize,
    pub(crate) seed: u32,
    pub(crate) max_probe: u32,
    pub(crate) order: BuildOrder,
}

impl<B: Backend, K: Key> HashTable<'_, B, K> {
    /// The table kind.
    pub fn kind(&self) -> TableKind {
        self.kind
    }

    /// The probing policy (meaningless for [`TableKind::Chained`]).
    pub fn probing(&self) -> Probing {
        self.probing
    }

    /// Slots (buckets for chaining), not counting the sentinel-key slot.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Build rows.
    pub fn rows(&self) -> usize {
        self.keys.len()
    }

    /// Build rows per slot (bucket).
    pub fn load_factor(&self) -> f64 {
        self.rows() as f64 / self.capacity as f64
    }

    /// The hash seed.
    pub fn seed(&self) -> u32 {
        self.seed
    }

    /// The insert order the build used: [`BuildOrder::Input`] or [`BuildOrder::Clustered`]
    /// (what [`BuildOrder::Auto`] resolved to; always input order for chaining and on the CPU).
    pub fn build_order(&self) -> BuildOrder {
        self.order
    }

    /// The longest probe sequence (in slots) an insert used; probes look no further (the
    /// sentinel-valued key's own slot counts as one step). 0 for chaining.
    pub fn max_probe(&self) -> u32 {
        self.max_probe
    }

    /// The build key column.
    pub fn build_keys(&self) -> &B::Buf<K> {
        self.keys
    }

    /// Bytes of table memory (slots, or heads and chain), not counting the build keys.
    pub fn table_bytes(&self) -> usize {
        match &self.storage {
            Storage::Open(s) => s.len() * 8,
            Storage::Chained { heads, next } => (heads.len() + next.len()) * 4,
        }
    }
}

impl<B: Backend, K: Key> std::fmt::Debug for HashTable<'_, B, K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HashTable")
            .field("kind", &self.kind)
            .field("probing", &self.probing)
            .field("key", &K::NAME)
            .field("rows", &self.rows())
            .field("capacity", &self.capacity)
            .field("max_probe", &self.max_probe)
            .finish()
    }
}

/// What [`HashTables::probe_count`] found: matches per probe row, per tile, and in all. The
/// retrieve calls use it to place each pair; pass them the same table and probe column.
pub struct Matches<B: Backend> {
    pub(crate) counts: B::Buf<u32>,
    /// Exclusive prefix sum of per-tile match counts, `tiles + 1` entries (the last is the
    /// total).
    pub(crate) tile_offsets: B::Buf<u64>,
    pub(crate) total: u64,
}

impl<B: Backend> Matches<B> {
    /// Matches in all: the number of (probe row, build row) pairs a retrieve writes.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// Matches of each probe row.
    pub fn counts(&self) -> &B::Buf<u32> {
        &self.counts
    }

    /// Probe rows counted.
    pub fn probe_rows(&self) -> usize {
        self.counts.len()
    }
}

impl<B: Backend> std::fmt::Debug for Matches<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Matches")
            .field("probe_rows", &self.probe_rows())
            .field("total", &self.total)
            .finish()
    }
}

/// Hash-table operations, implemented by `CpuBackend` (rayon with atomics) and `CudaBackend`
/// with the same outputs and errors.
///
/// Output order of a retrieve: pairs grouped by probe row in ascending probe-row order; the
/// build rows of one probe row in the table's probe order (which depends on how concurrent
/// inserts landed, so compare those as sets across backends). A table and its retrieves are
/// deterministic among themselves: chunked and unchunked retrieves give the same sequence.
pub trait HashTables: Backend {
    /// Builds a table over `keys` (build row `i` is `keys[i]`).
    ///
    /// # Errors
    /// As [`TableConfig::capacity_for`]; [`Error::TableFull`] when the distinct keys do not fit
    /// (an explicit capacity too small); [`Error::DuplicateKey`] for a [`TableKind::KeyValue`]
    /// table over duplicate keys; allocation and driver errors.
    fn build_table<'k, K: Key>(
        &self,
        keys: &'k Self::Buf<K>,
        config: &TableConfig,
    ) -> Result<HashTable<'k, Self, K>>;

    /// Counts the matches of every probe row (step one of count, allocate, retrieve).
    ///
    /// # Errors
    /// [`Error::SizeOverflow`] for more than [`MAX_PROBE_ROWS`] probe rows; allocation and
    /// driver errors.
    fn probe_count<K: Key>(
        &self,
        table: &HashTable<'_, Self, K>,
        probe: &Self::Buf<K>,
    ) -> Result<Matches<Self>>;

    /// Writes the pairs at output positions `cursor..cursor + n` into `out_probe[..n]` and
    /// `out_build[..n]` with `n = min(matches.total() - cursor, out_probe.len())`, and returns
    /// `n`: call again with `cursor + n` until the cursor reaches the total, for outputs larger
    /// than one buffer. Never writes more matches for a row than `matches` counted.
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when the output columns differ in length or `probe` is not the
    /// column `matches` counted; [`Error::IndexOutOfRange`] for a cursor past the total;
    /// driver errors.
    fn probe_retrieve_chunk<K: Key>(
        &self,
        table: &HashTable<'_, Self, K>,
        probe: &Self::Buf<K>,
        matches: &Matches<Self>,
        cursor: u64,
        out_probe: &mut Self::Buf<u32>,
        out_build: &mut Self::Buf<u32>,
    ) -> Result<u64>;

    /// For each probe row: 1 when its key is in the table, else 0 (semi and anti joins).
    ///
    /// # Errors
    /// [`Error::SizeOverflow`] for more than [`MAX_PROBE_ROWS`] probe rows; allocation and
    /// driver errors.
    fn contains<K: Key>(
        &self,
        table: &HashTable<'_, Self, K>,
        probe: &Self::Buf<K>,
    ) -> Result<Self::Buf<u32>>;

    /// For each probe row: a build row with its key, or [`crate::NOT_FOUND`]. With unique build
    /// keys this is the one match; with duplicates, the first in probe order.
    ///
    /// # Errors
    /// As [`HashTables::contains`].
    fn find<K: Key>(
        &self,
        table: &HashTable<'_, Self, K>,
        probe: &Self::Buf<K>,
    ) -> Result<Self::Buf<u32>>;

    /// Sets `build_flags[b] = 1` for every build row `b` that some probe row matches, leaving
    /// the others as they are: clear the flags once, then call for each probe chunk (semi, anti
    /// and outer joins on the build side).
    ///
    /// # Errors
    /// [`Error::LengthMismatch`] when `build_flags` does not have one entry per build row;
    /// [`Error::SizeOverflow`] for more than [`MAX_PROBE_ROWS`] probe rows; driver errors.
    fn mark_matched<K: Key>(
        &self,
        table: &HashTable<'_, Self, K>,
        probe: &Self::Buf<K>,
        build_flags: &mut Self::Buf<u32>,
    ) -> Result<()>;

    /// Writes all pairs into `out_probe[..total]` and `out_build[..total]` and returns the
    /// total (step three of count, allocate, retrieve).
    ///
    /// # Errors
    /// [`Error::OutputTooLarge`] when the outputs are shorter than the total; as
    /// [`HashTables::probe_retrieve_chunk`].
    fn probe_retrieve<K: Key>(
        &self,
        table: &HashTable<'_, Self, K>,
        probe: &Self::Buf<K>,
        matches: &Matches<Self>,
        out_probe: &mut Self::Buf<u32>,
        out_build: &mut Self::Buf<u32>,
    ) -> Result<u64> {
        Error::check_len(
            "retrieve outputs (probe vs build rows)",
            out_probe.len(),
            out_build.len(),
        )?;
        if (out_probe.len() as u64) < matches.total {
            return Err(Error::OutputTooLarge {
                needed: matches.total,
                capacity: out_probe.len() as u64,
            });
        }
        self.probe_retrieve_chunk(table, probe, matches, 0, out_probe, out_build)
    }

    /// Count, allocate, retrieve: all matching (probe row, build row) pairs as two columns.
    ///
    /// # Errors
    /// [`Error::SizeOverflow`] when the total does not fit `usize`; as
    /// [`HashTables::probe_count`] and [`HashTables::probe_retrieve`].
    fn probe_pairs<K: Key>(
        &self,
        table: &HashTable<'_, Self, K>,
        probe: &Self::Buf<K>,
    ) -> Result<(Self::Buf<u32>, Self::Buf<u32>)> {
        let matches = self.probe_count(table, probe)?;
        let n = usize::try_from(matches.total)
            .map_err(|_| Error::SizeOverflow("join output larger than usize"))?;
        let mut out_probe = self.alloc::<u32>(n)?;
        let mut out_build = self.alloc::<u32>(n)?;
        self.probe_retrieve(table, probe, &matches, &mut out_probe, &mut out_build)?;
        Ok((out_probe, out_build))
    }
}

/// Shared argument checks of the probe operations (both backends, same errors).
pub(crate) fn check_probe_rows(n: usize) -> Result<()> {
    if n > MAX_PROBE_ROWS {
        Err(Error::SizeOverflow("probe side over 2^32 rows"))
    } else {
        Ok(())
    }
}

/// Checks a chunked retrieve's arguments; returns the number of pairs it writes.
pub(crate) fn check_retrieve(
    probe_rows: usize,
    matches_rows: usize,
    total: u64,
    cursor: u64,
    out_probe: usize,
    out_build: usize,
) -> Result<u64> {
    Error::check_len(
        "retrieve outputs (probe vs build rows)",
        out_probe,
        out_build,
    )?;
    Error::check_len(
        "probe column vs the column counted",
        probe_rows,
        matches_rows,
    )?;
    if cursor > total {
        return Err(Error::IndexOutOfRange {
            what: "retrieve cursor (output position)",
            index: cursor,
            len: usize::try_from(total).unwrap_or(usize::MAX),
        });
    }
    Ok((total - cursor).min(out_probe as u64))
}

/// Number of probe tiles for `n` rows.
pub(crate) fn tiles(n: usize) -> usize {
    n.div_ceil(TILE_ROWS)
}
