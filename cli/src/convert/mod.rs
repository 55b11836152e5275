//! `dsipc convert` and `dsipc report`: nettrace files to jsonl, folded stacks, speedscope,
//! pprof and flame graphs, and the top methods of a CPU profile.

pub mod live;

use std::path::{Path, PathBuf};

use dsipc_trace::analysis::{self, Analysis, AnalysisError};
use dsipc_trace::format::{report, ProfileFormat};
use dsipc_trace::AnalyzerLimits;

use crate::args::parse;
use crate::error::CliError;
use crate::output::{self, Output};

pub use dsipc_trace::format::Selection;

/// `--format`: JSON lines, or one of the trace layer's profile formats (whose extension
/// names the default output, as `dsipc trace --format` names its profile).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Jsonl,
    Profile(ProfileFormat),
}

impl Format {
    fn parse(s: &str) -> Result<Format, CliError> {
        match s {
            "jsonl" => Ok(Format::Jsonl),
            "folded" | "speedscope" | "pprof" | "flamegraph" => ProfileFormat::parse(s)
                .map(Format::Profile)
                // A format this build leaves out (the Windows build has no pprof).
                .map_err(|e| CliError::Failed(format!("--format {}: {}", s, e))),
            other => Err(CliError::Usage(format!(
                "--format wants jsonl, folded, speedscope, pprof or flamegraph, not {:?}",
                other
            ))),
        }
    }

    fn extension(self) -> &'static str {
        match self {
            Format::Jsonl => ".jsonl",
            Format::Profile(f) => f.extension(),
        }
    }
}

/// The error line for a file that did not parse to its end, or went past a limit.
fn problem_line(path: &Path, a: &Analysis) -> Option<String> {
    match (&a.problem, &a.limit) {
        (Some(p), _) => Some(format!("{}: {}", path.display(), p)),
        (None, Some(l)) => Some(format!("{}: {}", path.display(), l)),
        (None, None) => None,
    }
}

/// The options that raise the analysis limits (`--max-metadata N`, `--max-threads N`,
/// `--max-stack-frames N`).
const LIMIT_OPTIONS: [&str; 3] = ["--max-metadata", "--max-threads", "--max-stack-frames"];

/// The analysis limits, defaults raised by the options given.
fn limits(p: &crate::args::Parsed) -> Result<AnalyzerLimits, CliError> {
    let mut l = AnalyzerLimits::default();
    for (name, slot) in [
        ("--max-metadata", &mut l.max_metadata),
        ("--max-threads", &mut l.profile.max_threads),
        ("--max-stack-frames", &mut l.profile.max_stack_frames),
    ] {
        if let Some(v) = p.value(name) {
            *slot = match v.parse::<usize>() {
                Ok(n) if n > 0 => n,
                _ => {
                    return Err(CliError::Usage(format!(
                        "{} wants a positive integer, not {:?}",
                        name, v
                    )))
                }
            };
        }
    }
    Ok(l)
}

/// `dsipc convert FILE [--format F] [-o OUT|-] [--managed-only]`.
pub fn cmd_convert(args: &[String]) -> Result<(), CliError> {
    let mut values = vec!["--format", "-o", "--output"];
    values.extend_from_slice(&LIMIT_OPTIONS);
    let p = parse(args, &values, &["--managed-only", "--force"])?;
    let limits = limits(&p)?;
    p.expect_positionals(&["FILE"])?;
    let input = PathBuf::from(&p.positionals[0]);
    let format = Format::parse(
        &p.value_lower("--format")?
            .unwrap_or_else(|| "speedscope".into()),
    )?;
    let sel = Selection {
        managed_only: p.flag("--managed-only"),
    };
    let dest = match p.value("-o").or_else(|| p.value("--output")) {
        Some(o) => o.to_string(),
        // With --force the default name is replaced; without, a taken one is left alone
        // and the next free name is used (it is said on stderr, as every name written).
        None if p.flag("--force") => output::default_name(&input, format.extension())
            .to_string_lossy()
            .into_owned(),
        None => output::free_default_name(&input, format.extension())
            .to_string_lossy()
            .into_owned(),
    };
    if dest != "-" && same_file(&input, Path::new(&dest)) {
        return Err(CliError::Usage(format!(
            "output {} is the input file",
            dest
        )));
    }
    // Open the input before creating anything.
    let file = std::fs::File::open(&input)
        .map_err(|e| CliError::Failed(format!("{}: {}", input.display(), e)))?;
    let mut out = if dest == "-" {
        Output::stdout()
    } else {
        Output::create(Path::new(&dest), p.flag("--force"))?
    };
    let result = convert_into(file, &input, format, sel, limits, &mut out);
    let analysis = match result {
        Ok(a) => a,
        Err(e) => {
            out.abandon();
            return Err(e);
        }
    };
    let written = out.commit()?;
    let s = &analysis.summary;
    let what = if format == Format::Jsonl {
        format!("{} events", s.events)
    } else {
        analysis.profile.summary()
    };
    if let Some(path) = written {
        eprintln!("dsipc: wrote {}: {}", path.display(), what);
    }
    if s.lost > 0 {
        eprintln!("dsipc: the trace lost {} events (sequence gaps)", s.lost);
    }
    match problem_line(&input, &analysis) {
        Some(line) => Err(CliError::Failed(format!(
            "{} (converted what precedes it)",
            line
        ))),
        None => Ok(()),
    }
}

