//! `dsipc monitor`: a reverse diagnostic port (`DOTNET_DiagnosticPorts=PATH,connect`).
//!
//! Runtimes connect, advertise themselves (pid, cookie) and wait for one command; after it
//! they reconnect and advertise again. The monitor prints one line per Advertise. With
//! `--resume` it sends ResumeRuntime to every runtime once (suspended runtimes then start);
//! otherwise, and after the resume, it keeps each runtime's latest connection open and idle
//! (a closed connection makes the runtime reconnect at once, in a loop).
//!
//! The engines are the adapters': on Unix dsipc-mio's `monitor` (one thread, every
//! connection with its own deadline), elsewhere (Windows, whose build uses Rust 1.63, too
//! old for mio 1.x, or without the `mio` feature) dsipc-std's `reverse::monitor` (a thread
//! per connection). Both take `--timeout`, `--max-connections` and `--resume` as
//! `MonitorOptions` and hand each event to [`Printer::report`] as a `MonitorReport`; this
//! module parses the arguments, prints the lines and feeds `--metrics`.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use dsipc::wire::Guid;
use dsipc_std::reverse::monitor::{
    MonitorOptions, MonitorReport, ResumeOutcome, Shedding, DEFAULT_MAX_CONNECTIONS,
};

use crate::args::parse;
use crate::counters::MonitorMetrics;
use crate::{json, term, CliError, CliResult, Common};

#[cfg(all(unix, feature = "mio"))]
use dsipc_mio::monitor as engine;
#[cfg(not(all(unix, feature = "mio")))]
use dsipc_std::reverse::monitor as engine;

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

/// A runtime's line: text, or `--json`.
fn advertise_line(
    pid: u64,
    cookie: Guid,
    reconnect: bool,
    resume: &ResumeOutcome,
    as_json: bool,
) -> String {
    let resumed = matches!(resume, ResumeOutcome::Resumed);
    let error = match resume {
        ResumeOutcome::Failed(e) => Some(e.to_string()),
        _ => None,
    };
    if as_json {
        return json::to_string(&AdvertiseJson {
            event: "advertise",
            pid,
            cookie: cookie.to_string(),
            reconnect,
            resumed,
            resume_error: error.as_deref(),
        });
    }
    let mut line = format!(
        "pid={} cookie={} {}",
        pid,
        cookie,
        if reconnect { "reconnect" } else { "new" }
    );
    if resumed {
        line.push_str(" resumed");
    }
    if let Some(e) = error {
        line.push_str(" resume-failed: ");
        line.push_str(&e);
    }
    line
}

/// What the monitor prints, and the `--metrics` exporter runtimes are added to.
struct Printer {
    address: PathBuf,
    resume: bool,
    as_json: bool,
    metrics: Option<MonitorMetrics>,
}

impl Printer {
    /// One report on stdout (a runtime) or stderr; false when nobody reads stdout any more.
    fn report(&mut self, report: MonitorReport) -> bool {
        match report {
            MonitorReport::Listening { address } => announce(&self.address, &address, self.resume),
            MonitorReport::Advertised {
                pid,
                cookie,
                reconnect,
                resume,
            } => {
                // A runtime that now runs (resumed, or never suspended) is exported.
                let runs = match resume {
                    ResumeOutcome::Resumed => true,
                    _ => !self.resume && !reconnect,
                };
                if let (true, Some(m)) = (runs, self.metrics.as_ref()) {
                    m.add_later(pid);
                }
                let text = advertise_line(pid, cookie, reconnect, &resume, self.as_json);
                let out = io::stdout();
                let mut o = out.lock();
                return writeln!(o, "{}", text).and_then(|_| o.flush()).is_ok();
            }
            MonitorReport::CapReached { cap, shedding } => eprintln!(
                "dsipc: holding {} connections (the cap); {} for each new one",
                cap,
                match shedding {
                    Shedding::OldestHeld => "letting the oldest held runtime go",
                    _ => "closing the oldest idle one",
                }
            ),
            MonitorReport::NoAdvertise { timeout } => eprintln!(
                "dsipc: a peer connected but sent no Advertise within {:.1} s",
                timeout.as_secs_f64()
            ),
            MonitorReport::PeerDropped { error } => {
                eprintln!("dsipc: a peer connected and was dropped: {}", error)
            }
            MonitorReport::AcceptFailed { error, cap } => eprintln!(
                "dsipc: accepting a connection failed: {}; holding at most {} connections \
                 (retrying)",
                error, cap
            ),
            other => eprintln!("dsipc: {:?}", other),
        }
        true
    }
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
    let mut options = MonitorOptions::new(common.timeout_or(dsipc_std::DEFAULT_TIMEOUT));
    options.max_connections = max_connections;
    options.resume = p.flag("--resume");
    let metrics = crate::counters::monitor_metrics(&p, common.tmpdir.clone(), options.timeout)?;
    let mut printer = Printer {
        address: address.clone(),
        resume: options.resume,
        as_json: p.flag("--json"),
        metrics,
    };
    term::catch_interrupts();
    let result = engine::run(&address, &options, &term::interrupted, &mut |r| {
        printer.report(r)
    });
    if term::interrupted() {
        eprintln!("dsipc: interrupted; closed {}", address.display());
    }
    if let Some(m) = printer.metrics.take() {
        m.finish();
    }
    result.map_err(|e| CliError::Failed(e.to_string()))
}
