//! `dsipc ps`: every diagnosable process, probed in parallel under one deadline.

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dsipc_std::{DiagnosticsClient, Endpoint};

use crate::term::clean;
use crate::{CliResult, Common};

/// Probes in flight at once: enough that a few hundred silent sockets cost one timeout,
/// few enough to stay polite to the machine.
const PARALLEL: usize = 16;

/// What a probe found out about one process.
enum Probe {
    /// ProcessInfo's command line.
    Command(String),
    /// The runtime does not know ProcessInfo (.NET Core 3.x).
    NotSupported,
    /// No answer (error, or no time left).
    Failed,
}

/// Probes every endpoint with ProcessInfo, `PARALLEL` at a time, all by `deadline`.
fn probe_all(endpoints: &[PathBuf], deadline: Instant) -> Vec<Probe> {
    let results: Vec<Mutex<Option<Probe>>> = endpoints.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let workers = PARALLEL.min(endpoints.len());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= endpoints.len() {
                    return;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left < Duration::from_millis(1) {
                    return;
                }
                let client =
                    DiagnosticsClient::new(Endpoint::new(&endpoints[i])).with_timeout(left);
                let probe = match client.process_info_basic() {
                    Ok(info) => Probe::Command(info.command_line),
                    Err(e) if e.is_not_supported() => Probe::NotSupported,
                    Err(_) => Probe::Failed,
                };
                if let Ok(mut slot) = results[i].lock() {
                    *slot = Some(probe);
                }
            });
        }
    });
    results
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or(Probe::Failed)
        })
        .collect()
}

/// One row of the table.
struct Row {
    pid: u32,
    endpoint: String,
    command: String,
}

/// Prints the table: PID, the endpoint (as wide as the widest), then the command line last
/// (any length without pushing a column out of line). A command in `[...]` came from
/// `/proc` (the runtime has no ProcessInfo); a line on stderr says so when one is shown.
fn print_table(endpoint_title: &str, rows: &[Row]) -> CliResult {
    let width = rows
        .iter()
        .map(|r| r.endpoint.chars().count())
        .chain(std::iter::once(endpoint_title.len()))
        .max()
        .unwrap_or(0);
    let out = io::stdout();
    let mut out = io::BufWriter::new(out.lock());
    writeln!(
        out,
        "{:<8} {:<width$} COMMAND",
        "PID",
        endpoint_title,
        width = width
    )?;
    for r in rows {
        writeln!(
            out,
            "{:<8} {:<width$} {}",
            r.pid,
            r.endpoint,
            r.command,
            width = width
        )?;
    }
    out.flush()?;
    if rows.iter().any(|r| r.command.starts_with('[')) {
        crate::term::note!(
            "dsipc: [...] is the command line from /proc: that runtime (.NET Core 3.x) has no ProcessInfo command"
        );
    }
    Ok(())
}

/// `dsipc ps`: one body for Unix sockets and Windows pipes.
pub(crate) fn ps(common: &Common) -> CliResult {
    let timeout = common.timeout_or(Duration::from_secs(3));
    let deadline = Instant::now() + timeout;
    let procs = dsipc_std::list_processes(common.tmpdir.as_deref())?;
    let endpoints: Vec<PathBuf> = procs.iter().map(|p| p.endpoint.clone()).collect();
    let probes = probe_all(&endpoints, deadline);
    let rows: Vec<Row> = procs
        .iter()
        .zip(probes)
        .map(|(proc, probe)| {
            let command = match probe {
                Probe::Command(c) => clean(&c).into_owned(),
                // .NET Core 3.x has no ProcessInfo: show what /proc says, in brackets.
                Probe::NotSupported => proc_cmdline(proc.pid)
                    .map(|c| format!("[{}]", clean(&c)))
                    .unwrap_or_else(|| "-".into()),
                Probe::Failed => "-".into(),
            };
            Row {
                pid: proc.pid,
                endpoint: clean(&proc.endpoint.to_string_lossy()).into_owned(),
                command,
            }
        })
        .collect();
    print_table(if cfg!(windows) { "PIPE" } else { "SOCKET" }, &rows)
}

/// The command line from `/proc/PID/cmdline`, arguments joined by spaces (Linux).
#[cfg(unix)]
pub(crate) fn proc_cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{}/cmdline", pid)).ok()?;
    let parts: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    if parts.is_empty() {
        None
    } else {
        Some(parts.join(" "))
    }
}

/// The command line from `/proc` (Linux; `None` elsewhere).
#[cfg(not(unix))]
pub(crate) fn proc_cmdline(_pid: u32) -> Option<String> {
    None
}
