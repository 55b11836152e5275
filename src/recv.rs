//! The receive buffer every adapter drives the machines with: one loop for every exchange.
//!
//! [`RecvBuffer`] keeps the bytes received and not yet consumed in storage the caller owns
//! (a `[u8; N]`, a `&mut [u8]`, or with the `alloc` feature a `Vec<u8>` that grows). It
//! hands them to a machine ([`poll_client`](RecvBuffer::poll_client),
//! [`poll_server`](RecvBuffer::poll_server), [`poll_nettrace`](RecvBuffer::poll_nettrace)),
//! drops what the machine consumed itself (a caller can no longer forget to), compacts, grows
//! the storage as a message arrives (doubling, never past the bound the caller set: a
//! `needed` beyond it is [`BufferTooSmall`] at once), and turns
//! `Partial` after EOF into the machine's `handle_eof`. Every exchange ends the same way:
//! [`Poll::End`].
//!
//! ## The drive loop
//! ```
//! use std::io::Read;
//! use dsipc::payload::{ProcessInfo, Reply};
//! use dsipc::recv::{Poll, RecvBuffer, RecvError};
//! use dsipc::{ClientConnection, ClientEvent};
//!
//! /// Reads a ProcessInfo reply from `sock` (the request was already written) and returns
//! /// the pid it reports.
//! fn pid<S: Read>(sock: &mut S, mut conn: ClientConnection) -> Result<u64, Box<dyn std::error::Error>> {
//!     // Any reply fits one message: 64 KiB. A `Vec<u8>` (feature `alloc`) could start small.
//!     let mut storage = [0u8; 64 * 1024];
//!     let mut rx = RecvBuffer::new(&mut storage[..]);
//!     let mut pid = None;
//!     loop {
//!         match rx.poll_client(&mut conn)? {
//!             // Events borrow the buffer until the next call.
//!             Poll::Event(ClientEvent::Reply(Reply::ProcessInfo(info))) => pid = Some(info.process_id),
//!             Poll::Event(ClientEvent::Error(e)) => return Err(e.hresult.to_string().into()),
//!             Poll::Event(other) => println!("event: {:?}", other),
//!             // Read once into the spare space; 0 is EOF.
//!             Poll::NeedInput => match sock.read(rx.read_buf()?)? {
//!                 0 => rx.eof(),
//!                 n => rx.filled(n),
//!             },
//!             Poll::End => return pid.ok_or_else(|| "no reply".into()),
//!         }
//!     }
//! }
//! # let mut conn = ClientConnection::new();
//! # let mut tx = [0u8; 64];
//! # let _ = conn.send_request(&ProcessInfo, &mut tx).unwrap();
//! # let info = dsipc::payload::ProcessInfoReply {
//! #     process_id: 4242,
//! #     runtime_cookie: dsipc::Guid::NIL,
//! #     command_line: "app".into(),
//! #     os: "Linux".into(),
//! #     arch: "x64".into(),
//! # };
//! # let mut reply = vec![0u8; 256];
//! # let n = dsipc::Response::Ok(Reply::ProcessInfo(info)).encode(&mut reply).unwrap();
//! # assert_eq!(pid(&mut &reply[..n], conn).unwrap(), 4242);
//! ```
//!
//! A server drives [`ServerConnection`] the same way with [`RecvBuffer::poll_server`] (its
//! [`Poll::End`] means the client will send nothing more; the answer may still be due), and
//! a trace reader drives [`NettraceParser`] with [`RecvBuffer::poll_nettrace`]. A caller
//! that is handed bytes instead of reading them (a push API) copies them into
//! [`read_buf`](RecvBuffer::read_buf) and polls until [`Poll::NeedInput`].

use core::fmt;

use crate::conn::{
    ClientConnection, ClientEvent, ServerConnection, ServerEvent, ServerStatus, Status,
};
use crate::error::ClientError;
use crate::nettrace::{self, Item, NettraceError, NettraceParser};

/// The smallest size growable storage grows to.
const MIN_GROWTH: usize = 256;

/// Storage a [`RecvBuffer`] keeps its bytes in. Its length is the buffer's capacity.
pub trait RecvStorage {
    /// The whole storage.
    fn bytes(&self) -> &[u8];
    /// The whole storage, writable.
    fn bytes_mut(&mut self) -> &mut [u8];
    /// Makes the storage at least `len` bytes long if it can (new bytes may hold anything).
    /// Storage that cannot grow keeps its length; the buffer then reports
    /// [`BufferTooSmall`].
    fn grow_to(&mut self, len: usize) {
        let _ = len;
    }
}

