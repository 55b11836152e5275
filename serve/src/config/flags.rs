//! serve's flags as configuration (`dsipc serve --urls URLS --egress NAME=DIR
//! --default-process KEY=VALUE`...): each one keys of dotnet-monitor's configuration set in
//! the command line's layer ([`Sources::command_line`]), which wins over every other
//! source, the flag named as the values' source (`config show --show-sources` says it).

use std::fmt;

use super::{Source, Sources};
use crate::{parse_egress, DefaultFilter, EgressTarget};

/// A flag [`Sources::set_flag`] refused.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FlagError {
    /// Not one of serve's flags that are configuration.
    Unknown(String),
    /// A value the flag does not take; the message names the flag and what it wants.
    BadValue(String),
}

impl fmt::Display for FlagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlagError::Unknown(flag) => write!(f, "{} is not a configuration flag", flag),
            FlagError::BadValue(message) => f.write_str(message),
        }
    }
}

impl std::error::Error for FlagError {}

impl Sources {
    /// Sets what serve's flag `flag`, as typed, says with `value`: `--urls` or `-u`
    /// (`urls`), `--metricUrls` or `--metrics-urls` (`Metrics:Endpoints`), `--no-metrics`
    /// (`Metrics:Enabled` false; no value), `--counter-interval` (in seconds:
    /// `GlobalCounter:IntervalSeconds`), `--dump-temp-folder` (`Storage:DumpTempFolder`),
    /// `--diagnostic-port PATH` (listen mode on PATH, replacing the configured
    /// `DiagnosticPort`), `--egress NAME=DIR[;...]` (file system egress providers) and
    /// `--default-process KEY=VALUE` (filter 0 of `DefaultProcess`, replacing every
    /// configured filter; a command line is matched as a substring). A later flag setting
    /// the same key wins.
    pub fn set_flag(&mut self, flag: &str, value: Option<&str>) -> Result<(), FlagError> {
        let source = Source::CommandLine(flag.to_string());
        let layer = &mut self.command_line;
        let mut set = |key: &str, value: &str| {
            layer.set(key, Some(value.to_string()), source.clone());
        };
        let v = match (flag, value) {
            ("--no-metrics", _) => {
                set("Metrics:Enabled", "False");
                return Ok(());
            }
            (_, Some(v)) => v,
            (_, None) => return Err(FlagError::BadValue(format!("{} wants a value", flag))),
        };
        match flag {
            "--urls" | "-u" => set("urls", v),
            "--metricUrls" | "--metrics-urls" => set("Metrics:Endpoints", v),
            "--counter-interval" => set("GlobalCounter:IntervalSeconds", v),
            "--dump-temp-folder" => set("Storage:DumpTempFolder", v),
            "--diagnostic-port" => {
                set("DiagnosticPort:ConnectionMode", "Listen");
                set("DiagnosticPort:EndpointName", v);
                self.command_line_replaces.push("DiagnosticPort".into());
            }
            "--egress" => {
                for e in parse_egress(v).map_err(FlagError::BadValue)? {
                    if let EgressTarget::FileSystem(dir) = &e.target {
                        let key = format!("Egress:FileSystem:{}:DirectoryPath", e.name);
                        set(&key, &dir.to_string_lossy());
                    }
                }
            }
            "--default-process" => {
                // The flag's own syntax, parsed once: its key (aliases resolved) and match
                // type (the flag's CommandLine is a substring) are the filter's.
                let filter = DefaultFilter::parse(v).map_err(FlagError::BadValue)?;
                let text = v.split_once('=').map_or("", |(_, text)| text);
                let (key, contains) = match filter {
                    DefaultFilter::ProcessId(_) => ("ProcessId", false),
                    DefaultFilter::ProcessName { contains, .. } => ("ProcessName", contains),
                    DefaultFilter::CommandLine { contains, .. } => ("CommandLine", contains),
                };
                set("DefaultProcess:Filters:0:Key", key);
                set("DefaultProcess:Filters:0:Value", text);
                let ty = if contains { "Contains" } else { "Exact" };
                set("DefaultProcess:Filters:0:MatchType", ty);
                self.command_line_replaces.push("DefaultProcess".into());
            }
            other => return Err(FlagError::Unknown(other.to_string())),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::load;
    use super::*;

    #[test]
    fn serve_flags_set_dotnet_monitors_keys_and_win() {
        let mut s = Sources::default();
        s.command_line.set(
            "urls",
            Some("http://localhost:1".into()),
            Source::CommandLine("--urls".into()),
        );
        s.set_flag("-u", Some("http://127.0.0.1:2")).unwrap();
        s.set_flag("--metrics-urls", Some("http://127.0.0.1:3"))
            .unwrap();
        s.set_flag("--no-metrics", None).unwrap();
        s.set_flag("--counter-interval", Some("2.5")).unwrap();
        s.set_flag("--egress", Some("out=/artifacts")).unwrap();
        s.set_flag("--default-process", Some("name=MyApp")).unwrap();
        s.set_flag("--diagnostic-port", Some("/run/port.sock"))
            .unwrap();
        let loaded = load(&s).unwrap();
        let st = &loaded.settings;
        assert_eq!(st.urls.as_deref(), Some("http://127.0.0.1:2"));
        assert_eq!(st.metrics.enabled, Some(false));
        assert_eq!(st.egress.file_system["out"].directory_path, "/artifacts");
        let filters = format!("{:?}", st.default_process);
        assert!(
            filters.contains("ProcessName") && filters.contains("MyApp"),
            "{}",
            filters
        );
        assert!(s
            .command_line_replaces
            .iter()
            .any(|r| r == "DefaultProcess"));
        let sources: Vec<_> = s
            .command_line
            .entries()
            .iter()
            .map(|(k, _, src)| format!("{} {:?}", k, src))
            .collect();
        assert!(
            sources
                .iter()
                .any(|l| l.starts_with("Metrics:Endpoints") && l.contains("--metrics-urls")),
            "{:?}",
            sources
        );
    }

    #[test]
    fn bad_flags_are_refused_with_the_flags_own_words() {
        let mut s = Sources::default();
        let e = s
            .set_flag("--default-process", Some("pid=abc"))
            .unwrap_err();
        assert!(e.to_string().contains("not a process id"), "{}", e);
        let e = s.set_flag("--egress", Some("nodir")).unwrap_err();
        assert!(matches!(e, FlagError::BadValue(_)), "{:?}", e);
        assert_eq!(
            s.set_flag("--urls", None).unwrap_err().to_string(),
            "--urls wants a value"
        );
        assert!(matches!(
            s.set_flag("--level", Some("Full")),
            Err(FlagError::Unknown(_))
        ));
        assert!(s.command_line.is_empty());
    }
}
