//! `reverse::RuntimePool` (listen mode for a monitor): fake runtimes connecting to it run
//! any number of commands through one client each, are listed while alive and dropped
//! when gone; misbehaving peers do not disturb it; and a real .NET 8 runtime runs
//! ProcessInfo and a trace session through it.
//!
//! Waits synchronise on events (the pool's `wait_until`, the fake runtime's records, EOF on
//! a peer's socket), each bounded; never on sleeps. The real-runtime test needs
//! `DSIPC_PYTHON` (source target/dotnet-venv/dsipc-runtimes.env): without it, it fails.
#![cfg(unix)]

mod support;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use dsipc::payload::Provider;
use dsipc::wire::{Advertise, Command, Guid, ADVERTISE_LEN};
use dsipc_testkit::{check_pattern, Config, FakeRuntime, StreamEnd, StreamSpec, TempDir};
use dsipc_tokio::reverse::{PooledRuntime, RuntimePool};
use dsipc_tokio::Error;

use support::wait_received;

const TIMEOUT: Duration = Duration::from_secs(10);

fn providers() -> [Provider<'static>; 1] {
    [Provider::new("Microsoft-Windows-DotNETRuntime", 0x1, 4)]
}

/// Waits until the runtime with `cookie` has an idle connection in the pool.
async fn wait_idle(pool: &RuntimePool, cookie: Guid) -> PooledRuntime {
    let list = pool
        .wait_until(TIMEOUT, |l| l.iter().any(|r| r.cookie == cookie && r.idle))
        .await
        .unwrap();
    list.into_iter().find(|r| r.cookie == cookie).unwrap()
}

/// Drops a fake runtime (which joins its threads) off the async workers.
fn shut_down(rt: FakeRuntime) {
    tokio::task::block_in_place(move || drop(rt));
}

/// A hand-made runtime: connects to `port` and advertises `cookie`/`pid`, then does
/// whatever the test does with the socket (it never reconnects).
fn advertise(port: &Path, cookie: Guid, pid: u64) -> UnixStream {
    let mut stream = UnixStream::connect(port).unwrap();
    let mut bytes = [0u8; ADVERTISE_LEN];
    let n = Advertise {
        runtime_cookie: cookie,
        process_id: pid,
        future: 0,
    }
    .emit(&mut bytes)
    .unwrap();
    stream.write_all(&bytes[..n]).unwrap();
    stream
}

/// Reads `stream` until the pool closes it (bounded by `TIMEOUT`); the bytes read. A
/// close with our bytes unread is a reset, which counts as closed too.
fn read_to_eof(stream: &mut UnixStream) -> Vec<u8> {
    stream.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut out = Vec::new();
    match tokio::task::block_in_place(|| stream.read_to_end(&mut out)) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("not closed within the timeout: {}", e),
    }
    out
}

