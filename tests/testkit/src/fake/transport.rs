//! The fake runtime's transport: Unix sockets, or Windows named pipes (dsipc-std's
//! overlapped `windows::PipeStream` and `windows::PipeListener`, which exist only on
//! Windows builds). The rest of the fake runtime only
//! sees [`Conn`] (a connection with read and write timeouts, and the byte budget of
//! [`Answer::Vanish`](crate::Answer::Vanish)), [`Listener`], [`connect`] and [`Closer`].

use std::io::{self, Read, Write};
use std::path::Path;
use std::time::Duration;

use dsipc_std::Connection;

pub(super) use imp::{connect, Closer, Listener};

/// One connection of the fake runtime: the platform's stream, and an optional budget of
/// bytes it may still write before it "vanishes" (its writes fail, and it closes without
/// waiting for the client to read).
pub(super) struct Conn {
    stream: imp::Stream,
    budget: Option<usize>,
}

impl Conn {
    fn new(stream: imp::Stream) -> Conn {
        Conn {
            stream,
            budget: None,
        }
    }

    /// Writes at most `bytes` more bytes, then fails every write (a runtime that dies).
    pub(super) fn vanish_after(&mut self, bytes: usize) {
        self.budget = Some(bytes);
    }

    /// True once the budget of [`vanish_after`](Self::vanish_after) is spent.
    pub(super) fn vanished(&self) -> bool {
        self.budget == Some(0)
    }

    /// A handle that unblocks a stalled write of this connection from another thread (at
    /// shutdown), where the platform has one.
    pub(super) fn closer(&self) -> Option<Closer> {
        imp::closer(&self.stream)
    }

    /// Ends the connection the way a runtime does after its answer: on Windows, wait until
    /// the client has read everything (`FlushFileBuffers`); on Unix, shut both directions
    /// down. A connection that vanished just closes.
    pub(super) fn finish(self) {
        if !self.vanished() {
            imp::finish(&self.stream);
        }
    }

    /// Closes the connection now (on Unix: shuts it down, so that a [`Closer`] left
    /// elsewhere does not keep it open).
    pub(super) fn close(self) {
        imp::close(&self.stream);
    }

    pub(super) fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        Connection::set_read_timeout(&mut self.stream, timeout)
    }

    pub(super) fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        Connection::set_write_timeout(&mut self.stream, timeout)
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.read(buf)
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.budget {
            None => self.stream.write(buf),
            Some(0) => Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the fake runtime vanished (Answer::Vanish)",
            )),
            Some(left) => {
                let n = self.stream.write(&buf[..buf.len().min(left)])?;
                self.budget = Some(left - n);
                Ok(n)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

/// True for the error of a read or write that timed out.
pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

#[cfg(unix)]
mod imp {
    use std::net::Shutdown;
    use std::os::unix::net::{UnixListener, UnixStream};

    use super::*;
    use crate::socket::bind_private;

    pub(super) type Stream = UnixStream;

    /// A listening Unix socket (mode 0600); its file stays when it is dropped (the fake
    /// runtime removes it).
    pub(in crate::fake) struct Listener(UnixListener);

    impl Listener {
        pub(in crate::fake) fn bind(path: &Path) -> io::Result<Listener> {
            Ok(Listener(bind_private(path)?))
        }

        /// Waits for the next client. Blocking: [`Listener::wake`] unblocks it.
        pub(in crate::fake) fn accept(&mut self, _tick: Duration) -> io::Result<Option<Conn>> {
            self.0.accept().map(|(s, _)| Some(Conn::new(s)))
        }

        /// Unblocks a thread waiting in [`accept`](Self::accept) (at shutdown).
        pub(in crate::fake) fn wake(path: &Path) {
            let _ = UnixStream::connect(path);
        }
    }

    /// Connects to a monitor's reverse port.
    pub(in crate::fake) fn connect(path: &Path) -> io::Result<Conn> {
        UnixStream::connect(path).map(Conn::new)
    }

    /// A second handle on a stream socket.
    pub(in crate::fake) struct Closer(UnixStream);

    impl Closer {
        /// Shuts the socket down, which fails a write blocked on it.
        pub(in crate::fake) fn close(self) {
            let _ = self.0.shutdown(Shutdown::Both);
        }
    }

    pub(super) fn closer(s: &UnixStream) -> Option<Closer> {
        s.try_clone().ok().map(Closer)
    }

    pub(super) fn finish(s: &UnixStream) {
        close(s);
    }

    pub(super) fn close(s: &UnixStream) {
        let _ = s.shutdown(Shutdown::Both);
    }
}

#[cfg(windows)]
mod imp {
    use dsipc_std::windows::{PipeListener, PipeStream};

    use super::*;

    pub(super) type Stream = PipeStream;

    /// A named pipe server (`\\.\pipe\NAME`): instances reject remote clients.
    pub(in crate::fake) struct Listener(PipeListener);

    impl Listener {
        pub(in crate::fake) fn bind(path: &Path) -> io::Result<Listener> {
            PipeListener::bind(path).map(Listener)
        }

        /// Waits up to `tick` for the next client (`None`: nobody came).
        pub(in crate::fake) fn accept(&mut self, tick: Duration) -> io::Result<Option<Conn>> {
            Ok(self.0.accept_timeout(tick)?.map(Conn::new))
        }

        /// Nothing to do: [`accept`](Self::accept) returns every `tick`.
        pub(in crate::fake) fn wake(_path: &Path) {}
    }

    /// Connects to a monitor's reverse pipe (waiting up to 200 ms while it is busy).
    pub(in crate::fake) fn connect(path: &Path) -> io::Result<Conn> {
        dsipc_std::windows::connect(path, Duration::from_millis(200)).map(Conn::new)
    }

    /// Pipes have no second handle here: a stalled write ends at the write timeout.
    pub(in crate::fake) struct Closer(());

    impl Closer {
        pub(in crate::fake) fn close(self) {}
    }

    pub(super) fn closer(_s: &PipeStream) -> Option<Closer> {
        None
    }

    pub(super) fn finish(s: &PipeStream) {
        // As the runtime does before it closes a connection.
        let _ = s.wait_until_read();
    }

    pub(super) fn close(_s: &PipeStream) {}
}

#[cfg(unix)]
impl std::os::unix::io::AsFd for Conn {
    fn as_fd(&self) -> std::os::unix::io::BorrowedFd<'_> {
        self.stream.as_fd()
    }
}
