//! Typed payloads: one module per command set, plus the server's replies.
//!
//! Every request type implements [`Request`]: it knows its [`Command`], its exact encoded
//! size, and how to write itself; [`Request::encode`] writes header and payload into a
//! caller's buffer in one go. Each type also has a `decode` (used by the server side) that
//! borrows strings and arrays from the payload. [`AnyRequest`] is the sum of them all.

pub mod dump;
pub mod eventpipe;
pub mod process;
pub mod profiler;
pub mod reply;

pub use dump::{DumpType, GenerateCoreDump, GenerateCoreDump2, GenerateCoreDump3};
pub use eventpipe::{
    BufferingMode, CollectTracing, CollectTracing2, CollectTracing3, CollectTracing4,
    CollectTracing5, CollectTracing6, EventFilter, Provider, StopTracing, StreamingProvider,
    StreamingSession, TraceFormat, TracepointConfig, TracepointSet, UserEventsProvider,
    UserEventsSession,
};
pub use process::{
    ApplyStartupHook, DisablePerfMap, EnablePerfMap, PerfMapType, ProcessEnvironment, ProcessInfo,
    ProcessInfo2, ProcessInfo3, ResumeRuntime, SetEnvironmentVariable,
};
pub use profiler::{AttachProfiler, StartupProfiler};
pub use reply::{
    ErrorReply, ProcessEnvironmentReply, ProcessInfo2Reply, ProcessInfo3Reply, ProcessInfoReply,
    Reply, ReplyKind, Response,
};

use crate::error::{DecodeError, EncodeError};
use crate::wire::{Command, Header, Writer, HEADER_LEN};

/// A request a client can send: one command with its payload.
pub trait Request {
    /// The command this request invokes.
    fn command(&self) -> Command;

    /// Exact size of the payload this request writes.
    fn payload_len(&self) -> usize;

    /// Writes the payload (exactly [`Request::payload_len`] bytes).
    fn write_payload(&self, w: &mut Writer<'_>);

    /// Rejects field values that real runtimes refuse or crash on. The default accepts all.
    fn validate(&self) -> Result<(), EncodeError> {
        Ok(())
    }

    /// True for a user_events session request (CollectTracing5/6 with `session_type = 1`):
    /// right after it, the client must pass the `user_events_data` file descriptor with
    /// `SCM_RIGHTS`, and the runtime replies only once it has it.
    fn requires_fd_passing(&self) -> bool {
        false
    }

    /// Size of the whole message, header included.
    fn encoded_len(&self) -> usize {
        HEADER_LEN + self.payload_len()
    }

    /// Validates, then writes header and payload to the start of `out`; returns the length.
    ///
    /// Fails with [`EncodeError::MessageTooLarge`] past 65,535 bytes (never truncates) and
    /// with [`EncodeError::BufferTooSmall`] carrying the size needed when `out` is short.
    fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        self.validate()?;
        encode_message(self.command(), self.payload_len(), out, |w| {
            self.write_payload(w)
        })
    }
}

