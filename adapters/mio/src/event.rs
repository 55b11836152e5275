//! What the reactor hands to the handler: [`Event`] and the [`Handler`] trait.

use std::io;

use dsipc::conn::Rejection;
use dsipc::wire::Advertise;
use dsipc::{AnyRequest, ClientEvent};

use crate::CloseReason;
#[cfg(doc)]
use crate::Reactor;
use crate::{ConnId, Control, ListenerId, ListenerKind};

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
