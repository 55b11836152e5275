//! The one drive loop: feeds a core [`ClientConnection`] from an async connection.
//!
//! The same steps as dsipc-std's driver: the machine encodes the request (refusing
//! ill-formed ones before anything is opened), the request goes out in one `write_all`, then
//! [`Exchange::poll`] (the core's [`RecvBuffer`] hands the machine what is buffered) and
//! [`Exchange::poll_fill`] (one read) alternate. Reads are cancel safe: a read that did not
//! complete took no bytes.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll as TaskPoll};

use dsipc::conn::{ClientConnection, ClientEvent};
use dsipc::payload::Request;
use dsipc::recv::{BufferTooSmall, Poll, RecvBuffer, RecvError};
use dsipc::session::{Ask, Call, Step};
use dsipc::wire::Command;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};

use crate::conn::{BoxStream, Target};
use crate::Error;

pub use dsipc::session::{MAX_RECV_BUFFER_LEN, RECV_BUFFER_LEN};

/// The buffer a connection starts with: the request is encoded into it, then it receives
/// the reply. Most replies are small (ProcessInfo3 with a long command line is a few hundred
/// bytes); the buffer doubles when a message needs more, and grows to [`RECV_BUFFER_LEN`]
/// when a stream starts. A small-bin size for the allocator (4 KiB cost ~4,000 instructions
/// per exchange more).
const INITIAL_BUFFER_LEN: usize = 1024;

/// A zero-filled buffer of `len` bytes. Allocated, then filled: `vec![0; len]` is a `calloc`,
/// which in glibc bypasses the per-thread cache, and thousands of exchanges in flight each
/// take one.
#[allow(clippy::slow_vector_initialization)] // `vec![0; len]` is the slower one here.
fn zeroed(len: usize) -> Vec<u8> {
    let mut buf = Vec::with_capacity(len);
    buf.resize(len, 0);
    buf
}

fn too_small(e: BufferTooSmall) -> Error {
    Error::BufferTooSmall { needed: e.needed }
}

/// A request encoded by the machine, not sent yet.
pub(crate) struct Prepared {
    machine: ClientConnection,
    command: Command,
    buf: Vec<u8>,
    len: usize,
}

impl Prepared {
    /// Encodes `request` (no I/O).
    pub(crate) fn new<R: Request + ?Sized>(request: &R) -> Result<Self, Error> {
        let size = request
            .encoded_len()
            .clamp(INITIAL_BUFFER_LEN, RECV_BUFFER_LEN);
        let mut buf = zeroed(size);
        let mut machine = ClientConnection::new();
        let len = machine
            .send_request(request, &mut buf)
            .map_err(Error::from)?;
        Ok(Prepared {
            machine,
            command: request.command(),
            buf,
            len,
        })
    }

    /// Writes the request on `conn` in one `write_all`. Dropped half way, the connection
    /// goes with it: no connection ever carries half a request into another use.
    pub(crate) async fn send(self, mut conn: BoxStream) -> Result<Exchange, Error> {
        conn.write_all(&self.buf[..self.len]).await?;
        conn.flush().await?;
        Ok(Exchange {
            conn,
            machine: self.machine,
            command: self.command,
            rx: RecvBuffer::with_limit(self.buf, MAX_RECV_BUFFER_LEN),
        })
    }
}

/// One connection, its machine and its receive buffer.
pub(crate) struct Exchange {
    conn: BoxStream,
    machine: ClientConnection,
    command: Command,
    rx: RecvBuffer<Vec<u8>>,
}

