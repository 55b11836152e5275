//! One connection's state: its socket, core machine, buffered input and output, and
//! the listener slots.

use std::io::{self, Write};
use std::time::Instant;

use mio::net::{UnixListener, UnixStream};
use mio::Interest;

use dsipc::conn::ServerConnection;
use dsipc::recv::RecvBuffer;
use dsipc::wire::Advertise;
use dsipc::ClientConnection;
use dsipc_platform::SocketFile;

use crate::timers::Owner;
use crate::CloseReason;
use crate::{ConnId, ListenerId, ListenerKind};

/// A transmit buffer larger than this is freed once drained.
pub(crate) const TX_KEEP: usize = 64 * 1024;

pub(crate) enum Machine {
    Client(ClientConnection),
    Server(ServerConnection),
    /// A connection of a session-layer call or session (`drive.rs`): its machine and
    /// receive buffer are the owner's, this moves its bytes.
    Driven(Owner),
}

pub(crate) struct Conn {
    pub(crate) stream: UnixStream,
    pub(crate) machine: Machine,
    /// The listener that accepted it.
    pub(crate) listener: Option<ListenerId>,
    /// What the runtime advertised (reverse connections).
    pub(crate) advertise: Option<Advertise>,
    /// Input not consumed yet (`read.rs` drives the machine through it).
    pub(crate) rx: RecvBuffer<Vec<u8>>,
    /// Output not written yet, from `tx_at`.
    pub(crate) tx: Vec<u8>,
    pub(crate) tx_at: usize,
    pub(crate) registered: Option<Interest>,
    /// Emit [`Event::Writable`](crate::Event::Writable) once the output drained and the socket takes more.
    pub(crate) want_writable: bool,
    /// EOF was seen.
    pub(crate) read_closed: bool,
    pub(crate) deadline: Option<Instant>,
    /// A user_events descriptor to pass once `tx` is written (`fdpass.rs`).
    pub(crate) fd_out: Option<std::os::unix::io::OwnedFd>,
}

impl Conn {
    pub(crate) fn new(stream: UnixStream, machine: Machine, listener: Option<ListenerId>) -> Conn {
        Conn {
            stream,
            machine,
            listener,
            advertise: None,
            rx: crate::read::empty_rx(),
            tx: Vec::new(),
            tx_at: 0,
            registered: None,
            want_writable: false,
            read_closed: false,
            deadline: None,
            fd_out: None,
        }
    }

    pub(crate) fn tx_empty(&self) -> bool {
        self.tx_at == self.tx.len()
    }

    /// Writes pending output until done or the socket is full.
    pub(crate) fn flush(&mut self, writes: &mut u64) -> io::Result<()> {
        write_until_blocked(&mut self.stream, writes, &self.tx, &mut self.tx_at)?;
        if self.tx_at < self.tx.len() {
            return Ok(());
        }
        crate::fdpass::flush_fd(&self.stream, &mut self.fd_out)?;
        self.tx_at = 0;
        if self.tx.capacity() > TX_KEEP {
            self.tx = Vec::new();
        } else {
            self.tx.clear();
        }
        Ok(())
    }

    /// Nothing more will happen on this connection.
    pub(crate) fn finished(&self) -> bool {
        if !self.tx_empty() {
            return false;
        }
        match &self.machine {
            Machine::Client(m) => m.is_finished(),
            Machine::Server(m) => m.should_close(),
            // Its owner closes it.
            Machine::Driven(_) => false,
        }
    }

    pub(crate) fn wanted_interest(&self) -> Option<Interest> {
        let read = !self.read_closed
            && match &self.machine {
                Machine::Client(_) | Machine::Driven(_) => true,
                Machine::Server(m) => m.wants_read(),
            };
        let write = !self.tx_empty() || self.want_writable || self.fd_out.is_some();
        match (read, write) {
            (true, true) => Some(Interest::READABLE | Interest::WRITABLE),
            (true, false) => Some(Interest::READABLE),
            (false, true) => Some(Interest::WRITABLE),
            (false, false) => None,
        }
    }
}

pub(crate) struct Slot {
    pub(crate) generation: u32,
    pub(crate) conn: Option<Conn>,
}

pub(crate) struct Listener {
    pub(crate) socket: UnixListener,
    pub(crate) kind: ListenerKind,
    /// Removes the socket file on drop (if still the one bound).
    pub(crate) file: SocketFile,
    pub(crate) retry_at: Option<Instant>,
}

pub(crate) struct ListenerSlot {
    pub(crate) generation: u32,
    pub(crate) listener: Option<Listener>,
}

/// Owned events produced outside of a read (closes, writability).
pub(crate) enum Queued {
    Closed(ConnId, CloseReason),
    /// A driven connection closed under its owner (a write failed, a deadline set on it).
    Lost(Owner, ConnId, CloseReason),
}

/// Writes `buf[*at..]` until it is all out or the socket is full, advancing `at` and
/// counting the writes.
pub(crate) fn write_until_blocked(
    stream: &mut UnixStream,
    writes: &mut u64,
    buf: &[u8],
    at: &mut usize,
) -> io::Result<()> {
    while *at < buf.len() {
        *writes += 1;
        match stream.write(&buf[*at..]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => *at += n,
            Err(e) if would_block(&e) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The socket cannot take (or give) more now. A connect still in progress (not on Linux,
/// where Unix-socket connects complete at once) reports `NotConnected` until it is done.
pub(crate) fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::NotConnected
    )
}
