//! Unix transport: `dotnet-diagnostic-{pid}-{key}-socket` under the target's TMPDIR, found
//! through `/proc` on Linux; connecting with a timeout. And the listening side:
//! [`bind_private`] binds a listener only its owner can connect to, replacing only a stale
//! socket, and removes its socket file later only if it is still the one bound
//! ([`SocketFile`]).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::io::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use dsipc::transport::{key_from_proc_stat, SocketName};

use crate::{Connection, Endpoint, Error, Transport};

/// Binding a private listener and guarding its socket file: dsipc-platform's, re-exported
/// (dsipc-mio uses the same code).
pub use dsipc_platform::{bind_private, PrivateListener, SocketFile};

/// Passing one descriptor with `SCM_RIGHTS` (user_events sessions): dsipc-platform's,
/// re-exported (the fake runtime of dsipc-testkit receives with it).
pub use dsipc_platform::fdpass::{recv_with_fd, send_fd};

impl Connection for UnixStream {
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, timeout)
    }
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_write_timeout(self, timeout)
    }
}

impl Transport for Endpoint {
    type Conn = UnixStream;
    fn connect(&self, timeout: Duration) -> Result<UnixStream, Error> {
        connect(self.path(), timeout).map_err(|source| match source.kind() {
            io::ErrorKind::TimedOut => Error::Connect {
                endpoint: self.path().to_path_buf(),
                source: io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no connection within {:.1} s (listen backlog full?)",
                        timeout.as_secs_f64()
                    ),
                ),
            },
            _ => Error::Connect {
                endpoint: self.path().to_path_buf(),
                source,
            },
        })
    }
}

