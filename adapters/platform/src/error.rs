//! The adapter's error type.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use dsipc::session::SessionError;
use dsipc::wire::{Command, CommandSet, Hresult};
use dsipc::{ClientError, EncodeError};

/// Everything a call can fail with. Peer input never panics: it ends up here.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An I/O error on an established connection (or while writing a trace to its sink).
    Io(io::Error),
    /// Connecting to the diagnostic endpoint failed.
    Connect {
        /// The endpoint (socket path).
        endpoint: PathBuf,
        /// The cause; `ConnectionRefused` usually means a stale socket left by a dead process.
        source: io::Error,
    },
    /// The peer did not answer (or, for a stopping trace, made no progress) in time.
    Timeout {
        /// The command that was waiting.
        command: Command,
        /// The timeout that expired.
        timeout: Duration,
    },
    /// The peer broke the protocol.
    Protocol(ClientError),
    /// The request holds a value real runtimes reject or crash on; nothing was sent.
    InvalidRequest(EncodeError),
    /// The runtime answered with an error reply.
    ErrorReply {
        /// The request.
        command: Command,
        /// The runtime's HRESULT.
        hresult: Hresult,
        /// GenerateCoreDump3's message from createdump, if any.
        message: Option<String>,
    },
    /// The runtime does not know this command (it answered `CORDIAGIPC_E_UNKNOWN_COMMAND`).
    NotSupported {
        /// The request.
        command: Command,
        /// The runtime's HRESULT (UNKNOWN_COMMAND).
        hresult: Hresult,
    },
    /// There is no process with this pid.
    NoSuchProcess {
        /// The pid.
        pid: u32,
    },
    /// The process exists but has no diagnostic socket (not a .NET process, diagnostics
    /// disabled, or in a mount namespace this process cannot reach).
    NoSocket {
        /// The pid.
        pid: u32,
        /// The directories searched.
        searched: Vec<PathBuf>,
    },
    /// A single message needs more contiguous bytes than the receive buffer holds.
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
    },
    /// The runtime's reply does not fit the request (a protocol violation).
    UnexpectedReply {
        /// The request.
        command: Command,
    },
    /// An argument the adapter refuses before sending anything.
    InvalidArgument(&'static str),
    /// The runtime announced an environment block larger than the client accepts
    /// (`DiagnosticsClient::with_max_environment`); no entry was read.
    EnvironmentTooLarge {
        /// Bytes the runtime announced.
        announced: u64,
        /// The client's bound.
        limit: u64,
    },
    /// A directory named to search for diagnostic sockets cannot be read.
    SearchDir {
        /// The directory.
        dir: PathBuf,
        /// Why it cannot be read.
        source: io::Error,
    },
    /// The runtime answered StopTracing but its stream did not end within the timeout
    /// (what arrived until then was delivered).
    StreamNotEnded {
        /// The session.
        session_id: u64,
        /// How long the stream was given to end after the answer.
        timeout: Duration,
    },
    /// The caller aborted a trace drain (what arrived until then was delivered).
    Aborted,
    /// A user_events session (CollectTracing5/6 with `UserEvents`) needs its
    /// `user_events_data` descriptor passed with `SCM_RIGHTS`, which this platform
    /// (Windows) cannot do; nothing was sent.
    FdPassingUnsupported,
    /// The user_events session's descriptor could not be passed after the request
    /// (typically: the peer closed the connection first), and the peer answered nothing.
    FdNotPassed {
        /// The request.
        command: Command,
        /// Why `sendmsg` failed.
        source: io::Error,
    },
}

