//! A running `dsipc serve`: what it is given ([`Options`]), the [`Server`] that holds the
//! API's state, and the listeners it serves on (any `tokio::net::TcpListener` the caller
//! owns, or the URLs [`parse_urls`] reads, as dotnet-monitor's `--urls`).

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use dsipc_trace::counters::CounterSet;
use hyper::body::Incoming;
use hyper::{Request, Response};
use tokio::sync::Semaphore;

use crate::api::{self, Api};
use crate::auth::Verifier;
use crate::operations::Egress;
use crate::procs::DefaultFilter;
use crate::{collection, fds, http, logs, metrics, operations, procs, ServeError};

/// dotnet-monitor's default API address (plain HTTP here: dsipc has no TLS).
pub const DEFAULT_URLS: &str = "http://localhost:52323";
/// dotnet-monitor's default metrics address.
pub const DEFAULT_METRICS_URLS: &str = "http://localhost:52325";
/// dotnet-monitor's words when authentication is turned off.
pub const NO_AUTH_WARNING: &str = "WARNING: Authentication has been disabled. This can pose a security risk and is not intended for production environments.";

/// Who may call the API.
#[derive(Debug)]
#[non_exhaustive]
pub enum Auth {
    /// Everyone (dotnet-monitor's `--no-auth`): say [`NO_AUTH_WARNING`].
    Off,
    /// The bearer of the key this verifier checks.
    Key(Verifier),
    /// No key is configured: every API request is answered 401 (dotnet-monitor's default).
    Unconfigured,
}

/// What serve is given (the defaults are dotnet-monitor's).
#[derive(Debug)]
#[non_exhaustive]
pub struct Options {
    /// Who may call the API.
    pub auth: Auth,
    /// Where runtimes' sockets are (`None`: where each runtime says).
    pub tmpdir: Option<PathBuf>,
    /// Listen mode: the path of a diagnostic port runtimes connect to
    /// (`DOTNET_DiagnosticPorts=PATH`), instead of their own sockets.
    pub diagnostic_port: Option<PathBuf>,
    /// Which runtime is the default process: the one every filter matches
    /// (dotnet-monitor's `DefaultProcess:Filters`; none: the only runtime there is).
    pub default_process: Vec<DefaultFilter>,
    /// Where runtimes write dumps before they are sent (`None`: a private folder serve
    /// makes and removes at the end).
    pub dump_temp_folder: Option<PathBuf>,
    /// At most this many runtimes connected to the diagnostic port at once
    /// (`DiagnosticPort:MaxConnections`; always under what the descriptor limit allows).
    pub max_runtimes: Option<usize>,
    /// Whether the default process's counters are collected for `/metrics`.
    pub metrics: bool,
    /// What `/metrics` collects (dotnet-monitor's `Metrics:Providers` and `Meters`;
    /// System.Runtime by default).
    pub metrics_counters: CounterSet,
    /// Seconds between two counter publications (dotnet-monitor's
    /// GlobalCounter:IntervalSeconds, 5).
    pub counter_interval: f64,
    /// File-system egress providers (`--egress NAME=DIR`).
    pub egress: Vec<Egress>,
    /// How long a streamed answer waits for its reader to take a chunk.
    pub send_timeout: Duration,
    /// dotnet-monitor's `CollectionRules` section (`None`: no rules run).
    pub collection_rules: Option<serde_json::Value>,
    /// Its `Templates` section, which rules name filters, triggers, actions and limits from.
    pub collection_rule_templates: Option<serde_json::Value>,
    /// Its `CollectionRuleDefaults` section.
    pub collection_rule_defaults: Option<serde_json::Value>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            auth: Auth::Unconfigured,
            tmpdir: None,
            diagnostic_port: None,
            default_process: Vec::new(),
            dump_temp_folder: None,
            max_runtimes: None,
            metrics: true,
            metrics_counters: CounterSet::default(),
            counter_interval: 5.0,
            egress: Vec::new(),
            send_timeout: http::SEND_TIMEOUT,
            collection_rules: None,
            collection_rule_templates: None,
            collection_rule_defaults: None,
        }
    }
}

