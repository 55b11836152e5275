//! What a fake runtime records: requests received and streams sent.

use dsipc::conn::Rejection;
use dsipc::wire::HEADER_LEN;
use dsipc::{AnyRequest, Command};

/// One request the fake runtime received (or rejected).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Connection number (in accept/connect order, both ports counted together).
    pub connection: u64,
    /// True if it came over the reverse port.
    pub reverse: bool,
    /// The request message as received (header and payload; for a rejection, the bytes
    /// the machine had).
    pub bytes: Vec<u8>,
    /// The command (`None` when the request was rejected before its header was read).
    pub command: Option<Command>,
    /// The header's reserved field.
    pub reserved: u16,
    /// Why it was rejected (the error reply sent carries `rejection.hresult`).
    pub rejection: Option<Rejection>,
}

impl Received {
    /// The typed request, decoded again from [`bytes`](Self::bytes).
    pub fn request(&self) -> Option<AnyRequest<'_>> {
        if self.rejection.is_some() {
            return None;
        }
        let command = self.command?;
        let payload = self.bytes.get(HEADER_LEN..)?;
        AnyRequest::decode(command, payload).ok().flatten()
    }
}

/// How a stream ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamEnd {
    /// Its configured length was sent.
    Completed,
    /// StopTracing for its session arrived (on another connection).
    Stopped,
    /// A write failed: the client closed the connection.
    PeerClosed,
    /// The client did not read for the idle timeout.
    TimedOut,
    /// The fake runtime shut down.
    Shutdown,
}

/// One EventPipe stream the fake runtime sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamRecord {
    /// The session id sent in the OK reply.
    pub session_id: u64,
    /// The CollectTracing version.
    pub command: Command,
    /// Continuation bytes written.
    pub bytes: u64,
    /// Why it ended.
    pub end: StreamEnd,
}
