//! The event loop: connections, listeners, readiness, and dispatch to the handler.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::fmt;
use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{UnixListener, UnixStream};
use mio::{Events, Interest, Poll, Registry, Token, Waker};

use dsipc::conn::{
    encode_environment_block, environment_block_len, Rejection, ServerConnection, ServerEvent,
    ServerStatus,
};
use dsipc::payload::{ProcessEnvironmentReply, Reply, Request, Response};
use dsipc::wire::{Advertise, Text};
use dsipc::{AnyRequest, ClientConnection, ClientError, ClientEvent, Command, Status};
use dsipc_std::unix::SocketFile;

use crate::error::io_copy;
use crate::listen::bind_guarded;
use crate::{CloseReason, Error, ListenError};

/// Size of the shared read buffer. Any message (at most 65,535 bytes) fits, with room for a
/// large read after it. A connection whose next item needs more (a ProcessEnvironment entry
/// of a variable over 128 KiB, up to [`MAX_READ_BUFFER_LEN`]) reads into a buffer of its own
/// until that item is complete.
pub const READ_BUFFER_LEN: usize = 256 * 1024;

/// The largest item a connection may need in one piece: dsipc-std's bound
/// ([`dsipc_std::MAX_RECV_BUFFER_LEN`], 512 KiB: a Linux environment variable is at most
/// 128 KiB, 256 KiB in UTF-16). Past it the connection fails with
/// [`ClientError::BufferTooSmall`].
pub const MAX_READ_BUFFER_LEN: usize = dsipc_std::MAX_RECV_BUFFER_LEN;

/// Bytes read from one connection per readiness event before the others get their turn
/// (the rest is read on the next [`Reactor::poll`], which then does not block).
const READ_BUDGET: usize = 1024 * 1024;

/// Connections accepted per readiness event before the others get their turn.
const ACCEPT_BUDGET: usize = 256;

/// How long to wait before accepting again after accept failed (out of descriptors...).
const ACCEPT_RETRY: Duration = Duration::from_millis(50);

/// A transmit buffer larger than this is freed once drained.
const TX_KEEP: usize = 64 * 1024;

const LISTENER_BASE: usize = usize::MAX / 4;
const WAKER: Token = Token(usize::MAX - 1);

/// A connection handle. Ids are never reused while a connection with the same index
/// could be confused with it (each slot carries a generation).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    index: u32,
    generation: u32,
}

impl fmt::Debug for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ConnId({}.{})", self.index, self.generation)
    }
}

impl fmt::Display for ConnId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}.{}", self.index, self.generation)
    }
}

/// A listener handle.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListenerId {
    index: u32,
    generation: u32,
}

impl fmt::Debug for ListenerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ListenerId({}.{})", self.index, self.generation)
    }
}

/// What kind of listener accepted a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerKind {
    /// A diagnostic server socket (the runtime's side): accepted connections carry a
    /// [`ServerConnection`] and produce [`Event::Request`].
    Server,
    /// A reverse (connect) port (the monitor's side): runtimes connect, each connection
    /// first produces [`Event::Advertise`], then carries one command of yours.
    Reverse,
}

/// Counters of what the reactor asked of the kernel, to check that it does no more than
/// needed (for example: one registration per connection, re-registration only when a
/// connection's interest changes). See [`Control::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// `epoll_wait` calls.
    pub polls: u64,
    /// Readiness events received.
    pub events: u64,
    /// Connections registered.
    pub registers: u64,
    /// Interest changes (`EPOLL_CTL_MOD`).
    pub reregisters: u64,
    /// Connections deregistered.
    pub deregisters: u64,
    /// `read` calls on connections (the last one of a burst returns `WouldBlock` or EOF).
    pub reads: u64,
    /// `write` calls on connections.
    pub writes: u64,
    /// Connections accepted.
    pub accepted: u64,
    /// Connections closed.
    pub closed: u64,
}

