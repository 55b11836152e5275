//! `dsipc serve`, dotnet-monitor's HTTP API, end to end: a real HTTP client (curl) against
//! real .NET 8.0.4 and .NET Core 3.1.23 runtimes (each hosted with its own TMPDIR, so it is
//! the default process; needs `scripts/setup-runtimes.sh`), and against the fake runtime
//! for the cases a real one cannot be made to show (a session that never ends, a runtime
//! dying mid-stream, limits). Tests synchronise on serve's and the hosts' printed lines and
//! on the fake runtime's records, never on sleeps.
#![cfg(target_os = "linux")]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::configure_python;
use common::serve::{fake, fake_as, shapes, Answered, Serve, START};
use dsipc::Command as Cmd;
use dsipc_testkit::{Config, HostOptions, HostedRuntime, StreamSpec, TempDir};
use serde_json::Value;

/// A real runtime alone in its own TMPDIR (so it is the default process there).
fn host(runtime: &str, args: &[&str]) -> (HostedRuntime, u32, TempDir) {
    configure_python();
    let dir = TempDir::new("dsipc-sv").unwrap();
    let mut opts = HostOptions::net8(240).env("TMPDIR", dir.path().as_os_str());
    opts.runtime = runtime.to_string();
    opts.args.extend(args.iter().map(|a| a.to_string()));
    let mut h = HostedRuntime::spawn(&opts).expect("spawn host");
    let ready = h.wait_ready(Duration::from_secs(90)).expect("host READY");
    (h, ready.pid, dir)
}

fn dsipc_report(file: &Path, args: &[&str]) -> common::Run {
    let mut all = vec!["report", file.to_str().unwrap()];
    all.extend_from_slice(args);
    common::dsipc(&all)
}

fn save(a: &Answered, dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, &a.body).unwrap();
    p
}

