//! The collection-rule tests' shared parts (serve/tests/rules*.rs): a fake runtime in a
//! temporary directory, a server running rules with a FileSystem egress, polling.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dsipc_serve::{Egress, Server};
use dsipc_testkit::{Config, HostOptions, HostedRuntime, StreamSpec, TempDir};
use serde_json::Value;

use super::{get, options_in, serve_api};

/// How long a test waits for what it polls before it fails.
pub const WAIT: Duration = Duration::from_secs(90);

/// How long a test waits for a real runtime's READY (a hosted runtime allocating its held
/// objects through pythonnet takes most of a minute on a loaded machine).
pub const READY: Duration = Duration::from_secs(180);

/// A real runtime (`net8` or `netcore31`, tests/runtime/host.py) with `args`, alone in `dir`
/// (its TMPDIR): the host and its pid, once READY.
pub fn real_host(dir: &TempDir, runtime: &str, args: &[&str]) -> (HostedRuntime, u32) {
    let mut opts = HostOptions::net8(400).env("TMPDIR", dir.path().as_os_str());
    opts.runtime = runtime.to_string();
    opts.args = args.iter().map(|a| a.to_string()).collect();
    let mut host = HostedRuntime::spawn(&opts)
        .expect("a real runtime host (DSIPC_PYTHON, DSIPC_NET8_ROOT, DSIPC_NETCORE31_ROOT)");
    let pid = host.wait_ready(READY).expect("READY").pid;
    (host, pid)
}

pub fn fake(dir: &TempDir, stream: StreamSpec) -> dsipc_testkit::FakeRuntime {
    let me = std::process::id();
    Config::new()
        .like_net8_0_4()
        .pid(u64::from(me))
        .key(dsipc_std::unix::start_key(me).expect("start key"))
        .listen_in(dir.path())
        .stream(stream)
        .start()
        .expect("fake runtime")
}

/// A recorded .NET 8 counters stream (System.Runtime every second, and MyMeter), played
/// slowly enough to take about a second.
pub fn recorded_counters() -> StreamSpec {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/counters/net8.0.4-system-runtime-and-meter.nettrace");
    let data: &'static [u8] = Box::leak(std::fs::read(path).unwrap().into_boxed_slice());
    StreamSpec {
        chunk: 512,
        pause: Duration::from_millis(20),
        ..StreamSpec::content(data)
    }
}

/// A server over the runtimes of `tmpdir` with the rules `rules` and the FileSystem egress
/// provider `files` writing to `out`: its API address.
pub async fn serve(
    tmpdir: &Path,
    out: &Path,
    rules: Value,
    counter_interval: f64,
) -> (Server, std::net::SocketAddr) {
    let mut options = options_in(tmpdir);
    options.counter_interval = counter_interval;
    options.egress = vec![Egress {
        name: "files".into(),
        target: dsipc_serve::EgressTarget::FileSystem(out.to_path_buf()),
    }];
    options.collection_rules = Some(rules);
    serve_api(options).await
}

/// The artifacts (not the partial files) in `dir` whose names end with `ext`.
pub fn landed(dir: &Path, ext: &str) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    let name = p.file_name().unwrap().to_string_lossy().into_owned();
                    !name.starts_with('.') && name.ends_with(ext)
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Polls until `f` gives something (bounded by [`WAIT`]); `what` says what was awaited.
pub async fn until<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(t) = f().await {
            return t;
        }
        assert!(Instant::now() < deadline, "no {} within {:?}", what, WAIT);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET path` as JSON (200 expected).
pub async fn json_at(addr: std::net::SocketAddr, path: &str) -> Value {
    let (status, body) = get(addr, path).await;
    assert_eq!(status, 200, "{}: {}", path, body);
    serde_json::from_str(&body).expect("JSON")
}
