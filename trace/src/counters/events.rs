//! From decoded counter events (fields by name) to typed samples and notices; the
//! preference of a provider's Meter data over its EventCounters.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, SystemTime};

use super::config::METRICS_PROVIDER;
use super::spec::CounterSet;
use super::{CounterEvent, CounterKind, Notice, Sample, Source};

/// A decoded payload field value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Str(String),
    Num(f64),
    Other,
}

/// An event's fields by name (nested Object fields flattened into it).
pub(crate) type Fields = Vec<(String, Value)>;

fn get<'a>(fields: &'a Fields, name: &str) -> Option<&'a Value> {
    fields.iter().find(|(n, _)| n == name).map(|(_, v)| v)
}

fn get_str<'a>(fields: &'a Fields, name: &str) -> Option<&'a str> {
    match get(fields, name) {
        Some(Value::Str(s)) => Some(s),
        _ => None,
    }
}

fn get_num(fields: &Fields, name: &str) -> Option<f64> {
    match get(fields, name) {
        Some(Value::Num(n)) => Some(*n),
        Some(Value::Str(s)) => parse_invariant(s),
        _ => None,
    }
}

/// A number written with the invariant culture (`1.5`, `1E-05`, `NaN` is refused).
fn parse_invariant(s: &str) -> Option<f64> {
    let v: f64 = s.trim().parse().ok()?;
    if v.is_finite() {
        Some(v)
    } else {
        None
    }
}

/// What one event turned into.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Samples and notices to hand on (possibly none: no measurement this interval).
    Events(Vec<CounterEvent>),
    /// Not a counter event, or another session's, or a counter not asked for.
    Ignored,
    /// A counter event whose payload lacks what it must carry.
    Malformed,
}

/// The most EventCounter samples held back waiting for Meter data: past it the oldest goes
/// out at once (a runtime whose timestamps never advance cannot make the queue grow).
pub(crate) const MAX_HELD: usize = 10_000;

/// How long EventCounter samples of a provider wait for Meter data of the same name
/// (dotnet-counters' BufferDelaySecs).
const PREFER_METER_DELAY: Duration = Duration::from_secs(1);

#[derive(Debug)]
struct ProviderState {
    first_seen: SystemTime,
    meter_seen: bool,
}

/// Turns decoded events into samples, as dotnet-counters does.
#[derive(Debug)]
pub(crate) struct Interpreter {
    counters: CounterSet,
    session_id: Option<String>,
    client_id: Option<String>,
    interval_secs: f64,
    providers: HashMap<String, ProviderState>,
    held: VecDeque<Sample>,
}

impl Interpreter {
    pub(crate) fn new(
        counters: CounterSet,
        session_id: Option<String>,
        client_id: Option<String>,
        interval_secs: f64,
    ) -> Self {
        Interpreter {
            counters,
            session_id,
            client_id,
            interval_secs,
            providers: HashMap::new(),
            held: VecDeque::new(),
        }
    }

    /// One event of `provider` named `name` (metadata `version`) at `time`.
    pub(crate) fn event(
        &mut self,
        provider: &str,
        name: &str,
        fields: &Fields,
        time: SystemTime,
    ) -> Outcome {
        if name == "EventCounters" {
            return self.event_counter(provider, fields, time);
        }
        if provider == METRICS_PROVIDER {
            return self.metrics_event(name, fields, time);
        }
        Outcome::Ignored
    }

