//! Q4's tables as Parquet files: written for other engines to run the same query, read
//! from what they (or we) wrote.

use std::path::Path;

use arrow_array::cast::AsArray;
use arrow_array::{
    Array, ArrayRef, Date32Array, Int32Array, Int64Array, StringArray, UInt32Array, types,
};
use arrow_schema::{DataType, Field};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::*;
use crate::files;

/// Writes `orders.parquet` and `lineitem.parquet` with Q4's columns.
pub(super) fn write_parquet(dir: &Path, c: &Q4Columns) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|source| BenchError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let date = |v: &[i32]| -> ArrayRef { std::sync::Arc::new(Date32Array::from(v.to_vec())) };
    let key = |v: &[u64]| -> ArrayRef {
        std::sync::Arc::new(Int64Array::from_iter_values(v.iter().map(|&k| k as i64)))
    };
    let priority: ArrayRef = std::sync::Arc::new(StringArray::from_iter_values(
        c.o_orderpriority
            .iter()
            .map(|&p| PRIORITIES.get(p as usize).copied().unwrap_or("?")),
    ));
    let orders = dir.join("orders.parquet");
    files::write(
        &orders,
        files::Format::of(&orders, None)?,
        vec![
            Field::new("o_orderkey", DataType::Int64, false),
            Field::new("o_orderdate", DataType::Date32, false),
            Field::new("o_orderpriority", DataType::Utf8, false),
        ],
        vec![key(&c.o_orderkey), date(&c.o_orderdate), priority],
    )?;
    let lineitem = dir.join("lineitem.parquet");
    files::write(
        &lineitem,
        files::Format::of(&lineitem, None)?,
        vec![
            Field::new("l_orderkey", DataType::Int64, false),
            Field::new("l_commitdate", DataType::Date32, false),
            Field::new("l_receiptdate", DataType::Date32, false),
        ],
        vec![
            key(&c.l_orderkey),
            date(&c.l_commitdate),
            date(&c.l_receiptdate),
        ],
    )
}

/// Reads Q4's columns from `orders.parquet` and `lineitem.parquet` in `dir`.
pub(super) fn read_parquet(dir: &Path) -> Result<Q4Columns> {
    let orders = dir.join("orders.parquet");
    let lineitem = dir.join("lineitem.parquet");
    let mut o =
        read_columns(&orders, &["o_orderkey", "o_orderdate", "o_orderpriority"])?.into_iter();
    let mut l =
        read_columns(&lineitem, &["l_orderkey", "l_commitdate", "l_receiptdate"])?.into_iter();
    let next = |it: &mut std::vec::IntoIter<(String, Vec<ArrayRef>)>, path: &Path| {
        it.next().ok_or_else(|| BenchError::File {
            path: path.to_path_buf(),
            message: "a column is missing".into(),
        })
    };
    let (ok, od, op) = (
        next(&mut o, &orders)?,
        next(&mut o, &orders)?,
        next(&mut o, &orders)?,
    );
    let (lk, lc, lr) = (
        next(&mut l, &lineitem)?,
        next(&mut l, &lineitem)?,
        next(&mut l, &lineitem)?,
    );
    Ok(Q4Columns {
        o_orderkey: keys(&orders, ok)?,
        o_orderdate: days(&orders, od)?,
        o_orderpriority: priorities(&orders, op)?,
        l_orderkey: keys(&lineitem, lk)?,
        l_commitdate: days(&lineitem, lc)?,
        l_receiptdate: days(&lineitem, lr)?,
    })
}

/// The named columns of a Parquet file, each as the record batches' arrays.
fn read_columns(path: &Path, names: &[&str]) -> Result<Vec<(String, Vec<ArrayRef>)>> {
    let bad = |e: &dyn std::fmt::Display| BenchError::File {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let file = std::fs::File::open(path).map_err(|source| BenchError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| bad(&e))?;
    let mask = ProjectionMask::columns(builder.parquet_schema(), names.iter().copied());
    let reader = builder
        .with_projection(mask)
        .with_batch_size(1 << 20)
        .build()
        .map_err(|e| bad(&e))?;
    let mut out: Vec<(String, Vec<ArrayRef>)> = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| bad(&e))?;
        for name in names {
            let col = batch
                .column_by_name(name)
                .ok_or_else(|| bad(&format!("no column {name}")))?;
            match out.iter_mut().find(|(n, _)| n == name) {
                Some((_, chunks)) => chunks.push(col.clone()),
                None => out.push((name.to_string(), vec![col.clone()])),
            }
        }
    }
    // An empty file still names its columns, so the caller finds each one (with no rows).
    for name in names {
        if !out.iter().any(|(n, _)| n == name) {
            out.push((name.to_string(), Vec::new()));
        }
    }
    out.sort_by_key(|(n, _)| names.iter().position(|m| m == n));
    Ok(out)
}

