//! dsipc-mio benchmarks; they print their figures.
//!
//!     cargo bench -p dsipc-mio --bench reactor               # every scenario
//!     cargo bench -p dsipc-mio --bench reactor -- stream     # only those named
//!
//! Scenarios (each runs in its own child process, so that its peak RSS is its own):
//! - `concurrent`: one mio thread serves ProcessInfo to 1,000 concurrent client
//!   connections (opened all at once by a second mio thread), 10 rounds.
//! - `concurrent-1t`: the same with both sides in one mio thread.
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

#[path = "../tests/support/fdlimit.rs"]
mod fdlimit;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsipc::fixtures;
use dsipc::payload::{CollectTracing2, ProcessInfo, Reply, ResumeRuntime};
use dsipc::wire::Guid;
use dsipc::{ClientEvent, Command, Response};
use dsipc_mio::{CloseReason, ConnId, Control, Event, Handler, Reactor};
use fdlimit::raise_fd_limit;

const SCENARIOS: &[&str] = &[
    "concurrent",
    "concurrent-1t",
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

/// The ProcessInfo reply the server side sends (the core's fixture, pid
/// `fixtures::PROCESS_INFO2.process_id`).
fn info_reply() -> Response<'static> {
    fixtures::response_for(Command::ProcessInfo).unwrap()
}

/// The server side: answers ProcessInfo, streams `stream_len` bytes after CollectTracing.
struct Server {
    served: u64,
    /// Hold requests until this many are waiting, then answer them all (0: answer at once).
    hold: usize,
    held: Vec<ConnId>,
    stream_len: u64,
    sent: u64,
    buf: Vec<u8>,
}

impl Server {
    fn new(stream_len: u64) -> Self {
        let mut buf = vec![0u8; 1 << 20];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        Server {
            served: 0,
            hold: 0,
            held: Vec::new(),
            stream_len,
            sent: 0,
            buf,
        }
    }

    fn pump(&mut self, ctl: &mut Control, conn: ConnId) {
        while self.sent < self.stream_len {
            let n = ((self.stream_len - self.sent) as usize).min(self.buf.len());
            let w = match ctl.write_continuation(conn, &self.buf[..n]) {
                Ok(w) => w,
                Err(_) => return,
            };
            self.sent += w as u64;
            if w < n {
                return;
            }
        }
        let _ = ctl.finish_stream(conn);
    }
}

impl Handler for Server {
    fn on_event(&mut self, ctl: &mut Control, event: Event<'_>) {
        match event {
            Event::Request { conn, request, .. } => {
                self.served += 1;
                if dsipc::Request::command(&request).is_collect_tracing() {
                    ctl.respond(conn, &Response::Ok(Reply::SessionId(1)))
                        .unwrap();
                    self.pump(ctl, conn);
                } else if self.hold > 0 {
                    self.held.push(conn);
                    if self.held.len() >= self.hold {
                        let reply = info_reply();
                        for c in self.held.drain(..) {
                            ctl.respond(c, &reply).unwrap();
                        }
                    }
                } else {
                    ctl.respond(conn, &info_reply()).unwrap();
                }
            }
            Event::Writable { conn } => self.pump(ctl, conn),
            _ => {}
        }
    }
}

/// The client side: counts completed exchanges and stream bytes.
#[derive(Default)]
struct Client {
    done: u64,
    failed: u64,
    pids: u64,
    bytes: u64,
    latencies: Vec<Duration>,
    started: std::collections::HashMap<ConnId, Instant>,
    client_conns: HashSet<ConnId>,
}

impl Handler for Client {
    fn on_event(&mut self, _ctl: &mut Control, event: Event<'_>) {
        match event {
            Event::Client {
                event: ClientEvent::Reply(Reply::ProcessInfo(i)),
                ..
            } => self.pids += i.process_id,
            Event::Client {
                event: ClientEvent::StreamData(d),
                ..
            } => self.bytes += d.len() as u64,
            Event::Closed { conn, reason } => {
                if !self.client_conns.remove(&conn) {
                    return;
                }
                match reason {
                    CloseReason::Done => self.done += 1,
                    other => {
                        eprintln!("{}: {}", conn, other);
                        self.failed += 1
                    }
                }
                if let Some(t) = self.started.remove(&conn) {
                    self.latencies.push(t.elapsed());
                }
            }
            _ => {}
        }
    }
}

/// Both sides in one reactor.
struct Both {
    server: Server,
    client: Client,
}

impl Handler for Both {
    fn on_event(&mut self, ctl: &mut Control, event: Event<'_>) {
        match &event {
            Event::Request { .. } | Event::Writable { .. } => self.server.on_event(ctl, event),
            _ => self.client.on_event(ctl, event),
        }
    }
}

/// A server reactor on its own thread until dropped.
struct ServerThread {
    stop: Arc<AtomicBool>,
    waker: Arc<mio::Waker>,
    served: Arc<AtomicU64>,
    peak_open: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<f64>>,
}

