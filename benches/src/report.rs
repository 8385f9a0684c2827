//! A run's results: rows of named figures, shown as tables on the terminal when the run ends,
//! written as JSON lines and plotted, with a progress bar on stderr while they come.

use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::error::{BenchError, Result};
use crate::measure::parse_size;
use crate::plot::{self, PlotSpec};
use crate::steal::HostTicks;

/// The share of the host's busy CPU time stolen during a run from which a note calls its
/// timings noisy. Chosen, not calibrated: on the H200 host, CPU joins in processes the
/// hypervisor took time from ran up to 1.35× slower (docs/results/joins.md).
const NOISY_STEAL_PERCENT: f64 = 1.0;
/// Fewer stolen ticks (10 ms of one CPU each) than this are too coarse to call a run noisy:
/// one tick of a short run is already a few percent.
const NOISY_STEAL_TICKS: u64 = 3;

/// Where the current sweep point began: its label, its first row, the host's CPU time then.
struct PointStart {
    label: String,
    first_row: usize,
    ticks: Option<HostTicks>,
}

/// The git revision the binary was built from (`unknown` outside a git checkout).
pub(crate) const REVISION: &str = env!("JOINKIT_BENCH_REVISION");

/// One figure or label of a row.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// A count or size.
    Int(u64),
    /// A measurement.
    Float(f64),
    /// A label (an algorithm, a kind, a scheme).
    Text(String),
}

impl Value {
    /// A value as typed on the command line: a size (`2^20`, `1_000`), a number, else text.
    pub(crate) fn parse(s: &str) -> Value {
        match (parse_size(s), s.trim().parse::<f64>()) {
            (Ok(n), _) => Value::Int(n as u64),
            (_, Ok(x)) => Value::Float(x),
            _ => Value::Text(s.to_string()),
        }
    }

    /// The value as a number, for plotting.
    pub(crate) fn number(&self) -> Option<f64> {
        match self {
            Value::Int(n) => Some(*n as f64),
            Value::Float(x) => Some(*x),
            Value::Text(_) => None,
        }
    }

    /// Table text: integers in full, measurements to three significant digits.
    fn cell(&self) -> String {
        match self {
            Value::Int(n) => n.to_string(),
            Value::Float(x) if !x.is_finite() || *x == 0.0 => x.to_string(),
            Value::Float(x) => {
                let digits = 2 - x.abs().log10().floor() as i32;
                format!("{x:.*}", digits.clamp(0, 9) as usize)
            }
            Value::Text(s) => s.clone(),
        }
    }

    fn json(&self) -> String {
        match self {
            Value::Int(n) => n.to_string(),
            Value::Float(x) if x.is_finite() => x.to_string(),
            Value::Float(_) => "null".into(),
            Value::Text(s) => json_string(s),
        }
    }
}

impl From<u64> for Value {
    fn from(n: u64) -> Value {
        Value::Int(n)
    }
}
impl From<usize> for Value {
    fn from(n: usize) -> Value {
        Value::Int(n as u64)
    }
}
impl From<u32> for Value {
    fn from(n: u32) -> Value {
        Value::Int(u64::from(n))
    }
}
impl From<f64> for Value {
    fn from(x: f64) -> Value {
        Value::Float(x)
    }
}
impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Text(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Text(s)
    }
}

fn json_string(s: &str) -> String {
    serde_json::Value::from(s).to_string()
}

/// The distinct items, in the order they first appear.
pub(crate) fn distinct<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut seen = Vec::new();
    for x in items {
        if !seen.contains(&x) {
            seen.push(x);
        }
    }
    seen
}

/// A named value of a row; `shown` fields are table columns, the others go to JSON only.
#[derive(Debug, Clone)]
struct Field {
    name: String,
    value: Value,
    shown: bool,
}

/// One result: the table it belongs to and its fields in column order.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    table: &'static str,
    fields: Vec<Field>,
}

impl Row {
    /// An empty row of `table`.
    pub(crate) fn new(table: &'static str) -> Row {
        Row {
            table,
            fields: Vec::new(),
        }
    }

    /// With a field shown in the table (and written to JSON).
    pub(crate) fn with(mut self, name: &str, value: impl Into<Value>) -> Row {
        self.push(name, value.into(), true);
        self
    }

    /// With a field shown in the table where there is a value (`-` where there is none).
    pub(crate) fn with_opt(self, name: &str, value: Option<impl Into<Value>>) -> Row {
        match value {
            Some(v) => self.with(name, v),
            None => self,
        }
    }

