//! Connections: a Unix socket or a Windows named pipe, boxed behind one trait.

use std::io;
use std::path::{Path, PathBuf};

use tokio::io::{AsyncRead, AsyncWrite};

use crate::Error;

/// A connected byte stream to a diagnostic server (or from a runtime, on a reverse port).
pub trait AsyncStream: AsyncRead + AsyncWrite + Send + Unpin {}

impl<S: AsyncRead + AsyncWrite + Send + Unpin> AsyncStream for S {}

/// One boxed connection: the driver does not care which transport it came from.
pub(crate) type BoxStream = Box<dyn AsyncStream>;

/// Connects to the diagnostic server at `path` (a Unix socket path, or on Windows a pipe
/// path `\\.\pipe\NAME`). The caller bounds the wait.
pub(crate) async fn connect(path: &Path) -> Result<BoxStream, Error> {
    imp::connect(path).await.map_err(|source| Error::Connect {
        endpoint: path.to_path_buf(),
        source,
    })
}

/// Where a client sends its commands.
#[derive(Debug)]
pub(crate) enum Target {
    /// A listening diagnostic server: a fresh connection per command.
    Endpoint(crate::Endpoint),
    /// A runtime that connected to a reverse port: exactly one command.
    Reverse {
        /// The reverse port's address.
        address: PathBuf,
        /// The connection, until a command takes it.
        stream: std::sync::Mutex<Option<BoxStream>>,
    },
    /// A runtime of a [`RuntimePool`](crate::reverse::RuntimePool): each command takes its
    /// idle connection, or waits for its next one.
    Pool {
        /// The pool.
        pool: std::sync::Arc<crate::pool::Shared>,
        /// The runtime's cookie.
        cookie: dsipc::wire::Guid,
    },
}

impl std::fmt::Debug for dyn AsyncStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AsyncStream")
    }
}

impl Target {
    /// A connection for one command.
    pub(crate) async fn open(&self) -> Result<BoxStream, Error> {
        match self {
            Target::Endpoint(endpoint) => connect(endpoint.path()).await,
            Target::Reverse { address, stream } => stream
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take()
                .ok_or_else(|| dsipc_platform::reverse::used_up(address)),
            Target::Pool { pool, cookie } => crate::pool::open(pool, *cookie).await,
        }
    }

    /// The address: the server's socket or pipe, or the reverse port.
    pub(crate) fn address(&self) -> &Path {
        match self {
            Target::Endpoint(endpoint) => endpoint.path(),
            Target::Reverse { address, .. } => address,
            Target::Pool { pool, .. } => pool.address(),
        }
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use super::*;
    use std::time::Duration;

    /// A non-blocking connect, used at once. On Linux a Unix stream socket is connected
    /// when `connect` returns (there is no "in progress"), so the request can be written
    /// without waiting for the socket to report writable: that wait, and the `SO_ERROR`
    /// check after it, are a scheduler round trip and a system call per command in
    /// `tokio::net::UnixStream::connect`. A full accept backlog is `EAGAIN` (where tokio's
    /// connect fails): retried until the caller's timeout.
    pub(super) async fn connect(path: &Path) -> io::Result<BoxStream> {
        loop {
            if let Some(stream) = try_connect(path)? {
                return Ok(Box::new(stream));
            }
            tokio::time::sleep(Duration::from_millis(1)).await
        }
    }

    /// One non-blocking connect: the stream, or `None` when the backlog is full. Not async:
    /// the socket address (a `sockaddr_un`) is not held across the caller's wait.
    fn try_connect(path: &Path) -> io::Result<Option<tokio::net::UnixStream>> {
        use socket2::{Domain, SockAddr, Socket, Type};
        let socket = Socket::new(Domain::UNIX, Type::STREAM.nonblocking().cloexec(), None)?;
        match socket.connect(&SockAddr::unix(path)?) {
            Ok(()) => {
                let std = std::os::unix::net::UnixStream::from(socket);
                tokio::net::UnixStream::from_std(std).map(Some)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(all(unix, not(target_os = "linux")))]
mod imp {
    use super::*;

    pub(super) async fn connect(path: &Path) -> io::Result<BoxStream> {
        let stream = tokio::net::UnixStream::connect(path).await?;
        Ok(Box::new(stream))
    }
}

#[cfg(windows)]
mod imp {
    use super::*;
    use std::time::Duration;
    use tokio::net::windows::named_pipe::ClientOptions;

    /// `ERROR_PIPE_BUSY`: every instance of the pipe is in use.
    const ERROR_PIPE_BUSY: i32 = 231;

    pub(super) async fn connect(path: &Path) -> io::Result<BoxStream> {
        loop {
            match ClientOptions::new().open(path) {
                Ok(client) => return Ok(Box::new(client)),
                // The runtime serves one client at a time and creates the next instance
                // after it; wait for it (the caller's timeout bounds this loop).
                Err(e) if e.raw_os_error() == Some(ERROR_PIPE_BUSY) => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(not(any(unix, windows)))]
mod imp {
    use super::*;

    pub(super) async fn connect(_path: &Path) -> io::Result<BoxStream> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "diagnostic connections need Unix sockets or Windows named pipes",
        ))
    }
}
