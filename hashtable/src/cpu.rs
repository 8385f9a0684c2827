//! The CPU twin: the same layouts, hashes, probe sequences and bounds as
//! `include/joinkit/hashtable.cuh`, with rayon threads and std atomics in place of CUDA threads.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};

use joinkit_cuda::hash::{hash32, hash64};
use joinkit_cuda::{CpuBackend, Error, Key, PARALLEL_THRESHOLD, Result};
use rayon::prelude::*;

use crate::config::{BuildOrder, NOT_FOUND, Probing, TableConfig, TableKind};
use crate::table::{
    HashTable, HashTables, Matches, Storage, TILE_ROWS, check_probe_rows, check_retrieve, tiles,
};

/// An empty slot or the end of a chain.
pub(crate) const EMPTY_WORD: u64 = u64::MAX;
pub(crate) const EMPTY_ROW: u32 = u32::MAX;
pub(crate) const STATUS_FULL: u32 = 1;
pub(crate) const STATUS_DUPLICATE: u32 = 2;
/// Seed offset of the second hash (`kSecondSeed`).
const SECOND_SEED: u32 = 0x5bd1_e995;

/// `joinkit::hash_key`: the 32-bit hash of a key of either width.
#[inline]
pub(crate) fn hash_key<K: Key>(key: K, seed: u32) -> u32 {
    if K::BITS == 32 {
        hash32(key.to_u64() as u32, seed)
    } else {
        hash64(key.to_u64(), u64::from(seed)) as u32
    }
}

/// Lemire's reduction of a 32-bit hash onto `0..n`, `n <= 2^32`.
#[inline]
pub(crate) fn reduce(h: u32, n: u64) -> u64 {
    (u64::from(h) * n) >> 32
}

/// Slot words of an open-addressing table: one per slot, two for 8-byte (key, row) slots.
pub(crate) fn words_per_slot<K: Key>(kind: TableKind) -> usize {
    if kind == TableKind::KeyValue && K::BITS == 64 {
        2
    } else {
        1
    }
}

/// Slot words an open-addressing table of `capacity` slots needs (with the sentinel slot).
pub(crate) fn slot_words<K: Key>(kind: TableKind, capacity: usize) -> Result<usize> {
    let slots = capacity + usize::from(kind == TableKind::KeyValue);
    slots
        .checked_mul(words_per_slot::<K>(kind))
        .ok_or(Error::SizeOverflow("table slots"))
}

/// Turns build status bits into the error both backends report (full before duplicate; no
/// duplicate error where `config` keeps the first of them).
pub(crate) fn status_error(
    status: u32,
    config: &TableConfig,
    capacity: usize,
    rows: usize,
) -> Result<()> {
    if status & STATUS_FULL != 0 {
        Err(Error::TableFull { capacity, rows })
    } else if status & STATUS_DUPLICATE != 0 && !config.keeps_first_duplicate() {
        Err(Error::DuplicateKey { side: "build" })
    } else {
        Ok(())
    }
}

/// A probe sequence (`joinkit::ht::ProbeSeq`).
struct ProbeSeq {
    idx: u64,
    step: u64,
    capacity: u64,
}

impl ProbeSeq {
    #[inline]
    fn new<K: Key>(probing: Probing, key: K, h: u32, seed: u32, capacity: u64) -> Self {
        let step = match probing {
            Probing::Double if capacity > 2 => {
                1 + reduce(hash_key(key, seed ^ SECOND_SEED), capacity - 1)
            }
            _ => 1,
        };
        Self {
            idx: reduce(h, capacity),
            step,
            capacity,
        }
    }

    #[inline]
    fn advance(&mut self) {
        self.idx += self.step;
        if self.idx >= self.capacity {
            self.idx -= self.capacity;
        }
    }
}

/// Views a `u64` slice as atomics for a concurrent build.
pub(crate) fn atomic_u64(s: &mut [u64]) -> &[AtomicU64] {
    const {
        assert!(std::mem::align_of::<AtomicU64>() == std::mem::align_of::<u64>());
    }
    // SAFETY: AtomicU64 has the size of u64 and (asserted above) its alignment; the exclusive
    // borrow means nothing else reads the memory non-atomically while the views live.
    unsafe { &*(s as *mut [u64] as *const [AtomicU64]) }
}