/// Something that happened, handed to the [`Handler`] with the [`Control`] to act on it.
/// Borrowed data points into the reactor's read buffer and is valid during the call only.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// A listener accepted a connection.
    Accepted {
        /// The listener.
        listener: ListenerId,
        /// The new connection.
        conn: ConnId,
        /// The listener's kind.
        kind: ListenerKind,
    },
    /// A runtime announced itself on a reverse port. Send it one command with
    /// [`Control::send_request`] (now or later; until then the runtime waits), or close
    /// the connection (the runtime then reconnects at once). After each command the
    /// runtime closes and reconnects with a new Advertise.
    Advertise {
        /// The reverse-port listener.
        listener: ListenerId,
        /// The runtime's connection.
        conn: ConnId,
        /// Its pid and cookie.
        advertise: Advertise,
    },
    /// A client connection's reply, continuation data or end of continuation. Never
    /// [`ClientEvent::Advertise`] (that is [`Event::Advertise`]).
    Client {
        /// The connection.
        conn: ConnId,
        /// What the server said.
        event: ClientEvent<'a>,
    },
    /// A server connection received a request: answer it with [`Control::respond`] (or
    /// [`Control::respond_environment`]), now or later.
    Request {
        /// The connection.
        conn: ConnId,
        /// The request, borrowing from the read buffer.
        request: AnyRequest<'a>,
        /// The header's reserved field.
        reserved: u16,
    },
    /// A server connection received a request the runtime would reject; the error reply
    /// is sent for you, then the connection closes.
    Rejected {
        /// The connection.
        conn: ConnId,
        /// Why, and the HRESULT sent.
        rejection: Rejection,
    },
    /// A server connection whose last [`Control::write_continuation`] was short can take
    /// more continuation bytes.
    Writable {
        /// The connection.
        conn: ConnId,
    },
    /// A connection is gone; its id is dead. Delivered exactly once per connection.
    Closed {
        /// The connection.
        conn: ConnId,
        /// Why.
        reason: CloseReason,
    },
    /// Accepting failed (for example: out of file descriptors). Accepting is retried
    /// 50 ms later.
    AcceptError {
        /// The listener.
        listener: ListenerId,
        /// The error.
        error: io::Error,
    },
    /// [`Reactor::waker`]'s waker was woken.
    Wake,
}

