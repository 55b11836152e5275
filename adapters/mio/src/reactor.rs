//! The event loop: [`Reactor`], its `poll` (readiness, accepting, deadlines), and the
//! hand-off of every connection that is ready to the read path (`read.rs`).

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::{Events, Poll, Token, Waker};

use dsipc::conn::ServerConnection;
use dsipc::ClientConnection;

use crate::conn::{Conn, Listener, Machine, Queued};
use crate::drive::{drive, drive_due, drive_pending, lost};
use crate::read::{empty_rx, read_conn};
use crate::{ConnId, Control, Event, Handler, ListenerId, ListenerKind};

/// The most a connection's receive buffer grows to for throughput: each connection's
/// buffer starts empty and doubles when a read fills it (a stream), up to this size. Only an
/// item that needs more in one piece (a ProcessEnvironment entry of a variable over
/// 128 KiB) grows it further, up to [`MAX_READ_BUFFER_LEN`].
pub const READ_BUFFER_LEN: usize = 256 * 1024;

/// The largest item a connection may need in one piece: the same bound as dsipc-std's
/// `MAX_RECV_BUFFER_LEN` (512 KiB: a Linux environment variable is at most 128 KiB,
/// 256 KiB in UTF-16; a test checks they agree). Past it the connection fails with
/// [`Error::BufferTooSmall`](crate::Error::BufferTooSmall).
pub const MAX_READ_BUFFER_LEN: usize = 512 * 1024;

/// Connections accepted per readiness event before the others get their turn.
pub(crate) const ACCEPT_BUDGET: usize = 256;

/// How long to wait before accepting again after accept failed (out of descriptors...).
pub(crate) const ACCEPT_RETRY: Duration = Duration::from_millis(50);

pub(crate) const LISTENER_BASE: usize = usize::MAX / 4;
pub(crate) const WAKER: Token = Token(usize::MAX - 1);

/// The event loop: one `mio::Poll`, many connections and listeners, one handler.
///
/// Each [`poll`](Self::poll) waits for readiness (or the next deadline, or the timeout),
/// reads every readable connection until `WouldBlock` (edge-triggered; a connection that
/// keeps a budget of 1 MiB busy is resumed on the next poll so others get their turn),
/// feeds the core machines, hands their events to the handler, writes pending output, and
/// registers each connection for exactly what its machine wants (re-registering only when
/// that changes). It never spins: with nothing to do it blocks in `epoll_wait`.
pub struct Reactor {
    poll: Poll,
    events: Events,
    ready: Vec<(Token, bool, bool)>,
    control: Control,
    waker: Option<Arc<Waker>>,
}

impl fmt::Debug for Reactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reactor")
            .field("control", &self.control)
            .finish()
    }
}

impl Reactor {
    /// A reactor with room for 1024 readiness events per wait.
    pub fn new() -> io::Result<Reactor> {
        Reactor::with_capacity(1024)
    }

