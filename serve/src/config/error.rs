//! What goes wrong reading the configuration ([`ConfigError`], a failure at start) and
//! what is only worth saying ([`Warning`], e.g. a key nothing reads).

use std::fmt;
use std::path::PathBuf;

use super::Source;

/// A configuration that cannot be used: serve does not start (exit status 2 in the CLI).
/// Each names the key (`Egress:S3Storage:monitorS3Blob:BucketName`) or the file, and the
/// source that set it.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigError {
    /// A file or folder could not be read.
    Read {
        /// The file or folder.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// A file is larger than a configuration file can be (see the bound in sources.rs).
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The bound, in bytes.
        limit: u64,
    },
    /// A folder holds more files than a key-per-file folder can (see sources.rs).
    TooManyFiles {
        /// The folder.
        path: PathBuf,
        /// The bound.
        limit: usize,
    },
    /// A JSON file that is not JSON, or whose top level is not an object.
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line (0: unknown).
        line: usize,
        /// 1-based column (0: unknown).
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// One source sets the same key twice (keys are case-insensitive: `a` and `A`).
    DuplicateKey {
        /// The key path.
        key: String,
        /// Where.
        source: Source,
    },
    /// A value of the wrong type or out of range (`Metrics:Enabled` = `"yes"`), or a
    /// section where a value is wanted and the other way round.
    Invalid {
        /// The key path.
        key: String,
        /// The source that set it, when the key is a value.
        source: Option<Source>,
        /// What is wrong (never the value of a secret).
        message: String,
    },
    /// A required key is absent (`Egress:FileSystem:out:DirectoryPath`).
    Missing {
        /// The key path.
        key: String,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Read { path, error } => {
                write!(f, "cannot read {}: {}", path.display(), error)
            }
            ConfigError::TooLarge { path, limit } => write!(
                f,
                "{} is larger than {} bytes: not a configuration file",
                path.display(),
                limit
            ),
            ConfigError::TooManyFiles { path, limit } => write!(
                f,
                "{} holds more than {} files: not a key-per-file configuration folder",
                path.display(),
                limit
            ),
            ConfigError::Json {
                path,
                line,
                column,
                message,
            } => {
                write!(f, "{}", path.display())?;
                if *line > 0 {
                    write!(f, " (line {}, column {})", line, column)?;
                }
                write!(f, ": {}", message)
            }
            ConfigError::DuplicateKey { key, source } => {
                write!(f, "{}: set twice in {}", key, source)
            }
            ConfigError::Invalid {
                key,
                source,
                message,
            } => {
                write!(f, "{}", key)?;
                if let Some(s) = source {
                    write!(f, " (from {})", s)?;
                }
                write!(f, ": {}", message)
            }
            ConfigError::Missing { key } => write!(f, "{}: required, and not set", key),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A key nothing reads (a misspelling, or a setting of a newer dotnet-monitor), or a
/// setting serve accepts but does not act on: said, not fatal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// The key path (empty when the message says it all: a source skipped whole...).
    pub key: String,
    /// The source that set it.
    pub source: Option<Source>,
    /// What is said.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            return f.write_str(&self.message);
        }
        write!(f, "{}", self.key)?;
        if let Some(s) = &self.source {
            write!(f, " (from {})", s)?;
        }
        write!(f, ": {}", self.message)
    }
}
