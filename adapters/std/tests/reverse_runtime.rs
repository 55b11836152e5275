//! The reverse-port listener against a REAL .NET 8.0.4 runtime (CoreCLR hosted by
//! `tests/runtime/host.py`) started with `DOTNET_DiagnosticPorts=PATH,connect,suspend`:
//! the Advertise matches ProcessInfo, the runtime stays suspended until ResumeRuntime
//! arrives over the reverse connection, and it reconnects and advertises again after every
//! command. Needs `scripts/setup-runtimes.sh`; fails (never skips) without it.
#![cfg(target_os = "linux")]

mod reverse_support;
mod support;

use std::time::{Duration, Instant};

use dsipc::wire::Command;
use dsipc_std::reverse::{ReverseConnection, ReverseListener};
use dsipc_std::DiagnosticsClient;

use reverse_support::SpawnedHost;
use support::temp_path;

const TIMEOUT: Duration = Duration::from_secs(10);
/// A runtime load takes a few seconds of CPU; on a busy machine more.
const CONNECT_WAIT: Duration = Duration::from_secs(90);

fn accept(listener: &mut ReverseListener, host: &mut SpawnedHost, what: &str) -> ReverseConnection {
    let t = Instant::now();
    match listener.accept_timeout(CONNECT_WAIT) {
        Ok(Some(c)) => {
            eprintln!(
                "{}: advertise after {:.3} s (pid {}, cookie {})",
                what,
                t.elapsed().as_secs_f64(),
                c.pid(),
                c.cookie()
            );
            c
        }
        Ok(None) => panic!(
            "{}: no connection within {:?}; alive={} log:\n{}",
            what,
            CONNECT_WAIT,
            host.alive(),
            host.log_text()
        ),
        Err(e) => panic!("{}: {}", what, e),
    }
}

#[test]
fn net8_suspended_on_a_reverse_port_until_resumed_then_reconnects_after_every_command() {
    let dir = temp_path("revport");
    std::fs::create_dir_all(&dir).unwrap();
    let port = dir.join("port.sock");
    let mut listener = ReverseListener::bind(&port).unwrap();
    let ports = format!("{},connect,suspend", port.display());
    let mut host = SpawnedHost::start(&[("DOTNET_DiagnosticPorts", ports.as_str())]);

    // 1. The runtime connects and advertises; ProcessInfo over that connection reports the
    //    same pid and cookie.
    let first = accept(&mut listener, &mut host, "first connection");
    let adv = first.advertise();
    assert_eq!(adv.process_id, u64::from(host.pid));
    let info = first
        .into_client()
        .with_timeout(TIMEOUT)
        .process_info_basic()
        .expect("ProcessInfo over the reverse connection");
    assert_eq!(info.pid, adv.process_id);
    assert_eq!(info.cookie, adv.runtime_cookie);

    // 2. After that command it reconnects by itself (within accept's bounded wait), with
    //    the same cookie.
    let second = accept(&mut listener, &mut host, "reconnect after ProcessInfo");
    assert_eq!(second.advertise(), adv);

    // 3. The default listen socket works while suspended, and reports the same cookie.
    let deadline = Instant::now() + TIMEOUT;
    let default = loop {
        match DiagnosticsClient::for_pid(host.pid) {
            Ok(c) => break c.with_timeout(TIMEOUT),
            Err(e) if Instant::now() > deadline => {
                panic!("the default socket should exist while suspended: {}", e)
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let info3 = default
        .process_info()
        .expect("ProcessInfo on the default socket");
    assert_eq!(info3.command, Command::ProcessInfo3);
    assert_eq!(info3.cookie, adv.runtime_cookie);
    assert_eq!(info3.pid, adv.process_id);

    // 4. Nobody resumed it: no READY (its host is stuck in the runtime load).
    host.assert_still_suspended(Duration::from_secs(3));

    // 5. ResumeRuntime over the reverse connection: the host gets past the load.
    let t = Instant::now();
    second
        .into_client()
        .with_timeout(TIMEOUT)
        .resume_runtime()
        .expect("ResumeRuntime over the reverse connection");
    let ready = host
        .ready_within(Duration::from_secs(60))
        .unwrap_or_else(|| panic!("no READY after ResumeRuntime; log:\n{}", host.log_text()));
    assert_eq!(ready, host.pid);
    eprintln!(
        "READY {:.3} s after ResumeRuntime",
        t.elapsed().as_secs_f64()
    );

    // 6. It reconnected after the resume too, and serves commands there while running.
    let third = accept(&mut listener, &mut host, "reconnect after ResumeRuntime");
    assert_eq!(third.advertise(), adv);
    let info = third
        .into_client()
        .with_timeout(TIMEOUT)
        .process_info_basic()
        .unwrap();
    assert_eq!(info.cookie, adv.runtime_cookie);
    let fourth = accept(
        &mut listener,
        &mut host,
        "reconnect after the second ProcessInfo",
    );
    assert_eq!(fourth.advertise(), adv);

    // 7. An idle accepted connection is held: no extra connection arrives meanwhile.
    assert!(listener
        .accept_timeout(Duration::from_secs(1))
        .unwrap()
        .is_none());
    // Closing it makes the runtime reconnect at once.
    drop(fourth);
    let fifth = accept(&mut listener, &mut host, "reconnect after close");
    assert_eq!(fifth.advertise(), adv);

    drop(fifth);
    drop(host);
    drop(listener);
    assert!(!port.exists(), "the listener removed its socket");
    let _ = std::fs::remove_dir(&dir);
}
