//! `dsipc`: a command-line client for the .NET Diagnostic IPC protocol.

mod args;
mod convert;
mod counters;
mod error;
mod gcdump;
mod help;
mod json;
mod monitor;
mod output;
mod providers;
mod ps;
mod serve;
mod stack;
mod term;
mod trace;

use std::ffi::{OsStr, OsString};
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use dsipc::payload::{DumpType, PerfMapType};
use dsipc::wire::Guid;
use dsipc_std::{DiagnosticsClient, Error, ProcessInfo};

use args::{parse_os, show, usage, Parsed, UsageError};
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
    let in_command = COMMANDS.contains(&command.as_str()) && command != "help";
    let result = match command.as_str() {
        "ps" => cmd_ps(&rest),
        "info" => cmd_info(&rest),
        "env" => cmd_env(&rest),
        "setenv" => cmd_setenv(&rest),
        "resume" => cmd_resume(&rest),
        "trace" => trace::cmd_trace(&rest),
        "stack" => stack::cmd_stack(&rest),
        "gcdump" => gcdump::cmd_gcdump(&rest),
        "dump" => cmd_dump(&rest),
        "perfmap" => cmd_perfmap(&rest),
        "startup-hook" => cmd_startup_hook(&rest),
        "attach-profiler" => cmd_attach_profiler(&rest),
        // These parse text arguments.
        "monitor" => monitor::cmd_monitor(&texts("every monitor argument", &rest)?),
        "convert" => convert::cmd_convert(&texts("every convert argument", &rest)?),
        "report" => convert::cmd_report(&texts("every report argument", &rest)?),
        "counters" => counters::cmd_counters(&texts("every counters argument", &rest)?),
        "serve" => serve::cmd_serve(&rest),
        // Subcommands to come go here, each as a `cmd_*` function taking the arguments
        // after the command name.
        "help" => match rest.first() {
            Some(c) => command_help(&c.to_string_lossy()),
            None => print_out(&format!("{}\n{}", help::GLOBAL, help::COMMON)),
        },
        _ => Err(CliError::Usage(format!(
            "unknown command {}{}",
            show(OsStr::new(&command)),
            args::did_you_mean(&command, COMMANDS)
        ))),
    };
    if in_command {
        result.map_err(|e| e.in_command(&command))
    } else {
        result
    }
}

/// Every command's name, for suggestions.
const COMMANDS: &[&str] = &[
    "ps",
    "info",
    "env",
    "setenv",
    "resume",
    "trace",
    "stack",
    "gcdump",
    "dump",
    "perfmap",
    "startup-hook",
    "attach-profiler",
    "monitor",
    "convert",
    "report",
    "counters",
    "serve",
    "help",
];

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

fn cmd_info(rest: &[OsString]) -> CliResult {
    let (p, common, pid) = pid_command(rest, &["PID"], &[], &["--json"])?;
    let info = common
        .client(pid, dsipc_std::DEFAULT_TIMEOUT)?
        .process_info()?;
    let text = if p.flag("--json") {
        info_json(&info)
    } else {
        info_text(&info)
    };
    print_out(&text)
}

fn info_text(info: &ProcessInfo) -> String {
    let opt = |o: &Option<String>| match o {
        Some(s) if s.is_empty() => "(empty)".to_string(),
        Some(s) => clean(s).into_owned(),
        None => "(not reported)".to_string(),
    };
    format!(
        "pid:                 {}\n\
         cookie:              {}\n\
         command line:        {}\n\
         os:                  {}\n\
         arch:                {}\n\
         entrypoint assembly: {}\n\
         clr version:         {}\n\
         runtime identifier:  {}\n\
         answered by:         {}\n",
        info.pid,
        info.cookie,
        clean(&info.command_line),
        clean(&info.os),
        clean(&info.arch),
        opt(&info.entrypoint_assembly),
        opt(&info.clr_version),
        opt(&info.runtime_identifier),
        info.command,
    )
}

/// `dsipc info --json`'s object (snake_case: dsipc's own format).
#[derive(serde::Serialize)]
struct InfoJson<'a> {
    pid: u64,
    cookie: String,
    command_line: &'a str,
    os: &'a str,
    arch: &'a str,
    entrypoint_assembly: Option<&'a str>,
    clr_version: Option<&'a str>,
    runtime_identifier: Option<&'a str>,
    command: &'static str,
}

fn info_json(info: &ProcessInfo) -> String {
    json::to_string(&InfoJson {
        pid: info.pid,
        cookie: info.cookie.to_string(),
        command_line: &info.command_line,
        os: &info.os,
        arch: &info.arch,
        entrypoint_assembly: info.entrypoint_assembly.as_deref(),
        clr_version: info.clr_version.as_deref(),
        runtime_identifier: info.runtime_identifier.as_deref(),
        command: info.command.name(),
    }) + "\n"
}

fn cmd_env(rest: &[OsString]) -> CliResult {
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

fn cmd_setenv(rest: &[OsString]) -> CliResult {
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

fn cmd_resume(rest: &[OsString]) -> CliResult {
    let (_, common, pid) = pid_command(rest, &["PID"], &[], &[])?;
    common
        .client(pid, dsipc_std::DEFAULT_TIMEOUT)?
        .resume_runtime()?;
    Ok(())
}

fn cmd_dump(rest: &[OsString]) -> CliResult {
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

fn cmd_perfmap(rest: &[OsString]) -> CliResult {
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

fn cmd_startup_hook(rest: &[OsString]) -> CliResult {
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

fn cmd_attach_profiler(rest: &[OsString]) -> CliResult {
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

    #[test]
    fn hex_and_pids() {
        assert_eq!(parse_hex("0x0aFF").unwrap(), vec![0x0a, 0xff]);
        assert!(parse_hex("abc").is_err());
        assert!(parse_hex("zz").is_err());
        assert!(args::pid(OsStr::new("0")).is_err());
    }

    #[test]
    fn json_has_nulls_for_missing_fields() {
        let mut info = ProcessInfo::new(dsipc::wire::Command::ProcessInfo, 7, Guid::NIL);
        info.command_line = "a \"b\"\n".into();
        info.os = "Linux".into();
        info.arch = "x64".into();
        let j = info_json(&info);
        assert!(j.contains("\"pid\":7"), "{}", j);
        assert!(j.contains("\"command_line\":\"a \\\"b\\\"\\n\""), "{}", j);
        assert!(j.contains("\"clr_version\":null"), "{}", j);
        let t = info_text(&info);
        assert!(t.contains("command line:        a \"b\"\\n\n"), "{}", t);
    }
}