    /// With a field written to JSON only (a figure the table has no room for).
    pub(crate) fn detail(mut self, name: &str, value: impl Into<Value>) -> Row {
        self.push(name, value.into(), false);
        self
    }

    fn push(&mut self, name: &str, value: Value, shown: bool) {
        self.fields.push(Field {
            name: name.to_string(),
            value,
            shown,
        });
    }

    /// The table the row belongs to.
    pub(crate) fn table(&self) -> &'static str {
        self.table
    }

    /// The value of field `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Value> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .map(|f| &f.value)
    }
}

/// Collects a run's rows and notes, over every point of a sweep.
pub(crate) struct Report {
    subcommand: &'static str,
    command: String,
    rows: Vec<(Row, String)>,
    point: Vec<(String, Value)>,
    point_start: PointStart,
    device: String,
    notes: HashSet<String>,
    bar: ProgressBar,
    /// Whether the bar is still to be shown once the run takes a second (stderr is a
    /// terminal and it has not been shown yet).
    bar_due: bool,
    started: Instant,
    /// Why standard output failed, if it did: nothing more is printed, the run goes on, and
    /// [`Report::finish`] returns it once the files are written.
    stdout_failed: Option<std::io::Error>,
}

impl Report {
    /// A report of `subcommand` run as `command` (the command line, recorded in JSON) over
    /// `points` runs.
    pub(crate) fn new(subcommand: &'static str, command: String, points: usize) -> Report {
        let bar = ProgressBar::with_draw_target(Some(points as u64), ProgressDrawTarget::hidden());
        if let Ok(style) =
            ProgressStyle::with_template("{spinner} [{elapsed}] {bar:24} {pos}/{len} {msg}")
        {
            bar.set_style(style);
        }
        Report {
            subcommand,
            command,
            rows: Vec::new(),
            point: Vec::new(),
            point_start: PointStart {
                label: String::new(),
                first_row: 0,
                ticks: None,
            },
            device: String::new(),
            notes: HashSet::new(),
            bar,
            bar_due: std::io::stderr().is_terminal(),
            started: Instant::now(),
            stdout_failed: None,
        }
    }

    /// Starts the next run: the sweep point's axis values (added to each of its rows).
    pub(crate) fn start_point(&mut self, label: &str, point: Vec<(String, Value)>) {
        self.bar.set_message(label.to_string());
        self.point = point;
        self.point_start = PointStart {
            label: label.to_string(),
            first_row: self.rows.len(),
            ticks: HostTicks::now(),
        };
        self.show_bar_when_slow();
    }

    /// Names the device the current run's rows come from (once it is open: a join of files
    /// reads its files first).
    pub(crate) fn on_device(&mut self, device: String) {
        self.note(format!("device: {device}"));
        self.device = device;
    }

    /// Names the step the run is at (reading, joining, writing a file) on the bar, which
    /// appears once the run has taken a second.
    pub(crate) fn step(&mut self, what: &str) {
        self.bar.set_message(what.to_string());
        self.show_bar_when_slow();
    }

    /// Whether any row was recorded.
    pub(crate) fn has_rows(&self) -> bool {
        !self.rows.is_empty()
    }

    /// Ends the current run. Its rows get the host's steal time over the whole point (data
    /// generation, warm-up and timed runs of every algorithm in it; JSON fields `host steal %`
    /// of the busy CPU time and `host steal ticks`, where the system counts them), and a note
    /// calls its timings noisy from [`NOISY_STEAL_PERCENT`] and [`NOISY_STEAL_TICKS`].
    pub(crate) fn end_point(&mut self) {
        self.bar.inc(1);
        let PointStart {
            ref label,
            first_row,
            ticks: Some(start),
        } = self.point_start
        else {
            return;
        };
        let Some(steal) = HostTicks::now().and_then(|end| start.steal_until(&end)) else {
            return;
        };
        for (row, _) in &mut self.rows[first_row..] {
            row.push("host steal %", Value::from(steal.percent), false);
            row.push("host steal ticks", Value::from(steal.ticks), false);
        }
        if steal.percent >= NOISY_STEAL_PERCENT && steal.ticks >= NOISY_STEAL_TICKS {
            let during = match label.as_str() {
                "" => "this run".to_string(),
                l => l.to_string(),
            };
            self.note(format!(
                "host steal {:.1} % of the busy CPU time during {during}: the hypervisor ran \
                 other work on these CPUs, so its host-side timings are noisy",
                steal.percent
            ));
        }
    }

