//! What the library-level serve tests share: a plain HTTP/1.1 client ([`get`]); for the
//! egress tests, a deterministic artifact stream that can fail on demand, the real peers
//! (moto's S3 server, Azurite) started on free ports, and the reader that reads back with
//! the services' own clients (serve/tests/egress_reader.py).
#![allow(dead_code)] // each test file uses a part

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::task::{Context, Poll};
use std::time::Duration;

use dsipc_serve::egress::azure::AzureBlobOptions;
use dsipc_serve::egress::s3::S3Options;
use dsipc_serve::egress::{Artifact, Secret};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt, ReadBuf};

pub mod rules;

pub const MIB: u64 = 1024 * 1024;
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
pub const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

// ---- the artifact: a deterministic stream of odd-sized chunks, failing on demand ----

/// The byte at `i` of stream `seed`.
pub fn byte_at(seed: u64, i: u64) -> u8 {
    let x = (i ^ seed).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 56) as u8 ^ (x >> 13) as u8
}

pub fn expected(seed: u64, len: u64) -> Vec<u8> {
    (0..len).map(|i| byte_at(seed, i)).collect()
}

/// `len` bytes of stream `seed` in chunks of at most 65,537 bytes (odd, so parts never
/// line up with reads); with `fail_at`, an error instead of the byte at that offset; with
/// `stall_at`, a signal on its channel at that offset and no byte more, ever (a trace
/// whose runtime went quiet).
pub struct Pattern {
    seed: u64,
    pos: u64,
    len: u64,
    fail_at: Option<u64>,
    stall_at: Option<(u64, Option<tokio::sync::oneshot::Sender<()>>)>,
}

impl Pattern {
    pub fn new(seed: u64, len: u64) -> Pattern {
        Pattern {
            seed,
            pos: 0,
            len,
            fail_at: None,
            stall_at: None,
        }
    }
    pub fn stalling_at(mut self, at: u64, reached: tokio::sync::oneshot::Sender<()>) -> Pattern {
        self.stall_at = Some((at, Some(reached)));
        self
    }
    pub fn failing_at(mut self, at: u64) -> Pattern {
        self.fail_at = Some(at);
        self
    }
}

impl AsyncRead for Pattern {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.fail_at == Some(self.pos) {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::Other,
                "the trace session ended abnormally",
            )));
        }
        let pos = self.pos;
        if let Some((at, reached)) = &mut self.stall_at {
            if *at == pos {
                if let Some(tx) = reached.take() {
                    let _ = tx.send(());
                }
                return Poll::Pending; // never woken: nothing more comes
            }
        }
        let stall = self.stall_at.as_ref().map_or(self.len, |(at, _)| *at);
        let end = self.fail_at.unwrap_or(self.len).min(self.len).min(stall);
        let n = (end - self.pos).min(65_537).min(buf.remaining() as u64);
        let (seed, pos) = (self.seed, self.pos);
        let chunk: Vec<u8> = (pos..pos + n).map(|i| byte_at(seed, i)).collect();
        buf.put_slice(&chunk);
        self.pos += n;
        Poll::Ready(Ok(()))
    }
}

pub fn artifact(name: &str) -> Artifact {
    Artifact {
        name: name.to_string(),
        content_type: "application/octet-stream".into(),
        metadata: vec![("ProcessId".into(), "4242".into())],
    }
}

// ---- the peers ----

pub struct Peers {
    pub azurite: PathBuf,
    pub moto: PathBuf,
    pub python: PathBuf,
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The variables of scripts/egress-peers.sh's env file (or the environment's own).
pub fn peers() -> Option<Peers> {
    let mut vars = std::collections::HashMap::new();
    let target = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => Some(PathBuf::from(d)),
        // The test binary is TARGET/debug/deps/egress-HASH.
        None => std::env::current_exe()
            .ok()
            .and_then(|e| e.ancestors().nth(3).map(Path::to_path_buf)),
    };
    if let Some(t) = target {
        if let Ok(text) = std::fs::read_to_string(t.join("egress-peers/egress-peers.env")) {
            for line in text.lines() {
                if let Some((k, v)) = line.split_once('=') {
                    vars.insert(k.to_string(), v.to_string());
                }
            }
        }
    }
    let get = |k: &str| {
        std::env::var(k)
            .ok()
            .or_else(|| vars.get(k).cloned())
            .map(PathBuf::from)
            .filter(|p| p.exists())
    };
    let (azurite, moto, python) = (
        get("DSIPC_AZURITE"),
        get("DSIPC_MOTO_SERVER"),
        get("DSIPC_EGRESS_PYTHON"),
    );
    let missing: Vec<&str> = [
        ("Azurite (DSIPC_AZURITE)", azurite.is_none()),
        ("moto_server (DSIPC_MOTO_SERVER)", moto.is_none()),
        (
            "the readers' python (DSIPC_EGRESS_PYTHON)",
            python.is_none(),
        ),
    ]
    .iter()
    .filter(|(_, m)| *m)
    .map(|(n, _)| *n)
    .collect();
    if missing.is_empty() {
        return Some(Peers {
            azurite: azurite?,
            moto: moto?,
            python: python?,
        });
    }
    let what = missing.join(", ");
    if std::env::var("DSIPC_REQUIRE_EGRESS_PEERS").as_deref() == Ok("1") {
        panic!("DSIPC_REQUIRE_EGRESS_PEERS=1 but missing: {}", what);
    }
    let test = std::thread::current()
        .name()
        .unwrap_or("a test")
        .to_string();
    let line = format!(
        "SKIPPED {}: needs {} (scripts/egress-peers.sh installs them)\n",
        test, what
    );
    let _ = std::io::stderr().write_all(line.as_bytes());
    let dir = repo_root().join("target");
    let _ = std::fs::create_dir_all(&dir);
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("skipped-tests.txt"))
    {
        let _ = f.write_all(line.as_bytes());
    }
    None
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A peer process, killed when dropped.
pub struct Peer {
    child: Child,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `cmd` and waits until its output has shown every line of `ready` (the peer
/// saying it listens): an event, not a sleep. 120 s at most: a cold start of either peer
/// takes a few seconds.
pub fn start(mut cmd: Command, ready: &[String]) -> Peer {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("start the peer");
    let (tx, rx) = mpsc::channel::<String>();
    for out in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let tx = tx.clone();
        // Reads to the end, so that the peer never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
    }
    drop(tx);
    let peer = Peer { child };
    let mut seen = Vec::new();
    let mut waiting: Vec<&String> = ready.iter().collect();
    while !waiting.is_empty() {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(line) => {
                waiting.retain(|r| !line.contains(r.as_str()));
                seen.push(line);
            }
            Err(e) => panic!(
                "the peer did not get ready ({:?}); it said:\n{}",
                e,
                seen.join("\n")
            ),
        }
    }
    peer
}

