//! Reverse diagnostic ports: the monitor's side of `DOTNET_DiagnosticPorts=ADDRESS,connect`.
//!
//! A runtime started with that variable connects to ADDRESS, sends a 34-byte Advertise (its
//! cookie and pid), and waits for one command; after the reply it closes and connects
//! again, advertising again. With `suspend` (the default) its startup waits until a
//! ResumeRuntime arrives over such a connection.
//!
//! [`ReverseListener`] binds the address and accepts runtimes; each accepted runtime is a
//! [`ReverseConnection`]: its [`Advertise`] and a connection that runs **one** command
//! through [`DiagnosticsClient`] ([`ReverseConnection::into_client`]).
//!
//! [`RuntimePool`] is the monitor's listen mode built on it: a task accepts runtimes and
//! keeps each one's latest idle connection, [`RuntimePool::runtimes`] lists the runtimes
//! alive, and [`RuntimePool::client`] is a full [`DiagnosticsClient`] whose every
//! command takes the runtime's next connection.
//!
//! On Unix the socket is bound as dsipc-std binds it (`dsipc_platform::bind_private`:
//! mode 0600 without a window, a stale socket replaced, nothing else ever removed, the
//! file removed on drop if it is still ours). On Windows the listener serves the named
//! pipe `\\.\pipe\NAME`, rejecting remote clients.
//!
//! ```no_run
//! use dsipc_tokio::reverse::ReverseListener;
//!
//! # async fn run() -> Result<(), dsipc_tokio::Error> {
//! // The runtime runs with DOTNET_DiagnosticPorts=/tmp/monitor.sock,connect,suspend
//! let mut listener = ReverseListener::bind("/tmp/monitor.sock")?;
//! loop {
//!     let runtime = listener.accept().await?;
//!     println!("pid {} cookie {}", runtime.pid(), runtime.cookie());
//!     // One command per connection; the runtime reconnects (and advertises again) after it.
//!     runtime.into_client().resume_runtime().await?;
//! }
//! # }
//! ```

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dsipc::session::{AwaitAdvertise, SessionError};
use dsipc::wire::Advertise;
use dsipc_platform::reverse::AcceptError;
use tokio::io::AsyncReadExt;

use crate::conn::{BoxStream, Target};
use crate::{DiagnosticsClient, Error};

pub use crate::pool::{
    PooledRuntime, RuntimePool, DEFAULT_RECONNECT_GRACE, MAX_PENDING_ADVERTISES,
    MAX_POOLED_RUNTIMES,
};

/// How long an accepted connection may take to send its Advertise (real runtimes send it
/// at once).
pub use dsipc::session::DEFAULT_ADVERTISE_TIMEOUT;

/// The runtime an accepted connection advertised, what [`ReverseConnection`] dereferences
/// to (defined in dsipc-platform, shared with dsipc-std).
pub use dsipc_platform::reverse::AdvertisedRuntime;

/// A runtime that connected to a reverse port and advertised itself; its connection runs
/// one command. Dropping it unused closes the connection (the runtime reconnects at once).
///
/// Its runtime's Advertise, pid, cookie and the port's address are those of the
/// [`AdvertisedRuntime`] it dereferences to.
#[derive(Debug)]
pub struct ReverseConnection {
    runtime: AdvertisedRuntime,
    stream: BoxStream,
}

impl std::ops::Deref for ReverseConnection {
    type Target = AdvertisedRuntime;

    fn deref(&self) -> &AdvertisedRuntime {
        &self.runtime
    }
}

impl ReverseConnection {
    /// A client for this runtime's one command. Methods that need a second connection
    /// (ProcessInfo's fallback to older versions, stopping a trace) cannot get one here:
    /// use single-command methods such as
    /// [`process_info_basic`](DiagnosticsClient::process_info_basic) and
    /// [`resume_runtime`](DiagnosticsClient::resume_runtime); a second command fails with
    /// [`Error::Connect`].
    pub fn into_client(self) -> DiagnosticsClient {
        DiagnosticsClient::with_target(Target::Reverse {
            address: self.runtime.address().to_path_buf(),
            stream: std::sync::Mutex::new(Some(self.stream)),
        })
    }

