//! Table kinds, probing policies and sizing: how many slots a table gets for a build side.

use joinkit_cuda::{Error, Result};

/// The largest build side a table takes: row ids are `u32` and `u32::MAX` marks an empty slot
/// or the end of a chain.
pub const MAX_BUILD_ROWS: usize = u32::MAX as usize - 1;

/// The largest probe side one probe call takes (probe row ids are `u32`).
pub const MAX_PROBE_ROWS: usize = u32::MAX as usize;

/// The most slots (or buckets) a table can have: home slots come from a 32-bit hash, and probe
/// lengths are counted in 32 bits.
pub const MAX_CAPACITY: usize = u32::MAX as usize;

/// Hash seed tables use unless configured otherwise.
pub const DEFAULT_SEED: u32 = 0x6a6f_696e;

/// `find` writes this for a probe row without a match.
pub const NOT_FOUND: u32 = u32::MAX;

/// The structure of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TableKind {
    /// Open addressing with (key, build row) slots, for unique build keys (a primary key):
    /// one 8-byte word per slot for 4-byte keys (one 64-bit CAS inserts), two words for
    /// 8-byte keys. A duplicate build key is [`Error::DuplicateKey`]. The key equal to the
    /// empty sentinel (`K::MAX`) is kept in one extra slot. Probes do not read the build keys.
    KeyValue,
    /// Open addressing with (32-bit hash, build row) slots in one 8-byte word, any number of
    /// equal keys (M:N joins) and keys of any width; a probe re-checks the key against the build
    /// key column.
    HashRow,
    /// Lock-free chaining (Thostrup et al., SIGMOD'23, §4.2): a bucket-head array and a dense
    /// chain array with one entry per build row; insert is one atomic exchange on the head,
    /// probes use no atomics and re-check keys against the build key column.
    Chained,
}

/// How an open-addressing probe sequence steps through the slots (ignored by
/// [`TableKind::Chained`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Probing {
    /// Step 1 from the home slot (best locality).
    #[default]
    Linear,
    /// Step from a second hash of the key, in `1..capacity`; the capacity is rounded up to a
    /// prime so that every sequence visits every slot.
    Double,
}

/// The order in which the CUDA build inserts an open-addressing table's keys.
///
/// Inserting in input order sends each key to a random slot: on a table larger than the L2
/// cache every insert is a random read-modify-write of DRAM, which bounds the build near the
/// device's random-write rate. Clustering first hash-partitions (key, row) pairs by the top
/// bits of the key's hash, the bits that pick its home slot, so that the inserts in flight at
/// any moment fall in one L2-sized region of the table, which then streams to DRAM once.
/// It costs a hash-partition pass and, during the build, 8 bytes (12 for 8-byte keys) of
/// device memory per build row. Probes answer the same either way: only which of two
/// colliding keys takes the earlier slot changes, and concurrent inserts never fixed that.
/// [`TableKind::Chained`] and the CPU build insert in input order whatever is asked: a chain
/// link is written per row, so clustering would only move its randomness there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum BuildOrder {
    /// [`BuildOrder::Clustered`] when the table's slots take at least four times the device's
    /// L2 cache (where it measured faster) and the device has room for the keys' copy, else
    /// [`BuildOrder::Input`].
    #[default]
    Auto,
    /// Keys inserted as they come.
    Input,
    /// Keys hash-partitioned by home-slot region before they are inserted.
    Clustered,
}

/// How to build a table: kind, probing, size, hash seed and insert order.
///
/// ```
/// use joinkit_hashtable::{Probing, TableConfig, TableKind};
/// let c = TableConfig::hash_row().probing(Probing::Double).load_factor(0.7);
/// assert_eq!(c.kind(), TableKind::HashRow);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TableConfig {
    kind: TableKind,
    probing: Probing,
    load_factor: f64,
    capacity: Option<usize>,
    seed: u32,
    order: BuildOrder,
    keep_first_duplicate: bool,
}

impl TableConfig {
    /// A table of `kind` with linear probing and the default load factor: 0.5 for open
    /// addressing (slots = rows / 0.5), 1.0 for chaining (buckets = rows).
    pub fn new(kind: TableKind) -> Self {
        Self {
            kind,
            probing: Probing::Linear,
            load_factor: if kind == TableKind::Chained { 1.0 } else { 0.5 },
            capacity: None,
            seed: DEFAULT_SEED,
            order: BuildOrder::Auto,
            keep_first_duplicate: false,
        }
    }

    /// [`TableKind::KeyValue`] (unique keys).
    pub fn key_value() -> Self {
        Self::new(TableKind::KeyValue)
    }

    /// [`TableKind::HashRow`] (duplicate keys allowed).
    pub fn hash_row() -> Self {
        Self::new(TableKind::HashRow)
    }

    /// [`TableKind::Chained`].
    pub fn chained() -> Self {
        Self::new(TableKind::Chained)
    }

    /// Sets the probing policy.
    pub fn probing(mut self, probing: Probing) -> Self {
        self.probing = probing;
        self
    }

    /// Sets the load factor: build rows per slot, in `(0, 1]` for open addressing; rows per
    /// bucket, any positive value, for chaining. Checked when the table is built.
    pub fn load_factor(mut self, load_factor: f64) -> Self {
        self.load_factor = load_factor;
        self
    }

