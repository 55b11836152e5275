//! Reverse diagnostic ports: the monitor's side of `DOTNET_DiagnosticPorts=ADDRESS,connect`.
//!
//! A runtime started with that variable connects to ADDRESS (a Unix socket path; on Windows
//! a pipe name), sends a 34-byte Advertise (its cookie and pid), and waits for one command.
//! After the reply it closes and connects again at once, advertising again. With `suspend`
//! (the default mode) its startup waits until a ResumeRuntime arrives over such a
//! connection.
//!
//! [`ReverseListener`] binds the address and accepts runtimes; each accepted runtime is a
//! [`ReverseConnection`]: the [`Advertise`] it sent, and a connection that runs **one**
//! command through the same driver as every other command (it is a one-shot
//! [`Transport`], so [`DiagnosticsClient`] works over it).
//!
//! ```no_run
//! use dsipc_std::reverse::ReverseListener;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The runtime runs with DOTNET_DiagnosticPorts=/tmp/monitor.sock,connect,suspend
//! let mut listener = ReverseListener::bind("/tmp/monitor.sock")?;
//! loop {
//!     let runtime = listener.accept()?;
//!     println!("pid {} cookie {}", runtime.pid(), runtime.cookie());
//!     // One command per connection; the runtime reconnects (and advertises again) after it.
//!     runtime.into_client().resume_runtime()?;
//! }
//! # }
//! ```
//!
//! On Unix the socket is bound with mode 0600 without a window in which anybody else could
//! connect: it is bound in a fresh private directory (mode 0700), made 0600 there, and then
//! hard-linked to its address, which fails rather than replace anything that appeared there
//! meanwhile. A socket file already at the address is removed only if nothing listens on it
//! (a stale socket); a live listener is [`ListenError::InUse`] and any other kind of file is
//! [`ListenError::NotASocket`], left alone. Dropping the listener removes its socket file
//! (only if that file is still the one it bound). This is [`crate::unix::bind_private`],
//! which other listeners can use as well.
//!
//! On Windows the listener creates the named pipe `\\.\pipe\NAME` (rejecting remote
//! clients) and the runtime connects to it (`windows::PipeListener`).
//!
//! [`monitor`]: a whole monitor on such a port (`dsipc monitor` where dsipc-mio is not
//! built), a thread per connection, reporting each runtime to a callback.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use dsipc::session::{AwaitAdvertise, SessionError};
use dsipc::wire::Advertise;

use crate::{Connection, DiagnosticsClient, Error, Transport};

pub mod monitor;

pub use dsipc::session::DEFAULT_ADVERTISE_TIMEOUT;

/// The stream of an accepted runtime: a Unix socket, or on Windows the server end of a
/// named pipe.
#[cfg(unix)]
pub type ReverseStream = std::os::unix::net::UnixStream;
/// The stream of an accepted runtime: a Unix socket, or on Windows the server end of a
/// named pipe.
#[cfg(windows)]
pub type ReverseStream = crate::windows::PipeStream;

/// Why a reverse port could not be bound (defined in dsipc-platform, shared with dsipc-mio).
pub use dsipc_platform::ListenError;

/// Why no runtime came out of an accept (defined in dsipc-platform, shared with
/// dsipc-tokio).
pub use dsipc_platform::reverse::AcceptError;
/// The runtime an accepted connection advertised, what [`ReverseConnection`] dereferences
/// to (defined in dsipc-platform, shared with dsipc-tokio).
pub use dsipc_platform::reverse::AdvertisedRuntime;

/// A runtime that connected to a reverse port and advertised itself. It can run one
/// command: as a [`Transport`] its first `connect` hands out the connection, later ones
/// fail (the runtime reconnects for its next command: accept it again).
///
/// Dropping it unused closes the connection, and the runtime reconnects at once; to keep
/// a runtime waiting, keep its connection.
///
/// Its runtime's Advertise, pid, cookie and the port's address are those of the
/// [`AdvertisedRuntime`] it dereferences to.
#[derive(Debug)]
pub struct ReverseConnection {
    runtime: AdvertisedRuntime,
    stream: Mutex<Option<ReverseStream>>,
}

