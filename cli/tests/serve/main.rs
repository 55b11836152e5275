//! `dsipc serve`, dotnet-monitor's HTTP API, end to end: a real HTTP client (curl) against
//! real .NET 8.0.4 and .NET Core 3.1.23 runtimes (each hosted with its own TMPDIR, so it is
//! the default process; needs `scripts/setup-runtimes.sh`), and against the fake runtime
//! for the cases a real one cannot be made to show (a session that never ends, a runtime
//! dying mid-stream, limits). Tests synchronise on serve's and the hosts' printed lines and
//! on the fake runtime's records, never on sleeps.
#![cfg(target_os = "linux")]

mod clients;
#[path = "../common/mod.rs"]
mod common;
mod config;
mod dying_runtimes;
mod egress;
mod listen_mode;
mod real_runtimes;
mod refusals;

use std::path::{Path, PathBuf};
use std::time::Duration;

use common::configure_python;
use common::serve::Answered;
use dsipc_testkit::{HostOptions, HostedRuntime, TempDir};
use serde_json::Value;

/// A real runtime alone in its own TMPDIR (so it is the default process there).
fn host(runtime: &str, args: &[&str]) -> (HostedRuntime, u32, TempDir) {
    configure_python();
    let dir = TempDir::new("dsipc-sv").unwrap();
    let mut opts = HostOptions::net8(240).env("TMPDIR", dir.path().as_os_str());
    opts.runtime = runtime.to_string();
    opts.args.extend(args.iter().map(|a| a.to_string()));
    let mut h = HostedRuntime::spawn(&opts).expect("spawn host");
    let ready = h.wait_ready(Duration::from_secs(90)).expect("host READY");
    (h, ready.pid, dir)
}

fn dsipc_report(file: &Path, args: &[&str]) -> common::Run {
    let mut all = vec!["report", file.to_str().unwrap()];
    all.extend_from_slice(args);
    common::dsipc(&all)
}

fn save(a: &Answered, dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, &a.body).unwrap();
    p
}

/// A served `.gcdump` saved as `name` in `dir`, read back by `dsipc gcdump report --format
/// json`: its per-type rows.
fn gcdump_rows(a: &Answered, dir: &Path, name: &str) -> Value {
    let file = save(a, dir, name);
    let rep = common::dsipc(&[
        "gcdump",
        "report",
        file.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(rep.code, Some(0), "{}", rep.stderr);
    serde_json::from_str(rep.stdout.trim()).unwrap()
}

/// RFC 7464 records: each starts with 0x1E and ends with a newline.
fn json_seq(body: &[u8]) -> Vec<Value> {
    if body.is_empty() {
        return Vec::new();
    }
    assert_eq!(body[0], 0x1e, "json-seq starts with RS");
    body[1..]
        .split(|&b| b == 0x1e)
        .map(|rec| {
            assert_eq!(rec.last(), Some(&b'\n'), "a record ends with LF");
            serde_json::from_slice(rec).unwrap()
        })
        .collect()
}
