//! [`Control`]: bookkeeping of connections and listeners, opening connections, the
//! client side, and deadlines. The server side is in `respond.rs`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt;
use std::io;
use std::os::unix::io::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use mio::net::UnixStream;
use mio::{Interest, Registry, Token};

use dsipc::conn::ServerConnection;
use dsipc::payload::Request;
use dsipc::wire::Advertise;
use dsipc::{ClientConnection, Command};

use crate::conn::{Conn, Listener, ListenerSlot, Machine, Queued, Slot};
use crate::error::io_copy;
use crate::ids::{ConnId, ListenerId, ListenerKind, Stats};
use crate::listen::bind_guarded;
use crate::reactor::LISTENER_BASE;
use crate::session::Sessions;
use crate::{CloseReason, Error, ListenError};
#[cfg(doc)]
use crate::{Event, Reactor};

/// Every operation on connections and listeners: open, answer, write, close. The handler
/// gets it with each event; outside of [`Reactor::poll`] use [`Reactor::control`].
///
/// Operations never block. Output that the socket does not take at once is kept and
/// written when it becomes writable (except continuation data, see
/// [`write_continuation`](Self::write_continuation)).
pub struct Control {
    pub(crate) registry: Registry,
    pub(crate) slots: Vec<Slot>,
    pub(crate) free: Vec<u32>,
    pub(crate) listeners: Vec<ListenerSlot>,
    pub(crate) deadlines: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    pub(crate) queued: VecDeque<Queued>,
    /// Connections with input left unread (read budget spent).
    pub(crate) again: Vec<ConnId>,
    pub(crate) open: usize,
    pub(crate) stats: Stats,
    /// The session layer's calls and sessions (`session.rs`, driven by `drive.rs`).
    pub(crate) sessions: Sessions,
}

impl fmt::Debug for Control {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Control")
            .field("connections", &self.open)
            .field("listeners", &self.listener_count())
            .finish()
    }
}

impl Control {
    pub(crate) fn new(registry: Registry) -> Control {
        Control {
            registry,
            slots: Vec::new(),
            free: Vec::new(),
            listeners: Vec::new(),
            deadlines: BinaryHeap::new(),
            queued: VecDeque::new(),
            again: Vec::new(),
            open: 0,
            stats: Stats::default(),
            sessions: Sessions::new(),
        }
    }

    // ---- bookkeeping -------------------------------------------------------------------

    pub(crate) fn id_of(&self, index: u32) -> ConnId {
        ConnId {
            index,
            generation: self.slots[index as usize].generation,
        }
    }

    pub(crate) fn get(&self, id: ConnId) -> Result<&Conn, Error> {
        match self.slots.get(id.index as usize) {
            Some(Slot {
                generation,
                conn: Some(c),
            }) if *generation == id.generation => Ok(c),
            _ => Err(Error::UnknownConnection(id)),
        }
    }

    pub(crate) fn get_mut(&mut self, id: ConnId) -> Result<&mut Conn, Error> {
        match self.slots.get_mut(id.index as usize) {
            Some(Slot {
                generation,
                conn: Some(c),
            }) if *generation == id.generation => Ok(c),
            _ => Err(Error::UnknownConnection(id)),
        }
    }

    pub(crate) fn by_index(&mut self, index: usize) -> Option<&mut Conn> {
        self.slots.get_mut(index).and_then(|s| s.conn.as_mut())
    }

