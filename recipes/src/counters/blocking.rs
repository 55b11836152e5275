//! A running counters session on dsipc-std (blocking).
//!
//! - [`CounterRun`]: the session driven on the caller's thread, each event handed to a sink
//!   the caller gives as it is decoded (one thread per runtime, no queue).
//! - [`CounterSession`]: the same run on a thread of its own, its events queued for
//!   [`recv_timeout`](CounterSession::recv_timeout).

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use dsipc::payload::Provider;

use dsipc_trace::counters::{CounterEvent, CountersConfig, DecodeStats};

use dsipc_std::{DiagnosticsClient, Error, StopHandle, Transport};

use super::{Counters, SessionEnd, BUFFER_MB};
use crate::{run_session, Stop};

/// Events queued between the decoding thread and the consumer; a slower consumer makes
/// the decoder wait (and, eventually, the runtime drop events in its own buffer).
const QUEUE: usize = 1024;

struct Shared {
    stats: DecodeStats,
}

/// A live counters session.
///
/// Events arrive on [`recv_timeout`](Self::recv_timeout) / [`try_recv`](Self::try_recv);
/// `Disconnected` there means the stream ended. [`stop`](Self::stop) ends the session
/// cleanly (StopTracing, drain to the end); dropping the session does the same.
pub struct CounterSession<T: Transport + Send + Sync + 'static> {
    stop: StopHandle<T>,
    events: Option<Receiver<CounterEvent>>,
    thread: Option<JoinHandle<(bool, u64, Option<Error>)>>,
    shared: Arc<Mutex<Shared>>,
}

impl<T: Transport + Send + Sync + 'static> std::fmt::Debug for CounterSession<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CounterSession")
            .field("session_id", &self.stop.session_id())
            .finish()
    }
}

fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T: Transport + Send + Sync + 'static> CounterSession<T> {
    /// Starts the EventPipe session `config` describes (CollectTracing2, no rundown) and a
    /// thread that drains and decodes it.
    pub fn start(client: &DiagnosticsClient<T>, config: &CountersConfig) -> Result<Self, Error>
    where
        T::Conn: Send + 'static,
    {
        let run = CounterRun::start(client, config)?;
        let stop = run.stop_handle();
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let shared = Arc::new(Mutex::new(Shared {
            stats: DecodeStats::default(),
        }));
        let shared2 = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("dsipc-counters".into())
            .spawn(move || {
                let end = run.run_observed(
                    &mut |ev: CounterEvent| {
                        // A consumer that went away: keep draining, drop the events.
                        let _ = tx.send(ev);
                    },
                    &mut |stats| lock(&shared2).stats = stats.clone(),
                );
                (end.stopped, end.bytes, end.error)
            })?;
        Ok(CounterSession {
            stop,
            events: Some(rx),
            thread: Some(thread),
            shared,
        })
    }

    /// The next event, waiting up to `timeout`.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<CounterEvent, RecvTimeoutError> {
        match &self.events {
            Some(rx) => rx.recv_timeout(timeout),
            None => Err(RecvTimeoutError::Disconnected),
        }
    }

    /// The next event if one is waiting.
    pub fn try_recv(&self) -> Result<CounterEvent, TryRecvError> {
        match &self.events {
            Some(rx) => rx.try_recv(),
            None => Err(TryRecvError::Disconnected),
        }
    }

    /// What the decoder has seen so far.
    pub fn stats(&self) -> DecodeStats {
        lock(&self.shared).stats.clone()
    }

    /// Stops the session (unless the stream already ended), drains it to its end, and
    /// says how it ended. Events still queued are dropped; read them first if they matter.
    pub fn stop(mut self) -> SessionEnd {
        self.finish()
    }

    /// Stops the session and hands `sink` every event up to the stream's end: what the
    /// runtime flushes for the stop included, so a publication under way at the stop
    /// arrives whole. The stop runs on a helper thread while this one keeps the queue
    /// moving (the runtime answers StopTracing only once it has flushed the stream).
    pub fn stop_draining(mut self, sink: &mut dyn FnMut(CounterEvent)) -> SessionEnd
    where
        T: 'static,
    {
        let finished = self.thread.as_ref().map_or(true, |t| t.is_finished());
        let stopper = if finished {
            None
        } else {
            let stop = self.stop.clone();
            std::thread::Builder::new()
                .name("dsipc-counters-stop".into())
                .spawn(move || stop.stop())
                .ok()
        };
        if let Some(rx) = &self.events {
            // Ends when the draining thread ends (the stream is over) and drops its sender.
            while let Ok(ev) = rx.recv() {
                sink(ev);
            }
        }
        let stop_error = stopper.and_then(|t| t.join().ok()).and_then(Result::err);
        let mut end = self.finish();
        if let (Some(e), None) = (stop_error, &end.error) {
            if !end.stopped {
                end.error = Some(e);
            }
        }
        end
    }

    fn finish(&mut self) -> SessionEnd {
        // Drop the queue first so a full queue cannot block the draining thread.
        self.events = None;
        let thread = match self.thread.take() {
            Some(t) => t,
            None => {
                return SessionEnd {
                    stopped: true,
                    stats: self.stats(),
                    bytes: 0,
                    error: None,
                }
            }
        };
        let mut stop_error = None;
        if !thread.is_finished() {
            // The runtime may have exited meanwhile: then StopTracing cannot connect, and
            // the stream has ended (or ends) on its own.
            if let Err(e) = self.stop.stop() {
                stop_error = Some(e);
            }
        }
        let (stopped, bytes, error) = thread.join().unwrap_or((false, 0, None));
        SessionEnd {
            stopped: stopped && stop_error.is_none(),
            stats: self.stats(),
            bytes,
            error: error.or(if stopped { None } else { stop_error }),
        }
    }
}

