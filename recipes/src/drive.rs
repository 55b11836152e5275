//! The two drivers: [`run`] on dsipc-std (blocking, from an ordinary thread) and
//! [`run_async`] on dsipc-tokio. Both start the recipe's session, feed it within its
//! [`Budget`], stop the session once the recipe has enough (reading on: the rundown comes
//! after the stop), close the connection and let the recipe make its result, so a command
//! line and a service stop the same session alike.

use std::time::Instant;

use dsipc_std::Chunk;

use crate::collect::{Budget, Collect, End, TICK};
use crate::RecipeError;

/// Runs `c` on `client` (blocking) until its session ends or `deadline`.
pub fn run<C: Collect>(
    client: &dsipc_std::DiagnosticsClient,
    mut c: C,
    deadline: Instant,
) -> Result<C::Output, RecipeError> {
    let req = c.request();
    let mut session = client.collect_tracing(&req.providers(), req.buffer_mb, req.rundown)?;
    let started = Instant::now();
    let mut budget = Budget::new(c.max_bytes());
    let mut stop_asked = false;
    let end = loop {
        if Instant::now() >= deadline {
            break End::TimedOut;
        }
        match session.next_chunk(TICK) {
            Ok(Chunk::Data(d)) => {
                budget.take(d.len())?;
                c.feed(d)?
            }
            Ok(Chunk::End(_)) => break End::Stream,
            Ok(_) => {}
            Err(e) => break End::Failed(e),
        }
        if !stop_asked && c.enough(started.elapsed()) {
            stop_asked = true;
            if let Err(e) = session.stop() {
                break End::Failed(e);
            }
        }
    };
    // Closing the connection ends the session in the runtime, whatever happened.
    drop(session);
    c.finish(end, stop_asked)
}

/// Runs `c` on `client` (async, on tokio) until its session ends or `deadline`.
pub async fn run_async<C: Collect>(
    client: &dsipc_tokio::DiagnosticsClient,
    mut c: C,
    deadline: Instant,
) -> Result<C::Output, RecipeError> {
    let req = c.request();
    let mut session = client
        .collect_tracing(&req.providers(), req.buffer_mb, req.rundown)
        .await?;
    let started = Instant::now();
    let mut budget = Budget::new(c.max_bytes());
    let stop = session.stop_handle();
    let mut stopping: Option<tokio::task::JoinHandle<Result<(), dsipc_tokio::Error>>> = None;
    let end = loop {
        let now = Instant::now();
        if now >= deadline {
            break End::TimedOut;
        }
        let wait = TICK.min(deadline - now);
        // A read that times out took no bytes (reading a session is cancel safe).
        match tokio::time::timeout(wait, session.next_chunk()).await {
            Err(_) => {}
            Ok(None) => break End::Stream,
            Ok(Some(Ok(data))) => {
                budget.take(data.len())?;
                c.feed(&data)?
            }
            Ok(Some(Err(e))) => break End::Failed(e),
        }
        if stopping.is_none() && c.enough(started.elapsed()) {
            let stop = stop.clone();
            stopping = Some(tokio::spawn(async move { stop.stop().await }));
        }
        if let Some(h) = &mut stopping {
            if h.is_finished() {
                if let Ok(Err(e)) = h.await {
                    break End::Failed(e);
                }
                // Answered: keep reading to the end (the rundown comes after the stop).
                stopping = Some(tokio::spawn(async { Ok(()) }));
            }
        }
    };
    let stop_asked = stopping.is_some();
    // Closing the connection ends the session in the runtime, whatever happened.
    drop(session);
    c.finish(end, stop_asked)
}
