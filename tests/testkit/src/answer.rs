//! What the fake runtime says: its identity, per-command answers and EventPipe streams.

use std::path::{Path, PathBuf};
use std::time::Duration;

use dsipc::payload::ProcessInfo3Reply;
use dsipc::wire::{Guid, Hresult, Text};

/// Who the fake runtime claims to be: the ProcessInfo 1/2/3 fields and the Advertise.
/// [`Identity::net8`] looks like a .NET 8.0.4 runtime on linux-x64.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Process id (ProcessInfo, Advertise, and the `{pid}` of the socket name).
    pub pid: u64,
    /// Runtime instance cookie (ProcessInfo and Advertise).
    pub cookie: Guid,
    /// Command line.
    pub command_line: String,
    /// Operating system ("Linux").
    pub os: String,
    /// Architecture ("x64").
    pub arch: String,
    /// Managed entrypoint assembly (ProcessInfo2/3; "" for a hosted CLR).
    pub entrypoint: String,
    /// CLR product version (ProcessInfo2/3).
    pub clr_version: String,
    /// Runtime identifier (ProcessInfo3).
    pub runtime_identifier: String,
}

impl Identity {
    /// A .NET 8.0.4 runtime on linux-x64 with the given pid and cookie.
    pub fn net8(pid: u64, cookie: Guid) -> Self {
        Identity {
            pid,
            cookie,
            command_line: "/usr/share/dotnet/dotnet app.dll".to_string(),
            os: "Linux".to_string(),
            arch: "x64".to_string(),
            entrypoint: "app".to_string(),
            clr_version: "8.0.4".to_string(),
            runtime_identifier: "linux-x64".to_string(),
        }
    }
}

impl Identity {
    /// A .NET 8.0.4 runtime on win-x64 with the given pid and cookie.
    pub fn net8_windows(pid: u64, cookie: Guid) -> Self {
        Identity {
            pid,
            cookie,
            command_line: r"C:\Program Files\dotnet\dotnet.exe app.dll".to_string(),
            os: "Windows".to_string(),
            arch: "x64".to_string(),
            entrypoint: "app".to_string(),
            clr_version: "8.0.4".to_string(),
            runtime_identifier: "win-x64".to_string(),
        }
    }

    /// The ProcessInfo3 reply with every field (payload version 1); the older versions are
    /// built from it by the core ([`ServerConnection::send_process_info`](dsipc::ServerConnection::send_process_info)).
    pub fn process_info(&self) -> ProcessInfo3Reply<'_> {
        ProcessInfo3Reply {
            version: 1,
            process_id: self.pid,
            runtime_cookie: self.cookie,
            command_line: Text::Str(&self.command_line),
            os: Text::Str(&self.os),
            arch: Text::Str(&self.arch),
            managed_entrypoint_assembly_name: Text::Str(&self.entrypoint),
            clr_product_version: Text::Str(&self.clr_version),
            runtime_identifier: Text::Str(&self.runtime_identifier),
            extension: &[],
        }
    }

    /// [`net8_windows`](Self::net8_windows) on Windows, [`net8`](Self::net8) elsewhere.
    pub fn net8_here(pid: u64, cookie: Guid) -> Self {
        if cfg!(windows) {
            Identity::net8_windows(pid, cookie)
        } else {
            Identity::net8(pid, cookie)
        }
    }
}

/// How an EventPipe session streams after its OK reply. The bytes follow
/// [`pattern_byte`](crate::pattern_byte) from offset 0, so a reader can check every byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamSpec {
    /// Total bytes; `None` streams until StopTracing (for this session, on another
    /// connection), the client closing, or shutdown.
    pub len: Option<u64>,
    /// Bytes per write.
    pub chunk: usize,
    /// Sleep between writes (zero: as fast as the socket takes them).
    pub pause: Duration,
    /// End the stream (at its length or on StopTracing) with the nettrace end-of-stream
    /// bytes `06 01`, as a runtime that closes a session cleanly does. Without it the
    /// stream just stops, as a crashed runtime's does.
    pub end_marker: bool,
    /// The stream's bytes instead of the pattern (a whole nettrace stream, say; `len` is
    /// capped at its length). `'static` so the spec stays `Copy`: leak a buffer for it.
    pub content: Option<&'static [u8]>,
}

impl StreamSpec {
    /// Exactly `len` bytes, as fast as the reader takes them, then the stream ends (the
    /// connection closes) without a StopTracing.
    pub fn bytes(len: u64) -> Self {
        StreamSpec {
            len: Some(len),
            chunk: 64 * 1024,
            pause: Duration::ZERO,
            end_marker: false,
            content: None,
        }
    }

