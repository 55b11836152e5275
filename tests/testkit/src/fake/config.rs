//! [`Config`]: what a [`FakeRuntime`] is, where it listens or connects, and how it answers.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use dsipc::wire::Guid;
use dsipc::Command;

use super::FakeRuntime;
use crate::answer::{Answer, Identity, StreamSpec};
use crate::unique::{splitmix, unique};

/// Where a reverse-port runtime connects, and whether it waits for ResumeRuntime there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReversePort {
    /// The monitor's socket.
    pub path: PathBuf,
    /// `suspend` (the default of `DOTNET_DiagnosticPorts`): the fake runtime reports
    /// itself resumed only after ResumeRuntime arrived on this port.
    pub suspend: bool,
}

/// Configuration of a [`FakeRuntime`]. Start from [`Config::new`] (a .NET 8 identity with
/// this process's pid and a fresh cookie) and chain the setters.
#[derive(Debug, Clone)]
pub struct Config {
    /// ProcessInfo fields and the Advertise.
    pub identity: Identity,
    /// The `{key}` of the socket name (the runtime uses the process start time).
    pub key: u64,
    /// Listen as `dotnet-diagnostic-{pid}-{key}-socket` in this directory (Unix; on
    /// Windows [`start`](Self::start) refuses it: use [`listen_path`](Self::listen_path)).
    pub listen_dir: Option<PathBuf>,
    /// Listen at exactly this address: a Unix socket path (mode 0600), or a Windows pipe
    /// `\\.\pipe\NAME` (for example `dsipc_std::windows::endpoint_for_pid(pid)`'s).
    pub listen_path: Option<PathBuf>,
    /// Also (or only) connect to a monitor's reverse port.
    pub reverse_port: Option<ReversePort>,
    /// Per-command answers; a command not listed gets [`Answer::Default`].
    pub answers: HashMap<Command, Answer>,
    /// The environment ProcessEnvironment reports (`NAME=VALUE` entries).
    pub environment: Vec<String>,
    /// The stream of CollectTracing sessions (unless an [`Answer::Stream`] overrides it).
    pub stream: StreamSpec,
    /// How long a connection may stay silent before the fake runtime drops it, and the
    /// write timeout of streams whose reader stalls. A real runtime waits forever; the
    /// default (60 s) only keeps a broken test from hanging.
    pub idle_timeout: Duration,
    /// The answer to every command not listed in [`answers`](Self::answers) (default
    /// [`Answer::Default`]; [`Answer::Hang`] makes a silent socket that accepts and never
    /// answers).
    pub default_answer: Answer,
    /// A delay before every answer (a slow runtime, like .NET Core 3.1 under load).
    pub reply_delay: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config::new()
    }
}

impl Config {
    /// A .NET 8 identity with this process's pid, a fresh cookie and key, the default
    /// stream, and no socket yet (add [`listen_in`](Self::listen_in) and/or
    /// [`reverse_port`](Self::reverse_port)).
    pub fn new() -> Self {
        let a = unique();
        let b = splitmix(a);
        let mut cookie = [0u8; 16];
        cookie[..8].copy_from_slice(&a.to_le_bytes());
        cookie[8..].copy_from_slice(&b.to_le_bytes());
        Config {
            identity: Identity::net8_here(u64::from(std::process::id()), Guid(cookie)),
            key: a % 1_000_000_000,
            listen_dir: None,
            listen_path: None,
            reverse_port: None,
            answers: HashMap::new(),
            environment: vec![
                "PATH=/usr/local/bin:/usr/bin:/bin".to_string(),
                "HOME=/home/app".to_string(),
                "DOTNET_gcServer=0".to_string(),
                "LANG=C.UTF-8".to_string(),
            ],
            stream: StreamSpec::default(),
            idle_timeout: Duration::from_secs(60),
            default_answer: Answer::Default,
            reply_delay: Duration::ZERO,
        }
    }

    /// Sets the socket key (`{key}` of the name; the CLI prefers the socket whose key is
    /// the process's start time).
    pub fn key(mut self, key: u64) -> Self {
        self.key = key;
        self
    }

    /// Sets the command line ProcessInfo reports.
    pub fn command_line(mut self, command_line: &str) -> Self {
        self.identity.command_line = command_line.to_string();
        self
    }

    /// Answers every command not set with [`answer`](Self::answer) with `answer`.
    pub fn default_answer(mut self, answer: Answer) -> Self {
        self.default_answer = answer;
        self
    }

    /// Waits `delay` before every answer.
    pub fn reply_delay(mut self, delay: Duration) -> Self {
        self.reply_delay = delay;
        self
    }

    /// Makes the fake runtime refuse what .NET Core 3.1 does not know: ProcessInfo 1 to 3
    /// (and the other Process commands) get UNKNOWN_COMMAND.
    pub fn like_netcore31(self) -> Self {
        self.unknown(&[
            Command::ProcessInfo,
            Command::ProcessInfo2,
            Command::ProcessInfo3,
            Command::ProcessEnvironment,
            Command::SetEnvironmentVariable,
        ])
        .like_net8_0_4()
    }

    /// Listens in `dir` as `dotnet-diagnostic-{pid}-{key}-socket` (mode 0600).
    pub fn listen_in(mut self, dir: &Path) -> Self {
        self.listen_dir = Some(dir.to_path_buf());
        self
    }

    /// Listens at exactly `path`: a Unix socket path (mode 0600), or on Windows a pipe
    /// `\\.\pipe\NAME`.
    pub fn listen_at(mut self, path: &Path) -> Self {
        self.listen_path = Some(path.to_path_buf());
        self
    }

    /// Connects to the monitor at `path` (`DOTNET_DiagnosticPorts=path,connect[,suspend]`).
    pub fn reverse_port(mut self, path: &Path, suspend: bool) -> Self {
        self.reverse_port = Some(ReversePort {
            path: path.to_path_buf(),
            suspend,
        });
        self
    }

    /// Sets the process id.
    pub fn pid(mut self, pid: u64) -> Self {
        self.identity.pid = pid;
        self
    }

    /// Sets the runtime cookie.
    pub fn cookie(mut self, cookie: Guid) -> Self {
        self.identity.cookie = cookie;
        self
    }

    /// Answers `command` with `answer`.
    pub fn answer(mut self, command: Command, answer: Answer) -> Self {
        self.answers.insert(command, answer);
        self
    }

    /// Sets the stream of CollectTracing sessions.
    pub fn stream(mut self, stream: StreamSpec) -> Self {
        self.stream = stream;
        self
    }

    /// Sets the environment block.
    pub fn environment(mut self, vars: &[&str]) -> Self {
        self.environment = vars.iter().map(|v| v.to_string()).collect();
        self
    }

    /// Makes the fake runtime refuse what .NET 8.0.4 does not know: CollectTracing3 to 6
    /// get UNKNOWN_COMMAND.
    pub fn like_net8_0_4(self) -> Self {
        self.unknown(&[
            Command::CollectTracing3,
            Command::CollectTracing4,
            Command::CollectTracing5,
            Command::CollectTracing6,
        ])
    }

    /// Answers each of `commands` with UNKNOWN_COMMAND.
    fn unknown(mut self, commands: &[Command]) -> Self {
        for &c in commands {
            self.answers.insert(c, Answer::unknown_command());
        }
        self
    }

    /// Starts the fake runtime.
    pub fn start(self) -> io::Result<FakeRuntime> {
        FakeRuntime::start(self)
    }
}