/// A served `.gcdump` saved as `name` in `dir`, read back by `dsipc gcdump report --format
/// json`: its per-type rows.
fn gcdump_rows(a: &Answered, dir: &Path, name: &str) -> Value {
    let file = save(a, dir, name);
    let rep = common::dsipc(&[
        "gcdump",
        "report",
        file.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(rep.code, Some(0), "{}", rep.stderr);
    serde_json::from_str(rep.stdout.trim()).unwrap()
}

/// RFC 7464 records: each starts with 0x1E and ends with a newline.
fn json_seq(body: &[u8]) -> Vec<Value> {
    if body.is_empty() {
        return Vec::new();
    }
    assert_eq!(body[0], 0x1e, "json-seq starts with RS");
    body[1..]
        .split(|&b| b == 0x1e)
        .map(|rec| {
            assert_eq!(rec.last(), Some(&b'\n'), "a record ends with LF");
            serde_json::from_slice(rec).unwrap()
        })
        .collect()
}

/// Every route a .NET 8 runtime answers, as dotnet-monitor shapes it.
#[test]
fn serve_routes_against_real_net8() {
    let (_host, pid, dir) = host(
        "net8",
        &[
            "--sleeping-thread",
            "--hold",
            "5000",
            "--counters",
            "--meter-rate",
            "50",
        ],
    );
    let serve = Serve::start(dir.path(), &["--temp-apikey", "--counter-interval", "1"]);
    let pid_q = format!("pid={}", pid);

    // /processes: the one runtime, the default.
    let list = serve.get("/processes");
    assert_eq!(list.status, 200, "{}", list.text());
    assert!(list
        .header("content-type")
        .unwrap()
        .starts_with("application/json"));
    let doc = list.json();
    shapes::check_each(&doc, &shapes::PROCESS_IDENTIFIER, "/processes");
    let procs = doc.as_array().unwrap();
    assert_eq!(procs.len(), 1, "{}", doc);
    let p = &procs[0];
    assert_eq!(p["pid"].as_u64(), Some(pid as u64));
    assert_eq!(p["isDefault"].as_bool(), Some(true));
    let uid = p["uid"].as_str().unwrap().to_string();
    assert_eq!(uid.len(), 36);
    let name = p["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("python"), "{}", name);
    let keys: Vec<&String> = p.as_object().unwrap().keys().collect();
    assert_eq!(
        keys.len(),
        4,
        "ProcessIdentifier has pid, uid, name, isDefault: {}",
        p
    );

    // /process by default, by pid, by uid, by name: the same.
    let info = serve.get("/process").json();
    shapes::check(&info, &shapes::PROCESS_INFO, "/process");
    for q in [
        pid_q.clone(),
        format!("uid={}", uid),
        format!("name={}", name.to_uppercase()),
    ] {
        assert_eq!(serve.get(&format!("/process?{}", q)).json(), info, "{}", q);
    }
    assert_eq!(info["operatingSystem"], "linux");
    assert_eq!(info["processArchitecture"], "x64");
    assert!(info["commandLine"].as_str().unwrap().contains("python"));
    for k in info.as_object().unwrap().keys() {
        assert!(
            [
                "pid",
                "uid",
                "name",
                "commandLine",
                "operatingSystem",
                "processArchitecture",
                "managedEntryPointAssemblyName"
            ]
            .contains(&k.as_str()),
            "ProcessInfo has no {}",
            k
        );
    }

    // /env: the host's TMPDIR among the variables.
    let env = serve.get(&format!("/env?{}", pid_q)).json();
    assert_eq!(env["TMPDIR"].as_str(), Some(dir.path().to_str().unwrap()));

    // /info
    let i = serve.get("/info").json();
    shapes::check(&i, &shapes::DOTNET_MONITOR_INFO, "/info");
    assert_eq!(i["diagnosticPortMode"], "Connect");
    assert!(i["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["name"] == "callstacks" && c["enabled"] == true));

    // /stacks: the sleeper's Thread.Sleep in JSON (CallStackResult) and in text.
    let js = serve.get_with("/stacks", &["-H", "Accept: application/json"]);
    assert_eq!(js.status, 200, "{}", js.text());
    assert!(
        js.header("content-disposition")
            .unwrap_or_default()
            .contains(".stacks.json"),
        "{}",
        js.headers
    );
    let stacks = js.json();
    shapes::check(&stacks, &shapes::CALL_STACK_RESULT, "/stacks");
    let sleeper = stacks["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["threadName"] == "dsipc-sleeper")
        .unwrap_or_else(|| panic!("no dsipc-sleeper in {}", stacks));
    assert_eq!(sleeper["frames"][0]["methodName"], "Sleep");
    assert_eq!(sleeper["frames"][0]["typeName"], "System.Threading.Thread");
    let txt = serve.get_with("/stacks", &["-H", "Accept: text/plain"]);
    assert_eq!(txt.header("content-type").as_deref(), Some("text/plain"));
    assert!(
        txt.text()
            .contains("System.Private.CoreLib!System.Threading.Thread.Sleep(int32)"),
        "{}",
        txt.text()
    );
    let sp = serve.get_with("/stacks", &["-H", "Accept: application/speedscope+json"]);
    assert_eq!(sp.status, 200, "{}", sp.text());
    assert_eq!(
        sp.header("content-type").as_deref(),
        Some("application/speedscope+json")
    );
    let doc = sp.json();
    assert_eq!(
        doc["$schema"],
        "https://www.speedscope.app/file-format-schema.json"
    );
    assert!(doc["shared"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f["name"] == "System.Private.CoreLib!System.Threading.Thread.Sleep(int32)"));
    // One profile per sampled thread, one sample each; the sleeper among them (two
    // samplings may see different transient threads, so the counts are not compared).
    let profiles = doc["profiles"].as_array().unwrap();
    assert!(profiles
        .iter()
        .all(|p| p["samples"].as_array().map(Vec::len) == Some(1)));
    let sleeper_profile = format!("Thread ({})", sleeper["threadId"].as_u64().unwrap());
    assert!(
        profiles
            .iter()
            .any(|p| p["name"] == sleeper_profile.as_str()),
        "{} not in {}",
        sleeper_profile,
        doc
    );
    let none = serve.get_with("/stacks", &["-H", "Accept: image/png"]);
    assert_eq!(none.status, 406);

    // /trace: a Cpu profile of 2 s, streamed; the file parses to its end with samples.
    let t = serve.get("/trace?profile=Cpu&durationSeconds=2");
    assert_eq!(t.status, 200, "{}", t.text());
    assert_eq!(t.curl, 0);
    assert_eq!(
        t.header("content-type").as_deref(),
        Some("application/octet-stream")
    );
    assert_eq!(t.header("transfer-encoding").as_deref(), Some("chunked"));
    let disp = t.header("content-disposition").unwrap();
    assert!(
        disp.starts_with("attachment; filename=\"")
            && disp.ends_with(&format!("_{}.nettrace\"", pid)),
        "{}",
        disp
    );
    assert!(t.body.starts_with(b"Nettrace"));
    let file = save(&t, serve.files.path(), "cpu.nettrace");
    let r = dsipc_report(&file, &["--top", "3"]);
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(r.stdout.contains("Thread.Sleep"), "{}", r.stdout);

    // POST /trace with an EventPipeConfiguration.
    let body = r#"{"providers":[{"name":"Microsoft-Windows-DotNETRuntime","keywords":"0x1","eventLevel":"Informational"}],"requestRundown":false,"bufferSizeInMB":16}"#;
    let c = serve.post("/trace?durationSeconds=1", body);
    assert_eq!(c.status, 200, "{}", c.text());
    assert!(c.body.starts_with(b"Nettrace"));
    let file = save(&c, serve.files.path(), "custom.nettrace");
    let jl = common::dsipc(&[
        "convert",
        file.to_str().unwrap(),
        "--format",
        "jsonl",
        "-o",
        "-",
    ]);
    assert_eq!(jl.code, Some(0), "{}", jl.stderr);

    // /gcdump: the held System.Version objects, read back by our report.
    let g = serve.get(&format!("/gcdump?{}", pid_q));
    assert_eq!(g.status, 200, "{}", g.text());
    assert!(g.header("content-disposition").unwrap().contains(".gcdump"));
    let rows = gcdump_rows(&g, serve.files.path(), "heap.gcdump");
    let versions = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["type"] == "System.Version")
        .expect("System.Version in the gcdump");
    assert!(versions["count"].as_u64().unwrap() >= 5000, "{}", versions);

    // /dump: a Mini dump (an ELF core), written in serve's folder and gone once sent.
    let d = serve.get("/dump?type=Mini");
    assert_eq!(d.status, 200, "{}", d.text());
    assert!(d.header("content-disposition").unwrap().contains("core_"));
    assert_eq!(&d.body[..4], b"\x7fELF", "a core file");
    let leftovers: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("dsipc-serve-{}-", serve.live.child.id()))
        })
        .flat_map(|e| {
            std::fs::read_dir(e.path())
                .unwrap()
                .flatten()
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(leftovers.is_empty(), "dumps left behind: {:?}", leftovers);

    // /metrics: the default process's System.Runtime counters, valid exposition.
    let deadline = Instant::now() + Duration::from_secs(60);
    let scraped = loop {
        let m = serve.scrape();
        assert_eq!(m.status, 200);
        if m.text().contains("systemruntime_") || Instant::now() > deadline {
            break m;
        }
        // Counters publish every 5 s: scrape again (bounded by the deadline).
        std::thread::sleep(Duration::from_millis(500));
    };
    let text = scraped.text();
    assert!(text.contains("systemruntime_cpu_usage_ratio"), "{}", text);
    assert!(
        text.contains("systemruntime_gc_heap_size_bytes"),
        "{}",
        text
    );
    assert!(scraped
        .header("content-type")
        .unwrap()
        .starts_with("text/plain"));
    common::promtool_check(&text);
    // A real Prometheus scrapes it and has dashboard 19297's CPU series.
    let prom = common::Prometheus::start(&serve.metrics);
    prom.poll(
        "systemruntime_cpu_usage_ratio",
        Duration::from_secs(60),
        |r| r.contains("\"result\":[{"),
    );
    drop(prom);
    // /livemetrics: json-seq Metric records for the default providers (GET) and for a
    // configuration naming a meter (POST).
    let live = serve.get("/livemetrics?durationSeconds=4");
    assert_eq!(live.status, 200, "{}", live.text());
    assert_eq!(
        live.header("content-type").as_deref(),
        Some("application/json-seq")
    );
    let records = json_seq(&live.body);
    assert!(
        records.iter().any(|r| r["provider"] == "System.Runtime"
            && r["name"] == "cpu-usage"
            && r["counterType"] == "Metric"),
        "{:?}",
        records
    );
    for r in &records {
        shapes::check(r, &shapes::METRIC, "/livemetrics");
        for k in [
            "timestamp",
            "provider",
            "name",
            "displayName",
            "unit",
            "counterType",
            "tags",
            "value",
        ] {
            assert!(r.get(k).is_some(), "Metric has {}: {}", k, r);
        }
    }
    let meter = serve.post(
        "/livemetrics?durationSeconds=4",
        r#"{"includeDefaultProviders":false,"meters":[{"meterName":"MyMeter","instrumentNames":["requests"]}]}"#,
    );
    assert_eq!(meter.status, 200, "{}", meter.text());
    let records = json_seq(&meter.body);
    assert!(!records.is_empty(), "no MyMeter records");
    assert!(
        records
            .iter()
            .all(|r| r["provider"] == "MyMeter" && r["name"] == "requests"),
        "{:?}",
        records
    );
    assert!(
        records
            .iter()
            .any(|r| r["counterType"] == "Rate" && r["value"].as_f64().unwrap() > 0.0),
        "{:?}",
        records
    );
    serve
        .post("/livemetrics", r#"{"includeDefaultProviders":false}"#)
        .assert_problem(400, "No provider");

    // The API listener serves /metrics too, without the key (as dotnet-monitor).
    assert_eq!(
        serve
            .get_with("/metrics", &["-H", "Authorization: Bearer wrong"])
            .status,
        200
    );
}

/// .NET Core 3.1: listed with a nil uid (it has no ProcessInfo), traced, stacked; /env is
/// a 400 naming the runtime's refusal.
#[test]
fn serve_routes_against_real_netcore31() {
    let (_host, pid, dir) = host(
        "netcore31",
        &["--sleeping-thread", "--hold", "3000", "--counters"],
    );
    let serve = Serve::start(dir.path(), &["--temp-apikey", "--counter-interval", "1"]);
    let doc = serve.get("/processes").json();
    shapes::check_each(&doc, &shapes::PROCESS_IDENTIFIER, "/processes");
    assert_eq!(doc[0]["pid"].as_u64(), Some(pid as u64));
    assert_eq!(doc[0]["uid"], "00000000-0000-0000-0000-000000000000");
    assert_eq!(doc[0]["isDefault"], true);
    let p = serve.get("/process").json();
    shapes::check(&p, &shapes::PROCESS_INFO, "/process");
    assert_eq!(p["operatingSystem"], "unknown");
    assert!(
        p["commandLine"].as_str().unwrap().contains("host.py"),
        "{}",
        p
    );
    serve.get("/env").assert_problem(400, "");
    let t = serve.get("/trace?profile=Cpu&durationSeconds=1");
    assert_eq!(t.status, 200, "{}", t.text());
    let file = save(&t, serve.files.path(), "cpu31.nettrace");
    assert_eq!(dsipc_report(&file, &[]).code, Some(0));
    let txt = serve.get_with("/stacks", &["-H", "Accept: text/plain"]);
    assert_eq!(txt.status, 200, "{}", txt.text());
    assert!(txt.text().contains("Thread.Sleep"), "{}", txt.text());
    let js = serve.get_with("/stacks", &["-H", "Accept: application/json"]);
    shapes::check(&js.json(), &shapes::CALL_STACK_RESULT, "/stacks");

    // /gcdump: the held System.Version objects (Core 3.1 names its types too).
    let g = serve.get("/gcdump");
    assert_eq!(g.status, 200, "{}", g.text());
    let rows = gcdump_rows(&g, serve.files.path(), "heap31.gcdump");
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .any(|r| r["type"] == "System.Version" && r["count"].as_u64().unwrap() >= 3000),
        "{}",
        rows
    );

    // /dump: a Mini dump, an ELF core.
    let d = serve.get("/dump?type=Mini");
    assert_eq!(d.status, 200, "{}", d.text());
    assert_eq!(&d.body[..4], b"\x7fELF", "a core file");

    // /livemetrics: Core 3.1's EventCounters.
    let live = serve.get("/livemetrics?durationSeconds=4");
    assert_eq!(live.status, 200, "{}", live.text());
    let records = json_seq(&live.body);
    assert!(
        records
            .iter()
            .any(|r| r["provider"] == "System.Runtime" && r["name"] == "cpu-usage"),
        "{:?}",
        records
    );
    for r in &records {
        shapes::check(r, &shapes::METRIC, "/livemetrics");
    }

    // /logs: the session runs its duration (no ILogger in this host) and ends whole.
    let logs = serve.get_with(
        "/logs?durationSeconds=1",
        &["-H", "Accept: application/x-ndjson"],
    );
    assert_eq!(logs.status, 200, "{}", logs.text());
    assert_eq!(logs.curl, 0);

    // /metrics: the default process's counters.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = serve.scrape();
        if m.text().contains("systemruntime_cpu_usage_ratio") {
            common::promtool_check(&m.text());
            break;
        }
        assert!(Instant::now() < deadline, "no counters: {}", m.text());
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// No key, a wrong key, the right key; no key configured; --no-auth.
#[test]
fn serve_authentication_none_wrong_and_right_key() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let _rt = fake(&dir, Config::new().like_net8_0_4());
    let keyfile = dir.path().join("key.json");
    let g = common::dsipc(&["serve", "generatekey", "-o", keyfile.to_str().unwrap()]);
    assert_eq!(g.code, Some(0), "{}", g.stderr);
    let token = g
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("Authorization: Bearer "))
        .expect("the header line")
        .to_string();
    let stored = std::fs::read_to_string(&keyfile).unwrap();
    assert!(!stored.contains(&token), "the key file holds the key");
    assert!(
        stored.contains("\"ApiKeyHashType\": \"SHA256\""),
        "{}",
        stored
    );
    // An existing file is kept without --force.
    let again = common::dsipc(&["serve", "generatekey", "-o", keyfile.to_str().unwrap()]);
    assert_eq!(again.code, Some(1), "{}", again.stderr);
    assert_eq!(std::fs::read_to_string(&keyfile).unwrap(), stored);

    let mut serve = Serve::start(dir.path(), &["--api-key-file", keyfile.to_str().unwrap()]);
    let none = serve.get("/processes");
    assert_eq!(none.status, 401);
    assert_eq!(none.header("www-authenticate").as_deref(), Some("Bearer"));
    assert_eq!(
        serve
            .get_with("/processes", &["-H", "Authorization: Bearer nope"])
            .status,
        401
    );
    assert_eq!(
        serve
            .get_with(
                "/processes",
                &["-H", &format!("Authorization: Basic {}", token)]
            )
            .status,
        401
    );
    serve.key = Some(token.clone());
    assert_eq!(serve.get("/processes").status, 200);
    // /metrics on the metrics listener needs no key.
    assert_eq!(serve.scrape().status, 200);

    // No key configured: every API request is 401, and stderr says so.
    let mut bare = Serve::start(dir.path(), &[]);
    bare.live.stderr_line("no API key is configured", START);
    assert_eq!(bare.get("/processes").status, 401);
    bare.key = Some(token);
    assert_eq!(bare.get("/processes").status, 401);

    // --no-auth: open, with dotnet-monitor's warning.
    let mut open = Serve::start(dir.path(), &["--no-auth"]);
    assert_eq!(open.get("/processes").status, 200);
    let run = open.live.interrupt(Duration::from_secs(20));
    assert!(
        run.stderr
            .contains("WARNING: Authentication has been disabled"),
        "{}",
        run.stderr
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
}

/// Bad parameters are 400 problem+json naming them; unknown processes too; unknown routes
/// 404; routes not offered yet 501.
#[test]
fn serve_bad_parameters_are_problem_details() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let _rt = fake(&dir, Config::new().like_net8_0_4());
    let serve = Serve::with_key(dir.path());
    for (path, needle) in [
        ("/process?pid=abc", "\"pid\""),
        ("/process?pid=-3", "\"pid\""),
        ("/process?uid=not-a-guid", "\"uid\""),
        (
            "/process?pid=2147483646",
            "Unable to discover a target process.",
        ),
        (
            "/process?name=nosuchname",
            "Unable to discover a target process.",
        ),
        ("/trace?durationSeconds=-2", "durationSeconds"),
        ("/trace?durationSeconds=99999999999", "durationSeconds"),
        ("/trace?profile=Cpu,Loud", "profile"),
        ("/trace?egressProvider=nowhere", "egressProvider"),
        ("/dump?type=Huge", "\"type\""),
        ("/process?pid=%zz", "percent escape"),
    ] {
        serve.get(path).assert_problem(400, needle);
    }
    for (body, needle) in [
        ("not json", "not JSON"),
        ("{}", "Providers field is required"),
        (
            r#"{"providers":[{"name":"x","keywords":"0xZZ"}]}"#,
            "Keywords",
        ),
        (
            r#"{"providers":[{"name":"x"}],"bufferSizeInMB":4096}"#,
            "BufferSizeInMB",
        ),
    ] {
        serve.post("/trace", body).assert_problem(400, needle);
    }
    let big = "x".repeat(100 * 1024);
    serve
        .post("/trace", &big)
        .assert_problem(400, "larger than");
    assert_eq!(serve.get("/nope").status, 404);
    serve
        .get("/exceptions")
        .assert_problem(501, "not implemented");
}

/// Several runtimes and no pid: 400 with dotnet-monitor's words; /processes has no default.
#[test]
fn serve_without_a_default_process_says_so() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let mut sleepers: Vec<std::process::Child> = (0..2)
        .map(|_| Command::new("sleep").arg("120").spawn().unwrap())
        .collect();
    let (p1, p2) = (sleepers[0].id(), sleepers[1].id());
    let a = fake_as(&dir, Config::new().like_net8_0_4(), p1);
    let _b = fake_as(&dir, Config::new().like_net8_0_4(), p2);
    let serve = Serve::with_key(dir.path());
    let list = serve.get("/processes").json();
    assert_eq!(list.as_array().unwrap().len(), 2, "{}", list);
    assert!(list
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["isDefault"] == false));
    serve
        .get("/process")
        .assert_problem(400, "Unable to select a single target process because multiple target processes have been discovered.");
    let one = serve.get(&format!("/process?pid={}", p1)).json();
    assert_eq!(
        one["uid"].as_str(),
        Some(a.identity().cookie.to_string().as_str())
    );
    // dotnet-monitor's DefaultProcess filter picks one.
    let filter = format!("ProcessId={}", p2);
    let chosen = Serve::start(dir.path(), &["--temp-apikey", "--default-process", &filter]);
    assert_eq!(
        chosen.get("/process").json()["pid"].as_u64(),
        Some(p2 as u64)
    );
    let list = chosen.get("/processes").json();
    for p in list.as_array().unwrap() {
        assert_eq!(
            p["isDefault"] == true,
            p["pid"].as_u64() == Some(p2 as u64),
            "{}",
            list
        );
    }
    let r = common::dsipc(&["serve", "--default-process", "Color=blue"]);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    for s in &mut sleepers {
        let _ = s.kill();
        let _ = s.wait();
    }
}

/// A long trace streams until the client goes away; then serve stops the session (the
/// runtime sees StopTracing); a kind of operation past its limit is 429.
#[test]
fn serve_trace_stops_when_the_client_disconnects_and_limits_operations() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let rt = fake(
        &dir,
        Config::new().like_net8_0_4().stream(StreamSpec {
            len: None,
            chunk: 16 * 1024,
            pause: Duration::from_millis(5),
            end_marker: true,
            content: None,
        }),
    );
    let serve = Serve::with_key(dir.path());
    let key = serve.key.clone().unwrap();
    let open = |n: usize| -> Vec<TcpStream> {
        (0..n)
            .map(|_| {
                let mut s = TcpStream::connect(&serve.api).unwrap();
                write!(
                    s,
                    "GET /trace?durationSeconds=-1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
                    key
                )
                .unwrap();
                s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                let mut first = [0u8; 4096];
                let n = s.read(&mut first).unwrap();
                assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
                s
            })
            .collect()
    };
    let three = open(3);
    rt.wait_streams(0, Duration::from_secs(1));
    serve
        .get("/trace?durationSeconds=-1")
        .assert_problem(429, "trace");
    drop(three);
    // Each stream ends: serve stopped it (StopTracing) or the runtime saw the close.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ended = rt.streams();
        if ended.len() >= 3 {
            break;
        }
        assert!(Instant::now() < deadline, "streams still open: {:?}", ended);
        std::thread::sleep(Duration::from_millis(50));
    }
    let stops = rt
        .received()
        .iter()
        .filter(|r| r.command == Some(Cmd::StopTracing))
        .count();
    assert_eq!(stops, 3, "{:?}", rt.received());
    // The permits came back.
    drop(open(3));
}

