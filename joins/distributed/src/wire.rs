//! How a shuffled column crosses a link: raw, or compressed with the cascaded codec
//! (Gao & Sakharnykh §4–5). Each rank samples its columns ([`Codec::select_scheme`]); the ranks
//! gather their raw and estimated compressed bytes per column ([`Communicator::agree_gather`]),
//! so every rank reads the same ratio and takes the same decision (a rank never waits for
//! words that are not coming). A compressed column's per-destination slices are encoded by
//! one [`Codec::compress_many`] over the partition bounds; a table's compressed columns travel
//! packed in one collective and are decoded on arrival by one
//! [`Codec::decompress_many_into`] a column, straight into the receive column.

use std::ops::Range;
use std::time::Instant;

use joinkit::Table;
use joinkit_codec::{Codec, CodecOptions, Scheme, SelectorConfig};
use joinkit_comm::{Communicator, Received, ReduceOp, TableToSend, total};
use joinkit_cuda::{
    Backend, Buffer, Column, ColumnRef, Element, Error, Key, Result, each_column, map_column,
};

use crate::Compression;
use crate::shuffle::{settle, settle_gather};

/// Sampled ratio below which a column is sent raw whatever the link: the codec's work and the
/// stream headers would buy less than a tenth of the bytes.
pub const MIN_RATIO: f64 = 1.1;

/// The compressed shuffle's round trip on the GPU, in GB/s of raw bytes a rank: measured on 4
/// H200s (docs/results/distributed.md), random 8-byte keys, 2^26 rows a rank: 10.2 ms of
/// encode, agreement and decode for 1.2 GB a rank, 118 GB/s (TPC-H SF 10's smaller columns:
/// 32 GB/s, fixed costs weigh more). The codec's own rates (encode 450, decode 1100 GB/s,
/// `1 / (1/450 + 1/1100)` = 319) overstate it: with 319, `Auto` compressed over NVLink and
/// the join took 2.3× as long. The default of [`Compression::auto`].
pub const DEFAULT_BREAK_EVEN_GBPS: f64 = 100.0;

/// Bytes each rank sends in the larger of the two all-to-alls that measure a link
/// ([`Compression::Auto`] without a configured rate; the smaller sends an eighth).
const PROBE_BYTES: usize = 32 << 20;

/// The codec's round-trip rate from its encode and decode rates (GB/s of raw bytes): the link
/// bandwidth below which compressing pays for a column that shrinks without bound.
pub fn codec_round_trip_gbps(encode_gbps: f64, decode_gbps: f64) -> f64 {
    1.0 / (1.0 / encode_gbps + 1.0 / decode_gbps)
}

/// The link bandwidth (GB/s a rank sends) below which compressing a column of sampled ratio
/// `ratio` pays. Sending `X` bytes raw takes `X / L`; compressed, encode, send and decode take
/// `X / E + X / (r L) + X / D`, less when `L < (1 − 1/r) / (1/E + 1/D)`: `round_trip_gbps`
/// ([`codec_round_trip_gbps`]) times `1 − 1/r`.
///
/// ```
/// use joinkit_distributed::{break_even_gbps, codec_round_trip_gbps};
/// let round_trip = codec_round_trip_gbps(450.0, 1100.0);
/// assert!((round_trip - 319.0).abs() < 0.5);
/// // A column that shrinks 4x pays on links below 3/4 of the round trip.
/// assert!((break_even_gbps(4.0, round_trip) - 0.75 * round_trip).abs() < 1e-9);
/// assert_eq!(break_even_gbps(1.0, round_trip), 0.0);
/// ```
pub fn break_even_gbps(ratio: f64, round_trip_gbps: f64) -> f64 {
    if ratio <= 1.0 {
        0.0
    } else {
        round_trip_gbps * (1.0 - 1.0 / ratio)
    }
}

/// The links rows cross, each with its own compression decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// The one-level shuffle: every rank to every rank.
    AllToAll,
    /// The two-level shuffle's first step: to the rail peers of the other nodes.
    AcrossNodes,
    /// The two-level shuffle's second step, inside a node (NVLink): never compressed.
    WithinNode,
    /// A replicated side (the build side, or heavy keys' rows) to every rank.
    AllGather,
}

impl Level {
    /// The level's name in statistics.
    pub fn name(self) -> &'static str {
        match self {
            Level::AllToAll => "all-to-all",
            Level::AcrossNodes => "across nodes",
            Level::WithinNode => "within node",
            Level::AllGather => "all-gather",
        }
    }
}

