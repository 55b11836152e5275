//! `dsipc counters monitor|collect|export`: live counters in dotnet-counters' conventions,
//! and a Prometheus endpoint.

mod collect;
mod export;
mod keys;
mod monitor;

use std::path::PathBuf;
use std::time::Duration;

use dsipc_recipes::counters::{CounterSession, SessionEnd};
use dsipc_std::DiagnosticsClient;
use dsipc_trace::counters::{CounterSet, CountersConfig};

use crate::args::Parsed;
use crate::error::CliError;

pub use export::{monitor_metrics, MonitorMetrics};

/// The help of `dsipc counters`.
pub const USAGE: &str = "\
usage: dsipc counters monitor PID [--counters LIST] [--refresh-interval SECS]
       dsipc counters collect PID [--counters LIST] [--refresh-interval SECS]
                      [--duration SECS] [--format csv|json] [-o FILE|-] [--force]
       dsipc counters export PID... --listen ADDR [--counters LIST]
                      [--refresh-interval SECS]

Live counters in dotnet-counters' conventions (EventCounters and
System.Diagnostics.Metrics instruments):
  monitor   one runtime, redrawn in place on a terminal fitted to its size, with
            dotnet-counters' keys (p pause, r resume, q quit); plain lines otherwise
  collect   one runtime into dotnet-counters' csv or json file (default
            counter_yyyyMMdd_HHmmss.csv, never the previous run's; -o - for stdout);
            runs for --duration (or until Ctrl-C) and writes what came; a duration
            shorter than the first publication still waits for it
  export    any number of runtimes, served at http://ADDR/metrics in Prometheus' text
            format (the address is printed on stderr: dsipc: metrics on ...)

