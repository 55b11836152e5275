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
    /// This user may not connect to its socket: the error, which names the owner.
    Denied(String),
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
                    Err(e @ dsipc_std::Error::Connect { .. })
                        if std::error::Error::source(&e)
                            .and_then(|s| s.downcast_ref::<io::Error>())
                            .map(io::Error::kind)
                            == Some(io::ErrorKind::PermissionDenied) =>
                    {
                        Probe::Denied(e.to_string())
                    }
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
    name: String,
    endpoint: String,
    command: String,
}

/// Prints the table as dotnet-trace's `ps` lays it out: PID, NAME, then the command line
/// last (any length without pushing a column out of line); with `verbose`, the socket
/// (pipe) before it.
fn print_table(endpoint_title: Option<&str>, rows: &[Row]) -> CliResult {
    let width = |title: &str, of: &dyn Fn(&Row) -> &str| {
        rows.iter()
            .map(|r| of(r).chars().count())
            .chain(std::iter::once(title.len()))
            .max()
            .unwrap_or(0)
    };
    let name_width = width("NAME", &|r| &r.name);
    let out = io::stdout();
    let mut out = io::BufWriter::new(out.lock());
    let line = |out: &mut dyn Write, pid: &str, name: &str, endpoint: &str, command: &str| {
        match endpoint_title {
            Some(title) => {
                let ew = width(title, &|r| &r.endpoint);
                writeln!(
                    out,
                    "{:<8} {:<nw$} {:<ew$} {}",
                    pid,
                    name,
                    endpoint,
                    command,
                    nw = name_width,
                    ew = ew
                )
            }
            None => writeln!(out, "{:<8} {:<nw$} {}", pid, name, command, nw = name_width),
        }
    };
    line(
        &mut out,
        "PID",
        "NAME",
        endpoint_title.unwrap_or(""),
        "COMMAND",
    )?;
    for r in rows {
        line(
            &mut out,
            &r.pid.to_string(),
            &r.name,
            &r.endpoint,
            &r.command,
        )?;
    }
    out.flush()?;
    Ok(())
}

/// `dsipc ps [--verbose]`: one body for Unix sockets and Windows pipes.
pub(crate) fn ps(common: &Common, verbose: bool) -> CliResult {
    let timeout = common.timeout_or(Duration::from_secs(3));
    let deadline = Instant::now() + timeout;
    let procs = dsipc_std::list_processes(common.tmpdir.as_deref())?;
    let endpoints: Vec<PathBuf> = procs.iter().map(|p| p.endpoint.clone()).collect();
    let probes = probe_all(&endpoints, deadline);
    let mut silent = Vec::new();
    let mut denied = Vec::new();
    let rows: Vec<Row> = procs
        .iter()
        .zip(probes)
        .map(|(proc, probe)| {
            // The whole command line from /proc (ProcessInfo's may be only the program).
            let command = match (&probe, dsipc_std::command_line(proc.pid)) {
                (_, Some(c)) => clean(&c).into_owned(),
                (Probe::Command(c), None) => clean(c).into_owned(),
                _ => "-".into(),
            };
            let name = process_names(proc.pid, Some(&probe))
                .into_iter()
                .next()
                .map(|n| clean(&n).into_owned())
                .unwrap_or_else(|| "-".into());
            match probe {
                Probe::Denied(e) => denied.push(format!("pid {}: {}", proc.pid, e)),
                Probe::Failed => silent.push(proc.pid.to_string()),
                Probe::Command(_) | Probe::NotSupported => {}
            }
            Row {
                pid: proc.pid,
                name,
                endpoint: clean(&proc.endpoint.to_string_lossy()).into_owned(),
                command,
            }
        })
        .collect();
    let title = if cfg!(windows) { "PIPE" } else { "SOCKET" };
    print_table(if verbose { Some(title) } else { None }, &rows)?;
    for d in denied {
        crate::term::note!("dsipc: {}", clean(&d));
    }
    if !silent.is_empty() {
        crate::term::note!(
            "dsipc: did not answer within {:.1} s (hung, or suspended at startup?): pid {}",
            timeout.as_secs_f64(),
            silent.join(", ")
        );
    }
    Ok(())
}

/// The names a process goes by, as `Process.GetProcessesByName` (dotnet-trace's `-n`)
/// matches them: its `comm` and its executable's file name from `/proc`; elsewhere (or
/// when `/proc` says nothing) the file name of ProcessInfo's command line, without `.exe`.
fn process_names(pid: u32, probe: Option<&Probe>) -> Vec<String> {
    let mut names: Vec<String> = dsipc_std::process_name(pid).into_iter().collect();
    if let Ok(exe) = std::fs::read_link(format!("/proc/{}/exe", pid)) {
        if let Some(f) = exe.file_name() {
            names.push(f.to_string_lossy().into_owned());
        }
    }
    if names.is_empty() {
        if let Some(Probe::Command(line)) = probe {
            names.extend(dsipc_std::program_name(line));
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
