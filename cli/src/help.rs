//! Usage texts: the global summary (`dsipc --help`) and each command's own
//! (`dsipc COMMAND --help`).

/// `dsipc --help`.
pub const GLOBAL: &str = "\
dsipc: talk to .NET runtimes over the Diagnostic IPC protocol

usage: dsipc COMMAND [ARGS] [--tmpdir DIR] [--timeout SECS]
       dsipc COMMAND --help        the command's own help

commands:
  ps                list diagnosable processes: pid, socket, command line
  info PID          process information (ProcessInfo3, 2 or 1)
  env PID           the process environment, one NAME=VALUE per line
  setenv PID NAME VALUE|--unset
                    set or remove an environment variable in the process
  resume PID        resume a runtime paused at startup
  trace PID [-o FILE]
                    EventPipe trace to a .nettrace file (and a CPU profile with --format)
  stack PID         every thread's managed stack (dotnet-stack report)
  gcdump report --pid PID | FILE
                    live objects per type, biggest first (dotnet-gcdump report)
  gcdump collect PID [-o FILE]
                    the heap as a .gcdump file (dotnet-gcdump collect)
  dump PID [-o PATH] write a dump (full, as dotnet-dump)
  perfmap PID enable|disable
                    perf map and jitdump files
  startup-hook PID PATH
                    load a startup hook assembly
  attach-profiler PID --clsid GUID --path PATH
                    attach a profiler
  convert FILE      a .nettrace file to JSON lines, folded stacks, speedscope, pprof or a
                    flame graph
  report FILE       top methods of a .nettrace file's CPU samples
  monitor --listen PATH
                    reverse diagnostic port: runtimes connect here
  counters monitor PID | collect PID | export PID...
                    live counters (dotnet-counters)
  serve             dotnet-monitor's HTTP API (processes, traces, dumps, gcdumps,
                    stacks, /metrics), authenticated, on localhost
  serve generatekey [-o FILE]
                    a new API key for serve (FILE gets only its hash)
";

/// `dsipc serve --help`.
pub const SERVE: &str = "\
usage: dsipc serve [--urls URLS] [--metricUrls URLS] [--no-metrics]
                   [--api-key-file FILE | --temp-apikey | --no-auth]
                   [--default-process KEY=VALUE] [--egress NAME=DIR]
                   [--counter-interval SECS] [--dump-temp-folder DIR]
                   [--diagnostic-port PATH] [--send-timeout SECS]
                   [--configuration-file-path FILE]
       dsipc serve config show [--configuration-file-path FILE] [--level Redacted|Full]
                   [--show-sources]
       dsipc serve generatekey [-o FILE] [--force]

