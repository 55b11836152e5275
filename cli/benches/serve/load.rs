//! The serve bench's long scenarios, run only when named: `egress` (serve egressing a
//! 1 GiB trace to a folder, to moto's S3 server and to Azurite) and `rules` (20 real .NET 8
//! runtimes with 3 collection rules each, for `DSIPC_BENCH_SECONDS`, default 600).

use std::path::Path;
use std::time::{Duration, Instant};

use dsipc_testkit::{Config, StreamSpec, TempDir};
use serde_json::{json, Value};

use crate::common::serve::Serve;
use crate::{common, cpu_secs, mib};

#[path = "../../../serve/tests/common/mod.rs"]
mod peers;

/// The trace's size: 1 GiB, or `DSIPC_EGRESS_BENCH_MIB` MiB (as benches/egress.rs of
/// dsipc-serve).
fn trace_len() -> u64 {
    std::env::var("DSIPC_EGRESS_BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
        * peers::MIB
}

/// Polls `GET /operations/{id}` until the operation is over (a bench: polling is its
/// clock); its final status document.
fn wait_operation(serve: &Serve, location: &str, limit: Duration) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let a = serve.get(location);
        let doc = a.json();
        let state = doc["status"].as_str().unwrap_or("").to_string();
        if a.status != 0 && state != "Running" && state != "Stopping" {
            return doc;
        }
        assert!(
            Instant::now() < deadline,
            "still {} after {:?}",
            state,
            limit
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Serve egressing the fake runtime's generated trace through `provider`: a fresh serve
/// with `settings`; the time from the request to the operation's end, serve's peak RSS,
/// and the operation's error when it failed.
fn egress_once(settings: &Path, provider: &str) -> (f64, u64, Option<String>) {
    let dir = TempDir::new("dsipc-bench-egress").unwrap();
    let _rt = common::serve::fake(
        &dir,
        Config::new()
            .like_net8_0_4()
            .stream(StreamSpec::bytes(trace_len()).with_end_marker()),
    );
    let serve = Serve::start_with(dir.path(), &["--no-auth"], |c| {
        c.arg("--configuration-file-path").arg(settings);
    });
    let t = Instant::now();
    let a = serve.get(&format!(
        "/trace?pid={}&durationSeconds=-1&egressProvider={}",
        std::process::id(),
        provider
    ));
    assert_eq!(a.status, 202, "{}: {}", provider, a.text());
    let location = a.header("Location").expect("a Location");
    let location = location
        .find("/operations/")
        .map(|i| location[i..].to_string())
        .expect("an operation URL");
    let doc = wait_operation(&serve, &location, Duration::from_secs(900));
    let took = t.elapsed().as_secs_f64();
    let error = if doc["status"] == "Succeeded" {
        None
    } else {
        Some(format!("{}: {}", doc["status"], doc["error"]["message"]))
    };
    (took, common::vm_hwm_kib(serve.live.child.id()), error)
}

/// `egress`: to a folder (the plain local copy), to moto's S3 server and to Azurite.
pub fn egress() {
    let p = match peers::peers() {
        Some(p) => p,
        None => return,
    };
    let files = TempDir::new("dsipc-bench-egress-out").unwrap();
    let conf = TempDir::new("dsipc-bench-egress-conf").unwrap();
    let (moto, endpoint) = peers::moto(&p);
    let (azurite, blob, _queue) = peers::azurite(&p);
    let settings = conf.path().join("settings.json");
    let doc = json!({"Egress": {
        "FileSystem": {"files": {"DirectoryPath": files.path()}},
        "S3Storage": {"s3": {
            "Endpoint": endpoint, "BucketName": "traces", "RegionName": "us-east-1",
            "AccessKeyId": "testing", "SecretAccessKey": "testing-secret-key",
            "ForcePathStyle": true
        }},
        "AzureBlobStorage": {"blobs": {
            "AccountUri": format!("http://127.0.0.1:{}/{}", blob, peers::AZURITE_ACCOUNT),
            "ContainerName": "traces", "AccountKeyName": "AzuriteKey"
        }},
        "Properties": {"AzuriteKey": peers::AZURITE_KEY}
    }});
    std::fs::write(&settings, doc.to_string()).unwrap();
    println!("load: {}", loadavg());
    for (provider, what) in [
        ("files", "a folder (FileSystem)"),
        ("s3", "S3 (moto)"),
        ("blobs", "Azure Blob Storage (Azurite)"),
    ] {
        let (secs, peak, error) = egress_once(&settings, provider);
        let mib_len = trace_len() / peers::MIB;
        match error {
            None => println!(
                "serve egress of {} MiB to {}: {:.1} s, {:.0} MiB/s; serve's peak RSS {:.1} MiB (target: at most 32 MiB)",
                mib_len,
                what,
                secs,
                mib_len as f64 / secs,
                mib(peak)
            ),
            Some(e) => println!(
                "serve egress of {} MiB to {}: FAILED after {:.1} s ({}); serve's peak RSS {:.1} MiB",
                mib_len,
                what,
                secs,
                e,
                mib(peak)
            ),
        }
        // Room for the next: the folder's copy goes, the peers keep theirs in memory.
        for e in std::fs::read_dir(files.path()).unwrap() {
            let _ = std::fs::remove_file(e.unwrap().path());
        }
    }
    println!("load: {}", loadavg());
    drop((moto, azurite));
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The three rules every runtime gets: an EventCounter trigger (the working set, always
/// over 1 MB: fires as often as its limit lets it), CPUUsage (over 5% for 5 s: the busy
/// runtimes) and GCHeapSize (over 1 MB); actions a short trace, a program, a stacks
/// report, each limited by ActionCount over a sliding window.
fn rules_settings(out: &Path) -> Value {
    json!({
        "Egress": {"FileSystem": {"files": {"DirectoryPath": out}}},
        "CollectionRules": {
            "WorkingSet": {
                "Trigger": {"Type": "EventCounter", "Settings": {
                    "ProviderName": "System.Runtime", "CounterName": "working-set",
                    "GreaterThan": 1, "SlidingWindowDuration": "00:00:05"}},
                "Actions": [{"Type": "CollectTrace", "Settings": {
                    "Providers": [{"Name": "System.Runtime"}],
                    "Duration": "00:00:02", "Egress": "files"}}],
                "Limits": {"ActionCount": 1, "ActionCountSlidingWindowDuration": "00:02:00"}
            },
            "Cpu": {
                "Trigger": {"Type": "CPUUsage", "Settings": {
                    "GreaterThan": 5, "SlidingWindowDuration": "00:00:05"}},
                "Actions": [{"Type": "Execute", "Settings": {"Path": "/bin/true"}}],
                "Limits": {"ActionCount": 2, "ActionCountSlidingWindowDuration": "00:01:00"}
            },
            "Heap": {
                "Trigger": {"Type": "GCHeapSize", "Settings": {
                    "GreaterThan": 1, "SlidingWindowDuration": "00:00:10"}},
                "Actions": [{"Type": "CollectStacks", "Settings": {
                    "Format": "PlainText", "Egress": "files"}}],
                "Limits": {"ActionCount": 1, "ActionCountSlidingWindowDuration": "00:05:00"}
            }
        }
    })
}

/// `rules`: 20 real .NET 8 runtimes (2 of them busy) with the 3 rules each, for
/// `DSIPC_BENCH_SECONDS`: serve's CPU (utime + stime over the run) and peak RSS, and how
/// often the rules fired.
pub fn rules() {
    let secs: u64 = std::env::var("DSIPC_BENCH_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(600);
    common::configure_python();
    let dir = TempDir::new("dsipc-bench-rules").unwrap();
    let out = TempDir::new("dsipc-bench-rules-out").unwrap();
    let (_hosts, pids) = crate::net8_fleet(&dir, (secs + 300) as u32, &[0, 1]);
    let settings = dir.path().join("settings.json");
    std::fs::write(&settings, rules_settings(out.path()).to_string()).unwrap();
    let serve = Serve::start_with(dir.path(), &["--no-auth"], |c| {
        c.arg("--configuration-file-path").arg(&settings);
    });
    let pid = serve.live.child.id();
    println!("load: {}", loadavg());
    let cpu0 = cpu_secs(pid);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let cpu = cpu_secs(pid) - cpu0;
    let wall = t0.elapsed().as_secs_f64();
    let peak = common::vm_hwm_kib(pid);
    let load = loadavg();
    let mut fired = 0;
    for p in &pids {
        for rule in ["WorkingSet", "Cpu", "Heap"] {
            let doc = serve
                .get(&format!("/collectionrules/{}?pid={}", rule, p))
                .json();
            fired += doc["lifetimeOccurrences"].as_u64().unwrap_or(0);
        }
    }
    let artifacts = std::fs::read_dir(out.path()).map_or(0, |d| d.count());
    println!(
        "serve rules: 20 runtimes (2 busy) x 3 rules for {:.0} s: {} firings, {} artifacts egressed; serve's CPU {:.2} s = {:.2}% of a core, peak RSS {:.1} MiB",
        wall,
        fired,
        artifacts,
        cpu,
        cpu / wall * 100.0,
        mib(peak)
    );
    println!("load: {}", load);
    drop(serve);
}

/// Where `pid`'s resident pages are now (/proc/PID/smaps), in KiB: the executable's own
/// mappings (file-backed: its code and read-only data, plus the copies written to by
/// relocations), every other file (libc, ld.so...), and anonymous memory (heap, stacks).
pub fn resident_split(pid: u32) -> (u64, u64, u64) {
    let exe = std::fs::read_link(format!("/proc/{}/exe", pid)).unwrap_or_default();
    let text = std::fs::read_to_string(format!("/proc/{}/smaps", pid)).unwrap_or_default();
    let (mut own, mut files, mut anon) = (0, 0, 0);
    let mut in_exe = false;
    let mut file_backed = false;
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let first = f.next().unwrap_or("");
        if first.contains('-') && !first.ends_with(':') {
            // A mapping's header: range, perms, offset, device, inode, [path].
            let path = line.split_whitespace().nth(5).unwrap_or("");
            in_exe = !path.is_empty() && Path::new(path) == exe;
            file_backed = path.starts_with('/');
            continue;
        }
        let kib: u64 = f.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        match first {
            "Anonymous:" => anon += kib,
            // The file's pages still shared with the page cache (not copied on write).
            "Private_Clean:" | "Shared_Clean:" if in_exe => own += kib,
            "Private_Clean:" | "Shared_Clean:" if file_backed => files += kib,
            _ => {}
        }
    }
    (own, files, anon)
}

/// How many times `pid`'s threads went to sleep waiting (voluntary context switches, summed
/// over /proc/PID/task/*/status): its wakeups, near enough.
pub fn sleeps(pid: u32) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{}/task", pid));
    tasks
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .filter_map(|v| v.trim().parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}
