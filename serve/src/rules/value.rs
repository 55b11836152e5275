//! Reading a configuration subtree with .NET configuration semantics: keys compare without
//! case, every leaf may be a string (`"true"`, `"5"`, `"00:01:00"`), an array may arrive as
//! an object keyed `"0"`, `"1"`, ... Every error names the key path (`A:B:C`, .NET's form).

use std::cell::RefCell;
use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use serde_json::Value;

/// What is wrong with one key of a collection rule's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// A required key is absent (or empty).
    Missing,
    /// The value has the wrong type: `expected` says what was wanted.
    WrongType {
        /// What the key should hold ("a number", "a TimeSpan such as \"00:01:00\"", ...).
        expected: &'static str,
    },
    /// The value is outside its allowed range.
    OutOfRange {
        /// The smallest allowed value, as configuration writes it.
        min: String,
        /// The largest allowed value, as configuration writes it.
        max: String,
    },
    /// A name that is not one of the allowed values (trigger or action type, enum member).
    Unknown {
        /// The allowed values.
        allowed: &'static [&'static str],
    },
    /// A template the rule names is not defined under `Templates`.
    TemplateNotFound(String),
    /// A rule-level check failed (dotnet-monitor's validation message).
    Invalid(String),
}

/// A configuration error of a collection rule, naming the key it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError {
    /// The key path, `CollectionRules:HighCpu:Trigger:Settings:GreaterThan`.
    pub path: String,
    /// What is wrong with it.
    pub kind: ErrorKind,
}

impl RuleError {
    /// An error about `path`.
    pub fn new(path: impl Into<String>, kind: ErrorKind) -> RuleError {
        RuleError {
            path: path.into(),
            kind,
        }
    }
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::Missing => write!(f, "{}: a value is required", self.path),
            ErrorKind::WrongType { expected } => {
                write!(f, "{}: the value must be {}", self.path, expected)
            }
            ErrorKind::OutOfRange { min, max } => write!(
                f,
                "{}: the value must be between {} and {}",
                self.path, min, max
            ),
            ErrorKind::Unknown { allowed } => write!(
                f,
                "{}: the value must be one of {}",
                self.path,
                allowed.join(", ")
            ),
            ErrorKind::TemplateNotFound(name) => write!(
                f,
                "{}: Could not find a template with the name: {}",
                self.path, name
            ),
            ErrorKind::Invalid(message) => write!(f, "{}: {}", self.path, message),
        }
    }
}

impl std::error::Error for RuleError {}

/// The result of reading one key.
pub type Result<T> = std::result::Result<T, RuleError>;

/// The key paths a parse read (lowercased), to tell the keys it did not know.
pub type Seen = RefCell<BTreeSet<String>>;

/// A node of the configuration tree and the key path that leads to it (paths are built as
/// the tree is walked).
#[derive(Debug, Clone)]
pub struct Node<'a> {
    /// The value, `None` when the key is absent.
    pub value: Option<&'a Value>,
    /// The key path.
    pub path: String,
    seen: Option<&'a Seen>,
}

impl<'a> Node<'a> {
    /// The root of a subtree whose own key path is `path`.
    pub fn root(value: &'a Value, path: &str) -> Node<'a> {
        Node {
            value: Some(value),
            path: path.to_string(),
            seen: None,
        }
    }

    /// A node whose reads, and its descendants', are recorded in `seen`.
    pub fn tracked(value: Option<&'a Value>, path: &str, seen: &'a Seen) -> Node<'a> {
        Node {
            value,
            path: path.to_string(),
            seen: Some(seen),
        }
    }