    fn event_counter(&mut self, provider: &str, fields: &Fields, time: SystemTime) -> Outcome {
        let name = match get_str(fields, "Name") {
            Some(n) => n,
            None => return Outcome::Malformed,
        };
        if !self.counters.includes(provider, name) {
            return Outcome::Ignored;
        }
        let (kind, value) = match get_str(fields, "CounterType") {
            Some("Sum") => (CounterKind::Sum, get_num(fields, "Increment")),
            Some("Mean") | None => (CounterKind::Mean, get_num(fields, "Mean")),
            Some(_) => return Outcome::Malformed,
        };
        let value = match value {
            Some(v) => v,
            None => return Outcome::Malformed,
        };
        let mut unit = get_str(fields, "DisplayUnits").unwrap_or("").to_string();
        if unit.is_empty() && kind == CounterKind::Sum {
            unit = "count".into();
        }
        // The interval asked for (the event's own IntervalSec jitters around it), as
        // dotnet-counters shows it.
        let interval = self.interval_secs;
        let sample = Sample {
            timestamp: time,
            provider: provider.to_string(),
            name: name.to_string(),
            display_name: get_str(fields, "DisplayName").unwrap_or(name).to_string(),
            unit,
            kind,
            value,
            tags: parse_tags(get_str(fields, "Metadata").unwrap_or(""), ':'),
            interval_secs: interval,
            source: Source::EventCounter,
        };
        let state = self
            .providers
            .entry(provider.to_string())
            .or_insert(ProviderState {
                first_seen: time,
                meter_seen: false,
            });
        if state.meter_seen {
            // The same provider publishes as a Meter: that data wins.
            return Outcome::Ignored;
        }
        if time <= state.first_seen + PREFER_METER_DELAY {
            self.held.push_back(sample);
            let mut out = Vec::new();
            while self.held.len() > MAX_HELD {
                if let Some(s) = self.held.pop_front() {
                    out.push(CounterEvent::Sample(s));
                }
            }
            return Outcome::Events(out);
        }
        Outcome::Events(vec![CounterEvent::Sample(sample)])
    }

    fn ours(&self, fields: &Fields) -> Option<bool> {
        let id = get_str(fields, "sessionId")?;
        Some(self.session_id.as_deref() == Some(id))
    }

    fn meter_seen(&mut self, meter: &str, time: SystemTime) {
        self.providers
            .entry(meter.to_string())
            .or_insert(ProviderState {
                first_seen: time,
                meter_seen: true,
            })
            .meter_seen = true;
        self.held.retain(|s| s.provider != meter);
    }

    fn metrics_event(&mut self, name: &str, fields: &Fields, time: SystemTime) -> Outcome {
        let notice = match name {
            "MultipleSessionsNotSupportedError" => {
                // Sent to every session; it concerns us unless ours is the one running.
                let running = get_str(fields, "runningSessionId");
                if running.is_some() && running == self.session_id.as_deref() {
                    return Outcome::Ignored;
                }
                Some(Notice::MultipleSessionsNotSupported)
            }
            "MultipleSessionsConfiguredIncorrectlyError" => {
                let client = get_str(fields, "clientId");
                if client.is_some() && client != self.client_id.as_deref() {
                    return Outcome::Ignored;
                }
                let describe = |what: &str| {
                    let e = get_str(fields, &format!("expected{}", what)).unwrap_or("?");
                    let a = get_str(fields, &format!("actual{}", what)).unwrap_or("?");
                    format!("{} {} (asked {})", what, a, e)
                };
                Some(Notice::MultipleSessionsConfiguredIncorrectly {
                    message: format!(
                        "another tool's shared Metrics session runs with {}, {}, {}",
                        describe("RefreshInterval"),
                        describe("MaxTimeSeries"),
                        describe("MaxHistograms")
                    ),
                })
            }
            _ => None,
        };
        if let Some(n) = notice {
            return Outcome::Events(vec![CounterEvent::Notice(n)]);
        }
        match self.ours(fields) {
            Some(true) => {}
            Some(false) => return Outcome::Ignored,
            None => {
                return match name {
                    "CounterRateValuePublished"
                    | "GaugeValuePublished"
                    | "HistogramValuePublished"
                    | "UpDownCounterRateValuePublished"
                    | "Error"
                    | "TimeSeriesLimitReached"
                    | "HistogramLimitReached"
                    | "ObservableInstrumentCallbackError" => Outcome::Malformed,
                    _ => Outcome::Ignored,
                }
            }
        }
        let message = || get_str(fields, "errorMessage").unwrap_or("").to_string();
        let notice = match name {
            "Error" => Notice::Error { message: message() },
            "ObservableInstrumentCallbackError" => {
                Notice::ObservableInstrumentCallbackError { message: message() }
            }
            "TimeSeriesLimitReached" => Notice::TimeSeriesLimitReached,
            "HistogramLimitReached" => Notice::HistogramLimitReached,
            "BeginInstrumentReporting" => {
                if let Some(m) = get_str(fields, "meterName") {
                    let m = m.to_string();
                    self.meter_seen(&m, time);
                }
                return Outcome::Events(Vec::new());
            }
            "CounterRateValuePublished"
            | "GaugeValuePublished"
            | "HistogramValuePublished"
            | "UpDownCounterRateValuePublished" => return self.value(name, fields, time),
            _ => return Outcome::Ignored,
        };
        Outcome::Events(vec![CounterEvent::Notice(notice)])
    }

