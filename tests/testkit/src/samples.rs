//! The public sample traces (`shared/data/nettrace/*.zip`, never committed), unzipped into
//! `target/nettrace-samples` at test time.
//!
//! Self-contained (std only): dsipc-std's tests include this file by path, because a
//! dev-dependency on this crate (which depends on dsipc-std) would be a cycle.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The repository's root (this crate and dsipc-std, which includes this file, are both two
/// levels below it).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
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
        let st = Command::new("unzip")
            .args(["-q", "-o"])
            .arg(&zip)
            .arg("-d")
            .arg(&tmp)
            .status()
            .expect("unzip (apt-get install unzip)");
        assert!(st.success(), "unzip {}", zip.display());
        fs::rename(tmp.join(name), &path).unwrap();
        let _ = fs::remove_dir_all(&tmp);
    }
    path
}
