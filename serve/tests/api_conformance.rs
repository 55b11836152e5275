//! What scripts/api-conformance.sh (schemathesis driven by dotnet-monitor's openapi.json,
//! serve/tests/data/) found, kept as tests of an embedded `Server` over a fake runtime: each
//! answer is one the document gives the operation.
#![cfg(target_os = "linux")]

use dsipc_serve::{Auth, Options, Server};
use dsipc_testkit::{Config, TempDir};
use serde_json::Value;

mod common;
use common::get;

fn fake(dir: &TempDir) -> dsipc_testkit::FakeRuntime {
    let me = std::process::id();
    Config::new()
        .like_net8_0_4()
        .pid(u64::from(me))
        .key(dsipc_std::unix::start_key(me).expect("start key"))
        .listen_in(dir.path())
        .start()
        .expect("fake runtime")
}

async fn serve(dir: &TempDir) -> (Server, std::net::SocketAddr) {
    let mut options = Options::default();
    options.auth = Auth::Off;
    options.tmpdir = Some(dir.path().to_path_buf());
    options.metrics = false;
    let mut server = Server::new(options, 1).expect("server");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    server.serve_api(listener);
    (server, addr)
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
