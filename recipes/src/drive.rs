//! The two drivers: [`run`] on dsipc-std (blocking, from an ordinary thread) and
//! [`run_async`] on dsipc-tokio. Both start the recipe's session, feed it within its
//! [`Budget`], stop the session once the recipe has enough (reading on: the rundown comes
//! after the stop), close the connection and let the recipe make its result, so a command
//! line and a service stop the same session alike. [`run_session`] and
//! [`run_session_async`] are the same drivers for a session the caller started (to tell
//! its start's failure apart, or to start it where a second Ctrl-C can still interrupt).
//!
//! The drivers hold no policy: when to stop is the recipe's ([`Collect::enough`],
//! [`Collect::abandon`]), the bounds of the drain after the stop and how the stream ended
//! are the session layer's ([`dsipc::session::Tracing`]); the drivers move bytes and sleep
//! at most [`TICK`].

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use dsipc_std::{Chunk, Error, Transport};

use crate::collect::{Budget, Collect, End, Tick, TICK};
use crate::RecipeError;

/// Runs `c` on `client` (blocking) until its session ends or `deadline` (`None`: until
/// the recipe stops it or the runtime ends it).
pub fn run<C: Collect>(
    client: &dsipc_std::DiagnosticsClient,
    c: C,
    deadline: impl Into<Option<Instant>>,
) -> Result<C::Output, RecipeError> {
    let req = c.request();
    let session = client.collect_tracing(&req.providers(), req.buffer_mb, req.rundown)?;
    run_session(session, c, deadline)
}

fn tick(started: Instant, bytes: u64) -> Tick {
    Tick {
        elapsed: started.elapsed(),
        bytes,
        wall: SystemTime::now(),
    }
}

/// Runs `c` on a session already started (blocking; `c.request()` is not asked), as
/// [`run`] does.
pub fn run_session<C: Collect, T: Transport + Send + Sync + 'static>(
    mut session: dsipc_std::TraceSession<T>,
    mut c: C,
    deadline: impl Into<Option<Instant>>,
) -> Result<C::Output, RecipeError> {
    let deadline = deadline.into();
    let started = Instant::now();
    let mut budget = Budget::new(c.max_bytes());
    let mut stop_asked = false;
    let end = loop {
        let now = Instant::now();
        if deadline.map_or(false, |d| now >= d) {
            break End::TimedOut;
        }
        let wait = deadline.map_or(TICK, |d| TICK.min(d - now));
        match session.next_chunk(wait) {
            Ok(Chunk::Data(d)) => {
                budget.take(d.len())?;
                c.feed(d)?
            }
            Ok(Chunk::End(o)) => break End::Stream(o),
            Ok(_) => {}
            Err(e) => break End::Failed(e),
        }
        c.tick(tick(started, session.bytes_received()));
        if !stop_asked && c.enough(started.elapsed()) {
            stop_asked = true;
            // On a helper thread of its own: it goes on if the session is abandoned.
            if let Err(e) = session.stop() {
                break End::Failed(e);
            }
        }
        if c.abandon() {
            break End::Failed(Error::Aborted);
        }
    };
    // Closing the connection ends the session in the runtime, whatever happened.
    drop(session);
    c.finish(end, stop_asked)
}

/// Runs `c` on `client` (async, on tokio) until its session ends or `deadline` (`None`:
/// until the recipe stops it or the runtime ends it).
pub async fn run_async<C: Collect>(
    client: &dsipc_tokio::DiagnosticsClient,
    c: C,
    deadline: impl Into<Option<Instant>>,
) -> Result<C::Output, RecipeError> {
    let req = c.request();
    let session = client
        .collect_tracing(&req.providers(), req.buffer_mb, req.rundown)
        .await?;
    run_session_async(session, c, deadline).await
}

/// Runs `c` on a session already started (async; `c.request()` is not asked), as
/// [`run_async`] does.
pub async fn run_session_async<C: Collect>(
    mut session: dsipc_tokio::TraceSession,
    mut c: C,
    deadline: impl Into<Option<Instant>>,
) -> Result<C::Output, RecipeError> {
    let deadline = deadline.into();
    let started = Instant::now();
    let mut budget = Budget::new(c.max_bytes());
    let mut stop_asked = false;
    let end = loop {
        let now = Instant::now();
        if deadline.map_or(false, |d| now >= d) {
            break End::TimedOut;
        }
        let wait = deadline.map_or(TICK, |d| TICK.min(d - now));
        // The consumer first: one that pushes back slows the reading down.
        if tokio::time::timeout(wait, Ready(&mut c)).await.is_ok() {
            // A read that times out took no bytes (reading a session is cancel safe).
            match tokio::time::timeout(wait, session.next_chunk()).await {
                Err(_) => {}
                Ok(None) => {
                    break match session.outcome() {
                        Some(o) => End::Stream(o),
                        None => End::Failed(Error::UnexpectedReply {
                            command: session.command(),
                        }),
                    }
                }
                Ok(Some(Ok(data))) => {
                    budget.take(data.len())?;
                    c.feed(&data)?
                }
                Ok(Some(Err(e))) => break End::Failed(e),
            }
        }
        c.tick(tick(started, session.bytes_received()));
        if !stop_asked && c.enough(started.elapsed()) {
            stop_asked = true;
            // A task of its own, so that it goes on if the session is abandoned; how it
            // went reaches the session (a failed stop ends the stream with its error).
            let stop = session.stop_handle();
            tokio::spawn(async move {
                let _ = stop.stop().await;
            });
        }
        if c.abandon() {
            break End::Failed(Error::Aborted);
        }
    };
    // Closing the connection ends the session in the runtime, whatever happened.
    drop(session);
    if !matches!(end, End::Failed(Error::Aborted)) {
        // What the consumer still holds goes on before the end.
        Ready(&mut c).await;
    }
    c.finish(end, stop_asked)
}

/// Ready once the recipe takes more bytes ([`Collect::poll_ready`]).
struct Ready<'a, C>(&'a mut C);

impl<C: Collect> Future for Ready<'_, C> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.poll_ready(cx)
    }
}
