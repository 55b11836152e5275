//! EventPipe command set (0x02): StopTracing and CollectTracing 1 to 6.
//!
//! Field order follows the runtime's parser (`ds-eventpipe-protocol.c`): a provider is
//! `keywords, logLevel, provider_name, arguments`, and CollectTracing5/6 add an event filter
//! (and, for user_events sessions, a tracepoint configuration) after `arguments`.

use crate::error::{DecodeError, EncodeError};
use crate::payload::{u32_enum, Request};
use crate::wire::{Command, Reader, Seq, WireItem, Writer};

mod provider;
#[cfg(test)]
mod tests;

pub use provider::{
    EventFilter, Provider, StreamingProvider, TracepointConfig, TracepointSet, UserEventsProvider,
};

u32_enum! {
    /// The serialization format of an EventPipe stream.
    pub enum TraceFormat {
        /// 0: the legacy NetPerf format.
        NetPerf = 0,
        /// 1: NetTrace (V4), what dotnet-trace writes.
        NetTrace = 1,
    }
}

u32_enum! {
    /// What a streaming session does when its buffers are full (CollectTracing6).
    pub enum BufferingMode {
        /// 0: drop events (the default, lossy).
        Drop = 0,
        /// 1: block the producing threads until space is free (.NET 11+).
        Block = 1,
    }
}

/// The keyword the runtime uses for rundown when a session asks for it
/// (`requestRundown = true` equals `rundownKeyword = 0x80020139`).
pub const DEFAULT_RUNDOWN_KEYWORD: u64 = 0x8002_0139;

/// Largest provider count the runtime accepts (more crashes .NET 8.0.4).
pub const MAX_PROVIDERS: usize = 1000;

/// Highest EventPipe level (5, verbose); higher levels are rejected with BAD_ENCODING.
pub const MAX_LEVEL: u32 = 5;

fn validate_buffer(mb: u32) -> Result<(), EncodeError> {
    if mb == 0 {
        return Err(EncodeError::InvalidField {
            field: "circular_buffer_mb",
            reason: "must be at least 1 (0 crashes .NET 8)",
        });
    }
    Ok(())
}

fn validate_format(f: TraceFormat) -> Result<(), EncodeError> {
    match f {
        TraceFormat::NetPerf | TraceFormat::NetTrace => Ok(()),
        TraceFormat::Unknown(_) => Err(EncodeError::InvalidField {
            field: "format",
            reason: "must be NetPerf (0) or NetTrace (1); other values crash .NET 8",
        }),
    }
}

fn validate_providers<'a, T: WireItem<'a>>(
    providers: &Seq<'a, T>,
    each: impl Fn(&T) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    if providers.is_empty() || providers.len() > MAX_PROVIDERS {
        return Err(EncodeError::InvalidField {
            field: "providers",
            reason: "must hold 1 to 1000 providers",
        });
    }
    providers.iter().try_for_each(|p| each(&p))
}

/// The checks shared by CollectTracing 1 to 4.
fn validate_classic(
    circular_buffer_mb: u32,
    format: TraceFormat,
    providers: &Seq<'_, Provider<'_>>,
) -> Result<(), EncodeError> {
    validate_buffer(circular_buffer_mb)?;
    validate_format(format)?;
    validate_providers(providers, Provider::validate)
}

/// 0x0201: stop the session `session_id` (send it on a second connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct StopTracing {
    /// The id the CollectTracing reply gave.
    pub session_id: u64,
}

impl StopTracing {
    /// Decodes a payload.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        Ok(StopTracing {
            session_id: r.u64("session_id")?,
        })
    }
}

impl Request for StopTracing {
    fn command(&self) -> Command {
        Command::StopTracing
    }
    fn payload_len(&self) -> usize {
        8
    }
    fn write_payload(&self, w: &mut Writer<'_>) {
        w.u64(self.session_id)
    }
}

/// 0x0202: start a session streaming on this connection (rundown implied).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct CollectTracing<'a> {
    /// Size of the session's circular buffer in MiB (at least 1).
    pub circular_buffer_mb: u32,
    /// Stream format.
    pub format: TraceFormat,
    /// Providers to enable (1 to 1000).
    pub providers: Seq<'a, Provider<'a>>,
}

