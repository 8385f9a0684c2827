//! The `joinkit-bench` binary end to end, on the CPU: joins of Parquet and Arrow IPC files
//! against the library's answer, bad inputs as one-line errors, sweeps with JSON lines and
//! plots, and every subcommand on small sizes.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type, UInt32Type, UInt64Type};
use arrow_array::{
    Array, ArrayRef, Int32Array, Int64Array, RecordBatch, StringArray, UInt32Array, UInt64Array,
};
use arrow_ipc::CompressionType;
use arrow_ipc::reader::FileReader;
use arrow_ipc::writer::{FileWriter, IpcWriteOptions};
use arrow_schema::{DataType, Field, Schema};
use joinkit::{JoinKind, JoinOptions, Table, join_columns};
use joinkit_cuda::{Column, CpuBackend, Element, Key, each_column};
use parquet::arrow::ArrowWriter;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

/// A fresh directory for one test's files: under cargo's test scratch directory, or the
/// system's where the test runs away from its build (the GPU bundle).
fn dir(test: &str) -> PathBuf {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let base = if scratch.is_dir() {
        scratch.to_path_buf()
    } else {
        std::env::temp_dir().join(format!("joinkit-bench-cli-{}", std::process::id()))
    };
    let d = base.join("cli").join(test);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The binary under test: `JOINKIT_BENCH_BIN`, else the one cargo built, else
/// `bin--joinkit-bench` beside this test executable (as the GPU bundle packs them).
fn binary() -> PathBuf {
    if let Some(p) = std::env::var_os("JOINKIT_BENCH_BIN") {
        return p.into();
    }
    let built = Path::new(env!("CARGO_BIN_EXE_joinkit-bench"));
    if built.is_file() {
        return built.to_path_buf();
    }
    let beside = std::env::current_exe()
        .unwrap()
        .with_file_name("bin--joinkit-bench");
    assert!(
        beside.is_file(),
        "no joinkit-bench binary: set JOINKIT_BENCH_BIN (or bundle with gpu-bundle.sh --bench)"
    );
    beside
}

/// Runs the binary with `args` on the CPU, its files under `out`.
fn jb(out: &Path, args: &[&str]) -> Output {
    Command::new(binary())
        .args(["--device", "cpu", "--out-dir"])
        .arg(out)
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .env_remove("JOINKIT_DEVICE")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn batch(cols: Vec<(&str, ArrayRef)>) -> RecordBatch {
    let fields: Vec<Field> = cols
        .iter()
        .map(|(n, a)| Field::new(*n, a.data_type().clone(), false))
        .collect();
    let arrays = cols.into_iter().map(|c| c.1).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays).unwrap()
}

fn write_parquet(path: &Path, b: &RecordBatch) {
    write_parquet_groups(path, b, None);
}

/// Writes a Parquet file in row groups of at most `group_rows` rows (the writer's default
/// without).
fn write_parquet_groups(path: &Path, b: &RecordBatch, group_rows: Option<usize>) {
    let props = group_rows.map(|n| {
        parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(n))
            .build()
    });
    let mut w = ArrowWriter::try_new(File::create(path).unwrap(), b.schema(), props).unwrap();
    w.write(b).unwrap();
    w.close().unwrap();
}

/// Writes an Arrow IPC file compressed with LZ4, as Feather files are by default, in record
/// batches of at most `batch_rows` rows (one batch without).
fn write_ipc(path: &Path, b: &RecordBatch, batch_rows: Option<usize>) {
    let lz4 = IpcWriteOptions::default()
        .try_with_compression(Some(CompressionType::LZ4_FRAME))
        .unwrap();
    let mut w =
        FileWriter::try_new_with_options(File::create(path).unwrap(), &b.schema(), lz4).unwrap();
    let n = batch_rows.unwrap_or(b.num_rows());
    for at in (0..b.num_rows()).step_by(n) {
        w.write(&b.slice(at, n.min(b.num_rows() - at))).unwrap();
    }
    w.finish().unwrap();
}

/// A row of cells, nulls as `None` (every joinkit type fits i128).
type Rows = Vec<Vec<Option<i128>>>;

fn cell(a: &dyn Array, i: usize) -> Option<i128> {
    if a.is_null(i) {
        return None;
    }
    Some(match a.data_type() {
        DataType::UInt32 => i128::from(a.as_primitive::<UInt32Type>().value(i)),
        DataType::Int32 => i128::from(a.as_primitive::<Int32Type>().value(i)),
        DataType::UInt64 => i128::from(a.as_primitive::<UInt64Type>().value(i)),
        DataType::Int64 => i128::from(a.as_primitive::<Int64Type>().value(i)),
        t => panic!("unexpected output type {t}"),
    })
}