impl std::ops::Deref for ReverseConnection {
    type Target = AdvertisedRuntime;

    fn deref(&self) -> &AdvertisedRuntime {
        &self.runtime
    }
}

impl ReverseConnection {
    /// True until the connection has been handed out.
    pub fn is_unused(&self) -> bool {
        self.lock().is_some()
    }

    /// True when this connection can no longer run a command: it was handed out, or the
    /// runtime closed it (it exited, or gave up on the connection). Does not block. A
    /// monitor that keeps idle connections uses this to let go of those of exited runtimes.
    pub fn is_closed(&self) -> bool {
        match self.lock().as_ref() {
            None => true,
            Some(s) => imp::peer_closed(s),
        }
    }

    /// A client for this runtime's one command, with [`crate::DEFAULT_TIMEOUT`]. Methods
    /// that need a second connection (ProcessInfo's fallback to older versions, stopping a
    /// trace) cannot get one here: use single-command methods such as
    /// [`DiagnosticsClient::process_info_basic`] and
    /// [`DiagnosticsClient::resume_runtime`].
    pub fn into_client(self) -> DiagnosticsClient<ReverseConnection> {
        DiagnosticsClient::new(self)
    }

    /// The raw stream (the Advertise already read from it), if it was not handed out.
    pub fn into_stream(self) -> Option<ReverseStream> {
        self.stream.into_inner().unwrap_or_else(|p| p.into_inner())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<ReverseStream>> {
        self.stream.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Transport for ReverseConnection {
    type Conn = ReverseStream;

    /// Hands out the connection (once), with both timeouts set to `timeout`.
    fn connect(&self, timeout: Duration) -> Result<ReverseStream, Error> {
        let mut stream = self
            .lock()
            .take()
            .ok_or_else(|| dsipc_platform::reverse::used_up(self.address()))?;
        let timeout = timeout.max(Duration::from_millis(1));
        Connection::set_read_timeout(&mut stream, Some(timeout))?;
        Connection::set_write_timeout(&mut stream, Some(timeout))?;
        Ok(stream)
    }
}

/// Reads the 34-byte Advertise from a fresh connection, within `timeout`: the session
/// layer's [`AwaitAdvertise`] decides; this reads (never past the Advertise) and waits.
fn read_advertise<S: Connection>(
    stream: &mut S,
    timeout: Duration,
) -> Result<Advertise, AcceptError> {
    let epoch = Instant::now();
    let now = || crate::drive::millis_ceil(epoch.elapsed());
    let mut wait = AwaitAdvertise::new(0, crate::drive::millis_ceil(timeout));
    loop {
        match wait.poll(now()) {
            Ok(Some(adv)) => return Ok(adv),
            Ok(None) => {}
            Err(SessionError::Protocol(e)) => return Err(AcceptError::BadAdvertise(e)),
            Err(SessionError::AdvertiseTimeout { .. }) => {
                return Err(AcceptError::AdvertiseTimeout { timeout })
            }
            Err(e) => return Err(AcceptError::Io(io::Error::new(io::ErrorKind::Other, e))),
        }
        let left = wait.poll_timeout().saturating_sub(now()).max(1);
        stream
            .set_read_timeout(Some(Duration::from_millis(left)))
            .map_err(AcceptError::Io)?;
        match stream.read(wait.read_buf()) {
            Ok(0) => wait.eof(),
            Ok(n) => wait.filled(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // A read timeout: the next poll says whether the deadline passed.
            Err(e) if crate::drive::is_timeout(&e) => {}
            Err(e) => return Err(AcceptError::Io(e)),
        }
    }
}

/// A peer accepted by [`ReverseListener::accept_pending`] whose Advertise has not been
/// read yet. Dropping it closes the connection.
#[derive(Debug)]
pub struct PendingConnection {
    stream: ReverseStream,
    address: PathBuf,
}

impl PendingConnection {
    /// Reads the peer's Advertise within `timeout` (blocking up to that long): the runtime,
    /// or why the peer is not one (it is disconnected then).
    pub fn read_advertise(mut self, timeout: Duration) -> Result<ReverseConnection, AcceptError> {
        let advertise = read_advertise(&mut self.stream, timeout.max(Duration::from_millis(1)))?;
        Ok(ReverseConnection {
            runtime: AdvertisedRuntime::new(advertise, self.address),
            stream: Mutex::new(Some(self.stream)),
        })
    }
}

/// A reverse diagnostic port: runtimes connect here and advertise themselves.
///
/// See the [module docs](self) for how it binds. Accepting reads each runtime's Advertise
/// (within [`advertise_timeout`](Self::advertise_timeout)); a peer that sends none, or
/// something else, is an [`AcceptError`] that is not fatal: accept again.
#[derive(Debug)]
pub struct ReverseListener {
    imp: imp::Listener,
    address: PathBuf,
    advertise_timeout: Duration,
}

impl ReverseListener {
    /// Binds the reverse port at `address`: a socket path on Unix, a pipe name (`NAME` or
    /// `\\.\pipe\NAME`) on Windows.
    pub fn bind(address: impl AsRef<Path>) -> Result<ReverseListener, ListenError> {
        let (imp, address) = imp::Listener::bind(address.as_ref())?;
        Ok(ReverseListener {
            imp,
            address,
            advertise_timeout: DEFAULT_ADVERTISE_TIMEOUT,
        })
    }

    dsipc_platform::reverse_listener_methods!();

    /// Waits for the next runtime, without a time limit.
    pub fn accept(&mut self) -> Result<ReverseConnection, AcceptError> {
        loop {
            if let Some(peer) = self.next_peer(None)? {
                return peer.read_advertise(self.advertise_timeout);
            }
        }
    }

    /// Waits up to `timeout` for the next runtime; `Ok(None)` when none came. On Unix it
    /// also returns `Ok(None)` early when a signal interrupts the wait (so that a loop can
    /// look at a Ctrl-C flag).
    pub fn accept_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<ReverseConnection>, AcceptError> {
        let advertise_timeout = self.advertise_timeout;
        self.next_peer(Some(timeout))?
            .map(|peer| peer.read_advertise(advertise_timeout))
            .transpose()
    }

    /// Waits up to `timeout` for the next peer but does not read its Advertise: a peer
    /// that sends nothing then holds up nobody else. Read the Advertise with
    /// [`PendingConnection::read_advertise`] (on a thread of its own, say). Errors are
    /// [`AcceptError::Accept`] only. On Unix `Ok(None)` also comes early on a signal.
    pub fn accept_pending(
        &mut self,
        timeout: Duration,
    ) -> Result<Option<PendingConnection>, AcceptError> {
        self.next_peer(Some(timeout))
    }

    /// The next peer within `timeout` (`None`: no limit), its Advertise not read.
    fn next_peer(
        &mut self,
        timeout: Option<Duration>,
    ) -> Result<Option<PendingConnection>, AcceptError> {
        let address = &self.address;
        let stream = self.imp.accept(timeout).map_err(AcceptError::Accept)?;
        Ok(stream.map(|stream| PendingConnection {
            stream,
            address: address.clone(),
        }))
    }

    /// An endless iterator over accepted runtimes (and per-peer errors).
    pub fn incoming(&mut self) -> Incoming<'_> {
        Incoming { listener: self }
    }
}

/// Iterator returned by [`ReverseListener::incoming`].
#[derive(Debug)]
pub struct Incoming<'a> {
    listener: &'a mut ReverseListener,
}

impl Iterator for Incoming<'_> {
    type Item = Result<ReverseConnection, AcceptError>;
    fn next(&mut self) -> Option<Self::Item> {
        Some(self.listener.accept())
    }
}

#[cfg(unix)]
mod imp {
    use std::io;
    use std::os::unix::io::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use super::ListenError;
    use crate::unix::{bind_private, PrivateListener};

