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

use core::fmt;

use crate::error::{DecodeError, EncodeError};
use crate::fmt::debug;
use crate::payload::{
    AnyRequest, ErrorReply, ProcessEnvironmentReply, ProcessInfo2Reply, ProcessInfo3Reply,
    ProcessInfoReply, Reply, Request, Response,
};
use crate::wire::{
    Advertise, Command, Header, HeaderView, Hresult, Text, ADVERTISE_LEN, HEADER_LEN,
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

/// A request the server will not serve, and the HRESULT the error reply carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Rejection {
    /// The HRESULT sent back.
    pub hresult: Hresult,
    /// Why.
    pub reason: RejectReason,
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
    /// A request the runtime would reject. The error reply is waiting in
    /// [`ServerConnection::poll_transmit`]; send it, then close.
    Rejected(Rejection),
    /// Bytes the client sent after its request (for example the one byte that carries a
    /// user_events file descriptor). The runtime does not read them.
    ClientData(&'a [u8]),
    /// The client closed the connection after its request (during a stream: the session
    /// should end, as the runtime ends it).
    PeerClosed,
}

/// Outcome of [`ServerConnection::handle_input`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ServerStatus<'a> {
    /// An event; call again with the unconsumed input.
    Event(ServerEvent<'a>),
    /// At least `needed` contiguous bytes are required; nothing was consumed.
    Partial {
        /// Contiguous bytes required.
        needed: usize,
    },
    /// Nothing more is expected from the client.
    Done,
}

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
    /// Rejected; the error reply is pending in `poll_transmit`.
    Rejecting(Hresult),
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
/// [`ServerEvent::Rejected`]; then [`send_response`](Self::send_response) (or
/// `poll_transmit` for a rejection); for EventPipe and ProcessEnvironment write the
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

    /// True while bytes are waiting in [`poll_transmit`](Self::poll_transmit).
    pub fn wants_write(&self) -> bool {
        self.advertise.is_some() || matches!(self.state, State::Rejecting(_))
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

    /// Writes pending protocol output (the Advertise, or a rejection's error reply) into
    /// `out`; returns 0 when nothing is pending. Nothing is lost if `out` is too small:
    /// the error says how much is needed and the bytes stay pending.
    #[must_use = "the returned bytes must be sent"]
    pub fn poll_transmit(&mut self, out: &mut [u8]) -> Result<usize, ServerError> {
        if let Some(adv) = self.advertise {
            let n = adv.emit(out)?;
            debug_assert_eq!(n, ADVERTISE_LEN);
            self.advertise = None;
            return Ok(n);
        }
        if let State::Rejecting(hresult) = self.state {
            let n = Response::Error(ErrorReply::new(hresult)).encode(out)?;
            self.state = State::Closing;
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
        self.state = State::Rejecting(hresult);
        ServerHandled {
            consumed,
            status: ServerStatus::Event(ServerEvent::Rejected(Rejection { hresult, reason })),
        }
    }

    /// Hands the machine received bytes; consumes at most one event's worth.
    pub fn handle_input<'a>(&mut self, input: &'a [u8]) -> ServerHandled<'a> {
        match self.state {
            State::AwaitRequest { .. } => self.handle_request(input),
            State::Requested(_)
            | State::Streaming { .. }
            | State::Closing
            | State::Rejecting(_)
                if !input.is_empty() =>
            {
                ServerHandled {
                    consumed: input.len(),
                    status: ServerStatus::Event(ServerEvent::ClientData(input)),
                }
            }
            State::Requested(_) | State::Streaming { .. } => ServerHandled {
                consumed: 0,
                status: ServerStatus::Partial { needed: 1 },
            },
            State::Closing | State::Rejecting(_) | State::Done => ServerHandled {
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
        let total = header.size as usize;
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
        let command = header.command;
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
                reserved: header.reserved,
            }),
        }
    }

    /// The client closed its side. Inside a request this is a rejection (BAD_ENCODING, as
    /// the runtime answers, although the client will not read it); after the request it is
    /// [`ServerEvent::PeerClosed`] (once), and the request can still be answered, since the
    /// client may only have half-closed; before any byte, `None`.
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
            // A pending error reply is still sent (the client may only have half-closed).
            State::Rejecting(_) => {
                self.peer_closed = true;
                None
            }
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

    /// Answers ProcessInfo, ProcessInfo2 or ProcessInfo3, whichever was requested, from one
    /// value holding every field (the older replies are its prefixes: ProcessInfo leaves out
    /// the entrypoint, the CLR version and the runtime identifier; ProcessInfo2 the
    /// identifier). `info.version` and `info.extension` go out as given for ProcessInfo3.
    /// Any other request is [`ServerError::WrongReply`]; nothing changes on error.
    #[must_use = "the returned bytes must be sent"]
    pub fn send_process_info(
        &mut self,
        info: &ProcessInfo3Reply<'_>,
        out: &mut [u8],
    ) -> Result<usize, ServerError> {
        let reply = match self.state {
            State::Requested(command) => process_info_reply(info, command)
                .ok_or(ServerError::WrongReply { request: command })?,
            State::AwaitRequest { .. } => return Err(ServerError::NoRequest),
            _ => return Err(ServerError::AlreadyReplied),
        };
        self.send_response(&Response::Ok(reply), out)
    }

    /// Answers ProcessEnvironment whole: the OK reply announcing the block's size, then the
    /// block holding `vars` (`NAME=VALUE` entries), both into `out` (size it with
    /// [`environment_answer_len`]); the connection should then close. Nothing is written
    /// and the state does not change on error (a block over 4 GiB is
    /// [`EncodeError::InvalidField`], a short `out` [`EncodeError::BufferTooSmall`] with
    /// the whole size).
    #[must_use = "the returned bytes must be sent"]
    pub fn send_environment<'a, I>(&mut self, vars: I, out: &mut [u8]) -> Result<usize, ServerError>
    where
        I: IntoIterator<Item = Text<'a>> + Clone,
    {
        match self.state {
            State::Requested(Command::ProcessEnvironment) => {}
            State::Requested(request) => return Err(ServerError::WrongReply { request }),
            State::AwaitRequest { .. } => return Err(ServerError::NoRequest),
            _ => return Err(ServerError::AlreadyReplied),
        }
        let block = environment_block_len(vars.clone());
        let incoming_bytes = u32::try_from(block).map_err(|_| EncodeError::InvalidField {
            field: "environment",
            reason: "block larger than 4 GiB",
        })?;
        let reply = Response::Ok(Reply::ProcessEnvironment(ProcessEnvironmentReply {
            incoming_bytes,
            future: 0,
        }));
        let head = reply.encoded_len();
        if out.len() < head + block {
            return Err(EncodeError::BufferTooSmall {
                needed: head + block,
            }
            .into());
        }
        // Encode on a copy: the state changes only once both parts are in `out`.
        let mut next = self.clone();
        let n = next.send_response(&reply, out)?;
        let m = encode_environment_block(vars, &mut out[n..])?;
        next.continuation_sent(m)?;
        *self = next;
        Ok(n + m)
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

/// The reply to `command` (ProcessInfo, ProcessInfo2 or ProcessInfo3) built from `info`,
/// which holds every field; `None` for any other command. The older replies take the
/// fields they have, in the same order.
pub fn process_info_reply<'a>(info: &ProcessInfo3Reply<'a>, command: Command) -> Option<Reply<'a>> {
    let v2 = ProcessInfo2Reply {
        process_id: info.process_id,
        runtime_cookie: info.runtime_cookie,
        command_line: info.command_line,
        os: info.os,
        arch: info.arch,
        managed_entrypoint_assembly_name: info.managed_entrypoint_assembly_name,
        clr_product_version: info.clr_product_version,
    };
    match command {
        Command::ProcessInfo => Some(Reply::ProcessInfo(ProcessInfoReply {
            process_id: v2.process_id,
            runtime_cookie: v2.runtime_cookie,
            command_line: v2.command_line,
            os: v2.os,
            arch: v2.arch,
        })),
        Command::ProcessInfo2 => Some(Reply::ProcessInfo2(v2)),
        Command::ProcessInfo3 => Some(Reply::ProcessInfo3(*info)),
        _ => None,
    }
}