    /// Fixes the number of slots (buckets for chaining) instead of deriving it from the load
    /// factor (rounded up to a prime for [`Probing::Double`]). A build side with more rows than
    /// slots fails with [`Error::TableFull`].
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = Some(capacity);
        self
    }

    /// Sets the hash seed.
    pub fn seed(mut self, seed: u32) -> Self {
        self.seed = seed;
        self
    }

    /// Sets the insert order of the CUDA build (see [`BuildOrder`]).
    pub fn build_order(mut self, order: BuildOrder) -> Self {
        self.order = order;
        self
    }

    /// Key-value tables: a key inserted again is dropped instead of failing the build with
    /// [`Error::DuplicateKey`], so the table holds one slot per distinct key with one of its
    /// rows (whichever inserted first). For semi and anti joins, which ask only whether a key
    /// is there: probes never walk runs of equal keys. Counts and retrieves see one row a key.
    pub fn keep_first_duplicate(mut self) -> Self {
        self.keep_first_duplicate = true;
        self
    }

    /// Whether a key-value table drops keys inserted again
    /// ([`TableConfig::keep_first_duplicate`]).
    pub fn keeps_first_duplicate(&self) -> bool {
        self.keep_first_duplicate
    }

    /// The insert order of the CUDA build.
    pub fn build_order_policy(&self) -> BuildOrder {
        self.order
    }

    /// The table kind.
    pub fn kind(&self) -> TableKind {
        self.kind
    }

    /// The probing policy (meaningless for chaining).
    pub fn probing_policy(&self) -> Probing {
        self.probing
    }

    /// The hash seed.
    pub fn hash_seed(&self) -> u32 {
        self.seed
    }

    /// Slots (buckets) a build side of `rows` rows gets.
    ///
    /// # Errors
    /// [`Error::SizeOverflow`] for more than [`MAX_BUILD_ROWS`] rows or a capacity above
    /// [`MAX_CAPACITY`]; [`Error::InvalidArgument`] for a load factor out of range or a zero
    /// capacity; [`Error::TableFull`] when an open-addressing table cannot hold `rows` rows.
    pub fn capacity_for(&self, rows: usize) -> Result<usize> {
        if rows > MAX_BUILD_ROWS {
            return Err(Error::SizeOverflow("build side over 2^32 - 2 rows"));
        }
        let open = self.kind != TableKind::Chained;
        let lf = self.load_factor;
        let lf_ok = lf.is_finite() && lf > 0.0 && (!open || lf <= 1.0);
        if !lf_ok {
            return Err(Error::InvalidArgument(format!(
                "load factor {lf} outside {}",
                if open { "(0, 1]" } else { "(0, inf)" }
            )));
        }
        let mut capacity = match self.capacity {
            Some(0) => {
                return Err(Error::InvalidArgument("table capacity 0".into()));
            }
            Some(c) => c,
            None => {
                let c = (rows as f64 / lf).ceil();
                if c >= MAX_CAPACITY as f64 * 2.0 {
                    return Err(Error::SizeOverflow("table capacity above 2^32 - 1 slots"));
                }
                (c as usize).max(1)
            }
        };
        if capacity > MAX_CAPACITY {
            return Err(Error::SizeOverflow("table capacity above 2^32 - 1 slots"));
        }
        if open && self.probing == Probing::Double {
            capacity = next_prime(capacity);
        }
        if capacity > MAX_CAPACITY {
            return Err(Error::SizeOverflow("table capacity above 2^32 - 1 slots"));
        }
        // The (key, row) layout keeps the sentinel-valued key in one extra slot.
        let room = capacity + usize::from(self.kind == TableKind::KeyValue);
        if open && rows > room {
            return Err(Error::TableFull { capacity, rows });
        }
        Ok(capacity)
    }
}

/// The smallest prime `>= n` (1 and 2 stay as they are: every sequence covers them).
pub(crate) fn next_prime(n: usize) -> usize {
    // `%` rather than `is_multiple_of`, which is newer than the workspace's rust-version.
    #[allow(clippy::manual_is_multiple_of)]
    fn is_prime(n: usize) -> bool {
        if n < 4 {
            return n >= 2;
        }
        if n % 2 == 0 || n % 3 == 0 {
            return false;
        }
        let mut d = 5;
        while d * d <= n {
            if n % d == 0 || n % (d + 2) == 0 {
                return false;
            }
            d += 6;
        }
        true
    }
    if n <= 2 {
        return n.max(1);
    }
    let mut c = n;
    while !is_prime(c) {
        c += 1;
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primes() {
        assert_eq!(next_prime(0), 1);
        assert_eq!(next_prime(2), 2);
        assert_eq!(next_prime(4), 5);
        assert_eq!(next_prime(24), 29);
        assert_eq!(next_prime(4_294_967_290), 4_294_967_291);
    }

    #[test]
    fn sizing() {
        assert_eq!(TableConfig::key_value().capacity_for(100).unwrap(), 200);
        assert_eq!(TableConfig::key_value().capacity_for(0).unwrap(), 1);
        assert_eq!(TableConfig::chained().capacity_for(100).unwrap(), 100);
        let full = TableConfig::hash_row().capacity(10).capacity_for(11);
        assert_eq!(
            full,
            Err(Error::TableFull {
                capacity: 10,
                rows: 11
            })
        );
        assert!(
            TableConfig::key_value()
                .capacity(10)
                .capacity_for(11)
                .is_ok()
        );
        assert!(matches!(
            TableConfig::key_value().load_factor(1.5).capacity_for(1),
            Err(Error::InvalidArgument(_))
        ));
        assert!(
            TableConfig::chained()
                .load_factor(4.0)
                .capacity_for(100)
                .is_ok()
        );
    }
}
