//! dsipc-serve embedded in a program of one's own (what `examples/embed.rs` does): a
//! `Server` serving on a listener the test bound, over a fake runtime, read with a plain
//! HTTP/1.1 client.
#![cfg(target_os = "linux")]

use dsipc_serve::{Options, Server};
use dsipc_testkit::{StreamSpec, TempDir};

mod common;
use common::rules::fake;
use common::{get, options_in, serve_api};

#[tokio::test]
async fn embedded_server_lists_the_runtimes_on_a_listener_the_program_owns() {
    let dir = TempDir::new("dsipc-embed").unwrap();
    let _rt = fake(&dir, StreamSpec::default());
    let (server, addr) = serve_api(options_in(dir.path())).await;
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
