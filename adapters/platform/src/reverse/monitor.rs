//! What both reverse-port monitor engines share (dsipc-std's `reverse::monitor`, a thread per
//! connection; dsipc-mio's `monitor`, one reactor thread): their [`MonitorOptions`], the
//! [`MonitorReport`]s they hand to the caller's callback, their [`MonitorError`], and the
//! [`MonitorReporter`] that reports the cap once and stops when the callback says so.
//! Which runtime to resume and which to hold is the core's (`dsipc::session::ReverseBook`).

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use dsipc::wire::Guid;

use crate::{Error, ListenError};

/// Default of [`MonitorOptions::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 1000;

/// How often at least a monitor engine looks at its stop condition.
pub const MONITOR_TICK: Duration = Duration::from_millis(100);

/// What a reverse-port monitor is asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct MonitorOptions {
    /// The time a new connection has to advertise, and a ResumeRuntime to be answered.
    pub timeout: Duration,
    /// At most this many connections are held (at least 1); past it an old one goes.
    pub max_connections: usize,
    /// Send ResumeRuntime to every runtime once (suspended runtimes then start).
    pub resume: bool,
}

impl MonitorOptions {
    /// `timeout` for each Advertise and resume, [`DEFAULT_MAX_CONNECTIONS`], no resume.
    pub fn new(timeout: Duration) -> MonitorOptions {
        MonitorOptions {
            timeout,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            resume: false,
        }
    }
}

/// What became of a runtime's resume.
#[derive(Debug)]
#[non_exhaustive]
pub enum ResumeOutcome {
    /// No ResumeRuntime was sent (not asked for, or the runtime was resumed before).
    NotAsked,
    /// The runtime answered ResumeRuntime with success.
    Resumed,
    /// ResumeRuntime failed (an error reply, no answer in time, the connection closed);
    /// the runtime's next Advertise tries again.
    Failed(Error),
}

impl From<Result<(), Error>> for ResumeOutcome {
    /// A ResumeRuntime's result: [`Resumed`](ResumeOutcome::Resumed) or
    /// [`Failed`](ResumeOutcome::Failed).
    fn from(result: Result<(), Error>) -> Self {
        match result {
            Ok(()) => ResumeOutcome::Resumed,
            Err(e) => ResumeOutcome::Failed(e),
        }
    }
}

/// What an engine does for each new connection once the cap is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Shedding {
    /// Closes the oldest idle connection: one that never advertised first, else the
    /// oldest held runtime (which reconnects).
    OldestIdle,
    /// Lets the oldest held runtime go (it reconnects); with none held, refuses the new
    /// connection.
    OldestHeld,
}

/// Something a monitor engine tells its caller.
#[derive(Debug)]
#[non_exhaustive]
pub enum MonitorReport {
    /// The reverse port listens (on Windows the full `\\.\pipe\NAME`).
    Listening {
        /// Its address.
        address: PathBuf,
    },
    /// A runtime advertised (reported with its resume's outcome when one was sent).
    Advertised {
        /// Its pid (in its own pid namespace).
        pid: u64,
        /// Its cookie (the one ProcessInfo reports).
        cookie: Guid,
        /// It advertised before (a reconnect).
        reconnect: bool,
        /// What became of its resume.
        resume: ResumeOutcome,
    },
    /// The cap was reached (reported once per monitor).
    CapReached {
        /// The cap in force.
        cap: usize,
        /// What is done for each new connection.
        shedding: Shedding,
    },
    /// A peer connected but sent no Advertise within the timeout; it was closed.
    NoAdvertise {
        /// The time it had.
        timeout: Duration,
    },
    /// A peer that had not advertised was dropped (a bad Advertise, an I/O error).
    PeerDropped {
        /// Why.
        error: Error,
    },
    /// Accepting failed (reported once per run of failures; the engine retries).
    AcceptFailed {
        /// Why (out of descriptors: EMFILE, ENFILE...).
        error: io::Error,
        /// The cap in force (an engine may lower it when descriptors run out).
        cap: usize,
    },
}

/// Why a monitor engine could not start or go on.
#[derive(Debug)]
#[non_exhaustive]
pub enum MonitorError {
    /// The reverse port could not be bound.
    Listen(ListenError),
    /// The engine's own machinery failed (its event loop, a thread).
    Io {
        /// What was being done (`"start the event loop"`, `"poll"`...).
        op: &'static str,
        /// The error.
        source: io::Error,
    },
}

impl fmt::Display for MonitorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MonitorError::Listen(e) => write!(f, "cannot listen: {}", e),
            MonitorError::Io { op, source } => write!(f, "cannot {}: {}", op, source),
        }
    }
}

impl std::error::Error for MonitorError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MonitorError::Listen(e) => Some(e),
            MonitorError::Io { source, .. } => Some(source),
        }
    }
}

impl From<ListenError> for MonitorError {
    fn from(e: ListenError) -> Self {
        MonitorError::Listen(e)
    }
}

/// The caller's callback as both engines call it: the cap reported once, accept failures
/// once per run of them, and nothing more once the callback said stop.
pub struct MonitorReporter<'a> {
    report: &'a mut dyn FnMut(MonitorReport) -> bool,
    go_on: bool,
    cap_reported: bool,
    accept_failing: bool,
}

impl fmt::Debug for MonitorReporter<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MonitorReporter")
            .field("go_on", &self.go_on)
            .field("cap_reported", &self.cap_reported)
            .field("accept_failing", &self.accept_failing)
            .finish()
    }
}

impl<'a> MonitorReporter<'a> {
    /// Reports to `report`, which returns whether the monitor goes on.
    pub fn new(report: &'a mut dyn FnMut(MonitorReport) -> bool) -> Self {
        MonitorReporter {
            report,
            go_on: true,
            cap_reported: false,
            accept_failing: false,
        }
    }

    /// False once the callback said stop.
    pub fn go_on(&self) -> bool {
        self.go_on
    }

    /// Hands `report` to the callback (nothing once it said stop).
    pub fn report(&mut self, report: MonitorReport) {
        if self.go_on && !(self.report)(report) {
            self.go_on = false;
        }
    }

    /// The cap is reached: reported the first time only.
    pub fn cap_reached(&mut self, cap: usize, shedding: Shedding) {
        if !self.cap_reported {
            self.cap_reported = true;
            self.report(MonitorReport::CapReached { cap, shedding });
        }
    }

    /// Accepting failed: reported when the previous accept succeeded (or at the first).
    pub fn accept_failed(&mut self, error: io::Error, cap: usize) {
        if !self.accept_failing {
            self.accept_failing = true;
            self.report(MonitorReport::AcceptFailed { error, cap });
        }
    }

    /// A connection was accepted: the next accept failure is reported again.
    pub fn accepted(&mut self) {
        self.accept_failing = false;
    }
}

/// True when `error` says the process or the system ran out of file descriptors
/// (EMFILE, ENFILE on Unix): a monitor then holds fewer connections.
pub fn out_of_descriptors(error: &io::Error) -> bool {
    #[cfg(unix)]
    {
        matches!(
            error.raw_os_error(),
            Some(libc::EMFILE) | Some(libc::ENFILE)
        )
    }
    #[cfg(not(unix))]
    {
        let _ = error;
        false
    }
}
