//! Which request a call sends, and which older ones it falls back to: the command-version
//! policy of Microsoft.Diagnostics.NETCore.Client, written once.

use alloc::vec::Vec;

use crate::payload::dump::flags::LOGGING;
use crate::payload::eventpipe::DEFAULT_RUNDOWN_KEYWORD;
use crate::payload::{
    CollectTracing, CollectTracing2, CollectTracing3, CollectTracing4, CollectTracing5, DumpType,
    EventFilter, GenerateCoreDump, GenerateCoreDump2, GenerateCoreDump3, ProcessInfo, ProcessInfo2,
    ProcessInfo3, Provider, Request, StopTracing, StreamingProvider, StreamingSession, TraceFormat,
};
use crate::wire::{Command, Text};
use crate::AnyRequest;

use super::SessionError;

/// What a [`Call`](super::Call) asks a runtime, with the versions it may fall back to.
#[derive(Clone, Copy)]
#[non_exhaustive]
pub enum Ask<'a> {
    /// Process information as the official client gets it: ProcessInfo3, then ProcessInfo2,
    /// then ProcessInfo, each after UNKNOWN_COMMAND. The reply is passed up as an event
    /// ([`ProcessInfo::from_reply`](super::ProcessInfo::from_reply) owns it).
    ProcessInfo,
    /// ProcessInfo (0x0400) only: one round trip, no entrypoint, version or RID.
    ProcessInfoBasic,
    /// The environment block: the size announcement is checked against `max_bytes`
    /// ([`SessionError::EnvironmentTooLarge`] before any entry), then each entry is passed
    /// up; the call is done once the block is whole.
    Environment {
        /// The largest block (bytes, as announced) accepted.
        max_bytes: u64,
    },
    /// A dump written by the runtime: GenerateCoreDump3, then 2, then GenerateCoreDump
    /// (which knows only the logging flag: with other flags that last fallback is
    /// [`SessionError::InvalidArgument`]).
    Dump {
        /// Path in the target's file system (`%p` expands to its pid).
        path: &'a str,
        /// What the dump holds.
        kind: DumpType,
        /// `dsipc::payload::dump::flags` bits.
        flags: u32,
    },
    /// StopTracing for a session; done once the runtime answers (which it does only after
    /// it flushed the session into the session's own connection).
    StopTracing {
        /// The session.
        session_id: u64,
    },
    /// One request whose OK reply is a status (ResumeRuntime, SetEnvironmentVariable,
    /// EnablePerfMap, ApplyStartupHook, AttachProfiler, ...): a failure status or an error
    /// reply is typed, nothing is passed up.
    Status(AnyRequest<'a>),
    /// One request of any type (one of a newer runtime's commands, say), every event
    /// passed up as it comes (error replies included): for commands this layer has no
    /// policy for. Not for EventPipe sessions.
    Raw(&'a (dyn Request + Sync)),
}

impl core::fmt::Debug for Ask<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Ask::ProcessInfo => f.write_str("ProcessInfo"),
            Ask::ProcessInfoBasic => f.write_str("ProcessInfoBasic"),
            Ask::Environment { max_bytes } => f
                .debug_struct("Environment")
                .field("max_bytes", max_bytes)
                .finish(),
            Ask::Dump { path, kind, flags } => f
                .debug_struct("Dump")
                .field("path", path)
                .field("kind", kind)
                .field("flags", flags)
                .finish(),
            Ask::StopTracing { session_id } => f
                .debug_struct("StopTracing")
                .field("session_id", session_id)
                .finish(),
            Ask::Status(r) => f.debug_tuple("Status").field(r).finish(),
            Ask::Raw(r) => f.debug_tuple("Raw").field(&r.command()).finish(),
        }
    }
}

impl<'a> Ask<'a> {
    /// The command of the first request tried (what a timeout names before any answer).
    pub fn command(&self) -> Command {
        match self {
            Ask::ProcessInfo => Command::ProcessInfo3,
            Ask::ProcessInfoBasic => Command::ProcessInfo,
            Ask::Environment { .. } => Command::ProcessEnvironment,
            Ask::Dump { .. } => Command::GenerateCoreDump3,
            Ask::StopTracing { .. } => Command::StopTracing,
            Ask::Status(r) => r.command(),
            Ask::Raw(r) => r.command(),
        }
    }

    /// Encodes the request tried at `attempt` into a link (`None`: nothing older carries
    /// the ask).
    pub(crate) fn link(
        &self,
        attempt: usize,
        buf: alloc::vec::Vec<u8>,
    ) -> Result<Option<super::link::Link>, SessionError> {
        match (self, attempt) {
            (Ask::Raw(r), 0) => {
                if r.command().is_collect_tracing() {
                    return Err(SessionError::InvalidArgument(
                        "EventPipe sessions start with start_tracing (session::Tracing), not a one-shot call",
                    ));
                }
                super::link::Link::new(*r, buf).map(Some)
            }
            (Ask::Raw(_), _) => Ok(None),
            _ => match self.request(attempt)? {
                Some(r) => super::link::Link::new(&r, buf).map(Some),
                None => Ok(None),
            },
        }
    }

