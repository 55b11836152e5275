//! `dsipc counters monitor|collect|export`: live counters in dotnet-counters' conventions,
//! and a Prometheus endpoint.

mod http;
mod output;
mod prom;

use std::fs::OpenOptions;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use dsipc_std::counters::CounterSession;
use dsipc_std::{DiagnosticsClient, Error};
use dsipc_trace::counters::{CounterEvent, CounterSet, CountersConfig, Notice};

use crate::args::{parse, usage, Parsed, UsageError};
use crate::term;
use crate::term::clean;

pub use prom::Store;

/// The usage lines of `dsipc counters`, for the main usage text.
pub const USAGE: &str = "\
  counters monitor PID [--counters LIST] [--refresh-interval SECS]
                                   live counters, redrawn in place on a terminal
  counters collect PID [--counters LIST] [--refresh-interval SECS] [--duration SECS]
                   [--format csv|json] [-o FILE|-]
                                   counters into dotnet-counters' csv or json file
                                   (default counter.csv; never overwrites a file)
  counters export PID... --listen ADDR [--counters LIST] [--refresh-interval SECS]
                                   serve http://ADDR/metrics in Prometheus' text format
                                   LIST: System.Runtime[cpu-usage,gc-heap-size],MyMeter
                                   (default System.Runtime); SECS default 1
";

/// Why a counters command failed.
#[derive(Debug)]
pub enum CountersError {
    /// Bad arguments (exit status 2).
    Usage(String),
    /// Anything else (exit status 1).
    Failed(String),
}

impl From<UsageError> for CountersError {
    fn from(e: UsageError) -> Self {
        CountersError::Usage(e.0)
    }
}

impl From<io::Error> for CountersError {
    fn from(e: io::Error) -> Self {
        CountersError::Failed(e.to_string())
    }
}

impl From<Error> for CountersError {
    fn from(e: Error) -> Self {
        CountersError::Failed(e.to_string())
    }
}

type Result<T> = std::result::Result<T, CountersError>;

