//! The configuration as dotnet-monitor's users write it: sources, merge order, binding,
//! errors and `config show`.
#![allow(clippy::field_reassign_with_default)] // Sources built up field by field reads best here.

use std::ffi::OsString;
use std::path::PathBuf;

use super::*;

/// A private folder for one test's files.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("dsipc-config-{}-{}", name, std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn file(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
    pairs.iter().map(|(k, v)| (k.into(), v.into())).collect()
}

fn load_json(text: &str) -> Result<Loaded, ConfigError> {
    let dir = Dir::new(&format!("json-{}", text.len()));
    let mut s = Sources::default();
    s.configuration_file = Some(dir.file("settings.json", text));
    load(&s)
}

#[test]
fn sources_merge_in_dotnet_monitor_order() {
    let dir = Dir::new("order");
    let key = "Storage:DumpTempFolder";
    let mut s = Sources::default();
    s.defaults
        .set(key, Some("defaults".into()), Source::Defaults);
    s.user_settings = Some(dir.file("user.json", r#"{"Storage":{"DumpTempFolder":"user"}}"#));
    s.shared_settings = Some(dir.file("shared.json", r#"{"Storage":{"DumpTempFolder":"shared"}}"#));
    let kpf = dir.0.join("kpf");
    std::fs::create_dir(&kpf).unwrap();
    std::fs::write(kpf.join("Storage__DumpTempFolder"), "key-per-file\n").unwrap();
    s.key_per_file = Some(kpf);
    s.configuration_file =
        Some(dir.file("given.json", r#"{"storage":{"dumptempfolder":"given"}}"#));
    s.environment = env(&[
        ("Storage__DumpTempFolder", "plain env"),
        ("DotnetMonitor_Storage__DumpTempFolder", "prefixed env"),
    ]);
    let mut cl = Layer::new();
    cl.set(
        key,
        Some("flag".into()),
        Source::CommandLine("--dump-temp-folder".into()),
    );
    s.command_line = cl.clone();
    // Each source in turn removed from the top: the next one down shows.
    let expect = [
        "flag",
        "given",
        "prefixed env",
        "key-per-file",
        "shared",
        "user",
        "plain env",
        "defaults",
    ];
    for want in expect {
        let got = load(&s).unwrap();
        assert_eq!(got.settings.storage.dump_temp_folder.as_deref(), Some(want));
        match want {
            "flag" => s.command_line = Layer::new(),
            "given" => s.configuration_file = None,
            "prefixed env" => s
                .environment
                .retain(|(k, _)| k != "DotnetMonitor_Storage__DumpTempFolder"),
            "key-per-file" => s.key_per_file = None,
            "shared" => s.shared_settings = None,
            "user" => s.user_settings = None,
            "plain env" => s.environment.clear(),
            _ => {}
        }
    }
    s.command_line = cl;
    s.defaults = Layer::new();
    assert_eq!(
        load(&s)
            .unwrap()
            .root
            .get("storage:DUMPTEMPFOLDER")
            .unwrap()
            .source(),
        Some(&Source::CommandLine("--dump-temp-folder".into()))
    );
}

#[test]
fn sources_missing_configuration_file_is_an_error_and_default_files_are_optional() {
    let mut s = Sources::default();
    s.user_settings = Some("/nonexistent/dsipc/settings.json".into());
    s.key_per_file = Some("/nonexistent/dsipc".into());
    assert!(load(&s).is_ok());
    // A default location that cannot be read is skipped with a warning (here a file where
    // the folder should be); bad JSON there is still an error.
    let dir = Dir::new("optional");
    s.key_per_file = Some(dir.file("not-a-folder", "x"));
    let got = load(&s).unwrap();
    assert_eq!(got.warnings.len(), 1, "{:?}", got.warnings);
    assert!(
        got.warnings[0]
            .to_string()
            .contains("not-a-folder is skipped"),
        "{}",
        got.warnings[0]
    );
    s.user_settings = Some(dir.file("user.json", "{"));
    assert!(matches!(load(&s).unwrap_err(), ConfigError::Json { .. }));
    s.user_settings = None;
    s.configuration_file = Some("/nonexistent/dsipc/settings.json".into());
    let e = load(&s).unwrap_err();
    assert!(matches!(e, ConfigError::Read { .. }), "{}", e);
}

#[test]
fn env_arrays_are_index_keys() {
    let mut s = Sources::default();
    s.environment = env(&[
        (
            "DotnetMonitor_CollectionRules__R1__Actions__0__Type",
            "CollectDump",
        ),
        (
            "DotnetMonitor_CollectionRules__R1__Actions__1__Type",
            "CollectTrace",
        ),
        (
            "DotnetMonitor_DefaultProcess__Filters__0__ProcessName",
            "app",
        ),
        (
            "DotnetMonitor_DefaultProcess__Filters__1__Key",
            "CommandLine",
        ),
        ("DotnetMonitor_DefaultProcess__Filters__1__Value", "App.dll"),
        (
            "DotnetMonitor_DefaultProcess__Filters__1__MatchType",
            "contains",
        ),
    ]);
    let got = load(&s).unwrap();
    let rules = got.settings.collection_rules.unwrap().to_json();
    assert_eq!(rules["R1"]["Actions"][1]["Type"], "CollectTrace");
    let f = &got.settings.default_process.filters;
    assert_eq!(f.len(), 2);
    assert_eq!(
        f[0].resolved(),
        Some((
            ProcessFilterKey::ProcessName,
            "app",
            ProcessFilterType::Exact
        ))
    );
    assert_eq!(
        f[1].resolved(),
        Some((
            ProcessFilterKey::CommandLine,
            "App.dll",
            ProcessFilterType::Contains
        ))
    );
}

#[test]
fn bind_converts_strings_as_the_dotnet_binder_does() {
    let got = load_json(
        r#"{
          "Metrics": {"Enabled": "true", "MetricCount": " 5 ", "IncludeDefaultProviders": false,
                      "Providers": [{"ProviderName": "P", "CounterNames": ["a", "b"]}]},
          "GlobalCounter": {"IntervalSeconds": "2.5"},
          "DiagnosticPort": {"connectionMode": "LISTEN", "EndpointName": "/run/p.sock", "MaxConnections": 10},
          "Egress": {"S3Storage": {"monitorS3Blob": {"bucketName": "b", "preSignedUrlExpiry": "00:15:00",
                                                      "forcePathStyle": "True"}}}
        }"#,
    )
    .unwrap();
    let s = &got.settings;
    assert_eq!(s.metrics.enabled, Some(true));
    assert_eq!(s.metrics.metric_count, Some(5));
    assert_eq!(s.metrics.include_default_providers, Some(false));
    assert_eq!(s.metrics.providers[0].counter_names, ["a", "b"]);
    assert_eq!(s.global_counter.interval_seconds, Some(2.5));
    assert_eq!(
        s.diagnostic_port.connection_mode,
        Some(DiagnosticPortConnectionMode::Listen)
    );
    assert_eq!(s.diagnostic_port.max_connections, Some(10));
    let b = &s.egress.s3_storage["monitorS3Blob"];
    assert_eq!(b.pre_signed_url_expiry.unwrap().to_string(), "00:15:00");
    assert_eq!(b.force_path_style, Some(true));
    assert!(got.warnings.is_empty(), "{:?}", got.warnings);
}

#[test]
fn bind_diagnostic_port_shorthand_is_listen_mode() {
    let got = load_json(r#"{"DiagnosticPort": "/diag/port.sock"}"#).unwrap();
    let d = &got.settings.diagnostic_port;
    assert_eq!(
        d.connection_mode,
        Some(DiagnosticPortConnectionMode::Listen)
    );
    assert_eq!(d.endpoint_name.as_deref(), Some("/diag/port.sock"));
    let e = load_json(r#"{"DiagnosticPort": {"ConnectionMode": "Listen"}}"#).unwrap_err();
    assert_eq!(
        e.to_string(),
        "DiagnosticPort:EndpointName: required, and not set"
    );
}

#[test]
fn errors_name_the_key_and_source_of_a_wrong_type() {
    let dir = Dir::new("errors");
    let file = dir.file(
        "settings.json",
        r#"{"Egress": {"FileSystem": {"out": {"DirectoryPath": "/a", "CopyBufferSize": "big"}}}}"#,
    );
    let mut s = Sources::default();
    s.configuration_file = Some(file.clone());
    let e = load(&s).unwrap_err();
    match &e {
        ConfigError::Invalid { key, source, .. } => {
            assert_eq!(key, "Egress:FileSystem:out:CopyBufferSize");
            assert_eq!(source, &Some(Source::JsonFile(file.clone())));
        }
        other => panic!("{:?}", other),
    }
    assert!(e.to_string().contains("is not a whole number"), "{}", e);
    for (json, key) in [
        (r#"{"Metrics": {"Enabled": "yes"}}"#, "Metrics:Enabled"),
        (r#"{"Metrics": "on"}"#, "Metrics"),
        (r#"{"Metrics": {"Enabled": {"x": 1}}}"#, "Metrics:Enabled"),
        (
            r#"{"DiagnosticPort": {"ConnectionMode": "Both"}}"#,
            "DiagnosticPort:ConnectionMode",
        ),
        (
            r#"{"Egress": {"S3Storage": {"b": {"BucketName": "b", "PreSignedUrlExpiry": "15 minutes"}}}}"#,
            "Egress:S3Storage:b:PreSignedUrlExpiry",
        ),
        (
            r#"{"DefaultProcess": {"Filters": [{"ProcessId": "x"}]}}"#,
            "DefaultProcess:Filters:0",
        ),
    ] {
        let e = load_json(json).unwrap_err();
        assert!(
            e.to_string().starts_with(&format!("{} ", key))
                || e.to_string().starts_with(&format!("{}:", key)),
            "{}: {}",
            json,
            e
        );
    }
    let e =
        load_json(r#"{"Egress": {"S3Storage": {"monitorS3Blob": {"RegionName": "us-east-1"}}}}"#)
            .unwrap_err();
    assert_eq!(
        e.to_string(),
        "Egress:S3Storage:monitorS3Blob:BucketName: required, and not set"
    );
    let e = load_json(
        r#"{"Egress": {"AzureBlobStorage": {"a": {"AccountUri": "https://x", "ContainerName": "c",
            "AccountKeyName": "Missing"}}}}"#,
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with("Egress:AzureBlobStorage:a:AccountKeyName"),
        "{}",
        e
    );
    let e = load_json("[1]").unwrap_err();
    assert!(matches!(e, ConfigError::Json { .. }), "{}", e);
    let e = load_json("{\"Metrics\": ").unwrap_err();
    assert!(matches!(e, ConfigError::Json { line: 1, .. }), "{}", e);
}

#[test]
fn unknown_keys_warn_and_do_not_fail() {
    let got = load_json(
        r#"{"Metrics": {"Enabeld": true, "MetricCount": 2}, "Egres": {},
            "Egress": {"FileSystem": {"out": {"DirectoryPath": "/a", "Mode": "x"}}},
            "CollectionRules": {"R": {"Trigger": {"Type": "Startup"}}}, "Logging": {"LogLevel": {}}}"#,
    )
    .unwrap();
    let keys: Vec<&str> = got.warnings.iter().map(|w| w.key.as_str()).collect();
    assert_eq!(keys, ["Egress:FileSystem:out:Mode", "Metrics:Enabeld"]);
    assert_eq!(got.settings.metrics.metric_count, Some(2));
    assert!(
        got.warnings[1].to_string().contains("unknown key"),
        "{}",
        got.warnings[1]
    );
    // An empty object is no key (as in .NET), so `Egres` is not there to warn about.
    let got = load_json(r#"{"Egres": {"x": 1}}"#).unwrap();
    assert_eq!(got.warnings.len(), 1);
    assert_eq!(got.warnings[0].key, "Egres");
}

const SECRETS: &str = r#"{
  "Authentication": {"MonitorApiKey": {"Subject": "sub-1", "PublicKey": "jwk-secret"}},
  "Egress": {
    "Properties": {"MonitorBlobAccountKey": "props-secret"},
    "AzureBlobStorage": {"monitorBlob": {"accountUri": "https://a.blob.core.windows.net",
        "containerName": "dotnet-monitor", "accountKey": "azure-secret",
        "sharedAccessSignatureName": "MonitorBlobAccountKey"}},
    "S3Storage": {"monitorS3Blob": {"endpoint": "http://localhost:9000", "bucketName": "bkt",
        "accessKeyId": "minioUser", "secretAccessKey": "s3-secret"}},
    "FileSystem": {"out": {"directoryPath": "/artifacts"}}
  }
}"#;

#[test]
fn show_redacts_secrets_given_in_plain_text() {
    let got = load_json(SECRETS).unwrap();
    let text = show(&got.root, ShowLevel::Redacted, false);
    for secret in [
        "jwk-secret",
        "props-secret",
        "azure-secret",
        "s3-secret",
        "minioUser",
    ] {
        assert!(!text.contains(secret), "{} in {}", secret, text);
    }
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let egress = &doc["Egress"];
    assert_eq!(egress["Properties"]["MonitorBlobAccountKey"], REDACTED);
    assert_eq!(
        egress["AzureBlobStorage"]["monitorBlob"]["accountKey"],
        REDACTED
    );
    assert_eq!(
        egress["AzureBlobStorage"]["monitorBlob"]["containerName"],
        "dotnet-monitor"
    );
    assert_eq!(
        egress["AzureBlobStorage"]["monitorBlob"]["QueueName"],
        NOT_PRESENT
    );
    assert_eq!(egress["S3Storage"]["monitorS3Blob"]["bucketName"], REDACTED);
    assert_eq!(egress["FileSystem"]["out"]["directoryPath"], "/artifacts");
    assert_eq!(doc["Authentication"]["MonitorApiKey"]["Subject"], "sub-1");
    assert_eq!(
        doc["Authentication"]["MonitorApiKey"]["PublicKey"],
        REDACTED
    );
    assert_eq!(doc["Metrics"], NOT_PRESENT);
    // The order of dotnet-monitor's `config show`.
    let at = |k: &str| text.find(&format!("\n  \"{}\": ", k)).unwrap();
    assert!(at("urls") < at("Kestrel"));
    assert!(at("Kestrel") < at("CollectionRules"));
    assert!(at("DefaultProcess") < at("Authentication"));
    assert!(at("Authentication") < at("Egress"));
    // Full: as configured.
    let full = show(&got.root, ShowLevel::Full, false);
    assert!(
        full.contains("s3-secret") && full.contains("azure-secret"),
        "{}",
        full
    );
    // The typed settings hold the secrets and never print them.
    let debug = format!("{:?}", got.settings);
    for secret in ["jwk-secret", "props-secret", "azure-secret", "s3-secret"] {
        assert!(!debug.contains(secret), "{} in {}", secret, debug);
    }
    let azure = &got.settings.egress.azure_blob_storage["monitorBlob"];
    assert_eq!(azure.account_key.as_ref().unwrap().expose(), "azure-secret");
    assert_eq!(
        got.settings
            .egress
            .property(azure.shared_access_signature_name.as_deref().unwrap())
            .unwrap()
            .expose(),
        "props-secret"
    );
}

#[test]
fn show_writes_arrays_and_sources() {
    let mut s = Sources::default();
    s.environment = env(&[
        (
            "DotnetMonitor_DefaultProcess__Filters__0__ProcessName",
            "app",
        ),
        ("DotnetMonitor_CollectionRules__0__Trigger__Type", "Startup"),
    ]);
    let got = load(&s).unwrap();
    let text = show(&got.root, ShowLevel::Redacted, false);
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["DefaultProcess"]["Filters"][0]["ProcessName"], "app");
    // A rule named "0" stays a rule.
    assert_eq!(doc["CollectionRules"]["0"]["Trigger"]["Type"], "Startup");
    let text = show(&got.root, ShowLevel::Redacted, true);
    assert!(
        text.contains(r#""ProcessName": "app" /* the environment variable DotnetMonitor_DefaultProcess__Filters__0__ProcessName */"#),
        "{}",
        text
    );
}
