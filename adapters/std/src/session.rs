//! EventPipe sessions: drain the stream, stop it from a second connection.

use std::io::{self, Write};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dsipc::conn::ClientEvent;
use dsipc::wire::Command;

use crate::client::{unexpected, DiagnosticsClient};
use crate::drive::{Exchange, Filled};
use crate::{Error, Transport};
use dsipc::recv::Poll;

/// How often a draining session wakes up when no data arrives, to check stop requests.
const POLL_TICK: Duration = Duration::from_millis(200);

#[derive(Default)]
struct StopState {
    /// When the first stop was requested.
    requested_at: Option<Instant>,
    /// When a stop was answered.
    stopped_at: Option<Instant>,
    /// A stop that failed: not sent, answered with an error, or not answered in time.
    failure: Option<Error>,
}

/// What a trace drain does next, as the control callback of
/// [`TraceSession::drain_controlled`] decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Keep reading.
    Continue,
    /// Send StopTracing (once) and keep reading to the end of the stream.
    Stop,
    /// Stop reading now: the drain returns [`Error::Aborted`].
    Abort,
}

/// What [`TraceSession::next_chunk`] got.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Chunk<'a> {
    /// Stream bytes (nettrace, passed through as received).
    Data(&'a [u8]),
    /// Nothing arrived within the wait.
    Quiet,
    /// The runtime closed the stream: the session is over.
    End,
}

/// Stops an EventPipe session from any thread, on a second connection.
///
/// The runtime answers StopTracing only after it has flushed the session into the trace
/// connection: [`stop`](Self::stop) blocks until then, so the trace connection must be
/// drained by another thread meanwhile (which [`TraceSession::drain`] does).
pub struct StopHandle<T> {
    client: DiagnosticsClient<T>,
    session_id: u64,
    state: Arc<Mutex<StopState>>,
}

impl<T> Clone for StopHandle<T> {
    fn clone(&self) -> Self {
        StopHandle {
            client: self.client.clone(),
            session_id: self.session_id,
            state: Arc::clone(&self.state),
        }
    }
}

impl<T> std::fmt::Debug for StopHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StopHandle")
            .field("session_id", &self.session_id)
            .finish()
    }
}

fn lock(state: &Mutex<StopState>) -> std::sync::MutexGuard<'_, StopState> {
    // A panic while holding this lock cannot leave the state inconsistent.
    state.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T: Transport> StopHandle<T> {
    /// The session this handle stops.
    pub fn session_id(&self) -> u64 {
        self.session_id
    }

    /// True once a stop was requested (it may still be in flight).
    pub fn is_requested(&self) -> bool {
        lock(&self.state).requested_at.is_some()
    }

    /// Sends StopTracing and waits for the runtime's answer (within the client's
    /// timeout). Does nothing after a stop that was answered. A failure (including no
    /// answer in time) ends a [`TraceSession::drain`] at once with that error.
    pub fn stop(&self) -> Result<(), Error> {
        {
            let mut s = lock(&self.state);
            if s.stopped_at.is_some() {
                return Ok(());
            }
            s.requested_at.get_or_insert_with(Instant::now);
        }
        let result = self.client.stop_tracing(self.session_id);
        let mut s = lock(&self.state);
        match &result {
            Ok(()) => {
                s.stopped_at.get_or_insert_with(Instant::now);
            }
            Err(e) => s.failure = Some(e.duplicate()),
        }
        result
    }

    /// True once the runtime answered a stop.
    pub fn is_answered(&self) -> bool {
        lock(&self.state).stopped_at.is_some()
    }
}

/// A running EventPipe session: the connection that receives its stream.
///
/// Dropping it closes the connection, which ends the session in the runtime without
/// rundown. To end it cleanly, stop it (a [`StopHandle`], or `should_stop` in
/// [`drain`](Self::drain)) and drain to the end.
pub struct TraceSession<T: Transport> {
    exchange: Exchange<T::Conn>,
    handle: StopHandle<T>,
    stopper: Option<JoinHandle<Result<(), Error>>>,
    bytes: u64,
    last_data: Instant,
}

