//! Sequences of joins (Wu et al., VLDB 2024, §5.2.7): a fact table joined with `k` dimension
//! tables, one inner PK-FK join after the other, in a given order.
//!
//! The intermediate result is a set of gather maps, not columns: the fact row of every output
//! row and, per dimension joined so far, its row. Join `i` needs the fact table's foreign-key
//! column `i` at the surviving fact rows; [`FkMaterialization::JustBefore`] gathers it by the
//! fact row map right before that join, so every earlier join that drops rows shrinks it
//! (Wu's late materialization). [`FkMaterialization::UpFront`] is the baseline that carries
//! every foreign key still needed as a column of the intermediate result from the start, each
//! join's output gathering all of them. After each join the maps compose through its left rows
//! (`map = map[pairs.left]`, every map in one multi-column gather) and the dimension's map is
//! its right rows. Payload columns are gathered once at the end, from the composed maps.

use std::fmt;

use joinkit_cuda::{Backend, Buffer, Column, Element, Error, Key, Result};
use joinkit_primitives::{Bounds, Gather};

use crate::join::{check_rows, gather_columns};
use crate::{Algorithm, JoinBackend, JoinKind, JoinOptions, JoinStats, Table, join_rows};

/// When a sequence of joins materializes each foreign-key column of the fact table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FkMaterialization {
    /// Gather each join's foreign keys by the surviving fact rows just before the join: only
    /// rows that passed every earlier join are gathered, each column once.
    #[default]
    JustBefore,
    /// The baseline: every foreign key is a column of the intermediate result from the start,
    /// so each join's output gathers every foreign-key column a later join needs.
    UpFront,
}

impl FkMaterialization {
    /// Both variants, for sweeps and tests.
    pub const ALL: [FkMaterialization; 2] =
        [FkMaterialization::JustBefore, FkMaterialization::UpFront];

    /// The short name used in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            FkMaterialization::JustBefore => "just-before",
            FkMaterialization::UpFront => "up-front",
        }
    }

    /// Parses a name as written by [`FkMaterialization::name`] (case-insensitive).
    pub fn from_name(name: &str) -> Option<FkMaterialization> {
        FkMaterialization::ALL
            .into_iter()
            .find(|f| f.name().eq_ignore_ascii_case(name.trim()))
    }
}

impl fmt::Display for FkMaterialization {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A key type a [`Column`] can hold, so that a fact table's foreign-key column can be joined
/// with a dimension's key column of type `Self`: `u32` ([`Column::U32`]) and `u64`
/// ([`Column::U64`]).
pub trait ColumnKey: Key {
    /// The keys inside `column` when it holds this type, else `None`.
    fn keys_of<B: Backend>(column: &Column<B>) -> Option<&B::Buf<Self>>;

    /// `keys` as a column.
    fn column<B: Backend>(keys: B::Buf<Self>) -> Column<B>;
}

macro_rules! column_key {
    ($t:ty, $variant:ident) => {
        impl ColumnKey for $t {
            fn keys_of<B: Backend>(column: &Column<B>) -> Option<&B::Buf<$t>> {
                match column {
                    Column::$variant(k) => Some(k),
                    _ => None,
                }
            }

            fn column<B: Backend>(keys: B::Buf<$t>) -> Column<B> {
                Column::$variant(keys)
            }
        }
    };
}
column_key!(u32, U32);
column_key!(u64, U64);

/// One join of a sequence: the fact table's foreign-key column and the dimension table whose
/// keys it references.
pub struct DimensionJoin<'a, B: Backend, K: Key> {
    /// Index of the foreign-key column among the fact table's columns.
    pub fk_column: usize,
    /// The dimension: its keys (a primary key when `right_unique` is promised) and payloads.
    pub table: &'a Table<B, K>,
}

impl<'a, B: Backend, K: Key> DimensionJoin<'a, B, K> {
    /// Joins fact column `fk_column` with `table`'s keys.
    pub fn new(fk_column: usize, table: &'a Table<B, K>) -> Self {
        Self { fk_column, table }
    }
}