/// A runtime whose stream ends without its end-of-stream object (it died): the chunked
/// body is cut (curl: the transfer closed with outstanding data, exit 18), never ended as
/// if whole; the same trace whole is a whole body; bytes that do not parse are passed on
/// whole.
#[test]
fn serve_trace_of_a_runtime_dying_mid_stream_is_a_cut_body() {
    let trace: &'static [u8] = Box::leak(
        std::fs::read(common::repo_root().join("tests/data/nettrace/net8.0.4-busy.nettrace"))
            .unwrap()
            .into_boxed_slice(),
    );
    let cut = StreamSpec {
        len: Some(trace.len() as u64 / 2),
        ..StreamSpec::content(trace)
    };
    for (spec, whole) in [
        (StreamSpec::content(trace), true),
        (cut, false),
        (StreamSpec::bytes(300 * 1024), true),
    ] {
        let dir = TempDir::new("dsipc-sv").unwrap();
        let _rt = fake(&dir, Config::new().like_net8_0_4().stream(spec));
        let serve = Serve::with_key(dir.path());
        let t = serve.get("/trace?durationSeconds=30");
        assert_eq!(t.status, 200);
        assert_eq!(
            t.body.len() as u64,
            spec.len
                .unwrap()
                .min(spec.content.map_or(u64::MAX, |c| c.len() as u64)),
            "every byte the runtime sent"
        );
        assert_eq!(t.curl, if whole { 0 } else { 18 }, "whole: {}", whole);
    }
}