    /// The raw connection (the Advertise already read from it).
    pub fn into_stream(self) -> Box<dyn crate::AsyncStream> {
        self.stream
    }
}

/// Reads exactly one Advertise (never a byte past it): the session layer's
/// [`AwaitAdvertise`] decides; the caller's timer keeps the deadline.
async fn read_advertise(stream: &mut BoxStream) -> Result<Advertise, Error> {
    // Time 0 throughout: the deadline is tokio's timer's (`read_advertise_within`).
    let mut wait = AwaitAdvertise::new(0, u64::MAX);
    loop {
        match wait.poll(0) {
            Ok(Some(adv)) => return Ok(adv),
            Ok(None) => {}
            Err(SessionError::Protocol(e)) => return Err(Error::Protocol(e)),
            Err(e) => return Err(Error::Io(io::Error::new(io::ErrorKind::Other, e))),
        }
        match stream.read(wait.read_buf()).await {
            Ok(0) => wait.eof(),
            Ok(n) => wait.filled(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::Io(e)),
        }
    }
}

/// A listener error as the crate's one error type: an I/O error of a fitting kind that
/// carries the [`dsipc_platform::ListenError`] (its text, and `get_ref` downcasts).
fn listen_error(e: dsipc_platform::ListenError) -> Error {
    Error::Io(e.into())
}

/// A reverse diagnostic port: runtimes connect here and advertise themselves.
#[derive(Debug)]
pub struct ReverseListener {
    imp: imp::Listener,
    address: PathBuf,
    advertise_timeout: Duration,
}

impl ReverseListener {
    /// Binds the reverse port at `address`: a socket path on Unix, a pipe name (`NAME` or
    /// `\\.\pipe\NAME`) on Windows. Must be called within a tokio runtime. A socket already
    /// served, or anything that is not a socket at the path, is an [`Error::Io`]
    /// (`AddrInUse`, `AlreadyExists`) carrying dsipc-platform's `ListenError`.
    pub fn bind(address: impl AsRef<Path>) -> Result<ReverseListener, Error> {
        let (imp, address) = imp::Listener::bind(address.as_ref())?;
        Ok(ReverseListener {
            imp,
            address,
            advertise_timeout: DEFAULT_ADVERTISE_TIMEOUT,
        })
    }

    dsipc_platform::reverse_listener_methods!();

    /// Waits for the next runtime and reads its Advertise (within
    /// [`advertise_timeout`](Self::advertise_timeout)).
    ///
    /// A peer that sends no Advertise in time (`Error::Io` of kind `TimedOut`) or something
    /// else ([`Error::Protocol`]) is disconnected and reported; the listener keeps working,
    /// so accept again. Cancel safe: dropped while waiting for a peer, nothing is lost;
    /// dropped while reading an Advertise, that peer is disconnected (a runtime reconnects).
    pub async fn accept(&mut self) -> Result<ReverseConnection, Error> {
        let mut stream = self.accept_stream().await?;
        let advertise = read_advertise_within(&mut stream, self.advertise_timeout).await?;
        Ok(ReverseConnection {
            runtime: AdvertisedRuntime::new(advertise, self.address.clone()),
            stream,
        })
    }

    /// The next peer's connection, its Advertise not read yet (for [`RuntimePool`], which
    /// reads Advertises concurrently).
    pub(crate) async fn accept_stream(&mut self) -> Result<BoxStream, Error> {
        self.imp.accept(&self.address).await
    }

    /// Takes what removes the socket file on drop (Unix; `None` on Windows, where the
    /// pipe goes with its last handle), so that an owner can remove the file at once while
    /// a task still holds the listener.
    pub(crate) fn take_file_guard(&mut self) -> Option<imp::FileGuard> {
        self.imp.take_file_guard()
    }
}

