//! Live counters: EventCounters (`System.Runtime` and any EventSource) and
//! System.Diagnostics.Metrics (Meters), decoded into typed samples as dotnet-counters
//! shows them.
//!
//! [`CountersConfig`] says what to ask for (providers, interval, Metrics session);
//! [`Decoder`] turns the session's stream, fed in chunks of any size, into [`CounterEvent`]s;
//! [`CounterSink`] is the same decoding as one sink of a [`TraceDispatcher`](crate::TraceDispatcher)
//! (beside a profile, logs...), handing out [`SeriesSample`]s that share their [`Series`].
//! The adapters run the session (dsipc-std's `CounterSession`) and feed it here.

mod config;
pub mod console;
mod decode;
mod events;
mod fields;
pub mod files;
mod heard;
mod limit;
mod series;
mod sink;
mod spec;

use std::time::SystemTime;

pub use config::{
    arguments, new_guid, CounterProvider, CountersConfig, MetricsSession, LEVEL, METRICS_PROVIDER,
    MIN_INTERVAL_SECS, SHARED_SESSION_ID, TIME_SERIES_VALUES,
};
pub use decode::{DecodeStats, Decoder};
pub use heard::Heard;
pub use limit::MAX_SERIES_TEXT;
pub use series::{Series, SeriesEvent, SeriesSample};
pub use sink::CounterSink;
pub use spec::{CounterSet, ProviderCounters, SpecError, MAX_PROVIDERS};

/// What a sample measures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CounterKind {
    /// An EventCounter's mean over the interval (`CounterType` Mean).
    Mean,
    /// An IncrementingEventCounter's increment over the interval (`CounterType` Sum).
    Sum,
    /// A Meter Counter's increase over the interval (CounterRateValuePublished).
    Rate,
    /// A Meter gauge's last value (GaugeValuePublished).
    Gauge,
    /// A Meter UpDownCounter's value (UpDownCounterRateValuePublished).
    UpDown,
    /// One percentile of a Meter histogram over the interval, as a quantile (0.95 = p95).
    Percentile(f64),
}

impl CounterKind {
    /// True for kinds whose values are increments of a monotonic total (Sum, Rate).
    pub fn is_increment(&self) -> bool {
        matches!(self, CounterKind::Sum | CounterKind::Rate)
    }

    /// dotnet-counters' counter type column: `Rate` for increments, else `Metric`.
    pub fn dotnet_counters_type(&self) -> &'static str {
        if self.is_increment() {
            "Rate"
        } else {
            "Metric"
        }
    }
}

/// Where a sample came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// An `EventCounters` event.
    EventCounter,
    /// A System.Diagnostics.Metrics event.
    Meter,
}

/// One counter value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// When the runtime published it (the event's time on the trace clock).
    pub timestamp: SystemTime,
    /// Provider (EventSource) or Meter name.
    pub provider: String,
    /// Counter or instrument name (`cpu-usage`).
    pub name: String,
    /// Display name (`CPU Usage`; the instrument name for Meters).
    pub display_name: String,
    /// Unit (`%`, `MB`, `By`; may be empty).
    pub unit: String,
    /// What the value measures.
    pub kind: CounterKind,
    /// The value.
    pub value: f64,
    /// Tags (Meter tags, EventCounter metadata), in the order published.
    pub tags: Vec<(String, String)>,
    /// The publication interval in seconds.
    pub interval_secs: f64,
    /// EventCounter or Meter.
    pub source: Source,
}

/// An error or limit the runtime reported for this session.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Notice {
    /// System.Diagnostics.Metrics failed (`Error`); the Metrics part of the session is over.
    Error {
        /// The runtime's message.
        message: String,
    },
    /// An observable instrument's callback threw.
    ObservableInstrumentCallbackError {
        /// The runtime's message.
        message: String,
    },
    /// `MaxTimeSeries` was reached, by the runtime's count or by the session's own (a
    /// runtime that ignores the limit): some series are not reported.
    TimeSeriesLimitReached,
    /// `MaxHistograms` was reached (the runtime's count or the session's own): some
    /// histograms are not reported.
    HistogramLimitReached,
    /// Another tool holds the runtime's only (pre-.NET 8) Metrics session.
    MultipleSessionsNotSupported,
    /// A shared Metrics session runs with other settings than ours.
    MultipleSessionsConfiguredIncorrectly {
        /// What differs.
        message: String,
    },
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Notice::Error { message } => write!(f, "error reported by the target process: {}", message),
            Notice::ObservableInstrumentCallbackError { message } => write!(
                f,
                "an observable instrument callback threw in the target process: {}",
                message
            ),
            Notice::TimeSeriesLimitReached => f.write_str(
                "time series tracking limit reached: not all data is shown (--max-time-series raises it)",
            ),
            Notice::HistogramLimitReached => f.write_str(
                "histogram tracking limit reached: not all data is shown (--max-histograms raises it)",
            ),
            Notice::MultipleSessionsNotSupported => f.write_str(
                "another metrics collection session is already in progress for the target process; \
                 concurrent sessions are not supported by this runtime",
            ),
            Notice::MultipleSessionsConfiguredIncorrectly { message } => f.write_str(message),
        }
    }
}

impl Notice {
    /// Whether the session yields nothing more worth waiting for (the Metrics part failed,
    /// or another tool holds the runtime's only Metrics session): dotnet-counters collect
    /// ends on it.
    pub fn ends_session(&self) -> bool {
        matches!(
            self,
            Notice::Error { .. } | Notice::MultipleSessionsNotSupported
        )
    }
}

/// What a counters session hands out.
#[derive(Debug, Clone, PartialEq)]
pub enum CounterEvent {
    /// A counter value.
    Sample(Sample),
    /// An error or limit reported by the runtime.
    Notice(Notice),
}

#[cfg(test)]
mod tests {
    use super::Notice;

    #[test]
    fn notices_that_end_a_collection() {
        let error = Notice::Error {
            message: "x".into(),
        };
        assert!(error.ends_session());
        assert!(Notice::MultipleSessionsNotSupported.ends_session());
        assert!(!Notice::TimeSeriesLimitReached.ends_session());
        assert!(!Notice::HistogramLimitReached.ends_session());
        let callback = Notice::ObservableInstrumentCallbackError {
            message: "x".into(),
        };
        assert!(!callback.ends_session());
    }
}