/// ProcessInfo3's fields from ProcessInfo2's and a runtime identifier (payload version 1):
/// the one value [`ServerConnection::send_process_info`] answers every version from.
pub fn process_info3_from_v2<'a>(
    v2: &ProcessInfo2Reply<'a>,
    runtime_identifier: Text<'a>,
) -> ProcessInfo3Reply<'a> {
    ProcessInfo3Reply {
        version: 1,
        process_id: v2.process_id,
        runtime_cookie: v2.runtime_cookie,
        command_line: v2.command_line,
        os: v2.os,
        arch: v2.arch,
        managed_entrypoint_assembly_name: v2.managed_entrypoint_assembly_name,
        clr_product_version: v2.clr_product_version,
        runtime_identifier,
        extension: &[],
    }
}

/// Bytes [`ServerConnection::send_environment`] writes for `vars`: the 26-byte reply and
/// the block.
pub fn environment_answer_len<'a>(vars: impl IntoIterator<Item = Text<'a>>) -> usize {
    let reply = Response::Ok(Reply::ProcessEnvironment(ProcessEnvironmentReply {
        incoming_bytes: 0,
        future: 0,
    }));
    reply.encoded_len() + environment_block_len(vars)
}

/// Size of an environment block holding `vars` (`u32` count, then one string each).
pub fn environment_block_len<'a>(vars: impl IntoIterator<Item = crate::wire::Text<'a>>) -> usize {
    4 + vars
        .into_iter()
        .map(|v| crate::wire::text_len(&v))
        .sum::<usize>()
}