/// Receives the events of [`Reactor::poll`]. Closures
/// `|ctl: &mut Control, event: Event<'_>| { ... }` implement it (annotate the parameter
/// types so that the closure accepts every lifetime).
pub trait Handler {
    /// One event; `control` acts on any connection or listener.
    fn on_event(&mut self, control: &mut Control, event: Event<'_>);
}

impl<F> Handler for F
where
    F: FnMut(&mut Control, Event<'_>),
{
    fn on_event(&mut self, control: &mut Control, event: Event<'_>) {
        self(control, event)
    }
}

enum Machine {
    Client(ClientConnection),
    Server(ServerConnection),
}

struct Conn {
    stream: UnixStream,
    machine: Machine,
    /// The listener that accepted it.
    listener: Option<ListenerId>,
    /// What the runtime advertised (reverse connections).
    advertise: Option<Advertise>,
    /// Input not consumed yet (a message split across reads).
    pending_rx: Vec<u8>,
    /// Contiguous bytes the machine needs before its next event (0: no partial item).
    rx_needed: usize,
    /// The connection's own read buffer while an item larger than the shared one is
    /// assembled (empty otherwise); its first `own_len` bytes are input not consumed yet.
    own_rx: Vec<u8>,
    own_len: usize,
    /// Output not written yet, from `tx_at`.
    tx: Vec<u8>,
    tx_at: usize,
    registered: Option<Interest>,
    /// Emit [`Event::Writable`] once the output drained and the socket takes more.
    want_writable: bool,
    /// EOF was seen.
    read_closed: bool,
    deadline: Option<Instant>,
}

impl Conn {
    fn new(stream: UnixStream, machine: Machine, listener: Option<ListenerId>) -> Conn {
        Conn {
            stream,
            machine,
            listener,
            advertise: None,
            pending_rx: Vec::new(),
            rx_needed: 0,
            own_rx: Vec::new(),
            own_len: 0,
            tx: Vec::new(),
            tx_at: 0,
            registered: None,
            want_writable: false,
            read_closed: false,
            deadline: None,
        }
    }

    fn tx_empty(&self) -> bool {
        self.tx_at == self.tx.len()
    }

    /// Writes pending output until done or the socket is full.
    fn flush(&mut self, writes: &mut u64) -> io::Result<()> {
        while self.tx_at < self.tx.len() {
            *writes += 1;
            match self.stream.write(&self.tx[self.tx_at..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => self.tx_at += n,
                Err(e) if would_block(&e) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        self.tx_at = 0;
        if self.tx.capacity() > TX_KEEP {
            self.tx = Vec::new();
        } else {
            self.tx.clear();
        }
        Ok(())
    }

    /// Nothing more will happen on this connection.
    fn finished(&self) -> bool {
        if !self.tx_empty() {
            return false;
        }
        match &self.machine {
            Machine::Client(m) => m.is_finished(),
            Machine::Server(m) => m.should_close(),
        }
    }

    fn wanted_interest(&self) -> Option<Interest> {
        let read = !self.read_closed
            && match &self.machine {
                Machine::Client(_) => true,
                Machine::Server(m) => m.wants_read(),
            };
        let write = !self.tx_empty() || self.want_writable;
        match (read, write) {
            (true, true) => Some(Interest::READABLE | Interest::WRITABLE),
            (true, false) => Some(Interest::READABLE),
            (false, true) => Some(Interest::WRITABLE),
            (false, false) => None,
        }
    }
}

struct Slot {
    generation: u32,
    conn: Option<Conn>,
}

struct Listener {
    socket: UnixListener,
    kind: ListenerKind,
    /// Removes the socket file on drop (if still the one bound).
    file: SocketFile,
    retry_at: Option<Instant>,
}

struct ListenerSlot {
    generation: u32,
    listener: Option<Listener>,
}

/// Owned events produced outside of a read (closes, writability).
enum Queued {
    Closed(ConnId, CloseReason),
}

/// Every operation on connections and listeners: open, answer, write, close. The handler
/// gets it with each event; outside of [`Reactor::poll`] use [`Reactor::control`].
///
/// Operations never block. Output that the socket does not take at once is kept and
/// written when it becomes writable (except continuation data, see
/// [`write_continuation`](Self::write_continuation)).
pub struct Control {
    registry: Registry,
    slots: Vec<Slot>,
    free: Vec<u32>,
    listeners: Vec<ListenerSlot>,
    deadlines: BinaryHeap<Reverse<(Instant, u32, u32)>>,
    queued: VecDeque<Queued>,
    /// Connections with input left unread (read budget spent).
    again: Vec<ConnId>,
    open: usize,
    stats: Stats,
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
    fn new(registry: Registry) -> Control {
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
        }
    }

    // ---- bookkeeping -------------------------------------------------------------------

    fn id_of(&self, index: u32) -> ConnId {
        ConnId {
            index,
            generation: self.slots[index as usize].generation,
        }
    }

    fn get(&self, id: ConnId) -> Result<&Conn, Error> {
        match self.slots.get(id.index as usize) {
            Some(Slot {
                generation,
                conn: Some(c),
            }) if *generation == id.generation => Ok(c),
            _ => Err(Error::UnknownConnection(id)),
        }
    }

    fn get_mut(&mut self, id: ConnId) -> Result<&mut Conn, Error> {
        match self.slots.get_mut(id.index as usize) {
            Some(Slot {
                generation,
                conn: Some(c),
            }) if *generation == id.generation => Ok(c),
            _ => Err(Error::UnknownConnection(id)),
        }
    }

    fn by_index(&mut self, index: usize) -> Option<&mut Conn> {
        self.slots.get_mut(index).and_then(|s| s.conn.as_mut())
    }

    fn insert(&mut self, conn: Conn) -> ConnId {
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

    /// Closes `id` now and queues its [`Event::Closed`].
    fn finish(&mut self, id: ConnId, reason: CloseReason) {
        let slot = match self.slots.get_mut(id.index as usize) {
            Some(s) if s.generation == id.generation && s.conn.is_some() => s,
            _ => return,
        };
        if let Some(mut conn) = slot.conn.take() {
            if conn.registered.is_some() {
                self.stats.deregisters += 1;
                let _ = self.registry.deregister(&mut conn.stream);
            }
        }
        self.stats.closed += 1;
        slot.generation = slot.generation.wrapping_add(1);
        self.free.push(id.index);
        self.open -= 1;
        self.queued.push_back(Queued::Closed(id, reason));
    }

    /// Closes a connection whose write failed.
    fn write_failed(&mut self, id: ConnId, e: &io::Error) {
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
    fn sync(&mut self, id: ConnId) {
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

    fn add_listener(&mut self, path: &Path, kind: ListenerKind) -> Result<ListenerId, ListenError> {
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
    /// [`Error::FdPassingUnsupported`] for user_events sessions.
    pub fn connect<R: Request + ?Sized>(
        &mut self,
        path: impl AsRef<Path>,
        request: &R,
    ) -> Result<ConnId, Error> {
        let mut machine = ClientConnection::new();
        let tx = encode_request(&mut machine, request)?;
        self.connect_with(path.as_ref(), Machine::Client(machine), tx)
    }

    /// Connects to `path` and registers a connection driven by `machine`, whose first
    /// bytes to send are `tx`.
    fn connect_with(
        &mut self,
        path: &Path,
        machine: Machine,
        tx: Vec<u8>,
    ) -> Result<ConnId, Error> {
        let stream = UnixStream::connect(path).map_err(|source| Error::Io {
            op: "connect",
            source,
        })?;
        let mut conn = Conn::new(stream, machine, None);
        conn.tx = tx;
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
        self.connect_with(path.as_ref(), Machine::Server(machine), tx)
    }

    // ---- client side -------------------------------------------------------------------

    /// Sends the one command of a reverse-port connection, after its [`Event::Advertise`].
    pub fn send_request<R: Request + ?Sized>(
        &mut self,
        conn: ConnId,
        request: &R,
    ) -> Result<(), Error> {
        let c = self.get_mut(conn)?;
        let machine = match &mut c.machine {
            Machine::Client(m) => m,
            Machine::Server(_) => return Err(Error::NotAClient(conn)),
        };
        let tx = encode_request(machine, request)?;
        if c.tx_empty() {
            c.tx = tx;
            c.tx_at = 0;
        } else {
            c.tx.extend_from_slice(&tx);
        }
        self.sync(conn);
        Ok(())
    }

    /// What the runtime on a reverse connection advertised.
    pub fn advertise(&self, conn: ConnId) -> Option<Advertise> {
        self.get(conn).ok().and_then(|c| c.advertise)
    }

    // ---- server side -------------------------------------------------------------------

    fn server(&mut self, conn: ConnId) -> Result<ServerParts<'_>, Error> {
        let c = match self.slots.get_mut(conn.index as usize) {
            Some(Slot {
                generation,
                conn: Some(c),
            }) if *generation == conn.generation => c,
            _ => return Err(Error::UnknownConnection(conn)),
        };
        let Conn {
            stream,
            machine,
            tx,
            tx_at,
            want_writable,
            ..
        } = c;
        match machine {
            Machine::Server(machine) => Ok(ServerParts {
                writes: &mut self.stats.writes,
                stream,
                machine,
                tx,
                tx_at,
                want_writable,
            }),
            Machine::Client(_) => Err(Error::NotAServer(conn)),
        }
    }

    /// Answers the request of a server connection. An OK reply to CollectTracing opens the
    /// EventPipe stream ([`write_continuation`](Self::write_continuation), then
    /// [`finish_stream`](Self::finish_stream)); any other reply closes the connection once
    /// written. For ProcessEnvironment use [`respond_environment`](Self::respond_environment).
    pub fn respond(&mut self, conn: ConnId, response: &Response<'_>) -> Result<(), Error> {
        let p = self.server(conn)?;
        let at = p.tx.len();
        p.tx.resize(at + response.encoded_len(), 0);
        match p.machine.send_response(response, &mut p.tx[at..]) {
            Ok(n) => p.tx.truncate(at + n),
            Err(e) => {
                p.tx.truncate(at);
                return Err(e.into());
            }
        }
        self.sync(conn);
        Ok(())
    }

    /// Answers ProcessEnvironment: the OK reply announcing the block's size, then the
    /// block holding `vars` (`NAME=VALUE` entries); the connection closes once written.
    pub fn respond_environment<'a, I>(&mut self, conn: ConnId, vars: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = Text<'a>> + Clone,
    {
        let len = environment_block_len(vars.clone());
        let incoming_bytes = u32::try_from(len).map_err(|_| {
            Error::Encode(dsipc::EncodeError::InvalidField {
                field: "environment",
                reason: "block larger than 4 GiB",
            })
        })?;
        let p = self.server(conn)?;
        let reply = Response::Ok(Reply::ProcessEnvironment(ProcessEnvironmentReply {
            incoming_bytes,
            future: 0,
        }));
        // Run both steps on a copy of the machine before anything is queued.
        let mut probe = p.machine.clone();
        let at = p.tx.len();
        p.tx.resize(at + reply.encoded_len() + len, 0);
        let head = match probe.send_response(&reply, &mut p.tx[at..]) {
            Ok(n) => n,
            Err(e) => {
                p.tx.truncate(at);
                return Err(e.into());
            }
        };
        let block = probe
            .continuation_sent(len)
            .map_err(Error::from)
            .and_then(|()| {
                encode_environment_block(vars, &mut p.tx[at + head..]).map_err(Error::from)
            });
        match block {
            Ok(n) => p.tx.truncate(at + head + n),
            Err(e) => {
                p.tx.truncate(at);
                return Err(e);
            }
        }
        *p.machine = probe;
        self.sync(conn);
        Ok(())
    }

    /// Writes continuation bytes (EventPipe data after an OK reply to CollectTracing, or
    /// an environment block after a hand-made ProcessEnvironment reply) straight from
    /// `data`, as many as the socket takes now; returns how many. When that is less than
    /// `data.len()`, [`Event::Writable`] comes once the socket takes more: write the rest
    /// then. Nothing is copied or buffered.
    pub fn write_continuation(&mut self, conn: ConnId, data: &[u8]) -> Result<usize, Error> {
        let p = self.server(conn)?;
        // Refuse before writing: a copy of the machine checks the length.
        p.machine.clone().continuation_sent(data.len())?;
        let mut written = 0;
        let mut failure = None;
        while *p.tx_at < p.tx.len() {
            *p.writes += 1;
            match p.stream.write(&p.tx[*p.tx_at..]) {
                Ok(0) => {
                    failure = Some(io::Error::from(io::ErrorKind::WriteZero));
                    break;
                }
                Ok(n) => *p.tx_at += n,
                Err(e) if would_block(&e) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if failure.is_none() && *p.tx_at == p.tx.len() {
            while written < data.len() {
                *p.writes += 1;
                match p.stream.write(&data[written..]) {
                    Ok(0) => {
                        failure = Some(io::Error::from(io::ErrorKind::WriteZero));
                        break;
                    }
                    Ok(n) => written += n,
                    Err(e) if would_block(&e) => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
        if let Some(e) = failure {
            self.write_failed(conn, &e);
            return Err(Error::Io {
                op: "write",
                source: e,
            });
        }
        p.machine.continuation_sent(written)?;
        *p.want_writable = written < data.len();
        self.sync(conn);
        Ok(written)
    }

    /// Ends an EventPipe stream (the session stopped); the connection closes once its
    /// output is written.
    pub fn finish_stream(&mut self, conn: ConnId) -> Result<(), Error> {
        let p = self.server(conn)?;
        p.machine.finish_stream()?;
        *p.want_writable = false;
        self.sync(conn);
        Ok(())
    }

    /// The command a server connection is serving (after [`Event::Request`], until it is
    /// answered), or the command a client connection sent.
    pub fn command(&self, conn: ConnId) -> Option<Command> {
        match &self.get(conn).ok()?.machine {
            Machine::Client(m) => m.command(),
            Machine::Server(m) => m.command(),
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

    fn next_deadline(&mut self) -> Option<Instant> {
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
        for l in self.listeners.iter().filter_map(|l| l.listener.as_ref()) {
            if let Some(r) = l.retry_at {
                next = Some(next.map_or(r, |n: Instant| n.min(r)));
            }
        }
        next
    }

    fn expire(&mut self, now: Instant) {
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

/// The parts of a server connection an operation needs at once.
struct ServerParts<'c> {
    writes: &'c mut u64,
    stream: &'c mut UnixStream,
    machine: &'c mut ServerConnection,
    tx: &'c mut Vec<u8>,
    tx_at: &'c mut usize,
    want_writable: &'c mut bool,
}

/// The socket cannot take (or give) more now. A connect still in progress (not on Linux,
/// where Unix-socket connects complete at once) reports `NotConnected` until it is done.
fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::NotConnected
    )
}

/// Encodes `request` with the client machine, refusing user_events sessions.
fn encode_request<R: Request + ?Sized>(
    machine: &mut ClientConnection,
    request: &R,
) -> Result<Vec<u8>, Error> {
    if request.requires_fd_passing() {
        return Err(Error::FdPassingUnsupported);
    }
    let mut tx = vec![0u8; request.encoded_len()];
    let n = machine.send_request(request, &mut tx)?;
    tx.truncate(n);
    Ok(tx)
}

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
    scratch: Vec<u8>,
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
            scratch: vec![0u8; READ_BUFFER_LEN],
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
        let now = Instant::now();
        let mut wait = if delivered > 0 || !self.control.again.is_empty() {
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
                    handler.on_event(&mut self.control, Event::Closed { conn, reason })
                }
            }
            n += 1;
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
        if readable && self.control.is_open(id) {
            delivered += self.read_conn(id, handler);
        }
        self.control.sync(id);
        delivered
    }

    /// Reads until `WouldBlock`, EOF or the budget; feeds the machine; dispatches. Reads
    /// go into the shared buffer, or into one of the connection's own while its next item
    /// needs more than the shared buffer holds (up to [`MAX_READ_BUFFER_LEN`]).
    fn read_conn<H: Handler + ?Sized>(&mut self, id: ConnId, handler: &mut H) -> usize {
        let Reactor {
            scratch, control, ..
        } = self;
        let mut delivered = 0;
        let (mut own, mut end) = match control.get_mut(id) {
            // A large item in progress stays in the connection's own buffer between reads
            // (no copy per readiness event, however slowly the peer sends).
            Ok(c) if !c.read_closed && !c.own_rx.is_empty() => {
                (Some(std::mem::take(&mut c.own_rx)), c.own_len)
            }
            Ok(c) if !c.read_closed => {
                let n = c.pending_rx.len();
                let mut own = own_buffer(c.rx_needed.max(n + 1));
                let buf = match own.as_mut() {
                    Some(v) => v.as_mut_slice(),
                    None => scratch.as_mut_slice(),
                };
                buf[..n].copy_from_slice(&c.pending_rx);
                c.pending_rx.clear();
                (own, n)
            }
            _ => return 0,
        };
        let mut budget = READ_BUDGET;
        loop {
            let buf = match own.as_mut() {
                Some(v) => v.as_mut_slice(),
                None => scratch.as_mut_slice(),
            };
            let step = read_step(control, id, buf, &mut end, &mut budget, handler);
            delivered += step.delivered;
            match step.next {
                Next::Stop => return delivered,
                Next::Keep => break,
                Next::Grow(needed) => {
                    // The item in buf[..end] needs a larger buffer: the connection's own.
                    let mut bigger = match own_buffer(needed) {
                        Some(v) if v.len() > buf.len() => v,
                        _ => {
                            control.finish(
                                id,
                                CloseReason::Failed(Error::Client(ClientError::BufferTooSmall {
                                    needed,
                                })),
                            );
                            return delivered;
                        }
                    };
                    bigger[..end].copy_from_slice(&buf[..end]);
                    own = Some(bigger);
                }
            }
        }
        if let Ok(c) = control.get_mut(id) {
            match own {
                // Still assembling a large item: keep its buffer.
                Some(v) if c.rx_needed > READ_BUFFER_LEN || end >= READ_BUFFER_LEN => {
                    c.own_rx = v;
                    c.own_len = end;
                }
                Some(v) => c.pending_rx.extend_from_slice(&v[..end]),
                None => c.pending_rx.extend_from_slice(&scratch[..end]),
            }
        }
        delivered
    }
}

/// What [`read_step`] leaves to do.
enum Next {
    /// The connection is closed (or its EOF handled): nothing to keep.
    Stop,
    /// `WouldBlock` or budget spent: keep `buf[..end]` for the next readiness.
    Keep,
    /// The next item needs this many bytes, more than the buffer holds.
    Grow(usize),
}

struct Step {
    delivered: usize,
    next: Next,
}

/// A buffer of the connection's own when `needed` bytes do not fit the shared one (`None`
/// when they do); at most [`MAX_READ_BUFFER_LEN`].
fn own_buffer(needed: usize) -> Option<Vec<u8>> {
    if needed <= READ_BUFFER_LEN {
        return None;
    }
    Some(vec![0u8; needed.min(MAX_READ_BUFFER_LEN)])
}

/// Reads into `buf[*end..]` and dispatches until `WouldBlock`, EOF, the budget, or an item
/// that needs more than `buf` holds. Unconsumed input stays at the front, in `buf[..*end]`.
fn read_step<H: Handler + ?Sized>(
    control: &mut Control,
    id: ConnId,
    buf: &mut [u8],
    end: &mut usize,
    budget: &mut usize,
    handler: &mut H,
) -> Step {
    let mut delivered = 0;
    let mut start = 0;
    let stop = |delivered| Step {
        delivered,
        next: Next::Stop,
    };
    loop {
        let needed = match control.get(id) {
            Ok(c) => c.rx_needed,
            Err(_) => return stop(delivered),
        };
        if needed > buf.len() || *end == buf.len() {
            // An empty read buffer would read as EOF: a larger one is needed first.
            return Step {
                delivered,
                next: Next::Grow(needed.max(*end + 1)),
            };
        }
        let c = match control.get_mut(id) {
            Ok(c) => c,
            Err(_) => return stop(delivered),
        };
        let mut eof = false;
        let mut would_block = false;
        let got = c.stream.read(&mut buf[*end..]);
        control.stats.reads += 1;
        match got {
            Ok(0) => eof = true,
            Ok(n) => {
                *end += n;
                *budget = budget.saturating_sub(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => would_block = true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let reason = match e.kind() {
                    io::ErrorKind::ConnectionReset => CloseReason::PeerClosed,
                    _ => CloseReason::Failed(Error::Io {
                        op: "read",
                        source: e,
                    }),
                };
                control.finish(id, reason);
                return stop(delivered);
            }
        }
        delivered += dispatch(control, id, &buf[..*end], &mut start, handler);
        if !control.is_open(id) {
            return stop(delivered);
        }
        // Keep what was not consumed at the front.
        buf.copy_within(start..*end, 0);
        *end -= start;
        start = 0;
        if eof {
            return stop(delivered + on_eof(control, id, handler));
        }
        if would_block {
            break;
        }
        if *budget == 0 {
            control.again.push(id);
            break;
        }
    }
    Step {
        delivered,
        next: Next::Keep,
    }
}

/// Feeds `input[*start..]` to the connection's machine and hands out every event; returns
/// how many. The connection may be closed afterwards (protocol error, or the handler).
fn dispatch<H: Handler + ?Sized>(
    control: &mut Control,
    id: ConnId,
    input: &[u8],
    start: &mut usize,
    handler: &mut H,
) -> usize {
    let mut delivered = 0;
    loop {
        let c = match control.get_mut(id) {
            Ok(c) => c,
            // Closed by the handler: drop the rest.
            Err(_) => {
                *start = input.len();
                return delivered;
            }
        };
        let rest = &input[*start..];
        match &mut c.machine {
            Machine::Client(m) => match m.handle_input(rest) {
                Ok(h) => {
                    *start += h.consumed;
                    match h.status {
                        Status::Event(ClientEvent::Advertise(advertise)) => {
                            c.rx_needed = 0;
                            c.advertise = Some(advertise);
                            match c.listener {
                                Some(listener) => handler.on_event(
                                    control,
                                    Event::Advertise {
                                        listener,
                                        conn: id,
                                        advertise,
                                    },
                                ),
                                None => handler.on_event(
                                    control,
                                    Event::Client {
                                        conn: id,
                                        event: ClientEvent::Advertise(advertise),
                                    },
                                ),
                            }
                            delivered += 1;
                        }
                        Status::Event(event) => {
                            c.rx_needed = 0;
                            handler.on_event(control, Event::Client { conn: id, event });
                            delivered += 1;
                        }
                        Status::Partial { needed } => {
                            if needed > MAX_READ_BUFFER_LEN {
                                control.finish(
                                    id,
                                    CloseReason::Failed(Error::Client(
                                        ClientError::BufferTooSmall { needed },
                                    )),
                                );
                                return delivered;
                            }
                            c.rx_needed = needed;
                            return delivered;
                        }
                        Status::Done => return delivered,
                    }
                }
                Err(e) => {
                    // A reverse connection whose runtime sends before being asked, or a
                    // reply that breaks the protocol.
                    control.finish(id, CloseReason::Failed(Error::Client(e)));
                    return delivered;
                }
            },
            Machine::Server(m) => {
                let h = m.handle_input(rest);
                *start += h.consumed;
                match h.status {
                    ServerStatus::Event(ServerEvent::Request { request, reserved }) => {
                        handler.on_event(
                            control,
                            Event::Request {
                                conn: id,
                                request,
                                reserved,
                            },
                        );
                        delivered += 1;
                    }
                    ServerStatus::Event(ServerEvent::Rejected(rejection)) => {
                        queue_rejection(c);
                        handler.on_event(
                            control,
                            Event::Rejected {
                                conn: id,
                                rejection,
                            },
                        );
                        delivered += 1;
                    }
                    // Bytes after the request: the runtime does not read them either.
                    ServerStatus::Event(_) => {}
                    ServerStatus::Partial { .. } => return delivered,
                    ServerStatus::Done => {
                        *start = input.len();
                        return delivered;
                    }
                }
            }
        }
    }
}

fn queue_rejection(c: &mut Conn) {
    if let Machine::Server(m) = &mut c.machine {
        let mut out = [0u8; 64];
        if let Ok(n) = m.poll_transmit(&mut out) {
            c.tx.extend_from_slice(&out[..n]);
        }
    }
}

/// The peer closed its side.
fn on_eof<H: Handler + ?Sized>(control: &mut Control, id: ConnId, handler: &mut H) -> usize {
    let c = match control.get_mut(id) {
        Ok(c) => c,
        Err(_) => return 0,
    };
    c.read_closed = true;
    c.pending_rx.clear();
    c.own_rx = Vec::new();
    let mut delivered = 0;
    let reason = match &mut c.machine {
        Machine::Client(m) => {
            let idle_reverse = c.advertise.is_some() && m.command().is_none();
            match m.handle_eof() {
                Ok(Some(event)) => {
                    handler.on_event(control, Event::Client { conn: id, event });
                    delivered += 1;
                    CloseReason::Done
                }
                // A runtime closing its idle reverse connection (it reconnects).
                Ok(None) if idle_reverse => CloseReason::PeerClosed,
                Ok(None) => CloseReason::Done,
                Err(e) => CloseReason::Failed(Error::Client(e)),
            }
        }
        Machine::Server(m) => {
            let finished = m.should_close();
            match m.handle_eof() {
                Some(ServerEvent::Rejected(rejection)) => {
                    // EOF inside the request: the runtime answers BAD_ENCODING, which a
                    // half-closed client can still read; `sync` closes once it is written.
                    queue_rejection(c);
                    handler.on_event(
                        control,
                        Event::Rejected {
                            conn: id,
                            rejection,
                        },
                    );
                    return delivered + 1;
                }
                Some(_) => CloseReason::PeerClosed,
                None if finished => {
                    // Reply already produced: let it drain (a half-closed client can still
                    // read it); `sync` closes once it is written.
                    return delivered;
                }
                None => CloseReason::PeerClosed,
            }
        }
    };
    control.finish(id, reason);
    delivered
}
