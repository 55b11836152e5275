//! dsipc-serve embedded in a program of one's own (what `examples/embed.rs` does): a
//! `Server` serving on a listener the test bound, over a fake runtime, read with a plain
//! HTTP/1.1 client.
#![cfg(target_os = "linux")]

use std::time::Duration;

use dsipc_serve::{Auth, Options, Server};
use dsipc_testkit::{Config, TempDir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` on `addr` (connection closed after the answer): status and body.
async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        path, addr
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut raw))
        .await
        .expect("an answer within 30 s")
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

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

#[tokio::test]
async fn embedded_server_lists_the_runtimes_on_a_listener_the_program_owns() {
    let dir = TempDir::new("dsipc-embed").unwrap();
    let _rt = fake(&dir);
    let mut options = Options::default();
    options.auth = Auth::Off;
    options.tmpdir = Some(dir.path().to_path_buf());
    options.metrics = false;
    let mut server = Server::new(options, 1).expect("server");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    server.serve_api(listener);
    let (status, body) = get(addr, "/processes").await;
    assert_eq!(status, 200, "{}", body);
    let list: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let pid = u64::from(std::process::id());
    assert!(
        list.as_array()
            .expect("an array")
            .iter()
            .any(|p| p["pid"] == pid),
        "{}",
        body
    );
    // Dropping the server closes its listeners.
    drop(server);
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

#[tokio::test]
async fn embedded_server_without_a_key_answers_401_as_dotnet_monitor() {
    let mut options = Options::default();
    options.metrics = false;
    let mut server = Server::new(options, 1).expect("server");
    assert!(!server.key_configured());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    server.serve_api(listener);
    assert_eq!(get(addr, "/processes").await.0, 401);
}
