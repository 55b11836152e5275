//! What a counters session asks the runtime for: providers, keywords, levels, arguments,
//! as dotnet-counters sends them.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};

use dsipc::payload::Provider;
use dsipc::wire::Text;

use super::spec::CounterSet;

/// The provider of System.Diagnostics.Metrics (Meters and their instruments).
pub const METRICS_PROVIDER: &str = "System.Diagnostics.Metrics";
/// Keyword `TimeSeriesValues` of System.Diagnostics.Metrics.
pub const TIME_SERIES_VALUES: u64 = 0x2;
/// The session id that lets several tools share the runtime's one Metrics aggregation
/// (understood by .NET 8 and later).
pub const SHARED_SESSION_ID: &str = "SHARED";
/// Level of every provider a counters session enables (Informational).
pub const LEVEL: u32 = 4;

/// How a session identifies itself to System.Diagnostics.Metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetricsSession {
    /// `SessionId=SHARED` plus a `ClientId` of ours (.NET 8+): other tools may listen too.
    Shared {
        /// Our client id (a GUID string).
        client_id: String,
    },
    /// A private session id (a GUID string): before .NET 8, the runtime keeps one session
    /// and reports `MultipleSessionsNotSupportedError` to later ones.
    Private {
        /// The session id.
        session_id: String,
    },
}

impl MetricsSession {
    /// What dotnet-counters picks for a runtime of this major version (`None` when unknown,
    /// e.g. .NET Core 3.1, which has no ProcessInfo): SHARED on 8 and later, else private.
    pub fn for_runtime_major(major: Option<u32>) -> MetricsSession {
        match major {
            Some(m) if m >= 8 => MetricsSession::Shared {
                client_id: new_guid(),
            },
            _ => MetricsSession::Private {
                session_id: new_guid(),
            },
        }
    }

    /// The `sessionId` the runtime puts in every event of this session.
    pub fn session_id(&self) -> &str {
        match self {
            MetricsSession::Shared { .. } => SHARED_SESSION_ID,
            MetricsSession::Private { session_id } => session_id,
        }
    }
}

/// A random GUID string (version 4 layout) from std's randomly keyed hasher.
pub fn new_guid() -> String {
    let mut words = [0u64; 2];
    for (i, w) in words.iter_mut().enumerate() {
        let mut h = RandomState::new().build_hasher();
        h.write_u64(i as u64);
        h.write_u32(std::process::id());
        if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            h.write_u128(d.as_nanos());
        }
        *w = h.finish();
    }
    let a = words[0];
    let b = words[1];
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        (a >> 32) as u32,
        (a >> 16) as u16,
        (a & 0xfff) as u16,
        (((b >> 48) as u16) & 0x3fff) | 0x8000,
        b & 0xffff_ffff_ffff
    )
}

/// The shortest interval asked of the runtime (System.Diagnostics.Metrics' own minimum).
pub const MIN_INTERVAL_SECS: f64 = 0.1;

/// Everything a counters session needs to start.
#[derive(Debug, Clone)]
pub struct CountersConfig {
    /// The counters wanted.
    pub counters: CounterSet,
    /// Seconds between two publications (`EventCounterIntervalSec`, `RefreshInterval`;
    /// fractions allowed, as both providers parse a floating-point number).
    pub interval_secs: f64,
    /// `MaxTimeSeries` (dotnet-counters' default 1000).
    pub max_time_series: u32,
    /// `MaxHistograms` (dotnet-counters' default 10).
    pub max_histograms: u32,
    /// The Metrics session identity; `None` enables EventCounters only.
    pub metrics: Option<MetricsSession>,
}

impl CountersConfig {
    /// dotnet-counters' defaults for `counters` at `interval_secs` (at least
    /// [`MIN_INTERVAL_SECS`]; not a finite number: 1 s), with the Metrics session chosen for
    /// a runtime of major version `runtime_major`.
    pub fn new(counters: CounterSet, interval_secs: f64, runtime_major: Option<u32>) -> Self {
        let interval_secs = if interval_secs.is_finite() {
            interval_secs.max(MIN_INTERVAL_SECS)
        } else {
            1.0
        };
        CountersConfig {
            counters,
            interval_secs,
            max_time_series: 1000,
            max_histograms: 10,
            metrics: Some(MetricsSession::for_runtime_major(runtime_major)),
        }
    }

