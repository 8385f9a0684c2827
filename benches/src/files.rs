//! Tables in files: Parquet or Arrow IPC inputs (told apart by their magic bytes, `PAR1` or
//! `ARROW1`), outputs to Parquet (snappy) or, for a `.arrow`/`.feather`/`.ipc` name, Arrow IPC.
//!
//! Parquet row groups are decoded in parallel across the rayon pool, each straight into its
//! rows of the output columns (zeroed allocations: pages are first touched by the decoding
//! thread, not by a fill). Arrow IPC files are read batch by batch.
//!
//! Column types map one to one: Arrow Int32, Int64, UInt32, UInt64 are joinkit's i32, i64,
//! u32, u64 elements; any other type is an error naming the column. Inputs must be free of
//! nulls (joinkit's columns carry no validity); outputs may have nulls (a left outer join's
//! unmatched right side).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, PrimitiveArray, RecordBatch};
use arrow_buffer::NullBuffer;
use arrow_schema::{DataType, Field, FieldRef, Schema};
use joinkit_cuda::{Column, CpuBackend};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;
use rayon::prelude::*;

use crate::error::{BenchError, Result};

/// Rows per batch when reading Parquet (the reader's default of 1024 is slow for big files).
const BATCH_ROWS: usize = 1 << 16;

/// A file's columns on the host: its Arrow fields and their values.
pub(crate) struct HostTable {
    /// Where it was read from.
    pub(crate) path: PathBuf,
    /// The columns' names and types.
    pub(crate) fields: Vec<FieldRef>,
    /// The values, one joinkit column per field.
    pub(crate) columns: Vec<Column<CpuBackend>>,
}

impl HostTable {
    /// Rows.
    pub(crate) fn rows(&self) -> usize {
        self.columns.first().map_or(0, Column::len)
    }

    /// The position of the column called `name`.
    ///
    /// # Errors
    /// [`BenchError::File`] naming the columns there are.
    pub(crate) fn find(&self, name: &str) -> Result<usize> {
        self.fields
            .iter()
            .position(|f| f.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = self.fields.iter().map(|f| f.name().as_str()).collect();
                self.error(format!(
                    "no column {name:?} (columns: {})",
                    names.join(", ")
                ))
            })
    }

    fn error(&self, message: String) -> BenchError {
        BenchError::File {
            path: self.path.clone(),
            message,
        }
    }
}

/// Appends an array's values to a column of its type (false when the types differ).
fn append(col: &mut Column<CpuBackend>, a: &dyn Array) -> bool {
    match col {
        Column::U32(v) => a
            .as_primitive_opt::<UInt32Type>()
            .map(|p| v.extend_from_slice(p.values())),
        Column::I32(v) => a
            .as_primitive_opt::<Int32Type>()
            .map(|p| v.extend_from_slice(p.values())),
        Column::U64(v) => a
            .as_primitive_opt::<UInt64Type>()
            .map(|p| v.extend_from_slice(p.values())),
        Column::I64(v) => a
            .as_primitive_opt::<Int64Type>()
            .map(|p| v.extend_from_slice(p.values())),
    }
    .is_some()
}

/// A joinkit column as an Arrow array, with `nulls` marking rows without a value.
pub(crate) fn to_arrow(col: Column<CpuBackend>, nulls: Option<NullBuffer>) -> ArrayRef {
    match col {
        Column::U32(v) => Arc::new(PrimitiveArray::<UInt32Type>::new(v.into(), nulls)),
        Column::I32(v) => Arc::new(PrimitiveArray::<Int32Type>::new(v.into(), nulls)),
        Column::U64(v) => Arc::new(PrimitiveArray::<UInt64Type>::new(v.into(), nulls)),
        Column::I64(v) => Arc::new(PrimitiveArray::<Int64Type>::new(v.into(), nulls)),
    }
}

/// Reads every column of a Parquet or Arrow IPC file.
///
/// # Errors
/// [`BenchError::Io`] when the file cannot be opened or read; [`BenchError::File`] when it is
/// neither format, is corrupt, has a column of another type than Int32, Int64, UInt32,
/// UInt64, or has nulls.
pub(crate) fn read(path: &Path) -> Result<HostTable> {
    let io = |source| BenchError::Io {
        path: path.to_path_buf(),
        source,
    };
    let bad = |message: String| BenchError::File {
        path: path.to_path_buf(),
        message,
    };
    let mut magic = Vec::with_capacity(6);
    File::open(path)
        .and_then(|f| f.take(6).read_to_end(&mut magic))
        .map_err(io)?;
    let file = File::open(path).map_err(io)?;
    if magic.starts_with(b"PAR1") {
        return read_parquet(path, file);
    }
    if magic != b"ARROW1" {
        return Err(bad(
            "neither a Parquet file nor an Arrow IPC file (no PAR1 or ARROW1 magic bytes)".into(),
        ));
    }
    let reader = arrow_ipc::reader::FileReader::try_new_buffered(file, None)
        .map_err(|e| bad(format!("not a readable Arrow IPC file: {e}")))?;
    let mut table = empty_table(path, &reader.schema(), 0)?;
    for batch in reader {
        let batch = batch.map_err(|e| bad(format!("cannot read: {e}")))?;
        for ((f, col), a) in table
            .fields
            .iter()
            .zip(&mut table.columns)
            .zip(batch.columns())
        {
            check_nulls(f, a.as_ref()).map_err(bad)?;
            if !append(col, a.as_ref()) {
                return Err(bad(format!("column {:?} changes type mid-file", f.name())));
            }
        }
    }
    Ok(table)
}

