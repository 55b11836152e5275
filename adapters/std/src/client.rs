//! [`DiagnosticsClient`]: one method per command, each on a fresh connection.

use std::sync::Arc;
use std::time::Duration;

use dsipc::conn::ClientEvent;
use dsipc::payload::{
    ApplyStartupHook, DisablePerfMap, DumpType, EnablePerfMap, PerfMapType, Provider, Reply,
    Request, ResumeRuntime, SetEnvironmentVariable, StartupProfiler,
};
use dsipc::session::{attach_profiler, Ask, ProcessInfoSink, TraceConfig, Tracing};
use dsipc::wire::{Command, Guid, Hresult, Text};
use dsipc::AnyRequest;

pub use dsipc::session::{text_to_string, ProcessInfo};

use crate::drive;
use crate::session::TraceSession;
use crate::{ClientOptions, Endpoint, Error, Transport};

pub use dsipc::session::{DEFAULT_MAX_ENVIRONMENT, DEFAULT_TIMEOUT};

/// A client of one runtime's diagnostic server. Every method opens its own connection,
/// sends one well-formed request, reads the reply within the timeout, and closes.
///
/// Cheap to clone; usable from several threads (the runtime serves one client at a time).
#[derive(Debug)]
pub struct DiagnosticsClient<T = Endpoint> {
    transport: Arc<T>,
    options: ClientOptions,
}

impl<T> Clone for DiagnosticsClient<T> {
    fn clone(&self) -> Self {
        DiagnosticsClient {
            transport: Arc::clone(&self.transport),
            options: self.options,
        }
    }
}

#[cfg(any(unix, windows))]
impl DiagnosticsClient<Endpoint> {
    /// The runtime of process `pid`: on Unix its socket, found with `unix::find_socket`
    /// (the target's TMPDIR, `/tmp`, then through `/proc/PID/root`); on Windows its pipe.
    pub fn for_pid(pid: u32) -> Result<Self, Error> {
        Self::for_pid_in(pid, None)
    }

    /// As [`for_pid`](Self::for_pid), searching only `tmpdir` when it is given (Unix;
    /// ignored on Windows, where the pipe name depends on the pid only).
    pub fn for_pid_in(pid: u32, tmpdir: Option<&std::path::Path>) -> Result<Self, Error> {
        Ok(Self::new(Endpoint::for_pid_in(pid, tmpdir)?))
    }
}

/// Checks a reply that carries only a status (the one rule, shared by dsipc-tokio).
pub fn expect_status(command: Command, ev: ClientEvent<'_>) -> Result<(), Error> {
    match ev {
        ClientEvent::Reply(Reply::Ok(h)) if h.is_success() => Ok(()),
        ClientEvent::Reply(Reply::Ok(h)) => Err(Error::ErrorReply {
            command,
            hresult: h,
            message: None,
        }),
        other => Err(unexpected(command, other)),
    }
}

/// The error for an event that is not the expected reply (error replies become typed
/// errors; shared by dsipc-tokio).
pub fn unexpected(command: Command, ev: ClientEvent<'_>) -> Error {
    match ev {
        ClientEvent::Error(e) if e.hresult == Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND => {
            Error::NotSupported {
                command,
                hresult: e.hresult,
            }
        }
        ClientEvent::Error(e) => Error::ErrorReply {
            command,
            hresult: e.hresult,
            message: e.message.as_ref().map(text_to_string),
        },
        _ => Error::UnexpectedReply { command },
    }
}

impl<T: Transport> DiagnosticsClient<T> {
    /// A client over `transport`, with the default [`ClientOptions`] ([`DEFAULT_TIMEOUT`]).
    pub fn new(transport: T) -> Self {
        DiagnosticsClient {
            transport: Arc::new(transport),
            options: ClientOptions::default(),
        }
    }

