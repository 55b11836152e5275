//! Interop against REAL runtimes: .NET 8.0.4 and .NET Core 3.1.23 (PyPI wheels, hosted by
//! pythonnet through `tests/runtime/host.py`). Needs `scripts/setup-runtimes.sh` first; the
//! tests fail (they do not skip) without it.
//!
//! Each test starts its own host, so the runtime's single-threaded server only ever sees
//! one test. Every wait is bounded by the client's timeout or an explicit deadline.
#![cfg(target_os = "linux")]

mod support;

use dsipc::session::Outcome;
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsipc::payload::{
    CollectTracing, CollectTracing3, DumpType, PerfMapType, Provider, TraceFormat,
};
use dsipc::wire::{Command, Hresult, Seq};
use dsipc_std::{unix, DiagnosticsClient, Error};

use support::{remove, temp_path, wait_until, Host, Runtime};

const TIMEOUT: Duration = Duration::from_secs(10);
const NETTRACE_MAGIC: &[u8] = b"Nettrace";

fn client(host: &Host) -> DiagnosticsClient {
    DiagnosticsClient::for_pid(host.pid)
        .expect("find the host's socket")
        .with_timeout(TIMEOUT)
}

fn env_value(vars: &[String], name: &str) -> Option<String> {
    let prefix = format!("{}=", name);
    vars.iter()
        .find_map(|v| v.strip_prefix(prefix.as_str()).map(str::to_string))
}

/// The runtime provider: GC (0x1) and Exception (0x8000) events at Informational.
fn runtime_provider() -> [Provider<'static>; 1] {
    [Provider::new("Microsoft-Windows-DotNETRuntime", 0x8001, 4)]
}

/// Drains a session for `secs`, stopping through `should_stop`; checks a clean end.
fn trace_for(client: &DiagnosticsClient, secs: f64, rundown: bool) -> Vec<u8> {
    let mut session = client
        .collect_tracing(&runtime_provider(), 64, rundown)
        .expect("start the session");
    let mut stream = Vec::new();
    let start = Instant::now();
    let t = Instant::now();
    let outcome = session
        .copy_to(&mut stream, |_| {
            start.elapsed() >= Duration::from_secs_f64(secs)
        })
        .expect("drain to a clean end");
    // The session layer followed the stream's framing: whole, after our stop.
    assert!(matches!(outcome, Outcome::Stopped { .. }), "{:?}", outcome);
    let n = outcome.bytes();
    eprintln!(
        "session 0x{:x}: {} bytes, ended {:.3} s after the stop",
        session.session_id(),
        n,
        t.elapsed().as_secs_f64() - secs
    );
    assert_eq!(n as usize, stream.len());
    check_nettrace(&stream);
    stream
}

fn check_nettrace(stream: &[u8]) {
    assert!(
        stream.starts_with(NETTRACE_MAGIC),
        "stream starts with {:?}",
        &stream[..stream.len().min(16)]
    );
    assert!(
        stream[8..].starts_with(b"\x14\x00\x00\x00!FastSerialization.1"),
        "no FastSerialization header"
    );
    // Every stream the runtimes were seen to end cleanly with EndObject + NullReference.
    assert!(
        stream.ends_with(&[0x06, 0x01]),
        "stream ends with {:?}",
        &stream[stream.len().saturating_sub(4)..]
    );
}

