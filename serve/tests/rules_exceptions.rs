//! The CollectExceptions action against a real .NET 8 runtime throwing in a loop
//! (`tests/runtime/host.py --throw`: a FormatException inside a TargetInvocationException
//! every ~50 ms): Startup rules egress the `/exceptions` history, which serve keeps from
//! when the rules first follow the process, into a FileSystem egress folder under
//! dotnet-monitor's name, in each format, with their Filters applied; the artifact's path is
//! `$(Actions.<name>.EgressPath)`. Needs the real runtimes (`DSIPC_PYTHON`, see
//! scripts/setup-runtimes.sh).
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::time::Duration;

use dsipc_testkit::{HostOptions, HostedRuntime, TempDir};
use serde_json::{json, Value};

mod common;
use common::get;
use common::rules::{serve, until};

/// A Startup rule: wait for `gate` (the test opens it once the history holds exceptions),
/// then CollectExceptions `x` with `settings` into `files`, then write its EgressPath to
/// `marker`.
fn rule(gate: &Path, settings: Value, marker: &Path) -> Value {
    let mut collect = json!({ "Egress": "files" });
    for (k, v) in settings.as_object().unwrap() {
        collect[k] = v.clone();
    }
    json!({
        "Trigger": { "Type": "Startup" },
        "Actions": [
            {
                "Type": "Execute",
                "WaitForCompletion": true,
                "Settings": {
                    "Path": "/bin/sh",
                    "Arguments": format!("-c \"while [ ! -e {} ]; do sleep 0.05; done\"", gate.display())
                }
            },
            { "Name": "x", "Type": "CollectExceptions", "Settings": collect },
            {
                "Type": "Execute",
                "Settings": {
                    "Path": "/bin/sh",
                    "Arguments": format!("-c \"echo $(Actions.x.EgressPath) > {}\"", marker.display())
                }
            }
        ]
    })
}

/// The path a rule's last action wrote to `marker`.
async fn egressed(marker: &Path) -> PathBuf {
    let text = until("the EgressPath of the CollectExceptions action", || async {
        std::fs::read_to_string(marker)
            .ok()
            .filter(|t| t.ends_with('\n'))
    })
    .await;
    PathBuf::from(text.trim())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn collect_exceptions_egresses_the_history_of_a_net8_runtime_in_each_format() {
    if std::env::var_os("DSIPC_PYTHON").is_none() {
        eprintln!("skipped: DSIPC_PYTHON is not set (scripts/setup-runtimes.sh)");
        return;
    }
    let dir = TempDir::new("dsipc-rules-exc").unwrap();
    let out = TempDir::new("dsipc-rules-exc-out").unwrap();
    let mut opts = HostOptions::net8(240).env("TMPDIR", dir.path().as_os_str());
    opts.args.push("--throw".to_string());
    let mut host = HostedRuntime::spawn(&opts).expect("spawn host");
    host.wait_ready(Duration::from_secs(90))
        .expect("host READY");
    let pid = host.pid();
    let gate = out.path().join(".gate");
    let marker = |n: &str| out.path().join(format!(".{}", n));
    let rules = json!({
        "Text": rule(&gate, json!({}), &marker("text")),
        "NdJson": rule(
            &gate,
            json!({
                "Format": "NewlineDelimitedJson",
                "Filters": { "Exclude": [{ "ExceptionType": "System.Reflection.TargetInvocationException" }] }
            }),
            &marker("ndjson"),
        ),
        "Seq": rule(
            &gate,
            json!({
                "Format": "JsonSequence",
                "Filters": { "Include": [{ "ExceptionType": "System.Reflection.TargetInvocationException" }] }
            }),
            &marker("seq"),
        ),
    });
    let (_server, addr) = serve(dir.path(), out.path(), rules, 1.0).await;
    // The history the rules started holds a FormatException (the GET reads the same one).
    until("exceptions in the history", || async {
        let (status, body) = get(addr, &format!("/exceptions?pid={}", pid)).await;
        Some(()).filter(|_| status == 200 && body.contains("System.FormatException"))
    })
    .await;
    std::fs::write(&gate, b"").unwrap();

    let name_ends = |p: &Path, ext: &str| {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.ends_with(&format!("_{}.exceptions.{}", pid, ext)),
            "{}",
            name
        );
        assert_eq!(p.parent(), Some(out.path()));
    };

    let text = egressed(&marker("text")).await;
    name_ends(&text, "txt");
    let body = std::fs::read_to_string(&text).unwrap();
    assert!(body.contains("First chance exception at "), "{}", body);
    assert!(body.contains("System.FormatException"), "{}", body);
    assert!(
        body.contains("System.Reflection.TargetInvocationException"),
        "{}",
        body
    );

    let ndjson = egressed(&marker("ndjson")).await;
    name_ends(&ndjson, "json");
    let body = std::fs::read_to_string(&ndjson).unwrap();
    let all: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {:?}", e, l)))
        .collect();
    assert!(!all.is_empty(), "{}", body);
    // Excluded: no TargetInvocationException; what is left is the parse's FormatException.
    for x in &all {
        assert_eq!(x["typeName"], "System.FormatException", "{}", x);
        assert!(x["id"].as_u64().is_some(), "{}", x);
    }

    let seq = egressed(&marker("seq")).await;
    name_ends(&seq, "json");
    let body = std::fs::read_to_string(&seq).unwrap();
    let records: Vec<&str> = body.split('\u{1e}').skip(1).collect();
    assert!(!records.is_empty(), "{:?}", body);
    assert!(body.starts_with('\u{1e}'), "{:?}", body);
    for r in records {
        let x: Value = serde_json::from_str(r.trim_end()).unwrap();
        assert_eq!(
            x["typeName"], "System.Reflection.TargetInvocationException",
            "{}",
            x
        );
    }
}