/// Views a `u32` slice as atomics for a concurrent build.
fn atomic_u32(s: &mut [u32]) -> &[AtomicU32] {
    const {
        assert!(std::mem::align_of::<AtomicU32>() == std::mem::align_of::<u32>());
    }
    // SAFETY: as in `atomic_u64`.
    unsafe { &*(s as *mut [u32] as *const [AtomicU32]) }
}

/// Build parameters shared by the open-addressing inserts.
struct OpenBuild<'a> {
    slots: &'a [AtomicU64],
    capacity: u64,
    seed: u32,
    probing: Probing,
    status: &'a AtomicU32,
}

impl OpenBuild<'_> {
    /// Inserts into a (key, row) table; returns the status bits and the sequence length used.
    fn insert_kv<K: Key>(&self, key: K, row: u32) -> (u32, u32) {
        let two = K::BITS == 64;
        if key == K::MAX {
            // The sentinel-valued key's own slot, after the `capacity` regular ones.
            let (w, value) = if two {
                (2 * self.capacity as usize + 1, u64::from(row))
            } else {
                (
                    self.capacity as usize,
                    key.to_u64() | (u64::from(row) << 32),
                )
            };
            let won = self.slots[w]
                .compare_exchange(EMPTY_WORD, value, Relaxed, Relaxed)
                .is_ok();
            // One step, as the CUDA insert counts it.
            return if won { (0, 1) } else { (STATUS_DUPLICATE, 0) };
        }
        let h = hash_key(key, self.seed);
        let mut seq = ProbeSeq::new(self.probing, key, h, self.seed, self.capacity);
        for s in 0..self.capacity {
            let i = seq.idx as usize;
            let (word, new, key_mask) = if two {
                (&self.slots[2 * i], key.to_u64(), u64::MAX)
            } else {
                (
                    &self.slots[i],
                    key.to_u64() | (u64::from(row) << 32),
                    0xffff_ffff,
                )
            };
            let mut cur = word.load(Relaxed);
            if cur == EMPTY_WORD {
                match word.compare_exchange(EMPTY_WORD, new, Relaxed, Relaxed) {
                    Ok(_) => {
                        if two {
                            self.slots[2 * i + 1].store(u64::from(row), Relaxed);
                        }
                        return (0, s as u32 + 1);
                    }
                    Err(now) => cur = now,
                }
            }
            if cur & key_mask == key.to_u64() {
                return (STATUS_DUPLICATE, 0);
            }
            if s % 64 == 63 && self.status.load(Relaxed) & STATUS_FULL != 0 {
                return (STATUS_FULL, 0);
            }
            seq.advance();
        }
        (STATUS_FULL, 0)
    }

    /// Inserts into a (hash, row) table.
    fn insert_hr<K: Key>(&self, key: K, row: u32) -> (u32, u32) {
        let h = hash_key(key, self.seed);
        let word = (u64::from(h) << 32) | u64::from(row);
        let mut seq = ProbeSeq::new(self.probing, key, h, self.seed, self.capacity);
        for s in 0..self.capacity {
            let w = &self.slots[seq.idx as usize];
            if w.load(Relaxed) == EMPTY_WORD
                && w.compare_exchange(EMPTY_WORD, word, Relaxed, Relaxed)
                    .is_ok()
            {
                return (0, s as u32 + 1);
            }
            if s % 64 == 63 && self.status.load(Relaxed) & STATUS_FULL != 0 {
                return (STATUS_FULL, 0);
            }
            seq.advance();
        }
        (STATUS_FULL, 0)
    }
}

/// Read-only probing over a built table (`for_each_match` of the device views).
pub(crate) trait CpuProbe<K>: Sync {
    /// Calls `f(build_row)` for each match in probe order while `f` returns true.
    fn for_each_match(&self, key: K, f: impl FnMut(u32) -> bool);
}

struct KvView<'a> {
    slots: &'a [u64],
    capacity: u64,
    seed: u32,
    max_probe: u32,
    probing: Probing,
}

