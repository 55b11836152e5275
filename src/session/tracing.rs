//! [`Tracing`]: an EventPipe session from its start to the end of its stream: the command
//! version, the stop from a second connection, the drain after it, and how it ended.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::conn::ClientEvent;
use crate::nettrace::{Framing, NettraceError};
use crate::payload::{Reply, Request as _};
use crate::recv::Poll;
use crate::wire::{Command, Hresult};
use crate::AnyRequest;

use super::link::{Fallbacks, Link, Phase};
use super::{text_to_string, Ask, Call, Millis, SessionError, TraceConfig};

/// What the caller of [`Tracing::poll`] does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TraceStep<'a> {
    /// Open a connection to the runtime, then call [`Tracing::connected`].
    Connect,
    /// Write these bytes in one write, then call [`Tracing::transmitted`].
    Transmit(&'a [u8]),
    /// Read into [`Tracing::read_buf`] and report it; wait at most until
    /// [`Tracing::poll_timeout`] (`None`: as long as it takes).
    Receive,
    /// Close the connection: the runtime did not know the command; an older version that
    /// carries the same request goes on a new connection ([`TraceStep::Connect`] follows).
    Close,
    /// The runtime accepted the session.
    Started {
        /// The runtime's id for it (what StopTracing names).
        session_id: u64,
    },
    /// Stream bytes (nettrace), as received: valid until the next call.
    Data(&'a [u8]),
    /// The stream is over; close the connection.
    End(Outcome),
}

/// How a session's stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// A stop was requested, and the stream ended whole (its end-of-stream marker).
    Stopped {
        /// Stream bytes received.
        bytes: u64,
    },
    /// The runtime ended the stream whole without a stop of ours (another client stopped
    /// the session, or the runtime shut down cleanly).
    Ended {
        /// Stream bytes received.
        bytes: u64,
    },
    /// The stream ended without its end-of-stream marker (the runtime died, or the
    /// connection broke), or its framing broke: the bytes up to `offset` are what there is.
    Cut {
        /// Stream bytes received (all of them were handed to the caller).
        bytes: u64,
        /// Where the stream stopped being a trace (bytes from its start).
        offset: u64,
        /// Whether a stop had been requested.
        stop_requested: bool,
        /// What the framing found.
        reason: NettraceError,
    },
}

impl Outcome {
    /// True for a stream that ended whole.
    pub fn is_whole(&self) -> bool {
        matches!(self, Outcome::Stopped { .. } | Outcome::Ended { .. })
    }

