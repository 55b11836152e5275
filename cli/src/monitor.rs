//! `dsipc monitor`: a reverse diagnostic port (`DOTNET_DiagnosticPorts=PATH,connect`).
//!
//! Runtimes connect, advertise themselves (pid, cookie) and wait for one command; after it
//! they reconnect and advertise again. The monitor prints one line per Advertise. With
//! `--resume` it sends ResumeRuntime to every runtime once (suspended runtimes then start);
//! otherwise, and after the resume, it keeps each runtime's latest connection open and idle
//! (a closed connection makes the runtime reconnect at once, in a loop).

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dsipc::wire::Guid;
use dsipc_std::reverse::{ReverseConnection, ReverseListener};

use crate::args::parse;
use crate::{json, term, CliError, CliResult, Common};

/// How often the accept loop looks at the Ctrl-C flag (on Unix a signal also wakes it).
const TICK: Duration = Duration::from_millis(250);
/// How often idle connections of runtimes that have exited are let go.
const PRUNE_EVERY: Duration = Duration::from_secs(5);

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
        let mut o = json::Object::new();
        o.string("event", "advertise");
        o.number("pid", self.pid);
        o.string("cookie", &self.cookie.to_string());
        o.boolean("reconnect", self.reconnect);
        o.boolean("resumed", self.resumed);
        o.opt_string("resume_error", self.resume_error.as_deref());
        o.finish()
    }
}

pub(crate) fn cmd_monitor(rest: &[String]) -> CliResult {
    let p = parse(
        rest,
        &["--listen", "--metrics", "--counters", "--refresh-interval"],
        &["--resume", "--json"],
    )?;
    p.expect_positionals(&[])?;
    let common = Common::from(&p)?;
    let address = match p.value("--listen") {
        Some(a) if !a.is_empty() => PathBuf::from(a),
        _ => return Err(CliError::Usage("monitor needs --listen PATH".into())),
    };
    let resume = p.flag("--resume");
    let as_json = p.flag("--json");
    let timeout = common.timeout_or(dsipc_std::DEFAULT_TIMEOUT);

    let metrics = crate::counters::monitor_metrics(&p, common.tmpdir.clone(), timeout).map_err(
        |e| match e {
            crate::counters::CountersError::Usage(m) => CliError::Usage(m),
            crate::counters::CountersError::Failed(m) => CliError::Other(m),
        },
    )?;

    term::catch_interrupts();
    let mut listener = ReverseListener::bind(&address)
        .map_err(|e| CliError::Other(format!("cannot listen: {}", e)))?;
    eprintln!(
        "dsipc: listening on {}; start runtimes with DOTNET_DiagnosticPorts={},connect{}",
        listener.address().display(),
        address.display(),
        if resume { ",suspend" } else { "" }
    );

    // The latest idle connection of each runtime, kept open so that it waits quietly.
    let mut held: HashMap<Guid, ReverseConnection> = HashMap::new();
    let mut seen: HashSet<Guid> = HashSet::new();
    let mut resumed: HashSet<Guid> = HashSet::new();
    let out = io::stdout();
    let mut pruned = Instant::now();
    let result = loop {
        if term::interrupted() {
            break Ok(());
        }
        if pruned.elapsed() >= PRUNE_EVERY {
            // Runtimes that exited: close their connections (else one descriptor each).
            held.retain(|_, c| !c.is_closed());
            pruned = Instant::now();
        }
        let conn = match listener.accept_timeout(TICK) {
            Ok(Some(c)) => c,
            Ok(None) => continue,
            Err(e) if e.is_fatal() => break Err(CliError::Other(e.to_string())),
            Err(e) => {
                eprintln!("dsipc: {}", e);
                continue;
            }
        };
        let cookie = conn.cookie();
        let mut line = Seen {
            pid: conn.pid(),
            cookie,
            reconnect: !seen.insert(cookie),
            resumed: false,
            resume_error: None,
        };
        // A newer connection replaces the runtime's previous one (closed by then).
        held.remove(&cookie);
        if resume && !resumed.contains(&cookie) {
            match conn.into_client().with_timeout(timeout).resume_runtime() {
                Ok(()) => {
                    resumed.insert(cookie);
                    line.resumed = true;
                }
                // Not remembered: the next Advertise of this runtime tries again.
                Err(e) => line.resume_error = Some(e.to_string()),
            }
        } else {
            held.insert(cookie, conn);
        }
        // Export the counters of a runtime that runs (now resumed, or never suspended).
        if let Some(m) = &metrics {
            if line.resumed || (!resume && !line.reconnect) {
                m.add_later(line.pid);
            }
        }
        let text = if as_json { line.json() } else { line.text() };
        let mut o = out.lock();
        if writeln!(o, "{}", text).and_then(|_| o.flush()).is_err() {
            // Nobody reads our output any more.
            break Ok(());
        }
    };
    drop(held);
    drop(listener);
    if let Some(m) = metrics {
        m.finish();
    }
    if term::interrupted() {
        eprintln!("dsipc: interrupted; closed {}", address.display());
    }
    result
}
