//! The public sample traces (`shared/data/nettrace/*.zip`, never committed), unzipped into
//! `target/nettrace-samples` at test time.
//!
//! A user's clone has no `shared/` beside it: [`sample`] then returns `None` after writing one
//! visible line (`SKIPPED ...`, straight to stderr, which the test harness does not capture)
//! and appending it to `target/skipped-tests.txt`, which `scripts/test.sh` prints at the end.
//! With `DSIPC_REQUIRE_SHARED=1` (set by `scripts/test.sh` when it finds `shared/`, as on CI)
//! a missing sample fails the test instead.
//!
//! Self-contained (std only): dsipc-std's tests include this file by path, because a
//! dev-dependency on this crate (which depends on dsipc-std) would be a cycle.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The repository's root: the including crate's manifest directory or the nearest one
/// above it holding the core (`src/lib.rs` beside `tests/testkit`). This file is included
/// by path from crates at different depths (the core's tests, dsipc-std's).
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|d| d.join("src/lib.rs").is_file() && d.join("tests/testkit").is_dir())
        .unwrap_or(manifest)
        .to_path_buf()
}

/// `$DSIPC_SHARED`, `<repo>/../shared` or `<repo>/../../shared` (worktrees), the first that
/// holds `data/nettrace`; `None` in a clone without it.
pub fn shared() -> Option<PathBuf> {
    let root = repo_root();
    let mut candidates = Vec::new();
    if let Some(d) = std::env::var_os("DSIPC_SHARED") {
        candidates.push(PathBuf::from(d));
    }
    candidates.push(root.join("../shared"));
    candidates.push(root.join("../../shared"));
    let found = candidates.iter().find(|c| c.join("data/nettrace").is_dir());
    let required = std::env::var_os("DSIPC_REQUIRE_SHARED");
    if found.is_none() && required.as_deref() == Some(std::ffi::OsStr::new("1")) {
        panic!(
            "DSIPC_REQUIRE_SHARED=1 but no shared/data/nettrace in {:?}",
            candidates
        );
    }
    found.cloned()
}

/// Says, visibly, that the running test skipped `what` because the PerfView sample traces
/// (`shared/data/nettrace`) are absent: one line on stderr (written directly, so the test
/// harness shows it even for a passing test) and in `target/skipped-tests.txt`.
pub fn skipped(what: &str) {
    use std::io::Write;
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let line = format!(
        "SKIPPED {}: {} (needs the PerfView sample traces in ../shared/data/nettrace, absent \
         in this clone; set DSIPC_SHARED to their folder's parent to run it)\n",
        test, what
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
    let dir = repo_root().join("target");
    let _ = fs::create_dir_all(&dir);
    if let Ok(mut f) = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("skipped-tests.txt"))
    {
        let _ = f.write_all(line.as_bytes());
    }
}

/// The public sample trace `name` (e.g. `only_managed_samples.nettrace`), unzipped into
/// `target/nettrace-samples` the first time; `None` (after a visible [`skipped`] line naming
/// it) when `shared/` is absent.
pub fn sample(name: &str) -> Option<PathBuf> {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let dir = repo_root().join("target/nettrace-samples");
    let path = dir.join(name);
    if !path.is_file() {
        let shared = match shared() {
            Some(s) => s,
            None => {
                skipped(name);
                return None;
            }
        };
        fs::create_dir_all(&dir).unwrap();
        let zip = shared.join("data/nettrace").join(format!("{}.zip", name));
        // Unzip to a private directory, then rename: parallel tests may race.
        let tmp = dir.join(format!(
            ".unzip-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::SeqCst)
        ));
        unzip(&zip, &tmp);
        fs::rename(tmp.join(name), &path).unwrap();
        let _ = fs::remove_dir_all(&tmp);
    }
    Some(path)
}

/// Extracts `zip` into `out`: Python's zipfile (every CI image has python3), else unzip(1).
fn unzip(zip: &Path, out: &Path) {
    let py = Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(zip)
        .arg(out)
        .status();
    if matches!(py, Ok(s) if s.success()) {
        return;
    }
    let st = Command::new("unzip")
        .args(["-q", "-o"])
        .arg(zip)
        .arg("-d")
        .arg(out)
        .status()
        .expect("neither python3 nor unzip could run");
    assert!(st.success(), "unzip {}", zip.display());
}
