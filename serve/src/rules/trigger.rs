//! A rule's `Trigger`: its `Type` and typed `Settings`, with dotnet-monitor's defaults and
//! validation (the shortcuts `CPUUsage`, `GCHeapSize`, `ThreadpoolQueueLength` expand to
//! `System.Runtime` EventCounter triggers).

use std::time::Duration;

use super::defaults::RuleDefaults;
use super::value::{ErrorKind, Node, Result, RuleError};

/// The default sliding window of every trigger: one minute.
pub const DEFAULT_SLIDING_WINDOW: Duration = Duration::from_secs(60);
/// The shortest sliding window: one second.
pub const MIN_SLIDING_WINDOW: Duration = Duration::from_secs(1);
/// The longest sliding window: one day.
pub const MAX_SLIDING_WINDOW: Duration = Duration::from_secs(86_400);
/// `AspNetRequestDuration`'s default `RequestDuration`: five seconds.
pub const DEFAULT_REQUEST_DURATION: Duration = Duration::from_secs(5);
/// `AspNetRequestDuration`'s largest `RequestDuration`: one hour.
pub const MAX_REQUEST_DURATION: Duration = Duration::from_secs(3_600);
/// The provider of the shortcut triggers' counters.
pub const SYSTEM_RUNTIME: &str = "System.Runtime";
/// `CPUUsage`'s default `GreaterThan` (percent).
pub const CPU_USAGE_GREATER_THAN: f64 = 50.0;
/// `GCHeapSize`'s default `GreaterThan` (MB).
pub const GC_HEAP_SIZE_GREATER_THAN: f64 = 10.0;
/// `ThreadpoolQueueLength`'s default `GreaterThan`.
pub const THREADPOOL_QUEUE_LENGTH_GREATER_THAN: f64 = 200.0;

/// The trigger types dotnet-monitor knows, as configuration names them.
pub const TRIGGER_TYPES: &[&str] = &[
    "AspNetRequestCount",
    "AspNetRequestDuration",
    "AspNetResponseStatus",
    "EventCounter",
    "EventMeter",
    "CPUUsage",
    "GCHeapSize",
    "ThreadpoolQueueLength",
    "Startup",
];

/// The threshold of a counter or instrument: strictly above `greater_than`, strictly below
/// `less_than` (both: strictly between), as dotnet-monitor's value filter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Threshold {
    /// The value must be above this.
    pub greater_than: Option<f64>,
    /// The value must be below this.
    pub less_than: Option<f64>,
}

impl Threshold {
    /// Whether `value` satisfies the threshold.
    pub fn passes(&self, value: f64) -> bool {
        self.greater_than.map_or(true, |g| value > g) && self.less_than.map_or(true, |l| value < l)
    }
}

/// An `EventCounter` trigger (also what the shortcuts expand to).
#[derive(Debug, Clone, PartialEq)]
pub struct EventCounterTrigger {
    /// The EventSource providing the counter.
    pub provider_name: String,
    /// The counter's name.
    pub counter_name: String,
    /// The threshold the counter must hold.
    pub threshold: Threshold,
    /// How long the threshold must hold.
    pub sliding_window: Duration,
}

/// An `EventMeter` trigger (System.Diagnostics.Metrics instruments).
#[derive(Debug, Clone, PartialEq)]
pub struct EventMeterTrigger {
    /// The meter's name.
    pub meter_name: String,
    /// The instrument's name.
    pub instrument_name: String,
    /// The threshold the value (or the histogram's percentile) must hold.
    pub threshold: Threshold,
    /// For a histogram: which published percentile is compared.
    pub histogram_percentile: Option<u8>,
    /// How long the threshold must hold.
    pub sliding_window: Duration,
}

/// The request path patterns of the ASP.NET triggers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathFilters {
    /// Only these paths count (none: every path).
    pub include: Option<Vec<String>>,
    /// These paths never count (they win over `include`).
    pub exclude: Option<Vec<String>>,
}

/// `AspNetRequestCount`: requests starting within the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AspNetRequestCountTrigger {
    /// The threshold number of requests.
    pub request_count: u32,
    /// The window they are counted in.
    pub sliding_window: Duration,
    /// Which paths count.
    pub paths: PathFilters,
}

/// `AspNetRequestDuration`: slow requests within the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AspNetRequestDurationTrigger {
    /// The threshold number of slow requests.
    pub request_count: u32,
    /// A request at least this long is slow.
    pub request_duration: Duration,
    /// The window they are counted in.
    pub sliding_window: Duration,
    /// Which paths count.
    pub paths: PathFilters,
}

/// `AspNetResponseStatus`: responses with matching status codes within the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AspNetResponseStatusTrigger {
    /// Status code ranges, inclusive (`"404"` is `404..=404`).
    pub status_codes: Vec<(u16, u16)>,
    /// The threshold number of matching responses.
    pub response_count: u32,
    /// The window they are counted in.
    pub sliding_window: Duration,
    /// Which paths count.
    pub paths: PathFilters,
}

