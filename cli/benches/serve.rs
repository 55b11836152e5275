//! `dsipc serve`'s figures (issue 18), with the release binary:
//!
//!     cargo bench -p dsipc-cli --bench serve            # idle, throughput and fleet
//!     cargo bench -p dsipc-cli --bench serve -- idle    # one: idle | throughput | fleet
//!                                                       #   | egress | rules (only by name)
//!
//! - idle: peak RSS (VmHWM) of serve with no runtime, after 100 requests (target 16 MiB),
//!   and where the resident pages are at start (`DSIPC_BIN` runs another build; the
//!   alternating runs against older trees: scripts/bench-serve-idle.sh);
//! - throughput: a 1 GiB nettrace stream from the fake runtime through `GET /trace`
//!   (curl writing a file) against `dsipc trace -o FILE` of the same stream (both files in
//!   the same folder), 5 runs each alternating, medians (target: at least 90%);
//! - fleet: 20 real .NET 8 runtimes (needs `scripts/setup-runtimes.sh`), `/metrics`
//!   scraped every second and a CPU trace of a busy one streaming, for 30 s: serve's peak
//!   RSS (target 32 MiB) and CPU as a share of one core (target 5%), how often its threads
//!   slept (woke) and where its resident pages are at the end;
//! - egress (scripts/bench-serve-egress.sh): serve egressing a 1 GiB trace of the fake
//!   runtime (`GET /trace?egressProvider=`) to a folder, to moto's S3 server and to
//!   Azurite, a fresh serve for each: time, MiB/s and serve's peak RSS (target 32 MiB);
//! - rules (scripts/bench-serve-rules.sh): 20 real .NET 8 runtimes with 3 collection rules
//!   each for `DSIPC_BENCH_SECONDS` (default 600): serve's CPU and peak RSS.
#![cfg(target_os = "linux")]

#[path = "../tests/common/mod.rs"]
mod common;
#[path = "serve/load.rs"]
mod load;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use dsipc_testkit::{Config, HostOptions, HostedRuntime, StreamSpec, TempDir};

const RUNS: usize = 5;

fn main() {
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wants = |s: &str| only.is_empty() || only.iter().any(|o| o == s);
    if wants("idle") {
        idle();
    }
    if wants("throughput") {
        throughput();
    }
    if wants("fleet") {
        fleet();
    }
    // Long, or needing the egress peers: only when named.
    if only.iter().any(|o| o == "egress") {
        load::egress();
    }
    if only.iter().any(|o| o == "rules") {
        load::rules();
    }
}

/// A running serve (release build) on ephemeral loopback ports, no auth.
struct Serve {
    child: Child,
    api: String,
    metrics: String,
}

