//! `/exceptions` against real runtimes throwing and catching in a loop
//! (`tests/runtime/host.py --throw`: `Int32.Parse("not a number")` every ~50 ms, which
//! pythonnet's reflection call wraps in a TargetInvocationException): a `Server` on a
//! listener the test owns, read with a plain HTTP/1.1 client. Needs the real runtimes
//! (`DSIPC_PYTHON`, see scripts/setup-runtimes.sh).
#![cfg(target_os = "linux")]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use dsipc_serve::Server;
use dsipc_testkit::{HostOptions, HostedRuntime, TempDir};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::{options_in, serve_api};

struct Answer {
    status: u16,
    content_type: String,
    body: String,
}

/// `method path` with `accept` (and a JSON `body` for POST) on `addr`.
async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    accept: Option<&str>,
    body: &str,
) -> Answer {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
        method, path, addr
    );
    if let Some(a) = accept {
        req.push_str(&format!("Accept: {}\r\n", a));
    }
    if method == "POST" {
        req.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut raw))
        .await
        .expect("an answer within 60 s")
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            if k.eq_ignore_ascii_case("content-type") {
                Some(v.trim().to_string())
            } else {
                None
            }
        })
        .unwrap_or_default();
    Answer {
        status,
        content_type,
        body: body.to_string(),
    }
}

fn lines(ndjson: &str) -> Vec<Value> {
    ndjson
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {:?}", e, l)))
        .collect()
}

/// A host of `runtime` throwing in a loop, and a server finding it.
fn start(runtime: &str) -> Option<(HostedRuntime, TempDir, Server)> {
    if std::env::var_os("DSIPC_PYTHON").is_none() {
        eprintln!("skipped: DSIPC_PYTHON is not set (scripts/setup-runtimes.sh)");
        return None;
    }
    let dir = TempDir::new("dsipc-sv-exc").unwrap();
    let mut opts = HostOptions::net8(240).env("TMPDIR", dir.path().as_os_str());
    opts.runtime = runtime.to_string();
    opts.args.push("--throw".to_string());
    let mut host = HostedRuntime::spawn(&opts).expect("spawn host");
    host.wait_ready(Duration::from_secs(90))
        .expect("host READY");
    let mut options = options_in(dir.path());
    let out = dir.path().join("egress");
    std::fs::create_dir(&out).unwrap();
    options.egress =
        dsipc_serve::parse_egress(&format!("files={}", out.display())).expect("egress");
    let server = Server::new(options, 1).expect("server");
    Some((host, dir, server))
}

