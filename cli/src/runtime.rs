//! Commands that act on a runtime: `resume`, `perfmap`, `startup-hook` and
//! `attach-profiler`.

use std::ffi::{OsStr, OsString};

use dsipc::payload::PerfMapType;
use dsipc::wire::Guid;

use crate::args::{show, usage, UsageError};
use crate::error::{CliError, CliResult};
use crate::{absolute, pid_command};

/// `dsipc resume PID`: ResumeRuntime (a runtime started with `DOTNET_DiagnosticPorts=...,suspend`).
pub(crate) fn cmd_resume(rest: &[OsString]) -> CliResult {
    let (_, common, pid) = pid_command(rest, &["PID"], &[], &[])?;
    common
        .client(pid, dsipc_std::DEFAULT_TIMEOUT)?
        .resume_runtime()?;
    Ok(())
}

pub(crate) fn cmd_perfmap(rest: &[OsString]) -> CliResult {
    let (p, common, pid) = pid_command(rest, &["PID", "enable|disable"], &["--type"], &[])?;
    let action = p.positionals[1].to_string_lossy().into_owned();
    let type_name = p.value_lower("--type")?;
    // The whole invocation is checked before connecting.
    let kind = match action.as_str() {
        "enable" => match type_name.as_deref().unwrap_or("all") {
            "all" => Some(PerfMapType::All),
            "jitdump" => Some(PerfMapType::JitDump),
            "perfmap" => Some(PerfMapType::PerfMap),
            other => {
                return Err(CliError::Usage(format!(
                    "--type must be all, jitdump or perfmap, not {}",
                    show(OsStr::new(other))
                )))
            }
        },
        "disable" if type_name.is_some() => {
            return Err(CliError::Usage("--type goes with enable".into()))
        }
        "disable" => None,
        _ => {
            return Err(CliError::Usage(format!(
                "perfmap wants enable or disable, not {}",
                show(&p.positionals[1])
            )))
        }
    };
    let client = common.client(pid, dsipc_std::DEFAULT_TIMEOUT)?;
    match kind {
        Some(kind) => client.enable_perf_map(kind)?,
        None => client.disable_perf_map()?,
    }
    Ok(())
}

pub(crate) fn cmd_startup_hook(rest: &[OsString]) -> CliResult {
    let (p, common, pid) = pid_command(rest, &["PID", "PATH"], &[], &[])?;
    let path = absolute("PATH", &p.positionals[1])?;
    common
        .client(pid, dsipc_std::DEFAULT_TIMEOUT)?
        .apply_startup_hook(&path)?;
    Ok(())
}

fn parse_hex(s: &str) -> Result<Vec<u8>, UsageError> {
    let s = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if s.len() % 2 != 0 {
        return usage("--data wants an even number of hex digits");
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
                .map_or_else(|| usage("--data wants hex digits"), Ok)
        })
        .collect()
}

pub(crate) fn cmd_attach_profiler(rest: &[OsString]) -> CliResult {
    let (p, common, pid) = pid_command(rest, &["PID"], &["--clsid", "--path", "--data"], &[])?;
    let clsid = match p.value_text("--clsid")?.map(Guid::parse) {
        Some(Ok(g)) => g,
        Some(Err(e)) => return Err(CliError::Usage(format!("--clsid: {}", e))),
        None => return Err(CliError::Usage("attach-profiler needs --clsid GUID".into())),
    };
    let path = match p.value_os("--path") {
        Some(path) => absolute("--path", path)?,
        None => return Err(CliError::Usage("attach-profiler needs --path PATH".into())),
    };
    let data = match p.value_text("--data")? {
        Some(h) => parse_hex(h)?,
        None => Vec::new(),
    };
    let client = common.client(pid, dsipc_std::DEFAULT_TIMEOUT)?;
    let attach_timeout = client.timeout();
    client.attach_profiler(attach_timeout, clsid, &path, &data)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args;

    #[test]
    fn hex_and_pids() {
        assert_eq!(parse_hex("0x0aFF").unwrap(), vec![0x0a, 0xff]);
        assert!(parse_hex("abc").is_err());
        assert!(parse_hex("zz").is_err());
        assert!(args::pid(OsStr::new("0")).is_err());
    }
}