impl Error {
    /// The adapter's form of a session-layer error; `timeout` is the budget the call was
    /// given (reported as it was set, not in the layer's milliseconds).
    pub fn from_session(e: SessionError, timeout: Duration) -> Error {
        match e {
            SessionError::Timeout { command, .. } => Error::Timeout { command, timeout },
            SessionError::StreamNotEnded { session_id, .. } => Error::StreamNotEnded {
                session_id,
                timeout,
            },
            SessionError::NotSupported { command, hresult } => {
                Error::NotSupported { command, hresult }
            }
            SessionError::ErrorReply {
                command,
                hresult,
                message,
            } => Error::ErrorReply {
                command,
                hresult,
                message,
            },
            SessionError::UnexpectedReply { command } => Error::UnexpectedReply { command },
            SessionError::Protocol(e) => Error::from_client(e),
            SessionError::InvalidRequest(e) => Error::InvalidRequest(e),
            SessionError::InvalidArgument(m) | SessionError::Misuse(m) => Error::InvalidArgument(m),
            SessionError::BufferTooSmall { needed, .. } => Error::BufferTooSmall { needed },
            SessionError::EnvironmentTooLarge { announced, limit } => {
                Error::EnvironmentTooLarge { announced, limit }
            }
            SessionError::Stream(e) => Error::Io(io::Error::new(io::ErrorKind::InvalidData, e)),
            SessionError::AdvertiseTimeout { .. } => {
                crate::reverse::AcceptError::AdvertiseTimeout { timeout }.into()
            }
            SessionError::Transport { what, .. } => {
                Error::Io(io::Error::new(io::ErrorKind::Other, what))
            }
            _ => Error::InvalidArgument("an error of a newer session layer"),
        }
    }
}

impl Error {
    /// The runtime's HRESULT, for [`Error::ErrorReply`] and [`Error::NotSupported`].
    pub fn hresult(&self) -> Option<Hresult> {
        match self {
            Error::ErrorReply { hresult, .. } | Error::NotSupported { hresult, .. } => {
                Some(*hresult)
            }
            _ => None,
        }
    }

    /// True when the runtime answered UNKNOWN_COMMAND.
    pub fn is_not_supported(&self) -> bool {
        matches!(self, Error::NotSupported { .. })
    }

    /// True for [`Error::Timeout`].
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout { .. })
    }

    /// The error for a core machine's [`ClientError`] (an encoding refusal is
    /// [`Error::InvalidRequest`], a too-small buffer [`Error::BufferTooSmall`]).
    pub fn from_client(e: ClientError) -> Error {
        match e {
            ClientError::Encode(EncodeError::BufferTooSmall { needed }) => {
                Error::BufferTooSmall { needed }
            }
            ClientError::Encode(e) => Error::InvalidRequest(e),
            other => Error::Protocol(other),
        }
    }

    /// A copy for a second owner (I/O errors keep their kind and text, not their payload).
    pub fn duplicate(&self) -> Error {
        fn dup(e: &io::Error) -> io::Error {
            io::Error::new(e.kind(), e.to_string())
        }
        match self {
            Error::Io(e) => Error::Io(dup(e)),
            Error::Connect { endpoint, source } => Error::Connect {
                endpoint: endpoint.clone(),
                source: dup(source),
            },
            Error::Timeout { command, timeout } => Error::Timeout {
                command: *command,
                timeout: *timeout,
            },
            Error::Protocol(e) => Error::Protocol(*e),
            Error::InvalidRequest(e) => Error::InvalidRequest(*e),
            Error::ErrorReply {
                command,
                hresult,
                message,
            } => Error::ErrorReply {
                command: *command,
                hresult: *hresult,
                message: message.clone(),
            },
            Error::NotSupported { command, hresult } => Error::NotSupported {
                command: *command,
                hresult: *hresult,
            },
            Error::NoSuchProcess { pid } => Error::NoSuchProcess { pid: *pid },
            Error::NoSocket { pid, searched } => Error::NoSocket {
                pid: *pid,
                searched: searched.clone(),
            },
            Error::BufferTooSmall { needed } => Error::BufferTooSmall { needed: *needed },
            Error::UnexpectedReply { command } => Error::UnexpectedReply { command: *command },
            Error::InvalidArgument(s) => Error::InvalidArgument(s),
            Error::EnvironmentTooLarge { announced, limit } => Error::EnvironmentTooLarge {
                announced: *announced,
                limit: *limit,
            },
            Error::SearchDir { dir, source } => Error::SearchDir {
                dir: dir.clone(),
                source: dup(source),
            },
            Error::StreamNotEnded {
                session_id,
                timeout,
            } => Error::StreamNotEnded {
                session_id: *session_id,
                timeout: *timeout,
            },
            Error::Aborted => Error::Aborted,
            Error::FdPassingUnsupported => Error::FdPassingUnsupported,
            Error::FdNotPassed { command, source } => Error::FdNotPassed {
                command: *command,
                source: dup(source),
            },
        }
    }
}

/// Writes `s` on one line: line breaks and runs of blanks become one space.
fn write_one_line(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    let mut first = true;
    for word in s.split_whitespace() {
        if !first {
            f.write_str(" ")?;
        }
        f.write_str(word)?;
        first = false;
    }
    Ok(())
}

