//! What scripts/api-conformance.sh (schemathesis driven by dotnet-monitor's openapi.json in
//! tests/data/dotnet-monitor/) found, kept as tests of an embedded `Server` over a fake
//! runtime: each answer is one the document gives the operation.
#![cfg(target_os = "linux")]

use dsipc_serve::Server;
use dsipc_testkit::{StreamSpec, TempDir};
use serde_json::Value;

mod common;
use common::{get, options_in, serve_api};

fn fake(dir: &TempDir) -> dsipc_testkit::FakeRuntime {
    common::rules::fake(dir, StreamSpec::default())
}

async fn serve(dir: &TempDir) -> (Server, std::net::SocketAddr) {
    serve_api(options_in(dir.path())).await
}

/// An empty `pid`, `uid` or `name` is no value, as ASP.NET binds dotnet-monitor's `int?`,
/// `Guid?` and `string` parameters: `GET /operations?uid=` lists the operations (the
/// document gives GetOperations 200 and 401 only) and `/process?pid=&uid=&name=` is the
/// default process. (schemathesis: `GET /operations?uid=` answered an undocumented 400.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_process_selector_parameters_are_absent_as_in_asp_net() {
    let dir = TempDir::new("dsipc-conformance").unwrap();
    let _rt = fake(&dir);
    let (_server, addr) = serve(&dir).await;
    for path in [
        "/operations?uid=",
        "/operations?pid=&name=",
        "/operations?pid=%20",
    ] {
        let (status, body) = get(addr, path).await;
        assert_eq!(status, 200, "{}: {}", path, body);
        assert_eq!(body, "[]", "{}", path);
    }
    let (status, body) = get(addr, "/process?pid=&uid=&name=").await;
    assert_eq!(status, 200, "{}", body);
    let process: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(process["pid"], u64::from(std::process::id()), "{}", body);
    // A value that is there is still checked.
    let (status, body) = get(addr, "/process?uid=not-a-guid").await;
    assert_eq!(status, 400, "{}", body);
    assert!(body.contains("\"uid\""), "{}", body);
}

/// `METHOD path` (no body): the status and the `Allow` header.
async fn request(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, Option<String>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{} {} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
        method, path, addr
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(30), s.read_to_end(&mut raw))
        .await
        .expect("an answer within 30 s")
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let head = text.split("\r\n\r\n").next().unwrap_or("");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let allow = head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        if k.eq_ignore_ascii_case("allow") {
            Some(v.trim().to_string())
        } else {
            None
        }
    });
    (status, allow)
}

/// A method a route's path does not take is 405 with the path's methods in `Allow`, as
/// ASP.NET's routing answers dotnet-monitor's clients; a path with no route stays 404.
/// (schemathesis's unsupported_method check: `TRACE /info` answered 404.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_method_a_route_does_not_take_is_405_with_allow() {
    let dir = TempDir::new("dsipc-conformance").unwrap();
    let _rt = fake(&dir);
    let (_server, addr) = serve(&dir).await;
    for (method, path, allow) in [
        ("TRACE", "/info", "GET"),
        ("POST", "/processes", "GET"),
        ("DELETE", "/collectionrules", "GET"),
        ("PUT", "/collectionrules/AnyRule", "GET"),
        ("PUT", "/trace", "GET, POST"),
        ("PATCH", "/exceptions", "GET, POST"),
        (
            "POST",
            "/operations/00000000-0000-0000-0000-000000000000",
            "GET, DELETE",
        ),
        ("TRACE", "/metrics", "GET"),
        ("HEAD", "/info", "GET"),
    ] {
        let (status, got) = request(addr, method, path).await;
        assert_eq!(status, 405, "{} {}", method, path);
        assert_eq!(got.as_deref(), Some(allow), "{} {}", method, path);
    }
    assert_eq!(request(addr, "GET", "/nowhere").await, (404, None));
    assert_eq!(request(addr, "TRACE", "/nowhere").await, (404, None));
}
