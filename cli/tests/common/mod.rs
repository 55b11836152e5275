//! What the CLI's end-to-end tests share: running `dsipc` (or any program) bounded by a
//! limit, fresh temporary directories, the public sample traces, and the real runtimes'
//! configuration. Each test file uses a part of it.
#![allow(dead_code)]

mod captures;
pub mod flame;
mod live;
mod prometheus;
pub mod serve;

// Each test file uses a part of these (as of the rest of this module, hence the allows).
#[allow(unused_imports)]
pub use captures::{counters_capture_renaming_cpu_usage, nettrace_stream};
#[allow(unused_imports)]
pub use live::Live;
#[allow(unused_imports)]
pub use prometheus::{
    free_port, http_get, prometheus_bin, promtool_check, Prometheus, DOTNET_MONITOR_LINTS,
};

use std::ffi::OsString;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// How long one command may run in these tests: only a hang gets near it.
pub const LIMIT: Duration = Duration::from_secs(60);

/// What a run of a program gave.
pub struct Run {
    /// The command line, for messages.
    pub what: String,
    /// Exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    /// Standard output, lossily decoded.
    pub stdout: String,
    /// Standard output as written.
    pub stdout_bytes: Vec<u8>,
    /// Standard error, lossily decoded.
    pub stderr: String,
    /// Wall time of the run.
    pub took: Duration,
    /// Peak resident memory, KiB (0 if not seen).
    pub hwm_kib: u64,
}

impl Run {
    /// No panic, no backtrace.
    pub fn assert_no_panic(&self) {
        assert_ne!(self.code, Some(101), "panicked: {}", self.stderr);
        assert!(!self.stderr.contains("panicked"), "{}", self.stderr);
    }

    /// Exit `code`, with each of `needles` in stderr.
    pub fn assert_exit(&self, code: i32, needles: &[&str]) {
        assert_eq!(self.code, Some(code), "{}: {}", self.what, self.stderr);
        for n in needles {
            assert!(
                self.stderr.contains(n),
                "{}: {:?} not in {}",
                self.what,
                n,
                self.stderr
            );
        }
    }

    /// Exit 2 with one "dsipc: ... (see dsipc [COMMAND] --help)" line containing `needle`.
    pub fn assert_usage(&self, needle: &str) {
        self.assert_no_panic();
        assert_eq!(self.code, Some(2), "{}", self.stderr);
        assert_eq!(self.stderr.lines().count(), 1, "{}", self.stderr);
        assert!(self.stderr.starts_with("dsipc: "), "{}", self.stderr);
        assert!(
            self.stderr.contains(needle),
            "{:?} in {}",
            needle,
            self.stderr
        );
    }
}

/// The binary under test: `$DSIPC_BIN` (to run a set against another build, such as the
/// code before issue 9), else the one cargo built.
pub fn bin() -> PathBuf {
    std::env::var_os("DSIPC_BIN")
        .filter(|b| !b.is_empty())
        .map(Into::into)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_dsipc").into())
}

/// `args` as `OsString`s.
pub fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

/// Peak resident memory of a running process, KiB (0 once it is gone).
pub fn vm_hwm_kib(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{}/status", pid))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

/// Waits for `child`, killing it past `limit` (then the test fails naming `what`); also
/// returns the peak resident memory seen while it ran.
pub fn wait_bounded(child: &mut Child, what: &str, limit: Duration) -> (ExitStatus, u64) {
    let t = Instant::now();
    let mut hwm = 0;
    loop {
        hwm = hwm.max(vm_hwm_kib(child.id()));
        if let Some(s) = child.try_wait().unwrap() {
            return (s, hwm);
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} ran longer than {:?}", what, limit);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Runs `program ARGS` with `stdout` (piped when `None`), killed past `limit`; the run is
/// logged to the test's stderr.
pub fn run_program(
    program: &Path,
    args: &[OsString],
    stdout: Option<Stdio>,
    limit: Duration,
) -> Run {
    let t = Instant::now();
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout.unwrap_or_else(Stdio::piped))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {}", program.display(), e));
    let out_t = child.stdout.take().map(|mut out| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = out.read_to_end(&mut v);
            v
        })
    });
    let mut err = child.stderr.take().unwrap();
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        String::from_utf8_lossy(&v).into_owned()
    });
    let what = format!("{} {:?}", program.display(), args);
    let (status, hwm_kib) = wait_bounded(&mut child, &what, limit);
    let stdout_bytes = out_t.map(|t| t.join().unwrap()).unwrap_or_default();
    let run = Run {
        what: what.clone(),
        code: status.code(),
        stdout: String::from_utf8_lossy(&stdout_bytes).into_owned(),
        stdout_bytes,
        stderr: err_t.join().unwrap(),
        took: t.elapsed(),
        hwm_kib,
    };
    eprintln!(
        "$ {} -> {:?} in {:.2} s, {} KiB\n{}{}",
        what,
        run.code,
        run.took.as_secs_f64(),
        run.hwm_kib,
        &run.stdout.chars().take(2000).collect::<String>(),
        run.stderr
    );
    run
}