/// Asks until the history holds a FormatException whose stack names `Int32.Parse`
/// (the rundown named the ReadyToRun frames); returns the ndjson lines then.
async fn wait_for_named_exceptions(addr: SocketAddr, pid: u32) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let a = request(
            addr,
            "GET",
            &format!("/exceptions?pid={}", pid),
            Some("application/x-ndjson"),
            "",
        )
        .await;
        assert_eq!(a.status, 200, "{}", a.body);
        assert_eq!(a.content_type, "application/x-ndjson");
        let all = lines(&a.body);
        let named = all.iter().any(|x| {
            x["typeName"] == "System.FormatException"
                && x["stack"]["frames"].as_array().map_or(false, |f| {
                    f.iter()
                        .any(|f| f["typeName"] == "System.Int32" && f["methodName"] == "Parse")
                })
        });
        if named {
            return all;
        }
        assert!(
            Instant::now() < deadline,
            "no FormatException with Int32.Parse named within 60 s: {}",
            a.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn exceptions_of_a_runtime_throwing_in_a_loop(runtime: &str) {
    let (host, dir, mut server) = match start(runtime) {
        Some(s) => s,
        None => return,
    };
    let pid = host.pid();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    server.serve_api(listener);

    // ndjson: dotnet-monitor's ExceptionInstance per line, numbered in order, the last 20
    // kept (the host throws two a call, 20 calls a second: the history is soon full).
    let mut all = wait_for_named_exceptions(addr, pid).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while all.last().and_then(|x| x["id"].as_u64()).unwrap_or(0) <= 25 {
        assert!(
            Instant::now() < deadline,
            "fewer than 26 exceptions in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let a = request(
            addr,
            "GET",
            &format!("/exceptions?pid={}", pid),
            Some("application/x-ndjson"),
            "",
        )
        .await;
        all = lines(&a.body);
    }
    assert_eq!(all.len(), 20);
    let ids: Vec<u64> = all.iter().map(|x| x["id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{:?}", ids);
    assert!(ids[0] > 1, "{:?}", ids);
    let parse_named = |x: &Value| {
        x["stack"]["frames"].as_array().map_or(false, |f| {
            f.iter()
                .any(|f| f["typeName"] == "System.Int32" && f["methodName"] == "Parse")
        })
    };
    let formats: Vec<&Value> = all
        .iter()
        .filter(|x| x["typeName"] == "System.FormatException")
        .collect();
    if runtime == "net8" {
        // The rundown named the ReadyToRun frames of every one, also of those thrown before
        // tiered compilation rejitted Int32.Parse.
        assert!(
            formats.iter().all(|x| parse_named(x)),
            "{:#}",
            Value::Array(all.clone())
        );
    }
    // (.NET Core 3.1's rundown names jitted code only: there Int32.Parse is named once
    // tiering rejitted it, and the top frames of the exceptions before are [Native Frames].)
    let x = *formats.iter().rev().find(|x| parse_named(x)).unwrap();
    assert!(
        x["message"].as_str().unwrap().contains("correct format"),
        "{}",
        x
    );
    assert!(x["timestamp"].as_str().unwrap().ends_with('Z'), "{}", x);
    assert_eq!(x["innerExceptions"], serde_json::json!([]));
    assert_eq!(x["stack"]["threadId"].as_u64().map(|t| t > 0), Some(true));
    let frames = x["stack"]["frames"].as_array().unwrap();
    for key in [
        "methodName",
        "methodToken",
        "parameterTypes",
        "typeName",
        "moduleName",
        "moduleVersionId",
        "hidden",
    ] {
        assert!(frames[0].get(key).is_some(), "no {} in {}", key, frames[0]);
    }
    let parse = frames
        .iter()
        .find(|f| f["methodName"] == "Parse")
        .unwrap_or_else(|| panic!("no Parse frame in {:#}", Value::Array(all.clone())));
    assert_eq!(parse["moduleName"], "System.Private.CoreLib", "{}", parse);
    assert_eq!(
        parse["parameterTypes"],
        serde_json::json!(["class System.String"])
    );

    // text/plain: the unhandled-exception layout.
    let text = request(
        addr,
        "GET",
        &format!("/exceptions?pid={}", pid),
        Some("text/plain"),
        "",
    )
    .await;
    assert_eq!(
        (text.status, text.content_type.as_str()),
        (200, "text/plain")
    );
    assert!(
        text.body.starts_with("First chance exception at "),
        "{}",
        text.body
    );
    assert!(
        text.body.contains("\nSystem.FormatException: ")
            && text
                .body
                .contains("\n   at System.Int32.Parse(class System.String)\n"),
        "{}",
        text.body
    );
    // Without Accept, or with one serve cannot write, text too (dotnet-monitor's default
    // for this route: never 406).
    for accept in [None, Some("image/png")] {
        let a = request(addr, "GET", &format!("/exceptions?pid={}", pid), accept, "").await;
        assert_eq!(
            (a.status, a.content_type.as_str()),
            (200, "text/plain"),
            "{:?}",
            accept
        );
    }
    // json-seq: each object after a record separator.
    let seq = request(
        addr,
        "GET",
        &format!("/exceptions?pid={}", pid),
        Some("application/json-seq"),
        "",
    )
    .await;
    assert_eq!(seq.content_type, "application/json-seq");
    assert!(seq.body.starts_with('\u{1e}'), "{:?}", seq.body);
    assert!(seq
        .body
        .split('\u{1e}')
        .skip(1)
        .all(|r| serde_json::from_str::<Value>(r).is_ok()));

    // POST: dotnet-monitor's filters.
    let path = format!("/exceptions?pid={}", pid);
    let post =
        |config: &'static str| request(addr, "POST", &path, Some("application/x-ndjson"), config);
    let excluded = post(r#"{"exclude":[{"exceptionType":"System.FormatException"}]}"#).await;
    assert_eq!(excluded.status, 200, "{}", excluded.body);
    assert!(lines(&excluded.body)
        .iter()
        .all(|x| x["typeName"] != "System.FormatException"));
    // Include: any filter matching; its module, class and method are the top frame's.
    let included = post(
        r#"{"Include":[{"methodName":"NoSuchMethod"},
            {"exceptionType":"System.FormatException","moduleName":"System.Private.CoreLib.dll"}]}"#,
    )
    .await;
    let included = lines(&included.body);
    assert!(!included.is_empty());
    assert!(included
        .iter()
        .all(|x| x["typeName"] == "System.FormatException"
            && x["stack"]["frames"][0]["moduleName"] == "System.Private.CoreLib"));
    let nothing = post(r#"{"include":[{"methodName":"NoSuchMethod"}]}"#).await;
    assert_eq!((nothing.status, nothing.body.as_str()), (200, ""));
    let bad = post(r#"{"include":{"methodName":"Parse"}}"#).await;
    assert_eq!(bad.status, 400, "{}", bad.body);

    // To an egress provider: 202 with the operation; the file gets dotnet-monitor's name.
    let egressed = request(
        addr,
        "GET",
        &format!("/exceptions?pid={}&egressProvider=files", pid),
        Some("application/x-ndjson"),
        "",
    )
    .await;
    assert_eq!(egressed.status, 202, "{}", egressed.body);
    let deadline = Instant::now() + Duration::from_secs(30);
    let file = loop {
        let found = std::fs::read_dir(dir.path().join("egress"))
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .find(|n| n.ends_with(&format!("_{}.exceptions.json", pid)));
        if let Some(f) = found {
            break f;
        }
        assert!(Instant::now() < deadline, "no egressed file within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let written = std::fs::read_to_string(dir.path().join("egress").join(&file)).unwrap();
    assert!(!lines(&written).is_empty(), "{}", written);

    // A process serve does not find, a pid that is not a number: as the other routes.
    let none = request(addr, "GET", "/exceptions?pid=2147483647", None, "").await;
    assert_eq!(none.status, 400, "{}", none.body);
    let nan = request(addr, "GET", "/exceptions?pid=abc", None, "").await;
    assert_eq!(nan.status, 400, "{}", nan.body);
    drop(host);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exceptions_history_of_a_net8_runtime_in_dotnet_monitors_formats() {
    exceptions_of_a_runtime_throwing_in_a_loop("net8").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exceptions_history_of_a_netcore31_runtime_in_dotnet_monitors_formats() {
    exceptions_of_a_runtime_throwing_in_a_loop("netcore31").await;
}

/// The exceptions sessions `rt` was asked for so far (CollectTracing requests whose buffer
/// is the exceptions session's 16 MiB, not the rundown's 64).
fn exceptions_sessions(rt: &dsipc_testkit::FakeRuntime) -> usize {
    rt.received()
        .iter()
        .filter(|r| {
            r.command
                .map_or(false, |c| format!("{:?}", c).starts_with("CollectTracing"))
                && r.bytes.get(20..24) == Some(&16u32.to_le_bytes()[..])
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_exceptions_session_per_runtime_until_it_ends() {
    let dir = TempDir::new("dsipc-sv-exc-fake").unwrap();
    let capture: &'static [u8] = Box::leak(
        std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/data/nettrace/net8.0.4-busy.nettrace"),
        )
        .expect("the committed capture")
        .into_boxed_slice(),
    );
    // A session's stream lasts about a second (4 KiB every 20 ms), then ends as when the
    // runtime exits.
    let mut spec = dsipc_testkit::StreamSpec::content(capture);
    spec.chunk = 4096;
    spec.pause = Duration::from_millis(20);
    let me = std::process::id();
    let rt = common::rules::fake(&dir, spec);
    let (_server, addr) = serve_api(options_in(dir.path())).await;
    let path = format!("/exceptions?pid={}", me);
    // Asked three times while its session runs: one session.
    for _ in 0..3 {
        let a = request(addr, "GET", &path, Some("application/x-ndjson"), "").await;
        assert_eq!(a.status, 200, "{}", a.body);
    }
    assert_eq!(exceptions_sessions(&rt), 1);
    // Its stream ended (the rundown's and the session's): the next ask starts another.
    let ended = tokio::task::block_in_place(|| rt.wait_streams(2, Duration::from_secs(30)));
    assert!(ended.len() >= 2, "{:?}", ended);
    let deadline = Instant::now() + Duration::from_secs(30);
    while exceptions_sessions(&rt) < 2 {
        assert!(Instant::now() < deadline, "no second session within 30 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
        let a = request(addr, "GET", &path, None, "").await;
        assert_eq!(a.status, 200, "{}", a.body);
    }
    assert_eq!(exceptions_sessions(&rt), 2);
}
