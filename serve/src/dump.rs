//! `/dump`: the runtime writes a core dump in serve's dump folder, serve streams it and
//! deletes it.
//!
//! The folder may be shared (`--dump-temp-folder` on a mode 1777 directory) and the runtime
//! is not trusted: it answers the dump command with whatever it placed at the path serve
//! named. Serve opens that path without following a symbolic link (and without blocking on
//! a FIFO), and streams it only if it is a regular file with a single link, owned by the
//! runtime's user (its socket's owner) or by serve's own user: anything else (a link to a
//! file the runtime cannot read itself, a hard link to one, a file another user planted) is
//! refused with a 400 naming why, and left where it is: serve deletes only the file it
//! opened and accepted, still at that path.

use std::io;
use std::path::Path;

use bytes::Bytes;
use tokio::io::AsyncReadExt;

use dsipc::payload::DumpType;

use super::api::{timestamp, Api, ApiError, Artifact, Requester, DUMP_TIMEOUT, MAX_DUMPS};
use super::procs::Runtime;
use crate::http;

/// Bytes read from the dump at a time (and the most one chunk of the response holds).
const READ_CHUNK: usize = 256 * 1024;

impl Api {
    /// Has the runtime write a dump of `kind`; its file, checked, streamed and deleted.
    pub(super) async fn dump(
        &self,
        runtime: &Runtime,
        kind: DumpType,
        by: Requester,
    ) -> Result<Artifact, ApiError> {
        let permit = Api::permit(&self.dumps, "dump", MAX_DUMPS, by)?;
        // dotnet-monitor's dump name on Linux: `core_{timestamp}`.
        let name = format!("core_{}", timestamp());
        let path = self
            .dump_dir
            .join(format!("{}-{}", std::process::id(), name));
        let text = path
            .to_str()
            .ok_or_else(|| ApiError::internal("the dump folder's path is not UTF-8"))?
            .to_string();
        let written = runtime
            .client(DUMP_TIMEOUT)
            .write_dump(&text, kind, 0)
            .await;
        let opened = open_dump(&path, runtime.owner);
        if let Err(e) = written {
            // A partial dump the runtime left: deleted only if it passes the checks.
            if let Ok(file) = opened {
                remove_if_same(&path, &file);
            }
            return Err(e.into());
        }
        let file = opened.map_err(|why| {
            ApiError::bad_request(format!(
                "the runtime's dump {} is refused: {}",
                path.display(),
                why
            ))
        })?;
        // Unlinked at once: the open file is all that is left, gone when it is closed.
        remove_if_same(&path, &file);
        let mut file = tokio::fs::File::from_std(file);
        let (tx, body) = http::channel(4, self.send_timeout);
        tokio::spawn(async move {
            let _permit = permit;
            loop {
                let mut buf = vec![0u8; READ_CHUNK];
                match file.read(&mut buf).await {
                    Ok(0) => break,
                    Ok(n) => {
                        buf.truncate(n);
                        if let Err(g) = tx.send(Bytes::from(buf)).await {
                            if g == http::Gone::Stalled {
                                tx.fail(io::Error::new(
                                    io::ErrorKind::TimedOut,
                                    "the client stalled",
                                ));
                            }
                            break;
                        }
                    }
                    Err(e) => {
                        tx.fail(e);
                        break;
                    }
                }
            }
        });
        Ok(Artifact {
            name,
            content_type: "application/octet-stream",
            body,
            stop: None,
        })
    }
}

/// Opens the dump at `path` if it is one serve may send (see the module's text): a regular
/// file with one link, owned by `runtime_owner` or by serve's user. `Err`: why not.
#[cfg(unix)]
fn open_dump(path: &Path, runtime_owner: Option<u32>) -> Result<std::fs::File, String> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        // O_NOFOLLOW: a symbolic link fails (ELOOP) instead of opening what it names.
        // O_NONBLOCK: a FIFO opens at once instead of waiting for a writer (it is then
        // refused as not a regular file); reads of a regular file ignore the flag.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => "it is a symbolic link".to_string(),
            _ => format!("it cannot be opened: {}", e),
        })?;
    let meta = file
        .metadata()
        .map_err(|e| format!("it cannot be examined: {}", e))?;
    if !meta.file_type().is_file() {
        return Err("it is not a regular file".to_string());
    }
    // A hard link to a file the runtime cannot read has that file's owner, but serve's
    // own user owns many files (root's, if serve runs as root): a dump the runtime just
    // wrote has no other name.
    if meta.nlink() != 1 {
        return Err(format!("it has {} links (a dump has one)", meta.nlink()));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let serve_uid = unsafe { libc::geteuid() };
    if meta.uid() != serve_uid && Some(meta.uid()) != runtime_owner {
        return Err(format!(
            "it is owned by uid {}, neither the runtime's user ({}) nor serve's (uid {})",
            meta.uid(),
            runtime_owner.map_or_else(
                || "unknown in listen mode".to_string(),
                |u| format!("uid {}", u)
            ),
            serve_uid
        ));
    }
    Ok(file)
}

/// Elsewhere the runtime's folder is not shared: opened as it is.
#[cfg(not(unix))]
fn open_dump(path: &Path, _runtime_owner: Option<u32>) -> Result<std::fs::File, String> {
    std::fs::File::open(path).map_err(|e| format!("it cannot be opened: {}", e))
}

/// Deletes `path` if it still names `file` (the runtime may have put something else there
/// since: that is not serve's to delete).
fn remove_if_same(path: &Path, file: &std::fs::File) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let same = match (std::fs::symlink_metadata(path), file.metadata()) {
            (Ok(at), Ok(opened)) => at.dev() == opened.dev() && at.ino() == opened.ino(),
            _ => false,
        };
        if !same {
            return;
        }
    }
    #[cfg(not(unix))]
    let _ = file;
    let _ = std::fs::remove_file(path);
}