/// One listener's address: what `http://HOST:PORT` names.
#[derive(Debug, Clone)]
pub struct ListenAddr {
    /// The URL as given.
    pub url: String,
    /// The addresses it names (`localhost`: both loopbacks).
    pub addrs: Vec<SocketAddr>,
}

/// `http://localhost:52323;http://127.0.0.1:0`: each URL's addresses. `localhost` is the
/// loopback addresses; `*`, `+` and `0.0.0.0`/`[::]` every interface (only when asked).
/// The error names the URL and what is wrong with it.
pub fn parse_urls(list: &str) -> Result<Vec<ListenAddr>, String> {
    let mut out = Vec::new();
    for url in list.split(';').map(str::trim).filter(|u| !u.is_empty()) {
        let bad = |why: &str| format!("{:?}: {}", url, why);
        let rest =
            match url.strip_prefix("http://") {
                Some(r) => r,
                None if url.starts_with("https://") => return Err(bad(
                    "https is not offered (dsipc serve has no TLS): use http:// behind a TLS proxy",
                )),
                None => return Err(bad("wants http://HOST:PORT")),
            };
        let rest = rest.trim_end_matches('/');
        let (host, port) = match rest.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() => (h, p),
            _ => return Err(bad("wants http://HOST:PORT")),
        };
        let port: u16 = port
            .parse()
            .map_err(|_| bad("the port is not a number from 0 to 65535"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<SocketAddr> = match host {
            "localhost" => vec![
                SocketAddr::from(([127, 0, 0, 1], port)),
                SocketAddr::from(([0u16, 0, 0, 0, 0, 0, 0, 1], port)),
            ],
            "*" | "+" => vec![
                SocketAddr::from(([0u16, 0, 0, 0, 0, 0, 0, 0], port)),
                SocketAddr::from(([0, 0, 0, 0], port)),
            ],
            h => match h.parse::<std::net::IpAddr>() {
                Ok(ip) => vec![SocketAddr::new(ip, port)],
                Err(_) => return Err(bad("the host must be localhost, an IP address, * or +")),
            },
        };
        out.push(ListenAddr {
            url: url.to_string(),
            addrs,
        });
    }
    if out.is_empty() {
        return Err("names no URL".to_string());
    }
    Ok(out)
}

/// dotnet-monitor's API and `/metrics` for the runtimes of this machine (or those that
/// connect to its diagnostic port). Made and served inside a tokio runtime; the tasks it
/// starts end when it is dropped.
pub struct Server {
    api: Arc<Api>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    key_configured: bool,
    nofile: Option<u64>,
    // Dropped last: the private dump folder is removed when nothing uses it.
    _storage: StorageDir,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("dump_dir", &self.api.dump_dir)
            .finish()
    }
}

