//! EventPipe sessions: the stream as chunks of bytes, stopped from a second connection.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll as TaskPoll};

use std::time::Duration;

use dsipc::session::{Outcome, TraceStep, Tracing};
use dsipc::wire::Command;
use dsipc_platform::session::{fmt_trace_session, StopSignal, STOP_POLL_TICK};
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::client::DiagnosticsClient;
use crate::conn::BoxStream;
use crate::drive::{receive, transmit};
use crate::Error;

/// Stops an EventPipe session from any task, on a second connection.
///
/// The runtime answers StopTracing only after it has flushed the session into the trace
/// connection: [`stop`](Self::stop) completes only while the [`TraceSession`] keeps being
/// read, so run the two concurrently (another task, or `tokio::join!`).
#[derive(Debug, Clone)]
pub struct StopHandle {
    client: DiagnosticsClient,
    signal: StopSignal<Instant>,
}

impl StopHandle {
    /// The session this handle stops.
    pub fn session_id(&self) -> u64 {
        self.signal.session_id()
    }

    /// True once a stop was requested (it may still be in flight).
    pub fn is_requested(&self) -> bool {
        self.signal.is_requested()
    }

    /// True once the runtime answered a stop.
    pub fn is_answered(&self) -> bool {
        self.signal.is_answered()
    }

    /// Sends StopTracing on a new connection and waits for the runtime's answer (within
    /// the client's timeout). Does nothing after a stop that was answered. A failure
    /// (including no answer in time) also ends the session's stream with that error.
    /// Cancel safe: dropped, it only closes its own connection (the stop may or may not
    /// have reached the runtime; the session's stream then ends, or stays bounded by
    /// the timeout counted from this request).
    pub async fn stop(&self) -> Result<(), Error> {
        if !self.signal.request(Instant::now()) {
            return Ok(());
        }
        let result = self.client.stop_tracing(self.signal.session_id()).await;
        self.signal.answer(&result, Instant::now());
        result
    }
}

/// The stop [`TraceSession::stop`] sent: [`StopHandle::stop`]'s future.
type Stopping = Pin<Box<dyn Future<Output = Result<(), Error>> + Send>>;

/// A running EventPipe session: the connection that receives its stream, read as chunks
/// of nettrace bytes with [`next_chunk`](Self::next_chunk) or as a
/// [`futures_core::Stream`], driven by the session layer's [`Tracing`] (the stop's
/// bounds, the drain after it and how the stream ended are decided there; this moves bytes
/// and sleeps until its deadlines).
///
/// Before a stop the stream may stay quiet for any time. Once a stop was requested (a
/// [`StopHandle`]), every wait is bounded by the client's timeout: a stop that fails ends
/// the stream with its error; a silence longer than the timeout after the request is
/// [`Error::Timeout`]; a stream still running the timeout after the stop was answered is
/// [`Error::StreamNotEnded`]. After an error or the end, the stream yields `None`, and
/// [`outcome`](Self::outcome) says how it ended (stopped, ended by the runtime, or cut at
/// an offset).
///
/// Reading is cancel safe: a dropped [`next_chunk`](Self::next_chunk) future took no
/// bytes, and the next call goes on where it left off. Dropping the session closes the
/// connection, which ends the session in the runtime without rundown; to end it cleanly,
/// stop it and read to the end.
pub struct TraceSession {
    conn: BoxStream,
    tracing: Tracing,
    /// The origin of the session layer's clock.
    epoch: Instant,
    handle: StopHandle,
    /// The stop [`stop`](TraceSession::stop) sent, polled with the stream until it is
    /// answered (or fails: the signal tells the stream).
    stopper: Option<Stopping>,
    /// The timer of the current bounded wait.
    sleep: Option<Pin<Box<Sleep>>>,
    outcome: Option<Outcome>,
    finished: bool,
}

impl std::fmt::Debug for TraceSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fmt_trace_session(f, self.session_id(), self.command(), self.bytes_received())
    }
}

/// Milliseconds of `d`, rounded up (the session layer's clock).
pub(crate) use dsipc_platform::millis_ceil as ms;

