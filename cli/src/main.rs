//! `dsipc`: a command-line client for the .NET Diagnostic IPC protocol.

mod args;
mod counters;
mod json;
mod monitor;
mod providers;
mod term;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use dsipc::payload::{DumpType, PerfMapType, Provider};
use dsipc::wire::{Guid, Text};
use dsipc_std::{DiagnosticsClient, Error, ProcessInfo};

use args::{parse, usage, Parsed, UsageError};

const USAGE: &str = "\
dsipc: talk to .NET runtimes over the Diagnostic IPC protocol

usage: dsipc COMMAND [ARGS] [--tmpdir DIR] [--timeout SECS]

commands:
  ps                               list diagnosable processes: pid, command line, socket
  info PID [--json]                process information (ProcessInfo3, 2 or 1)
  env PID                          the process environment, one NAME=VALUE per line
  setenv PID NAME VALUE            set an environment variable in the process
  setenv PID NAME --unset          remove it
  resume PID                       resume a runtime paused at startup
  trace PID -o FILE [--providers SPEC] [--duration SECS] [--no-rundown] [--buffer-mb N]
                                   EventPipe trace to a .nettrace file; stops at the
                                   duration or on Ctrl-C (StopTracing, then drains)
  dump PID -o PATH [--type normal|heap|triage|full]
                                   write a dump (PATH as the target process sees it)
  perfmap PID enable|disable [--type all|jitdump|perfmap]
  startup-hook PID PATH            load a startup hook assembly
  attach-profiler PID --clsid GUID --path PATH [--data HEX]
  monitor --listen PATH [--resume] [--json] [--metrics ADDR [--counters LIST]
          [--refresh-interval SECS]]
                                   reverse diagnostic port: runtimes started with
                                   DOTNET_DiagnosticPorts=PATH,connect[,suspend] connect
                                   here; one line per Advertise (pid, cookie); --resume
                                   resumes suspended runtimes; Ctrl-C removes the socket
                                   (on Windows PATH is a pipe name); --metrics serves
                                   the counters of every runtime seen at http://ADDR/metrics
  counters monitor|collect|export PID... [--counters LIST] [--refresh-interval SECS]
                                   live counters (dotnet-counters); see dsipc counters --help

options for every command:
  --tmpdir DIR     look for diagnostic sockets only in DIR (default: the target's TMPDIR,
                   /tmp, and /proc/PID/root for other mount namespaces)
  --timeout SECS   connect and reply timeout (default 10; 3 for ps, 120 for dump)

SPEC is dotnet-trace's Name[:Keywords[:Level[:Args]]],... (keywords in hex, level 0-5 or
a name). Without --providers: Microsoft-DotNETCore-SampleProfiler:0xF00000000000:4 and
Microsoft-Windows-DotNETRuntime:0x14C14FCCBD:4 (dotnet-trace's cpu-sampling profile).

Exit status: 0 on success, 1 when the command failed, 2 on a usage error.
";

/// Why a command failed.
enum CliError {
    Usage(String),
    Ipc(Error),
    Other(String),
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
        CliError::Other(e.to_string())
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
        let timeout = match p.value("--timeout") {
            Some(t) => Some(parse_seconds("--timeout", t)?),
            None => None,
        };
        Ok(Common {
            tmpdir: p.value("--tmpdir").map(PathBuf::from),
            timeout,
        })
    }

    fn timeout_or(&self, default: Duration) -> Duration {
        self.timeout.unwrap_or(default)
    }

    /// A client for `pid` with the command's timeout.
    fn client(&self, pid: u32, default_timeout: Duration) -> Result<DiagnosticsClient, CliError> {
        let client = find_client(pid, self.tmpdir.as_deref())?;
        Ok(client.with_timeout(self.timeout_or(default_timeout)))
    }
}

fn find_client(pid: u32, tmpdir: Option<&Path>) -> Result<DiagnosticsClient, Error> {
    DiagnosticsClient::for_pid_in(pid, tmpdir)
}

