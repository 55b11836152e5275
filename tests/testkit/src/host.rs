//! Real .NET runtimes for tests: `tests/runtime/host.py` (CoreCLR hosted by pythonnet, in
//! the venv made by `scripts/setup-runtimes.sh`) as a child process, killed on drop.

use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::thread;
use std::time::Duration;

/// Variables the host must not inherit from the test process: they change how the runtime
/// starts. Set them explicitly with [`HostOptions::env`].
const SCRUBBED: &[&str] = &[
    "DOTNET_DiagnosticPorts",
    "DOTNET_DefaultDiagnosticPortSuspend",
    "DOTNET_EnableDiagnostics",
    "COMPlus_DiagnosticPorts",
];

/// Why a hosted runtime could not be started or did not become ready.
#[derive(Debug)]
#[non_exhaustive]
pub enum HostError {
    /// `DSIPC_PYTHON` is not set.
    NotConfigured,
    /// Spawning the host failed.
    Spawn(io::Error),
    /// No READY line within the time given.
    Timeout {
        /// The time waited.
        waited: Duration,
    },
    /// The host exited (or closed its stdout) before printing READY.
    Exited {
        /// Its exit status, if it could be collected.
        status: Option<ExitStatus>,
    },
    /// The host printed something other than `READY pid=... runtime=...`.
    BadLine(String),
}

impl fmt::Display for HostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostError::NotConfigured => f.write_str(
                "DSIPC_PYTHON is not set: run scripts/setup-runtimes.sh, then \
                 `set -a; . target/dotnet-venv/dsipc-runtimes.env; set +a` \
                 (scripts/test.sh does both)",
            ),
            HostError::Spawn(e) => write!(f, "cannot start the runtime host: {}", e),
            HostError::Timeout { waited } => write!(
                f,
                "the runtime host did not print READY within {:.1} s",
                waited.as_secs_f64()
            ),
            HostError::Exited { status: Some(s) } => {
                write!(f, "the runtime host exited before READY ({})", s)
            }
            HostError::Exited { status: None } => {
                f.write_str("the runtime host closed its stdout before READY")
            }
            HostError::BadLine(l) => write!(f, "unexpected line from the runtime host: {:?}", l),
        }
    }
}

impl std::error::Error for HostError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HostError::Spawn(e) => Some(e),
            _ => None,
        }
    }
}

/// The venv interpreter from `DSIPC_PYTHON`; [`HostError::NotConfigured`] (whose message
/// says to run `scripts/setup-runtimes.sh`) when it is not set.
pub fn python() -> Result<PathBuf, HostError> {
    match std::env::var_os("DSIPC_PYTHON") {
        Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
        _ => Err(HostError::NotConfigured),
    }
}

/// `tests/runtime/host.py` of this repository.
pub fn host_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../runtime/host.py")
}

/// How to start a hosted runtime.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// `net8` or `netcore31`.
    pub runtime: String,
    /// The host exits by itself after this long (`--max-seconds`).
    pub max_seconds: u32,
    /// Environment variables for the host (they reach the runtime).
    pub env: Vec<(OsString, OsString)>,
    /// Extra host.py arguments (`--busy`, `--counters`).
    pub args: Vec<String>,
    /// Append the host's stderr (and the runtime's stdout) to this file; `None` discards it.
    pub log: Option<PathBuf>,
}

impl HostOptions {
    /// A .NET 8.0.4 host that exits after `max_seconds`.
    pub fn net8(max_seconds: u32) -> Self {
        HostOptions {
            runtime: "net8".to_string(),
            max_seconds,
            env: Vec::new(),
            args: Vec::new(),
            log: None,
        }
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: &str, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// `DOTNET_DiagnosticPorts={path},connect,suspend` (or `nosuspend`).
    pub fn reverse_port(self, path: &Path, suspend: bool) -> Self {
        let mut v = path.as_os_str().to_os_string();
        v.push(if suspend {
            ",connect,suspend"
        } else {
            ",connect,nosuspend"
        });
        self.env("DOTNET_DiagnosticPorts", v)
    }
}

/// The host's READY line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ready {
    /// The process id (the runtime's pid).
    pub pid: u32,
    /// `Environment.Version`, e.g. "8.0.4".
    pub runtime: String,
}

/// A running runtime host. Killed (and reaped) on drop; closing its stdin also ends it.
#[derive(Debug)]
pub struct HostedRuntime {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    ready: Option<Ready>,
}

