//! [`RuntimePool`]: a reverse port that keeps each runtime's idle connection, so that a
//! monitor runs any number of commands per runtime (re-exported from [`crate::reverse`]).

mod shared;
mod stream;

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use dsipc::wire::Guid;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::conn::{BoxStream, Target};
use crate::reverse::{
    imp::FileGuard, read_advertise_within, ReverseListener, DEFAULT_ADVERTISE_TIMEOUT,
};
use crate::{DiagnosticsClient, Error};
pub(crate) use shared::Shared;
use shared::State;
pub(crate) use stream::open;

/// The most runtimes a [`RuntimePool`] keeps at once by default (see
/// [`RuntimePool::set_max_runtimes`]). A connection of a further runtime is closed (after
/// its Advertise) until one of the known runtimes is gone; the runtime retries by itself.
pub const MAX_POOLED_RUNTIMES: usize = 1024;

/// The most connections whose Advertise a [`RuntimePool`] reads at once; further peers
/// wait in the listen backlog meanwhile (each read is bounded by the advertise timeout).
pub const MAX_PENDING_ADVERTISES: usize = 64;

/// How long a runtime may stay without any connection (none idle, none in use) before a
/// [`RuntimePool`] considers it gone: 5 s. A live runtime reconnects within milliseconds
/// of receiving a command; a runtime busy with a synchronous command (a dump) keeps the
/// command's connection in use, which does not count.
pub const DEFAULT_RECONNECT_GRACE: Duration = Duration::from_secs(5);

/// A runtime known to a [`RuntimePool`] (see [`RuntimePool::runtimes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PooledRuntime {
    /// Its pid (in its own pid namespace), from the Advertise.
    pub pid: u64,
    /// Its cookie (the runtime instance's GUID, the one ProcessInfo reports): the key of
    /// [`RuntimePool::client`].
    pub cookie: Guid,
    /// When its first connection was filed.
    pub first_seen: SystemTime,
    /// True while an idle connection of it is waiting for a command.
    pub idle: bool,
}

/// A reverse diagnostic port for a monitor: keeps, per runtime, its latest idle connection,
/// and runs any number of commands per runtime through [`client`](Self::client), each on
/// the runtime's next connection (as dotnet-monitor's listen mode does).
///
/// A runtime started with `DOTNET_DiagnosticPorts=ADDRESS,connect` connects, advertises
/// itself (cookie and pid), and waits for one command on that connection; once it has one,
/// it connects again. [`bind`](Self::bind) spawns a task that accepts those connections,
/// reads each Advertise (at most [`MAX_PENDING_ADVERTISES`] at once, each within the
/// [advertise timeout](Self::advertise_timeout); a peer that sends anything else, or
/// nothing, is closed) and files the connection under its runtime's cookie: a newer
/// connection replaces (and closes) an older idle one, so the pool holds at most one idle
/// connection per runtime and at most [`MAX_POOLED_RUNTIMES`] runtimes (or
/// [`set_max_runtimes`](Self::set_max_runtimes)); a runtime past that is closed at once.
///
/// A runtime is **gone** (no longer in [`runtimes`](Self::runtimes); its commands fail)
/// when its idle connection reaches EOF or fails (the runtime exited: a runtime writes
/// nothing on an idle connection, so an idle connection that turns readable is done for),
/// or when it has had no connection at all (none idle, none taken by a command) for
/// longer than the [reconnect grace](Self::reconnect_grace) ([`DEFAULT_RECONNECT_GRACE`]).
/// A gone runtime that connects again is filed afresh.
///
/// Dropping the pool stops accepting, closes every idle connection, removes the socket
/// file (Unix), and fails the commands of its clients that wait for a connection.
///
/// ```no_run
/// use std::time::Duration;
/// use dsipc_tokio::reverse::RuntimePool;
///
/// # async fn run() -> Result<(), dsipc_tokio::Error> {
/// // Runtimes run with DOTNET_DiagnosticPorts=/tmp/monitor.sock,connect,nosuspend
/// let pool = RuntimePool::bind("/tmp/monitor.sock")?;
/// let runtimes = pool
///     .wait_until(Duration::from_secs(30), |list| !list.is_empty())
///     .await?;
/// for runtime in runtimes {
///     let client = pool.client(runtime.cookie).with_timeout(Duration::from_secs(5));
///     let info = client.process_info().await?; // up to three connections, one timeout
///     let env = client.process_environment().await?; // the next connection
///     println!("{} {} ({} variables)", info.pid, info.command_line, env.len());
/// }
/// # Ok(())
/// # }
/// ```
pub struct RuntimePool {
    shared: Arc<Shared>,
    accept: AbortHandle,
    /// Removes the socket file (Unix) when the pool is dropped, even before the aborted
    /// task has let go of the listener.
    _file: Option<FileGuard>,
}