fn parse_seconds(what: &str, s: &str) -> Result<Duration, UsageError> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v < 1e9 => Ok(Duration::from_secs_f64(v)),
        _ => usage(format!(
            "{} wants a positive number of seconds, not {:?}",
            what, s
        )),
    }
}

fn parse_pid(s: &str) -> Result<u32, UsageError> {
    match s.parse::<u32>() {
        Ok(p) if p > 0 => Ok(p),
        _ => usage(format!("PID must be a positive integer, not {:?}", s)),
    }
}

/// Makes a path absolute against the current directory (the runtime resolves relative
/// paths against its own).
fn absolute(path: &str) -> Result<String, CliError> {
    let p = Path::new(path);
    let abs = if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()?.join(p)
    };
    abs.into_os_string()
        .into_string()
        .map_err(|_| CliError::Other(format!("path {:?} is not valid UTF-8", path)))
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match run(argv) {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Usage(msg)) => {
            eprintln!("dsipc: {} (see dsipc --help)", msg);
            ExitCode::from(2)
        }
        Err(CliError::Ipc(e)) => {
            eprintln!("dsipc: {}", e);
            ExitCode::from(1)
        }
        Err(CliError::Other(msg)) => {
            eprintln!("dsipc: {}", msg);
            ExitCode::from(1)
        }
    }
}

fn run(argv: Vec<String>) -> CliResult {
    // Global options may come before the command too.
    let mut i = 0;
    let mut leading = Vec::new();
    while i < argv.len() && argv[i].starts_with('-') {
        let a = &argv[i];
        if a == "-h" || a == "--help" {
            print!("{}", USAGE);
            return Ok(());
        }
        if a == "-V" || a == "--version" {
            println!("dsipc {}", env!("CARGO_PKG_VERSION"));
            return Ok(());
        }
        leading.push(a.clone());
        if !a.contains('=') {
            if let Some(v) = argv.get(i + 1) {
                leading.push(v.clone());
                i += 1;
            }
        }
        i += 1;
    }
    let command = match argv.get(i) {
        Some(c) => c.as_str(),
        None => return Err(CliError::Usage("no command given".into())),
    };
    let mut rest = leading;
    rest.extend(argv[i + 1..].iter().cloned());
    if rest.iter().any(|a| a == "-h" || a == "--help") {
        print!(
            "{}",
            if command == "counters" {
                counters::USAGE
            } else {
                USAGE
            }
        );
        return Ok(());
    }
    match command {
        "ps" => cmd_ps(&rest),
        "info" => cmd_info(&rest),
        "env" => cmd_env(&rest),
        "setenv" => cmd_setenv(&rest),
        "resume" => cmd_resume(&rest),
        "trace" => cmd_trace(&rest),
        "dump" => cmd_dump(&rest),
        "perfmap" => cmd_perfmap(&rest),
        "startup-hook" => cmd_startup_hook(&rest),
        "attach-profiler" => cmd_attach_profiler(&rest),
        "monitor" => monitor::cmd_monitor(&rest),
        "counters" => counters::cmd_counters(&rest).map_err(|e| match e {
            counters::CountersError::Usage(m) => CliError::Usage(m),
            counters::CountersError::Failed(m) => CliError::Other(m),
        }),
        // Subcommands to come go here, each as a `cmd_*` function taking the arguments
        // after the command name.
        "help" => {
            print!("{}", USAGE);
            Ok(())
        }
        other => Err(CliError::Usage(format!("unknown command {:?}", other))),
    }
}

