//! The committed captures of real runtimes (`tests/data/nettrace/*.nettrace[.gz]`), read whole:
//! the loaders of dsipc-trace's tests, and the profile a whole capture makes.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

use dsipc::nettrace::Item;
use dsipc_trace::format::ProfileMeta;
use dsipc_trace::{Profile, TraceAnalyzer, TraceStream};

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

/// The bytes of `tests/data/nettrace/NAME` (an uncompressed capture).
pub fn plain(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/nettrace")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {}", path.display(), e))
}

/// The profile of a whole trace in memory (it must parse and end cleanly), named `name`,
/// of `process`.
pub fn profile_of(bytes: &[u8], name: &str, process: Option<&str>) -> (Profile, ProfileMeta) {
    let mut stream = TraceStream::new();
    let mut analyzer = TraceAnalyzer::new();
    let mut each = |item: &Item<'_>| {
        analyzer.on_item(item);
    };
    stream.feed(bytes, &mut each).expect("parses");
    stream.finish(&mut each).expect("ends cleanly");
    let meta = ProfileMeta {
        name: name.into(),
        process: process.map(Into::into),
        info: analyzer.info().copied(),
    };
    (analyzer.finish_profile(false), meta)
}