impl<T: Transport> std::fmt::Debug for TraceSession<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceSession")
            .field("session_id", &self.handle.session_id)
            .field("command", &self.exchange.command())
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl<T: Transport> TraceSession<T> {
    pub(crate) fn new(
        exchange: Exchange<T::Conn>,
        session_id: u64,
        client: DiagnosticsClient<T>,
    ) -> Self {
        TraceSession {
            exchange,
            handle: StopHandle {
                client,
                session_id,
                state: Arc::new(Mutex::new(StopState::default())),
            },
            stopper: None,
            bytes: 0,
            last_data: Instant::now(),
        }
    }

    /// The runtime's id for this session.
    pub fn session_id(&self) -> u64 {
        self.handle.session_id
    }

    /// A handle that stops this session from another thread.
    pub fn stop_handle(&self) -> StopHandle<T> {
        self.handle.clone()
    }

    /// Stream bytes received so far.
    pub fn bytes_received(&self) -> u64 {
        self.bytes
    }

    /// Reads the stream to its end, handing each chunk (nettrace bytes, passed through) to
    /// `on_data`. Returns the total byte count once the runtime closes the stream.
    ///
    /// `should_stop` is called with the byte count after every chunk, and at least every
    /// 200 ms while the stream is quiet; the first time it returns true, StopTracing is sent
    /// from a helper thread on a second connection while this thread keeps draining (the
    /// runtime flushes into this connection before it answers). A [`StopHandle`] used from
    /// another thread works the same way. Before a stop the stream may stay quiet for any
    /// time. After it, every wait is bounded by the client's timeout: a stop that fails
    /// (error reply, or no answer in time) is returned at once; a silence longer than the
    /// timeout is [`Error::Timeout`]; a stream still running the timeout after the stop
    /// was answered is [`Error::StreamNotEnded`].
    pub fn drain<F, S>(&mut self, on_data: F, mut should_stop: S) -> Result<u64, Error>
    where
        F: FnMut(&[u8]) -> io::Result<()>,
        S: FnMut(u64) -> bool,
        T: Send + Sync + 'static,
    {
        let mut asked = false;
        self.drain_controlled(on_data, |bytes| {
            if !asked && should_stop(bytes) {
                asked = true;
            }
            if asked {
                Control::Stop
            } else {
                Control::Continue
            }
        })
    }

    /// [`drain`](Self::drain) with a control callback that can also abort: `control` is
    /// called with the byte count after every chunk and at least every 200 ms, for the
    /// whole drain. [`Control::Stop`] sends StopTracing once; [`Control::Abort`] returns
    /// [`Error::Aborted`] at once (every byte received was handed to `on_data`).
    pub fn drain_controlled<F, C>(&mut self, mut on_data: F, mut control: C) -> Result<u64, Error>
    where
        F: FnMut(&[u8]) -> io::Result<()>,
        C: FnMut(u64) -> Control,
        T: Send + Sync + 'static,
    {
        let tick = self.handle.client.timeout().min(POLL_TICK);
        loop {
            match control(self.bytes) {
                Control::Continue => {}
                Control::Stop => self.stop()?,
                Control::Abort => return Err(Error::Aborted),
            }
            match self.next_chunk(tick)? {
                Chunk::Data(data) => on_data(data)?,
                Chunk::Quiet => {}
                Chunk::End => return Ok(self.bytes),
            }
        }
    }

    /// Asks the runtime to stop the session (StopTracing, once, from a helper thread on a
    /// second connection) and returns at once; keep calling [`next_chunk`](Self::next_chunk)
    /// until [`Chunk::End`]: the runtime flushes the rest of the stream (with rundown)
    /// before it answers and closes. A stop that fails is the next `next_chunk`'s error.
    pub fn stop(&mut self) -> Result<(), Error>
    where
        T: Send + Sync + 'static,
    {
        if self.stopper.is_none() && !self.handle.is_requested() {
            self.spawn_stop()?;
        }
        Ok(())
    }

    /// Ends the session at once without a stop: the connection closes and the runtime
    /// ends the session without rundown (what dropping the session does, by name).
    pub fn abort(self) {
        drop(self)
    }

    /// The pull form of a drain: waits up to `wait` for the next stream bytes. Before a
    /// stop the stream may stay quiet for any time ([`Chunk::Quiet`] after each `wait`).
    /// After [`stop`](Self::stop) (or a [`StopHandle`]) every wait is bounded by the
    /// client's timeout, as in [`drain`](Self::drain): a failed stop is returned at once,
    /// a silence longer than the timeout is [`Error::Timeout`], a stream still running the
    /// timeout after the stop was answered is [`Error::StreamNotEnded`].
    pub fn next_chunk(&mut self, wait: Duration) -> Result<Chunk<'_>, Error> {
        let timeout = self.handle.client.timeout();
        let command = self.exchange.command();
        let session_id = self.handle.session_id;
        let until = Instant::now() + wait;
        loop {
            // A failed stop is reported at once; an answered one bounds the rest.
            let requested_at = {
                let mut s = lock(&self.handle.state);
                if let Some(e) = s.failure.take() {
                    return Err(e);
                }
                if let Some(at) = s.stopped_at {
                    if at.elapsed() > timeout {
                        return Err(Error::StreamNotEnded {
                            session_id,
                            timeout,
                        });
                    }
                }
                s.requested_at
            };
            // A chunk's place in the receive buffer, not its borrow (a borrow returned from
            // one arm of a loop would hold the buffer for every turn).
            // Polling never moves the buffer (only reading does).
            let base = self.exchange_base();
            let chunk = match self.exchange.poll()? {
                Poll::Event(ClientEvent::StreamData(data)) => {
                    Some((data.as_ptr() as usize - base, data.len()))
                }
                Poll::Event(ClientEvent::EndOfStream) => None,
                Poll::Event(other) => return Err(unexpected(command, other)),
                Poll::NeedInput => {
                    let left = until.saturating_duration_since(Instant::now());
                    if let Filled::TimedOut = self.exchange.fill(left.min(POLL_TICK))? {
                        // Quiet: has the runtime gone silent since the stop?
                        if let Some(at) = requested_at {
                            if self.last_data.max(at).elapsed() > timeout {
                                return Err(Error::Timeout {
                                    command: Command::StopTracing,
                                    timeout,
                                });
                            }
                        }
                        if Instant::now() >= until {
                            return Ok(Chunk::Quiet);
                        }
                    }
                    None
                }
                Poll::End => {
                    // The stream ended. A runtime answers a stop before it closes the
                    // stream, so this join returns at once (or within the timeout).
                    if let Some(stopper) = self.stopper.take() {
                        let _ = stopper.join();
                    }
                    return Ok(Chunk::End);
                }
            };
            if let Some((at, len)) = chunk {
                self.bytes += len as u64;
                self.last_data = Instant::now();
                return Ok(Chunk::Data(&self.exchange.held()[at..at + len]));
            }
        }
    }

    /// [`drain`](Self::drain) into any writer (a `.nettrace` file, for instance).
    pub fn copy_to<W, S>(&mut self, out: &mut W, should_stop: S) -> Result<u64, Error>
    where
        W: Write + ?Sized,
        S: FnMut(u64) -> bool,
        T: Send + Sync + 'static,
    {
        let n = self.drain(|d| out.write_all(d), should_stop)?;
        out.flush()?;
        Ok(n)
    }

    /// Where the receive buffer starts in memory (to place a chunk's data in it).
    fn exchange_base(&self) -> usize {
        self.exchange.held().as_ptr() as usize
    }

    fn spawn_stop(&mut self) -> Result<(), Error>
    where
        T: Send + Sync + 'static,
    {
        // Mark the request before the thread runs, so the silence timeout starts now.
        lock(&self.handle.state)
            .requested_at
            .get_or_insert_with(Instant::now);
        let handle = self.handle.clone();
        let thread = std::thread::Builder::new()
            .name("dsipc-stop".into())
            .spawn(move || handle.stop())?;
        self.stopper = Some(thread);
        Ok(())
    }
}