/// Starts `tracing` on a connection of `client`'s: connect, send, read until the runtime
/// accepts the session. The caller bounds the time.
pub(crate) async fn start(
    client: &DiagnosticsClient,
    mut tracing: Tracing,
) -> Result<TraceSession, Error> {
    let timeout = client.timeout();
    let epoch = Instant::now();
    let session = |e| Error::from_session(e, timeout);
    let mut conn: Option<BoxStream> = None;
    loop {
        let command = tracing.command();
        match tracing.poll(ms(epoch.elapsed())).map_err(session)? {
            TraceStep::Connect => {
                conn = Some(client.target().open().await?);
                tracing.connected().map_err(session)?;
            }
            TraceStep::Transmit(bytes) => {
                transmit(&mut conn, bytes, command).await?;
                tracing.transmitted().map_err(session)?;
            }
            TraceStep::Receive => {
                let buf = tracing.read_buf().map_err(session)?;
                match receive(&mut conn, buf, command).await? {
                    0 => tracing.eof(),
                    n => tracing.filled(n),
                }
            }
            TraceStep::Close => conn = None,
            TraceStep::Started { session_id } => {
                let conn = conn.ok_or(Error::UnexpectedReply { command })?;
                return Ok(TraceSession {
                    conn,
                    tracing,
                    epoch,
                    handle: StopHandle {
                        client: client.clone(),
                        signal: StopSignal::new(session_id),
                    },
                    stopper: None,
                    sleep: None,
                    outcome: None,
                    finished: false,
                });
            }
            _ => return Err(Error::UnexpectedReply { command }),
        }
    }
}

impl TraceSession {
    /// The runtime's id for this session.
    pub fn session_id(&self) -> u64 {
        self.handle.session_id()
    }

    /// The command that started the session (the CollectTracing version the runtime took).
    pub fn command(&self) -> Command {
        self.tracing.command()
    }

    /// A handle that stops this session from another task, on a second connection.
    pub fn stop_handle(&self) -> StopHandle {
        self.handle.clone()
    }

    /// Stream bytes received so far.
    pub fn bytes_received(&self) -> u64 {
        self.tracing.bytes()
    }

    /// True once the stream ended (the runtime closed it) or failed.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// How the stream ended, once it has: [`Outcome::Stopped`] or [`Outcome::Ended`] when
    /// whole, [`Outcome::Cut`] (with the offset) when not. `None` while it runs or after
    /// an error.
    pub fn outcome(&self) -> Option<Outcome> {
        self.outcome
    }