PID: also -p/--process-id PID or -n/--name NAME, as dotnet-counters takes it.
LIST: System.Runtime[cpu-usage,gc-heap-size],MyMeter (default System.Runtime).
SECS: seconds (fractions allowed) or dd:hh:mm:ss; --refresh-interval defaults to 1.
--max-time-series N (default 1000) and --max-histograms N (default 10), dotnet-counters'
--maxTimeSeries and --maxHistograms (those spellings work too), are asked of the runtime
and enforced on what it sends: series past them are dropped with one notice (a runtime
inventing series cannot grow dsipc's memory).
";

/// What every counters subcommand's help ends with.
const SHARED: &str = "\
PID: also -p/--process-id PID or -n/--name NAME, as dotnet-counters takes it.
LIST: System.Runtime[cpu-usage,gc-heap-size],MyMeter (default System.Runtime).
SECS: seconds (fractions allowed) or dd:hh:mm:ss; --refresh-interval defaults to 1.
--max-time-series N (default 1000) and --max-histograms N (default 10) (also spelled
--maxTimeSeries, --maxHistograms) are asked of the runtime and enforced on what it sends.
";

/// `dsipc counters SUBCOMMAND --help`: that subcommand's help only (`None`: not one).
pub fn usage_of(sub: &str) -> Option<String> {
    let own = match sub {
        "monitor" => {
            "\
usage: dsipc counters monitor PID [--counters LIST] [--refresh-interval SECS] [--showDeltas]

One runtime's counters, redrawn in place on a terminal (plain lines otherwise), fitted to
its width (long names shortened, never wrapped) and height (the rows that do not fit are
counted on the last line); p pauses the display, r resumes it, q quits, as in
dotnet-counters. A counter or provider that never publishes is named once. --showDeltas
adds each value's change since the one before (a Last Delta column), as dotnet-counters.
"
        }
        "collect" => {
            "\
usage: dsipc counters collect PID [--counters LIST] [--refresh-interval SECS]
                      [--duration SECS] [--format csv|json] [-o FILE|-] [--force]

One runtime's counters into dotnet-counters' csv or json file (default
counter_yyyyMMdd_HHmmss.csv, never the previous run's; -o - for stdout); runs for
--duration (or until Ctrl-C) and writes what came.
"
        }
        "export" => {
            "\
usage: dsipc counters export PID... --listen ADDR [--counters LIST]
                      [--refresh-interval SECS]

Any number of runtimes' counters, served at http://ADDR/metrics in Prometheus' text format
(the address is printed on stderr: dsipc: metrics on ...).
"
        }
        _ => return None,
    };
    Some(format!("{}\n{}", own, SHARED))
}

type Result<T> = std::result::Result<T, CliError>;

/// `dsipc counters SUBCOMMAND ARGS...`
pub fn cmd_counters(rest: &[String]) -> Result<()> {
    let sub = match rest.first() {
        Some(s) => s.as_str(),
        None => {
            return Err(CliError::Usage(
                "counters needs monitor, collect or export".into(),
            ))
        }
    };
    let args = &rest[1..];
    match sub {
        "monitor" => monitor::monitor(args),
        "collect" => collect::collect(args),
        "export" => export::export(args),
        other => Err(CliError::Usage(format!(
            "unknown counters command {:?} (monitor, collect, export)",
            other
        ))),
    }
}

const VALUES: &[&str] = &[
    "--counters",
    "--refresh-interval",
    "--duration",
    "--format",
    "-o",
    "--output",
    "--listen",
    "-p",
    "--process-id",
    "-n",
    "--name",
    "--max-time-series",
    "--max-histograms",
    // dotnet-counters' spellings.
    "--maxTimeSeries",
    "--maxHistograms",
];

/// Options every counters command takes.
struct Options {
    pids: Vec<u32>,
    counters: CounterSet,
    interval: f64,
    tmpdir: Option<PathBuf>,
    timeout: Duration,
    caps: Caps,
}

/// `--max-time-series N` and `--max-histograms N`: dotnet-counters' `MaxTimeSeries` and
/// `MaxHistograms`, asked of the runtime and enforced on what it sends.
#[derive(Debug, Clone, Copy)]
struct Caps {
    series: u32,
    histograms: u32,
}

fn caps_option(p: &Parsed) -> Result<Caps> {
    let one = |flag: &str, alias: &str, default: u32| -> Result<u32> {
        match p
            .value_alias(flag, alias)?
            .map(|v| v.to_str().unwrap_or(""))
        {
            None => Ok(default),
            Some(v) => match v.parse::<u32>() {
                Ok(n) if (1..=1_000_000).contains(&n) => Ok(n),
                _ => Err(CliError::Usage(format!(
                    "{} wants a whole number from 1 to 1000000, not {:?}",
                    flag, v
                ))),
            },
        }
    };
    Ok(Caps {
        series: one("--max-time-series", "--maxTimeSeries", 1000)?,
        histograms: one("--max-histograms", "--maxHistograms", 10)?,
    })
}

fn options(p: &Parsed, many: bool) -> Result<Options> {
    let mut pids = Vec::new();
    for v in p.value("-p").into_iter().chain(p.value("--process-id")) {
        pids.push(crate::args::pid(std::ffi::OsStr::new(v))?);
    }
    for v in &p.positionals {
        pids.push(crate::args::pid(std::ffi::OsStr::new(v))?);
    }
    for name in p.value("-n").into_iter().chain(p.value("--name")) {
        let common = crate::Common::from(p)?;
        pids.push(crate::ps::pid_by_name(&common, name)?);
    }
    if pids.is_empty() {
        return Err(CliError::Usage("missing PID".into()));
    }
    if !many && pids.len() > 1 {
        return Err(CliError::Usage(format!("unexpected argument {}", pids[1])));
    }
    pids.dedup();
    let counters = match p.value("--counters") {
        Some(list) => CounterSet::parse(list).map_err(|e| CliError::Usage(e.to_string()))?,
        None => CounterSet::default(),
    };
    let interval = interval_option(p)?;
    let timeout = match p.value("--timeout") {
        Some(s) => crate::args::duration("--timeout", std::ffi::OsStr::new(s))?,
        None => dsipc_std::DEFAULT_TIMEOUT,
    };
    Ok(Options {
        pids,
        counters,
        interval,
        tmpdir: p.value("--tmpdir").map(PathBuf::from),
        timeout,
        caps: caps_option(p)?,
    })
}

/// `--refresh-interval`: the one duration rule, at most a day (default 1 s).
fn interval_option(p: &Parsed) -> Result<f64> {
    Ok(match p.value("--refresh-interval") {
        Some(s) => {
            let v = crate::args::duration("--refresh-interval", std::ffi::OsStr::new(s))?;
            if v > Duration::from_secs(86_400) {
                return Err(CliError::Usage(format!(
                    "--refresh-interval is at most a day (86400 s), not {:?}",
                    s
                )));
            }
            v.as_secs_f64()
        }
        None => 1.0,
    })
}

/// The runtime's major version, from ProcessInfo2+ (`None` for .NET Core 3.x).
fn runtime_major(client: &DiagnosticsClient) -> Option<u32> {
    client.process_info().ok()?.clr_major()
}

/// Connects to `pid` and says what its counters session asks for.
fn session_config(o: &Options, pid: u32) -> Result<(DiagnosticsClient, CountersConfig)> {
    let client = DiagnosticsClient::for_pid_in(pid, o.tmpdir.as_deref())?.with_timeout(o.timeout);
    let mut config = CountersConfig::new(o.counters.clone(), o.interval, runtime_major(&client));
    config.max_time_series = o.caps.series;
    config.max_histograms = o.caps.histograms;
    Ok((client, config))
}

/// Connects to `pid` and starts its counters session (events queued for the caller).
fn start(o: &Options, pid: u32) -> Result<CounterSession<dsipc_std::Endpoint>> {
    let (client, config) = session_config(o, pid)?;
    Ok(CounterSession::start(&client, &config)?)
}

fn report_end(who: &str, pid: u32, end: &SessionEnd) {
    for p in end.problems() {
        eprintln!("{}: pid {}: {}", who, pid, p);
    }
}

/// The target's process name (for the json file), as dotnet-counters records it; `dsipc
/// trace`'s flame graph title too. Empty when unknown.
pub(crate) fn process_name(pid: u32) -> String {
    dsipc_std::process_name(pid).unwrap_or_default()
}
