//! `dsipc monitor` figures (the real binary): how long a runtime's Advertise takes to be
//! printed while other peers connect and say nothing, and how long Ctrl-C takes then.
//!
//!     cargo bench -p dsipc-cli --bench monitor
//!
//! For each count of silent peers: the monitor starts (`--timeout 600`), the peers
//! connect, then a runtime connects and advertises 50 times in turn (one connection each);
//! the time from its connect to the monitor's line is printed (median, 90th percentile,
//! max), then the time from SIGINT to the monitor's exit.
#![cfg(unix)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::fs;
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

use common::{s, Live};

use dsipc::wire::{Advertise, Guid};
use dsipc::ServerConnection;

const ROUNDS: usize = 50;
const WAIT: Duration = Duration::from_secs(60);

fn main() {
    // `cargo bench` passes --bench; a filter argument is not supported (one scenario).
    for silent in [0usize, 200, 900] {
        scenario(silent);
    }
}

fn temp_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("dsipc-bench-monitor-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn connect(port: &Path) -> UnixStream {
    let deadline = Instant::now() + WAIT;
    loop {
        match UnixStream::connect(port) {
            Ok(s) => return s,
            Err(e) if Instant::now() > deadline => panic!("connect: {}", e),
            Err(_) => thread::sleep(Duration::from_millis(5)),
        }
    }
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() - 1) * p / 100]
}

fn scenario(silent: usize) {
    let dir = temp_dir();
    let port = dir.join(format!("p{}.sock", silent));
    let mut mon = Live::dsipc(&["monitor", "--listen", s(&port), "--timeout", "600"]);
    drop(connect(&port)); // the monitor listens
    let peers: Vec<UnixStream> = (0..silent).map(|_| connect(&port)).collect();
    let mut took = Vec::with_capacity(ROUNDS);
    for i in 0..ROUNDS {
        let adv = Advertise {
            runtime_cookie: Guid::from_fields(i as u32, 1, 2, [3; 8]),
            process_id: 10_000 + i as u64,
            future: 0,
        };
        let mut out = [0u8; 64];
        let n = ServerConnection::advertising(adv)
            .poll_transmit(&mut out)
            .unwrap();
        let t = Instant::now();
        let mut s = connect(&port);
        s.write_all(&out[..n]).unwrap();
        let line = mon.line(WAIT);
        took.push(t.elapsed());
        assert!(
            line.starts_with(&format!("pid={} ", adv.process_id)),
            "{}",
            line
        );
        // Held by the monitor until this runtime's next connection (it has none).
        drop(s);
    }
    took.sort();
    let t = Instant::now();
    mon.signal(libc::SIGINT);
    let status = mon.child.wait().unwrap();
    let exit = t.elapsed();
    println!(
        "monitor, {:>3} silent peers: Advertise printed after median {:.2} ms, p90 {:.2} ms, \
         max {:.2} ms ({} runtimes); Ctrl-C exit in {:.1} ms ({})",
        silent,
        percentile(&took, 50).as_secs_f64() * 1e3,
        percentile(&took, 90).as_secs_f64() * 1e3,
        took[took.len() - 1].as_secs_f64() * 1e3,
        ROUNDS,
        exit.as_secs_f64() * 1e3,
        status
    );
    drop(peers);
    let _ = fs::remove_dir_all(&dir);
}