    /// The requests of the attempts after the first, encoded (an attempt that cannot carry
    /// the ask holds why, and ends the list).
    pub(crate) fn fallbacks(&self) -> super::link::Fallbacks {
        let mut fallbacks = super::link::Fallbacks::default();
        for n in 1.. {
            match self.request(n) {
                Ok(Some(r)) => fallbacks.push(&r),
                Ok(None) => break,
                Err(e) => {
                    fallbacks.push_error(e);
                    break;
                }
            }
        }
        fallbacks
    }

    /// The request tried at `attempt` (0 is the first), or `None` when nothing older can
    /// carry the ask.
    pub(crate) fn request(&self, attempt: usize) -> Result<Option<AnyRequest<'a>>, SessionError> {
        Ok(Some(match (*self, attempt) {
            (Ask::ProcessInfo, 0) => AnyRequest::ProcessInfo3(ProcessInfo3),
            (Ask::ProcessInfo, 1) => AnyRequest::ProcessInfo2(ProcessInfo2),
            (Ask::ProcessInfo, 2) | (Ask::ProcessInfoBasic, 0) => {
                AnyRequest::ProcessInfo(ProcessInfo)
            }
            (Ask::Environment { .. }, 0) => {
                AnyRequest::ProcessEnvironment(crate::payload::ProcessEnvironment)
            }
            (Ask::Dump { path, kind, flags }, n @ 0..=2) => {
                if path.is_empty() {
                    return Err(SessionError::InvalidArgument("dump path is empty"));
                }
                let dump_name = Text::Str(path);
                let dump_type = kind;
                match n {
                    0 => AnyRequest::GenerateCoreDump3(GenerateCoreDump3 {
                        dump_name,
                        dump_type,
                        flags,
                    }),
                    1 => AnyRequest::GenerateCoreDump2(GenerateCoreDump2 {
                        dump_name,
                        dump_type,
                        flags,
                    }),
                    _ if flags & !LOGGING != 0 => {
                        return Err(SessionError::InvalidArgument(
                            "this runtime only knows GenerateCoreDump, whose only flag is logging",
                        ))
                    }
                    _ => AnyRequest::GenerateCoreDump(GenerateCoreDump {
                        dump_name,
                        dump_type,
                        diagnostics: flags & LOGGING,
                    }),
                }
            }
            (Ask::StopTracing { session_id }, 0) => {
                AnyRequest::StopTracing(StopTracing { session_id })
            }
            (Ask::Status(r), 0) => {
                if r.command().is_collect_tracing() {
                    return Err(SessionError::InvalidArgument(
                        "EventPipe sessions start with start_tracing (session::Tracing), not a one-shot call",
                    ));
                }
                r
            }
            _ => return Ok(None),
        }))
    }
}

/// AttachProfiler for a profiler the runtime waits up to `attach_timeout` for (whole
/// seconds on the wire, clamped to `u32`); the caller's budget for the reply is its own
/// timeout plus `attach_timeout`.
pub fn attach_profiler<'a>(
    attach_timeout: core::time::Duration,
    clsid: crate::wire::Guid,
    path: &'a str,
    client_data: &'a [u8],
) -> AnyRequest<'a> {
    AnyRequest::AttachProfiler(crate::payload::AttachProfiler {
        attach_timeout: attach_timeout.as_secs().min(u64::from(u32::MAX)) as u32,
        profiler_guid: clsid,
        profiler_path: Text::Str(path),
        client_data,
    })
}

/// Whether a session runs rundown (method and module metadata) when it stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rundown {
    /// The classic rundown ([`DEFAULT_RUNDOWN_KEYWORD`]): what dotnet-trace asks for.
    Default,
    /// No rundown.
    None,
    /// Rundown with this keyword (CollectTracing4, .NET 9+); 0 is [`Rundown::None`] and
    /// [`DEFAULT_RUNDOWN_KEYWORD`] is [`Rundown::Default`].
    Keyword(u64),
}

impl From<bool> for Rundown {
    /// CollectTracing2's `request_rundown`: the classic rundown, or none.
    fn from(on: bool) -> Self {
        if on {
            Rundown::Default
        } else {
            Rundown::None
        }
    }
}

impl Rundown {
    /// The keyword this asks for (0: none).
    pub fn keyword(self) -> u64 {
        match self {
            Rundown::Default => DEFAULT_RUNDOWN_KEYWORD,
            Rundown::None => 0,
            Rundown::Keyword(k) => k,
        }
    }
}

/// What an EventPipe session collects; [`TraceConfig::command`] is the version it starts with.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TraceConfig<'a> {
    /// The providers (1 to 1000).
    pub providers: Vec<Provider<'a>>,
    /// Per-provider event filters (CollectTracing5, .NET 10+): empty for none, else one per
    /// provider, in the same order.
    pub event_filters: Vec<EventFilter<'a>>,
    /// The session's circular buffer in MiB (dotnet-trace's default: 256).
    pub circular_buffer_mb: u32,
    /// The stream format (NetTrace).
    pub format: TraceFormat,
    /// Rundown at the stop (default: on, as dotnet-trace).
    pub rundown: Rundown,
    /// Collect a stack with each event (default: on).
    pub stackwalk: bool,
}