/// The column names and rows (sorted) of a Parquet file, or of an Arrow IPC file by its
/// extension.
fn read_rows(path: &Path) -> (Vec<String>, Rows) {
    let file = File::open(path).unwrap();
    let batches: Vec<RecordBatch> = if path.extension().is_some_and(|e| e == "parquet") {
        let builder = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
        builder.build().unwrap().map(Result::unwrap).collect()
    } else {
        FileReader::try_new(file, None)
            .unwrap()
            .map(Result::unwrap)
            .collect()
    };
    let names = batches[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    let mut rows = Rows::new();
    for b in &batches {
        for i in 0..b.num_rows() {
            rows.push(b.columns().iter().map(|c| cell(c.as_ref(), i)).collect());
        }
    }
    rows.sort();
    (names, rows)
}

/// A batch's columns as joinkit columns.
fn columns(b: &RecordBatch) -> Vec<Column<CpuBackend>> {
    b.columns()
        .iter()
        .map(|a| match a.data_type() {
            DataType::UInt32 => Column::U32(a.as_primitive::<UInt32Type>().values().to_vec()),
            DataType::Int32 => Column::I32(a.as_primitive::<Int32Type>().values().to_vec()),
            DataType::UInt64 => Column::U64(a.as_primitive::<UInt64Type>().values().to_vec()),
            DataType::Int64 => Column::I64(a.as_primitive::<Int64Type>().values().to_vec()),
            t => panic!("unexpected input type {t}"),
        })
        .collect()
}

/// The library's answer on the CPU, every column of both sides carried (the key in column 0)
/// but the right key unless `both_keys`.
fn expected<K: Key>(
    left: &RecordBatch,
    right: &RecordBatch,
    kind: JoinKind,
    both_keys: bool,
) -> Rows {
    let cpu = CpuBackend::new();
    let table = |b: &RecordBatch| {
        let cols = columns(b);
        let keys: Vec<K> =
            each_column!(&cols[0], c => c.iter().map(|x| K::from_u64(x.to_bits())).collect());
        Table::<CpuBackend, K>::new(keys, cols).unwrap()
    };
    let (m, _) = join_columns(&cpu, &table(left), &table(right), &JoinOptions::new(kind)).unwrap();
    let value = |c: &Column<CpuBackend>, i: usize| -> i128 {
        match c {
            Column::U32(v) => i128::from(v[i]),
            Column::I32(v) => i128::from(v[i]),
            Column::U64(v) => i128::from(v[i]),
            Column::I64(v) => i128::from(v[i]),
        }
    };
    let mut rows: Rows = (0..m.rows as usize)
        .map(|i| {
            let valid = m.right_valid.as_ref().is_none_or(|v| v[i] != 0);
            let left = m.left.iter().map(|c| Some(value(c, i)));
            let right =
                (m.right.iter().skip(usize::from(!both_keys))).map(|c| valid.then(|| value(c, i)));
            left.chain(right).collect()
        })
        .collect();
    rows.sort();
    rows
}

/// Left: 200 rows, keys 0..130 with repeats (those past 100 miss); right: 93 rows, keys
/// 0..100 with duplicates. `key` writes the logical keys as a key column; payloads of several
/// types, and a name (`c`) on both sides.
fn inputs(key: fn(&[u64]) -> ArrayRef) -> (RecordBatch, RecordBatch) {
    let lk: Vec<u64> = (0..200u64).map(|i| (i * 37) % 130).collect();
    let rk: Vec<u64> = (0..90u64)
        .map(|i| (i * 11) % 100)
        .chain([5, 5, 17])
        .collect();
    let left = batch(vec![
        ("k", key(&lk)),
        (
            "a",
            Arc::new(Int64Array::from_iter_values((0..200).map(|i| i * -3))),
        ),
        ("c", Arc::new(UInt32Array::from_iter_values(0..200))),
    ]);
    let right = batch(vec![
        ("k", key(&rk)),
        (
            "b",
            Arc::new(UInt64Array::from_iter_values(
                (0..93).map(|i| i * 1_000_000_007),
            )),
        ),
        (
            "c",
            Arc::new(Int32Array::from_iter_values((0..93).map(|i| -i))),
        ),
    ]);
    (left, right)
}

fn u32_keys(k: &[u64]) -> ArrayRef {
    Arc::new(UInt32Array::from_iter_values(
        k.iter().map(|&k| k as u32 * 3_000_001),
    ))
}
fn u64_keys(k: &[u64]) -> ArrayRef {
    Arc::new(UInt64Array::from_iter_values(
        k.iter().map(|&k| k << 40 | k),
    ))
}
fn i64_keys(k: &[u64]) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(
        k.iter().map(|&k| 50 - k as i64),
    ))
}
fn i32_keys(k: &[u64]) -> ArrayRef {
    Arc::new(Int32Array::from_iter_values(k.iter().map(|&k| -(k as i32))))
}

/// Joins the files `left` and `right` on `on` through the binary, with more arguments.
fn join(d: &Path, (left, right, on): (&Path, &Path, &str), more: &[&str]) -> Output {
    let (l, r) = (left.to_str().unwrap(), right.to_str().unwrap());
    let mut args = vec!["join", "--left", l, "--right", r, "--on", on];
    args.extend(more);
    jb(d, &args)
}

/// How a round trip writes its files and what it asks of the output.
#[derive(Clone, Copy)]
struct Shape {
    /// The left input and the output are Arrow IPC files.
    ipc: bool,
    /// The inputs are written in row groups (record batches) of that many rows.
    group_rows: Option<usize>,
    /// `--keep-both-keys`.
    both_keys: bool,
    /// `--compression`.
    compression: Option<&'static str>,
}

const PARQUET: Shape = Shape {
    ipc: false,
    group_rows: None,
    both_keys: false,
    compression: None,
};
const IPC: Shape = Shape {
    ipc: true,
    ..PARQUET
};

/// Joins the inputs through the binary and compares with the library as multisets; `device`
/// runs the join. Returns the output's path.
fn round_trip<K: Key>(
    name: &str,
    key: fn(&[u64]) -> ArrayRef,
    kind: (&str, JoinKind),
    shape: Shape,
    device: &str,
) -> PathBuf {
    let Shape {
        ipc,
        group_rows,
        both_keys,
        compression,
    } = shape;
    let d = dir(name);
    let (left, right) = inputs(key);
    let (lp, rp, out) = if ipc {
        (
            d.join("left.arrow"),
            d.join("right.parquet"),
            d.join("out.feather"),
        )
    } else {
        (
            d.join("left.parquet"),
            d.join("right.parquet"),
            d.join("out.parquet"),
        )
    };
    if ipc {
        write_ipc(&lp, &left, group_rows);
    } else {
        write_parquet_groups(&lp, &left, group_rows);
    }
    write_parquet_groups(&rp, &right, group_rows);
    let mut args = vec![
        "--kind",
        kind.0,
        "--out",
        out.to_str().unwrap(),
        "--device",
        device,
    ];
    if both_keys {
        args.push("--keep-both-keys");
    }
    if let Some(c) = compression {
        args.extend(["--compression", c]);
    }
    let o = join(&d, (&lp, &rp, "k=k"), &args);
    assert!(o.status.success(), "{name}: {}", text(&o.stderr));
    let (names, rows) = read_rows(&out);
    let want_names: &[&str] = match (kind.1.has_right_rows(), both_keys) {
        (true, true) => &["k", "a", "c", "k_right", "b", "c_right"],
        (true, false) => &["k", "a", "c", "b", "c_right"],
        (false, _) => &["k", "a", "c"],
    };
    assert_eq!(names, want_names, "{name}");
    let want = expected::<K>(&left, &right, kind.1, both_keys);
    assert!(!want.is_empty(), "{name}: the test joins nothing");
    assert_eq!(rows, want, "{name}");
    assert!(text(&o.stdout).contains("wrote"), "{name}");
    // The device opened while the files were read; the row names it and says how long the
    // join still waited for it.
    let row = &json_rows(&d, "join")[0];
    let described = if device == "cpu" { "CPU" } else { "cuda:" };
    assert!(
        row["device"].as_str().unwrap().starts_with(described),
        "{name}: {row}"
    );
    assert!(
        row["device wait ms"].as_f64().unwrap() >= 0.0,
        "{name}: {row}"
    );
    out
}

