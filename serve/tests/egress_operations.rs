//! Egress operations to the cloud through serve's API: `GET /trace?egressProvider=NAME`
//! on a fake runtime answers 202, the operation succeeds, and the artifact read back from
//! moto's S3 server or Azurite with the services' own clients is byte for byte the trace
//! `GET /trace` streams. The providers come from dotnet-monitor's `Egress` section, bound as
//! `dsipc serve` binds it (`config::egress_providers`).
#![cfg(target_os = "linux")]

mod common;

use std::time::{Duration, Instant};

use common::*;
use dsipc_serve::config::{egress_providers, load, Sources};
use dsipc_serve::{Auth, Options, Server};
use dsipc_testkit::{Config, StreamSpec, TempDir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` on `addr` (connection closed after the answer): status, head and body.
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String, Vec<u8>) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        path, addr
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut raw))
        .await
        .expect("an answer within 60 s")
        .unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, head, raw[split + 4..].to_vec())
}

/// A chunked body's data.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a size line");
        let size = usize::from_str_radix(std::str::from_utf8(&body[..line]).unwrap().trim(), 16)
            .expect("a hex size");
        body = &body[line + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&body[..size]);
        body = &body[size + 2..];
    }
}

/// Polls `GET /operations/{id}` (bounded) until it is over; its status document.
async fn wait_operation(addr: std::net::SocketAddr, id: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, _, body) = get(addr, &format!("/operations/{}", id)).await;
        assert!(status == 200 || status == 201, "{}", status);
        let doc: serde_json::Value = serde_json::from_slice(&dechunk_or_plain(&body)).unwrap();
        let state = doc["status"].as_str().unwrap_or("").to_string();
        if state != "Running" && state != "Stopping" {
            return doc;
        }
        assert!(Instant::now() < deadline, "still {} after 60 s", state);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn dechunk_or_plain(body: &[u8]) -> Vec<u8> {
    if body.first() == Some(&b'{') {
        body.to_vec()
    } else {
        dechunk(body)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_operations_land_traces_in_s3_and_azure_blob_storage_byte_for_byte() {
    let p = match peers() {
        Some(p) => p,
        None => return,
    };
    let (_moto, endpoint) = moto(&p);
    let (_azurite, blob, _queue) = azurite(&p);
    let dir = TempDir::new("dsipc-egress-op").unwrap();
    let me = std::process::id();
    let _rt = Config::new()
        .like_net8_0_4()
        .pid(u64::from(me))
        .key(dsipc_std::unix::start_key(me).expect("start key"))
        .stream(StreamSpec {
            len: Some(3 * MIB + 17),
            chunk: 64 * 1024,
            pause: Duration::ZERO,
            end_marker: true,
            content: None,
        })
        .listen_in(dir.path())
        .start()
        .expect("fake runtime");
    // dotnet-monitor's settings, as a user writes them (the keys through Properties).
    let settings = serde_json::json!({"Egress": {
        "S3Storage": {"bucket": {
            "Endpoint": endpoint, "BucketName": "traces", "RegionName": "us-east-1",
            "AccessKeyId": "testing", "SecretAccessKey": "testing-secret-key",
            "ForcePathStyle": true
        }},
        "AzureBlobStorage": {"blobs": {
            "AccountUri": format!("http://127.0.0.1:{}/{}", blob, AZURITE_ACCOUNT),
            "ContainerName": "dumps", "BlobPrefix": "artifacts",
            "AccountKeyName": "AzuriteKey"
        }},
        "Properties": {"AzuriteKey": AZURITE_KEY}
    }});
    let file = dir.path().join("settings.json");
    std::fs::write(&file, settings.to_string()).unwrap();
    let sources = Sources {
        configuration_file: Some(file),
        ..Sources::default()
    };
    let loaded = load(&sources).expect("the settings load");
    let mut options = Options::default();
    options.auth = Auth::Off;
    options.tmpdir = Some(dir.path().to_path_buf());
    options.metrics = false;
    options.egress = egress_providers(&loaded.settings.egress).expect("providers");
    assert!(
        !format!("{:?}", options).contains("testing-secret-key"),
        "a secret in Debug"
    );
    let mut server = Server::new(options, 1).expect("server");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    server.serve_api(listener);

    let path = format!("/trace?pid={}&durationSeconds=-1", me);
    let (status, _, body) = get(addr, &path).await;
    assert_eq!(status, 200);
    let direct = dechunk(&body);
    assert!(direct.len() as u64 >= 3 * MIB, "{} bytes", direct.len());

    for provider in ["bucket", "blobs"] {
        let (status, head, _) = get(addr, &format!("{}&egressProvider={}", path, provider)).await;
        assert_eq!(status, 202, "{}", head);
        let location = head
            .lines()
            .find_map(|l| {
                l.strip_prefix("location: ")
                    .or_else(|| l.strip_prefix("Location: "))
            })
            .expect("Location")
            .to_string();
        let id = location.rsplit('/').next().unwrap();
        let done = wait_operation(addr, id).await;
        assert_eq!(done["status"], "Succeeded", "{}", done);
        let resource = done["resourceLocation"].as_str().unwrap().to_string();
        let stored = if provider == "bucket" {
            let key = resource
                .strip_prefix("BucketName=traces, Key=")
                .unwrap_or_else(|| panic!("{}", resource));
            read_back(&p, &["s3", "get", &endpoint, "traces", key])
        } else {
            let name = resource
                .split("/dumps/")
                .nth(1)
                .unwrap_or_else(|| panic!("{}", resource));
            assert!(name.starts_with("artifacts/"), "{}", name);
            read_back(
                &p,
                &[
                    "blob",
                    "get",
                    &connection_string(blob, _queue),
                    "dumps",
                    name,
                ],
            )
        };
        assert!(stored == direct, "{}: what was stored differs", provider);
    }
}
