//! The fake runtime: [`ServerConnection`] machines behind a listening socket (or Windows
//! pipe) and/or a reverse (connect) port, answering like a .NET 8 runtime unless told
//! otherwise. Only `transport.rs` knows whether connections are Unix sockets or pipes.

mod config;
mod record;
mod respond;
mod serve;
mod session;
mod transport;

#[cfg(unix)]
pub(crate) use transport::is_timeout;

pub use config::{Config, ReversePort};
pub use record::{Received, StreamEnd, StreamRecord};

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

#[cfg(doc)]
use dsipc::conn::ServerConnection;
use dsipc::wire::Advertise;
use dsipc::Command;

use crate::answer::{Answer, Identity, StreamSpec};
use serve::{accept_loop, reverse_loop};
use session::{RUNNING, SHUTDOWN};

/// How often blocked reads and sleeps look at the stop flag.
const TICK: Duration = Duration::from_millis(50);

#[derive(Debug, Default)]
struct State {
    received: Vec<Received>,
    streams: Vec<StreamRecord>,
    resumed: bool,
    advertised: u64,
    answers: HashMap<Command, Answer>,
    environment: Vec<String>,
}

struct Session {
    stop: Arc<AtomicU8>,
    thread: Option<JoinHandle<()>>,
    /// Unblocks a stalled write of the stream at shutdown (where the transport can).
    closer: Option<transport::Closer>,
}

struct Shared {
    identity: Identity,
    default_answer: Answer,
    reply_delay: Duration,
    stream: StreamSpec,
    idle_timeout: Duration,
    has_reverse: bool,
    stop: AtomicBool,
    state: Mutex<State>,
    changed: Condvar,
    sessions: Mutex<HashMap<u64, Session>>,
    next_connection: AtomicU64,
    next_session: AtomicU64,
}

/// A fake .NET runtime for tests, built on the core's [`ServerConnection`].
///
/// - **Listen port** ([`Config::listen_in`], [`Config::listen_at`]): a thread accepts
///   connections and serves them **one at a time**, like the runtime's single server thread
///   (a client that connects and stalls blocks the others, until the idle timeout).
/// - **Reverse port** ([`Config::reverse_port`]): another thread connects to the monitor,
///   sends the Advertise, serves one command, and reconnects, like the runtime (retrying
///   every 10 ms × 1.25 up to 500 ms while nobody listens).
/// - **EventPipe**: after the OK reply to any CollectTracing, the stream is written by its
///   own thread (as the runtime's session thread does) while the port goes on serving.
///   StopTracing for that session ends the stream, waits until the stream connection is
///   closed, and only then replies.
///
/// Every request is recorded ([`received`](Self::received)). Dropping it stops every
/// thread, closes every connection and removes its socket file.
pub struct FakeRuntime {
    shared: Arc<Shared>,
    socket_path: Option<PathBuf>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for FakeRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeRuntime")
            .field("identity", &self.shared.identity)
            .field("socket_path", &self.socket_path)
            .finish()
    }
}