    /// A descendant at `path` (recorded as read when present).
    fn at(&self, value: Option<&'a Value>, path: String) -> Node<'a> {
        let value = value.filter(|v| !v.is_null());
        if let (Some(seen), Some(_)) = (self.seen, value) {
            seen.borrow_mut().insert(path.to_lowercase());
        }
        Node {
            value,
            path,
            seen: self.seen,
        }
    }

    /// The child `key`, compared without case as .NET configuration does.
    pub fn child(&self, key: &str) -> Node<'a> {
        let value = match self.value {
            Some(Value::Object(map)) => map
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v),
            _ => None,
        };
        self.at(value, join(&self.path, key))
    }

    /// Whether the key is present (not null, not an empty string).
    pub fn exists(&self) -> bool {
        match self.value {
            None | Some(Value::Null) => false,
            Some(Value::String(s)) => !s.is_empty(),
            Some(_) => true,
        }
    }

    /// Whether the node is a leaf value (a string, number or bool), as a template reference is.
    pub fn leaf_text(&self) -> Option<String> {
        match self.value {
            Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            Some(Value::Bool(b)) => Some(b.to_string()),
            _ => None,
        }
    }

    /// The items of a list: a JSON array, or an object keyed "0", "1", ... (environment
    /// variables and key-per-file give lists that way), in index order. Absent is empty.
    pub fn list(&self) -> Result<Vec<Node<'a>>> {
        match self.value {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::String(s)) if s.is_empty() => Ok(Vec::new()),
            Some(Value::Array(items)) => Ok(items
                .iter()
                .enumerate()
                .map(|(i, v)| self.at(Some(v), join(&self.path, &i.to_string())))
                .collect()),
            Some(Value::Object(map)) => {
                let mut items = Vec::with_capacity(map.len());
                for (k, v) in map {
                    let index: usize = k.trim().parse().map_err(|_| {
                        RuleError::new(
                            join(&self.path, k),
                            ErrorKind::WrongType {
                                expected: "a list item (keys 0, 1, 2...)",
                            },
                        )
                    })?;
                    items.push((index, k, v));
                }
                items.sort_by_key(|(i, _, _)| *i);
                Ok(items
                    .into_iter()
                    .map(|(_, k, v)| self.at(Some(v), join(&self.path, k)))
                    .collect())
            }
            Some(_) => Err(self.wrong("a list")),
        }
    }

    /// The children of an object as (key, node), in the tree's order.
    pub fn entries(&self) -> Result<Vec<(String, Node<'a>)>> {
        match self.value {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::String(s)) if s.is_empty() => Ok(Vec::new()),
            Some(Value::Object(map)) => Ok(map
                .iter()
                .map(|(k, v)| (k.clone(), self.at(Some(v), join(&self.path, k))))
                .collect()),
            Some(_) => Err(self.wrong("a section (an object)")),
        }
    }

    /// An error of the wrong type for this key.
    pub fn wrong(&self, expected: &'static str) -> RuleError {
        RuleError::new(self.path.clone(), ErrorKind::WrongType { expected })
    }

    /// A string leaf (a number or bool is taken as its text, as configuration does); absent
    /// or empty is `None`.
    pub fn string(&self) -> Result<Option<String>> {
        match self.value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(_) => self
                .leaf_text()
                .map(Some)
                .ok_or_else(|| self.wrong("a string")),
        }
    }

    /// A required string leaf.
    pub fn required_string(&self) -> Result<String> {
        self.string()?
            .ok_or_else(|| RuleError::new(self.path.clone(), ErrorKind::Missing))
    }

    /// A number (double.Parse with the invariant culture: surrounding blanks allowed).
    pub fn f64(&self) -> Result<Option<f64>> {
        let parsed = match self.value {
            Some(Value::Number(n)) => n.as_f64(),
            Some(Value::String(s)) if s.trim().is_empty() => return Ok(None),
            Some(Value::String(s)) => s.trim().parse::<f64>().ok(),
            None | Some(Value::Null) => return Ok(None),
            Some(_) => None,
        };
        match parsed {
            Some(v) if v.is_finite() => Ok(Some(v)),
            _ => Err(self.wrong("a number")),
        }
    }

    /// An integer (int.Parse: optional sign, digits, surrounding blanks), within `min..=max`.
    pub fn int(&self, min: i64, max: i64) -> Result<Option<i64>> {
        let parsed = match self.value {
            Some(Value::Number(n)) => n.as_i64(),
            Some(Value::String(s)) if s.trim().is_empty() => return Ok(None),
            Some(Value::String(s)) => s.trim().parse::<i64>().ok(),
            None | Some(Value::Null) => return Ok(None),
            Some(_) => None,
        };
        let v = parsed.ok_or_else(|| self.wrong("an integer"))?;
        if v < min || v > max {
            return Err(RuleError::new(
                self.path.clone(),
                ErrorKind::OutOfRange {
                    min: min.to_string(),
                    max: max.to_string(),
                },
            ));
        }
        Ok(Some(v))
    }

    /// A bool (bool.Parse: "true"/"false" in any case).
    pub fn bool(&self) -> Result<Option<bool>> {
        match self.value {
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
            Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("true") => Ok(Some(true)),
            Some(Value::String(s)) if s.trim().eq_ignore_ascii_case("false") => Ok(Some(false)),
            None | Some(Value::Null) => Ok(None),
            Some(_) => Err(self.wrong("true or false")),
        }
    }

    /// A TimeSpan (`"00:01:00"`, `"1.00:00:00"`, a whole number of days) within `min..=max`.
    pub fn timespan(&self, min: Duration, max: Duration) -> Result<Option<Duration>> {
        let text = match self.string() {
            Ok(Some(t)) => t,
            Ok(None) => return Ok(None),
            Err(_) => return Err(self.wrong(TIMESPAN_EXPECTED)),
        };
        let d = parse_timespan(&text).ok_or_else(|| self.wrong(TIMESPAN_EXPECTED))?;
        if d < min || d > max {
            return Err(RuleError::new(
                self.path.clone(),
                ErrorKind::OutOfRange {
                    min: format_timespan(min),
                    max: format_timespan(max),
                },
            ));
        }
        Ok(Some(d))
    }

    /// One of `allowed` (compared without case, as the configuration binder's Enum.Parse);
    /// returns the allowed spelling.
    pub fn one_of(&self, allowed: &'static [&'static str]) -> Result<Option<&'static str>> {
        match self.string()? {
            None => Ok(None),
            Some(text) => allowed
                .iter()
                .find(|a| a.eq_ignore_ascii_case(text.trim()))
                .copied()
                .map(Some)
                .ok_or_else(|| RuleError::new(self.path.clone(), ErrorKind::Unknown { allowed })),
        }
    }

    /// A list of strings (`IncludePaths`, `StatusCodes`); absent is `None`.
    pub fn strings(&self) -> Result<Option<Vec<String>>> {
        if !self.exists() {
            return Ok(None);
        }
        let mut out = Vec::new();
        for item in self.list()? {
            out.push(item.required_string()?);
        }
        Ok(Some(out))
    }
}

