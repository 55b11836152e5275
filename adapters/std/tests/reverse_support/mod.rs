//! A real .NET 8 runtime host started with environment variables of the test's choosing
//! (`DOTNET_DiagnosticPorts=PATH,connect,suspend`), which may therefore stay suspended:
//! unlike `support::Host::start`, starting does not wait for READY. Shared by the adapter's
//! and the CLI's reverse-port tests; needs the crate root to declare `mod support;`.
#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::support::{python, repo_root, stop_host, temp_path};

/// Variables the host must not inherit from the test process: they change how it starts.
const SCRUBBED: &[&str] = &[
    "DOTNET_DiagnosticPorts",
    "DOTNET_DefaultDiagnosticPortSuspend",
    "DOTNET_EnableDiagnostics",
    "COMPlus_DiagnosticPorts",
];

/// A host process running `tests/runtime/host.py --runtime net8`.
pub struct SpawnedHost {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Its pid (the runtime runs in this process, so also the runtime's pid).
    pub pid: u32,
    /// Its stderr (the runtime's "paused during startup" notice goes there).
    pub log: PathBuf,
}

impl SpawnedHost {
    /// Starts a host with `env` added to its environment. Panics (never skips) when the
    /// venv made by `scripts/setup-runtimes.sh` is missing.
    pub fn start(env: &[(&str, &str)]) -> SpawnedHost {
        let log = temp_path("rev-host.log");
        let log_file = fs::File::create(&log).expect("create the host log");
        let mut cmd = Command::new(python());
        cmd.arg(repo_root().join("tests/runtime/host.py"))
            .args(["--runtime", "net8", "--max-seconds", "180"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file));
        for name in SCRUBBED {
            cmd.env_remove(name);
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn tests/runtime/host.py");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("host stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(l).is_err() {
                            break;
                        }
                    }
                    Err(_) => break,
                }
            }
        });
        let pid = child.id();
        SpawnedHost {
            child,
            stdin,
            lines,
            pid,
            log,
        }
    }

    /// Waits up to `timeout` for the READY line; returns the pid it names, or `None` when
    /// the host said nothing in time. Panics if the host exited or said something else.
    pub fn ready_within(&mut self, timeout: Duration) -> Option<u32> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => {
                let pid = line
                    .strip_prefix("READY ")
                    .and_then(|rest| rest.split_whitespace().find_map(|w| w.strip_prefix("pid=")))
                    .and_then(|p| p.parse().ok());
                match pid {
                    Some(p) => Some(p),
                    None => panic!("host said {:?}; log:\n{}", line, self.log_text()),
                }
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => panic!(
                "host exited ({:?}) without READY; log:\n{}",
                self.child.try_wait(),
                self.log_text()
            ),
        }
    }

    /// Asserts that no READY comes for `d` (the runtime stays suspended).
    pub fn assert_still_suspended(&mut self, d: Duration) {
        let t = Instant::now();
        if let Some(pid) = self.ready_within(d) {
            panic!(
                "host {} got READY after {:.2} s although nobody resumed it",
                pid,
                t.elapsed().as_secs_f64()
            );
        }
        assert!(self.alive(), "host died; log:\n{}", self.log_text());
    }

    /// True while the process runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The host's stderr so far.
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for SpawnedHost {
    fn drop(&mut self) {
        // A suspended runtime may not get to its stdin watcher: a shorter grace, then kill.
        let stdin = self.stdin.take();
        stop_host(
            &mut self.child,
            stdin,
            self.pid,
            &self.log,
            Duration::from_secs(3),
        );
    }
}
