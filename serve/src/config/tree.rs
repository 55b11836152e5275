//! The merged configuration: .NET's model of flat `Section:Sub:Key` = value pairs, one
//! set per source, merged in order (a later source's key replaces an earlier one's; keys
//! are case-insensitive), read as a tree of [`Section`]s.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use super::ConfigError;

/// .NET configuration's path separator (`Egress:FileSystem:out:DirectoryPath`).
pub const KEY_DELIMITER: &str = ":";

/// Where a value came from (named in errors, warnings and `config show --show-sources`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Source {
    /// dotnet-monitor's defaults (`urls`, `Metrics:Endpoints`...).
    Defaults,
    /// A JSON settings file.
    JsonFile(PathBuf),
    /// A key-per-file folder's file (a Kubernetes ConfigMap or Secret mounted as files).
    KeyPerFile(PathBuf),
    /// An environment variable (its name).
    Environment(String),
    /// A command-line flag of `dsipc serve` (they win over every other source).
    CommandLine(String),
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Defaults => f.write_str("the defaults"),
            Source::JsonFile(p) => write!(f, "{}", p.display()),
            Source::KeyPerFile(p) => write!(f, "the file {}", p.display()),
            Source::Environment(v) => write!(f, "the environment variable {}", v),
            Source::CommandLine(flag) => write!(f, "the command line's {}", flag),
        }
    }
}

/// One source's pairs, in the order read.
#[derive(Clone, Debug, Default)]
pub struct Layer {
    entries: Vec<(String, Option<String>, Source)>,
}

impl Layer {
    /// An empty layer.
    pub fn new() -> Layer {
        Layer::default()
    }

    /// Sets `key` (`A:B:C`) to `value` (`None`: present with no value, as an empty JSON
    /// object or array is).
    pub fn set(&mut self, key: impl Into<String>, value: Option<String>, source: Source) {
        self.entries.push((key.into(), value, source));
    }

    /// Its pairs.
    pub fn entries(&self) -> &[(String, Option<String>, Source)] {
        &self.entries
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The pairs of every source merged: the last source to set a key wins.
#[derive(Clone, Debug, Default)]
pub struct Merged {
    /// By lowercased key: (the key as last spelled, the value, its source).
    map: BTreeMap<String, (String, Option<String>, Source)>,
}

impl Merged {
    /// Nothing set.
    pub fn new() -> Merged {
        Merged::default()
    }

    /// Adds a layer over what is there.
    pub fn add(&mut self, layer: &Layer) {
        for (k, v, s) in &layer.entries {
            self.map
                .insert(k.to_ascii_lowercase(), (k.clone(), v.clone(), s.clone()));
        }
    }

    /// Removes `section` and everything under it (a flag that replaces a whole section,
    /// such as `--default-process`).
    pub fn remove_section(&mut self, section: &str) {
        let lower = section.to_ascii_lowercase();
        let prefix = format!("{}{}", lower, KEY_DELIMITER);
        self.map
            .retain(|k, _| *k != lower && !k.starts_with(&prefix));
    }

    /// The value of `key` (`A:B:C`), if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.map
            .get(&key.to_ascii_lowercase())
            .and_then(|(_, v, _)| v.as_deref())
    }

    /// The tree of sections.
    pub fn tree(&self) -> Section {
        let mut root = Section::default();
        for (key, value, source) in self.map.values() {
            let mut node = &mut root;
            for segment in key.split(KEY_DELIMITER) {
                let i = match node
                    .children
                    .iter()
                    .position(|c| c.key.eq_ignore_ascii_case(segment))
                {
                    Some(i) => i,
                    None => {
                        let path = if node.path.is_empty() {
                            segment.to_string()
                        } else {
                            format!("{}{}{}", node.path, KEY_DELIMITER, segment)
                        };
                        node.children.push(Section {
                            key: segment.to_string(),
                            path,
                            ..Section::default()
                        });
                        node.children.len() - 1
                    }
                };
                node = &mut node.children[i];
            }
            node.value = value.clone();
            node.source = Some(source.clone());
        }
        root.sort();
        root
    }
}

/// A section of the merged configuration: a key, maybe a value, maybe children (both, as
/// in .NET, when `DiagnosticPort` is a path and also has `DiagnosticPort:MaxConnections`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Section {
    key: String,
    path: String,
    value: Option<String>,
    source: Option<Source>,
    children: Vec<Section>,
}