const TIMESPAN_EXPECTED: &str = "a TimeSpan such as \"00:01:00\" ([d.]hh:mm[:ss[.fffffff]])";

/// The keys under `value` (at `path`) that no parse read, given what it read in `seen`:
/// the outermost unread key of each branch, in the tree's order.
pub fn unread_keys(value: &Value, path: &str, seen: &BTreeSet<String>, out: &mut Vec<String>) {
    let children: Vec<(String, &Value)> = match value {
        Value::Object(map) => map.iter().map(|(k, v)| (join(path, k), v)).collect(),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| (join(path, &i.to_string()), v))
            .collect(),
        _ => return,
    };
    for (child, v) in children {
        if v.is_null() {
            continue;
        }
        if seen.contains(&child.to_lowercase()) {
            unread_keys(v, &child, seen, out);
        } else {
            out.push(child);
        }
    }
}

/// Appends `key` to a configuration path with .NET's `:` separator.
pub fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{}:{}", path, key)
    }
}

/// Parses a .NET TimeSpan as configuration writes it: `[d.]hh:mm[:ss[.fffffff]]`,
/// `d:hh:mm:ss[.fffffff]` or a whole number of days. Negative spans are refused (no
/// collection-rule duration may be negative).
pub fn parse_timespan(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text.is_empty() || text.starts_with('-') {
        return None;
    }
    let digits = |s: &str, max: u64| -> Option<u64> {
        if s.is_empty() || s.len() > 10 || !s.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse::<u64>().ok().filter(|v| *v <= max)
    };
    // Days are bounded by TimeSpan.MaxValue (10,675,199 days).
    const MAX_DAYS: u64 = 10_675_199;
    let parts: Vec<&str> = text.split(':').collect();
    let (days, hours, minutes, seconds) = match parts.len() {
        1 => return digits(parts[0], MAX_DAYS).map(|d| Duration::from_secs(d * 86_400)),
        2 | 3 => {
            let (days, hours) = match parts[0].split_once('.') {
                Some((d, h)) => (digits(d, MAX_DAYS)?, h),
                None => (0, parts[0]),
            };
            (days, hours, parts[1], parts.get(2).copied().unwrap_or("0"))
        }
        4 => (digits(parts[0], MAX_DAYS)?, parts[1], parts[2], parts[3]),
        _ => return None,
    };
    let hours = digits(hours, 23)?;
    let minutes = digits(minutes, 59)?;
    let (whole, fraction) = match seconds.split_once('.') {
        Some((s, f)) => (s, Some(f)),
        None => (seconds, None),
    };
    let whole = digits(whole, 59)?;
    let nanos = match fraction {
        None => 0,
        // At most 7 digits: a TimeSpan's resolution is a tick (100 ns).
        Some(f) if !f.is_empty() && f.len() <= 7 && f.bytes().all(|b| b.is_ascii_digit()) => {
            let padded = format!("{:0<9}", f);
            padded.parse::<u32>().ok()?
        }
        Some(_) => return None,
    };
    let secs = days * 86_400 + hours * 3_600 + minutes * 60 + whole;
    Some(Duration::new(secs, nanos))
}