    /// A bound socket (non-blocking, polled before accepting); dropping it removes its
    /// socket file if that is still the one bound.
    #[derive(Debug)]
    pub(super) struct Listener(PrivateListener);

    impl Listener {
        pub(super) fn bind(path: &Path) -> Result<(Listener, PathBuf), ListenError> {
            let listener = bind_private(path)?;
            listener.set_nonblocking()?;
            Ok((Listener(listener), path.to_path_buf()))
        }

        /// Waits for a connection (`None`: forever). `Ok(None)` on timeout, on a signal,
        /// or when the peer left before it was accepted.
        pub(super) fn accept(&self, timeout: Option<Duration>) -> io::Result<Option<UnixStream>> {
            let ms: i32 = match timeout {
                None => -1,
                Some(t) => dsipc_platform::millis_ceil(t).min(i32::MAX as u64) as i32,
            };
            let mut pfd = libc::pollfd {
                fd: self.0.listener().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    return Ok(None);
                }
                return Err(e);
            }
            if r == 0 {
                return Ok(None);
            }
            match self.0.listener().accept() {
                Ok((stream, _)) => {
                    // Accepted sockets inherit O_NONBLOCK on some systems (BSD, macOS).
                    stream.set_nonblocking(false)?;
                    Ok(Some(stream))
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::Interrupted
                            | io::ErrorKind::ConnectionAborted
                    ) =>
                {
                    Ok(None)
                }
                Err(e) => Err(e),
            }
        }
    }

