//! A reverse-port monitor with a thread per connection, where dsipc-mio does not build
//! (Windows, whose build uses Rust 1.63, too old for mio 1.x) or is left out. Runtimes
//! started with `DOTNET_DiagnosticPorts=ADDRESS,connect` connect, advertise, and wait for
//! one command; [`run`] reports each Advertise to the caller, resumes each runtime once if
//! asked, and otherwise holds its latest connection open and idle (a closed connection
//! makes the runtime reconnect at once). Which runtime to resume and which to hold is the
//! core's `dsipc::session::ReverseBook`.
//!
//! A thread accepts; each connection's thread reads the Advertise (within
//! [`MonitorOptions::timeout`]), then resumes the runtime (within the timeout) or holds its
//! connection. None of them waits for another; the caller's callback is called on the
//! caller's thread only. Past [`MonitorOptions::max_connections`], the oldest held runtime
//! is let go (it reconnects); when none is held, the new connection is refused (a
//! connection that has not advertised yet cannot be taken from its thread: its deadline
//! bounds it).

use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use dsipc::session::{AdvertiseAction, HoldsRuntime, ReverseConnections};
use dsipc::wire::Guid;
use dsipc_platform::reverse::MonitorReporter;

/// What a monitor is asked to do, reports, and fails with (dsipc-platform's, the same types
/// as dsipc-mio's monitor takes).
pub use dsipc_platform::reverse::{
    MonitorError, MonitorOptions, MonitorReport, ResumeOutcome, Shedding, DEFAULT_MAX_CONNECTIONS,
    MONITOR_TICK,
};

use super::{AcceptError, PendingConnection, ReverseListener};

/// How often a held connection is checked for a runtime that exited.
const PRUNE_EVERY: Duration = Duration::from_secs(1);
/// Pause after a failed accept.
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

enum Phase {
    /// Reading the Advertise, or resuming.
    Busy,
    /// Held; dropping `release` lets the connection's thread close it.
    Held { cookie: Guid, _release: Sender<()> },
}

impl HoldsRuntime for Phase {
    fn held_cookie(&self) -> Option<Guid> {
        match self {
            Phase::Held { cookie, .. } => Some(*cookie),
            Phase::Busy => None,
        }
    }
}

/// Connections by accept order.
type State = ReverseConnections<u64, Phase>;

/// What the accepting thread and the connections' threads tell the caller's thread.
enum Message {
    Accepted(PendingConnection),
    AcceptFailed(io::Error),
    Report(MonitorReport),
}

