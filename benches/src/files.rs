//! Tables in files: Parquet or Arrow IPC inputs (told apart by their magic bytes, `PAR1` or
//! `ARROW1`), outputs to Parquet (snappy, zstd or none) or, for a `.arrow`/`.feather`/`.ipc`
//! name, Arrow IPC (none, lz4 or zstd). Parquet output is written in row groups encoded in
//! parallel (one `ArrowWriter` encodes and compresses on one thread) and appended in order as
//! they come, dictionary-encoding only the columns whose sampled values repeat enough for a
//! row group's dictionary to fit.
//!
//! Parquet row groups are decoded in parallel across the rayon pool, each straight into its
//! rows of the output columns (zeroed allocations: pages are first touched by the decoding
//! thread, not by a fill); so are Arrow IPC files' record batches.
//!
//! Column types map one to one: Arrow Int32, Int64, UInt32, UInt64 are joinkit's i32, i64,
//! u32, u64 elements; any other type is an error naming the column. Inputs must be free of
//! nulls (joinkit's columns carry no validity); outputs may have nulls (a left outer join's
//! unmatched right side).

use std::collections::HashSet;
use std::fs::File;
use std::hash::Hash;
use std::io::{BufWriter, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, mpsc};
use std::thread;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::{Array, ArrayRef, ArrowPrimitiveType, PrimitiveArray, RecordBatch};
use arrow_buffer::{NullBuffer, ToByteSlice};
use arrow_ipc::reader::{FileReader, read_footer_length};
use arrow_ipc::writer::IpcWriteOptions;
use arrow_ipc::{root_as_footer, root_as_message};
use arrow_schema::{DataType, Field, FieldRef, Schema};
use joinkit_cuda::{Column, CpuBackend, try_zeroed};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ParquetRecordBatchReaderBuilder};
use parquet::arrow::arrow_writer::{
    ArrowColumnChunk, ArrowColumnWriter, ArrowRowGroupWriterFactory, compute_leaves,
};
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::Result as PqResult;
use parquet::file::properties::{DEFAULT_DICTIONARY_PAGE_SIZE_LIMIT, WriterProperties};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnPath;
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
        return read_parquet(path, &file);
    }
    if magic != b"ARROW1" {
        return Err(bad(
            "neither a Parquet file nor an Arrow IPC file (no PAR1 or ARROW1 magic bytes)".into(),
        ));
    }
    read_ipc(path, file)
}

