//! Tables in files: Parquet or Arrow IPC inputs (told apart by their magic bytes, `PAR1` or
//! `ARROW1`), outputs to Parquet (snappy) or, for a `.arrow`/`.feather`/`.ipc` name, Arrow IPC.
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
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Schema, SchemaRef};
use joinkit_cuda::{Column, CpuBackend};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::basic::Compression;
use parquet::file::properties::WriterProperties;

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

/// An empty joinkit column for an Arrow type, if joinkit joins that type.
fn empty_column(t: &DataType) -> Option<Column<CpuBackend>> {
    Some(match t {
        DataType::UInt32 => Column::U32(Vec::new()),
        DataType::Int32 => Column::I32(Vec::new()),
        DataType::UInt64 => Column::U64(Vec::new()),
        DataType::Int64 => Column::I64(Vec::new()),
        _ => return None,
    })
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

type Batches = Box<dyn Iterator<Item = std::result::Result<RecordBatch, ArrowError>>>;

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
    let (schema, batches): (SchemaRef, Batches) = if magic.starts_with(b"PAR1") {
        let builder = ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(|e| bad(format!("not a readable Parquet file: {e}")))?;
        let schema = builder.schema().clone();
        let reader = builder
            .with_batch_size(BATCH_ROWS)
            .build()
            .map_err(|e| bad(format!("not a readable Parquet file: {e}")))?;
        (schema, Box::new(reader))
    } else if magic == b"ARROW1" {
        let reader = arrow_ipc::reader::FileReader::try_new_buffered(file, None)
            .map_err(|e| bad(format!("not a readable Arrow IPC file: {e}")))?;
        (reader.schema(), Box::new(reader))
    } else {
        return Err(bad(
            "neither a Parquet file nor an Arrow IPC file (no PAR1 or ARROW1 magic bytes)".into(),
        ));
    };
    let mut table = HostTable {
        path: path.to_path_buf(),
        fields: schema.fields().iter().cloned().collect(),
        columns: Vec::with_capacity(schema.fields().len()),
    };
    for f in schema.fields() {
        let col = empty_column(f.data_type()).ok_or_else(|| {
            bad(format!(
                "column {:?} has type {}; joinkit joins Int32, Int64, UInt32 and UInt64 columns",
                f.name(),
                f.data_type()
            ))
        })?;
        table.columns.push(col);
    }
    for batch in batches {
        let batch = batch.map_err(|e| bad(format!("cannot read: {e}")))?;
        for ((f, col), a) in table
            .fields
            .iter()
            .zip(&mut table.columns)
            .zip(batch.columns())
        {
            if a.null_count() > 0 {
                return Err(bad(format!(
                    "column {:?} has nulls; joinkit joins columns without nulls",
                    f.name()
                )));
            }
            if !append(col, a.as_ref()) {
                return Err(bad(format!("column {:?} changes type mid-file", f.name())));
            }
        }
    }
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