/// Options of a sequence of joins.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceOptions {
    /// Options of every join: the algorithm, `right_unique` and `narrow_keys`; the kind must
    /// be [`JoinKind::Inner`].
    pub join: JoinOptions,
    /// When the foreign keys are materialized.
    pub fk: FkMaterialization,
    /// `None`: return the gather maps only. `Some(columns)`: also materialize these fact
    /// columns (by index, in this order) and every payload column of every dimension.
    pub materialize: Option<Vec<usize>>,
}

impl SequenceOptions {
    /// Inner joins with `algorithm`, dimension keys promised (and checked) unique, foreign keys
    /// materialized just before their joins, gather maps only.
    pub fn new(algorithm: Algorithm) -> Self {
        Self {
            join: JoinOptions::new(JoinKind::Inner)
                .algorithm(algorithm)
                .right_unique(true),
            fk: FkMaterialization::JustBefore,
            materialize: None,
        }
    }

    /// With the given foreign-key materialization.
    pub fn fk(mut self, fk: FkMaterialization) -> Self {
        self.fk = fk;
        self
    }

    /// Promising (and checking) unique dimension keys, or not (M:N joins compose the same way).
    pub fn right_unique(mut self, unique: bool) -> Self {
        self.join = self.join.right_unique(unique);
        self
    }

    /// Materializing the fact columns `fact_columns` (by index, in this order) and every
    /// dimension's payloads.
    pub fn materialize(mut self, fact_columns: impl IntoIterator<Item = usize>) -> Self {
        self.materialize = Some(fact_columns.into_iter().collect());
        self
    }
}

/// The output of a sequence of joins: gather maps, and payload columns when asked for.
pub struct SequenceOutput<B: Backend> {
    /// Fact row of each output row.
    pub fact_rows: B::Buf<u32>,
    /// Per dimension, in the order joined: its row of each output row.
    pub dimension_rows: Vec<B::Buf<u32>>,
    /// The fact columns asked for by [`SequenceOptions::materialize`], in that order (empty
    /// when not materialized).
    pub fact_payloads: Vec<Column<B>>,
    /// Per dimension, its payload columns of the output rows (empty when not materialized).
    pub dimension_payloads: Vec<Vec<Column<B>>>,
    /// Output rows.
    pub rows: u64,
}

/// Timings of one join of a sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceStep {
    /// The fact column joined.
    pub fk_column: usize,
    /// Milliseconds materializing foreign keys in this step: with
    /// [`FkMaterialization::JustBefore`] the gather of this join's foreign keys before it (none
    /// for the first join, which reads the fact column itself); with
    /// [`FkMaterialization::UpFront`] the gathers of every later join's foreign keys by this
    /// join's output.
    pub fk_ms: f64,
    /// The join of the foreign keys with the dimension's keys.
    pub join: JoinStats,
    /// Milliseconds composing the gather maps with the join's output.
    pub compose_ms: f64,
}

impl SequenceStep {
    /// Milliseconds of the whole step.
    pub fn total_ms(&self) -> f64 {
        self.fk_ms + self.join.total_ms() + self.compose_ms
    }
}

/// What a sequence of joins reports about itself.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceStats {
    /// When the foreign keys were materialized.
    pub fk: FkMaterialization,
    /// Fact rows.
    pub fact_rows: usize,
    /// One entry per join, in order.
    pub steps: Vec<SequenceStep>,
    /// Milliseconds gathering the payload columns at the end (0 for gather maps only).
    pub materialize_ms: f64,
    /// Output rows.
    pub output_rows: u64,
    /// Most device memory held at once during the sequence (bytes, the inputs included),
    /// where the backend counts it.
    pub peak_memory_bytes: Option<usize>,
}

impl SequenceStats {
    /// Milliseconds of the whole sequence.
    pub fn total_ms(&self) -> f64 {
        self.steps.iter().map(SequenceStep::total_ms).sum::<f64>() + self.materialize_ms
    }

