//! The monitor on the dsipc-mio reactor (Unix): one thread, every connection at once, each
//! with its own deadline.
//!
//! - A new connection has `--timeout` to advertise; a held runtime has no deadline; a
//!   ResumeRuntime has `--timeout` for its reply. None of them waits for another.
//! - Past `--max-connections`, the oldest idle connection is closed: a peer that never
//!   advertised first, else the oldest held runtime (which reconnects at once). Resumes in
//!   flight are never closed.
//! - When accepting fails (out of descriptors: EMFILE, ENFILE...), the reactor tries again
//!   50 ms later; meanwhile the oldest idle connection is closed to free a descriptor, and
//!   on EMFILE/ENFILE the cap is lowered to what the descriptor limit allows, so that later
//!   connections shed an old one instead of failing.

use dsipc::payload::ResumeRuntime;
use dsipc::wire::Guid;
use dsipc::{ClientEvent, Command, Reply};
use dsipc_mio::{CloseReason, ConnId, Control, Event, Reactor};

use super::{announce, Action, Options, Seen, TICK};
use crate::{term, CliError, CliResult};

use super::conns::Conns;
use dsipc::session::HoldsRuntime;

/// Where a connection is.
enum Phase {
    /// Accepted; its Advertise has not come yet (deadline: the timeout).
    Pending,
    /// A runtime kept waiting (no deadline).
    Held(Guid),
    /// ResumeRuntime sent (deadline: the timeout); its line is printed with the outcome.
    Resuming(Seen),
    /// Outcome printed; the connection closes.
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

struct Monitor<'a> {
    opts: &'a Options,
    conns: Conns<ConnId, Peer>,
    /// The cap in force: `--max-connections`, lowered when descriptors ran out.
    limit: usize,
    /// Accepting is failing (reported once per run of failures).
    accept_failing: bool,
}

