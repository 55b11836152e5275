//! The server side of one diagnostic connection (the runtime's side): parse one request with
//! the real runtime's rules, hand it out without copying, then emit the reply and, for
//! EventPipe and ProcessEnvironment, a continuation written from the caller's buffers.
//!
//! Rules (from `ds-protocol.c` and real runtimes): the header and the whole payload are read
//! first; `size < 20` or EOF inside the message is BAD_ENCODING; then a bad magic is
//! UNKNOWN_MAGIC; an unknown command is UNKNOWN_COMMAND; a payload that does not parse (or
//! holds values the runtime rejects) is BAD_ENCODING. `reserved` is ignored and bytes after
//! the parsed fields are tolerated. Every rejection is answered with a 24-byte error reply,
//! after which the connection closes.
//!
//! Output: the machine holds no reply bytes. An answer is written into the caller's buffer
//! by [`ServerConnection::send_response`] (or its multi-part helpers); a rejection's error
//! reply travels in its event ([`Rejection::reply`]); only the Advertise of a reverse
//! connection, sent before anything is asked, waits in [`ServerConnection::poll_transmit`].

use core::fmt;

use crate::error::{DecodeError, EncodeError};
use crate::fmt::debug;
use crate::payload::{AnyRequest, ErrorReply, Reply, Request, Response};
use crate::wire::{Advertise, Command, Header, HeaderView, Hresult, ADVERTISE_LEN, HEADER_LEN};

mod answer;
#[cfg(test)]
mod tests;

pub use answer::{
    encode_environment_block, environment_answer_len, environment_block_len, process_info3_from_v2,
    process_info_answer_len, process_info_reply,
};

/// Why a request was rejected (the reply carries [`Rejection::hresult`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum RejectReason {
    /// The header's size field is below 20 (BAD_ENCODING).
    SizeTooSmall {
        /// The size found.
        size: u16,
    },
    /// The client closed inside the message (BAD_ENCODING).
    Eof {
        /// Bytes the message needed.
        needed: usize,
        /// Bytes that arrived.
        available: usize,
    },
    /// The magic is not `DOTNET_IPC_V1\0` (UNKNOWN_MAGIC).
    BadMagic {
        /// The 14 bytes found.
        found: [u8; 14],
    },
    /// Not a command this server knows (UNKNOWN_COMMAND).
    UnknownCommand {
        /// The command.
        command: Command,
    },
    /// The payload does not parse (BAD_ENCODING).
    InvalidPayload {
        /// The command.
        command: Command,
        /// What was wrong.
        detail: DecodeError,
    },
    /// The payload parses but holds a value the runtime rejects (BAD_ENCODING).
    InvalidField {
        /// The command.
        command: Command,
        /// Why.
        detail: EncodeError,
    },
}

/// Bytes of the error reply that answers a rejected request: the 20-byte header and the
/// HRESULT.
pub const ERROR_REPLY_LEN: usize = HEADER_LEN + 4;

/// A request the server will not serve, and the HRESULT the error reply carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Rejection {
    /// The HRESULT sent back.
    pub hresult: Hresult,
    /// Why.
    pub reason: RejectReason,
}

impl Rejection {
    /// The error reply to send before closing (the runtime's 24 bytes carrying
    /// [`hresult`](Self::hresult)).
    #[must_use = "the error reply must be sent before the connection closes"]
    pub fn reply(&self) -> [u8; ERROR_REPLY_LEN] {
        let mut out = [0u8; ERROR_REPLY_LEN];
        let n = Response::Error(ErrorReply::new(self.hresult)).encode(&mut out);
        debug_assert_eq!(n, Ok(ERROR_REPLY_LEN));
        out
    }
}

/// What the client sent, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ServerEvent<'a> {
    /// A well-formed request, borrowing its strings and arrays from the input. Answer it
    /// with [`ServerConnection::send_response`].
    Request {
        /// The decoded request.
        request: AnyRequest<'a>,
        /// The header's reserved field (ignored by the runtime).
        reserved: u16,
    },
    /// A request the runtime would reject. Send [`Rejection::reply`], then close (the
    /// machine already [`should_close`](ServerConnection::should_close)).
    Rejected(Rejection),
    /// Bytes the client sent after its request (for example the one byte that carries a
    /// user_events file descriptor). The runtime does not read them.
    ClientData(&'a [u8]),
    /// The client closed the connection after its request (during a stream: the session
    /// should end, as the runtime ends it).
    PeerClosed,
}

