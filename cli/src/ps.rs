//! `dsipc ps`: every diagnosable process, probed in parallel under one deadline.
//! Discovery and the probes are dsipc-std's (`probe_all`, `process_names`, `pids_named`);
//! this lays them out as dotnet-trace's `ps` does and says who did not answer.

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use dsipc_std::{probe_all, process_names, Probe};

use crate::term::clean;
use crate::{CliError, CliResult, Common};

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
                _ => {}
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

/// The one diagnosable process named `name` (`-n/--name`); none, or more than one, is an
/// error that says what to do.
pub(crate) fn pid_by_name(common: &Common, name: &str) -> Result<u32, CliError> {
    if name.is_empty() {
        return Err(CliError::Usage("-n NAME must not be empty".into()));
    }
    let timeout = common.timeout_or(Duration::from_secs(3));
    let found = dsipc_std::pids_named(common.tmpdir.as_deref(), name, timeout)?;
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