struct Shared {
    timeout: Duration,
    state: Mutex<State>,
    /// Notified when a resume ends.
    resume_ended: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Lets the oldest held runtime go (its thread closes the connection); false if none is held.
fn release_oldest_held(st: &mut State) -> bool {
    let oldest = st
        .open
        .iter()
        .filter(|(_, p)| matches!(p, Phase::Held { .. }))
        .map(|(id, _)| *id)
        .min();
    oldest.and_then(|id| st.forget(id)).is_some()
}

/// Serves connection `id`: its Advertise, then its resume or its hold. Reports go to `tx`
/// while the state is locked, so that they come in the order the book saw them.
fn serve(shared: Arc<Shared>, id: u64, pending: PendingConnection, tx: Sender<Message>) {
    let conn = match pending.read_advertise(shared.timeout) {
        Ok(c) => c,
        Err(e) => {
            shared.lock().open.remove(&id);
            let report = match e {
                AcceptError::AdvertiseTimeout { timeout } => MonitorReport::NoAdvertise { timeout },
                other => MonitorReport::PeerDropped {
                    error: other.into(),
                },
            };
            let _ = tx.send(Message::Report(report));
            return;
        }
    };
    let (pid, cookie) = (conn.pid(), conn.cookie());
    let (reconnect, action) = {
        let mut st = shared.lock();
        // A runtime reconnects as soon as its connection closes: if that was a resume,
        // its thread may not have recorded the outcome yet. Decide after it did.
        while st.book.is_resuming(&cookie) {
            st = match shared.resume_ended.wait_timeout(st, PRUNE_EVERY) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        let decided = st.book.advertised(cookie);
        // A newer connection replaces the runtime's previous one.
        if let Some(old) = st.unhold(&cookie) {
            st.forget(old);
        }
        decided
    };
    let advertised = |resume| {
        Message::Report(MonitorReport::Advertised {
            pid,
            cookie,
            reconnect,
            resume,
        })
    };
    match action {
        AdvertiseAction::Resume => {
            let outcome = conn
                .into_client()
                .with_timeout(shared.timeout)
                .resume_runtime();
            let mut st = shared.lock();
            st.book.resume_done(cookie, outcome.is_ok());
            let _ = tx.send(advertised(outcome.into()));
            st.open.remove(&id);
            shared.resume_ended.notify_all();
        }
        AdvertiseAction::Hold => {
            let (release, released) = mpsc::channel();
            {
                let mut st = shared.lock();
                match st.open.get_mut(&id) {
                    Some(p) => {
                        *p = Phase::Held {
                            cookie,
                            _release: release,
                        }
                    }
                    None => return,
                }
                st.hold(cookie, id);
                let _ = tx.send(advertised(ResumeOutcome::NotAsked));
            }
            drop(tx);
            loop {
                match released.recv_timeout(PRUNE_EVERY) {
                    Err(RecvTimeoutError::Timeout) if !conn.is_closed() => {}
                    _ => break,
                }
            }
            shared.lock().forget(id);
            drop(conn);
        }
    }
}

/// Starts a thread for a new connection (or refuses it at the cap).
fn admit(
    shared: &Arc<Shared>,
    pending: PendingConnection,
    max: usize,
    reporter: &mut MonitorReporter<'_>,
    tx: &Sender<Message>,
) {
    let (admitted, at_cap) = {
        let mut st = shared.lock();
        let at_cap = st.open.len() >= max;
        // Every connection busy within its deadline: this one is refused.
        let admitted = if at_cap && !release_oldest_held(&mut st) {
            None
        } else {
            let id = st.number();
            st.open.insert(id, Phase::Busy);
            Some(id)
        };
        (admitted, at_cap)
    };
    if at_cap {
        reporter.cap_reached(max, Shedding::OldestHeld);
    }
    let id = match admitted {
        Some(id) => id,
        None => return,
    };
    let (for_thread, tx) = (shared.clone(), tx.clone());
    let spawned = thread::Builder::new()
        .name("dsipc-monitor-conn".into())
        .spawn(move || serve(for_thread, id, pending, tx));
    if let Err(e) = spawned {
        shared.lock().open.remove(&id);
        reporter.report(MonitorReport::PeerDropped { error: e.into() });
    }
}

/// Accepts peers until `stopping`, handing them to the caller's thread; drops the
/// listener (removing its socket file) when done.
fn accept_loop(mut listener: ReverseListener, stopping: &AtomicBool, tx: &Sender<Message>) {
    while !stopping.load(Ordering::SeqCst) {
        let sent = match listener.accept_pending(MONITOR_TICK) {
            Ok(Some(pending)) => tx.send(Message::Accepted(pending)),
            Ok(None) => Ok(()),
            Err(e) => {
                let error = match e {
                    AcceptError::Accept(e) => e,
                    other => io::Error::new(io::ErrorKind::Other, other),
                };
                let sent = tx.send(Message::AcceptFailed(error));
                thread::sleep(ACCEPT_RETRY);
                sent
            }
        };
        if sent.is_err() {
            break;
        }
    }
}

/// Listens on the reverse port `address` (on Windows a pipe name) and serves runtimes as
/// `options` say, until `stop` returns true (looked at every [`MONITOR_TICK`] at least) or
/// `report` returns false. `report` is called on this thread only. Held connections are
/// closed and the socket file removed before it returns; a peer still reading its
/// Advertise is closed by its thread at its deadline, reporting nothing more.
pub fn run(
    address: &Path,
    options: &MonitorOptions,
    stop: &dyn Fn() -> bool,
    report: &mut dyn FnMut(MonitorReport) -> bool,
) -> Result<(), MonitorError> {
    let listener = ReverseListener::bind(address)?;
    let mut reporter = MonitorReporter::new(report);
    reporter.report(MonitorReport::Listening {
        address: listener.address().to_path_buf(),
    });
    let (tx, rx) = mpsc::channel();
    let stopping = Arc::new(AtomicBool::new(false));
    let acceptor = {
        let (tx, stopping) = (tx.clone(), stopping.clone());
        thread::Builder::new()
            .name("dsipc-monitor-accept".into())
            .spawn(move || accept_loop(listener, &stopping, &tx))
            .map_err(|source| MonitorError::Io {
                op: "start the accepting thread",
                source,
            })?
    };
    let shared = Arc::new(Shared {
        timeout: options.timeout,
        state: Mutex::new(State::new(options.resume)),
        resume_ended: Condvar::new(),
    });
    let max = options.max_connections.max(1);
    while !stop() && reporter.go_on() {
        match rx.recv_timeout(MONITOR_TICK) {
            Ok(Message::Accepted(pending)) => {
                reporter.accepted();
                admit(&shared, pending, max, &mut reporter, &tx);
            }
            Ok(Message::AcceptFailed(error)) => reporter.accept_failed(error, max),
            Ok(Message::Report(report)) => reporter.report(report),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    stopping.store(true, Ordering::SeqCst);
    // Within a tick; the listener's socket file goes with it.
    let _ = acceptor.join();
    // Peers accepted but not admitted are closed; held connections: their threads close
    // them.
    while rx.try_recv().is_ok() {}
    shared.lock().open.clear();
    Ok(())
}
