//! `/metrics`: the default process's counters, collected by a dsipc-tokio session (so
//! connect and listen mode alike) decoded by dsipc-trace's counters decoder into the one
//! Prometheus store and writer the other commands use (dotnet-monitor's names).
//!
//! The session starts at the first scrape that finds a default process and runs until that
//! runtime ends it (it exits); its series go with it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsipc_trace::counters::{CounterEvent, CounterSet, CountersConfig, Decoder};

use super::procs::Runtime;
use crate::counters::Store;

/// Time the runtime has to start the session.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The series of the runtimes being collected.
pub struct Metrics {
    store: Arc<Mutex<Store>>,
    counters: CounterSet,
    interval: f64,
}

fn lock(store: &Mutex<Store>) -> std::sync::MutexGuard<'_, Store> {
    store.lock().unwrap_or_else(|p| p.into_inner())
}

impl Metrics {
    /// Collecting `counters` every `interval` seconds.
    pub fn new(counters: CounterSet, interval: f64) -> Metrics {
        Metrics {
            store: Arc::new(Mutex::new(Store::default())),
            counters,
            interval,
        }
    }

    /// The exposition of every series held.
    pub fn render(&self) -> String {
        lock(&self.store).render()
    }

    /// Collects `runtime`'s counters from now on (once, however often it is asked).
    pub fn ensure(&self, runtime: &Runtime) {
        let pid = runtime.pid;
        if !lock(&self.store).try_add_runtime(pid) {
            return;
        }
        let major = runtime.major_version();
        let config = CountersConfig::new(self.counters.clone(), self.interval, major);
        let client = runtime.client(START_TIMEOUT);
        let store = Arc::clone(&self.store);
        tokio::spawn(async move {
            let owned = config.providers();
            let providers: Vec<_> = owned.iter().map(|p| p.as_provider()).collect();
            let mut session = match client.collect_tracing(&providers, 16, false).await {
                Ok(s) => s,
                Err(e) => {
                    eprintln!(
                        "dsipc: serve: pid {}: counters: {}",
                        pid,
                        crate::term::clean(&e.to_string())
                    );
                    lock(&store).remove(pid);
                    return;
                }
            };
            let mut decoder = Decoder::new(&config);
            let mut each = |ev: CounterEvent| match ev {
                CounterEvent::Sample(s) => lock(&store).record(pid, &s),
                CounterEvent::Notice(n) => eprintln!(
                    "dsipc: serve: pid {}: {}",
                    pid,
                    crate::term::clean(&n.to_string())
                ),
            };
            while let Some(chunk) = session.next_chunk().await {
                match chunk {
                    Ok(data) => decoder.feed(&data, &mut each),
                    Err(_) => break,
                }
            }
            decoder.finish(&mut each);
            lock(&store).remove(pid);
        });
    }
}
