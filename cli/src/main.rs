//! `dsipc`: a command-line client for the .NET Diagnostic IPC protocol.

mod args;
mod convert;
mod counters;
mod dump;
mod env;
mod error;
mod gcdump;
mod help;
mod info;
mod json;
mod monitor;
mod output;
mod ps;
mod runtime;
mod serve;
mod stack;
mod term;
mod trace;

use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use dsipc_std::DiagnosticsClient;

use args::{parse_os, show, Parsed, UsageError};
use error::{CliError, CliResult};
use term::{clean, note};

/// Every argument as text, or a usage error naming `what`.
fn texts(what: &str, args: &[OsString]) -> Result<Vec<String>, UsageError> {
    args.iter()
        .map(|a| args::text(what, a).map(str::to_string))
        .collect()
}

/// Options shared by every command.
struct Common {
    tmpdir: Option<PathBuf>,
    timeout: Option<Duration>,
}

impl Common {
    fn from(p: &Parsed) -> Result<Common, UsageError> {
        let timeout = match p.value_os("--timeout") {
            Some(t) => Some(args::duration("--timeout", t)?),
            None => None,
        };
        Ok(Common {
            tmpdir: p.value_path("--tmpdir")?,
            timeout,
        })
    }

    fn timeout_or(&self, default: Duration) -> Duration {
        self.timeout.unwrap_or(default)
    }

    /// A client for `pid` with the command's timeout.
    fn client(&self, pid: u32, default_timeout: Duration) -> Result<DiagnosticsClient, CliError> {
        let client = DiagnosticsClient::for_pid_in(pid, self.tmpdir.as_deref())?;
        Ok(client.with_timeout(self.timeout_or(default_timeout)))
    }
}

/// Makes a path absolute against the current directory (the runtime resolves relative
/// paths against its own), as text (the runtime takes UTF-16). Empty paths are refused.
fn absolute(what: &str, path: &OsStr) -> Result<String, CliError> {
    let p = args::path(what, path)?;
    args::text(what, path)?;
    let abs = if p.is_absolute() {
        p
    } else {
        std::env::current_dir()
            .map_err(|e| CliError::Failed(format!("cannot read the current directory: {}", e)))?
            .join(p)
    };
    match abs.into_os_string().into_string() {
        Ok(s) => Ok(s),
        Err(a) => Err(CliError::Usage(format!(
            "{} must be valid UTF-8 (the runtime takes UTF-16 text), not {}",
            what,
            show(&a)
        ))),
    }
}

/// Writes `text` to stdout and flushes.
fn print_out(text: &str) -> CliResult {
    let out = io::stdout();
    let mut out = out.lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().skip(1).collect();
    match run(argv) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let (code, message) = e.report();
            if let Some(m) = message {
                note!("dsipc: {}", clean(&m));
            }
            ExitCode::from(code)
        }
    }
}

fn run(argv: Vec<OsString>) -> CliResult {
    // Global options may come before the command too.
    let mut i = 0;
    let mut leading: Vec<OsString> = Vec::new();
    while i < argv.len() && argv[i].to_string_lossy().starts_with('-') {
        let a = argv[i].to_string_lossy().into_owned();
        if a == "-h" || a == "--help" {
            return print_out(&format!("{}\n{}", help::GLOBAL, help::COMMON));
        }
        if a == "-V" || a == "--version" {
            return print_out(&format!("dsipc {}\n", env!("CARGO_PKG_VERSION")));
        }
        leading.push(argv[i].clone());
        if args::GLOBAL_VALUES.contains(&a.as_str()) {
            match argv.get(i + 1) {
                Some(v) => {
                    leading.push(v.clone());
                    i += 1;
                }
                None => return Err(CliError::Usage(format!("{} needs a value", a))),
            }
        }
        i += 1;
    }
    let command = match argv.get(i) {
        Some(c) => c.to_string_lossy().into_owned(),
        None => {
            // Say what is wrong with the options given before saying the command is missing.
            parse_os(&leading, &[], &[])?;
            return Err(CliError::Usage("no command given".into()));
        }
    };
    // dotnet-trace's, dotnet-stack's and dotnet-dump's verb forms, taken as typed.
    let mut first_arg = i + 1;
    let mut command = command;
    if let Some(verb) = argv.get(i + 1).and_then(|v| v.to_str()) {
        if let Some(&(_, _, to)) = VERBS.iter().find(|(c, v, _)| *c == command && *v == verb) {
            command = to.to_string();
            first_arg += 1;
        }
    }
    let mut rest = leading;
    rest.extend(argv[first_arg..].iter().cloned());
    // After `--` every argument is a value ("setenv PID NAME -- --help").
    if rest
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "-h" || a == "--help")
    {
        // `counters monitor --help`: the subcommand's own help.
        if command == "counters" {
            let sub = rest.iter().find(|a| !a.to_string_lossy().starts_with('-'));
            if let Some(text) = sub.and_then(|s| counters::usage_of(&s.to_string_lossy())) {
                return print_out(&format!("{}\n{}", text, help::COMMON_SHORT));
            }
        }
        return command_help(&command);
    }
    if command == "help" {
        return match rest.first() {
            Some(c) => command_help(&c.to_string_lossy()),
            None => print_out(&format!("{}\n{}", help::GLOBAL, help::COMMON)),
        };
    }
    match COMMANDS.iter().find(|c| c.0 == command) {
        Some((_, run)) => run(&rest).map_err(|e| e.in_command(&command)),
        None => Err(CliError::Usage(format!(
            "unknown command {}{}",
            show(OsStr::new(&command)),
            args::did_you_mean(&command, &names())
        ))),
    }
}

