//! The monitor with a thread per connection, where dsipc-mio does not build (Windows: its
//! build uses Rust 1.63, too old for mio 1.x) or is left out (`--no-default-features`).
//!
//! The main thread only accepts; each connection's thread reads the Advertise (within
//! `--timeout`), then resumes the runtime (within `--timeout`) or holds its connection.
//! None of them waits for another. Past `--max-connections`, the oldest held runtime is let
//! go (it reconnects); when none is held, the new connection is refused (a connection that
//! has not advertised yet cannot be taken from its thread: its deadline bounds it).

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::Duration;

use dsipc::wire::Guid;
use dsipc_std::reverse::{PendingConnection, ReverseListener};

use super::{announce, Action, Options, TICK};
use crate::{term, CliError, CliResult};

use super::conns::Conns;
use dsipc::session::HoldsRuntime;

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
type State = Conns<u64, Phase>;

struct Shared {
    timeout: Duration,
    as_json: bool,
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

fn serve(shared: Arc<Shared>, id: u64, pending: PendingConnection) {
    let conn = match pending.read_advertise(shared.timeout) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("dsipc: {}", e);
            shared.lock().open.remove(&id);
            return;
        }
    };
    let cookie = conn.cookie();
    let (mut line, action) = {
        let mut st = shared.lock();
        // A runtime reconnects as soon as its connection closes: if that was a resume,
        // its thread may not have recorded the outcome yet. Decide after it did.
        while st.book.is_resuming(&cookie) {
            st = match shared.resume_ended.wait_timeout(st, PRUNE_EVERY) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        let decided = super::advertised(&mut st.book, conn.pid(), cookie);
        // A newer connection replaces the runtime's previous one.
        if let Some(old) = st.unhold(&cookie) {
            st.forget(old);
        }
        decided
    };
    match action {
        Action::Resume => {
            let outcome = conn
                .into_client()
                .with_timeout(shared.timeout)
                .resume_runtime()
                .map_err(|e| e.to_string());
            let mut st = shared.lock();
            super::resume_done(&mut st.book, &mut line, outcome);
            st.print(&line, shared.as_json);
            st.open.remove(&id);
            shared.resume_ended.notify_all();
        }
        Action::Hold => {
            let (tx, rx) = mpsc::channel();
            {
                let mut st = shared.lock();
                match st.open.get_mut(&id) {
                    Some(p) => {
                        *p = Phase::Held {
                            cookie,
                            _release: tx,
                        }
                    }
                    None => return,
                }
                st.hold(cookie, id);
                st.print(&line, shared.as_json);
            }
            loop {
                match rx.recv_timeout(PRUNE_EVERY) {
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
fn admit(shared: &Arc<Shared>, pending: PendingConnection, max: usize) {
    let id = {
        let mut st = shared.lock();
        if st.open.len() >= max {
            st.cap_reached(max, "letting the oldest held runtime go");
            if !release_oldest_held(&mut st) {
                // Every connection is busy within its deadline: refuse this one.
                return;
            }
        }
        let id = st.number();
        st.open.insert(id, Phase::Busy);
        id
    };
    let for_thread = shared.clone();
    let spawned = thread::Builder::new()
        .name("dsipc-monitor-conn".into())
        .spawn(move || serve(for_thread, id, pending));
    if let Err(e) = spawned {
        eprintln!("dsipc: cannot start a thread for a connection: {}", e);
        shared.lock().open.remove(&id);
    }
}

pub(super) fn run(opts: &Options) -> CliResult {
    term::catch_interrupts();
    let mut listener = ReverseListener::bind(&opts.address)
        .map_err(|e| CliError::Failed(format!("cannot listen: {}", e)))?;
    announce(&opts.address, listener.address(), opts.resume);
    let shared = Arc::new(Shared {
        timeout: opts.timeout,
        as_json: opts.as_json,
        state: Mutex::new(State::new(opts.resume)),
        resume_ended: Condvar::new(),
    });
    let mut failing = false;
    loop {
        if term::interrupted() || shared.lock().stdout_gone {
            break;
        }
        match listener.accept_pending(TICK) {
            Ok(Some(pending)) => {
                failing = false;
                admit(&shared, pending, opts.max_connections);
            }
            Ok(None) => {}
            Err(e) => {
                if !failing {
                    failing = true;
                    eprintln!("dsipc: {} (retrying)", e);
                }
                thread::sleep(ACCEPT_RETRY);
            }
        }
    }
    // Held connections: their threads close them.
    shared.lock().open.clear();
    drop(listener);
    if term::interrupted() {
        eprintln!("dsipc: interrupted; closed {}", opts.address.display());
    }
    Ok(())
}
