//! [`RuntimePool`]: a reverse port that keeps each runtime's idle connection, so that a
//! monitor runs any number of commands per runtime (re-exported from [`crate::reverse`]).

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime};

use dsipc::wire::{Advertise, Guid};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::conn::{BoxStream, Target};
use crate::reverse::{
    imp::FileGuard, read_advertise_within, ReverseListener, DEFAULT_ADVERTISE_TIMEOUT,
};
use crate::{DiagnosticsClient, Error};

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

/// An idle connection, watched for EOF by the task that filed it.
struct Idle {
    /// The connection's id (its task's).
    id: u64,
    stream: BoxStream,
    /// The task watching it, woken when a command takes it or a newer one replaces it.
    watcher: Option<Waker>,
}

impl Idle {
    fn wake_watcher(&mut self) {
        if let Some(w) = self.watcher.take() {
            w.wake();
        }
    }
}

struct Entry {
    pid: u64,
    first_seen: SystemTime,
    /// Tells this entry from a later one of the same cookie.
    epoch: u64,
    idle: Option<Idle>,
    /// Connections taken by commands and not dropped yet.
    in_use: usize,
    /// When a connection was last filed, taken or released.
    last_activity: Instant,
}

impl Entry {
    /// True once the runtime has had no connection for longer than `grace`.
    fn expired(&self, grace: Duration, now: Instant) -> bool {
        self.expiry(grace).map_or(false, |at| now >= at)
    }

    /// When it expires if nothing happens meanwhile (`None`: it has a connection, or the
    /// grace is too long to matter).
    fn expiry(&self, grace: Duration) -> Option<Instant> {
        if self.idle.is_none() && self.in_use == 0 {
            self.last_activity.checked_add(grace)
        } else {
            None
        }
    }

    fn describe(&self, cookie: Guid) -> PooledRuntime {
        PooledRuntime {
            pid: self.pid,
            cookie,
            first_seen: self.first_seen,
            idle: self.idle.is_some(),
        }
    }
}

struct State {
    closed: bool,
    advertise_timeout: Duration,
    grace: Duration,
    /// The most runtimes kept ([`MAX_POOLED_RUNTIMES`] unless set).
    max_runtimes: usize,
    /// Connections of new runtimes closed because the pool was full.
    refused: u64,
    runtimes: HashMap<Guid, Entry>,
    /// The tasks of accepted connections (reading an Advertise, or watching an idle
    /// connection), aborted when the pool is dropped.
    tasks: HashMap<u64, AbortHandle>,
    next_id: u64,
}

