//! Embeds the git revision (`git describe --always --dirty --abbrev=7`: the commit, with
//! `-dirty` where tracked files differ from it) as JOINKIT_BENCH_REVISION for the JSON lines,
//! or `unknown` where there is no git or no repository (a source tarball).

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !s.trim().is_empty()).then(|| s.trim().to_string())
}

fn main() {
    let revision = git(&[
        "describe",
        "--always",
        "--dirty",
        "--abbrev=7",
        "--exclude",
        "*",
    ])
    .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=JOINKIT_BENCH_REVISION={revision}");
    println!("cargo:rerun-if-changed=build.rs");
    // Rebuild when a tracked source changes too, so that `-dirty` comes and goes with it: the
    // workspace's source folders (not `target`) and the index.
    for dir in [
        "cuda",
        "primitives",
        "partition",
        "hashtable",
        "codec",
        "joins",
        "benches",
    ] {
        println!("cargo:rerun-if-changed=../{dir}");
    }
    // Rebuild when HEAD moves: HEAD itself (a checkout), the branch it points to (a commit),
    // packed refs. Only existing files: cargo reruns every build for a missing one.
    let head_ref = git(&["symbolic-ref", "-q", "HEAD"]);
    for name in ["HEAD", "packed-refs", "index"]
        .into_iter()
        .chain(head_ref.as_deref())
    {
        if let Some(path) = git(&["rev-parse", "--git-path", name])
            && let Ok(abs) = std::fs::canonicalize(Path::new(&path))
        {
            println!("cargo:rerun-if-changed={}", abs.display());
        }
    }
}