/// A table of `schema`'s fields with `rows` zeroed rows a column (zeroed memory is mapped
/// untouched and advised onto huge pages, [`try_zeroed`]: whoever writes a page first pays
/// for it, 2 MiB at a time; `vec![0; rows]` took a fault every 4 KiB, half of a one-shot
/// join's page faults on the 2-core machine).
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
    let zeroed = |e| BenchError::File {
        path: path.to_path_buf(),
        message: format!("{rows} rows do not fit memory: {e}"),
    };
    let columns = schema
        .fields()
        .iter()
        .map(|f| {
            Ok(match f.data_type() {
                DataType::UInt32 => Column::U32(try_zeroed(rows).map_err(zeroed)?),
                DataType::Int32 => Column::I32(try_zeroed(rows).map_err(zeroed)?),
                DataType::UInt64 => Column::U64(try_zeroed(rows).map_err(zeroed)?),
                DataType::Int64 => Column::I64(try_zeroed(rows).map_err(zeroed)?),
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

/// A table of `schema`'s columns filled part by part (row groups, record batches) across the
/// rayon pool: part `p` has `sizes[p]` rows, decoded by `batches(p)` straight into its rows of
/// the columns (no batch is copied twice, each page first touched by the thread that fills it).
fn read_parts<I>(
    path: &Path,
    schema: &Schema,
    (part, sizes): (&str, &[usize]),
    batches: impl Fn(usize) -> Result<I> + Sync,
) -> Result<HostTable>
where
    I: Iterator<Item = std::result::Result<RecordBatch, String>>,
{
    let bad = |message: String| BenchError::File {
        path: path.to_path_buf(),
        message,
    };
    let rows = sizes
        .iter()
        .try_fold(0usize, |a, &n| a.checked_add(n))
        .ok_or_else(|| bad("row counts overflow".into()))?;
    let mut table = empty_table(path, schema, rows)?;
    let fields = &table.fields;
    // dests[p][c]: part p's rows of column c.
    let mut by_column: Vec<std::vec::IntoIter<RowsOf<'_>>> = table
        .columns
        .iter_mut()
        .map(|c| split_rows(c, sizes).into_iter())
        .collect();
    let dests: Vec<Vec<RowsOf<'_>>> = (0..sizes.len())
        .map(|_| by_column.iter_mut().filter_map(Iterator::next).collect())
        .collect();
    dests
        .into_par_iter()
        .enumerate()
        .try_for_each(|(p, mut dest)| -> Result<()> {
            let mut at = 0;
            for batch in batches(p)? {
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
            if at != sizes[p] {
                return Err(bad(format!(
                    "{part} {p} has {at} rows, its metadata says {}",
                    sizes[p]
                )));
            }
            Ok(())
        })?;
    Ok(table)
}

/// Reads a Parquet file: its row groups decoded in parallel, all from one read-only mapping
/// of the file ([`mapped`]) whose footer is parsed once.
fn read_parquet(path: &Path, file: &File) -> Result<HostTable> {
    let bad = |message: String| BenchError::File {
        path: path.to_path_buf(),
        message,
    };
    let unreadable =
        |e: parquet::errors::ParquetError| bad(format!("not a readable Parquet file: {e}"));
    let bytes = mapped(path, file)?;
    let metadata = ArrowReaderMetadata::load(&bytes, Default::default()).map_err(unreadable)?;
    let sizes: Vec<usize> = metadata
        .metadata()
        .row_groups()
        .iter()
        .map(|g| usize::try_from(g.num_rows()).unwrap_or(usize::MAX))
        .collect();
    read_parts(path, metadata.schema(), ("row group", &sizes), |g| {
        let reader =
            ParquetRecordBatchReaderBuilder::new_with_metadata(bytes.clone(), metadata.clone())
                .with_row_groups(vec![g])
                .with_batch_size(BATCH_ROWS)
                .build()
                .map_err(unreadable)?;
        Ok(reader.map(|b| b.map_err(|e| e.to_string())))
    })
}

/// The bytes of `file`, mapped read-only where the system allows (a regular file), else read.
/// Why: the Parquet reader copied every column chunk it decodes into fresh memory, whose pages
/// the kernel zeroes first; decoding from the page cache's own pages skips both (on the 2-core
/// machine page zeroing was 42 % of a one-shot join's cycles, docs/results/files.md). A file
/// truncated by another process while it is read ends the process with `SIGBUS`, as in every
/// reader of mapped files.
fn mapped(path: &Path, file: &File) -> Result<bytes::Bytes> {
    // SAFETY: the mapping is read-only and private to this process; what another process
    // writes to the file while it is read can change the bytes decoded (a bad file, reported
    // as one), not this process's memory safety, short of truncation (above).
    match unsafe { memmap2::Mmap::map(file) } {
        Ok(map) => Ok(bytes::Bytes::from_owner(map)),
        Err(_) => {
            let mut all = Vec::new();
            (&*file)
                .read_to_end(&mut all)
                .map_err(|source| BenchError::Io {
                    path: path.to_path_buf(),
                    source,
                })?;
            Ok(all.into())
        }
    }
}

/// Reads an Arrow IPC file: its record batches decoded in parallel, each by its own reader of
/// the file, their row counts read first from the batches' message headers.
fn read_ipc(path: &Path, mut file: File) -> Result<HostTable> {
    let bad = |e: &dyn std::fmt::Display| BenchError::File {
        path: path.to_path_buf(),
        message: format!("not a readable Arrow IPC file: {e}"),
    };
    let schema = FileReader::try_new_buffered(&mut file, None)
        .map_err(|e| bad(&e))?
        .schema();
    let sizes = ipc_batch_rows(&mut file).map_err(|e| bad(&e))?;
    read_parts(path, &schema, ("record batch", &sizes), |i| {
        let file = File::open(path).map_err(|source| BenchError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut reader = FileReader::try_new_buffered(file, None).map_err(|e| bad(&e))?;
        reader.set_index(i).map_err(|e| bad(&e))?;
        Ok(reader.take(1).map(|b| b.map_err(|e| e.to_string())))
    })
}

/// The rows of each record batch of an Arrow IPC file, from the batches' message headers found
/// through the footer: nothing is decoded.
fn ipc_batch_rows(file: &mut File) -> std::result::Result<Vec<usize>, String> {
    let io = |e: std::io::Error| e.to_string();
    let mut tail = [0u8; 10];
    file.seek(SeekFrom::End(-10)).map_err(io)?;
    file.read_exact(&mut tail).map_err(io)?;
    let len = read_footer_length(tail).map_err(|e| e.to_string())?;
    let mut footer = vec![0u8; len];
    file.seek(SeekFrom::End(-10 - len as i64)).map_err(io)?;
    file.read_exact(&mut footer).map_err(io)?;
    let footer = root_as_footer(&footer).map_err(|e| e.to_string())?;
    let blocks = footer.recordBatches().ok_or("no record batches")?;
    blocks
        .iter()
        .map(|block| {
            let len = usize::try_from(block.metaDataLength()).map_err(|e| e.to_string())?;
            let offset = u64::try_from(block.offset()).map_err(|e| e.to_string())?;
            let mut meta = vec![0u8; len];
            file.seek(SeekFrom::Start(offset)).map_err(io)?;
            file.read_exact(&mut meta).map_err(io)?;
            // A length prefix, after a continuation marker since format version 0.15.
            let skip = if meta.starts_with(&[0xff; 4]) { 8 } else { 4 };
            let message = meta
                .get(skip..)
                .and_then(|m| root_as_message(m).ok())
                .ok_or("a record batch's header is not readable")?;
            let batch = message
                .header_as_record_batch()
                .ok_or("a record batch block holds another message")?;
            usize::try_from(batch.length()).map_err(|e| e.to_string())
        })
        .collect()
}

/// Rows per Parquet row group written: each is encoded by one thread, as many encoding as the
/// rayon pool has threads, while one thread appends them to the file in order. A quarter of the
/// `ArrowWriter`'s default (DuckDB writes 122,880): the appending waits for the first group
/// only, which at 2^20 rows took 60-100 ms of a 0.27-0.37 s write on an H200 host's 16 cores
/// (33.5 M rows of three Int64 columns; 15-19 ms at 2^18, the write 0.21-0.24 s).
pub(crate) const GROUP_ROWS: usize = 1 << 18;

/// Compression of the output (`--compression`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Codec {
    /// Snappy (Parquet only): pyarrow's, Spark's and DuckDB's default.
    Snappy,
    /// Zstandard at level 1 (Parquet and Arrow IPC).
    Zstd,
    /// LZ4 frames (Arrow IPC only): Feather's default.
    Lz4,
    /// Uncompressed.
    None,
}

/// An output file's format and compression, chosen from its name and `--compression` before
/// anything is read.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Format {
    /// Parquet, in row groups of [`GROUP_ROWS`] rows encoded in parallel.
    Parquet(Compression),
    /// Arrow IPC, one record batch.
    Ipc(Option<arrow_ipc::CompressionType>),
}

impl Format {
    /// Arrow IPC for a `.arrow`, `.feather` or `.ipc` name, else Parquet; `codec` by default
    /// snappy for Parquet and none for Arrow IPC.
    ///
    /// # Errors
    /// [`BenchError::Usage`] for a codec the format has not (snappy in Arrow IPC, LZ4 in
    /// Parquet): never written otherwise than asked.
    pub(crate) fn of(path: &Path, codec: Option<Codec>) -> Result<Format> {
        let ipc = path.extension().and_then(|e| e.to_str()).is_some_and(|e| {
            ["arrow", "feather", "ipc"].contains(&e.to_ascii_lowercase().as_str())
        });
        let refused = |codec: &str, format: &str, takes: &str| {
            BenchError::Usage(format!(
                "--compression {codec}: {} is {format}, which takes {takes}",
                path.display()
            ))
        };
        Ok(match (ipc, codec) {
            (false, None | Some(Codec::Snappy)) => Format::Parquet(Compression::SNAPPY),
            (false, Some(Codec::Zstd)) => Format::Parquet(Compression::ZSTD(ZstdLevel::default())),
            (false, Some(Codec::None)) => Format::Parquet(Compression::UNCOMPRESSED),
            (false, Some(Codec::Lz4)) => {
                return Err(refused("lz4", "Parquet", "snappy, zstd or none"));
            }
            (true, None | Some(Codec::None)) => Format::Ipc(None),
            (true, Some(Codec::Lz4)) => Format::Ipc(Some(arrow_ipc::CompressionType::LZ4_FRAME)),
            (true, Some(Codec::Zstd)) => Format::Ipc(Some(arrow_ipc::CompressionType::ZSTD)),
            (true, Some(Codec::Snappy)) => {
                return Err(refused("snappy", "Arrow IPC", "lz4, zstd or none"));
            }
        })
    }
}

/// Writes one table of `fields` and `columns` to `path` in `format`.
///
/// # Errors
/// [`BenchError::Io`] when the file cannot be created; [`BenchError::File`] when writing fails.
pub(crate) fn write(
    path: &Path,
    format: Format,
    fields: Vec<Field>,
    columns: Vec<ArrayRef>,
) -> Result<()> {
    let mut sink = Sink::create(path, format, fields, &columns)?;
    sink.write(columns)?;
    sink.finish()
}

/// An output file written batch by batch: a join's chunks as they come, or one whole table.
/// Parquet row groups of each batch are encoded in parallel and appended in order; Arrow IPC
/// takes each batch as a record batch. Dictionaries and compression are chosen per column from
/// the first batch.
pub(crate) struct Sink {
    path: PathBuf,
    schema: Arc<Schema>,
    out: Out,
}

enum Out {
    Ipc(Box<arrow_ipc::writer::FileWriter<BufWriter<File>>>),
    Parquet(Box<ParquetOut>),
}

struct ParquetOut {
    writer: SerializedFileWriter<File>,
    factory: ArrowRowGroupWriterFactory,
    /// Rows a row group holds (the last of each batch fewer).
    group_rows: usize,
    /// Row groups written so far.
    groups: usize,
}

impl Sink {
    /// Creates `path` for a table of `fields`, whose first rows are `first` (they choose the
    /// Parquet columns' encodings).
    ///
    /// # Errors
    /// [`BenchError::Io`] when the file cannot be created; [`BenchError::File`] when the
    /// writer cannot start.
    pub(crate) fn create(
        path: &Path,
        format: Format,
        fields: Vec<Field>,
        first: &[ArrayRef],
    ) -> Result<Sink> {
        Self::with_groups(path, format, fields, first, GROUP_ROWS)
    }

    /// [`Sink::create`] with Parquet row groups of `group_rows` rows.
    fn with_groups(
        path: &Path,
        format: Format,
        fields: Vec<Field>,
        first: &[ArrayRef],
        group_rows: usize,
    ) -> Result<Sink> {
        let schema = Arc::new(Schema::new(fields));
        let file = File::create(path).map_err(|source| BenchError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let bad = |e: &dyn std::fmt::Display| write_error(path, e);
        let out = match format {
            Format::Ipc(compression) => {
                let options = IpcWriteOptions::default()
                    .try_with_compression(compression)
                    .map_err(|e| bad(&e))?;
                let w = arrow_ipc::writer::FileWriter::try_new_with_options(
                    BufWriter::new(file),
                    &schema,
                    options,
                )
                .map_err(|e| bad(&e))?;
                Out::Ipc(Box::new(w))
            }
            Format::Parquet(compression) => {
                let props = parquet_properties(&schema, first, compression, group_rows);
                // The ArrowWriter writes the header and, at the end, the Arrow schema into the
                // metadata.
                let (writer, factory) = ArrowWriter::try_new(file, schema.clone(), Some(props))
                    .and_then(ArrowWriter::into_serialized_writer)
                    .map_err(|e| bad(&e))?;
                Out::Parquet(Box::new(ParquetOut {
                    writer,
                    factory,
                    group_rows,
                    groups: 0,
                }))
            }
        };
        Ok(Sink {
            path: path.to_path_buf(),
            schema,
            out,
        })
    }

    /// Appends the rows of `columns` (the sink's fields, in order).
    ///
    /// # Errors
    /// [`BenchError::File`] when the columns do not match the fields or writing fails.
    pub(crate) fn write(&mut self, columns: Vec<ArrayRef>) -> Result<()> {
        let batch = RecordBatch::try_new(self.schema.clone(), columns)
            .map_err(|e| write_error(&self.path, &e))?;
        match &mut self.out {
            Out::Ipc(w) => w.write(&batch),
            Out::Parquet(p) => {
                let ParquetOut {
                    writer,
                    factory,
                    group_rows,
                    groups,
                } = p.as_mut();
                write_groups(writer, factory, groups, &batch, *group_rows).map_err(Into::into)
            }
        }
        .map_err(|e| write_error(&self.path, &e))
    }

    /// Writes the footer and closes the file.
    ///
    /// # Errors
    /// [`BenchError::File`] when writing fails.
    pub(crate) fn finish(self) -> Result<()> {
        match self.out {
            Out::Ipc(mut w) => w.finish(),
            Out::Parquet(p) => p.writer.close().map(drop).map_err(Into::into),
        }
        .map_err(|e| write_error(&self.path, &e))
    }
}

fn write_error(path: &Path, e: &dyn std::fmt::Display) -> BenchError {
    BenchError::File {
        path: path.to_path_buf(),
        message: format!("cannot write: {e}"),
    }
}

/// The Parquet writer's settings: `compression`, and per column a dictionary only where
/// [`dictionary_pays`] and compression only where it pays, judged from the `first` rows.
fn parquet_properties(
    schema: &Schema,
    first: &[ArrayRef],
    compression: Compression,
    group_rows: usize,
) -> WriterProperties {
    let mut props = WriterProperties::builder()
        .set_compression(compression)
        .set_max_row_group_row_count(Some(group_rows));
    for (field, column) in schema.fields().iter().zip(first) {
        let path = ColumnPath::from(field.name().as_str());
        let dictionary = dictionary_pays(column.as_ref());
        if !dictionary && !compression_pays(column.as_ref(), compression) {
            props = props.set_column_compression(path.clone(), Compression::UNCOMPRESSED);
        }
        props = props.set_column_dictionary_enabled(path, dictionary);
    }
    props.build()
}

/// A row group's column chunks, encoded.
type Group = Vec<ArrowColumnChunk>;

/// Appends `batch` to `writer` in row groups of `group_rows` rows, numbered on from `groups`.
/// One `ArrowWriter` encodes (and compresses) on one thread only, so as many threads as the
/// rayon pool has encode the groups, thread `t` of `n` groups `t`, `t + n`, …, each at most one
/// group ahead of the appending, while this thread appends them in order as they come. (Waves
/// of one group a thread, appended while the next wave encoded, left a thread idle each wave:
/// 0.65–0.76 s against 0.57–0.67 s for the 33.5 M rows of 3 Int64 columns.)
fn write_groups(
    writer: &mut SerializedFileWriter<File>,
    factory: &ArrowRowGroupWriterFactory,
    groups: &mut usize,
    batch: &RecordBatch,
    group_rows: usize,
) -> PqResult<()> {
    let rows = batch.num_rows();
    let first = *groups;
    let encode = |g: usize| -> PqResult<Group> {
        let at = g * group_rows;
        let part = batch.slice(at, group_rows.min(rows - at));
        let mut writers = factory.create_column_writers(first + g)?;
        let mut leaves = Vec::with_capacity(writers.len());
        for (f, c) in part.schema_ref().fields().iter().zip(part.columns()) {
            leaves.extend(compute_leaves(f, c)?);
        }
        for (w, leaf) in writers.iter_mut().zip(&leaves) {
            w.write(leaf)?;
        }
        writers.into_iter().map(ArrowColumnWriter::close).collect()
    };
    let count = rows.div_ceil(group_rows);
    let threads = rayon::current_num_threads().clamp(1, count.max(1));
    thread::scope(|s| {
        let (encoders, encoded): (Vec<_>, Vec<_>) = (0..threads)
            .map(|t| {
                let (sender, receiver) = mpsc::sync_channel(1);
                let encode = &encode;
                let encoder = s.spawn(move || -> PqResult<()> {
                    for g in (t..count).step_by(threads) {
                        // A send fails once the appending has stopped, on its error.
                        if sender.send(encode(g)?).is_err() {
                            break;
                        }
                    }
                    Ok(())
                });
                (encoder, receiver)
            })
            .unzip();
        let appended = append_in_turn(writer, &encoded);
        drop(encoded);
        for encoder in encoders {
            encoder
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?;
        }
        appended
    })?;
    *groups += count;
    Ok(())
}

/// Appends to `writer` the row groups `encoded` in turn, group `g` from `encoded[g % n]`, until
/// one of them ends: its encoder is done (or failed).
fn append_in_turn(
    writer: &mut SerializedFileWriter<File>,
    encoded: &[mpsc::Receiver<Group>],
) -> PqResult<()> {
    let mut turns = encoded.iter().cycle();
    while let Some(Ok(chunks)) = turns.next().map(mpsc::Receiver::recv) {
        let mut rg = writer.next_row_group()?;
        for c in chunks {
            c.append_to_row_group(&mut rg)?;
        }
        rg.close()?;
    }
    Ok(())
}

/// Rows of a column sampled to choose its encoding.
const DICTIONARY_SAMPLE: usize = 4096;

/// Whether to dictionary-encode `column`: only when a row group's distinct values would fit the
/// writer's dictionary page. Past it the writer falls back to plain encoding after hashing
/// every value into the dictionary so far: for the join output (random keys and
/// payloads) half the writing's time in Int32 columns, a third in Int64 ones, for a file
/// larger by a fifth and a twentieth.
///
/// The distinct values are estimated from [`DICTIONARY_SAMPLE`] rows drawn at random: `s`
/// values drawn from `d` equally likely ones repeat about `s²/2d` times (the birthday bound),
/// so the dictionary fits `limit` values when `2 · repeats · limit ≥ s²`. Few distinct values,
/// or a few frequent ones, repeat more and get a dictionary. A column of a type not sampled
/// keeps the writer's default, a dictionary.
fn dictionary_pays(column: &dyn Array) -> bool {
    match column.data_type() {
        DataType::Int32 => repeats_enough::<Int32Type>(column),
        DataType::Int64 => repeats_enough::<Int64Type>(column),
        DataType::UInt32 => repeats_enough::<UInt32Type>(column),
        DataType::UInt64 => repeats_enough::<UInt64Type>(column),
        _ => true,
    }
}

/// [`dictionary_pays`] for a column of `T` values (nulls are not sampled).
fn repeats_enough<T: ArrowPrimitiveType>(column: &dyn Array) -> bool
where
    T::Native: Hash + Eq,
{
    let values = column.as_primitive::<T>();
    let sample: Vec<T::Native> = sample_rows(values.len())
        .into_iter()
        .filter(|&i| values.is_valid(i))
        .map(|i| values.value(i))
        .collect();
    let repeats = sample.len() - sample.iter().collect::<HashSet<_>>().len();
    let limit = DEFAULT_DICTIONARY_PAGE_SIZE_LIMIT / size_of::<T::Native>();
    2 * repeats * limit >= sample.len().pow(2)
}

/// Pieces of a column's values compressed on trial, and their size.
const COMPRESSION_SAMPLE: (usize, usize) = (8, 32 << 10);

/// Whether to compress `column`, plain-encoded, with `compression`: only where a sample of its
/// values (8 pieces of 32 KiB spread over the column, nulls left out as the writer leaves them)
/// shrinks by at least a sixteenth. Random keys and payloads, a join's usual output, do not
/// shrink, and compressing them was most of the write's CPU time (snappy, 2 cores: about
/// 60 %); Parquet's V2 data pages keep the same rule page by page, after compressing each.
/// Columns of other types are compressed.
fn compression_pays(column: &dyn Array, compression: Compression) -> bool {
    if !matches!(compression, Compression::SNAPPY | Compression::ZSTD(_)) {
        return compression != Compression::UNCOMPRESSED;
    }
    let compressed_len = |piece: &[u8]| -> Option<usize> {
        match compression {
            Compression::ZSTD(level) => zstd::bulk::compress(piece, level.compression_level()).ok(),
            _ => snap::raw::Encoder::new().compress_vec(piece).ok(),
        }
        .map(|v| v.len())
    };
    let (raw, packed) = match column.data_type() {
        DataType::Int32 => sample_compressed::<Int32Type>(column, compressed_len),
        DataType::Int64 => sample_compressed::<Int64Type>(column, compressed_len),
        DataType::UInt32 => sample_compressed::<UInt32Type>(column, compressed_len),
        DataType::UInt64 => sample_compressed::<UInt64Type>(column, compressed_len),
        _ => return true,
    };
    16 * packed <= 15 * raw
}

/// The bytes of [`compression_pays`]'s sample of a column of `T` values, and their compressed
/// length (a codec error counts as no bytes: the writer reports it).
fn sample_compressed<T: ArrowPrimitiveType>(
    column: &dyn Array,
    compressed_len: impl Fn(&[u8]) -> Option<usize>,
) -> (usize, usize) {
    let (pieces, piece_bytes) = COMPRESSION_SAMPLE;
    let values = column.as_primitive::<T>();
    let piece = piece_bytes / size_of::<T::Native>();
    let step = values.len().saturating_sub(piece) / (pieces - 1);
    let (mut raw, mut packed) = (0, 0);
    for i in 0..pieces {
        let rows = i * step..(i * step + piece).min(values.len());
        let valid: Vec<T::Native>;
        let bytes = if values.null_count() == 0 {
            values.values()[rows].to_byte_slice()
        } else {
            valid = rows
                .filter(|&r| values.is_valid(r))
                .map(|r| values.value(r))
                .collect();
            valid.to_byte_slice()
        };
        raw += bytes.len();
        packed += compressed_len(bytes).unwrap_or(0);
        if step == 0 {
            break;
        }
    }
    (raw, packed)
}

/// Up to [`DICTIONARY_SAMPLE`] distinct rows of `rows`, at random but the same each time; all
/// of them when fewer. Not at even steps: a sorted column's values would then never repeat.
fn sample_rows(rows: usize) -> Vec<usize> {
    if rows <= DICTIONARY_SAMPLE {
        return (0..rows).collect();
    }
    let mut sample: Vec<usize> = (1..=DICTIONARY_SAMPLE as u64)
        .map(|i| {
            // SplitMix64's output function of a Weyl sequence.
            let mut z = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            // `rows` fits u64, and the remainder is below `rows`.
            ((z ^ (z >> 31)) % rows as u64) as usize
        })
        .collect();
    // Drawn twice, a row would count as a repeat; in order, the reads go forward.
    sample.sort_unstable();
    sample.dedup();
    sample
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int32Array, Int64Array, UInt32Array, UInt64Array};

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

    /// Row groups encoded in parallel are appended in order, compressed as asked, with nulls.
    #[test]
    fn row_groups_are_written_in_order() {
        let path =
            std::env::temp_dir().join(format!("joinkit-written-{}.parquet", std::process::id()));
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::UInt32, false),
            Field::new("v", DataType::Int64, true),
        ]));
        let v = Int64Array::from_iter((0..1000).map(|i| (i % 3 != 0).then_some(-i)));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(UInt32Array::from_iter_values(0..1000)),
                Arc::new(v.clone()),
            ],
        )
        .unwrap();
        let zstd = Compression::ZSTD(ZstdLevel::default());
        write_batches(&path, std::slice::from_ref(&batch), zstd, 7);
        let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap()).unwrap();
        let groups = builder.metadata().row_groups();
        assert_eq!(groups.len(), 143);
        assert!(groups.iter().all(|g| g.column(1).compression() == zstd));
        reads_back(builder, &batch);
        std::fs::remove_file(&path).unwrap();
    }

    /// Batches written one after another (a streamed join's chunks) are row groups numbered
    /// on, each batch's last one short, read back in order.
    #[test]
    fn batches_are_appended_in_order() {
        let path =
            std::env::temp_dir().join(format!("joinkit-batches-{}.parquet", std::process::id()));
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        let batch = RecordBatch::try_new(
            schema,
            vec![Arc::new(Int64Array::from_iter_values(
                (0..1000).map(|i| i * 7 - 3000),
            ))],
        )
        .unwrap();
        let parts: Vec<RecordBatch> = [0, 300, 301, 999, 1000]
            .windows(2)
            .map(|w| batch.slice(w[0], w[1] - w[0]))
            .collect();
        write_batches(&path, &parts, Compression::SNAPPY, 64);
        let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap()).unwrap();
        // 300 rows: 5 groups; 1: 1; 698: 11; 1: 1.
        assert_eq!(builder.metadata().row_groups().len(), 18);
        reads_back(builder, &batch);
        std::fs::remove_file(&path).unwrap();
    }

    /// Writes `batches` through a [`Sink`] in row groups of `group_rows`.
    fn write_batches(path: &Path, batches: &[RecordBatch], c: Compression, group_rows: usize) {
        let fields = batches[0]
            .schema()
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        let mut sink = Sink::with_groups(
            path,
            Format::Parquet(c),
            fields,
            batches[0].columns(),
            group_rows,
        )
        .unwrap();
        for b in batches {
            sink.write(b.columns().to_vec()).unwrap();
        }
        sink.finish().unwrap();
    }

    /// The file `builder` opened holds `batch`'s rows, in order.
    fn reads_back(builder: ParquetRecordBatchReaderBuilder<File>, batch: &RecordBatch) {
        let mut at = 0;
        for b in builder.build().unwrap() {
            let b = b.unwrap();
            assert_eq!(b.columns(), batch.slice(at, b.num_rows()).columns());
            at += b.num_rows();
        }
        assert_eq!(at, batch.num_rows());
    }

    /// Few distinct values, and a sorted column's repeats, get a dictionary; distinct ones not.
    /// Distinct values are compressed where they shrink (counting), not where they are random.
    #[test]
    fn dictionary_and_compression_only_where_they_pay() {
        let path =
            std::env::temp_dir().join(format!("joinkit-dictionary-{}.parquet", std::process::id()));
        let rows = 1 << 16;
        let schema = Arc::new(Schema::new(vec![
            Field::new("few", DataType::Int32, false),
            Field::new("sorted", DataType::Int64, false),
            Field::new("distinct", DataType::UInt64, true),
            Field::new("counting", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int32Array::from_iter_values((0..rows).map(|i| i % 100))),
                // Each value on 4 rows in a row: 2^14 distinct, sampled at even steps none repeat.
                Arc::new(Int64Array::from_iter_values(
                    (0..rows).map(|i| (i / 4).into()),
                )),
                // Times an odd number, modulo 2^64: distinct values.
                Arc::new(UInt64Array::from_iter((0..rows).map(|i| {
                    (i % 3 != 0)
                        .then_some(u64::from(i.unsigned_abs()).wrapping_mul(0x9E37_79B9_7F4A_7C15))
                }))),
                Arc::new(Int64Array::from_iter_values(
                    (0..rows).map(|i| i64::from(i) * 1000),
                )),
            ],
        )
        .unwrap();
        write_batches(
            &path,
            std::slice::from_ref(&batch),
            Compression::SNAPPY,
            1 << 14,
        );
        let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(&path).unwrap()).unwrap();
        let groups = builder.metadata().row_groups();
        assert_eq!(groups.len(), 4);
        for g in groups {
            let dictionary = |c: usize| g.column(c).dictionary_page_offset().is_some();
            assert!(dictionary(0) && dictionary(1) && !dictionary(2) && !dictionary(3));
            let compressed = |c: usize| g.column(c).compression() == Compression::SNAPPY;
            assert!(compressed(0) && compressed(1) && !compressed(2) && compressed(3));
        }
        reads_back(builder, &batch);
        std::fs::remove_file(&path).unwrap();
    }
}
