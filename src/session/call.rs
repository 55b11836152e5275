//! [`Call`]: one command to a runtime, with its fallbacks to older versions, over as many
//! connections as they take, within one deadline.

use alloc::vec::Vec;

use crate::conn::ClientEvent;
use crate::payload::Reply;
use crate::recv::Poll;
use crate::wire::{Command, Hresult};

use super::link::{Fallbacks, Link, Phase};
use super::{text_to_string, Ask, Millis, SessionError};

/// What the caller of [`Call::poll`] does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step<'a> {
    /// Open a connection to the runtime, then call [`Call::connected`].
    Connect,
    /// Write these bytes in one write (.NET Core 3.1 reads a request with one read), then
    /// call [`Call::transmitted`].
    Transmit(&'a [u8]),
    /// Read into [`Call::read_buf`] and report it ([`Call::filled`], or [`Call::eof`] when
    /// the read returned 0); wait at most until [`Call::poll_timeout`].
    Receive,
    /// Close the connection: the runtime did not know the command, and an older version is
    /// tried next on a new connection ([`Step::Connect`] follows).
    Close,
    /// Something the runtime said (a reply, an environment entry, the end of a
    /// continuation), already judged: error replies never reach the caller as events
    /// (except for [`Ask::Raw`]), they end the call or make it fall back.
    Event(ClientEvent<'a>),
    /// The call is over and succeeded; close the connection.
    Done,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Driving the link.
    Active,
    /// The last request was unknown; the next one is ready in the link (after a Close).
    Reopen,
    Done,
    Failed(SessionError),
}

/// What a call asks, without the caller's borrows: what judging a reply needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ProcessInfo,
    ProcessInfoBasic,
    Environment { max_bytes: u64 },
    Dump,
    StopTracing,
    Status,
    Raw,
}

impl Kind {
    fn of(ask: &Ask<'_>) -> Kind {
        match *ask {
            Ask::ProcessInfo => Kind::ProcessInfo,
            Ask::ProcessInfoBasic => Kind::ProcessInfoBasic,
            Ask::Environment { max_bytes } => Kind::Environment { max_bytes },
            Ask::Dump { .. } => Kind::Dump,
            Ask::StopTracing { .. } => Kind::StopTracing,
            Ask::Status(_) => Kind::Status,
            Ask::Raw(_) => Kind::Raw,
        }
    }
}

/// One command with its fallbacks: the policy of Microsoft.Diagnostics.NETCore.Client
/// (which version to send, what to do with UNKNOWN_COMMAND, what a reply must be), with no
/// I/O and no clock. See the [module docs](super) for the loop that drives it.
///
/// Every request it may send is encoded when it is built, so it borrows nothing from the
/// [`Ask`]: a call can be kept in any event loop's state for as long as it runs.
#[derive(Debug)]
pub struct Call {
    kind: Kind,
    fallbacks: Fallbacks,
    attempt: usize,
    link: Link,
    state: State,
    deadline: Millis,
    timeout_ms: u64,
    /// The environment block was whole (ProcessEnvironment).
    complete: bool,
    /// The command whose reply was passed up.
    answered: Option<Command>,
}

/// What the call does with an event.
enum Verdict {
    Pass,
    Fallback,
    Fail(SessionError),
}

impl Call {
    /// A call starting at `now` that must be over by `now + timeout_ms` (fallbacks share
    /// the budget). The first request is encoded at once: an ill-formed one is refused here,
    /// before any connection.
    pub fn new(ask: Ask<'_>, now: Millis, timeout_ms: u64) -> Result<Self, SessionError> {
        Self::with_buffer(ask, now, timeout_ms, Vec::new())
    }

    /// [`new`](Self::new), encoding into and receiving in `buf` (a buffer a previous call
    /// gave back with [`into_buffer`](Self::into_buffer)).
    pub fn with_buffer(
        ask: Ask<'_>,
        now: Millis,
        timeout_ms: u64,
        buf: Vec<u8>,
    ) -> Result<Self, SessionError> {
        let link = ask
            .link(0, buf)?
            .ok_or(SessionError::Misuse("an ask with no request"))?;
        Ok(Call {
            kind: Kind::of(&ask),
            fallbacks: ask.fallbacks(),
            attempt: 0,
            link,
            state: State::Active,
            deadline: now.saturating_add(timeout_ms),
            timeout_ms,
            complete: false,
            answered: None,
        })
    }

    /// The command of the request in flight (or last tried).
    pub fn command(&self) -> Command {
        self.link.command
    }

    /// The command whose reply was passed up (for ProcessInfo: which version answered).
    pub fn answered_by(&self) -> Option<Command> {
        self.answered
    }

    /// True when the request must be followed by a file descriptor (user_events sessions).
    pub fn requires_fd_passing(&self) -> bool {
        self.link.machine.requires_fd_passing()
    }

    /// The time by which the caller must call [`poll`](Self::poll) again even if nothing
    /// arrives; `None` once the call is over.
    pub fn poll_timeout(&self) -> Option<Millis> {
        match self.state {
            State::Active | State::Reopen => Some(self.deadline),
            _ => None,
        }
    }

    /// The connection is open.
    pub fn connected(&mut self) -> Result<(), SessionError> {
        match self.state {
            State::Active => self.link.connected(),
            _ => Err(SessionError::Misuse("connected without a Connect step")),
        }
    }

    /// The bytes of [`Step::Transmit`] were written.
    pub fn transmitted(&mut self) -> Result<(), SessionError> {
        self.link.transmitted()
    }

