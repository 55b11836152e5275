//! Binding a private Unix listener safely.

use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::Path;

use crate::ListenError;

/// Where a bound socket file is: `(device, inode)`, to remove only our own file later.
pub(crate) type FileId = (u64, u64);

/// Binds a non-blocking listener at `path` with mode 0600 (owner only).
///
/// What is already at `path` decides:
/// - nothing: bind;
/// - a socket nobody listens on (connect is refused: left by a dead process): it is
///   removed, then bind;
/// - a socket with a live listener: [`ListenError::InUse`];
/// - anything else (a file, a directory, a symlink...): [`ListenError::NotASocket`], and
///   it is left alone.
///
/// The mode is set right after bind. With a umask that clears group and other write (the
/// usual 022), nobody else can connect in between, as connecting needs write permission.
/// The listen backlog is the system's maximum (`somaxconn`).
pub fn bind_private(path: &Path) -> Result<mio::net::UnixListener, ListenError> {
    bind_private_id(path).map(|(l, _)| l)
}

pub(crate) fn bind_private_id(
    path: &Path,
) -> Result<(mio::net::UnixListener, FileId), ListenError> {
    let io_err = |op: &'static str, source: io::Error| ListenError::Io {
        op,
        path: path.to_path_buf(),
        source,
    };
    if path.as_os_str().as_bytes().len() > dsipc::transport::MAX_SOCKET_PATH {
        return Err(ListenError::PathTooLong {
            path: path.to_path_buf(),
        });
    }
    match fs::symlink_metadata(path) {
        Ok(meta) => {
            if !meta.file_type().is_socket() {
                return Err(ListenError::NotASocket {
                    path: path.to_path_buf(),
                });
            }
            match StdUnixStream::connect(path) {
                Ok(_) => {
                    return Err(ListenError::InUse {
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
    let listener = mio::net::UnixListener::bind(path).map_err(|e| io_err("bind", e))?;
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) => return Err(io_err("stat", e)),
    };
    if let Err(e) = fs::set_permissions(path, fs::Permissions::from_mode(0o600)) {
        let _ = fs::remove_file(path);
        return Err(io_err("chmod 0600", e));
    }
    Ok((listener, (meta.dev(), meta.ino())))
}

/// Removes `path` if it is still the socket file we bound.
pub(crate) fn remove_own_socket(path: &Path, id: FileId) {
    if let Ok(meta) = fs::symlink_metadata(path) {
        if meta.file_type().is_socket() && (meta.dev(), meta.ino()) == id {
            let _ = fs::remove_file(path);
        }
    }
}
