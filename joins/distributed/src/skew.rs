//! Heavy keys: found from a sample of every rank's left keys, they keep their left rows where
//! they are and have their right rows replicated to every rank, so no rank receives a heavy
//! key's rows from everywhere. Correct for every join kind: each left row is still joined on
//! exactly one rank, and that rank holds every right row with its key.

use std::collections::HashMap;

use joinkit::{MatchFlags, Table};
use joinkit_comm::Communicator;
use joinkit_cuda::{Backend, Buffer, Key, Result, map_column};
use joinkit_hashtable::{HashTables, TableConfig};
use joinkit_primitives::{Bounds, Compact, Gather};

use crate::shuffle::settle_gather;

/// Left keys each rank samples.
const SAMPLE_ROWS: usize = 1 << 12;

/// The most frequent sampled keys each rank proposes.
const CANDIDATES: usize = 16;

/// Words of a rank's proposal: its rows, its sampled rows, then (key, sampled count) pairs.
const POST_WORDS: usize = 2 + 2 * CANDIDATES;

/// Sampled occurrences (over all ranks) below which a key is not called heavy, whatever its
/// estimate: fewer say little about its true count.
const MIN_SAMPLED: u64 = 8;

/// The estimated left rows from which a key is heavy: `load` of one rank's fair share of
/// `left_rows` (all ranks' together) over `ranks`.
pub fn heavy_threshold(load: f64, left_rows: u64, ranks: usize) -> f64 {
    load * left_rows as f64 / ranks.max(1) as f64
}

/// The heavy keys of the left side, the same sorted list on every rank: each rank samples up
/// to [`SAMPLE_ROWS`] of its keys at even strides and proposes its [`CANDIDATES`] most
/// frequent; a key's rows are estimated from every rank's sample, scaled by its rows.
pub(crate) fn heavy_keys<C, K>(
    comm: &C,
    b: &C::Backend,
    left: &<C::Backend as Backend>::Buf<K>,
    load: f64,
) -> Result<Vec<K>>
where
    C: Communicator,
    C::Backend: Gather,
    K: Key,
{
    let rows = left.len();
    let take = rows.min(SAMPLE_ROWS);
    let post = (|| {
        let sample = if take == 0 {
            Vec::new()
        } else {
            let at: Vec<u32> = (0..take).map(|i| (i * rows / take) as u32).collect();
            let at = b.upload(&at)?;
            b.download(&b.gather(left, &at, Bounds::Trust)?)?
        };
        let top = most_frequent(sample.iter().map(|k| k.to_u64()).collect(), CANDIDATES);
        let mut post = vec![0u64; POST_WORDS];
        post[0] = rows as u64;
        post[1] = take as u64;
        for (i, (k, c)) in top.into_iter().enumerate() {
            post[2 + 2 * i] = k;
            post[3 + 2 * i] = c;
        }
        Ok(post)
    })();
    // Every rank's proposal, and whether every rank made one, in one collective.
    let ranks = settle_gather(comm, "heavy keys", POST_WORDS, post)?;
    // A key's sampled count on every rank that proposed it: a rank that sampled the key but
    // did not propose it contributes nothing, which only makes the estimate lower.
    let mut estimate: HashMap<u64, (f64, u64)> = HashMap::new();
    let mut total_rows = 0u64;
    for r in &ranks {
        total_rows += r[0];
        let sampled = r[1].max(1) as f64;
        for pair in r[2..].chunks(2).filter(|p| p[1] > 0) {
            let e = estimate.entry(pair[0]).or_default();
            e.0 += pair[1] as f64 * r[0] as f64 / sampled;
            e.1 += pair[1];
        }
    }
    let threshold = heavy_threshold(load, total_rows, comm.size());
    let mut heavy: Vec<K> = estimate
        .into_iter()
        .filter(|(_, (rows, sampled))| *rows >= threshold && *sampled >= MIN_SAMPLED)
        .map(|(k, _)| K::from_u64(k))
        .collect();
    heavy.sort_unstable();
    Ok(heavy)
}

/// The `n` most frequent values of `sample` with their counts, most frequent first (ties by
/// the smaller value). By sorting the sample and counting its runs: counting 4096 distinct
/// keys in a hash map and sorting its entries took 0.3-0.4 ms, about half of the distributed
/// join's plan (4 × H200, weak scaling: 0.70 ms, 0.21-0.39 after); this takes about 60 us.
fn most_frequent(mut sample: Vec<u64>, n: usize) -> Vec<(u64, u64)> {
    sample.sort_unstable();
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for k in sample {
        match runs.last_mut() {
            Some((v, c)) if *v == k => *c += 1,
            _ => runs.push((k, 1)),
        }
    }
    let order = |a: &(u64, u64), b: &(u64, u64)| b.1.cmp(&a.1).then(a.0.cmp(&b.0));
    if runs.len() > n && n > 0 {
        runs.select_nth_unstable_by(n - 1, order);
    }
    runs.truncate(n);
    runs.sort_unstable_by(order);
    runs
}

/// `table` split into its rows whose key is not in `heavy` and those whose key is.
pub(crate) fn split_heavy<B, K>(
    b: &B,
    table: Table<B, K>,
    heavy: &[K],
) -> Result<(Table<B, K>, Table<B, K>)>
where
    B: HashTables + MatchFlags + Compact + Gather,
    K: Key,
{
    let heavy = b.upload(heavy)?;
    let flags = {
        let set = b.build_table(&heavy, &TableConfig::hash_row())?;
        b.contains(&set, &table.keys)?
    };
    let light = b.flagged_indices::<u32>(&b.count_flags(&flags, false)?)?;
    let hot = b.flagged_indices::<u32>(&flags)?;
    drop(flags);
    let pick = |rows: &B::Buf<u32>| -> Result<Table<B, K>> {
        let keys = b.gather(&table.keys, rows, Bounds::Trust)?;
        let payloads = table
            .payloads
            .iter()
            .map(|c| Ok(map_column!(c, c, T => b.gather::<T, u32>(c, rows, Bounds::Trust)?)))
            .collect::<Result<Vec<_>>>()?;
        Table::new(keys, payloads)
    };
    Ok((pick(&light)?, pick(&hot)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The counting the sort replaced: a hash map's counts, most frequent first, ties by value.
    fn by_hash_map(sample: &[u64], n: usize) -> Vec<(u64, u64)> {
        let mut counts: HashMap<u64, u64> = HashMap::new();
        for &k in sample {
            *counts.entry(k).or_default() += 1;
        }
        let mut top: Vec<(u64, u64)> = counts.into_iter().collect();
        top.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        top.truncate(n);
        top
    }

    #[test]
    fn most_frequent_counts_and_orders_like_a_hash_map() {
        assert!(most_frequent(Vec::new(), 16).is_empty());
        assert!(most_frequent(vec![3, 3], 0).is_empty());
        // Ties by the smaller value; u64::MAX and 0 among them.
        assert_eq!(
            most_frequent(vec![u64::MAX, 5, 0, 5, u64::MAX, 0, 7], 2),
            vec![(0, 2), (5, 2)]
        );
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for (len, distinct, n) in [(4096, 40, 16), (4096, 4096, 16), (100, 7, 16), (1, 1, 3)] {
            let sample: Vec<u64> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Skewed: small values far more often.
                    (x % distinct) * (x >> 60) / 15
                })
                .collect();
            assert_eq!(most_frequent(sample.clone(), n), by_hash_map(&sample, n));
        }
    }
}