    /// The spare space to read into (after [`Step::Receive`]).
    pub fn read_buf(&mut self) -> Result<&mut [u8], SessionError> {
        self.link.read_buf()
    }

    /// `n` bytes were read into [`read_buf`](Self::read_buf).
    pub fn filled(&mut self, n: usize) {
        self.link.rx.filled(n)
    }

    /// The runtime closed the connection (a read returned 0).
    pub fn eof(&mut self) {
        self.link.rx.eof()
    }

    /// The receive storage back, for the next call.
    pub fn into_buffer(self) -> Vec<u8> {
        self.link.into_buffer()
    }

    fn fail<T>(&mut self, e: SessionError) -> Result<T, SessionError> {
        self.state = State::Failed(e.clone());
        Err(e)
    }

    /// The next step at `now`. After an error the call is failed and repeats it.
    pub fn poll(&mut self, now: Millis) -> Result<Step<'_>, SessionError> {
        match &self.state {
            State::Failed(e) => return Err(e.clone()),
            State::Done => return Ok(Step::Done),
            State::Reopen => {
                let buf = self.link.take_buffer();
                match self.fallbacks.link(self.attempt, buf) {
                    Ok(Some(l)) => self.link = l,
                    Ok(None) => return self.fail(SessionError::Misuse("no fallback left")),
                    Err(e) => return self.fail(e),
                }
                self.state = State::Active;
                return Ok(Step::Connect);
            }
            State::Active => {}
        }
        if now >= self.deadline {
            let command = self.link.command;
            let timeout_ms = self.timeout_ms;
            return self.fail(SessionError::Timeout {
                command,
                timeout_ms,
            });
        }
        let link = &mut self.link;
        match link.phase {
            Phase::Connect => return Ok(Step::Connect),
            Phase::Transmit { .. } => {
                return Ok(Step::Transmit(link.transmit().unwrap_or(&[])));
            }
            Phase::Receive => {}
        }
        let command = link.command;
        let ev = match link.poll() {
            Ok(Poll::Event(ev)) => ev,
            Ok(Poll::NeedInput) => return Ok(Step::Receive),
            Ok(Poll::End) => {
                let e = match self.kind {
                    Kind::Environment { .. } if !self.complete => {
                        SessionError::UnexpectedReply { command }
                    }
                    _ if self.answered.is_none() && self.kind != Kind::Raw => {
                        SessionError::UnexpectedReply { command }
                    }
                    _ => {
                        self.state = State::Done;
                        return Ok(Step::Done);
                    }
                };
                self.state = State::Failed(e.clone());
                return Err(e);
            }
            Err(e) => {
                self.state = State::Failed(e.clone());
                return Err(e);
            }
        };
        match judge(self.kind, &self.fallbacks, command, &ev, self.attempt) {
            Verdict::Pass => {
                match ev {
                    ClientEvent::Reply(_) => self.answered = Some(command),
                    ClientEvent::EndOfStream => self.complete = true,
                    _ => {}
                }
                Ok(Step::Event(ev))
            }
            Verdict::Fallback => {
                self.attempt += 1;
                self.state = State::Reopen;
                Ok(Step::Close)
            }
            Verdict::Fail(e) => {
                self.state = State::Failed(e.clone());
                Err(e)
            }
        }
    }
}

/// What a call of `kind` makes of `ev`, the answer to `command` (attempt `attempt`).
fn judge(
    kind: Kind,
    fallbacks: &Fallbacks,
    command: Command,
    ev: &ClientEvent<'_>,
    attempt: usize,
) -> Verdict {
    if kind == Kind::Raw {
        return Verdict::Pass;
    }
    match ev {
        ClientEvent::Error(e) if e.hresult == Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND => {
            match fallbacks.has(attempt + 1) {
                Ok(true) => Verdict::Fallback,
                Ok(false) => Verdict::Fail(SessionError::NotSupported {
                    command,
                    hresult: e.hresult,
                }),
                Err(e) => Verdict::Fail(e),
            }
        }
        ClientEvent::Error(e) => Verdict::Fail(SessionError::ErrorReply {
            command,
            hresult: e.hresult,
            message: e.message.as_ref().map(text_to_string),
        }),
        ClientEvent::Reply(r) => match (kind, r) {
            (Kind::ProcessInfo | Kind::ProcessInfoBasic, Reply::ProcessInfo(_))
            | (Kind::ProcessInfo, Reply::ProcessInfo2(_) | Reply::ProcessInfo3(_))
            | (Kind::StopTracing, Reply::SessionId(_)) => Verdict::Pass,
            (Kind::Environment { max_bytes }, Reply::ProcessEnvironment(p)) => {
                let announced = u64::from(p.incoming_bytes);
                if announced > max_bytes {
                    Verdict::Fail(SessionError::EnvironmentTooLarge {
                        announced,
                        limit: max_bytes,
                    })
                } else {
                    Verdict::Pass
                }
            }
            (Kind::Status | Kind::Dump, Reply::Ok(h)) if h.is_success() => Verdict::Pass,
            (Kind::Status | Kind::Dump, Reply::Ok(h)) => Verdict::Fail(SessionError::ErrorReply {
                command,
                hresult: *h,
                message: None,
            }),
            _ => Verdict::Fail(SessionError::UnexpectedReply { command }),
        },
        ClientEvent::EnvironmentVariable(_) | ClientEvent::EndOfStream
            if matches!(kind, Kind::Environment { .. }) =>
        {
            Verdict::Pass
        }
        _ => Verdict::Fail(SessionError::UnexpectedReply { command }),
    }
}