    /// Exactly `content`, as fast as the reader takes it, then the stream ends.
    pub fn content(content: &'static [u8]) -> Self {
        StreamSpec {
            content: Some(content),
            ..StreamSpec::bytes(content.len() as u64)
        }
    }

    /// Ends the stream with the nettrace end-of-stream bytes (see
    /// [`end_marker`](Self::end_marker)).
    pub fn with_end_marker(mut self) -> Self {
        self.end_marker = true;
        self
    }

    /// `chunk` bytes every `pause` until StopTracing arrives (or the client closes).
    pub fn until_stopped(chunk: usize, pause: Duration) -> Self {
        StreamSpec {
            len: None,
            chunk,
            pause,
            end_marker: false,
            content: None,
        }
    }
}

impl Default for StreamSpec {
    /// 16 KiB every 5 ms (about 3 MB/s, a busy runtime) until stopped.
    fn default() -> Self {
        StreamSpec::until_stopped(16 * 1024, Duration::from_millis(5))
    }
}

/// What the fake runtime does with one command. Set per command with
/// [`Config::answer`](crate::Config::answer) or
/// [`FakeRuntime::set_answer`](crate::FakeRuntime::set_answer).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answer {
    /// What a .NET 8 runtime does: ProcessInfo 1/2/3 from the [`Identity`], the environment
    /// block for ProcessEnvironment, a session id and the configured stream for every
    /// CollectTracing version, the session id echoed for StopTracing (after that session's
    /// stream ended), SetEnvironmentVariable applied to the environment, and OK for the rest.
    Default,
    /// An OK reply carrying this HRESULT (commands whose reply is a status only).
    Status(Hresult),
    /// An error reply (24 bytes), then close.
    Error(Hresult),
    /// An error reply with a message after the HRESULT (GenerateCoreDump3's form), then close.
    ErrorWithMessage(Hresult, String),
    /// For CollectTracing: a session id, then this stream instead of the configured one.
    Stream(StreamSpec),
    /// These bytes instead of a reply (a malformed server), then close.
    Raw(Vec<u8>),
    /// These bytes (a partial header, or a header announcing more than follows), then
    /// [`Then`]: a stall, a trickle or a flood of zero bytes, until the client leaves.
    RawThen(Vec<u8>, Then),
    /// Close without replying (as a runtime that crashed on the request).
    Close,
    /// Never reply: hold the connection until the client closes it (or the idle timeout).
    Hang,
    /// For StopTracing: answer with the session id, as if stopped, but let the session
    /// stream on (a runtime that ignores the stop). Other commands: [`Answer::Default`].
    IgnoreStop,
    /// For ProcessEnvironment: an OK reply announcing this many bytes, then the configured
    /// entries over and over until that many bytes were sent or the client left (a runtime
    /// announcing gigabytes). Other commands: [`Answer::Default`].
    EnvironmentAnnouncing(u32),
    /// The first `bytes` bytes of what [`Answer::Default`] sends (the reply, then any
    /// continuation: environment block or EventPipe stream), then the connection closes
    /// without waiting for the client: a runtime that dies mid-reply.
    Vanish {
        /// Bytes written before closing.
        bytes: usize,
    },
    /// For GenerateCoreDump (every version): puts this at the path the request names
    /// instead of a dump, then answers OK (a runtime that answers a dump request with a
    /// file of its choosing). Other commands: [`Answer::Default`].
    Dump(DumpPlant),
}

/// What [`Answer::Dump`] puts at the dump's path.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DumpPlant {
    /// A symbolic link to this path.
    Symlink(PathBuf),
    /// A hard link to this file.
    HardLink(PathBuf),
    /// This file, renamed there (prepared by the test: another owner, say).
    Rename(PathBuf),
}

impl DumpPlant {
    /// Puts the plant at `at`.
    pub(crate) fn plant(&self, at: &Path) -> std::io::Result<()> {
        match self {
            #[cfg(unix)]
            DumpPlant::Symlink(to) => std::os::unix::fs::symlink(to, at),
            #[cfg(not(unix))]
            DumpPlant::Symlink(_) => Err(std::io::ErrorKind::Unsupported.into()),
            DumpPlant::HardLink(to) => std::fs::hard_link(to, at),
            DumpPlant::Rename(from) => std::fs::rename(from, at),
        }
    }
}

/// What [`Answer::RawThen`] does after its bytes, until the client closes (or the idle
/// timeout, or shutdown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Then {
    /// Nothing more: hold the connection open, silent.
    Stall,
    /// One zero byte every this long (a peer that keeps every read timer alive).
    Trickle(Duration),
    /// Zero bytes as fast as the client takes them (endless bytes after the reply).
    Flood,
}

impl Answer {
    /// The error reply a runtime gives for a command it does not know.
    pub fn unknown_command() -> Self {
        Answer::Error(Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND)
    }
}
