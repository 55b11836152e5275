//! `dsipc counters monitor|collect|export`: live counters in dotnet-counters' conventions,
//! and a Prometheus endpoint.

mod http;
pub(crate) mod output;
mod prom;
pub(crate) mod run_async;
pub(crate) mod session;

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use dsipc_std::DiagnosticsClient;
use dsipc_trace::counters::{CounterEvent, CounterSet, CountersConfig, Notice};
use session::CounterSession;

use crate::args::{parse, Parsed};
use crate::error::CliError;
use crate::output::Output;
use crate::term;
use crate::term::clean;

pub use prom::Store;

/// The help of `dsipc counters`.
pub const USAGE: &str = "\
usage: dsipc counters monitor PID [--counters LIST] [--refresh-interval SECS]
       dsipc counters collect PID [--counters LIST] [--refresh-interval SECS]
                      [--duration SECS] [--format csv|json] [-o FILE|-] [--force]
       dsipc counters export PID... --listen ADDR [--counters LIST]
                      [--refresh-interval SECS]

Live counters in dotnet-counters' conventions (EventCounters and
System.Diagnostics.Metrics instruments):
  monitor   one runtime, redrawn in place on a terminal (plain lines otherwise)
  collect   one runtime into dotnet-counters' csv or json file (default counter.csv;
            -o - for stdout); runs for --duration (or until Ctrl-C) and writes what
            came; a duration shorter than the first publication still waits for it
  export    any number of runtimes, served at http://ADDR/metrics in Prometheus' text
            format (the address is printed on stderr: dsipc: metrics on ...)

