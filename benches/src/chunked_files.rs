//! An inner join of files written as it goes: the smaller file's rows partitioned once
//! ([`PartitionedProbe`], PHJ-OM's build), the larger file's probed `--chunk-rows` rows at a
//! time, and each chunk's output rows written to `--out` before the next chunk is joined.
//!
//! Why: a one-shot join holds its whole output (and PHJ-OM's partitions of both sides) at once,
//! in memory touched for the first time. On the 2-core development machine that first touch,
//! not the join's work, was most of a one-shot join of the files (system time 5–6 s
//! against 2–3 s of user time for 3.2 GB of fresh memory; docs/results/files.md). Chunk by
//! chunk, the memory of one chunk's probe and output is freed and taken again by the next.
//! On many cores the one-piece join is faster (each chunk leaves the threads less to share),
//! so the CPU's default chunk grows with the thread pool (`--chunk-rows`).
//!
//! Chunks run where the result is the one-shot join's (rows in another order): an inner join,
//! `Auto` (choosing PHJ-OM for these sides, from its sample) or PHJ-OM asked for, columns
//! the partitioned probe carries whole (one column a side, or two of one width; signed
//! columns travel as the unsigned ones of their bits and are written signed again), and a
//! larger side of more than one chunk. Anything else is joined in one piece.

use std::path::Path;
use std::time::Instant;

use arrow_schema::{DataType, Field};
use joinkit::{
    Algorithm, ChoiceParams, ChoiceReason, Column, JoinBackend, JoinInputStats, JoinKind,
    JoinOptions, JoinStats, PartitionedProbe, Table, choose, choose_unsampled, sample_stats,
};
use joinkit_cuda::{
    Backend, CpuBackend, Element, Key, bit_cast_slice, bit_cast_vec, each_column, map_column,
};

use crate::error::Result;
use crate::files::{self, Format, HostTable, Sink};
use crate::measure::ms;

/// What a join written chunk by chunk did.
pub(crate) struct Written {
    /// The output's columns, in order.
    pub(crate) fields: Vec<Field>,
    /// The join's statistics, its phases summed over the build and every chunk.
    pub(crate) stats: JoinStats,
    /// Milliseconds joining (the build, each chunk's probe, its columns brought back).
    pub(crate) join_ms: f64,
    /// Milliseconds writing the chunks' rows.
    pub(crate) write_ms: f64,
    /// Chunks the larger side was probed in.
    pub(crate) chunks: usize,
}

/// One side of the join: its file, its key column and the columns it brings to the output.
struct Side<'t> {
    table: &'t HostTable,
    key: usize,
    payloads: &'t [usize],
}

impl<'t> Side<'t> {
    fn new(table: &'t HostTable, key: usize, payloads: &'t [usize]) -> Self {
        Side {
            table,
            key,
            payloads,
        }
    }

    fn rows(&self) -> usize {
        self.table.rows()
    }

    /// The key column's values as keys of `K` (the key type follows the column's width).
    ///
    /// # Errors
    /// [`joinkit_cuda::Error::Corrupt`] for a key column of another width than `K`.
    fn keys<K: Key>(&self) -> Result<&[K]> {
        each_column!(&self.table.columns[self.key], c => bit_cast_slice(c.as_slice())).ok_or_else(
            || {
                joinkit_cuda::Error::Corrupt("a key column of another width than the keys".into())
                    .into()
            },
        )
    }
}