/// dotnet-trace's default circular buffer, MiB.
pub const DEFAULT_CIRCULAR_BUFFER_MB: u32 = 256;

impl<'a> TraceConfig<'a> {
    /// `providers` with dotnet-trace's defaults: a 256 MiB buffer, NetTrace, rundown and
    /// stacks on, no event filters.
    pub fn new(providers: &[Provider<'a>]) -> Self {
        TraceConfig {
            providers: providers.to_vec(),
            event_filters: Vec::new(),
            circular_buffer_mb: DEFAULT_CIRCULAR_BUFFER_MB,
            format: TraceFormat::NetTrace,
            rundown: Rundown::Default,
            stackwalk: true,
        }
    }

    /// Sets the circular buffer size (MiB).
    pub fn with_buffer_mb(mut self, mb: u32) -> Self {
        self.circular_buffer_mb = mb;
        self
    }

    /// Sets the rundown.
    pub fn with_rundown(mut self, rundown: Rundown) -> Self {
        self.rundown = rundown;
        self
    }

    /// Turns per-event stacks on or off.
    pub fn with_stackwalk(mut self, on: bool) -> Self {
        self.stackwalk = on;
        self
    }

    /// Sets one event filter per provider (CollectTracing5).
    pub fn with_event_filters(mut self, filters: &[EventFilter<'a>]) -> Self {
        self.event_filters = filters.to_vec();
        self
    }

    /// The command the session starts with: the lowest version the options need, as
    /// Microsoft.Diagnostics.NETCore.Client picks it: CollectTracing5 only for event
    /// filters, CollectTracing4 only for a rundown keyword other than none or the default,
    /// CollectTracing3 only to turn stacks off, else CollectTracing2.
    pub fn command(&self) -> Command {
        let custom_rundown =
            !(self.rundown.keyword() == 0 || self.rundown.keyword() == DEFAULT_RUNDOWN_KEYWORD);
        if !self.event_filters.is_empty() {
            Command::CollectTracing5
        } else if custom_rundown {
            Command::CollectTracing4
        } else if !self.stackwalk {
            Command::CollectTracing3
        } else {
            Command::CollectTracing2
        }
    }

    /// The requests to try in order: the one [`command`](Self::command) names, then the
    /// older ones that carry the same request exactly (only CollectTracing, for a
    /// CollectTracing2 with rundown: CollectTracing always runs rundown). Everything
    /// borrowed from `self` and `streaming` (the filtered providers' storage).
    pub(crate) fn plan<'s>(
        &'s self,
        streaming: &'s [StreamingProvider<'a>],
    ) -> Result<Vec<AnyRequest<'s>>, SessionError> {
        if !self.event_filters.is_empty() && self.event_filters.len() != self.providers.len() {
            return Err(SessionError::InvalidArgument(
                "event filters: one per provider, or none",
            ));
        }
        let providers = self.providers.as_slice().into();
        let (mb, format) = (self.circular_buffer_mb, self.format);
        let rundown = self.rundown.keyword() != 0;
        Ok(match self.command() {
            Command::CollectTracing5 => {
                alloc::vec![AnyRequest::CollectTracing5(CollectTracing5::Streaming(
                    StreamingSession {
                        circular_buffer_mb: mb,
                        format,
                        rundown_keyword: self.rundown.keyword(),
                        request_stackwalk: self.stackwalk,
                        providers: streaming.into(),
                    }
                ))]
            }
            Command::CollectTracing4 => alloc::vec![AnyRequest::CollectTracing4(CollectTracing4 {
                circular_buffer_mb: mb,
                format,
                rundown_keyword: self.rundown.keyword(),
                request_stackwalk: self.stackwalk,
                providers,
            })],
            Command::CollectTracing3 => alloc::vec![AnyRequest::CollectTracing3(CollectTracing3 {
                circular_buffer_mb: mb,
                format,
                request_rundown: rundown,
                request_stackwalk: false,
                providers,
            })],
            _ => {
                let v2 = AnyRequest::CollectTracing2(CollectTracing2 {
                    circular_buffer_mb: mb,
                    format,
                    request_rundown: rundown,
                    providers,
                });
                if rundown {
                    let v1 = AnyRequest::CollectTracing(CollectTracing {
                        circular_buffer_mb: mb,
                        format,
                        providers,
                    });
                    alloc::vec![v2, v1]
                } else {
                    alloc::vec![v2]
                }
            }
        })
    }

    /// The providers with their filters, for CollectTracing5 (empty without filters).
    pub(crate) fn streaming(&self) -> Vec<StreamingProvider<'a>> {
        self.providers
            .iter()
            .zip(self.event_filters.iter())
            .map(|(p, f)| StreamingProvider {
                provider: *p,
                filter: *f,
            })
            .collect()
    }
}
