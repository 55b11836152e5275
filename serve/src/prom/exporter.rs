//! Counters of any number of runtimes kept for a Prometheus endpoint of their own
//! ([`Collector`], [`Exporter`]): `dsipc counters export` and `dsipc monitor --metrics`.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsipc_trace::counters::{CounterSet, CountersConfig};

use super::{listener, spawn_session, Store};
use crate::ServeError;

/// What a [`Collector`] collects.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ExporterOptions {
    /// The counters (dotnet-counters' `--counters`).
    pub counters: CounterSet,
    /// Seconds between two publications (`--refresh-interval`).
    pub interval: f64,
    /// Where runtimes' sockets are (`None`: where each runtime says).
    pub tmpdir: Option<PathBuf>,
    /// Each call's timeout.
    pub timeout: Duration,
    /// dotnet-counters' `MaxTimeSeries`, asked of the runtime and enforced.
    pub max_time_series: u32,
    /// dotnet-counters' `MaxHistograms`, asked of the runtime and enforced.
    pub max_histograms: u32,
}

impl ExporterOptions {
    /// `counters` every `interval` seconds, with dotnet-counters' defaults otherwise.
    pub fn new(counters: CounterSet, interval: f64) -> ExporterOptions {
        ExporterOptions {
            counters,
            interval,
            tmpdir: None,
            timeout: dsipc_tokio::DEFAULT_TIMEOUT,
            max_time_series: 1000,
            max_histograms: 10,
        }
    }
}

fn lock(m: &Mutex<Store>) -> std::sync::MutexGuard<'_, Store> {
    m.lock().unwrap_or_else(|p| p.into_inner())
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
    options: ExporterOptions,
}

impl Collector {
    /// A collector for `options`, its tokio runtime on a thread of its own.
    pub fn new(options: ExporterOptions) -> Result<Collector, ServeError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(ServeError::Io)?;
        let handle = rt.handle().clone();
        let (done, ended) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("counters".into())
            .spawn(move || {
                rt.block_on(async {
                    let _ = ended.await;
                })
            })
            .map_err(ServeError::Io)?;
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
    pub fn add(&self, pid: u32) -> Result<(), ServeError> {
        if !lock(&self.store).try_add_runtime(pid) {
            return Ok(());
        }
        let o = &self.options;
        let client = match dsipc_tokio::DiagnosticsClient::for_pid_in(pid, o.tmpdir.as_deref()) {
            Ok(c) => c.with_timeout(o.timeout),
            Err(e) => {
                lock(&self.store).remove(pid);
                return Err(ServeError::Ipc { pid, source: e });
            }
        };
        let (counters, interval) = (o.counters.clone(), o.interval);
        let (max_time_series, max_histograms) = (o.max_time_series, o.max_histograms);
        let store = Arc::clone(&self.store);
        let (tx, rx) = std::sync::mpsc::channel();
        let task = self.handle.spawn(async move {
            let major = client.process_info().await.ok().and_then(|i| i.clr_major());
            let mut config = CountersConfig::new(counters, interval, major);
            config.max_time_series = max_time_series;
            config.max_histograms = max_histograms;
            let _ = spawn_session(client, pid, config, store, "dsipc", Some(tx)).await;
        });
        let stop = match rx.recv() {
            Ok(Ok(stop)) => stop,
            Ok(Err(e)) => return Err(ServeError::Ipc { pid, source: e }),
            Err(_) => return Err(ServeError::SessionLost { pid }),
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
    server: Arc<listener::Server>,
    collector: Arc<Collector>,
}

impl Exporter {
    /// Binds the endpoint; nothing is served until [`serve`](Self::serve).
    pub fn bind(listen: &str, options: ExporterOptions) -> Result<Exporter, ServeError> {
        let collector = Arc::new(Collector::new(options)?);
        let render = Arc::clone(&collector);
        let server = listener::Server::bind(listen, Arc::new(move || render.render())).map_err(
            |source| ServeError::Bind {
                addr: listen.to_string(),
                source,
            },
        )?;
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
    pub fn add(&self, pid: u32) -> Result<(), ServeError> {
        self.collector.add(pid)
    }

    /// A flag that, once set, ends [`serve`](Self::serve) and every session.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.collector.stop_flag()
    }

    /// Serves until the stop flag is set (looked at every 50 ms), then stops every session.
    pub fn serve(&self) -> Result<(), ServeError> {
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
        served.map_err(ServeError::Io)
    }
}