/// Writes an environment block (the ProcessEnvironment continuation) into `out`.
pub fn encode_environment_block<'a, I>(vars: I, out: &mut [u8]) -> Result<usize, EncodeError>
where
    I: IntoIterator<Item = crate::wire::Text<'a>> + Clone,
{
    let len = environment_block_len(vars.clone());
    let dst = out
        .get_mut(..len)
        .ok_or(EncodeError::BufferTooSmall { needed: len })?;
    let mut w = crate::wire::Writer::new(dst);
    let mut count = 0u32;
    for _ in vars.clone() {
        count += 1;
    }
    w.u32(count);
    for v in vars {
        w.text(&v);
    }
    match w.finish() {
        Some(n) if n == len => Ok(n),
        _ => Err(EncodeError::InvalidField {
            field: "environment",
            reason: "encoder wrote a different length than it computed",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conn::{ClientConnection, ClientEvent, Status};
    use crate::payload::{ProcessEnvironment, ProcessInfo3};

    const NET8: &str = "net8.0.4";

    macro_rules! capture {
        ($case:literal) => {
            include_bytes!(concat!("../../tests/data/captures/net8.0.4/", $case))
        };
    }

    /// A server machine that has received `request` (captured bytes).
    fn requested(request: &[u8]) -> ServerConnection {
        let mut server = ServerConnection::new();
        let h = server.handle_input(request);
        assert!(matches!(
            h.status,
            ServerStatus::Event(ServerEvent::Request { .. })
        ));
        server
    }

    #[test]
    fn process_info_of_every_version_from_one_value_matches_the_runtime() {
        // The value: the runtime's own ProcessInfo3 reply, decoded.
        let v3_bytes = capture!("process-info3.reply.bin");
        let mut client = ClientConnection::new();
        let mut tx = [0u8; 64];
        let _ = client.send_request(&ProcessInfo3, &mut tx).unwrap();
        let info = match client.handle_input(v3_bytes).unwrap().status {
            Status::Event(ClientEvent::Reply(Reply::ProcessInfo3(info))) => info,
            other => panic!("{} {:?}", NET8, other),
        };
        let cases: [(&[u8], &[u8]); 3] = [
            (
                capture!("process-info.request.bin"),
                capture!("process-info.reply.bin"),
            ),
            (
                capture!("process-info2.request.bin"),
                capture!("process-info2.reply.bin"),
            ),
            (capture!("process-info3.request.bin"), v3_bytes),
        ];
        for (request, reply) in cases {
            let mut server = requested(request);
            let mut out = [0u8; 512];
            let n = server.send_process_info(&info, &mut out).unwrap();
            assert_eq!(&out[..n], reply);
            assert!(server.should_close());
        }
        // Upward from ProcessInfo2: the same ProcessInfo3 reply.
        let v2 = match process_info_reply(&info, Command::ProcessInfo2) {
            Some(Reply::ProcessInfo2(v2)) => v2,
            other => panic!("{:?}", other),
        };
        let up = process_info3_from_v2(&v2, info.runtime_identifier);
        let mut server = requested(capture!("process-info3.request.bin"));
        let mut out = [0u8; 512];
        let n = server.send_process_info(&up, &mut out).unwrap();
        assert_eq!(&out[..n], v3_bytes);
    }

    #[test]
    fn process_info_answers_only_process_info() {
        let mut server = requested(capture!("process-environment.request.bin"));
        let info = process_info3_from_v2(
            &ProcessInfo2Reply {
                process_id: 1,
                runtime_cookie: crate::wire::Guid::NIL,
                command_line: Text::Str("x"),
                os: Text::Str("Linux"),
                arch: Text::Str("x64"),
                managed_entrypoint_assembly_name: Text::Str("x"),
                clr_product_version: Text::Str("8.0.4"),
            },
            Text::Str("linux-x64"),
        );
        let mut out = [0u8; 512];
        assert_eq!(
            server.send_process_info(&info, &mut out),
            Err(ServerError::WrongReply {
                request: Command::ProcessEnvironment
            })
        );
        assert_eq!(server.command(), Some(Command::ProcessEnvironment));
        assert_eq!(
            ServerConnection::new().send_process_info(&info, &mut out),
            Err(ServerError::NoRequest)
        );
    }

    #[test]
    fn environment_reply_and_block_in_one_call_match_the_runtime() {
        let reply = capture!("process-environment.reply.bin");
        // The entries, as the runtime sent them (at most 16 here).
        let mut client = ClientConnection::new();
        let mut tx = [0u8; 64];
        let _ = client.send_request(&ProcessEnvironment, &mut tx).unwrap();
        let mut vars: [Text<'_>; 16] = [Text::Null; 16];
        let mut count = 0;
        let mut at = 0;
        loop {
            let h = client.handle_input(&reply[at..]).unwrap();
            at += h.consumed;
            match h.status {
                Status::Event(ClientEvent::EnvironmentVariable(v)) => {
                    vars[count] = v;
                    count += 1;
                }
                Status::Event(_) => {}
                _ => break,
            }
        }
        assert!(count > 0);
        let vars = &vars[..count];
        assert_eq!(environment_answer_len(vars.iter().copied()), reply.len());

        let mut server = requested(capture!("process-environment.request.bin"));
        let mut small = [0u8; 100];
        assert_eq!(
            server.send_environment(vars.iter().copied(), &mut small),
            Err(ServerError::Encode(EncodeError::BufferTooSmall {
                needed: reply.len()
            }))
        );
        assert_eq!(server.command(), Some(Command::ProcessEnvironment));
        let mut out = [0u8; 512];
        let n = server
            .send_environment(vars.iter().copied(), &mut out)
            .unwrap();
        assert_eq!(&out[..n], &reply[..]);
        assert!(server.should_close());
        assert_eq!(
            server.send_environment(vars.iter().copied(), &mut out),
            Err(ServerError::AlreadyReplied)
        );
        let mut other = requested(capture!("process-info.request.bin"));
        assert_eq!(
            other.send_environment(vars.iter().copied(), &mut out),
            Err(ServerError::WrongReply {
                request: Command::ProcessInfo
            })
        );
    }
}
