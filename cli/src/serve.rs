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

use std::ffi::OsString;
use std::path::Path;

use dsipc_serve::auth;
use dsipc_serve::{Auth, ListenAddr, Server};

use crate::args::{self, parse_os};
use crate::output::{display, Output};
use crate::{print_out, CliError, CliResult, Common};

mod config;

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
    // dotnet-monitor's configuration (settings.json, DotnetMonitor_ variables, key-per-file)
    // with serve's flags over it, mapped to the server's options by dsipc-serve.
    let conf = config::resolve(&p)?;
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
    let (mut options, api_addrs, metrics_addrs) = (conf.options, conf.urls, conf.metrics_urls);
    // The flags win over the configured key (Authentication:MonitorApiKey).
    if p.flag("--no-auth") {
        eprintln!("dsipc: {}", dsipc_serve::NO_AUTH_WARNING);
        options.auth = Auth::Off;
    } else if p.flag("--temp-apikey") {
        let (token, verifier) = auth::generate().map_err(CliError::Failed)?;
        eprintln!(
            "dsipc: a temporary API key for this run; use the following header for authorization:\n\nAuthorization: Bearer {}\n",
            token
        );
        options.auth = Auth::Key(verifier);
    } else if let Some(f) = p.value_path("--api-key-file")? {
        options.auth = Auth::Key(read_key_file(&f)?);
    }
    if let Some(v) = p.value_os("--send-timeout") {
        let d = args::duration("--send-timeout", v)?;
        if d.is_zero() {
            return Err(CliError::Usage("--send-timeout must be more than 0".into()));
        }
        options.send_timeout = d;
    }
    options.tmpdir = common.tmpdir.clone();
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
    let port = options.diagnostic_port.clone();
    let server = Server::new(options, listeners).map_err(|e| match e {
        // A configuration error names its key: a usage error, exit 2, as the others.
        dsipc_serve::ServeError::Configuration(_) => CliError::Usage(e.to_string()),
        other => CliError::Failed(other.to_string()),
    })?;
    if let Some(path) = port {
        // Listen mode: runtimes started with DOTNET_DiagnosticPorts=PATH connect to serve.
        eprintln!(
            "dsipc: diagnostic port {} (listen mode: runtimes started with DOTNET_DiagnosticPorts={} connect here)",
            display(&path),
            display(&path)
        );
    }
    rt.block_on(run(server, api_addrs, metrics_addrs))
}

/// Binds every address, serves until Ctrl-C or SIGTERM.
async fn run(
    mut server: Server,
    api_addrs: Vec<ListenAddr>,
    metrics_addrs: Vec<ListenAddr>,
) -> CliResult {
    // Caught from now on, before any address is printed: a stop sent the moment serve says
    // it listens is a clean stop, not a kill.
    let stop = Stop::catch();
    for (addrs, metrics_only) in [(api_addrs, false), (metrics_addrs, true)] {
        server
            .bind(&addrs, metrics_only)
            .await
            .map_err(|e| CliError::Failed(e.to_string()))?;
    }
    if !server.key_configured() {
        eprintln!("dsipc: WARNING: no API key is configured (--api-key-file, --temp-apikey or --no-auth): every API request is answered 401");
    }
    stop.wait().await;
    eprintln!("dsipc: serve: stopping");
    drop(server);
    Ok(())
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
