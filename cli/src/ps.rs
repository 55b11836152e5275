//! `dsipc ps`: every diagnosable process, probed in parallel under one deadline.

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dsipc_std::{DiagnosticsClient, Endpoint};

use crate::term::clean;
use crate::{CliError, CliResult, Common};

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

/// The names a process goes by, as `Process.GetProcessesByName` (dotnet-trace's `-n`)
/// matches them: its `comm` and its executable's file name from `/proc`; elsewhere (or
/// when `/proc` says nothing) the file name of ProcessInfo's command line, without `.exe`.
fn process_names(pid: u32, probe: Option<&Probe>) -> Vec<String> {
    let mut names = Vec::new();
    if let Ok(comm) = std::fs::read_to_string(format!("/proc/{}/comm", pid)) {
        names.push(comm.trim_end_matches('\n').to_string());
    }
    if let Ok(exe) = std::fs::read_link(format!("/proc/{}/exe", pid)) {
        if let Some(f) = exe.file_name() {
            names.push(f.to_string_lossy().into_owned());
        }
    }
    if names.is_empty() {
        if let Some(Probe::Command(line)) = probe {
            let first = line.split_whitespace().next().unwrap_or("");
            let file = first.rsplit(['/', '\\']).next().unwrap_or(first);
            let stem = file
                .strip_suffix(".exe")
                .or_else(|| file.strip_suffix(".EXE"))
                .unwrap_or(file);
            names.push(stem.to_string());
        }
    }
    names
}

/// The one diagnosable process named `name` (`-n/--name`); none, or more than one, is an
/// error that says what to do.
pub(crate) fn pid_by_name(common: &Common, name: &str) -> Result<u32, CliError> {
    if name.is_empty() {
        return Err(CliError::Usage("-n NAME must not be empty".into()));
    }
    let timeout = common.timeout_or(Duration::from_secs(3));
    let procs = dsipc_std::list_processes(common.tmpdir.as_deref())?;
    // ProcessInfo is asked only where /proc cannot name the process (Windows).
    let from_proc: Vec<Vec<String>> = procs.iter().map(|p| process_names(p.pid, None)).collect();
    let need_probe: Vec<PathBuf> = procs
        .iter()
        .zip(&from_proc)
        .filter(|(_, names)| names.is_empty())
        .map(|(p, _)| p.endpoint.clone())
        .collect();
    let mut probes = probe_all(&need_probe, Instant::now() + timeout).into_iter();
    let mut found = Vec::new();
    for (p, mut names) in procs.iter().zip(from_proc) {
        if names.is_empty() {
            names = process_names(p.pid, probes.next().as_ref());
        }
        let matches = |n: &String| {
            if cfg!(windows) {
                n.eq_ignore_ascii_case(name)
            } else {
                n == name
            }
        };
        if names.iter().any(matches) {
            found.push(p.pid);
        }
    }
    match found[..] {
        [pid] => Ok(pid),
        [] => Err(CliError::Failed(format!(
            "no .NET process named {:?} (dsipc ps lists them)",
            name
        ))),
        _ => Err(CliError::Failed(format!(
            "{} .NET processes are named {:?} (pids {}): pick one with -p PID",
            found.len(),
            name,
            found
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
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
