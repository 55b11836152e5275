//! `dsipc counters export` and `monitor --metrics`: counters kept for a Prometheus endpoint
//! ([`Collector`], [`Exporter`]), and the one session loop that feeds them
//! ([`spawn_session`]).

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsipc_serve::prom::spawn_session;
use dsipc_trace::counters::{CounterSet, CountersConfig};

use super::{caps_option, interval_option, options, Options, Result, Store, VALUES};
use crate::args::{parse, Parsed};
use crate::error::CliError;
use crate::term;
use crate::term::clean;

pub(super) fn export(args: &[String]) -> Result<()> {
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
    server: Arc<dsipc_serve::prom::listener::Server>,
    collector: Arc<Collector>,
}

impl Exporter {
    /// Binds the endpoint; nothing is served until [`serve_until_interrupted`].
    fn bind(listen: &str, options: Options) -> Result<Exporter> {
        let collector = Arc::new(Collector::new(options)?);
        let render = Arc::clone(&collector);
        let server =
            dsipc_serve::prom::listener::Server::bind(listen, Arc::new(move || render.render()))
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