impl Exchange {
    /// Hands the machine the buffered bytes and reports one step.
    pub(crate) fn poll(&mut self) -> Result<Poll<ClientEvent<'_>>, Error> {
        let command = self.command;
        self.rx.poll_client(&mut self.machine).map_err(|e| match e {
            RecvError::BufferTooSmall(b) => too_small(b),
            RecvError::Machine(e) => Error::from(e),
            _ => Error::UnexpectedReply { command },
        })
    }

    /// Reads once into the receive buffer (EOF is reported by the next [`poll`](Self::poll)).
    /// Pending means no byte was taken.
    pub(crate) fn poll_fill(&mut self, cx: &mut Context<'_>) -> TaskPoll<Result<(), Error>> {
        if self.machine.is_streaming() {
            self.rx.reserve(RECV_BUFFER_LEN);
        }
        let buf = match self.rx.read_buf() {
            Ok(buf) => buf,
            Err(e) => return TaskPoll::Ready(Err(too_small(e))),
        };
        let mut read = ReadBuf::new(buf);
        match Pin::new(&mut self.conn).poll_read(cx, &mut read) {
            TaskPoll::Pending => TaskPoll::Pending,
            TaskPoll::Ready(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {
                // Try again at once.
                cx.waker().wake_by_ref();
                TaskPoll::Pending
            }
            TaskPoll::Ready(Err(e)) => TaskPoll::Ready(Err(Error::Io(e))),
            TaskPoll::Ready(Ok(())) => {
                let n = read.filled().len();
                if n == 0 {
                    self.rx.eof();
                } else {
                    self.rx.filled(n);
                }
                TaskPoll::Ready(Ok(()))
            }
        }
    }

    /// [`poll_fill`](Self::poll_fill) as a future.
    pub(crate) fn fill(&mut self) -> Fill<'_> {
        Fill { ex: self }
    }
}

/// The future of [`Exchange::fill`].
pub(crate) struct Fill<'a> {
    ex: &'a mut Exchange,
}

impl Future for Fill<'_> {
    type Output = Result<(), Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> TaskPoll<Self::Output> {
        self.ex.poll_fill(cx)
    }
}

/// Encodes `request`, then opens a connection with `connect` and sends the request. The
/// caller bounds the time.
pub(crate) async fn open<R, K, F>(request: &R, connect: K) -> Result<Exchange, Error>
where
    R: Request + ?Sized,
    K: FnOnce() -> F,
    F: Future<Output = Result<BoxStream, Error>>,
{
    let prepared = Prepared::new(request)?;
    let conn = connect().await?;
    prepared.send(conn).await
}

/// Reads the exchange to its end, handing every event to `on_event`. The caller bounds the
/// time.
pub(crate) async fn run<F>(ex: &mut Exchange, mut on_event: F) -> Result<(), Error>
where
    F: FnMut(ClientEvent<'_>) -> Result<(), Error>,
{
    loop {
        match ex.poll()? {
            Poll::Event(ev) => on_event(ev)?,
            Poll::NeedInput => ex.fill().await?,
            Poll::End => return Ok(()),
        }
    }
}

/// Runs a session-layer [`Call`] to its end over connections from `target`: the call
/// decides what to send, what to fall back to and its deadline; this only connects,
/// writes and reads. The caller bounds the time (at the call's deadline: `timeout`).
pub(crate) async fn run_call<F>(
    target: &Target,
    ask: Ask<'_>,
    timeout: std::time::Duration,
    mut on_event: F,
) -> Result<(), Error>
where
    F: FnMut(Command, ClientEvent<'_>) -> Result<(), Error>,
{
    let ms = timeout.as_nanos().saturating_add(999_999) / 1_000_000;
    let ms = ms.min(u128::from(u64::MAX)) as u64;
    let epoch = tokio::time::Instant::now();
    let now = || epoch.elapsed().as_millis().min(u128::from(u64::MAX)) as u64;
    let session = |e| Error::from_session(e, timeout);
    let mut call = Call::new(ask, 0, ms).map_err(session)?;
    let mut conn: Option<BoxStream> = None;
    loop {
        let command = call.command();
        match call.poll(now()).map_err(session)? {
            Step::Connect => {
                conn = Some(target.open().await?);
                call.connected().map_err(session)?;
            }
            Step::Transmit(bytes) => {
                let c = conn.as_mut().ok_or(Error::UnexpectedReply { command })?;
                c.write_all(bytes).await?;
                c.flush().await?;
                call.transmitted().map_err(session)?;
            }
            Step::Receive => {
                let c = conn.as_mut().ok_or(Error::UnexpectedReply { command })?;
                match c.read(call.read_buf().map_err(session)?).await {
                    Ok(0) => call.eof(),
                    Ok(n) => call.filled(n),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Error::Io(e)),
                }
            }
            Step::Close => conn = None,
            Step::Event(ev) => on_event(command, ev)?,
            Step::Done => return Ok(()),
            _ => return Err(Error::UnexpectedReply { command }),
        }
    }
}