    /// The next chunk of the stream (nettrace bytes, passed through as they arrived);
    /// `None` once the runtime closed it. Cancel safe.
    pub fn next_chunk(&mut self) -> NextChunk<'_> {
        NextChunk { session: self }
    }

    /// Asks the runtime to stop the session (StopTracing, once, on a second connection)
    /// and returns at once; keep reading ([`next_chunk`](Self::next_chunk)) to the end:
    /// the runtime flushes the rest of the stream (with rundown) before it answers and
    /// closes. The stop runs while the stream is read (it is polled with it, no task of
    /// its own); a stop that fails ends the stream with its error. Does nothing after a
    /// stop was requested (here or by a [`StopHandle`]). Never fails today; the `Result`
    /// is dsipc-std's shape (which may fail to start its helper thread).
    pub fn stop(&mut self) -> Result<(), Error> {
        if self.stopper.is_none() && !self.handle.is_requested() {
            // Marked before the stop's first poll, so the silence bound starts now.
            self.handle.signal.request(Instant::now());
            let handle = self.handle.clone();
            self.stopper = Some(Box::pin(async move { handle.stop().await }));
        }
        Ok(())
    }

    /// Reads the whole stream into `out` (a `.nettrace` file, say) and returns how it
    /// ended. `should_stop` is called with the byte count after every chunk, and at least
    /// every 200 ms while the stream is quiet; the first time it returns true the session
    /// is stopped ([`stop`](Self::stop)) and read on to its end. `|_| false` reads until
    /// the runtime ends the session or a [`StopHandle`] stops it.
    pub async fn copy_to<W, S>(&mut self, out: &mut W, mut should_stop: S) -> Result<Outcome, Error>
    where
        W: tokio::io::AsyncWrite + Unpin + ?Sized,
        S: FnMut(u64) -> bool,
    {
        let mut asked = false;
        loop {
            if !asked && should_stop(self.bytes_received()) {
                asked = true;
                self.stop()?;
            }
            let chunk = if asked {
                self.next_chunk().await
            } else {
                // Cancel safe: a read cut by the tick took no bytes.
                match tokio::time::timeout(STOP_POLL_TICK, self.next_chunk()).await {
                    Ok(chunk) => chunk,
                    Err(_) => continue,
                }
            };
            match chunk {
                Some(chunk) => out.write_all(&chunk?).await?,
                None => break,
            }
        }
        out.flush().await?;
        self.outcome.ok_or(Error::UnexpectedReply {
            command: self.tracing.command(),
        })
    }

    fn fail(&mut self, e: Error) -> TaskPoll<Option<Result<Vec<u8>, Error>>> {
        self.finished = true;
        self.sleep = None;
        self.stopper = None;
        TaskPoll::Ready(Some(Err(e)))
    }

    /// The poll behind [`next_chunk`](Self::next_chunk) and the `Stream` impl.
    pub fn poll_chunk(&mut self, cx: &mut Context<'_>) -> TaskPoll<Option<Result<Vec<u8>, Error>>> {
        let timeout = self.handle.client.timeout();
        loop {
            if self.finished {
                return TaskPoll::Ready(None);
            }
            // The stop of `stop()`, if any, goes on with the stream; how it went reaches
            // the signal, read below.
            if let Some(stopper) = &mut self.stopper {
                if stopper.as_mut().poll(cx).is_ready() {
                    self.stopper = None;
                }
            }
            if self.outcome.is_some() {
                // The stream ended. A stop still under way is waited out, as dsipc-std
                // joins its stop thread: its answer is on its way (the runtime closes the
                // stream as it answers), and the client's timeout bounds it.
                if self.stopper.is_some() {
                    return TaskPoll::Pending;
                }
                self.finished = true;
                self.sleep = None;
                return TaskPoll::Ready(None);
            }
            // What the stop handle saw (requested, answered, failed) goes to the session
            // layer; a failed stop is reported at once.
            // Woken when a stop is requested, answered or fails.
            match self.handle.signal.take_news(Some(cx.waker())) {
                Err(e) => return self.fail(e),
                Ok(news) => {
                    if let Some(at) = news.requested_at {
                        self.tracing
                            .stop_requested(ms(at.saturating_duration_since(self.epoch)));
                    }
                    if let Some(at) = news.answered_at {
                        self.tracing
                            .stop_answered(ms(at.saturating_duration_since(self.epoch)));
                    }
                }
            }
            let now = ms(self.epoch.elapsed());
            match self.tracing.poll(now) {
                Err(e) => return self.fail(Error::from_session(e, timeout)),
                Ok(TraceStep::Data(d)) => return TaskPoll::Ready(Some(Ok(d.to_vec()))),
                Ok(TraceStep::End(outcome)) => {
                    self.outcome = Some(outcome);
                    continue;
                }
                Ok(TraceStep::Receive) => {}
                Ok(_) => {
                    let command = self.tracing.command();
                    return self.fail(Error::UnexpectedReply { command });
                }
            }
            let buf = match self.tracing.read_buf() {
                Ok(b) => b,
                Err(e) => return self.fail(Error::from_session(e, timeout)),
            };
            let mut read = ReadBuf::new(buf);
            match Pin::new(&mut self.conn).poll_read(cx, &mut read) {
                TaskPoll::Ready(Ok(())) => {
                    let n = read.filled().len();
                    if n == 0 {
                        self.tracing.eof();
                    } else {
                        self.tracing.filled(n);
                    }
                    continue;
                }
                TaskPoll::Ready(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                TaskPoll::Ready(Err(e)) => return self.fail(Error::Io(e)),
                TaskPoll::Pending => {}
            }
            // Nothing to read: sleep until the session layer's deadline, if it has one.
            let deadline = match self.tracing.poll_timeout() {
                None => {
                    self.sleep = None;
                    return TaskPoll::Pending;
                }
                Some(at) => self.epoch + Duration::from_millis(at),
            };
            let sleep = match &mut self.sleep {
                Some(s) => {
                    if s.deadline() != deadline {
                        s.as_mut().reset(deadline);
                    }
                    s
                }
                None => self
                    .sleep
                    .insert(Box::pin(tokio::time::sleep_until(deadline))),
            };
            if sleep.as_mut().poll(cx).is_ready() {
                // The next poll of the session layer reports the bound it broke.
                continue;
            }
            return TaskPoll::Pending;
        }
    }
}

/// The future of [`TraceSession::next_chunk`].
#[derive(Debug)]
pub struct NextChunk<'a> {
    session: &'a mut TraceSession,
}

impl Future for NextChunk<'_> {
    type Output = Option<Result<Vec<u8>, Error>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> TaskPoll<Self::Output> {
        self.session.poll_chunk(cx)
    }
}

impl futures_core::Stream for TraceSession {
    type Item = Result<Vec<u8>, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> TaskPoll<Option<Self::Item>> {
        self.get_mut().poll_chunk(cx)
    }
}