/// A counters session driven on the caller's thread: [`run_observed`](Self::run_observed) hands every event
/// to the caller's sink as soon as it is decoded, until the runtime ends the stream (it
/// exits) or a [`StopHandle`] from [`stop_handle`](Self::stop_handle) stops it (from any
/// thread: StopTracing, then the stream is drained to its end). The [`Counters`] recipe on
/// the blocking driver ([`run_session`]).
pub struct CounterRun<T: Transport + Send + Sync + 'static> {
    session: dsipc_std::TraceSession<T>,
    config: CountersConfig,
}

impl<T: Transport + Send + Sync + 'static> std::fmt::Debug for CounterRun<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CounterRun")
            .field("session_id", &self.session.session_id())
            .finish()
    }
}

impl<T: Transport + Send + Sync + 'static> CounterRun<T> {
    /// Starts the EventPipe session `config` describes (CollectTracing2, no rundown).
    pub fn start(client: &DiagnosticsClient<T>, config: &CountersConfig) -> Result<Self, Error> {
        let owned = config.providers();
        let providers: Vec<Provider<'_>> = owned.iter().map(|p| p.as_provider()).collect();
        let session = client.collect_tracing(&providers, BUFFER_MB, false)?;
        Ok(CounterRun {
            session,
            config: config.clone(),
        })
    }

    /// A handle that stops the session from another thread.
    pub fn stop_handle(&self) -> StopHandle<T> {
        self.session.stop_handle()
    }

    /// Drives the session to its end on this thread, each event to `sink` and the
    /// decoder's figures to `stats` after each chunk; how it ended.
    pub fn run_observed(
        self,
        sink: &mut dyn FnMut(CounterEvent),
        stats: &mut dyn FnMut(&DecodeStats),
    ) -> SessionEnd {
        let handle = self.session.stop_handle();
        let recipe = Counters::new(&self.config, sink, stats, Stop::new());
        let mut end = super::ended(run_session(self.session, recipe, None));
        end.stopped = handle.is_requested();
        end
    }
}

impl<T: Transport + Send + Sync + 'static> Drop for CounterSession<T> {
    fn drop(&mut self) {
        if self.thread.is_some() {
            let _ = self.finish();
        }
    }
}
