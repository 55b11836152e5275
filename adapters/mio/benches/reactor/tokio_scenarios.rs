//! The scenarios with a tokio client against the mio server thread: `concurrent-tokio`,
//! `concurrent-tokio-bare` and `stream-tokio`.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsipc::fixtures;
use dsipc::payload::ProcessInfo;

use super::handlers::ServerThread;
use super::{peak_rss_mib, temp_dir, thread_cpu, GIB};

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

pub(super) fn concurrent_tokio() {
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
pub(super) fn concurrent_tokio_bare() {
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

pub(super) fn stream_tokio() {
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
