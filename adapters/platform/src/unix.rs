//! Binding a private Unix listener: mode 0600 from the start, replacing only a stale socket,
//! and removing the socket file later only if it is still the one bound.

use std::fs;
use std::io;
use std::mem::ManuallyDrop;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{ListenError, MAX_SOCKET_PATH};

static SEQ: AtomicUsize = AtomicUsize::new(0);

/// Binds a Unix listener at `path` that only its owner can connect to (mode 0600).
///
/// What is already at `path` decides:
/// - nothing: bind;
/// - a socket nobody listens on (connecting is refused: left by a dead process): it is
///   removed, then bind;
/// - a socket with a live listener: [`ListenError::InUse`];
/// - anything else (a file, a directory, a symlink, even a dangling one):
///   [`ListenError::NotASocket`], and it is left alone.
///
/// An empty path, or one longer than a socket address allows, is
/// [`ListenError::PathTooLong`].
///
/// There is no window in which anybody else could connect: the socket is bound in a fresh
/// private directory next to `path` (mode 0700), made 0600 there, then hard-linked to
/// `path`, which fails rather than replace anything that appeared there meanwhile (that is
/// [`ListenError::InUse`] or [`ListenError::NotASocket`]). Only when the private path would
/// be too long for a socket address is the socket bound in place and narrowed to 0600 at
/// once (connecting needs write permission, which the usual umask already denies to others).
///
/// The listener is blocking, as [`UnixListener::bind`] makes it. The returned
/// [`PrivateListener`] removes the socket file when dropped, if the file at `path` is still
/// the one bound; [`PrivateListener::into_parts`] separates the listener from that guard.
pub fn bind_private(path: impl AsRef<Path>) -> Result<PrivateListener, ListenError> {
    let path = path.as_ref();
    if path.as_os_str().is_empty() || too_long(path) {
        return Err(ListenError::PathTooLong {
            path: path.to_path_buf(),
        });
    }
    clear_stale(path)?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    // A private directory next to the address (same file system, so the socket can be
    // linked into place).
    let mut attempt = 0;
    let dir = loop {
        let dir = parent.join(format!(
            ".dsipc-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => break dir,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 16 => attempt += 1,
            Err(e) => return Err(io_err("create a private directory next to", path, e)),
        }
    };
    let private = dir.join("s");
    if too_long(&private) {
        let _ = fs::remove_dir(&dir);
        return bind_in_place(path);
    }
    let listener = match UnixListener::bind(&private) {
        Ok(l) => l,
        Err(e) => {
            remove_private(&dir, &private);
            return Err(io_err("bind", path, e));
        }
    };
    if let Err(e) = fs::set_permissions(&private, fs::Permissions::from_mode(0o600)) {
        remove_private(&dir, &private);
        return Err(io_err("chmod 0600", path, e));
    }
    // link(2) never replaces: whatever appeared at the address meanwhile stays.
    let linked = fs::hard_link(&private, path);
    remove_private(&dir, &private);
    if let Err(e) = linked {
        if e.kind() == io::ErrorKind::AlreadyExists {
            // Something appeared at the address since it was cleared: leave it.
            let socket = fs::symlink_metadata(path)
                .map(|m| m.file_type().is_socket())
                .unwrap_or(true);
            let path = path.to_path_buf();
            return Err(if socket {
                ListenError::InUse { path }
            } else {
                ListenError::NotASocket { path }
            });
        }
        return Err(io_err("link the socket into place at", path, e));
    }
    finish(listener, path)
}

/// A listener from [`bind_private`] and the guard of its socket file.
///
/// Dropping it closes the listener and removes the socket file if it is still the one bound
/// (see [`SocketFile`]).
#[derive(Debug)]
pub struct PrivateListener {
    listener: UnixListener,
    file: SocketFile,
}

impl PrivateListener {
    /// The listener.
    pub fn listener(&self) -> &UnixListener {
        &self.listener
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Makes the listener non-blocking (for a listener polled before accepting, or an event
    /// loop); a failure is [`ListenError::Io`] naming the socket's path.
    pub fn set_nonblocking(&self) -> Result<(), ListenError> {
        self.listener
            .set_nonblocking(true)
            .map_err(|source| ListenError::Io {
                op: "set non-blocking",
                path: self.path().to_path_buf(),
                source,
            })
    }

    /// The listener and the guard of its socket file, apart: for example to convert the
    /// listener for an event loop, keeping the guard next to it. Drop the guard to remove the
    /// file (if still ours), or [`SocketFile::keep`] it to leave the file in place.
    pub fn into_parts(self) -> (UnixListener, SocketFile) {
        (self.listener, self.file)
    }
}

/// The socket file of a listener bound by [`bind_private`]: its path, and its identity
/// (device and inode) at bind time.
///
/// Dropping it removes the file, but only if what is at the path is still that socket: a
/// file that replaced it (another listener's socket, anything else) is left alone. Drop it
/// when the listener closes (dropping it earlier unlinks the address of a live listener).
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl SocketFile {
    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True while the file at the path is the socket that was bound.
    pub fn is_ours(&self) -> bool {
        match fs::symlink_metadata(&self.path) {
            Ok(meta) => {
                meta.file_type().is_socket() && meta.dev() == self.dev && meta.ino() == self.ino
            }
            Err(_) => false,
        }
    }

    /// Lets go of the file without removing it (it stays, and becomes a stale socket when
    /// the listener closes; the next [`bind_private`] at its path replaces it). Returns the
    /// path.
    pub fn keep(self) -> PathBuf {
        let mut this = ManuallyDrop::new(self);
        std::mem::take(&mut this.path)
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if self.is_ours() {
            let _ = fs::remove_file(&self.path);
        }
    }
}

fn io_err(op: &'static str, path: &Path, source: io::Error) -> ListenError {
    ListenError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn too_long(path: &Path) -> bool {
    path.as_os_str().as_bytes().len() > MAX_SOCKET_PATH
}

/// Clears the way at `path`: nothing there, or a stale socket (removed).
fn clear_stale(path: &Path) -> Result<(), ListenError> {
    match fs::symlink_metadata(path) {
        Ok(meta) => {
            if !meta.file_type().is_socket() {
                return Err(ListenError::NotASocket {
                    path: path.to_path_buf(),
                });
            }
            match UnixStream::connect(path) {
                Ok(_) => Err(ListenError::InUse {
                    path: path.to_path_buf(),
                }),
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    match fs::remove_file(path) {
                        Ok(()) => Ok(()),
                        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                        Err(e) => Err(io_err("remove the stale socket", path, e)),
                    }
                }
                Err(e) => Err(io_err("probe the existing socket", path, e)),
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_err("stat", path, e)),
    }
}

/// Removes a private directory and what is in it (our socket file, if any).
fn remove_private(dir: &Path, sock: &Path) {
    let _ = fs::remove_file(sock);
    let _ = fs::remove_dir(dir);
}

fn bind_in_place(path: &Path) -> Result<PrivateListener, ListenError> {
    let listener = UnixListener::bind(path).map_err(|e| io_err("bind", path, e))?;
    if let Err(e) = fs::set_permissions(path, fs::Permissions::from_mode(0o600)) {
        let _ = fs::remove_file(path);
        return Err(io_err("chmod 0600", path, e));
    }
    finish(listener, path)
}

fn finish(listener: UnixListener, path: &Path) -> Result<PrivateListener, ListenError> {
    let meta = fs::symlink_metadata(path).map_err(|e| io_err("stat", path, e))?;
    Ok(PrivateListener {
        listener,
        file: SocketFile {
            path: path.to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino(),
        },
    })
}

/// Who owns the file at `path`: its uid, and the user name `/etc/passwd` gives it. For
/// the message of a connection refused with EACCES (whose socket it is, so whom to run as).
pub fn owner_of(path: &Path) -> Option<(u32, Option<String>)> {
    let uid = fs::metadata(path).ok()?.uid();
    Some((uid, user_name(uid)))
}

/// The name of user `uid` in `/etc/passwd` (bounded: a passwd file past 4 MiB is not read).
fn user_name(uid: u32) -> Option<String> {
    const MAX_PASSWD: u64 = 4 << 20;
    if fs::metadata("/etc/passwd").ok()?.len() > MAX_PASSWD {
        return None;
    }
    let text = fs::read_to_string("/etc/passwd").ok()?;
    text.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let id = fields.nth(1)?.parse::<u32>().ok()?;
        if id == uid && !name.is_empty() {
            Some(name.to_string())
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guard_removes_only_its_own_file_and_keep_leaves_it() {
        let dir = std::env::temp_dir().join(format!("dsipc-std-listen-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let p = dir.join("s");

        let l = bind_private(&p).unwrap();
        assert_eq!(l.path(), p);
        let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (listener, file) = l.into_parts();
        assert!(file.is_ours());
        drop(file);
        assert!(fs::symlink_metadata(&p).is_err());
        drop(listener);

        let (listener, file) = bind_private(&p).unwrap().into_parts();
        assert_eq!(file.keep(), p);
        drop(listener);
        assert!(fs::symlink_metadata(&p).unwrap().file_type().is_socket());
        let l = bind_private(&p).unwrap(); // the stale socket is replaced
        fs::remove_file(&p).unwrap();
        fs::write(&p, b"not ours").unwrap();
        drop(l);
        assert_eq!(fs::read(&p).unwrap(), b"not ours");

        let e = io::Error::from(bind_private(&p).unwrap_err());
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(e.to_string().contains("not a socket"), "{}", e);
        fs::remove_dir_all(&dir).unwrap();
    }
}