    /// Milliseconds materializing foreign keys, over every step.
    pub fn fk_ms(&self) -> f64 {
        self.steps.iter().map(|s| s.fk_ms).sum()
    }

    /// Milliseconds in the joins themselves, over every step.
    pub fn join_ms(&self) -> f64 {
        self.steps.iter().map(|s| s.join.total_ms()).sum()
    }

    /// Milliseconds composing gather maps, over every step.
    pub fn compose_ms(&self) -> f64 {
        self.steps.iter().map(|s| s.compose_ms).sum()
    }

    /// The papers' throughput over every input: (|S| + Σ |R_i|) / time, in million tuples per
    /// second (|S| the fact rows, |R_i| the dimensions' rows).
    pub fn mtuples_per_s(&self) -> f64 {
        let dims: usize = self.steps.iter().map(|s| s.join.right_rows).sum();
        (self.fact_rows + dims) as f64 / (self.total_ms() * 1e-3) / 1e6
    }
}

impl fmt::Display for SequenceStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} fact rows ⋈ {} dimensions ({} foreign keys) -> {} rows in {:.3} ms (",
            self.fact_rows,
            self.steps.len(),
            self.fk,
            self.output_rows,
            self.total_ms()
        )?;
        for (i, s) in self.steps.iter().enumerate() {
            write!(
                f,
                "join {} {} {} -> {}: fk {:.3}, join {:.3}, compose {:.3}; ",
                i + 1,
                s.join.algorithm,
                s.join.left_rows,
                s.join.output_rows,
                s.fk_ms,
                s.join.total_ms(),
                s.compose_ms
            )?;
        }
        write!(f, "materialize {:.3})", self.materialize_ms)?;
        if let Some(peak) = self.peak_memory_bytes {
            write!(f, ", peak {:.1} MiB", peak as f64 / (1 << 20) as f64)?;
        }
        Ok(())
    }
}

/// The intermediate result: the fact row and each joined dimension's row of every output row.
struct Maps<B: Backend> {
    fact: B::Buf<u32>,
    dims: Vec<B::Buf<u32>>,
}

/// Every column of `srcs` (one length) gathered by `map`, reading the map once per group of
/// columns (the map's ids are valid by construction).
fn gather_all<B: Gather, T: Element>(
    b: &B,
    srcs: &[&B::Buf<T>],
    map: &B::Buf<u32>,
) -> Result<Vec<B::Buf<T>>> {
    if srcs.is_empty() {
        return Ok(Vec::new());
    }
    let mut outs = srcs
        .iter()
        .map(|_| b.alloc::<T>(map.len()))
        .collect::<Result<Vec<_>>>()?;
    let mut refs: Vec<&mut B::Buf<T>> = outs.iter_mut().collect();
    b.gather_columns_into(srcs, map, &mut refs, Bounds::Trust)?;
    Ok(outs)
}

/// The highest of two peak readings (`None` where the backend does not count).
fn higher(a: Option<usize>, c: Option<usize>) -> Option<usize> {
    a.max(c)
}

/// Checks a sequence's inputs before any work and returns each join's foreign-key column.
fn check<'c, B: Backend, K: ColumnKey>(
    fact: &'c [Column<B>],
    dims: &[DimensionJoin<'_, B, K>],
    opts: &SequenceOptions,
) -> Result<Vec<&'c B::Buf<K>>> {
    if opts.join.kind != JoinKind::Inner {
        return Err(Error::InvalidArgument(format!(
            "a sequence of joins runs inner joins, not {:?}",
            opts.join.kind
        )));
    }
    opts.join.refuse_unpack_ids("a sequence of joins")?;
    let rows = fact.first().map_or(0, Column::len);
    for c in fact {
        Error::check_len("fact columns", rows, c.len())?;
    }
    check_rows(rows)?;
    let column = |index: usize| {
        fact.get(index).ok_or(Error::IndexOutOfRange {
            what: "fact columns",
            index: index as u64,
            len: fact.len(),
        })
    };
    for &index in opts.materialize.iter().flatten() {
        column(index)?;
    }
    for d in dims {
        check_rows(d.table.len())?;
        d.table.check()?;
    }
    dims.iter()
        .map(|d| {
            let c = column(d.fk_column)?;
            K::keys_of(c).ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "foreign-key column {} is a {c:?}, the dimension keys are {}",
                    d.fk_column,
                    K::NAME
                ))
            })
        })
        .collect()
}