impl fmt::Display for Error {
    /// One line, naming the HRESULT and its meaning where the runtime sent one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "I/O error: {}", e),
            Error::Connect { endpoint, source } => {
                write!(f, "cannot connect to {}: {}", endpoint.display(), source)?;
                if source.kind() == io::ErrorKind::ConnectionRefused {
                    f.write_str(" (stale socket of a process that has exited?)")?;
                }
                #[cfg(unix)]
                if source.kind() == io::ErrorKind::PermissionDenied {
                    if let Some((uid, name)) = crate::owner_of(endpoint) {
                        match name {
                            Some(n) if uid == 0 => {
                                write!(f, " (the socket belongs to {} (uid 0): run as root)", n)?
                            }
                            Some(n) => write!(
                                f,
                                " (the socket belongs to {} (uid {}): run as {} or root)",
                                n, uid, n
                            )?,
                            None => write!(
                                f,
                                " (the socket belongs to uid {}: run as that user or root)",
                                uid
                            )?,
                        }
                    }
                }
                Ok(())
            }
            Error::Timeout { command, timeout } => write!(
                f,
                "timed out after {:.1} s waiting for the runtime ({})",
                timeout.as_secs_f64(),
                command
            ),
            Error::Protocol(e) => write!(f, "protocol error: {}", e),
            Error::InvalidRequest(e) => write!(f, "invalid request, not sent: {}", e),
            Error::ErrorReply {
                command,
                hresult,
                message,
            } => {
                write!(f, "{} failed: the runtime answered {}", command, hresult)?;
                if let Some(m) = message.as_deref().filter(|m| !m.trim().is_empty()) {
                    f.write_str(": ")?;
                    write_one_line(f, m)?;
                }
                Ok(())
            }
            Error::NotSupported { command, hresult } => {
                write!(
                    f,
                    "this runtime does not support {}: it answered {}",
                    command, hresult
                )?;
                match (command.introduced_in(), command.set()) {
                    (Some(v), CommandSet::Process) => {
                        write!(f, "; the Process commands arrived in .NET {}", v)?
                    }
                    (Some(v), _) => write!(f, "; {} arrived in .NET {}", command.name(), v)?,
                    (None, _) => {}
                }
                Ok(())
            }
            Error::NoSuchProcess { pid } => write!(f, "no process with pid {}", pid),
            Error::NoSocket { pid, searched } => {
                write!(
                    f,
                    "process {} has no diagnostic socket (not a .NET process, or DOTNET_EnableDiagnostics=0?); searched",
                    pid
                )?;
                for (i, d) in searched.iter().enumerate() {
                    write!(f, "{} {}", if i == 0 { "" } else { "," }, d.display())?;
                }
                Ok(())
            }
            Error::BufferTooSmall { needed } => write!(
                f,
                "receive buffer too small: a message needs {} contiguous bytes",
                needed
            ),
            Error::UnexpectedReply { command } => {
                write!(
                    f,
                    "the runtime's reply does not fit the request {}",
                    command
                )
            }
            Error::InvalidArgument(s) => write!(f, "invalid argument: {}", s),
            Error::EnvironmentTooLarge { announced, limit } => write!(
                f,
                "the runtime announced an environment of {} bytes, more than the limit of {} bytes",
                announced, limit
            ),
            Error::SearchDir { dir, source } => {
                write!(f, "cannot read directory {}: {}", dir.display(), source)
            }
            Error::StreamNotEnded {
                session_id,
                timeout,
            } => write!(
                f,
                "the runtime answered StopTracing for session 0x{:x} but its stream did not end within {:.1} s",
                session_id,
                timeout.as_secs_f64()
            ),
            Error::Aborted => f.write_str("aborted"),
            Error::FdPassingUnsupported => f.write_str(
                "user_events sessions pass a descriptor with SCM_RIGHTS, which this platform cannot do",
            ),
            Error::FdNotPassed { command, source } => write!(
                f,
                "{}: the user_events_data descriptor could not be passed (the runtime closed the connection?): {}",
                command, source
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            Error::Connect { source, .. } => Some(source),
            Error::SearchDir { source, .. } => Some(source),
            Error::FdNotPassed { source, .. } => Some(source),
            Error::Protocol(e) => Some(e),
            Error::InvalidRequest(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<ClientError> for Error {
    fn from(e: ClientError) -> Self {
        Error::from_client(e)
    }
}
