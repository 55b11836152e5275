//! From decoded counter events (fields by name) to typed samples and notices; the
//! preference of a provider's Meter data over its EventCounters.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, SystemTime};

use super::config::METRICS_PROVIDER;
pub(crate) use super::fields::{parse_invariant, Fields, Value};
use super::series::{SampleSpec, SeriesEvent, SeriesSample, SeriesTable};
use super::spec::CounterSet;
use super::{CounterKind, Notice, Source};

/// What one event turned into.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Samples and notices to hand on are in the output (possibly none: no measurement
    /// this interval).
    Events,
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
    providers: HashMap<String, ProviderState>,
    held: VecDeque<SeriesSample>,
    series: SeriesTable,
}

impl Interpreter {
    /// Keeps at most `max_series` series identities (see [`SeriesTable`]).
    pub(crate) fn new(
        counters: CounterSet,
        session_id: Option<String>,
        client_id: Option<String>,
        interval_secs: f64,
        max_series: usize,
    ) -> Self {
        Interpreter {
            counters,
            session_id,
            client_id,
            providers: HashMap::new(),
            held: VecDeque::new(),
            series: SeriesTable::new(max_series, interval_secs),
        }
    }

    /// One event of `provider` named `name` at `time`: its samples and notices go to `out`
    /// (none when it is not [`Outcome::Events`]).
    pub(crate) fn event(
        &mut self,
        provider: &str,
        name: &str,
        fields: &Fields<'_>,
        time: SystemTime,
        out: &mut Vec<SeriesEvent>,
    ) -> Outcome {
        let start = out.len();
        let outcome = if name == "EventCounters" {
            self.event_counter(provider, fields, time, out)
        } else if provider == METRICS_PROVIDER {
            self.metrics_event(name, fields, time, out)
        } else {
            Outcome::Ignored
        };
        if outcome != Outcome::Events {
            out.truncate(start);
        }
        outcome
    }

    /// `provider`'s state, created at `time` (with `meter_seen`) if new.
    fn provider(
        &mut self,
        provider: &str,
        time: SystemTime,
        meter_seen: bool,
    ) -> &mut ProviderState {
        // Looked up before inserting: no key built for a known provider.
        if !self.providers.contains_key(provider) {
            self.providers.insert(
                provider.to_string(),
                ProviderState {
                    first_seen: time,
                    meter_seen,
                },
            );
        }
        match self.providers.get_mut(provider) {
            Some(p) => p,
            None => unreachable!("inserted above"),
        }
    }

    fn event_counter(
        &mut self,
        provider: &str,
        fields: &Fields<'_>,
        time: SystemTime,
        out: &mut Vec<SeriesEvent>,
    ) -> Outcome {
        let name = match fields.get_str("Name") {
            Some(n) => n,
            None => return Outcome::Malformed,
        };
        if !self.counters.includes(provider, name) {
            return Outcome::Ignored;
        }
        let (kind, value) = match fields.get_str("CounterType") {
            Some("Sum") => (CounterKind::Sum, fields.get_num("Increment")),
            Some("Mean") | None => (CounterKind::Mean, fields.get_num("Mean")),
            Some(_) => return Outcome::Malformed,
        };
        let value = match value {
            Some(v) => v,
            None => return Outcome::Malformed,
        };
        let mut unit = fields.get_str("DisplayUnits").unwrap_or("");
        if unit.is_empty() && kind == CounterKind::Sum {
            unit = "count";
        }
        let state = self.provider(provider, time, false);
        if state.meter_seen {
            // The same provider publishes as a Meter: that data wins.
            return Outcome::Ignored;
        }
        let hold = time <= state.first_seen + PREFER_METER_DELAY;
        // The interval asked for (the event's own IntervalSec jitters around it), as
        // dotnet-counters shows it.
        let sample = SeriesSample {
            series: self.series.get(&SampleSpec {
                provider,
                name,
                display_name: fields.get_str("DisplayName").unwrap_or(name),
                unit,
                kind,
                tags: fields.get_str("Metadata").unwrap_or(""),
                tag_separator: ':',
                source: Source::EventCounter,
            }),
            timestamp: time,
            value,
        };
        if hold {
            self.held.push_back(sample);
            while self.held.len() > MAX_HELD {
                if let Some(s) = self.held.pop_front() {
                    out.push(SeriesEvent::Sample(s));
                }
            }
            return Outcome::Events;
        }
        out.push(SeriesEvent::Sample(sample));
        Outcome::Events
    }

