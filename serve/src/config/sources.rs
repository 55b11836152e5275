//! The sources dotnet-monitor reads, each into a [`Layer`]: JSON settings files,
//! environment variables (`__` separates sections) and key-per-file folders.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::tree::{check_duplicates, Layer, Source, KEY_DELIMITER};
use super::ConfigError;

/// dotnet-monitor's environment-variable prefix (`DotnetMonitor_Metrics__Enabled`).
pub const ENV_PREFIX: &str = "DotnetMonitor_";

/// A settings file holds at most this much. dotnet-monitor's settings are a few KiB (the
/// examples of its documentation, with dozens of rules, are under 20 KiB); 4 MiB leaves
/// room for any real one and keeps a wrong path (a log, a dump) from being read whole.
pub const MAX_JSON_FILE: u64 = 4 * 1024 * 1024;

/// A key-per-file file holds at most this much: Kubernetes caps a ConfigMap or Secret at
/// 1 MiB, so no mounted key is larger.
pub const MAX_KEY_FILE: u64 = 1024 * 1024;

/// A key-per-file folder holds at most this many files: a mounted ConfigMap or Secret has
/// one file per key, and no configuration has thousands of keys; a bound keeps a wrong
/// folder (`/`, `/tmp`) from being read whole.
pub const MAX_KEY_FILES: usize = 4096;

/// JSON nests at most this deep: dotnet-monitor's deepest keys
/// (`CollectionRules:R:Actions:0:Settings:Providers:0:Arguments:K`) are 8 deep; serde_json
/// itself stops at 128, this bound keeps key paths short too.
const MAX_DEPTH: usize = 64;

/// The top-level sections dotnet-monitor reads. Environment variables without the
/// `DotnetMonitor_` prefix are read (as dotnet-monitor reads every variable, with lower
/// precedence) only when they start with one of these, so `PATH` or `HOME` are not keys.
pub const TOP_LEVEL: &[&str] = &[
    "urls",
    "Kestrel",
    "Authentication",
    "CollectionRuleDefaults",
    "CollectionRules",
    "CorsConfiguration",
    "DefaultProcess",
    "DiagnosticPort",
    "Egress",
    "GlobalCounter",
    "InProcessFeatures",
    "Logging",
    "Metrics",
    "Storage",
    "Templates",
];

/// Reads a JSON settings file (a missing file is an error: the caller decides whether a
/// file is optional).
pub fn json_file(path: &Path) -> Result<Layer, ConfigError> {
    let bytes = read_bounded(path, MAX_JSON_FILE)?;
    let doc: Value = serde_json::from_slice(&bytes).map_err(|e| ConfigError::Json {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })?;
    json_layer(&doc, Source::JsonFile(path.to_path_buf()), path)
}

/// A JSON document's keys, as .NET's JSON provider reads them: nested objects are
/// sections, arrays are sections keyed `0`, `1`, ...; `true` is `"True"`, numbers their
/// text, `null` an empty string, an empty object or array a key with no value.
pub fn json_layer(doc: &Value, source: Source, path: &Path) -> Result<Layer, ConfigError> {
    let obj = match doc {
        Value::Object(o) => o,
        _ => {
            return Err(ConfigError::Json {
                path: path.to_path_buf(),
                line: 0,
                column: 0,
                message: "the top-level JSON element must be an object".into(),
            })
        }
    };
    let mut layer = Layer::new();
    for (k, v) in obj {
        flatten(k.clone(), v, &source, &mut layer, 1, path)?;
    }
    check_duplicates(&layer)?;
    Ok(layer)
}

