//! [`DiagnosticsClient`]: one async method per command, each on a fresh connection.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll as TaskPoll};
use std::time::Duration;

use dsipc::conn::ClientEvent;
use dsipc::payload::{
    ApplyStartupHook, DisablePerfMap, DumpType, EnablePerfMap, PerfMapType, Provider, Request,
    ResumeRuntime, SetEnvironmentVariable, StartupProfiler,
};
use dsipc::session::{attach_profiler, Ask, ProcessInfoSink, TraceConfig, Tracing};
use dsipc::wire::{Command, Guid, Text};
use dsipc::AnyRequest;

use crate::conn::Target;
use crate::drive;
use crate::session::{self, TraceSession};
use crate::{ClientOptions, Endpoint, Error, ProcessInfo};

pub(crate) use dsipc::session::text_to_string;

/// Runs `fut` within `timeout`; past it, [`Error::Timeout`] for `command`.
pub(crate) fn within<F: Future>(command: Command, timeout: Duration, fut: F) -> Within<F> {
    Within {
        timed: tokio::time::timeout(timeout, fut),
        command,
        timeout,
    }
}

pin_project_lite::pin_project! {
    /// The future of [`within`]. A struct rather than an `async fn`: one would hold `fut`
    /// twice (its argument, then inside the `Timeout` it awaits), and a call's future is
    /// moved a few times on its way into a task.
    pub(crate) struct Within<F> {
        #[pin]
        timed: tokio::time::Timeout<F>,
        command: Command,
        timeout: Duration,
    }
}

impl<T, F: Future<Output = Result<T, Error>>> Future for Within<F> {
    type Output = Result<T, Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> TaskPoll<Self::Output> {
        let this = self.project();
        match this.timed.poll(cx) {
            TaskPoll::Pending => TaskPoll::Pending,
            TaskPoll::Ready(Ok(r)) => TaskPoll::Ready(r),
            TaskPoll::Ready(Err(_)) => TaskPoll::Ready(Err(Error::Timeout {
                command: *this.command,
                timeout: *this.timeout,
            })),
        }
    }
}

/// An async client of one runtime's diagnostic server. Every method opens its own
/// connection, sends one well-formed request, reads the reply within the timeout, and
/// closes.
///
/// **Cancel safety.** Every method is cancel safe: dropping its future (a `select!` branch
/// that lost, a timeout of your own) closes that call's connection and nothing else, so no
/// connection ever carries half a request or an unread reply into another call. The
/// runtime may still act on a request it received whole (a dump may still be written).
///
/// Cheap to clone; usable from several tasks (the runtime serves one client at a time).
#[derive(Debug, Clone)]
pub struct DiagnosticsClient {
    target: Arc<Target>,
    options: ClientOptions,
}

impl DiagnosticsClient {
    /// A client of the diagnostic server at `endpoint` (a Unix socket, or on Windows a
    /// pipe `\\.\pipe\NAME`), with the default [`ClientOptions`] ([`DEFAULT_TIMEOUT`](crate::DEFAULT_TIMEOUT)).
    pub fn new(endpoint: Endpoint) -> Self {
        Self::with_target(Target::Endpoint(endpoint))
    }

    pub(crate) fn with_target(target: Target) -> Self {
        DiagnosticsClient {
            target: Arc::new(target),
            options: ClientOptions::default(),
        }
    }

    /// The runtime of process `pid`: on Unix its socket, found as dsipc-std finds it (the
    /// target's TMPDIR, `/tmp`, then through `/proc/PID/root`); on Windows its pipe.
    #[cfg(any(unix, windows))]
    pub fn for_pid(pid: u32) -> Result<Self, Error> {
        Self::for_pid_in(pid, None)
    }

    /// As [`for_pid`](Self::for_pid), searching only `tmpdir` when it is given (Unix;
    /// ignored on Windows, where the pipe name depends on the pid only).
    #[cfg(any(unix, windows))]
    pub fn for_pid_in(pid: u32, tmpdir: Option<&Path>) -> Result<Self, Error> {
        Ok(Self::new(Endpoint::for_pid_in(pid, tmpdir)?))
    }

    dsipc_platform::client_option_methods!();

    /// The server's address (for a reverse connection: the reverse port's).
    pub fn address(&self) -> &Path {
        self.target.address()
    }