#[test]
fn discovery_finds_the_host_socket_by_its_start_key() {
    let host = Host::start(Runtime::Net8, false);
    let key = unix::start_key(host.pid).expect("start key");
    let path = unix::find_socket(host.pid, None).expect("find_socket");
    let name = path.file_name().unwrap().to_str().unwrap().to_string();
    assert_eq!(
        name,
        format!("dotnet-diagnostic-{}-{}-socket", host.pid, key)
    );
    let listed = unix::list_processes(None).expect("list_processes");
    let entry = listed
        .iter()
        .find(|p| p.pid == host.pid)
        .unwrap_or_else(|| panic!("host {} not in {:?}", host.pid, listed));
    assert_eq!(entry.socket, path);
    // The portable listing (one API for sockets and pipes) finds the same endpoint.
    let portable = dsipc_std::list_processes(None).expect("portable list_processes");
    assert!(
        portable
            .iter()
            .any(|p| p.pid == host.pid && p.endpoint == path),
        "{:?}",
        portable
    );
    // An explicit tmpdir is the only place searched; one that cannot be read is an error.
    let empty = std::env::temp_dir().join(format!("dsipc-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    match unix::find_socket(host.pid, Some(&empty)) {
        Err(Error::NoSocket { pid, searched }) => {
            assert_eq!(pid, host.pid);
            assert_eq!(searched, vec![empty.clone()]);
        }
        other => panic!("{:?}", other),
    }
    let _ = std::fs::remove_dir(&empty);
    match unix::find_socket(host.pid, Some(std::path::Path::new("/nonexistent"))) {
        Err(Error::SearchDir { dir, source }) => {
            assert_eq!(dir, std::path::PathBuf::from("/nonexistent"));
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("{:?}", other),
    }
    let dir = path.parent().unwrap();
    assert_eq!(unix::find_socket(host.pid, Some(dir)).unwrap(), path);
}

#[test]
fn net8_process_info_matches_the_host_and_the_cookie_is_stable() {
    let host = Host::start(Runtime::Net8, false);
    let c = client(&host);
    let t = Instant::now();
    let info = c.process_info().expect("ProcessInfo3");
    eprintln!("ProcessInfo3 round trip {:?}: {:?}", t.elapsed(), info);
    assert_eq!(info.command, Command::ProcessInfo3);
    assert_eq!(info.pid, u64::from(host.pid));
    // A pythonnet host: the command line is the python executable.
    assert_eq!(info.command_line, host.exe().to_str().unwrap());
    assert_eq!(info.os, "Linux");
    assert_eq!(info.arch, "x64");
    assert_eq!(info.clr_version.as_deref(), Some("8.0.4"));
    assert_eq!(info.runtime_identifier.as_deref(), Some("linux-x64"));
    assert_eq!(info.entrypoint_assembly.as_deref(), Some(""));
    let again = c.process_info().unwrap();
    let basic = c.process_info_basic().unwrap();
    assert_eq!(basic.command, Command::ProcessInfo);
    assert_ne!(info.cookie, dsipc::wire::Guid::NIL);
    assert_eq!(again.cookie, info.cookie);
    assert_eq!(basic.cookie, info.cookie);
    assert_eq!(basic.command_line, info.command_line);
}

#[test]
fn net8_set_environment_variable_reads_back_and_unsets() {
    let host = Host::start(Runtime::Net8, false);
    let c = client(&host);
    let name = "DSIPC_INTEROP_VAR";
    let before = c.process_environment().expect("ProcessEnvironment");
    assert!(env_value(&before, "PATH").is_some(), "{:?}", before);
    assert_eq!(env_value(&before, name), None);

    c.set_environment_variable(name, Some("hello=world ünïcode"))
        .expect("set");
    let vars = c.process_environment().unwrap();
    assert_eq!(
        env_value(&vars, name).as_deref(),
        Some("hello=world ünïcode")
    );
    assert_eq!(vars.len(), before.len() + 1);

    c.set_environment_variable(name, Some(""))
        .expect("set empty");
    assert_eq!(
        env_value(&c.process_environment().unwrap(), name).as_deref(),
        Some("")
    );

    c.set_environment_variable(name, None).expect("unset");
    let after = c.process_environment().unwrap();
    assert_eq!(env_value(&after, name), None);
    assert_eq!(after.len(), before.len());

    // The adapter refuses what would crash 8.0.4 (an empty name), without sending it.
    match c.set_environment_variable("", Some("x")) {
        Err(Error::InvalidRequest(_)) => {}
        other => panic!("{:?}", other),
    }
    assert!(c.process_info_basic().is_ok(), "the runtime is still there");
}

#[test]
fn net8_enable_perf_map_writes_the_map_and_disable_is_answered() {
    let host = Host::start(Runtime::Net8, false);
    let c = client(&host);
    let map = std::path::PathBuf::from(format!("/tmp/perf-{}.map", host.pid));
    let info = std::path::PathBuf::from(format!("/tmp/perfinfo-{}.map", host.pid));
    remove(&map);
    c.enable_perf_map(PerfMapType::PerfMap)
        .expect("EnablePerfMap");
    wait_until("/tmp/perf-PID.map", Duration::from_secs(10), || {
        std::fs::metadata(&map).map_or(false, |m| m.len() > 0)
    });
    let size = std::fs::metadata(&map).unwrap().len();
    eprintln!("{}: {} bytes", map.display(), size);
    c.disable_perf_map().expect("DisablePerfMap");
    // Disable is answered also when already disabled.
    c.disable_perf_map().expect("DisablePerfMap again");
    remove(&map);
    remove(&info);
}

#[test]
fn net8_eventpipe_while_busy_ends_cleanly_after_stop() {
    let host = Host::start(Runtime::Net8, true);
    let c = client(&host);
    let with_rundown = trace_for(&c, 2.0, true);
    let without = trace_for(&c, 1.0, false);
    eprintln!(
        "rundown: {} bytes, no rundown: {} bytes",
        with_rundown.len(),
        without.len()
    );
    assert!(with_rundown.len() > 50_000, "{}", with_rundown.len());
    // The runtime is fine afterwards.
    assert_eq!(c.process_info().unwrap().pid, u64::from(host.pid));
}

#[test]
fn net8_stop_handle_from_another_thread_while_draining() {
    let host = Host::start(Runtime::Net8, true);
    let c = client(&host);
    let mut session = c.collect_tracing(&runtime_provider(), 64, true).unwrap();
    let handle = session.stop_handle();
    assert_eq!(handle.session_id(), session.session_id());
    let stopper = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1500));
        let t = Instant::now();
        let r = handle.stop();
        (r, t.elapsed())
    });
    let mut stream = Vec::new();
    let outcome = session.copy_to(&mut stream, |_| false).expect("drain");
    assert!(matches!(outcome, Outcome::Stopped { .. }), "{:?}", outcome);
    let n = outcome.bytes();
    let (stopped, took) = stopper.join().unwrap();
    stopped.expect("StopTracing answered");
    eprintln!("{} bytes; StopTracing answered in {:?}", n, took);
    check_nettrace(&stream);
}