/// 0x0203: as [`CollectTracing`], choosing whether rundown runs at the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct CollectTracing2<'a> {
    /// Size of the session's circular buffer in MiB (at least 1).
    pub circular_buffer_mb: u32,
    /// Stream format.
    pub format: TraceFormat,
    /// Run rundown (method and module metadata) when the session stops.
    pub request_rundown: bool,
    /// Providers to enable (1 to 1000).
    pub providers: Seq<'a, Provider<'a>>,
}

/// 0x0204: as [`CollectTracing2`], choosing whether stacks are collected. Not answered by
/// .NET 8.0.4 (UNKNOWN_COMMAND): fall back to CollectTracing2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct CollectTracing3<'a> {
    /// Size of the session's circular buffer in MiB (at least 1).
    pub circular_buffer_mb: u32,
    /// Stream format.
    pub format: TraceFormat,
    /// Run rundown when the session stops.
    pub request_rundown: bool,
    /// Collect a stack for each event.
    pub request_stackwalk: bool,
    /// Providers to enable (1 to 1000).
    pub providers: Seq<'a, Provider<'a>>,
}

/// 0x0205: as [`CollectTracing3`] with an explicit rundown keyword (.NET 9+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct CollectTracing4<'a> {
    /// Size of the session's circular buffer in MiB (at least 1).
    pub circular_buffer_mb: u32,
    /// Stream format.
    pub format: TraceFormat,
    /// Rundown keyword; 0 disables rundown, [`DEFAULT_RUNDOWN_KEYWORD`] is the classic one.
    pub rundown_keyword: u64,
    /// Collect a stack for each event.
    pub request_stackwalk: bool,
    /// Providers to enable (1 to 1000).
    pub providers: Seq<'a, Provider<'a>>,
}

/// The streaming form of CollectTracing5/6 (`session_type = 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct StreamingSession<'a> {
    /// Size of the session's circular buffer in MiB (at least 1).
    pub circular_buffer_mb: u32,
    /// Stream format.
    pub format: TraceFormat,
    /// Rundown keyword; 0 disables rundown.
    pub rundown_keyword: u64,
    /// Collect a stack for each event.
    pub request_stackwalk: bool,
    /// Providers with event filters (1 to 1000).
    pub providers: Seq<'a, StreamingProvider<'a>>,
}

/// The user_events form of CollectTracing5/6 (`session_type = 1`, Linux only).
///
/// The runtime expects the `user_events_data` file descriptor by `SCM_RIGHTS` right after
/// the request, before it replies; see [`crate::conn::ClientConnection::requires_fd_passing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct UserEventsSession<'a> {
    /// Rundown keyword; 0 disables rundown.
    pub rundown_keyword: u64,
    /// Providers with event filters and tracepoints (1 to 1000).
    pub providers: Seq<'a, UserEventsProvider<'a>>,
}

/// 0x0206: a streaming or user_events session, with per-provider event filters (.NET 10+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum CollectTracing5<'a> {
    /// `session_type = 0`: nettrace streamed on this connection.
    Streaming(StreamingSession<'a>),
    /// `session_type = 1`: events written to user_events tracepoints.
    UserEvents(UserEventsSession<'a>),
}

/// 0x0207: CollectTracing5 plus a trailing buffering mode for streaming sessions (.NET 11+).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum CollectTracing6<'a> {
    /// `session_type = 0`, followed by the buffering mode.
    Streaming {
        /// The session.
        session: StreamingSession<'a>,
        /// What to do when buffers are full.
        buffering_mode: BufferingMode,
    },
    /// `session_type = 1` (no buffering mode is sent for these).
    UserEvents(UserEventsSession<'a>),
}

impl<'a> CollectTracing<'a> {
    /// Decodes a payload.
    pub fn decode(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        Ok(CollectTracing {
            circular_buffer_mb: r.u32("circular_buffer_mb")?,
            format: r.u32("format")?.into(),
            providers: Seq::decode(&mut r, "providers")?,
        })
    }
}

impl Request for CollectTracing<'_> {
    fn command(&self) -> Command {
        Command::CollectTracing
    }
    fn payload_len(&self) -> usize {
        8 + self.providers.encoded_len()
    }
    fn write_payload(&self, w: &mut Writer<'_>) {
        w.u32(self.circular_buffer_mb);
        w.u32(self.format.into());
        self.providers.encode(w);
    }
    fn validate(&self) -> Result<(), EncodeError> {
        validate_classic(self.circular_buffer_mb, self.format, &self.providers)
    }
}