    fn value(&mut self, name: &str, fields: &Fields, time: SystemTime) -> Outcome {
        let (meter, instrument) = match (
            get_str(fields, "meterName"),
            get_str(fields, "instrumentName"),
        ) {
            (Some(m), Some(i)) => (m.to_string(), i.to_string()),
            _ => return Outcome::Malformed,
        };
        self.meter_seen(&meter, time);
        if !self.counters.includes(&meter, &instrument) {
            return Outcome::Ignored;
        }
        let unit = get_str(fields, "unit").unwrap_or("").to_string();
        let tags = parse_tags(get_str(fields, "tags").unwrap_or(""), '=');
        let base = |kind: CounterKind, value: f64, tags: Vec<(String, String)>| Sample {
            timestamp: time,
            provider: meter.clone(),
            name: instrument.clone(),
            display_name: instrument.clone(),
            unit: unit.clone(),
            kind,
            value,
            tags,
            interval_secs: self.interval_secs,
            source: Source::Meter,
        };
        // An empty value means "no measurement this interval".
        let one = |kind: CounterKind, field: &str| -> Outcome {
            match get_str(fields, field) {
                None => Outcome::Malformed,
                Some(s) if s.trim().is_empty() => Outcome::Events(Vec::new()),
                Some(s) => match parse_invariant(s) {
                    Some(v) => {
                        Outcome::Events(vec![CounterEvent::Sample(base(kind, v, tags.clone()))])
                    }
                    None => Outcome::Malformed,
                },
            }
        };
        match name {
            "CounterRateValuePublished" => one(CounterKind::Rate, "rate"),
            "GaugeValuePublished" => one(CounterKind::Gauge, "lastValue"),
            "UpDownCounterRateValuePublished" => {
                // Version 1 (.NET 8) carries the current value; version 0 only the change.
                if get(fields, "value").is_some() {
                    one(CounterKind::UpDown, "value")
                } else {
                    one(CounterKind::UpDown, "rate")
                }
            }
            _ => {
                let text = match get_str(fields, "quantiles") {
                    Some(t) => t,
                    None => return Outcome::Malformed,
                };
                let mut out = Vec::new();
                for part in text.split(';').filter(|p| !p.is_empty()) {
                    let (q, v) = match part.split_once('=') {
                        Some((q, v)) => (parse_invariant(q), parse_invariant(v)),
                        None => return Outcome::Malformed,
                    };
                    match (q, v) {
                        (Some(q), Some(v)) if (0.0..=1.0).contains(&q) => out.push(
                            CounterEvent::Sample(base(CounterKind::Percentile(q), v, tags.clone())),
                        ),
                        _ => return Outcome::Malformed,
                    }
                }
                Outcome::Events(out)
            }
        }
    }

