//! # dsipc-std: a blocking client for the .NET Diagnostic IPC protocol
//!
//! A thin layer over the sans-IO [`dsipc`] core and its session layer (`dsipc::session`):
//! it finds a runtime's diagnostic socket, opens the connections the session layer asks
//! for, writes what it says in one write, feeds it what it reads and waits until its
//! deadlines. Which command version to send, what to fall back to, when a session's stream
//! is over and how it ended are the session layer's; this crate never encodes or decodes
//! protocol bytes itself, and never sends a request the core refuses (ill-formed requests
//! crash some runtimes).
//!
//! ```no_run
//! use std::time::{Duration, Instant};
//! use dsipc::payload::Provider;
//! use dsipc_std::DiagnosticsClient;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let client = DiagnosticsClient::for_pid(1234)?.with_timeout(Duration::from_secs(5));
//! let info = client.process_info()?; // the newest ProcessInfo the runtime knows
//! println!("{} {}", info.pid, info.command_line);
//!
//! // Two seconds of runtime events into a .nettrace file. StopTracing is sent on a second
//! // connection while this thread keeps draining the stream to its end.
//! let runtime = Provider::new("Microsoft-Windows-DotNETRuntime", 0x1, 4);
//! let mut session = client.collect_tracing(&[runtime], 256, true)?;
//! let mut file = std::fs::File::create("trace.nettrace")?;
//! let start = Instant::now();
//! let outcome = session.copy_to(&mut file, |_bytes| start.elapsed() > Duration::from_secs(2))?;
//! // Stopped (whole, after our stop), Ended (by the runtime), or Cut at an offset.
//! println!("{:?}: {} bytes", outcome, outcome.bytes());
//! # Ok(())
//! # }
//! ```
//!
//! The same session as a pull loop (the caller's own loop, no callbacks): chunks, quiet
//! ticks and the end, with [`TraceSession::stop`] from the same thread.
//!
//! ```no_run
//! # use std::time::{Duration, Instant};
//! # use dsipc::payload::Provider;
//! # use dsipc_std::{Chunk, DiagnosticsClient};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let client = DiagnosticsClient::for_pid(1234)?;
//! # let runtime = Provider::new("Microsoft-Windows-DotNETRuntime", 0x1, 4);
//! let mut session = client.collect_tracing(&[runtime], 256, true)?;
//! let start = Instant::now();
//! loop {
//!     if start.elapsed() > Duration::from_secs(2) {
//!         session.stop()?; // once; the runtime flushes, answers, then closes the stream
//!     }
//!     match session.next_chunk(Duration::from_millis(200))? {
//!         Chunk::Data(bytes) => { /* parse or store them */ let _ = bytes; }
//!         Chunk::Quiet => {}
//!         Chunk::End(outcome) => break println!("{:?}", outcome),
//!         _ => {}
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! [`reverse`] is the monitor's side of a reverse port (`DOTNET_DiagnosticPorts=PATH,connect`),
//! and [`reverse::monitor`] a whole monitor on one (a thread per connection).
//!
//! Platform code lives in its own module (`unix`, `windows`); the driver is generic over any
//! [`Connection`] (`Read + Write` with timeouts), opened per command by a [`Transport`].
#![deny(missing_docs)]
#![warn(unsafe_op_in_unsafe_fn)]

mod client;
mod drive;
mod fdpass;
#[cfg(any(unix, windows))]
mod probe;
mod session;
mod transport;

/// The README's Rust examples, compiled (and run where they need no runtime) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub mod reverse;

#[cfg(unix)]
pub mod unix;
#[cfg(windows)]
pub mod windows;

pub use client::{
    expect_status, text_to_string, unexpected, DiagnosticsClient, ProcessInfo,
    DEFAULT_MAX_ENVIRONMENT, DEFAULT_TIMEOUT,
};
pub use drive::{MAX_RECV_BUFFER_LEN, RECV_BUFFER_LEN};
/// How a session's stream ended (the session layer's).
pub use dsipc::session::Outcome;
/// The options of a client's calls (dsipc-platform's, shared with dsipc-tokio).
pub use dsipc_platform::ClientOptions;
/// The error type every driver shares: dsipc-platform's.
pub use dsipc_platform::Error;
/// What a process is called (dsipc-platform's): `/proc`'s name and command line for it, and the program of a
/// command line as dotnet-monitor names a process.
pub use dsipc_platform::{command_line, process_name, program_name};
#[cfg(unix)]
pub use fdpass::PassFd;
#[cfg(any(unix, windows))]
pub use probe::{pids_named, probe_all, process_names, Probe, PARALLEL_PROBES};
pub use session::{Chunk, Control, StopHandle, TraceSession};
pub use transport::{Connection, Endpoint, Transport};

/// The core crate, re-exported: requests, providers, GUIDs and HRESULTs come from here.
pub use dsipc;

#[cfg(unix)]
pub(crate) use dsipc_platform::deadline_after;

/// A process with a diagnostic endpoint, on any platform.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiagnosticEndpoint {
    /// Process id (as this process sees it).
    pub pid: u32,
    /// Its socket (`dotnet-diagnostic-{pid}-{key}-socket`) or, on Windows, its pipe
    /// (`\\.\pipe\dotnet-diagnostic-{pid}`): what [`Endpoint::new`] takes.
    pub endpoint: std::path::PathBuf,
}

/// Every process with a diagnostic endpoint, on Unix and Windows alike: sockets in `tmpdir`
/// (Unix; `None`: each process's TMPDIR, `/tmp` and other mount namespaces, see
/// [`unix::list_processes`]) or pipes (Windows, `tmpdir` ignored: `\\.\pipe\` is
/// enumerated, or every process probed where it cannot be, as under Wine).
#[cfg(any(unix, windows))]
pub fn list_processes(tmpdir: Option<&std::path::Path>) -> Result<Vec<DiagnosticEndpoint>, Error> {
    #[cfg(unix)]
    {
        Ok(unix::list_processes(tmpdir)?
            .into_iter()
            .map(|p| DiagnosticEndpoint {
                pid: p.pid,
                endpoint: p.socket,
            })
            .collect())
    }
    #[cfg(windows)]
    {
        let _ = tmpdir;
        match windows::list_processes() {
            Ok(procs) => Ok(procs
                .into_iter()
                .map(|p| DiagnosticEndpoint {
                    pid: p.pid,
                    endpoint: p.pipe,
                })
                .collect()),
            Err(e) => Err(Error::Io(std::io::Error::new(
                std::io::ErrorKind::Other,
                e.to_string(),
            ))),
        }
    }
}