impl RecvStorage for &mut [u8] {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl<const N: usize> RecvStorage for [u8; N] {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
}

#[cfg(feature = "alloc")]
impl RecvStorage for alloc::vec::Vec<u8> {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn bytes_mut(&mut self) -> &mut [u8] {
        self
    }
    fn grow_to(&mut self, len: usize) {
        if len > self.len() {
            self.resize(len, 0);
        }
    }
}

/// One message (or block, or environment entry) needs more contiguous bytes than the
/// receive buffer may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct BufferTooSmall {
    /// Contiguous bytes needed.
    pub needed: usize,
    /// The most the buffer may hold: the bound the caller set, or the storage's length when
    /// it cannot grow.
    pub limit: usize,
}

impl fmt::Display for BufferTooSmall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "receive buffer too small: {} contiguous bytes needed, at most {} allowed",
            self.needed, self.limit
        )
    }
}

/// Why a `poll_*` method of [`RecvBuffer`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RecvError<E> {
    /// The machine reported an error (a protocol violation, a truncated stream, misuse).
    Machine(E),
    /// The next message needs more bytes than the buffer may hold.
    BufferTooSmall(BufferTooSmall),
}

impl<E> From<BufferTooSmall> for RecvError<E> {
    fn from(e: BufferTooSmall) -> Self {
        RecvError::BufferTooSmall(e)
    }
}

impl<E: fmt::Display> fmt::Display for RecvError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvError::Machine(e) => e.fmt(f),
            RecvError::BufferTooSmall(e) => e.fmt(f),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for BufferTooSmall {}

#[cfg(feature = "std")]
impl<E: fmt::Debug + fmt::Display> std::error::Error for RecvError<E> {}

/// What a `poll_*` method of [`RecvBuffer`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Poll<T> {
    /// An event (its bytes are consumed already); poll again.
    Event(T),
    /// Nothing complete is buffered: read into [`RecvBuffer::read_buf`], then call
    /// [`RecvBuffer::filled`] (or [`RecvBuffer::eof`] when the read returned 0), and poll.
    NeedInput,
    /// The exchange is over: nothing more will come (or, for a server, the client sent its
    /// last byte). Polling again repeats it, unless bytes were read since (the machine then
    /// judges them: more data after a complete exchange is its error).
    End,
}

/// A receive buffer over caller-owned storage. See the [module docs](self) for the loop.
#[derive(Debug, Clone)]
pub struct RecvBuffer<S> {
    storage: S,
    cur: Cursor,
}

/// The buffer's counters, apart from the storage so that a poll can borrow the storage
/// for the event it returns and still update them.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    start: usize,
    end: usize,
    limit: usize,
    /// `needed` of the last `Partial`: the contiguous bytes the next read must make room for.
    needed: usize,
    eof: bool,
    /// EOF was handed to the machine: every later poll is `End`.
    ended: bool,
}

impl Cursor {
    /// What to do after `Partial { needed }`: end through the machine's `eof` when the peer
    /// closed, else ask for input within the bound.
    fn partial<T, E>(
        &mut self,
        needed: usize,
        eof: impl FnOnce() -> Result<Option<T>, E>,
    ) -> Result<Poll<T>, RecvError<E>> {
        // The machines' contract: `Partial` consumes nothing and asks for more than is there.
        debug_assert!(needed > self.end - self.start, "Partial with enough bytes");
        if self.eof {
            self.ended = true;
            return match eof().map_err(RecvError::Machine)? {
                Some(ev) => Ok(Poll::Event(ev)),
                None => Ok(Poll::End),
            };
        }
        let needed = needed.max(1);
        if needed > self.limit {
            return Err(RecvError::BufferTooSmall(BufferTooSmall {
                needed,
                limit: self.limit,
            }));
        }
        self.needed = needed;
        Ok(Poll::NeedInput)
    }

    /// After an event (`ev` is `Some`) or the machine's `Done` (`None`).
    #[inline(always)]
    fn step<T, E>(&mut self, consumed: usize, ev: Option<T>) -> Result<Poll<T>, RecvError<E>> {
        debug_assert!(
            consumed <= self.end - self.start,
            "consumed more than given"
        );
        debug_assert!(ev.is_some() || consumed == 0, "Done consumed bytes");
        self.start += consumed;
        // After the machine's `Done` it is asked again: bytes arriving later are its to
        // judge (an error, mostly). After EOF, `ended` answers.
        Ok(ev.map_or(Poll::End, Poll::Event))
    }
}