LIST: System.Runtime[cpu-usage,gc-heap-size],MyMeter (default System.Runtime).
SECS: seconds (fractions allowed) or dd:hh:mm:ss; --refresh-interval defaults to 1.
--max-time-series N (default 1000) and --max-histograms N (default 10), dotnet-counters'
MaxTimeSeries and MaxHistograms, are asked of the runtime and enforced on what it sends:
series past them are dropped with one notice (a runtime inventing series cannot grow
dsipc's memory).
";

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
        "monitor" => monitor(args),
        "collect" => collect(args),
        "export" => export(args),
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
    "--max-time-series",
    "--max-histograms",
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
    let one = |flag: &str, default: u32| -> Result<u32> {
        match p.value(flag) {
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
        series: one("--max-time-series", 1000)?,
        histograms: one("--max-histograms", 10)?,
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

/// How long to wait for a first sample before giving up: three intervals, at least 10 s.
fn first_sample_limit(interval: f64) -> Duration {
    Duration::from_secs_f64((interval * 3.0).max(10.0))
}

fn report_end(who: &str, pid: u32, end: &session::SessionEnd) {
    if end.stats.malformed > 0 {
        eprintln!(
            "{}: pid {}: skipped {} malformed counter payload(s)",
            who, pid, end.stats.malformed
        );
    }
    if let Some(e) = &end.stats.stream_error {
        eprintln!(
            "{}: pid {}: the stream could not be decoded past: {}",
            who, pid, e
        );
    }
}

fn is_fatal(n: &Notice) -> bool {
    matches!(
        n,
        Notice::Error { .. } | Notice::MultipleSessionsNotSupported
    )
}

fn collect(args: &[String]) -> Result<()> {
    let p = parse(args, VALUES, &["--force"])?;
    let o = options(&p, false)?;
    let pid = o.pids[0];
    let json = match p.value("--format").unwrap_or("csv") {
        "csv" => false,
        "json" => true,
        other => {
            return Err(CliError::Usage(format!(
                "--format is csv or json, not {:?}",
                other
            )))
        }
    };
    let duration = match p.value("--duration") {
        Some(s) => Some(crate::args::duration(
            "--duration",
            std::ffi::OsStr::new(s),
        )?),
        None => None,
    };
    let ext = if json { ".json" } else { ".csv" };
    let target = p
        .value("-o")
        .or_else(|| p.value("--output"))
        .unwrap_or("counter")
        .to_string();
    let path = if target == "-" {
        None
    } else if target.ends_with(ext) {
        Some(PathBuf::from(target))
    } else {
        Some(PathBuf::from(format!("{}{}", target, ext)))
    };
    // The CLI's one output policy: prepared now, in place once the session runs.
    let mut out = match &path {
        Some(path) => Output::create(path, p.flag("--force"))?,
        None => Output::stdout(),
    };
    term::catch_interrupts();
    let session = match start(&o, pid) {
        Ok(s) => s,
        Err(e) => {
            out.abandon();
            return Err(e);
        }
    };
    if let Err(e) = out.place() {
        out.abandon();
        return Err(e);
    }
    let mut writer = output::FileWriter::new(out, json, &process_name(pid), SystemTime::now())?;
    eprintln!(
        "dsipc: collecting counters of pid {} every {} s{}",
        pid,
        o.interval,
        match duration {
            Some(d) => format!(" for {:.1} s", d.as_secs_f64()),
            None => String::new(),
        }
    );
    let started = Instant::now();
    let limit = first_sample_limit(o.interval);
    let mut exited = false;
    let mut failure = None;
    loop {
        if term::interrupted() {
            break;
        }
        // As dotnet-counters: collect for the duration and write what came; a duration
        // shorter than the runtime's first publication still waits for that first batch
        // (up to the first-sample limit).
        if let Some(d) = duration {
            if started.elapsed() >= d && writer.events() > 0 {
                break;
            }
        }
        if writer.events() == 0 && started.elapsed() >= limit {
            // The limit waited for (a loaded machine may notice it a little later).
            failure = Some(format!(
                "no counters received in {:.1} s",
                limit.as_secs_f64()
            ));
            break;
        }
        match session.recv_timeout(Duration::from_millis(100)) {
            Ok(CounterEvent::Sample(s)) => {
                writer.sample(&s)?;
                // Flush when the batch of this interval is through.
                while let Ok(ev) = session.try_recv() {
                    match ev {
                        CounterEvent::Sample(s) => writer.sample(&s)?,
                        CounterEvent::Notice(n) => {
                            eprintln!("dsipc: pid {}: {}", pid, clean(&n.to_string()))
                        }
                    }
                }
                writer.flush()?;
            }
            Ok(CounterEvent::Notice(n)) => {
                eprintln!("dsipc: pid {}: {}", pid, clean(&n.to_string()));
                if is_fatal(&n) {
                    failure = Some(n.to_string());
                    break;
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                exited = true;
                break;
            }
        }
    }
    let end = session.stop();
    let events = writer.events();
    writer.finish()?.commit()?;
    report_end("dsipc", pid, &end);
    if exited {
        eprintln!(
            "dsipc: pid {}: the runtime ended the session (exited?)",
            pid
        );
    }
    if let Some(path) = &path {
        eprintln!(
            "dsipc: {} counter values saved to {}",
            events,
            path.display()
        );
    }
    if let Some(f) = failure {
        return Err(CliError::Failed(f));
    }
    if events == 0 {
        return Err(CliError::Failed(format!(
            "no counters received in {:.1} s",
            started.elapsed().as_secs_f64()
        )));
    }
    Ok(())
}

/// The target's process name (for the json file), as dotnet-counters records it; `dsipc
/// trace`'s flame graph title too. Empty when unknown.
pub(crate) fn process_name(pid: u32) -> String {
    #[cfg(target_os = "linux")]
    {
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{}/comm", pid)) {
            return s.trim_end().to_string();
        }
    }
    let _ = pid;
    String::new()
}

#[cfg(unix)]
fn stdout_is_terminal() -> bool {
    // SAFETY: isatty on a descriptor number has no memory effects.
    unsafe { libc::isatty(1) == 1 }
}

#[cfg(not(unix))]
fn stdout_is_terminal() -> bool {
    false
}

fn monitor(args: &[String]) -> Result<()> {
    let p = parse(args, VALUES, &[])?;
    let o = options(&p, false)?;
    let pid = o.pids[0];
    term::catch_interrupts();
    let session = start(&o, pid)?;
    let tty = stdout_is_terminal();
    let out = io::stdout();
    let mut table = output::Table::default();
    let mut status = "Running";
    if tty {
        let mut out = out.lock();
        write!(
            out,
            "\x1b[2J\x1b[H{}",
            table.render("Waiting for the first values")
        )?;
        out.flush()?;
    } else {
        let mut out = out.lock();
        writeln!(
            out,
            "# dsipc counters monitor: pid {}, every {} s",
            pid, o.interval
        )?;
        out.flush()?;
    }
    let started = Instant::now();
    let limit = first_sample_limit(o.interval);
    let mut samples = 0u64;
    let mut failure = None;
    loop {
        if term::interrupted() {
            break;
        }
        if samples == 0 && started.elapsed() >= limit {
            failure = Some(format!(
                "no counters received in {:.1} s",
                limit.as_secs_f64()
            ));
            break;
        }
        let first = match session.recv_timeout(Duration::from_millis(100)) {
            Ok(ev) => ev,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                status = "Exited";
                break;
            }
        };
        let mut batch = vec![first];
        while let Ok(ev) = session.try_recv() {
            batch.push(ev);
        }
        let mut out = out.lock();
        for ev in batch {
            match ev {
                CounterEvent::Sample(s) => {
                    samples += 1;
                    if tty {
                        table.sample(&s);
                    } else {
                        let t = output::tags(&s);
                        writeln!(
                            out,
                            "{}\t{}\t{}{}\t{}",
                            output::universal_time(s.timestamp),
                            clean(&s.provider),
                            clean(&output::display(&s)),
                            if t.is_empty() {
                                String::new()
                            } else {
                                format!(" [{}]", clean(&t))
                            },
                            output::number(s.value)
                        )?;
                    }
                }
                CounterEvent::Notice(n) => {
                    if tty {
                        table.notice(n.to_string());
                    } else {
                        eprintln!("dsipc: pid {}: {}", pid, clean(&n.to_string()));
                    }
                }
            }
        }
        if tty {
            write!(out, "\x1b[H\x1b[J{}", table.render(status))?;
        }
        out.flush()?;
    }
    if tty {
        let mut out = out.lock();
        write!(out, "\x1b[H\x1b[J{}", table.render(status))?;
        out.flush()?;
    }
    let end = session.stop();
    report_end("dsipc", pid, &end);
    if status == "Exited" {
        eprintln!(
            "dsipc: pid {}: the runtime ended the session (exited?)",
            pid
        );
    }
    match failure {
        Some(f) => Err(CliError::Failed(f)),
        None => Ok(()),
    }
}

fn export(args: &[String]) -> Result<()> {
    let p = parse(args, VALUES, &[])?;
    let o = options(&p, true)?;
    let listen = match p.value("--listen") {
        Some(a) => a.to_string(),
        None => return Err(CliError::Usage("export needs --listen ADDR".into())),
    };
    term::catch_interrupts();
    let pids = o.pids.clone();
    let exporter = Exporter::bind(&listen, o)?;
    let mut started = 0;
    for &pid in &pids {
        match exporter.add(pid) {
            Ok(()) => started += 1,
            Err(e) => eprintln!("dsipc: pid {}: {}", pid, clean(&e.to_string())),
        }
    }
    if started == 0 {
        return Err(CliError::Failed("no runtime could be monitored".into()));
    }
    eprintln!(
        "dsipc: metrics on http://{}/metrics",
        exporter.local_addr()?
    );
    exporter.serve_until_interrupted()
}

/// Runs one runtime's counters session on the current tokio runtime (dsipc-tokio's
/// [`CounterRun`](run_async::CounterRun)), its samples straight into `store`;
/// its series go when it ends. `started` hears whether the session started (its stop
/// handle). The one session loop of `counters export`, `monitor --metrics` and `serve`'s
/// `/metrics`; `who` prefixes its messages (`dsipc`, `dsipc: serve`).
pub(crate) fn spawn_session(
    client: dsipc_tokio::DiagnosticsClient,
    pid: u32,
    config: CountersConfig,
    store: Arc<Mutex<Store>>,
    who: &'static str,
    started: Option<
        std::sync::mpsc::Sender<std::result::Result<dsipc_tokio::StopHandle, dsipc_tokio::Error>>,
    >,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let run = match run_async::CounterRun::start(&client, &config).await {
            Ok(run) => run,
            Err(e) => {
                lock(&store).remove(pid);
                match started {
                    Some(tx) => {
                        let _ = tx.send(Err(e));
                    }
                    None => eprintln!("{}: pid {}: counters: {}", who, pid, clean(&e.to_string())),
                }
                return;
            }
        };
        if let Some(tx) = started {
            let _ = tx.send(Ok(run.stop_handle()));
        }
        let sink_store = Arc::clone(&store);
        let end = run
            .run(&mut |ev| match ev {
                CounterEvent::Sample(s) => lock(&sink_store).record(pid, &s),
                CounterEvent::Notice(n) => {
                    eprintln!("{}: pid {}: {}", who, pid, clean(&n.to_string()))
                }
            })
            .await;
        report_end(who, pid, &end);
        lock(&store).remove(pid);
        if !end.stopped {
            eprintln!(
                "{}: pid {}: runtime exited; its series are dropped",
                who, pid
            );
        }
    })
}