dotnet-monitor's HTTP API for the runtimes on this machine, with its routes, parameters,
content types and JSON shapes: GET /processes, /process, /env, /info, /trace (profile=
Cpu,Http,Logs,Metrics,GcCollect; durationSeconds=N, -1 until the client goes away), POST
/trace (an EventPipeConfiguration body), GET /stacks (application/json, text/plain or
application/speedscope+json by Accept), /gcdump, /dump (type=Mini|Full|WithHeap|Triage),
/metrics. A process is named by pid, uid (its runtime instance cookie) or name; without
one, the only process there is (or the one --default-process names). Errors are
application/problem+json; a kind of operation past its limit (3 traces, 3 stacks, 3 live
metrics, 1 dump, 1 gcdump at once) is 429. GET/POST /livemetrics stream counters as
json-seq Metric records. With egressProvider=NAME an artifact goes to that provider: 202
with Location: /operations/{id}; GET /operations, GET /operations/{id}, DELETE
/operations/{id} (?stop=true ends a trace early, keeping it). GET/POST /exceptions: a
process's last 20 first-chance exceptions, from its own events. Not yet offered:
/parameters, /collectionrules (501).

  --urls URLS          where the API listens, ';'-separated http://HOST:PORT
                       (default http://localhost:52323: loopback only). HOST is
                       localhost, an IP address, or * / + for every interface
  --metricUrls URLS    where /metrics listens without authentication (default
                       http://localhost:52325); the default process's counters are
                       collected from when serve finds it (it looks every 5 s);
                       --no-metrics: no listener, nothing collected, /metrics is 400
  --api-key-file FILE  the key file `serve generatekey -o FILE` wrote (its hash only);
                       requests need `Authorization: Bearer KEY`
  --temp-apikey        a key for this run only, printed on stderr
  --no-auth            no authentication (a warning says so)
  --default-process KEY=VALUE
                       which runtime answers requests naming none (dotnet-monitor's
                       DefaultProcess filter): ProcessId=N, ProcessName=NAME or
                       CommandLine=TEXT (a substring); default: the only one there is
  --egress NAME=DIR[;NAME=DIR]
                       file-system egress providers for egressProvider=NAME: the
                       artifact lands in DIR (created if missing) as an operation
  --counter-interval SECS
                       seconds between counter publications for /metrics and
                       /livemetrics (default 5)
  --diagnostic-port PATH
                       listen mode: runtimes started with
                       DOTNET_DiagnosticPorts=PATH,connect connect to serve, which
                       serves them (and only them) through their connections
  --send-timeout SECS   a client that takes nothing of a streamed answer (a trace,
                       logs, a dump) for this long is treated as gone: its session
                       stops and its permit returns (default 60)
  --dump-temp-folder DIR
                       where runtimes write dumps before they are sent and deleted
                       (default: a private folder serve makes and removes)
  --configuration-file-path FILE
                       dotnet-monitor's settings.json (Egress, DefaultProcess, Metrics,
                       GlobalCounter, Storage, DiagnosticPort, Authentication:
                       MonitorApiKey's ApiKeyHash, urls), over its default files
                       ($XDG_CONFIG_HOME/dotnet-monitor/settings.json,
                       /etc/dotnet-monitor/settings.json), the key-per-file folder
                       /etc/dotnet-monitor and DotnetMonitor_ variables (Egress__...);
                       the flags above win. A wrong value stops serve (exit 2, the key
                       named); an unknown key is a warning. `config show` prints the
                       merged configuration, secrets :REDACTED: (--level Full: shown)

Without a key option every API request is answered 401, as dotnet-monitor does with no
key configured. Each connection must send its request head within 5 s (at most 16 KiB);
64 connections per listener, the oldest idle one making room for a new one. Ctrl-C
stops serving.

generatekey prints the header to send; with -o FILE it writes the key's SHA-256 (in
dotnet-monitor's ApiKeyHash settings shape), never the key, under the file policy below.
";

/// What a command's own help ends with: the shared options in one line, pointing at the
/// global help for the rules (files, SECS, exit status).
pub const COMMON_SHORT: &str = "\
every command also takes --tmpdir DIR and --timeout SECS, and a process as PID,
-p/--process-id PID or -n/--name NAME; files are never replaced without --force; exit
status 0 on success, 1 on failure, 2 on a usage error (see dsipc --help for the details)
";

/// The options and rules every command shares (`dsipc --help`).
pub const COMMON: &str = "\
options for every command:
  --tmpdir DIR     look for diagnostic sockets only in DIR (default: the target's TMPDIR,
                   /tmp, and /proc/PID/root for other mount namespaces)
  --timeout SECS   the command's whole time budget with the runtime: connecting, every
                   reply, and every fallback to an older command version together
                   (default 10; 3 for ps; 120 for dump). For trace it bounds the start,
                   the StopTracing reply, and the drain after the stop was answered; the
                   session itself runs until stopped

PID: as dotnet-trace, dotnet-stack and dotnet-dump take it, the process may be given as
-p/--process-id PID or -n/--name NAME (its process name) instead; their verb forms work
too (trace collect, trace ps, trace convert, stack report, dump collect).

SECS (--timeout, --duration, --refresh-interval) is seconds, fractions allowed (1.5), or
dd:hh:mm:ss as dotnet-trace and dotnet-counters take it.

Files: a command that writes FILE writes a temporary file beside it and puts it in place
when done (trace: once the session started); an existing FILE is replaced only with
--force; devices and FIFOs (/dev/null) are written in place.

Text from runtimes is printed with control characters escaped (\\n, \\x1b, ...).

Exit status: 0 on success; 1 when the command failed; 2 on a usage error; 130 when a
trace was interrupted by a second Ctrl-C (what was received is kept); 141 when standard
output was closed (broken pipe), silently, whichever command wrote to it.
";

const PS: &str = "\
usage: dsipc ps [--verbose] [--tmpdir DIR] [--timeout SECS]

List diagnosable processes as dotnet-trace ps does: PID, NAME and COMMAND, the whole
command line (from /proc; where there is none, the one ProcessInfo reports). --verbose
(-v) adds the SOCKET (PIPE on Windows). Every runtime is probed, 16 at a time, all within
--timeout (default 3 s): one you may not connect to is named on stderr with the socket's
owner, and so are the ones that did not answer in time.
";

const INFO: &str = "\
usage: dsipc info PID [--json]

Process information: ProcessInfo3, falling back to ProcessInfo2 and ProcessInfo (.NET 5+).
'answered by' names the command that answered (older runtimes know fewer fields);
'(not reported)' marks a field that command does not carry, '(empty)' one the runtime
sent empty (the entrypoint assembly is empty when a native host, e.g. Python with
pythonnet, started the runtime). --json prints the same fields as one JSON object.
";

const ENV: &str = "\
usage: dsipc env PID [--max-bytes N]

The process environment, one NAME=VALUE per line. Refused when the runtime announces more
than N bytes (default 16 MiB).
";

const SETENV: &str = "\
usage: dsipc setenv PID NAME VALUE
       dsipc setenv PID NAME --unset

Set an environment variable in the process, or remove it. After --, every argument is a
value (dsipc setenv PID NAME -- --help).
";

const RESUME: &str = "\
usage: dsipc resume PID

Resume a runtime paused at startup (DOTNET_DefaultDiagnosticPortSuspend=1, or a suspend
diagnostic port).
";

const TRACE: &str = "\
usage: dsipc trace PID [-o FILE] [--providers SPEC] [--profile NAME]
                   [--clrevents KEYWORDS [--clreventlevel LEVEL]] [--duration SECS]
                   [--no-rundown] [--buffer-mb N] [--force]
                   [--format speedscope|folded|pprof|flamegraph]

EventPipe trace to a .nettrace file; stops at the duration or on Ctrl-C (StopTracing,
then drains; a second Ctrl-C keeps what was received and exits 130). On a terminal a
progress line shows time, MiB, events, samples and lost events.

  -o FILE            the trace (default, as dotnet-trace: APP_yyyyMMdd_HHmmss.nettrace in
                     the current directory, UTC); written only once the session started
  --providers SPEC   dotnet-trace's Name[:Keywords[:Level[:Args]]],... (keywords in hex,
                     level 0-5 or a name); a field left out means every keyword and
                     level 5 (Verbose), as in dotnet-trace
  --profile NAME     dotnet-trace's profiles (cpu-sampling, gc-verbose, gc-collect,
                     database; several comma-separated); a provider also in --providers
                     takes the --providers settings
  --clrevents K+K    the runtime provider with those keywords by name (gc+jit+..., any
                     case) at --clreventlevel (default 4); ignored when --providers or
                     --profile already enables that provider
  --duration SECS    stop after SECS (default: on Ctrl-C)
  --no-rundown       no rundown at the stop: smaller and quicker, but methods JIT-compiled
                     before the trace started stay unnamed in profiles
  --buffer-mb N      the runtime's buffer for the session, 1-4096 MiB (default 256; events
                     are lost when the reader falls behind by more); --buffersize N too
  --format F         also write a CPU profile, built while the stream arrives, beside FILE
                     (same stem: .speedscope.json, .folded, .pb.gz or .svg; the flame
                     graph titled with the process, its pid and the time span); any case;
                     nettrace (dotnet-trace's default) is the trace alone
  --force            replace existing files

Without --providers, --profile or --clrevents: dotnet-trace's cpu-sampling profile
(Microsoft-DotNETCore-SampleProfiler:0xF00000000000:4 and
Microsoft-Windows-DotNETRuntime:0x14C14FCCBD:4). Exit status 1 also when the stream ended
before any stop short of its end-of-stream object (the stream's parser decides, V4 to V6),
did not parse, or did not end after the stop: the bytes received stay in FILE. Then
`dsipc report FILE` or `dsipc convert FILE` read it.
";

const STACK: &str = "\
usage: dsipc stack PID [--format text|json]

Every thread's managed stack, as dotnet-stack report prints it: a short SampleProfiler
session with rundown, stopped once every thread has a sample; each thread's latest sample,
frames innermost first (Module!Namespace.Type.Method; [Native Frames] for runs no method
covers). json is dotnet-monitor's CallStackResult. --timeout bounds the whole command.
";

const GCDUMP: &str = "\
usage: dsipc gcdump report --pid PID [--top N] [--format text|json] [--retained]
       dsipc gcdump report FILE [--top N] [--format text|json] [--retained]
       dsipc gcdump collect PID [-o FILE] [--force]

The runtime's live objects per type, as dotnet-gcdump report prints them: a session
with Microsoft-Windows-DotNETRuntime:0x1980001:5 (GC heap dump keywords, no rundown) makes
the runtime run a blocking gen-2 GC and walk its heap; the session stops once that GC ended.
Text: the heap's bytes and objects, then Object Bytes, Count and Type per type, biggest
first (--top N: the N biggest). json: one line, [{\"type\",\"count\",\"bytes\"}, ...], biggest
first. report FILE reads a .gcdump, or a .nettrace recorded with those keywords, instead.
--retained adds the bytes each type keeps alive (the dominator tree from the roots; an
object under another of its type counted once), biggest retained first (json: \"retained\").
collect writes the heap as a .gcdump file (the format of dotnet-gcdump and PerfView) to
FILE, by default YYYYMMDD_HHMMSS_PID.gcdump (UTC) in the current directory.
--timeout bounds the whole command (default 30).
";

const DUMP: &str = "\
usage: dsipc dump PID [-o PATH] [--type full|heap|mini|triage] [--force]

Write a dump (the runtime's createdump writes PATH, as the target process sees it; %p
is its pid). As dotnet-dump: a full dump by default (mini is also called normal), to
core_yyyyMMdd_HHmmss in the current directory (UTC) without -o; names are
case-insensitive (--type Full). An existing PATH is refused unless --force: the runtime
would replace it.
";

const PERFMAP: &str = "\
usage: dsipc perfmap PID enable [--type all|jitdump|perfmap]
       dsipc perfmap PID disable

Start or stop the runtime's /tmp/perf-PID.map and jitdump files (.NET 8+). --type picks
which: all (default), jitdump (/tmp/jit-PID.dump, for perf inject) or perfmap (the map
perf report reads).
";

const STARTUP_HOOK: &str = "\
usage: dsipc startup-hook PID PATH

Load a startup hook assembly into a runtime paused at startup (.NET 8+).
";

const ATTACH_PROFILER: &str = "\
usage: dsipc attach-profiler PID --clsid GUID --path PATH [--data HEX]

Attach a profiler (ICorProfilerCallback) from PATH with CLSID GUID and optional data.
";

const CONVERT: &str = "\
usage: dsipc convert FILE [--format jsonl|folded|speedscope|pprof|flamegraph] [-o OUT|-]
                     [--managed-only] [--force] [LIMITS]

Convert a .nettrace file: events as JSON lines (with activity_id and related_activity_id
where the event has them), or its CPU samples as folded stacks, speedscope, gzipped pprof
or a flame graph SVG (default speedscope; default OUT beside FILE: same stem, the format's
extension, or STEM_2, STEM_3... when that name is taken, as by trace --format; --force
replaces it instead). A truncated or corrupt file converts what precedes the bad bytes and
fails naming their offset. --managed-only keeps only the samples taken while their thread
ran managed code (its CPU; waits and native code left out).

LIMITS stop the conversion with an error naming the limit a trace goes past:
  --max-metadata N      metadata records (default 100000)
  --max-threads N       sampled threads (default 100000)
  --max-stack-frames N  frames in one stack (default 4096)
";

const REPORT: &str = "\
usage: dsipc report FILE [--top N] [--managed-only] [LIMITS]

The top N (default 10) methods of a .nettrace file's CPU samples, by exclusive and by
inclusive samples. --managed-only counts only the samples taken while their thread ran
managed code (where it spends the CPU; waiting and sleeping threads left out). LIMITS as
for convert (--max-metadata, --max-threads, --max-stack-frames).
";

const MONITOR: &str = "\
usage: dsipc monitor --listen PATH [--resume] [--json] [--max-connections N]
                     [--metrics ADDR [--counters LIST] [--refresh-interval SECS]]

Reverse diagnostic port: runtimes started with DOTNET_DiagnosticPorts=PATH,connect[,suspend]
connect here; one line per Advertise (pid, cookie; --json: one JSON object per line
instead); --resume resumes suspended runtimes; Ctrl-C removes the socket (on Windows PATH
is a pipe name). Connections are served at once, each with --timeout to advertise and to
answer the resume; past N held connections (default 1000) the oldest idle one is closed.
--metrics serves the counters of every runtime seen at http://ADDR/metrics.
";

/// The help of `command` (`None`: no such command).
pub fn command(command: &str) -> Option<&'static str> {
    Some(match command {
        "ps" => PS,
        "info" => INFO,
        "env" => ENV,
        "setenv" => SETENV,
        "resume" => RESUME,
        "trace" => TRACE,
        "stack" => STACK,
        "gcdump" => GCDUMP,
        "dump" => DUMP,
        "perfmap" => PERFMAP,
        "startup-hook" => STARTUP_HOOK,
        "attach-profiler" => ATTACH_PROFILER,
        "convert" => CONVERT,
        "report" => REPORT,
        "monitor" => MONITOR,
        "counters" => crate::counters::USAGE,
        "serve" => SERVE,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_in_the_global_help_has_its_own() {
        for line in GLOBAL
            .lines()
            .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        {
            let name = line.split_whitespace().next().unwrap();
            if name.chars().all(|c| c.is_ascii_lowercase() || c == '-') {
                let help = command(name).unwrap_or_else(|| panic!("no help for {}", name));
                assert!(help.contains(&format!("dsipc {}", name)), "{}", name);
            }
        }
        assert!(command("nope").is_none());
    }
}