const INNER: (&str, JoinKind) = ("inner", JoinKind::Inner);
const OUTER: (&str, JoinKind) = ("left-outer", JoinKind::LeftOuter);
const SEMI: (&str, JoinKind) = ("left-semi", JoinKind::LeftSemi);
const ANTI: (&str, JoinKind) = ("left-anti", JoinKind::LeftAnti);

#[test]
fn parquet_join_u32_keys_inner_and_left_outer() {
    round_trip::<u32>("u32_inner", u32_keys, INNER, PARQUET, "cpu");
    round_trip::<u32>("u32_outer", u32_keys, OUTER, PARQUET, "cpu");
}

#[test]
fn parquet_join_u64_keys_inner_and_left_outer() {
    round_trip::<u64>("u64_inner", u64_keys, INNER, PARQUET, "cpu");
    round_trip::<u64>("u64_outer", u64_keys, OUTER, PARQUET, "cpu");
}

/// `--keep-both-keys` carries the right key as `k_right`; by default a right side of only its
/// key adds no column (the join has no right payload to gather).
#[test]
fn one_key_column_unless_both_are_asked_for() {
    let both = Shape {
        both_keys: true,
        ..PARQUET
    };
    round_trip::<u32>("both_inner", u32_keys, INNER, both, "cpu");
    round_trip::<u64>(
        "both_outer_ipc",
        i64_keys,
        OUTER,
        Shape { ipc: true, ..both },
        "cpu",
    );
    let d = dir("key_only_right");
    let (left, right) = inputs(u32_keys);
    let (lp, rp, out) = (
        d.join("l.parquet"),
        d.join("r.parquet"),
        d.join("o.parquet"),
    );
    write_parquet(&lp, &left);
    write_parquet(&rp, &right.project(&[0]).unwrap());
    for kind in [INNER, OUTER] {
        let o = join(
            &d,
            (&lp, &rp, "k"),
            &["--kind", kind.0, "--out", out.to_str().unwrap()],
        );
        assert!(o.status.success(), "{}", text(&o.stderr));
        let (names, rows) = read_rows(&out);
        assert_eq!(names, ["k", "a", "c"]);
        assert_eq!(
            rows.len(),
            expected::<u32>(&left, &right, kind.1, false).len()
        );
    }
}

/// Row groups and record batches are decoded in parallel, each into its own rows: many small
/// ones land in order.
#[test]
fn files_of_many_row_groups_and_record_batches() {
    round_trip::<u32>(
        "groups_inner",
        u32_keys,
        INNER,
        Shape {
            group_rows: Some(7),
            ..PARQUET
        },
        "cpu",
    );
    round_trip::<u64>(
        "groups_outer",
        i64_keys,
        OUTER,
        Shape {
            group_rows: Some(10),
            ..PARQUET
        },
        "cpu",
    );
    round_trip::<u32>(
        "batches_inner",
        u32_keys,
        INNER,
        Shape {
            group_rows: Some(7),
            ..IPC
        },
        "cpu",
    );
}

#[test]
fn signed_keys_are_bit_cast_and_arrow_ipc_is_read_and_written() {
    round_trip::<u64>("i64_outer", i64_keys, OUTER, PARQUET, "cpu");
    round_trip::<u64>("i64_outer_ipc", i64_keys, OUTER, IPC, "cpu");
    round_trip::<u32>("i32_semi_ipc", i32_keys, SEMI, IPC, "cpu");
    round_trip::<u32>("i32_anti", i32_keys, ANTI, PARQUET, "cpu");
}

/// `--compression` as asked, in both formats (each checked in the file's own metadata for
/// Parquet); a codec the output's format has not is a one-line error before anything is read.
#[test]
fn outputs_are_compressed_as_asked() {
    for (codec, want) in [
        (
            "zstd",
            parquet::basic::Compression::ZSTD(Default::default()),
        ),
        ("none", parquet::basic::Compression::UNCOMPRESSED),
    ] {
        let name = format!("parquet_{codec}");
        let shape = Shape {
            compression: Some(codec),
            ..PARQUET
        };
        let out = round_trip::<u32>(&name, u32_keys, INNER, shape, "cpu");
        let meta = ParquetRecordBatchReaderBuilder::try_new(File::open(out).unwrap()).unwrap();
        let chunks = meta
            .metadata()
            .row_groups()
            .iter()
            .flat_map(|g| g.columns());
        assert!(
            chunks.map(|c| c.compression()).all(|c| c == want),
            "{codec}"
        );
    }
    for codec in ["lz4", "zstd", "none"] {
        let shape = Shape {
            compression: Some(codec),
            ..IPC
        };
        round_trip::<u64>(&format!("ipc_{codec}"), i64_keys, OUTER, shape, "cpu");
    }
    let d = dir("bad_compression");
    let (lp, rp) = (d.join("missing-l.parquet"), d.join("missing-r.parquet"));
    for (out, codec, says) in [
        (
            "o.arrow",
            "snappy",
            "o.arrow is Arrow IPC, which takes lz4, zstd or none",
        ),
        (
            "o.parquet",
            "lz4",
            "o.parquet is Parquet, which takes snappy, zstd or none",
        ),
    ] {
        let out = d.join(out);
        let args = ["--out", out.to_str().unwrap(), "--compression", codec];
        fails(&join(&d, (&lp, &rp, "k"), &args), says);
    }
    fails(
        &join(&d, (&lp, &rp, "k"), &["--compression", "zstd"]),
        "--out <OUT>",
    );
}

