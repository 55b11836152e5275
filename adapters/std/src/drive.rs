//! The one drive loop: feeds a core [`ClientConnection`] from any [`Connection`].
//!
//! Every command method goes through [`Exchange`]: encode the request, write it in one
//! `write_all`, then alternate [`Exchange::poll`] (the core's [`RecvBuffer`] hands the
//! machine what is buffered) and [`Exchange::fill`] (read once, with a timeout).

use std::io::{self, ErrorKind};
use std::time::{Duration, Instant};

use dsipc::conn::{ClientConnection, ClientEvent};
use dsipc::payload::Request;
use dsipc::recv::{BufferTooSmall, Poll, RecvBuffer, RecvError};
use dsipc::session::{Ask, Call, Step};
use dsipc::wire::Command;

use crate::{Connection, Error};

pub use dsipc::session::{MAX_RECV_BUFFER_LEN, RECV_BUFFER_LEN};

/// The receive buffer a connection starts with.
const INITIAL_BUFFER_LEN: usize = 4 * 1024;

/// What [`Exchange::fill`] got.
pub(crate) enum Filled {
    /// Some bytes (or EOF, which the next poll reports).
    Progress,
    /// The read timed out.
    TimedOut,
}

thread_local! {
    /// The last receive buffer this thread released: commands in a row reuse it instead
    /// of allocating (and faulting in) a fresh one each time. At most [`MAX_RECV_BUFFER_LEN`]
    /// per thread.
    static SPARE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A zero-filled buffer of at least `size` bytes, reusing this thread's spare.
fn take_buffer(size: usize) -> Vec<u8> {
    let mut buf = SPARE
        .try_with(|s| std::mem::take(&mut *s.borrow_mut()))
        .unwrap_or_default();
    if buf.len() < size {
        buf.resize(size, 0);
    }
    buf
}

/// Gives a buffer back for the next command on this thread.
fn release_buffer(buf: Vec<u8>) {
    let _ = SPARE.try_with(|s| {
        if let Ok(mut spare) = s.try_borrow_mut() {
            if buf.len() > spare.len() {
                *spare = buf;
            }
        }
    });
}

/// One connection, its machine and its receive buffer.
pub(crate) struct Exchange<C> {
    conn: C,
    machine: ClientConnection,
    command: Command,
    rx: RecvBuffer<Vec<u8>>,
    /// The read timeout set on `conn`.
    read_timeout: Duration,
}

/// Time left until `deadline`, or a timeout error for `command`.
pub(crate) fn remaining(
    deadline: Instant,
    command: Command,
    timeout: Duration,
) -> Result<Duration, Error> {
    let now = Instant::now();
    if now >= deadline {
        return Err(Error::Timeout { command, timeout });
    }
    // A zero timeout is an error for std's sockets; never pass one.
    Ok((deadline - now).max(Duration::from_millis(1)))
}

fn too_small(e: BufferTooSmall) -> Error {
    Error::BufferTooSmall { needed: e.needed }
}

pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// A request encoded by the machine, not sent yet: encoding (and the core's refusal of
/// ill-formed requests) happens before any connection is opened.
pub(crate) struct Prepared {
    machine: ClientConnection,
    command: Command,
    buf: Vec<u8>,
    len: usize,
}

impl Prepared {
    /// Encodes `request`.
    pub(crate) fn new<R: Request + ?Sized>(request: &R) -> Result<Self, Error> {
        let size = request
            .encoded_len()
            .clamp(INITIAL_BUFFER_LEN, RECV_BUFFER_LEN);
        let mut buf = take_buffer(size);
        let mut machine = ClientConnection::new();
        let len = machine
            .send_request(request, &mut buf)
            .map_err(Error::from_client)?;
        Ok(Prepared {
            machine,
            command: request.command(),
            buf,
            len,
        })
    }

    /// The request's command.
    pub(crate) fn command(&self) -> Command {
        self.command
    }

    /// Writes the request on `conn` in one `write_all`. `timeout` is the read and write
    /// timeout the transport set on `conn`.
    pub(crate) fn send<C: Connection>(
        mut self,
        mut conn: C,
        timeout: Duration,
    ) -> Result<Exchange<C>, Error> {
        let command = self.command;
        match conn.write_all(&self.buf[..self.len]) {
            Ok(()) => {}
            Err(e) if is_timeout(&e) => return Err(Error::Timeout { command, timeout }),
            Err(e) => return Err(Error::Io(e)),
        }
        Ok(Exchange {
            conn,
            machine: self.machine.clone(),
            command,
            rx: RecvBuffer::with_limit(std::mem::take(&mut self.buf), MAX_RECV_BUFFER_LEN),
            read_timeout: timeout,
        })
    }
}

impl<C> Drop for Exchange<C> {
    fn drop(&mut self) {
        let rx = std::mem::replace(&mut self.rx, RecvBuffer::new(Vec::new()));
        release_buffer(rx.into_storage());
    }
}

impl Drop for Prepared {
    fn drop(&mut self) {
        release_buffer(std::mem::take(&mut self.buf));
    }
}

impl<C: Connection> Exchange<C> {
    /// The request's command.
    pub(crate) fn command(&self) -> Command {
        self.command
    }

    /// Hands the machine the buffered bytes and reports one step.
    pub(crate) fn poll(&mut self) -> Result<Poll<ClientEvent<'_>>, Error> {
        self.rx.poll_client(&mut self.machine).map_err(|e| match e {
            RecvError::BufferTooSmall(b) => too_small(b),
            RecvError::Machine(e) => Error::from_client(e),
            _ => Error::UnexpectedReply {
                command: self.command,
            },
        })
    }

    /// Reads once (keeping unconsumed bytes), waiting at most `timeout`.
    pub(crate) fn fill(&mut self, timeout: Duration) -> Result<Filled, Error> {
        if self.machine.is_streaming() {
            self.rx.reserve(RECV_BUFFER_LEN);
        }
        // Keep the timeout already set when it is at most 1/8 longer than asked (a deadline
        // drifting by microseconds is not worth a system call per read).
        let timeout = timeout.max(Duration::from_millis(1));
        if self.read_timeout < timeout || self.read_timeout > timeout.saturating_add(timeout / 8) {
            self.conn.set_read_timeout(Some(timeout))?;
            self.read_timeout = timeout;
        }
        let buf = self.rx.read_buf().map_err(too_small)?;
        loop {
            match self.conn.read(buf) {
                Ok(0) => {
                    self.rx.eof();
                    return Ok(Filled::Progress);
                }
                Ok(n) => {
                    self.rx.filled(n);
                    return Ok(Filled::Progress);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if is_timeout(&e) => return Ok(Filled::TimedOut),
                Err(e) => return Err(Error::Io(e)),
            }
        }
    }
}

/// Runs one request/reply exchange to its end: encodes `request`, connects with
/// `connect`, sends, and hands every event to `on_event`; all by `deadline` (`timeout` is
/// the budget a timeout error reports).
pub(crate) fn run<C, R, K, F>(
    request: &R,
    connect: K,
    timeout: Duration,
    deadline: Instant,
    mut on_event: F,
) -> Result<(), Error>
where
    C: Connection,
    R: Request + ?Sized,
    K: FnOnce(Duration) -> Result<C, Error>,
    F: FnMut(ClientEvent<'_>) -> Result<(), Error>,
{
    let mut ex = open(request, connect, timeout, deadline)?;
    let command = ex.command();
    loop {
        match ex.poll()? {
            Poll::Event(ev) => on_event(ev)?,
            Poll::NeedInput => {
                if let Filled::TimedOut = ex.fill(remaining(deadline, command, timeout)?)? {
                    return Err(Error::Timeout { command, timeout });
                }
            }
            Poll::End => return Ok(()),
        }
    }
}

/// Encodes `request`, then connects and sends it, by `deadline`.
pub(crate) fn open<C, R, K>(
    request: &R,
    connect: K,
    timeout: Duration,
    deadline: Instant,
) -> Result<Exchange<C>, Error>
where
    C: Connection,
    R: Request + ?Sized,
    K: FnOnce(Duration) -> Result<C, Error>,
{
    let prepared = Prepared::new(request)?;
    let left = remaining(deadline, prepared.command(), timeout)?;
    let conn = connect(left)?;
    prepared.send(conn, left)
}

/// Milliseconds of `d`, rounded up (a 1.5 ms budget is 2 ms on the session layer's clock).
pub(crate) fn millis_ceil(d: Duration) -> u64 {
    let ms = d.as_nanos().saturating_add(999_999) / 1_000_000;
    ms.min(u128::from(u64::MAX)) as u64
}

/// Runs a session-layer [`Call`] to its end over connections opened with `connect`:
/// the call decides what to send, what to fall back to and when time is up; this only
/// connects, writes, reads with a timeout, and hands the events it passes up to
/// `on_event` (with the command they answer).
pub(crate) fn run_call<C, K, F>(
    ask: Ask<'_>,
    mut connect: K,
    timeout: Duration,
    mut on_event: F,
) -> Result<(), Error>
where
    C: Connection,
    K: FnMut(Duration) -> Result<C, Error>,
    F: FnMut(Command, ClientEvent<'_>) -> Result<(), Error>,
{
    let epoch = Instant::now();
    let now = || millis_ceil(epoch.elapsed());
    let mut call = Call::with_buffer(ask, 0, millis_ceil(timeout), take_buffer(0))
        .map_err(|e| Error::from_session(e, timeout))?;
    let result = (|| {
        let mut conn: Option<(C, Duration)> = None;
        loop {
            let command = call.command();
            let deadline = call.poll_timeout().unwrap_or(0);
            let left = || {
                let ms = deadline.saturating_sub(now());
                Duration::from_millis(ms.max(1))
            };
            let step = call
                .poll(now())
                .map_err(|e| Error::from_session(e, timeout))?;
            match step {
                Step::Connect => {
                    let left = left();
                    conn = Some((connect(left)?, left));
                    call.connected()
                        .map_err(|e| Error::from_session(e, timeout))?;
                }
                Step::Transmit(bytes) => {
                    let (c, _) = conn.as_mut().ok_or(Error::UnexpectedReply { command })?;
                    match c.write_all(bytes) {
                        Ok(()) => {}
                        Err(e) if is_timeout(&e) => {
                            return Err(Error::Timeout { command, timeout })
                        }
                        Err(e) => return Err(Error::Io(e)),
                    }
                    call.transmitted()
                        .map_err(|e| Error::from_session(e, timeout))?;
                }
                Step::Receive => {
                    let left = left();
                    let (c, set) = conn.as_mut().ok_or(Error::UnexpectedReply { command })?;
                    // Keep the timeout already set when it is at most 1/8 longer than asked.
                    if *set < left || *set > left.saturating_add(left / 8) {
                        c.set_read_timeout(Some(left))?;
                        *set = left;
                    }
                    let buf = call
                        .read_buf()
                        .map_err(|e| Error::from_session(e, timeout))?;
                    match c.read(buf) {
                        Ok(0) => call.eof(),
                        Ok(n) => call.filled(n),
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        // The next poll says whether the deadline passed.
                        Err(e) if is_timeout(&e) => {}
                        Err(e) => return Err(Error::Io(e)),
                    }
                }
                Step::Close => conn = None,
                Step::Event(ev) => on_event(command, ev)?,
                Step::Done => return Ok(()),
                _ => return Err(Error::UnexpectedReply { command }),
            }
        }
    })();
    release_buffer(call.into_buffer());
    result
}
