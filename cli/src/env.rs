//! `dsipc env PID` and `dsipc setenv PID NAME VALUE`: a runtime's environment, read and
//! set (dotnet-monitor's `/env` and its SetEnvironmentVariable action).

use std::ffi::OsString;
use std::io::{self, Write};

use dsipc_std::Error;

use crate::args::{self, show};
use crate::error::{CliError, CliResult};
use crate::pid_command;
use crate::term::clean;

pub(crate) fn cmd_env(rest: &[OsString]) -> CliResult {
    let (p, common, pid) = pid_command(rest, &["PID"], &["--max-bytes"], &[])?;
    let max = match p.value_os("--max-bytes") {
        Some(v) => match v.to_str().map(str::parse::<u64>) {
            Some(Ok(n)) if n > 0 => n,
            _ => {
                return Err(CliError::Usage(format!(
                    "--max-bytes wants a positive number of bytes, not {}",
                    show(v)
                )))
            }
        },
        None => dsipc_std::DEFAULT_MAX_ENVIRONMENT,
    };
    let client = common
        .client(pid, dsipc_std::DEFAULT_TIMEOUT)?
        .with_max_environment(max);
    let out = io::stdout();
    let mut out = io::BufWriter::new(out.lock());
    // Entries go out as they arrive; a failing stdout ends the exchange.
    let mut failed: Option<io::Error> = None;
    let result = client.for_each_environment_variable(|v| match writeln!(out, "{}", clean(v)) {
        Ok(()) => Ok(()),
        Err(e) => {
            failed = Some(e);
            Err(Error::Aborted)
        }
    });
    if let Some(e) = failed {
        return Err(CliError::from(e));
    }
    let flushed = out.flush();
    result?;
    flushed?;
    Ok(())
}

pub(crate) fn cmd_setenv(rest: &[OsString]) -> CliResult {
    // (After `--` every argument is a value: "--unset" there is a VALUE.)
    let unset = rest
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "--unset");
    let names: &[&str] = if unset {
        &["PID", "NAME"]
    } else {
        &["PID", "NAME", "VALUE (or --unset)"]
    };
    let (p, common, pid) = pid_command(rest, names, &[], &["--unset"])?;
    let name = args::text("NAME", &p.positionals[1])?;
    if name.is_empty() || name.contains('=') {
        return Err(CliError::Usage(
            "NAME must be non-empty and must not contain '='".into(),
        ));
    }
    let value = if unset {
        None
    } else {
        Some(args::text("VALUE", &p.positionals[2])?)
    };
    common
        .client(pid, dsipc_std::DEFAULT_TIMEOUT)?
        .set_environment_variable(name, value)?;
    Ok(())
}
