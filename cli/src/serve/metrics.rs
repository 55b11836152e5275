//! `/metrics`: the default process's counters, collected by the CLI's one counters session
//! loop ([`crate::counters::spawn_session`]: a dsipc-tokio session, so connect and listen
//! mode alike, decoded by dsipc-trace) into the one Prometheus store and writer the other
//! commands use (dotnet-monitor's names).
//!
//! The session starts at the first scrape that finds a default process and runs until that
//! runtime ends it (it exits); its series go with it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsipc_trace::counters::{CounterSet, CountersConfig};

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
        // Detached: the session runs until the runtime ends it (it exits).
        drop(crate::counters::spawn_session(
            client,
            pid,
            config,
            Arc::clone(&self.store),
            "dsipc: serve",
            None,
        ));
    }
}