    /// Stream bytes received.
    pub fn bytes(&self) -> u64 {
        match *self {
            Outcome::Stopped { bytes } | Outcome::Ended { bytes } | Outcome::Cut { bytes, .. } => {
                bytes
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Waiting for the session id.
    Starting,
    /// The last request was unknown; the next one goes on a new connection (after Close).
    Reopen,
    Streaming,
    Ended(Outcome),
    Failed(SessionError),
}

/// An EventPipe session, sans-IO: every rule of starting, stopping and ending one, with no
/// socket, thread or clock. See the [module docs](super) for the loop that drives it.
///
/// Before a stop the stream may stay quiet for any time. Once a stop is requested
/// ([`request_stop`](Self::request_stop) or [`stop_requested`](Self::stop_requested)),
/// every wait is bounded by the timeout: a silence longer than it is
/// [`SessionError::Timeout`] (for StopTracing), a stream still running that long after the
/// runtime answered the stop is [`SessionError::StreamNotEnded`], and a stop that failed
/// ([`stop_failed`](Self::stop_failed)) ends the session with its error.
///
/// Every request it may send is encoded when it is built, so it borrows nothing from the
/// [`TraceConfig`]: a session can be kept in any event loop's state for as long as it runs.
#[derive(Debug)]
pub struct Tracing {
    /// The older requests still to try after UNKNOWN_COMMAND (none once started).
    fallbacks: Fallbacks,
    attempt: usize,
    link: Link,
    state: State,
    timeout_ms: u64,
    start_deadline: Millis,
    session_id: Option<u64>,
    /// Boxed: its gathering buffer is 512 bytes, and a session is moved around.
    framing: Box<Framing>,
    bytes: u64,
    last_data: Millis,
    stop_requested_at: Option<Millis>,
    stop_answered_at: Option<Millis>,
    stop_failure: Option<SessionError>,
    /// Where the last [`TraceStep::Data`] lies in the receive buffer.
    data_at: (usize, usize),
}

impl Tracing {
    /// A session collecting `config`, starting at `now`: the runtime must accept it within
    /// `timeout_ms` (fallbacks included), which also bounds every wait after a stop.
    pub fn new(
        config: TraceConfig<'_>,
        now: Millis,
        timeout_ms: u64,
    ) -> Result<Self, SessionError> {
        let streaming = config.streaming();
        let plan = config.plan(&streaming)?;
        let (first, older) = plan
            .split_first()
            .ok_or(SessionError::Misuse("a session with no request"))?;
        let mut fallbacks = Fallbacks::default();
        for r in older {
            fallbacks.push(r);
        }
        Self::build(Link::new(first, Vec::new())?, fallbacks, now, timeout_ms)
    }

    /// A session started with exactly `request` (a CollectTracing of any version; no
    /// fallback).
    pub fn with_request(
        request: AnyRequest<'_>,
        now: Millis,
        timeout_ms: u64,
    ) -> Result<Self, SessionError> {
        if !request.command().is_collect_tracing() {
            return Err(SessionError::InvalidArgument(
                "not a CollectTracing request",
            ));
        }
        let link = Link::new(&request, Vec::new())?;
        Self::build(link, Fallbacks::default(), now, timeout_ms)
    }

    fn build(
        link: Link,
        fallbacks: Fallbacks,
        now: Millis,
        timeout_ms: u64,
    ) -> Result<Self, SessionError> {
        Ok(Tracing {
            fallbacks,
            attempt: 0,
            link,
            state: State::Starting,
            timeout_ms,
            start_deadline: now.saturating_add(timeout_ms),
            session_id: None,
            framing: Box::new(Framing::new()),
            bytes: 0,
            last_data: now,
            stop_requested_at: None,
            stop_answered_at: None,
            stop_failure: None,
            data_at: (0, 0),
        })
    }

    /// The bytes of the last [`TraceStep::Data`], again (for a caller that could not keep
    /// the step's borrow): valid until the next [`read_buf`](Self::read_buf).
    pub fn last_data(&self) -> &[u8] {
        let (at, len) = self.data_at;
        self.link.rx.held().get(at..at + len).unwrap_or(&[])
    }

    /// The command of the start request in flight (or the one that started the session).
    pub fn command(&self) -> Command {
        self.link.command
    }

    /// True when the start request must be followed by a file descriptor (user_events).
    pub fn requires_fd_passing(&self) -> bool {
        self.link.machine.requires_fd_passing()
    }

    /// The runtime's id for the session, once started.
    pub fn session_id(&self) -> Option<u64> {
        self.session_id
    }

    /// Stream bytes received so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The timeout the session was built with (milliseconds).
    pub fn timeout_ms(&self) -> u64 {
        self.timeout_ms
    }

    /// True once a stop was requested.
    pub fn is_stop_requested(&self) -> bool {
        self.stop_requested_at.is_some()
    }

    /// True once the runtime answered a stop.
    pub fn is_stop_answered(&self) -> bool {
        self.stop_answered_at.is_some()
    }

    /// The time by which [`poll`](Self::poll) must be called again even if nothing
    /// arrives: the start's deadline, then (after a stop) the silence and end bounds;
    /// `None` while a running session may stay quiet for any time, and once it is over.
    pub fn poll_timeout(&self) -> Option<Millis> {
        match self.state {
            State::Starting | State::Reopen => Some(self.start_deadline),
            State::Streaming => {
                let silence = self
                    .stop_requested_at
                    .map(|r| r.max(self.last_data).saturating_add(self.timeout_ms));
                let end = self
                    .stop_answered_at
                    .map(|a| a.saturating_add(self.timeout_ms));
                match (silence, end) {
                    (Some(s), Some(e)) => Some(s.min(e)),
                    (s, e) => s.or(e),
                }
            }
            _ => None,
        }
    }

    /// Requests a stop at `now`: returns the StopTracing [`Call`] to run on a second
    /// connection (in the same loop, or on another thread or task), whose end the caller
    /// reports with [`stop_answered`](Self::stop_answered) or
    /// [`stop_failed`](Self::stop_failed). Keep reading this session meanwhile: the runtime
    /// answers the stop only after it flushed the session (rundown included) into this
    /// session's connection.
    pub fn request_stop(&mut self, now: Millis) -> Result<Call, SessionError> {
        let session_id = match (&self.state, self.session_id) {
            (State::Streaming, Some(id)) => id,
            _ => {
                return Err(SessionError::Misuse(
                    "request_stop before the session started",
                ))
            }
        };
        if self.stop_requested_at.is_some() {
            return Err(SessionError::Misuse("a stop was requested already"));
        }
        self.stop_requested(now);
        Call::new(Ask::StopTracing { session_id }, now, self.timeout_ms)
    }

    /// A stop was sent at `now` by other means (a handle on another thread): from now on
    /// every wait is bounded. Only the first call counts.
    pub fn stop_requested(&mut self, now: Millis) {
        self.stop_requested_at.get_or_insert(now);
    }

    /// The runtime answered the stop at `now`: the stream must end within the timeout.
    pub fn stop_answered(&mut self, now: Millis) {
        self.stop_requested(now);
        self.stop_answered_at.get_or_insert(now);
    }

    /// The stop failed (an error reply, or no answer in time): the session ends with `e`
    /// at the next [`poll`](Self::poll).
    pub fn stop_failed(&mut self, e: SessionError) {
        if self.stop_failure.is_none() && !matches!(self.state, State::Ended(_)) {
            self.stop_failure = Some(e);
        }
    }

    /// The connection is open.
    pub fn connected(&mut self) -> Result<(), SessionError> {
        match self.state {
            State::Starting => self.link.connected(),
            _ => Err(SessionError::Misuse("connected without a Connect step")),
        }
    }

    /// The bytes of [`TraceStep::Transmit`] were written.
    pub fn transmitted(&mut self) -> Result<(), SessionError> {
        self.link.transmitted()
    }

    /// The spare space to read into (after [`TraceStep::Receive`]).
    pub fn read_buf(&mut self) -> Result<&mut [u8], SessionError> {
        self.link.read_buf()
    }

    /// `n` bytes were read into [`read_buf`](Self::read_buf).
    pub fn filled(&mut self, n: usize) {
        self.link.rx.filled(n)
    }

    /// The runtime closed the connection (a read returned 0).
    pub fn eof(&mut self) {
        self.link.rx.eof()
    }

    fn fail<T>(&mut self, e: SessionError) -> Result<T, SessionError> {
        self.state = State::Failed(e.clone());
        Err(e)
    }

    /// The next step at `now`. After an error the session is failed and repeats it.
    pub fn poll(&mut self, now: Millis) -> Result<TraceStep<'_>, SessionError> {
        match &self.state {
            State::Failed(e) => return Err(e.clone()),
            State::Ended(o) => return Ok(TraceStep::End(*o)),
            State::Reopen => {
                let buf = self.link.take_buffer();
                match self.fallbacks.link(self.attempt, buf) {
                    Ok(Some(l)) => self.link = l,
                    Ok(None) => return self.fail(SessionError::Misuse("no fallback left")),
                    Err(e) => return self.fail(e),
                }
                self.state = State::Starting;
                return Ok(TraceStep::Connect);
            }
            State::Starting | State::Streaming => {}
        }
        if let Some(e) = self.stop_failure.take() {
            return self.fail(e);
        }
        match self.state {
            State::Starting if now >= self.start_deadline => {
                let (command, timeout_ms) = (self.link.command, self.timeout_ms);
                return self.fail(SessionError::Timeout {
                    command,
                    timeout_ms,
                });
            }
            State::Streaming => {
                if let Some(e) = self.stream_deadline(now) {
                    return self.fail(e);
                }
            }
            _ => {}
        }
        let base = self.link.rx.held().as_ptr() as usize;
        let link = &mut self.link;
        match link.phase {
            Phase::Connect => return Ok(TraceStep::Connect),
            Phase::Transmit { .. } => {
                return Ok(TraceStep::Transmit(link.transmit().unwrap_or(&[])));
            }
            Phase::Receive => {}
        }
        let command = link.command;
        let ev = match link.poll() {
            Ok(Poll::Event(ev)) => ev,
            Ok(Poll::NeedInput) => return Ok(TraceStep::Receive),
            Ok(Poll::End) if self.state == State::Streaming => {
                // The machine reports the stream's EOF as EndOfStream first; this is a poll
                // after it.
                let o = outcome(&self.framing, self.bytes, self.stop_requested_at.is_some());
                self.state = State::Ended(o);
                return Ok(TraceStep::End(o));
            }
            Ok(Poll::End) => {
                let e = SessionError::UnexpectedReply { command };
                self.state = State::Failed(e.clone());
                return Err(e);
            }
            Err(e) => {
                self.state = State::Failed(e.clone());
                return Err(e);
            }
        };
        let streaming = self.state == State::Streaming;
        let e = match ev {
            ClientEvent::Reply(Reply::SessionId(id)) if !streaming => {
                self.session_id = Some(id);
                self.fallbacks.clear();
                self.last_data = now;
                self.state = State::Streaming;
                return Ok(TraceStep::Started { session_id: id });
            }
            ClientEvent::StreamData(d) if streaming => {
                // A broken frame is kept by the framing and becomes the outcome at the end;
                // the bytes still go to the caller (they are what the runtime sent).
                let _ = self.framing.feed(d);
                // Polling never moves the buffer (only reading does).
                self.data_at = (d.as_ptr() as usize - base, d.len());
                self.bytes += d.len() as u64;
                self.last_data = now;
                return Ok(TraceStep::Data(d));
            }
            ClientEvent::EndOfStream if streaming => {
                let o = outcome(&self.framing, self.bytes, self.stop_requested_at.is_some());
                self.state = State::Ended(o);
                return Ok(TraceStep::End(o));
            }
            ClientEvent::Error(e) if !streaming => {
                if e.hresult == Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND {
                    match self.fallbacks.has(self.attempt + 1) {
                        Ok(true) => {
                            self.attempt += 1;
                            self.state = State::Reopen;
                            return Ok(TraceStep::Close);
                        }
                        Ok(false) => SessionError::NotSupported {
                            command,
                            hresult: e.hresult,
                        },
                        Err(e) => e,
                    }
                } else {
                    SessionError::ErrorReply {
                        command,
                        hresult: e.hresult,
                        message: e.message.as_ref().map(text_to_string),
                    }
                }
            }
            _ => SessionError::UnexpectedReply { command },
        };
        self.state = State::Failed(e.clone());
        Err(e)
    }

    /// The bound a stopping session broke at `now`, if any: silence first (a runtime that
    /// went quiet timed out), then a stream still running after the stop was answered.
    fn stream_deadline(&self, now: Millis) -> Option<SessionError> {
        let t = self.timeout_ms;
        if let Some(r) = self.stop_requested_at {
            if now >= r.max(self.last_data).saturating_add(t) {
                return Some(SessionError::Timeout {
                    command: Command::StopTracing,
                    timeout_ms: t,
                });
            }
        }
        if let Some(a) = self.stop_answered_at {
            if now >= a.saturating_add(t) {
                return Some(SessionError::StreamNotEnded {
                    session_id: self.session_id.unwrap_or(0),
                    timeout_ms: t,
                });
            }
        }
        None
    }
}

/// How a stream that closed after `bytes` bytes ended.
fn outcome(framing: &Framing, bytes: u64, stop_requested: bool) -> Outcome {
    match framing.eof() {
        Ok(()) if stop_requested => Outcome::Stopped { bytes },
        Ok(()) => Outcome::Ended { bytes },
        Err(reason) => Outcome::Cut {
            bytes,
            offset: reason.offset().min(bytes),
            stop_requested,
            reason,
        },
    }
}
