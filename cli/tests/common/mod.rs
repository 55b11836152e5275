//! What the CLI's end-to-end tests share: running `dsipc` (or any program) bounded by a
//! limit, fresh temporary directories, the public sample traces, and the real runtimes'
//! configuration. Each test file uses a part of it.
#![allow(dead_code)]

pub mod flame;
pub mod serve;

use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver};
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

/// A long-running child (`dsipc`, or `script` running it) whose stdout (as it comes, for
/// pseudo-terminal output too) and stderr lines arrive on channels, so tests synchronise
/// on what it prints; killed when dropped.
pub struct Live {
    /// The child.
    pub child: Child,
    what: String,
    started: Instant,
    out: Receiver<Vec<u8>>,
    err: Receiver<String>,
    stdout: Vec<u8>,
    /// Bytes of `stdout` already handed out by [`Live::line`].
    taken: usize,
    stderr: Vec<String>,
}

/// Sends what `read` yields (lines when `lines`, else chunks) on a channel, until EOF.
fn forward<R: Read + Send + 'static, T: Send + 'static>(
    read: R,
    wrap: fn(Vec<u8>) -> T,
    lines: bool,
) -> Receiver<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(read);
        loop {
            let mut v = Vec::new();
            let n = if lines {
                r.read_until(b'\n', &mut v)
            } else {
                r.fill_buf().map(|b| {
                    v.extend_from_slice(b);
                    b.len()
                })
            };
            match n {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if !lines {
                        r.consume(n);
                    } else if v.last() == Some(&b'\n') {
                        v.pop();
                    }
                    if tx.send(wrap(v)).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

impl Live {
    /// `dsipc ARGS`.
    pub fn dsipc(args: &[&str]) -> Live {
        let mut cmd = Command::new(bin());
        cmd.args(args);
        Live::spawn(cmd)
    }

    /// Any command, stdin null, stdout and stderr piped.
    pub fn spawn(mut cmd: Command) -> Live {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {:?}: {}", cmd, e));
        let what = format!("{:?}", cmd);
        let out = forward(child.stdout.take().unwrap(), |v| v, false);
        let err = forward(
            child.stderr.take().unwrap(),
            |v| String::from_utf8_lossy(&v).into_owned(),
            true,
        );
        Live {
            child,
            what,
            started: Instant::now(),
            out,
            err,
            stdout: Vec::new(),
            taken: 0,
            stderr: Vec::new(),
        }
    }

    /// Waits (bounded) for more stdout; false once stdout is closed.
    fn more(&mut self, deadline: Instant, what: &str) -> bool {
        let left = deadline.saturating_duration_since(Instant::now());
        match self.out.recv_timeout(left) {
            Ok(c) => {
                self.stdout.extend_from_slice(&c);
                true
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => false,
            Err(e) => panic!(
                "no {} ({:?}); stdout so far:\n{}\nstderr so far:\n{}",
                what,
                e,
                String::from_utf8_lossy(&self.stdout),
                self.stderr.join("\n")
            ),
        }
    }

    /// Waits (bounded) until stdout so far contains `needle`; returns stdout so far.
    pub fn wait_stdout(&mut self, needle: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let text = String::from_utf8_lossy(&self.stdout).into_owned();
            if text.contains(needle) {
                return text;
            }
            let what = format!("{:?} within {:?}", needle, limit);
            assert!(self.more(deadline, &what), "stdout closed: no {}", what);
        }
    }

    /// The next stdout line (bounded wait).
    pub fn line(&mut self, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(i) = self.stdout[self.taken..].iter().position(|&b| b == b'\n') {
                let l = &self.stdout[self.taken..self.taken + i];
                let l = String::from_utf8_lossy(l).into_owned();
                self.taken += i + 1;
                eprintln!("stdout: {}", l);
                return l;
            }
            let what = format!("stdout line within {:?}", limit);
            assert!(self.more(deadline, &what), "stdout closed: no {}", what);
        }
    }

    /// The stderr lines read so far (by [`Live::stderr_line`]).
    pub fn stderr_lines(&self) -> &[String] {
        &self.stderr
    }

    /// Waits (bounded) for a stderr line containing `needle`; returns it.
    pub fn stderr_line(&mut self, needle: &str, limit: Duration) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.err.recv_timeout(left) {
                Ok(l) => {
                    eprintln!("stderr: {}", l);
                    self.stderr.push(l.clone());
                    if l.contains(needle) {
                        return l;
                    }
                }
                Err(e) => panic!(
                    "no stderr line with {:?} within {:?} ({:?}); got {:?}",
                    needle, limit, e, self.stderr
                ),
            }
        }
    }

    /// Sends `sig` to the child.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child, not reaped yet.
        assert_eq!(
            unsafe { libc::kill(self.child.id() as libc::pid_t, sig) },
            0
        );
    }

    /// Waits (bounded by `limit`: past it the test fails) for the exit; all of stdout and
    /// stderr.
    pub fn wait(&mut self, limit: Duration) -> Run {
        let (status, hwm_kib) = wait_bounded(&mut self.child, &self.what, limit);
        while let Ok(c) = self.out.recv_timeout(Duration::from_secs(5)) {
            self.stdout.extend_from_slice(&c);
        }
        while let Ok(l) = self.err.recv_timeout(Duration::from_secs(5)) {
            self.stderr.push(l);
        }
        let run = Run {
            what: self.what.clone(),
            code: status.code(),
            stdout: String::from_utf8_lossy(&self.stdout).into_owned(),
            stdout_bytes: std::mem::take(&mut self.stdout),
            stderr: self.stderr.join("\n"),
            took: self.started.elapsed(),
            hwm_kib,
        };
        eprintln!(
            "exit {:?}\n{}\n{}",
            run.code,
            &run.stdout.chars().take(4000).collect::<String>(),
            run.stderr
        );
        run
    }

    /// Ctrl-C, then [`Live::wait`].
    pub fn interrupt(&mut self, limit: Duration) -> Run {
        self.signal(libc::SIGINT);
        self.wait(limit)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// promtool's lint messages for what dotnet-monitor's names are (gauges such as
/// `systemruntime_exception_count`, units such as `mymeter_latency_ms`): the names dashboards
/// made for dotnet-monitor query, so they are kept; promtool's other findings fail.
pub const DOTNET_MONITOR_LINTS: &[&str] = &[
    "non-histogram and non-summary metrics should not have \"_count\" suffix",
    "metric names should not contain abbreviated units",
];

/// `promtool check metrics`: the exposition parses (exit 1 and `error while linting`
/// otherwise) and lints clean but for [`DOTNET_MONITOR_LINTS`]. Debian 12's promtool (2.42)
/// has no `--lint=none` and exits 3 on lint findings; later ones print them and exit 0.
pub fn promtool_check(exposition: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (apt-get install prometheus)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let only_known_lints = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .all(|l| DOTNET_MONITOR_LINTS.iter().any(|m| l.ends_with(m)));
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)) && only_known_lints,
        "promtool ({:?}): {}\n{}",
        out.status,
        text,
        exposition
    );
}

