//! `dsipc counters export` and `monitor --metrics`: the command lines over dsipc-serve's
//! Prometheus [`Exporter`].

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use dsipc_serve::prom::{Exporter, ExporterOptions};
use dsipc_trace::counters::CounterSet;

use super::{caps_option, interval_option, options, Options, Result, VALUES};
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
    let exporter = bind(&listen, o)?;
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
    serve_until_interrupted(&exporter)
}

/// The exporter for `o` on `listen`.
fn bind(listen: &str, o: Options) -> Result<Exporter> {
    let mut options = ExporterOptions::new(o.counters, o.interval);
    options.tmpdir = o.tmpdir;
    options.timeout = o.timeout;
    options.max_time_series = o.caps.series;
    options.max_histograms = o.caps.histograms;
    Exporter::bind(listen, options).map_err(serve_error)
}

/// A library error as the CLI says it (a runtime's refusal keeps its own words).
fn serve_error(e: dsipc_serve::ServeError) -> CliError {
    match e {
        dsipc_serve::ServeError::Ipc { source, .. } => CliError::Ipc(source),
        other => CliError::Failed(other.to_string()),
    }
}

/// Serves until Ctrl-C.
fn serve_until_interrupted(exporter: &Exporter) -> Result<()> {
    let stop = exporter.stop_flag();
    let watcher = std::thread::spawn(move || {
        while !term::interrupted() && !stop.load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(100));
        }
        stop.store(true, Ordering::SeqCst);
    });
    let r = exporter.serve().map_err(serve_error);
    let _ = watcher.join();
    r
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
    let exporter = Arc::new(bind(addr, options)?);
    eprintln!(
        "dsipc: metrics on http://{}/metrics",
        exporter.local_addr()?
    );
    let serving = Arc::clone(&exporter);
    let server = std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || serving.serve().map_err(serve_error))?;
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