/// Runs `dsipc ARGS` (stdout piped), killed past [`LIMIT`].
pub fn dsipc(args: &[&str]) -> Run {
    dsipc_os(&os(args))
}

/// Runs `dsipc ARGS` (stdout piped), killed past `limit`.
pub fn dsipc_limit(args: &[&str], limit: Duration) -> Run {
    run_program(&bin(), &os(args), None, limit)
}

/// Runs `dsipc ARGS` with arguments that need not be UTF-8, killed past [`LIMIT`].
pub fn dsipc_os(args: &[OsString]) -> Run {
    run_program(&bin(), args, None, LIMIT)
}

/// Runs `dsipc ARGS --tmpdir DIR` (stdout piped), killed past [`LIMIT`].
pub fn dsipc_in(dir: &Path, args: &[&str]) -> Run {
    let mut v = os(args);
    v.extend(os(&["--tmpdir", s(dir)]));
    dsipc_os(&v)
}

/// Runs `dsipc trace <this pid> -o OUT EXTRA --tmpdir DIR` (a fake runtime's directory).
pub fn trace_in(dir: &Path, out: &Path, extra: &[&str]) -> Run {
    let pid = me();
    let mut args = vec!["trace", pid.as_str(), "-o", s(out)];
    args.extend_from_slice(extra);
    dsipc_in(dir, &args)
}

/// A fake runtime (dsipc-testkit) configured by `config`, listening in `dir`.
pub fn fake(
    dir: &dsipc_testkit::TempDir,
    config: dsipc_testkit::Config,
) -> dsipc_testkit::FakeRuntime {
    config.listen_in(dir.path()).start().expect("fake runtime")
}

/// This test process's pid, as text (a pid no runtime listens for).
pub fn me() -> String {
    std::process::id().to_string()
}

/// `p` as UTF-8 text.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The names in `dir`, sorted.
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// A fresh, empty directory under the system's temporary directory, named after the test
/// process, a sequence number and `tag`.
pub fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "dsipc-cli-test-{}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::SeqCst),
        tag
    ));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

/// The repository's root.
pub fn repo_root() -> PathBuf {
    dsipc_testkit::samples::repo_root()
}

/// The public sample trace `name`, unzipped into target/nettrace-samples (never committed).
pub fn sample(name: &str) -> Option<PathBuf> {
    dsipc_testkit::samples::sample(name)
}

/// `DSIPC_PYTHON` (and the runtime roots) for the testkit's host launcher: from the
/// environment, else from `target/dotnet-venv/dsipc-runtimes.env` (written by
/// scripts/setup-runtimes.sh).
pub fn configure_python() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("DSIPC_PYTHON").map_or(false, |p| !p.is_empty()) {
            return;
        }
        let env_file = repo_root().join("target/dotnet-venv/dsipc-runtimes.env");
        let text = fs::read_to_string(&env_file).unwrap_or_else(|e| {
            panic!(
                "no DSIPC_PYTHON and {} unreadable ({}): run scripts/setup-runtimes.sh",
                env_file.display(),
                e
            )
        });
        for line in text.lines() {
            if let Some((k, v)) = line.split_once('=') {
                if k.starts_with("DSIPC_") && std::env::var_os(k).is_none() {
                    std::env::set_var(k, v.trim().trim_matches('"'));
                }
            }
        }
    });
}

/// Runs `program ARGS` (stdout piped), killed past `limit`.
pub fn run(program: &str, args: &[&str], limit: Duration) -> Run {
    run_program(Path::new(program), &os(args), None, limit)
}

/// A real runtime (`runtime`: `net8` or `netcore31`) hosted busy in Regex backtracking
/// (`host.py --regex`), ready; killed when dropped after `lifetime_secs` at most.
pub fn regex_host(runtime: &str, lifetime_secs: u32) -> (dsipc_testkit::HostedRuntime, u32) {
    configure_python();
    let mut opts = dsipc_testkit::HostOptions::net8(lifetime_secs);
    opts.runtime = runtime.to_string();
    opts.args.push("--regex".into());
    let mut host = dsipc_testkit::HostedRuntime::spawn(&opts).expect("spawn host");
    let ready = host
        .wait_ready(Duration::from_secs(90))
        .expect("host READY");
    (host, ready.pid)
}
