//! Finding runtimes on Unix: `dotnet-diagnostic-{pid}-{key}-socket` under the target's
//! TMPDIR (from `/proc/PID/environ`), `/tmp`, and other mount namespaces through
//! `/proc/PID/root`; the socket's key from `/proc/PID/stat` (Linux).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use dsipc::transport::{key_from_proc_stat, SocketName};

use crate::Error;

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
}
