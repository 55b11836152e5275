//! `dsipc serve`: dotnet-monitor's HTTP API (routes, parameters, content types, JSON
//! shapes) from this one binary, on tokio and hyper.
//!
//! - `serve [--urls URLS] [--metricUrls URLS] [--api-key-file FILE | --temp-apikey |
//!   --no-auth] [--dump-temp-folder DIR]`: the API on `http://localhost:52323`, `/metrics`
//!   on `http://localhost:52325` (never every interface unless a URL asks for it).
//! - `serve generatekey [-o FILE] [--force]`: a new API key; FILE gets only its hash.
//!
//! Authentication is on by default: without a key, every API request is answered 401 (as
//! dotnet-monitor with no key configured). `/metrics` needs none, on the metrics URLs and
//! the API's alike (as dotnet-monitor's).

mod api;
mod auth;
mod collect;
mod config;
mod dump;
mod fds;
mod livemetrics;
mod logs;
mod metrics;
mod models;
mod operations;
mod procs;
mod profiles;
mod session;

use std::ffi::OsString;
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response};
use tokio::sync::Semaphore;

use crate::args::{self, parse_os};
use crate::http;
use crate::output::{display, Output};
use crate::{print_out, CliError, CliResult, Common};

use api::Api;

/// dotnet-monitor's default API address (plain HTTP here: dsipc has no TLS).
pub const DEFAULT_URLS: &str = "http://localhost:52323";
/// dotnet-monitor's default metrics address.
pub const DEFAULT_METRICS_URLS: &str = "http://localhost:52325";

/// dotnet-monitor's words when authentication is turned off.
const NO_AUTH_WARNING: &str = "WARNING: Authentication has been disabled. This can pose a security risk and is not intended for production environments.";

const VALUES: &[&str] = &[
    "--urls",
    "-u",
    "--metricUrls",
    "--metrics-urls",
    "--api-key-file",
    "--dump-temp-folder",
    "--egress",
    "--counter-interval",
    "--default-process",
    "--diagnostic-port",
    "--send-timeout",
    "--configuration-file-path",
    "--level",
    "-o",
    "--output",
];
const FLAGS: &[&str] = &[
    "--no-auth",
    "--temp-apikey",
    "--no-metrics",
    "--force",
    "--show-sources",
];