/// One shuffled column's traffic at one level, on this rank (summed over a pipeline's chunks).
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnTraffic {
    /// `"left"` or `"right"`.
    pub side: &'static str,
    /// 0 for the keys, `1 + i` for payload column `i`.
    pub column: usize,
    /// The link crossed.
    pub level: Level,
    /// The scheme this rank encoded with, `None` when sent raw.
    pub scheme: Option<String>,
    /// The ranks' sampled ratio (raw over estimated compressed bytes, all ranks together)
    /// the decision was made from; 1.0 where nothing was sampled ([`Compression::Off`]).
    pub estimated_ratio: f64,
    /// Bytes of the column's rows this rank sent to other ranks, raw.
    pub raw_bytes: u64,
    /// Bytes it put on the link for them (encoded words where compressed).
    pub sent_bytes: u64,
}

impl ColumnTraffic {
    /// Raw over sent bytes (1.0 when nothing was sent).
    pub fn ratio(&self) -> f64 {
        if self.sent_bytes == 0 {
            1.0
        } else {
            self.raw_bytes as f64 / self.sent_bytes as f64
        }
    }
}

/// How one side's columns cross one level: per column (keys first), this rank's scheme or raw.
#[derive(Debug, Clone)]
pub(crate) struct Wire {
    pub(crate) side: &'static str,
    pub(crate) level: Level,
    schemes: Vec<Option<Scheme>>,
    ratios: Vec<f64>,
}

impl Wire {
    /// Every column raw.
    pub(crate) fn raw(side: &'static str, level: Level) -> Self {
        Self {
            side,
            level,
            schemes: Vec::new(),
            ratios: Vec::new(),
        }
    }

    /// The same decisions on another level (a pipeline's chunks, or a raw level).
    pub(crate) fn at(&self, level: Level) -> Self {
        match level {
            Level::WithinNode => Self::raw(self.side, level),
            _ => Self {
                level,
                ..self.clone()
            },
        }
    }

    fn scheme(&self, column: usize) -> Option<&Scheme> {
        self.schemes.get(column).and_then(Option::as_ref)
    }

    pub(crate) fn compresses(&self) -> bool {
        self.schemes.iter().any(Option::is_some)
    }
}

/// The link rates one join decided from, per level, and how many it measured itself.
#[derive(Debug, Default)]
pub(crate) struct Links {
    pub(crate) rates: Vec<(Level, f64)>,
    pub(crate) measured: usize,
}

impl Links {
    /// The rate of `level`'s link in GB/s a rank sends where it is known without measuring:
    /// configured, decided from earlier in this join, or measured over the communicator by an
    /// earlier join to the same peers (every rank knows the same rates).
    fn known<C: Communicator>(
        &mut self,
        comm: &C,
        level: Level,
        ranks_per_node: usize,
        configured: Option<f64>,
    ) -> Option<f64> {
        if let Some(&(_, r)) = self.rates.iter().find(|r| r.0 == level) {
            return Some(r);
        }
        let rate =
            configured.or_else(|| comm.link_rates().get(&peers(comm, level, ranks_per_node)))?;
        self.rates.push((level, rate));
        Some(rate)
    }

    /// The rate of `level`'s link: [`Links::known`], or measured now ([`measure_link`]; every
    /// rank reads the same rate, and the communicator keeps it for the joins after this one).
    fn rate<C: Communicator>(
        &mut self,
        comm: &C,
        b: &C::Backend,
        level: Level,
        ranks_per_node: usize,
        configured: Option<f64>,
    ) -> Result<f64> {
        if let Some(r) = self.known(comm, level, ranks_per_node, configured) {
            return Ok(r);
        }
        let peers = peers(comm, level, ranks_per_node);
        let rate = measure_link(comm, b, &peers)?;
        comm.link_rates().insert(peers, rate);
        self.measured += 1;
        self.rates.push((level, rate));
        Ok(rate)
    }
}

/// The ranks this rank sends to at `level` (not itself).
fn peers<C: Communicator>(comm: &C, level: Level, ranks_per_node: usize) -> Vec<usize> {
    let (me, per_node) = (comm.rank(), ranks_per_node.max(1));
    (0..comm.size())
        .filter(|&p| p != me)
        .filter(|&p| match level {
            Level::AllToAll | Level::AllGather => true,
            Level::AcrossNodes => p % per_node == me % per_node,
            Level::WithinNode => p / per_node == me / per_node,
        })
        .collect()
}