impl State {
    /// Removes the runtimes that have had no connection for longer than the grace.
    fn prune(&mut self, now: Instant) -> bool {
        let grace = self.grace;
        let before = self.runtimes.len();
        self.runtimes.retain(|_, e| !e.expired(grace, now));
        self.runtimes.len() != before
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

/// What the pool, its task and its clients share.
pub(crate) struct Shared {
    address: PathBuf,
    state: Mutex<State>,
    /// Notified (all waiters) at every change: a connection filed, taken, released, a
    /// runtime gone, the pool dropped.
    changed: Notify,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimePool")
            .field("address", &self.address)
            .finish()
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every update leaves the state consistent: a panic elsewhere does not poison it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn address(&self) -> &Path {
        &self.address
    }

    fn error(&self, kind: io::ErrorKind, message: String) -> Error {
        Error::Connect {
            endpoint: self.address.clone(),
            source: io::Error::new(kind, message),
        }
    }

    fn gone(&self, cookie: Guid, pid: Option<u64>) -> Error {
        let message = match pid {
            Some(pid) => format!(
                "runtime {} (pid {}) is no longer connected to this reverse port",
                cookie, pid
            ),
            None => format!(
                "no runtime with cookie {} is connected to this reverse port",
                cookie
            ),
        };
        self.error(io::ErrorKind::NotConnected, message)
    }

    fn closed(&self) -> Error {
        self.error(
            io::ErrorKind::NotConnected,
            "the runtime pool was dropped".to_string(),
        )
    }

    /// Files an advertised connection as its runtime's idle one. False (the connection
    /// dropped) when the pool is closed or full.
    fn file(&self, advertise: Advertise, stream: BoxStream, id: u64) -> bool {
        let cookie = advertise.runtime_cookie;
        let now = Instant::now();
        let replaced: Option<Idle>;
        {
            let mut st = self.lock();
            if st.closed {
                return false;
            }
            if !st.runtimes.contains_key(&cookie)
                && st.runtimes.len() >= st.max_runtimes
                && !(st.prune(now) && st.runtimes.len() < st.max_runtimes)
            {
                st.refused += 1;
                drop(st);
                self.changed.notify_waiters();
                return false;
            }
            let epoch = st.next_id();
            let entry = st.runtimes.entry(cookie).or_insert_with(|| Entry {
                pid: advertise.process_id,
                first_seen: SystemTime::now(),
                epoch,
                idle: None,
                in_use: 0,
                last_activity: now,
            });
            entry.pid = advertise.process_id;
            entry.last_activity = now;
            replaced = entry.idle.replace(Idle {
                id,
                stream,
                watcher: None,
            });
        }
        // A newer connection of the same runtime: the older one is closed (its watcher
        // sees it is no longer the idle one and ends).
        if let Some(mut old) = replaced {
            old.wake_watcher();
        }
        self.changed.notify_waiters();
        true
    }

    /// Watches the idle connection `id` of `cookie` until a command takes it, a newer one
    /// replaces it, or it turns readable: EOF or an error (the runtime is gone), or bytes
    /// (a runtime never writes on an idle connection: it is closed, and the runtime
    /// reconnects).
    async fn watch(&self, cookie: Guid, id: u64) {
        let outcome = Watch {
            shared: self,
            cookie,
            id,
        }
        .await;
        let dropped: Option<Idle>;
        {
            let mut st = self.lock();
            let current = match st.runtimes.get_mut(&cookie) {
                Some(e) if e.idle.as_ref().map(|i| i.id) == Some(id) => e,
                _ => return,
            };
            match outcome {
                Watched::Gone => {
                    dropped = st.runtimes.remove(&cookie).and_then(|e| e.idle);
                }
                Watched::Garbage => {
                    current.last_activity = Instant::now();
                    dropped = current.idle.take();
                }
                Watched::NotIdle => return,
            }
        }
        drop(dropped);
        self.changed.notify_waiters();
    }

    /// The runtime's idle connection, or its next one; the caller bounds the wait.
    async fn take(self: &Arc<Self>, cookie: Guid) -> Result<BoxStream, Error> {
        let mut pid = None;
        loop {
            let deadline;
            let notified = self.changed.notified();
            tokio::pin!(notified);
            {
                let mut st = self.lock();
                if st.closed {
                    return Err(self.closed());
                }
                let grace = st.grace;
                let now = Instant::now();
                let entry = match st.runtimes.get_mut(&cookie) {
                    Some(e) => e,
                    None => return Err(self.gone(cookie, pid)),
                };
                pid = Some(entry.pid);
                if let Some(mut idle) = entry.idle.take() {
                    entry.in_use += 1;
                    entry.last_activity = now;
                    idle.wake_watcher();
                    let stream = PooledStream {
                        inner: idle.stream,
                        shared: self.clone(),
                        cookie,
                        epoch: entry.epoch,
                    };
                    drop(st);
                    self.changed.notify_waiters();
                    return Ok(Box::new(stream));
                }
                if entry.expired(grace, now) {
                    st.runtimes.remove(&cookie);
                    drop(st);
                    self.changed.notify_waiters();
                    return Err(self.gone(cookie, pid));
                }
                deadline = entry.expiry(grace);
                // Registered before the lock goes: no change after this check is missed.
                notified.as_mut().enable();
            }
            match deadline {
                Some(at) => {
                    let _ = tokio::time::timeout_at(at, notified).await;
                }
                None => notified.await,
            }
        }
    }

    /// A command dropped a connection it took.
    fn release(&self, cookie: Guid, epoch: u64) {
        {
            let mut st = self.lock();
            match st.runtimes.get_mut(&cookie) {
                Some(e) if e.epoch == epoch => {
                    e.in_use = e.in_use.saturating_sub(1);
                    e.last_activity = Instant::now();
                }
                _ => return,
            }
        }
        self.changed.notify_waiters();
    }

    /// The runtimes known and alive (the expired ones are removed), oldest first; and when
    /// the next one expires if nothing happens.
    fn list(&self) -> (Vec<PooledRuntime>, Option<Instant>) {
        let mut st = self.lock();
        st.prune(Instant::now());
        let grace = st.grace;
        let mut next = None::<Instant>;
        let mut list: Vec<PooledRuntime> = st
            .runtimes
            .iter()
            .map(|(cookie, e)| {
                if let Some(at) = e.expiry(grace) {
                    next = Some(next.map_or(at, |n| n.min(at)));
                }
                e.describe(*cookie)
            })
            .collect();
        list.sort_by_key(|r| (r.first_seen, r.pid, r.cookie));
        (list, next)
    }

    fn task_done(&self, id: u64) {
        self.lock().tasks.remove(&id);
    }
}

enum Watched {
    /// No longer the idle connection: taken, replaced, or the pool closed.
    NotIdle,
    /// EOF or an error.
    Gone,
    /// Bytes on an idle connection.
    Garbage,
}

/// The future of [`Shared::watch`]: polls the idle connection (in the pool, under its lock)
/// for readability.
struct Watch<'a> {
    shared: &'a Shared,
    cookie: Guid,
    id: u64,
}

impl std::future::Future for Watch<'_> {
    type Output = Watched;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Watched> {
        let mut st = self.shared.lock();
        let idle = match st
            .runtimes
            .get_mut(&self.cookie)
            .and_then(|e| e.idle.as_mut())
        {
            Some(idle) if idle.id == self.id => idle,
            _ => return Poll::Ready(Watched::NotIdle),
        };
        let mut byte = [0u8; 1];
        let mut buf = ReadBuf::new(&mut byte);
        match Pin::new(&mut idle.stream).poll_read(cx, &mut buf) {
            Poll::Pending => {
                match &idle.watcher {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => idle.watcher = Some(cx.waker().clone()),
                }
                Poll::Pending
            }
            Poll::Ready(Ok(())) if buf.filled().is_empty() => Poll::Ready(Watched::Gone),
            Poll::Ready(Ok(())) => Poll::Ready(Watched::Garbage),
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Poll::Ready(Err(_)) => Poll::Ready(Watched::Gone),
        }
    }
}

/// A pooled connection taken by a command: tells the pool when the command drops it.
struct PooledStream {
    inner: BoxStream,
    shared: Arc<Shared>,
    cookie: Guid,
    epoch: u64,
}

impl Drop for PooledStream {
    fn drop(&mut self) {
        self.shared.release(self.cookie, self.epoch);
    }
}

impl AsyncRead for PooledStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for PooledStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The connection for one command of a pooled runtime (`conn::Target::Pool`).
pub(crate) async fn open(shared: &Arc<Shared>, cookie: Guid) -> Result<BoxStream, Error> {
    shared.take(cookie).await
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