/// A trigger's condition.
#[derive(Debug, Clone, PartialEq)]
pub enum TriggerKind {
    /// Fires once, when the rule is applied to a process.
    Startup,
    /// An EventCounter held within a threshold for a sliding window.
    EventCounter(EventCounterTrigger),
    /// A meter instrument held within a threshold for a sliding window.
    EventMeter(EventMeterTrigger),
    /// Many requests.
    AspNetRequestCount(AspNetRequestCountTrigger),
    /// Many slow requests.
    AspNetRequestDuration(AspNetRequestDurationTrigger),
    /// Many responses with given status codes.
    AspNetResponseStatus(AspNetResponseStatusTrigger),
}

/// A rule's trigger: the type as configured and its condition.
#[derive(Debug, Clone, PartialEq)]
pub struct Trigger {
    /// The `Type` as dotnet-monitor spells it (`CPUUsage` stays `CPUUsage`).
    pub type_name: &'static str,
    /// The condition.
    pub kind: TriggerKind,
}

fn invalid(node: &Node<'_>, message: String) -> RuleError {
    RuleError::new(node.path.clone(), ErrorKind::Invalid(message))
}

fn sliding_window(settings: &Node<'_>, defaults: &RuleDefaults) -> Result<Duration> {
    Ok(settings
        .child("SlidingWindowDuration")
        .timespan(MIN_SLIDING_WINDOW, MAX_SLIDING_WINDOW)?
        .or(defaults.sliding_window)
        .unwrap_or(DEFAULT_SLIDING_WINDOW))
}

/// GreaterThan/LessThan of EventCounter and EventMeter: one of them is required, and
/// LessThan may not be below GreaterThan.
fn threshold(settings: &Node<'_>) -> Result<Threshold> {
    let greater_than = settings.child("GreaterThan").f64()?;
    let less_than = settings.child("LessThan").f64()?;
    match (greater_than, less_than) {
        (None, None) => Err(invalid(
            settings,
            "The GreaterThan field or the LessThan field is required.".into(),
        )),
        (Some(g), Some(l)) if l < g => Err(invalid(
            settings,
            "The value of field GreaterThan must be less than the value of field LessThan.".into(),
        )),
        _ => Ok(Threshold {
            greater_than,
            less_than,
        }),
    }
}

fn ranged(node: &Node<'_>, min: f64, max: f64) -> Result<Option<f64>> {
    match node.f64()? {
        Some(v) if v < min || v > max => Err(RuleError::new(
            node.path.clone(),
            ErrorKind::OutOfRange {
                min: min.to_string(),
                max: if max == f64::MAX {
                    "1.7976931348623157E+308".into()
                } else {
                    max.to_string()
                },
            },
        )),
        v => Ok(v),
    }
}

/// A shortcut's thresholds: as dotnet-monitor's `ToEventCounterOptions`, the default
/// GreaterThan applies only when neither bound is given.
fn shortcut(
    settings: &Node<'_>,
    defaults: &RuleDefaults,
    counter: &str,
    max: f64,
    greater_than_default: f64,
) -> Result<TriggerKind> {
    let greater_than = ranged(&settings.child("GreaterThan"), 0.0, max)?;
    let less_than = ranged(&settings.child("LessThan"), 0.0, max)?;
    if let (Some(g), Some(l)) = (greater_than, less_than) {
        if g > l {
            return Err(invalid(
                settings,
                "The value of field GreaterThan must be less than the value of field LessThan."
                    .into(),
            ));
        }
    }
    let threshold = Threshold {
        greater_than: if less_than.is_some() {
            greater_than
        } else {
            Some(greater_than.unwrap_or(greater_than_default))
        },
        less_than,
    };
    Ok(TriggerKind::EventCounter(EventCounterTrigger {
        provider_name: SYSTEM_RUNTIME.into(),
        counter_name: counter.into(),
        threshold,
        sliding_window: sliding_window(settings, defaults)?,
    }))
}

fn paths(settings: &Node<'_>) -> Result<PathFilters> {
    Ok(PathFilters {
        include: settings.child("IncludePaths").strings()?,
        exclude: settings.child("ExcludePaths").strings()?,
    })
}

fn count(settings: &Node<'_>, key: &str, default: Option<u32>, missing: &str) -> Result<u32> {
    let node = settings.child(key);
    match node
        .int(1, i64::from(i32::MAX))?
        .map(|v| v as u32)
        .or(default)
    {
        Some(v) => Ok(v),
        None => Err(invalid(&node, missing.into())),
    }
}

const NO_REQUEST_COUNT: &str =
    "A request count must be specified if there is no default request count.";