impl Server {
    /// A server for `options`; `listeners` is how many listeners it will serve (what the
    /// diagnostic port leaves them of the descriptor limit). Must be called within a tokio
    /// runtime.
    pub fn new(options: Options, listeners: usize) -> Result<Server, ServeError> {
        let rules = collection::Rules::load(&options)?;
        let nofile = fds::raise_nofile();
        let storage = match options.dump_temp_folder {
            Some(d) => StorageDir::given(d)?,
            None => StorageDir::create()?,
        };
        let mut tasks = Vec::new();
        let pool = match options.diagnostic_port {
            None => None,
            Some(path) => {
                let mut pool =
                    dsipc_tokio::reverse::RuntimePool::bind(&path).map_err(|source| {
                        ServeError::DiagnosticPort {
                            path: path.clone(),
                            source,
                        }
                    })?;
                let bound = fds::pool_bound(nofile, listeners);
                pool.set_max_runtimes(options.max_runtimes.map_or(bound, |m| m.min(bound)));
                let pool = Arc::new(pool);
                tasks.push(tokio::spawn(report_full_pool(Arc::clone(&pool), nofile)));
                tasks.push(tokio::spawn(procs::resume_connected_runtimes(Arc::clone(
                    &pool,
                ))));
                Some(pool)
            }
        };
        let (auth, key_configured) = match options.auth {
            Auth::Off => (None, true),
            Auth::Key(v) => (Some(v), true),
            Auth::Unconfigured => {
                // No key: nothing verifies, every API request is answered 401.
                let (_, unusable) = crate::auth::generate().map_err(ServeError::Random)?;
                (Some(unusable), false)
            }
        };
        let api = Arc::new(Api {
            discovery: procs::Discovery {
                tmpdir: options.tmpdir,
                pool,
                default_filter: options.default_process,
                cache: Default::default(),
                probes: Default::default(),
            },
            auth,
            dump_dir: storage.path.clone(),
            metrics: metrics::Metrics::new(
                options.metrics_counters,
                options.counter_interval,
                options.metrics,
            ),
            egress: options.egress,
            operations: operations::Operations::default(),
            traces: Arc::new(Semaphore::new(api::MAX_TRACES)),
            dumps: Arc::new(Semaphore::new(api::MAX_DUMPS)),
            gcdumps: Arc::new(Semaphore::new(api::MAX_GCDUMPS)),
            stacks: Arc::new(Semaphore::new(api::MAX_STACKS)),
            live_metrics: Arc::new(Semaphore::new(api::MAX_LIVE_METRICS)),
            logs: Arc::new(Semaphore::new(logs::MAX_LOGS)),
            exceptions: Default::default(),
            counter_interval: options.counter_interval,
            send_timeout: options.send_timeout,
            rules: rules.map(Arc::new),
        });
        if api.rules.is_some() {
            // The rules follow every runtime from when it is found, as dotnet-monitor's
            // CollectionRuleService does.
            tasks.push(tokio::spawn(collection::follow(Arc::clone(&api))));
            tasks.push(tokio::spawn(collection::tick(Arc::clone(&api))));
        }
        if api.metrics.enabled() {
            // Discovery on its own schedule: the default process's counters are collected
            // from when it is found, whether or not anyone scrapes.
            let a = Arc::clone(&api);
            tasks.push(tokio::spawn(async move {
                metrics::follow(&a.discovery, &a.metrics).await
            }));
        }
        Ok(Server {
            api,
            tasks,
            key_configured,
            nofile,
            _storage: storage,
        })
    }

    /// Whether an API key is configured (without one every API request is answered 401).
    pub fn key_configured(&self) -> bool {
        self.key_configured
    }

    /// The descriptor limit serve raised itself to (Unix), if it could read it.
    pub fn descriptor_limit(&self) -> Option<u64> {
        self.nofile
    }

    /// Serves the API (and `/metrics`, without a key, as dotnet-monitor) on `listener`
    /// until the server is dropped.
    pub fn serve_api(&mut self, listener: tokio::net::TcpListener) {
        self.serve(listener, false)
    }

    /// Serves `/metrics` alone on `listener` until the server is dropped.
    pub fn serve_metrics(&mut self, listener: tokio::net::TcpListener) {
        self.serve(listener, true)
    }

    fn serve(&mut self, listener: tokio::net::TcpListener, metrics_only: bool) {
        let route = Arc::new(Route {
            api: Arc::clone(&self.api),
            metrics_only,
        });
        self.tasks.push(tokio::spawn(http::serve(listener, route)));
    }