/// About `target` bytes of valid nettrace built from the committed .NET 8 capture
/// (`tests/data/nettrace/net8.0.4-busy.nettrace`): its header and metadata once, then its
/// event, stack and sequence-point blocks again and again, re-framed (the benchmarks'
/// stream).
pub fn nettrace_stream(target: usize) -> Vec<u8> {
    use dsipc::nettrace::{Item, NettraceParser, Status};
    let path = repo_root().join("tests/data/nettrace/net8.0.4-busy.nettrace");
    let src = std::fs::read(&path).unwrap();
    // (name, version, content) of every block, and where the first block starts.
    let mut blocks: Vec<(Vec<u8>, i32, std::ops::Range<usize>)> = Vec::new();
    let mut first_block = None;
    let mut p = NettraceParser::new();
    let mut at = 0;
    loop {
        let h = p.handle_input(&src[at..]).unwrap();
        match h.status {
            Status::Event(Item::Block(b)) => {
                first_block.get_or_insert(b.offset as usize);
                let start = b.content_offset as usize;
                blocks.push((b.name.to_vec(), b.version, start..start + b.size as usize));
            }
            Status::Event(_) => {}
            Status::Done => break,
            Status::Partial { .. } => panic!("the capture is cut short"),
        }
        at += h.consumed;
    }
    // The header and trace object as recorded; then the blocks, re-framed.
    let mut out = src[..first_block.unwrap()].to_vec();
    let mut first = true;
    while out.len() < target {
        for (name, version, range) in &blocks {
            if !first && name.as_slice() == b"MetadataBlock" {
                continue;
            }
            nettrace_block(&mut out, name, *version, &src[range.clone()]);
        }
        first = false;
    }
    out.push(0x01); // end of stream
    out
}

