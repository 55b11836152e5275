//! `dsipc monitor`: a reverse diagnostic port (`DOTNET_DiagnosticPorts=PATH,connect`).
//!
//! Runtimes connect, advertise themselves (pid, cookie) and wait for one command; after it
//! they reconnect and advertise again. The monitor prints one line per Advertise. With
//! `--resume` it sends ResumeRuntime to every runtime once (suspended runtimes then start);
//! otherwise, and after the resume, it keeps each runtime's latest connection open and idle
//! (a closed connection makes the runtime reconnect at once, in a loop).
//!
//! Every connection is served at once, each with its own deadline (`--timeout`: for the
//! Advertise, then for the ResumeRuntime reply), so that no peer delays another: on Unix
//! in one thread on the dsipc-mio reactor ([`engine`] in `monitor/reactor.rs`), elsewhere
//! (Windows, whose build uses Rust 1.63, too old for mio 1.x) with a thread per connection
//! (`monitor/threads.rs`). At most `--max-connections` connections are held: past that,
//! and whenever accepting fails (out of descriptors), the oldest idle one is closed
//! (a peer that never advertised first, then a held runtime, which reconnects).
//!
//! Which runtime to resume once and which to hold, and which connection holds each, are
//! the session layer's (`dsipc::session::ReverseBook`, `ReverseConnections`).

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use dsipc::session::{AdvertiseAction as Action, ReverseBook};
use dsipc::wire::Guid;

use crate::args::parse;
use crate::{json, CliError, CliResult, Common};

mod conns;
#[cfg(all(unix, feature = "mio"))]
#[path = "monitor/reactor.rs"]
mod engine;
#[cfg(not(all(unix, feature = "mio")))]
#[path = "monitor/threads.rs"]
mod engine;

/// How often the loop looks at the Ctrl-C flag at least (on Unix a signal also wakes it).
const TICK: Duration = Duration::from_millis(100);
/// Default of `--max-connections`.
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 1000;

/// One Advertise, and what the monitor did about it.
struct Seen {
    pid: u64,
    cookie: Guid,
    reconnect: bool,
    resumed: bool,
    resume_error: Option<String>,
}

impl Seen {
    fn text(&self) -> String {
        let mut line = format!(
            "pid={} cookie={} {}",
            self.pid,
            self.cookie,
            if self.reconnect { "reconnect" } else { "new" }
        );
        if self.resumed {
            line.push_str(" resumed");
        }
        if let Some(e) = &self.resume_error {
            line.push_str(" resume-failed: ");
            line.push_str(e);
        }
        line
    }

    fn json(&self) -> String {
        json::to_string(&AdvertiseJson {
            event: "advertise",
            pid: self.pid,
            cookie: self.cookie.to_string(),
            reconnect: self.reconnect,
            resumed: self.resumed,
            resume_error: self.resume_error.as_deref(),
        })
    }
}

/// `dsipc monitor --json`'s line for a runtime that advertised.
#[derive(serde::Serialize)]
struct AdvertiseJson<'a> {
    event: &'static str,
    pid: u64,
    cookie: String,
    reconnect: bool,
    resumed: bool,
    resume_error: Option<&'a str>,
}

/// What the monitor was asked to do.
struct Options {
    address: PathBuf,
    resume: bool,
    as_json: bool,
    timeout: Duration,
    max_connections: usize,
}

/// A runtime advertised: its line so far, and what to do (the session layer's
/// [`ReverseBook`] decides).
fn advertised(book: &mut ReverseBook, pid: u64, cookie: Guid) -> (Seen, Action) {
    let (reconnect, action) = book.advertised(cookie);
    let line = Seen {
        pid,
        cookie,
        reconnect,
        resumed: false,
        resume_error: None,
    };
    (line, action)
}