/// Writes a header for `command` followed by a payload of `payload_len` bytes produced by
/// `write`. Shared by requests and replies.
pub(crate) fn encode_message(
    command: Command,
    payload_len: usize,
    out: &mut [u8],
    write: impl FnOnce(&mut Writer<'_>),
) -> Result<usize, EncodeError> {
    let header = Header::for_payload(command, payload_len)?;
    let total = header.size() as usize;
    let buf = out
        .get_mut(..total)
        .ok_or(EncodeError::BufferTooSmall { needed: total })?;
    let (head, body) = buf.split_at_mut(HEADER_LEN);
    header.emit(head)?;
    write_exact(payload_len, body, write)?;
    Ok(total)
}

/// Writes a payload of exactly `payload_len` bytes into `body` with `write`.
pub(crate) fn write_exact(
    payload_len: usize,
    body: &mut [u8],
    write: impl FnOnce(&mut Writer<'_>),
) -> Result<(), EncodeError> {
    let mut w = Writer::new(body);
    write(&mut w);
    match w.finish() {
        Some(n) if n == payload_len => Ok(()),
        // An encoder whose size disagrees with what it wrote: report rather than send garbage.
        _ => Err(EncodeError::InvalidField {
            field: "payload",
            reason: "encoder wrote a different length than it computed",
        }),
    }
}

macro_rules! u32_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident { $( $(#[$vdoc:meta])* $variant:ident = $value:literal, )* }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        #[non_exhaustive]
        pub enum $name {
            $( $(#[$vdoc])* $variant, )*
            /// A value this crate does not name.
            Unknown(u32),
        }

        impl From<u32> for $name {
            fn from(v: u32) -> Self {
                match v {
                    $( $value => $name::$variant, )*
                    other => $name::Unknown(other),
                }
            }
        }

        impl From<$name> for u32 {
            fn from(v: $name) -> u32 {
                match v {
                    $( $name::$variant => $value, )*
                    $name::Unknown(other) => other,
                }
            }
        }

        #[cfg(feature = "arbitrary")]
        impl<'a> arbitrary::Arbitrary<'a> for $name {
            fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
                Ok($name::from(u32::arbitrary(u)?))
            }
        }
    };
}
pub(crate) use u32_enum;

/// Any request, as the server side decodes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
#[allow(missing_docs)]
pub enum AnyRequest<'a> {
    GenerateCoreDump(GenerateCoreDump<'a>),
    GenerateCoreDump2(GenerateCoreDump2<'a>),
    GenerateCoreDump3(GenerateCoreDump3<'a>),
    StopTracing(StopTracing),
    CollectTracing(CollectTracing<'a>),
    CollectTracing2(CollectTracing2<'a>),
    CollectTracing3(CollectTracing3<'a>),
    CollectTracing4(CollectTracing4<'a>),
    CollectTracing5(CollectTracing5<'a>),
    CollectTracing6(CollectTracing6<'a>),
    AttachProfiler(AttachProfiler<'a>),
    StartupProfiler(StartupProfiler<'a>),
    ProcessInfo(ProcessInfo),
    ResumeRuntime(ResumeRuntime),
    ProcessEnvironment(ProcessEnvironment),
    SetEnvironmentVariable(SetEnvironmentVariable<'a>),
    ProcessInfo2(ProcessInfo2),
    EnablePerfMap(EnablePerfMap),
    DisablePerfMap(DisablePerfMap),
    ApplyStartupHook(ApplyStartupHook<'a>),
    ProcessInfo3(ProcessInfo3),
}

macro_rules! any_request_dispatch {
    ($self:ident, $r:ident => $e:expr) => {
        match $self {
            AnyRequest::GenerateCoreDump($r) => $e,
            AnyRequest::GenerateCoreDump2($r) => $e,
            AnyRequest::GenerateCoreDump3($r) => $e,
            AnyRequest::StopTracing($r) => $e,
            AnyRequest::CollectTracing($r) => $e,
            AnyRequest::CollectTracing2($r) => $e,
            AnyRequest::CollectTracing3($r) => $e,
            AnyRequest::CollectTracing4($r) => $e,
            AnyRequest::CollectTracing5($r) => $e,
            AnyRequest::CollectTracing6($r) => $e,
            AnyRequest::AttachProfiler($r) => $e,
            AnyRequest::StartupProfiler($r) => $e,
            AnyRequest::ProcessInfo($r) => $e,
            AnyRequest::ResumeRuntime($r) => $e,
            AnyRequest::ProcessEnvironment($r) => $e,
            AnyRequest::SetEnvironmentVariable($r) => $e,
            AnyRequest::ProcessInfo2($r) => $e,
            AnyRequest::EnablePerfMap($r) => $e,
            AnyRequest::DisablePerfMap($r) => $e,
            AnyRequest::ApplyStartupHook($r) => $e,
            AnyRequest::ProcessInfo3($r) => $e,
        }
    };
}

impl<'a> AnyRequest<'a> {
    /// Decodes the payload of `command`. Bytes after the last field are ignored, as the
    /// runtime ignores them. `Ok(None)` means the command is not a request this crate knows
    /// (the runtime answers those with UNKNOWN_COMMAND).
    pub fn decode(command: Command, payload: &'a [u8]) -> Result<Option<Self>, DecodeError> {
        Ok(Some(match command {
            Command::GenerateCoreDump => {
                AnyRequest::GenerateCoreDump(GenerateCoreDump::decode(payload)?)
            }
            Command::GenerateCoreDump2 => {
                AnyRequest::GenerateCoreDump2(GenerateCoreDump2::decode(payload)?)
            }
            Command::GenerateCoreDump3 => {
                AnyRequest::GenerateCoreDump3(GenerateCoreDump3::decode(payload)?)
            }
            Command::StopTracing => AnyRequest::StopTracing(StopTracing::decode(payload)?),
            Command::CollectTracing => AnyRequest::CollectTracing(CollectTracing::decode(payload)?),
            Command::CollectTracing2 => {
                AnyRequest::CollectTracing2(CollectTracing2::decode(payload)?)
            }
            Command::CollectTracing3 => {
                AnyRequest::CollectTracing3(CollectTracing3::decode(payload)?)
            }
            Command::CollectTracing4 => {
                AnyRequest::CollectTracing4(CollectTracing4::decode(payload)?)
            }
            Command::CollectTracing5 => {
                AnyRequest::CollectTracing5(CollectTracing5::decode(payload)?)
            }
            Command::CollectTracing6 => {
                AnyRequest::CollectTracing6(CollectTracing6::decode(payload)?)
            }
            Command::AttachProfiler => AnyRequest::AttachProfiler(AttachProfiler::decode(payload)?),
            Command::StartupProfiler => {
                AnyRequest::StartupProfiler(StartupProfiler::decode(payload)?)
            }
            Command::ProcessInfo => AnyRequest::ProcessInfo(ProcessInfo),
            Command::ResumeRuntime => AnyRequest::ResumeRuntime(ResumeRuntime),
            Command::ProcessEnvironment => AnyRequest::ProcessEnvironment(ProcessEnvironment),
            Command::SetEnvironmentVariable => {
                AnyRequest::SetEnvironmentVariable(SetEnvironmentVariable::decode(payload)?)
            }
            Command::ProcessInfo2 => AnyRequest::ProcessInfo2(ProcessInfo2),
            Command::EnablePerfMap => AnyRequest::EnablePerfMap(EnablePerfMap::decode(payload)?),
            Command::DisablePerfMap => AnyRequest::DisablePerfMap(DisablePerfMap),
            Command::ApplyStartupHook => {
                AnyRequest::ApplyStartupHook(ApplyStartupHook::decode(payload)?)
            }
            Command::ProcessInfo3 => AnyRequest::ProcessInfo3(ProcessInfo3),
            _ => return Ok(None),
        }))
    }
}

impl Request for AnyRequest<'_> {
    fn command(&self) -> Command {
        any_request_dispatch!(self, r => r.command())
    }
    fn payload_len(&self) -> usize {
        any_request_dispatch!(self, r => r.payload_len())
    }
    fn write_payload(&self, w: &mut Writer<'_>) {
        any_request_dispatch!(self, r => r.write_payload(w))
    }
    fn validate(&self) -> Result<(), EncodeError> {
        any_request_dispatch!(self, r => r.validate())
    }
    fn requires_fd_passing(&self) -> bool {
        any_request_dispatch!(self, r => r.requires_fd_passing())
    }
}

macro_rules! impl_from_any {
    ($($t:ident $(<$l:lifetime>)?),*) => {
        $( impl<'a> From<$t $(<$l>)?> for AnyRequest<'a> {
            fn from(r: $t $(<$l>)?) -> Self { AnyRequest::$t(r) }
        } )*
    };
}

impl_from_any!(
    GenerateCoreDump<'a>,
    GenerateCoreDump2<'a>,
    GenerateCoreDump3<'a>,
    StopTracing,
    CollectTracing<'a>,
    CollectTracing2<'a>,
    CollectTracing3<'a>,
    CollectTracing4<'a>,
    CollectTracing5<'a>,
    CollectTracing6<'a>,
    AttachProfiler<'a>,
    StartupProfiler<'a>,
    ProcessInfo,
    ResumeRuntime,
    ProcessEnvironment,
    SetEnvironmentVariable<'a>,
    ProcessInfo2,
    EnablePerfMap,
    DisablePerfMap,
    ApplyStartupHook<'a>,
    ProcessInfo3
);

/// Implements [`Request`] for a request without payload.
macro_rules! empty_request {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        #[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
        pub struct $name;

        impl crate::payload::Request for $name {
            fn command(&self) -> crate::wire::Command {
                crate::wire::Command::$name
            }
            fn payload_len(&self) -> usize {
                0
            }
            fn write_payload(&self, _w: &mut crate::wire::Writer<'_>) {}
        }
    };
}
pub(crate) use empty_request;