/// Writes a duration as .NET's TimeSpan "c" format (`[d.]hh:mm:ss[.fffffff]`), the way
/// System.Text.Json writes a TimeSpan.
pub fn format_timespan(d: Duration) -> String {
    let secs = d.as_secs();
    let days = secs / 86_400;
    let rest = secs % 86_400;
    let mut out = String::new();
    if days > 0 {
        out.push_str(&format!("{}.", days));
    }
    out.push_str(&format!(
        "{:02}:{:02}:{:02}",
        rest / 3_600,
        (rest % 3_600) / 60,
        rest % 60
    ));
    let ticks = d.subsec_nanos() / 100;
    if ticks > 0 {
        out.push_str(&format!(".{:07}", ticks));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn timespan_parses_dotnet_forms() {
        assert_eq!(parse_timespan("00:01:00"), Some(Duration::from_secs(60)));
        assert_eq!(
            parse_timespan("1.00:00:00"),
            Some(Duration::from_secs(86_400))
        );
        assert_eq!(
            parse_timespan("365.00:00:00"),
            Some(Duration::from_secs(365 * 86_400))
        );
        assert_eq!(parse_timespan("2"), Some(Duration::from_secs(2 * 86_400)));
        assert_eq!(parse_timespan("01:30"), Some(Duration::from_secs(5_400)));
        assert_eq!(
            parse_timespan("00:00:01.5"),
            Some(Duration::from_millis(1_500))
        );
        assert_eq!(
            parse_timespan("1:02:03:04"),
            Some(Duration::from_secs(93_784))
        );
        for bad in [
            "",
            "-00:00:01",
            "00:60:00",
            "24:00:00",
            "abc",
            "00:00:01.12345678",
        ] {
            assert_eq!(parse_timespan(bad), None, "{:?}", bad);
        }
    }

    #[test]
    fn timespan_formats_as_dotnet_c_format() {
        assert_eq!(format_timespan(Duration::from_secs(30)), "00:00:30");
        assert_eq!(
            format_timespan(Duration::from_secs(86_400 + 61)),
            "1.00:01:01"
        );
        assert_eq!(
            format_timespan(Duration::from_millis(1_500)),
            "00:00:01.5000000"
        );
    }

    #[test]
    fn keys_compare_without_case_and_leaves_may_be_strings() {
        let v = json!({"greaterthan": "5", "FLAG": "True", "n": 3});
        let root = Node::root(&v, "R");
        assert_eq!(root.child("GreaterThan").f64().unwrap(), Some(5.0));
        assert_eq!(root.child("Flag").bool().unwrap(), Some(true));
        assert_eq!(root.child("N").int(0, 10).unwrap(), Some(3));
        let err = root.child("N").int(5, 10).unwrap_err();
        assert_eq!(err.path, "R:N");
    }

    #[test]
    fn lists_arrive_as_arrays_or_as_indexed_objects() {
        let v = json!({"a": ["x", "y"], "b": {"10": "z", "2": "y", "0": "x"}});
        let root = Node::root(&v, "");
        let a: Vec<String> = root.child("a").strings().unwrap().unwrap();
        let b: Vec<String> = root.child("b").strings().unwrap().unwrap();
        assert_eq!(a, ["x", "y"]);
        assert_eq!(b, ["x", "y", "z"]);
        let bad = json!({"c": {"zero": "x"}});
        assert_eq!(
            Node::root(&bad, "").child("c").list().unwrap_err().path,
            "c:zero"
        );
    }
}