/// A table of `schema`'s fields with `rows` zeroed rows a column (zeroed memory is mapped
/// untouched: whoever writes a page first pays for it).
///
/// # Errors
/// [`BenchError::File`] for a column of a type joinkit does not join.
fn empty_table(path: &Path, schema: &Schema, rows: usize) -> Result<HostTable> {
    // At most 8 bytes a value: a row count no allocation can hold is an error, not a panic.
    if rows.checked_mul(8).is_none_or(|b| b > isize::MAX as usize) {
        return Err(BenchError::File {
            path: path.to_path_buf(),
            message: format!("{rows} rows do not fit memory"),
        });
    }
    let columns = schema
        .fields()
        .iter()
        .map(|f| {
            Ok(match f.data_type() {
                DataType::UInt32 => Column::U32(vec![0; rows]),
                DataType::Int32 => Column::I32(vec![0; rows]),
                DataType::UInt64 => Column::U64(vec![0; rows]),
                DataType::Int64 => Column::I64(vec![0; rows]),
                t => {
                    return Err(BenchError::File {
                        path: path.to_path_buf(),
                        message: format!(
                            "column {:?} has type {t}; joinkit joins Int32, Int64, UInt32 and \
                             UInt64 columns",
                            f.name()
                        ),
                    });
                }
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(HostTable {
        path: path.to_path_buf(),
        fields: schema.fields().iter().cloned().collect(),
        columns,
    })
}

/// An error message for an array with nulls.
fn check_nulls(f: &Field, a: &dyn Array) -> std::result::Result<(), String> {
    if a.null_count() > 0 {
        return Err(format!(
            "column {:?} has nulls; joinkit joins columns without nulls",
            f.name()
        ));
    }
    Ok(())
}

/// One column's rows of one row group, to decode into.
enum RowsOf<'a> {
    U32(&'a mut [u32]),
    I32(&'a mut [i32]),
    U64(&'a mut [u64]),
    I64(&'a mut [i64]),
}

impl RowsOf<'_> {
    /// Copies `a`'s values to rows `at..`: false when the types differ or they do not fit.
    fn copy_at(&mut self, at: usize, a: &dyn Array) -> bool {
        fn put<T: Copy>(dst: &mut [T], at: usize, src: Option<&[T]>) -> bool {
            match src {
                Some(v) if at + v.len() <= dst.len() => {
                    dst[at..at + v.len()].copy_from_slice(v);
                    true
                }
                _ => false,
            }
        }
        match self {
            Self::U32(d) => put(
                d,
                at,
                a.as_primitive_opt::<UInt32Type>().map(|p| &p.values()[..]),
            ),
            Self::I32(d) => put(
                d,
                at,
                a.as_primitive_opt::<Int32Type>().map(|p| &p.values()[..]),
            ),
            Self::U64(d) => put(
                d,
                at,
                a.as_primitive_opt::<UInt64Type>().map(|p| &p.values()[..]),
            ),
            Self::I64(d) => put(
                d,
                at,
                a.as_primitive_opt::<Int64Type>().map(|p| &p.values()[..]),
            ),
        }
    }
}

/// Splits `col` into the rows of each row group (`sizes`, summing to its length).
fn split_rows<'a>(col: &'a mut Column<CpuBackend>, sizes: &[usize]) -> Vec<RowsOf<'a>> {
    fn split<'a, T>(
        mut v: &'a mut [T],
        sizes: &[usize],
        f: fn(&'a mut [T]) -> RowsOf<'a>,
    ) -> Vec<RowsOf<'a>> {
        sizes
            .iter()
            .map(|&n| {
                let (head, tail) = std::mem::take(&mut v).split_at_mut(n);
                v = tail;
                f(head)
            })
            .collect()
    }
    match col {
        Column::U32(v) => split(v, sizes, RowsOf::U32),
        Column::I32(v) => split(v, sizes, RowsOf::I32),
        Column::U64(v) => split(v, sizes, RowsOf::U64),
        Column::I64(v) => split(v, sizes, RowsOf::I64),
    }
}

/// Reads a Parquet file: its row groups decoded in parallel, each by its own reader of the
/// file, straight into its rows of the columns (no batch is copied twice).
fn read_parquet(path: &Path, file: File) -> Result<HostTable> {
    let bad = |message: String| BenchError::File {
        path: path.to_path_buf(),
        message,
    };
    let builder = ParquetRecordBatchReaderBuilder::try_new(file)
        .map_err(|e| bad(format!("not a readable Parquet file: {e}")))?;
    let sizes: Vec<usize> = builder
        .metadata()
        .row_groups()
        .iter()
        .map(|g| usize::try_from(g.num_rows()).unwrap_or(usize::MAX))
        .collect();
    let rows = sizes
        .iter()
        .try_fold(0usize, |a, &n| a.checked_add(n))
        .ok_or_else(|| bad("row counts overflow".into()))?;
    let mut table = empty_table(path, builder.schema(), rows)?;
    let fields = &table.fields;
    // dests[g][c]: row group g's rows of column c.
    let mut by_column: Vec<std::vec::IntoIter<RowsOf<'_>>> = table
        .columns
        .iter_mut()
        .map(|c| split_rows(c, &sizes).into_iter())
        .collect();
    let dests: Vec<Vec<RowsOf<'_>>> = (0..sizes.len())
        .map(|_| by_column.iter_mut().filter_map(Iterator::next).collect())
        .collect();
    dests
        .into_par_iter()
        .enumerate()
        .try_for_each(|(g, mut dest)| -> Result<()> {
            let file = File::open(path).map_err(|source| BenchError::Io {
                path: path.to_path_buf(),
                source,
            })?;
            let reader = ParquetRecordBatchReaderBuilder::try_new(file)
                .and_then(|b| {
                    b.with_row_groups(vec![g])
                        .with_batch_size(BATCH_ROWS)
                        .build()
                })
                .map_err(|e| bad(format!("not a readable Parquet file: {e}")))?;
            let mut at = 0;
            for batch in reader {
                let batch = batch.map_err(|e| bad(format!("cannot read: {e}")))?;
                for ((f, d), a) in fields.iter().zip(&mut dest).zip(batch.columns()) {
                    check_nulls(f, a.as_ref()).map_err(bad)?;
                    if !d.copy_at(at, a.as_ref()) {
                        return Err(bad(format!(
                            "column {:?} changes type or row count mid-file",
                            f.name()
                        )));
                    }
                }
                at += batch.num_rows();
            }
            if at != sizes[g] {
                return Err(bad(format!(
                    "row group {g} has {at} rows, its metadata says {}",
                    sizes[g]
                )));
            }
            Ok(())
        })?;
    Ok(table)
}

/// Writes one table of `fields` and `columns`: Arrow IPC for a `.arrow`, `.feather` or `.ipc`
/// name, else Parquet with snappy compression.
///
/// # Errors
/// [`BenchError::Io`] when the file cannot be created; [`BenchError::File`] when writing fails.
pub(crate) fn write(path: &Path, fields: Vec<Field>, columns: Vec<ArrayRef>) -> Result<()> {
    let bad = |e: &dyn std::fmt::Display| BenchError::File {
        path: path.to_path_buf(),
        message: format!("cannot write: {e}"),
    };
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(schema.clone(), columns).map_err(|e| bad(&e))?;
    let file = File::create(path).map_err(|source| BenchError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let ipc = path
        .extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| ["arrow", "feather", "ipc"].contains(&e.to_ascii_lowercase().as_str()));
    if ipc {
        let mut w =
            arrow_ipc::writer::FileWriter::try_new_buffered(file, &schema).map_err(|e| bad(&e))?;
        w.write(&batch).map_err(|e| bad(&e))?;
        w.finish().map_err(|e| bad(&e))
    } else {
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build();
        let mut w = ArrowWriter::try_new(file, schema, Some(props)).map_err(|e| bad(&e))?;
        w.write(&batch).map_err(|e| bad(&e))?;
        w.close().map(drop).map_err(|e| bad(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, UInt32Array};

    /// Row groups decoded in parallel land in file order, every column alike.
    #[test]
    fn row_groups_are_read_in_order() {
        let path =
            std::env::temp_dir().join(format!("joinkit-groups-{}.parquet", std::process::id()));
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::UInt32, false),
            Field::new("v", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(UInt32Array::from_iter_values(0..1000)),
                Arc::new(Int64Array::from_iter_values((0..1000).map(|i| -i))),
            ],
        )
        .unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(7))
            .build();
        let mut w =
            ArrowWriter::try_new(File::create(&path).unwrap(), schema, Some(props)).unwrap();
        // Two writes: row groups of 7 rows and a short one between them.
        w.write(&batch.slice(0, 500)).unwrap();
        w.write(&batch.slice(500, 500)).unwrap();
        assert!(w.close().unwrap().row_groups().len() > 100);
        let t = read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(t.rows(), 1000);
        assert!(matches!(&t.columns[0], Column::U32(v) if v.iter().copied().eq(0..1000)));
        assert!(
            matches!(&t.columns[1], Column::I64(v) if v.iter().copied().eq((0..1000).map(|i| -i)))
        );
    }
}
