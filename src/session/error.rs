//! [`SessionError`]: everything a call or a session can end with, short of I/O.

use alloc::string::String;
use core::fmt;

use crate::error::{ClientError, EncodeError};
use crate::nettrace::NettraceError;
use crate::wire::{Command, Hresult};

/// Why a [`Call`](super::Call) or a [`Tracing`](super::Tracing) session failed. I/O errors
/// are the adapter's; everything the protocol decides is here, typed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionError {
    /// The runtime did not answer (or, for a stopping session, made no progress) in time.
    Timeout {
        /// The command that was waiting.
        command: Command,
        /// The budget that ran out, in milliseconds.
        timeout_ms: u64,
    },
    /// A runtime connected to a reverse port but sent no Advertise in time.
    AdvertiseTimeout {
        /// The budget that ran out, in milliseconds.
        timeout_ms: u64,
    },
    /// A session's stream went on past the timeout after the runtime answered its stop.
    StreamNotEnded {
        /// The session.
        session_id: u64,
        /// The budget that ran out, in milliseconds.
        timeout_ms: u64,
    },
    /// The runtime knows neither this command nor any older version that could carry the
    /// request (it answered `CORDIAGIPC_E_UNKNOWN_COMMAND` to the last one tried).
    NotSupported {
        /// The last command tried.
        command: Command,
        /// The runtime's HRESULT (UNKNOWN_COMMAND).
        hresult: Hresult,
    },
    /// The runtime answered with an error reply.
    ErrorReply {
        /// The request.
        command: Command,
        /// The runtime's HRESULT.
        hresult: Hresult,
        /// GenerateCoreDump3's message from createdump, if any.
        message: Option<String>,
    },
    /// The runtime's reply does not fit the request.
    UnexpectedReply {
        /// The request.
        command: Command,
    },
    /// The runtime broke the protocol on a connection.
    Protocol(ClientError),
    /// The request holds a value real runtimes reject or crash on; nothing was sent.
    InvalidRequest(EncodeError),
    /// An argument refused before anything was sent.
    InvalidArgument(&'static str),
    /// One message needs more contiguous bytes than the receive buffer may hold.
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
        /// The receive buffer's bound.
        limit: usize,
    },
    /// The runtime announced an environment block larger than the caller accepts.
    EnvironmentTooLarge {
        /// Bytes the runtime announced.
        announced: u64,
        /// The bound.
        limit: u64,
    },
    /// A session's stream broke its nettrace framing (a stream cut short is an
    /// [`Outcome::Cut`](super::Outcome::Cut), not this).
    Stream(NettraceError),
    /// The caller's transport failed for this command (a connection refused, a read or
    /// write that failed): what a loop of its own reports with
    /// [`Tracing::stop_failed`](super::Tracing::stop_failed) when the stop's connection
    /// fails, for instance. The adapters report their own I/O errors instead.
    Transport {
        /// The command whose connection failed.
        command: Command,
        /// What failed, in a few words.
        what: &'static str,
    },
    /// The caller used the machine out of order (for example
    /// [`Call::read_buf`](super::Call::read_buf) while it waits to connect).
    Misuse(&'static str),
}

impl SessionError {
    /// True for [`SessionError::NotSupported`].
    pub fn is_not_supported(&self) -> bool {
        matches!(self, SessionError::NotSupported { .. })
    }
}

impl From<EncodeError> for SessionError {
    fn from(e: EncodeError) -> Self {
        SessionError::InvalidRequest(e)
    }
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionError::Timeout {
                command,
                timeout_ms,
            } => write!(f, "{command}: no answer within {timeout_ms} ms"),
            SessionError::AdvertiseTimeout { timeout_ms } => write!(
                f,
                "a peer connected but sent no Advertise within {timeout_ms} ms"
            ),
            SessionError::StreamNotEnded {
                session_id,
                timeout_ms,
            } => write!(
                f,
                "session {session_id:#x}: the stream did not end within {timeout_ms} ms of the stop"
            ),
            SessionError::NotSupported { command, hresult } => {
                write!(f, "{command}: not supported by this runtime ({hresult})")
            }
            SessionError::ErrorReply {
                command,
                hresult,
                message,
            } => {
                write!(f, "{command}: the runtime answered {hresult}")?;
                match message {
                    Some(m) if !m.is_empty() => write!(f, ": {m}"),
                    _ => Ok(()),
                }
            }
            SessionError::UnexpectedReply { command } => {
                write!(f, "{command}: the runtime's reply does not fit the request")
            }
            SessionError::Protocol(e) => write!(f, "protocol violation: {e}"),
            SessionError::InvalidRequest(e) => write!(f, "invalid request: {e}"),
            SessionError::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            SessionError::BufferTooSmall { needed, limit } => write!(
                f,
                "a message needs {needed} contiguous bytes, the receive buffer holds at most {limit}"
            ),
            SessionError::EnvironmentTooLarge { announced, limit } => write!(
                f,
                "the runtime announced a {announced}-byte environment, more than the {limit} accepted"
            ),
            SessionError::Stream(e) => write!(f, "trace stream: {e}"),
            SessionError::Transport { command, what } => write!(f, "{command}: {what}"),
            SessionError::Misuse(m) => write!(f, "misuse: {m}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for SessionError {}