/// Hundreds of idle and half-sent requests do not lock a scrape out: the oldest idle
/// connection makes room.
#[test]
fn serve_answers_while_hundreds_of_clients_hold_half_requests() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let serve = Serve::with_key(dir.path());
    let mut idle = Vec::new();
    for i in 0..400 {
        let mut s = TcpStream::connect(&serve.metrics).unwrap();
        if i % 2 == 0 {
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
        }
        idle.push(s);
        if i % 80 == 79 {
            assert_eq!(serve.scrape().status, 200, "after {} idle clients", i + 1);
            assert_eq!(serve.get("/info").status, 200);
        }
    }
}

/// Usage errors: https (no TLS here), a bad URL, two key options.
#[test]
fn serve_bad_arguments_are_usage_errors() {
    for args in [
        &["serve", "--urls", "https://localhost:52323"][..],
        &["serve", "--urls", "localhost:1"],
        &["serve", "--urls", "http://example.com:1"],
        &["serve", "--no-auth", "--temp-apikey"],
        &["serve", "extra"],
    ] {
        let r = common::dsipc(args);
        assert_eq!(r.code, Some(2), "{:?}: {}", args, r.stderr);
    }
    let r = common::dsipc(&["serve", "--help"]);
    assert_eq!(r.code, Some(0));
    assert!(r.stdout.contains("dsipc serve generatekey"));
    let bad_key = TempDir::new("dsipc-sv").unwrap();
    let f = bad_key.path().join("k");
    std::fs::write(&f, "{\"MonitorApiKey\":{}}").unwrap();
    let r = common::dsipc(&["serve", "--api-key-file", f.to_str().unwrap()]);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(r.stderr.contains("ApiKeyHash"), "{}", r.stderr);
}

