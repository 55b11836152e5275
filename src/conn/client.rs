//! The client side of one diagnostic connection: one request, one reply, then the optional
//! continuation (an EventPipe stream or the ProcessEnvironment block).

use crate::error::{ClientError, DecodeError, UsageError};
use crate::fmt::{debug, trace};
use crate::payload::{ErrorReply, Reply, Request, Response};
use crate::wire::{
    Advertise, AdvertiseError, Command, Header, HeaderView, Reader, Text, ADVERTISE_LEN, HEADER_LEN,
};

/// Something the peer said, decoded. Borrowed data points into the input slice given to
/// [`ClientConnection::handle_input`] and stays valid until that buffer is reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ClientEvent<'a> {
    /// The OK reply, typed after the request.
    Reply(Reply<'a>),
    /// An error reply; the runtime closes the connection after it.
    Error(ErrorReply<'a>),
    /// EventPipe continuation bytes (nettrace), passed through without copying.
    StreamData(&'a [u8]),
    /// One `NAME=VALUE` entry of the ProcessEnvironment continuation.
    EnvironmentVariable(Text<'a>),
    /// The continuation ended cleanly (EOF after a stream, or the last environment entry).
    EndOfStream,
    /// A runtime announced itself on a reverse port (see
    /// [`ClientConnection::expecting_advertise`]); a request may now be sent.
    Advertise(Advertise),
}

/// Outcome of a machine's `handle_input`: [`ClientConnection::handle_input`] (events
/// [`ClientEvent`]), [`ServerConnection::handle_input`](crate::ServerConnection::handle_input)
/// (events [`ServerEvent`](crate::ServerEvent), as [`ServerStatus`](crate::ServerStatus)) and
/// [`NettraceParser::handle_input`](crate::nettrace::NettraceParser::handle_input) (trace
/// items, as [`nettrace::Status`](crate::nettrace::Status)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Status<E> {
    /// An event; call again with the unconsumed rest of the input.
    Event(E),
    /// Not an error: at least `needed` contiguous bytes (counted from the first unconsumed
    /// byte) must be available before the next event; nothing was consumed. Keep the
    /// unconsumed bytes, append more, and call again. For a message `needed` is at most
    /// 65,535 (the `u16` size field) or 34 (an Advertise). For a ProcessEnvironment entry it
    /// is the entry's size, `4 + 2 × units` (plus 4 for the count before the first entry),
    /// never more than the size the reply announced: Linux allows one variable of up to
    /// 128 KiB, so such an entry can need about 256 KiB. Grow the buffer up to a limit you
    /// choose, and report [`BufferTooSmall`](crate::recv::BufferTooSmall) past it
    /// ([`RecvBuffer`](crate::recv::RecvBuffer) does). The nettrace parser asks for at most
    /// one block plus its framing.
    Partial {
        /// Contiguous bytes required.
        needed: usize,
    },
    /// The exchange is over: nothing more is expected (from the peer) and the connection
    /// can be closed (a server may still have its answer to send).
    Done,
}

/// What [`ClientConnection::handle_input`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[must_use = "consumed bytes must be dropped from the input and the status acted on"]
pub struct Handled<'a> {
    /// Bytes of the input that were used; drop them before the next call.
    pub consumed: usize,
    /// What happened.
    pub status: Status<ClientEvent<'a>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reverse port: waiting for the runtime's 34-byte Advertise.
    AwaitAdvertise { pending: usize },
    /// Nothing sent yet.
    Idle,
    /// Reverse port: the Advertise arrived; nothing sent yet.
    Advertised,
    /// Request sent; waiting for the reply message. `pending` = bytes the caller had last
    /// time, `needed` = bytes the message needs.
    AwaitReply { pending: usize, needed: usize },
    /// The reply has no continuation; only EOF may follow.
    AwaitClose,
    /// EventPipe stream: everything until EOF is data.
    Stream,
    /// ProcessEnvironment block: `left` bytes to go; `vars` entries left (None: count not read).
    Environment {
        left: u32,
        announced: u32,
        vars: Option<u32>,
        pending: usize,
    },
    /// Over.
    Done,
    /// A protocol error happened; it is reported again on every call.
    Failed(ClientError),
}

/// The client machine for one connection. It never does I/O: the caller sends the bytes it
/// produces and feeds it the bytes received.
///
/// Order of calls: [`send_request`](Self::send_request) once, then
/// [`handle_input`](Self::handle_input) with received bytes until [`Status::Partial`] (read
/// more) or [`Status::Done`], and [`handle_eof`](Self::handle_eof) when the peer closes.
/// See the crate docs for the loop.
///
/// Its own state is a few words; buffers belong to the caller.
#[derive(Debug, Clone)]
pub struct ClientConnection {
    command: Option<Command>,
    fd_passing: bool,
    state: State,
}

impl Default for ClientConnection {
    fn default() -> Self {
        Self::new()
    }
}

impl ClientConnection {
    /// A machine that has sent nothing.
    pub const fn new() -> Self {
        ClientConnection {
            command: None,
            fd_passing: false,
            state: State::Idle,
        }
    }

    /// A machine for the monitor side of a reverse port (`DOTNET_DiagnosticPorts=...,connect`):
    /// the runtime connects and first sends an Advertise, reported as
    /// [`ClientEvent::Advertise`]; only then can a request be sent. A short or malformed
    /// Advertise is [`ClientError::BadAdvertise`].
    pub const fn expecting_advertise() -> Self {
        ClientConnection {
            command: None,
            fd_passing: false,
            state: State::AwaitAdvertise { pending: 0 },
        }
    }

    /// Encodes `request` into `out` (header and payload, to be written in **one** write:
    /// .NET Core 3.1 reads each part with a single read) and returns its length.
    ///
    /// Errors: [`ClientError::Misuse`]([`UsageError::AlreadySent`](crate::UsageError::AlreadySent)) on a second call (one command per connection);
    /// [`ClientError::Encode`] if the request is invalid or `out` is too small (the error
    /// says how many bytes are needed; the machine stays unsent and can be retried).
    #[must_use = "the returned length of bytes must be sent"]
    pub fn send_request<R: Request + ?Sized>(
        &mut self,
        request: &R,
        out: &mut [u8],
    ) -> Result<usize, ClientError> {
        match self.state {
            State::Idle | State::Advertised => {}
            State::AwaitAdvertise { .. } => {
                return Err(ClientError::Misuse(UsageError::AdvertiseNotReceived))
            }
            _ => return Err(ClientError::Misuse(UsageError::AlreadySent)),
        }
        let n = request.encode(out)?;
        let command = request.command();
        self.fd_passing = request.requires_fd_passing();
        debug!("dsipc: sending {} bytes", n);
        self.command = Some(command);
        self.state = State::AwaitReply {
            pending: 0,
            needed: HEADER_LEN,
        };
        Ok(n)
    }

    /// True after sending a user_events session request: the adapter must now pass the
    /// `user_events_data` descriptor with `SCM_RIGHTS` (one data byte); the runtime reads it
    /// before it replies.
    pub fn requires_fd_passing(&self) -> bool {
        self.fd_passing
    }

    /// The command that was sent, if any.
    pub fn command(&self) -> Option<Command> {
        self.command
    }

    /// True once nothing more is expected (after a reply without continuation, after the
    /// end of a continuation, or after an error).
    pub fn is_finished(&self) -> bool {
        matches!(
            self.state,
            State::AwaitClose | State::Done | State::Failed(_)
        )
    }

    /// True while the machine is streaming EventPipe data.
    pub fn is_streaming(&self) -> bool {
        self.state == State::Stream
    }

    fn fail(&mut self, e: ClientError) -> ClientError {
        debug!("dsipc: client failed");
        self.state = State::Failed(e);
        e
    }

    /// Hands the machine received bytes. It consumes at most one event's worth and reports
    /// it; call again with the rest until it returns [`Status::Partial`] or [`Status::Done`].
    ///
    /// Bytes are only consumed when the event they form is returned: on
    /// [`Status::Partial`] `consumed` is 0 and the caller keeps them. Reads only `input`.
    pub fn handle_input<'a>(&mut self, input: &'a [u8]) -> Result<Handled<'a>, ClientError> {
        match self.state {
            State::AwaitAdvertise { .. } => {
                if input.len() < ADVERTISE_LEN {
                    self.state = State::AwaitAdvertise {
                        pending: input.len(),
                    };
                    return Ok(Handled {
                        consumed: 0,
                        status: Status::Partial {
                            needed: ADVERTISE_LEN,
                        },
                    });
                }
                match Advertise::parse(input) {
                    Ok(adv) => {
                        self.state = State::Advertised;
                        Ok(Handled {
                            consumed: ADVERTISE_LEN,
                            status: Status::Event(ClientEvent::Advertise(adv)),
                        })
                    }
                    Err(e) => Err(self.fail(ClientError::BadAdvertise(e))),
                }
            }
            State::Idle | State::Advertised if input.is_empty() => Ok(Handled {
                consumed: 0,
                status: Status::Partial { needed: 1 },
            }),
            State::Idle => Err(ClientError::Misuse(UsageError::NotSent)),
            // A runtime sends nothing after its Advertise until it gets a command.
            State::Advertised => {
                let len = input.len();
                Err(self.fail(ClientError::UnexpectedData { len }))
            }
            State::Failed(e) => Err(e),
            State::Done | State::AwaitClose => {
                if input.is_empty() {
                    Ok(Handled {
                        consumed: 0,
                        status: Status::Done,
                    })
                } else {
                    let len = input.len();
                    Err(self.fail(ClientError::UnexpectedData { len }))
                }
            }
            State::AwaitReply { .. } => self.handle_reply(input),
            State::Stream => {
                if input.is_empty() {
                    return Ok(Handled {
                        consumed: 0,
                        status: Status::Partial { needed: 1 },
                    });
                }
                trace!("dsipc: {} stream bytes", input.len());
                Ok(Handled {
                    consumed: input.len(),
                    status: Status::Event(ClientEvent::StreamData(input)),
                })
            }
            State::Environment {
                left,
                announced,
                vars,
                ..
            } => self.handle_environment(input, left, announced, vars),
        }
    }

    fn handle_reply<'a>(&mut self, input: &'a [u8]) -> Result<Handled<'a>, ClientError> {
        let request = match self.command {
            Some(c) => c,
            None => return Err(ClientError::Misuse(UsageError::NotSent)),
        };
        let partial = |state: &mut State, needed: usize| {
            *state = State::AwaitReply {
                pending: input.len(),
                needed,
            };
            Ok(Handled {
                consumed: 0,
                status: Status::Partial { needed },
            })
        };
        let view = match HeaderView::ref_from(input) {
            Some(v) => v,
            None => return partial(&mut self.state, HEADER_LEN),
        };
        // Check the magic as soon as the header is complete: no point waiting for a payload
        // that follows garbage.
        if !view.magic_ok() {
            return Err(self.fail(ClientError::BadMagic { found: view.magic }));
        }
        let header = match Header::from_view_unchecked_magic(view) {
            Ok(h) => h,
            Err(_) => return Err(self.fail(ClientError::SizeTooSmall { size: view.size() })),
        };
        let total = header.size() as usize;
        if input.len() < total {
            return partial(&mut self.state, total);
        }
        let payload = &input[HEADER_LEN..total];
        let map = |e: DecodeError| match e {
            DecodeError::Truncated { .. } => ClientError::PayloadTooShort { request, detail: e },
            DecodeError::TrailingBytes { count } => ClientError::PayloadTooLong {
                request,
                len: payload.len(),
                extra: count,
            },
            _ => ClientError::InvalidPayload { request, detail: e },
        };
        let response = match header.command() {
            Command::ServerOk => match Reply::decode(request, payload) {
                Ok(Some(r)) => Response::Ok(r),
                // A command this crate does not know (the caller's own `Request`): the
                // payload as sent, for the caller to decode.
                Ok(None) => Response::Ok(Reply::Raw(payload)),
                Err(e) => return Err(self.fail(map(e))),
            },
            Command::ServerError => match ErrorReply::decode(request, payload) {
                Ok(e) => Response::Error(e),
                Err(e) => return Err(self.fail(map(e))),
            },
            other => {
                let (command_set, command_id) = other.code();
                return Err(self.fail(ClientError::UnexpectedReplyCommand {
                    request,
                    command_set,
                    command_id,
                }));
            }
        };
        let event = match response {
            Response::Ok(reply) => {
                self.state = match reply {
                    Reply::SessionId(_) if request.is_collect_tracing() => State::Stream,
                    Reply::ProcessEnvironment(e) => State::Environment {
                        left: e.incoming_bytes,
                        announced: e.incoming_bytes,
                        vars: None,
                        pending: 0,
                    },
                    _ => State::AwaitClose,
                };
                ClientEvent::Reply(reply)
            }
            Response::Error(e) => {
                self.state = State::AwaitClose;
                ClientEvent::Error(e)
            }
        };
        Ok(Handled {
            consumed: total,
            status: Status::Event(event),
        })
    }

    fn env_partial<'a>(&mut self, input_len: usize, needed: usize) -> Handled<'a> {
        if let State::Environment { pending, .. } = &mut self.state {
            *pending = input_len;
        }
        Handled {
            consumed: 0,
            status: Status::Partial { needed },
        }
    }

    /// The environment continuation, with the fields of `State::Environment`.
    fn handle_environment<'a>(
        &mut self,
        input: &'a [u8],
        mut left: u32,
        announced: u32,
        vars: Option<u32>,
    ) -> Result<Handled<'a>, ClientError> {
        let used = u64::from(announced - left);
        let mismatch = |actual: u64| ClientError::EnvironmentSizeMismatch { announced, actual };
        let end = |this: &mut Self, consumed: usize| {
            this.state = State::AwaitClose;
            Ok(Handled {
                consumed,
                status: Status::Event(ClientEvent::EndOfStream),
            })
        };
        // The count and the first entry are consumed together, so that `Partial` never
        // follows consumed bytes.
        let mut off = 0usize;
        let count = match vars {
            Some(0) => return end(self, 0),
            Some(c) => c,
            None if left == 0 => return end(self, 0),
            None => {
                if left < 4 {
                    return Err(self.fail(mismatch(used + 4)));
                }
                if input.len() < 4 {
                    return Ok(self.env_partial(input.len(), 4));
                }
                let c = u32::from_le_bytes([input[0], input[1], input[2], input[3]]);
                off = 4;
                left -= 4;
                if c == 0 {
                    if left != 0 {
                        return Err(self.fail(mismatch(used + 4)));
                    }
                    return end(self, 4);
                }
                c
            }
        };
        if left < 4 {
            return Err(self.fail(mismatch(used + off as u64 + 4)));
        }
        if input.len() < off + 4 {
            return Ok(self.env_partial(input.len(), off + 4));
        }
        let units =
            u32::from_le_bytes([input[off], input[off + 1], input[off + 2], input[off + 3]]);
        let entry_len = 4 + 2 * u64::from(units);
        if entry_len > u64::from(left) {
            return Err(self.fail(mismatch(used + off as u64 + entry_len)));
        }
        // Bounded by `left`, a u32.
        let entry_len = entry_len as usize;
        if input.len() < off + entry_len {
            return Ok(self.env_partial(input.len(), off + entry_len));
        }
        let text = match Reader::new(&input[off..off + entry_len]).text("environment") {
            Ok(t) => t,
            Err(detail) => {
                return Err(self.fail(ClientError::InvalidPayload {
                    request: Command::ProcessEnvironment,
                    detail,
                }))
            }
        };
        left -= entry_len as u32;
        let count = count - 1;
        if count == 0 && left != 0 {
            return Err(self.fail(mismatch(u64::from(announced - left))));
        }
        self.state = State::Environment {
            left,
            announced,
            vars: Some(count),
            pending: 0,
        };
        Ok(Handled {
            consumed: off + entry_len,
            status: Status::Event(ClientEvent::EnvironmentVariable(text)),
        })
    }

    /// Tells the machine the peer closed the connection (a read returned 0).
    ///
    /// Returns [`ClientEvent::EndOfStream`] when it ends an EventPipe stream or completes
    /// the environment block, `None` when the exchange was already complete (or a runtime
    /// closed its reverse connection after advertising), and an error
    /// when the close cut a message short ([`ClientError::UnexpectedEof`]) or came before
    /// any reply ([`ClientError::ClosedBeforeReply`]).
    pub fn handle_eof(&mut self) -> Result<Option<ClientEvent<'static>>, ClientError> {
        match self.state {
            State::AwaitAdvertise { pending } => Err(self.fail(ClientError::BadAdvertise(
                AdvertiseError::Truncated { available: pending },
            ))),
            // The runtime closed an idle reverse connection (it reconnects): not an error.
            State::Advertised => {
                self.state = State::Done;
                Ok(None)
            }
            State::Idle => Err(ClientError::Misuse(UsageError::NotSent)),
            State::Failed(e) => Err(e),
            State::Done | State::AwaitClose => {
                self.state = State::Done;
                Ok(None)
            }
            State::AwaitReply { pending: 0, .. } => Err(self.fail(ClientError::ClosedBeforeReply)),
            State::AwaitReply { pending, needed } => Err(self.fail(ClientError::UnexpectedEof {
                needed,
                available: pending,
            })),
            State::Stream => {
                self.state = State::Done;
                Ok(Some(ClientEvent::EndOfStream))
            }
            State::Environment {
                vars: Some(0),
                left: 0,
                ..
            } => {
                self.state = State::Done;
                Ok(Some(ClientEvent::EndOfStream))
            }
            State::Environment {
                left,
                announced,
                pending,
                ..
            } => Err(self.fail(ClientError::UnexpectedEof {
                needed: announced as usize,
                available: (announced - left) as usize + pending,
            })),
        }
    }
}