/// Reads one Advertise within `timeout`: a peer that sends none in time is an
/// [`Error::Io`] of kind `TimedOut`, one that sends something else an [`Error::Protocol`].
pub(crate) async fn read_advertise_within(
    stream: &mut BoxStream,
    timeout: Duration,
) -> Result<Advertise, Error> {
    match tokio::time::timeout(timeout, read_advertise(stream)).await {
        Ok(r) => r,
        Err(_) => Err(AcceptError::AdvertiseTimeout { timeout }.into()),
    }
}

#[cfg(unix)]
pub(crate) mod imp {
    use super::*;
    use dsipc_platform::SocketFile;
    use tokio::net::UnixListener;

    /// Removes the socket file on drop (if it is still the one bound).
    pub(crate) type FileGuard = SocketFile;

    #[derive(Debug)]
    pub(super) struct Listener {
        listener: UnixListener,
        /// Removes the socket file on drop (if it is still the one bound); `None` once
        /// taken by [`take_file_guard`](Self::take_file_guard).
        file: Option<SocketFile>,
    }

    impl Listener {
        pub(super) fn bind(address: &Path) -> Result<(Listener, PathBuf), Error> {
            let private = dsipc_platform::bind_private(address).map_err(listen_error)?;
            private.set_nonblocking().map_err(listen_error)?;
            let (listener, file) = private.into_parts();
            let listener = UnixListener::from_std(listener)?;
            let path = file.path().to_path_buf();
            Ok((
                Listener {
                    listener,
                    file: Some(file),
                },
                path,
            ))
        }

        pub(super) async fn accept(&mut self, _address: &Path) -> Result<BoxStream, Error> {
            let (stream, _) = self.listener.accept().await?;
            Ok(Box::new(stream))
        }

        pub(super) fn take_file_guard(&mut self) -> Option<FileGuard> {
            self.file.take()
        }
    }
}

#[cfg(windows)]
pub(crate) mod imp {
    use super::*;
    use tokio::net::windows::named_pipe::{NamedPipeServer, PipeMode, ServerOptions};

    /// Nothing to remove on Windows: the pipe goes with its last handle.
    pub(crate) type FileGuard = ();

    #[derive(Debug)]
    pub(super) struct Listener {
        /// The instance the next runtime connects to.
        next: NamedPipeServer,
    }

    fn create(address: &Path, first: bool) -> io::Result<NamedPipeServer> {
        ServerOptions::new()
            .first_pipe_instance(first)
            .reject_remote_clients(true)
            .pipe_mode(PipeMode::Byte)
            .create(address)
    }

    impl Listener {
        pub(super) fn bind(address: &Path) -> Result<(Listener, PathBuf), Error> {
            let name = address.to_string_lossy();
            let path = dsipc_platform::windows::pipe_path(&name).map_err(|e| {
                listen_error(dsipc_platform::ListenError::InvalidName { name: e.0 })
            })?;
            // A probe first (Wine ignores FILE_FLAG_FIRST_PIPE_INSTANCE), then the flag,
            // which closes the race on Windows; as dsipc-std's PipeListener does.
            if dsipc_platform::windows::pipe_exists(&path) {
                return Err(listen_error(dsipc_platform::ListenError::InUse { path }));
            }
            let next = create(&path, true).map_err(|source| {
                // ERROR_ACCESS_DENIED: another process serves this name.
                if source.raw_os_error() == Some(5) {
                    listen_error(dsipc_platform::ListenError::InUse { path: path.clone() })
                } else {
                    listen_error(dsipc_platform::ListenError::Io {
                        op: "create the pipe",
                        path: path.clone(),
                        source,
                    })
                }
            })?;
            Ok((Listener { next }, path))
        }

        pub(super) async fn accept(&mut self, address: &Path) -> Result<BoxStream, Error> {
            // Cancel safe: a dropped connect leaves the instance waiting.
            self.next.connect().await?;
            let fresh = create(address, false)?;
            let connected = std::mem::replace(&mut self.next, fresh);
            Ok(Box::new(connected))
        }

        pub(super) fn take_file_guard(&mut self) -> Option<FileGuard> {
            None
        }
    }
}