/// The link's marginal GB/s a rank: the extra bytes of an all-to-all of [`PROBE_BYTES`] a rank
/// over one of an eighth of that, spread over `peers`, over the extra time, as the slowest rank
/// saw them (after a warm-up round). The difference takes out each collective's fixed cost
/// (launch, synchronization: about half a millisecond), which made an 8 MiB all-to-all read
/// 4 H200s' NVLink at 8–13 GB/s. Infinite where no rank has a peer, or where the larger
/// all-to-all took no longer (a link too fast to time at this size).
fn measure_link<C: Communicator>(comm: &C, b: &C::Backend, peers: &[usize]) -> Result<f64> {
    let counts_of = |words: usize| {
        let mut counts = vec![0usize; comm.size()];
        for (i, &p) in peers.iter().enumerate() {
            counts[p] = (i + 1) * words / peers.len() - i * words / peers.len();
        }
        counts
    };
    let (large, small) = (PROBE_BYTES / 8, PROBE_BYTES / 64);
    let send = settle(
        comm,
        "measuring the link",
        (|| {
            let mut send = [b.alloc::<u64>(large)?, b.alloc::<u64>(small)?];
            for s in &mut send {
                b.fill_random(s, 11, u64::MAX)?;
            }
            b.synchronize()?;
            Ok(send)
        })(),
    )?;
    let mut nanos = [0u64; 2];
    for round in 0..3 {
        // Round 0 warms the connections up; rounds 1 and 2 time the large and the small one.
        let which = usize::from(round == 2);
        let words = [large, small][which];
        comm.barrier()?;
        let start = Instant::now();
        let moved = comm.all_to_all_v(b, &send[which], &counts_of(words))?;
        // The transfer may only be queued when the call returns (copy engines).
        b.synchronize()?;
        nanos[which] = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        drop(moved);
    }
    let slowest = comm.all_reduce(&nanos, ReduceOp::Max)?;
    let sent = comm.all_reduce(&[u64::from(!peers.is_empty())], ReduceOp::Max)?[0];
    let extra = slowest[0].saturating_sub(slowest[1]);
    Ok(if sent == 0 || extra == 0 {
        f64::INFINITY
    } else {
        (PROBE_BYTES - PROBE_BYTES / 8) as f64 / extra as f64
    })
}

/// Raw bytes of a column and its estimated compressed bytes from this rank's sample, with the
/// scheme picked.
fn sample<B: Codec, T: Element>(b: &B, col: &B::Buf<T>) -> Result<(Scheme, u64, u64)> {
    let raw = (col.len() * std::mem::size_of::<T>()) as u64;
    let pick = b.select_scheme(col, &SelectorConfig::default())?;
    let estimated = if pick.estimated_ratio > 0.0 {
        (raw as f64 / pick.estimated_ratio).ceil() as u64
    } else {
        raw
    };
    Ok((pick.scheme, raw, estimated))
}

/// The decisions for `table`'s columns (one side) at `level`, the same on every rank: raw
/// without a look where compression is off or the link is known to outrun the codec;
/// otherwise each column sampled and, for [`Compression::Auto`], the link's rate compared with
/// the column's break-even.
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_wire<C, K>(
    comm: &C,
    b: &C::Backend,
    table: &Table<C::Backend, K>,
    side: &'static str,
    level: Level,
    compression: Compression,
    ranks_per_node: usize,
    links: &mut Links,
) -> Result<Wire>
where
    C: Communicator,
    C::Backend: Codec,
    K: Key,
{
    let (round_trip, configured) = match compression {
        _ if level == Level::WithinNode => return Ok(Wire::raw(side, level)),
        Compression::Off => return Ok(Wire::raw(side, level)),
        Compression::On => (f64::INFINITY, None),
        Compression::Auto {
            break_even_gbps,
            link_gbps,
        } => (break_even_gbps, link_gbps),
    };
    // A link known to be faster than the codec's round trip is faster than every column's
    // break-even, whatever it compresses to: raw, without sampling (NVLink, once measured).
    if round_trip.is_finite()
        && links
            .known(comm, level, ranks_per_node, configured)
            .is_some_and(|link| link >= round_trip)
    {
        return Ok(Wire::raw(side, level));
    }
    let local = std::iter::once(sample(b, &table.keys))
        .chain(
            table
                .payloads
                .iter()
                .map(|c| each_column!(c, c => sample(b, c))),
        )
        .collect::<Result<Vec<_>>>();
    // Every rank's raw and estimated bytes of each column, agreed on in one collective.
    let words = 2 * (1 + table.payloads.len());
    let sizes = (local.as_ref())
        .map(|l| l.iter().flat_map(|s| [s.1, s.2]).collect())
        .map_err(Clone::clone);
    let every = settle_gather(comm, "sampling the shuffled columns", words, sizes)?;
    let local = local?;
    let sums: Vec<u64> = (0..words)
        .map(|i| every.iter().map(|rank| rank[i]).sum())
        .collect();
    let ratios: Vec<f64> = sums
        .chunks(2)
        .map(|s| {
            if s[1] == 0 {
                1.0
            } else {
                s[0] as f64 / s[1] as f64
            }
        })
        .collect();
    let link = if round_trip.is_finite() && ratios.iter().any(|&r| r >= MIN_RATIO) {
        links.rate(comm, b, level, ranks_per_node, configured)?
    } else {
        0.0
    };
    let schemes = local
        .into_iter()
        .zip(&ratios)
        .map(|((scheme, ..), &r)| {
            (r >= MIN_RATIO && link < break_even_gbps(r, round_trip)).then_some(scheme)
        })
        .collect();
    Ok(Wire {
        side,
        level,
        schemes,
        ratios,
    })
}

