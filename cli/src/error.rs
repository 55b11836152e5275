//! The CLI's one error type, and the one rule that turns it into a message and an exit status.

use std::fmt;
use std::io;

use dsipc_std::Error;

use crate::args::UsageError;

/// Why a command failed.
#[derive(Debug)]
pub enum CliError {
    /// Bad arguments: exit status 2.
    Usage(String),
    /// Bad arguments to a command: exit status 2, pointing at that command's help.
    CommandUsage {
        /// The command (`trace`, `counters`...).
        command: String,
        /// What is wrong.
        message: String,
    },
    /// The runtime or the connection to it failed: exit status 1.
    Ipc(Error),
    /// The command ran and failed (a bad file, a refused output...): exit status 1.
    Failed(String),
    /// Reading or writing failed; `context` says what was being done (a broken pipe on
    /// standard output ends the command quietly with 141, whatever wrote to it).
    Io {
        /// What was being read or written ("writing", "reading t.nettrace"...).
        context: String,
        /// The error.
        source: io::Error,
    },
    /// Already reported: exit with this status.
    Exit(u8),
}

impl CliError {
    /// This error as `command`'s: a usage error points at that command's help.
    pub fn in_command(self, command: &str) -> CliError {
        match self {
            CliError::Usage(message) => CliError::CommandUsage {
                command: command.to_string(),
                message,
            },
            other => other,
        }
    }

    /// An I/O error while doing `context`.
    pub fn io(context: impl Into<String>, source: io::Error) -> CliError {
        CliError::Io {
            context: context.into(),
            source,
        }
    }

    /// The exit status, and the message for stderr (`None`: leave quietly).
    pub fn report(&self) -> (u8, Option<String>) {
        match self {
            CliError::Usage(m) => (2, Some(format!("{} (see dsipc --help)", m))),
            CliError::CommandUsage { command, message } => (
                2,
                Some(format!("{} (see dsipc {} --help)", message, command)),
            ),
            CliError::Ipc(e) => (1, Some(e.to_string())),
            CliError::Failed(m) => (1, Some(m.clone())),
            // Whoever read our output has gone: leave quietly, as if killed by SIGPIPE.
            CliError::Io { source, .. } if source.kind() == io::ErrorKind::BrokenPipe => {
                (141, None)
            }
            CliError::Io { context, source } if context.is_empty() => {
                (1, Some(format!("cannot write the output: {}", source)))
            }
            CliError::Io { context, source } => (1, Some(format!("{}: {}", context, source))),
            CliError::Exit(code) => (*code, None),
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.report() {
            (_, Some(m)) => f.write_str(&m),
            (code, None) => write!(f, "exit status {}", code),
        }
    }
}

impl From<UsageError> for CliError {
    fn from(e: UsageError) -> Self {
        CliError::Usage(e.0)
    }
}

impl From<Error> for CliError {
    fn from(e: Error) -> Self {
        CliError::Ipc(e)
    }
}

impl From<dsipc_recipes::RecipeError> for CliError {
    fn from(e: dsipc_recipes::RecipeError) -> Self {
        match e {
            dsipc_recipes::RecipeError::Ipc(e) => CliError::Ipc(e),
            other => CliError::Failed(other.to_string()),
        }
    }
}

impl From<io::Error> for CliError {
    fn from(e: io::Error) -> Self {
        CliError::io(String::new(), e)
    }
}

/// A command's result.
pub type CliResult<T = ()> = Result<T, CliError>;
