//! `dsipc convert` and `dsipc report`: nettrace files to jsonl, folded stacks, speedscope and
//! pprof, and the top methods of a CPU profile.

mod analyze;
mod jsonl;
pub mod live;
mod output;

use std::io::Write;
use std::path::{Path, PathBuf};

use dsipc_trace::format::{report, ProfileFormat};
use dsipc_trace::AnalyzerLimits;

use crate::args::{parse, UsageError};
use analyze::{analyze, Analysis};
use output::Output;

/// Why `convert` or `report` failed.
pub enum Failure {
    /// Bad arguments.
    Usage(String),
    /// The command ran and failed (bad or truncated file, I/O error).
    Failed(String),
}

impl From<UsageError> for Failure {
    fn from(e: UsageError) -> Self {
        Failure::Usage(e.0)
    }
}

pub use dsipc_trace::format::Selection;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Jsonl,
    Folded,
    Speedscope,
    Pprof,
}

impl Format {
    fn parse(s: &str) -> Result<Format, Failure> {
        match s {
            "jsonl" => Ok(Format::Jsonl),
            "folded" => Ok(Format::Folded),
            "speedscope" => Ok(Format::Speedscope),
            "pprof" => Ok(Format::Pprof),
            other => Err(Failure::Usage(format!(
                "--format wants jsonl, folded, speedscope or pprof, not {:?}",
                other
            ))),
        }
    }

    fn extension(self) -> &'static str {
        match self {
            Format::Jsonl => ".jsonl",
            Format::Folded => ".folded",
            Format::Speedscope => ".speedscope.json",
            Format::Pprof => ".pb.gz",
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
fn limits(p: &crate::args::Parsed) -> Result<AnalyzerLimits, Failure> {
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
                    return Err(Failure::Usage(format!(
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
pub fn cmd_convert(args: &[String]) -> Result<(), Failure> {
    let mut values = vec!["--format", "-o", "--output"];
    values.extend_from_slice(&LIMIT_OPTIONS);
    let p = parse(args, &values, &["--managed-only"])?;
    let limits = limits(&p)?;
    p.expect_positionals(&["FILE"])?;
    let input = PathBuf::from(&p.positionals[0]);
    let format = Format::parse(p.value("--format").unwrap_or("speedscope"))?;
    #[cfg(not(feature = "pprof"))]
    if format == Format::Pprof {
        return Err(Failure::Failed(
            "this dsipc was built without pprof output (the Windows build leaves it out)".into(),
        ));
    }
    let sel = Selection {
        managed_only: p.flag("--managed-only"),
    };
    let dest = match p.value("-o").or_else(|| p.value("--output")) {
        Some(o) => o.to_string(),
        None => output::default_name(&input, format.extension())
            .to_string_lossy()
            .into_owned(),
    };
    if dest != "-" && same_file(&input, Path::new(&dest)) {
        return Err(Failure::Usage(format!("output {} is the input file", dest)));
    }
    // Open the input before creating anything.
    let file = std::fs::File::open(&input)
        .map_err(|e| Failure::Failed(format!("{}: {}", input.display(), e)))?;
    let mut out = Output::create(&dest).map_err(|e| Failure::Failed(format!("{}: {}", dest, e)))?;
    let result = convert_into(file, &input, format, sel, limits, &mut out);
    let analysis = match result {
        Ok(a) => a,
        Err(e) => {
            out.abandon();
            return Err(Failure::Failed(e));
        }
    };
    let written = out
        .commit()
        .map_err(|e| Failure::Failed(format!("{}: {}", dest, e)))?;
    let s = &analysis.summary;
    let what = if format == Format::Jsonl {
        format!("{} events", s.events)
    } else {
        format!(
            "{} samples, {} stacks, {} frames ({} of {} addresses unresolved)",
            analysis.profile.total_samples(),
            analysis.profile.stacks.len(),
            analysis.profile.frames.len(),
            analysis.profile.unresolved_ips,
            analysis.profile.distinct_ips
        )
    };
    if let Some(path) = written {
        eprintln!("dsipc: wrote {}: {}", path.display(), what);
    }
    if s.lost > 0 {
        eprintln!("dsipc: the trace lost {} events (sequence gaps)", s.lost);
    }
    match problem_line(&input, &analysis) {
        Some(line) => Err(Failure::Failed(format!(
            "{} (converted what precedes it)",
            line
        ))),
        None => Ok(()),
    }
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
) -> Result<Analysis, String> {
    if format == Format::Jsonl {
        let a = analyze(file, input, Some(out.writer()), limits)?;
        return Ok(a);
    }
    let a = analyze(file, input, None, limits)?;
    let mut a = a;
    a.meta.name = input
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let profile_format = match format {
        Format::Folded => ProfileFormat::Folded,
        Format::Speedscope => ProfileFormat::Speedscope,
        _ => ProfileFormat::Pprof,
    };
    profile_format
        .write(&a.profile, sel, &a.meta, out.writer())
        .map_err(|e| format!("writing: {}", e))?;
    Ok(a)
}

/// `dsipc report FILE [--top N] [--managed-only]`.
pub fn cmd_report(args: &[String]) -> Result<(), Failure> {
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
                return Err(Failure::Usage(format!(
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
        .map_err(|e| Failure::Failed(format!("{}: {}", input.display(), e)))?;
    let a = analyze(file, &input, None, limits).map_err(Failure::Failed)?;
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
    let mut stdout = std::io::stdout();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|_| stdout.flush())
    {
        Ok(()) => {}
        // A reader that stopped early (`| head`) is not a failure.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
        Err(e) => return Err(Failure::Failed(format!("writing the report: {}", e))),
    }
    match problem_line(&input, &a) {
        Some(line) => Err(Failure::Failed(format!(
            "{} (the report covers what precedes it)",
            line
        ))),
        None => Ok(()),
    }
}