/// Two sides whose output columns the partitioned probe carries whole (a key and one payload
/// of the key's width), M:N keys with some missing on either side: `left_rows` and
/// `right_rows` rows.
fn carried_inputs(wide: bool, (left_rows, right_rows): (i64, i64)) -> (RecordBatch, RecordBatch) {
    let column = |values: Vec<i64>| -> ArrayRef {
        if wide {
            Arc::new(Int64Array::from(
                values.iter().map(|v| v * 1_000_000_007).collect::<Vec<_>>(),
            ))
        } else {
            Arc::new(Int32Array::from(
                values.iter().map(|&v| v as i32).collect::<Vec<_>>(),
            ))
        }
    };
    let keys = |rows: i64, step: i64| (0..rows).map(|i| (i * step) % 97 - 40).collect();
    let left = batch(vec![
        ("k", column(keys(left_rows, 13))),
        ("a", column((0..left_rows).map(|i| -i).collect())),
    ]);
    let right = batch(vec![
        (
            "k",
            column(keys(right_rows, 29).into_iter().map(|k| k + 3).collect()),
        ),
        ("b", column((0..right_rows).map(|i| i * 7).collect())),
    ]);
    (left, right)
}

/// An inner join written chunk by chunk (`--chunk-rows`: the smaller file partitioned once,
/// the larger probed in chunks, each written as it comes) gives the one-piece join's rows and
/// says how many chunks it took: signed 4- and 8-byte columns, either side the larger, both
/// keys kept or one, Parquet and Arrow IPC output; `Auto` gives the same rows whichever way it
/// runs; a left outer join runs in one piece.
#[test]
fn a_join_written_in_chunks_equals_the_one_piece_join() {
    chunked_round_trips("chunks", "cpu");
}

