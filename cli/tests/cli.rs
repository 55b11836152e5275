//! The `dsipc` binary end to end, against real runtimes (see adapters/std/tests/interop.rs;
//! needs `scripts/setup-runtimes.sh`, and fails without it). Every run is bounded.
#![cfg(target_os = "linux")]

mod common;
#[path = "../../adapters/std/tests/support/mod.rs"]
mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::dsipc_limit;
use support::{remove, temp_path, Host, Runtime};

const LIMIT: Duration = Duration::from_secs(30);

#[test]
fn ps_lists_the_host_with_its_command_line_and_socket() {
    let host = Host::start(Runtime::Net8, false);
    let r = dsipc_limit(&["ps", "--verbose"], LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let pid = host.pid.to_string();
    let line = r
        .stdout
        .lines()
        .find(|l| l.split_whitespace().next() == Some(pid.as_str()))
        .unwrap_or_else(|| panic!("pid {} not listed:\n{}", pid, r.stdout));
    // The whole command line (ProcessInfo's names only the program).
    assert!(line.contains("runtime/host.py --runtime net8"), "{}", line);
    assert!(
        line.contains(&format!("/tmp/dotnet-diagnostic-{}-", host.pid)),
        "{}",
        line
    );
}

#[test]
fn info_json_has_the_pid_and_text_info_the_version() {
    let host = Host::start(Runtime::Net8, false);
    let pid = host.pid.to_string();
    let r = dsipc_limit(&["info", &pid, "--json"], LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let json = r.stdout.trim();
    assert!(json.starts_with('{') && json.ends_with('}'), "{}", json);
    assert!(json.contains(&format!("\"pid\":{},", host.pid)), "{}", json);
    assert!(json.contains("\"clr_version\":\"8.0.4\""), "{}", json);
    assert!(
        json.contains("\"runtime_identifier\":\"linux-x64\""),
        "{}",
        json
    );
    let r = dsipc_limit(&["info", &pid, "--timeout", "5"], LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stdout.contains("clr version:         8.0.4"),
        "{}",
        r.stdout
    );
}

#[test]
fn trace_for_two_seconds_writes_a_nettrace_file() {
    let host = Host::start(Runtime::Net8, true);
    let out = temp_path("cli.nettrace");
    let pid = host.pid.to_string();
    let r = dsipc_limit(
        &[
            "trace",
            &pid,
            "--duration",
            "2",
            "-o",
            out.to_str().unwrap(),
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.took >= Duration::from_secs(2), "{:?}", r.took);
    let bytes = std::fs::read(&out).unwrap();
    assert!(
        bytes.starts_with(b"Nettrace"),
        "{:?}",
        &bytes[..bytes.len().min(16)]
    );
    assert!(bytes.ends_with(&[0x06, 0x01]));
    assert!(
        r.stderr
            .contains(&format!("dsipc: wrote {} bytes", bytes.len())),
        "{}",
        r.stdout
    );
    // Default providers: dotnet-trace's cpu-sampling profile.
    assert!(
        r.stderr.contains("Microsoft-DotNETCore-SampleProfiler"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains("0x00000014C14FCCBD"), "{}", r.stderr);
    remove(&out);
}

#[test]
fn trace_stops_on_sigint_and_drains_to_the_end() {
    let host = Host::start(Runtime::Net8, true);
    let out = temp_path("sigint.nettrace");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dsipc"))
        .args([
            "trace",
            &host.pid.to_string(),
            "--providers",
            "Microsoft-Windows-DotNETRuntime:0x8001:4",
            "-o",
            out.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Synchronise on dsipc's own line: the session runs once it says "tracing pid".
    let (tx, rx) = std::sync::mpsc::channel();
    let err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if line.contains("dsipc: tracing pid") {
                let _ = tx.send(());
            }
            all.push_str(&line);
            all.push('\n');
        }
        all
    });
    if rx.recv_timeout(LIMIT).is_err() {
        let _ = child.kill();
        panic!("dsipc trace never said it was tracing");
    }
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let t = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > LIMIT {
            let _ = child.kill();
            panic!("dsipc trace did not stop after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stderr = reader.join().unwrap();
    eprintln!(
        "stopped {:?} after SIGINT: {:?}\n{}",
        t.elapsed(),
        status,
        stderr
    );
    assert!(status.success(), "{:?}", status);
    let bytes = std::fs::read(&out).unwrap();
    assert!(bytes.starts_with(b"Nettrace"));
    assert!(bytes.ends_with(&[0x06, 0x01]), "not drained to the end");
    remove(&out);
}

#[test]
fn setenv_then_env_then_unset() {
    let host = Host::start(Runtime::Net8, false);
    let pid = host.pid.to_string();
    let r = dsipc_limit(&["setenv", &pid, "DSIPC_CLI_VAR", "a b=c"], LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let r = dsipc_limit(&["env", &pid], LIMIT);
    assert!(
        r.stdout.lines().any(|l| l == "DSIPC_CLI_VAR=a b=c"),
        "{}",
        r.stdout
    );
    let r = dsipc_limit(&["setenv", &pid, "DSIPC_CLI_VAR", "--unset"], LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let r = dsipc_limit(&["env", &pid], LIMIT);
    assert_eq!(r.code, Some(0));
    assert!(!r.stdout.contains("DSIPC_CLI_VAR"), "{}", r.stdout);
}

#[test]
fn perfmap_and_resume_and_errors_from_the_runtime() {
    let host = Host::start(Runtime::Net8, false);
    let pid = host.pid.to_string();
    let map = std::path::PathBuf::from(format!("/tmp/perf-{}.map", host.pid));
    let r = dsipc_limit(&["perfmap", &pid, "enable", "--type", "perfmap"], LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    support::wait_until("perf map", Duration::from_secs(10), || map.exists());
    assert_eq!(
        dsipc_limit(&["perfmap", &pid, "disable"], LIMIT).code,
        Some(0)
    );
    remove(&map);
    remove(&std::path::PathBuf::from(format!(
        "/tmp/perfinfo-{}.map",
        host.pid
    )));
    assert_eq!(dsipc_limit(&["resume", &pid], LIMIT).code, Some(0));
    // The runtime's error reply, on one line, naming the HRESULT and its meaning.
    let r = dsipc_limit(&["startup-hook", &pid, "/nonexistent/hook.dll"], LIMIT);
    assert_eq!(r.code, Some(1));
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(
        r.stderr.contains("0x80070057 (E_INVALIDARG"),
        "{}",
        r.stderr
    );
    let r = dsipc_limit(
        &[
            "attach-profiler",
            &pid,
            "--clsid",
            "12345678-1234-5678-9abc-def012345678",
            "--path",
            "/nonexistent/profiler.so",
            "--data",
            "0a0b",
        ],
        LIMIT,
    );
    assert_eq!(r.code, Some(1));
    assert!(r.stderr.contains("0x8007007E"), "{}", r.stderr);
}

#[test]
fn dump_writes_a_file_or_reports_the_runtime_error() {
    let host = Host::start(Runtime::Net8, false);
    let out = temp_path("cli.dmp");
    let r = dsipc_limit(
        &[
            "dump",
            &host.pid.to_string(),
            "-o",
            out.to_str().unwrap(),
            "--type",
            "triage",
        ],
        Duration::from_secs(120),
    );
    if r.code == Some(0) {
        let size = std::fs::metadata(&out).unwrap().len();
        eprintln!("CASE: dump written ({} bytes)", size);
        assert!(size > 0);
    } else {
        eprintln!("CASE: no dump here: {}", r.stderr);
        assert_eq!(r.code, Some(1));
        assert!(r.stderr.contains("GenerateCoreDump"), "{}", r.stderr);
    }
    remove(&out);
}

/// The runtime replaces any file at the dump path: an existing one survives without
/// `--force` (the runtime is never asked), as `%p` expanded names it too.
#[test]
fn dump_refuses_an_existing_file_without_force() {
    let host = Host::start(Runtime::Net8, false);
    let pid = host.pid.to_string();
    let dir = temp_path("dump-exists");
    std::fs::create_dir_all(&dir).unwrap();
    let kept = dir.join(format!("core.{}", pid));
    std::fs::write(&kept, b"keep me").unwrap();
    for out in [kept.clone(), dir.join("core.%p")] {
        let r = dsipc_limit(
            &[
                "dump",
                &pid,
                "-o",
                out.to_str().unwrap(),
                "--type",
                "triage",
            ],
            LIMIT,
        );
        assert_eq!(r.code, Some(1), "{}", r.stderr);
        assert!(
            r.stderr
                .contains("exists; not replacing it (--force replaces it)"),
            "{}",
            r.stderr
        );
        assert_eq!(std::fs::read(&kept).unwrap(), b"keep me");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn netcore31_info_fails_with_one_line_naming_the_hresult() {
    let host = Host::start(Runtime::NetCore31, false);
    let r = dsipc_limit(&["info", &host.pid.to_string()], LIMIT);
    assert_eq!(r.code, Some(1));
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("0x80131385"), "{}", r.stderr);
    assert!(
        r.stderr.contains("CORDIAGIPC_E_UNKNOWN_COMMAND"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains(".NET 5"), "{}", r.stderr);
    // ps still lists it, with its whole command line from /proc, last: the columns stay
    // aligned; the socket only with --verbose.
    let pid = host.pid.to_string();
    for verbose in [false, true] {
        let args: &[&str] = if verbose { &["ps", "-v"] } else { &["ps"] };
        let r = dsipc_limit(args, LIMIT);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        let line = r
            .stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(pid.as_str()))
            .unwrap_or_else(|| panic!("pid {} not listed:\n{}", pid, r.stdout));
        let header = r.stdout.lines().next().unwrap();
        let command_at = header.find("COMMAND").unwrap();
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", pid)).unwrap();
        let first =
            String::from_utf8_lossy(cmdline.split(|&b| b == 0).next().unwrap()).into_owned();
        assert!(
            line[command_at..].starts_with(&first),
            "{}\n{}",
            header,
            line
        );
        assert!(header.starts_with("PID      NAME"), "{}", header);
        assert_eq!(header.contains("SOCKET"), verbose, "{}", header);
        assert_eq!(line.contains("dotnet-diagnostic-"), verbose, "{}", line);
    }
}

#[test]
fn each_command_has_its_own_help_and_unknown_ones_are_usage_errors() {
    for (command, words) in [
        ("trace", "usage: dsipc trace PID [-o FILE]"),
        ("counters", "usage: dsipc counters monitor PID"),
        ("convert", "--max-stack-frames"),
        ("ps", "16 at a time"),
    ] {
        let r = dsipc_limit(&[command, "--help"], LIMIT);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        assert!(r.stdout.contains(words), "{}: {}", command, r.stdout);
        assert!(
            !r.stdout.contains("commands:"),
            "{}: the global list",
            command
        );
        // The shared options in a few lines, not the global text again.
        assert!(r.stdout.contains("see dsipc --help"), "{}", r.stdout);
        assert!(!r.stdout.contains("Exit status:"), "{}", r.stdout);
    }
    let r = dsipc_limit(&["help", "report"], LIMIT);
    assert!(
        r.stdout.contains("usage: dsipc report FILE"),
        "{}",
        r.stdout
    );
    // serve has its own help; a command that does not exist is a usage error.
    for args in [&["serve", "--help"][..], &["help", "serve"]] {
        let r = dsipc_limit(args, LIMIT);
        assert_eq!(r.code, Some(0), "{:?}: {}", args, r.stderr);
        assert!(r.stdout.contains("usage: dsipc serve"), "{}", r.stdout);
        assert!(!r.stdout.contains("commands:"), "{}", r.stdout);
    }
    for args in [&["nosuch", "--help"][..], &["help", "nosuch"]] {
        let r = dsipc_limit(args, LIMIT);
        assert_eq!(r.code, Some(2), "{:?}", args);
        assert!(r.stdout.is_empty());
        assert!(
            r.stderr.contains("unknown command \"nosuch\""),
            "{}",
            r.stderr
        );
    }
    let r = dsipc_limit(&["--help"], LIMIT);
    assert!(r.stdout.contains("commands:"), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("counters monitor PID | collect PID | export PID..."),
        "{}",
        r.stdout
    );
}

#[test]
fn usage_errors_and_missing_processes() {
    let r = dsipc_limit(&["info"], LIMIT);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    let r = dsipc_limit(&["frobnicate"], LIMIT);
    assert_eq!(r.code, Some(2));
    let r = dsipc_limit(
        &["trace", "1", "--providers", "X:zz", "-o", "/dev/null"],
        LIMIT,
    );
    assert_eq!(r.code, Some(2));
    let r = dsipc_limit(&["info", "4194303"], LIMIT);
    assert_eq!(r.code, Some(1));
    assert!(r.stderr.contains("no process"), "{}", r.stderr);
    let r = dsipc_limit(&["--help"], LIMIT);
    assert_eq!(r.code, Some(0));
    assert!(r.stdout.contains("usage: dsipc"));
    // --tmpdir limits the search; a directory that cannot be read is named.
    let me = std::process::id().to_string();
    let r = dsipc_limit(&["info", &me, "--tmpdir", "/nonexistent"], LIMIT);
    assert_eq!(r.code, Some(1));
    assert!(
        r.stderr.contains("cannot read directory /nonexistent"),
        "{}",
        r.stderr
    );
    let r = dsipc_limit(&["info", &me, "--tmpdir", "/tmp"], LIMIT);
    assert_eq!(r.code, Some(1));
    assert!(r.stderr.contains("no diagnostic socket"), "{}", r.stderr);
}
