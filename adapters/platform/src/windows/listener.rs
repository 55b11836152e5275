//! The server side of a named pipe: [`PipeListener`].

use std::io;
use std::os::windows::io::{FromRawHandle, OwnedHandle, RawHandle};
use std::path::{Path, PathBuf};
use std::ptr;
use std::time::Duration;

use super::sys::*;
use super::{new_event, overlapped, pipe_exists, raw, wide, PipeStream, Transfer, PIPE_BUFFER_LEN};

/// The server side of a named pipe: it keeps one instance waiting for a client, accepts
/// clients with a timeout, and creates the next instance as soon as one is taken (so a
/// client that reconnects finds it; runtimes reconnect at once on a reverse port).
///
/// Instances are byte-mode, duplex, overlapped, reject remote clients
/// (`PIPE_REJECT_REMOTE_CLIENTS`) and have the default security descriptor (full control
/// for the creator, SYSTEM and administrators; read for everyone else). The first instance is
/// created with `FILE_FLAG_FIRST_PIPE_INSTANCE`: if another process already serves that
/// name, creating fails with `ERROR_ACCESS_DENIED` instead of sharing the name.
#[derive(Debug)]
pub struct PipeListener {
    path: PathBuf,
    name: Vec<u16>,
    pending: Option<OwnedHandle>,
    event: OwnedHandle,
}

impl PipeListener {
    /// Creates the first instance of `\\.\pipe\NAME` (`path` is that full path).
    ///
    /// A name another server already serves is [`io::ErrorKind::AddrInUse`]: found by a
    /// probe first ([`pipe_exists`]), then by `FILE_FLAG_FIRST_PIPE_INSTANCE`
    /// (`ERROR_ACCESS_DENIED`), which closes the race on Windows (Wine ignores the flag).
    pub fn bind(path: &Path) -> io::Result<PipeListener> {
        if pipe_exists(path) {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                "another server already serves this pipe name",
            ));
        }
        let name = wide(path.as_os_str());
        let first = create_instance(&name, true).map_err(|e| {
            if e.raw_os_error() == Some(ERROR_ACCESS_DENIED) {
                io::Error::new(
                    io::ErrorKind::AddrInUse,
                    "another server already serves this pipe name (access denied)",
                )
            } else {
                e
            }
        })?;
        Ok(PipeListener {
            path: path.to_path_buf(),
            name,
            pending: Some(first),
            event: new_event()?,
        })
    }

    /// The pipe's path, `\\.\pipe\NAME`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits for a client without a time limit.
    pub fn accept(&mut self) -> io::Result<PipeStream> {
        loop {
            if let Some(s) = self.accept_within(None)? {
                return Ok(s);
            }
        }
    }

    /// Waits up to `timeout` for a client; `Ok(None)` when none came.
    pub fn accept_timeout(&mut self, timeout: Duration) -> io::Result<Option<PipeStream>> {
        self.accept_within(Some(timeout.max(Duration::from_millis(1))))
    }

    fn accept_within(&mut self, timeout: Option<Duration>) -> io::Result<Option<PipeStream>> {
        let instance = match self.pending.take() {
            Some(i) => i,
            None => create_instance(&self.name, false)?,
        };
        let handle = raw(&instance);
        let event = raw(&self.event);
        // SAFETY: a valid event handle.
        unsafe { ResetEvent(event) };
        // SAFETY: an overlapped pipe instance and a manual-reset event; no buffers.
        let connected =
            unsafe { overlapped(handle, event, timeout, |ov| ConnectNamedPipe(handle, ov)) };
        match connected {
            Ok(Transfer {
                timed_out: true, ..
            }) => {
                self.pending = Some(instance);
                return Ok(None);
            }
            Ok(_) => {}
            // The client connected between CreateNamedPipeW and ConnectNamedPipe.
            Err(e) if e.raw_os_error() == Some(ERROR_PIPE_CONNECTED) => {}
            // The client connected and has closed already: hand it out all the same (what
            // it wrote can still be read, then EOF), as a Unix listener would.
            Err(e) if e.raw_os_error() == Some(ERROR_NO_DATA) => {}
            Err(e) => return Err(e),
        }
        // Be ready for the next client before handing this one out. Should that fail,
        // the next accept tries again (and reports the error).
        self.pending = create_instance(&self.name, false).ok();
        PipeStream::from_overlapped_handle(instance).map(Some)
    }
}

/// Creates one instance of the pipe `name` (NUL-terminated UTF-16).
fn create_instance(name: &[u16], first: bool) -> io::Result<OwnedHandle> {
    let mut open_mode = PIPE_ACCESS_DUPLEX | FILE_FLAG_OVERLAPPED;
    if first {
        open_mode |= FILE_FLAG_FIRST_PIPE_INSTANCE;
    }
    // SAFETY: `name` is NUL-terminated and outlives the call; null security attributes
    // mean the default descriptor; the result is checked.
    let h = unsafe {
        CreateNamedPipeW(
            name.as_ptr(),
            open_mode,
            PIPE_TYPE_BYTE | PIPE_READMODE_BYTE | PIPE_WAIT | PIPE_REJECT_REMOTE_CLIENTS,
            PIPE_UNLIMITED_INSTANCES,
            PIPE_BUFFER_LEN,
            PIPE_BUFFER_LEN,
            0,
            ptr::null_mut(),
        )
    };
    if h == INVALID_HANDLE_VALUE {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh handle that nothing else owns.
    Ok(unsafe { OwnedHandle::from_raw_handle(h as RawHandle) })
}
