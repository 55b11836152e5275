//! The one counters session loop that feeds a [`Store`]: `counters export`'s, `monitor
//! --metrics`' and serve's `/metrics`.

use std::sync::{Arc, Mutex};

use dsipc_recipes::counters::AsyncCounterRun;
use dsipc_trace::counters::{CounterEvent, CountersConfig};
use dsipc_trace::format::clean;

use super::Store;

fn lock(m: &Mutex<Store>) -> std::sync::MutexGuard<'_, Store> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs one runtime's counters session on the current tokio runtime (dsipc-tokio's
/// [`AsyncCounterRun`]), its samples straight into `store`;
/// its series go when it ends. `started` hears whether the session started (its stop
/// handle). The one session loop of `counters export`, `monitor --metrics` and `serve`'s
/// `/metrics`; `who` prefixes its messages (`dsipc`, `dsipc: serve`).
pub fn spawn_session(
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
        let run = match AsyncCounterRun::start(&client, &config).await {
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
        for p in end.problems() {
            eprintln!("{}: pid {}: {}", who, pid, p);
        }
        lock(&store).remove(pid);
        if !end.stopped {
            eprintln!(
                "{}: pid {}: runtime exited; its series are dropped",
                who, pid
            );
        }
    })
}