/// The outcome of a resume, told to the book and to the runtime's line.
fn resume_done(book: &mut ReverseBook, line: &mut Seen, outcome: Result<(), String>) {
    book.resume_done(line.cookie, outcome.is_ok());
    match outcome {
        Ok(()) => line.resumed = true,
        Err(e) => line.resume_error = Some(e),
    }
}

/// `--metrics`: the exporter that runtimes are added to. A static because [`emit`] is the one
/// place both engines report an Advertise's outcome.
static METRICS: std::sync::Mutex<Option<crate::counters::MonitorMetrics>> =
    std::sync::Mutex::new(None);
/// `--resume` was given (then a runtime is exported once resumed, else when first seen).
static RESUMING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Exports the counters of a runtime that now runs (resumed, or never suspended).
fn export_metrics(line: &Seen) {
    let metrics = METRICS.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(m) = metrics.as_ref() {
        let resuming = RESUMING.load(std::sync::atomic::Ordering::SeqCst);
        if line.resumed || (!resuming && !line.reconnect) {
            m.add_later(line.pid);
        }
    }
}

/// Prints one line on stdout; false when nobody reads it any more.
fn emit(line: &Seen, as_json: bool) -> bool {
    export_metrics(line);
    let text = if as_json { line.json() } else { line.text() };
    let out = io::stdout();
    let mut o = out.lock();
    writeln!(o, "{}", text).and_then(|_| o.flush()).is_ok()
}

fn announce(address: &Path, shown: &Path, resume: bool) {
    eprintln!(
        "dsipc: listening on {}; start runtimes with DOTNET_DiagnosticPorts={},connect{}",
        shown.display(),
        address.display(),
        if resume { ",suspend" } else { "" }
    );
}

pub(crate) fn cmd_monitor(rest: &[String]) -> CliResult {
    let p = parse(
        rest,
        &[
            "--listen",
            "--max-connections",
            "--metrics",
            "--counters",
            "--refresh-interval",
            "--max-time-series",
            "--max-histograms",
            // Taken only to say where dotnet-counters' monitor is.
            "-p",
            "--process-id",
            "-n",
            "--name",
        ],
        &["--resume", "--json"],
    )?;
    // `dotnet-counters monitor PID` by habit: say where that command is.
    let pid_given = p.positionals.first().map_or(false, |a| {
        a.to_str().map_or(false, |t| {
            !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())
        })
    });
    if pid_given
        || ["-p", "--process-id", "-n", "--name"]
            .iter()
            .any(|o| p.value(o).is_some())
    {
        return Err(CliError::Usage(
            "monitor meets runtimes on a reverse port (--listen PATH); dotnet-counters' monitor of a process is `dsipc counters monitor PID`".into(),
        ));
    }
    p.expect_positionals(&[])?;
    let common = Common::from(&p)?;
    let address = match p.value("--listen") {
        Some(a) if !a.is_empty() => PathBuf::from(a),
        _ => return Err(CliError::Usage("monitor needs --listen PATH".into())),
    };
    let max_connections = match p.value("--max-connections") {
        None => DEFAULT_MAX_CONNECTIONS,
        Some(v) => match v.parse::<usize>() {
            Ok(n) if n > 0 && n <= 1_000_000 => n,
            _ => {
                return Err(CliError::Usage(format!(
                    "--max-connections wants a number from 1 to 1000000, not {:?}",
                    v
                )))
            }
        },
    };
    let options = Options {
        address,
        resume: p.flag("--resume"),
        as_json: p.flag("--json"),
        timeout: common.timeout_or(dsipc_std::DEFAULT_TIMEOUT),
        max_connections,
    };
    let metrics = crate::counters::monitor_metrics(&p, common.tmpdir.clone(), options.timeout)?;
    RESUMING.store(options.resume, std::sync::atomic::Ordering::SeqCst);
    *METRICS.lock().unwrap_or_else(|p| p.into_inner()) = metrics;
    let result = engine::run(&options);
    let metrics = METRICS.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(m) = metrics {
        m.finish();
    }
    result
}