impl std::fmt::Debug for RuntimePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.lock();
        f.debug_struct("RuntimePool")
            .field("address", &self.shared.address)
            .field("runtimes", &st.runtimes.len())
            .finish()
    }
}

impl RuntimePool {
    /// Binds the reverse port at `address` as [`ReverseListener::bind`] does (a private
    /// socket on Unix, a stale socket replaced but nothing else; a named pipe on Windows)
    /// and spawns the task that accepts runtimes.
    ///
    /// Must be called within a tokio runtime (with the `net` and `time` drivers enabled),
    /// where the task runs: without one it is an [`Error::Io`] of kind `Other`.
    pub fn bind(address: impl AsRef<Path>) -> Result<RuntimePool, Error> {
        let handle = tokio::runtime::Handle::try_current().map_err(|_| {
            Error::Io(io::Error::new(
                io::ErrorKind::Other,
                "RuntimePool::bind must be called within a tokio runtime",
            ))
        })?;
        let mut listener = ReverseListener::bind(address)?;
        let file = listener.take_file_guard();
        let shared = Arc::new(Shared {
            address: listener.address().to_path_buf(),
            state: Mutex::new(State {
                closed: false,
                advertise_timeout: DEFAULT_ADVERTISE_TIMEOUT,
                grace: DEFAULT_RECONNECT_GRACE,
                max_runtimes: MAX_POOLED_RUNTIMES,
                refused: 0,
                runtimes: HashMap::new(),
                tasks: HashMap::new(),
                next_id: 0,
            }),
            changed: Notify::new(),
        });
        let task = handle.spawn(accept_loop(shared.clone(), listener));
        Ok(RuntimePool {
            shared,
            accept: task.abort_handle(),
            _file: file,
        })
    }

    /// The address runtimes connect to (on Windows the full `\\.\pipe\NAME`).
    pub fn address(&self) -> &Path {
        &self.shared.address
    }

    /// The time a new connection has to send its Advertise
    /// ([`DEFAULT_ADVERTISE_TIMEOUT`] unless set).
    pub fn advertise_timeout(&self) -> Duration {
        self.shared.lock().advertise_timeout
    }

    /// Sets the time a new connection has to send its Advertise (connections accepted from
    /// now on).
    pub fn set_advertise_timeout(&mut self, timeout: Duration) {
        self.shared.lock().advertise_timeout = timeout.max(Duration::from_millis(1));
    }

    /// How long a runtime may have no connection at all before it is gone
    /// ([`DEFAULT_RECONNECT_GRACE`] unless set).
    pub fn reconnect_grace(&self) -> Duration {
        self.shared.lock().grace
    }

    /// Sets the [reconnect grace](Self::reconnect_grace).
    pub fn set_reconnect_grace(&mut self, grace: Duration) {
        self.shared.lock().grace = grace;
        self.shared.changed.notify_waiters();
    }

    /// The most runtimes kept at once ([`MAX_POOLED_RUNTIMES`] unless set).
    pub fn max_runtimes(&self) -> usize {
        self.shared.lock().max_runtimes
    }

    /// Sets the most runtimes kept at once (at least 1; runtimes already kept stay). A
    /// process whose descriptor limit is low sets it well under that limit: each runtime
    /// holds a connection (two while a command runs on it).
    pub fn set_max_runtimes(&mut self, max: usize) {
        self.shared.lock().max_runtimes = max.max(1);
    }

    /// How many connections of new runtimes were closed (after their Advertise) because
    /// [`max_runtimes`](Self::max_runtimes) were kept already. Each change wakes
    /// [`wait_until`](Self::wait_until).
    pub fn refused(&self) -> u64 {
        self.shared.lock().refused
    }