#[test]
fn net8_any_collect_tracing_version_and_unknown_ones_are_typed() {
    let host = Host::start(Runtime::Net8, true);
    let c = client(&host);
    let providers = runtime_provider();
    // CollectTracing (v1, rundown implied) works.
    let mut s = c
        .start_tracing(CollectTracing {
            circular_buffer_mb: 16,
            format: TraceFormat::NetTrace,
            providers: Seq::Slice(&providers),
        })
        .expect("CollectTracing");
    let start = Instant::now();
    let mut stream = Vec::new();
    s.copy_to(&mut stream, |_| {
        start.elapsed() > Duration::from_millis(500)
    })
    .unwrap();
    check_nettrace(&stream);
    // 8.0.4 does not know CollectTracing3: a typed "not supported", and nothing breaks.
    match c.start_tracing(CollectTracing3 {
        circular_buffer_mb: 16,
        format: TraceFormat::NetTrace,
        request_rundown: false,
        request_stackwalk: true,
        providers: Seq::Slice(&providers),
    }) {
        Err(Error::NotSupported { command, hresult }) => {
            assert_eq!(command, Command::CollectTracing3);
            assert_eq!(hresult, Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND);
        }
        other => panic!("{:?}", other),
    }
    assert!(c.process_info().is_ok());
}

#[test]
fn net8_error_replies_reach_the_caller_intact() {
    let host = Host::start(Runtime::Net8, false);
    let c = client(&host);
    match c.apply_startup_hook("/nonexistent/does-not-exist.dll") {
        Err(e @ Error::ErrorReply { .. }) => {
            assert_eq!(e.hresult(), Some(Hresult::E_INVALIDARG));
            let text = e.to_string();
            assert!(
                text.contains("0x80070057") && text.contains("E_INVALIDARG"),
                "{}",
                text
            );
            assert!(!text.contains('\n'));
        }
        other => panic!("{:?}", other),
    }
    // ResumeRuntime is answered OK even when not suspended.
    c.resume_runtime().expect("ResumeRuntime");
    assert!(c.process_info_basic().is_ok());
}

#[test]
fn net8_generate_core_dump_or_its_error_reply() {
    let host = Host::start(Runtime::Net8, false);
    let c = client(&host).with_timeout(Duration::from_secs(60));
    let path = temp_path("net8.dmp");
    let t = Instant::now();
    match c.write_dump(path.to_str().unwrap(), DumpType::Normal, 0) {
        Ok(()) => {
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            eprintln!(
                "CASE: dump written: {} ({} bytes) in {:?}",
                path.display(),
                size,
                t.elapsed()
            );
            assert!(size > 1_000_000, "dump of {} bytes", size);
            remove(&path);
        }
        Err(e) => {
            // The sandbox refused: the runtime's answer must arrive intact (GenerateCoreDump3
            // carries createdump's message).
            eprintln!("CASE: no dump here; the runtime answered: {}", e);
            match &e {
                Error::ErrorReply {
                    command, hresult, ..
                } => {
                    assert_eq!(*command, Command::GenerateCoreDump3);
                    assert!(!hresult.is_success());
                }
                other => panic!("not an error reply: {:?}", other),
            }
            remove(&path);
        }
    }
    // A dump failure must not have cost the target its socket.
    assert!(c.process_info_basic().is_ok(), "log: {}", host.log_text());
}

