//! Unix socket helpers: a safe private bind and a temporary directory.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

pub use dsipc_std::reverse::ListenError;

/// Binds a Unix listener at `path` with mode 0600: dsipc-std's
/// [`bind_private`](dsipc_std::unix::bind_private), whose socket file is left in place when
/// the listener is dropped (it becomes stale, and the next bind at `path` replaces it).
///
/// A socket file already at `path` is removed only if nothing listens on it (connect is
/// refused: a stale file left by a dead process); a live listener is
/// [`ListenError::InUse`]; any other kind of file is [`ListenError::NotASocket`] and is left
/// alone. The socket is made 0600 before it is linked to `path`, so nobody else can ever
/// connect.
pub fn bind_private(path: &Path) -> Result<UnixListener, ListenError> {
    let (listener, file) = dsipc_std::unix::bind_private(path)?.into_parts();
    file.keep();
    Ok(listener)
}

/// Leaves a stale diagnostic socket `dotnet-diagnostic-{pid}-{key}-socket` in `dir`: a
/// socket file nobody listens on (connect is refused), as a runtime that crashed leaves.
///
/// Returns once a connect is refused: a child process forked by another thread while the
/// listener was open holds a copy of it until it executes its program.
pub fn stale_socket(dir: &Path, pid: u64, key: u64) -> Result<PathBuf, ListenError> {
    let path = dir.join(socket_name(pid, key));
    drop(bind_private(&path)?);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&path).is_ok()
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    Ok(path)
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
        assert!(matches!(bind_private(&p), Err(ListenError::InUse { .. })));
        drop(l); // the file stays: stale
        assert!(p.exists());
        let _l = bind_private(&p).unwrap();
        let f = dir.join("file");
        fs::write(&f, b"keep me").unwrap();
        assert!(matches!(
            bind_private(&f),
            Err(ListenError::NotASocket { .. })
        ));
        assert_eq!(fs::read(&f).unwrap(), b"keep me");
        assert_eq!(socket_name(12, 34), "dotnet-diagnostic-12-34-socket");
    }
}