    fn ours(&self, fields: &Fields<'_>) -> Option<bool> {
        let id = fields.get_str("sessionId")?;
        Some(self.session_id.as_deref() == Some(id))
    }

    fn meter_seen(&mut self, meter: &str, time: SystemTime) {
        let state = self.provider(meter, time, true);
        if state.meter_seen {
            return;
        }
        state.meter_seen = true;
        self.held.retain(|s| s.series.provider != meter);
    }

    fn metrics_event(
        &mut self,
        name: &str,
        fields: &Fields<'_>,
        time: SystemTime,
        out: &mut Vec<SeriesEvent>,
    ) -> Outcome {
        let notice = match name {
            "MultipleSessionsNotSupportedError" => {
                // Sent to every session; it concerns us unless ours is the one running.
                let running = fields.get_str("runningSessionId");
                if running.is_some() && running == self.session_id.as_deref() {
                    return Outcome::Ignored;
                }
                Some(Notice::MultipleSessionsNotSupported)
            }
            "MultipleSessionsConfiguredIncorrectlyError" => {
                let client = fields.get_str("clientId");
                if client.is_some() && client != self.client_id.as_deref() {
                    return Outcome::Ignored;
                }
                let describe = |what: &str| {
                    let e = fields.get_str(&format!("expected{}", what)).unwrap_or("?");
                    let a = fields.get_str(&format!("actual{}", what)).unwrap_or("?");
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
            out.push(SeriesEvent::Notice(n));
            return Outcome::Events;
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
        let message = || fields.get_str("errorMessage").unwrap_or("").to_string();
        let notice = match name {
            "Error" => Notice::Error { message: message() },
            "ObservableInstrumentCallbackError" => {
                Notice::ObservableInstrumentCallbackError { message: message() }
            }
            "TimeSeriesLimitReached" => Notice::TimeSeriesLimitReached,
            "HistogramLimitReached" => Notice::HistogramLimitReached,
            "BeginInstrumentReporting" => {
                if let Some(m) = fields.get_str("meterName") {
                    self.meter_seen(m, time);
                }
                return Outcome::Events;
            }
            "CounterRateValuePublished"
            | "GaugeValuePublished"
            | "HistogramValuePublished"
            | "UpDownCounterRateValuePublished" => return self.value(name, fields, time, out),
            _ => return Outcome::Ignored,
        };
        out.push(SeriesEvent::Notice(notice));
        Outcome::Events
    }

    fn value(
        &mut self,
        name: &str,
        fields: &Fields<'_>,
        time: SystemTime,
        out: &mut Vec<SeriesEvent>,
    ) -> Outcome {
        let (meter, instrument) = match (
            fields.get_str("meterName"),
            fields.get_str("instrumentName"),
        ) {
            (Some(m), Some(i)) => (m, i),
            _ => return Outcome::Malformed,
        };
        self.meter_seen(meter, time);
        if !self.counters.includes(meter, instrument) {
            return Outcome::Ignored;
        }
        let spec = |kind: CounterKind| SampleSpec {
            provider: meter,
            name: instrument,
            display_name: instrument,
            unit: fields.get_str("unit").unwrap_or(""),
            kind,
            tags: fields.get_str("tags").unwrap_or(""),
            tag_separator: '=',
            source: Source::Meter,
        };
        let series = &mut self.series;
        // An empty value means "no measurement this interval".
        let mut one = |kind: CounterKind, field: &str| -> Outcome {
            match fields.get_str(field) {
                None => Outcome::Malformed,
                Some(s) if s.trim().is_empty() => Outcome::Events,
                Some(s) => match parse_invariant(s) {
                    Some(value) => {
                        out.push(SeriesEvent::Sample(SeriesSample {
                            series: series.get(&spec(kind)),
                            timestamp: time,
                            value,
                        }));
                        Outcome::Events
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
                if fields.get("value").is_some() {
                    one(CounterKind::UpDown, "value")
                } else {
                    one(CounterKind::UpDown, "rate")
                }
            }
            _ => {
                let text = match fields.get_str("quantiles") {
                    Some(t) => t,
                    None => return Outcome::Malformed,
                };
                for part in text.split(';').filter(|p| !p.is_empty()) {
                    let (q, v) = match part.split_once('=') {
                        Some((q, v)) => (parse_invariant(q), parse_invariant(v)),
                        None => return Outcome::Malformed,
                    };
                    match (q, v) {
                        (Some(q), Some(value)) if (0.0..=1.0).contains(&q) => {
                            out.push(SeriesEvent::Sample(SeriesSample {
                                series: series.get(&spec(CounterKind::Percentile(q))),
                                timestamp: time,
                                value,
                            }))
                        }
                        _ => return Outcome::Malformed,
                    }
                }
                Outcome::Events
            }
        }
    }

    /// When the oldest sample held back is due (its provider's first sample plus the
    /// delay, on the trace's clock); `None` when nothing is held.
    pub(crate) fn held_due(&self) -> Option<SystemTime> {
        let s = self.held.front()?;
        Some(match self.providers.get(&s.series.provider) {
            Some(state) => state.first_seen + PREFER_METER_DELAY,
            None => SystemTime::UNIX_EPOCH,
        })
    }

    /// EventCounter samples held back for Meter data that did not come within the delay,
    /// measured against `now` on the trace's clock (`None`: release everything), to `out`.
    pub(crate) fn release(&mut self, now: Option<SystemTime>, out: &mut Vec<SeriesEvent>) {
        while let Some(s) = self.held.front() {
            let ready = match (now, self.providers.get(&s.series.provider)) {
                (None, _) | (_, None) => true,
                (Some(now), Some(state)) => now > state.first_seen + PREFER_METER_DELAY,
            };
            if !ready {
                break;
            }
            if let Some(s) = self.held.pop_front() {
                out.push(SeriesEvent::Sample(s));
            }
        }
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
    use crate::counters::{CounterEvent, Sample};
    use crate::LayoutField;
    use dsipc::nettrace::TypeCode;

    /// A test value: a string or a number.
    #[derive(Clone)]
    enum V {
        S(String),
        Num(f64),
    }

    fn s(v: &str) -> V {
        V::S(v.into())
    }

    type Owned = Vec<(String, V)>;

    /// Runs `fields` through the interpreter: Ok(the events) or the outcome.
    fn run(
        i: &mut Interpreter,
        provider: &str,
        name: &str,
        fields: &Owned,
        t: SystemTime,
    ) -> Result<Vec<CounterEvent>, Outcome> {
        let mut names = Vec::new();
        let mut values = Vec::new();
        let mut text = String::new();
        for (n, v) in fields {
            names.push(LayoutField {
                name: n.clone().into_boxed_str(),
                code: TypeCode::String,
                depth: 0,
            });
            values.push(match v {
                V::S(v) => {
                    let a = text.len() as u32;
                    text.push_str(v);
                    Value::Str(a, text.len() as u32)
                }
                V::Num(n) => Value::Num(*n),
            });
        }
        let f = Fields {
            names: &names,
            values: &values,
            text: &text,
        };
        let mut out = Vec::new();
        match i.event(provider, name, &f, t, &mut out) {
            Outcome::Events => Ok(out.iter().map(|e| e.to_counter_event()).collect()),
            o => Err(o),
        }
    }

    fn interpreter(set: CounterSet, session: &str, client: Option<&str>) -> Interpreter {
        Interpreter::new(set, Some(session.into()), client.map(Into::into), 1.0, 1000)
    }

    fn released(i: &mut Interpreter, now: Option<SystemTime>) -> Vec<SeriesEvent> {
        let mut out = Vec::new();
        i.release(now, &mut out);
        out
    }

    fn meter_fields(session: &str, rate: &str) -> Owned {
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

    fn samples(o: Result<Vec<CounterEvent>, Outcome>) -> Vec<Sample> {
        match o {
            Ok(v) => v
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
        let mut i = interpreter(set, "SHARED", Some("me"));
        let t = SystemTime::UNIX_EPOCH;
        let got = samples(run(
            &mut i,
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
            run(
                &mut i,
                METRICS_PROVIDER,
                "CounterRateValuePublished",
                &meter_fields("other", "50"),
                t
            ),
            Err(Outcome::Ignored)
        ));
        assert!(samples(run(
            &mut i,
            METRICS_PROVIDER,
            "CounterRateValuePublished",
            &meter_fields("SHARED", ""),
            t
        ))
        .is_empty());
        assert!(matches!(
            run(
                &mut i,
                METRICS_PROVIDER,
                "CounterRateValuePublished",
                &meter_fields("SHARED", "x"),
                t
            ),
            Err(Outcome::Malformed)
        ));
        assert!(matches!(
            run(
                &mut i,
                METRICS_PROVIDER,
                "CounterRateValuePublished",
                &Vec::new(),
                t
            ),
            Err(Outcome::Malformed)
        ));
    }

    #[test]
    fn meter_data_wins_over_event_counters() {
        let set = CounterSet::parse("System.Runtime").unwrap();
        let mut i = interpreter(set, "s", None);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let ec = vec![
            ("Name".into(), s("cpu-usage")),
            ("CounterType".into(), s("Mean")),
            ("Mean".into(), V::Num(3.0)),
        ];
        // Held during the first second...
        assert!(samples(run(&mut i, "System.Runtime", "EventCounters", &ec, t0)).is_empty());
        // ...and dropped once the provider shows up as a Meter.
        let mut g = meter_fields("s", "");
        g[1].1 = s("System.Runtime");
        g[3].1 = s("cpu-usage");
        g[6] = ("lastValue".into(), s("7"));
        let got = samples(run(&mut i, METRICS_PROVIDER, "GaugeValuePublished", &g, t0));
        assert_eq!(got[0].value, 7.0);
        assert!(released(&mut i, None).is_empty());
        let later = t0 + Duration::from_secs(5);
        assert!(matches!(
            run(&mut i, "System.Runtime", "EventCounters", &ec, later),
            Err(Outcome::Ignored)
        ));

        // Without Meter data the held sample comes out after the delay.
        let mut j = interpreter(CounterSet::default(), "s", None);
        assert!(samples(run(&mut j, "System.Runtime", "EventCounters", &ec, t0)).is_empty());
        assert!(released(&mut j, Some(t0)).is_empty());
        assert_eq!(released(&mut j, Some(later)).len(), 1);
        assert_eq!(
            samples(run(&mut j, "System.Runtime", "EventCounters", &ec, later)).len(),
            1
        );
    }

    #[test]
    fn held_back_event_counters_are_bounded_when_time_never_advances() {
        let mut i = interpreter(CounterSet::default(), "s", None);
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let mut out = 0;
        for n in 0..MAX_HELD + 5 {
            let ec = vec![
                ("Name".into(), s(&format!("c{}", n))),
                ("CounterType".into(), s("Mean")),
                ("Mean".into(), V::Num(1.0)),
            ];
            out += samples(run(&mut i, "System.Runtime", "EventCounters", &ec, t0)).len();
        }
        assert_eq!(out, 5);
        assert_eq!(i.held.len(), MAX_HELD);
        assert_eq!(released(&mut i, None).len(), MAX_HELD);
    }

    #[test]
    fn histograms_and_notices() {
        let mut i = interpreter(CounterSet::parse("M").unwrap(), "s", None);
        let t = SystemTime::UNIX_EPOCH;
        let h: Owned = vec![
            ("sessionId".into(), s("s")),
            ("meterName".into(), s("M")),
            ("instrumentName".into(), s("lat")),
            ("quantiles".into(), s("0.5=1;0.95=2.5;0.99=3")),
        ];
        let got = samples(run(
            &mut i,
            METRICS_PROVIDER,
            "HistogramValuePublished",
            &h,
            t,
        ));
        assert_eq!(got.len(), 3);
        assert_eq!(got[1].kind, CounterKind::Percentile(0.95));
        assert_eq!(got[1].value, 2.5);
        let e: Owned = vec![
            ("sessionId".into(), s("s")),
            ("errorMessage".into(), s("boom")),
        ];
        match run(&mut i, METRICS_PROVIDER, "Error", &e, t) {
            Ok(v) => assert!(
                matches!(&v[0], CounterEvent::Notice(Notice::Error { message }) if message == "boom")
            ),
            o => panic!("{:?}", o),
        }
        let m: Owned = vec![("runningSessionId".into(), s("other"))];
        assert!(run(
            &mut i,
            METRICS_PROVIDER,
            "MultipleSessionsNotSupportedError",
            &m,
            t
        )
        .is_ok());
        let m: Owned = vec![("runningSessionId".into(), s("s"))];
        assert!(matches!(
            run(
                &mut i,
                METRICS_PROVIDER,
                "MultipleSessionsNotSupportedError",
                &m,
                t
            ),
            Err(Outcome::Ignored)
        ));
    }

    #[test]
    fn tags() {
        assert_eq!(parse_tags("a:1,b:2", ':').len(), 2);
        assert!(parse_tags("a:1,b", ':').is_empty());
        assert!(parse_tags("", '=').is_empty());
    }
}