    /// True if the peer closed `stream` (a non-blocking peek sees EOF or an error).
    pub(super) fn peer_closed(stream: &UnixStream) -> bool {
        let mut byte = 0u8;
        // SAFETY: a one-byte buffer we own; MSG_PEEK leaves the data in the socket.
        let r = unsafe {
            libc::recv(
                stream.as_raw_fd(),
                &mut byte as *mut u8 as *mut libc::c_void,
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        match r {
            0 => true,
            n if n > 0 => false,
            _ => !matches!(
                io::Error::last_os_error().kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ),
        }
    }
}

#[cfg(windows)]
mod imp {
    use std::io;
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use super::ListenError;
    use crate::windows::{pipe_path, PipeListener, PipeStream};

    /// True if the peer closed `stream`.
    pub(super) fn peer_closed(stream: &PipeStream) -> bool {
        stream.peer_closed()
    }

    #[derive(Debug)]
    pub(super) struct Listener(PipeListener);

    impl Listener {
        pub(super) fn bind(address: &Path) -> Result<(Listener, PathBuf), ListenError> {
            let name = address.to_str().ok_or_else(|| ListenError::InvalidName {
                name: address.to_string_lossy().into_owned(),
            })?;
            let path = pipe_path(name).map_err(|e| ListenError::InvalidName { name: e.0 })?;
            match PipeListener::bind(&path) {
                Ok(l) => Ok((Listener(l), path)),
                // Somebody else serves this name.
                Err(e) if e.kind() == io::ErrorKind::AddrInUse => Err(ListenError::InUse { path }),
                Err(source) => Err(ListenError::Io {
                    op: "create the pipe",
                    path,
                    source,
                }),
            }
        }

        pub(super) fn accept(
            &mut self,
            timeout: Option<Duration>,
        ) -> io::Result<Option<PipeStream>> {
            match timeout {
                None => self.0.accept().map(Some),
                Some(t) => self.0.accept_timeout(t),
            }
        }
    }
}