/// Polls `GET /operations/{id}` (bounded) until its status is one of `states`.
fn wait_operation(serve: &Serve, location: &str, states: &[&str]) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let a = serve.curl_url(location, &[]);
        assert!(a.status == 200 || a.status == 201, "{}", a.text());
        let doc = a.json();
        shapes::check(&doc, &shapes::OPERATION_STATUS, "/operations/{id}");
        let status = doc["status"].as_str().unwrap().to_string();
        if states.contains(&status.as_str()) {
            assert_eq!(
                a.status == 201,
                status == "Succeeded",
                "201 only when Succeeded"
            );
            return doc;
        }
        assert!(
            Instant::now() < deadline,
            "still {} after 60 s: {}",
            status,
            doc
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Egress to a file-system provider: 202 with the operation's Location; the operation is
/// listed, stopped (`?stop=true`: the trace ends and is kept) or cancelled (nothing is
/// left), and its artifact lands in the provider's folder under dotnet-monitor's name.
#[test]
fn serve_egress_operations_stop_cancel_and_land_files() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let out = TempDir::new("dsipc-egress").unwrap();
    let files = out.path().join("files");
    let _rt = fake(
        &dir,
        Config::new().like_net8_0_4().stream(StreamSpec {
            len: None,
            chunk: 4096,
            pause: Duration::from_millis(2),
            end_marker: true,
            content: None,
        }),
    );
    let egress = format!("files={}", files.display());
    let serve = Serve::start(dir.path(), &["--temp-apikey", "--egress", &egress]);

    // A trace until stopped, sent to the provider.
    let a = serve.get("/trace?egressProvider=files&durationSeconds=-1&tags=nightly,%20a");
    assert_eq!(a.status, 202, "{}", a.text());
    let location = a.header("location").expect("Location");
    assert!(
        location.starts_with(&format!("http://{}/operations/", serve.api)),
        "{}",
        location
    );
    let id = location.rsplit('/').next().unwrap().to_string();
    let listed = serve.get("/operations").json();
    shapes::check_each(&listed, &shapes::OPERATION_SUMMARY, "/operations");
    let op = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["operationId"] == id.as_str())
        .unwrap_or_else(|| panic!("{} not in {}", id, listed))
        .clone();
    assert_eq!(op["status"], "Running");
    assert_eq!(op["isStoppable"], true);
    assert_eq!(op["egressProviderName"], "files");
    assert_eq!(op["tags"], serde_json::json!(["nightly", "a"]));
    assert!(op["process"]["pid"].as_u64().is_some());
    assert!(
        op.get("resourceLocation").is_none(),
        "a summary has no resourceLocation"
    );
    assert_eq!(
        serve
            .get("/operations?tags=nightly")
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        serve
            .get("/operations?tags=other")
            .json()
            .as_array()
            .unwrap()
            .len(),
        0
    );
    let stop = serve.curl_url(&location, &["-X", "DELETE", "-G", "-d", "stop=true"]);
    assert_eq!(stop.status, 202, "{}", stop.text());
    let done = wait_operation(&serve, &location, &["Succeeded", "Failed"]);
    assert_eq!(done["status"], "Succeeded", "{}", done);
    assert_eq!(done["error"], Value::Null);
    let landed = PathBuf::from(done["resourceLocation"].as_str().unwrap());
    assert_eq!(landed.parent().unwrap(), files.as_path());
    assert!(landed
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .ends_with(".nettrace"));
    assert!(std::fs::metadata(&landed).unwrap().len() > 0);
    // Over: neither stopped nor cancelled again.
    serve
        .curl_url(&location, &["-X", "DELETE"])
        .assert_problem(400, "not running");

    // Another, cancelled: nothing left behind in the folder.
    let b = serve.get("/trace?egressProvider=files&durationSeconds=-1");
    assert_eq!(b.status, 202);
    let location_b = b.header("location").unwrap();
    let cancel = serve.curl_url(&location_b, &["-X", "DELETE"]);
    assert_eq!(cancel.status, 200, "{}", cancel.text());
    let cancelled = wait_operation(&serve, &location_b, &["Cancelled", "Failed", "Succeeded"]);
    assert_eq!(cancelled["status"], "Cancelled");
    let names: Vec<String> = std::fs::read_dir(&files)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "only the stopped trace: {:?}", names);

    // Stacks are not stoppable; unknown ids are 400.
    serve
        .get("/operations/00000000-0000-4000-8000-000000000000")
        .assert_problem(400, "was not found");
    serve
        .curl_url(
            &format!("http://{}/operations/nope", serve.api),
            &["-X", "DELETE", "-G", "-d", "stop=true"],
        )
        .assert_problem(400, "was not found");
    serve
        .get("/trace?egressProvider=elsewhere")
        .assert_problem(400, "does not exist");
}

