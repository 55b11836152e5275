//! What dsipc-std's and dsipc-tokio's reverse ports share: the runtime an accepted
//! connection advertised ([`AdvertisedRuntime`], what both adapters' `ReverseConnection`
//! dereference to), why an accept gave no runtime ([`AcceptError`]), and the error of a
//! reverse connection asked for a second command ([`used_up`]); and what both monitor
//! engines share ([`MonitorOptions`], the [`MonitorReport`]s they hand their caller,
//! [`MonitorReporter`], [`MonitorError`]).

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dsipc::wire::{Advertise, Guid};
use dsipc::ClientError;

use crate::Error;

mod monitor;

pub use monitor::{
    out_of_descriptors, MonitorError, MonitorOptions, MonitorReport, MonitorReporter,
    ResumeOutcome, Shedding, DEFAULT_MAX_CONNECTIONS, MONITOR_TICK,
};

/// A runtime that connected to a reverse port and advertised itself: the Advertise it
/// sent and the port's address. Both adapters' `ReverseConnection`s dereference to it
/// (they add the connection that runs the runtime's one command).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvertisedRuntime {
    advertise: Advertise,
    address: PathBuf,
}

impl AdvertisedRuntime {
    /// The runtime that sent `advertise` to the reverse port at `address`.
    pub fn new(advertise: Advertise, address: PathBuf) -> Self {
        AdvertisedRuntime { advertise, address }
    }

    /// The Advertise the runtime sent.
    pub fn advertise(&self) -> Advertise {
        self.advertise
    }

    /// The runtime's pid (in its own pid namespace), from the Advertise.
    pub fn pid(&self) -> u64 {
        self.advertise.process_id
    }

    /// The runtime's cookie (the one ProcessInfo reports), from the Advertise.
    pub fn cookie(&self) -> Guid {
        self.advertise.runtime_cookie
    }

    /// The reverse port's address.
    pub fn address(&self) -> &Path {
        &self.address
    }
}

/// The accessors of both adapters' `ReverseListener`s, written once over their fields
/// `address: PathBuf` and `advertise_timeout: Duration` (internal to dsipc-std and
/// dsipc-tokio).
#[doc(hidden)]
#[macro_export]
macro_rules! reverse_listener_methods {
    () => {
        /// The address runtimes connect to (on Windows the full `\\.\pipe\NAME`).
        pub fn address(&self) -> &::std::path::Path {
            &self.address
        }

        /// The time a new connection has to send its Advertise
        /// ([`DEFAULT_ADVERTISE_TIMEOUT`](dsipc::session::DEFAULT_ADVERTISE_TIMEOUT) unless
        /// set).
        pub fn advertise_timeout(&self) -> ::std::time::Duration {
            self.advertise_timeout
        }

        /// Sets the time a new connection has to send its Advertise (at least 1 ms).
        pub fn set_advertise_timeout(&mut self, timeout: ::std::time::Duration) {
            self.advertise_timeout = timeout.max(::std::time::Duration::from_millis(1));
        }
    };
}

/// The error for a reverse connection asked for a second command: the runtime runs one
/// command per connection, and reconnects for the next one.
pub fn used_up(address: &Path) -> Error {
    Error::Connect {
        endpoint: address.to_path_buf(),
        source: io::Error::new(
            io::ErrorKind::NotConnected,
            "this reverse connection has run its command already; the runtime reconnects \
             for the next one (accept it from the listener)",
        ),
    }
}

/// Why no runtime came out of an accept.
#[derive(Debug)]
#[non_exhaustive]
pub enum AcceptError {
    /// Accepting failed: the listener itself is in trouble (see [`is_fatal`](Self::is_fatal)).
    Accept(io::Error),
    /// A peer connected but sent no complete Advertise in time; it was disconnected.
    AdvertiseTimeout {
        /// The time it had.
        timeout: Duration,
    },
    /// A peer sent something that is not an Advertise, or closed before 34 bytes; it was
    /// disconnected.
    BadAdvertise(ClientError),
    /// Reading the Advertise failed; the peer was disconnected.
    Io(io::Error),
}

impl AcceptError {
    /// True when the listener failed (as opposed to one peer misbehaving): accepting again
    /// is unlikely to help.
    pub fn is_fatal(&self) -> bool {
        matches!(self, AcceptError::Accept(_))
    }
}

impl fmt::Display for AcceptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcceptError::Accept(e) => write!(f, "accept failed: {}", e),
            AcceptError::AdvertiseTimeout { timeout } => write!(
                f,
                "a peer connected but sent no Advertise within {:.1} s",
                timeout.as_secs_f64()
            ),
            AcceptError::BadAdvertise(e) => write!(f, "a peer connected and sent {}", e),
            AcceptError::Io(e) => write!(f, "reading a peer's Advertise failed: {}", e),
        }
    }
}

impl std::error::Error for AcceptError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AcceptError::Accept(e) | AcceptError::Io(e) => Some(e),
            AcceptError::BadAdvertise(e) => Some(e),
            AcceptError::AdvertiseTimeout { .. } => None,
        }
    }
}

impl From<AcceptError> for Error {
    /// I/O errors stay I/O errors, a bad Advertise is [`Error::Protocol`], and a missing
    /// one an I/O error of kind `TimedOut` that says so.
    fn from(e: AcceptError) -> Error {
        match e {
            AcceptError::Accept(e) | AcceptError::Io(e) => Error::Io(e),
            AcceptError::BadAdvertise(e) => Error::Protocol(e),
            e @ AcceptError::AdvertiseTimeout { .. } => {
                Error::Io(io::Error::new(io::ErrorKind::TimedOut, e.to_string()))
            }
        }
    }
}
