//! Shared test helpers: a handler that plays both sides (clients logging what they get,
//! servers answering like a runtime and streaming a checked pattern), and a bounded loop.
#![allow(dead_code)]

pub mod fdlimit;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use dsipc::conn::Rejection;
use dsipc::fixtures;
use dsipc::payload::Response;
use dsipc::{AnyRequest, ClientEvent, Command};
use dsipc_mio::{CloseReason, ConnId, Control, Event, Handler, Reactor};
use dsipc_testkit::{check_pattern, fill_pattern};

/// What one client connection saw.
#[derive(Debug, Default, Clone)]
pub struct Log {
    /// Debug text of every event except stream data and environment entries.
    pub events: Vec<String>,
    /// Stream bytes received.
    pub stream: u64,
    /// Offset of the first stream byte that broke the pattern.
    pub stream_bad: Option<u64>,
    /// Environment entries (lossy UTF-8).
    pub env: Vec<String>,
    /// How it closed (Debug text).
    pub closed: Option<String>,
    /// True if it closed with `CloseReason::Done`.
    pub done: bool,
}

/// The environment the test servers report (`dsipc::fixtures::ENVIRONMENT`, lossy UTF-8).
pub fn env() -> Vec<String> {
    fixtures::ENVIRONMENT
        .iter()
        .map(|v| v.chars_lossy().collect())
        .collect()
}

/// A response of the right shape for `command` (the server side of the tests): the core's
/// fixture, ProcessInfo 1 to 3 as [`Control::respond_process_info`] sends them.
pub fn response_for(command: Command) -> Response<'static> {
    fixtures::response_for(command).expect("a request with a reply shape")
}

/// Plays both sides in one reactor.
pub struct Peer {
    /// Client connections opened by the test, and what they saw.
    pub logs: HashMap<ConnId, Log>,
    /// Debug text of each request the server side received, in order.
    pub requests: Vec<String>,
    /// Rejections the server side reported.
    pub rejections: Vec<Rejection>,
    /// How server connections closed (Debug text).
    pub server_closed: Vec<String>,
    /// Server connections that closed with Done.
    pub server_done: usize,
    /// Length of the streams the server side sends after CollectTracing.
    pub stream_len: u64,
    /// Bytes per write_continuation call.
    pub chunk: usize,
    /// Bytes sent per streaming connection.
    pub sent: HashMap<ConnId, u64>,
    /// Writable events seen.
    pub writable: usize,
    /// Answer requests (false: leave them unanswered).
    pub answer: bool,
    /// Override: answer this command with this response.
    pub overrides: HashMap<Command, Response<'static>>,
    /// Stream chunk buffer.
    pub buf: Vec<u8>,
}

impl Default for Peer {
    fn default() -> Self {
        Peer {
            logs: HashMap::new(),
            requests: Vec::new(),
            rejections: Vec::new(),
            server_closed: Vec::new(),
            server_done: 0,
            stream_len: 100_000,
            chunk: 64 * 1024,
            sent: HashMap::new(),
            writable: 0,
            answer: true,
            overrides: HashMap::new(),
            buf: Vec::new(),
        }
    }
}

impl Peer {
    /// Registers a client connection opened by the test.
    pub fn track(&mut self, conn: ConnId) {
        self.logs.insert(conn, Log::default());
    }

    /// True once every tracked client connection closed.
    pub fn all_closed(&self) -> bool {
        self.logs.values().all(|l| l.closed.is_some())
    }

    fn pump(&mut self, ctl: &mut Control, conn: ConnId) {
        if self.buf.len() < self.chunk {
            self.buf.resize(self.chunk, 0);
        }
        loop {
            let sent = *self.sent.get(&conn).unwrap_or(&0);
            if sent >= self.stream_len {
                ctl.finish_stream(conn).unwrap();
                return;
            }
            let n = ((self.stream_len - sent) as usize).min(self.chunk);
            fill_pattern(sent, &mut self.buf[..n]);
            let w = match ctl.write_continuation(conn, &self.buf[..n]) {
                Ok(w) => w,
                Err(_) => return, // the client left; Closed follows
            };
            *self.sent.entry(conn).or_insert(0) += w as u64;
            if w < n {
                return; // Writable will come
            }
        }
    }
}

impl Handler for Peer {
    fn on_event(&mut self, ctl: &mut Control, event: Event<'_>) {
        match event {
            Event::Client { conn, event } => {
                let log = self.logs.entry(conn).or_default();
                match event {
                    ClientEvent::StreamData(d) => {
                        if log.stream_bad.is_none() {
                            if let Some(i) = check_pattern(log.stream, d) {
                                log.stream_bad = Some(log.stream + i as u64);
                            }
                        }
                        log.stream += d.len() as u64;
                    }
                    ClientEvent::EnvironmentVariable(t) => log.env.push(t.chars_lossy().collect()),
                    other => log.events.push(format!("{:?}", other)),
                }
            }
            Event::Request { conn, request, .. } => {
                self.requests.push(format!("{:?}", request));
                if !self.answer {
                    return;
                }
                let command = dsipc::Request::command(&request);
                if let Some(r) = self.overrides.get(&command) {
                    let r = *r;
                    ctl.respond(conn, &r).unwrap();
                    if command.is_collect_tracing() && matches!(r, Response::Ok(_)) {
                        self.pump(ctl, conn);
                    }
                    return;
                }
                match request {
                    AnyRequest::ProcessEnvironment(_) => {
                        ctl.respond_environment(conn, fixtures::ENVIRONMENT.iter().copied())
                            .unwrap();
                    }
                    AnyRequest::ProcessInfo(_)
                    | AnyRequest::ProcessInfo2(_)
                    | AnyRequest::ProcessInfo3(_) => {
                        ctl.respond_process_info(conn, &fixtures::process_info3())
                            .unwrap();
                    }
                    _ => {
                        ctl.respond(conn, &response_for(command)).unwrap();
                        if command.is_collect_tracing() {
                            self.pump(ctl, conn);
                        }
                    }
                }
            }
            Event::Writable { conn } => {
                self.writable += 1;
                self.pump(ctl, conn);
            }
            Event::Rejected { rejection, .. } => self.rejections.push(rejection),
            Event::Closed { conn, reason } => {
                let done = matches!(reason, CloseReason::Done);
                if let Some(log) = self.logs.get_mut(&conn) {
                    log.closed = Some(format!("{:?}", reason));
                    log.done = done;
                } else {
                    if done {
                        self.server_done += 1;
                    }
                    self.server_closed.push(format!("{:?}", reason));
                }
            }
            _ => {}
        }
    }
}

/// Polls until `done(handler)` or `timeout`; panics on timeout with `what`.
pub fn run_until<H: Handler>(
    reactor: &mut Reactor,
    handler: &mut H,
    timeout: Duration,
    what: &str,
    mut done: impl FnMut(&H) -> bool,
) {
    let deadline = Instant::now() + timeout;
    while !done(handler) {
        let now = Instant::now();
        assert!(now < deadline, "timed out after {:?}: {}", timeout, what);
        reactor
            .poll(
                Some((deadline - now).min(Duration::from_millis(200))),
                handler,
            )
            .unwrap();
    }
}