    dsipc_platform::client_option_methods!();

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// Low level: sends any request on a fresh connection and hands every event (reply,
    /// error reply, continuation) to `on_event`, within the timeout. Not for EventPipe
    /// sessions: use [`start_tracing`](Self::start_tracing).
    pub fn exchange<R, F>(&self, request: &R, mut on_event: F) -> Result<(), Error>
    where
        R: Request + Sync,
        F: FnMut(ClientEvent<'_>) -> Result<(), Error>,
    {
        self.call(Ask::Raw(request), self.timeout(), |_, ev| on_event(ev))
    }

    /// Runs `ask` (with its fallbacks, all within `timeout`) through the session layer's
    /// `Call`, handing each event it passes up to `on_event` with the command it answers.
    fn call<F>(&self, ask: Ask<'_>, timeout: Duration, on_event: F) -> Result<(), Error>
    where
        F: FnMut(Command, ClientEvent<'_>) -> Result<(), Error>,
    {
        drive::run_call(ask, |t| self.transport.connect(t), timeout, on_event)
    }

    /// Sends a request whose OK reply is a status.
    fn status<'a, R: Into<AnyRequest<'a>>>(&self, request: R) -> Result<(), Error> {
        self.call(Ask::Status(request.into()), self.timeout(), |_, _| Ok(()))
    }

    /// Process information, as the official client gets it: the session layer's
    /// [`Ask::ProcessInfo`], its newest version first and
    /// the older ones after UNKNOWN_COMMAND. [`Error::NotSupported`] (for ProcessInfo) when
    /// the runtime knows none, as .NET Core 3.x. The attempts share one timeout.
    pub fn process_info(&self) -> Result<ProcessInfo, Error> {
        self.process_info_with(Ask::ProcessInfo)
    }

    /// ProcessInfo (0x0400) only: one round trip, no entrypoint, version or RID.
    pub fn process_info_basic(&self) -> Result<ProcessInfo, Error> {
        self.process_info_with(Ask::ProcessInfoBasic)
    }

    fn process_info_with(&self, ask: Ask<'_>) -> Result<ProcessInfo, Error> {
        let mut sink = ProcessInfoSink::default();
        self.call(ask, self.timeout(), |c, ev| {
            sink.on_event(c, &ev);
            Ok(())
        })?;
        sink.finish()
            .map_err(|e| Error::from_session(e, self.timeout()))
    }

    /// The process environment: one `NAME=VALUE` entry per variable, in the runtime's order.
    /// A block announced larger than [`max_environment`](Self::max_environment) is
    /// [`Error::EnvironmentTooLarge`]; [`for_each_environment_variable`](Self::for_each_environment_variable)
    /// streams the entries instead of collecting them.
    pub fn process_environment(&self) -> Result<Vec<String>, Error> {
        let mut vars = Vec::new();
        self.for_each_environment_variable(|v| {
            vars.push(v.to_string());
            Ok(())
        })?;
        Ok(vars)
    }

    /// The process environment, handing each `NAME=VALUE` entry to `on_entry` as it
    /// arrives (memory stays bounded by the largest entry). Fails with
    /// [`Error::EnvironmentTooLarge`] before any entry when the runtime announces more than
    /// [`max_environment`](Self::max_environment) bytes, and with
    /// [`Error::UnexpectedReply`] when the block ends early. An error from `on_entry`
    /// ends the call.
    pub fn for_each_environment_variable<F>(&self, mut on_entry: F) -> Result<(), Error>
    where
        F: FnMut(&str) -> Result<(), Error>,
    {
        let ask = Ask::Environment {
            max_bytes: self.max_environment(),
        };
        self.call(ask, self.timeout(), |_, ev| match ev {
            ClientEvent::EnvironmentVariable(t) => on_entry(&text_to_string(&t)),
            _ => Ok(()),
        })
    }

    /// Sets `name` to `value` in the target's environment; `None` removes the variable.
    pub fn set_environment_variable(&self, name: &str, value: Option<&str>) -> Result<(), Error> {
        self.status(SetEnvironmentVariable {
            name: Text::Str(name),
            value: value.into(),
        })
    }

    /// Resumes a runtime paused at startup (send it over the port that suspended it).
    pub fn resume_runtime(&self) -> Result<(), Error> {
        self.status(ResumeRuntime)
    }

    /// Starts writing perf maps and/or jitdump (`/tmp/perf-PID.map`, `/tmp/jit-PID.dump`).
    pub fn enable_perf_map(&self, kind: PerfMapType) -> Result<(), Error> {
        if matches!(kind, PerfMapType::Disabled | PerfMapType::Unknown(_)) {
            return Err(Error::InvalidArgument(
                "perf map type must be All, JitDump or PerfMap",
            ));
        }
        self.status(EnablePerfMap {
            perf_map_type: kind,
        })
    }

    /// Stops writing perf maps (the files stay).
    pub fn disable_perf_map(&self) -> Result<(), Error> {
        self.status(DisablePerfMap)
    }

    /// Loads a startup hook assembly (absolute path): at once in a running runtime.
    pub fn apply_startup_hook(&self, path: &str) -> Result<(), Error> {
        if path.is_empty() {
            return Err(Error::InvalidArgument("startup hook path is empty"));
        }
        self.status(ApplyStartupHook {
            startup_hook_path: Text::Str(path),
        })
    }

    /// Writes a dump to `path` (in the target's file system; `%p` expands to its pid) and
    /// returns once it is written. `flags` are `dsipc::payload::dump::flags` bits.
    ///
    /// Falls back like the official client (the session layer's [`Ask::Dump`]): version
    /// 3, 2, then 1 on UNKNOWN_COMMAND (version 1 only knows the logging flag). Dumps take
    /// a while: give this client a generous timeout.
    pub fn write_dump(&self, path: &str, kind: DumpType, flags: u32) -> Result<(), Error> {
        let ask = Ask::Dump { path, kind, flags };
        self.call(ask, self.timeout(), |_, _| Ok(()))
    }

    /// Loads a profiler into the running runtime; the runtime waits up to
    /// `attach_timeout` (whole seconds) for it, so the reply wait is that plus the timeout.
    pub fn attach_profiler(
        &self,
        attach_timeout: Duration,
        clsid: Guid,
        path: &str,
        client_data: &[u8],
    ) -> Result<(), Error> {
        let request = attach_profiler(attach_timeout, clsid, path, client_data);
        let budget = self.timeout().saturating_add(attach_timeout);
        self.call(Ask::Status(request), budget, |_, _| Ok(()))
    }

    /// Registers a profiler to load at startup (while the runtime is suspended).
    pub fn set_startup_profiler(&self, clsid: Guid, path: &str) -> Result<(), Error> {
        self.status(StartupProfiler {
            profiler_guid: clsid,
            profiler_path: Text::Str(path),
        })
    }

    /// Sends StopTracing for `session_id` on a new connection. The runtime answers only
    /// after it has flushed the session into the trace connection, so whoever reads that
    /// connection must keep reading meanwhile (see [`TraceSession`]).
    pub fn stop_tracing(&self, session_id: u64) -> Result<(), Error> {
        self.call(Ask::StopTracing { session_id }, self.timeout(), |_, _| {
            Ok(())
        })
    }

    /// Starts an EventPipe session with any CollectTracing version, and returns once the
    /// runtime has accepted it. Read the stream with [`TraceSession::drain`] or
    /// [`TraceSession::copy_to`]. user_events sessions (CollectTracing5/6 with
    /// `UserEvents`) pass a descriptor: use `start_user_events_tracing` (Unix).
    pub fn start_tracing<'a, R>(&self, request: R) -> Result<TraceSession<T>, Error>
    where
        R: Into<AnyRequest<'a>>,
    {
        let request: AnyRequest<'a> = request.into();
        if !request.command().is_collect_tracing() {
            return Err(Error::InvalidArgument("not a CollectTracing request"));
        }
        if request.requires_fd_passing() {
            return Err(crate::fdpass::needs_descriptor());
        }
        let tracing = Tracing::with_request(request, 0, drive::millis_ceil(self.timeout()))
            .map_err(|e| Error::from_session(e, self.timeout()))?;
        crate::session::start(self, tracing, |_, _, _| Ok(()))
    }

    /// Starts a session collecting `config`, with the CollectTracing version the session
    /// layer picks for it ([`TraceConfig::command`]: the lowest the options need) and its
    /// fallbacks, and returns once the runtime has accepted it.
    pub fn start_session(&self, config: TraceConfig<'_>) -> Result<TraceSession<T>, Error> {
        let tracing = Tracing::new(config, 0, drive::millis_ceil(self.timeout()))
            .map_err(|e| Error::from_session(e, self.timeout()))?;
        crate::session::start(self, tracing, |_, _, _| Ok(()))
    }

    /// Starts a NetTrace session with `providers` and the session layer's defaults (the
    /// command version [`TraceConfig::command`](dsipc::session::TraceConfig::command)
    /// picks, known to .NET Core 3.0 and later, with its fallback when rundown is on).
    pub fn collect_tracing(
        &self,
        providers: &[Provider<'_>],
        circular_buffer_mb: u32,
        request_rundown: bool,
    ) -> Result<TraceSession<T>, Error> {
        self.start_session(
            TraceConfig::new(providers)
                .with_buffer_mb(circular_buffer_mb)
                .with_rundown(request_rundown.into()),
        )
    }
}