/// A command: the arguments after its name (and the global options before it).
type Command = fn(&[OsString]) -> CliResult;

/// Every command, by name: one module each.
const COMMANDS: &[(&str, Command)] = &[
    ("ps", cmd_ps),
    ("info", info::cmd_info),
    ("env", env::cmd_env),
    ("setenv", env::cmd_setenv),
    ("resume", runtime::cmd_resume),
    ("trace", trace::cmd_trace),
    ("stack", stack::cmd_stack),
    ("gcdump", gcdump::cmd_gcdump),
    ("dump", dump::cmd_dump),
    ("perfmap", runtime::cmd_perfmap),
    ("startup-hook", runtime::cmd_startup_hook),
    ("attach-profiler", runtime::cmd_attach_profiler),
    ("monitor", |rest| {
        monitor::cmd_monitor(&texts("every monitor argument", rest)?)
    }),
    ("convert", |rest| {
        convert::cmd_convert(&texts("every convert argument", rest)?)
    }),
    ("report", |rest| {
        convert::cmd_report(&texts("every report argument", rest)?)
    }),
    ("counters", |rest| {
        counters::cmd_counters(&texts("every counters argument", rest)?)
    }),
    ("serve", serve::cmd_serve),
];

/// Every command's name and `help`, for suggestions.
fn names() -> Vec<&'static str> {
    COMMANDS.iter().map(|c| c.0).chain(["help"]).collect()
}

/// The dotnet-* tools' verb forms: `(command, verb, dsipc command)`; `gcdump collect|report`
/// and `counters monitor|collect` are dsipc's own spellings already.
const VERBS: &[(&str, &str, &str)] = &[
    ("trace", "collect", "trace"),
    ("trace", "ps", "ps"),
    ("trace", "convert", "convert"),
    ("stack", "report", "stack"),
    ("stack", "ps", "ps"),
    ("dump", "collect", "dump"),
    ("dump", "ps", "ps"),
    ("gcdump", "ps", "ps"),
    ("counters", "ps", "ps"),
];

/// `dsipc COMMAND --help`: the command's own help; an unknown command is a usage error.
fn command_help(command: &str) -> CliResult {
    match help::command(command) {
        Some(text) => print_out(&format!("{}\n{}", text, help::COMMON_SHORT)),
        None => Err(CliError::Usage(format!(
            "unknown command {}",
            show(OsStr::new(command))
        ))),
    }
}

/// The options that pick the process instead of the PID argument, spelled as the
/// dotnet-* tools spell them.
const TARGET_VALUES: [&str; 4] = ["-p", "--process-id", "-n", "--name"];

/// [`TARGET_VALUES`] and dotnet-gcdump's `--pid`.
const TARGET_VALUES_PID: [&str; 5] = ["-p", "--process-id", "--pid", "-n", "--name"];

/// The process an option names (`-p/--process-id/--pid PID` or `-n/--name NAME`), if one
/// does; both kinds at once is a usage error.
fn target_option(p: &Parsed, common: &Common) -> Result<Option<u32>, CliError> {
    let by_id = match (p.value_alias("-p", "--process-id")?, p.value_os("--pid")) {
        (Some(_), Some(_)) => {
            return Err(CliError::Usage(
                "-p, --process-id and --pid are the same option: give one".into(),
            ))
        }
        (a, b) => a.or(b),
    };
    match (by_id, p.value_alias("-n", "--name")?) {
        (None, None) => Ok(None),
        (Some(_), Some(_)) => Err(CliError::Usage(
            "give the process by -p PID or by -n NAME, not both".into(),
        )),
        (Some(id), None) => Ok(Some(args::pid(id)?)),
        (None, Some(name)) => Ok(Some(ps::pid_by_name(common, args::text("-n NAME", name)?)?)),
    }
}

/// Parses a command's arguments: positionals named by `names`, the first being the PID,
/// which `-p/--process-id PID` or `-n/--name NAME` may give instead (as dotnet-trace,
/// dotnet-stack and dotnet-dump take it); the PID is then `positionals[0]` all the same.
fn pid_command(
    rest: &[OsString],
    names: &[&str],
    values: &[&'static str],
    flags: &[&'static str],
) -> Result<(Parsed, Common, u32), CliError> {
    let values: Vec<&'static str> = values.iter().chain(TARGET_VALUES.iter()).copied().collect();
    let mut p = parse_os(rest, &values, flags)?;
    let common = Common::from(&p)?;
    let pid = match target_option(&p, &common)? {
        Some(pid) => pid,
        None => {
            p.expect_positionals(names)?;
            let pid = args::pid(&p.positionals[0])?;
            return Ok((p, common, pid));
        }
    };
    if p.positionals.len() == names.len() && args::pid(&p.positionals[0]).is_ok() {
        return Err(CliError::Usage(format!(
            "the process is given twice: as {} and with -p or -n",
            show(&p.positionals[0])
        )));
    }
    p.expect_positionals(&names[1..])?;
    p.positionals.insert(0, OsString::from(pid.to_string()));
    Ok((p, common, pid))
}

fn cmd_ps(rest: &[OsString]) -> CliResult {
    let p = parse_os(rest, &[], &["--verbose", "-v"])?;
    p.expect_positionals(&[])?;
    let common = Common::from(&p)?;
    ps::ps(&common, p.flag("--verbose") || p.flag("-v"))
}