fn flatten(
    key: String,
    v: &Value,
    source: &Source,
    layer: &mut Layer,
    depth: usize,
    path: &Path,
) -> Result<(), ConfigError> {
    if depth > MAX_DEPTH {
        return Err(ConfigError::Json {
            path: path.to_path_buf(),
            line: 0,
            column: 0,
            message: format!("{}: nested more than {} deep", key, MAX_DEPTH),
        });
    }
    let child = |k: &str| format!("{}{}{}", key, KEY_DELIMITER, k);
    match v {
        Value::Object(o) if o.is_empty() => layer.set(key, None, source.clone()),
        Value::Array(a) if a.is_empty() => layer.set(key, None, source.clone()),
        Value::Object(o) => {
            for (k, v) in o {
                flatten(child(k), v, source, layer, depth + 1, path)?;
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter().enumerate() {
                flatten(child(&i.to_string()), v, source, layer, depth + 1, path)?;
            }
        }
        Value::String(s) => layer.set(key, Some(s.clone()), source.clone()),
        Value::Bool(true) => layer.set(key, Some("True".into()), source.clone()),
        Value::Bool(false) => layer.set(key, Some("False".into()), source.clone()),
        Value::Number(n) => layer.set(key, Some(n.to_string()), source.clone()),
        Value::Null => layer.set(key, Some(String::new()), source.clone()),
    }
    Ok(())
}

/// Environment variables as .NET's provider reads them: those starting with `prefix`
/// (case-insensitive; the prefix removed), `__` turned into `:`. With an empty prefix only
/// the variables naming a [`TOP_LEVEL`] section are taken.
pub fn environment<I>(vars: I, prefix: &str) -> Layer
where
    I: IntoIterator<Item = (OsString, OsString)>,
{
    let mut layer = Layer::new();
    for (name, value) in vars {
        // A variable that is not Unicode cannot name a key (nor hold a .NET string).
        let (name, value) = match (name.into_string(), value.into_string()) {
            (Ok(n), Ok(v)) => (n, v),
            _ => continue,
        };
        let rest = match name.get(..prefix.len()) {
            Some(p) if p.eq_ignore_ascii_case(prefix) => &name[prefix.len()..],
            _ => continue,
        };
        if rest.is_empty() {
            continue;
        }
        let key = rest.replace("__", KEY_DELIMITER);
        if prefix.is_empty() {
            let top = key.split(KEY_DELIMITER).next().unwrap_or("");
            if !TOP_LEVEL.iter().any(|t| t.eq_ignore_ascii_case(top)) {
                continue;
            }
        }
        layer.set(key, Some(value), Source::Environment(name.clone()));
    }
    layer
}

/// A key-per-file folder as .NET's provider reads it: each file's name is a key (`__`
/// separating sections), its content the value (one trailing newline removed). Files whose
/// names start with `.` are skipped (Kubernetes' `..data` links), as are folders and a
/// `settings.json` (dotnet-monitor reads that one as JSON). A folder that does not exist
/// is an empty layer (dotnet-monitor's is optional).
pub fn key_per_file(dir: &Path) -> Result<Layer, ConfigError> {
    let mut layer = Layer::new();
    let read_err = |error| ConfigError::Read {
        path: dir.to_path_buf(),
        error,
    };
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(layer),
        Err(e) => return Err(read_err(e)),
    };
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    for entry in entries {
        let entry = entry.map_err(read_err)?;
        let name = match entry.file_name().into_string() {
            Ok(n) => n,
            Err(_) => continue,
        };
        if name.starts_with('.') || name.eq_ignore_ascii_case("settings.json") {
            continue;
        }
        // Follows links (a mounted key is a link into `..data`).
        let path = entry.path();
        if !path.is_file() {
            continue;
        }
        if files.len() == MAX_KEY_FILES {
            return Err(ConfigError::TooManyFiles {
                path: dir.to_path_buf(),
                limit: MAX_KEY_FILES,
            });
        }
        files.push((name, path));
    }
    files.sort();
    for (name, path) in files {
        let bytes = read_bounded(&path, MAX_KEY_FILE)?;
        let mut value = String::from_utf8(bytes).map_err(|_| ConfigError::Invalid {
            key: name.replace("__", KEY_DELIMITER),
            source: Some(Source::KeyPerFile(path.clone())),
            message: "the file is not UTF-8 text".into(),
        })?;
        if value.ends_with("\r\n") {
            value.truncate(value.len() - 2);
        } else if value.ends_with('\n') {
            value.truncate(value.len() - 1);
        }
        layer.set(
            name.replace("__", KEY_DELIMITER),
            Some(value),
            Source::KeyPerFile(path),
        );
    }
    check_duplicates(&layer)?;
    Ok(layer)
}