/// The counters of any number of runtimes, added while it runs, kept for Prometheus
/// (`counters export`, `monitor --metrics`). One thread runs a tokio runtime for every
/// session (and the exporter's HTTP listener); a runtime's series are dropped when it exits.
pub struct Collector {
    store: Arc<Mutex<Store>>,
    stop: Arc<AtomicBool>,
    handle: tokio::runtime::Handle,
    /// Ends the runtime's thread (dropped by [`finish`](Self::finish)).
    done: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    sessions: Mutex<Vec<(dsipc_tokio::StopHandle, tokio::task::JoinHandle<()>)>>,
    options: Options,
}

impl Collector {
    fn new(options: Options) -> Result<Collector> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = rt.handle().clone();
        let (done, ended) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("counters".into())
            .spawn(move || {
                rt.block_on(async {
                    let _ = ended.await;
                })
            })?;
        Ok(Collector {
            store: Arc::new(Mutex::new(Store::default())),
            stop: Arc::new(AtomicBool::new(false)),
            handle,
            done: Mutex::new(Some(done)),
            thread: Mutex::new(Some(thread)),
            sessions: Mutex::new(Vec::new()),
            options,
        })
    }

    /// Starts collecting runtime `pid`'s counters (once, however often it is added); `Err`
    /// if its session could not start. Waits for the start: not for a tokio task.
    pub fn add(&self, pid: u32) -> Result<()> {
        if !lock(&self.store).try_add_runtime(pid) {
            return Ok(());
        }
        let o = &self.options;
        let client = match dsipc_tokio::DiagnosticsClient::for_pid_in(pid, o.tmpdir.as_deref()) {
            Ok(c) => c.with_timeout(o.timeout),
            Err(e) => {
                lock(&self.store).remove(pid);
                return Err(e.into());
            }
        };
        let (counters, interval, caps) = (o.counters.clone(), o.interval, o.caps);
        let store = Arc::clone(&self.store);
        let (tx, rx) = std::sync::mpsc::channel();
        let task = self.handle.spawn(async move {
            let major = client.process_info().await.ok().and_then(|i| i.clr_major());
            let mut config = CountersConfig::new(counters, interval, major);
            config.max_time_series = caps.series;
            config.max_histograms = caps.histograms;
            let _ = spawn_session(client, pid, config, store, "dsipc", Some(tx)).await;
        });
        let stop = match rx.recv() {
            Ok(Ok(stop)) => stop,
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => {
                return Err(CliError::Failed(format!(
                    "pid {}: counters session lost",
                    pid
                )))
            }
        };
        eprintln!("dsipc: pid {}: counters session started", pid);
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        sessions.retain(|(_, t)| !t.is_finished());
        sessions.push((stop, task));
        Ok(())
    }

    /// The Prometheus text of every series held now.
    pub fn render(&self) -> String {
        lock(&self.store).render()
    }

    /// A flag that, once set, ends the serving of an [`Exporter`].
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// Stops every session (StopTracing, each drained to its end), waits for them, and ends
    /// the runtime's thread.
    pub fn finish(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let done = match self.done.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(d) => d,
            None => return, // finished already: the runtime's thread is gone
        };
        let sessions =
            std::mem::take(&mut *self.sessions.lock().unwrap_or_else(|p| p.into_inner()));
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        self.handle.spawn(async move {
            for (stop, _) in &sessions {
                // A runtime that exited meanwhile cannot be asked; its stream ended anyway.
                let _ = stop.stop().await;
            }
            for (_, task) in sessions {
                let _ = task.await;
            }
            let _ = tx.send(());
        });
        let _ = rx.recv();
        let _ = done.send(());
        if let Some(t) = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = t.join();
        }
    }
}

