//! What the reactor hands to the handler: [`Event`] and the [`Handler`] trait.

use std::io;

use dsipc::conn::Rejection;
use dsipc::session::Outcome;
use dsipc::wire::{Advertise, Command};
use dsipc::{AnyRequest, ClientEvent};

use crate::CloseReason;
#[cfg(doc)]
use crate::Reactor;
use crate::{CallId, ConnId, Control, Error, ListenerId, ListenerKind, TraceId};

/// Something that happened, handed to the [`Handler`] with the [`Control`] to act on it.
/// Borrowed data points into the reactor's read buffer and is valid during the call only.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A listener accepted a connection.
    Accepted {
        /// The listener.
        listener: ListenerId,
        /// The new connection.
        conn: ConnId,
        /// The listener's kind.
        kind: ListenerKind,
    },
    /// A runtime announced itself on a reverse port. Send it one command with
    /// [`Control::send_request`] (now or later; until then the runtime waits), or close
    /// the connection (the runtime then reconnects at once). After each command the
    /// runtime closes and reconnects with a new Advertise.
    Advertise {
        /// The reverse-port listener.
        listener: ListenerId,
        /// The runtime's connection.
        conn: ConnId,
        /// Its pid and cookie.
        advertise: Advertise,
    },
    /// A client connection's reply, continuation data or end of continuation. Never
    /// [`ClientEvent::Advertise`] (that is [`Event::Advertise`]).
    Client {
        /// The connection.
        conn: ConnId,
        /// What the server said.
        event: ClientEvent<'a>,
    },
    /// A server connection received a request: answer it with [`Control::respond`] (or
    /// [`Control::respond_environment`]), now or later.
    Request {
        /// The connection.
        conn: ConnId,
        /// The request, borrowing from the read buffer.
        request: AnyRequest<'a>,
        /// The header's reserved field.
        reserved: u16,
    },
    /// A server connection received a request the runtime would reject; the error reply
    /// is sent for you, then the connection closes.
    Rejected {
        /// The connection.
        conn: ConnId,
        /// Why, and the HRESULT sent.
        rejection: Rejection,
    },
    /// A server connection whose last [`Control::write_continuation`] was short can take
    /// more continuation bytes.
    Writable {
        /// The connection.
        conn: ConnId,
    },
    /// A connection is gone; its id is dead. Delivered exactly once per connection.
    Closed {
        /// The connection.
        conn: ConnId,
        /// Why.
        reason: CloseReason,
    },
    /// Accepting failed (for example: out of file descriptors). Accepting is retried
    /// 50 ms later.
    AcceptError {
        /// The listener.
        listener: ListenerId,
        /// The error.
        error: io::Error,
    },
    /// [`Reactor::waker`]'s waker was woken.
    Wake,
    /// What the runtime said to a [`Control::call`] (a reply, an environment entry...),
    /// judged by the session layer: error replies end the call (or make it fall back to
    /// an older command version), they never come here (except for
    /// [`Ask::Raw`](dsipc::session::Ask::Raw)).
    Call {
        /// The call.
        id: CallId,
        /// The command this answers (for ProcessInfo: the version the runtime knew).
        command: Command,
        /// What the runtime said, borrowing the call's receive buffer.
        event: ClientEvent<'a>,
    },
    /// A [`Control::call`] is over: its connections are closed, its id is dead.
    CallDone {
        /// The call.
        id: CallId,
        /// `Ok` when the runtime answered as the command requires;
        /// [`Error::Session`] for what the protocol decided (an error reply,
        /// [`SessionError::NotSupported`](dsipc::session::SessionError::NotSupported),
        /// [`SessionError::Timeout`](dsipc::session::SessionError::Timeout)...),
        /// [`Error::Io`] when a connection failed.
        result: Result<(), Error>,
    },
    /// The runtime accepted a [`Control::trace`] session: the stream follows as
    /// [`Event::TraceData`]; stop it with [`Control::stop_trace`].
    TraceStarted {
        /// The session.
        id: TraceId,
        /// The runtime's id for it (what StopTracing names).
        session_id: u64,
    },
    /// Stream bytes of a [`Control::trace`] session (nettrace), as received.
    TraceData {
        /// The session.
        id: TraceId,
        /// The bytes, borrowing the session's receive buffer.
        data: &'a [u8],
    },
    /// A [`Control::trace`] session is over (its stream ended, and its stop, if any, was
    /// answered or failed): its connections are closed, its id is dead.
    TraceDone {
        /// The session.
        id: TraceId,
        /// How the stream ended ([`Outcome::Stopped`] after [`Control::stop_trace`],
        /// [`Outcome::Ended`] by the runtime, [`Outcome::Cut`] when it broke off), or why
        /// the session failed (the start refused, a stop that failed or was not answered
        /// in time, a stream that went on after its stop was answered...).
        result: Result<Outcome, Error>,
    },
}

/// Receives the events of [`Reactor::poll`]. Closures
/// `|ctl: &mut Control, event: Event<'_>| { ... }` implement it (annotate the parameter
/// types so that the closure accepts every lifetime).
pub trait Handler {
    /// One event; `control` acts on any connection or listener.
    fn on_event(&mut self, control: &mut Control, event: Event<'_>);
}

impl<F> Handler for F
where
    F: FnMut(&mut Control, Event<'_>),
{
    fn on_event(&mut self, control: &mut Control, event: Event<'_>) {
        self(control, event)
    }
}
