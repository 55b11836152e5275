//! A counters session on tokio, as [`CounterRun`](super::CounterRun) runs one on a thread
//! with dsipc-std.
//!
//! ```no_run
//! use dsipc_trace::counters::{CounterEvent, CounterSet, CountersConfig};
//! use dsipc_recipes::counters::AsyncCounterRun;
//! use dsipc_tokio::DiagnosticsClient;
//!
//! # async fn run() -> Result<(), dsipc_tokio::Error> {
//! let client = DiagnosticsClient::for_pid(1234)?;
//! let config = CountersConfig::new(CounterSet::default(), 1.0, Some(8));
//! let run = AsyncCounterRun::start(&client, &config).await?;
//! let stop = run.stop_handle(); // stop.stop().await from any task ends it
//! let end = run
//!     .run(&mut |event| {
//!         if let CounterEvent::Sample(s) = event {
//!             println!("{} {}", s.name, s.value);
//!         }
//!     })
//!     .await;
//! println!("stopped by us: {}, {} bytes", end.stopped, end.bytes);
//! # Ok(())
//! # }
//! ```

use dsipc::payload::Provider;
use dsipc_trace::counters::{CounterEvent, CounterProvider, CountersConfig, DecodeStats};
use dsipc_trace::TraceSink;

use dsipc_tokio::{DiagnosticsClient, Error, StopHandle, TraceSession};

use super::{Counters, SessionEnd, BUFFER_MB};
use crate::{run_session_async, Stop};

/// A counters session: [`run`](Self::run) hands every event to the caller's sink as soon as
/// it is decoded, until the runtime ends the stream (it exits) or a [`StopHandle`] from
/// [`stop_handle`](Self::stop_handle) stops it (StopTracing, then the stream is drained to
/// its end). The [`Counters`] recipe on the async driver ([`run_session_async`]).
#[derive(Debug)]
pub struct AsyncCounterRun {
    session: TraceSession,
    config: CountersConfig,
    /// Providers asked for beside the counters ([`start_with`](Self::start_with)).
    extra: Vec<CounterProvider>,
}

impl AsyncCounterRun {
    /// Starts the EventPipe session `config` describes (CollectTracing2, no rundown).
    pub async fn start(client: &DiagnosticsClient, config: &CountersConfig) -> Result<Self, Error> {
        Self::start_with(client, config, &[]).await
    }

    /// [`start`](Self::start) with `extra` providers enabled in the same session (their
    /// events go to the sink [`run_with`](Self::run_with) is given).
    pub async fn start_with(
        client: &DiagnosticsClient,
        config: &CountersConfig,
        extra: &[CounterProvider],
    ) -> Result<Self, Error> {
        let owned = config.providers();
        let providers: Vec<Provider<'_>> =
            owned.iter().chain(extra).map(|p| p.as_provider()).collect();
        let session = client.collect_tracing(&providers, BUFFER_MB, false).await?;
        Ok(AsyncCounterRun {
            session,
            config: config.clone(),
            extra: extra.to_vec(),
        })
    }

    /// A handle that stops the session from another task.
    pub fn stop_handle(&self) -> StopHandle {
        self.session.stop_handle()
    }

    /// Drives the session to its end, each event to `sink`; how it ended.
    pub async fn run(self, sink: &mut (dyn FnMut(CounterEvent) + Send)) -> SessionEnd {
        self.run_with(sink, &mut ()).await
    }

    /// [`run`](Self::run), the stream's parse also handed to `also` (the events of the
    /// extra providers of [`start_with`](Self::start_with)).
    pub async fn run_with(
        self,
        sink: &mut (dyn FnMut(CounterEvent) + Send),
        also: &mut (dyn TraceSink + Send),
    ) -> SessionEnd {
        let handle = self.session.stop_handle();
        let recipe = Counters::new(&self.config, sink, |_: &DecodeStats| {}, Stop::new())
            .with_also(&self.extra, also);
        let mut end = super::ended(run_session_async(self.session, recipe, None).await);
        end.stopped = handle.is_requested();
        end
    }
}