/// A Prometheus endpoint for a [`Collector`] (`counters export`, `monitor --metrics`): its
/// HTTP listener runs on the collector's runtime.
pub struct Exporter {
    server: Arc<http::Server>,
    collector: Arc<Collector>,
}

impl Exporter {
    /// Binds the endpoint; nothing is served until [`serve_until_interrupted`].
    fn bind(listen: &str, options: Options) -> Result<Exporter> {
        let collector = Arc::new(Collector::new(options)?);
        let render = Arc::clone(&collector);
        let server = http::Server::bind(listen, Arc::new(move || render.render()))
            .map_err(|e| CliError::Failed(format!("cannot listen on {}: {}", listen, e)))?;
        Ok(Exporter {
            server: Arc::new(server),
            collector,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.server.local_addr()
    }

    /// Starts exporting runtime `pid`'s counters.
    pub fn add(&self, pid: u32) -> Result<()> {
        self.collector.add(pid)
    }

    /// A flag that, once set, ends [`serve`](Self::serve) and every session.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.collector.stop_flag()
    }

    /// Serves until the stop flag is set (looked at every 50 ms), then stops every session.
    pub fn serve(&self) -> Result<()> {
        let server = Arc::clone(&self.server);
        let (tx, rx) = std::sync::mpsc::channel();
        let listener = self.collector.handle.spawn(async move {
            let served = server.serve().await;
            let _ = tx.send(served);
        });
        let mut served = Ok(());
        while !self.collector.stop.load(Ordering::SeqCst) {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(r) => {
                    // The listener ended by itself: an error (it serves until stopped).
                    served = r;
                    break;
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        listener.abort();
        self.collector.finish();
        served?;
        Ok(())
    }

    /// Serves until Ctrl-C.
    pub fn serve_until_interrupted(&self) -> Result<()> {
        let stop = self.stop_flag();
        let watcher = std::thread::spawn(move || {
            while !term::interrupted() && !stop.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(100));
            }
            stop.store(true, Ordering::SeqCst);
        });
        let r = self.serve();
        let _ = watcher.join();
        r
    }
}

fn lock(m: &Mutex<Store>) -> std::sync::MutexGuard<'_, Store> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// `dsipc monitor --metrics ADDR [--counters LIST] [--refresh-interval SECS]`: an
/// [`Exporter`] serving on its own thread, to which the monitor adds every runtime that
/// advertises (by its pid, over the runtime's default diagnostic socket).
pub struct MonitorMetrics {
    exporter: Arc<Exporter>,
    server: Option<std::thread::JoinHandle<Result<()>>>,
}

/// The `--metrics` part of `dsipc monitor`, if asked for.
pub fn monitor_metrics(
    p: &Parsed,
    tmpdir: Option<PathBuf>,
    timeout: Duration,
) -> Result<Option<MonitorMetrics>> {
    let addr = match p.value("--metrics") {
        Some(a) => a,
        None => {
            if p.value("--counters").is_some() || p.value("--refresh-interval").is_some() {
                return Err(CliError::Usage(
                    "--counters and --refresh-interval need --metrics ADDR".into(),
                ));
            }
            return Ok(None);
        }
    };
    let counters = match p.value("--counters") {
        Some(list) => CounterSet::parse(list).map_err(|e| CliError::Usage(e.to_string()))?,
        None => CounterSet::default(),
    };
    let options = Options {
        pids: Vec::new(),
        counters,
        interval: interval_option(p)?,
        tmpdir,
        timeout,
        caps: caps_option(p)?,
    };
    let exporter = Arc::new(Exporter::bind(addr, options)?);
    eprintln!(
        "dsipc: metrics on http://{}/metrics",
        exporter.local_addr()?
    );
    let serving = Arc::clone(&exporter);
    let server = std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || serving.serve())?;
    Ok(Some(MonitorMetrics {
        exporter,
        server: Some(server),
    }))
}

impl MonitorMetrics {
    /// Starts exporting `pid` on a thread of its own (the accept loop does not wait).
    pub fn add_later(&self, pid: u64) {
        let pid = match u32::try_from(pid) {
            Ok(p) => p,
            Err(_) => return,
        };
        let exporter = Arc::clone(&self.exporter);
        let _ = std::thread::Builder::new()
            .name("counters-start".into())
            .spawn(move || {
                if let Err(e) = exporter.add(pid) {
                    eprintln!("dsipc: pid {}: counters: {}", pid, clean(&e.to_string()));
                }
            });
    }

    /// Stops serving and every session.
    pub fn finish(mut self) {
        self.exporter.stop_flag().store(true, Ordering::SeqCst);
        if let Some(s) = self.server.take() {
            let _ = s.join();
        }
    }
}
