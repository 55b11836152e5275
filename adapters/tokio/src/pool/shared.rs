//! The pool's shared state: the runtimes it knows, their idle connections (each watched
//! for EOF), and what its clients take and release.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime};

use dsipc::wire::{Advertise, Guid};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::time::Instant;

use super::stream::PooledStream;
use super::PooledRuntime;
use crate::conn::BoxStream;
use crate::Error;

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

pub(super) struct Entry {
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

pub(super) struct State {
    pub(super) closed: bool,
    pub(super) advertise_timeout: Duration,
    pub(super) grace: Duration,
    /// The most runtimes kept ([`MAX_POOLED_RUNTIMES`](super::MAX_POOLED_RUNTIMES) unless set).
    pub(super) max_runtimes: usize,
    /// Connections of new runtimes closed because the pool was full.
    pub(super) refused: u64,
    pub(super) runtimes: HashMap<Guid, Entry>,
    /// The tasks of accepted connections (reading an Advertise, or watching an idle
    /// connection), aborted when the pool is dropped.
    pub(super) tasks: HashMap<u64, AbortHandle>,
    pub(super) next_id: u64,
}

impl State {
    /// Removes the runtimes that have had no connection for longer than the grace.
    pub(super) fn prune(&mut self, now: Instant) -> bool {
        let grace = self.grace;
        let before = self.runtimes.len();
        self.runtimes.retain(|_, e| !e.expired(grace, now));
        self.runtimes.len() != before
    }

    pub(super) fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

/// What the pool, its task and its clients share.
pub(crate) struct Shared {
    pub(super) address: PathBuf,
    pub(super) state: Mutex<State>,
    /// Notified (all waiters) at every change: a connection filed, taken, released, a
    /// runtime gone, the pool dropped.
    pub(super) changed: Notify,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimePool")
            .field("address", &self.address)
            .finish()
    }
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        // Every update leaves the state consistent: a panic elsewhere does not poison it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn address(&self) -> &Path {
        &self.address
    }

    pub(super) fn error(&self, kind: io::ErrorKind, message: String) -> Error {
        Error::Connect {
            endpoint: self.address.clone(),
            source: io::Error::new(kind, message),
        }
    }

    pub(super) fn gone(&self, cookie: Guid, pid: Option<u64>) -> Error {
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

    pub(super) fn closed(&self) -> Error {
        self.error(
            io::ErrorKind::NotConnected,
            "the runtime pool was dropped".to_string(),
        )
    }

    /// Files an advertised connection as its runtime's idle one. False (the connection
    /// dropped) when the pool is closed or full.
    pub(super) fn file(&self, advertise: Advertise, stream: BoxStream, id: u64) -> bool {
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
    pub(super) async fn watch(&self, cookie: Guid, id: u64) {
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
    pub(super) async fn take(self: &Arc<Self>, cookie: Guid) -> Result<BoxStream, Error> {
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
    pub(super) fn release(&self, cookie: Guid, epoch: u64) {
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
    pub(super) fn list(&self) -> (Vec<PooledRuntime>, Option<Instant>) {
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

    pub(super) fn task_done(&self, id: u64) {
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
