//! Counters sessions: the EventPipe session a [`CountersConfig`] describes, decoded by
//! dsipc-trace's [`Decoder`](dsipc_trace::counters::Decoder) (the trace layer holds the
//! decoding; these only run the session), each event handed on as soon as it is decoded.
//!
//! - [`CounterRun`]: on the caller's thread (dsipc-std), to a sink the caller gives.
//! - [`CounterSession`]: the same on a thread of its own, its events queued.
//! - [`AsyncCounterRun`]: on tokio (dsipc-tokio), to a sink the caller gives.
//!
//! All three are the [`Counters`] recipe on the crate's two drivers. [`CollectPolicy`]
//! says when dotnet-counters' `collect` and `monitor` are over.
//!
//! [`CountersConfig`]: dsipc_trace::counters::CountersConfig

use dsipc_std::Error;
use dsipc_trace::counters::DecodeStats;

mod blocking;
mod on_tokio;
mod policy;
mod recipe;

pub use blocking::{CounterRun, CounterSession};
pub use on_tokio::AsyncCounterRun;
pub use policy::{CollectPolicy, Collecting};
pub use recipe::Counters;

/// The [`SessionEnd`] of a driven [`Counters`], which fails only if the driver does: the
/// recipe has no bound and no failure of its own (its decoder keeps what it skipped in
/// its figures), so anything else is said as an I/O error, its figures lost.
fn ended(result: Result<SessionEnd, crate::RecipeError>) -> SessionEnd {
    match result {
        Ok(end) => end,
        Err(e) => SessionEnd {
            stopped: false,
            stats: DecodeStats::default(),
            bytes: 0,
            error: Some(match e {
                crate::RecipeError::Ipc(e) => e,
                other => Error::Io(std::io::Error::new(
                    std::io::ErrorKind::Other,
                    other.to_string(),
                )),
            }),
        },
    }
}

/// Circular buffer asked of the runtime, in MB (dotnet-counters asks 10).
const BUFFER_MB: u32 = 10;

/// How a session ended.
#[derive(Debug)]
pub struct SessionEnd {
    /// True if we stopped it; false if the runtime ended the stream (it exited).
    pub stopped: bool,
    /// What the decoder saw.
    pub stats: DecodeStats,
    /// Stream bytes received.
    pub bytes: u64,
    /// A failure of the connection (a runtime killed mid-stream, a silence after the stop).
    pub error: Option<Error>,
}

impl SessionEnd {
    /// What the decoder skipped, one sentence each (malformed payloads, a stream that
    /// could not be decoded past a point): for the caller to report.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.stats.malformed > 0 {
            out.push(format!(
                "skipped {} malformed counter payload(s)",
                self.stats.malformed
            ));
        }
        if let Some(e) = &self.stats.stream_error {
            out.push(format!("the stream could not be decoded past: {}", e));
        }
        out
    }
}

// Against real runtimes, which the project installs on Linux only (the linux-x64 wheels).
#[cfg(all(test, target_os = "linux"))]
mod tests;