impl<K: Key> CpuProbe<K> for KvView<'_> {
    #[inline]
    fn for_each_match(&self, key: K, mut f: impl FnMut(u32) -> bool) {
        let two = K::BITS == 64;
        if key == K::MAX {
            let v = if two {
                self.slots[2 * self.capacity as usize + 1]
            } else {
                self.slots[self.capacity as usize]
            };
            if v != EMPTY_WORD {
                f(if two { v as u32 } else { (v >> 32) as u32 });
            }
            return;
        }
        let h = hash_key(key, self.seed);
        let mut seq = ProbeSeq::new(self.probing, key, h, self.seed, self.capacity);
        for _ in 0..self.max_probe {
            let i = seq.idx as usize;
            let (stored, row) = if two {
                (self.slots[2 * i], self.slots[2 * i + 1] as u32)
            } else {
                let w = self.slots[i];
                (w & 0xffff_ffff, (w >> 32) as u32)
            };
            if stored == key.to_u64() {
                f(row);
                return;
            }
            // An empty slot: the key word (two words) or the whole word (one) is all ones.
            if (two && stored == EMPTY_WORD) || (!two && self.slots[i] == EMPTY_WORD) {
                return;
            }
            seq.advance();
        }
    }
}

struct HrView<'a, K> {
    slots: &'a [u64],
    keys: &'a [K],
    capacity: u64,
    seed: u32,
    max_probe: u32,
    probing: Probing,
}

impl<K: Key> CpuProbe<K> for HrView<'_, K> {
    #[inline]
    fn for_each_match(&self, key: K, mut f: impl FnMut(u32) -> bool) {
        let h = hash_key(key, self.seed);
        let mut seq = ProbeSeq::new(self.probing, key, h, self.seed, self.capacity);
        for _ in 0..self.max_probe {
            let w = self.slots[seq.idx as usize];
            if w == EMPTY_WORD {
                return;
            }
            if (w >> 32) as u32 == h {
                let row = w as u32;
                if self.keys[row as usize] == key && !f(row) {
                    return;
                }
            }
            seq.advance();
        }
    }
}

struct ChainView<'a, K> {
    heads: &'a [u32],
    next: &'a [u32],
    keys: &'a [K],
    seed: u32,
}

impl<K: Key> CpuProbe<K> for ChainView<'_, K> {
    #[inline]
    fn for_each_match(&self, key: K, mut f: impl FnMut(u32) -> bool) {
        let b = reduce(hash_key(key, self.seed), self.heads.len() as u64) as usize;
        let mut r = self.heads[b];
        for _ in 0..self.keys.len() {
            if r == EMPTY_ROW {
                return;
            }
            if self.keys[r as usize] == key && !f(r) {
                return;
            }
            r = self.next[r as usize];
        }
    }
}

/// An operation generic over the table view (visited once per call, not per row).
trait ProbeOp<K> {
    type Out;
    fn run<T: CpuProbe<K>>(self, table: &T) -> Self::Out;
}

fn with_view<K: Key, O: ProbeOp<K>>(table: &HashTable<'_, CpuBackend, K>, op: O) -> O::Out {
    let (capacity, seed, max_probe, probing) = (
        table.capacity as u64,
        table.seed,
        table.max_probe,
        table.probing,
    );
    match (&table.storage, table.kind) {
        (Storage::Open(slots), TableKind::KeyValue) => op.run(&KvView {
            slots,
            capacity,
            seed,
            max_probe,
            probing,
        }),
        (Storage::Open(slots), _) => op.run(&HrView {
            slots,
            keys: table.keys,
            capacity,
            seed,
            max_probe,
            probing,
        }),
        (Storage::Chained { heads, next }, _) => op.run(&ChainView {
            heads,
            next,
            keys: table.keys,
            seed,
        }),
    }
}

/// Per-row counts and per-tile totals.
struct CountOp<'a, K> {
    probe: &'a [K],
}

impl<K: Key> ProbeOp<K> for CountOp<'_, K> {
    type Out = (Vec<u32>, Vec<u64>);
    fn run<T: CpuProbe<K>>(self, table: &T) -> Self::Out {
        let mut counts = vec![0u32; self.probe.len()];
        let totals: Vec<u64> = counts
            .par_chunks_mut(TILE_ROWS)
            .zip(self.probe.par_chunks(TILE_ROWS))
            .map(|(c, p)| {
                let mut total = 0u64;
                for (c, &key) in c.iter_mut().zip(p) {
                    let mut n = 0u32;
                    table.for_each_match(key, |_| {
                        n += 1;
                        true
                    });
                    *c = n;
                    total += u64::from(n);
                }
                total
            })
            .collect();
        (counts, totals)
    }
}

/// Writes the pairs of output positions `lo..lo + out_probe.len()`.
struct RetrieveOp<'a, K> {
    probe: &'a [K],
    counts: &'a [u32],
    tile_offsets: &'a [u64],
    lo: u64,
    out_probe: &'a mut [u32],
    out_build: &'a mut [u32],
}