    /// The providers to enable, owned.
    pub fn providers(&self) -> Vec<CounterProvider> {
        let mut out: Vec<CounterProvider> = self
            .counters
            .providers()
            .iter()
            .filter(|p| !p.name.eq_ignore_ascii_case(METRICS_PROVIDER))
            .map(|p| CounterProvider {
                name: p.name.clone(),
                keywords: 0,
                level: LEVEL,
                arguments: arguments(&[(
                    "EventCounterIntervalSec",
                    &self.interval_secs.to_string(),
                )]),
            })
            .collect();
        if let Some(m) = &self.metrics {
            let interval = self.interval_secs.to_string();
            let max_ts = self.max_time_series.to_string();
            let max_h = self.max_histograms.to_string();
            let metrics = self.counters.metrics_argument();
            let mut args: Vec<(&str, &str)> = vec![
                ("SessionId", m.session_id()),
                ("Metrics", &metrics),
                ("RefreshInterval", &interval),
                ("MaxTimeSeries", &max_ts),
                ("MaxHistograms", &max_h),
            ];
            if let MetricsSession::Shared { client_id } = m {
                args.push(("ClientId", client_id));
            }
            out.push(CounterProvider {
                name: METRICS_PROVIDER.to_string(),
                keywords: TIME_SERIES_VALUES,
                level: LEVEL,
                arguments: arguments(&args),
            });
        }
        out
    }
}

/// One EventPipe provider, owned; [`as_provider`](Self::as_provider) borrows it for a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterProvider {
    /// Provider name.
    pub name: String,
    /// Keywords.
    pub keywords: u64,
    /// Level.
    pub level: u32,
    /// `key=value;...` arguments.
    pub arguments: String,
}

impl CounterProvider {
    /// The core's provider, borrowing from this one.
    pub fn as_provider(&self) -> Provider<'_> {
        Provider {
            keywords: self.keywords,
            log_level: self.level,
            provider_name: Text::Str(&self.name),
            arguments: if self.arguments.is_empty() {
                Text::Null
            } else {
                Text::Str(&self.arguments)
            },
        }
    }
}

/// `key=value;key=value`, a value holding `;`, `=` or `"` in double quotes (a `"` inside
/// cannot be expressed and is dropped).
pub fn arguments(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (k, v) in pairs {
        if !out.is_empty() {
            out.push(';');
        }
        out.push_str(k);
        out.push('=');
        if v.contains(&[';', '=', '"'][..]) {
            out.push('"');
            out.extend(v.chars().filter(|&c| c != '"'));
            out.push('"');
        } else {
            out.push_str(v);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn providers_as_dotnet_counters_sends_them() {
        let set = CounterSet::parse("System.Runtime[cpu-usage],MyMeter").unwrap();
        let mut c = CountersConfig::new(set, 2.0, Some(8));
        c.metrics = Some(MetricsSession::Shared {
            client_id: "c".into(),
        });
        let p = c.providers();
        assert_eq!(p.len(), 3);
        assert_eq!(p[0].name, "System.Runtime");
        assert_eq!((p[0].keywords, p[0].level), (0, 4));
        assert_eq!(p[0].arguments, "EventCounterIntervalSec=2");
        assert_eq!(p[1].name, "MyMeter");
        assert_eq!(p[2].name, "System.Diagnostics.Metrics");
        assert_eq!((p[2].keywords, p[2].level), (2, 4));
        assert_eq!(
            p[2].arguments,
            "SessionId=SHARED;Metrics=System.Runtime\\cpu-usage,MyMeter;RefreshInterval=2;\
             MaxTimeSeries=1000;MaxHistograms=10;ClientId=c"
        );
        let c = CountersConfig::new(CounterSet::default(), 0.0, None);
        assert_eq!(c.interval_secs, MIN_INTERVAL_SECS);
        match &c.metrics {
            Some(MetricsSession::Private { session_id }) => {
                assert_eq!(session_id.len(), 36);
                assert!(c.providers()[1]
                    .arguments
                    .starts_with(&format!("SessionId={};", session_id)));
            }
            other => panic!("{:?}", other),
        }
        assert_ne!(new_guid(), new_guid());
    }

    #[test]
    fn quoting() {
        assert_eq!(arguments(&[("a", "x;y"), ("b", "1")]), "a=\"x;y\";b=1");
    }
}
