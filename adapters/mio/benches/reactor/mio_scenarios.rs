//! The dsipc-mio scenarios: `concurrent`, `sequential` and `stream` (each in one or two
//! mio threads).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dsipc::fixtures;
use dsipc::payload::{CollectTracing2, ProcessInfo};
use dsipc_mio::Reactor;

use super::handlers::{drive, Both, Client, Server, ServerThread};
use super::{peak_rss_mib, temp_dir, thread_cpu, GIB};

pub(super) fn concurrent(one_thread: bool) {
    const CONNS: u64 = 1000;
    const ROUNDS: u64 = 10;
    let dir = temp_dir("conc");
    let path = dir.join("dotnet-diagnostic-12814-1-socket");
    let mut reactor = Reactor::with_capacity(4096).unwrap();
    let server = if one_thread {
        reactor.control().listen(&path).unwrap();
        None
    } else {
        Some(ServerThread::start(&path, 0, CONNS as usize))
    };
    let mut h = Both {
        server: Server::new(0),
        client: Client::default(),
    };
    let mut rounds = Vec::new();
    let mut peak_open = 0;
    let cpu0 = thread_cpu();
    let t0 = Instant::now();
    for r in 0..ROUNDS {
        let tr = Instant::now();
        for _ in 0..CONNS {
            let c = reactor.control().connect(&path, &ProcessInfo).unwrap();
            h.client.client_conns.insert(c);
        }
        peak_open = peak_open.max(reactor.control().connection_count());
        drive(&mut reactor, &mut h, |h| {
            h.client.done + h.client.failed >= (r + 1) * CONNS
        });
        rounds.push(tr.elapsed());
    }
    let total = t0.elapsed();
    let client_cpu = (thread_cpu() - cpu0).as_secs_f64();
    let server_peak = server
        .as_ref()
        .map(|s| s.peak_open.load(Ordering::Relaxed))
        .unwrap_or(0);
    let server_cpu = server.map(|s| s.finish());
    assert_eq!(h.client.failed, 0);
    assert_eq!(
        h.client.pids,
        fixtures::PROCESS_INFO2.process_id * CONNS * ROUNDS
    );
    rounds.sort();
    let per = |cpu: f64| cpu * 1e6 / (CONNS * ROUNDS) as f64;
    println!(
        "{}: {} rounds of {} concurrent ProcessInfo exchanges (up to {} client connections open \
         at once{}{}): {:.0} exchanges/s; round median {:.1} ms, worst {:.1} ms; CPU per exchange: \
         {}; peak RSS {:.1} MiB",
        if one_thread {
            "concurrent-1t"
        } else {
            "concurrent"
        },
        ROUNDS,
        CONNS,
        peak_open,
        if one_thread {
            ", client and server sides in one mio thread"
        } else {
            "; one mio thread serves them all, holding every request of a round until all \
             1000 arrived, another mio thread runs the clients"
        },
        if one_thread {
            String::new()
        } else {
            format!("; server peak {} connections open", server_peak)
        },
        (CONNS * ROUNDS) as f64 / total.as_secs_f64(),
        rounds[rounds.len() / 2].as_secs_f64() * 1e3,
        rounds[rounds.len() - 1].as_secs_f64() * 1e3,
        match server_cpu {
            Some(s) => format!(
                "server thread {:.1} µs, client thread {:.1} µs",
                per(s),
                per(client_cpu)
            ),
            None => format!("{:.1} µs (both sides)", per(client_cpu)),
        },
        peak_rss_mib()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

pub(super) fn sequential() {
    const N: u64 = 10_000;
    let dir = temp_dir("seq");
    let path = dir.join("dotnet-diagnostic-12814-1-socket");
    let server = ServerThread::start(&path, 0, 0);
    let mut reactor = Reactor::new().unwrap();
    let mut h = Client::default();
    let t0 = Instant::now();
    for i in 0..N {
        let c = reactor.control().connect(&path, &ProcessInfo).unwrap();
        h.client_conns.insert(c);
        h.started.insert(c, Instant::now());
        drive(&mut reactor, &mut h, |h| h.done + h.failed > i);
    }
    let total = t0.elapsed();
    // Read once the server thread has stopped: it publishes its count after each poll, so
    // the last exchange may be counted after the client already saw its reply.
    let counter = server.served.clone();
    server.finish();
    let served = counter.load(Ordering::Relaxed);
    assert_eq!(h.failed, 0);
    assert_eq!(served, N);
    let mut l = h.latencies;
    l.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "sequential: {} ProcessInfo exchanges one after the other: {:.0} exchanges/s; \
         latency (connect to close) p50 {:.1} µs, p90 {:.1} µs, p99 {:.1} µs; peak RSS {:.1} MiB",
        N,
        N as f64 / total.as_secs_f64(),
        us(l[l.len() / 2]),
        us(l[l.len() * 9 / 10]),
        us(l[l.len() * 99 / 100]),
        peak_rss_mib()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

pub(super) fn stream(one_thread: bool) {
    let dir = temp_dir("stream");
    let path = dir.join("dotnet-diagnostic-12814-1-socket");
    let mut reactor = Reactor::new().unwrap();
    let server = if one_thread {
        reactor.control().listen(&path).unwrap();
        None
    } else {
        Some(ServerThread::start(&path, GIB, 0))
    };
    let mut h = Both {
        server: Server::new(GIB),
        client: Client::default(),
    };
    let req = CollectTracing2 {
        request_rundown: false,
        ..fixtures::COLLECT_TRACING2
    };
    let t0 = Instant::now();
    let c = reactor.control().connect(&path, &req).unwrap();
    h.client.client_conns.insert(c);
    drive(&mut reactor, &mut h, |h| {
        h.client.done + h.client.failed > 0
    });
    let secs = t0.elapsed().as_secs_f64();
    if let Some(s) = server {
        s.finish();
    }
    assert_eq!(h.client.failed, 0);
    assert_eq!(h.client.bytes, GIB);
    println!(
        "{}: 1 GiB EventPipe continuation, server machine to client machine over a Unix socket{}: \
         {:.2} s, {:.2} GB/s ({:.2} GiB/s); peak RSS {:.1} MiB",
        if one_thread { "stream-1t" } else { "stream" },
        if one_thread {
            ", one thread"
        } else {
            ", two mio threads"
        },
        secs,
        GIB as f64 / secs / 1e9,
        GIB as f64 / secs / (1u64 << 30) as f64,
        peak_rss_mib()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