impl<K: Key> ProbeOp<K> for RetrieveOp<'_, K> {
    type Out = ();
    fn run<T: CpuProbe<K>>(self, table: &T) {
        let lo = self.lo;
        let hi = lo + self.out_probe.len() as u64;
        let offs = self.tile_offsets;
        let tiles = offs.len() - 1;
        // Tiles overlapping the window, each with its own disjoint piece of the output.
        let first = offs[..tiles].partition_point(|&o| o < lo).saturating_sub(1);
        let mut jobs = Vec::new();
        let (mut rest_p, mut rest_b) = (self.out_probe, self.out_build);
        let mut at = lo;
        for t in first..tiles {
            let (start, end) = (offs[t].max(lo), offs[t + 1].min(hi));
            if offs[t] >= hi {
                break;
            }
            if end <= start {
                continue;
            }
            debug_assert_eq!(start, at);
            let len = (end - start) as usize;
            let (p, rp) = std::mem::take(&mut rest_p).split_at_mut(len);
            let (b, rb) = std::mem::take(&mut rest_b).split_at_mut(len);
            (rest_p, rest_b) = (rp, rb);
            at = end;
            jobs.push((t, p, b));
        }
        let (probe, counts) = (self.probe, self.counts);
        jobs.into_par_iter().for_each(|(t, out_p, out_b)| {
            let win_lo = offs[t].max(lo);
            let win_hi = win_lo + out_p.len() as u64;
            let mut pos = offs[t];
            let rows = t * TILE_ROWS..((t + 1) * TILE_ROWS).min(probe.len());
            for r in rows {
                let c = counts[r];
                if c != 0 && pos < win_hi && pos + u64::from(c) > win_lo {
                    let mut j = 0u32;
                    table.for_each_match(probe[r], |row| {
                        let p = pos + u64::from(j);
                        if p >= win_lo && p < win_hi {
                            out_p[(p - win_lo) as usize] = r as u32;
                            out_b[(p - win_lo) as usize] = row;
                        }
                        j += 1;
                        j < c && p + 1 < win_hi
                    });
                }
                pos += u64::from(c);
            }
        });
    }
}

/// `find` (first match or NOT_FOUND) or `contains` (0/1).
struct FirstOp<'a, K> {
    probe: &'a [K],
    contains: bool,
}

impl<K: Key> ProbeOp<K> for FirstOp<'_, K> {
    type Out = Vec<u32>;
    fn run<T: CpuProbe<K>>(self, table: &T) -> Vec<u32> {
        let contains = self.contains;
        self.probe
            .par_iter()
            .with_min_len(PARALLEL_THRESHOLD)
            .map(|&key| {
                let mut found = NOT_FOUND;
                table.for_each_match(key, |row| {
                    found = row;
                    false
                });
                if contains {
                    u32::from(found != NOT_FOUND)
                } else {
                    found
                }
            })
            .collect()
    }
}

struct MarkOp<'a, K> {
    probe: &'a [K],
    flags: &'a [AtomicU32],
}

impl<K: Key> ProbeOp<K> for MarkOp<'_, K> {
    type Out = ();
    fn run<T: CpuProbe<K>>(self, table: &T) {
        let flags = self.flags;
        self.probe
            .par_iter()
            .with_min_len(PARALLEL_THRESHOLD)
            .for_each(|&key| {
                table.for_each_match(key, |row| {
                    let f = &flags[row as usize];
                    if f.load(Relaxed) == 0 {
                        f.store(1, Relaxed);
                    }
                    true
                });
            });
    }
}

