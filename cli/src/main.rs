//! `dsipc`: a command-line client for the .NET Diagnostic IPC protocol.

mod args;
mod convert;
mod counters;
mod json;
mod monitor;
mod providers;
mod ps;
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
use term::{clean, note};

const USAGE: &str = "\
dsipc: talk to .NET runtimes over the Diagnostic IPC protocol

usage: dsipc COMMAND [ARGS] [--tmpdir DIR] [--timeout SECS]

commands:
  ps                               list diagnosable processes: pid, command line, socket
  info PID [--json]                process information (ProcessInfo3, 2 or 1)
  env PID [--max-bytes N]          the process environment, one NAME=VALUE per line
                                   (refused when the runtime announces more than N
                                   bytes; default 16 MiB)
  setenv PID NAME VALUE            set an environment variable in the process
  setenv PID NAME --unset          remove it
  resume PID                       resume a runtime paused at startup
  trace PID -o FILE [--providers SPEC] [--duration SECS] [--no-rundown] [--buffer-mb N]
        [--format speedscope|folded|pprof]
                                   EventPipe trace to a .nettrace file; stops at the
                                   duration or on Ctrl-C (StopTracing, then drains; a
                                   second Ctrl-C keeps what was received and exits).
                                   FILE is only written once the session has started.
                                   --format also writes the profile, built while the
                                   stream arrives, beside FILE (same stem, .speedscope.json,
                                   .folded or .pb.gz). On a terminal a progress line shows
                                   time, MiB, events, samples and lost events
  stack PID [--format text|json]   every thread's managed stack, as dotnet-stack report
                                   prints it: a short SampleProfiler session with
                                   rundown, stopped once every thread has a sample; each
                                   thread's latest sample, frames innermost first
                                   (json: dotnet-monitor's CallStackResult)
  dump PID -o PATH [--type normal|heap|triage|full]
                                   write a dump (PATH as the target process sees it)
  perfmap PID enable|disable [--type all|jitdump|perfmap]
  startup-hook PID PATH            load a startup hook assembly
  attach-profiler PID --clsid GUID --path PATH [--data HEX]
  convert FILE [--format jsonl|folded|speedscope|pprof] [-o OUT|-] [--managed-only]
                                   convert a .nettrace file: events as JSON lines, or its
                                   CPU samples as folded stacks, speedscope or gzipped
                                   pprof (default speedscope; default OUT beside FILE)
  report FILE [--top N] [--managed-only]
                                   top N (default 10) methods by exclusive and inclusive
                                   CPU samples
                                   convert and report stop with an error naming the limit
                                   when a trace goes past one: --max-metadata N (records,
                                   default 100000), --max-threads N (sampled threads,
                                   default 100000), --max-stack-frames N (default 4096)
  monitor --listen PATH [--resume] [--json] [--max-connections N]
          [--metrics ADDR [--counters LIST] [--refresh-interval SECS]]
                                   reverse diagnostic port: runtimes started with
                                   DOTNET_DiagnosticPorts=PATH,connect[,suspend] connect
                                   here; one line per Advertise (pid, cookie); --resume
                                   resumes suspended runtimes; Ctrl-C removes the socket
                                   (on Windows PATH is a pipe name). Connections are
                                   served at once, each with --timeout to advertise and
                                   to answer the resume; past N held connections
                                   (default 1000) the oldest idle one is closed;
                                   --metrics serves the counters of every runtime seen
                                   at http://ADDR/metrics
  counters monitor|collect|export PID... [--counters LIST] [--refresh-interval SECS]
                                   live counters (dotnet-counters); see dsipc counters --help

options for every command:
  --tmpdir DIR     look for diagnostic sockets only in DIR (default: the target's TMPDIR,
                   /tmp, and /proc/PID/root for other mount namespaces)
  --timeout SECS   the command's whole time budget with the runtime: connecting, every
                   reply, and every fallback to an older command version together
                   (default 10; 3 for ps, all probes in parallel; 120 for dump). For
                   trace it bounds the start, the StopTracing reply, and the drain after
                   the stop was answered; the session itself runs until stopped

SPEC is dotnet-trace's Name[:Keywords[:Level[:Args]]],... (keywords in hex, level 0-5 or
a name). Without --providers: Microsoft-DotNETCore-SampleProfiler:0xF00000000000:4 and
Microsoft-Windows-DotNETRuntime:0x14C14FCCBD:4 (dotnet-trace's cpu-sampling profile).

Text from runtimes is printed with control characters escaped (\\n, \\x1b, ...).

Exit status: 0 on success; 1 when the command failed (including a trace whose stream
ended before any stop without its end-of-stream marker, or did not end after the stop:
the bytes received stay in FILE); 2 on a usage error; 130 when a trace was interrupted
by a second Ctrl-C (what was received is kept); 141 when standard output was closed
(broken pipe), silently.
";

impl From<convert::Failure> for CliError {
    fn from(f: convert::Failure) -> Self {
        match f {
            convert::Failure::Usage(m) => CliError::Usage(m),
            convert::Failure::Failed(m) => CliError::Other(m),
        }
    }
}

/// Every argument as text, or a usage error naming `what`.
fn texts(what: &str, args: &[OsString]) -> Result<Vec<String>, UsageError> {
    args.iter()
        .map(|a| args::text(what, a).map(str::to_string))
        .collect()
}

/// Why a command failed.
enum CliError {
    Usage(String),
    Ipc(Error),
    Other(String),
    /// An I/O error (a broken pipe on stdout ends the command quietly).
    Io(io::Error),
    /// Already reported: exit with this status.
    Exit(u8),
}

impl From<UsageError> for CliError {
    fn from(e: UsageError) -> Self {
        CliError::Usage(e.0)
    }
}

impl From<Error> for CliError {
    fn from(e: Error) -> Self {
        CliError::Ipc(e)
    }
}

impl From<io::Error> for CliError {
    fn from(e: io::Error) -> Self {
        CliError::Io(e)
    }
}

type CliResult = Result<(), CliError>;

/// Options shared by every command.
struct Common {
    tmpdir: Option<PathBuf>,
    timeout: Option<Duration>,
}

impl Common {
    fn from(p: &Parsed) -> Result<Common, UsageError> {
        let timeout = match p.value_os("--timeout") {
            Some(t) => Some(parse_seconds("--timeout", t)?),
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

fn parse_seconds(what: &str, s: &OsStr) -> Result<Duration, UsageError> {
    match s.to_str().map(str::parse::<f64>) {
        Some(Ok(v)) if v.is_finite() && v > 0.0 && v < 1e9 => Ok(Duration::from_secs_f64(v)),
        _ => usage(format!(
            "{} wants a positive number of seconds, not {}",
            what,
            show(s)
        )),
    }
}

fn parse_pid(s: &OsStr) -> Result<u32, UsageError> {
    match s.to_str().map(str::parse::<u32>) {
        Some(Ok(p)) if p > 0 => Ok(p),
        _ => usage(format!("PID must be a positive integer, not {}", show(s))),
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
            .map_err(|e| CliError::Other(format!("cannot read the current directory: {}", e)))?
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
        Err(CliError::Usage(msg)) => {
            note!("dsipc: {} (see dsipc --help)", clean(&msg));
            ExitCode::from(2)
        }
        Err(CliError::Ipc(e)) => {
            note!("dsipc: {}", clean(&e.to_string()));
            ExitCode::from(1)
        }
        Err(CliError::Other(msg)) => {
            note!("dsipc: {}", clean(&msg));
            ExitCode::from(1)
        }
        // Whoever read our output has gone: leave quietly, as if killed by SIGPIPE.
        Err(CliError::Io(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::from(141),
        Err(CliError::Io(e)) => {
            note!("dsipc: cannot write the output: {}", clean(&e.to_string()));
            ExitCode::from(1)
        }
        Err(CliError::Exit(code)) => ExitCode::from(code),
    }
}

fn run(argv: Vec<OsString>) -> CliResult {
    // Global options may come before the command too.
    let mut i = 0;
    let mut leading: Vec<OsString> = Vec::new();
    while i < argv.len() && argv[i].to_string_lossy().starts_with('-') {
        let a = argv[i].to_string_lossy().into_owned();
        if a == "-h" || a == "--help" {
            return print_out(USAGE);
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
    let mut rest = leading;
    rest.extend(argv[i + 1..].iter().cloned());
    // After `--` every argument is a value ("setenv PID NAME -- --help").
    if rest
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "-h" || a == "--help")
    {
        return print_out(if command == "counters" {
            counters::USAGE
        } else {
            USAGE
        });
    }
    match command.as_str() {
        "ps" => cmd_ps(&rest),
        "info" => cmd_info(&rest),
        "env" => cmd_env(&rest),
        "setenv" => cmd_setenv(&rest),
        "resume" => cmd_resume(&rest),
        "trace" => trace::cmd_trace(&rest),
        "stack" => stack::cmd_stack(&rest),
        "dump" => cmd_dump(&rest),
        "perfmap" => cmd_perfmap(&rest),
        "startup-hook" => cmd_startup_hook(&rest),
        "attach-profiler" => cmd_attach_profiler(&rest),
        // These parse text arguments.
        "monitor" => monitor::cmd_monitor(&texts("every monitor argument", &rest)?),
        "convert" => {
            convert::cmd_convert(&texts("every convert argument", &rest)?).map_err(CliError::from)
        }
        "report" => {
            convert::cmd_report(&texts("every report argument", &rest)?).map_err(CliError::from)
        }
        "counters" => {
            counters::cmd_counters(&texts("every counters argument", &rest)?).map_err(|e| match e {
                counters::CountersError::Usage(m) => CliError::Usage(m),
                counters::CountersError::Failed(m) => CliError::Other(m),
            })
        }
        // Subcommands to come go here, each as a `cmd_*` function taking the arguments
        // after the command name.
        "help" => print_out(USAGE),
        _ => Err(CliError::Usage(format!(
            "unknown command {}",
            show(OsStr::new(&command))
        ))),
    }
}

/// Parses a command's arguments: positionals named by `names`, the first being the PID.
fn pid_command(
    rest: &[OsString],
    names: &[&str],
    values: &[&'static str],
    flags: &[&'static str],
) -> Result<(Parsed, Common, u32), CliError> {
    let p = parse_os(rest, values, flags)?;
    p.expect_positionals(names)?;
    let common = Common::from(&p)?;
    let pid = parse_pid(&p.positionals[0])?;
    Ok((p, common, pid))
}

fn cmd_ps(rest: &[OsString]) -> CliResult {
    let p = parse_os(rest, &[], &[])?;
    p.expect_positionals(&[])?;
    let common = Common::from(&p)?;
    ps::ps(&common)
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

fn info_json(info: &ProcessInfo) -> String {
    let mut o = json::Object::new();
    o.number("pid", info.pid);
    o.string("cookie", &info.cookie.to_string());
    o.string("command_line", &info.command_line);
    o.string("os", &info.os);
    o.string("arch", &info.arch);
    o.opt_string("entrypoint_assembly", info.entrypoint_assembly.as_deref());
    o.opt_string("clr_version", info.clr_version.as_deref());
    o.opt_string("runtime_identifier", info.runtime_identifier.as_deref());
    o.string("command", info.command.name());
    o.finish() + "\n"
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
        return Err(CliError::Io(e));
    }
    let flushed = out.flush();
    result?;
    flushed?;
    Ok(())
}

fn cmd_setenv(rest: &[OsString]) -> CliResult {
    let p = parse_os(rest, &[], &["--unset"])?;
    let common = Common::from(&p)?;
    let unset = p.flag("--unset");
    if unset {
        p.expect_positionals(&["PID", "NAME"])?;
    } else {
        p.expect_positionals(&["PID", "NAME", "VALUE (or --unset)"])?;
    }
    let pid = parse_pid(&p.positionals[0])?;
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
    let (p, common, pid) = pid_command(rest, &["PID"], &["-o", "--output", "--type"], &[])?;
    let path = match p.value_alias("-o", "--output")? {
        Some(o) => absolute("-o PATH", o)?,
        None => return Err(CliError::Usage("dump needs -o PATH".into())),
    };
    let type_name = p.value_text("--type")?.unwrap_or("normal");
    let kind = match type_name {
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
    let client = common.client(pid, Duration::from_secs(120))?;
    let start = Instant::now();
    client.write_dump(&path, kind, 0)?;
    print_out(&format!(
        "wrote a {} dump of pid {} to {} in {:.2} s\n",
        type_name,
        pid,
        clean(&path),
        start.elapsed().as_secs_f64()
    ))
}

fn cmd_perfmap(rest: &[OsString]) -> CliResult {
    let (p, common, pid) = pid_command(rest, &["PID", "enable|disable"], &["--type"], &[])?;
    let action = p.positionals[1].to_string_lossy().into_owned();
    let type_name = p.value_text("--type")?;
    // The whole invocation is checked before connecting.
    let kind = match action.as_str() {
        "enable" => match type_name.unwrap_or("all") {
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
    fn hex_and_seconds() {
        assert_eq!(parse_hex("0x0aFF").unwrap(), vec![0x0a, 0xff]);
        assert!(parse_hex("abc").is_err());
        assert!(parse_hex("zz").is_err());
        assert_eq!(
            parse_seconds("x", OsStr::new("1.5")).unwrap(),
            Duration::from_millis(1500)
        );
        assert!(parse_seconds("x", OsStr::new("-1")).is_err());
        assert!(parse_seconds("x", OsStr::new("nan")).is_err());
        assert!(parse_pid(OsStr::new("0")).is_err());
    }

    #[test]
    fn json_has_nulls_for_missing_fields() {
        let info = ProcessInfo {
            command: dsipc::wire::Command::ProcessInfo,
            pid: 7,
            cookie: Guid::NIL,
            command_line: "a \"b\"\n".into(),
            os: "Linux".into(),
            arch: "x64".into(),
            entrypoint_assembly: None,
            clr_version: None,
            runtime_identifier: None,
        };
        let j = info_json(&info);
        assert!(j.contains("\"pid\":7"), "{}", j);
        assert!(j.contains("\"command_line\":\"a \\\"b\\\"\\n\""), "{}", j);
        assert!(j.contains("\"clr_version\":null"), "{}", j);
        let t = info_text(&info);
        assert!(t.contains("command line:        a \"b\"\\n\n"), "{}", t);
    }
}
