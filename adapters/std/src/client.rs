//! [`DiagnosticsClient`]: one method per command, each on a fresh connection.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dsipc::conn::ClientEvent;
use dsipc::payload::{
    ApplyStartupHook, AttachProfiler, CollectTracing2, DisablePerfMap, DumpType, EnablePerfMap,
    GenerateCoreDump, GenerateCoreDump2, GenerateCoreDump3, PerfMapType, ProcessEnvironment,
    ProcessInfo as ProcessInfo1, ProcessInfo2, ProcessInfo3, Provider, Reply, Request,
    ResumeRuntime, SetEnvironmentVariable, StartupProfiler, StopTracing, TraceFormat,
};
use dsipc::wire::{Command, Guid, Hresult, Text};
use dsipc::AnyRequest;

use crate::drive;
use crate::session::TraceSession;
use crate::{Endpoint, Error, Transport};

/// Default timeout: the budget of one method call (connecting, sending, every reply, and
/// every fallback to an older command version).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Default bound on the environment block a runtime may announce (16 MiB: real
/// environments are a few KiB; Linux caps argv plus environment near 2 MiB by default).
pub const DEFAULT_MAX_ENVIRONMENT: u64 = 16 * 1024 * 1024;

/// A [`Text`] as a `String`, with U+FFFD for lone surrogates.
pub fn text_to_string(t: &Text<'_>) -> String {
    // The core's lossy transcoder has an ASCII fast path; one exactly sized allocation.
    let mut v = vec![0u8; t.utf8_len_lossy()];
    if t.to_utf8_lossy(&mut v).is_ok() {
        if let Ok(s) = String::from_utf8(v) {
            return s;
        }
    }
    // Unreachable in practice (the buffer is exactly the size asked for).
    t.chars_lossy().collect()
}

/// What ProcessInfo (any version) reported, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    /// The command that answered: ProcessInfo3, ProcessInfo2 or ProcessInfo.
    pub command: Command,
    /// Process id, in the target's pid namespace.
    pub pid: u64,
    /// Runtime instance cookie.
    pub cookie: Guid,
    /// Command line (on Linux the executable's path, then argv as the runtime saw it).
    pub command_line: String,
    /// Operating system (`Linux`, `Windows`, `macOS`).
    pub os: String,
    /// Architecture (`x64`, `arm64`, ...).
    pub arch: String,
    /// Entry assembly name (ProcessInfo2+; empty in hosted runtimes).
    pub entrypoint_assembly: Option<String>,
    /// CLR product version, such as `8.0.4` (ProcessInfo2+).
    pub clr_version: Option<String>,
    /// Runtime identifier, such as `linux-x64` (ProcessInfo3).
    pub runtime_identifier: Option<String>,
}

impl ProcessInfo {
    /// The runtime's major version (`8` of `8.0.4`); `None` when the reply carried no version
    /// (ProcessInfo, before ProcessInfo2).
    pub fn clr_major(&self) -> Option<u32> {
        self.clr_version.as_deref()?.split('.').next()?.parse().ok()
    }

    /// The owned form of a ProcessInfo, ProcessInfo2 or ProcessInfo3 reply (`command` is
    /// the request that got it); `None` for any other reply. For adapters over other I/O.
    pub fn from_reply(command: Command, reply: &Reply<'_>) -> Option<ProcessInfo> {
        // Narrow every version to the shared fields, keeping what the newer ones add.
        let (v2, rid) = match reply {
            Reply::ProcessInfo3(r) => (Some(r.as_process_info2()), Some(r.runtime_identifier)),
            Reply::ProcessInfo2(r) => (Some(*r), None),
            Reply::ProcessInfo(_) => (None, None),
            _ => return None,
        };
        let base = match (reply, &v2) {
            (Reply::ProcessInfo(r), _) => *r,
            (_, Some(v2)) => v2.as_process_info(),
            _ => return None,
        };
        let s = text_to_string;
        Some(ProcessInfo {
            command,
            pid: base.process_id,
            cookie: base.runtime_cookie,
            command_line: s(&base.command_line),
            os: s(&base.os),
            arch: s(&base.arch),
            entrypoint_assembly: v2.map(|v| s(&v.managed_entrypoint_assembly_name)),
            clr_version: v2.map(|v| s(&v.clr_product_version)),
            runtime_identifier: rid.map(|r| s(&r)),
        })
    }
}

