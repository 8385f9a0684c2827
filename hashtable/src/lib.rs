//! # joinkit-hashtable
//!
//! Lock-free hash tables for hash joins, with CUDA kernels and CPU twins (rayon with atomics)
//! under one contract, [`HashTables`], implemented for `CpuBackend` and (feature `cuda`)
//! `CudaBackend`:
//!
//! | kind | slots | keys | insert |
//! | --- | --- | --- | --- |
//! | [`TableKind::KeyValue`] | (key, build row): one 8-byte word for 4-byte keys, two for 8-byte | unique | CAS |
//! | [`TableKind::HashRow`] | (hash32, build row), one word; key re-checked against the build column | any | CAS |
//! | [`TableKind::Chained`] | bucket heads + a chain entry per build row (Thostrup et al.) | any | atomic exchange |
//!
//! A key-value table built with [`TableConfig::keep_first_duplicate`] keeps one slot a
//! distinct key instead of refusing duplicates: what semi and anti joins need, with no run of
//! equal keys for a probe to walk.
//!
//! Open addressing probes linearly or by double hashing ([`Probing`]); its capacity comes from
//! a load factor (default 0.5) or is given. On the GPU a table much larger than the L2 cache is
//! built from keys hash-partitioned by home-slot region first ([`BuildOrder`]), so its inserts
//! hit L2 instead of read-modify-writing DRAM at random. Every key value can be inserted, the
//! empty-slot sentinel (`K::MAX`) included. Every loop is bounded, so a table too small for its build side
//! is [`Error::TableFull`], never a hang.
//!
//! Operations: [`HashTables::build_table`]; count, allocate, retrieve
//! ([`HashTables::probe_count`], [`HashTables::probe_retrieve`], and
//! [`HashTables::probe_retrieve_chunk`] for outputs larger than one buffer, resumed from a
//! cursor; [`HashTables::probe_pairs`] does all three); [`HashTables::contains`] (semi and anti
//! joins); [`HashTables::find`]; [`HashTables::mark_matched`] (build-side semi, anti and outer
//! joins). [`RandomAccessFloors`] measures the random-access floor benchmarks compare to.
//!
//! Device-side use: `include/joinkit/hashtable.cuh` holds the layouts and the insert and probe
//! routines the kernels use, for other crates' kernels (tables in global or shared memory).
//! This crate's build script exports the folder as `DEP_JOINKIT_HASHTABLE_INCLUDE`
//! (`links = "joinkit_hashtable"`); `cuda::raw_table` gives the struct to pass to a kernel.
//!
//! ```
//! use joinkit_cuda::{Backend, CpuBackend};
//! use joinkit_hashtable::{HashTables, NOT_FOUND, TableConfig};
//! let cpu = CpuBackend::new();
//! let build = cpu.upload(&[10u32, 20, 30, u32::MAX]).unwrap();
//! let probe = cpu.upload(&[20u32, 5, u32::MAX, 20]).unwrap();
//!
//! // Unique keys: (key, row) slots.
//! let table = cpu.build_table(&build, &TableConfig::key_value()).unwrap();
//! assert_eq!(cpu.find(&table, &probe).unwrap(), vec![1, NOT_FOUND, 3, 1]);
//!
//! // Count, allocate, retrieve: pairs (probe row, build row), grouped by probe row.
//! let matches = cpu.probe_count(&table, &probe).unwrap();
//! assert_eq!(matches.total(), 3);
//! let mut p = cpu.alloc::<u32>(3).unwrap();
//! let mut b = cpu.alloc::<u32>(3).unwrap();
//! cpu.probe_retrieve(&table, &probe, &matches, &mut p, &mut b).unwrap();
//! assert_eq!((p, b), (vec![0, 2, 3], vec![1, 3, 1]));
//!
//! // Duplicate keys: (hash, row) slots or chaining.
//! let dup = cpu.upload(&[7u64, 7, 8]).unwrap();
//! let chained = cpu.build_table(&dup, &TableConfig::chained()).unwrap();
//! let (_, rows) = cpu.probe_pairs(&chained, &cpu.upload(&[7u64]).unwrap()).unwrap();
//! assert_eq!(rows.len(), 2);
//! ```

mod config;
mod cpu;
pub mod floors;
mod table;

#[cfg(feature = "cuda")]
pub mod cuda;

pub use config::{
    BuildOrder, DEFAULT_SEED, MAX_BUILD_ROWS, MAX_CAPACITY, MAX_PROBE_ROWS, NOT_FOUND, Probing,
    TableConfig, TableKind,
};
pub use floors::RandomAccessFloors;
pub use joinkit_cuda::{Backend, Error, Result};
pub use table::{HashTable, HashTables, Matches, TILE_ROWS};
