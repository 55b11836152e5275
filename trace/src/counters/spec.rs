//! dotnet-counters' counter list syntax: `System.Runtime[cpu-usage,gc-heap-size],MyMeter`.

use std::fmt;

/// One provider (an EventSource or a Meter) and the counters wanted from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderCounters {
    /// Provider (EventSource) or Meter name.
    pub name: String,
    /// The counters wanted, or `None` for all of them.
    pub counters: Option<Vec<String>>,
}

/// The counters a session asks for: providers, each with all or some of its counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterSet {
    providers: Vec<ProviderCounters>,
}

/// A counter list that does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    /// What is wrong.
    pub reason: &'static str,
    /// Byte offset in the list where it was found.
    pub offset: usize,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "counter list: {} (at byte {})", self.reason, self.offset)
    }
}

impl std::error::Error for SpecError {}

/// Most providers a list may name (each becomes an EventPipe provider).
pub const MAX_PROVIDERS: usize = 256;

impl Default for CounterSet {
    /// dotnet-counters' default: every `System.Runtime` counter.
    fn default() -> Self {
        CounterSet {
            providers: vec![ProviderCounters {
                name: "System.Runtime".into(),
                counters: None,
            }],
        }
    }
}

impl CounterSet {
    /// No provider at all: for a session that enables other providers only (their events
    /// decoded by a sink beside the counters').
    pub fn empty() -> CounterSet {
        CounterSet {
            providers: Vec::new(),
        }
    }

    /// Parses `Provider[counter,counter],Provider,...` (spaces around names are ignored).
    pub fn parse(list: &str) -> Result<CounterSet, SpecError> {
        let mut providers: Vec<ProviderCounters> = Vec::new();
        let bytes = list.as_bytes();
        let mut i = 0;
        loop {
            // One provider: name up to '[' or ',' or end.
            while i < bytes.len() && bytes[i] == b' ' {
                i += 1;
            }
            let start = i;
            while i < bytes.len() && bytes[i] != b'[' && bytes[i] != b',' {
                if bytes[i] == b']' {
                    return Err(SpecError {
                        reason: "']' without '['",
                        offset: i,
                    });
                }
                i += 1;
            }
            let name = list[start..i].trim();
            if name.is_empty() {
                return Err(SpecError {
                    reason: "empty provider name",
                    offset: start,
                });
            }
            let mut counters = None;
            if i < bytes.len() && bytes[i] == b'[' {
                let open = i;
                i += 1;
                let inner_start = i;
                while i < bytes.len() && bytes[i] != b']' {
                    if bytes[i] == b'[' {
                        return Err(SpecError {
                            reason: "'[' inside a counter list",
                            offset: i,
                        });
                    }
                    i += 1;
                }
                if i == bytes.len() {
                    return Err(SpecError {
                        reason: "'[' without closing ']'",
                        offset: open,
                    });
                }
                let names: Vec<String> = list[inner_start..i]
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect();
                if names.is_empty() {
                    return Err(SpecError {
                        reason: "empty counter list",
                        offset: open,
                    });
                }
                counters = Some(names);
                i += 1; // ']'
                while i < bytes.len() && bytes[i] == b' ' {
                    i += 1;
                }
                if i < bytes.len() && bytes[i] != b',' {
                    return Err(SpecError {
                        reason: "unexpected characters after ']'",
                        offset: i,
                    });
                }
            }
            add(&mut providers, name, counters);
            if providers.len() > MAX_PROVIDERS {
                return Err(SpecError {
                    reason: "too many providers",
                    offset: start,
                });
            }
            if i >= bytes.len() {
                break;
            }
            i += 1; // ','
        }
        Ok(CounterSet { providers })
    }

    /// The providers, in the order given.
    pub fn providers(&self) -> &[ProviderCounters] {
        &self.providers
    }

    /// True if `counter` of `provider` is wanted (names compare ASCII case-insensitively).
    pub fn includes(&self, provider: &str, counter: &str) -> bool {
        self.providers
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(provider))
            .map_or(false, |p| match &p.counters {
                None => true,
                Some(list) => list.iter().any(|c| c.eq_ignore_ascii_case(counter)),
            })
    }

    /// True if any counter of `provider` is wanted.
    pub fn has_provider(&self, provider: &str) -> bool {
        self.providers
            .iter()
            .any(|p| p.name.eq_ignore_ascii_case(provider))
    }

    /// The `Metrics` argument of System.Diagnostics.Metrics: `Meter` for a whole meter,
    /// `Meter\instrument` for one instrument, comma-separated.
    pub fn metrics_argument(&self) -> String {
        let mut out = String::new();
        for p in &self.providers {
            match &p.counters {
                None => push_item(&mut out, &p.name),
                Some(list) => {
                    for c in list {
                        push_item(&mut out, &format!("{}\\{}", p.name, c));
                    }
                }
            }
        }
        out
    }
}

fn push_item(out: &mut String, item: &str) {
    if !out.is_empty() {
        out.push(',');
    }
    out.push_str(item);
}

/// Merges a provider named twice: all counters win over a list; lists are joined.
fn add(providers: &mut Vec<ProviderCounters>, name: &str, counters: Option<Vec<String>>) {
    if let Some(p) = providers
        .iter_mut()
        .find(|p| p.name.eq_ignore_ascii_case(name))
    {
        match (&mut p.counters, counters) {
            (Some(existing), Some(more)) => {
                for c in more {
                    if !existing.iter().any(|e| e.eq_ignore_ascii_case(&c)) {
                        existing.push(c);
                    }
                }
            }
            (slot, _) => *slot = None,
        }
        return;
    }
    providers.push(ProviderCounters {
        name: name.to_string(),
        counters,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_dotnet_counters_lists() {
        let s = CounterSet::parse("System.Runtime[cpu-usage, gc-heap-size],MyMeter").unwrap();
        assert_eq!(s.providers().len(), 2);
        assert!(s.includes("System.Runtime", "cpu-usage"));
        assert!(s.includes("system.runtime", "gc-heap-size"));
        assert!(!s.includes("System.Runtime", "working-set"));
        assert!(s.includes("MyMeter", "anything"));
        assert!(!s.includes("Other", "x"));
        assert_eq!(
            s.metrics_argument(),
            "System.Runtime\\cpu-usage,System.Runtime\\gc-heap-size,MyMeter"
        );
        let merged = CounterSet::parse("A[x],A[y],B[z],B").unwrap();
        assert_eq!(
            merged.providers()[0].counters,
            Some(vec!["x".to_string(), "y".to_string()])
        );
        assert_eq!(merged.providers()[1].counters, None);
    }

    #[test]
    fn rejects_bad_lists_with_offsets() {
        for (bad, offset) in [
            ("", 0),
            ("A,,B", 2),
            ("A[x", 1),
            ("A[]", 1),
            ("A[x]y", 4),
            ("A]", 1),
            ("A[x[y]]", 3),
            ("A,", 2),
        ] {
            let e = CounterSet::parse(bad).unwrap_err();
            assert_eq!(e.offset, offset, "{:?}: {}", bad, e);
        }
    }
}