impl<'a> Monitor<'a> {
    fn new(opts: &'a Options) -> Monitor<'a> {
        Monitor {
            opts,
            conns: Conns::new(opts.resume),
            limit: opts.max_connections,
            accept_failing: false,
        }
    }

    fn print(&mut self, line: &Seen) {
        self.conns.print(line, self.opts.as_json);
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
                self.accept_failing = false;
                let _ = ctl.set_timeout(conn, Some(self.opts.timeout));
                let age = self.conns.number();
                let phase = Phase::Pending;
                self.conns.open.insert(conn, Peer { age, phase });
                while self.conns.open.len() > self.limit {
                    self.conns
                        .cap_reached(self.limit, "closing the oldest idle one");
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
                let (mut line, action) =
                    super::advertised(&mut self.conns.book, advertise.process_id, cookie);
                // A newer connection replaces the runtime's previous one.
                if let Some(old) = self.conns.unhold(&cookie) {
                    self.conns.forget(old);
                    ctl.close(old);
                }
                let phase = match action {
                    Action::Resume => match ctl.send_request(conn, &ResumeRuntime) {
                        Ok(()) => {
                            let _ = ctl.set_timeout(conn, Some(self.opts.timeout));
                            Phase::Resuming(line)
                        }
                        Err(e) => {
                            super::resume_done(&mut self.conns.book, &mut line, Err(e.to_string()));
                            ctl.close(conn);
                            self.print(&line);
                            Phase::Done
                        }
                    },
                    Action::Hold => {
                        let _ = ctl.set_timeout(conn, None);
                        self.conns.hold(cookie, conn);
                        self.print(&line);
                        Phase::Held(cookie)
                    }
                };
                if let Some(p) = self.conns.open.get_mut(&conn) {
                    p.phase = phase;
                }
            }
            Event::Client { conn, event } => {
                let line = match self.conns.open.get_mut(&conn) {
                    Some(p) => match std::mem::replace(&mut p.phase, Phase::Done) {
                        Phase::Resuming(line) => line,
                        other => {
                            p.phase = other;
                            return;
                        }
                    },
                    None => return,
                };
                let outcome = match event {
                    ClientEvent::Reply(Reply::Ok(h)) if h.is_success() => Ok(()),
                    ClientEvent::Reply(Reply::Ok(hresult)) => Err(dsipc_std::Error::ErrorReply {
                        command: Command::ResumeRuntime,
                        hresult,
                        message: None,
                    }
                    .to_string()),
                    ClientEvent::Error(e) => Err(dsipc_std::Error::ErrorReply {
                        command: Command::ResumeRuntime,
                        hresult: e.hresult,
                        message: e.message.map(|m| m.chars_lossy().collect()),
                    }
                    .to_string()),
                    other => Err(format!("unexpected answer to ResumeRuntime: {:?}", other)),
                };
                self.resume_finished(line, outcome);
            }
            Event::Closed { conn, reason } => {
                let peer = match self.conns.forget(conn) {
                    Some(p) => p,
                    None => return,
                };
                match peer.phase {
                    Phase::Pending => match reason {
                        CloseReason::TimedOut => eprintln!(
                            "dsipc: a peer connected but sent no Advertise within {:.1} s",
                            self.opts.timeout.as_secs_f64()
                        ),
                        CloseReason::Failed(e) => {
                            eprintln!("dsipc: a peer connected and was dropped: {}", e)
                        }
                        _ => {}
                    },
                    Phase::Resuming(line) => {
                        let why = match reason {
                            CloseReason::TimedOut => dsipc_std::Error::Timeout {
                                command: Command::ResumeRuntime,
                                timeout: self.opts.timeout,
                            }
                            .to_string(),
                            CloseReason::Done | CloseReason::PeerClosed => {
                                "the runtime closed the connection without answering".to_string()
                            }
                            other => other.to_string(),
                        };
                        self.resume_finished(line, Err(why));
                    }
                    Phase::Held(_) | Phase::Done => {}
                }
            }
            Event::AcceptError { error, .. } => {
                let out_of_descriptors = matches!(
                    error.raw_os_error(),
                    Some(libc::EMFILE) | Some(libc::ENFILE)
                );
                if out_of_descriptors {
                    // What the descriptor limit allows: one fewer than now, so that the
                    // next accept has a descriptor and sheds an old connection.
                    self.limit = self
                        .limit
                        .min(self.conns.open.len().saturating_sub(1).max(1));
                }
                if !self.accept_failing {
                    self.accept_failing = true;
                    eprintln!(
                        "dsipc: accepting a connection failed: {}; closing the oldest idle \
                         connection, holding at most {} (retrying)",
                        error, self.limit
                    );
                }
                self.shed_oldest_idle(ctl);
            }
            _ => {}
        }
    }

    fn resume_finished(&mut self, mut line: Seen, outcome: Result<(), String>) {
        super::resume_done(&mut self.conns.book, &mut line, outcome);
        self.print(&line);
    }
}

pub(super) fn run(opts: &Options) -> CliResult {
    term::catch_interrupts();
    let mut reactor = Reactor::new()
        .map_err(|e| CliError::Failed(format!("cannot start the event loop: {}", e)))?;
    reactor
        .control()
        .listen_reverse(&opts.address)
        .map_err(|e| CliError::Failed(format!("cannot listen: {}", e)))?;
    announce(&opts.address, &opts.address, opts.resume);
    let mut monitor = Monitor::new(opts);
    let result = loop {
        // A signal interrupts the wait; TICK bounds the race with the flag.
        if term::interrupted() || monitor.conns.stdout_gone {
            break Ok(());
        }
        let mut handler = |ctl: &mut Control, event: Event<'_>| monitor.on_event(ctl, event);
        if let Err(e) = reactor.poll(Some(TICK), &mut handler) {
            break Err(CliError::Failed(format!("event loop failed: {}", e)));
        }
    };
    // Closes every connection (held runtimes reconnect elsewhere or wait) and removes the
    // socket file.
    drop(reactor);
    if term::interrupted() {
        eprintln!("dsipc: interrupted; closed {}", opts.address.display());
    }
    result
}