impl HostedRuntime {
    /// Starts `$DSIPC_PYTHON tests/runtime/host.py --runtime ... --max-seconds ...`.
    /// Returns at once; the runtime loads in the background (about 1 s of CPU).
    pub fn spawn(options: &HostOptions) -> Result<HostedRuntime, HostError> {
        let mut cmd = Command::new(python()?);
        cmd.arg(host_script())
            .arg("--runtime")
            .arg(&options.runtime)
            .arg("--max-seconds")
            .arg(options.max_seconds.to_string())
            .args(&options.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        match &options.log {
            Some(path) => {
                let f = File::options()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(HostError::Spawn)?;
                cmd.stderr(f);
            }
            None => {
                cmd.stderr(Stdio::null());
            }
        }
        for k in SCRUBBED {
            cmd.env_remove(k);
        }
        for (k, v) in &options.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().map_err(HostError::Spawn)?;
        let stdin = child.stdin.take();
        let (tx, lines) = mpsc::channel();
        if let Some(out) = child.stdout.take() {
            let spawned = thread::Builder::new()
                .name("runtime-host-stdout".into())
                .spawn(move || {
                    for line in BufReader::new(out).lines() {
                        match line {
                            Ok(l) => {
                                if tx.send(l).is_err() {
                                    return;
                                }
                            }
                            Err(_) => return,
                        }
                    }
                });
            if let Err(e) = spawned {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HostError::Spawn(e));
            }
        }
        Ok(HostedRuntime {
            child,
            stdin,
            lines,
            ready: None,
        })
    }

    /// The host's process id (also the runtime's, as it runs in the same process).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `timeout` for the READY line (printed once the runtime load returned,
    /// which under `suspend` happens only after ResumeRuntime).
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<Ready, HostError> {
        if let Some(r) = &self.ready {
            return Ok(r.clone());
        }
        match self.lines.recv_timeout(timeout) {
            Ok(line) => self.parse(line),
            Err(RecvTimeoutError::Timeout) => Err(HostError::Timeout { waited: timeout }),
            Err(RecvTimeoutError::Disconnected) => Err(self.exited()),
        }
    }

    /// The READY line if it has been printed; never blocks.
    pub fn try_ready(&mut self) -> Result<Option<Ready>, HostError> {
        if let Some(r) = &self.ready {
            return Ok(Some(r.clone()));
        }
        match self.lines.try_recv() {
            Ok(line) => self.parse(line).map(Some),
            Err(TryRecvError::Empty) => Ok(None),
            Err(TryRecvError::Disconnected) => Err(self.exited()),
        }
    }

    /// True while the host process runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn exited(&mut self) -> HostError {
        // Stdout closed: the process is exiting; give it a moment to be reaped.
        for _ in 0..50 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return HostError::Exited {
                    status: Some(status),
                };
            }
            thread::sleep(Duration::from_millis(10));
        }
        HostError::Exited { status: None }
    }

    fn parse(&mut self, line: String) -> Result<Ready, HostError> {
        let mut pid = None;
        let mut runtime = None;
        let mut words = line.split_whitespace();
        if words.next() != Some("READY") {
            return Err(HostError::BadLine(line));
        }
        for w in words {
            if let Some(v) = w.strip_prefix("pid=") {
                pid = v.parse().ok();
            } else if let Some(v) = w.strip_prefix("runtime=") {
                runtime = Some(v.to_string());
            }
        }
        match (pid, runtime) {
            (Some(pid), Some(runtime)) => {
                let r = Ready { pid, runtime };
                self.ready = Some(r.clone());
                Ok(r)
            }
            _ => Err(HostError::BadLine(line)),
        }
    }

    /// Stops the host and reaps it: closing stdin lets it exit cleanly (the runtime then
    /// removes its own socket); a host still running after a short grace (a suspended
    /// runtime does not watch stdin) is killed, and the socket and debug pipes a killed
    /// runtime leaves in the temporary directory are removed.
    pub fn kill(&mut self) {
        self.stdin = None;
        let deadline = std::time::Instant::now() + Duration::from_millis(500);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid = self.child.id();
        let _ = self.child.kill();
        let _ = self.child.wait();
        let prefixes = [
            dsipc::transport::SocketName::prefix_for(pid).to_string(),
            format!("clr-debug-pipe-{}-", pid),
        ];
        if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
            for e in entries.flatten() {
                let name = e.file_name();
                let name = name.to_string_lossy();
                if prefixes.iter().any(|p| name.starts_with(p.as_str())) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
}

impl Drop for HostedRuntime {
    fn drop(&mut self) {
        self.kill();
    }
}
