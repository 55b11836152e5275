//! An EventPipe session streamed to a response body (`/trace`, `/logs`, `/livemetrics`):
//! a recipe ([`ToBody`]) on dsipc-recipes' async driver, what each route makes of the bytes
//! its [`Sink`].
//!
//! The session is asked to stop (StopTracing, once, from a second connection) when its
//! duration is over, when [`Artifact::stop`](super::api::Artifact) is signalled
//! (`DELETE /operations/{id}?stop=true`), or when whoever reads the body went away; the
//! stream is then read to its end (the rundown comes after the stop), unless nobody reads
//! it. Memory stays flat: the body channel is bounded, so a slow reader slows the reading
//! of the session (the runtime's own buffer absorbs it or drops events, as it does for any
//! slow client). How the stream ended (whole, or cut at an offset) is the session layer's
//! [`Outcome`], from the stream's framing: nothing here parses it a second time.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use dsipc::nettrace::NettraceError;
use dsipc::session::Outcome;
use dsipc_recipes::{Collect, End, RecipeError, Request, Stop, Tick};
use tokio::sync::Notify;

use dsipc_tokio::TraceSession;

use crate::http::{self, Body, BodySender, Gone};

/// What a route makes of a session's bytes.
pub trait Sink: Send + 'static {
    /// The next chunk of the nettrace stream: what to send (`None`: nothing yet).
    fn chunk(&mut self, data: Vec<u8>) -> Option<Bytes>;
    /// The stream ended as `outcome` says: a last piece to send, or an error that ends the
    /// body abnormally (the client sees a cut body, never a whole one).
    fn end(&mut self, outcome: &Outcome) -> Result<Option<Bytes>, io::Error>;
}

/// A chunk on its way to the body.
type Sending = Pin<Box<dyn Future<Output = Result<(), Gone>> + Send>>;

/// A session into a response body, as a recipe: each chunk through the route's [`Sink`]
/// into the bounded body channel (the driver reads on only once the last chunk went in),
/// stopped by the duration, a [`Stop`] or the reader going away, abandoned once nobody
/// reads.
pub struct ToBody<S> {
    sink: S,
    tx: Arc<BodySender>,
    sending: Option<Sending>,
    /// Set when the reader went away or stalled: nothing more is sent.
    gone: Option<Gone>,
    duration: Option<Duration>,
    stop: Stop,
    /// Ready once the reader went away (made at the first wait).
    closed: Option<Closed>,
}

/// The wait for the body's reader to go away.
type Closed = Pin<Box<dyn Future<Output = ()> + Send>>;

/// How a [`ToBody`] ended: the body's failure, if it is to be cut.
pub struct BodyEnd {
    failure: Option<io::Error>,
    stalled: bool,
    last: Option<Bytes>,
}

impl<S: Sink> ToBody<S> {
    fn gone(&self) -> bool {
        self.gone.is_some() || self.tx.is_closed()
    }
}

impl<S: Sink> Collect for ToBody<S> {
    type Output = BodyEnd;

    /// The session was started by the route (its refusal is the route's answer), and is
    /// driven with [`dsipc_recipes::run_session_async`], which does not ask this.
    fn request(&self) -> Request {
        Request {
            providers: Vec::new(),
            buffer_mb: 0,
            rundown: false,
        }
    }

    fn feed(&mut self, data: &[u8]) -> Result<(), RecipeError> {
        if self.gone.is_some() {
            return Ok(());
        }
        if let Some(out) = self.sink.chunk(data.to_vec()) {
            let tx = Arc::clone(&self.tx);
            self.sending = Some(Box::pin(async move { tx.send(out).await }));
        }
        Ok(())
    }

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Some(sending) = &mut self.sending {
            match sending.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(())) => {}
                Poll::Ready(Err(g)) => self.gone = Some(g),
            }
            self.sending = None;
        }
        Poll::Ready(())
    }

    fn enough(&mut self, elapsed: Duration) -> bool {
        self.stop.is_requested() || self.duration.map_or(false, |d| elapsed >= d) || self.gone()
    }

    fn quiet_for(&self, now: &Tick) -> Option<Duration> {
        // Only the duration ends it by time alone; a stop or the reader going away wakes
        // the driver itself.
        self.duration
            .and_then(|d| d.checked_sub(now.elapsed))
            .filter(|left| !left.is_zero())
    }

    fn poll_wake(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        // Closed: ready without polling the finished wait again.
        if self.stop.poll_requested(cx).is_ready() || self.gone() {
            return Poll::Ready(());
        }
        let tx = &self.tx;
        let closed = self.closed.get_or_insert_with(|| {
            let tx = Arc::clone(tx);
            Box::pin(async move { tx.closed().await })
        });
        closed.as_mut().poll(cx)
    }

    fn abandon(&self) -> bool {
        // Nobody reads the rest: the stop was asked; closing the stream ends the session
        // in the runtime either way.
        self.gone()
    }

    fn max_bytes(&self) -> u64 {
        // Bounded by the body channel and the duration, not by a size.
        u64::MAX
    }

    fn finish(mut self, end: End, _stop_asked: bool) -> Result<BodyEnd, RecipeError> {
        let stalled = self.gone == Some(Gone::Stalled);
        let (failure, last) = match end {
            End::Stream(o) => match self.sink.end(&o) {
                Ok(last) => (None, last.filter(|_| !self.gone())),
                Err(e) => (Some(e), None),
            },
            End::Failed(e) => match e {
                dsipc_tokio::Error::Aborted if stalled => (
                    Some(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client stalled",
                    )),
                    None,
                ),
                dsipc_tokio::Error::Aborted => (None, None),
                e => (
                    Some(io::Error::new(io::ErrorKind::Other, e.to_string())),
                    None,
                ),
            },
            // No deadline is given to the driver.
            End::TimedOut => (None, None),
        };
        Ok(BodyEnd {
            failure,
            stalled,
            last,
        })
    }
}