    pub(crate) fn insert(&mut self, conn: Conn) -> ConnId {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    generation: 0,
                    conn: None,
                });
                (self.slots.len() - 1) as u32
            }
        };
        self.slots[index as usize].conn = Some(conn);
        self.open += 1;
        self.id_of(index)
    }

    /// Removes `id` from the table and the registry (the socket closes with it).
    fn take(&mut self, id: ConnId) -> Option<Conn> {
        let slot = match self.slots.get_mut(id.index as usize) {
            Some(s) if s.generation == id.generation && s.conn.is_some() => s,
            _ => return None,
        };
        let mut conn = slot.conn.take()?;
        if conn.registered.is_some() {
            self.stats.deregisters += 1;
            let _ = self.registry.deregister(&mut conn.stream);
        }
        self.stats.closed += 1;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(id.index);
        self.open -= 1;
        Some(conn)
    }

    /// Closes `id` now and queues its [`Event::Closed`] (or, for a driven connection, the
    /// news for its owner).
    pub(crate) fn finish(&mut self, id: ConnId, reason: CloseReason) {
        if let Some(conn) = self.take(id) {
            self.queued.push_back(match conn.machine {
                // Its owner decides what the loss means; the user never saw this id.
                Machine::Driven(owner) => Queued::Lost(owner, id, reason),
                _ => Queued::Closed(id, reason),
            });
        }
    }

    /// Closes a driven connection at its owner's request: no event.
    pub(crate) fn release(&mut self, id: ConnId) {
        self.take(id);
    }

    /// Closes a connection whose write failed.
    pub(crate) fn write_failed(&mut self, id: ConnId, e: &io::Error) {
        if let Ok(c) = self.get_mut(id) {
            let peer_gone = matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            );
            if peer_gone && matches!(c.machine, Machine::Driven(_)) {
                // A runtime that answered (UNKNOWN_COMMAND, say) and closed before taking
                // all of a request: its answer and EOF are for the read path, and the
                // session layer judges them.
                c.tx.clear();
                c.tx_at = 0;
                return;
            }
        }
        let reason = match e.kind() {
            io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset => CloseReason::PeerClosed,
            _ => CloseReason::Failed(Error::Io {
                op: "write",
                source: io_copy(e),
            }),
        };
        self.finish(id, reason);
    }

    /// Flushes, closes when finished, and registers the interest the connection needs now
    /// (re-registering only when it changed).
    pub(crate) fn sync(&mut self, id: ConnId) {
        let conn = match self.slots.get_mut(id.index as usize) {
            Some(Slot {
                generation,
                conn: Some(c),
            }) if *generation == id.generation => c,
            _ => return,
        };
        if let Err(e) = conn.flush(&mut self.stats.writes) {
            return self.write_failed(id, &e);
        }
        if conn.finished() {
            return self.finish(id, CloseReason::Done);
        }
        let want = conn.wanted_interest();
        if want == conn.registered {
            return;
        }
        let token = Token(id.index as usize);
        let result = match (conn.registered, want) {
            (None, Some(i)) => {
                self.stats.registers += 1;
                self.registry.register(&mut conn.stream, token, i)
            }
            (Some(_), Some(i)) => {
                self.stats.reregisters += 1;
                self.registry.reregister(&mut conn.stream, token, i)
            }
            (Some(_), None) => {
                self.stats.deregisters += 1;
                self.registry.deregister(&mut conn.stream)
            }
            (None, None) => Ok(()),
        };
        match result {
            Ok(()) => conn.registered = want,
            Err(source) => self.finish(
                id,
                CloseReason::Failed(Error::Io {
                    op: "register",
                    source,
                }),
            ),
        }
    }

    // ---- listeners ---------------------------------------------------------------------

    pub(crate) fn add_listener(
        &mut self,
        path: &Path,
        kind: ListenerKind,
    ) -> Result<ListenerId, ListenError> {
        let (mut socket, file) = bind_guarded(path)?;
        let index = match self.listeners.iter().position(|l| l.listener.is_none()) {
            Some(i) => i,
            None => {
                self.listeners.push(ListenerSlot {
                    generation: 0,
                    listener: None,
                });
                self.listeners.len() - 1
            }
        };
        if let Err(source) = self.registry.register(
            &mut socket,
            Token(LISTENER_BASE + index),
            Interest::READABLE,
        ) {
            drop(file);
            return Err(ListenError::Io {
                op: "register",
                path: path.to_path_buf(),
                source,
            });
        }
        let slot = &mut self.listeners[index];
        slot.listener = Some(Listener {
            socket,
            kind,
            file,
            retry_at: None,
        });
        Ok(ListenerId {
            index: index as u32,
            generation: slot.generation,
        })
    }

    /// Listens at `path` as a diagnostic server (the runtime's side; for example
    /// `dotnet-diagnostic-{pid}-{key}-socket` in a fake runtime or a router). Each accepted
    /// connection carries a [`ServerConnection`]: [`Event::Accepted`], then
    /// [`Event::Request`] (answer with [`respond`](Self::respond)) or [`Event::Rejected`].
    ///
    /// Binds with mode 0600; a stale socket at `path` is replaced, anything else is refused
    /// (see [`bind_private`](crate::bind_private)).
    pub fn listen(&mut self, path: impl AsRef<Path>) -> Result<ListenerId, ListenError> {
        self.add_listener(path.as_ref(), ListenerKind::Server)
    }

    /// Listens at `path` as a reverse diagnostic port (`DOTNET_DiagnosticPorts=path,connect`):
    /// runtimes connect and advertise ([`Event::Advertise`]); send each connection one
    /// command with [`send_request`](Self::send_request). Runtimes reconnect after every
    /// command, so a monitor sees a new connection and Advertise per command.
    ///
    /// Binds with mode 0600; a stale socket at `path` is replaced, anything else is refused
    /// (see [`bind_private`](crate::bind_private)).
    pub fn listen_reverse(&mut self, path: impl AsRef<Path>) -> Result<ListenerId, ListenError> {
        self.add_listener(path.as_ref(), ListenerKind::Reverse)
    }

    /// The path a listener is bound to.
    pub fn listener_path(&self, id: ListenerId) -> Option<&Path> {
        match self.listeners.get(id.index as usize) {
            Some(ListenerSlot {
                generation,
                listener: Some(l),
            }) if *generation == id.generation => Some(l.file.path()),
            _ => None,
        }
    }

    /// Stops listening and removes the socket file (if it is still the one bound).
    /// Connections it accepted stay open. False if the id is unknown.
    pub fn close_listener(&mut self, id: ListenerId) -> bool {
        let slot = match self.listeners.get_mut(id.index as usize) {
            Some(s) if s.generation == id.generation && s.listener.is_some() => s,
            _ => return false,
        };
        if let Some(mut l) = slot.listener.take() {
            let _ = self.registry.deregister(&mut l.socket);
            // Dropping `l` closes the socket and removes its file (if still ours).
        }
        slot.generation = slot.generation.wrapping_add(1);
        true
    }

    /// Number of open listeners.
    pub fn listener_count(&self) -> usize {
        self.listeners
            .iter()
            .filter(|l| l.listener.is_some())
            .count()
    }

    // ---- opening connections -----------------------------------------------------------

    /// Connects to a diagnostic server at `path` and sends `request` (encoded and checked
    /// by the core, written in one write). Its reply and continuation arrive as
    /// [`Event::Client`], then [`Event::Closed`].
    ///
    /// Errors: [`Error::Client`] if the core refuses the request, [`Error::Io`] if the
    /// connect fails (`WouldBlock` when the listener's backlog is full: try again later),
    /// [`Error::FdPassingUnsupported`] for user_events sessions (use
    /// [`connect_user_events`](Self::connect_user_events)).
    pub fn connect<R: Request + ?Sized>(
        &mut self,
        path: impl AsRef<Path>,
        request: &R,
    ) -> Result<ConnId, Error> {
        let mut machine = ClientConnection::new();
        let tx = encode_request(&mut machine, request)?;
        self.connect_with(path.as_ref(), Machine::Client(machine), tx, None)
    }

    /// Connects to `path` and registers a connection driven by `machine`, whose first
    /// bytes to send are `tx`.
    pub(crate) fn connect_with(
        &mut self,
        path: &Path,
        machine: Machine,
        tx: Vec<u8>,
        fd_out: Option<OwnedFd>,
    ) -> Result<ConnId, Error> {
        let stream = UnixStream::connect(path).map_err(|source| Error::Io {
            op: "connect",
            source,
        })?;
        let mut conn = Conn::new(stream, machine, None);
        conn.tx = tx;
        // Written after `tx` (see `Conn::flush`).
        conn.fd_out = fd_out;
        let id = self.insert(conn);
        self.sync(id);
        Ok(id)
    }

    /// Connects to a monitor's reverse port at `path` as a runtime would: the connection
    /// carries a [`ServerConnection::advertising`] machine that sends `advertise` first,
    /// then serves one command ([`Event::Request`]). Reconnecting for the next command is
    /// up to you (on [`Event::Closed`]).
    pub fn connect_advertising(
        &mut self,
        path: impl AsRef<Path>,
        advertise: Advertise,
    ) -> Result<ConnId, Error> {
        let mut machine = ServerConnection::advertising(advertise);
        let mut tx = vec![0u8; dsipc::wire::ADVERTISE_LEN];
        let n = machine.poll_transmit(&mut tx)?;
        tx.truncate(n);
        self.connect_with(path.as_ref(), Machine::Server(machine), tx, None)
    }

    // ---- client side -------------------------------------------------------------------

    /// Sends the one command of a reverse-port connection, after its [`Event::Advertise`].
    pub fn send_request<R: Request + ?Sized>(
        &mut self,
        conn: ConnId,
        request: &R,
    ) -> Result<(), Error> {
        self.queue_request(conn, |m| Ok((encode_request(m, request)?, None)))
    }

    /// Queues the request `encode` writes with a reverse connection's client machine (and
    /// the descriptor that follows it, if any), then writes what the socket takes.
    pub(crate) fn queue_request(
        &mut self,
        conn: ConnId,
        encode: impl FnOnce(&mut ClientConnection) -> Result<(Vec<u8>, Option<OwnedFd>), Error>,
    ) -> Result<(), Error> {
        let c = self.get_mut(conn)?;
        let machine = match &mut c.machine {
            Machine::Client(m) => m,
            Machine::Server(_) | Machine::Driven(_) => return Err(Error::NotAClient(conn)),
        };
        let (tx, fd_out) = encode(machine)?;
        if c.tx_empty() {
            c.tx = tx;
            c.tx_at = 0;
        } else {
            c.tx.extend_from_slice(&tx);
        }
        if fd_out.is_some() {
            c.fd_out = fd_out;
        }
        self.sync(conn);
        Ok(())
    }

    /// What the runtime on a reverse connection advertised.
    pub fn advertise(&self, conn: ConnId) -> Option<Advertise> {
        self.get(conn).ok().and_then(|c| c.advertise)
    }

    /// The command a server connection is serving (after [`Event::Request`], until it is
    /// answered), or the command a client connection sent.
    pub fn command(&self, conn: ConnId) -> Option<Command> {
        match &self.get(conn).ok()?.machine {
            Machine::Client(m) => m.command(),
            Machine::Server(m) => m.command(),
            Machine::Driven(_) => None,
        }
    }

    // ---- any connection ----------------------------------------------------------------

    /// Closes a connection; [`Event::Closed`] follows with [`CloseReason::Closed`]. False if
    /// it was already closed.
    pub fn close(&mut self, conn: ConnId) -> bool {
        if self.get(conn).is_err() {
            return false;
        }
        self.finish(conn, CloseReason::Closed);
        true
    }

    /// Closes the connection with [`CloseReason::TimedOut`] if it is still open after
    /// `timeout`; `None` removes the deadline.
    pub fn set_timeout(&mut self, conn: ConnId, timeout: Option<Duration>) -> Result<(), Error> {
        let c = self.get_mut(conn)?;
        c.deadline = timeout.map(|t| Instant::now() + t);
        if let Some(d) = c.deadline {
            self.deadlines
                .push(Reverse((d, conn.index, conn.generation)));
        }
        Ok(())
    }

    /// True while the connection is open.
    pub fn is_open(&self, conn: ConnId) -> bool {
        self.get(conn).is_ok()
    }

    /// The listener that accepted the connection, if any.
    pub fn listener_of(&self, conn: ConnId) -> Option<ListenerId> {
        self.get(conn).ok().and_then(|c| c.listener)
    }

    /// Number of open connections.
    pub fn connection_count(&self) -> usize {
        self.open
    }

    /// What the reactor asked of the kernel so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    // ---- inside poll -------------------------------------------------------------------

    pub(crate) fn next_deadline(&mut self) -> Option<Instant> {
        let mut next = None;
        while let Some(Reverse((d, index, generation))) = self.deadlines.peek().copied() {
            let live = match self.slots.get(index as usize) {
                Some(Slot {
                    generation: g,
                    conn: Some(c),
                }) => *g == generation && c.deadline == Some(d),
                _ => false,
            };
            if live {
                next = Some(d);
                break;
            }
            self.deadlines.pop();
        }
        let retries = self
            .listeners
            .iter()
            .filter_map(|l| l.listener.as_ref()?.retry_at);
        for r in retries.chain(self.sessions.next_deadline()) {
            next = Some(next.map_or(r, |n: Instant| n.min(r)));
        }
        next
    }

    pub(crate) fn expire(&mut self, now: Instant) {
        while let Some(Reverse((d, index, generation))) = self.deadlines.peek().copied() {
            if d > now {
                break;
            }
            self.deadlines.pop();
            let id = ConnId { index, generation };
            if let Ok(c) = self.get(id) {
                if c.deadline == Some(d) {
                    self.finish(id, CloseReason::TimedOut);
                }
            }
        }
    }
}

/// Encodes `request` with the client machine, refusing user_events sessions (they go
/// through `fdpass.rs`).
pub(crate) fn encode_request<R: Request + ?Sized>(
    machine: &mut ClientConnection,
    request: &R,
) -> Result<Vec<u8>, Error> {
    if request.requires_fd_passing() {
        return Err(Error::FdPassingUnsupported);
    }
    encode(machine, request)
}

/// Encodes `request` with the client machine into a new buffer of its exact size.
pub(crate) fn encode<R: Request + ?Sized>(
    machine: &mut ClientConnection,
    request: &R,
) -> Result<Vec<u8>, Error> {
    let mut tx = vec![0u8; request.encoded_len()];
    let n = machine.send_request(request, &mut tx)?;
    tx.truncate(n);
    Ok(tx)
}