fn column_error(path: &Path, name: &str, what: &str, a: &dyn Array) -> BenchError {
    BenchError::File {
        path: path.to_path_buf(),
        message: format!("column {name}: {what}, not {}", a.data_type()),
    }
}

/// Non-null values of every chunk, converted by `f`, or an error naming the column.
fn convert<T>(
    path: &Path,
    (name, chunks): &(String, Vec<ArrayRef>),
    what: &str,
    mut f: impl FnMut(&dyn Array, &mut Vec<T>) -> bool,
) -> Result<Vec<T>> {
    let mut out = Vec::with_capacity(chunks.iter().map(|c| c.len()).sum());
    for c in chunks {
        if c.null_count() > 0 {
            return Err(column_error(
                path,
                name,
                "nulls are not allowed",
                c.as_ref(),
            ));
        }
        if !f(c.as_ref(), &mut out) {
            return Err(column_error(path, name, what, c.as_ref()));
        }
    }
    Ok(out)
}

fn keys(path: &Path, col: (String, Vec<ArrayRef>)) -> Result<Vec<u64>> {
    convert(
        path,
        &col,
        "keys are Int32, Int64, UInt32 or UInt64",
        |a, out| {
            match a.data_type() {
                DataType::Int64 => out.extend(
                    a.as_primitive::<types::Int64Type>()
                        .values()
                        .iter()
                        .map(|&v| v as u64),
                ),
                DataType::UInt64 => {
                    out.extend(a.as_primitive::<types::UInt64Type>().values().iter())
                }
                DataType::Int32 => out.extend(
                    a.as_primitive::<types::Int32Type>()
                        .values()
                        .iter()
                        .map(|&v| v as u64),
                ),
                DataType::UInt32 => out.extend(
                    a.as_primitive::<types::UInt32Type>()
                        .values()
                        .iter()
                        .map(|&v| u64::from(v)),
                ),
                _ => return false,
            }
            true
        },
    )
}

fn days(path: &Path, col: (String, Vec<ArrayRef>)) -> Result<Vec<i32>> {
    convert(path, &col, "dates are Date32 or Int32 days", |a, out| {
        match a.data_type() {
            DataType::Date32 => out.extend(a.as_primitive::<types::Date32Type>().values().iter()),
            DataType::Int32 => out.extend(a.as_primitive::<types::Int32Type>().values().iter()),
            _ => return false,
        }
        true
    })
}

fn priorities(path: &Path, col: (String, Vec<ArrayRef>)) -> Result<Vec<u32>> {
    let text = |s: &str| PRIORITIES.iter().position(|p| *p == s).map(|p| p as u32);
    let mut unknown = None;
    let out = convert(
        path,
        &col,
        "priorities are text or UInt32 codes",
        |a, out| {
            if let Some(s) = a.as_string_opt::<i32>() {
                for v in s.iter().flatten() {
                    match text(v) {
                        Some(c) => out.push(c),
                        None => unknown = Some(v.to_string()),
                    }
                }
            } else if let Some(v) = a.as_any().downcast_ref::<UInt32Array>() {
                out.extend(v.values().iter());
            } else if let Some(v) = a.as_any().downcast_ref::<Int32Array>() {
                out.extend(v.values().iter().map(|&c| c as u32));
            } else {
                return false;
            }
            true
        },
    )?;
    if let Some(v) = unknown {
        return Err(BenchError::File {
            path: path.to_path_buf(),
            message: format!("o_orderpriority {v:?} is not a TPC-H priority"),
        });
    }
    if out.iter().any(|&c| c >= 5) {
        return Err(BenchError::File {
            path: path.to_path_buf(),
            message: "o_orderpriority codes are 0..5".into(),
        });
    }
    Ok(out)
}