impl FakeRuntime {
    /// Starts a fake runtime (see [`Config`]).
    pub fn start(config: Config) -> io::Result<FakeRuntime> {
        let shared = Arc::new(Shared {
            identity: config.identity.clone(),
            default_answer: config.default_answer.clone(),
            reply_delay: config.reply_delay,
            stream: config.stream,
            idle_timeout: config.idle_timeout,
            has_reverse: config.reverse_port.is_some(),
            stop: AtomicBool::new(false),
            state: Mutex::new(State {
                answers: config.answers.clone(),
                environment: config.environment.clone(),
                resumed: !config.reverse_port.as_ref().map_or(false, |r| r.suspend),
                ..State::default()
            }),
            changed: Condvar::new(),
            sessions: Mutex::new(HashMap::new()),
            next_connection: AtomicU64::new(0),
            next_session: AtomicU64::new(0),
        });
        let mut rt = FakeRuntime {
            shared: shared.clone(),
            socket_path: None,
            threads: Vec::new(),
        };
        let listen = match (&config.listen_dir, &config.listen_path) {
            (Some(_), Some(_)) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "listen_in and listen_at both set: the fake runtime listens once",
                ))
            }
            (Some(dir), None) => Some(default_address(dir, &config)?),
            (None, Some(path)) => Some(path.clone()),
            (None, None) => None,
        };
        if let Some(path) = listen {
            let listener = transport::Listener::bind(&path)?;
            rt.socket_path = Some(path);
            let s = shared.clone();
            rt.threads.push(
                thread::Builder::new()
                    .name("fake-runtime-listen".into())
                    .spawn(move || accept_loop(&s, listener))?,
            );
        }
        if let Some(rev) = config.reverse_port {
            let s = shared;
            rt.threads.push(
                thread::Builder::new()
                    .name("fake-runtime-reverse".into())
                    .spawn(move || reverse_loop(&s, &rev.path))?,
            );
        }
        Ok(rt)
    }

    /// The listening socket or pipe (`None` without [`Config::listen_in`] or
    /// [`Config::listen_at`]).
    pub fn socket_path(&self) -> Option<&Path> {
        self.socket_path.as_deref()
    }

    /// The identity it reports.
    pub fn identity(&self) -> &Identity {
        &self.shared.identity
    }

    /// The Advertise it sends on the reverse port.
    pub fn advertise(&self) -> Advertise {
        self.shared.advertise()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.lock()
    }

    /// Changes the answer to `command` from now on.
    pub fn set_answer(&self, command: Command, answer: Answer) {
        self.state().answers.insert(command, answer);
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.state().received.clone()
    }

    /// Waits until at least `count` requests were received (or `timeout`); returns them.
    pub fn wait_received(&self, count: usize, timeout: Duration) -> Vec<Received> {
        self.shared
            .wait(timeout, |s| s.received.len() >= count)
            .received
            .clone()
    }

    /// Every stream that ended so far.
    pub fn streams(&self) -> Vec<StreamRecord> {
        self.state().streams.clone()
    }

    /// Waits until at least `count` streams ended (or `timeout`); returns them.
    pub fn wait_streams(&self, count: usize, timeout: Duration) -> Vec<StreamRecord> {
        self.shared
            .wait(timeout, |s| s.streams.len() >= count)
            .streams
            .clone()
    }

    /// The environment as it is now (SetEnvironmentVariable changes it).
    pub fn environment(&self) -> Vec<String> {
        self.state().environment.clone()
    }

    /// False while suspended: until ResumeRuntime arrives on a suspending reverse port.
    pub fn is_resumed(&self) -> bool {
        self.state().resumed
    }

    /// Waits until resumed; returns [`is_resumed`](Self::is_resumed).
    pub fn wait_resumed(&self, timeout: Duration) -> bool {
        self.shared.wait(timeout, |s| s.resumed).resumed
    }

    /// How many times it has advertised on the reverse port.
    pub fn advertised(&self) -> u64 {
        self.state().advertised
    }

    /// Waits until it advertised at least `count` times; returns the count.
    pub fn wait_advertised(&self, count: u64, timeout: Duration) -> u64 {
        self.shared
            .wait(timeout, |s| s.advertised >= count)
            .advertised
    }
}

/// `dotnet-diagnostic-{pid}-{key}-socket` in `dir`.
#[cfg(unix)]
fn default_address(dir: &Path, config: &Config) -> io::Result<PathBuf> {
    Ok(dir.join(crate::socket::socket_name(config.identity.pid, config.key)))
}

/// Windows has no socket directory: [`Config::listen_at`] names the pipe.
#[cfg(windows)]
fn default_address(_dir: &Path, _config: &Config) -> io::Result<PathBuf> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "listen_in is for Unix sockets: on Windows use listen_at(pipe path)",
    ))
}

impl Drop for FakeRuntime {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(path) = &self.socket_path {
            // Wake the accept loop.
            transport::Listener::wake(path);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        let sessions: Vec<Session> = self
            .shared
            .sessions_lock()
            .drain()
            .map(|(_, s)| s)
            .collect();
        for mut s in sessions {
            let _ = s
                .stop
                .compare_exchange(RUNNING, SHUTDOWN, Ordering::SeqCst, Ordering::SeqCst);
            if let Some(closer) = s.closer.take() {
                closer.close();
            }
            if let Some(t) = s.thread.take() {
                let _ = t.join();
            }
        }
        #[cfg(unix)]
        if let Some(path) = &self.socket_path {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in a test thread must not hide the recorded state.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sessions_lock(&self) -> MutexGuard<'_, HashMap<u64, Session>> {
        self.sessions.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        f(&mut self.lock());
        self.changed.notify_all();
    }

    fn wait(
        &self,
        timeout: Duration,
        mut done: impl FnMut(&State) -> bool,
    ) -> MutexGuard<'_, State> {
        let deadline = Instant::now() + timeout;
        let mut guard = self.lock();
        while !done(&guard) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            guard = match self.changed.wait_timeout(guard, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        guard
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    fn advertise(&self) -> Advertise {
        Advertise {
            runtime_cookie: self.identity.cookie,
            process_id: self.identity.pid,
            future: 0,
        }
    }
}

#[cfg(test)]
mod tests;