impl ServerThread {
    fn start(path: &Path, stream_len: u64, hold: usize) -> ServerThread {
        let mut reactor = Reactor::new().unwrap();
        reactor.control().listen(path).unwrap();
        let waker = reactor.waker().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicU64::new(0));
        let peak_open = Arc::new(AtomicU64::new(0));
        let (s, n, p) = (stop.clone(), served.clone(), peak_open.clone());
        let thread = std::thread::spawn(move || {
            let mut h = Server::new(stream_len);
            h.hold = hold;
            let cpu0 = thread_cpu();
            while !s.load(Ordering::Relaxed) {
                reactor
                    .poll(Some(Duration::from_millis(200)), &mut h)
                    .unwrap();
                n.store(h.served, Ordering::Relaxed);
                p.fetch_max(
                    reactor.control().connection_count() as u64,
                    Ordering::Relaxed,
                );
            }
            (thread_cpu() - cpu0).as_secs_f64()
        });
        ServerThread {
            stop,
            waker,
            served,
            peak_open,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        self.waker.wake().unwrap();
        self.thread.take().unwrap().join().unwrap()
    }
}

fn drive<H: Handler>(reactor: &mut Reactor, h: &mut H, mut done: impl FnMut(&H) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while !done(h) {
        assert!(Instant::now() < deadline, "benchmark stalled");
        reactor.poll(Some(Duration::from_millis(200)), h).unwrap();
    }
}

