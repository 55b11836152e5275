//! Unix transport: connecting to `dotnet-diagnostic-{pid}-{key}-socket` with a timeout
//! (finding it is dsipc-platform's `discovery`, re-exported here). And the listening side:
//! [`bind_private`] binds a listener only its owner can connect to, replacing only a stale
//! socket, and removes its socket file later only if it is still the one bound
//! ([`SocketFile`]).

use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::{Endpoint, Error, Transport};

/// Binding a private listener and guarding its socket file: dsipc-platform's, re-exported
/// (dsipc-mio uses the same code).
pub use dsipc_platform::{bind_private, PrivateListener, SocketFile};

/// Passing one descriptor with `SCM_RIGHTS` (user_events sessions): dsipc-platform's,
/// re-exported (the fake runtime of dsipc-testkit receives with it).
pub use dsipc_platform::fdpass::{recv_with_fd, send_fd};

crate::transport::connection_of_stream!(UnixStream);

impl Transport for Endpoint {
    type Conn = UnixStream;
    fn connect(&self, timeout: Duration) -> Result<UnixStream, Error> {
        connect(self.path(), timeout).map_err(|source| match source.kind() {
            io::ErrorKind::TimedOut => Error::Connect {
                endpoint: self.path().to_path_buf(),
                source: io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no connection within {:.1} s (listen backlog full?)",
                        timeout.as_secs_f64()
                    ),
                ),
            },
            _ => Error::Connect {
                endpoint: self.path().to_path_buf(),
                source,
            },
        })
    }
}

/// Connects to a Unix socket within `timeout`, and returns a blocking stream whose read and
/// write timeouts are both `timeout`.
///
/// A Unix-socket connect only blocks when the listener's backlog is full. On Linux the
/// send timeout, set before `connect`, bounds that wait; elsewhere a non-blocking connect
/// is retried until the deadline.
pub fn connect(path: &Path, timeout: Duration) -> io::Result<UnixStream> {
    let timeout = timeout.max(Duration::from_millis(1));
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid (empty) value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path is empty, has a NUL, or is longer than sun_path",
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, &src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = src as _;
    }
    let len = (std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    let stream = new_socket()?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_read_timeout(Some(timeout))?;
    let deadline = crate::deadline_after(timeout);
    #[cfg(not(target_os = "linux"))]
    stream.set_nonblocking(true)?;
    loop {
        // SAFETY: `addr` is a valid sockaddr_un of `len` bytes; the socket is ours.
        let r = unsafe {
            libc::connect(
                stream.as_raw_fd(),
                &addr as *const libc::sockaddr_un as *const libc::sockaddr,
                len,
            )
        };
        if r == 0 {
            break;
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            // Linux: the backlog stayed full for the whole send timeout.
            #[cfg(target_os = "linux")]
            Some(libc::EAGAIN) => return Err(io::ErrorKind::TimedOut.into()),
            // Elsewhere: backlog full, try again until the deadline.
            #[cfg(not(target_os = "linux"))]
            Some(libc::EAGAIN) => {
                if Instant::now() >= deadline {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            // The connect completes asynchronously.
            Some(libc::EINPROGRESS) => {
                wait_writable(&stream, deadline)?;
                if let Some(e) = stream.take_error()? {
                    return Err(e);
                }
                break;
            }
            _ => return Err(err),
        }
    }
    #[cfg(not(target_os = "linux"))]
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// A new AF_UNIX stream socket, close-on-exec.
fn new_socket() -> io::Result<UnixStream> {
    #[cfg(target_os = "linux")]
    let flags = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
    #[cfg(not(target_os = "linux"))]
    let flags = libc::SOCK_STREAM;
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_UNIX, flags, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket that nothing else owns; the stream closes it on drop.
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    #[cfg(not(target_os = "linux"))]
    {
        // SAFETY: fcntl on a descriptor we own.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(stream)
}

/// Waits until the socket is writable (an asynchronous connect finished), by `deadline`.
fn wait_writable(stream: &UnixStream, deadline: Instant) -> io::Result<()> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let mut pfd = libc::pollfd {
            fd: stream.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        let ms: i32 = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r > 0 {
            return Ok(());
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Finding runtimes (sockets, keys, processes): dsipc-platform's, re-exported.
pub use dsipc_platform::discovery::{find_socket, list_processes, start_key, DiagnosableProcess};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_times_out_or_fails_fast() {
        let t = Instant::now();
        let e = connect(
            Path::new("/nonexistent-dir/x-socket"),
            Duration::from_secs(5),
        );
        assert!(e.is_err());
        assert!(t.elapsed() < Duration::from_secs(1));
        let long = "/tmp/".to_string() + &"x".repeat(200);
        assert_eq!(
            connect(Path::new(&long), Duration::from_secs(1))
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
