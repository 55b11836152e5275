//! `dsipc dump PID [-o FILE] [--type Mini|Heap|Triage|Full]`: the runtime writes a dump
//! of itself (dotnet-dump collect's names and types).

use std::ffi::{OsStr, OsString};
use std::time::{Duration, Instant};

use dsipc::payload::DumpType;

use crate::args::show;
use crate::error::{CliError, CliResult};
use crate::term::{clean, note};
use crate::{absolute, output, pid_command};

pub(crate) fn cmd_dump(rest: &[OsString]) -> CliResult {
    let (p, common, pid) =
        pid_command(rest, &["PID"], &["-o", "--output", "--type"], &["--force"])?;
    // dotnet-dump's default: core_yyyyMMdd_HHmmss (dump_yyyyMMdd_HHmmss.dmp on Windows) in
    // the current directory.
    let default_name = || {
        let (stem, ext) = if cfg!(windows) {
            ("dump", ".dmp")
        } else {
            ("core", "")
        };
        output::timestamped(stem, ext, std::time::SystemTime::now())
    };
    let path = match p.value_alias("-o", "--output")? {
        Some(o) => absolute("-o PATH", o)?,
        None => absolute("-o PATH", default_name().as_os_str())?,
    };
    // dotnet-dump's default type: a full dump.
    let type_name = p.value_lower("--type")?.unwrap_or_else(|| "full".into());
    let kind = match type_name.as_str() {
        "normal" | "mini" => DumpType::Normal,
        "heap" => DumpType::WithHeap,
        "triage" => DumpType::Triage,
        "full" => DumpType::Full,
        other => {
            return Err(CliError::Usage(format!(
                "--type must be normal, heap, triage or full, not {}",
                show(OsStr::new(other))
            )))
        }
    };
    // Every argument is checked before the file system, then the runtime.
    if !p.flag("--force") {
        refuse_existing_dump(&path, pid)?;
    }
    let client = common.client(pid, Duration::from_secs(120))?;
    let start = Instant::now();
    client.write_dump(&path, kind, 0)?;
    // A result line, on stderr with every other command's: stdout is for data.
    note!(
        "dsipc: wrote a {} dump of pid {} to {} in {:.2} s",
        type_name,
        pid,
        clean(&path),
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The runtime writes the dump itself, replacing any file at the path: an existing one is
/// refused here unless `--force`, as every other command refuses. The path is looked up as
/// the target sees it (`/proc/PID/root`, for a runtime in another mount namespace), with
/// `%p` expanded as the runtime expands it. The runtime could still meet a file created
/// between this check and its write; nothing here can close that window.
fn refuse_existing_dump(path: &str, pid: u32) -> Result<(), CliError> {
    let text = path.replace("%p", &pid.to_string());
    let seen = std::path::PathBuf::from(&text);
    let in_target = std::path::PathBuf::from(format!("/proc/{}/root{}", pid, text));
    let exists = |p: &std::path::Path| std::fs::symlink_metadata(p).is_ok();
    if (cfg!(target_os = "linux") && exists(&in_target)) || exists(&seen) {
        return Err(CliError::Failed(format!(
            "{} exists; not replacing it (--force replaces it)",
            output::display(&seen)
        )));
    }
    Ok(())
}