impl<'a> CollectTracing2<'a> {
    /// Decodes a payload.
    pub fn decode(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        Ok(CollectTracing2 {
            circular_buffer_mb: r.u32("circular_buffer_mb")?,
            format: r.u32("format")?.into(),
            request_rundown: r.bool("request_rundown")?,
            providers: Seq::decode(&mut r, "providers")?,
        })
    }
}

impl Request for CollectTracing2<'_> {
    fn command(&self) -> Command {
        Command::CollectTracing2
    }
    fn payload_len(&self) -> usize {
        9 + self.providers.encoded_len()
    }
    fn write_payload(&self, w: &mut Writer<'_>) {
        w.u32(self.circular_buffer_mb);
        w.u32(self.format.into());
        w.bool(self.request_rundown);
        self.providers.encode(w);
    }
    fn validate(&self) -> Result<(), EncodeError> {
        validate_classic(self.circular_buffer_mb, self.format, &self.providers)
    }
}

impl<'a> CollectTracing3<'a> {
    /// Decodes a payload.
    pub fn decode(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        Ok(CollectTracing3 {
            circular_buffer_mb: r.u32("circular_buffer_mb")?,
            format: r.u32("format")?.into(),
            request_rundown: r.bool("request_rundown")?,
            request_stackwalk: r.bool("request_stackwalk")?,
            providers: Seq::decode(&mut r, "providers")?,
        })
    }
}

impl Request for CollectTracing3<'_> {
    fn command(&self) -> Command {
        Command::CollectTracing3
    }
    fn payload_len(&self) -> usize {
        10 + self.providers.encoded_len()
    }
    fn write_payload(&self, w: &mut Writer<'_>) {
        w.u32(self.circular_buffer_mb);
        w.u32(self.format.into());
        w.bool(self.request_rundown);
        w.bool(self.request_stackwalk);
        self.providers.encode(w);
    }
    fn validate(&self) -> Result<(), EncodeError> {
        validate_classic(self.circular_buffer_mb, self.format, &self.providers)
    }
}

impl<'a> CollectTracing4<'a> {
    /// Decodes a payload.
    pub fn decode(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        Ok(CollectTracing4 {
            circular_buffer_mb: r.u32("circular_buffer_mb")?,
            format: r.u32("format")?.into(),
            rundown_keyword: r.u64("rundown_keyword")?,
            request_stackwalk: r.bool("request_stackwalk")?,
            providers: Seq::decode(&mut r, "providers")?,
        })
    }
}

impl Request for CollectTracing4<'_> {
    fn command(&self) -> Command {
        Command::CollectTracing4
    }
    fn payload_len(&self) -> usize {
        17 + self.providers.encoded_len()
    }
    fn write_payload(&self, w: &mut Writer<'_>) {
        w.u32(self.circular_buffer_mb);
        w.u32(self.format.into());
        w.u64(self.rundown_keyword);
        w.bool(self.request_stackwalk);
        self.providers.encode(w);
    }
    fn validate(&self) -> Result<(), EncodeError> {
        validate_classic(self.circular_buffer_mb, self.format, &self.providers)
    }
}

impl<'a> StreamingSession<'a> {
    fn payload_len(&self) -> usize {
        4 + 4 + 4 + 8 + 1 + self.providers.encoded_len()
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.u32(0);
        w.u32(self.circular_buffer_mb);
        w.u32(self.format.into());
        w.u64(self.rundown_keyword);
        w.bool(self.request_stackwalk);
        self.providers.encode(w);
    }
    /// Decodes the fields after `session_type`.
    fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(StreamingSession {
            circular_buffer_mb: r.u32("circular_buffer_mb")?,
            format: r.u32("format")?.into(),
            rundown_keyword: r.u64("rundown_keyword")?,
            request_stackwalk: r.bool("request_stackwalk")?,
            providers: Seq::decode(r, "providers")?,
        })
    }
    fn validate(&self) -> Result<(), EncodeError> {
        validate_buffer(self.circular_buffer_mb)?;
        validate_format(self.format)?;
        validate_providers(&self.providers, |p| p.provider.validate())
    }
}

