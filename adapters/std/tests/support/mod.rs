//! Real .NET runtimes for interop tests: `tests/runtime/host.py` run by the venv python
//! that `scripts/setup-runtimes.sh` makes (CoreCLR hosted by pythonnet, with its real
//! native diagnostic server). Shared by the adapter's and the CLI's tests.
//!
//! Every wait is bounded; a host is killed (and its socket removed) when dropped, and it
//! also exits by itself when the test process dies (its stdin closes) or after
//! `--max-seconds`.
#![allow(dead_code)]

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a host may take to print READY.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// The two runtimes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    Net8,
    NetCore31,
}

impl Runtime {
    fn arg(self) -> &'static str {
        match self {
            Runtime::Net8 => "net8",
            Runtime::NetCore31 => "netcore31",
        }
    }
}

/// The repository root (the directory holding `tests/runtime/host.py`).
pub fn repo_root() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    loop {
        if dir.join("tests/runtime/host.py").is_file() {
            return dir;
        }
        if !dir.pop() {
            panic!(
                "tests/runtime/host.py not found above {}",
                env!("CARGO_MANIFEST_DIR")
            );
        }
    }
}

/// The venv python: `$DSIPC_PYTHON`, else the one named in
/// `target/dotnet-venv/dsipc-runtimes.env`. Fails (never skips) when there is none.
pub fn python() -> PathBuf {
    let root = repo_root();
    let from_env = std::env::var_os("DSIPC_PYTHON").map(PathBuf::from);
    let env_file = std::env::var_os("DSIPC_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/dotnet-venv"))
        .join("dsipc-runtimes.env");
    let from_file = fs::read_to_string(&env_file).ok().and_then(|text| {
        text.lines()
            .find_map(|l| l.strip_prefix("DSIPC_PYTHON="))
            .map(|p| PathBuf::from(p.trim()))
    });
    match from_env.or(from_file) {
        Some(p) if p.is_file() => p,
        other => panic!(
            "no venv python with the real .NET runtimes (DSIPC_PYTHON={:?}, {} unreadable or stale): \
             run scripts/setup-runtimes.sh first",
            other,
            env_file.display()
        ),
    }
}

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// A fresh path in the system temp dir (not created).
pub fn temp_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!(
        "dsipc-test-{}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst),
        tag
    ))
}

/// A running target process with a real runtime.
pub struct Host {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Its pid (also the pid the runtime reports).
    pub pid: u32,
    /// The runtime version it printed, such as `8.0.4`.
    pub version: String,
    /// Where its stderr (runtime and createdump output) goes.
    pub log: PathBuf,
}

impl Host {
    /// Starts a host and waits (bounded) for its READY line.
    pub fn start(runtime: Runtime, busy: bool) -> Host {
        let root = repo_root();
        let log = temp_path(&format!("host-{}.log", runtime.arg()));
        let log_file = fs::File::create(&log).expect("create host log");
        let mut cmd = Command::new(python());
        cmd.arg(root.join("tests/runtime/host.py"))
            .args(["--runtime", runtime.arg(), "--max-seconds", "300"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file));
        if busy {
            cmd.arg("--busy");
        }
        let t0 = Instant::now();
        let mut child = cmd.spawn().expect("spawn tests/runtime/host.py");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("host stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = match rx.recv_timeout(READY_TIMEOUT) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "host did not print READY within {:?}; log {}:\n{}",
                    READY_TIMEOUT,
                    log.display(),
                    fs::read_to_string(&log).unwrap_or_default()
                );
            }
        };
        let parse = |key: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(key))
                .map(str::to_string)
        };
        let pid = match parse("pid=").and_then(|p| p.parse().ok()) {
            Some(p) if line.starts_with("READY") => p,
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "host said {:?} instead of READY; log {}:\n{}",
                    line,
                    log.display(),
                    fs::read_to_string(&log).unwrap_or_default()
                );
            }
        };
        let version = parse("runtime=").unwrap_or_default();
        eprintln!(
            "host {} pid {} ready in {:.2} s",
            version,
            pid,
            t0.elapsed().as_secs_f64()
        );
        Host {
            child,
            stdin,
            pid,
            version,
            log,
        }
    }

    /// The host's executable, as `/proc/PID/exe` resolves it.
    pub fn exe(&self) -> PathBuf {
        fs::read_link(format!("/proc/{}/exe", self.pid)).expect("readlink /proc/PID/exe")
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

impl Drop for Host {
    fn drop(&mut self) {
        stop_host(
            &mut self.child,
            self.stdin.take(),
            self.pid,
            &self.log,
            Duration::from_secs(5),
        );
    }
}

/// Stops a host: closing stdin makes it exit cleanly (removing its socket); kill it if it
/// lingers past `grace`; remove the socket and debug pipes a killed host leaves behind, and
/// its log unless the test is failing.
pub fn stop_host(
    child: &mut std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    pid: u32,
    log: &Path,
    grace: Duration,
) {
    drop(stdin);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Ok(None) = child.try_wait() {
        let _ = child.kill();
        let _ = child.wait();
    }
    if let Ok(entries) = fs::read_dir("/tmp") {
        let prefixes = [
            format!("dotnet-diagnostic-{}-", pid),
            format!("clr-debug-pipe-{}-", pid),
        ];
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if prefixes.iter().any(|p| name.starts_with(p.as_str())) {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    if !std::thread::panicking() {
        let _ = fs::remove_file(log);
    }
}

/// Waits (bounded) until `cond` holds.
pub fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !cond() {
        if Instant::now() > deadline {
            panic!("timed out after {:?} waiting for {}", timeout, what);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Removes a file if it exists.
pub fn remove(path: &Path) {
    let _ = fs::remove_file(path);
}
