//! A reverse-port monitor on the reactor: one thread, every connection at once, each with
//! its own deadline. Runtimes started with `DOTNET_DiagnosticPorts=PATH,connect` connect,
//! advertise, and wait for one command; [`run`] reports each Advertise to the caller, resumes
//! each runtime once if asked, and otherwise holds its latest connection open and idle (a
//! closed connection makes the runtime reconnect at once). Which runtime to resume and which
//! to hold is the core's `dsipc::session::ReverseBook`.
//!
//! - A new connection has [`MonitorOptions::timeout`] to advertise; a held runtime has no
//!   deadline; a ResumeRuntime has the timeout for its reply. None of them waits for another.
//! - Past [`MonitorOptions::max_connections`], the oldest idle connection is closed: a peer
//!   that never advertised first, else the oldest held runtime (which reconnects at once).
//!   Resumes in flight are never closed.
//! - When accepting fails (out of descriptors: EMFILE, ENFILE...), the reactor tries again
//!   50 ms later; meanwhile the oldest idle connection is closed to free a descriptor, and
//!   on EMFILE/ENFILE the cap is lowered to what the descriptor limit allows, so that later
//!   connections shed an old one instead of failing.

use std::io;
use std::path::Path;

use dsipc::payload::ResumeRuntime;
use dsipc::session::{AdvertiseAction, HoldsRuntime, ReverseConnections};
use dsipc::wire::Guid;
use dsipc::{ClientEvent, Command, Reply};
use dsipc_platform::reverse::{
    out_of_descriptors, MonitorError, MonitorOptions, MonitorReport, MonitorReporter,
    ResumeOutcome, Shedding, MONITOR_TICK,
};

use crate::{CloseReason, ConnId, Control, Event, Reactor};

/// The error type the monitor's reports carry (dsipc-platform's, shared with dsipc-std).
type PlatformError = dsipc_platform::Error;

/// A runtime's Advertise whose resume is in flight: what its report will say.
struct Advertised {
    pid: u64,
    cookie: Guid,
    reconnect: bool,
}

/// Where a connection is.
enum Phase {
    /// Accepted; its Advertise has not come yet (deadline: the timeout).
    Pending,
    /// A runtime kept waiting (no deadline).
    Held(Guid),
    /// ResumeRuntime sent (deadline: the timeout); reported with the outcome.
    Resuming(Advertised),
    /// Outcome reported; the connection closes.
    Done,
}

struct Peer {
    /// Accept order.
    age: u64,
    phase: Phase,
}

impl HoldsRuntime for Peer {
    fn held_cookie(&self) -> Option<Guid> {
        match self.phase {
            Phase::Held(cookie) => Some(cookie),
            _ => None,
        }
    }
}

struct Monitor<'a, 'r> {
    opts: &'a MonitorOptions,
    conns: ReverseConnections<ConnId, Peer>,
    reporter: MonitorReporter<'r>,
    /// The cap in force: `max_connections`, lowered when descriptors ran out.
    limit: usize,
}

/// The shared error type's form of the reactor's error (typed, never text).
fn platform_error(e: crate::Error, opts: &MonitorOptions) -> PlatformError {
    match e {
        crate::Error::Io { source, .. } => PlatformError::Io(source),
        crate::Error::Client(e) => PlatformError::from_client(e),
        crate::Error::Session(e) => PlatformError::from_session(e, opts.timeout),
        crate::Error::Encode(e) => PlatformError::InvalidRequest(e),
        other => PlatformError::Io(io::Error::new(io::ErrorKind::Other, other)),
    }
}

impl<'a, 'r> Monitor<'a, 'r> {
    fn new(opts: &'a MonitorOptions, reporter: MonitorReporter<'r>) -> Monitor<'a, 'r> {
        Monitor {
            opts,
            conns: ReverseConnections::new(opts.resume),
            reporter,
            limit: opts.max_connections.max(1),
        }
    }

    /// Tells the book and the caller how runtime `seen`'s resume ended.
    fn resume_finished(&mut self, seen: Advertised, outcome: Result<(), PlatformError>) {
        self.conns.book.resume_done(seen.cookie, outcome.is_ok());
        self.reporter.report(MonitorReport::Advertised {
            pid: seen.pid,
            cookie: seen.cookie,
            reconnect: seen.reconnect,
            resume: outcome.into(),
        });
    }

    /// Closes the oldest connection that never advertised, else the oldest held one.
    /// False when every connection is busy (a resume in flight).
    fn shed_oldest_idle(&mut self, ctl: &mut Control) -> bool {
        let oldest = |want_pending: bool| {
            self.conns
                .open
                .iter()
                .filter(|(_, p)| match p.phase {
                    Phase::Pending => want_pending,
                    Phase::Held(_) => !want_pending,
                    _ => false,
                })
                .min_by_key(|(_, p)| p.age)
                .map(|(c, _)| *c)
        };
        match oldest(true).or_else(|| oldest(false)) {
            Some(victim) => {
                self.conns.forget(victim);
                ctl.close(victim);
                true
            }
            None => false,
        }
    }

