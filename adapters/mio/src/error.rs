//! Errors and close reasons.

use std::fmt;
use std::io;

use dsipc::conn::ServerError;
use dsipc::{ClientError, EncodeError};

use crate::ConnId;

/// A failed operation on a [`Control`](crate::Control), or why a connection failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed.
    Io {
        /// What was being done (`"connect"`, `"read"`, `"write"`, `"register"`...).
        op: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The client machine refused an operation or the peer broke the protocol (bad reply,
    /// malformed Advertise, EOF inside a message, a request the core will not encode...).
    Client(ClientError),
    /// The server machine refused an operation (no request to answer, a reply that does
    /// not fit the request, a continuation without a stream...).
    Server(ServerError),
    /// A reply or environment block could not be encoded.
    Encode(EncodeError),
    /// An item (an environment entry) needs more contiguous bytes than a connection's
    /// receive buffer may hold ([`MAX_READ_BUFFER_LEN`](crate::MAX_READ_BUFFER_LEN)).
    BufferTooSmall(dsipc::recv::BufferTooSmall),
    /// The connection is closed (or the id was never issued).
    UnknownConnection(ConnId),
    /// A client-side operation on a server connection.
    NotAClient(ConnId),
    /// A server-side operation on a client connection.
    NotAServer(ConnId),
    /// A user_events session (CollectTracing5/6) needs its file descriptor passed with
    /// `SCM_RIGHTS`, which [`Control::connect`](crate::Control::connect) and
    /// [`Control::send_request`](crate::Control::send_request) do not do: use
    /// [`Control::connect_user_events`](crate::Control::connect_user_events) or
    /// [`Control::send_user_events_request`](crate::Control::send_user_events_request).
    FdPassingUnsupported,
    /// A request that is not a user_events session given to an operation that passes a
    /// descriptor after it (nothing was sent).
    NotUserEvents {
        /// The request's command.
        command: dsipc::Command,
    },
    /// What the session layer decided for a [`Control::call`](crate::Control::call) or a
    /// [`Control::trace`](crate::Control::trace) session: an error reply, a command no
    /// version of which the runtime knows, no answer in time, a reply that does not fit...
    Session(dsipc::session::SessionError),
    /// The session is over (or the id was never issued).
    UnknownTrace(crate::TraceId),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { op, source } => write!(f, "{} failed: {}", op, source),
            Error::Client(e) => write!(f, "client: {}", e),
            Error::Server(e) => write!(f, "server: {}", e),
            Error::Encode(e) => write!(f, "encode: {}", e),
            Error::BufferTooSmall(e) => e.fmt(f),
            Error::UnknownConnection(c) => write!(f, "connection {} is closed", c),
            Error::NotAClient(c) => write!(f, "connection {} is a server connection", c),
            Error::NotAServer(c) => write!(f, "connection {} is a client connection", c),
            Error::FdPassingUnsupported => f.write_str(
                "user_events sessions pass a descriptor with SCM_RIGHTS: use connect_user_events or send_user_events_request",
            ),
            Error::NotUserEvents { command } => write!(
                f,
                "{} is not a user_events session request: it passes no descriptor",
                command
            ),
            Error::Session(e) => e.fmt(f),
            Error::UnknownTrace(t) => write!(f, "{} is over", t),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Client(e) => Some(e),
            Error::Server(e) => Some(e),
            Error::Encode(e) => Some(e),
            Error::BufferTooSmall(e) => Some(e),
            Error::Session(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ClientError> for Error {
    fn from(e: ClientError) -> Self {
        Error::Client(e)
    }
}

impl From<ServerError> for Error {
    fn from(e: ServerError) -> Self {
        Error::Server(e)
    }
}

impl From<dsipc::session::SessionError> for Error {
    fn from(e: dsipc::session::SessionError) -> Self {
        Error::Session(e)
    }
}

impl From<EncodeError> for Error {
    fn from(e: EncodeError) -> Self {
        Error::Encode(e)
    }
}

/// Why a connection was closed ([`Event::Closed`](crate::Event::Closed), delivered once per
/// connection).
#[derive(Debug)]
#[non_exhaustive]
pub enum CloseReason {
    /// The exchange is complete: a client got its reply (and continuation, to the end); a
    /// server sent its reply (and continuation, or finished its stream).
    Done,
    /// The peer closed first: a client left a server before the exchange ended (for
    /// example during an EventPipe stream: end the session), or a runtime closed a
    /// reverse connection it had advertised on (typically: it exited).
    PeerClosed,
    /// [`Control::close`](crate::Control::close) was called.
    Closed,
    /// The deadline set with [`Control::set_timeout`](crate::Control::set_timeout) passed.
    TimedOut,
    /// A protocol violation or an I/O error.
    Failed(Error),
}

impl CloseReason {
    /// True for [`CloseReason::Done`].
    pub fn is_done(&self) -> bool {
        matches!(self, CloseReason::Done)
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CloseReason::Done => f.write_str("done"),
            CloseReason::PeerClosed => f.write_str("closed by the peer"),
            CloseReason::Closed => f.write_str("closed"),
            CloseReason::TimedOut => f.write_str("timed out"),
            CloseReason::Failed(e) => write!(f, "failed: {}", e),
        }
    }
}

/// A copy of an I/O error (kind and OS code; the message is rebuilt).
pub(crate) fn io_copy(e: &io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(code) => io::Error::from_raw_os_error(code),
        None => io::Error::new(e.kind(), e.to_string()),
    }
}