    /// Prints a line of context (the device, a reference bandwidth) once per distinct text.
    pub(crate) fn note(&mut self, line: impl Into<String>) {
        let line = line.into();
        if self.notes.insert(line.clone()) {
            self.print(&line);
        }
    }

    /// Prints `text` and a newline on standard output, under the bar; a failure is kept for
    /// [`Report::finish`] instead of a panic (which would leave the bar's lock poisoned).
    fn print(&mut self, text: &str) {
        if self.stdout_failed.is_none() {
            let written = self
                .bar
                .suspend(|| writeln!(std::io::stdout().lock(), "{text}"));
            self.stdout_failed = written.err();
        }
    }

    /// Records a row, with the sweep point's values in front of fields the row lacks (and
    /// shown where the row has them as details: what is swept is a column).
    pub(crate) fn row(&mut self, mut row: Row) {
        let mut front = Vec::new();
        for (name, value) in &self.point {
            match row.fields.iter_mut().find(|f| f.name == *name) {
                Some(f) => f.shown = true,
                None => front.push(Field {
                    name: name.clone(),
                    value: value.clone(),
                    shown: true,
                }),
            }
        }
        row.fields.splice(0..0, front);
        self.rows.push((row, self.device.clone()));
        self.show_bar_when_slow();
    }

    /// The bar appears once a run has taken a second (and only on a terminal).
    fn show_bar_when_slow(&mut self) {
        if self.bar_due && self.started.elapsed() > Duration::from_secs(1) {
            self.bar_due = false;
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
            self.bar.enable_steady_tick(Duration::from_millis(120));
        }
    }

    /// Ends the run: writes `<dir>/<stem>.jsonl` and the plots of `spec` (throughput against
    /// the first numeric axis of `axes` that varies, else `spec.x`), prints the tables, and
    /// says where the files went.
    ///
    /// # Errors
    /// [`BenchError::Io`] when the directory or a file cannot be written (the tables are
    /// printed still); [`BenchError::Stdout`] when standard output failed during the run.
    pub(crate) fn finish(
        &mut self,
        dir: &Path,
        stem: &str,
        spec: Option<&PlotSpec>,
        axes: &[String],
    ) -> Result<()> {
        self.bar.finish_and_clear();
        let written = self.write_files(dir, stem, spec, axes);
        let tables: Vec<String> = self.tables().iter().map(|t| self.render(t)).collect();
        for table in tables {
            self.print(&table);
        }
        let names: Vec<String> = written?.iter().map(|p| p.display().to_string()).collect();
        self.print(&format!("wrote {}", names.join(", ")));
        self.stdout_failed
            .take()
            .map_or(Ok(()), |e| Err(BenchError::Stdout(e)))
    }