#[test]
fn net8_dump_error_reply_carries_createdump_message() {
    let host = Host::start(Runtime::Net8, false);
    let c = client(&host).with_timeout(Duration::from_secs(60));
    // An unwritable directory: createdump fails, GenerateCoreDump3 says why.
    match c.write_dump("/nonexistent-dir/x.dmp", DumpType::Normal, 0) {
        Err(Error::ErrorReply {
            command,
            hresult,
            message,
        }) => {
            eprintln!("{:?} {} {:?}", command, hresult, message);
            assert_eq!(command, Command::GenerateCoreDump3);
            assert!(!hresult.is_success());
            let m = message.expect("createdump's message");
            assert!(m.contains("/nonexistent-dir/x.dmp"), "{}", m);
        }
        other => panic!("{:?}", other),
    }
    assert!(c.process_info_basic().is_ok(), "log: {}", host.log_text());
}

#[test]
fn netcore31_process_commands_are_not_supported() {
    let host = Host::start(Runtime::NetCore31, false);
    assert!(host.version.starts_with("3.1"), "{}", host.version);
    let c = client(&host);
    let t = Instant::now();
    match c.process_info() {
        Err(e @ Error::NotSupported { .. }) => {
            eprintln!("{:?}: {}", t.elapsed(), e);
            assert_eq!(e.hresult(), Some(Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND));
            // ProcessInfo3, 2 and 1 were all tried; the error names the last.
            match &e {
                Error::NotSupported { command, .. } => {
                    assert_eq!(*command, Command::ProcessInfo)
                }
                _ => unreachable!(),
            }
            let text = e.to_string();
            assert!(text.contains(".NET 5"), "{}", text);
            assert!(text.contains("0x80131385"), "{}", text);
        }
        other => panic!("{:?}", other),
    }
    assert!(c.process_environment().unwrap_err().is_not_supported());
    assert!(c
        .set_environment_variable("X", Some("y"))
        .unwrap_err()
        .is_not_supported());
}

#[test]
fn netcore31_eventpipe_session_works() {
    let host = Host::start(Runtime::NetCore31, true);
    let c = client(&host);
    let stream = trace_for(&c, 2.0, true);
    assert!(stream.len() > 50_000, "{}", stream.len());
    trace_for(&c, 0.5, false);
}

#[test]
fn netcore31_dump_falls_back_to_generate_core_dump_1() {
    let host = Host::start(Runtime::NetCore31, false);
    let c = client(&host).with_timeout(Duration::from_secs(60));
    let path = temp_path("netcore31.dmp");
    let t = Instant::now();
    match c.write_dump(path.to_str().unwrap(), DumpType::Normal, 0) {
        Ok(()) => {
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            eprintln!("CASE: dump written ({} bytes) in {:?}", size, t.elapsed());
            assert!(size > 100_000, "dump of {} bytes", size);
        }
        Err(e) => {
            eprintln!("CASE: no dump here; the runtime answered: {}", e);
            match e {
                // 3.1 knows only GenerateCoreDump (v1), which answers a plain HRESULT.
                Error::ErrorReply { command, .. } => {
                    assert_eq!(command, Command::GenerateCoreDump)
                }
                other => panic!("{:?}", other),
            }
        }
    }
    remove(&path);
}

#[test]
fn a_session_dropped_without_stop_leaves_the_runtime_usable() {
    let host = Host::start(Runtime::Net8, true);
    let c = Arc::new(client(&host));
    {
        let mut s = c.collect_tracing(&runtime_provider(), 16, false).unwrap();
        let mut first = Vec::new();
        // Read until some data arrived, then drop the session (closing the connection).
        let err = s.drain(
            |d| {
                first.extend_from_slice(d);
                if first.len() > 8 {
                    Err(std::io::Error::new(std::io::ErrorKind::Other, "enough"))
                } else {
                    Ok(())
                }
            },
            |_| false,
        );
        assert!(matches!(err, Err(Error::Io(_))));
        assert!(first.starts_with(NETTRACE_MAGIC));
    }
    // A new session works, and ends cleanly.
    trace_for(&c, 0.5, false);
}
