//! The Prometheus text exposition format (version 0.0.4) for counter samples of many
//! runtimes, each series labelled with its runtime's pid.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use dsipc_trace::counters::{CounterKind, Sample};

/// A Prometheus metric name for a provider's counter: lowercase, words of camelCase split,
/// every run of other characters as one `_` (`System.Runtime` + `cpu-usage` =
/// `system_runtime_cpu_usage`); increments get `_total`.
pub fn metric_name(provider: &str, counter: &str, kind: CounterKind) -> String {
    let mut out = String::with_capacity(provider.len() + counter.len() + 8);
    push_snake(&mut out, provider);
    push_snake(&mut out, counter);
    while out.ends_with('_') {
        out.pop();
    }
    if out.is_empty() || out.as_bytes()[0].is_ascii_digit() {
        out.insert(0, '_');
    }
    if kind.is_increment() {
        if !out.ends_with("_total") {
            out.push_str("_total");
        }
    } else if RESERVED_SUFFIXES.iter().any(|s| out.ends_with(s)) {
        // A gauge named like a counter or histogram part (`assembly-count`) would mislead
        // Prometheus tooling (promtool flags it).
        out.push_str("_value");
    }
    out
}

/// Suffixes Prometheus reserves for counters, histograms and summaries.
const RESERVED_SUFFIXES: &[&str] = &["_total", "_count", "_sum", "_bucket"];

/// Appends `s` in snake case, separated from what is there by one `_`.
fn push_snake(out: &mut String, s: &str) {
    if !out.is_empty() && !out.ends_with('_') {
        out.push('_');
    }
    let mut prev: Option<char> = None;
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            if c.is_ascii_uppercase() {
                if let Some(p) = prev {
                    if p.is_ascii_lowercase() || p.is_ascii_digit() {
                        out.push('_');
                    }
                }
            }
            out.push(c.to_ascii_lowercase());
        } else if !out.is_empty() && !out.ends_with('_') {
            out.push('_');
        }
        prev = Some(c);
    }
}

/// A label name: `[a-zA-Z_][a-zA-Z0-9_]*`, never starting with `__` (reserved).
fn label_name(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if out.is_empty() || out.as_bytes()[0].is_ascii_digit() {
        out.insert(0, '_');
    }
    while out.starts_with("__") {
        out.remove(0);
    }
    if out == "pid" || out == "quantile" {
        out.insert_str(0, "tag_");
    }
    out
}

fn escape_label(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Counter,
    Gauge,
    /// Histogram percentiles: one series per `quantile` label (no `_sum`/`_count`: the
    /// runtime publishes percentiles only).
    Summary,
}

#[derive(Debug)]
struct Series {
    ty: Type,
    help: String,
    value: f64,
}

/// One runtime's series: metric name, then the label set (without pid) in text form.
type RuntimeSeries = BTreeMap<(String, String), Series>;