/// What this rank sends of each column, accounted per (side, column, level).
#[derive(Debug, Default)]
pub(crate) struct Traffic {
    pub(crate) columns: Vec<ColumnTraffic>,
}

impl Traffic {
    fn add(&mut self, wire: &Wire, column: usize, raw_bytes: u64, sent_bytes: u64) {
        let found = self
            .columns
            .iter_mut()
            .find(|c| c.side == wire.side && c.column == column && c.level == wire.level);
        match found {
            Some(c) => {
                c.raw_bytes += raw_bytes;
                c.sent_bytes += sent_bytes;
            }
            None => self.columns.push(ColumnTraffic {
                side: wire.side,
                column,
                level: wire.level,
                scheme: wire.scheme(column).map(ToString::to_string),
                estimated_ratio: wire.ratios.get(column).copied().unwrap_or(1.0),
                raw_bytes,
                sent_bytes,
            }),
        }
    }

    /// The row ids of `side` sent as membership bitmaps (payload column 0): `raw_bytes` the ids
    /// would have taken to the other ranks, `sent_bytes` the bitmaps did.
    pub(crate) fn add_members(&mut self, side: &'static str, raw_bytes: u64, sent_bytes: u64) {
        self.columns.push(ColumnTraffic {
            side,
            column: 1,
            level: Level::AllToAll,
            scheme: Some("membership bitmap".into()),
            estimated_ratio: 1.0,
            raw_bytes,
            sent_bytes,
        });
    }
}

/// Whether a moved table's rows must arrive grouped by sender in rank order (a step that
/// regroups them next) or may arrive in any order the transport moves fastest (a table that is
/// joined next: [`Communicator::all_to_all_v_any_order`]). Compressed tables arrive in rank
/// order either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    RankOrder,
    Any,
}

/// The collective a table moves by.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Pattern<'a> {
    /// `counts[p]` rows to rank `p` (the rows grouped by destination).
    AllToAll(&'a [usize]),
    /// Every row to every rank.
    AllGather,
}

impl Pattern<'_> {
    /// Rows of a column of `len` for each destination (the all-gather: one slice for all).
    fn counts(&self, len: usize) -> Vec<usize> {
        match self {
            Pattern::AllToAll(c) => c.to_vec(),
            Pattern::AllGather => vec![len],
        }
    }

    /// Bytes of `counts` (as [`Pattern::counts`] gives them) of `width` bytes each that leave
    /// rank `me` of `ranks`.
    fn away(&self, counts: &[usize], me: usize, ranks: usize, width: usize) -> u64 {
        let bytes = |c: usize| (c as u64).saturating_mul(width as u64);
        match self {
            Pattern::AllToAll(_) => counts
                .iter()
                .enumerate()
                .filter(|&(p, _)| p != me)
                .map(|(_, &c)| bytes(c))
                .sum(),
            Pattern::AllGather => counts
                .iter()
                .map(|&c| bytes(c).saturating_mul(ranks as u64 - 1))
                .sum(),
        }
    }
}

/// A column's per-destination slices, encoded: the words, back to back in destination order,
/// and how many go to each destination (none to one that gets no rows).
struct Encoded<B: Backend> {
    words: B::Buf<u64>,
    counts: Vec<usize>,
}

