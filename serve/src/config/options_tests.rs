//! The configuration mapped to serve's options: each setting lands in its option, and an
//! error names the key and its source.

use super::*;
use crate::config::{json_layer, load, Sources};

/// `json` over dotnet-monitor's defaults, loaded and resolved.
fn resolved(json: &str) -> Result<Resolved, ConfigError> {
    let doc: serde_json::Value = serde_json::from_str(json).unwrap();
    let mut sources = Sources {
        defaults: defaults(),
        ..Sources::default()
    };
    sources.command_line = json_layer(
        &doc,
        Source::CommandLine("--test".into()),
        std::path::Path::new("t"),
    )
    .unwrap();
    resolve(&load(&sources)?)
}

fn metrics(json: &str) -> Result<CounterSet, String> {
    resolved(json)
        .map(|r| r.options.metrics_counters)
        .map_err(|e| e.to_string())
}

#[test]
fn metrics_providers_and_meters_from_the_configuration_are_collected() {
    assert_eq!(metrics("{}").unwrap(), CounterSet::default());
    let set = metrics(
        r#"{"Metrics": {"IncludeDefaultProviders": false,
            "Providers": [{"ProviderName": "Microsoft-AspNetCore-Server-Kestrel",
                           "CounterNames": ["connections-per-second"]}],
            "Meters": [{"MeterName": "MyApp"}]}}"#,
    )
    .unwrap();
    let names: Vec<(&str, Option<Vec<String>>)> = set
        .providers()
        .iter()
        .map(|p| (p.name.as_str(), p.counters.clone()))
        .collect();
    assert_eq!(
        names,
        [
            (
                "Microsoft-AspNetCore-Server-Kestrel",
                Some(vec!["connections-per-second".to_string()])
            ),
            ("MyApp", None)
        ]
    );
    let e = metrics(r#"{"Metrics": {"Meters": [{"MeterName": "a,b"}]}}"#).unwrap_err();
    assert!(e.contains("Metrics:Meters:0:MeterName"), "{}", e);
    let e = metrics(r#"{"Metrics": {"IncludeDefaultProviders": "False"}}"#).unwrap_err();
    assert!(e.contains("nothing to collect"), "{}", e);
}

#[test]
fn configuration_defaults_resolve_to_dotnet_monitors_options() {
    let r = resolved("{}").unwrap();
    assert_eq!(r.urls[0].url, DEFAULT_URLS);
    assert_eq!(r.metrics_urls[0].url, DEFAULT_METRICS_URLS);
    assert!(r.options.metrics);
    assert_eq!(r.options.counter_interval, 5.0);
    assert!(matches!(r.options.auth, Auth::Unconfigured));
    assert!(r.options.diagnostic_port.is_none());
    assert!(r.options.collection_rules.is_none());
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
}

#[test]
fn configuration_sections_land_in_their_options() {
    let r = resolved(
        r#"{"urls": "http://127.0.0.1:0",
            "GlobalCounter": {"IntervalSeconds": 2},
            "Storage": {"DumpTempFolder": "/dumps"},
            "DiagnosticPort": {"ConnectionMode": "Listen", "EndpointName": "/p.sock",
                               "MaxConnections": 3},
            "DefaultProcess": {"Filters": [{"Key": "ProcessName", "Value": "app"}]},
            "Egress": {"FileSystem": {"out": {"DirectoryPath": "/artifacts"}}},
            "CollectionRules": {"r": {"Trigger": {"Type": "Startup"}}},
            "Authentication": {"MonitorApiKey": {"ApiKeyHashType": "SHA256",
                "ApiKeyHash": "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"}}}"#,
    )
    .unwrap();
    let o = &r.options;
    assert_eq!(r.urls[0].url, "http://127.0.0.1:0");
    assert_eq!(o.counter_interval, 2.0);
    assert_eq!(o.dump_temp_folder, Some(PathBuf::from("/dumps")));
    assert_eq!(o.diagnostic_port, Some(PathBuf::from("/p.sock")));
    assert_eq!(o.max_runtimes, Some(3));
    assert!(matches!(
        &o.default_process[..],
        [DefaultFilter::ProcessName { name, contains: false }] if name == "app"
    ));
    assert_eq!(o.egress.len(), 1);
    assert_eq!(o.egress[0].name, "out");
    assert_eq!(
        o.collection_rules.as_ref().unwrap()["r"]["Trigger"]["Type"],
        "Startup"
    );
    assert!(matches!(o.auth, Auth::Key(_)));
}

#[test]
fn configuration_errors_name_the_key_and_its_source() {
    for (json, said) in [
        (
            r#"{"GlobalCounter": {"IntervalSeconds": 0.5}}"#,
            "GlobalCounter:IntervalSeconds (from the command line's --test): from 1 s to a day, not 0.5",
        ),
        (
            r#"{"DiagnosticPort": {"ConnectionMode": "Listen", "EndpointName": "p", "MaxConnections": 0}}"#,
            "DiagnosticPort:MaxConnections (from the command line's --test): at least 1, not 0",
        ),
        (
            r#"{"urls": "https://localhost:1"}"#,
            "urls (from the command line's --test): \"https://localhost:1\": https is not offered",
        ),
        (
            r#"{"Metrics": {"Endpoints": "localhost:1"}}"#,
            "Metrics:Endpoints (from the command line's --test): \"localhost:1\": wants http://",
        ),
        (
            r#"{"Authentication": {"MonitorApiKey": {"ApiKeyHash": "00", "ApiKeyHashType": "SHA256"}}}"#,
            "Authentication:MonitorApiKey (from the command line's --test): ",
        ),
    ] {
        let e = resolved(json).unwrap_err();
        assert!(matches!(e, ConfigError::Invalid { .. }), "{:?}", e);
        assert!(e.to_string().starts_with(said), "{}: {}", json, e);
    }
    // With metrics off, the metrics URLs are not read.
    let r = resolved(r#"{"Metrics": {"Enabled": false, "Endpoints": "localhost:1"}}"#).unwrap();
    assert!(!r.options.metrics && r.metrics_urls.is_empty());
}

#[test]
fn configuration_settings_not_acted_on_are_warnings() {
    let r = resolved(
        r#"{"Kestrel": {"Certificates": {"Default": {"Password": "pw-secret"}}},
            "Authentication": {"MonitorApiKey": {"Subject": "s"}},
            "Egress": {"FileSystem": {"files": {"DirectoryPath": "/a", "IntermediateDirectoryPath": "/b"}},
                       "S3Storage": {"Files": {"BucketName": "b", "AccessKeyId": "k",
                                               "SecretAccessKey": "s3-secret"}}}}"#,
    )
    .unwrap();
    let said: Vec<String> = r.warnings.iter().map(|w| w.to_string()).collect();
    let all = said.join("\n");
    for needle in [
        "Egress:FileSystem:files:IntermediateDirectoryPath (from the command line's --test): not used",
        "egress provider Files is named twice: Egress:FileSystem:files is the one used",
        "Kestrel is not used",
        "Authentication:MonitorApiKey",
    ] {
        assert!(all.contains(needle), "{:?} not in {}", needle, all);
    }
    assert_eq!(said.len(), 4, "{}", all);
    assert!(!all.contains("secret"), "{}", all);
    assert!(matches!(r.options.auth, Auth::Unconfigured));
}