    /// The runtimes known and alive, oldest first: pid, cookie, when first seen, and
    /// whether a connection of theirs is idle right now.
    pub fn runtimes(&self) -> Vec<PooledRuntime> {
        self.shared.list().0
    }

    /// Waits until `done` accepts the list of runtimes (as [`runtimes`](Self::runtimes)
    /// returns it), checked now and after every change, and returns that list; past
    /// `timeout`, an [`Error::Io`] of kind `TimedOut`.
    pub async fn wait_until<F>(
        &self,
        timeout: Duration,
        mut done: F,
    ) -> Result<Vec<PooledRuntime>, Error>
    where
        F: FnMut(&[PooledRuntime]) -> bool,
    {
        let now = Instant::now();
        // A timeout too long to represent is a year: longer than any monitor waits.
        let deadline = now
            .checked_add(timeout)
            .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600));
        loop {
            let notified = self.shared.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (list, expiry) = self.shared.list();
            if done(&list) {
                return Ok(list);
            }
            let wake = expiry.map_or(deadline, |at| at.min(deadline));
            if tokio::time::timeout_at(wake, notified).await.is_err() && Instant::now() >= deadline
            {
                return Err(Error::Io(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the runtimes on {} did not change as awaited within {:.1} s",
                        self.shared.address.display(),
                        timeout.as_secs_f64()
                    ),
                )));
            }
        }
    }

    /// A client of the runtime with this cookie (from [`runtimes`](Self::runtimes), or a
    /// reverse connection's [`cookie`](crate::reverse::AdvertisedRuntime::cookie)).
    ///
    /// It is a normal [`DiagnosticsClient`]: every method works (ProcessInfo with its
    /// fallbacks, trace sessions stopped through their [`StopHandle`](crate::StopHandle),
    /// dumps, ...), and every connection it opens is the runtime's idle connection or,
    /// when none is idle, its next one: the wait counts against the call's timeout. A
    /// command for a runtime that is gone (or never connected), or that goes while the
    /// command waits, fails with [`Error::Connect`] (kind `NotConnected`, naming the
    /// cookie and the pid). The client keeps working after the pool is dropped only in
    /// that every command fails.
    pub fn client(&self, cookie: Guid) -> DiagnosticsClient {
        DiagnosticsClient::with_target(Target::Pool {
            pool: self.shared.clone(),
            cookie,
        })
    }
}

impl Drop for RuntimePool {
    fn drop(&mut self) {
        self.accept.abort();
        let (tasks, runtimes) = {
            let mut st = self.shared.lock();
            st.closed = true;
            (
                std::mem::take(&mut st.tasks),
                std::mem::take(&mut st.runtimes),
            )
        };
        for (_, task) in tasks {
            task.abort();
        }
        // Closes every idle connection (the runtimes reconnect, to nobody).
        drop(runtimes);
        self.shared.changed.notify_waiters();
    }
}

/// Accepts runtimes until the pool is dropped (which aborts this task).
async fn accept_loop(shared: Arc<Shared>, mut listener: ReverseListener) {
    let permits = Arc::new(Semaphore::new(MAX_PENDING_ADVERTISES));
    loop {
        let permit = match permits.clone().acquire_owned().await {
            Ok(p) => p,
            Err(_) => return,
        };
        let stream = match listener.accept_stream().await {
            Ok(s) => s,
            Err(_) => {
                // Out of descriptors, say: try again a little later, without spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let mut st = shared.lock();
        if st.closed {
            return;
        }
        let id = st.next_id();
        let timeout = st.advertise_timeout;
        // Spawned under the lock, so the task cannot end (and remove its handle) before
        // its handle is recorded.
        let task = tokio::spawn(serve_connection(
            shared.clone(),
            id,
            stream,
            timeout,
            permit,
        ));
        st.tasks.insert(id, task.abort_handle());
    }
}

/// One accepted connection: its Advertise, then (filed) watched while it is idle.
async fn serve_connection(
    shared: Arc<Shared>,
    id: u64,
    mut stream: BoxStream,
    timeout: Duration,
    permit: OwnedSemaphorePermit,
) {
    let advertise = read_advertise_within(&mut stream, timeout).await;
    drop(permit);
    if let Ok(advertise) = advertise {
        if shared.file(advertise, stream, id) {
            shared.watch(advertise.runtime_cookie, id).await;
        }
    }
    shared.task_done(id);
}