    /// Writes the JSON lines and the plots; returns their paths.
    fn write_files(
        &self,
        dir: &Path,
        stem: &str,
        spec: Option<&PlotSpec>,
        axes: &[String],
    ) -> Result<Vec<PathBuf>> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| BenchError::Io { path, source }
        };
        std::fs::create_dir_all(dir).map_err(io(dir))?;
        let jsonl = dir.join(format!("{stem}.jsonl"));
        std::fs::write(&jsonl, self.json_lines()).map_err(io(&jsonl))?;
        let mut written: Vec<PathBuf> = vec![jsonl];
        if let Some(spec) = spec {
            let rows: Vec<&Row> = self.rows.iter().map(|(r, _)| r).collect();
            let title = format!(
                "joinkit-bench {} on {} (rev {REVISION})",
                self.subcommand,
                self.devices().join(", ")
            );
            written.extend(plot::plot(&rows, spec, axes, &title, dir, stem)?);
        }
        Ok(written)
    }

    fn tables(&self) -> Vec<&'static str> {
        distinct(self.rows.iter().map(|(r, _)| r.table))
    }

    fn devices(&self) -> Vec<&str> {
        distinct(self.rows.iter().map(|(_, d)| d.as_str()))
    }

    /// One table: a title, the union of the rows' shown fields as columns (`-` where a row has
    /// none), numbers right-aligned.
    fn render(&self, table: &str) -> String {
        let rows: Vec<&Row> = self
            .rows
            .iter()
            .map(|(r, _)| r)
            .filter(|r| r.table == table)
            .collect();
        let columns = distinct(
            rows.iter()
                .flat_map(|r| &r.fields)
                .filter(|f| f.shown)
                .map(|f| f.name.as_str()),
        );
        let cells: Vec<Vec<(String, bool)>> = rows
            .iter()
            .map(|r| {
                columns
                    .iter()
                    .map(|c| match r.get(c) {
                        Some(v) => (v.cell(), !matches!(v, Value::Text(_))),
                        None => ("-".into(), true),
                    })
                    .collect()
            })
            .collect();
        let widths: Vec<usize> = columns
            .iter()
            .enumerate()
            .map(|(i, c)| {
                cells
                    .iter()
                    .map(|r| r[i].0.chars().count())
                    .chain([c.chars().count()])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let numeric: Vec<bool> = (0..columns.len())
            .map(|i| cells.iter().all(|r| r[i].1))
            .collect();
        let line = |texts: &mut dyn Iterator<Item = &str>| {
            let mut s = String::new();
            for (i, t) in texts.enumerate() {
                let sep = if i == 0 { "" } else { "  " };
                let _ = if numeric[i] {
                    write!(s, "{sep}{t:>w$}", w = widths[i])
                } else {
                    write!(s, "{sep}{t:<w$}", w = widths[i])
                };
            }
            s.trim_end().to_string()
        };
        let mut out = format!("{table}:\n{}\n", line(&mut columns.iter().copied()));
        for r in &cells {
            out.push_str(&line(&mut r.iter().map(|c| c.0.as_str())));
            out.push('\n');
        }
        out
    }

    /// Every row as a JSON object: the revision, the command line, the device, the time, the
    /// table, then the row's fields (shown or not) in order, but for one named like a key
    /// before it (a swept `device`: the device's description stays).
    fn json_lines(&self) -> String {
        let time = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut out = String::new();
        for (row, device) in &self.rows {
            let mut pairs = vec![
                ("revision".to_string(), json_string(REVISION)),
                ("command".to_string(), json_string(&self.command)),
                ("device".to_string(), json_string(device)),
                ("unix_time".to_string(), time.to_string()),
                ("table".to_string(), json_string(row.table)),
            ];
            for f in &row.fields {
                if !pairs.iter().any(|(k, _)| *k == f.name) {
                    pairs.push((f.name.clone(), f.value.json()));
                }
            }
            let body: Vec<String> = pairs
                .iter()
                .map(|(k, v)| format!("{}:{v}", json_string(k)))
                .collect();
            out.push('{');
            out.push_str(&body.join(","));
            out.push_str("}\n");
        }
        out
    }
}

impl Drop for Report {
    /// Clears the bar whatever happens (an error is printed after the report is dropped), but
    /// not while a panic unwinds: the bar's lock may be poisoned, and a second panic aborts.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_have_three_significant_digits() {
        let cell = |x: f64| Value::Float(x).cell();
        assert_eq!(cell(12.345), "12.3");
        assert_eq!(cell(1234.5), "1234");
        assert_eq!(cell(0.012345), "0.0123");
        assert_eq!(cell(0.0), "0");
        assert_eq!(Value::parse("2^4"), Value::Int(16));
        assert_eq!(Value::parse("0.5"), Value::Float(0.5));
        assert_eq!(Value::parse("SMJ-UM"), Value::Text("SMJ-UM".into()));
    }

    #[test]
    fn tables_align_and_json_keeps_every_field() {
        let mut r = Report::new("t", "joinkit-bench t".into(), 1);
        r.start_point("", vec![("r".into(), Value::Int(4))]);
        r.on_device("CPU".into());
        r.row(
            Row::new("t")
                .with("algorithm", "A")
                .with("ms", 1.5)
                .detail("min ms", 1.0),
        );
        r.row(Row::new("t").with("algorithm", "BB").with("r", 8u64));
        let table = r.render("t");
        assert_eq!(
            table,
            "t:\nr  algorithm    ms\n4  A          1.50\n8  BB            -\n"
        );
        let lines = r.json_lines();
        let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
        assert_eq!(first["min ms"], 1.0);
        assert_eq!(first["device"], "CPU");
        assert_eq!(first["r"], 4);
    }

    #[test]
    fn a_swept_device_keeps_the_description_in_json() {
        let mut r = Report::new("t", "joinkit-bench t".into(), 1);
        let axis = vec![("device".into(), Value::parse("cpu"))];
        r.start_point("device=cpu", axis);
        r.on_device("CPU (2 rayon threads)".into());
        r.row(Row::new("t").with("ms", 1.5));
        assert!(r.render("t").contains("cpu"), "the axis is a column");
        let line = r.json_lines();
        assert_eq!(line.matches("\"device\"").count(), 1, "{line}");
        let row: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
        assert_eq!(row["device"], "CPU (2 rayon threads)");
    }
}