/// Joins the fact table `fact` (its columns, of one length, the foreign keys among them) with
/// every dimension of `dims` in order: inner joins of each foreign-key column with its
/// dimension's keys, as the module's docs describe. Returns the gather maps (and, with
/// [`SequenceOptions::materialize`], the payload columns) of the output rows, in an order that
/// depends on the algorithm: compare outputs as multisets. With no dimension, every fact row is
/// returned.
///
/// # Errors
/// [`Error::InvalidArgument`] for a join kind other than inner, [`JoinOptions::unpack_ids`], or
/// a foreign-key column that does not hold the dimension's key type `K`; [`Error::IndexOutOfRange`] for a foreign-key or
/// materialized column index past the fact columns; [`Error::LengthMismatch`] for fact columns
/// of different lengths, or a dimension payload of another length than its keys;
/// [`Error::SizeOverflow`] for a fact or dimension table of `2^32 - 1` rows or more;
/// [`Error::DuplicateKey`] (the `"right"` side) when `right_unique` was promised and a
/// dimension's keys repeat; allocation, driver and primitive errors. The errors about the
/// inputs' shapes and types are found before any work starts.
///
/// ```
/// use joinkit::{Algorithm, Backend, Column, CpuBackend, DimensionJoin, SequenceOptions, Table};
/// let cpu = CpuBackend::new();
/// let col = |v: &[u32]| Column::U32(cpu.upload(v).unwrap());
/// // A payload and two foreign-key columns.
/// let fact = [col(&[10, 11, 12, 13]), col(&[1, 2, 1, 9]), col(&[7, 7, 8, 7])];
/// let a = Table::new(cpu.upload(&[1u32, 2]).unwrap(), vec![col(&[100, 200])]).unwrap();
/// let c = Table::new(cpu.upload(&[7u32]).unwrap(), Vec::new()).unwrap();
/// let dims = [DimensionJoin::new(1, &a), DimensionJoin::new(2, &c)];
/// let opts = SequenceOptions::new(Algorithm::Auto).materialize([0]);
/// let (out, stats) = joinkit::join_sequence(&cpu, &fact, &dims, &opts).unwrap();
/// // Row 3's first key and row 2's second key match nothing.
/// let mut rows = cpu.download(&out.fact_rows).unwrap();
/// rows.sort();
/// assert_eq!(rows, [0, 1]);
/// assert_eq!((stats.steps[0].join.output_rows, stats.steps[1].join.left_rows), (3, 3));
/// assert_eq!(out.dimension_payloads[0].len(), 1);
/// ```
pub fn join_sequence<B: JoinBackend, K: ColumnKey>(
    b: &B,
    fact: &[Column<B>],
    dims: &[DimensionJoin<'_, B, K>],
    opts: &SequenceOptions,
) -> Result<(SequenceOutput<B>, SequenceStats)> {
    let fks = check(fact, dims, opts)?;
    let fact_rows = fact.first().map_or(0, Column::len);
    crate::join::begin_join(b)?;
    let mut peak = None;
    let mut maps: Option<Maps<B>> = None;
    // UpFront: each later join's foreign keys at the current output rows (`None` before the
    // first join: the fact column itself).
    let mut carried: Vec<Option<B::Buf<K>>> = dims.iter().map(|_| None).collect();
    let mut steps = Vec::with_capacity(dims.len());
    for (i, d) in dims.iter().enumerate() {
        let (gathered, fk_before_ms) = match (&maps, &carried[i]) {
            (Some(m), None) => {
                let (g, ms) = b.timed(|| b.gather(fks[i], &m.fact, Bounds::Trust))?;
                (Some(g), ms)
            }
            _ => (None, 0.0),
        };
        let fk = gathered.as_ref().or(carried[i].as_ref()).unwrap_or(fks[i]);
        // `join_rows` restarts the peak count: keep what was reached before it.
        peak = higher(peak, b.memory().map(|m| m.peak_bytes));
        let (pairs, join) = join_rows(b, fk, &d.table.keys, &opts.join)?;
        peak = higher(peak, join.peak_memory_bytes);
        drop(gathered);
        carried[i] = None;
        let right = pairs
            .right
            .ok_or_else(|| Error::Corrupt("an inner join returned no right rows".into()))?;
        let left = pairs.left;
        // UpFront: every later join's foreign keys follow this join's output rows.
        let fk_after_ms = match opts.fk {
            FkMaterialization::JustBefore => 0.0,
            FkMaterialization::UpFront => {
                let later = i + 1..dims.len();
                let srcs: Vec<&B::Buf<K>> = later
                    .clone()
                    .map(|j| carried[j].as_ref().unwrap_or(fks[j]))
                    .collect();
                let (outs, ms) = b.timed(|| gather_all(b, &srcs, &left))?;
                for (j, o) in later.zip(outs) {
                    carried[j] = Some(o);
                }
                ms
            }
        };
        let (composed, compose_ms) = b.timed(|| compose(b, maps.take(), left, right))?;
        maps = Some(composed);
        steps.push(SequenceStep {
            fk_column: d.fk_column,
            fk_ms: fk_before_ms + fk_after_ms,
            join,
            compose_ms,
        });
    }
    let maps = match maps {
        Some(m) => m,
        None => {
            let mut fact = b.alloc::<u32>(fact_rows)?;
            b.iota(&mut fact, 0)?;
            Maps {
                fact,
                dims: Vec::new(),
            }
        }
    };
    let ((fact_payloads, dimension_payloads), materialize_ms) = match &opts.materialize {
        None => ((Vec::new(), Vec::new()), 0.0),
        Some(columns) => b.timed(|| {
            let mut chosen = Vec::with_capacity(columns.len());
            for &c in columns {
                chosen.extend(gather_columns(
                    b,
                    std::slice::from_ref(&fact[c]),
                    &maps.fact,
                )?);
            }
            let dims = dims
                .iter()
                .zip(&maps.dims)
                .map(|(d, map)| gather_columns(b, &d.table.payloads, map))
                .collect::<Result<Vec<_>>>()?;
            Ok((chosen, dims))
        })?,
    };
    peak = higher(peak, b.memory().map(|m| m.peak_bytes));
    let rows = maps.fact.len() as u64;
    let stats = SequenceStats {
        fk: opts.fk,
        fact_rows,
        steps,
        materialize_ms,
        output_rows: rows,
        peak_memory_bytes: peak,
    };
    let out = SequenceOutput {
        fact_rows: maps.fact,
        dimension_rows: maps.dims,
        fact_payloads,
        dimension_payloads,
        rows,
    };
    Ok((out, stats))
}

/// The maps after a join whose output is (`left`, `right`): every earlier map gathered by
/// `left` (one multi-column gather), then this dimension's map, `right`. Before the first join
/// the fact map is the identity, so `left` is the fact map itself.
fn compose<B: Gather>(
    b: &B,
    maps: Option<Maps<B>>,
    left: B::Buf<u32>,
    right: B::Buf<u32>,
) -> Result<Maps<B>> {
    let Some(m) = maps else {
        return Ok(Maps {
            fact: left,
            dims: vec![right],
        });
    };
    let srcs: Vec<&B::Buf<u32>> = std::iter::once(&m.fact).chain(&m.dims).collect();
    let mut outs = gather_all(b, &srcs, &left)?;
    outs.push(right);
    let fact = outs.remove(0);
    Ok(Maps { fact, dims: outs })
}