    fn on_event(&mut self, ctl: &mut Control, event: Event<'_>) {
        match event {
            Event::Accepted { conn, .. } => {
                self.reporter.accepted();
                let _ = ctl.set_timeout(conn, Some(self.opts.timeout));
                let age = self.conns.number();
                let phase = Phase::Pending;
                self.conns.open.insert(conn, Peer { age, phase });
                while self.conns.open.len() > self.limit {
                    self.reporter.cap_reached(self.limit, Shedding::OldestIdle);
                    if !self.shed_oldest_idle(ctl) {
                        break;
                    }
                }
            }
            Event::Advertise {
                conn, advertise, ..
            } => {
                if !self.conns.open.contains_key(&conn) {
                    return;
                }
                let cookie = advertise.runtime_cookie;
                let (reconnect, action) = self.conns.book.advertised(cookie);
                let seen = Advertised {
                    pid: advertise.process_id,
                    cookie,
                    reconnect,
                };
                // A newer connection replaces the runtime's previous one.
                if let Some(old) = self.conns.unhold(&cookie) {
                    self.conns.forget(old);
                    ctl.close(old);
                }
                let phase = match action {
                    AdvertiseAction::Resume => match ctl.send_request(conn, &ResumeRuntime) {
                        Ok(()) => {
                            let _ = ctl.set_timeout(conn, Some(self.opts.timeout));
                            Phase::Resuming(seen)
                        }
                        Err(e) => {
                            let e = platform_error(e, self.opts);
                            ctl.close(conn);
                            self.resume_finished(seen, Err(e));
                            Phase::Done
                        }
                    },
                    AdvertiseAction::Hold => {
                        let _ = ctl.set_timeout(conn, None);
                        self.conns.hold(cookie, conn);
                        self.reporter.report(MonitorReport::Advertised {
                            pid: seen.pid,
                            cookie,
                            reconnect,
                            resume: ResumeOutcome::NotAsked,
                        });
                        Phase::Held(cookie)
                    }
                };
                if let Some(p) = self.conns.open.get_mut(&conn) {
                    p.phase = phase;
                }
            }
            Event::Client { conn, event } => {
                let seen = match self.conns.open.get_mut(&conn) {
                    Some(p) => match std::mem::replace(&mut p.phase, Phase::Done) {
                        Phase::Resuming(seen) => seen,
                        other => {
                            p.phase = other;
                            return;
                        }
                    },
                    None => return,
                };
                let command = Command::ResumeRuntime;
                let outcome = match event {
                    ClientEvent::Reply(Reply::Ok(h)) if h.is_success() => Ok(()),
                    ClientEvent::Reply(Reply::Ok(hresult)) => Err(PlatformError::ErrorReply {
                        command,
                        hresult,
                        message: None,
                    }),
                    ClientEvent::Error(e) => Err(PlatformError::ErrorReply {
                        command,
                        hresult: e.hresult,
                        message: e.message.map(|m| m.chars_lossy().collect()),
                    }),
                    _ => Err(PlatformError::UnexpectedReply { command }),
                };
                self.resume_finished(seen, outcome);
            }
            Event::Closed { conn, reason } => {
                let peer = match self.conns.forget(conn) {
                    Some(p) => p,
                    None => return,
                };
                match peer.phase {
                    Phase::Pending => match reason {
                        CloseReason::TimedOut => self.reporter.report(MonitorReport::NoAdvertise {
                            timeout: self.opts.timeout,
                        }),
                        CloseReason::Failed(e) => {
                            let error = platform_error(e, self.opts);
                            self.reporter.report(MonitorReport::PeerDropped { error })
                        }
                        _ => {}
                    },
                    Phase::Resuming(seen) => {
                        let why = match reason {
                            CloseReason::TimedOut => PlatformError::Timeout {
                                command: Command::ResumeRuntime,
                                timeout: self.opts.timeout,
                            },
                            CloseReason::Failed(e) => platform_error(e, self.opts),
                            _ => PlatformError::Io(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "the runtime closed the connection without answering",
                            )),
                        };
                        self.resume_finished(seen, Err(why));
                    }
                    Phase::Held(_) | Phase::Done => {}
                }
            }
            Event::AcceptError { error, .. } => {
                if out_of_descriptors(&error) {
                    // What the descriptor limit allows: one fewer than now, so that the
                    // next accept has a descriptor and sheds an old connection.
                    self.limit = self
                        .limit
                        .min(self.conns.open.len().saturating_sub(1).max(1));
                }
                self.reporter.accept_failed(error, self.limit);
                self.shed_oldest_idle(ctl);
            }
            _ => {}
        }
    }
}

/// Listens on the reverse port `address` and serves runtimes as `options` say, until `stop`
/// returns true (looked at every [`MONITOR_TICK`] at least; a signal also wakes the loop)
/// or `report` returns false. Every connection is closed and the socket file removed
/// before it returns.
pub fn run(
    address: &Path,
    options: &MonitorOptions,
    stop: &dyn Fn() -> bool,
    report: &mut dyn FnMut(MonitorReport) -> bool,
) -> Result<(), MonitorError> {
    let mut reactor = Reactor::new().map_err(|source| MonitorError::Io {
        op: "start the event loop",
        source,
    })?;
    reactor.control().listen_reverse(address)?;
    let mut monitor = Monitor::new(options, MonitorReporter::new(report));
    monitor.reporter.report(MonitorReport::Listening {
        address: address.to_path_buf(),
    });
    let result = loop {
        // A signal interrupts the wait; the tick bounds the race with the flag.
        if stop() || !monitor.reporter.go_on() {
            break Ok(());
        }
        let mut handler = |ctl: &mut Control, event: Event<'_>| monitor.on_event(ctl, event);
        if let Err(source) = reactor.poll(Some(MONITOR_TICK), &mut handler) {
            break Err(MonitorError::Io {
                op: "poll the event loop",
                source,
            });
        }
    };
    // Closes every connection (held runtimes reconnect elsewhere or wait) and removes the
    // socket file.
    drop(reactor);
    result
}
