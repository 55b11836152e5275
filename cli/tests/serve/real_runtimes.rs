//! Every route against real .NET 8 and .NET Core 3.1 runtimes, as dotnet-monitor shapes it.

use std::time::{Duration, Instant};

use super::{dsipc_report, gcdump_rows, host, json_seq, save};
use crate::common;
use crate::common::serve::{shapes, Serve};

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
