//! A rule's process `Filters`: the same descriptors as dotnet-monitor's `DefaultProcess`
//! (`Key`/`Value`/`MatchType`, or the short form `{"ProcessName": "x"}`), matched without case.

use super::value::{ErrorKind, Node, Result, RuleError};

/// What a filter compares (dotnet-monitor's `ProcessFilterKey`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterKey {
    /// The process id, compared exactly.
    ProcessId,
    /// The process name.
    ProcessName,
    /// The process's command line.
    CommandLine,
    /// The managed entry point assembly's name.
    ManagedEntryPointAssemblyName,
}

/// How a filter compares (dotnet-monitor's `ProcessFilterType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchType {
    /// The whole value, without case.
    Exact,
    /// A substring, without case.
    Contains,
}

/// One process filter of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessFilter {
    /// What is compared.
    pub key: FilterKey,
    /// The value compared with.
    pub value: String,
    /// How (a process id is always compared exactly).
    pub match_type: MatchType,
}

/// What the engine knows of a process, for filters and for `$(Process.*)` tokens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessInfo {
    /// The process id.
    pub pid: u32,
    /// The runtime instance cookie, as a GUID's "D" form.
    pub runtime_id: String,
    /// The process name.
    pub name: String,
    /// The command line.
    pub command_line: String,
    /// The managed entry point assembly's name, when known.
    pub entry_point_assembly: Option<String>,
}

const KEYS: &[&str] = &[
    "ProcessId",
    "ProcessName",
    "CommandLine",
    "ManagedEntryPointAssemblyName",
];
const MATCH_TYPES: &[&str] = &["Exact", "Contains"];

fn key_of(name: &str) -> FilterKey {
    match name {
        "ProcessId" => FilterKey::ProcessId,
        "ProcessName" => FilterKey::ProcessName,
        "CommandLine" => FilterKey::CommandLine,
        _ => FilterKey::ManagedEntryPointAssemblyName,
    }
}

impl ProcessFilter {
    /// Reads one filter descriptor. As dotnet-monitor's `DiagProcessFilter`, a short-form
    /// property (`ProcessId`, then `ProcessName`, `CommandLine`,
    /// `ManagedEntryPointAssemblyName`) wins over `Key`/`Value`.
    pub fn parse(node: &Node<'_>) -> Result<ProcessFilter> {
        if node.exists() && node.value.map_or(false, |v| !v.is_object()) {
            return Err(node.wrong("a process filter (Key, Value, MatchType)"));
        }
        let match_type = match node.child("MatchType").one_of(MATCH_TYPES)? {
            Some("Contains") => MatchType::Contains,
            _ => MatchType::Exact,
        };
        for short in KEYS {
            if let Some(value) = node.child(short).string()? {
                if !value.trim().is_empty() {
                    let key = key_of(short);
                    return Ok(ProcessFilter {
                        key,
                        value,
                        match_type: if key == FilterKey::ProcessId {
                            MatchType::Exact
                        } else {
                            match_type
                        },
                    });
                }
            }
        }
        let value = match node.child("Value").string()? {
            Some(v) if !v.trim().is_empty() => v,
            _ => {
                return Err(RuleError::new(
                    node.path.clone(),
                    ErrorKind::Invalid("A value is required for the process filter.".into()),
                ))
            }
        };
        // `Key` defaults to the enum's first member, ProcessId, as the binder leaves it.
        let key = key_of(node.child("Key").one_of(KEYS)?.unwrap_or("ProcessId"));
        Ok(ProcessFilter {
            key,
            value,
            match_type: if key == FilterKey::ProcessId {
                MatchType::Exact
            } else {
                match_type
            },
        })
    }

    /// Whether `process` passes this filter.
    pub fn matches(&self, process: &ProcessInfo) -> bool {
        let pid;
        let subject: Option<&str> = match self.key {
            FilterKey::ProcessId => {
                pid = process.pid.to_string();
                Some(&pid)
            }
            FilterKey::ProcessName => Some(&process.name),
            FilterKey::CommandLine => Some(&process.command_line),
            FilterKey::ManagedEntryPointAssemblyName => process.entry_point_assembly.as_deref(),
        };
        let subject = match subject {
            Some(s) => s,
            None => return false,
        };
        match self.match_type {
            MatchType::Exact => subject.to_lowercase() == self.value.to_lowercase(),
            MatchType::Contains => subject.to_lowercase().contains(&self.value.to_lowercase()),
        }
    }
}

/// Whether `process` passes every filter (no filter: every process).
pub fn matches_all(filters: &[ProcessFilter], process: &ProcessInfo) -> bool {
    filters.iter().all(|f| f.matches(process))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn process() -> ProcessInfo {
        ProcessInfo {
            pid: 12345,
            runtime_id: "00000000-0000-0000-0000-000000000001".into(),
            name: "dotnet".into(),
            command_line: "dotnet MyApp.dll --urls http://+:80".into(),
            entry_point_assembly: Some("MyApp".into()),
        }
    }

    #[test]
    fn filters_key_value_and_short_form_match_without_case() {
        let v = json!([
            {"Key": "ProcessName", "Value": "DOTNET", "MatchType": "Exact"},
            {"CommandLine": "myapp.dll", "MatchType": "Contains"},
            {"Key": "ProcessId", "Value": "12345"}
        ]);
        let node = Node::root(&v, "Filters");
        let filters: Vec<ProcessFilter> = node
            .list()
            .unwrap()
            .iter()
            .map(|n| ProcessFilter::parse(n).unwrap())
            .collect();
        assert_eq!(filters[1].key, FilterKey::CommandLine);
        assert!(matches_all(&filters, &process()));
        let mut other = process();
        other.pid = 1;
        assert!(!matches_all(&filters, &other));
        let exact = ProcessFilter {
            key: FilterKey::ProcessName,
            value: "dot".into(),
            match_type: MatchType::Exact,
        };
        assert!(!exact.matches(&process()));
    }

    #[test]
    fn filters_without_a_value_name_their_key() {
        let v = json!({"Key": "ProcessName"});
        let err = ProcessFilter::parse(&Node::root(&v, "CollectionRules:R:Filters:0")).unwrap_err();
        assert_eq!(err.path, "CollectionRules:R:Filters:0");
        let v = json!({"Key": "Bogus", "Value": "x"});
        let err = ProcessFilter::parse(&Node::root(&v, "F:0")).unwrap_err();
        assert_eq!(err.path, "F:0:Key");
    }
}
