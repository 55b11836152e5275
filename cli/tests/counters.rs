//! `dsipc counters` end to end against real .NET 8.0.4 and Core 3.1.23 runtimes, and a real
//! Prometheus server scraping `dsipc counters export` (Debian package `prometheus`, which
//! scripts/test.sh installs). Every wait is bounded; tests synchronise on lines printed,
//! bytes written and scrape results, never on sleeps.
#![cfg(target_os = "linux")]

mod common;

use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{bin, dsipc_limit, free_port, http_get, s, temp_dir, Live, Prometheus, Run, LIMIT};
use dsipc_testkit::{HostOptions, HostedRuntime};

const READY: Duration = Duration::from_secs(90);

fn host(runtime: &str, args: &[&str]) -> HostedRuntime {
    let mut o = HostOptions::net8(300);
    o.runtime = runtime.to_string();
    o.args = args.iter().map(|s| s.to_string()).collect();
    let mut h = HostedRuntime::spawn(&o).expect("spawn host");
    h.wait_ready(READY).expect("host ready");
    h
}

/// `dsipc ARGS --refresh-interval 1`, running.
fn every_second(args: &[&str]) -> Live {
    Live::dsipc(&[args, &["--refresh-interval", "1"]].concat())
}

/// `dsipc counters collect PID ARGS --refresh-interval 1`, run to its end.
fn collect(pid: &str, args: &[&str]) -> Run {
    every_second(&[&["counters", "collect", pid], args].concat()).wait(LIMIT)
}

/// Ctrl-C: exit 0, having said that an exited runtime's series were dropped.
fn stopped_after_dropping_series(mut live: Live) {
    let r = live.interrupt(LIMIT);
    r.assert_exit(0, &["runtime exited; its series are dropped"]);
}

/// Values of the rows of `csv` whose counter name starts with `name`.
fn csv_values(csv: &str, provider: &str, name: &str) -> Vec<f64> {
    csv.lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split(',').collect();
            if cols.len() == 5 && cols[1] == provider && cols[2].starts_with(name) {
                cols[4].parse().ok()
            } else {
                None
            }
        })
        .collect()
}

#[test]
fn collect_csv_net8_system_runtime_and_meter_rate() {
    let h = host("net8", &["--counters", "--meter-rate", "50"]);
    let dir = temp_dir("csv");
    let out = dir.join("c.csv");
    let pid = h.pid().to_string();
    // --duration 8: room for a loaded machine, at least 3 full intervals must arrive.
    let r = collect(
        &pid,
        &[
            "--counters",
            "System.Runtime,MyMeter",
            "--duration",
            "8",
            "-o",
            s(&out),
        ],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let csv = std::fs::read_to_string(&out).unwrap();
    assert!(csv.starts_with("Timestamp,Provider,Counter Name,Counter Type,Mean/Increment\n"));
    let cpu = csv_values(&csv, "System.Runtime", "CPU Usage (%)");
    assert!(cpu.len() >= 2, "{}", csv);
    assert!(
        csv.contains(",System.Runtime,Working Set (MB),Metric,"),
        "{}",
        csv
    );
    assert!(
        csv.contains(",System.Runtime,Allocation Rate (B / 1 sec),Rate,"),
        "{}",
        csv
    );
    let rates = csv_values(&csv, "MyMeter", "requests (requests / 1 sec)");
    assert!(rates.len() >= 3, "{}", csv);
    // Every full 1 s interval holds ~50 increments (the first may be partial).
    let full: Vec<f64> = rates[1..].to_vec();
    let mean = full.iter().sum::<f64>() / full.len() as f64;
    assert!((45.0..=55.0).contains(&mean), "rates {:?}", rates);
    // Never replaces what it did not create, unless --force says so.
    let again = collect(&pid, &["--duration", "1", "-o", s(&out)]);
    assert_eq!(again.code, Some(1));
    assert!(again.stderr.contains("exists"), "{}", again.stderr);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), csv);
    // A duration shorter than the first publication (~2 s on .NET 8) still gets the first
    // values, as dotnet-counters does; dd:hh:mm:ss as dotnet-counters takes it.
    let forced = collect(
        &pid,
        &["--duration", "00:00:01.5", "-o", s(&out), "--force"],
    );
    assert_eq!(forced.code, Some(0), "{}", forced.stderr);
    assert_ne!(std::fs::read_to_string(&out).unwrap(), csv);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Without -o, dotnet-counters' counter.csv, timestamped: a second run never meets the first