/// At most `limit` bytes of a file; more is [`ConfigError::TooLarge`].
fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, ConfigError> {
    let read_err = |error| ConfigError::Read {
        path: path.to_path_buf(),
        error,
    };
    let f = std::fs::File::open(path).map_err(read_err)?;
    let mut bytes = Vec::new();
    f.take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > limit {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok(bytes)
}

/// dotnet-monitor's user settings file: `$XDG_CONFIG_HOME/dotnet-monitor/settings.json`
/// (else `$HOME/.config/dotnet-monitor/settings.json`); on Windows
/// `%USERPROFILE%\.dotnet-monitor\settings.json`.
pub fn user_settings_path() -> Option<PathBuf> {
    let var = |n: &str| {
        std::env::var_os(n)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    if cfg!(windows) {
        var("USERPROFILE").map(|p| p.join(".dotnet-monitor").join("settings.json"))
    } else {
        var("XDG_CONFIG_HOME")
            .or_else(|| var("HOME").map(|h| h.join(".config")))
            .map(|p| p.join("dotnet-monitor").join("settings.json"))
    }
}

/// dotnet-monitor's shared settings folder (its `settings.json` and its key-per-file
/// keys): `/etc/dotnet-monitor`; on Windows `%ProgramData%\dotnet-monitor`.
pub fn shared_config_dir() -> Option<PathBuf> {
    if cfg!(windows) {
        std::env::var_os("ProgramData")
            .filter(|v| !v.is_empty())
            .map(|p| PathBuf::from(p).join("dotnet-monitor"))
    } else {
        Some(PathBuf::from("/etc/dotnet-monitor"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(l: &'a Layer, key: &str) -> Option<&'a str> {
        l.entries()
            .iter()
            .find(|(k, _, _)| k == key)
            .and_then(|(_, v, _)| v.as_deref())
    }

    #[test]
    fn json_settings_flatten_as_dotnet_reads_them() {
        let doc: Value = serde_json::from_str(
            r#"{"Metrics":{"Enabled":true,"MetricCount":3,"Providers":[{"ProviderName":"P"}]},
                "Egress":{}, "Storage":{"DumpTempFolder":null}}"#,
        )
        .unwrap();
        let l = json_layer(&doc, Source::Defaults, Path::new("s.json")).unwrap();
        assert_eq!(get(&l, "Metrics:Enabled"), Some("True"));
        assert_eq!(get(&l, "Metrics:MetricCount"), Some("3"));
        assert_eq!(get(&l, "Metrics:Providers:0:ProviderName"), Some("P"));
        assert_eq!(get(&l, "Storage:DumpTempFolder"), Some(""));
        assert!(l
            .entries()
            .iter()
            .any(|(k, v, _)| k == "Egress" && v.is_none()));
    }

    #[test]
    fn json_settings_refuse_a_key_set_twice_in_different_cases() {
        let doc: Value =
            serde_json::from_str(r#"{"Metrics":{"Enabled":true,"enabled":false}}"#).unwrap();
        let e = json_layer(&doc, Source::Defaults, Path::new("s.json")).unwrap_err();
        assert!(matches!(e, ConfigError::DuplicateKey { .. }), "{}", e);
        assert!(e.to_string().contains("Metrics:enabled"), "{}", e);
        let e =
            json_layer(&Value::Array(vec![]), Source::Defaults, Path::new("s.json")).unwrap_err();
        assert!(e.to_string().contains("top-level"), "{}", e);
    }

    #[test]
    fn env_prefix_and_double_underscore_make_keys() {
        let vars = [
            (
                "DotnetMonitor_CollectionRules__R1__Actions__0__Type",
                "CollectTrace",
            ),
            ("DOTNETMONITOR_Metrics__Enabled", "false"),
            ("PATH", "/bin"),
            ("Metrics__MetricCount", "6"),
        ];
        let os: Vec<(OsString, OsString)> =
            vars.iter().map(|(k, v)| (k.into(), v.into())).collect();
        let l = environment(os.clone(), ENV_PREFIX);
        assert_eq!(
            get(&l, "CollectionRules:R1:Actions:0:Type"),
            Some("CollectTrace")
        );
        assert_eq!(get(&l, "Metrics:Enabled"), Some("false"));
        assert_eq!(l.entries().len(), 2);
        let plain = environment(os, "");
        assert_eq!(get(&plain, "Metrics:MetricCount"), Some("6"));
        assert_eq!(get(&plain, "PATH"), None);
    }

    #[test]
    fn key_per_file_folder_reads_names_as_keys_and_contents_as_values() {
        let dir = std::env::temp_dir().join(format!("dsipc-kpf-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("..data")).unwrap();
        std::fs::write(
            dir.join("Egress__S3Storage__b__SecretAccessKey"),
            "s3cr3t\n",
        )
        .unwrap();
        std::fs::write(dir.join("Metrics__MetricCount"), "6").unwrap();
        std::fs::write(dir.join(".hidden"), "x").unwrap();
        std::fs::write(dir.join("settings.json"), "{}").unwrap();
        let l = key_per_file(&dir).unwrap();
        assert_eq!(
            get(&l, "Egress:S3Storage:b:SecretAccessKey"),
            Some("s3cr3t")
        );
        assert_eq!(get(&l, "Metrics:MetricCount"), Some("6"));
        assert_eq!(l.entries().len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(key_per_file(&dir).unwrap().is_empty());
    }
}
