//! EventPipe sessions: the stream as chunks of bytes, stopped from a second connection.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll as TaskPoll, Waker};

use dsipc::conn::ClientEvent;
use dsipc::recv::Poll;
use dsipc::wire::Command;
use tokio::time::{Instant, Sleep};

use crate::client::{unexpected, DiagnosticsClient};
use crate::drive::Exchange;
use crate::Error;

#[derive(Default)]
struct StopState {
    /// When the first stop was requested.
    requested_at: Option<Instant>,
    /// When a stop was answered.
    stopped_at: Option<Instant>,
    /// A stop that failed: answered with an error, or not answered in time.
    failure: Option<Error>,
    /// The task reading the session, woken when this state changes.
    reader: Option<Waker>,
}

fn lock(state: &Mutex<StopState>) -> MutexGuard<'_, StopState> {
    // A panic while holding this lock cannot leave the state inconsistent.
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Stops an EventPipe session from any task, on a second connection.
///
/// The runtime answers StopTracing only after it has flushed the session into the trace
/// connection: [`stop`](Self::stop) completes only while the [`TraceSession`] keeps being
/// read, so run the two concurrently (another task, or `tokio::join!`).
#[derive(Clone)]
pub struct StopHandle {
    client: DiagnosticsClient,
    session_id: u64,
    state: Arc<Mutex<StopState>>,
}

impl std::fmt::Debug for StopHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StopHandle")
            .field("session_id", &self.session_id)
            .finish()
    }
}

impl StopHandle {
    /// The session this handle stops.
    pub fn session_id(&self) -> u64 {
        self.session_id
    }

    /// True once a stop was requested (it may still be in flight).
    pub fn is_requested(&self) -> bool {
        lock(&self.state).requested_at.is_some()
    }

    /// True once the runtime answered a stop.
    pub fn is_answered(&self) -> bool {
        lock(&self.state).stopped_at.is_some()
    }

    /// Sends StopTracing on a new connection and waits for the runtime's answer (within
    /// the client's timeout). Does nothing after a stop that was answered. A failure
    /// (including no answer in time) also ends the session's stream with that error.
    /// Cancel safe: dropped, it only closes its own connection (the stop may or may not
    /// have reached the runtime; the session's stream then ends, or stays bounded by
    /// the timeout counted from this request).
    pub async fn stop(&self) -> Result<(), Error> {
        {
            let mut s = lock(&self.state);
            if s.stopped_at.is_some() {
                return Ok(());
            }
            if s.requested_at.is_none() {
                s.requested_at = Some(Instant::now());
                if let Some(w) = s.reader.take() {
                    w.wake();
                }
            }
        }
        let result = self.client.stop_tracing(self.session_id).await;
        let mut s = lock(&self.state);
        match &result {
            Ok(()) => {
                s.stopped_at.get_or_insert_with(Instant::now);
            }
            Err(e) => s.failure = Some(e.duplicate()),
        }
        if let Some(w) = s.reader.take() {
            w.wake();
        }
        result
    }
}

/// A running EventPipe session: the connection that receives its stream, read as chunks
/// of nettrace bytes with [`next_chunk`](Self::next_chunk) or as a
/// [`futures_core::Stream`].
///
/// Before a stop the stream may stay quiet for any time. Once a stop was requested (a
/// [`StopHandle`]), every wait is bounded by the client's timeout: a stop that fails ends
/// the stream with its error; a silence longer than the timeout after the request is
/// [`Error::Timeout`]; a stream still running the timeout after the stop was answered is
/// [`Error::StreamNotEnded`]. After an error or the end, the stream yields `None`.
///
/// Reading is cancel safe: a dropped [`next_chunk`](Self::next_chunk) future took no
/// bytes, and the next call goes on where it left off. Dropping the session closes the
/// connection, which ends the session in the runtime without rundown; to end it cleanly,
/// stop it and read to the end.
pub struct TraceSession {
    exchange: Exchange,
    handle: StopHandle,
    bytes: u64,
    last_data: Instant,
    /// The timer of the current bounded wait.
    sleep: Option<Pin<Box<Sleep>>>,
    finished: bool,
}