/// Listen mode (`--diagnostic-port PATH`): a real .NET 8 runtime started with
/// `DOTNET_DiagnosticPorts=PATH,connect,nosuspend` connects to serve, which lists it and
/// answers every route through the runtime's reverse connections: ProcessInfo, a trace
/// stopped from a second connection, stacks, /metrics.
#[test]
fn serve_listen_mode_serves_runtimes_that_connect_to_it() {
    configure_python();
    let dir = TempDir::new("dsipc-sv").unwrap();
    let port = dir.path().join("port.sock");
    let serve = Serve::start(
        dir.path(),
        &[
            "--temp-apikey",
            "--counter-interval",
            "1",
            "--diagnostic-port",
            port.to_str().unwrap(),
        ],
    );
    let own = TempDir::new("dsipc-sv-own").unwrap();
    let mut opts = HostOptions::net8(240)
        .env("TMPDIR", own.path().as_os_str())
        .reverse_port(&port, false);
    opts.args
        .extend(["--sleeping-thread".to_string(), "--counters".to_string()]);
    let mut h = HostedRuntime::spawn(&opts).expect("spawn host");
    let pid = h
        .wait_ready(Duration::from_secs(90))
        .expect("host READY")
        .pid;

    let info = serve.get("/info").json();
    shapes::check(&info, &shapes::DOTNET_MONITOR_INFO, "/info");
    assert_eq!(info["diagnosticPortMode"], "Listen");
    assert_eq!(info["diagnosticPortName"].as_str(), port.to_str());
    // The runtime connects once its diagnostic server runs: wait for it to be listed.
    let deadline = Instant::now() + Duration::from_secs(30);
    let listed = loop {
        let l = serve.get("/processes").json();
        if l.as_array().map_or(false, |a| !a.is_empty()) {
            break l;
        }
        assert!(
            Instant::now() < deadline,
            "the runtime never connected: {}",
            l
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(listed[0]["pid"].as_u64(), Some(pid as u64), "{}", listed);
    assert_eq!(listed[0]["isDefault"], true);
    let p = serve.get("/process").json();
    assert_eq!(p["operatingSystem"], "linux");
    let env = serve.get("/env").json();
    assert_eq!(env["TMPDIR"].as_str(), own.path().to_str());

    let t = serve.get("/trace?profile=Cpu&durationSeconds=1");
    assert_eq!(t.status, 200, "{}", t.text());
    assert_eq!(t.curl, 0);
    let file = save(&t, serve.files.path(), "listen.nettrace");
    assert_eq!(dsipc_report(&file, &[]).code, Some(0));

    let st = serve.get_with("/stacks", &["-H", "Accept: text/plain"]);
    assert_eq!(st.status, 200, "{}", st.text());
    assert!(st.text().contains("Thread.Sleep"), "{}", st.text());

    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let m = serve.scrape();
        if m.text().contains("systemruntime_cpu_usage_ratio") {
            break;
        }
        assert!(Instant::now() < deadline, "no counters: {}", m.text());
        std::thread::sleep(Duration::from_millis(500));
    }
    h.kill();
    // Gone from the list once its connection closes.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let l = serve.get("/processes").json();
        if l.as_array().map_or(false, |a| a.is_empty()) {
            break;
        }
        assert!(Instant::now() < deadline, "still listed: {}", l);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Listen mode resumes the runtimes that connect: a real .NET 8 runtime started as `serve
/// --help` says (`DOTNET_DiagnosticPorts=PATH,connect`, so suspended at startup until a
/// ResumeRuntime) runs managed code while serve runs, with no request made (the host prints
/// READY, which reads `Environment.Version`, only once the runtime runs), and is listed.
#[test]
fn serve_listen_mode_resumes_runtimes_suspended_at_startup() {
    configure_python();
    let dir = TempDir::new("dsipc-sv").unwrap();
    let port = dir.path().join("port.sock");
    let serve = Serve::start(
        dir.path(),
        &["--temp-apikey", "--diagnostic-port", port.to_str().unwrap()],
    );
    let own = TempDir::new("dsipc-sv-own").unwrap();
    let mut ports = port.as_os_str().to_os_string();
    ports.push(",connect");
    let opts = HostOptions::net8(240)
        .env("TMPDIR", own.path().as_os_str())
        .env("DOTNET_DiagnosticPorts", ports);
    let mut h = HostedRuntime::spawn(&opts).expect("spawn host");
    let ready = h.wait_ready(Duration::from_secs(90));
    assert!(
        ready.is_ok(),
        "the runtime never resumed: {:?}",
        ready.err()
    );
    let listed = serve.get("/processes").json();
    assert_eq!(
        listed[0]["pid"].as_u64(),
        Some(u64::from(ready.unwrap().pid)),
        "{}",
        listed
    );
}

/// A real runtime that exits while its trace streams: the body is cut (curl exit 18),
/// never a clean end of a trace that is not whole; serve goes on answering.
#[test]
fn serve_trace_of_a_real_runtime_that_exits_mid_stream_is_a_cut_body() {
    let (mut h, _pid, dir) = host("net8", &["--busy"]);
    let serve = Serve::with_key(dir.path());
    let key = serve.key.clone().unwrap();
    let mut s = TcpStream::connect(&serve.api).unwrap();
    write!(
        s,
        "GET /trace?profile=Cpu&durationSeconds=-1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
        key
    )
    .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    // The head and the first bytes of the stream: the session runs.
    while !String::from_utf8_lossy(&got).contains("Nettrace") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed early: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"));
    h.kill();
    // Read to the end: the connection closes without the chunked terminator.
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) => panic!("no end within 30 s: {}", e),
        }
    }
    assert!(
        !got.ends_with(b"0\r\n\r\n"),
        "a cut trace must not end as a whole chunked body"
    );
    assert_eq!(serve.get("/info").status, 200);
}