/// Streams `session` into a new body through `sink`, until the session ends; the permit
/// is held until then. `what` names the route in serve's log lines.
pub fn stream<S: Sink>(
    session: TraceSession,
    duration: Option<Duration>,
    permit: crate::api::Permit,
    send_timeout: Duration,
    pid: u32,
    what: &'static str,
    sink: S,
) -> (Body, Arc<Notify>) {
    let (tx, body) = http::channel(4, send_timeout);
    let tx = Arc::new(tx);
    let stop_asked = Arc::new(Notify::new());
    let stop_signal = Arc::clone(&stop_asked);
    let stop = Stop::new();
    let recipe = ToBody {
        sink,
        tx: Arc::clone(&tx),
        sending: None,
        closed: None,
        gone: None,
        duration,
        stop: stop.clone(),
    };
    tokio::spawn(async move {
        let _permit = permit;
        let run = dsipc_recipes::run_session_async(session, recipe, None);
        tokio::pin!(run);
        let result = tokio::select! {
            r = &mut run => r,
            _ = stop_signal.notified() => {
                stop.request();
                run.await
            }
        };
        let end = match result {
            Ok(end) => end,
            Err(e) => BodyEnd {
                failure: Some(io::Error::new(io::ErrorKind::Other, e.to_string())),
                stalled: false,
                last: None,
            },
        };
        if let Some(last) = end.last {
            let _ = tx.send(last).await;
        }
        if end.stalled {
            eprintln!(
                "dsipc: serve: pid {}: {}: the client took nothing for {:.1} s; its session is stopped",
                pid,
                what,
                tx.send_timeout().as_secs_f64()
            );
        } else if let Some(e) = &end.failure {
            eprintln!(
                "dsipc: serve: pid {}: {}: {}",
                pid,
                what,
                dsipc_trace::format::clean(&e.to_string())
            );
        }
        if let Some(e) = end.failure {
            tx.fail(e);
        }
    });
    (body, stop_asked)
}

/// `/trace`'s sink: the bytes as they come; a stream the session layer found cut short
/// ends the body abnormally. A stream whose framing does not hold is still passed on
/// whole: the bytes are the runtime's.
pub struct Nettrace;

impl Sink for Nettrace {
    fn chunk(&mut self, data: Vec<u8>) -> Option<Bytes> {
        Some(Bytes::from(data))
    }

    fn end(&mut self, outcome: &Outcome) -> Result<Option<Bytes>, io::Error> {
        match outcome {
            Outcome::Cut {
                reason: reason @ NettraceError::Truncated { .. },
                ..
            } => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the runtime ended the stream without its end-of-stream object (did it exit?): {}",
                    reason
                ),
            )),
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/trace`'s body is cut only when the session layer found the stream cut short: a
    /// whole stream (stopped or ended by the runtime) and one whose framing broke end it
    /// normally.
    #[test]
    fn nettrace_body_is_cut_only_for_a_stream_cut_short() {
        let truncated = NettraceError::Truncated {
            offset: 4096,
            needed: 12,
            available: 3,
        };
        let cut = Outcome::Cut {
            bytes: 4099,
            offset: 4096,
            stop_requested: false,
            reason: truncated,
        };
        let e = Nettrace.end(&cut).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert!(e.to_string().contains("offset 4096"), "{}", e);
        let broken = Outcome::Cut {
            bytes: 100,
            offset: 0,
            stop_requested: true,
            reason: NettraceError::BadMagic {
                offset: 0,
                found: *b"notatrac",
            },
        };
        assert!(Nettrace.end(&broken).unwrap().is_none());
        for whole in [Outcome::Stopped { bytes: 10 }, Outcome::Ended { bytes: 10 }] {
            assert!(Nettrace.end(&whole).unwrap().is_none());
        }
    }
}