/// Encodes `col`'s slices (`counts[p]` rows for destination `p`, in order) with one fused
/// [`Codec::compress_many`]; empty slices get no stream.
fn encode<B: Codec, T: Element>(
    b: &B,
    col: &B::Buf<T>,
    counts: &[usize],
    scheme: &Scheme,
) -> Result<Encoded<B>> {
    let mut bounds = vec![0usize];
    let mut at = 0usize;
    for &c in counts.iter().filter(|&&c| c > 0) {
        at = at
            .checked_add(c)
            .filter(|&e| e <= col.len())
            .ok_or_else(|| Error::InvalidArgument("send counts past the column".into()))?;
        bounds.push(at);
    }
    if bounds.len() == 1 {
        return Ok(Encoded {
            words: b.alloc(0)?,
            counts: vec![0; counts.len()],
        });
    }
    if at < col.len() {
        bounds.push(col.len());
    }
    let (words, ranges) = b.compress_many(col, &bounds, scheme, &CodecOptions::default())?;
    let mut streams = ranges.iter();
    let mut next = 0usize;
    let counts = counts
        .iter()
        .map(|&c| {
            if c == 0 {
                return Ok(0);
            }
            match streams.next() {
                Some(r) if r.start == next => {
                    next = r.end;
                    Ok(r.len())
                }
                _ => Err(Error::Corrupt(
                    "compressed streams are not back to back".into(),
                )),
            }
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Encoded { words, counts })
}

/// Decodes the words received from every rank (`ranges[p]` of `words` from rank `p`, carrying
/// `rows[p]` rows) into one column, in rank order.
fn decode<B: Codec, T: Element>(
    b: &B,
    words: &B::Buf<u64>,
    ranges: &[Range<usize>],
    rows: &[usize],
) -> Result<B::Buf<T>> {
    let mut out = b.alloc::<T>(total(rows)?)?;
    let mut streams = Vec::with_capacity(rows.len());
    for (r, &n) in ranges.iter().zip(rows) {
        if r.is_empty() != (n == 0) {
            return Err(Error::Corrupt(format!(
                "{} compressed words for {n} rows from a rank",
                r.len()
            )));
        }
        if n > 0 {
            streams.push(r.clone());
        }
    }
    if !streams.is_empty() {
        let bounds = b.decompress_many_into(words, &streams, &mut out)?;
        let decoded = bounds.windows(2).map(|w| w[1] - w[0]);
        if !decoded.eq(rows.iter().copied().filter(|&n| n > 0)) {
            return Err(Error::Corrupt(
                "decompressed rows differ from the rows sent".into(),
            ));
        }
    }
    Ok(out)
}

/// A table's compressed columns packed for one collective: for each destination, a header
/// (its rows, then each compressed column's words for it) and those words, column after
/// column. The ranks meet once for every column (a count exchange, an agreement, one group
/// of transfers), where a collective a column and one for the rows cost a meeting each: over
/// a slow transport's round trips, milliseconds.
struct Packed<B: Backend> {
    words: B::Buf<u64>,
    /// Words for each destination.
    counts: Vec<usize>,
    /// The compressed columns (`None`: raw) and their words for each destination.
    columns: Vec<Option<Vec<usize>>>,
}

/// Header words of a destination's slice of [`Packed`] with `compressed` columns (a slice
/// with no rows has none: nothing goes to a destination that gets no rows).
fn pack_header_words(compressed: usize) -> usize {
    1 + compressed
}

/// Encodes `table`'s columns that `wire` compresses (`counts[p]` rows for destination `p`)
/// and packs them for destination after destination.
fn pack<B: Codec, K: Key>(
    b: &B,
    table: &Table<B, K>,
    counts: &[usize],
    wire: &Wire,
) -> Result<Packed<B>> {
    let encoded = (0..=table.payloads.len())
        .map(|i| {
            let Some(s) = wire.scheme(i) else {
                return Ok(None);
            };
            match i {
                0 => encode(b, &table.keys, counts, s),
                _ => each_column!(&table.payloads[i - 1], c => encode(b, c, counts, s)),
            }
            .map(Some)
        })
        .collect::<Result<Vec<_>>>()?;
    let compressed: Vec<&Encoded<B>> = encoded.iter().flatten().collect();
    let h = pack_header_words(compressed.len());
    let header: Vec<u64> = (0..counts.len())
        .flat_map(|p| {
            std::iter::once(counts[p] as u64)
                .chain(compressed.iter().map(move |e| e.counts[p] as u64))
        })
        .collect();
    let slices = (0..counts.len())
        .map(|p| {
            let words: usize = compressed.iter().map(|e| e.counts[p]).sum();
            match (counts[p], words) {
                (0, 0) => Ok(0),
                (0, _) => Err(Error::Corrupt("compressed words for no rows".into())),
                _ => Ok(h + words),
            }
        })
        .collect::<Result<Vec<usize>>>()?;
    let mut words = b.alloc::<u64>(total(&slices)?)?;
    let header = b.upload(&header)?;
    let mut starts = vec![0usize; compressed.len()];
    let mut at = 0;
    for p in (0..counts.len()).filter(|&p| slices[p] > 0) {
        b.copy_range_into(&header, p * h..(p + 1) * h, &mut words, at)?;
        at += h;
        for (e, start) in compressed.iter().zip(&mut starts) {
            let n = e.counts[p];
            b.copy_range_into(&e.words, *start..*start + n, &mut words, at)?;
            (*start, at) = (*start + n, at + n);
        }
    }
    let columns = encoded.into_iter().map(|e| e.map(|e| e.counts)).collect();
    Ok(Packed {
        words,
        counts: slices,
        columns,
    })
}

/// The rows from each rank, and each compressed column's word range of each rank's slice.
type Unpacked = (Vec<usize>, Vec<Vec<Range<usize>>>);

/// What came in [`Packed`] slices from every rank (`slices[p]` words from rank `p`, in rank
/// order), read from their headers: the rows from each rank, and each compressed column's
/// word range of each rank.
fn unpack<B: Backend>(
    b: &B,
    words: &B::Buf<u64>,
    slices: &[usize],
    compressed: usize,
) -> Result<Unpacked> {
    let h = pack_header_words(compressed);
    // The headers of the ranks that sent something, side by side, in one download.
    let senders = slices.iter().filter(|&&n| n > 0).count();
    let mut heads = b.alloc::<u64>(h * senders)?;
    let (mut at, mut k) = (0, 0);
    for (p, &n) in slices.iter().enumerate().filter(|&(_, &n)| n > 0) {
        if n < h {
            return Err(Error::Corrupt(format!(
                "{n} words of compressed columns from rank {p}, less than their header"
            )));
        }
        b.copy_range_into(words, at..at + h, &mut heads, k * h)?;
        (at, k) = (at + n, k + 1);
    }
    let heads = b.download(&heads)?;
    let mut heads = heads.chunks(h);
    let mut rows = Vec::with_capacity(slices.len());
    let mut ranges = vec![Vec::with_capacity(slices.len()); compressed];
    let count = |w: u64| usize::try_from(w).map_err(|_| Error::SizeOverflow("words received"));
    let mut at = 0usize;
    for &n in slices {
        if n == 0 {
            // Nothing came: no rows from that rank.
            rows.push(0);
            ranges.iter_mut().for_each(|column| column.push(at..at));
            continue;
        }
        let head = heads
            .next()
            .ok_or_else(|| Error::Corrupt("a compressed slice's header went missing".into()))?;
        rows.push(count(head[0])?);
        let mut start = at + h;
        for (column, &w) in ranges.iter_mut().zip(&head[1..]) {
            let w = count(w)?;
            let end = start
                .checked_add(w)
                .filter(|&e| e <= at + n)
                .ok_or_else(|| Error::Corrupt("compressed columns past their slice".into()))?;
            column.push(start..end);
            start = end;
        }
        if start != at + n {
            return Err(Error::Corrupt(
                "compressed columns short of their slice".into(),
            ));
        }
        at += n;
    }
    Ok((rows, ranges))
}

/// Where a moved column's traffic is accounted.
struct Mover<'w> {
    wire: &'w Wire,
    traffic: &'w mut Traffic,
    arrival: Arrival,
}