/// The trace layer's pass over `file` (named `input` in messages), as the CLI says its
/// errors.
fn analyze(
    file: std::fs::File,
    input: &Path,
    jsonl_out: Option<&mut dyn std::io::Write>,
    limits: AnalyzerLimits,
) -> Result<Analysis, CliError> {
    analysis::analyze(file, jsonl_out, limits).map_err(|e| match e {
        AnalysisError::Read(e) => CliError::io(format!("reading {}", input.display()), e),
        AnalysisError::Write(e) => CliError::io("", e),
        e => CliError::Failed(format!("{}: {}", input.display(), e)),
    })
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn convert_into(
    file: std::fs::File,
    input: &Path,
    format: Format,
    sel: Selection,
    limits: AnalyzerLimits,
    out: &mut Output,
) -> Result<Analysis, CliError> {
    let profile_format = match format {
        Format::Jsonl => return analyze(file, input, Some(out.writer()), limits),
        Format::Profile(f) => f,
    };
    let mut a = analyze(file, input, None, limits)?;
    a.meta.name = input
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    profile_format
        .write(&a.profile, sel, &a.meta, out.writer())
        .map_err(|e| CliError::io("", e))?;
    Ok(a)
}

/// `dsipc report FILE [--top N] [--managed-only]`.
pub fn cmd_report(args: &[String]) -> Result<(), CliError> {
    let mut values = vec!["--top"];
    values.extend_from_slice(&LIMIT_OPTIONS);
    let p = parse(args, &values, &["--managed-only"])?;
    let limits = limits(&p)?;
    p.expect_positionals(&["FILE"])?;
    let input = PathBuf::from(&p.positionals[0]);
    let top = match p.value("--top") {
        Some(t) => match t.parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(CliError::Usage(format!(
                    "--top wants a positive integer, not {:?}",
                    t
                )))
            }
        },
        None => 10,
    };
    let sel = Selection {
        managed_only: p.flag("--managed-only"),
    };
    let file = std::fs::File::open(&input)
        .map_err(|e| CliError::Failed(format!("{}: {}", input.display(), e)))?;
    let a = analyze(file, &input, None, limits)?;
    let mut text = report::render(&a.profile, sel, top);
    if a.summary.lost > 0 {
        text.push_str(&format!(
            "\n{} events lost (sequence gaps)\n",
            a.summary.lost
        ));
    }
    if a.profile.unresolved_ips > 0 {
        text.push_str(&format!(
            "{} of {} sampled addresses unresolved{}\n",
            a.profile.unresolved_ips,
            a.profile.distinct_ips,
            if a.summary.methods == 0 {
                " (no method events: was the trace stopped cleanly, with rundown?)"
            } else {
                ""
            }
        ));
    }
    crate::print_out(&text)?;
    match problem_line(&input, &a) {
        Some(line) => Err(CliError::Failed(format!(
            "{} (the report covers what precedes it)",
            line
        ))),
        None => Ok(()),
    }
}