/// A client of one runtime's diagnostic server. Every method opens its own connection,
/// sends one well-formed request, reads the reply within the timeout, and closes.
///
/// Cheap to clone; usable from several threads (the runtime serves one client at a time).
#[derive(Debug)]
pub struct DiagnosticsClient<T = Endpoint> {
    transport: Arc<T>,
    timeout: Duration,
    max_environment: u64,
}

impl<T> Clone for DiagnosticsClient<T> {
    fn clone(&self) -> Self {
        DiagnosticsClient {
            transport: Arc::clone(&self.transport),
            timeout: self.timeout,
            max_environment: self.max_environment,
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
        #[cfg(unix)]
        let endpoint = Endpoint::new(crate::unix::find_socket(pid, tmpdir)?);
        #[cfg(windows)]
        let endpoint = {
            let _ = tmpdir;
            crate::windows::endpoint_for_pid(pid)
        };
        Ok(Self::new(endpoint))
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
    /// A client over `transport`, with [`DEFAULT_TIMEOUT`].
    pub fn new(transport: T) -> Self {
        DiagnosticsClient {
            transport: Arc::new(transport),
            timeout: DEFAULT_TIMEOUT,
            max_environment: DEFAULT_MAX_ENVIRONMENT,
        }
    }

    /// Sets the timeout: the whole budget of each method call (connect, send, replies and
    /// fallbacks to older command versions together). For EventPipe sessions it bounds the
    /// start, the StopTracing reply, and the drain after the stop was answered.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Sets the largest environment block (bytes, as announced by the runtime) that
    /// [`process_environment`](Self::process_environment) accepts; past it the call fails
    /// with [`Error::EnvironmentTooLarge`] before reading any entry. Default
    /// [`DEFAULT_MAX_ENVIRONMENT`].
    pub fn with_max_environment(mut self, bytes: u64) -> Self {
        self.max_environment = bytes;
        self
    }

    /// The environment bound (see [`with_max_environment`](Self::with_max_environment)).
    pub fn max_environment(&self) -> u64 {
        self.max_environment
    }

    /// The deadline of a call starting now.
    fn call_deadline(&self) -> Instant {
        crate::deadline_after(self.timeout)
    }

    /// The timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The transport.
    pub fn transport(&self) -> &T {
        &self.transport
    }

    /// Low level: sends any request on a fresh connection and hands every event (reply,
    /// error reply, continuation) to `on_event`, within the timeout. Not for EventPipe
    /// sessions: use [`start_tracing`](Self::start_tracing).
    pub fn exchange<R, F>(&self, request: &R, on_event: F) -> Result<(), Error>
    where
        R: Request + ?Sized,
        F: FnMut(ClientEvent<'_>) -> Result<(), Error>,
    {
        self.exchange_within(request, self.timeout, self.call_deadline(), on_event)
    }

    /// One exchange by `deadline`; `timeout` is the budget reported in a timeout error.
    fn exchange_within<R, F>(
        &self,
        request: &R,
        timeout: Duration,
        deadline: Instant,
        on_event: F,
    ) -> Result<(), Error>
    where
        R: Request + ?Sized,
        F: FnMut(ClientEvent<'_>) -> Result<(), Error>,
    {
        let command = request.command();
        if command.is_collect_tracing() {
            return Err(Error::InvalidArgument(
                "EventPipe sessions go through start_tracing",
            ));
        }
        drive::run(
            request,
            |t| self.transport.connect(t),
            timeout,
            deadline,
            on_event,
        )
    }

    /// Sends a request whose OK reply is a status.
    fn status<R: Request + ?Sized>(&self, request: &R) -> Result<(), Error> {
        self.status_within(request, self.timeout, self.call_deadline())
    }

    fn status_within<R: Request + ?Sized>(
        &self,
        request: &R,
        timeout: Duration,
        deadline: Instant,
    ) -> Result<(), Error> {
        let command = request.command();
        self.exchange_within(request, timeout, deadline, |ev| expect_status(command, ev))
    }

    /// Process information, as the official client gets it: ProcessInfo3, then
    /// ProcessInfo2, then ProcessInfo when the runtime answers UNKNOWN_COMMAND.
    /// [`Error::NotSupported`] (for ProcessInfo) when even ProcessInfo is unknown, as on
    /// .NET Core 3.x. The three attempts share one timeout.
    pub fn process_info(&self) -> Result<ProcessInfo, Error> {
        let deadline = self.call_deadline();
        match self.process_info_with(&ProcessInfo3, deadline) {
            Err(e) if e.is_not_supported() => {}
            other => return other,
        }
        match self.process_info_with(&ProcessInfo2, deadline) {
            Err(e) if e.is_not_supported() => {}
            other => return other,
        }
        self.process_info_with(&ProcessInfo1, deadline)
    }

    /// ProcessInfo (0x0400) only: one round trip, no entrypoint, version or RID.
    pub fn process_info_basic(&self) -> Result<ProcessInfo, Error> {
        self.process_info_with(&ProcessInfo1, self.call_deadline())
    }

    fn process_info_with<R: Request>(
        &self,
        request: &R,
        deadline: Instant,
    ) -> Result<ProcessInfo, Error> {
        let command = request.command();
        let mut out = None;
        self.exchange_within(request, self.timeout, deadline, |ev| match ev {
            ClientEvent::Reply(r) => match ProcessInfo::from_reply(command, &r) {
                Some(info) => {
                    out = Some(info);
                    Ok(())
                }
                None => Err(Error::UnexpectedReply { command }),
            },
            other => Err(unexpected(command, other)),
        })?;
        out.ok_or(Error::UnexpectedReply { command })
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
        let command = Command::ProcessEnvironment;
        let limit = self.max_environment;
        let mut complete = false;
        self.exchange(&ProcessEnvironment, |ev| match ev {
            ClientEvent::Reply(Reply::ProcessEnvironment(r)) => {
                if u64::from(r.incoming_bytes) > limit {
                    return Err(Error::EnvironmentTooLarge {
                        announced: u64::from(r.incoming_bytes),
                        limit,
                    });
                }
                Ok(())
            }
            ClientEvent::EnvironmentVariable(t) => on_entry(&text_to_string(&t)),
            ClientEvent::EndOfStream => {
                complete = true;
                Ok(())
            }
            other => Err(unexpected(command, other)),
        })?;
        if !complete {
            return Err(Error::UnexpectedReply { command });
        }
        Ok(())
    }

    /// Sets `name` to `value` in the target's environment; `None` removes the variable.
    pub fn set_environment_variable(&self, name: &str, value: Option<&str>) -> Result<(), Error> {
        self.status(&SetEnvironmentVariable {
            name: Text::Str(name),
            value: value.into(),
        })
    }

    /// Resumes a runtime paused at startup (send it over the port that suspended it).
    pub fn resume_runtime(&self) -> Result<(), Error> {
        self.status(&ResumeRuntime)
    }

    /// Starts writing perf maps and/or jitdump (`/tmp/perf-PID.map`, `/tmp/jit-PID.dump`).
    pub fn enable_perf_map(&self, kind: PerfMapType) -> Result<(), Error> {
        if matches!(kind, PerfMapType::Disabled | PerfMapType::Unknown(_)) {
            return Err(Error::InvalidArgument(
                "perf map type must be All, JitDump or PerfMap",
            ));
        }
        self.status(&EnablePerfMap {
            perf_map_type: kind,
        })
    }

    /// Stops writing perf maps (the files stay).
    pub fn disable_perf_map(&self) -> Result<(), Error> {
        self.status(&DisablePerfMap)
    }

    /// Loads a startup hook assembly (absolute path): at once in a running runtime.
    pub fn apply_startup_hook(&self, path: &str) -> Result<(), Error> {
        if path.is_empty() {
            return Err(Error::InvalidArgument("startup hook path is empty"));
        }
        self.status(&ApplyStartupHook {
            startup_hook_path: Text::Str(path),
        })
    }

    /// Writes a dump to `path` (in the target's file system; `%p` expands to its pid) and
    /// returns once it is written. `flags` are `dsipc::payload::dump::flags` bits.
    ///
    /// Falls back like the official client: GenerateCoreDump3, 2, then 1 on
    /// UNKNOWN_COMMAND (version 1 only knows the logging flag). Dumps take a while:
    /// give this client a generous timeout.
    pub fn write_dump(&self, path: &str, kind: DumpType, flags: u32) -> Result<(), Error> {
        if path.is_empty() {
            return Err(Error::InvalidArgument("dump path is empty"));
        }
        let name = Text::Str(path);
        let (timeout, deadline) = (self.timeout, self.call_deadline());
        let v3 = GenerateCoreDump3 {
            dump_name: name,
            dump_type: kind,
            flags,
        };
        let v2 = GenerateCoreDump2 {
            dump_name: name,
            dump_type: kind,
            flags,
        };
        let newest_first: [&dyn Request; 2] = [&v3, &v2];
        for request in newest_first {
            match self.status_within(request, timeout, deadline) {
                Err(e) if e.is_not_supported() => {}
                other => return other,
            }
        }
        if flags & !dsipc::payload::dump::flags::LOGGING != 0 {
            return Err(Error::InvalidArgument(
                "this runtime only knows GenerateCoreDump, whose only flag is logging",
            ));
        }
        self.status_within(
            &GenerateCoreDump {
                dump_name: name,
                dump_type: kind,
                diagnostics: flags & dsipc::payload::dump::flags::LOGGING,
            },
            timeout,
            deadline,
        )
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
        let secs = attach_timeout.as_secs().min(u64::from(u32::MAX)) as u32;
        let budget = self.timeout.saturating_add(attach_timeout);
        self.status_within(
            &AttachProfiler {
                attach_timeout: secs,
                profiler_guid: clsid,
                profiler_path: Text::Str(path),
                client_data,
            },
            budget,
            crate::deadline_after(budget),
        )
    }

    /// Registers a profiler to load at startup (while the runtime is suspended).
    pub fn set_startup_profiler(&self, clsid: Guid, path: &str) -> Result<(), Error> {
        self.status(&StartupProfiler {
            profiler_guid: clsid,
            profiler_path: Text::Str(path),
        })
    }

    /// Sends StopTracing for `session_id` on a new connection. The runtime answers only
    /// after it has flushed the session into the trace connection, so whoever reads that
    /// connection must keep reading meanwhile (see [`TraceSession`]).
    pub fn stop_tracing(&self, session_id: u64) -> Result<(), Error> {
        let command = Command::StopTracing;
        self.exchange(&StopTracing { session_id }, |ev| match ev {
            ClientEvent::Reply(Reply::SessionId(_)) => Ok(()),
            other => Err(unexpected(command, other)),
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
        let command = request.command();
        let timeout = self.timeout;
        let deadline = crate::deadline_after(timeout);
        let mut ex = drive::open(&request, |t| self.transport.connect(t), timeout, deadline)?;
        let session_id = drive::await_session_id(&mut ex, command, timeout, deadline)?;
        Ok(TraceSession::new(ex, session_id, self.clone()))
    }

    /// Starts a NetTrace session with CollectTracing2 (known to .NET Core 3.0 and later).
    pub fn collect_tracing(
        &self,
        providers: &[Provider<'_>],
        circular_buffer_mb: u32,
        request_rundown: bool,
    ) -> Result<TraceSession<T>, Error> {
        self.start_tracing(CollectTracing2 {
            circular_buffer_mb,
            format: TraceFormat::NetTrace,
            request_rundown,
            providers: providers.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsipc::wire::Guid;

    fn info(version: Option<&str>) -> ProcessInfo {
        ProcessInfo {
            command: Command::ProcessInfo2,
            pid: 1,
            cookie: Guid::NIL,
            command_line: String::new(),
            os: String::new(),
            arch: String::new(),
            entrypoint_assembly: None,
            clr_version: version.map(str::to_string),
            runtime_identifier: None,
        }
    }

    #[test]
    fn clr_major_is_the_first_number_of_the_version() {
        assert_eq!(info(Some("8.0.4")).clr_major(), Some(8));
        assert_eq!(info(Some("10.0.0-preview.1")).clr_major(), Some(10));
        assert_eq!(info(Some("x.1")).clr_major(), None);
        assert_eq!(info(None).clr_major(), None);
    }
}