impl<S: RecvStorage> RecvBuffer<S> {
    /// A buffer bounded by the storage's current length.
    pub fn new(storage: S) -> Self {
        let limit = storage.bytes().len();
        Self::with_limit(storage, limit)
    }

    /// A buffer that may grow its storage up to `limit` bytes (storage that cannot grow
    /// stays at its length).
    pub fn with_limit(storage: S, limit: usize) -> Self {
        RecvBuffer {
            storage,
            cur: Cursor {
                start: 0,
                end: 0,
                limit,
                needed: 0,
                eof: false,
                ended: false,
            },
        }
    }

    /// The bytes received and not yet consumed.
    pub fn pending(&self) -> &[u8] {
        &self.storage.bytes()[self.cur.start..self.cur.end]
    }

    /// Every byte held, consumed or not, up to the end of what was received: the slice the
    /// data of the last event came from (valid until the next read), so a caller that must
    /// end its borrow of an event can find its data again by offset.
    pub fn held(&self) -> &[u8] {
        &self.storage.bytes()[..self.cur.end]
    }

    /// The whole storage: for a caller that keeps other bytes in it before anything is
    /// received (a request waiting to be written, for instance).
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The bound set at construction.
    pub fn limit(&self) -> usize {
        self.cur.limit
    }

    /// The storage's current length.
    pub fn capacity(&self) -> usize {
        self.storage.bytes().len()
    }

    /// Contiguous bytes the machine last asked for (`needed` of its last `Partial`).
    pub fn needed(&self) -> usize {
        self.cur.needed
    }

    /// True once [`eof`](Self::eof) was called.
    pub fn is_eof(&self) -> bool {
        self.cur.eof
    }

    /// The storage back (its unconsumed bytes are lost).
    pub fn into_storage(self) -> S {
        self.storage
    }

    /// Grows the storage to at least `len` bytes (at most the bound): for a caller that
    /// knows reads will be large, for example once a stream starts.
    pub fn reserve(&mut self, len: usize) {
        let len = len.min(self.cur.limit);
        if len > self.capacity() {
            self.storage.grow_to(len);
        }
    }

    /// The spare space to read into: compacts the unconsumed bytes to the front and, when
    /// no byte is free, grows the storage (doubling, within the bound). Memory follows the
    /// bytes received, not the sizes a peer announces: a message the machine needs whole
    /// grows the storage as it arrives. Call [`filled`](Self::filled) with what was read.
    ///
    /// Fails when the storage is full and cannot grow: past the bound, or storage that
    /// cannot grow (`needed` is then the machine's last `needed`, or one more byte).
    pub fn read_buf(&mut self) -> Result<&mut [u8], BufferTooSmall> {
        let cur = &mut self.cur;
        if cur.start > 0 {
            self.storage.bytes_mut().copy_within(cur.start..cur.end, 0);
            cur.end -= cur.start;
            cur.start = 0;
        }
        let cap = self.storage.bytes().len();
        if cur.end == cap {
            let needed = cur.needed.max(cap + 1);
            if cap < cur.limit {
                self.storage
                    .grow_to(cap.saturating_mul(2).max(MIN_GROWTH).min(cur.limit));
            }
            let grown = self.storage.bytes().len();
            if grown == cap {
                return Err(BufferTooSmall {
                    needed,
                    limit: cap.min(cur.limit),
                });
            }
        }
        Ok(&mut self.storage.bytes_mut()[cur.end..])
    }

    /// Records that `n` bytes were read into the slice [`read_buf`](Self::read_buf)
    /// returned (at most its length).
    pub fn filled(&mut self, n: usize) {
        self.cur.end = (self.cur.end + n).min(self.storage.bytes().len());
    }

    /// Records that the peer closed (a read returned 0): the next poll that finds no whole
    /// event ends the exchange through the machine's `handle_eof`.
    pub fn eof(&mut self) {
        self.cur.eof = true;
    }

    /// Drops every byte received and not consumed (bytes no machine will read: a runtime
    /// ignores what a client sends after its request). The bound, the storage and EOF stay.
    pub fn discard(&mut self) {
        self.cur.start = 0;
        self.cur.end = 0;
    }