impl Mover<'_> {
    /// Moves column `index` (`buf`) raw by `pattern` and accounts the bytes this rank sent to
    /// others.
    fn moved<C, T>(
        &mut self,
        comm: &C,
        b: &C::Backend,
        buf: &<C::Backend as Backend>::Buf<T>,
        pattern: Pattern<'_>,
        index: usize,
    ) -> Result<<C::Backend as Backend>::Buf<T>>
    where
        C: Communicator,
        T: Element,
    {
        let (me, ranks) = (comm.rank(), comm.size());
        let raw = pattern.away(&pattern.counts(buf.len()), me, ranks, size_of::<T>());
        let out = match (pattern, self.arrival) {
            (Pattern::AllToAll(c), Arrival::RankOrder) => comm.all_to_all_v(b, buf, c)?.0,
            (Pattern::AllToAll(c), Arrival::Any) => comm.all_to_all_v_any_order(b, buf, c)?.0,
            (Pattern::AllGather, Arrival::RankOrder) => comm.all_gather_v(b, buf)?.0,
            (Pattern::AllGather, Arrival::Any) => comm.all_gather_v_any_order(b, buf)?.0,
        };
        self.traffic.add(self.wire, index, raw, raw);
        Ok(out)
    }

    /// Moves `packed` by `pattern` in one collective (rank order, so each rank's slice is
    /// whole) and accounts each compressed column's bytes: raw (`widths[i]` bytes a row of
    /// column `i`, `rows` for each destination) and as sent, the headers with the first.
    /// Returns the words received with the rows and column ranges of every rank.
    fn moved_packed<C: Communicator>(
        &mut self,
        comm: &C,
        b: &C::Backend,
        packed: &Packed<C::Backend>,
        (pattern, rows): (Pattern<'_>, &[usize]),
        widths: &[usize],
    ) -> Result<(<C::Backend as Backend>::Buf<u64>, Unpacked)> {
        let (me, ranks) = (comm.rank(), comm.size());
        let (words, slices) = match pattern {
            Pattern::AllToAll(_) => comm.all_to_all_v(b, &packed.words, &packed.counts)?,
            Pattern::AllGather => comm.all_gather_v(b, &packed.words)?,
        };
        let compressed: Vec<(usize, &Vec<usize>)> = (packed.columns.iter().enumerate())
            .filter_map(|(i, c)| c.as_ref().map(|c| (i, c)))
            .collect();
        let headers = pack_header_words(compressed.len()) as u64;
        for (k, &(i, column_words)) in compressed.iter().enumerate() {
            let raw = pattern.away(rows, me, ranks, widths[i]);
            let mut sent = pattern.away(column_words, me, ranks, 8);
            if k == 0 {
                let with_rows: Vec<usize> = rows.iter().map(|&r| usize::from(r > 0)).collect();
                sent += pattern.away(&with_rows, me, ranks, 8) * headers;
            }
            self.traffic.add(self.wire, i, raw, sent);
        }
        let unpacked = unpack(b, &words, &slices, compressed.len())?;
        Ok((words, unpacked))
    }
}

