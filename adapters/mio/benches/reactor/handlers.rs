//! The reactor handlers the scenarios run (server, client, both in one reactor), the
//! server thread and the poll loop.

use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsipc::fixtures;
use dsipc::payload::Reply;
use dsipc::{ClientEvent, Command, Response};
use dsipc_mio::{CloseReason, ConnId, Control, Event, Handler, Reactor};

use super::thread_cpu;

/// The ProcessInfo reply the server side sends (the core's fixture, pid
/// `fixtures::PROCESS_INFO2.process_id`).
pub(super) fn info_reply() -> Response<'static> {
    fixtures::response_for(Command::ProcessInfo).unwrap()
}

/// The server side: answers ProcessInfo, streams `stream_len` bytes after CollectTracing.
pub(super) struct Server {
    pub(super) served: u64,
    /// Hold requests until this many are waiting, then answer them all (0: answer at once).
    hold: usize,
    held: Vec<ConnId>,
    stream_len: u64,
    sent: u64,
    buf: Vec<u8>,
}

impl Server {
    pub(super) fn new(stream_len: u64) -> Self {
        let mut buf = vec![0u8; 1 << 20];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        Server {
            served: 0,
            hold: 0,
            held: Vec::new(),
            stream_len,
            sent: 0,
            buf,
        }
    }

    fn pump(&mut self, ctl: &mut Control, conn: ConnId) {
        while self.sent < self.stream_len {
            let n = ((self.stream_len - self.sent) as usize).min(self.buf.len());
            let w = match ctl.write_continuation(conn, &self.buf[..n]) {
                Ok(w) => w,
                Err(_) => return,
            };
            self.sent += w as u64;
            if w < n {
                return;
            }
        }
        let _ = ctl.finish_stream(conn);
    }
}

impl Handler for Server {
    fn on_event(&mut self, ctl: &mut Control, event: Event<'_>) {
        match event {
            Event::Request { conn, request, .. } => {
                self.served += 1;
                if dsipc::Request::command(&request).is_collect_tracing() {
                    ctl.respond(conn, &Response::Ok(Reply::SessionId(1)))
                        .unwrap();
                    self.pump(ctl, conn);
                } else if self.hold > 0 {
                    self.held.push(conn);
                    if self.held.len() >= self.hold {
                        let reply = info_reply();
                        for c in self.held.drain(..) {
                            ctl.respond(c, &reply).unwrap();
                        }
                    }
                } else {
                    ctl.respond(conn, &info_reply()).unwrap();
                }
            }
            Event::Writable { conn } => self.pump(ctl, conn),
            _ => {}
        }
    }
}

/// The client side: counts completed exchanges and stream bytes.
#[derive(Default)]
pub(super) struct Client {
    pub(super) done: u64,
    pub(super) failed: u64,
    pub(super) pids: u64,
    pub(super) bytes: u64,
    pub(super) latencies: Vec<Duration>,
    pub(super) started: std::collections::HashMap<ConnId, Instant>,
    pub(super) client_conns: HashSet<ConnId>,
}

impl Handler for Client {
    fn on_event(&mut self, _ctl: &mut Control, event: Event<'_>) {
        match event {
            Event::Client {
                event: ClientEvent::Reply(Reply::ProcessInfo(i)),
                ..
            } => self.pids += i.process_id,
            Event::Client {
                event: ClientEvent::StreamData(d),
                ..
            } => self.bytes += d.len() as u64,
            Event::Closed { conn, reason } => {
                if !self.client_conns.remove(&conn) {
                    return;
                }
                match reason {
                    CloseReason::Done => self.done += 1,
                    other => {
                        eprintln!("{}: {}", conn, other);
                        self.failed += 1
                    }
                }
                if let Some(t) = self.started.remove(&conn) {
                    self.latencies.push(t.elapsed());
                }
            }
            _ => {}
        }
    }
}

/// Both sides in one reactor.
pub(super) struct Both {
    pub(super) server: Server,
    pub(super) client: Client,
}

impl Handler for Both {
    fn on_event(&mut self, ctl: &mut Control, event: Event<'_>) {
        match &event {
            Event::Request { .. } | Event::Writable { .. } => self.server.on_event(ctl, event),
            _ => self.client.on_event(ctl, event),
        }
    }
}

/// A server reactor on its own thread until dropped.
pub(super) struct ServerThread {
    stop: Arc<AtomicBool>,
    waker: Arc<mio::Waker>,
    pub(super) served: Arc<AtomicU64>,
    pub(super) peak_open: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<f64>>,
}

impl ServerThread {
    pub(super) fn start(path: &Path, stream_len: u64, hold: usize) -> ServerThread {
        let mut reactor = Reactor::new().unwrap();
        reactor.control().listen(path).unwrap();
        let waker = reactor.waker().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicU64::new(0));
        let peak_open = Arc::new(AtomicU64::new(0));
        let (s, n, p) = (stop.clone(), served.clone(), peak_open.clone());
        let thread = std::thread::spawn(move || {
            let mut h = Server::new(stream_len);
            h.hold = hold;
            let cpu0 = thread_cpu();
            while !s.load(Ordering::Relaxed) {
                reactor
                    .poll(Some(Duration::from_millis(200)), &mut h)
                    .unwrap();
                n.store(h.served, Ordering::Relaxed);
                p.fetch_max(
                    reactor.control().connection_count() as u64,
                    Ordering::Relaxed,
                );
            }
            (thread_cpu() - cpu0).as_secs_f64()
        });
        ServerThread {
            stop,
            waker,
            served,
            peak_open,
            thread: Some(thread),
        }
    }

    pub(super) fn finish(mut self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        self.waker.wake().unwrap();
        self.thread.take().unwrap().join().unwrap()
    }
}

pub(super) fn drive<H: Handler>(
    reactor: &mut Reactor,
    h: &mut H,
    mut done: impl FnMut(&H) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while !done(h) {
        assert!(Instant::now() < deadline, "benchmark stalled");
        reactor.poll(Some(Duration::from_millis(200)), h).unwrap();
    }
}