    /// Copies as much of `data` as fits into the spare space (growing as
    /// [`read_buf`](Self::read_buf) does) and returns how many bytes were taken: for callers
    /// handed bytes rather than reading them.
    pub fn push(&mut self, data: &[u8]) -> Result<usize, BufferTooSmall> {
        let spare = self.read_buf()?;
        let n = spare.len().min(data.len());
        spare[..n].copy_from_slice(&data[..n]);
        self.filled(n);
        Ok(n)
    }

    /// Drives a client machine one step (its request already sent).
    pub fn poll_client(
        &mut self,
        machine: &mut ClientConnection,
    ) -> Result<Poll<ClientEvent<'_>>, RecvError<ClientError>> {
        let cur = &mut self.cur;
        if cur.ended {
            return Ok(Poll::End);
        }
        let input = &self.storage.bytes()[cur.start..cur.end];
        let handled = machine.handle_input(input).map_err(RecvError::Machine)?;
        match handled.status {
            Status::Event(ev) => cur.step(handled.consumed, Some(ev)),
            Status::Done => cur.step(handled.consumed, None),
            Status::Partial { needed } => {
                debug_assert_eq!(handled.consumed, 0, "Partial consumed bytes");
                cur.partial(needed, || machine.handle_eof())
            }
        }
    }

    /// Drives a server machine one step. [`Poll::End`] means the client will send nothing
    /// more; the request may still have to be answered.
    pub fn poll_server(
        &mut self,
        machine: &mut ServerConnection,
    ) -> Result<Poll<ServerEvent<'_>>, BufferTooSmall> {
        let cur = &mut self.cur;
        if cur.ended {
            return Ok(Poll::End);
        }
        let input = &self.storage.bytes()[cur.start..cur.end];
        let handled = machine.handle_input(input);
        let r: Result<_, RecvError<core::convert::Infallible>> = match handled.status {
            ServerStatus::Event(ev) => {
                debug_assert!(handled.consumed > 0, "server event without input");
                cur.step(handled.consumed, Some(ev))
            }
            ServerStatus::Done => cur.step(handled.consumed, None),
            ServerStatus::Partial { needed } => {
                debug_assert_eq!(handled.consumed, 0, "Partial consumed bytes");
                cur.partial(needed, || Ok(machine.handle_eof()))
            }
        };
        match r {
            Ok(p) => Ok(p),
            Err(RecvError::BufferTooSmall(e)) => Err(e),
            Err(RecvError::Machine(never)) => match never {},
        }
    }

    /// Drives a nettrace parser one step. EOF before the end-of-stream marker is the
    /// parser's [`NettraceError::Truncated`].
    #[inline]
    pub fn poll_nettrace(
        &mut self,
        parser: &mut NettraceParser,
    ) -> Result<Poll<Item<'_>>, RecvError<NettraceError>> {
        self.poll_nettrace_with(parser, |item, _| *item)
    }

    /// [`poll_nettrace`](Self::poll_nettrace) handing the item to `f` by reference, where
    /// the parser built it, and returning what `f` returns: the fast way through a trace
    /// (an item is moved nowhere, and a move of a few dozen bytes per event shows). `f`
    /// also sees the parser, for what an event does not carry (its
    /// [`activity_ids`](NettraceParser::activity_ids)).
    #[inline]
    pub fn poll_nettrace_with<'s, R>(
        &'s mut self,
        parser: &mut NettraceParser,
        f: impl FnOnce(&Item<'s>, &NettraceParser) -> R,
    ) -> Result<Poll<R>, RecvError<NettraceError>> {
        let cur = &mut self.cur;
        if cur.ended {
            return Ok(Poll::End);
        }
        let input = &self.storage.bytes()[cur.start..cur.end];
        let r = parser.handle_input(input);
        let handled = match &r {
            Ok(h) => h,
            Err(e) => return Err(RecvError::Machine(*e)),
        };
        match &handled.status {
            nettrace::Status::Event(item) => {
                debug_assert!(handled.consumed <= cur.end - cur.start);
                cur.start += handled.consumed;
                Ok(Poll::Event(f(item, parser)))
            }
            nettrace::Status::Done => cur.step(handled.consumed, None),
            nettrace::Status::Partial { needed } => {
                debug_assert_eq!(handled.consumed, 0, "Partial consumed bytes");
                cur.partial(*needed, || parser.handle_eof().map(|()| None))
            }
        }
    }
}