/// Moves `table` by `pattern`, every column raw or compressed as `wire` says (compressed
/// columns are encoded first, and the ranks agree that all were, before any moves); every
/// column moves even after one fails on this rank, so the ranks' collectives stay in step.
/// Returns the rows received, in rank order or as `arrival` allows, or the first error.
pub(crate) fn move_table<C, K>(
    comm: &C,
    b: &C::Backend,
    table: &Table<C::Backend, K>,
    (pattern, arrival): (Pattern<'_>, Arrival),
    wire: &Wire,
    traffic: &mut Traffic,
) -> Result<Table<C::Backend, K>>
where
    C: Communicator,
    C::Backend: Codec,
    K: Key,
{
    if let (false, Pattern::AllToAll(to), Arrival::Any) = (wire.compresses(), pattern, arrival) {
        return move_raw_columns(comm, b, table, to, (wire, traffic));
    }
    let counts = pattern.counts(table.len());
    let packed = if wire.compresses() {
        let packing = pack(b, table, &counts, wire);
        Some(settle(comm, "compressing the shuffled columns", packing)?)
    } else {
        None
    };
    // Raw columns may arrive in any order only if every column is raw: decoded ones come in
    // rank order.
    let arrival = if packed.is_some() {
        Arrival::RankOrder
    } else {
        arrival
    };
    let mut column = Mover {
        wire,
        traffic,
        arrival,
    };
    let widths: Vec<usize> = std::iter::once(size_of::<K>())
        .chain(table.payloads.iter().map(Column::width))
        .collect();
    // The compressed columns in one collective, decoded as they arrive (the packs freed before
    // the raw columns move), then each raw column in a collective of its own; every column
    // moves whatever happened to those before (the collectives stay in step).
    let compressed: Vec<bool> = (0..=table.payloads.len())
        .map(|i| packed.as_ref().is_some_and(|p| p.columns[i].is_some()))
        .collect();
    let received = packed.map(|p| column.moved_packed(comm, b, &p, (pattern, &counts), &widths));
    let (words, failed, rows, ranges) = match received {
        Some(Ok((words, (rows, ranges)))) => (Some(words), None, rows, ranges),
        Some(Err(e)) => (None, Some(e), Vec::new(), Vec::new()),
        None => (None, None, Vec::new(), Vec::new()),
    };
    let mut ranges = ranges.into_iter();
    // A compressed column's ranges (`None` where the move failed); `None` for a raw column.
    let mut ranges_of = |i: usize| compressed[i].then(|| ranges.next());
    let lost = || {
        failed
            .clone()
            .unwrap_or_else(|| Error::Corrupt("a compressed column went missing".into()))
    };
    let keys = ranges_of(0).map(|r| match (&words, r) {
        (Some(w), Some(r)) => decode::<C::Backend, K>(b, w, &r, &rows),
        _ => Err(lost()),
    });
    let payloads: Vec<Option<Result<Column<C::Backend>>>> = (table.payloads.iter().enumerate())
        .map(|(i, c)| {
            ranges_of(i + 1).map(|r| match (&words, r) {
                (Some(w), Some(r)) => {
                    Ok(map_column!(c, _c, T => decode::<C::Backend, T>(b, w, &r, &rows)?))
                }
                _ => Err(lost()),
            })
        })
        .collect();
    drop(words);
    let keys = keys.unwrap_or_else(|| column.moved::<C, K>(comm, b, &table.keys, pattern, 0));
    let payloads = (table.payloads.iter().zip(payloads).enumerate())
        .map(|(i, (c, decoded))| {
            decoded.unwrap_or_else(|| {
                Ok(map_column!(c, c, T => column.moved::<C, T>(comm, b, c, pattern, i + 1)?))
            })
        })
        .collect::<Vec<Result<_>>>();
    let keys = keys?;
    let payloads = payloads.into_iter().collect::<Result<Vec<_>>>()?;
    Table::new(keys, payloads)
}

/// A raw shuffle of `table` (`send_counts` rows to each rank, arriving in any order): every
/// column in one [`Communicator::all_to_all_v_columns`], one count exchange and one group
/// for the table instead of one of each per column.
fn move_raw_columns<C, K>(
    comm: &C,
    b: &C::Backend,
    table: &Table<C::Backend, K>,
    send_counts: &[usize],
    (wire, traffic): (&Wire, &mut Traffic),
) -> Result<Table<C::Backend, K>>
where
    C: Communicator,
    K: Key,
{
    move_raw_tables(comm, b, (table, send_counts), None, (wire, traffic)).map(|(t, _)| t)
}

/// Words to move beside a table, and how many go to each rank.
pub(crate) type WordsToSend<'a, B> = (&'a <B as Backend>::Buf<u32>, &'a [usize]);

/// A table received, and the words moved beside it with how many came from each rank.
pub(crate) type TableAndWords<B, K> = (Table<B, K>, Option<Received<B, u32>>);

/// [`move_raw_columns`] of `table` and, in the same [`Communicator::all_to_all_v_tables`],
/// `words` with their own counts for each rank (a side's membership bitmaps): the transport's
/// meetings once for both. The rows arrive as [`Communicator::all_to_all_v_columns`] delivers
/// them (in rank order only where [`Communicator::any_order_is_rank_order`], which a caller
/// naming rows by membership bitmaps checks). Returns the table received and the words with
/// how many came from each rank; the words' bytes are the caller's to count.
pub(crate) fn move_raw_tables<C, K>(
    comm: &C,
    b: &C::Backend,
    (table, send_counts): (&Table<C::Backend, K>, &[usize]),
    words: Option<WordsToSend<'_, C::Backend>>,
    (wire, traffic): (&Wire, &mut Traffic),
) -> Result<TableAndWords<C::Backend, K>>
where
    C: Communicator,
    K: Key,
{
    let columns: Vec<ColumnRef<'_, C::Backend>> = std::iter::once(K::column_ref(&table.keys))
        .chain(table.payloads.iter().map(Column::as_column_ref))
        .collect();
    let word_column = words.map(|(w, counts)| ([u32::column_ref(w)], counts));
    let tables: Vec<TableToSend<'_, '_, C::Backend>> = std::iter::once((&columns[..], send_counts))
        .chain(word_column.as_ref().map(|(c, counts)| (&c[..], *counts)))
        .collect();
    let mut moved = comm.all_to_all_v_tables(b, &tables)?.into_iter();
    let (mut moved_table, _) = moved
        .next()
        .ok_or_else(|| Error::Corrupt("no table came back".into()))?;
    let (me, ranks) = (comm.rank(), comm.size());
    for (i, c) in moved_table.iter().enumerate() {
        let raw = Pattern::AllToAll(send_counts).away(send_counts, me, ranks, c.width());
        traffic.add(wire, i, raw, raw);
    }
    let words = moved
        .next()
        .map(|(mut c, counts)| {
            let w = c.pop().map(u32::from_column);
            match w {
                Some(Ok(w)) => Ok((w, counts)),
                _ => Err(Error::Corrupt("words came back as another type".into())),
            }
        })
        .transpose()?;
    let payloads = moved_table.split_off(1.min(moved_table.len()));
    let keys = moved_table
        .pop()
        .ok_or_else(|| Error::Corrupt("no key column came back".into()))
        .and_then(|k| {
            K::from_column(k).map_err(|_| Error::Corrupt("keys came back as another type".into()))
        })?;
    Ok((Table::new(keys, payloads)?, words))
}
