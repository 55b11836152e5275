//! The committed captures of real runtimes (`tests/data/nettrace/*.nettrace.gz`), read whole:
//! one loader for dsipc-trace's tests.

use std::path::PathBuf;
use std::process::Command;

/// The uncompressed bytes of `tests/data/nettrace/NAME` (a `.gz` capture).
pub fn capture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/nettrace")
        .join(name);
    let out = Command::new("gzip")
        .arg("-dc")
        .arg(&path)
        .output()
        .expect("gzip runs");
    assert!(out.status.success(), "gzip -dc {}", path.display());
    out.stdout
}