impl HashTables for CpuBackend {
    fn build_table<'k, K: Key>(
        &self,
        keys: &'k Vec<K>,
        config: &TableConfig,
    ) -> Result<HashTable<'k, Self, K>> {
        let capacity = config.capacity_for(keys.len())?;
        let (kind, probing, seed) = (config.kind(), config.probing_policy(), config.hash_seed());
        let status = AtomicU32::new(0);
        let max_probe = AtomicU32::new(0);
        let storage = if kind == TableKind::Chained {
            let mut heads = try_filled(capacity, EMPTY_ROW)?;
            let mut next = try_filled(keys.len(), EMPTY_ROW)?;
            let (h, n) = (atomic_u32(&mut heads), atomic_u32(&mut next));
            keys.par_iter()
                .with_min_len(PARALLEL_THRESHOLD)
                .enumerate()
                .for_each(|(i, &key)| {
                    let b = reduce(hash_key(key, seed), capacity as u64) as usize;
                    n[i].store(h[b].swap(i as u32, Relaxed), Relaxed);
                });
            Storage::Chained { heads, next }
        } else {
            let mut slots = try_filled(slot_words::<K>(kind, capacity)?, EMPTY_WORD)?;
            let b = OpenBuild {
                slots: atomic_u64(&mut slots),
                capacity: capacity as u64,
                seed,
                probing,
                status: &status,
            };
            keys.par_chunks(PARALLEL_THRESHOLD)
                .enumerate()
                .for_each(|(c, chunk)| {
                    let (mut st, mut mp) = (0u32, 0u32);
                    for (j, &key) in chunk.iter().enumerate() {
                        let row = (c * PARALLEL_THRESHOLD + j) as u32;
                        let (s, p) = if kind == TableKind::KeyValue {
                            b.insert_kv(key, row)
                        } else {
                            b.insert_hr(key, row)
                        };
                        if s & STATUS_FULL != 0 {
                            status.fetch_or(STATUS_FULL, Relaxed);
                        }
                        st |= s;
                        mp = mp.max(p);
                    }
                    status.fetch_or(st, Relaxed);
                    max_probe.fetch_max(mp, Relaxed);
                });
            Storage::Open(slots)
        };
        status_error(status.into_inner(), config, capacity, keys.len())?;
        Ok(HashTable {
            storage,
            keys,
            kind,
            probing,
            capacity,
            seed,
            max_probe: max_probe.into_inner(),
            order: BuildOrder::Input,
        })
    }

    fn probe_count<K: Key>(
        &self,
        table: &HashTable<'_, Self, K>,
        probe: &Vec<K>,
    ) -> Result<Matches<Self>> {
        check_probe_rows(probe.len())?;
        let (counts, totals) = with_view(table, CountOp { probe });
        debug_assert_eq!(totals.len(), tiles(probe.len()));
        let mut tile_offsets = Vec::with_capacity(totals.len() + 1);
        let mut acc = 0u64;
        for t in totals {
            tile_offsets.push(acc);
            acc += t;
        }
        tile_offsets.push(acc);
        Ok(Matches {
            counts,
            tile_offsets,
            total: acc,
        })
    }

    fn probe_retrieve_chunk<K: Key>(
        &self,
        table: &HashTable<'_, Self, K>,
        probe: &Vec<K>,
        matches: &Matches<Self>,
        cursor: u64,
        out_probe: &mut Vec<u32>,
        out_build: &mut Vec<u32>,
    ) -> Result<u64> {
        let n = check_retrieve(
            probe.len(),
            matches.probe_rows(),
            matches.total,
            cursor,
            out_probe.len(),
            out_build.len(),
        )?;
        if n > 0 {
            with_view(
                table,
                RetrieveOp {
                    probe,
                    counts: &matches.counts,
                    tile_offsets: &matches.tile_offsets,
                    lo: cursor,
                    out_probe: &mut out_probe[..n as usize],
                    out_build: &mut out_build[..n as usize],
                },
            );
        }
        Ok(n)
    }

    fn contains<K: Key>(&self, table: &HashTable<'_, Self, K>, probe: &Vec<K>) -> Result<Vec<u32>> {
        check_probe_rows(probe.len())?;
        Ok(with_view(
            table,
            FirstOp {
                probe,
                contains: true,
            },
        ))
    }

    fn find<K: Key>(&self, table: &HashTable<'_, Self, K>, probe: &Vec<K>) -> Result<Vec<u32>> {
        check_probe_rows(probe.len())?;
        Ok(with_view(
            table,
            FirstOp {
                probe,
                contains: false,
            },
        ))
    }

    fn mark_matched<K: Key>(
        &self,
        table: &HashTable<'_, Self, K>,
        probe: &Vec<K>,
        build_flags: &mut Vec<u32>,
    ) -> Result<()> {
        Error::check_len("build flags vs build rows", build_flags.len(), table.rows())?;
        check_probe_rows(probe.len())?;
        let flags = atomic_u32(build_flags);
        with_view(table, MarkOp { probe, flags });
        Ok(())
    }
}

/// A vector of `len` copies of `value`, with allocation failure as an error.
pub(crate) fn try_filled<T: Copy>(len: usize, value: T) -> Result<Vec<T>> {
    let mut v = joinkit_cuda::try_reserved(len)?;
    v.resize(len, value);
    Ok(v)
}
