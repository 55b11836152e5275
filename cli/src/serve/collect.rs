//! The async driver of the CLI's [`Collect`] sessions (`/stacks`, `/gcdump`): the twin of
//! [`crate::collect::run`] on dsipc-tokio, so serve's answers are `dsipc stack`'s and
//! `dsipc gcdump`'s, stopped alike, over any connection dsipc-tokio makes (a socket, a
//! named pipe, a runtime's reverse connection).

use std::time::Instant;

use dsipc_tokio::DiagnosticsClient;

use crate::collect::{Budget, Collect, End, TICK};
use crate::CliError;

/// Runs `c` on `client` until its session ends or `deadline`.
pub async fn run<C: Collect>(
    client: &DiagnosticsClient,
    mut c: C,
    deadline: Instant,
) -> Result<C::Output, CliError> {
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
                if let Err(e) = budget.take(data.len()) {
                    // Said here too: serve answers the request, and its log should show
                    // which runtime streamed on.
                    eprintln!("dsipc: serve: {}", e);
                    return Err(e);
                }
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
