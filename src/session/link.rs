//! [`Link`]: one connection's client machine, its request bytes and its receive buffer.

use alloc::vec::Vec;

use crate::conn::{ClientConnection, ClientEvent};
use crate::payload::Request;
use crate::recv::{Poll, RecvBuffer, RecvError};
use crate::wire::{Command, Header, Writer};

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

/// A request encoded once and kept: what a call or session holds for a later attempt
/// instead of borrowing the caller's request.
#[derive(Debug, Clone)]
pub(crate) struct Encoded {
    command: Command,
    payload: Vec<u8>,
    fd_passing: bool,
}

impl Encoded {
    /// `request`, validated and encoded (an ill-formed or oversized one is refused here).
    pub(crate) fn of<R: Request + ?Sized>(request: &R) -> Result<Self, SessionError> {
        let invalid = SessionError::InvalidRequest;
        request.validate().map_err(invalid)?;
        let len = request.payload_len();
        Header::for_payload(request.command(), len).map_err(invalid)?;
        // No allocation for the empty payloads of ProcessInfo's fallbacks.
        let mut payload = alloc::vec![0; len];
        crate::payload::write_exact(len, &mut payload, |w| request.write_payload(w))
            .map_err(invalid)?;
        Ok(Encoded {
            command: request.command(),
            payload,
            fd_passing: request.requires_fd_passing(),
        })
    }
}

impl Request for Encoded {
    fn command(&self) -> Command {
        self.command
    }

    fn payload_len(&self) -> usize {
        self.payload.len()
    }

    fn write_payload(&self, w: &mut Writer<'_>) {
        w.bytes(&self.payload)
    }

    fn requires_fd_passing(&self) -> bool {
        self.fd_passing
    }
}

/// The requests of the attempts after the first (the fallbacks tried after
/// UNKNOWN_COMMAND), encoded when the call or session is built, so that it keeps nothing
/// the caller lent it. An attempt that cannot carry the request holds why.
#[derive(Debug, Default)]
pub(crate) struct Fallbacks(heapless::Vec<Result<Encoded, SessionError>, MAX_FALLBACKS>);

/// The most older versions any request falls back to: ProcessInfo3 → 2 → 1 and
/// GenerateCoreDump3 → 2 → 1 have two, CollectTracing2 → CollectTracing one. Kept inline:
/// a call (1,000 of them at once in a busy tool) allocates nothing for its fallbacks, and
/// ProcessInfo's have no payload to allocate either.
const MAX_FALLBACKS: usize = 2;

impl Fallbacks {
    /// Adds the next attempt's request.
    pub(crate) fn push<R: Request + ?Sized>(&mut self, request: &R) {
        self.add(Encoded::of(request));
    }

    /// Adds an attempt that fails with `e` when it is reached.
    pub(crate) fn push_error(&mut self, e: SessionError) {
        self.add(Err(e));
    }

    /// Adds an attempt; one past [`MAX_FALLBACKS`] turns the last into a typed error, so
    /// that reaching it says so instead of the attempt going missing.
    fn add(&mut self, attempt: Result<Encoded, SessionError>) {
        if let Err(attempt) = self.0.push(attempt) {
            drop(attempt);
            if let Some(last) = self.0.last_mut() {
                *last = Err(SessionError::Misuse("more fallbacks than a call keeps"));
            }
        }
    }

    /// Whether there is an attempt `n` (1 is the first fallback); the error it holds if it
    /// cannot carry the request.
    pub(crate) fn has(&self, n: usize) -> Result<bool, SessionError> {
        match n.checked_sub(1).and_then(|i| self.0.get(i)) {
            Some(Ok(_)) => Ok(true),
            Some(Err(e)) => Err(e.clone()),
            None => Ok(false),
        }
    }

    /// The link of attempt `n` (1 is the first fallback), receiving in `buf`.
    pub(crate) fn link(&self, n: usize, buf: Vec<u8>) -> Result<Option<Link>, SessionError> {
        match n.checked_sub(1).and_then(|i| self.0.get(i)) {
            Some(Ok(r)) => Link::new(r, buf).map(Some),
            Some(Err(e)) => Err(e.clone()),
            None => Ok(None),
        }
    }

    /// Drops every fallback (the session started: nothing is left to fall back to).
    pub(crate) fn clear(&mut self) {
        self.0.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::payload::{CollectTracing, DumpType, GenerateCoreDump2, Provider};
    use crate::wire::Text;

    /// The bytes a link sends for `r`.
    fn sent<R: Request + ?Sized>(r: &R) -> Vec<u8> {
        let mut link = Link::new(r, Vec::new()).unwrap();
        link.connected().unwrap();
        link.transmit().unwrap().to_vec()
    }

    #[test]
    fn a_kept_fallback_sends_the_bytes_of_the_request_it_was_built_from() {
        let path = alloc::string::String::from("/tmp/dump-%p");
        let dump = GenerateCoreDump2 {
            dump_name: Text::Str(&path),
            dump_type: DumpType::Full,
            flags: 1,
        };
        let providers = [Provider::new("Microsoft-Windows-DotNETRuntime", 0x10, 4)];
        let trace = CollectTracing {
            circular_buffer_mb: 64,
            format: crate::payload::TraceFormat::NetTrace,
            providers: providers[..].into(),
        };
        let mut fallbacks = Fallbacks::default();
        fallbacks.push(&dump);
        fallbacks.push(&trace);
        let (want_dump, want_trace) = (sent(&dump), sent(&trace));
        drop(path);
        for (n, want) in [(1, want_dump), (2, want_trace)] {
            let mut link = fallbacks.link(n, Vec::new()).unwrap().unwrap();
            link.connected().unwrap();
            assert_eq!(link.transmit().unwrap(), &want[..]);
        }
        assert_eq!(fallbacks.has(3), Ok(false));
        assert!(fallbacks.link(3, Vec::new()).unwrap().is_none());
    }

    #[test]
    fn an_attempt_that_cannot_carry_the_request_fails_when_it_is_reached() {
        let mut fallbacks = Fallbacks::default();
        fallbacks.push_error(SessionError::InvalidArgument("no"));
        assert_eq!(fallbacks.has(1), Err(SessionError::InvalidArgument("no")));
        assert_eq!(fallbacks.has(0), Ok(false));
    }
}
