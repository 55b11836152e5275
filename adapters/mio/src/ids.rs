//! Handles of connections and listeners, listener kinds, and the kernel-call counters.

use std::fmt;

#[cfg(doc)]
use crate::{Control, Event};
#[cfg(doc)]
use dsipc::ServerConnection;

/// A connection handle. Ids are never reused while a connection with the same index
/// could be confused with it (each slot carries a generation).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl fmt::Debug for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConnId({}.{})", self.index, self.generation)
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}.{}", self.index, self.generation)
    }
}

/// A listener handle.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListenerId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
}

impl fmt::Debug for ListenerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ListenerId({}.{})", self.index, self.generation)
    }
}

/// What kind of listener accepted a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerKind {
    /// A diagnostic server socket (the runtime's side): accepted connections carry a
    /// [`ServerConnection`] and produce [`Event::Request`].
    Server,
    /// A reverse (connect) port (the monitor's side): runtimes connect, each connection
    /// first produces [`Event::Advertise`], then carries one command of yours.
    Reverse,
}

/// Counters of what the reactor asked of the kernel, to check that it does no more than
/// needed (for example: one registration per connection, re-registration only when a
/// connection's interest changes). See [`Control::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// `epoll_wait` calls.
    pub polls: u64,
    /// Readiness events received.
    pub events: u64,
    /// Connections registered.
    pub registers: u64,
    /// Interest changes (`EPOLL_CTL_MOD`).
    pub reregisters: u64,
    /// Connections deregistered.
    pub deregisters: u64,
    /// `read` calls on connections (the last one of a burst returns `WouldBlock` or EOF).
    pub reads: u64,
    /// `write` calls on connections.
    pub writes: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Connections closed.
    pub closed: u64,
}

/// A [`Control::call`] in flight: its [`Event::Call`] and [`Event::CallDone`] carry it.
/// Never reused by a reactor.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CallId(pub(crate) u64);

impl fmt::Debug for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CallId({})", self.0)
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "call {}", self.0)
    }
}

/// An EventPipe session of [`Control::trace`]: its [`Event::TraceStarted`],
/// [`Event::TraceData`] and [`Event::TraceDone`] carry it. Never reused by a reactor.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TraceId(pub(crate) u64);

impl fmt::Debug for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceId({})", self.0)
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "trace {}", self.0)
    }
}
