//! ProcessInfo round trip: dsipc-std against a raw-socket baseline sending the same bytes,
//! in the same run, alternating batches so both see the same machine state.
//!
//!     cargo run --release -p dsipc-std --example rtt -- PID [ROUNDS]
//!     BATCH=50 RAW_TIMEOUTS=1 cargo run --release -p dsipc-std --example rtt -- PID
//!
//! Each sample is a whole cycle: connect, send the 20-byte request, read the reply to EOF
//! (the baseline) or to the decoded reply (dsipc: once turning the strings into `String`s,
//! once reading the reply borrowed from the receive buffer through `exchange`). With `RAW_TIMEOUTS=1` the baseline also sets read and write timeouts,
//! which dsipc always does.

#![cfg_attr(not(unix), allow(dead_code, unused_imports))]

use std::io::{Read, Write};
use std::time::{Duration, Instant};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report(name: &str, mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    let p50 = percentile(&samples, 0.5);
    println!(
        "{:<10} n={} p50={:>6.1} µs  p90={:>6.1} µs  p99={:>6.1} µs  mean={:>6.1} µs",
        name,
        samples.len(),
        p50.as_secs_f64() * 1e6,
        percentile(&samples, 0.9).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6,
        mean.as_secs_f64() * 1e6
    );
    p50
}

#[cfg(unix)]
fn main() {
    use dsipc::payload::{ProcessInfo, Request};
    use std::os::unix::net::UnixStream;

    let mut args = std::env::args().skip(1);
    let pid: u32 = args
        .next()
        .and_then(|p| p.parse().ok())
        .expect("usage: rtt PID [ROUNDS]");
    let rounds: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(6000);
    // RAW_TIMEOUTS=1: the baseline sets read and write timeouts too, as dsipc must.
    let raw_timeouts = std::env::var_os("RAW_TIMEOUTS").is_some();
    let socket = dsipc_std::unix::find_socket(pid, None).expect("find the socket");
    let client = dsipc_std::DiagnosticsClient::new(dsipc_std::Endpoint::new(&socket))
        .with_timeout(Duration::from_secs(5));

    let mut request = [0u8; 20];
    let n = ProcessInfo.encode(&mut request).unwrap();
    let mut reply = vec![0u8; 64 * 1024];
    let mut raw = Vec::with_capacity(rounds);
    let mut lib = Vec::with_capacity(rounds);
    let mut borrowed = Vec::with_capacity(rounds);
    // Paths alternate in blocks of BATCH calls (default 1,000): short blocks measure the
    // cost of switching between two code paths (caches, branch predictors) as much as the
    // paths themselves; BATCH=50 shows that effect.
    let batch: usize = std::env::var("BATCH")
        .ok()
        .and_then(|b| b.parse().ok())
        .unwrap_or(1000);
    // Warm up both paths.
    for _ in 0..50 {
        client.process_info_basic().unwrap();
    }
    while raw.len() < rounds {
        for _ in 0..batch {
            let t = Instant::now();
            let mut s = UnixStream::connect(&socket).unwrap();
            if raw_timeouts {
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
            }
            s.write_all(&request[..n]).unwrap();
            let mut got = 0;
            loop {
                let r = s.read(&mut reply[got..]).unwrap();
                if r == 0 {
                    break;
                }
                got += r;
            }
            raw.push(t.elapsed());
            assert!(got > 20);
        }
        for _ in 0..batch {
            let t = Instant::now();
            let info = client.process_info_basic().unwrap();
            lib.push(t.elapsed());
            assert_eq!(info.pid, u64::from(pid));
        }
        // The same exchange with the reply borrowed from the receive buffer (no `String`s).
        for _ in 0..batch {
            let t = Instant::now();
            let mut seen = 0;
            client
                .exchange(&ProcessInfo, |ev| {
                    if let dsipc::ClientEvent::Reply(dsipc::payload::Reply::ProcessInfo(p)) = ev {
                        seen = p.process_id;
                    }
                    Ok(())
                })
                .unwrap();
            borrowed.push(t.elapsed());
            assert_eq!(seen, u64::from(pid));
        }
    }
    let a = report("raw", raw);
    let b = report("dsipc-std", lib);
    let c = report("borrowed", borrowed);
    println!(
        "dsipc-std overhead at p50: {:+.1}% (owned ProcessInfo), {:+.1}% (borrowed reply)",
        (b.as_secs_f64() / a.as_secs_f64() - 1.0) * 100.0,
        (c.as_secs_f64() / a.as_secs_f64() - 1.0) * 100.0
    );
}

#[cfg(not(unix))]
fn main() {
    eprintln!("rtt: Unix only");
}