/// Parses a command's arguments: positionals named by `names`, the first being the PID.
fn pid_command(
    rest: &[String],
    names: &[&str],
    values: &[&'static str],
    flags: &[&'static str],
) -> Result<(Parsed, Common, u32), CliError> {
    let p = parse(rest, values, flags)?;
    p.expect_positionals(names)?;
    let common = Common::from(&p)?;
    let pid = parse_pid(&p.positionals[0])?;
    Ok((p, common, pid))
}

fn cmd_ps(rest: &[String]) -> CliResult {
    let p = parse(rest, &[], &[])?;
    p.expect_positionals(&[])?;
    let common = Common::from(&p)?;
    ps(&common)
}

#[cfg(unix)]
fn ps(common: &Common) -> CliResult {
    let procs = dsipc_std::unix::list_processes(common.tmpdir.as_deref())?;
    let timeout = common.timeout_or(Duration::from_secs(3));
    let out = io::stdout();
    let mut out = out.lock();
    writeln!(out, "{:<8} {:<48} SOCKET", "PID", "COMMAND")?;
    for proc in procs {
        let client =
            DiagnosticsClient::new(dsipc_std::Endpoint::new(&proc.socket)).with_timeout(timeout);
        let command = match client.process_info_basic() {
            Ok(info) => info.command_line,
            // .NET Core 3.x has no ProcessInfo: show what /proc says, in brackets.
            Err(e) if e.is_not_supported() => proc_cmdline(proc.pid)
                .map(|c| format!("[{}]", c))
                .unwrap_or_else(|| "-".into()),
            Err(_) => "-".into(),
        };
        writeln!(
            out,
            "{:<8} {:<48} {}",
            proc.pid,
            command,
            proc.socket.display()
        )?;
    }
    Ok(())
}

#[cfg(unix)]
fn proc_cmdline(pid: u32) -> Option<String> {
    let raw = std::fs::read(format!("/proc/{}/cmdline", pid)).ok()?;
    let parts: Vec<String> = raw
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    if parts.is_empty() {
        None
    } else {
        Some(parts.join(" "))
    }
}

#[cfg(windows)]
fn ps(common: &Common) -> CliResult {
    let (procs, method) = dsipc_std::windows::list_processes_with_method()
        .map_err(|e| CliError::Other(e.to_string()))?;
    let timeout = common.timeout_or(Duration::from_secs(3));
    let out = io::stdout();
    let mut out = out.lock();
    if method == dsipc_std::windows::ListMethod::ProcessProbe {
        eprintln!(r"dsipc: \\.\pipe\ cannot be listed here; probed the pipe of every process");
    }
    writeln!(out, "{:<8} {:<48} PIPE", "PID", "COMMAND")?;
    for proc in procs {
        let client =
            DiagnosticsClient::new(dsipc_std::Endpoint::new(&proc.pipe)).with_timeout(timeout);
        let command = match client.process_info_basic() {
            Ok(info) => info.command_line,
            Err(_) => "-".into(),
        };
        writeln!(
            out,
            "{:<8} {:<48} {}",
            proc.pid,
            command,
            proc.pipe.display()
        )?;
    }
    Ok(())
}

#[cfg(not(any(unix, windows)))]
fn ps(_common: &Common) -> CliResult {
    Err(CliError::Other(
        "ps is only implemented on Unix and Windows".into(),
    ))
}

fn cmd_info(rest: &[String]) -> CliResult {
    let (p, common, pid) = pid_command(rest, &["PID"], &[], &["--json"])?;
    let info = common
        .client(pid, dsipc_std::DEFAULT_TIMEOUT)?
        .process_info()?;
    let text = if p.flag("--json") {
        info_json(&info)
    } else {
        info_text(&info)
    };
    print!("{}", text);
    Ok(())
}

fn info_text(info: &ProcessInfo) -> String {
    let opt = |o: &Option<String>| match o {
        Some(s) if s.is_empty() => "(empty)".to_string(),
        Some(s) => s.clone(),
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
        info.command_line,
        info.os,
        info.arch,
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

fn cmd_env(rest: &[String]) -> CliResult {
    let (_, common, pid) = pid_command(rest, &["PID"], &[], &[])?;
    let vars = common
        .client(pid, dsipc_std::DEFAULT_TIMEOUT)?
        .process_environment()?;
    let out = io::stdout();
    let mut out = out.lock();
    for v in vars {
        writeln!(out, "{}", v)?;
    }
    Ok(())
}

fn cmd_setenv(rest: &[String]) -> CliResult {
    let p = parse(rest, &[], &["--unset"])?;
    let common = Common::from(&p)?;
    let unset = p.flag("--unset");
    if unset {
        p.expect_positionals(&["PID", "NAME"])?;
    } else {
        p.expect_positionals(&["PID", "NAME", "VALUE (or --unset)"])?;
    }
    let pid = parse_pid(&p.positionals[0])?;
    let name = &p.positionals[1];
    if name.is_empty() || name.contains('=') {
        return Err(CliError::Usage(
            "NAME must be non-empty and must not contain '='".into(),
        ));
    }
    let value = if unset {
        None
    } else {
        Some(p.positionals[2].as_str())
    };
    common
        .client(pid, dsipc_std::DEFAULT_TIMEOUT)?
        .set_environment_variable(name, value)?;
    Ok(())
}

fn cmd_resume(rest: &[String]) -> CliResult {
    let (_, common, pid) = pid_command(rest, &["PID"], &[], &[])?;
    common
        .client(pid, dsipc_std::DEFAULT_TIMEOUT)?
        .resume_runtime()?;
    Ok(())
}

fn cmd_trace(rest: &[String]) -> CliResult {
    let (p, common, pid) = pid_command(
        rest,
        &["PID"],
        &["-o", "--output", "--providers", "--duration", "--buffer-mb"],
        &["--no-rundown"],
    )?;
    let output = match p.value("-o").or_else(|| p.value("--output")) {
        Some(o) => PathBuf::from(o),
        None => return Err(CliError::Usage("trace needs -o FILE".into())),
    };
    let specs = match p.value("--providers") {
        Some(s) => providers::parse_providers(s).map_err(CliError::Usage)?,
        None => providers::default_providers(),
    };
    let duration = match p.value("--duration") {
        Some(d) => Some(parse_seconds("--duration", d)?),
        None => None,
    };
    let buffer_mb = match p.value("--buffer-mb") {
        Some(b) => match b.parse::<u32>() {
            Ok(n) if (1..=4096).contains(&n) => n,
            _ => return Err(CliError::Usage("--buffer-mb wants 1 to 4096".into())),
        },
        None => 256,
    };
    let rundown = !p.flag("--no-rundown");
    let client = common.client(pid, dsipc_std::DEFAULT_TIMEOUT)?;
    let providers: Vec<Provider<'_>> = specs
        .iter()
        .map(|s| Provider {
            keywords: s.keywords,
            log_level: s.level,
            provider_name: Text::Str(&s.name),
            arguments: s.args.as_deref().map_or(Text::Null, Text::Str),
        })
        .collect();

    let file = File::create(&output)
        .map_err(|e| CliError::Other(format!("cannot create {}: {}", output.display(), e)))?;
    let mut out = BufWriter::with_capacity(256 * 1024, file);
    term::catch_interrupts();
    let mut session = match client.collect_tracing(&providers, buffer_mb, rundown) {
        Ok(s) => s,
        Err(e) => {
            drop(out);
            let _ = std::fs::remove_file(&output);
            return Err(e.into());
        }
    };

    let tty = term::stderr_is_terminal();
    eprintln!(
        "dsipc: tracing pid {} (session 0x{:x}) into {}",
        pid,
        session.session_id(),
        output.display()
    );
    for s in &specs {
        eprintln!(
            "  {:<40} 0x{:016X}  level {}{}",
            s.name,
            s.keywords,
            s.level,
            s.args
                .as_deref()
                .map(|a| format!("  {}", a))
                .unwrap_or_default()
        );
    }
    eprintln!(
        "dsipc: {}",
        match duration {
            Some(d) => format!("stopping after {:.1} s or on Ctrl-C", d.as_secs_f64()),
            None => "stop with Ctrl-C".to_string(),
        }
    );
    let start = Instant::now();
    let mut last_print = start;
    let mut stopping = false;
    let result = session.copy_to(&mut out, |bytes| {
        let now = Instant::now();
        if tty && now.duration_since(last_print) >= Duration::from_millis(250) {
            last_print = now;
            let secs = now.duration_since(start).as_secs_f64();
            eprint!(
                "\r  {:>7.1} s  {:>10.2} MiB  {:>8.2} MiB/s   ",
                secs,
                bytes as f64 / 1048576.0,
                bytes as f64 / 1048576.0 / secs.max(0.001)
            );
        }
        let stop = term::interrupted() || duration.map_or(false, |d| start.elapsed() >= d);
        if stop && !stopping {
            stopping = true;
            if tty {
                eprintln!();
            }
            eprintln!("dsipc: stopping the session, draining the rest of the stream");
        }
        stop
    });
    if tty && !stopping {
        eprintln!();
    }
    let bytes = result?;
    let secs = start.elapsed().as_secs_f64();
    println!(
        "wrote {} bytes ({:.2} MiB) to {} in {:.1} s",
        bytes,
        bytes as f64 / 1048576.0,
        output.display(),
        secs
    );
    Ok(())
}

fn cmd_dump(rest: &[String]) -> CliResult {
    let (p, common, pid) = pid_command(rest, &["PID"], &["-o", "--output", "--type"], &[])?;
    let path = match p.value("-o").or_else(|| p.value("--output")) {
        Some(o) => absolute(o)?,
        None => return Err(CliError::Usage("dump needs -o PATH".into())),
    };
    let kind = match p.value("--type").unwrap_or("normal") {
        "normal" | "mini" => DumpType::Normal,
        "heap" => DumpType::WithHeap,
        "triage" => DumpType::Triage,
        "full" => DumpType::Full,
        other => {
            return Err(CliError::Usage(format!(
                "--type must be normal, heap, triage or full, not {:?}",
                other
            )))
        }
    };
    let client = common.client(pid, Duration::from_secs(120))?;
    let start = Instant::now();
    client.write_dump(&path, kind, 0)?;
    println!(
        "wrote a {} dump of pid {} to {} in {:.2} s",
        p.value("--type").unwrap_or("normal"),
        pid,
        path,
        start.elapsed().as_secs_f64()
    );
    Ok(())
}

fn cmd_perfmap(rest: &[String]) -> CliResult {
    let (p, common, pid) = pid_command(rest, &["PID", "enable|disable"], &["--type"], &[])?;
    let client = common.client(pid, dsipc_std::DEFAULT_TIMEOUT)?;
    match p.positionals[1].as_str() {
        "enable" => {
            let kind = match p.value("--type").unwrap_or("all") {
                "all" => PerfMapType::All,
                "jitdump" => PerfMapType::JitDump,
                "perfmap" => PerfMapType::PerfMap,
                other => {
                    return Err(CliError::Usage(format!(
                        "--type must be all, jitdump or perfmap, not {:?}",
                        other
                    )))
                }
            };
            client.enable_perf_map(kind)?;
        }
        "disable" => {
            if p.value("--type").is_some() {
                return Err(CliError::Usage("--type goes with enable".into()));
            }
            client.disable_perf_map()?;
        }
        other => {
            return Err(CliError::Usage(format!(
                "perfmap wants enable or disable, not {:?}",
                other
            )))
        }
    }
    Ok(())
}

fn cmd_startup_hook(rest: &[String]) -> CliResult {
    let (p, common, pid) = pid_command(rest, &["PID", "PATH"], &[], &[])?;
    let path = absolute(&p.positionals[1])?;
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

fn cmd_attach_profiler(rest: &[String]) -> CliResult {
    let (p, common, pid) = pid_command(rest, &["PID"], &["--clsid", "--path", "--data"], &[])?;
    let clsid = match p.value("--clsid").map(Guid::parse) {
        Some(Ok(g)) => g,
        Some(Err(e)) => return Err(CliError::Usage(format!("--clsid: {}", e))),
        None => return Err(CliError::Usage("attach-profiler needs --clsid GUID".into())),
    };
    let path = match p.value("--path") {
        Some(path) => absolute(path)?,
        None => return Err(CliError::Usage("attach-profiler needs --path PATH".into())),
    };
    let data = match p.value("--data") {
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
            parse_seconds("x", "1.5").unwrap(),
            Duration::from_millis(1500)
        );
        assert!(parse_seconds("x", "-1").is_err());
        assert!(parse_seconds("x", "nan").is_err());
        assert!(parse_pid("0").is_err());
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
    }
}
