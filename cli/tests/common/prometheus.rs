//! Prometheus from the tests' side: promtool's check, a plain HTTP GET, a free port and a
//! real Prometheus server scraping a target.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::temp_dir;

/// promtool's lint messages for what dotnet-monitor's names are (gauges such as
/// `systemruntime_exception_count`, units such as `mymeter_latency_ms`): the names dashboards
/// made for dotnet-monitor query, so they are kept; promtool's other findings fail.
pub const DOTNET_MONITOR_LINTS: &[&str] = &[
    "non-histogram and non-summary metrics should not have \"_count\" suffix",
    "metric names should not contain abbreviated units",
];

/// `promtool check metrics`: the exposition parses (exit 1 and `error while linting`
/// otherwise) and lints clean but for [`DOTNET_MONITOR_LINTS`]. Debian 12's promtool (2.42)
/// has no `--lint=none` and exits 3 on lint findings; later ones print them and exit 0.
pub fn promtool_check(exposition: &str) {
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (apt-get install prometheus)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(exposition.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let only_known_lints = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .all(|l| DOTNET_MONITOR_LINTS.iter().any(|m| l.ends_with(m)));
    assert!(
        matches!(out.status.code(), Some(0) | Some(3)) && only_known_lints,
        "promtool ({:?}): {}\n{}",
        out.status,
        text,
        exposition
    );
}

/// `GET path` on `addr` (HTTP/1.1, connection closed): status and body.
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        path, addr
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = match text.find("\r\n\r\n") {
        Some(i) => text[i + 4..].to_string(),
        None => String::new(),
    };
    (status, body)
}

/// A loopback port free right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A real Prometheus server scraping `target` every second.
pub struct Prometheus {
    child: Child,
    addr: String,
    dir: PathBuf,
}

impl Prometheus {
    /// Starts one scraping `target` every second; returns once it is ready.
    pub fn start(target: &str) -> Prometheus {
        let dir = temp_dir("prometheus");
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
                 scrape_configs:\n  - job_name: dsipc\n    static_configs:\n      - targets: ['{}']\n",
                target
            ),
        )
        .unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let log = std::fs::File::create(dir.join("log")).unwrap();
        let child = Command::new(prometheus_bin())
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={}", addr))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start prometheus (apt-get install prometheus; scripts/test.sh does)");
        let p = Prometheus { child, addr, dir };
        // Ready when its HTTP API answers (bounded poll).
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(mut s) = TcpStream::connect(&p.addr) {
                s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let _ = write!(s, "GET /-/ready HTTP/1.0\r\n\r\n");
                let mut r = String::new();
                let _ = s.read_to_string(&mut r);
                if r.starts_with("HTTP/1.0 200") || r.starts_with("HTTP/1.1 200") {
                    return p;
                }
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready: {}",
                p.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Its log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// An instant query; returns the raw JSON answer.
    pub fn query(&self, q: &str) -> String {
        let mut enc = String::new();
        for b in q.bytes() {
            if b.is_ascii_alphanumeric() || b"_-.".contains(&b) {
                enc.push(b as char);
            } else {
                enc.push_str(&format!("%{:02X}", b));
            }
        }
        let (status, body) = http_get(&self.addr, &format!("/api/v1/query?query={}", enc));
        assert_eq!(status, 200, "{}", body);
        body
    }

    /// Polls `q` (bounded) until `ok` accepts the answer; returns it.
    pub fn poll(&self, q: &str, limit: Duration, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + limit;
        loop {
            let r = self.query(q);
            if ok(&r) {
                return r;
            }
            assert!(
                Instant::now() < deadline,
                "query {} never satisfied: {}\n{}",
                q,
                r,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `$PROMETHEUS`, else `prometheus` on the PATH.
pub fn prometheus_bin() -> PathBuf {
    std::env::var_os("PROMETHEUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("prometheus"))
}
