//! The crate's one error type (the API's answers have their own: `ApiError`, a problem
//! document).

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Why serve could not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum ServeError {
    /// None of a URL's addresses could be bound.
    Listen {
        /// The URL as given.
        url: String,
        /// The last address tried.
        addr: SocketAddr,
        /// Why it could not be bound.
        source: io::Error,
    },
    /// The diagnostic port (listen mode) could not be bound.
    DiagnosticPort {
        /// Its path.
        path: PathBuf,
        /// Why.
        source: dsipc_tokio::Error,
    },
    /// The folder dumps go through is not a directory or could not be made.
    Storage {
        /// The folder.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The OS's random source failed (keys and folder names come from it).
    Random(String),
    /// A listener could not be bound.
    Bind {
        /// The address as given.
        addr: String,
        /// Why.
        source: io::Error,
    },
    /// A runtime refused, or the connection to it failed.
    Ipc {
        /// The runtime's process id.
        pid: u32,
        /// Why.
        source: dsipc_tokio::Error,
    },
    /// A runtime's counters session ended before it said whether it started.
    SessionLost {
        /// The runtime's process id.
        pid: u32,
    },
    /// A thread, an async runtime or a listener failed.
    Io(io::Error),
    /// The collection rules' configuration is wrong as a whole (`CollectionRules` or
    /// `CollectionRuleDefaults` is not a section, a default has a wrong value); the error
    /// names the key. A single rule that cannot run is reported on `/collectionrules`.
    Configuration(crate::rules::RuleError),
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Listen { url, addr, source } => {
                write!(f, "cannot listen on {} ({}): {}", url, addr, source)
            }
            ServeError::DiagnosticPort { path, source } => write!(
                f,
                "cannot listen for runtimes on {}: {}",
                path.display(),
                source
            ),
            ServeError::Storage { path, source } => {
                write!(f, "dump folder {}: {}", path.display(), source)
            }
            ServeError::Random(e) => write!(f, "the OS's random source failed: {}", e),
            ServeError::Bind { addr, source } => write!(f, "cannot listen on {}: {}", addr, source),
            ServeError::Ipc { source, .. } => source.fmt(f),
            ServeError::SessionLost { pid } => write!(f, "pid {}: counters session lost", pid),
            ServeError::Io(e) => e.fmt(f),
            ServeError::Configuration(e) => write!(f, "configuration: {}", e),
        }
    }
}

impl std::error::Error for ServeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ServeError::Listen { source, .. }
            | ServeError::Storage { source, .. }
            | ServeError::Bind { source, .. }
            | ServeError::Io(source) => Some(source),
            ServeError::DiagnosticPort { source, .. } | ServeError::Ipc { source, .. } => {
                Some(source)
            }
            ServeError::Random(_)
            | ServeError::SessionLost { .. }
            | ServeError::Configuration(_) => None,
        }
    }
}