/// A client that asks for a trace and reads nothing holds its session only for
/// `--send-timeout`: then the session is stopped and its permit returns (three stalled
/// clients do not lock /trace out).
#[test]
fn serve_trace_of_a_client_that_reads_nothing_is_stopped_after_the_send_timeout() {
    let dir = TempDir::new("dsipc-sv").unwrap();
    let rt = fake(
        &dir,
        Config::new().like_net8_0_4().stream(StreamSpec {
            len: None,
            chunk: 64 * 1024,
            pause: Duration::ZERO,
            end_marker: true,
            content: None,
        }),
    );
    let mut serve = Serve::start(dir.path(), &["--temp-apikey", "--send-timeout", "1"]);
    let key = serve.key.clone().unwrap();
    let stalled: Vec<TcpStream> = (0..3)
        .map(|_| {
            let mut s = TcpStream::connect(&serve.api).unwrap();
            write!(
                s,
                "GET /trace?durationSeconds=-1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\r\n",
                key
            )
            .unwrap();
            s
        })
        .collect();
    // Each is stopped once the socket buffers are full and a second passed.
    for _ in 0..3 {
        serve
            .live
            .stderr_line("took nothing for", Duration::from_secs(60));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stops = rt
            .received()
            .iter()
            .filter(|r| r.command == Some(Cmd::StopTracing))
            .count();
        if stops == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} stops: {:?}",
            stops,
            rt.received()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The permits came back: a fourth trace runs.
    let t = serve.get("/trace?durationSeconds=1");
    assert_eq!(t.status, 200, "{}", t.text());
    drop(stalled);
}