fn concurrent(one_thread: bool) {
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

fn sequential() {
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

fn stream(one_thread: bool) {
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

/// One tokio runtime thread (current_thread) for the dsipc-tokio client scenarios.
fn tokio_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Rounds of 1,000 concurrent exchanges on one tokio thread against the mio server thread:
/// `setup(path)` gives the client side once, a closure that spawns one exchange (its task
/// returns the pid the reply carried). Prints the figures under `name` (`what` says who the
/// clients are).
fn tokio_rounds<S, F>(name: &str, what: &str, setup: S)
where
    S: FnOnce(&Path) -> F,
    F: Fn() -> tokio::task::JoinHandle<u64>,
{
    const CONNS: u64 = 1000;
    const ROUNDS: u64 = 10;
    let dir = temp_dir(name);
    let path = dir.join("dotnet-diagnostic-12814-1-socket");
    let server = ServerThread::start(&path, 0, CONNS as usize);
    let rt = tokio_thread();
    let exchange = setup(&path);
    let mut rounds = Vec::new();
    let cpu0 = thread_cpu();
    let t0 = Instant::now();
    let mut pids = 0u64;
    for _ in 0..ROUNDS {
        let tr = Instant::now();
        pids += rt.block_on(async {
            let tasks: Vec<_> = (0..CONNS).map(|_| exchange()).collect();
            let mut sum = 0u64;
            for t in tasks {
                sum += t.await.unwrap();
            }
            sum
        });
        rounds.push(tr.elapsed());
    }
    let total = t0.elapsed();
    let client_cpu = (thread_cpu() - cpu0).as_secs_f64();
    let server_cpu = server.finish();
    assert_eq!(pids, fixtures::PROCESS_INFO2.process_id * CONNS * ROUNDS);
    rounds.sort();
    let per = |cpu: f64| cpu * 1e6 / (CONNS * ROUNDS) as f64;
    println!(
        "{}: {} rounds of {} concurrent ProcessInfo exchanges, {} on one tokio thread, the \
         same mio server thread: {:.0} exchanges/s; round median {:.1} ms, worst {:.1} ms; CPU \
         per exchange: server thread {:.1} µs, client thread {:.1} µs; peak RSS {:.1} MiB",
        name,
        ROUNDS,
        CONNS,
        what,
        (CONNS * ROUNDS) as f64 / total.as_secs_f64(),
        rounds[rounds.len() / 2].as_secs_f64() * 1e3,
        rounds[rounds.len() - 1].as_secs_f64() * 1e3,
        per(server_cpu),
        per(client_cpu),
        peak_rss_mib()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn concurrent_tokio() {
    tokio_rounds("concurrent-tokio", "dsipc-tokio clients", |path| {
        let client = dsipc_tokio::DiagnosticsClient::new(dsipc_tokio::Endpoint::new(path))
            .with_timeout(Duration::from_secs(60));
        move || {
            let c = client.clone();
            tokio::spawn(async move { c.process_info_basic().await.expect("ProcessInfo").pid })
        }
    });
}

/// The floor under `concurrent-tokio`: bare tokio tasks, same server, same rounds; the
/// request's bytes encoded once by the core, the reply read by its header's size.
fn concurrent_tokio_bare() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut machine = dsipc::ClientConnection::new();
    let mut request = vec![0u8; 64];
    let n = machine.send_request(&ProcessInfo, &mut request).unwrap();
    request.truncate(n);
    let request: Arc<[u8]> = request.into();
    let pid = fixtures::PROCESS_INFO2.process_id;
    tokio_rounds(
        "concurrent-tokio-bare",
        "bare tokio tasks (no dsipc-tokio)",
        |path| {
            let path: Arc<Path> = path.into();
            move || {
                let (path, request) = (Arc::clone(&path), Arc::clone(&request));
                tokio::spawn(async move {
                    let mut s = tokio::net::UnixStream::connect(&path)
                        .await
                        .expect("connect");
                    s.write_all(&request).await.expect("write");
                    let mut head = [0u8; 20];
                    s.read_exact(&mut head).await.expect("reply header");
                    let size = u16::from_le_bytes([head[14], head[15]]) as usize;
                    let mut body = vec![0u8; size.saturating_sub(20)];
                    s.read_exact(&mut body).await.expect("reply payload");
                    // The payload is read, not decoded: the floor counts the server's pid.
                    pid
                })
            }
        },
    );
}

fn stream_tokio() {
    let dir = temp_dir("stream-tokio");
    let path = dir.join("dotnet-diagnostic-12814-1-socket");
    let server = ServerThread::start(&path, GIB, 0);
    let rt = tokio_thread();
    let client = dsipc_tokio::DiagnosticsClient::new(dsipc_tokio::Endpoint::new(&path))
        .with_timeout(Duration::from_secs(60));
    let t0 = Instant::now();
    let bytes = rt.block_on(async {
        let mut session = client
            .collect_tracing(&[dsipc::payload::Provider::new("X", 1, 4)], 64, false)
            .await
            .expect("session");
        let mut n = 0u64;
        while let Some(chunk) = session.next_chunk().await {
            n += chunk.expect("chunk").len() as u64;
        }
        n
    });
    let secs = t0.elapsed().as_secs_f64();
    server.finish();
    assert_eq!(bytes, GIB);
    println!(
        "stream-tokio: 1 GiB EventPipe continuation, the mio server thread to a dsipc-tokio \
         TraceSession on one tokio thread: {:.2} s, {:.2} GB/s ({:.2} GiB/s); peak RSS {:.1} MiB",
        secs,
        GIB as f64 / secs / 1e9,
        GIB as f64 / secs / (1u64 << 30) as f64,
        peak_rss_mib()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn runtimes20() {
    use dsipc_testkit::{HostOptions, HostedRuntime};
    const N: usize = 20;
    if let Err(e) = dsipc_testkit::python() {
        println!("runtimes20: skipped ({})", e);
        return;
    }
    let dir = temp_dir("rt");
    let port = dir.join("port.sock");
    let mut reactor = Reactor::new().unwrap();
    reactor.control().listen_reverse(&port).unwrap();
    let t0 = Instant::now();
    let mut hosts: Vec<HostedRuntime> = (0..N)
        .map(|_| HostedRuntime::spawn(&HostOptions::net8(300).reverse_port(&port, true)).unwrap())
        .collect();
    let spawned = t0.elapsed();
    let mut advertised: HashSet<Guid> = HashSet::new();
    let mut resumed: HashSet<Guid> = HashSet::new();
    let mut asked: std::collections::HashMap<ConnId, Guid> = Default::default();
    let mut first_advertise = None;
    let mut last_advertise = None;
    let cpu0 = thread_cpu();
    let deadline = Instant::now() + Duration::from_secs(300);
    while resumed.len() < N {
        assert!(Instant::now() < deadline, "runtimes20 stalled");
        reactor
            .poll(
                Some(Duration::from_millis(200)),
                &mut |ctl: &mut Control, e: Event<'_>| match e {
                    // A runtime not seen yet: resume it (later Advertises are held).
                    Event::Advertise {
                        conn, advertise, ..
                    } if advertised.insert(advertise.runtime_cookie) => {
                        first_advertise.get_or_insert(t0.elapsed());
                        last_advertise = Some(t0.elapsed());
                        ctl.send_request(conn, &ResumeRuntime).unwrap();
                        asked.insert(conn, advertise.runtime_cookie);
                    }
                    Event::Client {
                        conn,
                        event: ClientEvent::Reply(Reply::Ok(h)),
                    } if h.is_success() => {
                        resumed.insert(asked[&conn]);
                    }
                    _ => {}
                },
            )
            .unwrap();
    }
    let all_resumed = t0.elapsed();
    let busy = thread_cpu() - cpu0;
    let mut ready_at = Duration::ZERO;
    for h in hosts.iter_mut() {
        h.wait_ready(Duration::from_secs(120)).unwrap();
        ready_at = t0.elapsed();
    }
    let first = first_advertise.unwrap();
    let last = last_advertise.unwrap();
    println!(
        "runtimes20: {} real .NET 8 runtimes suspended on one reverse port (spawned in {:.2} s): \
         first Advertise at {:.2} s, last at {:.2} s, all resumed at {:.2} s \
         ({:.1} ms after the last Advertise; the mio thread used {:.1} ms of CPU in all), \
         all hosts past the runtime load at {:.2} s",
        N,
        spawned.as_secs_f64(),
        first.as_secs_f64(),
        last.as_secs_f64(),
        all_resumed.as_secs_f64(),
        (all_resumed - last).as_secs_f64() * 1e3,
        busy.as_secs_f64() * 1e3,
        ready_at.as_secs_f64()
    );
    drop(hosts);
    let _ = std::fs::remove_dir_all(&dir);
}
