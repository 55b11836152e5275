//! Egress throughput and memory: a generated artifact (1 GiB by default,
//! `DSIPC_EGRESS_BENCH_MIB` to change) streamed to a local file (tokio::io::copy: the
//! baseline), to a local sink answering as S3 and as Azure do (hyper's server, bodies
//! discarded: the client's own cost, SigV4's SHA-256 of each part included), to moto's S3
//! server (multipart, 8 MiB parts) and to Azurite (4 MiB blocks), both started as in
//! serve/tests/egress.rs (scripts/egress-peers.sh installs them). Prints
//! MiB/s for each and this process's peak RSS (VmHWM) before and after the uploads: the
//! uploads' own memory is the difference, one part plus the HTTP buffers.
//!
//!     cargo bench -p dsipc-serve --bench egress

#[path = "../tests/common/mod.rs"]
mod common;

use std::convert::Infallible;
use std::time::Instant;

use bytes::Bytes;
use common::*;
use dsipc_serve::egress::azure::{AzureBlobClient, AzureBlobOptions};
use dsipc_serve::egress::s3::S3Client;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use hyper_util::rt::TokioIo;

/// The sink's answer to `req` (its body read and dropped): what S3 (`azure` false) or
/// Azure answers to the calls the clients make.
async fn answer(req: Request<Incoming>, azure: bool) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = req.method().clone();
    let query = req.uri().query().unwrap_or_default().to_string();
    let mut body = req.into_body();
    while let Some(Ok(_frame)) = body.frame().await {}
    let (status, text) = if azure {
        (if method == Method::PUT { 201 } else { 200 }, "")
    } else if method == Method::POST && query == "uploads" {
        (200, "<InitiateMultipartUploadResult><UploadId>sink</UploadId></InitiateMultipartUploadResult>")
    } else {
        (200, "")
    };
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
    response
        .headers_mut()
        .insert("etag", hyper::header::HeaderValue::from_static("\"sink\""));
    Ok(response)
}

/// A local sink on a free port: its `http://` URL.
async fn sink(azure: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| answer(req, azure));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    url
}

/// This process's peak resident set (VmHWM), in KiB; 0 where /proc is absent.
fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn rate(bytes: u64, started: Instant) -> String {
    let secs = started.elapsed().as_secs_f64();
    format!(
        "{:.1} s, {:.0} MiB/s",
        secs,
        bytes as f64 / MIB as f64 / secs
    )
}

fn main() {
    let mib: u64 = std::env::var("DSIPC_EGRESS_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let len = mib * MIB;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let baseline = peak_rss_kib();
    println!(
        "egress of a {} MiB stream; peak RSS before: {} KiB",
        mib, baseline
    );

    let path = std::env::temp_dir().join(format!("dsipc-egress-bench-{}", std::process::id()));
    let t = Instant::now();
    rt.block_on(async {
        let mut file = tokio::fs::File::create(&path).await.unwrap();
        tokio::io::copy(&mut Pattern::new(1, len), &mut file)
            .await
            .unwrap();
    });
    println!("local file copy (tokio::io::copy): {}", rate(len, t));
    let _ = std::fs::remove_file(&path);

    let url = rt.block_on(sink(false));
    let s3 = S3Client::new(s3_options(&url, "bench")).unwrap();
    let t = Instant::now();
    let stored = rt
        .block_on(s3.upload(&artifact("bench.nettrace"), Pattern::new(2, len)))
        .unwrap();
    println!(
        "S3 to a local sink, {} parts: {}",
        stored.parts,
        rate(len, t)
    );
    let url = rt.block_on(sink(true));
    let azure = AzureBlobClient::new(AzureBlobOptions {
        account_uri: format!("{}/{}", url, AZURITE_ACCOUNT),
        ..azure_options(0)
    })
    .unwrap();
    let t = Instant::now();
    let stored = rt
        .block_on(azure.upload(&artifact("bench.nettrace"), Pattern::new(3, len)))
        .unwrap();
    println!(
        "Azure to a local sink, {} blocks: {}",
        stored.blocks,
        rate(len, t)
    );

    // The real peers (a SKIPPED line without them).
    if let Some(p) = peers() {
        to_peers(&rt, &p, len);
    }
    let peak = peak_rss_kib();
    println!(
        "peak RSS after: {} KiB ({} KiB over the start)",
        peak,
        peak.saturating_sub(baseline)
    );
}

fn to_peers(rt: &tokio::runtime::Runtime, p: &Peers, len: u64) {
    let (peer, endpoint) = moto(p);
    let s3 = S3Client::new(s3_options(&endpoint, "bench")).unwrap();
    let t = Instant::now();
    let stored = rt
        .block_on(s3.upload(&artifact("bench.nettrace"), Pattern::new(2, len)))
        .unwrap();
    println!("S3 (moto), {} parts: {}", stored.parts, rate(len, t));
    drop(peer);

    let (peer, blob, _queue) = azurite(p);
    let azure = AzureBlobClient::new(azure_options(blob)).unwrap();
    let t = Instant::now();
    let stored = rt
        .block_on(azure.upload(&artifact("bench.nettrace"), Pattern::new(3, len)))
        .unwrap();
    println!(
        "Azure Blob (Azurite), {} blocks: {}",
        stored.blocks,
        rate(len, t)
    );
    drop(peer);
}
