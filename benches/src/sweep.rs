//! Sweeps: `--sweep NAME=V1,V2,...` (repeatable) runs a subcommand once per point of the
//! cartesian product of its axes. An axis is any long option of the subcommand taking a value
//! (or a global one such as `device`); each run is the command line without its `--sweep`
//! options plus `--NAME=VALUE` per axis, so a sweep means exactly what the options mean.

use std::ffi::{OsStr, OsString};

use crate::error::{BenchError, Result};
use crate::measure::parse_size;
use crate::report::Value;

/// One axis: an option's name and the values it takes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Axis {
    /// The long option, without `--`.
    pub(crate) name: String,
    values: Vec<String>,
}

/// One run of a sweep.
#[derive(Debug)]
pub(crate) struct Point {
    /// `name=value ...` for the progress bar.
    pub(crate) label: String,
    /// The axes' values, as row fields.
    pub(crate) values: Vec<(String, Value)>,
    /// The command line of this run.
    pub(crate) argv: Vec<OsString>,
}

/// Parses `NAME=V1,V2,...`; a value `2^A..2^B` stands for every power of two from 2^A to 2^B
/// (a clap value parser).
pub(crate) fn parse_axis(s: &str) -> std::result::Result<Axis, String> {
    let (name, list) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: write NAME=V1,V2,... (NAME a long option)"))?;
    let name = name.trim().trim_start_matches("--").to_string();
    let mut values = Vec::new();
    for v in list.split(',').map(str::trim).filter(|v| !v.is_empty()) {
        // A range is two sizes around `..`; anything else with `..` in it (a path such as
        // `../r.parquet`) is a value.
        match v.split_once("..") {
            Some((lo, hi)) if parse_size(lo).is_ok() && parse_size(hi).is_ok() => {
                values.extend(powers_of_two(lo, hi)?)
            }
            _ => values.push(v.to_string()),
        }
    }
    if name.is_empty() || values.is_empty() {
        return Err(format!(
            "{s:?}: an axis needs a name and at least one value"
        ));
    }
    Ok(Axis { name, values })
}

/// `2^A..2^B` as `2^A`, `2^(A+1)`, ..., `2^B`.
fn powers_of_two(lo: &str, hi: &str) -> std::result::Result<Vec<String>, String> {
    let log = |s: &str| {
        parse_size(s)
            .ok()
            .filter(|n| n.is_power_of_two())
            .map(|n| n.trailing_zeros())
            .ok_or_else(|| {
                format!("{s:?} in a range: ranges run between powers of two (2^16..2^20)")
            })
    };
    let (a, b) = (log(lo)?, log(hi)?);
    if a > b {
        return Err(format!("range {lo}..{hi} runs backwards"));
    }
    Ok((a..=b).map(|e| format!("2^{e}")).collect())
}

fn is_option(token: &OsStr, name: &str) -> bool {
    let t = token.to_string_lossy();
    let long = format!("--{name}");
    t == long || t.starts_with(&format!("{long}="))
}

/// The runs of a sweep over `axes` of the command line `argv` (one run of `argv` itself when
/// there is no axis), the first axis varying slowest.
///
/// # Errors
/// [`BenchError::Usage`] for an axis given twice, or both swept and given as an option.
pub(crate) fn points(argv: &[OsString], axes: &[Axis]) -> Result<Vec<Point>> {
    let mut base = Vec::with_capacity(argv.len());
    let mut tokens = argv.iter();
    while let Some(t) = tokens.next() {
        if t == "--sweep" {
            tokens.next();
        } else if !is_option(t, "sweep") {
            base.push(t.clone());
        }
    }
    for (i, a) in axes.iter().enumerate() {
        if axes[..i].iter().any(|b| b.name == a.name) {
            return Err(BenchError::Usage(format!(
                "sweep axis {:?} is given twice",
                a.name
            )));
        }
        if base.iter().any(|t| is_option(t, &a.name)) {
            return Err(BenchError::Usage(format!(
                "--{} is both swept and given as an option; give it one way",
                a.name
            )));
        }
    }
    let mut out = vec![Point {
        label: String::new(),
        values: Vec::new(),
        argv: base,
    }];
    for a in axes {
        out = out
            .into_iter()
            .flat_map(|p| {
                a.values.iter().map(move |v| {
                    let mut argv = p.argv.clone();
                    argv.push(format!("--{}={v}", a.name).into());
                    let mut values = p.values.clone();
                    values.push((a.name.clone(), Value::parse(v)));
                    Point {
                        label: format!("{} {}={v}", p.label, a.name).trim().to_string(),
                        values,
                        argv,
                    }
                })
            })
            .collect();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<OsString> {
        s.split(' ').map(OsString::from).collect()
    }

    #[test]
    fn axes_parse_and_expand_ranges() {
        let a = parse_axis("r=2^16..2^18,2^20").unwrap();
        assert_eq!(a.name, "r");
        assert_eq!(a.values, ["2^16", "2^17", "2^18", "2^20"]);
        assert_eq!(
            parse_axis("--match-ratio=0.5, 1").unwrap().values,
            ["0.5", "1"]
        );
        assert!(parse_axis("r").is_err());
        assert!(parse_axis("r=").is_err());
        assert!(parse_axis("r=2^20..2^16").is_err());
        assert!(parse_axis("r=3..9").is_err());
        // Paths are values, not ranges.
        assert_eq!(
            parse_axis("left=../a.parquet,b/../c.arrow").unwrap().values,
            ["../a.parquet", "b/../c.arrow"]
        );
    }

    #[test]
    fn points_are_the_cartesian_product() {
        let axes = [
            parse_axis("r=2^4,2^5").unwrap(),
            parse_axis("algorithm=A,B,C").unwrap(),
        ];
        let p = points(&args("jb join --sweep x --repeat 3 --sweep=y"), &axes).unwrap();
        assert_eq!(p.len(), 6);
        assert_eq!(p[1].argv, args("jb join --repeat 3 --r=2^4 --algorithm=B"));
        assert_eq!(p[1].label, "r=2^4 algorithm=B");
        assert_eq!(p[5].values[0], ("r".to_string(), Value::Int(32)));
        let one = points(&args("jb join"), &[]).unwrap();
        assert_eq!(one.len(), 1);
        assert!(points(&args("jb join --r 5"), &axes).is_err());
        assert!(points(&args("jb join"), &[axes[0].clone(), axes[0].clone()]).is_err());
    }
}