/// A metric family while rendering: type, help, then (pid, labels, value) per series.
type Family<'a> = (Type, &'a str, Vec<(u32, &'a str, f64)>);

/// The latest value of every series of every runtime.
#[derive(Debug, Default)]
pub struct Store {
    runtimes: BTreeMap<u32, RuntimeSeries>,
}

impl Store {
    /// Records a sample of runtime `pid`: increments add to a `_total` counter, everything
    /// else sets a gauge.
    pub fn record(&mut self, pid: u32, s: &Sample) {
        let name = metric_name(&s.provider, &s.name, s.kind);
        let mut labels = String::new();
        let mut tags: Vec<(String, &str)> = s
            .tags
            .iter()
            .map(|(k, v)| (label_name(k), v.as_str()))
            .collect();
        tags.sort();
        tags.dedup_by(|a, b| a.0 == b.0);
        let quantile;
        if let CounterKind::Percentile(q) = s.kind {
            quantile = format!("{}", q);
            tags.push(("quantile".into(), &quantile));
        }
        for (k, v) in &tags {
            labels.push(',');
            labels.push_str(k);
            labels.push_str("=\"");
            escape_label(v, &mut labels);
            labels.push('"');
        }
        let ty = match s.kind {
            k if k.is_increment() => Type::Counter,
            CounterKind::Percentile(_) => Type::Summary,
            _ => Type::Gauge,
        };
        let series = self.runtimes.entry(pid).or_default();
        let entry = series.entry((name, labels)).or_insert_with(|| Series {
            ty,
            help: help_text(s),
            value: 0.0,
        });
        if entry.ty != ty {
            // The same name as another kind (cannot happen with the `_total` suffix unless
            // a provider names a gauge `..._total`): keep the first kind.
            return;
        }
        match ty {
            Type::Counter => {
                if s.value > 0.0 {
                    entry.value += s.value;
                }
            }
            Type::Gauge | Type::Summary => entry.value = s.value,
        }
    }

    /// Makes runtime `pid` known with no series yet; false if it is known already.
    pub fn try_add_runtime(&mut self, pid: u32) -> bool {
        if self.runtimes.contains_key(&pid) {
            return false;
        }
        self.runtimes.insert(pid, RuntimeSeries::new());
        true
    }

    /// Drops every series of runtime `pid`.
    pub fn remove(&mut self, pid: u32) {
        self.runtimes.remove(&pid);
    }

    /// Number of series over all runtimes.
    pub fn series_count(&self) -> usize {
        self.runtimes.values().map(|r| r.len()).sum()
    }

    /// The exposition: each metric family once (HELP, TYPE), then its series of every pid.
    pub fn render(&self) -> String {
        // name -> (type, help, lines)
        let mut families: BTreeMap<&str, Family<'_>> = BTreeMap::new();
        for (pid, series) in &self.runtimes {
            for ((name, labels), s) in series {
                let fam = families
                    .entry(name.as_str())
                    .or_insert_with(|| (s.ty, s.help.as_str(), Vec::new()));
                if fam.0 == s.ty {
                    fam.2.push((*pid, labels.as_str(), s.value));
                }
            }
        }
        let mut out = String::with_capacity(64 * self.series_count() + 64);
        for (name, (ty, help, lines)) in families {
            out.push_str("# HELP ");
            out.push_str(name);
            out.push(' ');
            escape_help(help, &mut out);
            out.push('\n');
            let _ = writeln!(
                out,
                "# TYPE {} {}",
                name,
                match ty {
                    Type::Counter => "counter",
                    Type::Gauge => "gauge",
                    Type::Summary => "summary",
                }
            );
            for (pid, labels, value) in lines {
                let _ = writeln!(
                    out,
                    "{}{{pid=\"{}\"{}}} {}",
                    name,
                    pid,
                    labels,
                    fmt_value(value)
                );
            }
        }
        out
    }
}

fn help_text(s: &Sample) -> String {
    let mut h = format!("{} {}", s.provider, s.display_name);
    if !s.unit.is_empty() {
        h.push_str(" (");
        h.push_str(&s.unit);
        h.push(')');
    }
    h
}

fn fmt_value(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        }
    } else {
        format!("{}", v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsipc_trace::counters::Source;
    use std::time::SystemTime;

    fn sample(provider: &str, name: &str, kind: CounterKind, value: f64) -> Sample {
        Sample {
            timestamp: SystemTime::UNIX_EPOCH,
            provider: provider.into(),
            name: name.into(),
            display_name: name.into(),
            unit: String::new(),
            kind,
            value,
            tags: Vec::new(),
            interval_secs: 1.0,
            source: Source::Meter,
        }
    }

    #[test]
    fn names() {
        use CounterKind::*;
        let rt = "System.Runtime";
        for (provider, name, kind, metric) in [
            (rt, "cpu-usage", Mean, "system_runtime_cpu_usage"),
            ("MyMeter", "requests", Rate, "my_meter_requests_total"),
            (rt, "% Time in GC", Mean, "system_runtime_time_in_gc"),
            ("9x", "", Gauge, "_9x"),
            (
                rt,
                "assembly-count",
                Mean,
                "system_runtime_assembly_count_value",
            ),
            (
                rt,
                "gen-0-gc-count",
                Sum,
                "system_runtime_gen_0_gc_count_total",
            ),
            (
                "A",
                "http.server.request.duration",
                Percentile(0.5),
                "a_http_server_request_duration",
            ),
        ] {
            assert_eq!(
                metric_name(provider, name, kind),
                metric,
                "{} {}",
                provider,
                name
            );
        }
    }

    #[test]
    fn exposition_groups_families_and_sums_increments() {
        let mut st = Store::default();
        st.record(2, &sample("MyMeter", "requests", CounterKind::Rate, 50.0));
        st.record(1, &sample("MyMeter", "requests", CounterKind::Rate, 10.0));
        st.record(2, &sample("MyMeter", "requests", CounterKind::Rate, 49.0));
        let mut g = sample("System.Runtime", "cpu-usage", CounterKind::Mean, 3.5);
        g.tags = vec![("pid".into(), "x\"y".into())];
        st.record(1, &g);
        let text = st.render();
        assert_eq!(
            text,
            "# HELP my_meter_requests_total MyMeter requests\n\
             # TYPE my_meter_requests_total counter\n\
             my_meter_requests_total{pid=\"1\"} 10\n\
             my_meter_requests_total{pid=\"2\"} 99\n\
             # HELP system_runtime_cpu_usage System.Runtime cpu-usage\n\
             # TYPE system_runtime_cpu_usage gauge\n\
             system_runtime_cpu_usage{pid=\"1\",tag_pid=\"x\\\"y\"} 3.5\n"
        );
        let mut h = sample("M", "latency", CounterKind::Percentile(0.95), 10.0);
        h.tags = vec![("route".into(), "/a".into())];
        st.record(1, &h);
        assert!(st.render().contains(
            "# TYPE m_latency summary\nm_latency{pid=\"1\",route=\"/a\",quantile=\"0.95\"} 10\n"
        ));
        st.remove(2);
        assert!(!st.render().contains("pid=\"2\""));
        assert_eq!(st.series_count(), 3);
    }
}