fn assert_not_connected(e: &Error, cookie: Guid, pid: Option<u64>) {
    match e {
        Error::Connect { source, .. } => {
            assert_eq!(source.kind(), std::io::ErrorKind::NotConnected, "{}", e);
            let text = source.to_string();
            assert!(text.contains(&cookie.to_string()), "{}", text);
            if let Some(pid) = pid {
                assert!(text.contains(&format!("pid {}", pid)), "{}", text);
                assert!(text.contains("no longer connected"), "{}", text);
            }
        }
        other => panic!("expected Error::Connect, got {:?}", other),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_runs_several_commands_on_successive_connections() {
    let dir = TempDir::new("tokio-pool").unwrap();
    let port = dir.join("monitor.sock");
    let pool = RuntimePool::bind(&port).unwrap();
    assert_eq!(pool.address(), port);
    let before = SystemTime::now();
    let rt = Config::new()
        .pid(4321)
        .environment(&["A=1", "B=2"])
        .stream(StreamSpec::until_stopped(4096, Duration::from_millis(2)))
        .reverse_port(&port, false)
        .start()
        .unwrap();
    let cookie = rt.identity().cookie;
    let listed = wait_idle(&pool, cookie).await;
    assert_eq!(listed.pid, 4321);
    assert!(listed.first_seen >= before - Duration::from_secs(1));

    let client = pool.client(cookie).with_timeout(TIMEOUT);
    assert_eq!(client.address(), port);
    let info = client.process_info().await.unwrap();
    assert_eq!(info.command, Command::ProcessInfo3);
    assert_eq!(info.pid, 4321);
    assert_eq!(info.cookie, cookie);
    assert_eq!(
        client.process_environment().await.unwrap(),
        vec!["A=1".to_string(), "B=2".to_string()]
    );

    // A trace session on one connection, stopped from the runtime's next one (a task).
    let mut session = client
        .collect_tracing(&providers(), 16, true)
        .await
        .unwrap();
    let first = session.next_chunk().await.unwrap().unwrap();
    assert_eq!(check_pattern(0, &first), None);
    let stop = session.stop_handle();
    let stopper = tokio::spawn(async move { stop.stop().await });
    let mut offset = first.len() as u64;
    while let Some(chunk) = session.next_chunk().await {
        let chunk = chunk.unwrap();
        assert_eq!(check_pattern(offset, &chunk), None);
        offset += chunk.len() as u64;
    }
    stopper.await.unwrap().unwrap();
    let streams = tokio::task::block_in_place(|| rt.wait_streams(1, TIMEOUT));
    assert_eq!(streams[0].end, StreamEnd::Stopped);
    assert_eq!(streams[0].bytes, offset);

    // And one more after it all.
    assert_eq!(client.process_info_basic().await.unwrap().pid, 4321);

    let got = wait_received(&rt, 5).await;
    let commands: Vec<_> = got.iter().map(|r| r.command).collect();
    assert_eq!(
        commands,
        vec![
            Some(Command::ProcessInfo3),
            Some(Command::ProcessEnvironment),
            Some(Command::CollectTracing2),
            Some(Command::StopTracing),
            Some(Command::ProcessInfo),
        ]
    );
    assert!(got.iter().all(|r| r.reverse));
    let mut connections: Vec<u64> = got.iter().map(|r| r.connection).collect();
    connections.sort_unstable();
    connections.dedup();
    assert_eq!(connections.len(), 5, "one reverse connection per command");
    // Still one runtime, listed once, and its next connection is idle again.
    let list = wait_idle(&pool, cookie).await;
    assert_eq!(list.cookie, cookie);
    assert_eq!(pool.runtimes().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runtimes_are_listed_and_served_apart() {
    let dir = TempDir::new("tokio-pool-two").unwrap();
    let port = dir.join("monitor.sock");
    let pool = RuntimePool::bind(&port).unwrap();
    let one = Config::new()
        .pid(1001)
        .reverse_port(&port, false)
        .start()
        .unwrap();
    let two = Config::new()
        .pid(1002)
        .reverse_port(&port, true)
        .start()
        .unwrap();
    let (c1, c2) = (one.identity().cookie, two.identity().cookie);
    assert_ne!(c1, c2);
    let list = pool
        .wait_until(TIMEOUT, |l| l.len() == 2 && l.iter().all(|r| r.idle))
        .await
        .unwrap();
    let mut seen: Vec<(u64, Guid)> = list.iter().map(|r| (r.pid, r.cookie)).collect();
    seen.sort_unstable();
    assert_eq!(seen, vec![(1001, c1), (1002, c2)]);
    assert_eq!(pool.runtimes(), list);

    // Each client reaches its own runtime, concurrently.
    let (a, b) = (
        pool.client(c1).with_timeout(TIMEOUT),
        pool.client(c2).with_timeout(TIMEOUT),
    );
    let (ia, ib) = tokio::join!(a.process_info(), b.process_info());
    assert_eq!(ia.unwrap().pid, 1001);
    assert_eq!(ib.unwrap().pid, 1002);
    // The suspended one resumes through the pool.
    assert!(!two.is_resumed());
    b.resume_runtime().await.unwrap();
    assert!(tokio::task::block_in_place(|| two.wait_resumed(TIMEOUT)));
    assert_eq!(wait_received(&one, 1).await.len(), 1);
    assert_eq!(wait_received(&two, 2).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commands_for_one_runtime_take_its_connections_in_turn() {
    let dir = TempDir::new("tokio-pool-turns").unwrap();
    let port = dir.join("monitor.sock");
    let pool = RuntimePool::bind(&port).unwrap();
    let rt = Config::new()
        .pid(55)
        .reverse_port(&port, false)
        .start()
        .unwrap();
    let cookie = rt.identity().cookie;
    wait_idle(&pool, cookie).await;
    let client = pool.client(cookie).with_timeout(TIMEOUT);
    let (x, y, z) = tokio::join!(
        client.process_info_basic(),
        client.process_info_basic(),
        client.process_environment()
    );
    assert_eq!(x.unwrap().pid, 55);
    assert_eq!(y.unwrap().pid, 55);
    z.unwrap();
    assert_eq!(wait_received(&rt, 3).await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_that_shuts_down_disappears() {
    let dir = TempDir::new("tokio-pool-gone").unwrap();
    let port = dir.join("monitor.sock");
    let pool = RuntimePool::bind(&port).unwrap();
    let stays = Config::new()
        .pid(7)
        .reverse_port(&port, false)
        .start()
        .unwrap();
    let goes = Config::new()
        .pid(8)
        .reverse_port(&port, false)
        .start()
        .unwrap();
    let (kept, gone) = (stays.identity().cookie, goes.identity().cookie);
    pool.wait_until(TIMEOUT, |l| l.len() == 2).await.unwrap();
    let client = pool.client(gone).with_timeout(TIMEOUT);
    assert_eq!(client.process_info().await.unwrap().pid, 8);

    // Its idle connection reaches EOF: it is gone at once (no grace needed). (Shut down
    // between two connections, it would be gone after the reconnect grace instead.)
    wait_idle(&pool, gone).await;
    shut_down(goes);
    let list = pool
        .wait_until(TIMEOUT, |l| l.iter().all(|r| r.cookie != gone))
        .await
        .unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].cookie, kept);
    let started = Instant::now();
    let e = client.process_info().await.unwrap_err();
    assert!(started.elapsed() < TIMEOUT, "{:?}", started.elapsed());
    assert_not_connected(&e, gone, None);
    // The other one is untouched.
    assert_eq!(
        pool.client(kept)
            .with_timeout(TIMEOUT)
            .process_info()
            .await
            .unwrap()
            .pid,
        7
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_and_silent_peers_do_not_disturb_the_pool() {
    let dir = TempDir::new("tokio-pool-bad").unwrap();
    let port = dir.join("monitor.sock");
    let mut pool = RuntimePool::bind(&port).unwrap();
    pool.set_advertise_timeout(Duration::from_millis(200));
    assert_eq!(pool.advertise_timeout(), Duration::from_millis(200));

    let mut garbage = UnixStream::connect(&port).unwrap();
    garbage.write_all(&[0x55; 40]).unwrap();
    let mut short = UnixStream::connect(&port).unwrap();
    short.write_all(b"ADVR_V1\0").unwrap();
    short.shutdown(std::net::Shutdown::Write).unwrap();
    let mut silent = UnixStream::connect(&port).unwrap();
    // Each is closed by the pool: garbage at once, the short one at its EOF, the silent
    // one after the advertise timeout.
    assert!(read_to_eof(&mut garbage).is_empty());
    assert!(read_to_eof(&mut short).is_empty());
    assert!(read_to_eof(&mut silent).is_empty());
    assert!(pool.runtimes().is_empty());

    // A runtime after all that is served.
    let rt = Config::new()
        .pid(99)
        .reverse_port(&port, false)
        .start()
        .unwrap();
    let cookie = rt.identity().cookie;
    wait_idle(&pool, cookie).await;
    let client = pool.client(cookie).with_timeout(TIMEOUT);
    assert_eq!(client.process_info().await.unwrap().pid, 99);
    assert_eq!(pool.runtimes().len(), 1);
}

/// A pool bounded by `set_max_runtimes` keeps that many runtimes: a further one is closed
/// right after its Advertise and counted; a known runtime's new connection still files;
/// once one is gone, a new one is kept again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_pool_closes_new_runtimes_at_once_and_counts_them() {
    let dir = TempDir::new("tokio-pool-full").unwrap();
    let port = dir.join("monitor.sock");
    let mut pool = RuntimePool::bind(&port).unwrap();
    assert_eq!(
        pool.max_runtimes(),
        dsipc_tokio::reverse::MAX_POOLED_RUNTIMES
    );
    pool.set_max_runtimes(2);
    pool.set_reconnect_grace(Duration::ZERO);
    let first = advertise(&port, Guid([1; 16]), 1);
    let _second = advertise(&port, Guid([2; 16]), 2);
    pool.wait_until(TIMEOUT, |l| l.len() == 2 && l.iter().all(|r| r.idle))
        .await
        .unwrap();
    let mut third = advertise(&port, Guid([3; 16]), 3);
    assert!(read_to_eof(&mut third).is_empty());
    pool.wait_until(TIMEOUT, |_| pool.refused() == 1)
        .await
        .unwrap();
    // A known runtime reconnecting is not refused.
    let _again = advertise(&port, Guid([2; 16]), 2);
    drop(first);
    pool.wait_until(TIMEOUT, |l| l.len() == 1).await.unwrap();
    let _fourth = advertise(&port, Guid([4; 16]), 4);
    let list = pool
        .wait_until(TIMEOUT, |l| l.len() == 2 && l.iter().all(|r| r.idle))
        .await
        .unwrap();
    assert_eq!(list.iter().map(|r| r.pid).collect::<Vec<_>>(), vec![2, 4]);
    assert_eq!(pool.refused(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_connection_replaces_the_idle_one_and_bytes_on_an_idle_one_close_it() {
    let dir = TempDir::new("tokio-pool-replace").unwrap();
    let port = dir.join("monitor.sock");
    let pool = RuntimePool::bind(&port).unwrap();
    let cookie = Guid([7; 16]);
    let mut older = advertise(&port, cookie, 70);
    pool.wait_until(TIMEOUT, |l| l.len() == 1 && l[0].idle)
        .await
        .unwrap();
    let mut newer = advertise(&port, cookie, 70);
    // The older idle connection is closed when the newer one is filed.
    assert!(read_to_eof(&mut older).is_empty());
    let list = pool.runtimes();
    assert_eq!(list.len(), 1);
    assert!(list[0].idle);
    // A runtime writes nothing on an idle connection: bytes there close it, but the
    // runtime stays (it reconnects).
    newer.write_all(b"x").unwrap();
    assert!(read_to_eof(&mut newer).is_empty());
    let list = pool
        .wait_until(TIMEOUT, |l| l.len() == 1 && !l[0].idle)
        .await
        .unwrap();
    assert_eq!(list[0].pid, 70);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_for_gone_runtimes_fail_within_their_timeout() {
    let dir = TempDir::new("tokio-pool-late").unwrap();
    let port = dir.join("monitor.sock");
    let mut pool = RuntimePool::bind(&port).unwrap();

    // Never connected: at once.
    let unknown = Guid([9; 16]);
    let e = pool
        .client(unknown)
        .with_timeout(TIMEOUT)
        .process_info()
        .await
        .unwrap_err();
    assert_not_connected(&e, unknown, None);

    // A runtime that takes a command and never reconnects: the next command waits for
    // its next connection, then fails once the grace is over, within its timeout.
    pool.set_reconnect_grace(Duration::from_millis(300));
    assert_eq!(pool.reconnect_grace(), Duration::from_millis(300));
    let cookie = Guid([3; 16]);
    let mut peer = advertise(&port, cookie, 303);
    pool.wait_until(TIMEOUT, |l| l.len() == 1 && l[0].idle)
        .await
        .unwrap();
    let client = pool.client(cookie).with_timeout(TIMEOUT);
    let (first, request) = tokio::join!(client.process_info_basic(), async {
        // The peer reads the request and closes without an answer.
        let mut header = [0u8; 20];
        tokio::task::block_in_place(|| peer.read_exact(&mut header)).unwrap();
        drop(peer);
        header
    });
    assert_eq!(&request[..14], b"DOTNET_IPC_V1\0");
    assert!(first.is_err());
    let started = Instant::now();
    let e = client.process_info_basic().await.unwrap_err();
    assert!(started.elapsed() < TIMEOUT, "{:?}", started.elapsed());
    assert_not_connected(&e, cookie, Some(303));
    assert!(pool.runtimes().is_empty());

    // With a grace longer than the client's timeout, the timeout ends the wait.
    pool.set_reconnect_grace(Duration::from_secs(60));
    let cookie = Guid([4; 16]);
    let mut peer = advertise(&port, cookie, 404);
    pool.wait_until(TIMEOUT, |l| l.len() == 1 && l[0].idle)
        .await
        .unwrap();
    let short = pool.client(cookie).with_timeout(Duration::from_millis(300));
    let (first, _) = tokio::join!(short.process_info_basic(), async {
        let mut header = [0u8; 20];
        tokio::task::block_in_place(|| peer.read_exact(&mut header)).unwrap();
        drop(peer);
    });
    assert!(first.is_err());
    match short.process_info_basic().await {
        Err(Error::Timeout { command, timeout }) => {
            assert_eq!(command, Command::ProcessInfo);
            assert_eq!(timeout, Duration::from_millis(300));
        }
        other => panic!("{:?}", other),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_pool_closes_idle_connections_and_the_socket() {
    let dir = TempDir::new("tokio-pool-drop").unwrap();
    let port = dir.join("monitor.sock");
    let pool = RuntimePool::bind(&port).unwrap();
    // The port is taken while the pool lives.
    match RuntimePool::bind(&port) {
        Err(Error::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse),
        other => panic!("{:?}", other),
    }
    let cookie = Guid([5; 16]);
    let mut peer = advertise(&port, cookie, 505);
    pool.wait_until(TIMEOUT, |l| l.len() == 1 && l[0].idle)
        .await
        .unwrap();
    let client = pool.client(cookie).with_timeout(TIMEOUT);
    drop(pool);
    assert!(read_to_eof(&mut peer).is_empty());
    assert!(!port.exists());
    match client.process_info().await {
        Err(Error::Connect { source, .. }) => {
            assert!(source.to_string().contains("dropped"), "{}", source)
        }
        other => panic!("{:?}", other),
    }
    // The address can be bound again.
    let again = RuntimePool::bind(&port).unwrap();
    assert!(again.runtimes().is_empty());
}

#[test]
fn bind_outside_a_runtime_is_an_error() {
    let dir = TempDir::new("tokio-pool-nort").unwrap();
    match RuntimePool::bind(dir.join("monitor.sock")) {
        Err(Error::Io(e)) => assert!(e.to_string().contains("tokio runtime"), "{}", e),
        other => panic!("{:?}", other),
    }
}

/// A real .NET 8 runtime connecting with `DOTNET_DiagnosticPorts=PATH,connect,nosuspend`:
/// ProcessInfo, then a 1 s trace session stopped through its StopHandle, all through the
/// pool.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net8_process_info_and_a_trace_through_the_pool() {
    if let Err(e) = dsipc_testkit::python() {
        panic!("{}", e);
    }
    let dir = TempDir::new("tokio-pool-net8").unwrap();
    let port = dir.join("monitor.sock");
    let pool = RuntimePool::bind(&port).unwrap();
    let options = dsipc_testkit::HostOptions::net8(120).reverse_port(&port, false);
    let mut host = dsipc_testkit::HostedRuntime::spawn(&options).expect("start the runtime host");
    let ready = tokio::task::block_in_place(|| host.wait_ready(Duration::from_secs(60)))
        .expect("the runtime host is ready");
    assert_eq!(ready.runtime, "8.0.4");
    let pid = u64::from(ready.pid);
    let list = pool
        .wait_until(Duration::from_secs(30), |l| {
            l.iter().any(|r| r.pid == pid && r.idle)
        })
        .await
        .unwrap();
    let cookie = list.iter().find(|r| r.pid == pid).unwrap().cookie;
    let client = pool.client(cookie).with_timeout(TIMEOUT);

    let info = client.process_info().await.unwrap();
    assert_eq!(info.command, Command::ProcessInfo3);
    assert_eq!(info.pid, pid);
    assert_eq!(info.cookie, cookie);
    assert_eq!(info.clr_version.as_deref(), Some("8.0.4"));

    let providers = [Provider::new("Microsoft-Windows-DotNETRuntime", 0x8001, 4)];
    let mut session = client.collect_tracing(&providers, 64, true).await.unwrap();
    let stop = session.stop_handle();
    let stopper = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop.stop().await
    });
    let mut stream = Vec::new();
    while let Some(chunk) = session.next_chunk().await {
        stream.extend_from_slice(&chunk.unwrap());
    }
    stopper.await.unwrap().unwrap();
    assert!(
        stream.starts_with(b"Nettrace"),
        "stream starts with {:?}",
        &stream[..stream.len().min(16)]
    );
    assert_eq!(session.bytes_received(), stream.len() as u64);
    // The runtime is still there, with its next connection idle.
    wait_idle(&pool, cookie).await;
    assert_eq!(client.process_info_basic().await.unwrap().pid, pid);
    drop(host);
}
