//! # dsipc-platform: what dsipc's drivers share below the protocol
//!
//! - `discovery` (Unix): finding a runtime's `dotnet-diagnostic-{pid}-{key}-socket` (the
//!   target's TMPDIR from `/proc/PID/environ`, `/tmp`, other mount namespaces through
//!   `/proc/PID/root`) and listing every runtime.
//! - `windows`: the `\\.\pipe\` listing, named pipes with read and write timeouts
//!   (`PipeStream`), their server side (`PipeListener`), pipe names.
//! - [`Error`]: the error type dsipc-std, dsipc-tokio and the CLI share.
//! - What both adapters' clients share: a runtime's [`Endpoint`] and the [`ClientOptions`]
//!   of every call; what their reverse ports share ([`reverse`]: the runtime an accepted
//!   connection advertised, why an accept gave none, what both monitor engines report) and
//!   their trace sessions
//!   ([`session`]: the stop signal between stop handles and the reader, the Debug form).
//! - The socket files of listeners, below.
//!
//! [`bind_private`] binds a Unix listener only its owner can connect to: the socket is bound
//! in a fresh private directory (mode 0700) next to its address, made 0600 there, and
//! hard-linked into place, which never replaces anything; a socket file already at the
//! address is removed only if nothing listens on it (a stale socket), and anything else is
//! left alone. The [`SocketFile`] guard removes the file later only if it is still the one
//! bound. [`ListenError`] says why a listener (Unix socket or Windows pipe) could not be
//! created.
//!
//! Used by dsipc-std (which re-exports all of it from its old paths, `dsipc_std::unix`,
//! `dsipc_std::windows`, `dsipc_std::Error`, `dsipc_std::reverse::ListenError`), dsipc-tokio
//! and dsipc-mio, so that no driver depends on another. The core, std and libc, Rust 1.63.
//!
//! [`fdpass`] (Unix): passing one descriptor with `SCM_RIGHTS`, as user_events sessions
//! need; the only module with unsafe code (`sendmsg`/`recvmsg` through libc).
#![deny(missing_docs)]
#![deny(unsafe_code)]
#![warn(unsafe_op_in_unsafe_fn)]

use std::fmt;
use std::io;
use std::path::PathBuf;

/// The README's Rust examples, compiled (and run where they need no runtime) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

mod client;
#[cfg(unix)]
pub mod discovery;
mod error;
#[cfg(unix)]
#[allow(unsafe_code)]
pub mod fdpass;
mod names;
pub mod reverse;
pub mod session;
#[cfg(unix)]
mod unix;
#[cfg(windows)]
#[allow(unsafe_code)]
pub mod windows;

pub use client::{ClientOptions, Endpoint};
pub use error::Error;
pub use names::{command_line, process_name, program_name};

/// The instant `timeout` from now; a timeout too long for the clock (`Duration::MAX`)
/// means a century, not an overflow panic.
pub fn deadline_after(timeout: std::time::Duration) -> std::time::Instant {
    let now = std::time::Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(std::time::Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(now)
}

/// Milliseconds of `d`, rounded up (a 1.5 ms budget is 2 ms): the session layer's clock,
/// and every wait the drivers hand the system in milliseconds (never shorter than asked).
pub fn millis_ceil(d: std::time::Duration) -> u64 {
    let ms = d.as_nanos().saturating_add(999_999) / 1_000_000;
    ms.min(u128::from(u64::MAX)) as u64
}

#[cfg(unix)]
pub use unix::{bind_private, owner_of, PrivateListener, SocketFile};

/// The longest Unix socket path in bytes (`sun_path` holds 108 bytes with the NUL on
/// Linux); the same value as `dsipc::transport::MAX_SOCKET_PATH` (a test checks it).
pub const MAX_SOCKET_PATH: usize = 107;

/// Why a reverse port could not be bound.
#[derive(Debug)]
#[non_exhaustive]
pub enum ListenError {
    /// Something that is not a socket is at the path: it is never removed.
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// A live listener answers at the address (on Windows: another process serves the
    /// pipe name).
    InUse {
        /// The address.
        path: PathBuf,
    },
    /// The path is longer than a Unix socket address allows (107 bytes).
    PathTooLong {
        /// The path.
        path: PathBuf,
    },
    /// Not a pipe name (Windows: empty, or with a `\` after `\\.\pipe\`).
    InvalidName {
        /// The name given.
        name: String,
    },
    /// A system call failed.
    Io {
        /// What was being done.
        op: &'static str,
        /// The address.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

impl fmt::Display for ListenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenError::NotASocket { path } => write!(
                f,
                "{} exists and is not a socket; refusing to remove it",
                path.display()
            ),
            ListenError::InUse { path } => {
                write!(f, "{} is in use by a live listener", path.display())
            }
            ListenError::PathTooLong { path } => write!(
                f,
                "{} is longer than a Unix socket path may be ({} bytes)",
                path.display(),
                crate::MAX_SOCKET_PATH
            ),
            ListenError::InvalidName { name } => {
                write!(f, "{:?} is not a valid pipe name", name)
            }
            ListenError::Io { op, path, source } => {
                write!(f, "cannot {} {}: {}", op, path.display(), source)
            }
        }
    }
}

impl std::error::Error for ListenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ListenError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<ListenError> for io::Error {
    /// An I/O error of the matching kind (`AlreadyExists` for a file that is not a socket,
    /// `AddrInUse`, `InvalidInput` for a bad address, the system call's kind for
    /// [`ListenError::Io`]) that carries the `ListenError` as its inner error.
    fn from(e: ListenError) -> io::Error {
        let kind = match &e {
            ListenError::NotASocket { .. } => io::ErrorKind::AlreadyExists,
            ListenError::InUse { .. } => io::ErrorKind::AddrInUse,
            ListenError::PathTooLong { .. } | ListenError::InvalidName { .. } => {
                io::ErrorKind::InvalidInput
            }
            ListenError::Io { source, .. } => source.kind(),
        };
        io::Error::new(kind, e)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_longest_path_is_the_core_s() {
        assert_eq!(super::MAX_SOCKET_PATH, dsipc::transport::MAX_SOCKET_PATH);
    }
}