pub(crate) fn cmd_serve(rest: &[OsString]) -> CliResult {
    let p = parse_os(rest, VALUES, FLAGS)?;
    if p.positionals
        .first()
        .map(|s| s == "generatekey")
        .unwrap_or(false)
    {
        p.expect_positionals(&["generatekey"])?;
        return generate_key(&p);
    }
    if p.positionals
        .first()
        .map(|s| s == "config")
        .unwrap_or(false)
    {
        p.expect_positionals(&["config", "show"])?;
        return config::show(&p);
    }
    p.expect_positionals(&[])?;
    let common = Common::from(&p)?;
    // dotnet-monitor's configuration (settings.json, DotnetMonitor_ variables, key-per-file),
    // serve's flags over it.
    let conf = config::resolve(&p)?;
    let api_addrs = parse_urls("urls", &conf.urls)?;
    // dotnet-monitor's `--no-metrics` (Metrics:Enabled false): no listener, no collection.
    let metrics_enabled = conf.metrics_enabled;
    let metrics_addrs = if !metrics_enabled {
        Vec::new()
    } else {
        parse_urls("Metrics:Endpoints (--metricUrls)", &conf.metrics_urls)?
    };
    let auth_choices = [
        p.flag("--no-auth"),
        p.flag("--temp-apikey"),
        p.value_os("--api-key-file").is_some(),
    ];
    if auth_choices.iter().filter(|c| **c).count() > 1 {
        return Err(CliError::Usage(
            "--no-auth, --temp-apikey and --api-key-file exclude each other".into(),
        ));
    }
    let mut key_configured = true;
    let auth = if p.flag("--no-auth") {
        eprintln!("dsipc: {}", NO_AUTH_WARNING);
        None
    } else if p.flag("--temp-apikey") {
        let (token, verifier) = auth::generate().map_err(CliError::Failed)?;
        eprintln!(
            "dsipc: a temporary API key for this run; use the following header for authorization:\n\nAuthorization: Bearer {}\n",
            token
        );
        Some(verifier)
    } else if let Some(f) = p.value_path("--api-key-file")? {
        Some(read_key_file(&f)?)
    } else if let Some(v) = conf.api_key.clone() {
        Some(v)
    } else {
        key_configured = false;
        // No key: nothing verifies, every API request is answered 401.
        let (_, unusable) = auth::generate().map_err(CliError::Failed)?;
        Some(unusable)
    };
    let dump_dir = match conf.dump_temp_folder.clone() {
        Some(d) => StorageDir::given(d)?,
        None => StorageDir::create()?,
    };
    // dotnet-monitor's GlobalCounter:IntervalSeconds (default 5, from 1 s to a day).
    let counter_interval = conf.counter_interval;
    let send_timeout = match p.value_os("--send-timeout") {
        None => http::SEND_TIMEOUT,
        Some(v) => {
            let d = args::duration("--send-timeout", v)?;
            if d.is_zero() {
                return Err(CliError::Usage("--send-timeout must be more than 0".into()));
            }
            d
        }
    };
    let egress = conf.egress;
    let default_filter = conf.default_filter;
    let nofile = fds::raise_nofile();
    let listeners: usize = api_addrs
        .iter()
        .chain(metrics_addrs.iter())
        .map(|a| a.addrs.len())
        .sum();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(16)
        .build()
        .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {}", e)))?;
    let _in_runtime = rt.enter();
    // Listen mode: runtimes started with DOTNET_DiagnosticPorts=PATH connect to serve.
    let pool = match conf.listen {
        None => None,
        Some((path, max_connections)) => {
            let mut pool = dsipc_tokio::reverse::RuntimePool::bind(&path).map_err(|e| {
                CliError::Failed(format!(
                    "cannot listen for runtimes on {}: {}",
                    display(&path),
                    e
                ))
            })?;
            eprintln!(
                "dsipc: diagnostic port {} (listen mode: runtimes started with DOTNET_DiagnosticPorts={} connect here)",
                display(&path),
                display(&path)
            );
            let bound = fds::pool_bound(nofile, listeners);
            // DiagnosticPort:MaxConnections, under the descriptor bound.
            pool.set_max_runtimes(max_connections.map_or(bound, |m| m.min(bound)));
            let pool = Arc::new(pool);
            tokio::spawn(report_full_pool(Arc::clone(&pool), nofile));
            Some(pool)
        }
    };
    let api = Arc::new(Api {
        discovery: procs::Discovery {
            tmpdir: common.tmpdir.clone(),
            pool,
            default_filter,
            cache: Default::default(),
            probes: Default::default(),
        },
        auth,
        dump_dir: dump_dir.path.clone(),
        metrics: metrics::Metrics::new(conf.metrics_counters, counter_interval, metrics_enabled),
        egress,
        operations: operations::Operations::default(),
        traces: Arc::new(Semaphore::new(api::MAX_TRACES)),
        dumps: Arc::new(Semaphore::new(api::MAX_DUMPS)),
        gcdumps: Arc::new(Semaphore::new(api::MAX_GCDUMPS)),
        stacks: Arc::new(Semaphore::new(api::MAX_STACKS)),
        live_metrics: Arc::new(Semaphore::new(api::MAX_LIVE_METRICS)),
        logs: Arc::new(Semaphore::new(logs::MAX_LOGS)),
        counter_interval,
        send_timeout,
    });
    let result = rt.block_on(run(
        Arc::clone(&api),
        api_addrs,
        metrics_addrs,
        key_configured,
    ));
    drop(api);
    drop(dump_dir);
    result
}

/// One listener's address: what `http://HOST:PORT` names.
struct ListenAddr {
    url: String,
    addrs: Vec<SocketAddr>,
}

/// `http://localhost:52323;http://127.0.0.1:0`: each URL's addresses. `localhost` is the
/// loopback addresses; `*`, `+` and `0.0.0.0`/`[::]` every interface (only when asked).
fn parse_urls(flag: &str, list: &str) -> Result<Vec<ListenAddr>, CliError> {
    let mut out = Vec::new();
    for url in list.split(';').map(str::trim).filter(|u| !u.is_empty()) {
        let bad = |why: &str| CliError::Usage(format!("{} {:?}: {}", flag, url, why));
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
        return Err(CliError::Usage(format!("{} names no URL", flag)));
    }
    Ok(out)
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

/// Binds every address (a loopback name whose IPv6 side is missing is skipped if the
/// other binds), serves until Ctrl-C.
async fn run(
    api: Arc<Api>,
    api_addrs: Vec<ListenAddr>,
    metrics_addrs: Vec<ListenAddr>,
    key_configured: bool,
) -> CliResult {
    // Caught from now on, before any address is printed: a stop sent the moment serve says
    // it listens is a clean stop, not a kill.
    let stop = Stop::catch();
    let mut servers = Vec::new();
    if let Some(pool) = &api.discovery.pool {
        servers.push(tokio::spawn(procs::resume_connected_runtimes(Arc::clone(
            pool,
        ))));
    }
    for (addrs, metrics_only) in [(api_addrs, false), (metrics_addrs, true)] {
        let route = Arc::new(Route {
            api: Arc::clone(&api),
            metrics_only,
        });
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
                        servers.push(tokio::spawn(http::serve(l, Arc::clone(&route))));
                        bound += 1;
                    }
                    Err(e) => last_err = Some((sa, e)),
                }
            }
            if bound == 0 {
                let (sa, e) = last_err.expect("an address was tried");
                return Err(CliError::Failed(format!(
                    "cannot listen on {} ({}): {}",
                    a.url, sa, e
                )));
            }
        }
    }
    if api.metrics.enabled() {
        // Discovery on its own schedule, once listening (its lines follow the addresses'):
        // the default process's counters are collected from when it is found, whether or
        // not anyone scrapes.
        let api = Arc::clone(&api);
        servers.push(tokio::spawn(async move {
            metrics::follow(&api.discovery, &api.metrics).await
        }));
    }
    if !key_configured {
        eprintln!("dsipc: WARNING: no API key is configured (--api-key-file, --temp-apikey or --no-auth): every API request is answered 401");
    }
    stop.wait().await;
    eprintln!("dsipc: serve: stopping");
    for s in servers {
        s.abort();
    }
    Ok(())
}

