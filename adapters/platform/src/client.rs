//! What dsipc-std's and dsipc-tokio's `DiagnosticsClient`s share: the address of a
//! runtime's diagnostic server ([`Endpoint`]) and the options of every call
//! ([`ClientOptions`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use dsipc::session::{DEFAULT_MAX_ENVIRONMENT, DEFAULT_TIMEOUT};

use crate::Error;

/// The address of a runtime's default diagnostic server: on Unix, the path of its
/// `dotnet-diagnostic-{pid}-{key}-socket`; on Windows its pipe `\\.\pipe\NAME`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    path: PathBuf,
}

impl Endpoint {
    /// An endpoint at `path` (a Unix socket path, or on Windows a pipe path).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Endpoint { path: path.into() }
    }

    /// The endpoint of process `pid`: on Unix its socket, found with
    /// `discovery::find_socket` in `tmpdir` when it is given, else in the target's TMPDIR,
    /// `/tmp`, then through `/proc/PID/root`; on Windows its pipe (`tmpdir` ignored: the
    /// pipe name depends on the pid only).
    #[cfg(any(unix, windows))]
    pub fn for_pid_in(pid: u32, tmpdir: Option<&Path>) -> Result<Self, Error> {
        #[cfg(unix)]
        let path = crate::discovery::find_socket(pid, tmpdir)?;
        #[cfg(windows)]
        let path = {
            let _ = tmpdir;
            crate::windows::pipe_for_pid(pid)
        };
        Ok(Endpoint::new(path))
    }

    /// The socket (or pipe) path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The options of a client's calls: the timeout of each call and the bound on an
/// environment block. Both adapters' `DiagnosticsClient::with_options` take it, and their
/// `with_timeout` and `with_max_environment` set one field of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientOptions {
    timeout: Duration,
    max_environment: u64,
}

impl Default for ClientOptions {
    /// [`DEFAULT_TIMEOUT`] and [`DEFAULT_MAX_ENVIRONMENT`].
    fn default() -> Self {
        ClientOptions {
            timeout: DEFAULT_TIMEOUT,
            max_environment: DEFAULT_MAX_ENVIRONMENT,
        }
    }
}

impl ClientOptions {
    /// Sets the timeout: the whole budget of each call (connect, send, replies and
    /// fallbacks to older command versions together; at least 1 ms). For EventPipe
    /// sessions it bounds the start, the StopTracing reply, and the stream's end after
    /// the stop was answered.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Sets the largest environment block (bytes, as announced by the runtime) that a
    /// `process_environment` call accepts; past it the call fails with
    /// [`Error::EnvironmentTooLarge`] before reading any entry. Default
    /// [`DEFAULT_MAX_ENVIRONMENT`].
    pub fn with_max_environment(mut self, bytes: u64) -> Self {
        self.max_environment = bytes;
        self
    }

    /// The timeout (see [`with_timeout`](Self::with_timeout)).
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The environment bound (see [`with_max_environment`](Self::with_max_environment)).
    pub fn max_environment(&self) -> u64 {
        self.max_environment
    }
}

/// The option methods of both adapters' `DiagnosticsClient`s, written once over their
/// field `options: ClientOptions` (internal to dsipc-std and dsipc-tokio; `ClientOptions`
/// must be in scope where it expands, for the links of the docs).
#[doc(hidden)]
#[macro_export]
macro_rules! client_option_methods {
    () => {
        /// Sets every option at once.
        pub fn with_options(mut self, options: $crate::ClientOptions) -> Self {
            self.options = options;
            self
        }

        /// Sets the timeout ([`ClientOptions::with_timeout`]): the whole budget of each
        /// call (connect, send, replies and fallbacks together). For EventPipe sessions it
        /// bounds the start, the StopTracing reply, and the stream's end after the stop.
        pub fn with_timeout(self, timeout: ::std::time::Duration) -> Self {
            let options = self.options.with_timeout(timeout);
            self.with_options(options)
        }

        /// Sets the largest environment block (bytes, as announced by the runtime) that
        /// [`process_environment`](Self::process_environment) accepts
        /// ([`ClientOptions::with_max_environment`]).
        pub fn with_max_environment(self, bytes: u64) -> Self {
            let options = self.options.with_max_environment(bytes);
            self.with_options(options)
        }

        /// The options.
        pub fn options(&self) -> $crate::ClientOptions {
            self.options
        }

        /// The timeout (see [`with_timeout`](Self::with_timeout)).
        pub fn timeout(&self) -> ::std::time::Duration {
            self.options.timeout()
        }

        /// The environment bound (see [`with_max_environment`](Self::with_max_environment)).
        pub fn max_environment(&self) -> u64 {
            self.options.max_environment()
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zero_timeout_is_one_millisecond() {
        let options = ClientOptions::default().with_timeout(Duration::ZERO);
        assert_eq!(options.timeout(), Duration::from_millis(1));
    }

    #[cfg(windows)]
    #[test]
    fn the_endpoint_of_a_pid_is_its_default_pipe() {
        assert_eq!(
            Endpoint::for_pid_in(42, None).unwrap().path(),
            Path::new(r"\\.\pipe\dotnet-diagnostic-42")
        );
    }
}