impl<'a> UserEventsSession<'a> {
    fn payload_len(&self) -> usize {
        4 + 8 + self.providers.encoded_len()
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.u32(1);
        w.u64(self.rundown_keyword);
        self.providers.encode(w);
    }
    fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(UserEventsSession {
            rundown_keyword: r.u64("rundown_keyword")?,
            providers: Seq::decode(r, "providers")?,
        })
    }
    fn validate(&self) -> Result<(), EncodeError> {
        validate_providers(&self.providers, |p| {
            p.provider.validate()?;
            let tc = &p.tracepoint_config;
            if tc.default_tracepoint_name.is_null() && tc.tracepoints.is_empty() {
                return Err(EncodeError::InvalidField {
                    field: "tracepoint_config",
                    reason: "needs a default tracepoint name or at least one tracepoint set",
                });
            }
            if !tc.default_tracepoint_name.is_null() && tc.default_tracepoint_name.is_empty() {
                return Err(EncodeError::InvalidField {
                    field: "default_tracepoint_name",
                    reason: "must be null or non-empty",
                });
            }
            tc.tracepoints.iter().try_for_each(|set| {
                if set.tracepoint_name.is_empty() || set.event_ids.is_empty() {
                    Err(EncodeError::InvalidField {
                        field: "tracepoints",
                        reason: "each set needs a name and at least one event id",
                    })
                } else {
                    Ok(())
                }
            })
        })
    }
}

fn decode_session_type(r: &mut Reader<'_>) -> Result<u32, DecodeError> {
    match r.u32("session_type")? {
        t @ (0 | 1) => Ok(t),
        other => Err(DecodeError::InvalidValue {
            field: "session_type",
            value: other as u64,
        }),
    }
}

impl<'a> CollectTracing5<'a> {
    /// Decodes a payload.
    pub fn decode(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        Ok(match decode_session_type(&mut r)? {
            0 => CollectTracing5::Streaming(StreamingSession::decode(&mut r)?),
            _ => CollectTracing5::UserEvents(UserEventsSession::decode(&mut r)?),
        })
    }
}

impl Request for CollectTracing5<'_> {
    fn command(&self) -> Command {
        Command::CollectTracing5
    }
    fn payload_len(&self) -> usize {
        match self {
            CollectTracing5::Streaming(s) => s.payload_len(),
            CollectTracing5::UserEvents(u) => u.payload_len(),
        }
    }
    fn write_payload(&self, w: &mut Writer<'_>) {
        match self {
            CollectTracing5::Streaming(s) => s.write(w),
            CollectTracing5::UserEvents(u) => u.write(w),
        }
    }
    fn validate(&self) -> Result<(), EncodeError> {
        match self {
            CollectTracing5::Streaming(s) => s.validate(),
            CollectTracing5::UserEvents(u) => u.validate(),
        }
    }
    fn requires_fd_passing(&self) -> bool {
        matches!(self, CollectTracing5::UserEvents(_))
    }
}

impl<'a> CollectTracing6<'a> {
    /// Decodes a payload.
    pub fn decode(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        Ok(match decode_session_type(&mut r)? {
            0 => CollectTracing6::Streaming {
                session: StreamingSession::decode(&mut r)?,
                buffering_mode: r.u32("buffering_mode")?.into(),
            },
            _ => CollectTracing6::UserEvents(UserEventsSession::decode(&mut r)?),
        })
    }
}

impl Request for CollectTracing6<'_> {
    fn command(&self) -> Command {
        Command::CollectTracing6
    }
    fn payload_len(&self) -> usize {
        match self {
            CollectTracing6::Streaming { session, .. } => session.payload_len() + 4,
            CollectTracing6::UserEvents(u) => u.payload_len(),
        }
    }
    fn write_payload(&self, w: &mut Writer<'_>) {
        match self {
            CollectTracing6::Streaming {
                session,
                buffering_mode,
            } => {
                session.write(w);
                w.u32((*buffering_mode).into());
            }
            CollectTracing6::UserEvents(u) => u.write(w),
        }
    }
    fn validate(&self) -> Result<(), EncodeError> {
        match self {
            CollectTracing6::Streaming {
                session,
                buffering_mode,
            } => {
                session.validate()?;
                match buffering_mode {
                    BufferingMode::Unknown(_) => Err(EncodeError::InvalidField {
                        field: "buffering_mode",
                        reason: "must be Drop (0) or Block (1)",
                    }),
                    _ => Ok(()),
                }
            }
            CollectTracing6::UserEvents(u) => u.validate(),
        }
    }
    fn requires_fd_passing(&self) -> bool {
        matches!(self, CollectTracing6::UserEvents(_))
    }
}
