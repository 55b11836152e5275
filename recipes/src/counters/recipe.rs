//! dotnet-counters' session as a [`Collect`]: the providers a [`CountersConfig`] names, each
//! chunk decoded as it arrives and each event handed on, held samples released when due;
//! stopped from outside (a [`Stop`], or the session's stop handle).

use std::task::{Context, Poll};
use std::time::Duration;

use dsipc::session::providers::ProviderSpec;
use dsipc::session::Outcome;
use dsipc_trace::counters::{CounterEvent, CounterProvider, CountersConfig, DecodeStats, Decoder};
use dsipc_trace::TraceSink;

use super::{SessionEnd, BUFFER_MB};
use crate::collect::{Collect, End, Request, Stop, Tick};
use crate::RecipeError;

/// A counters session: events to `sink` as they are decoded, the decoder's figures to
/// `observe` after each chunk, until the runtime ends the stream or it is stopped (`stop`,
/// or the session's own stop handle). Its result is the [`SessionEnd`]. The same parse can
/// also feed another [`TraceSink`] ([`with_also`](Self::with_also): the events of extra
/// providers asked for in the same session).
pub struct Counters<F, O, A = ()> {
    providers: Vec<ProviderSpec>,
    decoder: Decoder,
    sink: F,
    observe: O,
    also: A,
    stop: Stop,
    bytes: u64,
}

impl<F: FnMut(CounterEvent), O: FnMut(&DecodeStats)> Counters<F, O> {
    /// The session `config` describes, its events to `sink`, its figures to `observe`,
    /// stopped when `stop` is requested.
    pub fn new(config: &CountersConfig, sink: F, observe: O, stop: Stop) -> Self {
        let providers = config.providers().iter().map(spec).collect();
        Counters {
            providers,
            decoder: Decoder::new(config),
            sink,
            observe,
            also: (),
            stop,
            bytes: 0,
        }
    }

    /// The session with `extra` providers asked for too, the one parse of its stream also
    /// handed to `also` (their events: ASP.NET's requests beside a rule's counters, say).
    pub fn with_also<A: TraceSink>(self, extra: &[CounterProvider], also: A) -> Counters<F, O, A> {
        let mut providers = self.providers;
        providers.extend(extra.iter().map(spec));
        Counters {
            providers,
            decoder: self.decoder,
            sink: self.sink,
            observe: self.observe,
            also,
            stop: self.stop,
            bytes: self.bytes,
        }
    }
}

/// A provider of the session as the session layer asks for it.
fn spec(p: &CounterProvider) -> ProviderSpec {
    let spec = ProviderSpec::new(&p.name, p.keywords, p.level);
    if p.arguments.is_empty() {
        spec
    } else {
        spec.with_args(&p.arguments)
    }
}

impl<F: FnMut(CounterEvent), O: FnMut(&DecodeStats), A: TraceSink> Collect for Counters<F, O, A> {
    type Output = SessionEnd;

    fn request(&self) -> Request {
        Request {
            providers: self.providers.clone(),
            buffer_mb: BUFFER_MB,
            rundown: false,
        }
    }

    fn feed(&mut self, data: &[u8]) -> Result<(), RecipeError> {
        self.bytes += data.len() as u64;
        self.decoder.feed_with(data, &mut self.also, &mut self.sink);
        (self.observe)(self.decoder.stats());
        Ok(())
    }

    fn enough(&mut self, _elapsed: Duration) -> bool {
        self.stop.is_requested()
    }

    fn tick(&mut self, tick: Tick) {
        // Held samples go out when due, not at the runtime's next publication (an
        // interval later).
        if self
            .decoder
            .held_until()
            .map_or(false, |due| tick.wall >= due)
        {
            self.decoder.release_due(tick.wall, &mut self.sink);
        }
    }

    fn quiet_for(&self, now: &Tick) -> Option<Duration> {
        // Only held samples fall due by time alone; a stop wakes the driver itself.
        let due = self.decoder.held_until()?;
        Some(due.duration_since(now.wall).unwrap_or(Duration::ZERO))
    }

    fn poll_wake(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.stop.poll_requested(cx)
    }

    fn max_bytes(&self) -> u64 {
        // A session that runs until stopped: its decoder holds what the counters hold.
        u64::MAX
    }

    fn finish(mut self, end: End, stop_asked: bool) -> Result<SessionEnd, RecipeError> {
        self.decoder.finish_with(&mut self.also, &mut self.sink);
        (self.observe)(self.decoder.stats());
        let (stopped, error) = match end {
            End::Stream(o) => (
                stop_asked
                    || matches!(
                        o,
                        Outcome::Stopped { .. }
                            | Outcome::Cut {
                                stop_requested: true,
                                ..
                            }
                    ),
                None,
            ),
            End::TimedOut => (stop_asked, None),
            End::Failed(e) => (stop_asked, Some(e)),
        };
        Ok(SessionEnd {
            stopped,
            stats: self.decoder.stats().clone(),
            bytes: self.bytes,
            error,
        })
    }
}
