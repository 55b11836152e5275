//! The Prometheus text exposition format (version 0.0.4) for counter samples of many
//! runtimes, each series labelled with its runtime's pid.
//!
//! Names, units, values and metric types are dotnet-monitor's (its `PrometheusDataModel`
//! and `MetricsStore`), so dashboards built for dotnet-monitor's `/metrics` (Grafana
//! 19297) work unchanged on ours: `systemruntime_cpu_usage_ratio`,
//! `systemruntime_working_set_bytes`, `microsoftaspnetcorehosting_requests_per_second`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use dsipc_trace::counters::{CounterKind, Sample};

/// dotnet-monitor's Prometheus name of a provider's (or Meter's) counter with unit `unit`:
/// `normalize(provider)_normalize(counter)[_suffix]`.
///
/// - The provider keeps only its valid characters (ASCII letters, digits, `_`; not a digit
///   first), lowercased: `System.Runtime` is `systemruntime`, `Test-Provider`
///   `testprovider`; one with none is `_`.
/// - The counter name and the unit suffix keep their case and have every invalid character
///   (every UTF-16 unit of one, as .NET counts them) replaced by `_`: `cpu-usage` is
///   `cpu_usage`, `Test-Metric` `Test_Metric`.
/// - The unit, case-insensitively: empty or `count` adds nothing, `B` and `MB` add `bytes`
///   (MB values are scaled, see [`metric_value`]), `%` adds `ratio` (the value stays a
///   percentage, 0 to 100, as dotnet-monitor has it), any other unit is added as it is
///   (`ms`: `systemruntime_time_in_jit_ms`; a Meter's `By`: `..._By`).
///
/// There is no `_total` (or any other type) suffix. A name that would start with a digit
/// (only a provider such as `-9` can do that; dotnet-monitor writes those invalid names
/// as they are) gets a leading `_`.
pub fn metric_name(provider: &str, counter: &str, unit: &str) -> String {
    let suffix = unit_suffix(unit);
    let mut out = String::with_capacity(provider.len() + counter.len() + suffix.len() + 2);
    normalize(&mut out, provider, true);
    out.push('_');
    normalize(&mut out, counter, false);
    if !suffix.is_empty() {
        out.push('_');
        normalize(&mut out, suffix, false);
    }
    if out.as_bytes()[0].is_ascii_digit() {
        out.insert(0, '_');
    }
    out
}

/// dotnet-monitor's value of a sample published in `unit`: MB (case-insensitively; the
/// runtime's MB are 1,000,000 bytes, not MiB) times 1,000,000, everything else as it is
/// (`%` included: `_ratio` series hold percentages).
pub fn metric_value(unit: &str, value: f64) -> f64 {
    if unit.eq_ignore_ascii_case("MB") {
        value * 1_000_000.0
    } else {
        value
    }
}

/// The name suffix for `unit` (dotnet-monitor's `KnownUnits`, else the unit itself).
fn unit_suffix(unit: &str) -> &str {
    const KNOWN: &[(&str, &str)] = &[
        ("", ""),
        ("count", ""),
        ("B", "bytes"),
        ("MB", "bytes"),
        ("%", "ratio"),
    ];
    KNOWN
        .iter()
        .find(|(u, _)| u.eq_ignore_ascii_case(unit))
        .map_or(unit, |(_, s)| s)
}

/// Appends `s` normalized as dotnet-monitor's `NormalizeString` does: a character is valid
/// if it is `_`, an ASCII letter, or (not first in `s`) an ASCII digit. A provider keeps its
/// valid characters lowercased and drops the others (`_` if none is left); anything else
/// keeps case and puts `_` for each UTF-16 unit of an invalid character.
fn normalize(out: &mut String, s: &str, provider: bool) {
    let mut any_valid = false;
    for (i, c) in s.chars().enumerate() {
        let valid = c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit());
        if valid {
            any_valid = true;
            out.push(if provider { c.to_ascii_lowercase() } else { c });
        } else if !provider {
            for _ in 0..c.len_utf16() {
                out.push('_');
            }
        }
    }
    if provider && !any_valid {
        out.push('_');
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

/// A label value: the format's escapes (`\\`, `\"`, `\n`), and terminal controls as
/// [`escape_control`] writes them.
fn escape_label(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => escape_control(c, out),
        }
    }
}

/// A HELP text: the format's escapes (`\\`, `\n`), and terminal controls as
/// [`escape_control`] writes them.
fn escape_help(s: &str, out: &mut String) {
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => escape_control(c, out),
        }
    }
}

/// `c`, or when it could drive a terminal (a control, or a bidi override: the names come
/// from the runtime, and people read `/metrics` with curl in a terminal) its visible name
/// as dsipc writes it everywhere (`\x1b`, `\u{202e}`, see [`dsipc_trace::format::clean`]). The
/// exposition format knows only the escapes `\\` and `\n` (Prometheus' parser rejects
/// others), so the backslash of the name is itself escaped: a scraper reads the text
/// `\x1b`. U+FFFD would lose which character it was.
fn escape_control(c: char, out: &mut String) {
    if dsipc_trace::format::unsafe_char(c) {
        let visible = dsipc_trace::format::clean(c.encode_utf8(&mut [0; 4])).into_owned();
        out.push_str(&visible.replace('\\', "\\\\"));
    } else {
        out.push(c);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    /// Everything but histograms, increments (EventCounter Sum, Meter Counter rate)
    /// included, as dotnet-monitor has them: an increment series holds the increase over
    /// the last refresh interval (what dotnet-counters shows as `(... / 1 sec)`), which goes
    /// up and down, so it is a gauge, not a Prometheus counter (no `_total`, no `rate()`).
    /// Dashboards for dotnet-monitor plot these values directly
    /// (`microsoftaspnetcorehosting_requests_per_second`); a running total under the same
    /// name would break them. Some dotnet-monitor names make promtool's linter complain
    /// (gauges ending in `_count`, abbreviated units such as `_ms`): style warnings, the
    /// exposition is valid, and the names are what those dashboards query.
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
    /// Records a sample of runtime `pid`: its series (a gauge, or a summary's quantile)
    /// holds the sample's value, scaled as dotnet-monitor does (`metric_value`).
    pub fn record(&mut self, pid: u32, s: &Sample) {
        let name = metric_name(&s.provider, &s.name, &s.unit);
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
            // A histogram and another instrument normalized to one name (`a-b` and `a.b`
            // of one provider): keep the first kind, a family has one type.
            return;
        }
        entry.value = metric_value(&s.unit, s.value);
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

/// `System.Runtime Working Set (MB, in bytes)`: provider, display name, the unit published
/// (and the one exported, when the value is scaled).
fn help_text(s: &Sample) -> String {
    let mut h = format!("{} {}", s.provider, s.display_name);
    if !s.unit.is_empty() {
        h.push_str(" (");
        h.push_str(&s.unit);
        if s.unit.eq_ignore_ascii_case("MB") {
            h.push_str(", in bytes");
        }
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
#[path = "store_tests.rs"]
mod tests;