    /// Low level: sends any request on a fresh connection and hands every event (reply,
    /// error reply, continuation) to `on_event`, within the timeout. Not for EventPipe
    /// sessions: use [`start_tracing`](Self::start_tracing).
    pub async fn exchange<R, F>(&self, request: &R, mut on_event: F) -> Result<(), Error>
    where
        R: Request + Sync,
        F: FnMut(ClientEvent<'_>) -> Result<(), Error>,
    {
        self.call(Ask::Raw(request), self.timeout(), |_, ev| on_event(ev))
            .await
    }

    /// Runs `ask` (with its fallbacks, within `timeout`) through the session layer's `Call`,
    /// handing each event it passes up to `on_event` with the command it answers.
    fn call<'a, F>(
        &'a self,
        ask: Ask<'a>,
        timeout: Duration,
        on_event: F,
    ) -> Within<impl Future<Output = Result<(), Error>> + 'a>
    where
        F: FnMut(Command, ClientEvent<'_>) -> Result<(), Error> + 'a,
    {
        let command = ask.command();
        within(
            command,
            timeout,
            drive::run_call(&self.target, ask, timeout, on_event),
        )
    }

    /// Sends a request whose OK reply is a status, within the timeout.
    async fn status<'a, R: Into<AnyRequest<'a>>>(&self, request: R) -> Result<(), Error> {
        self.call(Ask::Status(request.into()), self.timeout(), |_, _| Ok(()))
            .await
    }

    /// Process information, as the official client gets it: the session layer's
    /// [`Ask::ProcessInfo`], its newest version first and
    /// the older ones after UNKNOWN_COMMAND (each on its own connection).
    /// [`Error::NotSupported`] when the runtime knows none, as .NET Core 3.x. The attempts
    /// share one timeout.
    pub async fn process_info(&self) -> Result<ProcessInfo, Error> {
        self.process_info_with(Ask::ProcessInfo).await
    }

    /// ProcessInfo (0x0400) only: one round trip, no entrypoint, version or RID.
    pub async fn process_info_basic(&self) -> Result<ProcessInfo, Error> {
        self.process_info_with(Ask::ProcessInfoBasic).await
    }

    async fn process_info_with(&self, ask: Ask<'_>) -> Result<ProcessInfo, Error> {
        let mut sink = ProcessInfoSink::default();
        self.call(ask, self.timeout(), |c, ev| {
            sink.on_event(c, &ev);
            Ok(())
        })
        .await?;
        sink.finish()
            .map_err(|e| Error::from_session(e, self.timeout()))
    }

    /// The process environment: one `NAME=VALUE` entry per variable, in the runtime's order.
    /// A block announced larger than [`max_environment`](Self::max_environment) is
    /// [`Error::EnvironmentTooLarge`] (before any entry is read); a block that ends early is
    /// [`Error::UnexpectedReply`].
    pub async fn process_environment(&self) -> Result<Vec<String>, Error> {
        let mut vars = Vec::new();
        let ask = Ask::Environment {
            max_bytes: self.max_environment(),
        };
        self.call(ask, self.timeout(), |_, ev| {
            if let ClientEvent::EnvironmentVariable(t) = ev {
                vars.push(text_to_string(&t));
            }
            Ok(())
        })
        .await?;
        Ok(vars)
    }

    /// Sets `name` to `value` in the target's environment; `None` removes the variable.
    pub async fn set_environment_variable(
        &self,
        name: &str,
        value: Option<&str>,
    ) -> Result<(), Error> {
        self.status(SetEnvironmentVariable {
            name: Text::Str(name),
            value: value.into(),
        })
        .await
    }

    /// Resumes a runtime paused at startup (send it over the port that suspended it).
    pub async fn resume_runtime(&self) -> Result<(), Error> {
        self.status(ResumeRuntime).await
    }

    /// Starts writing perf maps and/or jitdump (`/tmp/perf-PID.map`, `/tmp/jit-PID.dump`).
    pub async fn enable_perf_map(&self, kind: PerfMapType) -> Result<(), Error> {
        if matches!(kind, PerfMapType::Disabled | PerfMapType::Unknown(_)) {
            return Err(Error::InvalidArgument(
                "perf map type must be All, JitDump or PerfMap",
            ));
        }
        self.status(EnablePerfMap {
            perf_map_type: kind,
        })
        .await
    }

    /// Stops writing perf maps (the files stay).
    pub async fn disable_perf_map(&self) -> Result<(), Error> {
        self.status(DisablePerfMap).await
    }

    /// Loads a startup hook assembly (absolute path): at once in a running runtime.
    pub async fn apply_startup_hook(&self, path: &str) -> Result<(), Error> {
        if path.is_empty() {
            return Err(Error::InvalidArgument("startup hook path is empty"));
        }
        self.status(ApplyStartupHook {
            startup_hook_path: Text::Str(path),
        })
        .await
    }

    /// Writes a dump to `path` (in the target's file system; `%p` expands to its pid) and
    /// returns once it is written. `flags` are `dsipc::payload::dump::flags` bits.
    ///
    /// Falls back like the official client (the session layer's `Ask::Dump`):
    /// GenerateCoreDump3, 2, then 1 on UNKNOWN_COMMAND (version 1 only knows the logging
    /// flag); the attempts share one timeout. Dumps take a while: give this client a
    /// generous timeout.
    pub async fn write_dump(&self, path: &str, kind: DumpType, flags: u32) -> Result<(), Error> {
        let ask = Ask::Dump { path, kind, flags };
        self.call(ask, self.timeout(), |_, _| Ok(())).await
    }

    /// Loads a profiler into the running runtime; the runtime waits up to
    /// `attach_timeout` (whole seconds) for it, so the reply wait is that plus the timeout.
    pub async fn attach_profiler(
        &self,
        attach_timeout: Duration,
        clsid: Guid,
        path: &str,
        client_data: &[u8],
    ) -> Result<(), Error> {
        let request = attach_profiler(attach_timeout, clsid, path, client_data);
        let budget = self.timeout().saturating_add(attach_timeout);
        self.call(Ask::Status(request), budget, |_, _| Ok(())).await
    }

    /// Registers a profiler to load at startup (while the runtime is suspended).
    pub async fn set_startup_profiler(&self, clsid: Guid, path: &str) -> Result<(), Error> {
        self.status(StartupProfiler {
            profiler_guid: clsid,
            profiler_path: Text::Str(path),
        })
        .await
    }

    /// Sends StopTracing for `session_id` on a new connection. The runtime answers only
    /// after it has flushed the session into the trace connection, so that connection must
    /// keep being read meanwhile (see [`TraceSession`] and [`crate::StopHandle`]).
    pub async fn stop_tracing(&self, session_id: u64) -> Result<(), Error> {
        self.call(Ask::StopTracing { session_id }, self.timeout(), |_, _| {
            Ok(())
        })
        .await
    }

    /// Starts an EventPipe session with any CollectTracing version, and returns once the
    /// runtime has accepted it (within the timeout). Read the stream with
    /// [`TraceSession::next_chunk`] or as a `futures_core::Stream`. user_events sessions
    /// (which pass a descriptor) are not supported: [`Error::FdPassingUnsupported`].
    pub async fn start_tracing<'a, R>(&self, request: R) -> Result<TraceSession, Error>
    where
        R: Into<AnyRequest<'a>>,
    {
        let request: AnyRequest<'a> = request.into();
        let command = request.command();
        if !command.is_collect_tracing() {
            return Err(Error::InvalidArgument("not a CollectTracing request"));
        }
        if request.requires_fd_passing() {
            return Err(Error::FdPassingUnsupported);
        }
        let tracing = Tracing::with_request(request, 0, session::ms(self.timeout()))
            .map_err(|e| Error::from_session(e, self.timeout()))?;
        self.start(tracing).await
    }

    /// Starts a session collecting `config`, with the CollectTracing version the session
    /// layer picks for it (`TraceConfig::command`: the lowest the options need) and its
    /// fallbacks, and returns once the runtime has accepted it (within the timeout).
    pub async fn start_session(&self, config: TraceConfig<'_>) -> Result<TraceSession, Error> {
        let tracing = Tracing::new(config, 0, session::ms(self.timeout()))
            .map_err(|e| Error::from_session(e, self.timeout()))?;
        self.start(tracing).await
    }

    /// Starts `tracing` within the timeout (the session layer's bounds after a stop count
    /// the timeout too).
    async fn start(&self, tracing: Tracing) -> Result<TraceSession, Error> {
        let command = tracing.command();
        within(command, self.timeout(), session::start(self, tracing)).await
    }

    /// Starts a NetTrace session with `providers` and the session layer's defaults (the
    /// command version [`TraceConfig::command`](dsipc::session::TraceConfig::command)
    /// picks, known to .NET Core 3.0 and later, with its fallback when rundown is on).
    pub async fn collect_tracing(
        &self,
        providers: &[Provider<'_>],
        circular_buffer_mb: u32,
        request_rundown: bool,
    ) -> Result<TraceSession, Error> {
        self.start_session(
            TraceConfig::new(providers)
                .with_buffer_mb(circular_buffer_mb)
                .with_rundown(request_rundown.into()),
        )
        .await
    }

    /// Where this client's commands go.
    pub(crate) fn target(&self) -> &Target {
        &self.target
    }
}