impl Section {
    /// Its last key (`DirectoryPath`); empty for the root.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Its full path (`Egress:FileSystem:out:DirectoryPath`); empty for the root.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Its value, if it has one.
    pub fn value(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// The source that set its value.
    pub fn source(&self) -> Option<&Source> {
        self.source.as_ref()
    }

    /// Its children, in .NET's order (numbers first, numerically; then names,
    /// case-insensitively).
    pub fn children(&self) -> &[Section] {
        &self.children
    }

    /// Whether it has a value or children (.NET's `Exists()`).
    pub fn exists(&self) -> bool {
        self.value.is_some() || !self.children.is_empty()
    }

    /// The section at `key` (`A:B`, case-insensitive) under this one.
    pub fn get(&self, key: &str) -> Option<&Section> {
        let mut node = self;
        for segment in key.split(KEY_DELIMITER) {
            node = node
                .children
                .iter()
                .find(|c| c.key.eq_ignore_ascii_case(segment))?;
        }
        Some(node)
    }

    /// Whether its children are `0`, `1`, ... in order (a .NET array).
    pub fn is_array(&self) -> bool {
        !self.children.is_empty()
            && self
                .children
                .iter()
                .enumerate()
                .all(|(i, c)| c.key == i.to_string())
    }

    /// As JSON: a value is a string (or null), children an object, children keyed `0`,
    /// `1`, ... an array (so a rule's `Actions` read as a list).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        if self.children.is_empty() {
            return match &self.value {
                Some(v) => Value::String(v.clone()),
                None => Value::Null,
            };
        }
        if self.is_array() {
            Value::Array(self.children.iter().map(Section::to_json).collect())
        } else {
            Value::Object(
                self.children
                    .iter()
                    .map(|c| (c.key.clone(), c.to_json()))
                    .collect(),
            )
        }
    }

    fn sort(&mut self) {
        self.children.sort_by(|a, b| key_order(&a.key, &b.key));
        for c in &mut self.children {
            c.sort();
        }
    }
}

/// .NET's ConfigurationKeyComparer for one segment: integers first, in numeric order,
/// then the rest case-insensitively.
fn key_order(a: &str, b: &str) -> Ordering {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        (Ok(_), Err(_)) => Ordering::Less,
        (Err(_), Ok(_)) => Ordering::Greater,
        _ => a.to_ascii_lowercase().cmp(&b.to_ascii_lowercase()),
    }
}

/// A layer must not set one key twice (JSON `{"a":1,"A":2}`; .NET refuses it too).
pub(crate) fn check_duplicates(layer: &Layer) -> Result<(), ConfigError> {
    let mut seen = std::collections::HashSet::new();
    for (k, _, s) in layer.entries() {
        if !seen.insert(k.to_ascii_lowercase()) {
            return Err(ConfigError::DuplicateKey {
                key: k.clone(),
                source: s.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(pairs: &[(&str, &str)], source: Source) -> Layer {
        let mut l = Layer::new();
        for (k, v) in pairs {
            l.set(*k, Some(v.to_string()), source.clone());
        }
        l
    }

    #[test]
    fn merge_later_source_wins_and_keys_are_case_insensitive() {
        let mut m = Merged::new();
        m.add(&layer(
            &[("Metrics:Enabled", "True"), ("Metrics:MetricCount", "3")],
            Source::Defaults,
        ));
        m.add(&layer(
            &[("METRICS:enabled", "false")],
            Source::Environment("DotnetMonitor_METRICS__enabled".into()),
        ));
        assert_eq!(m.get("metrics:ENABLED"), Some("false"));
        let tree = m.tree();
        let enabled = tree.get("Metrics:Enabled").unwrap();
        assert_eq!(enabled.value(), Some("false"));
        assert_eq!(
            enabled.source(),
            Some(&Source::Environment(
                "DotnetMonitor_METRICS__enabled".into()
            ))
        );
        assert_eq!(tree.get("metrics:metriccount").unwrap().value(), Some("3"));
        assert_eq!(tree.children().len(), 1);
    }

    #[test]
    fn merge_orders_array_indices_numerically_and_reads_them_as_arrays() {
        let mut m = Merged::new();
        let pairs: Vec<(String, String)> = (0..12)
            .map(|i| (format!("A:{}", i), i.to_string()))
            .collect();
        let refs: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        m.add(&layer(&refs, Source::Defaults));
        let tree = m.tree();
        let a = tree.get("a").unwrap();
        assert!(a.is_array());
        let json = a.to_json();
        assert_eq!(json[10], "10");
        assert_eq!(json.as_array().unwrap().len(), 12);
    }

    #[test]
    fn merge_removes_a_replaced_section() {
        let mut m = Merged::new();
        m.add(&layer(
            &[
                ("DefaultProcess:Filters:0:Key", "ProcessName"),
                ("DefaultProcessX", "1"),
            ],
            Source::Defaults,
        ));
        m.remove_section("defaultprocess");
        assert!(m.tree().get("DefaultProcess").is_none());
        assert!(m.tree().get("DefaultProcessX").is_some());
    }
}