/// A V4/V5 block object: its type header, size, padding to 4 from the stream's start, the
/// content and the end tag.
fn nettrace_block(out: &mut Vec<u8>, name: &[u8], version: i32, content: &[u8]) {
    out.extend_from_slice(&[0x05, 0x05, 0x01]);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(name.len() as i32).to_le_bytes());
    out.extend_from_slice(name);
    out.push(0x06);
    out.extend_from_slice(&(content.len() as i32).to_le_bytes());
    while out.len() % 4 != 0 {
        out.push(0);
    }
    out.extend_from_slice(content);
    out.push(0x06);
}

/// `GET path` on `addr` (HTTP/1.1, connection closed): status and body.
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        path, addr
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = match text.find("\r\n\r\n") {
        Some(i) => text[i + 4..].to_string(),
        None => String::new(),
    };
    (status, body)
}

/// A loopback port free right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A real Prometheus server scraping `target` every second.
pub struct Prometheus {
    child: Child,
    addr: String,
    dir: PathBuf,
}

impl Prometheus {
    /// Starts one scraping `target` every second; returns once it is ready.
    pub fn start(target: &str) -> Prometheus {
        let dir = temp_dir("prometheus");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: dsipc\n    static_configs:\n      - targets: ['{}']\n",
                target
            ),
        )
        .unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.join("log")).unwrap();
        let child = Command::new(prometheus_bin())
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={}", addr))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus (apt-get install prometheus; scripts/test.sh does)");
        let p = Prometheus { child, addr, dir };
        // Ready when its HTTP API answers (bounded poll).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(mut s) = TcpStream::connect(&p.addr) {
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let _ = write!(s, "GET /-/ready HTTP/1.0\r\n\r\n");
                let mut r = String::new();
                let _ = s.read_to_string(&mut r);
                if r.starts_with("HTTP/1.0 200") || r.starts_with("HTTP/1.1 200") {
                    return p;
                }
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready: {}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Its log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// An instant query; returns the raw JSON answer.
    pub fn query(&self, q: &str) -> String {
        let mut enc = String::new();
        for b in q.bytes() {
            if b.is_ascii_alphanumeric() || b"_-.".contains(&b) {
                enc.push(b as char);
            } else {
                enc.push_str(&format!("%{:02X}", b));
            }
        }
        let (status, body) = http_get(&self.addr, &format!("/api/v1/query?query={}", enc));
        assert_eq!(status, 200, "{}", body);
        body
    }

    /// Polls `q` (bounded) until `ok` accepts the answer; returns it.
    pub fn poll(&self, q: &str, limit: Duration, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let r = self.query(q);
            if ok(&r) {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "query {} never satisfied: {}\n{}",
                q,
                r,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `$PROMETHEUS`, else `prometheus` on the PATH.
pub fn prometheus_bin() -> PathBuf {
    std::env::var_os("PROMETHEUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("prometheus"))
}

/// The committed .NET Core 3.1 counters capture with every "CPU Usage" display name
/// replaced by `to` (9 UTF-16 units, as long: a hostile name such as an OSC sequence).
pub fn counters_capture_renaming_cpu_usage(to: &str) -> &'static [u8] {
    let path = repo_root().join("tests/data/counters/netcore3.1.23-system-runtime.nettrace");
    let mut data = fs::read(path).unwrap();
    let utf16 = |t: &str| -> Vec<u8> { t.encode_utf16().flat_map(|u| u.to_le_bytes()).collect() };
    let (from, to) = (utf16("CPU Usage"), utf16(to));
    assert_eq!(from.len(), to.len(), "the new name is 9 UTF-16 units");
    let mut replaced = 0;
    let mut i = 0;
    while i + from.len() <= data.len() {
        if data[i..i + from.len()] == from[..] {
            data[i..i + from.len()].copy_from_slice(&to);
            replaced += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    assert!(replaced > 0, "the capture names CPU Usage");
    Box::leak(data.into_boxed_slice())
}