/// `dsipc counters SUBCOMMAND ARGS...`
pub fn cmd_counters(rest: &[String]) -> Result<()> {
    let sub = match rest.first() {
        Some(s) => s.as_str(),
        None => {
            return Err(CountersError::Usage(
                "counters needs monitor, collect or export".into(),
            ))
        }
    };
    let args = &rest[1..];
    match sub {
        "monitor" => monitor(args),
        "collect" => collect(args),
        "export" => export(args),
        other => Err(CountersError::Usage(format!(
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
];

/// Options every counters command takes.
struct Options {
    pids: Vec<u32>,
    counters: CounterSet,
    interval: u32,
    tmpdir: Option<PathBuf>,
    timeout: Duration,
}

fn parse_pid(s: &str) -> std::result::Result<u32, UsageError> {
    match s.parse::<u32>() {
        Ok(p) if p > 0 => Ok(p),
        _ => usage(format!("PID must be a positive integer, not {:?}", s)),
    }
}

fn seconds(what: &str, s: &str) -> std::result::Result<f64, UsageError> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v < 1e9 => Ok(v),
        _ => usage(format!(
            "{} wants a positive number of seconds, not {:?}",
            what, s
        )),
    }
}

fn options(p: &Parsed, many: bool) -> Result<Options> {
    let mut pids = Vec::new();
    for v in p.value("-p").into_iter().chain(p.value("--process-id")) {
        pids.push(parse_pid(v)?);
    }
    for v in &p.positionals {
        pids.push(parse_pid(crate::args::text("PID", v)?)?);
    }
    if pids.is_empty() {
        return Err(CountersError::Usage("missing PID".into()));
    }
    if !many && pids.len() > 1 {
        return Err(CountersError::Usage(format!(
            "unexpected argument {}",
            pids[1]
        )));
    }
    pids.dedup();
    let counters = match p.value("--counters") {
        Some(list) => CounterSet::parse(list).map_err(|e| CountersError::Usage(e.to_string()))?,
        None => CounterSet::default(),
    };
    let interval = interval_option(p)?;
    let timeout = match p.value("--timeout") {
        Some(s) => Duration::from_secs_f64(seconds("--timeout", s)?),
        None => dsipc_std::DEFAULT_TIMEOUT,
    };
    Ok(Options {
        pids,
        counters,
        interval,
        tmpdir: p.value("--tmpdir").map(PathBuf::from),
        timeout,
    })
}

fn interval_option(p: &Parsed) -> Result<u32> {
    Ok(match p.value("--refresh-interval") {
        Some(s) => {
            let v = seconds("--refresh-interval", s)?;
            if v.fract() != 0.0 || v > 86_400.0 {
                return Err(CountersError::Usage(format!(
                    "--refresh-interval wants whole seconds (1 to 86400), not {:?}",
                    s
                )));
            }
            v as u32
        }
        None => 1,
    })
}

/// The runtime's major version, from ProcessInfo2+ (`None` for .NET Core 3.x).
fn runtime_major(client: &DiagnosticsClient) -> Option<u32> {
    let info = client.process_info().ok()?;
    let v = info.clr_version?;
    v.split('.').next()?.parse().ok()
}

/// Connects to `pid` and starts its counters session.
fn start(o: &Options, pid: u32) -> Result<CounterSession<dsipc_std::Endpoint>> {
    let client = DiagnosticsClient::for_pid_in(pid, o.tmpdir.as_deref())?.with_timeout(o.timeout);
    let config = CountersConfig::new(o.counters.clone(), o.interval, runtime_major(&client));
    Ok(CounterSession::start(&client, &config)?)
}

/// How long to wait for a first sample before giving up: three intervals, at least 10 s.
fn first_sample_limit(interval: u32) -> Duration {
    Duration::from_secs(u64::from(interval).saturating_mul(3).max(10))
}

fn report_end(pid: u32, end: &dsipc_std::counters::SessionEnd) {
    if end.stats.malformed > 0 {
        eprintln!(
            "dsipc: pid {}: skipped {} malformed counter payload(s)",
            pid, end.stats.malformed
        );
    }
    if let Some(e) = &end.stats.stream_error {
        eprintln!(
            "dsipc: pid {}: the stream could not be decoded past: {}",
            pid, e
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
    let p = parse(args, VALUES, &[])?;
    let o = options(&p, false)?;
    let pid = o.pids[0];
    let json = match p.value("--format").unwrap_or("csv") {
        "csv" => false,
        "json" => true,
        other => {
            return Err(CountersError::Usage(format!(
                "--format is csv or json, not {:?}",
                other
            )))
        }
    };
    let duration = match p.value("--duration") {
        Some(s) => Some(Duration::from_secs_f64(seconds("--duration", s)?)),
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
    term::catch_interrupts();
    let session = start(&o, pid)?;
    // Create the file only once the session runs; never overwrite an existing one.
    let out: Box<dyn Write> = match &path {
        Some(path) => {
            let f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| {
                    CountersError::Failed(if e.kind() == io::ErrorKind::AlreadyExists {
                        format!("{} exists; not overwriting it", path.display())
                    } else {
                        format!("{}: {}", path.display(), e)
                    })
                })?;
            Box::new(BufWriter::new(f))
        }
        None => Box::new(io::stdout()),
    };
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
        if let Some(d) = duration {
            if started.elapsed() >= d {
                break;
            }
        }
        if writer.events() == 0 && started.elapsed() >= limit {
            failure = Some(format!("no counters received in {} s", limit.as_secs()));
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
    writer.finish()?;
    report_end(pid, &end);
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
        return Err(CountersError::Failed(f));
    }
    if events == 0 {
        return Err(CountersError::Failed(format!(
            "no counters received in {} s",
            started.elapsed().as_secs()
        )));
    }
    Ok(())
}

/// The target's process name (for the json file), as dotnet-counters records it.
fn process_name(pid: u32) -> String {
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
        println!(
            "# dsipc counters monitor: pid {}, every {} s",
            pid, o.interval
        );
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
            failure = Some(format!("no counters received in {} s", limit.as_secs()));
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
    report_end(pid, &end);
    if status == "Exited" {
        eprintln!(
            "dsipc: pid {}: the runtime ended the session (exited?)",
            pid
        );
    }
    match failure {
        Some(f) => Err(CountersError::Failed(f)),
        None => Ok(()),
    }
}

fn export(args: &[String]) -> Result<()> {
    let p = parse(args, VALUES, &[])?;
    let o = options(&p, true)?;
    let listen = match p.value("--listen") {
        Some(a) => a.to_string(),
        None => return Err(CountersError::Usage("export needs --listen ADDR".into())),
    };
    term::catch_interrupts();
    let exporter = Exporter::bind(
        &listen,
        o.counters.clone(),
        o.interval,
        o.tmpdir.clone(),
        o.timeout,
    )?;
    let mut started = 0;
    for &pid in &o.pids {
        match exporter.add(pid) {
            Ok(()) => started += 1,
            Err(e) => eprintln!("dsipc: pid {}: {}", pid, clean(message(&e))),
        }
    }
    if started == 0 {
        return Err(CountersError::Failed(
            "no runtime could be monitored".into(),
        ));
    }
    println!("listening on http://{}/metrics", exporter.local_addr()?);
    io::stdout().flush()?;
    exporter.serve_until_interrupted()
}

/// A Prometheus endpoint for the counters of any number of runtimes, added while it runs
/// (`counters export`, `monitor --metrics`). Each runtime's session is drained on a thread
/// of its own; its series are dropped when it exits.
pub struct Exporter {
    server: http::Server,
    store: Arc<Mutex<Store>>,
    stop: Arc<AtomicBool>,
    workers: Mutex<Vec<std::thread::JoinHandle<()>>>,
    options: Options,
}

impl Exporter {
    /// Binds the endpoint; nothing is served until [`serve_until_interrupted`].
    pub fn bind(
        listen: &str,
        counters: CounterSet,
        interval: u32,
        tmpdir: Option<PathBuf>,
        timeout: Duration,
    ) -> Result<Exporter> {
        let store = Arc::new(Mutex::new(Store::default()));
        let render_store = Arc::clone(&store);
        let server = http::Server::bind(listen, Arc::new(move || lock(&render_store).render()))
            .map_err(|e| CountersError::Failed(format!("cannot listen on {}: {}", listen, e)))?;
        Ok(Exporter {
            server,
            store,
            stop: Arc::new(AtomicBool::new(false)),
            workers: Mutex::new(Vec::new()),
            options: Options {
                pids: Vec::new(),
                counters,
                interval,
                tmpdir,
                timeout,
            },
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<std::net::SocketAddr> {
        self.server.local_addr()
    }

    /// Starts exporting runtime `pid`'s counters.
    pub fn add(&self, pid: u32) -> Result<()> {
        // One session per runtime, however often it is added.
        if !lock(&self.store).try_add_runtime(pid) {
            return Ok(());
        }
        let session = match start(&self.options, pid) {
            Ok(s) => s,
            Err(e) => {
                lock(&self.store).remove(pid);
                return Err(e);
            }
        };
        eprintln!("dsipc: pid {}: counters session started", pid);
        let store = Arc::clone(&self.store);
        let stop = Arc::clone(&self.stop);
        let worker = std::thread::Builder::new()
            .name(format!("counters-{}", pid))
            .spawn(move || pump(pid, session, &store, &stop))?;
        let mut workers = self.workers.lock().unwrap_or_else(|p| p.into_inner());
        workers.retain(|w| !w.is_finished());
        workers.push(worker);
        Ok(())
    }

    /// A flag that, once set, ends [`serve`](Self::serve) and every session.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stop)
    }

    /// Serves until the stop flag is set, then stops every session.
    pub fn serve(&self) -> Result<()> {
        let served = self.server.run(&self.stop);
        self.stop.store(true, Ordering::SeqCst);
        let workers = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|p| p.into_inner()));
        for w in workers {
            let _ = w.join();
        }
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

fn message(e: &CountersError) -> &str {
    match e {
        CountersError::Usage(m) | CountersError::Failed(m) => m,
    }
}

fn lock(m: &Mutex<Store>) -> std::sync::MutexGuard<'_, Store> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Moves one runtime's samples into the store until it exits or we stop.
pub fn pump(
    pid: u32,
    session: CounterSession<dsipc_std::Endpoint>,
    store: &Mutex<Store>,
    stop: &AtomicBool,
) {
    loop {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        match session.recv_timeout(Duration::from_millis(200)) {
            Ok(CounterEvent::Sample(s)) => lock(store).record(pid, &s),
            Ok(CounterEvent::Notice(n)) => {
                eprintln!("dsipc: pid {}: {}", pid, clean(&n.to_string()))
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let stopped_by_us = stop.load(Ordering::SeqCst);
    let end = session.stop();
    report_end(pid, &end);
    lock(store).remove(pid);
    if !stopped_by_us {
        eprintln!("dsipc: pid {}: runtime exited; its series are dropped", pid);
    }
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
                return Err(CountersError::Usage(
                    "--counters and --refresh-interval need --metrics ADDR".into(),
                ));
            }
            return Ok(None);
        }
    };
    let counters = match p.value("--counters") {
        Some(list) => CounterSet::parse(list).map_err(|e| CountersError::Usage(e.to_string()))?,
        None => CounterSet::default(),
    };
    let interval = interval_option(p)?;
    let exporter = Arc::new(Exporter::bind(addr, counters, interval, tmpdir, timeout)?);
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
                    eprintln!("dsipc: pid {}: counters: {}", pid, clean(message(&e)));
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
