//! Short sessions that collect until they have enough: `stack` and `gcdump` (and serve's
//! `/stacks` and `/gcdump`). What to ask for, when to stop and what the bytes make is a
//! [`Collect`] (no I/O); [`run`] drives one with the blocking adapter, and serve drives
//! the same with dsipc-tokio (`serve::collect`), so both say the same and stop alike.

use std::time::{Duration, Instant};

use dsipc::payload::Provider;
use dsipc_std::{Chunk, DiagnosticsClient, Error};

use crate::providers::ProviderSpec;
use crate::CliError;

/// How often the drivers look at the clock while the runtime is quiet.
pub const TICK: Duration = Duration::from_millis(100);

/// The session a [`Collect`] asks for.
pub struct Request {
    pub providers: Vec<ProviderSpec>,
    pub buffer_mb: u32,
    pub rundown: bool,
}

impl Request {
    /// The core's providers, borrowing from this request.
    pub fn providers(&self) -> Vec<Provider<'_>> {
        self.providers
            .iter()
            .map(ProviderSpec::as_provider)
            .collect()
    }
}

/// How the session ended.
pub enum End {
    /// The runtime ended the stream.
    Stream,
    /// The deadline came first.
    TimedOut,
    /// The connection or the runtime failed.
    Failed(Error),
}

/// What a session collects, and when it has enough.
pub trait Collect {
    /// The result.
    type Output;
    /// The session to start.
    fn request(&self) -> Request;
    /// The stream's next bytes; an error ends the session (the stream does not parse).
    fn feed(&mut self, data: &[u8]) -> Result<(), CliError>;
    /// Whether to ask the runtime to stop now (`elapsed` since the session started);
    /// asked until it says yes.
    fn enough(&self, elapsed: Duration) -> bool;
    /// The session is over (`end`; `stop_asked`: StopTracing was sent): the result.
    fn finish(self, end: End, stop_asked: bool) -> Result<Self::Output, CliError>;
}

/// Runs `c` on `client` (blocking) until its session ends or `deadline`.
pub fn run<C: Collect>(
    client: &DiagnosticsClient,
    mut c: C,
    deadline: Instant,
) -> Result<C::Output, CliError> {
    let req = c.request();
    let mut session = client.collect_tracing(&req.providers(), req.buffer_mb, req.rundown)?;
    let started = Instant::now();
    let mut stop_asked = false;
    let end = loop {
        if Instant::now() >= deadline {
            break End::TimedOut;
        }
        match session.next_chunk(TICK) {
            Ok(Chunk::Data(d)) => c.feed(d)?,
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