/// Outcome of [`ServerConnection::handle_input`]: the status type the client shares.
pub type ServerStatus<'a> = super::Status<ServerEvent<'a>>;

/// What [`ServerConnection::handle_input`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use = "consumed bytes must be dropped from the input and the status acted on"]
pub struct ServerHandled<'a> {
    /// Bytes of the input used.
    pub consumed: usize,
    /// What happened.
    pub status: ServerStatus<'a>,
}

/// Misuse of a [`ServerConnection`], or an encoding failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ServerError {
    /// The response could not be encoded (for example the buffer is too small).
    Encode(EncodeError),
    /// `send_response` without a request to answer.
    NoRequest,
    /// A second response on one connection.
    AlreadyReplied,
    /// The response's shape does not fit the request (for example a session id for
    /// ProcessInfo). Error replies fit every request.
    WrongReply {
        /// The request being answered.
        request: Command,
    },
    /// Continuation bytes without an OK reply to a command that has a continuation.
    NotStreaming,
    /// ProcessEnvironment continuation bytes beyond the size the reply announced.
    ContinuationTooLong {
        /// Bytes announced.
        announced: u32,
        /// Bytes that would have been sent.
        attempted: u64,
    },
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ServerError::Encode(e) => write!(f, "cannot encode response: {}", e),
            ServerError::NoRequest => f.write_str("no request to answer"),
            ServerError::AlreadyReplied => f.write_str("the request was already answered"),
            ServerError::WrongReply { request } => {
                write!(f, "that reply does not answer {}", request)
            }
            ServerError::NotStreaming => f.write_str("this connection has no continuation"),
            ServerError::ContinuationTooLong {
                announced,
                attempted,
            } => write!(
                f,
                "continuation of {} bytes exceeds the {} announced",
                attempted, announced
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ServerError {}

impl From<EncodeError> for ServerError {
    fn from(e: EncodeError) -> Self {
        ServerError::Encode(e)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Waiting for the request; `pending` and `needed` as last reported.
    AwaitRequest { pending: usize, needed: usize },
    /// Request handed out; waiting for `send_response`.
    Requested(Command),
    /// OK sent to a command with a continuation; `left` = announced bytes still to send
    /// (`None` for an unbounded EventPipe stream).
    Streaming { left: Option<u32>, announced: u32 },
    /// Reply (and continuation, if any) sent: the connection should close.
    Closing,
    /// The client closed.
    Done,
}

/// The server machine for one connection.
///
/// Order of calls: (in advertising mode, [`poll_transmit`](Self::poll_transmit) first),
/// [`handle_input`](Self::handle_input) until [`ServerEvent::Request`] or
/// [`ServerEvent::Rejected`]; then [`send_response`](Self::send_response) (or, for a
/// rejection, the event's [`Rejection::reply`]); for EventPipe and ProcessEnvironment write the
/// continuation from your own buffers, declaring it with
/// [`continuation_sent`](Self::continuation_sent); close when
/// [`should_close`](Self::should_close) says so.
#[derive(Debug, Clone)]
pub struct ServerConnection {
    advertise: Option<Advertise>,
    state: State,
    /// The client half-closed (or closed) after its request: it can still be answered.
    peer_closed: bool,
}

impl Default for ServerConnection {
    fn default() -> Self {
        Self::new()
    }
}

impl ServerConnection {
    /// A machine for an accepted connection (the runtime's listening socket).
    pub const fn new() -> Self {
        ServerConnection {
            advertise: None,
            peer_closed: false,
            state: State::AwaitRequest {
                pending: 0,
                needed: HEADER_LEN,
            },
        }
    }

    /// A machine for the runtime side of a reverse (connect) port: it first sends the
    /// 34-byte Advertise (from [`poll_transmit`](Self::poll_transmit)), then serves one
    /// command.
    pub const fn advertising(advertise: Advertise) -> Self {
        ServerConnection {
            advertise: Some(advertise),
            peer_closed: false,
            state: State::AwaitRequest {
                pending: 0,
                needed: HEADER_LEN,
            },
        }
    }

    /// True while the Advertise is waiting in [`poll_transmit`](Self::poll_transmit).
    pub fn wants_write(&self) -> bool {
        self.advertise.is_some()
    }

    /// True while the machine expects input (a request, or the peer's close during a
    /// continuation).
    pub fn wants_read(&self) -> bool {
        !self.peer_closed
            && matches!(
                self.state,
                State::AwaitRequest { .. } | State::Requested(_) | State::Streaming { .. }
            )
    }

    /// True once the reply (and continuation) is out: close the connection.
    pub fn should_close(&self) -> bool {
        matches!(self.state, State::Closing | State::Done)
    }

    /// The request being served, once it has arrived.
    pub fn command(&self) -> Option<Command> {
        match self.state {
            State::Requested(c) => Some(c),
            _ => None,
        }
    }

    /// Writes the pending Advertise (advertising mode) into `out`; returns 0 when nothing is
    /// pending. Nothing is lost if `out` is too small: the error says how much is needed and
    /// the bytes stay pending. (A rejection's reply is not pending here: it travels in its
    /// event, [`Rejection::reply`].)
    #[must_use = "the returned bytes must be sent"]
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> Result<usize, ServerError> {
        if let Some(adv) = self.advertise {
            let n = adv.emit(out)?;
            debug_assert_eq!(n, ADVERTISE_LEN);
            self.advertise = None;
            return Ok(n);
        }
        Ok(0)
    }

    fn reject<'a>(
        &mut self,
        consumed: usize,
        hresult: Hresult,
        reason: RejectReason,
    ) -> ServerHandled<'a> {
        debug!("dsipc: rejecting request");
        self.state = State::Closing;
        ServerHandled {
            consumed,
            status: ServerStatus::Event(ServerEvent::Rejected(Rejection { hresult, reason })),
        }
    }

    /// Hands the machine received bytes; consumes at most one event's worth.
    pub fn handle_input<'a>(&mut self, input: &'a [u8]) -> ServerHandled<'a> {
        match self.state {
            State::AwaitRequest { .. } => self.handle_request(input),
            State::Requested(_) | State::Streaming { .. } | State::Closing if !input.is_empty() => {
                ServerHandled {
                    consumed: input.len(),
                    status: ServerStatus::Event(ServerEvent::ClientData(input)),
                }
            }
            State::Requested(_) | State::Streaming { .. } => ServerHandled {
                consumed: 0,
                status: ServerStatus::Partial { needed: 1 },
            },
            State::Closing | State::Done => ServerHandled {
                consumed: 0,
                status: ServerStatus::Done,
            },
        }
    }

    fn handle_request<'a>(&mut self, input: &'a [u8]) -> ServerHandled<'a> {
        let partial = |this: &mut Self, needed: usize| {
            this.state = State::AwaitRequest {
                pending: input.len(),
                needed,
            };
            ServerHandled {
                consumed: 0,
                status: ServerStatus::Partial { needed },
            }
        };
        let view = match HeaderView::ref_from(input) {
            Some(v) => v,
            None => return partial(self, HEADER_LEN),
        };
        // The runtime checks the size as soon as the header is in, and the magic only once
        // the whole message has been read.
        let header = match Header::from_view_unchecked_magic(view) {
            Ok(h) => h,
            Err(_) => {
                let size = view.size();
                return self.reject(
                    HEADER_LEN,
                    Hresult::CORDIAGIPC_E_BAD_ENCODING,
                    RejectReason::SizeTooSmall { size },
                );
            }
        };
        let total = header.size() as usize;
        if input.len() < total {
            return partial(self, total);
        }
        if !view.magic_ok() {
            return self.reject(
                total,
                Hresult::CORDIAGIPC_E_UNKNOWN_MAGIC,
                RejectReason::BadMagic { found: view.magic },
            );
        }
        let command = header.command();
        let payload = &input[HEADER_LEN..total];
        let request = match AnyRequest::decode(command, payload) {
            Ok(Some(r)) => r,
            Ok(None) => {
                return self.reject(
                    total,
                    Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND,
                    RejectReason::UnknownCommand { command },
                )
            }
            Err(detail) => {
                return self.reject(
                    total,
                    Hresult::CORDIAGIPC_E_BAD_ENCODING,
                    RejectReason::InvalidPayload { command, detail },
                )
            }
        };
        if let Err(detail) = request.validate() {
            return self.reject(
                total,
                Hresult::CORDIAGIPC_E_BAD_ENCODING,
                RejectReason::InvalidField { command, detail },
            );
        }
        self.state = State::Requested(command);
        ServerHandled {
            consumed: total,
            status: ServerStatus::Event(ServerEvent::Request {
                request,
                reserved: header.reserved(),
            }),
        }
    }

    /// The client closed its side. Inside a request this is a rejection (BAD_ENCODING, as
    /// the runtime answers, although the client will not read it); after the request it is
    /// [`ServerEvent::PeerClosed`] (once), and the request can still be answered, since the
    /// client may only have half-closed; before any byte, `None`.
    #[must_use = "a rejection's reply must be sent, and PeerClosed ends a stream"]
    pub fn handle_eof(&mut self) -> Option<ServerEvent<'static>> {
        match self.state {
            State::AwaitRequest { pending: 0, .. } => {
                self.state = State::Done;
                None
            }
            State::AwaitRequest { pending, needed } => {
                let h = self.reject(
                    0,
                    Hresult::CORDIAGIPC_E_BAD_ENCODING,
                    RejectReason::Eof {
                        needed,
                        available: pending,
                    },
                );
                match h.status {
                    ServerStatus::Event(ServerEvent::Rejected(r)) => Some(ServerEvent::Rejected(r)),
                    _ => None,
                }
            }
            // The client may have only half-closed: it can still be answered (the runtime
            // replies regardless), so the state stays; the event is reported once.
            State::Requested(_) | State::Streaming { .. } if !self.peer_closed => {
                self.peer_closed = true;
                Some(ServerEvent::PeerClosed)
            }
            State::Requested(_) | State::Streaming { .. } => None,
            State::Closing | State::Done => {
                self.state = State::Done;
                None
            }
        }
    }

    /// Encodes the response to the request handed out, into `out`. An OK reply to a
    /// CollectTracing command or to ProcessEnvironment opens the continuation; everything
    /// else leaves the connection ready to close.
    #[must_use = "the returned bytes must be sent"]
    pub fn send_response(
        &mut self,
        response: &Response<'_>,
        out: &mut [u8],
    ) -> Result<usize, ServerError> {
        let command = match self.state {
            State::Requested(c) => c,
            State::AwaitRequest { .. } => return Err(ServerError::NoRequest),
            _ => return Err(ServerError::AlreadyReplied),
        };
        if let Response::Ok(reply) = response {
            let fits = Some(reply.kind()) == crate::payload::ReplyKind::of(command);
            if !fits {
                return Err(ServerError::WrongReply { request: command });
            }
        }
        let n = response.encode(out)?;
        self.state = match response {
            Response::Ok(Reply::SessionId(_)) if command.is_collect_tracing() => State::Streaming {
                left: None,
                announced: 0,
            },
            Response::Ok(Reply::ProcessEnvironment(e)) => State::Streaming {
                left: Some(e.incoming_bytes),
                announced: e.incoming_bytes,
            },
            _ => State::Closing,
        };
        if let State::Streaming { left: Some(0), .. } = self.state {
            self.state = State::Closing;
        }
        Ok(n)
    }

    /// Checks, without recording anything, that `len` continuation bytes may be sent now
    /// (what [`continuation_sent`](Self::continuation_sent) would accept).
    pub fn check_continuation(&self, len: usize) -> Result<(), ServerError> {
        match self.state {
            State::Streaming { left: None, .. } => Ok(()),
            State::Streaming {
                left: Some(left),
                announced,
            } if len as u64 > u64::from(left) => Err(ServerError::ContinuationTooLong {
                announced,
                attempted: u64::from(announced - left) + len as u64,
            }),
            State::Streaming { .. } => Ok(()),
            _ => Err(ServerError::NotStreaming),
        }
    }

    /// Declares `len` continuation bytes that the caller is about to write from its own
    /// buffer (nettrace data, or the environment block). For ProcessEnvironment the total
    /// must not exceed the announced size; reaching it ends the continuation.
    pub fn continuation_sent(&mut self, len: usize) -> Result<(), ServerError> {
        self.check_continuation(len)?;
        if let State::Streaming {
            left: Some(left), ..
        } = &mut self.state
        {
            // Checked above: len <= left.
            *left -= len as u32;
            if *left == 0 {
                self.state = State::Closing;
            }
        }
        Ok(())
    }

    /// Ends an EventPipe stream (the session stopped): the connection should now close.
    pub fn finish_stream(&mut self) -> Result<(), ServerError> {
        match self.state {
            State::Streaming { left: None, .. } => {
                self.state = State::Closing;
                Ok(())
            }
            _ => Err(ServerError::NotStreaming),
        }
    }
}
