//! The two drivers: [`run`](fn@run) on dsipc-std (blocking, from an ordinary thread) and
//! [`run_async`] on dsipc-tokio. Both start the recipe's session, feed it within its
//! [`Budget`](crate::Budget), stop the session once the recipe has enough (reading on: the rundown comes
//! after the stop), close the connection and let the recipe make its result, so a command
//! line and a service stop the same session alike. [`run_session`] and
//! [`run_session_async`] are the same drivers for a session the caller started (to tell
//! its start's failure apart, or to start it where a second Ctrl-C can still interrupt).
//!
//! The drivers hold no policy: how long to wait, the budget, when to send the stop and
//! when to stop reading are [`Run`]'s (sans-IO, from the recipe's [`Collect::enough`] and
//! [`Collect::abandon`]), the bounds of the drain after the stop and how the stream ended
//! are the session layer's ([`dsipc::session::Tracing`]); the drivers move bytes and sleep
//! as `Run` says.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use dsipc_std::{Chunk, Error, Transport};

use crate::collect::{Collect, End, Tick, TICK};
use crate::run::Run;
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

/// A deadline as the time it leaves after `started` (passed already: none left).
fn since(started: Instant, deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(started))
}

fn tick(started: Instant, bytes: u64) -> Tick {
    Tick {
        elapsed: started.elapsed(),
        bytes,
        wall: SystemTime::now(),
    }
}

/// Runs `c` on a session already started (blocking; `c.request()` is not asked), as
/// [`run`](fn@run) does.
pub fn run_session<C: Collect, T: Transport + Send + Sync + 'static>(
    mut session: dsipc_std::TraceSession<T>,
    c: C,
    deadline: impl Into<Option<Instant>>,
) -> Result<C::Output, RecipeError> {
    let started = Instant::now();
    let mut run = Run::new(c, since(started, deadline.into()));
    let end = loop {
        // Polled at least every TICK: a thread blocked in a read cannot be woken.
        let wait = match run.wait(&tick(started, session.bytes_received())) {
            Ok(wait) => wait.map_or(TICK, |w| w.min(TICK)),
            Err(end) => break end,
        };
        match session.next_chunk(wait) {
            Ok(Chunk::Data(d)) => run.feed(d)?,
            Ok(Chunk::End(o)) => break End::Stream(o),
            Ok(_) => {}
            Err(e) => break End::Failed(e),
        }
        if run.after_read(tick(started, session.bytes_received())) {
            // On a helper thread of its own: it goes on if the session is abandoned.
            if let Err(e) = session.stop() {
                break End::Failed(e);
            }
        }
        if run.abandoned() {
            break End::Failed(Error::Aborted);
        }
    };
    // Closing the connection ends the session in the runtime, whatever happened.
    drop(session);
    run.finish(end)
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
    c: C,
    deadline: impl Into<Option<Instant>>,
) -> Result<C::Output, RecipeError> {
    let started = Instant::now();
    let mut run = Run::new(c, since(started, deadline.into()));
    let end = loop {
        let wait = match run.wait(&tick(started, session.bytes_received())) {
            Ok(wait) => wait,
            Err(end) => break end,
        };
        // Until the recipe takes more bytes and the next ones came, the recipe's wake, or
        // the wait (a read cut by the wake or the wait took no bytes: cancel safe).
        let read = session.next_chunk();
        tokio::pin!(read);
        let quiet = async move {
            match wait {
                Some(w) => tokio::time::sleep(w).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(quiet);
        let turn = Turn {
            // Once the stop was sent only the stream moves the session on.
            wake: !run.stop_asked(),
            recipe: run.recipe(),
            ready: false,
            read,
            quiet,
        };
        match turn.await {
            Step::Woken => {}
            Step::Read(None) => {
                break match session.outcome() {
                    Some(o) => End::Stream(o),
                    None => End::Failed(Error::UnexpectedReply {
                        command: session.command(),
                    }),
                }
            }
            Step::Read(Some(Ok(data))) => run.feed(&data)?,
            Step::Read(Some(Err(e))) => break End::Failed(e),
        }
        if run.after_read(tick(started, session.bytes_received())) {
            // A task of its own, so that it goes on if the session is abandoned; how it
            // went reaches the session (a failed stop ends the stream with its error).
            let stop = session.stop_handle();
            tokio::spawn(async move {
                let _ = stop.stop().await;
            });
        }
        if run.abandoned() {
            break End::Failed(Error::Aborted);
        }
    };
    // Closing the connection ends the session in the runtime, whatever happened.
    drop(session);
    if !matches!(end, End::Failed(Error::Aborted)) {
        // What the consumer still holds goes on before the end.
        Ready(run.recipe()).await;
    }
    run.finish(end)
}

/// What ended a [`Turn`].
enum Step<T> {
    /// The stream's next read (`None`: it ended).
    Read(T),
    /// The recipe's wake, or the wait passed: ask it again.
    Woken,
}

/// One wait of the async driver: the recipe's [`Collect::poll_wake`] first (until the stop
/// was sent), then (once
/// [`Collect::poll_ready`] let it in) the read, then the quiet time.
struct Turn<'a, C, R, Q> {
    wake: bool,
    recipe: &'a mut C,
    ready: bool,
    read: Pin<&'a mut R>,
    quiet: Pin<&'a mut Q>,
}

impl<C: Collect, R: Future, Q: Future<Output = ()>> Future for Turn<'_, C, R, Q> {
    type Output = Step<R::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.wake && this.recipe.poll_wake(cx).is_ready() {
            return Poll::Ready(Step::Woken);
        }
        // The consumer first: one that pushes back slows the reading down.
        if !this.ready {
            this.ready = this.recipe.poll_ready(cx).is_ready();
        }
        if this.ready {
            if let Poll::Ready(r) = this.read.as_mut().poll(cx) {
                return Poll::Ready(Step::Read(r));
            }
        }
        match this.quiet.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Step::Woken),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// Ready once the recipe takes more bytes ([`Collect::poll_ready`]).
struct Ready<'a, C>(&'a mut C);

impl<C: Collect> Future for Ready<'_, C> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.poll_ready(cx)
    }
}