/// Parses `"404"` or `"400-499"` (dotnet-monitor's `[1-5][0-9]{2}(-[1-5][0-9]{2})?`, with
/// min not above max).
fn status_range(node: &Node<'_>) -> Result<(u16, u16)> {
    let text = node.required_string()?;
    let code = |s: &str| -> Option<u16> {
        let b = s.as_bytes();
        if b.len() == 3 && (b'1'..=b'5').contains(&b[0]) && b[1..].iter().all(u8::is_ascii_digit) {
            s.parse().ok()
        } else {
            None
        }
    };
    let parsed = match text.split_once('-') {
        Some((a, b)) => code(a).and_then(|a| code(b).map(|b| (a, b))),
        None => code(&text).map(|c| (c, c)),
    };
    match parsed {
        Some((min, max)) if min <= max => Ok((min, max)),
        Some(_) => Err(invalid(node, "Min cannot be greater than Max".into())),
        None => Err(invalid(
            node,
            "The field StatusCodes must be a status code or status code range between 1xx and 5xx. E.g. 200, 400-500."
                .into(),
        )),
    }
}

impl Trigger {
    /// Reads a `Trigger` section (`Type` and `Settings`), with `CollectionRuleDefaults`.
    pub fn parse(node: &Node<'_>, defaults: &RuleDefaults) -> Result<Trigger> {
        let type_name = match node.child("Type").one_of(TRIGGER_TYPES)? {
            Some(t) => t,
            None => return Err(RuleError::new(node.child("Type").path, ErrorKind::Missing)),
        };
        let s = node.child("Settings");
        let kind = match type_name {
            "Startup" => TriggerKind::Startup,
            "EventCounter" => TriggerKind::EventCounter(EventCounterTrigger {
                provider_name: s.child("ProviderName").required_string()?,
                counter_name: s.child("CounterName").required_string()?,
                threshold: threshold(&s)?,
                sliding_window: sliding_window(&s, defaults)?,
            }),
            "CPUUsage" => shortcut(&s, defaults, "cpu-usage", 100.0, CPU_USAGE_GREATER_THAN)?,
            "GCHeapSize" => shortcut(
                &s,
                defaults,
                "gc-heap-size",
                f64::MAX,
                GC_HEAP_SIZE_GREATER_THAN,
            )?,
            "ThreadpoolQueueLength" => shortcut(
                &s,
                defaults,
                "threadpool-queue-length",
                f64::MAX,
                THREADPOOL_QUEUE_LENGTH_GREATER_THAN,
            )?,
            "EventMeter" => TriggerKind::EventMeter(EventMeterTrigger {
                meter_name: s.child("MeterName").required_string()?,
                instrument_name: s.child("InstrumentName").required_string()?,
                threshold: threshold(&s)?,
                histogram_percentile: s.child("HistogramPercentile").int(0, 100)?.map(|p| p as u8),
                sliding_window: sliding_window(&s, defaults)?,
            }),
            "AspNetRequestCount" => TriggerKind::AspNetRequestCount(AspNetRequestCountTrigger {
                request_count: count(&s, "RequestCount", defaults.request_count, NO_REQUEST_COUNT)?,
                sliding_window: sliding_window(&s, defaults)?,
                paths: paths(&s)?,
            }),
            "AspNetRequestDuration" => {
                TriggerKind::AspNetRequestDuration(AspNetRequestDurationTrigger {
                    request_count: count(
                        &s,
                        "RequestCount",
                        defaults.request_count,
                        NO_REQUEST_COUNT,
                    )?,
                    request_duration: s
                        .child("RequestDuration")
                        .timespan(Duration::ZERO, MAX_REQUEST_DURATION)?
                        .unwrap_or(DEFAULT_REQUEST_DURATION),
                    sliding_window: sliding_window(&s, defaults)?,
                    paths: paths(&s)?,
                })
            }
            _ => {
                let codes = s.child("StatusCodes");
                let items = codes.list()?;
                if items.is_empty() {
                    return Err(RuleError::new(codes.path, ErrorKind::Missing));
                }
                let mut status_codes = Vec::with_capacity(items.len());
                for item in &items {
                    status_codes.push(status_range(item)?);
                }
                TriggerKind::AspNetResponseStatus(AspNetResponseStatusTrigger {
                    status_codes,
                    response_count: count(
                        &s,
                        "ResponseCount",
                        defaults.response_count,
                        "A response count must be specified if there is no default response count.",
                    )?,
                    sliding_window: sliding_window(&s, defaults)?,
                    paths: paths(&s)?,
                })
            }
        };
        Ok(Trigger { type_name, kind })
    }
}

#[cfg(test)]
mod tests {
    use super::Threshold;

    #[test]
    fn thresholds_are_strict_as_dotnet_monitor_value_filters() {
        let above = Threshold {
            greater_than: Some(60.0),
            less_than: None,
        };
        assert!(!above.passes(60.0));
        assert!(above.passes(60.5));
        let below = Threshold {
            greater_than: None,
            less_than: Some(10.0),
        };
        assert!(!below.passes(10.0));
        assert!(below.passes(9.9));
        let between = Threshold {
            greater_than: Some(1.0),
            less_than: Some(2.0),
        };
        assert!(between.passes(1.5));
        assert!(!between.passes(1.0) && !between.passes(2.0) && !between.passes(3.0));
    }
}