    /// A reactor with room for `events` readiness events per wait.
    pub fn with_capacity(events: usize) -> io::Result<Reactor> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        Ok(Reactor {
            poll,
            events: Events::with_capacity(events.max(1)),
            ready: Vec::with_capacity(events.max(1)),
            control: Control::new(registry),
            waker: None,
        })
    }

    /// Operations outside of a handler call (events they cause, such as
    /// [`Event::Closed`], are delivered by the next [`poll`](Self::poll)).
    pub fn control(&mut self) -> &mut Control {
        &mut self.control
    }

    /// A waker for other threads: [`Waker::wake`] makes the current or next
    /// [`poll`](Self::poll) return with [`Event::Wake`].
    pub fn waker(&mut self) -> io::Result<Arc<Waker>> {
        if let Some(w) = &self.waker {
            return Ok(w.clone());
        }
        let w = Arc::new(Waker::new(self.poll.registry(), WAKER)?);
        self.waker = Some(w.clone());
        Ok(w)
    }

    /// Waits up to `timeout` (`None`: until something happens) and handles what is ready.
    /// Returns the number of events handed to `handler`. Returns early, without error, if
    /// the wait is interrupted by a signal.
    pub fn poll<H: Handler + ?Sized>(
        &mut self,
        timeout: Option<Duration>,
        handler: &mut H,
    ) -> io::Result<usize> {
        let mut delivered = self.deliver_queued(handler);
        delivered += drive_pending(&mut self.control, handler);
        delivered += self.deliver_queued(handler);
        let now = Instant::now();
        let busy = !self.control.again.is_empty() || !self.control.sessions.pending.is_empty();
        let mut wait = if delivered > 0 || busy {
            Some(Duration::ZERO)
        } else {
            timeout
        };
        if let Some(d) = self.control.next_deadline() {
            let until = d.saturating_duration_since(now);
            wait = Some(wait.map_or(until, |w| w.min(until)));
        }
        self.control.stats.polls += 1;
        match self.poll.poll(&mut self.events, wait) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => return Ok(delivered),
            Err(e) => return Err(e),
        }
        self.ready.clear();
        for ev in self.events.iter() {
            let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
            let writable = ev.is_writable() || ev.is_write_closed() || ev.is_error();
            self.ready.push((ev.token(), readable, writable));
        }
        self.control.stats.events += self.ready.len() as u64;
        for i in 0..self.ready.len() {
            let (token, readable, writable) = self.ready[i];
            if token == WAKER {
                handler.on_event(&mut self.control, Event::Wake);
                delivered += 1;
            } else if token.0 >= LISTENER_BASE {
                delivered += self.accept(token.0 - LISTENER_BASE, handler);
            } else {
                delivered += self.conn_ready(token.0, readable, writable, handler);
            }
            delivered += self.deliver_queued(handler);
        }
        let again = std::mem::take(&mut self.control.again);
        for id in again {
            if self.control.is_open(id) {
                delivered += self.read_conn(id, handler);
                self.control.sync(id);
                delivered += self.deliver_queued(handler);
            }
        }
        let now = Instant::now();
        self.control.expire(now);
        delivered += self.deliver_queued(handler);
        delivered += drive_due(&mut self.control, handler);
        for i in 0..self.control.listeners.len() {
            let due = matches!(
                &self.control.listeners[i].listener,
                Some(Listener { retry_at: Some(r), .. }) if *r <= now
            );
            if due {
                delivered += self.accept(i, handler);
            }
        }
        delivered += self.deliver_queued(handler);
        Ok(delivered)
    }

    fn deliver_queued<H: Handler + ?Sized>(&mut self, handler: &mut H) -> usize {
        let mut n = 0;
        while let Some(q) = self.control.queued.pop_front() {
            match q {
                Queued::Closed(conn, reason) => {
                    handler.on_event(&mut self.control, Event::Closed { conn, reason });
                    n += 1;
                }
                Queued::Lost(owner, conn, reason) => {
                    n += lost(&mut self.control, owner, conn, reason, handler);
                }
            }
        }
        n
    }

    fn accept<H: Handler + ?Sized>(&mut self, index: usize, handler: &mut H) -> usize {
        let mut delivered = 0;
        for _ in 0..ACCEPT_BUDGET {
            let slot = match self.control.listeners.get_mut(index) {
                Some(s) => s,
                None => return delivered,
            };
            let generation = slot.generation;
            let l = match slot.listener.as_mut() {
                Some(l) => l,
                None => return delivered,
            };
            l.retry_at = None;
            let listener = ListenerId {
                index: index as u32,
                generation,
            };
            let kind = l.kind;
            match l.socket.accept() {
                Ok((stream, _)) => {
                    self.control.stats.accepted += 1;
                    let machine = match kind {
                        ListenerKind::Server => Machine::Server(ServerConnection::new()),
                        ListenerKind::Reverse => {
                            Machine::Client(ClientConnection::expecting_advertise())
                        }
                    };
                    let conn = self
                        .control
                        .insert(Conn::new(stream, machine, Some(listener)));
                    self.control.sync(conn);
                    handler.on_event(
                        &mut self.control,
                        Event::Accepted {
                            listener,
                            conn,
                            kind,
                        },
                    );
                    delivered += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return delivered,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    // Typically EMFILE: the pending connection stays queued and no new
                    // edge may come, so try again a little later.
                    l.retry_at = Some(Instant::now() + ACCEPT_RETRY);
                    handler.on_event(&mut self.control, Event::AcceptError { listener, error });
                    return delivered + 1;
                }
            }
        }
        // Budget spent: come back on the next poll.
        if let Some(l) = self
            .control
            .listeners
            .get_mut(index)
            .and_then(|s| s.listener.as_mut())
        {
            l.retry_at = Some(Instant::now());
        }
        delivered
    }

    fn conn_ready<H: Handler + ?Sized>(
        &mut self,
        index: usize,
        readable: bool,
        writable: bool,
        handler: &mut H,
    ) -> usize {
        if self.control.by_index(index).is_none() {
            return 0;
        }
        let id = self.control.id_of(index as u32);
        let mut delivered = 0;
        if writable {
            let c = match self
                .control
                .slots
                .get_mut(index)
                .and_then(|s| s.conn.as_mut())
            {
                Some(c) => c,
                None => return delivered,
            };
            if let Err(e) = c.flush(&mut self.control.stats.writes) {
                self.control.write_failed(id, &e);
                return delivered;
            }
            if c.tx_empty() && c.want_writable {
                c.want_writable = false;
                handler.on_event(&mut self.control, Event::Writable { conn: id });
                delivered += 1;
            }
        }
        let driven = match self.control.get(id) {
            Ok(c) if readable => match c.machine {
                Machine::Driven(owner) => Some(owner),
                _ => None,
            },
            _ => None,
        };
        if let Some(owner) = driven {
            delivered += drive(&mut self.control, owner, handler);
        } else if readable && self.control.is_open(id) {
            delivered += self.read_conn(id, handler);
        }
        self.control.sync(id);
        delivered
    }

    /// Reads until `WouldBlock`, EOF or the budget into the connection's receive buffer;
    /// feeds the machine; dispatches.
    fn read_conn<H: Handler + ?Sized>(&mut self, id: ConnId, handler: &mut H) -> usize {
        let control = &mut self.control;
        // Out of the connection while the handler (which may use `control`) borrows it.
        let mut rx = match control.get_mut(id) {
            Ok(c) if !c.read_closed => std::mem::replace(&mut c.rx, empty_rx()),
            _ => return 0,
        };
        let delivered = read_conn(control, id, &mut rx, handler);
        if let Ok(c) = control.get_mut(id) {
            if !c.read_closed {
                c.rx = rx;
            }
        }
        delivered
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_largest_item_is_dsipc_std_s() {
        assert_eq!(super::MAX_READ_BUFFER_LEN, dsipc_std::MAX_RECV_BUFFER_LEN);
    }
}