/// Joins `left` and `right` (`left_key`, `right_key`; `dropped` the right key when it is not
/// an output column) chunk by chunk into `out`, or returns `None`, the tables untouched, where
/// the join must run in one piece (see the module docs).
///
/// # Errors
/// As [`joinkit::join_columns`]; [`crate::error::BenchError::Io`] and
/// [`crate::error::BenchError::File`] when the output cannot be written.
pub(crate) fn join_in_chunks<B: JoinBackend, K: Key>(
    b: &B,
    (left, left_key): (&mut HostTable, usize),
    (right, right_key, dropped): (&mut HostTable, usize, Option<usize>),
    opts: &JoinOptions,
    chunk_rows: usize,
    (path, format): (&Path, Format),
) -> Result<Option<Written>> {
    let started = Instant::now();
    let rows = (left.rows(), right.rows());
    let left_payloads: Vec<usize> = (0..left.columns.len()).collect();
    let right_payloads: Vec<usize> = (0..right.columns.len())
        .filter(|&i| Some(i) != dropped)
        .collect();
    let build_is_left = left.rows() <= right.rows();
    let (larger_rows, carries) = {
        let l = Side::new(left, left_key, &left_payloads);
        let r = Side::new(right, right_key, &right_payloads);
        let (build, probe) = if build_is_left { (&l, &r) } else { (&r, &l) };
        (probe.rows(), carried(b, probe, build)?)
    };
    if opts.kind != JoinKind::Inner || chunk_rows == 0 || larger_rows <= chunk_rows || !carries {
        return Ok(None);
    }
    let (sampled, reason) = match opts.algorithm {
        Algorithm::PhjOm => (None, None),
        Algorithm::Auto => {
            let bytes = (
                payload_bytes(left, &left_payloads),
                payload_bytes(right, &right_payloads),
            );
            let l = (&mut *left, left_key, bytes.0);
            let r = (&mut *right, right_key, bytes.1);
            let (probe, build) = if build_is_left { (r, l) } else { (l, r) };
            match auto_choice::<B, K>(b, probe, build, opts)? {
                (Algorithm::PhjOm, sampled, reason) => (sampled, Some(reason)),
                _ => return Ok(None),
            }
        }
        _ => return Ok(None),
    };
    let fields = output_fields(
        &Side::new(left, left_key, &left_payloads),
        &Side::new(right, right_key, &right_payloads),
    );
    // The build side's columns move into the join (the CPU keeps them as they are): its file's
    // columns are not read again. Its key is copied where it is an output column too.
    let build_table = {
        let (t, key, payloads) = if build_is_left {
            (&mut *left, left_key, &left_payloads)
        } else {
            (&mut *right, right_key, &right_payloads)
        };
        let keys = if payloads.contains(&key) {
            b.upload(Side::new(t, key, payloads).keys::<K>()?)?
        } else {
            b.upload_owned(take_keys::<K>(t, key))?
        };
        let columns = payloads
            .iter()
            .map(|&i| {
                let c = std::mem::replace(&mut t.columns[i], Column::U32(Vec::new()));
                Ok(match c.width() {
                    4 => Column::U32(b.upload_owned(each_column!(c, v => cast_vec(v)))?),
                    _ => Column::U64(b.upload_owned(each_column!(c, v => cast_vec(v)))?),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Table::new(keys, columns)?
    };
    let probe = if build_is_left {
        Side::new(right, right_key, &right_payloads)
    } else {
        Side::new(left, left_key, &left_payloads)
    };
    let partitioned = PartitionedProbe::build(b, &build_table, &opts.algorithm(Algorithm::PhjOm))?;
    let mut stats = partitioned.build_stats().clone();
    let (mut sink, mut write_ms, mut chunks) = (None, 0.0, 0);
    let probed = (|| -> Result<()> {
        let probe_keys = probe.keys::<K>()?;
        for start in (0..probe.rows()).step_by(chunk_rows) {
            let end = probe.rows().min(start + chunk_rows);
            let chunk = Table::new(
                b.upload(&probe_keys[start..end])?,
                upload_columns(b, &probe, start..end)?,
            )?;
            let (out, st) = partitioned.probe_columns(&chunk)?;
            drop(chunk);
            stats.absorb(&st);
            // The output's order: the left file's columns, then the right file's.
            let (probe_cols, build_cols) = (out.left, out.right);
            let (left_cols, right_cols) = if build_is_left {
                (build_cols, probe_cols)
            } else {
                (probe_cols, build_cols)
            };
            let columns = (left_cols.into_iter().chain(right_cols))
                .zip(&fields)
                .map(|(c, f)| {
                    let host = map_column!(c, c, T => b.download_owned::<T>(c)?);
                    Ok(files::to_arrow(signed_as(host, f.data_type()), None))
                })
                .collect::<Result<Vec<_>>>()?;
            let written = Instant::now();
            let sink = match &mut sink {
                Some(s) => s,
                None => sink.insert(Sink::create(path, format, fields.clone(), &columns)?),
            };
            sink.write(columns)?;
            write_ms += ms(written);
            chunks += 1;
        }
        Ok(())
    })();
    let written = Instant::now();
    let finished = probed.and_then(|()| sink.take().map_or(Ok(()), Sink::finish));
    if let Err(e) = finished {
        // No half-written output: the file the first chunk created goes.
        drop(sink);
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    write_ms += ms(written);
    let join_ms = ms(started) - write_ms;
    stats.algorithm = Algorithm::PhjOm;
    (stats.left_rows, stats.right_rows) = rows;
    (stats.sampled, stats.reason) = (sampled, reason);
    Ok(Some(Written {
        fields,
        stats,
        join_ms,
        write_ms,
        chunks,
    }))
}

/// Bytes a row of `t` carries to the output in its `payloads` columns.
fn payload_bytes(t: &HostTable, payloads: &[usize]) -> usize {
    payloads.iter().map(|&i| t.columns[i].width()).sum()
}

/// The output's fields: the left file's columns, then the right file's output columns, a
/// name already taken with `_right` appended, as the one-shot join names them.
fn output_fields(left: &Side<'_>, right: &Side<'_>) -> Vec<Field> {
    let mut fields: Vec<Field> = (left.payloads.iter())
        .map(|&i| left.table.fields[i].as_ref().clone())
        .collect();
    for &i in right.payloads {
        let f = &right.table.fields[i];
        let mut name = f.name().clone();
        while fields.iter().any(|g| *g.name() == name) {
            name.push_str("_right");
        }
        fields.push(f.as_ref().clone().with_name(name));
    }
    fields
}

/// Whether the partitioned probe carries both sides' output columns whole (asked of the
/// library with empty columns of the types they travel as).
fn carried<B: JoinBackend>(b: &B, probe: &Side<'_>, build: &Side<'_>) -> Result<bool> {
    let types = |s: &Side<'_>| -> Result<Vec<Column<B>>> {
        s.payloads
            .iter()
            .map(|&i| {
                Ok(match s.table.columns[i].width() {
                    4 => Column::U32(b.alloc::<u32>(0)?),
                    _ => Column::U64(b.alloc::<u64>(0)?),
                })
            })
            .collect()
    };
    let inner = JoinOptions::new(JoinKind::Inner);
    Ok(PartitionedProbe::<B, u32>::supports(
        &inner,
        &types(probe)?,
        &types(build)?,
    ))
}

/// What `Auto` runs for `probe ⋈ build` (the build side as its right side), from the sample it
/// would take: taken by the CPU twin of the sample from the files' key columns (lent to it
/// without a copy), with the thresholds of `b`.
fn auto_choice<B: JoinBackend, K: Key>(
    b: &B,
    (probe, probe_key, probe_bytes): (&mut HostTable, usize, usize),
    (build, build_key, build_bytes): (&mut HostTable, usize, usize),
    opts: &JoinOptions,
) -> Result<(Algorithm, Option<JoinInputStats>, ChoiceReason)> {
    let params = ChoiceParams::for_backend(b);
    let sides = (probe.rows(), build.rows());
    if let Some((algorithm, reason)) =
        choose_unsampled(sides, opts.right_unique, opts.kind, &params)
    {
        return Ok((algorithm, None, reason));
    }
    let (probe_keys, build_keys) = (
        take_keys::<K>(probe, probe_key),
        take_keys::<K>(build, build_key),
    );
    let sampled = sample_stats(
        &CpuBackend::new(),
        &probe_keys,
        &build_keys,
        (probe_bytes, build_bytes),
        opts,
        &params,
    );
    put_keys(probe, probe_key, probe_keys);
    put_keys(build, build_key, build_keys);
    let sampled = sampled?;
    let (algorithm, reason) = choose(&sampled, opts.kind, &params);
    Ok((algorithm, Some(sampled), reason))
}

/// Column `key` of `t` as keys of `K`, taken out of the table: its bits, without a copy (the
/// key type follows the column's width). [`put_keys`] puts it back where it is needed again.
fn take_keys<K: Key>(t: &mut HostTable, key: usize) -> Vec<K> {
    let column = std::mem::replace(&mut t.columns[key], Column::U32(Vec::new()));
    each_column!(column, v => cast_vec(v))
}

/// Puts back a key column that [`take_keys`] took, as the type of its field.
fn put_keys<K: Key>(t: &mut HostTable, key: usize, keys: Vec<K>) {
    t.columns[key] = match t.fields[key].data_type() {
        DataType::Int32 => Column::I32(cast_vec(keys)),
        DataType::UInt32 => Column::U32(cast_vec(keys)),
        DataType::Int64 => Column::I64(cast_vec(keys)),
        _ => Column::U64(cast_vec(keys)),
    };
}

/// `v` as elements of `U`, bit for bit: the same allocation where the widths agree (always,
/// here), else converted.
fn cast_vec<T: Element, U: Element>(v: Vec<T>) -> Vec<U> {
    bit_cast_vec(v).unwrap_or_else(|v| v.iter().map(|x| U::from_bits(x.to_bits())).collect())
}

/// `side`'s output columns over `rows` on `b`, each as the unsigned column of its bits.
fn upload_columns<B: Backend>(
    b: &B,
    side: &Side<'_>,
    rows: std::ops::Range<usize>,
) -> Result<Vec<Column<B>>> {
    side.payloads
        .iter()
        .map(|&i| {
            let c = &side.table.columns[i];
            Ok(if c.width() == 4 {
                let v = each_column!(c, v => bit_cast_slice::<_, u32>(&v[rows.clone()]));
                Column::U32(b.upload(v.unwrap_or(&[]))?)
            } else {
                let v = each_column!(c, v => bit_cast_slice::<_, u64>(&v[rows.clone()]));
                Column::U64(b.upload(v.unwrap_or(&[]))?)
            })
        })
        .collect()
}

/// A column brought back as the unsigned column of its bits, as the type of its field.
fn signed_as(c: Column<CpuBackend>, ty: &DataType) -> Column<CpuBackend> {
    match (c, ty) {
        (Column::U32(v), DataType::Int32) => Column::I32(cast_vec(v)),
        (Column::U64(v), DataType::Int64) => Column::I64(cast_vec(v)),
        (c, _) => c,
    }
}
