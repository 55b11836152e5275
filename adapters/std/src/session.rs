//! EventPipe sessions: drain the stream, stop it from a second connection.

use std::io::{self, Write};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dsipc::session::{Outcome, TraceStep, Tracing};
use dsipc_platform::session::{fmt_trace_session, StopSignal, STOP_POLL_TICK as POLL_TICK};

use crate::client::DiagnosticsClient;
use crate::drive::{millis_ceil, receive, transmit};
use crate::{Error, Transport};

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
    /// The runtime closed the stream: the session is over, and this is how it ended
    /// (stopped, ended by the runtime, or cut at an offset).
    End(Outcome),
}

/// Stops an EventPipe session from any thread, on a second connection.
///
/// The runtime answers StopTracing only after it has flushed the session into the trace
/// connection: [`stop`](Self::stop) blocks until then, so the trace connection must be
/// drained by another thread meanwhile (which [`TraceSession::drain`] does).
pub struct StopHandle<T> {
    client: DiagnosticsClient<T>,
    signal: StopSignal<Instant>,
}

impl<T> Clone for StopHandle<T> {
    fn clone(&self) -> Self {
        StopHandle {
            client: self.client.clone(),
            signal: self.signal.clone(),
        }
    }
}

impl<T> std::fmt::Debug for StopHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("StopHandle").field(&self.signal).finish()
    }
}

impl<T: Transport> StopHandle<T> {
    /// The session this handle stops.
    pub fn session_id(&self) -> u64 {
        self.signal.session_id()
    }

    /// True once a stop was requested (it may still be in flight).
    pub fn is_requested(&self) -> bool {
        self.signal.is_requested()
    }

    /// Sends StopTracing and waits for the runtime's answer (within the client's
    /// timeout). Does nothing after a stop that was answered. A failure (including no
    /// answer in time) ends a [`TraceSession::drain`] at once with that error.
    pub fn stop(&self) -> Result<(), Error> {
        if !self.signal.request(Instant::now()) {
            return Ok(());
        }
        let result = self.client.stop_tracing(self.signal.session_id());
        self.signal.answer(&result, Instant::now());
        result
    }

    /// True once the runtime answered a stop.
    pub fn is_answered(&self) -> bool {
        self.signal.is_answered()
    }
}

/// A running EventPipe session: the connection that receives its stream, driven by the
/// session layer's [`Tracing`] (every rule of the stop, its bounds and the end is there;
/// this moves bytes and runs the stop on a helper thread).
///
/// Dropping it closes the connection, which ends the session in the runtime without
/// rundown. To end it cleanly, stop it (a [`StopHandle`], or `should_stop` in
/// [`drain`](Self::drain)) and drain to the end.
pub struct TraceSession<T: Transport> {
    conn: T::Conn,
    tracing: Tracing,
    /// The origin of the session layer's clock.
    epoch: Instant,
    /// The read timeout set on `conn`.
    read_timeout: Duration,
    handle: StopHandle<T>,
    stopper: Option<JoinHandle<Result<(), Error>>>,
}

impl<T: Transport> std::fmt::Debug for TraceSession<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        fmt_trace_session(f, self.session_id(), self.command(), self.bytes_received())
    }
}

/// Milliseconds from `epoch` to `at` on the session layer's clock.
fn ms(epoch: Instant, at: Instant) -> u64 {
    millis_ceil(at.saturating_duration_since(epoch))
}

/// Starts `tracing` on a connection from `client`'s transport: connect, send the request
/// (then `after_send`, which passes a descriptor for user_events sessions), and read until
/// the runtime accepts the session, all within the client's timeout.
pub(crate) fn start<T, F>(
    client: &DiagnosticsClient<T>,
    mut tracing: Tracing,
    mut after_send: F,
) -> Result<TraceSession<T>, Error>
where
    T: Transport,
    F: FnMut(&T::Conn, &mut Tracing, Instant) -> Result<(), Error>,
{
    let timeout = client.timeout();
    let epoch = Instant::now();
    let session = |e| Error::from_session(e, timeout);
    let mut conn: Option<(T::Conn, Duration)> = None;
    loop {
        let command = tracing.command();
        let deadline = tracing.poll_timeout().unwrap_or(0);
        let left = Duration::from_millis(deadline.saturating_sub(ms(epoch, Instant::now())).max(1));
        match tracing.poll(ms(epoch, Instant::now())).map_err(session)? {
            TraceStep::Connect => {
                conn = Some((client.transport().connect(left)?, left));
                tracing.connected().map_err(session)?;
            }
            TraceStep::Transmit(bytes) => {
                transmit(conn.as_mut().map(|(c, _)| c), bytes, command, timeout)?;
                tracing.transmitted().map_err(session)?;
                let (c, _) = conn.as_ref().ok_or(Error::UnexpectedReply { command })?;
                after_send(c, &mut tracing, epoch)?;
            }
            TraceStep::Receive => {
                let (c, set) = conn.as_mut().ok_or(Error::UnexpectedReply { command })?;
                match receive(c, set, tracing.read_buf().map_err(session)?, left)? {
                    Some(0) => tracing.eof(),
                    Some(n) => tracing.filled(n),
                    None => {}
                }
            }
            TraceStep::Close => conn = None,
            TraceStep::Started { session_id } => {
                let (conn, read_timeout) = conn.ok_or(Error::UnexpectedReply { command })?;
                return Ok(TraceSession {
                    conn,
                    tracing,
                    epoch,
                    read_timeout,
                    handle: StopHandle {
                        client: client.clone(),
                        signal: StopSignal::new(session_id),
                    },
                    stopper: None,
                });
            }
            _ => return Err(Error::UnexpectedReply { command }),
        }
    }
}