    /// When the oldest sample held back is due (its provider's first sample plus the
    /// delay, on the trace's clock); `None` when nothing is held.
    pub(crate) fn held_due(&self) -> Option<SystemTime> {
        let s = self.held.front()?;
        Some(match self.providers.get(&s.provider) {
            Some(state) => state.first_seen + PREFER_METER_DELAY,
            None => SystemTime::UNIX_EPOCH,
        })
    }

    /// EventCounter samples held back for Meter data that did not come within the delay,
    /// measured against `now` on the trace's clock (`None`: release everything).
    pub(crate) fn release(&mut self, now: Option<SystemTime>) -> Vec<CounterEvent> {
        let mut out = Vec::new();
        while let Some(s) = self.held.front() {
            let ready = match (now, self.providers.get(&s.provider)) {
                (None, _) | (_, None) => true,
                (Some(now), Some(state)) => now > state.first_seen + PREFER_METER_DELAY,
            };
            if !ready {
                break;
            }
            if let Some(s) = self.held.pop_front() {
                out.push(CounterEvent::Sample(s));
            }
        }
        out
    }
}

/// `k=v,k2=v2` (Meter tags) or `k:v,k2:v2` (EventCounter metadata); a pair without the
/// separator makes the whole list unusable, as in dotnet-counters.
pub(crate) fn parse_tags(text: &str, sep: char) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for pair in text.split(',').filter(|p| !p.is_empty()) {
        match pair.split_once(sep) {
            Some((k, v)) => out.push((k.to_string(), v.to_string())),
            None => return Vec::new(),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::Str(v.into())
    }

    fn meter_fields(session: &str, rate: &str) -> Fields {
        vec![
            ("sessionId".into(), s(session)),
            ("meterName".into(), s("MyMeter")),
            ("meterVersion".into(), s("")),
            ("instrumentName".into(), s("requests")),
            ("unit".into(), s("req")),
            ("tags".into(), s("route=/a,code=200")),
            ("rate".into(), s(rate)),
        ]
    }

    fn samples(o: Outcome) -> Vec<Sample> {
        match o {
            Outcome::Events(v) => v
                .into_iter()
                .filter_map(|e| match e {
                    CounterEvent::Sample(s) => Some(s),
                    _ => None,
                })
                .collect(),
            other => panic!("{:?}", other),
        }
    }

    #[test]
    fn meter_rates_other_sessions_and_bad_values() {
        let set = CounterSet::parse("MyMeter").unwrap();
        let mut i = Interpreter::new(set, Some("SHARED".into()), Some("me".into()), 1.0);
        let t = SystemTime::UNIX_EPOCH;
        let got = samples(i.event(
            METRICS_PROVIDER,
            "CounterRateValuePublished",
            &meter_fields("SHARED", "50"),
            t,
        ));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].kind, CounterKind::Rate);
        assert_eq!(got[0].value, 50.0);
        assert_eq!(
            got[0].tags,
            vec![("route".into(), "/a".into()), ("code".into(), "200".into())]
        );
        assert!(matches!(
            i.event(
                METRICS_PROVIDER,
                "CounterRateValuePublished",
                &meter_fields("other", "50"),
                t
            ),
            Outcome::Ignored
        ));
        assert!(samples(i.event(
            METRICS_PROVIDER,
            "CounterRateValuePublished",
            &meter_fields("SHARED", ""),
            t
        ))
        .is_empty());
        assert!(matches!(
            i.event(
                METRICS_PROVIDER,
                "CounterRateValuePublished",
                &meter_fields("SHARED", "x"),
                t
            ),
            Outcome::Malformed
        ));
        assert!(matches!(
            i.event(METRICS_PROVIDER, "CounterRateValuePublished", &vec![], t),
            Outcome::Malformed
        ));
    }

    #[test]
    fn meter_data_wins_over_event_counters() {
        let set = CounterSet::parse("System.Runtime").unwrap();
        let mut i = Interpreter::new(set, Some("s".into()), None, 1.0);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let ec = vec![
            ("Name".into(), s("cpu-usage")),
            ("CounterType".into(), s("Mean")),
            ("Mean".into(), Value::Num(3.0)),
        ];
        // Held during the first second...
        assert!(samples(i.event("System.Runtime", "EventCounters", &ec, t0)).is_empty());
        // ...and dropped once the provider shows up as a Meter.
        let mut g = meter_fields("s", "");
        g[1].1 = s("System.Runtime");
        g[3].1 = s("cpu-usage");
        g[6] = ("lastValue".into(), s("7"));
        let got = samples(i.event(METRICS_PROVIDER, "GaugeValuePublished", &g, t0));
        assert_eq!(got[0].value, 7.0);
        assert!(i.release(None).is_empty());
        let later = t0 + Duration::from_secs(5);
        assert!(matches!(
            i.event("System.Runtime", "EventCounters", &ec, later),
            Outcome::Ignored
        ));

        // Without Meter data the held sample comes out after the delay.
        let mut j = Interpreter::new(CounterSet::default(), Some("s".into()), None, 1.0);
        assert!(samples(j.event("System.Runtime", "EventCounters", &ec, t0)).is_empty());
        assert!(j.release(Some(t0)).is_empty());
        assert_eq!(j.release(Some(later)).len(), 1);
        assert_eq!(
            samples(j.event("System.Runtime", "EventCounters", &ec, later)).len(),
            1
        );
    }

    #[test]
    fn held_back_event_counters_are_bounded_when_time_never_advances() {
        let mut i = Interpreter::new(CounterSet::default(), Some("s".into()), None, 1.0);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let mut out = 0;
        for n in 0..MAX_HELD + 5 {
            let ec = vec![
                ("Name".into(), s(&format!("c{}", n))),
                ("CounterType".into(), s("Mean")),
                ("Mean".into(), Value::Num(1.0)),
            ];
            out += samples(i.event("System.Runtime", "EventCounters", &ec, t0)).len();
        }
        assert_eq!(out, 5);
        assert_eq!(i.held.len(), MAX_HELD);
        assert_eq!(i.release(None).len(), MAX_HELD);
    }

    #[test]
    fn histograms_and_notices() {
        let mut i = Interpreter::new(CounterSet::parse("M").unwrap(), Some("s".into()), None, 1.0);
        let t = SystemTime::UNIX_EPOCH;
        let h: Fields = vec![
            ("sessionId".into(), s("s")),
            ("meterName".into(), s("M")),
            ("instrumentName".into(), s("lat")),
            ("quantiles".into(), s("0.5=1;0.95=2.5;0.99=3")),
        ];
        let got = samples(i.event(METRICS_PROVIDER, "HistogramValuePublished", &h, t));
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].kind, CounterKind::Percentile(0.95));
        assert_eq!(got[1].value, 2.5);
        let e: Fields = vec![
            ("sessionId".into(), s("s")),
            ("errorMessage".into(), s("boom")),
        ];
        match i.event(METRICS_PROVIDER, "Error", &e, t) {
            Outcome::Events(v) => assert!(
                matches!(&v[0], CounterEvent::Notice(Notice::Error { message }) if message == "boom")
            ),
            o => panic!("{:?}", o),
        }
        let m: Fields = vec![("runningSessionId".into(), s("other"))];
        assert!(matches!(
            i.event(METRICS_PROVIDER, "MultipleSessionsNotSupportedError", &m, t),
            Outcome::Events(_)
        ));
        let m: Fields = vec![("runningSessionId".into(), s("s"))];
        assert!(matches!(
            i.event(METRICS_PROVIDER, "MultipleSessionsNotSupportedError", &m, t),
            Outcome::Ignored
        ));
    }

    #[test]
    fn tags() {
        assert_eq!(parse_tags("a:1,b:2", ':').len(), 2);
        assert!(parse_tags("a:1,b", ':').is_empty());
        assert!(parse_tags("", '=').is_empty());
    }
}