impl Serve {
    fn start(args: &[&str]) -> Serve {
        let mut child = Command::new(common::bin())
            .args([
                "serve",
                "--no-auth",
                "--urls",
                "http://127.0.0.1:0",
                "--metricUrls",
                "http://127.0.0.1:0",
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("dsipc serve");
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let (mut api, mut metrics) = (String::new(), String::new());
        while api.is_empty() || metrics.is_empty() {
            let mut line = String::new();
            if err.read_line(&mut line).unwrap() == 0 {
                panic!("serve ended before listening");
            }
            let addr = line
                .trim()
                .rsplit("http://")
                .next()
                .unwrap_or("")
                .to_string();
            if line.contains("dsipc: API on") {
                api = addr;
            } else if line.contains("dsipc: metrics on") {
                metrics = addr;
            }
        }
        // Keep draining stderr so serve never blocks on it.
        std::thread::spawn(move || for _ in err.lines() {});
        Serve {
            child,
            api,
            metrics,
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn curl(url: &str) -> (bool, Duration) {
    curl_to(url, "/dev/null")
}

/// curl `url` into `out`; whether it succeeded and how long it took.
fn curl_to(url: &str, out: &str) -> (bool, Duration) {
    let t = Instant::now();
    let ok = Command::new("curl")
        .args(["-s", "-f", "-o", out, "--max-time", "600", url])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    (ok, t.elapsed())
}

/// utime + stime of `pid`, in seconds.
pub(crate) fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid)).unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 of stat (utime, stime) are 12 and 13 after the ')'.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

pub(crate) fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn idle() {
    let empty = TempDir::new("dsipc-bench-serve").unwrap();
    let serve = Serve::start(&["--tmpdir", common::s(empty.path())]);
    let started = common::vm_hwm_kib(serve.pid());
    let (own, files, anon) = load::resident_split(serve.pid());
    for i in 0..100 {
        let path = ["/processes", "/info", "/metrics"][i % 3];
        curl(&format!("http://{}{}", serve.api, path));
    }
    curl(&format!("http://{}/metrics", serve.metrics));
    println!(
        "serve idle: peak RSS {:.1} MiB at start, {:.1} MiB after 100 requests (target: at most 16 MiB)",
        mib(started),
        mib(common::vm_hwm_kib(serve.pid()))
    );
    println!(
        "serve idle: resident at start: {:.2} MiB of the binary's own file pages, {:.2} MiB of other files, {:.2} MiB anonymous",
        mib(own),
        mib(files),
        mib(anon)
    );
}

/// A fake runtime in `dir` listed as this process (socket key = our start time).
fn listed_fake(dir: &TempDir, spec: StreamSpec) -> dsipc_testkit::FakeRuntime {
    let me = std::process::id();
    Config::new()
        .like_net8_0_4()
        .stream(spec)
        .pid(u64::from(me))
        .key(dsipc_std::unix::start_key(me).expect("start key"))
        .listen_in(dir.path())
        .start()
        .expect("fake runtime")
}

fn throughput() {
    let stream: &'static [u8] = Box::leak(common::nettrace_stream(1 << 30).into_boxed_slice());
    let gb = stream.len() as f64 / 1e9;
    let (mut http, mut file) = (Vec::new(), Vec::new());
    let mut serve_peak = 0;
    for _ in 0..RUNS {
        {
            let dir = TempDir::new("dsipc-bench-serve").unwrap();
            let _rt = listed_fake(&dir, StreamSpec::content(stream));
            let serve = Serve::start(&["--tmpdir", common::s(dir.path())]);
            let (ok, took) = curl(&format!("http://{}/trace?durationSeconds=-1", serve.api));
            assert!(ok, "GET /trace failed");
            serve_peak = serve_peak.max(common::vm_hwm_kib(serve.pid()));
            http.push(took.as_secs_f64());
        }
        {
            let dir = TempDir::new("dsipc-bench-serve").unwrap();
            let _rt = listed_fake(&dir, StreamSpec::content(stream));
            let out = dir.path().join("file.nettrace");
            let r = common::dsipc_limit(
                &[
                    "trace",
                    &common::me(),
                    "-o",
                    common::s(&out),
                    "--duration",
                    "600",
                    "--tmpdir",
                    common::s(dir.path()),
                ],
                Duration::from_secs(600),
            );
            assert_eq!(r.code, Some(0), "{}", r.stderr);
            file.push(r.took.as_secs_f64());
        }
    }
    let (h, f) = (median(http), median(file));
    println!(
        "serve throughput: GET /trace {:.3} s = {:.2} GB/s; dsipc trace -o FILE {:.3} s = {:.2} GB/s; /trace is {:.0}% of dsipc trace (target: at least 90%); serve's peak RSS {:.1} MiB",
        h,
        gb / h,
        f,
        gb / f,
        f / h * 100.0,
        mib(serve_peak)
    );
}

/// 20 real .NET 8 runtimes with their counters on (`host.py --counters`), those at `busy`
/// busy too, TMPDIR `dir`, for at most `max_seconds`: the hosts (they end when dropped)
/// and their pids, once each is ready.
pub(crate) fn net8_fleet(
    dir: &TempDir,
    max_seconds: u32,
    busy: &[usize],
) -> (Vec<HostedRuntime>, Vec<u32>) {
    let mut hosts: Vec<HostedRuntime> = Vec::new();
    for i in 0..20 {
        let mut o = HostOptions::net8(max_seconds).env("TMPDIR", dir.path().as_os_str());
        o.args.push("--counters".into());
        if busy.contains(&i) {
            o.args.push("--busy".into());
        }
        hosts.push(HostedRuntime::spawn(&o).expect("spawn host"));
    }
    let mut pids = Vec::new();
    for h in &mut hosts {
        pids.push(
            h.wait_ready(Duration::from_secs(300))
                .expect("host READY")
                .pid,
        );
    }
    (hosts, pids)
}

fn fleet() {
    common::configure_python();
    let dir = TempDir::new("dsipc-bench-fleet").unwrap();
    let (_hosts, pids) = net8_fleet(&dir, 600, &[1]);
    let default = format!("ProcessId={}", pids[0]);
    let serve = Serve::start(&[
        "--tmpdir",
        common::s(dir.path()),
        "--default-process",
        &default,
    ]);
    let api = serve.api.clone();
    let traced = pids[1];
    let trace = std::thread::spawn(move || {
        curl(&format!(
            "http://{}/trace?pid={}&profile=Cpu&durationSeconds=30",
            api, traced
        ))
    });
    let cpu0 = cpu_secs(serve.pid());
    let sleeps0 = load::sleeps(serve.pid());
    let t0 = Instant::now();
    let mut scrapes = 0;
    let mut with_counters = 0;
    while t0.elapsed() < Duration::from_secs(30) {
        let next = t0 + Duration::from_secs(scrapes + 1);
        let out = Command::new("curl")
            .args(["-s", &format!("http://{}/metrics", serve.metrics)])
            .output()
            .unwrap();
        if String::from_utf8_lossy(&out.stdout).contains("systemruntime_") {
            with_counters += 1;
        }
        scrapes += 1;
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    let (ok, _) = trace.join().unwrap();
    let cpu = cpu_secs(serve.pid()) - cpu0;
    let sleeps = load::sleeps(serve.pid()) - sleeps0;
    let wall = t0.elapsed().as_secs_f64();
    let (own, files, anon) = load::resident_split(serve.pid());
    println!(
        "serve fleet: 20 runtimes, {} scrapes ({} with counters), one 30 s CPU trace ({}): serve's CPU {:.2} s in {:.1} s = {:.1}% of a core (target: at most 5%), peak RSS {:.1} MiB (target: at most 32 MiB)",
        scrapes,
        with_counters,
        if ok { "ok" } else { "FAILED" },
        cpu,
        wall,
        cpu / wall * 100.0,
        mib(common::vm_hwm_kib(serve.pid()))
    );
    println!(
        "serve fleet: its threads slept {} times ({:.1} per second); resident at the end: {:.2} MiB of the binary's own file pages, {:.2} MiB of other files, {:.2} MiB anonymous",
        sleeps,
        sleeps as f64 / wall,
        mib(own),
        mib(files),
        mib(anon)
    );
}