impl<T: Transport> TraceSession<T> {
    /// The runtime's id for this session.
    pub fn session_id(&self) -> u64 {
        self.handle.session_id()
    }

    /// The command that started the session (the CollectTracing version the runtime took).
    pub fn command(&self) -> dsipc::wire::Command {
        self.tracing.command()
    }

    /// A handle that stops this session from another thread.
    pub fn stop_handle(&self) -> StopHandle<T> {
        self.handle.clone()
    }

    /// Stream bytes received so far.
    pub fn bytes_received(&self) -> u64 {
        self.tracing.bytes()
    }

    /// Reads the stream to its end, handing each chunk (nettrace bytes, passed through) to
    /// `on_data`, and returns how it ended: [`Outcome::Stopped`] or [`Outcome::Ended`] when
    /// the stream is whole, [`Outcome::Cut`] (with the offset) when it is not: a runtime
    /// killed mid-session never looks like a clean end.
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
    pub fn drain<F, S>(&mut self, on_data: F, mut should_stop: S) -> Result<Outcome, Error>
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
    pub fn drain_controlled<F, C>(
        &mut self,
        mut on_data: F,
        mut control: C,
    ) -> Result<Outcome, Error>
    where
        F: FnMut(&[u8]) -> io::Result<()>,
        C: FnMut(u64) -> Control,
        T: Send + Sync + 'static,
    {
        let tick = self.handle.client.timeout().min(POLL_TICK);
        loop {
            match control(self.bytes_received()) {
                Control::Continue => {}
                Control::Stop => self.stop()?,
                Control::Abort => return Err(Error::Aborted),
            }
            match self.next_chunk(tick)? {
                Chunk::Data(data) => on_data(data)?,
                Chunk::Quiet => {}
                Chunk::End(outcome) => return Ok(outcome),
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

    /// Tells the session layer what the stop handle saw (requested, answered, failed).
    fn sync_stop(&mut self) -> Result<(), Error> {
        let news = self.handle.signal.take_news(None)?;
        if let Some(at) = news.requested_at {
            self.tracing.stop_requested(ms(self.epoch, at));
        }
        if let Some(at) = news.answered_at {
            self.tracing.stop_answered(ms(self.epoch, at));
        }
        Ok(())
    }

    /// The pull form of a drain: waits up to `wait` for the next stream bytes. Before a
    /// stop the stream may stay quiet for any time ([`Chunk::Quiet`] after each `wait`).
    /// After [`stop`](Self::stop) (or a [`StopHandle`]) every wait is bounded by the
    /// client's timeout, as in [`drain`](Self::drain): a failed stop is returned at once,
    /// a silence longer than the timeout is [`Error::Timeout`], a stream still running the
    /// timeout after the stop was answered is [`Error::StreamNotEnded`].
    pub fn next_chunk(&mut self, wait: Duration) -> Result<Chunk<'_>, Error> {
        let timeout = self.handle.client.timeout();
        let until = Instant::now() + wait;
        loop {
            self.sync_stop()?;
            let now = Instant::now();
            let step = self
                .tracing
                .poll(ms(self.epoch, now))
                .map_err(|e| Error::from_session(e, timeout));
            match step {
                Err(e) => return Err(e),
                Ok(TraceStep::Data(_)) => break,
                Ok(TraceStep::End(outcome)) => {
                    // A runtime answers a stop before it closes the stream, so this join
                    // returns at once (or within the timeout).
                    if let Some(stopper) = self.stopper.take() {
                        let _ = stopper.join();
                    }
                    return Ok(Chunk::End(outcome));
                }
                Ok(TraceStep::Receive) => {}
                Ok(_) => {
                    return Err(Error::UnexpectedReply {
                        command: self.tracing.command(),
                    })
                }
            }
            if now >= until {
                return Ok(Chunk::Quiet);
            }
            // Wait for the stream, at most until `until`, the next tick and the session
            // layer's deadline.
            let mut left = until.saturating_duration_since(now).min(POLL_TICK);
            if let Some(d) = self.tracing.poll_timeout() {
                let ms_left = d.saturating_sub(ms(self.epoch, now));
                left = left.min(Duration::from_millis(ms_left));
            }
            let left = left.max(Duration::from_millis(1));
            let buf = self
                .tracing
                .read_buf()
                .map_err(|e| Error::from_session(e, timeout))?;
            match receive(&mut self.conn, &mut self.read_timeout, buf, left)? {
                Some(0) => self.tracing.eof(),
                Some(n) => self.tracing.filled(n),
                None => {}
            }
        }
        Ok(Chunk::Data(self.tracing.last_data()))
    }

    /// [`drain`](Self::drain) into any writer (a `.nettrace` file, for instance).
    pub fn copy_to<W, S>(&mut self, out: &mut W, should_stop: S) -> Result<Outcome, Error>
    where
        W: Write + ?Sized,
        S: FnMut(u64) -> bool,
        T: Send + Sync + 'static,
    {
        let outcome = self.drain(|d| out.write_all(d), should_stop)?;
        out.flush()?;
        Ok(outcome)
    }

    fn spawn_stop(&mut self) -> Result<(), Error>
    where
        T: Send + Sync + 'static,
    {
        // Mark the request before the thread runs, so the silence timeout starts now.
        self.handle.signal.request(Instant::now());
        let handle = self.handle.clone();
        let thread = std::thread::Builder::new()
            .name("dsipc-stop".into())
            .spawn(move || handle.stop())?;
        self.stopper = Some(thread);
        Ok(())
    }
}