/// [`a_join_written_in_chunks_equals_the_one_piece_join`] on `device`.
fn chunked_round_trips(name: &str, device: &str) {
    let d = dir(name);
    for (wide, sizes, both_keys, out) in [
        (true, (300, 1000), false, "o.parquet"),
        (false, (1000, 300), true, "o.arrow"),
        (true, (1000, 300), false, "o.parquet"),
        (false, (300, 1000), false, "o.parquet"),
    ] {
        let case = format!("wide {wide}, rows {sizes:?}, both keys {both_keys}, {out}");
        let (left, right) = carried_inputs(wide, sizes);
        let (lp, rp) = (d.join("l.parquet"), d.join("r.parquet"));
        write_parquet(&lp, &left);
        write_parquet(&rp, &right);
        let want = if wide {
            expected::<u64>(&left, &right, JoinKind::Inner, both_keys)
        } else {
            expected::<u32>(&left, &right, JoinKind::Inner, both_keys)
        };
        assert!(!want.is_empty(), "{case}: the test joins nothing");
        let out = d.join(out);
        for (algorithm, chunk_rows, chunks) in [
            ("PHJ-OM", "64", Some(16)),
            ("PHJ-OM", "0", None),
            ("auto", "64", None),
        ] {
            let mut args = vec![
                "--algorithm",
                algorithm,
                "--chunk-rows",
                chunk_rows,
                "--device",
                device,
                "--out",
                out.to_str().unwrap(),
            ];
            if both_keys {
                args.push("--keep-both-keys");
            }
            let o = join(&d, (&lp, &rp, "k"), &args);
            assert!(o.status.success(), "{case}: {}", text(&o.stderr));
            let (names, rows) = read_rows(&out);
            let want_names: &[&str] = if both_keys {
                &["k", "a", "k_right", "b"]
            } else {
                &["k", "a", "b"]
            };
            assert_eq!(names, want_names, "{case}");
            assert_eq!(rows, want, "{case}, {algorithm}, chunks of {chunk_rows}");
            let row = &json_rows(&d, "join")[0];
            if let Some(n) = chunks {
                assert_eq!(row["chunks"].as_u64(), Some(n), "{case}: {row}");
                assert!(text(&o.stdout).contains("in 16 chunks"), "{case}");
            } else if chunk_rows == "0" {
                assert!(row.get("chunks").is_none(), "{case}: {row}");
            }
        }
    }
    // Left outer joins run in one piece whatever the chunks asked.
    let (left, right) = carried_inputs(true, (300, 1000));
    let (lp, rp, out) = (
        d.join("l.parquet"),
        d.join("r.parquet"),
        d.join("o.parquet"),
    );
    write_parquet(&lp, &left);
    write_parquet(&rp, &right);
    let o = join(
        &d,
        (&lp, &rp, "k"),
        &[
            "--kind",
            "left-outer",
            "--chunk-rows",
            "64",
            "--device",
            device,
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        read_rows(&out).1,
        expected::<u64>(&left, &right, JoinKind::LeftOuter, false)
    );
    assert!(json_rows(&d, "join")[0].get("chunks").is_none());
}

/// The joins of files on GPU 0, where there is one (the binary's CUDA path, the same answer).
#[cfg(feature = "cuda")]
#[test]
fn file_joins_on_the_gpu() {
    if joinkit_cuda::testing::cuda_or_skip("file_joins_on_the_gpu").is_none() {
        return;
    }
    let gpu = "cuda:0";
    round_trip::<u32>("gpu_u32_inner", u32_keys, INNER, PARQUET, gpu);
    round_trip::<u32>("gpu_u32_outer", u32_keys, OUTER, PARQUET, gpu);
    round_trip::<u64>("gpu_u64_outer_ipc", u64_keys, OUTER, IPC, gpu);
    round_trip::<u64>("gpu_i64_semi", i64_keys, SEMI, PARQUET, gpu);
    round_trip::<u32>("gpu_i32_anti", i32_keys, ANTI, PARQUET, gpu);
    chunked_round_trips("gpu_chunks", gpu);
    swept_file_joins_share_the_device(gpu);
}

/// A sweep of joins of files on one device: the device a one-shot join closes while it
/// writes stays open for the points after the first, each of which gives the same answer.
#[cfg(feature = "cuda")]
fn swept_file_joins_share_the_device(device: &str) {
    let d = dir("gpu_swept_files");
    let (left, right) = inputs(u64_keys);
    let (lp, rp, out) = (
        d.join("left.parquet"),
        d.join("right.parquet"),
        d.join("out.parquet"),
    );
    write_parquet(&lp, &left);
    write_parquet(&rp, &right);
    let out_arg = out.to_str().unwrap();
    let o = join(
        &d,
        (&lp, &rp, "k"),
        &[
            "--out",
            out_arg,
            "--device",
            device,
            "--sweep",
            "algorithm=auto,PHJ-OM,SMJ-UM",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let want = expected::<u64>(&left, &right, JoinKind::Inner, false);
    assert_eq!(read_rows(&out).1, want);
    let rows = json_rows(&d, "join");
    assert_eq!(rows.len(), 3, "{rows:?}");
    for row in &rows {
        assert_eq!(row["out rows"].as_u64(), Some(want.len() as u64), "{row}");
        assert!(
            row["device"].as_str().unwrap().starts_with("cuda:"),
            "{row}"
        );
    }
}

/// The rows a run wrote to `<d>/<stem>.jsonl`.
fn json_rows(d: &Path, stem: &str) -> Vec<serde_json::Value> {
    let lines = std::fs::read_to_string(d.join(format!("{stem}.jsonl"))).unwrap();
    lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A failed run: non-zero exit, one line on stderr starting `joinkit-bench:`, no panic.
fn fails(o: &Output, says: &str) {
    let err = text(&o.stderr);
    assert!(!o.status.success(), "exit 0; stderr {err:?}");
    assert_eq!(err.lines().count(), 1, "stderr is not one line: {err:?}");
    assert!(err.starts_with("joinkit-bench: "), "{err:?}");
    assert!(!err.contains("panicked"), "{err:?}");
    assert!(err.contains(says), "{err:?} does not say {says:?}");
}

#[test]
fn bad_inputs_are_one_line_errors() {
    let d = dir("bad_inputs");
    let (left, right) = inputs(u32_keys);
    let (lp, rp) = (d.join("l.parquet"), d.join("r.parquet"));
    write_parquet(&lp, &left);
    write_parquet(&rp, &right);

    fails(
        &join(&d, (&d.join("missing.parquet"), &rp, "k"), &[]),
        "missing.parquet: No such file",
    );
    fails(
        &join(&d, (&lp, &rp, "k=nope"), &[]),
        "no column \"nope\" (columns: k, b, c)",
    );

    let wide = d.join("wide.parquet");
    write_parquet(&wide, &inputs(u64_keys).1);
    fails(&join(&d, (&lp, &wide, "k"), &[]), "key types differ");

    // Truncated (no footer), garbage in the data pages, and not Parquet at all.
    let bytes = std::fs::read(&lp).unwrap();
    let cut = d.join("cut.parquet");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    fails(
        &join(&d, (&cut, &rp, "k"), &[]),
        "cut.parquet: not a readable Parquet file",
    );
    let mut smashed = bytes.clone();
    smashed[4..bytes.len() / 2]
        .iter_mut()
        .for_each(|b| *b = 0xa5);
    let smashed_path = d.join("smashed.parquet");
    std::fs::write(&smashed_path, &smashed).unwrap();
    fails(
        &join(&d, (&smashed_path, &rp, "k"), &[]),
        "smashed.parquet:",
    );
    let csv = d.join("l.csv");
    std::fs::write(&csv, "k,a\n1,2\n").unwrap();
    fails(
        &join(&d, (&csv, &rp, "k"), &[]),
        "neither a Parquet file nor an Arrow IPC file",
    );

    let strings = d.join("strings.parquet");
    write_parquet(
        &strings,
        &batch(vec![
            ("k", Arc::new(UInt32Array::from(vec![1, 2]))),
            ("name", Arc::new(StringArray::from(vec!["x", "y"]))),
        ]),
    );
    fails(
        &join(&d, (&strings, &rp, "k"), &[]),
        "column \"name\" has type Utf8",
    );

    let nulls = d.join("nulls.parquet");
    let with_null: ArrayRef = Arc::new(UInt32Array::from(vec![Some(1), None]));
    let schema = Schema::new(vec![Field::new("k", DataType::UInt32, true)]);
    write_parquet(
        &nulls,
        &RecordBatch::try_new(Arc::new(schema), vec![with_null]).unwrap(),
    );
    fails(&join(&d, (&nulls, &rp, "k"), &[]), "column \"k\" has nulls");
    // A join of files opens its device while reading: a bad one still fails in one line.
    fails(
        &join(&d, (&lp, &rp, "k"), &["--device", "tpu"]),
        "unknown device \"tpu\"",
    );

    let o = Command::new(binary())
        .args(["--device", "tpu", "smoke"])
        .env("RUST_BACKTRACE", "1")
        .output()
        .unwrap();
    fails(&o, "unknown device \"tpu\"");
    fails(
        &jb(&d, &["join", "--sweep", "nope=1,2"]),
        "sweep axis \"nope\"",
    );
}

/// M:N workloads: R's keys repeated (`--r-multiplicity`) or Zipf-drawn (`--r-zipf`), every
/// algorithm agreeing on the output rows, Auto's rows saying why it chose (and, where it
/// sampled, the right side's rows per key); a multiplicity of 0 refused.
#[test]
fn m_to_n_workloads_report_auto_s_choice() {
    let d = dir("m_to_n");
    let run = |name: &str, more: &[&str]| {
        let mut args = vec![
            "join",
            "--device",
            "cpu",
            "--repeat",
            "1",
            "--r",
            "2^12",
            "--s",
            "2^12",
            "--name",
            name,
            "--algorithm",
            "auto,SMJ-OM,PHJ-OM,NPHJ-chained",
        ];
        args.extend_from_slice(more);
        let o = jb(&d, &args);
        assert!(o.status.success(), "{}", text(&o.stderr));
        json_rows(&d, name)
    };
    let rows = run("mult", &["--r-multiplicity", "16"]);
    assert_eq!(rows.len(), 4);
    assert!(
        rows.iter().all(|r| r["out rows"] == rows[0]["out rows"]),
        "{rows:?}"
    );
    // Each of 256 keys on 16 rows of R, S's 4096 rows drawn from them: 16 pairs a row.
    assert_eq!(rows[0]["out rows"], 4096 * 16);
    let auto = &rows[0];
    assert_eq!(auto["requested"], "auto");
    assert!(auto["auto reason"].is_string(), "{auto}");
    // 1024 of R's 4096 rows sampled: near 16.
    let per_key = auto["sampled right rows/key"].as_f64().unwrap();
    assert!((8.0..32.0).contains(&per_key), "{auto}");
    let zipf = run("zipf", &["--r-zipf", "1.0", "--kind", "left-semi"]);
    assert!(
        zipf.iter().all(|r| r["out rows"] == zipf[0]["out rows"]),
        "{zipf:?}"
    );
    let o = jb(&d, &["join", "--r-multiplicity", "0"]);
    assert!(!o.status.success());
    assert!(
        text(&o.stderr).contains("rows per key start at 1"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn a_sweep_writes_a_table_json_lines_and_plots() {
    let d = dir("sweep");
    let o = jb(
        &d,
        &[
            "join",
            "--repeat",
            "1",
            "--sweep",
            "r=2^8..2^10",
            "--sweep",
            "algorithm=SMJ-UM,NPHJ-open",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("join:") && out.contains("M tuples/s"), "{out}");
    let rows = json_rows(&d, "join");
    assert_eq!(rows.len(), 6);
    for r in &rows {
        for field in [
            "revision",
            "command",
            "device",
            "r",
            "s",
            "algorithm",
            "M tuples/s",
            "total ms",
        ] {
            assert!(!r[field].is_null(), "{field} missing in {r}");
        }
        assert!(
            r["command"]
                .as_str()
                .unwrap()
                .contains("--sweep r=2^8..2^10")
        );
    }
    assert_eq!(rows[5]["r"], 1024);
    assert_eq!(rows[5]["algorithm"], "NPHJ-open");
    let svg = std::fs::read_to_string(d.join("join.svg")).unwrap();
    assert!(
        svg.contains("SMJ-UM") && svg.contains("2^9"),
        "the plot lacks its legend or ticks"
    );
    assert!(
        std::fs::read(d.join("join.png"))
            .unwrap()
            .starts_with(b"\x89PNG")
    );
}

/// The hybrid GPU/CPU join on the CPU (the CPU backend standing in for the device), its
/// budget swept from 0 (the CPU join alone) to every pair on the "device" in sizes of every
/// spelling: the same output rows at every budget, the hybrid's figures in every row; a
/// device-only run without room for a pair is a one-line error.
#[test]
fn hybrid_join_sweeps_the_device_budget() {
    let d = dir("hybrid");
    let o = jb(
        &d,
        &[
            "join",
            "--repeat",
            "1",
            "--r",
            "2^12",
            "--kind",
            "left-outer",
            "--hybrid-split",
            "fit-first",
            "--hybrid-partitions",
            "8",
            "--hybrid-timeline",
            "--sweep",
            "gpu-memory=0,2^30,4 GiB",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let all = json_rows(&d, "join");
    let (rows, pairs): (Vec<_>, Vec<_>) = all.iter().partition(|r| r["table"] == "join");
    assert_eq!(rows.len(), 3);
    // The fallback's one record, then 8 pairs (of which none empty) at each budget.
    assert_eq!(pairs.len(), 1 + 8 + 8, "{pairs:?}");
    assert!(
        pairs[1..].iter().all(|p| p["worker"] == "device"),
        "{pairs:?}"
    );
    for r in &rows {
        // Every S row holds a key of R: one output row each.
        assert_eq!(r["out rows"], 2 * 4096, "{r}");
        for field in [
            "total ms",
            "M tuples/s",
            "partition ms",
            "device ms",
            "cpu ms",
            "device share %",
            "link MiB",
            "device pairs",
            "cpu pairs",
        ] {
            assert!(!r[field].is_null(), "{field} missing in {r}");
        }
    }
    assert_eq!(rows[0]["gpu-memory"], 0);
    assert_eq!(rows[0]["fallback"], "NoDeviceMemory");
    assert_eq!(rows[0]["device pairs"], 0);
    assert_eq!(rows[2]["gpu-memory"], 4u64 << 30);
    for r in &rows[1..] {
        assert_eq!(r["fallback"], "no", "{r}");
        assert_eq!(r["partitions"], 8, "{r}");
        assert_eq!(r["device share %"], 100.0, "{r}");
        assert_eq!(r["cpu pairs"], 0, "{r}");
        assert!(r["link MiB"].as_f64().unwrap() > 0.0, "{r}");
    }
    fails(
        &jb(
            &d,
            &[
                "join",
                "--r",
                "2^10",
                "--gpu-memory",
                "1KiB",
                "--hybrid-split",
                "device-only",
            ],
        ),
        "over the budget of 1024 bytes",
    );
    fails(
        &jb(&d, &["join", "--r", "2^10", "--hybrid-timeline"]),
        "go with --gpu-memory",
    );
    fails(
        &jb(&d, &["join", "--r", "2^10", "--gpu-memory", "1 PiB"]),
        "\"1 PiB\" is not a size",
    );
}

#[test]
fn every_subcommand_runs_on_small_sizes() {
    let d = dir("subcommands");
    let small: [&[&str]; 8] = [
        &[
            "smoke",
            "--copy-elements",
            "2^12",
            "--sort-elements",
            "2^12",
        ],
        &["gather", "--sizes", "2^10,2^12"],
        &["sort", "--sizes", "2^10"],
        &["partition", "--sizes", "2^10", "--copy-elements", "2^12"],
        &["hashtable", "--sizes", "2^8", "--load-factors", "0.5"],
        &[
            "codec",
            "--values",
            "2^12",
            "--buffers",
            "2",
            "--buffer-values",
            "2^10",
        ],
        &["join", "--r", "2^10", "--kind", "left-outer"],
        &["sequence", "--s", "2^10", "--algorithm", "NPHJ-open"],
    ];
    for args in small {
        let mut all = args.to_vec();
        all.extend(["--repeat", "1", "--warmup", "0"]);
        let o = jb(&d, &all);
        assert!(o.status.success(), "{args:?}: {}", text(&o.stderr));
        let lines = std::fs::read_to_string(d.join(format!("{}.jsonl", args[0]))).unwrap();
        assert!(lines.lines().count() >= 1, "{args:?} wrote no row");
    }
    // Sizes varied within one run: gather plots them.
    assert!(d.join("gather.svg").exists());
}

#[test]
fn sequence_runs_both_foreign_key_materializations() {
    let d = dir("sequence");
    let o = jb(
        &d,
        &[
            "sequence",
            "--s",
            "2^11",
            "--dims",
            "2",
            "--match-ratio",
            "0.8,0.4",
            "--algorithm",
            "SMJ-UM,PHJ-OM",
            "--key-bits",
            "64",
            "--repeat",
            "1",
            "--warmup",
            "0",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("sequence:") && out.contains("j2 ms"), "{out}");
    let rows = json_rows(&d, "sequence");
    assert_eq!(rows.len(), 4);
    let fks: Vec<&str> = rows.iter().map(|r| r["fk"].as_str().unwrap()).collect();
    assert_eq!(fks, ["just-before", "up-front", "just-before", "up-front"]);
    // Every algorithm and materialization returns the same rows, about |S| · 0.8 · 0.4.
    let n = rows[0]["out rows"].as_u64().unwrap();
    assert!((400..900).contains(&n), "{n} output rows");
    for r in &rows {
        assert_eq!(r["out rows"], n, "{r}");
        assert_eq!(r["s"], 2048);
        assert_eq!(r["r"], 1024);
        assert_eq!(r["j1 rows in"], 2048);
        assert_eq!(r["j2 rows in"], r["j1 rows out"]);
        assert_eq!(r["j2 rows out"], n);
        for field in [
            "total ms",
            "fk ms",
            "join ms",
            "j1 ms",
            "j2 ms",
            "M tuples/s",
        ] {
            assert!(r[field].as_f64().is_some(), "{field} missing in {r}");
        }
    }
    fails(
        &jb(
            &d,
            &["sequence", "--dims", "2", "--match-ratio", "0.1,0.2,0.3"],
        ),
        "--match-ratio: give one value or 2",
    );
    fails(&jb(&d, &["sequence", "--dims", "0"]), "--dims");
}

#[test]
fn bad_options_fail_before_any_run() {
    let d = dir("bad_options");
    let cases: [(&[&str], &str); 17] = [
        (
            &["join", "--tpch", "0"],
            "a scale factor is a number above 0",
        ),
        (
            &["join", "--tpch", "nan"],
            "a scale factor is a number above 0",
        ),
        (&["join", "--tpch", "1e12"], "at most 700"),
        (&["join", "--repeat", "0"], "at least 1 timed run"),
        (
            &["join", "--r", "2^8", "--sweep", "algorithm=SMJ-UM,bogus"],
            "sweep algorithm=bogus: invalid value 'bogus'",
        ),
        (
            &["join", "--r", "2^8", "--sweep", "key-bits=32,16"],
            "sweep key-bits=16: invalid value '16'",
        ),
        (
            &["gather", "--sweep", "maps=identity,bogus"],
            "sweep maps=bogus",
        ),
        (&["gather", "--widths", "4,5"], "widths are 4 or 8 bytes"),
        (
            &["partition", "--sweep", "ops=radix8,hash0"],
            "sweep ops=hash0",
        ),
        (&["partition", "--widths", ","], "'--widths <WIDTHS>'"),
        (&["partition", "--dists", ","], "'--dists <DISTS>'"),
        (
            &["hashtable", "--hit-rates", "500"],
            "500 is not in 0..=100",
        ),
        (
            &["codec", "--sweep", "columns=sorted,bogus"],
            "sweep columns=bogus",
        ),
        (
            &["join", "--sweep", "out-dir=a,b"],
            "given once for the whole run",
        ),
        (
            &["join", "--sweep", "name=a,b"],
            "given once for the whole run",
        ),
        (&["join", "--key-bits", "16"], "[possible values: 32, 64]"),
        (&["join", "--r", "x"], "\"x\" is not a size"),
    ];
    for (args, says) in cases {
        let o = jb(&d, args);
        fails(&o, says);
        assert!(o.stdout.is_empty(), "{args:?} ran: {}", text(&o.stdout));
    }
    // A swept device that does not exist is found before the first run.
    let o = Command::new(binary())
        .args([
            "join",
            "--r",
            "2^8",
            "--sweep",
            "device=cpu,tpu",
            "--out-dir",
        ])
        .arg(&d)
        .env("RUST_BACKTRACE", "1")
        .env_remove("JOINKIT_DEVICE")
        .output()
        .unwrap();
    fails(&o, "unknown device \"tpu\"");
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
}

#[test]
fn workloads_past_the_generators_and_the_joins_are_one_line_errors() {
    let d = dir("bad_workloads");
    let cases: [(&[&str], &str); 7] = [
        (
            &["join", "--r", "2^8", "--zipf", "NaN"],
            "Zipf exponent NaN",
        ),
        (&["join", "--r", "2^8", "--zipf=-1"], "Zipf exponent -1"),
        (
            &["join", "--r", "2^33", "--s", "2^4"],
            "limited to 2^32 - 1 rows",
        ),
        (
            &["join", "--r", "2^62", "--key-bits", "64"],
            "limited to 2^32 - 1 rows",
        ),
        (&["sequence", "--r", "2^33"], "limited to 2^32 - 1 rows"),
        (&["join", "--r", "0"], "join benchmark sides need rows"),
        (
            &["join", "--tpch", "1e-9"],
            "join benchmark sides need rows",
        ),
    ];
    for (args, says) in cases {
        fails(&jb(&d, args), says);
    }
}

#[test]
fn giant_counts_are_one_line_errors_not_aborts() {
    let d = dir("giant_counts");
    let cases: [(&[&str], &str); 11] = [
        // |S| = 2 |R| wrapped to 0 and was reported as a side without rows.
        (&["join", "--r", "2^63"], "limited to 2^32 - 1 rows"),
        // Each of these ran for hours or aborted allocating.
        (&["join", "--payloads", "1000000000"], "at most 1024"),
        (&["sequence", "--dims", "1000000000000"], "at most 1024"),
        (&["sequence", "--payloads", "5000"], "at most 1024"),
        (&["smoke", "--repeat", "1000000000000"], "at most 1000000"),
        (&["smoke", "--warmup", "1000000000000"], "at most 1000000"),
        (&["join", "--name", ""], "the output files need a name"),
        (
            &[
                "partition",
                "--sizes",
                "2^61",
                "--dists",
                "zipf",
                "--copy-elements",
                "2^12",
            ],
            "size overflow",
        ),
        (
            &[
                "hashtable",
                "--sizes",
                "2^4",
                "--probe-factor",
                "144115188075855872",
            ],
            "size overflow",
        ),
        (
            &[
                "hashtable",
                "--sizes",
                "2^4",
                "--probe-factor",
                "18446744073709551615",
            ],
            "size overflow: probe keys",
        ),
        (
            &[
                "codec",
                "--values",
                "2^10",
                "--columns",
                "random",
                "--buffers",
                "2",
                "--buffer-values",
                "2^62",
            ],
            "size overflow",
        ),
    ];
    for (args, says) in cases {
        fails(&jb(&d, args), says);
    }
    fails(&jb(&d, &["sequence", "--s", "1"]), "--r, default |S| / 2");
}

/// Runs a small join with its standard output `stdout`.
fn join_into(d: &Path, stdout: Stdio) -> Child {
    Command::new(binary())
        .args(["--device", "cpu", "--out-dir"])
        .arg(d)
        .args([
            "join",
            "--r",
            "2^8",
            "--algorithm",
            "SMJ-UM",
            "--repeat",
            "1",
        ])
        .env("RUST_BACKTRACE", "1")
        .env_remove("JOINKIT_DEVICE")
        .stdout(stdout)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn a_closed_or_full_stdout_still_writes_the_json_lines() {
    // The reader is gone (`| head -1`): a quiet success, the files written.
    let d = dir("closed_stdout");
    let mut child = join_into(&d, Stdio::piped());
    drop(child.stdout.take());
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(o.stderr.is_empty(), "{}", text(&o.stderr));
    assert_eq!(json_rows(&d, "join").len(), 1);

    #[cfg(target_os = "linux")]
    {
        let d = dir("full_stdout");
        let full = File::create("/dev/full").unwrap();
        fails(
            &join_into(&d, full.into()).wait_with_output().unwrap(),
            "standard output: No space left on device",
        );
        assert_eq!(json_rows(&d, "join").len(), 1);
    }
}

#[test]
fn swept_devices_lists_with_spaces_and_the_tour_with_its_own_sizes() {
    let d = dir("sweep_kinds");
    // A swept device: a column of the table, and the JSON keeps one "device", the description.
    let o = Command::new(binary())
        .args([
            "join",
            "--r",
            "2^8",
            "--algorithm",
            "SMJ-UM",
            "--repeat",
            "1",
        ])
        .args(["--sweep", "device=cpu", "--out-dir"])
        .arg(&d)
        .env_remove("JOINKIT_DEVICE")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let line = std::fs::read_to_string(d.join("join.jsonl")).unwrap();
    assert_eq!(line.matches("\"device\"").count(), 1, "{line}");
    let rows = json_rows(&d, "join");
    assert!(rows[0]["device"].as_str().unwrap().starts_with("CPU"));

    let o = jb(
        &d,
        &[
            "join",
            "--r",
            "2^8",
            "--algorithm",
            "SMJ-UM, PHJ-OM",
            "--repeat",
            "1",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let algorithms: Vec<String> = json_rows(&d, "join")
        .iter()
        .map(|r| r["algorithm"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(algorithms, ["SMJ-UM", "PHJ-OM"]);

    // The tour (no subcommand) sweeps the user's sizes instead of its own.
    let o = jb(&d, &["--sweep", "r=2^8", "--repeat", "1", "--warmup", "0"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let rows = json_rows(&d, "join");
    assert!(!rows.is_empty() && rows.iter().all(|r| r["r"] == 256));
}

#[test]
fn streamed_joins_from_host_memory_and_a_generator() {
    let d = dir("streamed");
    let run = |name: &str, more: &[&str]| {
        let mut args = vec![
            "join", "--repeat", "1", "--r", "2^12", "--s", "20000", "--name", name,
        ];
        args.extend_from_slice(more);
        let o = jb(&d, &args);
        assert!(o.status.success(), "{}", text(&o.stderr));
        json_rows(&d, name)
    };
    let svg = d.join("timeline.svg");
    let svg_arg = svg.to_str().unwrap();
    for inputs in ["host", "generated"] {
        for (kind, out) in [("inner", 20000), ("left-semi", 20000), ("left-anti", 0)] {
            let rows = run(
                inputs,
                &[
                    "--inputs",
                    inputs,
                    "--kind",
                    kind,
                    "--chunk-rows",
                    "3000",
                    "--buffers",
                    "2",
                    "--payloads",
                    "2",
                    "--timeline",
                    svg_arg,
                ],
            );
            let row = &rows[0];
            assert_eq!(row["inputs"], inputs, "{row}");
            // Every S key matches one R key: |S| rows for inner and semi, none for anti.
            assert_eq!(row["out rows"], out, "{inputs} {kind}: {row}");
            assert_eq!(row["s"], 20000);
            assert_eq!(row["chunks"], 7, "{row}");
            assert_eq!(row["algorithm"], "NPHJ-open");
            let drawn = std::fs::read_to_string(&svg).unwrap();
            assert!(
                drawn.contains("<svg") && drawn.contains("copy in"),
                "{drawn}"
            );
            assert!(svg.with_extension("png").is_file());
        }
    }
    let chained = run(
        "chained",
        &[
            "--inputs",
            "generated",
            "--algorithm",
            "NPHJ-chained",
            "--key-bits",
            "64",
        ],
    );
    assert_eq!(chained[0]["algorithm"], "NPHJ-chained");
    assert_eq!(chained[0]["out rows"], 20000);
    fails(
        &jb(
            &d,
            &[
                "join",
                "--inputs",
                "host",
                "--algorithm",
                "SMJ-OM",
                "--r",
                "2^10",
            ],
        ),
        "non-partitioned hash join",
    );
    fails(
        &jb(
            &d,
            &["join", "--inputs", "host", "--buffers", "1", "--r", "2^10"],
        ),
        "2 buffers",
    );
    fails(
        &jb(&d, &["join", "--inputs", "host", "--r-multiplicity", "4"]),
        "PK-FK",
    );
    fails(
        &jb(&d, &["join", "--inputs", "pinned", "--r", "2^10"]),
        "needs a GPU",
    );
}
