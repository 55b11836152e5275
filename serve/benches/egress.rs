//! Egress throughput and memory: a generated artifact (1 GiB by default,
//! `DSIPC_EGRESS_BENCH_MIB` to change) streamed to a local file (tokio::io::copy: the
//! baseline), to moto's S3 server (multipart, 8 MiB parts) and to Azurite (4 MiB blocks),
//! both started as in serve/tests/egress.rs (scripts/egress-peers.sh installs them). Prints
//! MiB/s for each and this process's peak RSS (VmHWM) before and after the uploads: the
//! uploads' own memory is the difference, one part plus the HTTP buffers.
//!
//!     cargo bench -p dsipc-serve --bench egress

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Instant;

use common::*;
use dsipc_serve::egress::azure::AzureBlobClient;
use dsipc_serve::egress::s3::S3Client;

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
    let p = match peers() {
        Some(p) => p,
        None => return,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
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

    let (peer, endpoint) = moto(&p);
    let s3 = S3Client::new(s3_options(&endpoint, "bench")).unwrap();
    let t = Instant::now();
    let stored = rt
        .block_on(s3.upload(&artifact("bench.nettrace"), Pattern::new(2, len)))
        .unwrap();
    println!("S3 (moto), {} parts: {}", stored.parts, rate(len, t));
    drop(peer);

    let (peer, blob, _queue) = azurite(&p);
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

    let peak = peak_rss_kib();
    println!(
        "peak RSS after: {} KiB ({} KiB over the start)",
        peak,
        peak.saturating_sub(baseline)
    );
}