/// run's file; dotnet-counters' spellings (`--maxTimeSeries`, `--format CSV`) are taken.
#[test]
fn collect_without_o_writes_a_new_timestamped_file_each_run() {
    let h = host("net8", &["--counters"]);
    let dir = temp_dir("default-name");
    let pid = h.pid().to_string();
    for _ in 0..2 {
        let mut child = Command::new(bin())
            .current_dir(&dir)
            .args([
                "counters",
                "collect",
                &pid,
                "--duration",
                "1",
                "--refresh-interval",
                "1",
                "--maxTimeSeries",
                "50",
                "--format",
                "CSV",
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let (status, _) = common::wait_bounded(&mut child, "counters collect", LIMIT);
        assert!(status.success(), "{:?}", status);
    }
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{:?}", files);
    for f in &files {
        assert!(
            f.starts_with("counter_") && f.ends_with(".csv"),
            "{:?}",
            files
        );
        let csv = std::fs::read_to_string(dir.join(f)).unwrap();
        assert!(csv.contains(",System.Runtime,CPU Usage (%),"), "{}", csv);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `collect --duration` ends at a publication's edge: every counter of System.Runtime appears
/// the same number of times (a publication cut in two would leave some one short).
#[test]
fn collect_with_a_duration_writes_whole_publications_only() {
    let h = host("net8", &["--counters"]);
    let dir = temp_dir("whole");
    let pid = h.pid().to_string();
    for (i, duration) in ["2", "2.5", "3"].iter().enumerate() {
        let out = dir.join(format!("c{}.csv", i));
        let r = collect(
            &pid,
            &[
                "--counters",
                "System.Runtime",
                "--duration",
                duration,
                "-o",
                s(&out),
            ],
        );
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        let csv = std::fs::read_to_string(&out).unwrap();
        let mut per_name = std::collections::BTreeMap::new();
        for line in csv.lines().skip(1) {
            let cols: Vec<&str> = line.split(',').collect();
            *per_name.entry(cols[2].to_string()).or_insert(0usize) += 1;
        }
        let counts: std::collections::BTreeSet<usize> = per_name.values().copied().collect();
        assert!(per_name.len() > 10, "{}", csv);
        assert_eq!(counts.len(), 1, "{:?}\n{}", per_name, csv);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn collect_json_netcore31() {
    let h = host("netcore31", &["--counters"]);
    let dir = temp_dir("json");
    let out = dir.join("c");
    let pid = h.pid().to_string();
    // --duration 8: room for a loaded machine, a Core 3.1 runtime's first publication can
    // take several seconds after the session starts when the CPUs are busy.
    let r = collect(
        &pid,
        &["--format", "json", "--duration", "8", "-o", s(&out)],
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let json = std::fs::read_to_string(dir.join("c.json")).unwrap();
    assert!(json.starts_with("{ \"TargetProcess\": \""), "{}", json);
    assert!(json.contains("\", \"StartTime\": \""));
    assert!(json.contains("\"Events\": [{ \"timestamp\": \""));
    assert!(
        json.contains("\"provider\": \"System.Runtime\",  \"name\": \"CPU Usage (%)\""),
        "{}",
        json
    );
    assert!(json.contains("\"counterType\": \"Rate\""));
    assert!(json.ends_with(" }]}"), "{}", json);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn collect_from_a_runtime_that_never_publishes_fails() {
    // Without RuntimeEventSource.Initialize() the hosted runtime publishes no counters.
    let h = host("netcore31", &[]);
    let pid = h.pid().to_string();
    let r = collect(&pid, &["-o", "-"]);
    r.assert_exit(1, &["no counters received in 10.0 s"]);
    // The file (stdout here) is still complete: the header, no rows.
    assert_eq!(
        r.stdout,
        "Timestamp,Provider,Counter Name,Counter Type,Mean/Increment\n"
    );
}

#[test]
fn collect_ends_with_a_complete_file_when_the_runtime_exits() {
    let mut h = host("net8", &["--counters"]);
    let pid = h.pid().to_string();
    let mut live = every_second(&["counters", "collect", &pid, "--format", "json", "-o", "-"]);
    live.wait_stdout("\"timestamp\"", LIMIT);
    h.kill();
    let r = live.wait(LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.ends_with(" }]}"), "{}", r.stdout);
    assert!(
        r.stderr.contains("the runtime ended the session"),
        "{}",
        r.stderr
    );
}

#[test]
fn monitor_prints_lines_when_not_a_terminal_and_stops_on_sigint() {
    let h = host("net8", &["--counters"]);
    let pid = h.pid().to_string();
    let counters = "System.Runtime[cpu-usage,working-set]";
    let mut live = every_second(&["counters", "monitor", &pid, "--counters", counters]);
    live.wait_stdout("Working Set (MB)", LIMIT);
    let r = live.interrupt(LIMIT);
    assert_eq!(r.code, Some(0));
    let out = r.stdout;
    assert!(out.contains("\tSystem.Runtime\tCPU Usage (%)\t"), "{}", out);
    assert!(
        !out.contains("gc-heap-size") && !out.contains("GC Heap Size"),
        "{}",
        out
    );
}

/// A counter or provider asked for by a name the runtime does not publish is said once
/// (the table would stay empty forever otherwise); what does publish is shown as usual.
#[test]
fn monitor_names_what_never_published() {
    let h = host("net8", &["--counters"]);
    let pid = h.pid().to_string();
    let counters = "System.Runtime[cpu-usage,cpu-usag],System.Runtim";
    let mut live = every_second(&["counters", "monitor", &pid, "--counters", counters]);
    let line = live.stderr_line("nothing published", LIMIT);
    assert!(
        line.contains("by System.Runtime[cpu-usag], System.Runtim: check the names"),
        "{}",
        line
    );
    let r = live.interrupt(LIMIT);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stdout.contains("\tSystem.Runtime\tCPU Usage (%)\t"),
        "{}",
        r.stdout
    );
}

/// The values of a Prometheus vector answer, by their `pid` label.
fn values_by_pid(answer: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for part in answer.split("{\"metric\":").skip(1) {
        let pid = part
            .split("\"pid\":\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap_or("")
            .to_string();
        let value = part
            .split("\"value\":[")
            .nth(1)
            .and_then(|s| s.split(",\"").nth(1))
            .and_then(|s| s.split('"').next())
            .and_then(|s| s.parse().ok())
            .unwrap_or(f64::NAN);
        out.push((pid, value));
    }
    out
}

/// The System.Runtime metrics of Grafana dashboard 19297 (its
/// `microsoftaspnetcorehosting_requests_per_second` needs ASP.NET Core: not in these hosts).
const DASHBOARD_19297_SYSTEM_RUNTIME: &[&str] = &[
    "systemruntime_working_set_bytes",
    "systemruntime_gc_heap_size_bytes",
    "systemruntime_cpu_usage_ratio",
    "systemruntime_exception_count",
    "systemruntime_threadpool_thread_count",
    "systemruntime_threadpool_queue_length",
    "systemruntime_gen_0_size_bytes",
    "systemruntime_gen_1_size_bytes",
    "systemruntime_gen_2_size_bytes",
    "systemruntime_poh_size_bytes",
    "systemruntime_loh_size_bytes",
    "systemruntime_alloc_rate_bytes",
    "systemruntime_time_in_gc_ratio",
    "systemruntime_gc_fragmentation_ratio",
    "systemruntime_gen_0_gc_count",
    "systemruntime_gen_1_gc_count",
    "systemruntime_gen_2_gc_count",
];

/// Of those, what .NET Core 3.1 does not publish (both came in .NET 5).
const CORE31_LACKS: &[&str] = &[
    "systemruntime_poh_size_bytes",
    "systemruntime_gc_fragmentation_ratio",
];

#[test]
fn export_is_scraped_by_prometheus_and_drops_exited_runtimes() {
    let mut h8 = host("net8", &["--counters", "--meter-rate", "50"]);
    let h31 = host("netcore31", &["--counters"]);
    let p8: String = h8.pid().to_string();
    let p31: String = h31.pid().to_string();
    let export = ["counters", "export", &p8, &p31, "--listen", "127.0.0.1:0"];
    let mut live = every_second(&[&export[..], &["--counters", "System.Runtime,MyMeter"]].concat());
    let line = live.stderr_line("dsipc: metrics on http://", LIMIT);
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|s| s.split("/metrics").next())
        .unwrap()
        .to_string();

    // An idle client (connects, sends nothing) does not stall the endpoint.
    let _idle = TcpStream::connect(&addr).unwrap();
    let t = Instant::now();
    let (status, _) = http_get(&addr, "/metrics");
    assert_eq!(status, 200);
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());

    let prom = Prometheus::start(&addr);
    // Both runtimes' System.Runtime counters arrive in Prometheus.
    prom.poll("systemruntime_cpu_usage_ratio", LIMIT, |r| {
        let v = values_by_pid(r);
        v.iter().any(|(p, _)| p == &p8) && v.iter().any(|(p, _)| p == &p31)
    });
    // The Meter counter (unit `requests`) is a gauge of the last interval's increase, as
    // dotnet-monitor has it: ~50 a 1 s interval.
    let q = format!("mymeter_requests_requests{{pid=\"{}\"}}", p8);
    let r = prom.poll(&q, LIMIT, |r| {
        values_by_pid(r)
            .iter()
            .any(|(_, v)| (40.0..=60.0).contains(v))
    });
    eprintln!("{}", r);

    let (_, body) = http_get(&addr, "/metrics");
    assert!(
        body.contains(&format!("mymeter_requests_requests{{pid=\"{}\"}}", p8)),
        "{}",
        body
    );
    assert!(body.contains("# TYPE mymeter_requests_requests gauge"));
    assert!(body.contains("# TYPE systemruntime_cpu_usage_ratio gauge"));
    assert!(
        body.contains("# TYPE mymeter_latency_ms summary"),
        "{}",
        body
    );
    assert!(
        body.contains(&format!(
            "mymeter_latency_ms{{pid=\"{}\",quantile=\"0.95\"}} 10\n",
            p8
        )),
        "{}",
        body
    );
    // The System.Runtime metrics Grafana dashboard 19297 (made for dotnet-monitor) queries,
    // by dotnet-monitor's names, from both runtimes (Core 3.1 has no POH nor fragmentation).
    for name in DASHBOARD_19297_SYSTEM_RUNTIME {
        for pid in [&p8, &p31] {
            if pid == &p31 && CORE31_LACKS.contains(name) {
                continue;
            }
            assert!(
                body.contains(&format!("\n{}{{pid=\"{}\"}} ", name, pid)),
                "no {} of {}:\n{}",
                name,
                pid,
                body
            );
        }
    }
    // MB are exported in bytes (dotnet-monitor's 1,000,000 a MB).
    let ws = body
        .lines()
        .find_map(|l| {
            l.strip_prefix(&format!(
                "systemruntime_working_set_bytes{{pid=\"{}\"}} ",
                p8
            ))
        })
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap();
    assert!(ws > 1e7, "{}", ws);
    common::promtool_check(&body);

    // The .NET 8 runtime exits: its series go, the endpoint keeps serving the other one.
    h8.kill();
    let deadline = Instant::now() + LIMIT;
    loop {
        let (status, body) = http_get(&addr, "/metrics");
        assert_eq!(status, 200);
        if !body.contains(&format!("pid=\"{}\"", p8)) {
            assert!(body.contains(&format!("pid=\"{}\"", p31)), "{}", body);
            break;
        }
        assert!(Instant::now() < deadline, "series of {} still there", p8);
        std::thread::sleep(Duration::from_millis(200));
    }
    prom.poll("count(systemruntime_cpu_usage_ratio)", LIMIT, |r| {
        values_by_pid(r).first().map_or(false, |(_, v)| *v == 1.0)
    });
    stopped_after_dropping_series(live);
}

#[test]
fn monitor_metrics_exports_reverse_port_runtimes_and_drops_exited_ones() {
    let dir = temp_dir("monitor");
    let port_path = dir.join("port.sock");
    let metrics = format!("127.0.0.1:{}", free_port());
    let listen = [
        "monitor",
        "--listen",
        s(&port_path),
        "--resume",
        "--metrics",
        &metrics,
    ];
    let counters = ["--counters", "System.Runtime[cpu-usage],MyMeter"];
    let mut live = every_second(&[&listen[..], &counters].concat());
    // The runtime starts suspended on the reverse port; the monitor resumes it.
    let mut o = HostOptions::net8(300).reverse_port(&port_path, true);
    o.args = vec!["--counters".into(), "--meter-rate".into(), "50".into()];
    let mut h = HostedRuntime::spawn(&o).expect("spawn host");
    let pid = h.pid().to_string();
    live.wait_stdout(&format!("pid={} ", pid), LIMIT);
    h.wait_ready(READY).expect("host ready after the resume");
    let series = format!("mymeter_requests_requests{{pid=\"{}\"}}", pid);
    let deadline = Instant::now() + LIMIT;
    let body = loop {
        let (status, body) = http_get(&metrics, "/metrics");
        assert_eq!(status, 200);
        if body.contains(&series) && body.contains("systemruntime_cpu_usage_ratio{") {
            break body;
        }
        assert!(Instant::now() < deadline, "no {} in:\n{}", series, body);
        std::thread::sleep(Duration::from_millis(200));
    };
    common::promtool_check(&body);
    let prom = Prometheus::start(&metrics);
    // The last interval's increase, ~50 a 1 s interval.
    prom.poll(&series, LIMIT, |r| {
        values_by_pid(r)
            .iter()
            .any(|(_, v)| (40.0..=60.0).contains(v))
    });
    h.kill();
    let deadline = Instant::now() + LIMIT;
    loop {
        let (status, body) = http_get(&metrics, "/metrics");
        assert_eq!(status, 200);
        if !body.contains(&format!("pid=\"{}\"", pid)) {
            break;
        }
        assert!(Instant::now() < deadline, "series of {} still there", pid);
        std::thread::sleep(Duration::from_millis(200));
    }
    stopped_after_dropping_series(live);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn counters_usage_errors() {
    for (args, needle) in [
        (
            &["counters"][..],
            "counters needs monitor, collect or export",
        ),
        (&["counters", "collect"][..], "missing PID"),
        (
            &["counters", "collect", "1", "--counters", "A[x"][..],
            "'[' without closing ']'",
        ),
        (
            &["counters", "collect", "1", "--format", "xml"][..],
            "--format is csv or json",
        ),
        (
            &["counters", "monitor", "1", "--refresh-interval", "0"][..],
            "--refresh-interval wants a positive number of seconds (1.5) or dd:hh:mm:ss",
        ),
        (
            &["counters", "collect", "1", "--duration", "1:2"][..],
            "--duration wants a positive number of seconds (1.5) or dd:hh:mm:ss",
        ),
        (
            &[
                "counters",
                "monitor",
                "1",
                "--refresh-interval",
                "2:00:00:00",
            ][..],
            "--refresh-interval is at most a day",
        ),
        (
            &["counters", "export", "1"][..],
            "export needs --listen ADDR",
        ),
        (&["counters", "frobnicate"][..], "unknown counters command"),
        (
            &["monitor", "--listen", "/nonexistent/x", "--counters", "A"][..],
            "need --metrics ADDR",
        ),
    ] {
        let r = dsipc_limit(args, LIMIT);
        r.assert_exit(2, &[needle]);
    }
    // A process that is not there: one line, exit 1.
    let r = dsipc_limit(&["counters", "collect", "999999999", "-o", "-"], LIMIT);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
}

#[test]
fn monitor_redraws_a_table_in_place_on_a_terminal() {
    // util-linux `script` gives dsipc a pseudo-terminal as stdout.
    let h = host("net8", &["--counters"]);
    let command = format!(
        "exec {} counters monitor {} --counters 'System.Runtime[cpu-usage,working-set]'",
        bin().display(),
        h.pid()
    );
    let mut cmd = Command::new("script");
    cmd.args(["-q", "-e", "-c", &command, "/dev/null"]);
    let seen = Live::spawn(cmd).wait_stdout("Working Set (MB)", LIMIT);
    assert!(seen.starts_with("\x1b[2J\x1b[H"), "{:?}", seen);
    assert!(seen.contains("\x1b[H\x1b[J"), "{:?}", seen);
    assert!(seen.contains("[System.Runtime]"), "{:?}", seen);
    assert!(seen.contains("    Status: Running"), "{:?}", seen);
    // Values are in the table, not one line per value.
    assert!(!seen.contains("\tSystem.Runtime\t"), "{:?}", seen);
}

/// `tmux ARGS`, bounded; its stdout.
fn tmux(socket: &str, args: &[&str]) -> String {
    let mut all = vec!["-L", socket];
    all.extend_from_slice(args);
    let r = common::run("tmux", &all, LIMIT);
    r.stdout
}

/// The pane's text, polled until `done` says it holds what the test waits for (an event
/// on the screen; bounded by LIMIT).
fn pane_until(socket: &str, done: impl Fn(&str) -> bool) -> String {
    let start = Instant::now();
    loop {
        let text = tmux(socket, &["capture-pane", "-p", "-t", "m"]);
        if done(&text) {
            return text;
        }
        assert!(start.elapsed() < LIMIT, "pane never showed it:\n{}", text);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// In an 80x24 terminal (tmux), `counters monitor` redraws in place with no row wrapped,
/// a header row, and dotnet-counters' keys: p pauses, r resumes, q quits.
#[test]
fn monitor_fits_an_80_column_terminal_and_takes_p_r_q() {
    if Command::new("tmux").arg("-V").output().is_err() {
        eprintln!("SKIPPED monitor_fits_an_80_column_terminal_and_takes_p_r_q: no tmux");
        return;
    }
    let h = host("net8", &["--counters"]);
    let socket = format!("dsipc-test-{}", std::process::id());
    let command = format!(
        "{} counters monitor {} --refresh-interval 1",
        bin().display(),
        h.pid()
    );
    tmux(
        &socket,
        &[
            "new-session",
            "-d",
            "-s",
            "m",
            "-x",
            "80",
            "-y",
            "24",
            &command,
        ],
    );
    // System.Runtime's ~25 rows do not fit in 24 lines: the rest is counted on the last.
    let screen = pane_until(&socket, |t| t.contains("more lines: a taller terminal"));
    // (the pane's empty rows below the frame aside)
    let lines: Vec<&str> = screen.trim_end().lines().collect();
    assert!(
        lines[0].starts_with("Press p to pause, r to resume, q to quit."),
        "{}",
        screen
    );
    assert!(screen.contains("    Status: Running"), "{}", screen);
    assert!(
        screen.contains("Name") && screen.contains("Current Value"),
        "{}",
        screen
    );
    // Every row is whole on its line: a name, then a number at the end; nothing wrapped.
    for l in lines
        .iter()
        .filter(|l| l.starts_with("    ") && !l.contains("Status") && !l.contains("Current Value"))
    {
        assert!(l.chars().count() < 80, "{:?}\n{}", l, screen);
        let last = l.split_whitespace().last().unwrap_or("");
        assert!(
            last.replace(',', "").parse::<f64>().is_ok(),
            "a row without its value (wrapped?): {:?}\n{}",
            l,
            screen
        );
    }
    // Redrawn in place: the screen holds the whole frame, top line first, nothing scrolled.
    assert!(lines.len() <= 23, "{}", screen);
    for l in &lines {
        assert!(l.chars().count() < 80, "{:?}", l);
    }
    tmux(&socket, &["send-keys", "-t", "m", "p"]);
    pane_until(&socket, |t| t.contains("    Status: Paused"));
    tmux(&socket, &["send-keys", "-t", "m", "r"]);
    pane_until(&socket, |t| t.contains("    Status: Running"));
    tmux(&socket, &["send-keys", "-t", "m", "q"]);
    // q ends dsipc, and with it the session and its tmux server.
    let start = Instant::now();
    while Command::new("tmux")
        .args(["-L", &socket, "has-session", "-t", "m"])
        .status()
        .map_or(false, |s| s.success())
    {
        assert!(start.elapsed() < LIMIT, "q did not quit");
        std::thread::sleep(Duration::from_millis(100));
    }
}
