//! The one loop that streams an EventPipe session to a response body (`/trace`, `/logs`,
//! `/livemetrics`): what each route makes of the bytes is its [`Sink`].
//!
//! The session is asked to stop (StopTracing, once, from a second connection) when its
//! duration is over, when [`Artifact::stop`](super::api::Artifact) is signalled
//! (`DELETE /operations/{id}?stop=true`), or when whoever reads the body went away; the
//! stream is then read to its end (the rundown comes after the stop). Memory stays flat:
//! the body channel is bounded, so a slow reader slows the reading of the session (the
//! runtime's own buffer absorbs it or drops events, as it does for any slow client).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Notify, OwnedSemaphorePermit};

use dsipc_tokio::TraceSession;

use crate::http::{self, Body, Gone};

/// What a route makes of a session's bytes.
pub trait Sink: Send + 'static {
    /// The next chunk of the nettrace stream: what to send (`None`: nothing yet).
    fn chunk(&mut self, data: Vec<u8>) -> Option<Bytes>;
    /// The stream ended: a last piece to send, or an error that ends the body abnormally
    /// (the client sees a cut body, never a whole one).
    fn end(&mut self) -> Result<Option<Bytes>, io::Error>;
}

/// Streams `session` into a new body through `sink`, until the session ends; the permit
/// is held until then. `what` names the route in serve's log lines.
pub fn stream<S: Sink>(
    mut session: TraceSession,
    duration: Option<Duration>,
    permit: OwnedSemaphorePermit,
    send_timeout: Duration,
    pid: u32,
    what: &'static str,
    mut sink: S,
) -> (Body, Arc<Notify>) {
    let (tx, body) = http::channel(4, send_timeout);
    let stop_asked = Arc::new(Notify::new());
    let stop_signal = Arc::clone(&stop_asked);
    tokio::spawn(async move {
        let _permit = permit;
        let stop = session.stop_handle();
        let deadline = duration.map(|d| tokio::time::Instant::now() + d);
        let mut stopping: Option<tokio::task::JoinHandle<()>> = None;
        // Set when the reader went away or stalled: nothing more is sent.
        let mut gone: Option<Gone> = None;
        let mut failure: Option<io::Error> = None;
        loop {
            let ask_stop = tokio::select! {
                chunk = session.next_chunk() => match chunk {
                    None => {
                        match sink.end() {
                            Ok(Some(last)) if gone.is_none() => {
                                let _ = tx.send(last).await;
                            }
                            Ok(_) => {}
                            Err(e) => {
                                eprintln!("dsipc: serve: pid {}: {}: {}", pid, what, dsipc_trace::format::clean(&e.to_string()));
                                failure = Some(e);
                            }
                        }
                        break;
                    }
                    Some(Ok(data)) => match sink.chunk(data) {
                        Some(out) if gone.is_none() => match tx.send(out).await {
                            Ok(()) => false,
                            Err(g) => {
                                gone = Some(g);
                                true
                            }
                        },
                        _ => false,
                    },
                    Some(Err(e)) => {
                        eprintln!("dsipc: serve: pid {}: {}: {}", pid, what, dsipc_trace::format::clean(&e.to_string()));
                        failure = Some(io::Error::new(io::ErrorKind::Other, e.to_string()));
                        break;
                    }
                },
                _ = sleep_until(deadline), if stopping.is_none() && deadline.is_some() => true,
                _ = stop_signal.notified(), if stopping.is_none() => true,
                _ = tx.closed(), if stopping.is_none() => true,
            };
            if ask_stop && stopping.is_none() {
                let stop = stop.clone();
                stopping = Some(tokio::spawn(async move {
                    let _ = stop.stop().await;
                }));
            }
            if (tx.is_closed() || gone.is_some()) && stopping.is_some() {
                // Nobody reads the rest: the stop was asked; closing the stream ends the
                // session in the runtime either way.
                if gone == Some(Gone::Stalled) {
                    eprintln!(
                        "dsipc: serve: pid {}: {}: the client took nothing for {:.1} s; its session is stopped",
                        pid,
                        what,
                        tx.send_timeout().as_secs_f64()
                    );
                    failure = Some(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the client stalled",
                    ));
                }
                break;
            }
        }
        if let Some(e) = failure {
            tx.fail(e);
        }
        if let Some(s) = stopping {
            let _ = s.await;
        }
    });
    (body, stop_asked)
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// `/trace`'s sink: the bytes as they come, parsed on the side only to tell a clean end
/// from a runtime that died (a stream cut short ends the body abnormally). A stream that
/// does not parse is still passed on whole: the bytes are the runtime's.
pub struct Nettrace {
    check: dsipc_trace::TraceStream,
}

impl Default for Nettrace {
    fn default() -> Nettrace {
        Nettrace {
            check: dsipc_trace::TraceStream::new(),
        }
    }
}

impl Sink for Nettrace {
    fn chunk(&mut self, data: Vec<u8>) -> Option<Bytes> {
        let _ = self.check.feed(&data, |_| {});
        Some(Bytes::from(data))
    }

    fn end(&mut self) -> Result<Option<Bytes>, io::Error> {
        match self.check.finish(|_| {}) {
            Err(e) if e.is_truncation() => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the runtime ended the stream without its end-of-stream object (did it exit?): {}",
                    e
                ),
            )),
            _ => Ok(None),
        }
    }
}
