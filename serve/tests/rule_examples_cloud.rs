//! dotnet-monitor's AssemblyLoadTraceOnStartup example
//! (documentation/collectionrules/collectionruleexamples.md, as written) with its
//! `artifacts` egress provider an S3Storage bucket on moto's S3 server, and then an
//! AzureBlobStorage container on Azurite: settings.json read by the library's configuration
//! loading (`config::load`, as `dsipc serve --configuration-file-path` reads it), two
//! embedded servers over one real .NET 8 runtime. The startup trace lands in the bucket and
//! in the container under dotnet-monitor's name, `{yyyyMMdd_HHmmss_fff}_{pid}.nettrace`,
//! read back with the services' own clients. (The FileSystem run of the examples is
//! cli/tests/serve_rule_examples.rs.) Needs scripts/egress-peers.sh; SKIPPED without.
#![cfg(target_os = "linux")]

mod common;

use std::time::{Duration, Instant};

use common::*;
use dsipc_serve::config::{egress_providers, load, Sources};
use dsipc_serve::{Auth, Options, Server};
use dsipc_testkit::{HostOptions, HostedRuntime, TempDir};
use serde_json::{json, Value};

/// Bound on the runtime's READY and on the trace (15 s) reaching its store.
const WAIT: Duration = Duration::from_secs(180);

/// The settings.json a dotnet-monitor user would have: the example rule as written
/// (tests/data/dotnet-monitor/collectionruleexamples.json), and `artifacts`.
fn settings(egress: Value) -> Value {
    let path = repo_root().join("tests/data/dotnet-monitor/collectionruleexamples.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let rule = doc["CollectionRules"]["AssemblyLoadTraceOnStartup"].clone();
    assert!(rule.is_object(), "{}", doc);
    json!({ "Egress": egress, "CollectionRules": { "AssemblyLoadTraceOnStartup": rule } })
}

/// An embedded server over the runtimes of `tmpdir` configured by `settings` as a file.
async fn serve(tmpdir: &TempDir, file: &str, settings: &Value) -> Server {
    let path = tmpdir.path().join(file);
    std::fs::write(&path, settings.to_string()).unwrap();
    let sources = Sources {
        configuration_file: Some(path),
        ..Sources::default()
    };
    let loaded = load(&sources).expect("the settings load");
    let mut options = Options::default();
    options.auth = Auth::Off;
    options.tmpdir = Some(tmpdir.path().to_path_buf());
    options.metrics = false;
    options.egress = egress_providers(&loaded.settings.egress).expect("providers");
    options.collection_rules = loaded.settings.collection_rules.map(|s| s.to_json());
    let mut server = Server::new(options, 1).expect("server");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    server.serve_api(listener);
    server
}

/// Polls the reader's listing `args` (its JSON's `field`) until it names the trace.
async fn await_listed(p: &Peers, args: &[&str], field: &str, pid: u32) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let listing: Value = serde_json::from_str(&read_json(p, args)).unwrap();
        if let Some(n) = listing[field]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .find(|n| dsipc_testkit::is_artifact_name(n, pid, "nettrace"))
        {
            return n.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no trace in {:?} within {:?}: {}",
            args,
            WAIT,
            listing
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_trace_example_lands_in_s3_and_azure_blob_storage_under_dotnet_monitor_names() {
    let p = match peers() {
        Some(p) => p,
        None => return,
    };
    let (_moto, endpoint) = moto(&p);
    let (_azurite, blob, queue) = azurite(&p);
    let dir = TempDir::new("dsipc-examples-cloud").unwrap();
    let mut opts = HostOptions::net8(300).env("TMPDIR", dir.path().as_os_str());
    opts.args = vec!["--counters".into()];
    let mut host = HostedRuntime::spawn(&opts)
        .expect("a .NET 8 host (DSIPC_PYTHON, DSIPC_NET8_ROOT: see dsipc-runtimes.env)");
    let pid = host.wait_ready(WAIT).expect("READY").pid;

    let s3 = settings(json!({ "S3Storage": { "artifacts": {
        "Endpoint": endpoint, "BucketName": "traces", "RegionName": "us-east-1",
        "AccessKeyId": "testing", "SecretAccessKey": "testing-secret-key",
        "ForcePathStyle": true
    }}}));
    let azure = settings(json!({
        "AzureBlobStorage": { "artifacts": {
            "AccountUri": format!("http://127.0.0.1:{}/{}", blob, AZURITE_ACCOUNT),
            "ContainerName": "dotnet-monitor",
            "AccountKeyName": "AzuriteKey"
        }},
        "Properties": { "AzuriteKey": AZURITE_KEY }
    }));
    let _s3_server = serve(&dir, "s3.json", &s3).await;
    let _azure_server = serve(&dir, "azure.json", &azure).await;

    let key = await_listed(&p, &["s3", "state", &endpoint, "traces"], "keys", pid).await;
    let stored = read_back(&p, &["s3", "get", &endpoint, "traces", &key]);
    assert!(stored.starts_with(b"Nettrace"), "{}: not a nettrace", key);
    let conn = connection_string(blob, queue);
    let name = await_listed(&p, &["blob", "list", &conn, "dotnet-monitor"], "blobs", pid).await;
    let stored = read_back(&p, &["blob", "get", &conn, "dotnet-monitor", &name]);
    assert!(stored.starts_with(b"Nettrace"), "{}: not a nettrace", name);
    host.kill();
}
