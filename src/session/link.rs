//! [`Link`]: one connection's client machine, its request bytes and its receive buffer.

use alloc::vec::Vec;

use crate::conn::{ClientConnection, ClientEvent};
use crate::payload::Request;
use crate::recv::{Poll, RecvBuffer, RecvError};
use crate::wire::Command;

use super::{SessionError, MAX_RECV_BUFFER_LEN, RECV_BUFFER_LEN};

/// The buffer a connection starts with: the request is encoded into it, then it receives
/// the reply. Most replies are small (ProcessInfo3 with a long command line is a few
/// hundred bytes); it doubles when a message needs more (up to [`MAX_RECV_BUFFER_LEN`]) and
/// grows to [`RECV_BUFFER_LEN`] when a stream starts. A small-bin size for allocators.
pub(crate) const INITIAL_BUFFER_LEN: usize = 1024;

/// Where a connection is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Waiting for the caller to open it.
    Connect,
    /// Open; the request (in `rx`'s storage, `len` bytes) waits to be written.
    Transmit { len: usize },
    /// The request is out; reading.
    Receive,
}

/// One connection: the core's machine, the request bytes, the receive buffer. The request
/// is encoded into the same storage the reply is then received into (one allocation).
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) machine: ClientConnection,
    pub(crate) rx: RecvBuffer<Vec<u8>>,
    pub(crate) phase: Phase,
    pub(crate) command: Command,
    /// Bytes of the encoded request at the front of `rx`'s storage.
    pub(crate) request_len: usize,
}

/// A zero-filled buffer of `len` bytes, reusing `buf`. Filled rather than `vec![0; len]`:
/// that is a `calloc`, which in glibc bypasses the per-thread cache.
#[allow(clippy::slow_vector_initialization)]
fn zeroed(mut buf: Vec<u8>, len: usize) -> Vec<u8> {
    buf.clear();
    buf.reserve(len);
    buf.resize(len, 0);
    buf
}

impl Link {
    /// Encodes `request` into `buf` (refusing ill-formed requests before any connection).
    pub(crate) fn new<R: Request + ?Sized>(
        request: &R,
        buf: Vec<u8>,
    ) -> Result<Self, SessionError> {
        let size = request
            .encoded_len()
            .clamp(INITIAL_BUFFER_LEN, RECV_BUFFER_LEN);
        let mut buf = zeroed(buf, size.max(request.encoded_len()));
        let mut machine = ClientConnection::new();
        let len = machine
            .send_request(request, &mut buf)
            .map_err(|e| match e {
                crate::ClientError::Encode(e) => SessionError::InvalidRequest(e),
                other => SessionError::Protocol(other),
            })?;
        Ok(Link {
            machine,
            rx: RecvBuffer::with_limit(buf, MAX_RECV_BUFFER_LEN),
            phase: Phase::Connect,
            command: request.command(),
            request_len: len,
        })
    }

    /// The storage back, for the next request.
    pub(crate) fn into_buffer(self) -> Vec<u8> {
        self.rx.into_storage()
    }

    /// The connection is open: the request is to be written.
    pub(crate) fn connected(&mut self) -> Result<(), SessionError> {
        if self.phase != Phase::Connect {
            return Err(SessionError::Misuse("connected without a Connect step"));
        }
        self.phase = Phase::Transmit {
            len: self.request_len,
        };
        Ok(())
    }

    /// The request was written.
    pub(crate) fn transmitted(&mut self) -> Result<(), SessionError> {
        match self.phase {
            Phase::Transmit { .. } => {
                self.phase = Phase::Receive;
                Ok(())
            }
            _ => Err(SessionError::Misuse("transmitted without a Transmit step")),
        }
    }

    /// The storage, taken for the next link (this one is left empty).
    pub(crate) fn take_buffer(&mut self) -> Vec<u8> {
        core::mem::replace(&mut self.rx, RecvBuffer::new(Vec::new())).into_storage()
    }

    /// The request bytes while they wait to be written.
    pub(crate) fn transmit(&self) -> Option<&[u8]> {
        match self.phase {
            Phase::Transmit { len } => Some(&self.rx.storage()[..len]),
            _ => None,
        }
    }

    /// Hands the machine the buffered bytes and reports one step.
    pub(crate) fn poll(&mut self) -> Result<Poll<ClientEvent<'_>>, SessionError> {
        let command = self.command;
        self.rx.poll_client(&mut self.machine).map_err(|e| match e {
            RecvError::BufferTooSmall(b) => SessionError::BufferTooSmall {
                needed: b.needed,
                limit: b.limit,
            },
            RecvError::Machine(e) => SessionError::Protocol(e),
            #[allow(unreachable_patterns)]
            _ => SessionError::UnexpectedReply { command },
        })
    }

    /// The spare space to read into.
    pub(crate) fn read_buf(&mut self) -> Result<&mut [u8], SessionError> {
        if self.phase != Phase::Receive {
            return Err(SessionError::Misuse("read_buf before the request was sent"));
        }
        if self.machine.is_streaming() {
            self.rx.reserve(RECV_BUFFER_LEN);
        }
        self.rx
            .read_buf()
            .map_err(|b| SessionError::BufferTooSmall {
                needed: b.needed,
                limit: b.limit,
            })
    }
}
