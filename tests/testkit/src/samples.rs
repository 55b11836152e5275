//! The public sample traces (`shared/data/nettrace/*.zip`, never committed), unzipped into
//! `target/nettrace-samples` at test time.
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

/// `$DSIPC_SHARED`, `<repo>/../shared` or `<repo>/../../shared` (worktrees): fails, never
/// skips, when none has the sample traces.
pub fn shared() -> PathBuf {
    let root = repo_root();
    let mut candidates = Vec::new();
    if let Some(d) = std::env::var_os("DSIPC_SHARED") {
        candidates.push(PathBuf::from(d));
    }
    candidates.push(root.join("../shared"));
    candidates.push(root.join("../../shared"));
    match candidates.iter().find(|c| c.join("data/nettrace").is_dir()) {
        Some(c) => c.clone(),
        None => panic!(
            "no shared/data/nettrace in {:?}: set DSIPC_SHARED",
            candidates
        ),
    }
}

/// The public sample trace `name` (e.g. `only_managed_samples.nettrace`), unzipped into
/// `target/nettrace-samples` the first time.
pub fn sample(name: &str) -> PathBuf {
    static SEQ: AtomicUsize = AtomicUsize::new(0);
    let dir = repo_root().join("target/nettrace-samples");
    let path = dir.join(name);
    if !path.is_file() {
        fs::create_dir_all(&dir).unwrap();
        let zip = shared().join("data/nettrace").join(format!("{}.zip", name));
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
    path
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