/// Says once on stderr that the diagnostic port turned a runtime away because the pool was
/// at its bound.
async fn report_full_pool(pool: Arc<dsipc_tokio::reverse::RuntimePool>, nofile: Option<u64>) {
    let forever = std::time::Duration::from_secs(365 * 24 * 3600);
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

/// Ctrl-C, or SIGTERM where there is one (a service manager's stop), caught from when this
/// is made (tokio's `ctrl_c()` would catch only from its first poll).
struct Stop {
    #[cfg(unix)]
    signals: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
    #[cfg(windows)]
    ctrl_c: Option<tokio::signal::windows::CtrlC>,
}

impl Stop {
    /// Starts catching the stop signals.
    fn catch() -> Stop {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let signals = match (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) {
                (Ok(i), Ok(t)) => Some((i, t)),
                _ => None,
            };
            Stop { signals }
        }
        #[cfg(windows)]
        {
            Stop {
                ctrl_c: tokio::signal::windows::ctrl_c().ok(),
            }
        }
    }

    /// Waits for one.
    async fn wait(self) {
        #[cfg(unix)]
        if let Some((mut int, mut term)) = self.signals {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            return;
        }
        #[cfg(windows)]
        if let Some(mut c) = self.ctrl_c {
            c.recv().await;
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// `serve generatekey [-o FILE] [--force]`.
fn generate_key(p: &args::Parsed) -> CliResult {
    let (token, verifier) = auth::generate().map_err(CliError::Failed)?;
    let header = format!("Authorization: Bearer {}", token);
    match p.value_alias("-o", "--output")? {
        Some(o) => {
            let dest = args::path("-o", o)?;
            let mut out = Output::create(&dest, p.flag("--force"))?;
            if let Err(e) = out.writer().write_all(verifier.settings_json().as_bytes()) {
                out.abandon();
                return Err(CliError::io(format!("writing {}", display(&dest)), e));
            }
            out.commit()?;
            print_out(&format!(
                "Generated ApiKey for dsipc serve; use the following header for authorization:\n\n{}\n\n{} holds only its SHA-256 hash: dsipc serve --api-key-file {}\n",
                header,
                display(&dest),
                display(&dest)
            ))
        }
        None => print_out(&format!(
            "Generated ApiKey for dsipc serve; use the following header for authorization:\n\n{}\n\nSettings in Json format (the key's hash only; save as a file for --api-key-file):\n{}",
            header,
            verifier.settings_json()
        )),
    }
}

fn read_key_file(path: &Path) -> Result<auth::Verifier, CliError> {
    use std::io::Read;
    let f = std::fs::File::open(path)
        .map_err(|e| CliError::io(format!("reading {}", display(path)), e))?;
    let mut text = String::new();
    f.take(auth::MAX_KEY_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| CliError::io(format!("reading {}", display(path)), e))?;
    if text.len() as u64 > auth::MAX_KEY_FILE {
        return Err(CliError::Failed(format!(
            "{} is larger than {} bytes: not a key file",
            display(path),
            auth::MAX_KEY_FILE
        )));
    }
    auth::Verifier::parse_settings(&text)
        .map_err(|e| CliError::Failed(format!("{}: {}", display(path), e)))
}

/// Where runtimes write dumps before serve sends them: a private folder serve made (and
/// removes at exit), or one given with `--dump-temp-folder` (left as it is).
struct StorageDir {
    path: PathBuf,
    created: bool,
}

impl StorageDir {
    fn given(path: PathBuf) -> Result<StorageDir, CliError> {
        let path = if path.is_absolute() {
            path
        } else {
            std::env::current_dir()
                .map_err(|e| CliError::Failed(format!("cannot read the current directory: {}", e)))?
                .join(path)
        };
        if !path.is_dir() {
            return Err(CliError::Failed(format!(
                "--dump-temp-folder {} is not a directory",
                display(&path)
            )));
        }
        Ok(StorageDir {
            path,
            created: false,
        })
    }

    fn create() -> Result<StorageDir, CliError> {
        let base = std::env::temp_dir();
        for attempt in 0..100u32 {
            let mut suffix = [0u8; 4];
            getrandom::getrandom(&mut suffix).map_err(|e| CliError::Failed(e.to_string()))?;
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
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => {
                    return Err(CliError::io(format!("creating {}", display(&path)), e));
                }
            }
        }
        Err(CliError::Failed(
            "cannot create a private dump folder".into(),
        ))
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
