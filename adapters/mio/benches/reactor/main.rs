//! dsipc-mio benchmarks; they print their figures.
//!
//!     cargo bench -p dsipc-mio --bench reactor               # every scenario
//!     cargo bench -p dsipc-mio --bench reactor -- stream     # only those named
//!
//! Scenarios (each runs in its own child process, so that its peak RSS is its own):
//! - `concurrent`: one mio thread serves ProcessInfo to 1,000 concurrent client
//!   connections (opened all at once by a second mio thread), 10 rounds.
//! - `concurrent-1t`: the same with both sides in one mio thread.
//! - `concurrent-call`: `concurrent` through the session layer (`Control::call`,
//!   `session_call.rs`).
//! - `sequential`: 10,000 ProcessInfo exchanges one after the other (server and client in
//!   two mio threads): exchanges per second and latency.
//! - `stream`: a 1 GiB EventPipe continuation from a server machine to a client machine
//!   over a Unix socket (two mio threads), and `stream-1t` in one thread.
//! - `concurrent-tokio` and `stream-tokio`: the same server thread, with dsipc-tokio as the
//!   client on one tokio runtime thread (current_thread): 1,000 concurrent ProcessInfo
//!   exchanges per round, and the 1 GiB continuation read through `TraceSession::next_chunk`
//!   (dsipc-tokio against dsipc-mio in the same run).
//! - `concurrent-tokio-bare`: the floor under `concurrent-tokio`: the same 1,000 concurrent
//!   exchanges as bare tokio tasks (`tokio::net::UnixStream`, the request's bytes encoded
//!   once, the reply read by its header's size, no timeout, no parsing): what any tokio
//!   client pays before dsipc-tokio adds anything.
//! - `runtimes20`: twenty real .NET 8 runtimes started suspended on one reverse port;
//!   time for one mio thread to resume them all (needs DSIPC_PYTHON, else skipped).

#[path = "../../tests/support/fdlimit.rs"]
mod fdlimit;
mod handlers;
mod mio_scenarios;
mod runtimes20;
mod session_call;
mod tokio_scenarios;

use std::path::PathBuf;
use std::time::Duration;

use fdlimit::raise_fd_limit;
use mio_scenarios::{concurrent, sequential, stream};
use runtimes20::runtimes20;
use tokio_scenarios::{concurrent_tokio, concurrent_tokio_bare, stream_tokio};

const SCENARIOS: &[&str] = &[
    "concurrent",
    "concurrent-1t",
    "concurrent-call",
    "sequential",
    "stream",
    "stream-1t",
    "concurrent-tokio",
    "concurrent-tokio-bare",
    "stream-tokio",
    "runtimes20",
];

const GIB: u64 = 1 << 30;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--scenario") {
        raise_fd_limit(8192);
        let name = args.get(i + 1).map(String::as_str).unwrap_or("");
        match name {
            "concurrent" => concurrent(false),
            "concurrent-1t" => concurrent(true),
            "concurrent-call" => session_call::concurrent_call(),
            "sequential" => sequential(),
            "stream" => stream(false),
            "stream-1t" => stream(true),
            "concurrent-tokio" => concurrent_tokio(),
            "concurrent-tokio-bare" => concurrent_tokio_bare(),
            "stream-tokio" => stream_tokio(),
            "runtimes20" => runtimes20(),
            other => panic!("unknown scenario {}", other),
        }
        return;
    }
    let wanted: Vec<&str> = SCENARIOS
        .iter()
        .copied()
        .filter(|s| {
            let names: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
            names.is_empty() || names.iter().any(|n| s.contains(n.as_str()))
        })
        .collect();
    println!(
        "dsipc-mio benchmarks ({} CPUs, RLIMIT_NOFILE soft {})",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        raise_fd_limit(0)
    );
    let exe = std::env::current_exe().unwrap();
    for s in wanted {
        let status = std::process::Command::new(&exe)
            .arg("--scenario")
            .arg(s)
            .status()
            .unwrap();
        if !status.success() {
            println!("{}: FAILED ({})", s, status);
        }
    }
}

/// CPU time (user + system) of the calling thread.
fn thread_cpu() -> Duration {
    // SAFETY: getrusage on a local struct.
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_THREAD, &mut u);
        let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
        tv(u.ru_utime) + tv(u.ru_stime)
    }
}

/// Peak resident set size of this process (VmHWM), in MiB.
fn peak_rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    for line in status.lines() {
        if let Some(v) = line.strip_prefix("VmHWM:") {
            let kb: f64 = v
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse()
                .unwrap_or(0.0);
            return kb / 1024.0;
        }
    }
    0.0
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = PathBuf::from(format!("/tmp/dsipc-bench-{}-{}", tag, std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}
