//! [`AwaitAdvertise`]: a runtime's connection to a reverse port, until its Advertise arrives
//! within a deadline.

use crate::conn::{ClientConnection, ClientEvent};
use crate::error::ClientError;
use crate::recv::{Poll, RecvBuffer, RecvError};
use crate::wire::{Advertise, ADVERTISE_LEN};

use super::{Millis, SessionError};

/// The monitor's side of a fresh reverse-port connection: reads exactly the 34-byte
/// Advertise (never a byte past it: what follows is the runtime's, for the command sent
/// next), within `timeout_ms` of the connection. No allocation: the Advertise's own 34 bytes
/// of storage.
#[derive(Debug, Clone)]
pub struct AwaitAdvertise {
    machine: ClientConnection,
    rx: RecvBuffer<[u8; ADVERTISE_LEN]>,
    deadline: Millis,
    timeout_ms: u64,
}

impl AwaitAdvertise {
    /// A connection accepted at `now`, whose Advertise must arrive within `timeout_ms`
    /// (dotnet-monitor and dsipc's listeners: [`DEFAULT_ADVERTISE_TIMEOUT`](super::DEFAULT_ADVERTISE_TIMEOUT)).
    pub fn new(now: Millis, timeout_ms: u64) -> Self {
        AwaitAdvertise {
            machine: ClientConnection::expecting_advertise(),
            rx: RecvBuffer::new([0; ADVERTISE_LEN]),
            deadline: now.saturating_add(timeout_ms),
            timeout_ms,
        }
    }

    /// When the Advertise is late: wait for input at most until then.
    pub fn poll_timeout(&self) -> Millis {
        self.deadline
    }

    /// The Advertise once it is whole; `Ok(None)`: read more into
    /// [`read_buf`](Self::read_buf). A short or malformed Advertise, or EOF before it, is
    /// [`SessionError::Protocol`]; none by the deadline, [`SessionError::AdvertiseTimeout`].
    pub fn poll(&mut self, now: Millis) -> Result<Option<Advertise>, SessionError> {
        match self.rx.poll_client(&mut self.machine) {
            Ok(Poll::Event(ClientEvent::Advertise(adv))) => Ok(Some(adv)),
            Ok(Poll::NeedInput) if now >= self.deadline => Err(SessionError::AdvertiseTimeout {
                timeout_ms: self.timeout_ms,
            }),
            Ok(Poll::NeedInput) => Ok(None),
            // EOF after nothing, or a short Advertise.
            Ok(_) => Err(SessionError::Protocol(ClientError::ClosedBeforeReply)),
            Err(RecvError::Machine(e)) => Err(SessionError::Protocol(e)),
            Err(RecvError::BufferTooSmall(b)) => Err(SessionError::BufferTooSmall {
                needed: b.needed,
                limit: b.limit,
            }),
            #[allow(unreachable_patterns)]
            Err(_) => Err(SessionError::Protocol(ClientError::ClosedBeforeReply)),
        }
    }

    /// The spare space to read into: exactly what the Advertise still lacks.
    pub fn read_buf(&mut self) -> &mut [u8] {
        self.rx.read_buf().unwrap_or(&mut [])
    }

    /// `n` bytes were read into [`read_buf`](Self::read_buf).
    pub fn filled(&mut self, n: usize) {
        self.rx.filled(n)
    }

    /// The runtime closed the connection (a read returned 0).
    pub fn eof(&mut self) {
        self.rx.eof()
    }
}
