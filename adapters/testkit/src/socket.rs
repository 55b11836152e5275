//! Unix socket helpers: a safe private bind and a temporary directory.

use std::fmt;
use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Why [`bind_private`] refused or failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum BindError {
    /// Something that is not a socket is at the path: it is never removed.
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// A live listener answers at the path.
    InUse {
        /// The path.
        path: PathBuf,
    },
    /// A system call failed.
    Io {
        /// What was being done.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

impl fmt::Display for BindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BindError::NotASocket { path } => write!(
                f,
                "{} exists and is not a socket; refusing to remove it",
                path.display()
            ),
            BindError::InUse { path } => {
                write!(f, "{} is in use by a live listener", path.display())
            }
            BindError::Io { op, path, source } => {
                write!(f, "{} {}: {}", op, path.display(), source)
            }
        }
    }
}

impl std::error::Error for BindError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BindError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<BindError> for io::Error {
    fn from(e: BindError) -> io::Error {
        let kind = match &e {
            BindError::NotASocket { .. } => io::ErrorKind::AlreadyExists,
            BindError::InUse { .. } => io::ErrorKind::AddrInUse,
            BindError::Io { source, .. } => source.kind(),
        };
        io::Error::new(kind, e.to_string())
    }
}

/// Binds a Unix listener at `path` with mode 0600.
///
/// A socket file already at `path` is removed only if nothing listens on it (connect is
/// refused: a stale file left by a dead process); a live listener is
/// [`BindError::InUse`]; any other kind of file is [`BindError::NotASocket`] and is left
/// alone. The mode is set right after bind: with a umask that clears group/other write (the
/// usual 022) nobody else can connect in between, as connecting needs write permission.
pub fn bind_private(path: &Path) -> Result<UnixListener, BindError> {
    let io_err = |op: &'static str, source: io::Error| BindError::Io {
        op,
        path: path.to_path_buf(),
        source,
    };
    match fs::symlink_metadata(path) {
        Ok(meta) => {
            if !meta.file_type().is_socket() {
                return Err(BindError::NotASocket {
                    path: path.to_path_buf(),
                });
            }
            match UnixStream::connect(path) {
                Ok(_) => {
                    return Err(BindError::InUse {
                        path: path.to_path_buf(),
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    match fs::remove_file(path) {
                        Ok(()) => {}
                        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                        Err(e) => return Err(io_err("remove stale socket", e)),
                    }
                }
                Err(e) => return Err(io_err("probe existing socket", e)),
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err("stat", e)),
    }
    let listener = UnixListener::bind(path).map_err(|e| io_err("bind", e))?;
    if let Err(e) = fs::set_permissions(path, fs::Permissions::from_mode(0o600)) {
        let _ = fs::remove_file(path);
        return Err(io_err("chmod 0600", e));
    }
    Ok(listener)
}

/// The runtime's socket file name: `dotnet-diagnostic-{pid}-{key}-socket`.
pub fn socket_name(pid: u64, key: u64) -> String {
    format!(
        "{}{}-{}{}",
        dsipc::transport::NAME_PREFIX,
        pid,
        key,
        dsipc::transport::SOCKET_SUFFIX
    )
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A fresh, process-unique number (for socket keys, cookies and directory names).
pub(crate) fn unique() -> u64 {
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    splitmix(t ^ (u64::from(std::process::id()) << 32) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

pub(crate) fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A private temporary directory (mode 0700), removed with its content on drop. Its path
/// is short (under `/tmp`), leaving room in the 108-byte `sun_path` for socket names.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates `/tmp/{prefix}-{unique}` (`$TMPDIR` is ignored: it may be long).
    pub fn new(prefix: &str) -> io::Result<TempDir> {
        loop {
            let path = PathBuf::from(format!("/tmp/{}-{:x}", prefix, unique() & 0xFFFF_FFFF));
            match fs::create_dir(&path) {
                Ok(()) => {
                    fs::set_permissions(&path, fs::Permissions::from_mode(0o700))?;
                    return Ok(TempDir { path });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A path inside the directory.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bind_rules() {
        let dir = TempDir::new("dsipc-tk").unwrap();
        let p = dir.join("s");
        let l = bind_private(&p).unwrap();
        let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(matches!(bind_private(&p), Err(BindError::InUse { .. })));
        drop(l); // the file stays: stale
        assert!(p.exists());
        let _l = bind_private(&p).unwrap();
        let f = dir.join("file");
        fs::write(&f, b"keep me").unwrap();
        assert!(matches!(
            bind_private(&f),
            Err(BindError::NotASocket { .. })
        ));
        assert_eq!(fs::read(&f).unwrap(), b"keep me");
        assert_eq!(socket_name(12, 34), "dotnet-diagnostic-12-34-socket");
    }
}
