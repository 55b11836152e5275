//! A trace parsed while it arrives: `dsipc trace --format F` feeds every slice of the
//! stream it writes to the `.nettrace` file into the trace layer's [`LiveProfile`]
//! (through dsipc-recipes' [`dsipc_recipes::trace::Live`]) and, at the end, writes the
//! profile with the same writer as `dsipc convert`.

use std::path::{Path, PathBuf};

pub use dsipc_trace::format::ProfileFormat;
use dsipc_trace::format::Selection;
pub use dsipc_trace::{LiveCounts, LiveProfile};

use crate::error::{CliError, CliResult};
use crate::output::{self, display, Output};
use crate::term::{clean, note};

/// Where the profile of the trace at `trace` goes: the same stem, the format's extension
/// (as `dsipc convert` names its outputs).
pub fn destination(format: ProfileFormat, trace: &Path) -> PathBuf {
    output::default_name(trace, format.extension())
}

/// Writes the profile of what `live` parsed to `out` (prepared before the session), as
/// `dsipc convert` would; `name` titles a speedscope profile, `process` (the traced
/// process's name, when known) a flame graph. Returns a one-line summary of what was written.
pub fn write(
    live: LiveProfile,
    format: ProfileFormat,
    sel: Selection,
    mut out: Output,
    (name, process): (&str, Option<String>),
) -> Result<String, CliError> {
    let (profile, mut meta) = live.into_profile(name);
    meta.process = process;
    let what = profile.summary();
    if let Err(e) = format.write(&profile, sel, &meta, out.writer()) {
        out.abandon();
        return Err(CliError::io("writing the profile", e));
    }
    out.commit()?;
    Ok(what)
}

/// Writes the profile of what `live` parsed to `dest` (beside `trace`; `process` names the
/// traced process when known); fails if the stream did not parse (the trace itself is kept
/// either way).
pub fn write_profile(
    live: LiveProfile,
    format: ProfileFormat,
    out: Output,
    (dest, trace): (&Path, &Path),
    process: Option<String>,
) -> CliResult {
    let problem = live.error().map(|e| e.to_string());
    let truncated = live.error().map_or(false, |e| e.is_truncation());
    let peak = live.stream().peak_buffer();
    if live.analyzer().info().is_none() {
        out.abandon();
        note!(
            "dsipc: no profile written: the stream did not parse: {}",
            clean(problem.as_deref().unwrap_or("no trace header"))
        );
        return Err(CliError::Exit(1));
    }
    let name = trace
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match write(
        live,
        format,
        Selection {
            managed_only: false,
        },
        out,
        (&name, process),
    ) {
        Ok(what) => note!(
            "dsipc: wrote {}: {} (receive buffer peak {} KiB)",
            display(dest),
            what,
            (peak + 1023) / 1024
        ),
        Err(e) => {
            note!("dsipc: no profile written: {}", clean(&e.to_string()));
            return Err(CliError::Exit(1));
        }
    }
    match problem {
        Some(p) if truncated => {
            note!(
                "dsipc: the profile covers what the trace holds: {}",
                clean(&p)
            );
            Ok(())
        }
        Some(p) => {
            note!(
                "dsipc: the stream did not parse: {}; the profile covers what precedes it",
                clean(&p)
            );
            Err(CliError::Exit(1))
        }
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_destinations() {
        assert_eq!(
            destination(
                ProfileFormat::parse("speedscope").unwrap(),
                Path::new("d/x.nettrace")
            ),
            Path::new("d/x.speedscope.json")
        );
        assert_eq!(
            destination(
                ProfileFormat::parse("folded").unwrap(),
                Path::new("x.nettrace")
            ),
            Path::new("x.folded")
        );
        assert!(ProfileFormat::parse("jsonl").is_err());
    }
}
