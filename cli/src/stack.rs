//! `dsipc stack PID [--format text|json]`: every sampled thread's stack, as
//! `dotnet-stack report` shows it.
//!
//! The session and both formats are dsipc-recipes' ([`dsipc_recipes::stack`]); this module
//! parses the command line, runs the recipe and prints.

use std::ffi::OsString;
use std::time::Instant;

use dsipc_recipes::stack::{json, text, thread_name, Sampling};
use dsipc_trace::StackSnapshot;

use crate::args::show;
use crate::term::note;
use crate::{pid_command, print_out, CliError, CliResult};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Text,
    Json,
}

pub(crate) fn cmd_stack(rest: &[OsString]) -> CliResult {
    let started = Instant::now();
    let (p, common, pid) = pid_command(rest, &["PID"], &["--format"], &[])?;
    let format = match p.value_lower("--format")?.as_deref() {
        None | Some("text") => Format::Text,
        Some("json") => Format::Json,
        Some(other) => {
            return Err(CliError::Usage(format!(
                "--format must be text or json, not {}",
                show(std::ffi::OsStr::new(other))
            )))
        }
    };
    let client = common.client(pid, dsipc_std::DEFAULT_TIMEOUT)?;
    let snapshot = snapshot(&client, pid, started)?;
    if snapshot.threads.is_empty() {
        // As dotnet-stack: nothing to show is an answer (the sampler skips threads without
        // managed frames), said on stderr; JSON gets an empty list.
        note!("dsipc: pid {}: no thread had managed frames to sample", pid);
    }
    let out = match format {
        Format::Text => text(&snapshot),
        Format::Json => json(&snapshot, &|tid| thread_name(pid, tid)),
    };
    print_out(&out)
}

/// Samples every thread of runtime `pid` once and resolves the stacks (dotnet-stack's
/// session), the whole within the client's timeout from `started`.
pub(crate) fn snapshot(
    client: &dsipc_std::DiagnosticsClient,
    pid: u32,
    started: Instant,
) -> Result<StackSnapshot, CliError> {
    let timeout = client.timeout();
    Ok(dsipc_recipes::run(
        client,
        Sampling::new(pid, timeout),
        started + timeout,
    )?)
}