/// Connects to a Unix socket within `timeout`, and returns a blocking stream whose read and
/// write timeouts are both `timeout`.
///
/// A Unix-socket connect only blocks when the listener's backlog is full. On Linux the
/// send timeout, set before `connect`, bounds that wait; elsewhere a non-blocking connect
/// is retried until the deadline.
pub fn connect(path: &Path, timeout: Duration) -> io::Result<UnixStream> {
    let timeout = timeout.max(Duration::from_millis(1));
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid (empty) value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path is empty, has a NUL, or is longer than sun_path",
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (dst, &src) in addr.sun_path.iter_mut().zip(bytes) {
        *dst = src as _;
    }
    let len = (std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1) as libc::socklen_t;
    let stream = new_socket()?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_read_timeout(Some(timeout))?;
    let deadline = crate::deadline_after(timeout);
    #[cfg(not(target_os = "linux"))]
    stream.set_nonblocking(true)?;
    loop {
        // SAFETY: `addr` is a valid sockaddr_un of `len` bytes; the socket is ours.
        let r = unsafe {
            libc::connect(
                stream.as_raw_fd(),
                &addr as *const libc::sockaddr_un as *const libc::sockaddr,
                len,
            )
        };
        if r == 0 {
            break;
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EINTR) => continue,
            // Linux: the backlog stayed full for the whole send timeout.
            #[cfg(target_os = "linux")]
            Some(libc::EAGAIN) => return Err(io::ErrorKind::TimedOut.into()),
            // Elsewhere: backlog full, try again until the deadline.
            #[cfg(not(target_os = "linux"))]
            Some(libc::EAGAIN) => {
                if Instant::now() >= deadline {
                    return Err(io::ErrorKind::TimedOut.into());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            // The connect completes asynchronously.
            Some(libc::EINPROGRESS) => {
                wait_writable(&stream, deadline)?;
                if let Some(e) = stream.take_error()? {
                    return Err(e);
                }
                break;
            }
            _ => return Err(err),
        }
    }
    #[cfg(not(target_os = "linux"))]
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// A new AF_UNIX stream socket, close-on-exec.
fn new_socket() -> io::Result<UnixStream> {
    #[cfg(target_os = "linux")]
    let flags = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
    #[cfg(not(target_os = "linux"))]
    let flags = libc::SOCK_STREAM;
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_UNIX, flags, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh socket that nothing else owns; the stream closes it on drop.
    let stream = unsafe { UnixStream::from_raw_fd(fd) };
    #[cfg(not(target_os = "linux"))]
    {
        // SAFETY: fcntl on a descriptor we own.
        if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(stream)
}

/// Waits until the socket is writable (an asynchronous connect finished), by `deadline`.
fn wait_writable(stream: &UnixStream, deadline: Instant) -> io::Result<()> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        let mut pfd = libc::pollfd {
            fd: stream.as_raw_fd(),
            events: libc::POLLOUT,
            revents: 0,
        };
        let ms: i32 = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r > 0 {
            return Ok(());
        }
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// A process with a reachable diagnostic socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiagnosableProcess {
    /// Process id (as this process sees it).
    pub pid: u32,
    /// The socket.
    pub socket: PathBuf,
}

fn proc_dir(pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{}", pid))
}

/// True where `/proc` describes processes (Linux).
fn have_proc() -> bool {
    Path::new("/proc/self/stat").exists()
}

/// The socket key of `pid`: field 22 of `/proc/PID/stat` (Linux only).
pub fn start_key(pid: u32) -> Option<u64> {
    let stat = fs::read(proc_dir(pid).join("stat")).ok()?;
    key_from_proc_stat(&stat).ok()
}

/// The value of `name` in `/proc/PID/environ`, where readable.
fn environ_var(pid: u32, name: &str) -> Option<PathBuf> {
    let env = fs::read(proc_dir(pid).join("environ")).ok()?;
    env.split(|&b| b == 0).find_map(|entry| {
        let rest = entry.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
        if rest.is_empty() {
            None
        } else {
            Some(PathBuf::from(OsStr::from_bytes(rest)))
        }
    })
}

/// The pid of `pid` in its own (innermost) pid namespace: last field of `NSpid:`.
fn namespace_pid(pid: u32) -> Option<u32> {
    let status = fs::read_to_string(proc_dir(pid).join("status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    line.split_whitespace().last()?.parse().ok()
}

/// True when `pid` lives in another mount namespace than this process.
fn other_mount_namespace(pid: u32) -> bool {
    match (
        fs::read_link("/proc/self/ns/mnt"),
        fs::read_link(proc_dir(pid).join("ns/mnt")),
    ) {
        (Ok(a), Ok(b)) => a != b,
        _ => false,
    }
}

/// Joins an absolute path below `root` (`/proc/PID/root` + `/tmp`).
fn under(root: &Path, path: &Path) -> PathBuf {
    root.join(path.strip_prefix("/").unwrap_or(path))
}

/// The directories where `pid`'s socket may be: its TMPDIR, `/tmp`, and both through
/// `/proc/PID/root` (other mount namespaces).
fn candidate_dirs(pid: u32) -> Vec<PathBuf> {
    let tmp = PathBuf::from("/tmp");
    let target_tmpdir = environ_var(pid, "TMPDIR");
    let mut dirs = Vec::new();
    let root = proc_dir(pid).join("root");
    if other_mount_namespace(pid) {
        if let Some(t) = &target_tmpdir {
            dirs.push(under(&root, t));
        }
        dirs.push(under(&root, &tmp));
    }
    if let Some(t) = target_tmpdir {
        dirs.push(t);
    }
    if !have_proc() {
        if let Some(t) = std::env::var_os("TMPDIR") {
            dirs.push(PathBuf::from(t));
        }
    }
    dirs.push(tmp);
    let mut seen = Vec::new();
    dirs.retain(|d| {
        if seen.contains(d) {
            false
        } else {
            seen.push(d.clone());
            true
        }
    });
    dirs
}

/// A socket file found in a directory.
struct Found {
    path: PathBuf,
    name: SocketName,
    modified: SystemTime,
    /// The socket file's owner.
    uid: u32,
}

/// The uids (real, effective, saved, file system) of `pid`, from `/proc/PID/status`.
fn process_uids(pid: u32) -> Option<Vec<u32>> {
    let status = fs::read_to_string(proc_dir(pid).join("status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    let uids: Vec<u32> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|u| u.parse().ok())
        .collect();
    if uids.is_empty() {
        None
    } else {
        Some(uids)
    }
}

/// True when the socket file may belong to process `pid`: where `/proc` tells the
/// process's uids, the file's owner must be one of them (the runtime creates its socket
/// as itself; anyone can plant a file named after another user's process).
fn owned_by(found: &Found, pid: u32) -> bool {
    if !have_proc() {
        return true;
    }
    process_uids(pid).map_or(false, |uids| uids.contains(&found.uid))
}

/// Every `dotnet-diagnostic-*-socket` in `dir` that is a socket (filtered by `pid`).
/// Fails only when `dir` itself cannot be read.
fn scan(dir: &Path, pid: Option<u32>, out: &mut Vec<Found>) -> io::Result<()> {
    let entries = fs::read_dir(dir)?;
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let name = match file_name.to_str().and_then(SocketName::parse) {
            Some(n) => n,
            None => continue,
        };
        if pid.map_or(false, |p| p != name.pid) {
            continue;
        }
        let meta = match entry.metadata() {
            Ok(m) => m,
            Err(_) => continue,
        };
        // S_IFSOCK
        if meta.mode() & 0o170000 != 0o140000 {
            continue;
        }
        out.push(Found {
            path: entry.path(),
            name,
            modified: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            uid: meta.uid(),
        });
    }
    Ok(())
}

/// Scans `dir` named by the caller: an unreadable directory is an error.
fn scan_named(dir: &Path, pid: Option<u32>, out: &mut Vec<Found>) -> Result<(), Error> {
    scan(dir, pid, out).map_err(|source| Error::SearchDir {
        dir: dir.to_path_buf(),
        source,
    })
}

/// Picks the socket whose key is `key`, else the newest.
fn pick(found: Vec<Found>, key: Option<u64>) -> Option<PathBuf> {
    if let Some(k) = key {
        if let Some(f) = found.iter().find(|f| f.name.key == k) {
            return Some(f.path.clone());
        }
    }
    found.into_iter().max_by_key(|f| f.modified).map(|f| f.path)
}

/// Finds the diagnostic socket of `pid`.
///
/// With `tmpdir`, only that directory is searched ([`Error::SearchDir`] when it cannot be
/// read). Only a socket file owned by one of the process's uids counts (Linux). Otherwise: the target's TMPDIR (from
/// `/proc/PID/environ`, where readable), then `/tmp`, and both through `/proc/PID/root`
/// when the target is in another mount namespace (there it is named after the target's
/// own pid, the last `NSpid`). Among several candidates the one whose key equals the
/// start time in `/proc/PID/stat` wins, else the newest.
pub fn find_socket(pid: u32, tmpdir: Option<&Path>) -> Result<PathBuf, Error> {
    let linux = have_proc();
    if linux && !proc_dir(pid).exists() {
        return Err(Error::NoSuchProcess { pid });
    }
    let dirs = match tmpdir {
        Some(d) => vec![d.to_path_buf()],
        None => candidate_dirs(pid),
    };
    let mut pids = vec![pid];
    if let Some(inner) = namespace_pid(pid) {
        if inner != pid {
            pids.push(inner);
        }
    }
    let mut found = Vec::new();
    for dir in &dirs {
        for &p in &pids {
            if tmpdir.is_some() {
                scan_named(dir, Some(p), &mut found)?;
            } else {
                let _ = scan(dir, Some(p), &mut found);
            }
        }
    }
    found.retain(|f| owned_by(f, pid));
    pick(found, start_key(pid)).ok_or(Error::NoSocket {
        pid,
        searched: dirs,
    })
}

/// Lists the processes that have a live diagnostic socket, by pid.
///
/// With `tmpdir`, only that directory is searched ([`Error::SearchDir`] when it cannot be
/// read). Otherwise: this process's TMPDIR,
/// `/tmp`, the TMPDIR of every process whose environment is readable, and `/tmp` of
/// processes in other mount namespaces (through `/proc/PID/root`). On Linux, sockets of
/// dead processes, and sockets whose key is not the process's start time (a recycled
/// pid), are left out, and so are socket files not owned by one of the process's uids
/// (planted by another user).
pub fn list_processes(tmpdir: Option<&Path>) -> Result<Vec<DiagnosableProcess>, Error> {
    let linux = have_proc();
    let mut dirs: Vec<PathBuf> = Vec::new();
    // (outer pid, directory, inner pid) for processes in other mount namespaces.
    let mut foreign: Vec<(u32, PathBuf, u32)> = Vec::new();
    match tmpdir {
        Some(d) => dirs.push(d.to_path_buf()),
        None => {
            dirs.push(std::env::temp_dir());
            dirs.push(PathBuf::from("/tmp"));
            if linux {
                for pid in all_pids()? {
                    if other_mount_namespace(pid) {
                        let inner = namespace_pid(pid).unwrap_or(pid);
                        let root = proc_dir(pid).join("root");
                        if fs::metadata(&root).is_err() {
                            continue;
                        }
                        if let Some(t) = environ_var(pid, "TMPDIR") {
                            foreign.push((pid, under(&root, &t), inner));
                        }
                        foreign.push((pid, under(&root, Path::new("/tmp")), inner));
                    } else if let Some(t) = environ_var(pid, "TMPDIR") {
                        if !dirs.contains(&t) {
                            dirs.push(t);
                        }
                    }
                }
            }
        }
    }
    let mut found = Vec::new();
    for d in &dirs {
        if tmpdir.is_some() {
            scan_named(d, None, &mut found)?;
        } else {
            let _ = scan(d, None, &mut found);
        }
    }
    let mut by_pid: BTreeMap<u32, Vec<Found>> = BTreeMap::new();
    for f in found {
        by_pid.entry(f.name.pid).or_default().push(f);
    }
    let mut out = Vec::new();
    for (pid, candidates) in by_pid {
        if linux {
            if !proc_dir(pid).exists() {
                continue;
            }
            let key = start_key(pid);
            let live: Vec<Found> = candidates
                .into_iter()
                .filter(|f| key.map_or(true, |k| k == f.name.key) && owned_by(f, pid))
                .collect();
            if let Some(socket) = pick(live, key) {
                out.push(DiagnosableProcess { pid, socket });
            }
        } else if let Some(socket) = pick(candidates, None) {
            out.push(DiagnosableProcess { pid, socket });
        }
    }
    for (pid, dir, inner) in foreign {
        if out.iter().any(|p| p.pid == pid) {
            continue;
        }
        let mut f = Vec::new();
        let _ = scan(&dir, Some(inner), &mut f);
        f.retain(|f| owned_by(f, pid));
        if let Some(socket) = pick(f, start_key(pid)) {
            out.push(DiagnosableProcess { pid, socket });
        }
    }
    out.sort_by_key(|p| p.pid);
    Ok(out)
}

fn all_pids() -> Result<Vec<u32>, Error> {
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc")?.flatten() {
        if let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) {
            pids.push(pid);
        }
    }
    Ok(pids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_key_matches_stat() {
        let me = std::process::id();
        assert!(start_key(me).is_some());
        assert!(find_socket(me, Some(Path::new("/nonexistent-dir"))).is_err());
    }

    #[test]
    fn no_such_process() {
        // Pids are below 2^22 on Linux.
        match find_socket(u32::MAX - 1, None) {
            Err(Error::NoSuchProcess { .. }) => {}
            other => panic!("{:?}", other),
        }
    }

    #[test]
    fn connect_times_out_or_fails_fast() {
        let t = Instant::now();
        let e = connect(
            Path::new("/nonexistent-dir/x-socket"),
            Duration::from_secs(5),
        );
        assert!(e.is_err());
        assert!(t.elapsed() < Duration::from_secs(1));
        let long = "/tmp/".to_string() + &"x".repeat(200);
        assert_eq!(
            connect(Path::new(&long), Duration::from_secs(1))
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