    /// Binds every address of `addrs` (a loopback name whose IPv6 side is missing is
    /// skipped if the other binds) and serves the API there (`metrics_only`: `/metrics`
    /// alone), saying each address on stderr.
    pub async fn bind(
        &mut self,
        addrs: &[ListenAddr],
        metrics_only: bool,
    ) -> Result<(), ServeError> {
        for a in addrs {
            let mut bound = 0;
            let mut last_err = None;
            for sa in &a.addrs {
                match tokio::net::TcpListener::bind(sa).await {
                    Ok(l) => {
                        let local = l.local_addr().map(|x| x.to_string()).unwrap_or_default();
                        if sa.ip().is_unspecified() {
                            eprintln!(
                                "dsipc: WARNING: {} listens on every interface ({})",
                                a.url, local
                            );
                        }
                        eprintln!(
                            "dsipc: {} on http://{}",
                            if metrics_only { "metrics" } else { "API" },
                            local
                        );
                        self.serve(l, metrics_only);
                        bound += 1;
                    }
                    Err(e) => last_err = Some((*sa, e)),
                }
            }
            if bound == 0 {
                let (addr, source) = last_err.expect("an address was tried");
                return Err(ServeError::Listen {
                    url: a.url.clone(),
                    addr,
                    source,
                });
            }
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A listener's handler: the API (behind the key) or `/metrics` alone.
struct Route {
    api: Arc<Api>,
    metrics_only: bool,
}

impl http::Handler for Route {
    fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Pin<Box<dyn Future<Output = Response<http::Body>> + Send>> {
        let api = Arc::clone(&self.api);
        if self.metrics_only {
            Box::pin(api.handle_metrics(req))
        } else {
            Box::pin(api.handle(req))
        }
    }
}

/// Says once on stderr that the diagnostic port turned a runtime away because the pool was
/// at its bound.
async fn report_full_pool(pool: Arc<dsipc_tokio::reverse::RuntimePool>, nofile: Option<u64>) {
    let forever = Duration::from_secs(365 * 24 * 3600);
    while pool
        .wait_until(forever, |_| pool.refused() > 0)
        .await
        .is_err()
    {}
    eprintln!(
        "dsipc: serve: the diagnostic port keeps at most {} runtimes{}: further runtimes are closed until one leaves (reported once)",
        pool.max_runtimes(),
        match nofile {
            Some(n) => format!(" (a reserve of the descriptor limit, {}, stays for the API)", n),
            None => String::new(),
        }
    );
}

/// Where runtimes write dumps before serve sends them: a private folder serve made (and
/// removes at the end), or one given (left as it is).
struct StorageDir {
    path: PathBuf,
    created: bool,
}

impl StorageDir {
    fn given(path: PathBuf) -> Result<StorageDir, ServeError> {
        let path = if path.is_absolute() {
            path
        } else {
            std::env::current_dir()
                .map_err(|source| ServeError::Storage {
                    path: path.clone(),
                    source,
                })?
                .join(path)
        };
        if !path.is_dir() {
            return Err(ServeError::Storage {
                path,
                source: std::io::Error::new(std::io::ErrorKind::Other, "not a directory"),
            });
        }
        Ok(StorageDir {
            path,
            created: false,
        })
    }

    fn create() -> Result<StorageDir, ServeError> {
        let base = std::env::temp_dir();
        let mut last = None;
        for attempt in 0..100u32 {
            let mut suffix = [0u8; 4];
            getrandom::getrandom(&mut suffix).map_err(|e| ServeError::Random(e.to_string()))?;
            let path = base.join(format!(
                "dsipc-serve-{}-{:08x}",
                std::process::id(),
                u32::from_le_bytes(suffix).wrapping_add(attempt)
            ));
            #[cfg_attr(not(unix), allow(unused_mut))]
            let mut b = std::fs::DirBuilder::new();
            #[cfg(unix)]
            {
                use std::os::unix::fs::DirBuilderExt;
                b.mode(0o700);
            }
            match b.create(&path) {
                Ok(()) => {
                    return Ok(StorageDir {
                        path,
                        created: true,
                    })
                }
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(path),
                Err(source) => return Err(ServeError::Storage { path, source }),
            }
        }
        Err(ServeError::Storage {
            path: last.unwrap_or(base),
            source: std::io::Error::new(
                std::io::ErrorKind::AlreadyExists,
                "no free name for a private dump folder after 100 tries",
            ),
        })
    }
}

impl Drop for StorageDir {
    fn drop(&mut self) {
        if self.created {
            // Only what serve created: dumps it did not hand out yet, then the folder.
            if let Ok(entries) = std::fs::read_dir(&self.path) {
                for e in entries.flatten() {
                    let name = e.file_name();
                    if name
                        .to_string_lossy()
                        .starts_with(&format!("{}-", std::process::id()))
                    {
                        let _ = std::fs::remove_file(e.path());
                    }
                }
            }
            let _ = std::fs::remove_dir(&self.path);
        }
    }
}

/// The folder dumps go through (for a caller that reports it).
impl Server {
    /// Where runtimes write dumps before they are sent.
    pub fn dump_temp_folder(&self) -> &Path {
        &self.api.dump_dir
    }
}