pub fn moto(p: &Peers) -> (Peer, String) {
    let port = free_port();
    let mut cmd = Command::new(&p.moto);
    cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
    let peer = start(cmd, &[format!("Running on http://127.0.0.1:{}", port)]);
    (peer, format!("http://127.0.0.1:{}", port))
}

/// Azurite in memory: (the peer, blob port, queue port).
pub fn azurite(p: &Peers) -> (Peer, u16, u16) {
    azurite_with(p, None)
}

/// Azurite in memory, over https with `tls`'s (cert.pem, key.pem) when given.
pub fn azurite_with(p: &Peers, tls: Option<(&Path, &Path)>) -> (Peer, u16, u16) {
    let (blob, queue, table) = (free_port(), free_port(), free_port());
    let mut cmd = Command::new(&p.azurite);
    cmd.args(["--inMemoryPersistence", "--skipApiVersionCheck"]);
    if let Some((cert, key)) = tls {
        cmd.arg("--cert").arg(cert).arg("--key").arg(key);
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    for (service, port) in [("blob", blob), ("queue", queue), ("table", table)] {
        cmd.args([
            format!("--{}Host", service),
            "127.0.0.1".into(),
            format!("--{}Port", service),
            port.to_string(),
        ]);
    }
    let peer = start(
        cmd,
        &[
            format!(
                "Blob service is successfully listening at {}://127.0.0.1:{}",
                scheme, blob
            ),
            format!(
                "Queue service is successfully listening at {}://127.0.0.1:{}",
                scheme, queue
            ),
        ],
    );
    (peer, blob, queue)
}

pub fn connection_string(blob: u16, queue: u16) -> String {
    format!(
        "DefaultEndpointsProtocol=http;AccountName={a};AccountKey={k};\
         BlobEndpoint=http://127.0.0.1:{b}/{a};QueueEndpoint=http://127.0.0.1:{q}/{a};",
        a = AZURITE_ACCOUNT,
        k = AZURITE_KEY,
        b = blob,
        q = queue
    )
}

/// Runs the reader; its stdout.
pub fn read_back(p: &Peers, args: &[&str]) -> Vec<u8> {
    read_back_trusting(p, None, args)
}

/// Runs the reader, its Azure clients trusting `ca` for https://; its stdout.
pub fn read_back_trusting(p: &Peers, ca: Option<&Path>, args: &[&str]) -> Vec<u8> {
    let mut cmd = Command::new(&p.python);
    if let Some(ca) = ca {
        cmd.env("DSIPC_READER_CA", ca);
    }
    let out = cmd
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/egress_reader.py"))
        .args(args)
        .output()
        .expect("run the reader");
    assert!(
        out.status.success(),
        "reader {:?} failed: {}",
        args,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

pub fn read_json(p: &Peers, args: &[&str]) -> String {
    String::from_utf8(read_back(p, args))
        .unwrap()
        .trim()
        .to_string()
}

pub fn s3_options(endpoint: &str, bucket: &str) -> S3Options {
    S3Options {
        endpoint: endpoint.into(),
        bucket: bucket.into(),
        access_key_id: "testing".into(),
        secret_access_key: Secret::new("testing-secret-key"),
        ..S3Options::default()
    }
}

pub fn azure_options(blob: u16) -> AzureBlobOptions {
    AzureBlobOptions {
        account_uri: format!("http://127.0.0.1:{}/{}", blob, AZURITE_ACCOUNT),
        account_key: Secret::new(AZURITE_KEY),
        container_name: "dumps".into(),
        blob_prefix: "artifacts".into(),
        ..AzureBlobOptions::default()
    }
}

/// Serve's options for a test: no authentication, the runtimes of `tmpdir`, no metrics
/// listener.
pub fn options_in(tmpdir: &Path) -> dsipc_serve::Options {
    let mut options = dsipc_serve::Options::default();
    options.auth = dsipc_serve::Auth::Off;
    options.tmpdir = Some(tmpdir.to_path_buf());
    options.metrics = false;
    options
}

/// A server for `options` serving its API on a loopback port the test bound: the server
/// and that address.
pub async fn serve_api(
    options: dsipc_serve::Options,
) -> (dsipc_serve::Server, std::net::SocketAddr) {
    let mut server = dsipc_serve::Server::new(options, 1).expect("server");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    server.serve_api(listener);
    (server, addr)
}

/// `GET path` on `addr` (connection closed after the answer): status and body.
pub async fn get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
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