impl std::fmt::Debug for TraceSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceSession")
            .field("session_id", &self.handle.session_id)
            .field("command", &self.exchange.command())
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl TraceSession {
    pub(crate) fn new(exchange: Exchange, session_id: u64, client: DiagnosticsClient) -> Self {
        TraceSession {
            exchange,
            handle: StopHandle {
                client,
                session_id,
                state: Arc::new(Mutex::new(StopState::default())),
            },
            bytes: 0,
            last_data: Instant::now(),
            sleep: None,
            finished: false,
        }
    }

    /// The runtime's id for this session.
    pub fn session_id(&self) -> u64 {
        self.handle.session_id
    }

    /// A handle that stops this session from another task, on a second connection.
    pub fn stop_handle(&self) -> StopHandle {
        self.handle.clone()
    }

    /// Stream bytes received so far.
    pub fn bytes_received(&self) -> u64 {
        self.bytes
    }

    /// True once the stream ended (the runtime closed it) or failed.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// The next chunk of the stream (nettrace bytes, passed through as they arrived);
    /// `None` once the runtime closed it. Cancel safe.
    pub fn next_chunk(&mut self) -> NextChunk<'_> {
        NextChunk { session: self }
    }

    /// Reads the whole stream into `out` (a `.nettrace` file, say) and returns the byte
    /// count. Stop the session from another task meanwhile, or it runs until the runtime
    /// ends it.
    pub async fn copy_to<W>(&mut self, out: &mut W) -> Result<u64, Error>
    where
        W: tokio::io::AsyncWrite + Unpin + ?Sized,
    {
        use tokio::io::AsyncWriteExt;
        while let Some(chunk) = self.next_chunk().await {
            out.write_all(&chunk?).await?;
        }
        out.flush().await?;
        Ok(self.bytes)
    }

    fn fail(&mut self, e: Error) -> TaskPoll<Option<Result<Vec<u8>, Error>>> {
        self.finished = true;
        self.sleep = None;
        TaskPoll::Ready(Some(Err(e)))
    }

    /// The poll behind [`next_chunk`](Self::next_chunk) and the `Stream` impl.
    pub fn poll_chunk(&mut self, cx: &mut Context<'_>) -> TaskPoll<Option<Result<Vec<u8>, Error>>> {
        let timeout = self.handle.client.timeout();
        let session_id = self.handle.session_id;
        let command = self.exchange.command();
        loop {
            if self.finished {
                return TaskPoll::Ready(None);
            }
            // A failed stop is reported at once; a requested or answered one bounds waits.
            let (requested_at, stopped_at) = {
                let mut s = lock(&self.handle.state);
                if let Some(e) = s.failure.take() {
                    drop(s);
                    return self.fail(e);
                }
                // Woken when a stop is requested, answered or fails.
                match &s.reader {
                    Some(w) if w.will_wake(cx.waker()) => {}
                    _ => s.reader = Some(cx.waker().clone()),
                }
                (s.requested_at, s.stopped_at)
            };
            if let Some(at) = stopped_at {
                if at.elapsed() > timeout {
                    return self.fail(Error::StreamNotEnded {
                        session_id,
                        timeout,
                    });
                }
            }
            let polled = match self.exchange.poll() {
                Err(e) => Err(e),
                Ok(Poll::Event(ClientEvent::StreamData(data))) => Ok(Some(Some(data.to_vec()))),
                Ok(Poll::Event(ClientEvent::EndOfStream)) => continue,
                Ok(Poll::Event(other)) => Err(unexpected(command, other)),
                Ok(Poll::NeedInput) => Ok(None),
                Ok(Poll::End) => Ok(Some(None)),
            };
            match polled {
                Err(e) => return self.fail(e),
                Ok(Some(Some(data))) => {
                    self.bytes += data.len() as u64;
                    self.last_data = Instant::now();
                    return TaskPoll::Ready(Some(Ok(data)));
                }
                Ok(Some(None)) => {
                    self.finished = true;
                    self.sleep = None;
                    return TaskPoll::Ready(None);
                }
                Ok(None) => {}
            }
            match self.exchange.poll_fill(cx) {
                TaskPoll::Ready(Ok(())) => continue,
                TaskPoll::Ready(Err(e)) => return self.fail(e),
                TaskPoll::Pending => {}
            }
            // Nothing to read: bound the wait once a stop was requested.
            let requested_at = match requested_at {
                None => {
                    self.sleep = None;
                    return TaskPoll::Pending;
                }
                Some(at) => at,
            };
            let silence_end = self.last_data.max(requested_at) + timeout;
            let (deadline, error) = match stopped_at {
                Some(at) if at + timeout < silence_end => (
                    at + timeout,
                    Error::StreamNotEnded {
                        session_id,
                        timeout,
                    },
                ),
                _ => (
                    silence_end,
                    Error::Timeout {
                        command: Command::StopTracing,
                        timeout,
                    },
                ),
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
                return self.fail(error);
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
