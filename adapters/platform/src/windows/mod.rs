//! Windows transport: the runtime's named pipe `\\.\pipe\dotnet-diagnostic-{pid}`.
//!
//! - [`connect`] opens a pipe within a timeout. While every instance of the pipe is busy
//!   (`ERROR_PIPE_BUSY`: the runtime serves one client at a time and has not created its
//!   next instance yet) it waits with `WaitNamedPipeW` and tries again, until the deadline.
//! - [`PipeStream`] is a connected pipe with read and write timeouts. Pipes opened like
//!   files have none, so every read and write is *overlapped*: it is started, waited for
//!   with `WaitForSingleObject` up to the timeout, and on a timeout cancelled with
//!   `CancelIoEx`, after which the adapter still waits for the cancellation to complete
//!   (bytes that arrived in between are returned, never lost, and the kernel never writes
//!   into a buffer the caller got back). One wait per call: no polling, no helper thread.
//! - [`list_processes`] enumerates `\\.\pipe\` for `dotnet-diagnostic-{pid}` pipes. Where
//!   enumeration is denied it says so ([`ListError::Denied`]); where the system does not
//!   support it (Wine) it falls back to probing the pipe of every process.
//! - [`PipeListener`] is the server side of a pipe (the monitor side of a reverse port, and
//!   test doubles): byte-mode instances that reject remote
//!   clients, accepted with a timeout.
//!
//! The Win32 functions are declared in this crate (`kernel32` only): no dependency besides
//! the core, and Rust 1.63 builds it. dsipc-std implements its `Connection` for
//! [`PipeStream`] and re-exports this module as `dsipc_std::windows`.

mod list;
mod listener;
mod sys;

pub use self::list::{
    list_pipes, list_processes, list_processes_with_method, process_ids, DiagnosableProcess,
    ListError, ListMethod,
};
pub use self::listener::PipeListener;

use std::ffi::OsStr;
use std::fmt;
use std::io::{self, Read, Write};
use std::os::windows::ffi::OsStrExt;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle, RawHandle};
use std::path::{Path, PathBuf};
use std::ptr;
use std::time::{Duration, Instant};

use dsipc::transport::{PipeName, PIPE_NAMESPACE};

use self::sys::*;

/// Size of each direction's buffer of the pipe instances a [`PipeListener`] creates.
pub const PIPE_BUFFER_LEN: u32 = 64 * 1024;

/// A NUL-terminated UTF-16 copy of `s`.
fn wide(s: &OsStr) -> Vec<u16> {
    s.encode_wide().chain(Some(0)).collect()
}

/// Milliseconds for a Win32 wait: rounded up, at least 1 (0 often means "default" or "do
/// not wait"), below `INFINITE`; `None` is `INFINITE`.
fn millis(timeout: Option<Duration>) -> u32 {
    match timeout {
        None => INFINITE,
        Some(t) => crate::millis_ceil(t).clamp(1, u64::from(INFINITE - 1)) as u32,
    }
}

/// A new manual-reset event, not signalled.
fn new_event() -> io::Result<OwnedHandle> {
    // SAFETY: no security attributes, no name; the result is checked before use.
    let h = unsafe { CreateEventW(ptr::null_mut(), 1, 0, ptr::null()) };
    if h.is_null() {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh handle that nothing else owns.
    Ok(unsafe { OwnedHandle::from_raw_handle(h as RawHandle) })
}

fn raw(h: &OwnedHandle) -> HANDLE {
    h.as_raw_handle() as HANDLE
}

/// What an overlapped operation did.
struct Transfer {
    /// Bytes transferred (also for a cancelled operation).
    bytes: u32,
    /// The timeout expired and the operation was cancelled.
    timed_out: bool,
}

/// Runs one overlapped operation on `handle` to its end: `start` begins it with the
/// `OVERLAPPED` it is given; then this waits up to `timeout` on `event`, and on a timeout
/// cancels the operation and waits until the cancellation has completed.
///
/// # Safety
/// `handle` must be open with `FILE_FLAG_OVERLAPPED` and `event` a manual-reset event;
/// every buffer `start` hands to the system must stay valid until this returns (it does:
/// the operation is over when this returns, whatever the outcome).
unsafe fn overlapped<F>(
    handle: HANDLE,
    event: HANDLE,
    timeout: Option<Duration>,
    start: F,
) -> io::Result<Transfer>
where
    F: FnOnce(*mut OVERLAPPED) -> BOOL,
{
    let mut ov = OVERLAPPED {
        Internal: 0,
        InternalHigh: 0,
        Offset: 0,
        OffsetHigh: 0,
        hEvent: event,
    };
    let mut bytes = 0u32;
    if start(&mut ov) == 0 {
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(ERROR_IO_PENDING) {
            // Failed at once: nothing is pending.
            return Err(err);
        }
        // SAFETY (all calls below): `ov` lives on this frame until the operation is over.
        match unsafe { WaitForSingleObject(event, millis(timeout)) } {
            WAIT_OBJECT_0 => {}
            WAIT_TIMEOUT => {
                // ERROR_NOT_FOUND from CancelIoEx: it completed meanwhile. Either way the
                // wait below returns once the operation is over.
                unsafe { CancelIoEx(handle, &mut ov) };
                if unsafe { GetOverlappedResult(handle, &mut ov, &mut bytes, 1) } != 0 {
                    return Ok(Transfer {
                        bytes,
                        timed_out: false,
                    });
                }
                let err = io::Error::last_os_error();
                return if err.raw_os_error() == Some(ERROR_OPERATION_ABORTED) {
                    Ok(Transfer {
                        bytes,
                        timed_out: true,
                    })
                } else {
                    Err(err)
                };
            }
            _ => {
                let err = io::Error::last_os_error();
                unsafe { CancelIoEx(handle, &mut ov) };
                unsafe { GetOverlappedResult(handle, &mut ov, &mut bytes, 1) };
                return Err(err);
            }
        }
    }
    // SAFETY: as above; the operation has completed, so this does not block.
    if unsafe { GetOverlappedResult(handle, &mut ov, &mut bytes, 1) } == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Transfer {
        bytes,
        timed_out: false,
    })
}

/// True for the errors a pipe read reports once the other end has closed (and every byte
/// it wrote has been read).
fn is_closed(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(ERROR_BROKEN_PIPE) | Some(ERROR_PIPE_NOT_CONNECTED)
    )
}

fn check_timeout(timeout: Option<Duration>) -> io::Result<()> {
    if timeout == Some(Duration::ZERO) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "cannot set a 0 duration timeout",
        ));
    }
    Ok(())
}

/// A connected named pipe (either end) with read and write timeouts, through overlapped
/// I/O. A read returns `Ok(0)` once the other end has closed and everything it wrote has
/// been read; a timeout is [`io::ErrorKind::TimedOut`].
pub struct PipeStream {
    handle: OwnedHandle,
    read_event: OwnedHandle,
    write_event: OwnedHandle,
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
}

impl fmt::Debug for PipeStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PipeStream")
            .field("handle", &self.handle.as_raw_handle())
            .field("read_timeout", &self.read_timeout)
            .field("write_timeout", &self.write_timeout)
            .finish()
    }
}

impl PipeStream {
    /// Wraps a pipe handle opened with `FILE_FLAG_OVERLAPPED` (required: reads and writes
    /// are overlapped). No timeouts are set.
    pub fn from_overlapped_handle(handle: OwnedHandle) -> io::Result<PipeStream> {
        Ok(PipeStream {
            handle,
            read_event: new_event()?,
            write_event: new_event()?,
            read_timeout: None,
            write_timeout: None,
        })
    }

    /// The pipe handle.
    pub fn handle(&self) -> &OwnedHandle {
        &self.handle
    }

    /// The read timeout (`None`: reads block until data or EOF).
    pub fn read_timeout(&self) -> Option<Duration> {
        self.read_timeout
    }

    /// The write timeout.
    pub fn write_timeout(&self) -> Option<Duration> {
        self.write_timeout
    }

    /// On the server end of a pipe: the process id of the connected client
    /// (`GetNamedPipeClientProcessId`).
    pub fn client_process_id(&self) -> io::Result<u32> {
        let mut pid = 0u32;
        // SAFETY: a valid pipe handle and a valid out pointer.
        if unsafe { GetNamedPipeClientProcessId(raw(&self.handle), &mut pid) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(pid)
    }

    /// True once the other end has closed the pipe (`PeekNamedPipe` reports a broken
    /// pipe); does not block and consumes nothing.
    pub fn peer_closed(&self) -> bool {
        let mut available = 0u32;
        // SAFETY: a valid pipe handle; no buffer, one valid out pointer.
        let ok = unsafe {
            PeekNamedPipe(
                raw(&self.handle),
                ptr::null_mut(),
                0,
                ptr::null_mut(),
                &mut available,
                ptr::null_mut(),
            )
        };
        ok == 0 && is_closed(&io::Error::last_os_error())
    }

    /// Waits until the other end has read everything written so far (`FlushFileBuffers`).
    /// This blocks without a timeout; a runtime does it before it closes a connection.
    pub fn wait_until_read(&self) -> io::Result<()> {
        // SAFETY: a valid handle.
        if unsafe { FlushFileBuffers(raw(&self.handle)) } == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Read for PipeStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let len = buf.len().min(u32::MAX as usize) as u32;
        let handle = raw(&self.handle);
        let ptr = buf.as_mut_ptr();
        // SAFETY: an overlapped pipe handle and a manual-reset event; `buf` outlives the
        // operation, which `overlapped` finishes before returning.
        let t = unsafe {
            overlapped(handle, raw(&self.read_event), self.read_timeout, |ov| {
                ReadFile(handle, ptr, len, ptr::null_mut(), ov)
            })
        };
        match t {
            Ok(Transfer {
                bytes: 0,
                timed_out: true,
            }) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "pipe read timed out",
            )),
            Ok(t) => Ok(t.bytes as usize),
            Err(e) if is_closed(&e) => Ok(0),
            Err(e) => Err(e),
        }
    }
}

impl Write for PipeStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let len = buf.len().min(u32::MAX as usize) as u32;
        let handle = raw(&self.handle);
        let ptr = buf.as_ptr();
        // SAFETY: as for `read`.
        let t = unsafe {
            overlapped(handle, raw(&self.write_event), self.write_timeout, |ov| {
                WriteFile(handle, ptr, len, ptr::null_mut(), ov)
            })
        }?;
        if t.timed_out && t.bytes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "pipe write timed out (the other end is not reading)",
            ));
        }
        Ok(t.bytes as usize)
    }

    /// Does nothing: written bytes are in the pipe already (see
    /// [`PipeStream::wait_until_read`]).
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl PipeStream {
    /// Sets the read timeout (`None`: reads block; a zero timeout is an error, as for std's
    /// sockets).
    pub fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        check_timeout(timeout)?;
        self.read_timeout = timeout;
        Ok(())
    }

    /// Sets the write timeout (as [`set_read_timeout`](Self::set_read_timeout)).
    pub fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        check_timeout(timeout)?;
        self.write_timeout = timeout;
        Ok(())
    }
}

/// Connects to the pipe at `path` (`\\.\pipe\NAME`) within `timeout`, and returns a stream
/// whose read and write timeouts are both `timeout`.
///
/// While every instance is busy it waits (`WaitNamedPipeW`) and retries until the
/// deadline, then fails with [`io::ErrorKind::TimedOut`]. A pipe that does not exist is
/// [`io::ErrorKind::NotFound`] at once. The client allows the server to identify it but not
/// to impersonate it (`SECURITY_IDENTIFICATION`).
pub fn connect(path: &Path, timeout: Duration) -> io::Result<PipeStream> {
    let timeout = timeout.max(Duration::from_millis(1));
    let deadline = crate::deadline_after(timeout);
    let name = wide(path.as_os_str());
    loop {
        // SAFETY: `name` is NUL-terminated and outlives the call; the result is checked.
        let h = unsafe {
            CreateFileW(
                name.as_ptr(),
                GENERIC_READ | GENERIC_WRITE,
                0,
                ptr::null_mut(),
                OPEN_EXISTING,
                FILE_FLAG_OVERLAPPED | SECURITY_SQOS_PRESENT | SECURITY_IDENTIFICATION,
                ptr::null_mut(),
            )
        };
        if h != INVALID_HANDLE_VALUE {
            // SAFETY: a fresh handle that nothing else owns.
            let handle = unsafe { OwnedHandle::from_raw_handle(h as RawHandle) };
            let mut stream = PipeStream::from_overlapped_handle(handle)?;
            stream.read_timeout = Some(timeout);
            stream.write_timeout = Some(timeout);
            return Ok(stream);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(ERROR_FILE_NOT_FOUND) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "no such pipe (not a .NET process, it has exited, or DOTNET_EnableDiagnostics=0)",
            ));
        }
        if err.raw_os_error() != Some(ERROR_PIPE_BUSY) {
            return Err(err);
        }
        // Every instance is busy: wait for one to be free, then race for it.
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(busy_timeout(timeout));
        }
        // SAFETY: as above.
        if unsafe { WaitNamedPipeW(name.as_ptr(), millis(Some(left))) } == 0 {
            let err = io::Error::last_os_error();
            match err.raw_os_error() {
                Some(ERROR_SEM_TIMEOUT) => return Err(busy_timeout(timeout)),
                // Every instance went away meanwhile: CreateFileW says what is there now.
                Some(ERROR_FILE_NOT_FOUND) => {}
                _ => return Err(err),
            }
        }
    }
}

fn busy_timeout(timeout: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "every instance of the pipe stayed busy for {:.1} s (another client is being served)",
            timeout.as_secs_f64()
        ),
    )
}

/// The default pipe of process `pid`: `\\.\pipe\dotnet-diagnostic-{pid}`.
pub fn pipe_for_pid(pid: u32) -> PathBuf {
    PathBuf::from(PipeName { pid }.to_string())
}

/// True if a pipe named `path` exists, without connecting to it (`WaitNamedPipeW` with a
/// 1 ms wait: connecting would occupy the runtime's single server).
pub fn pipe_exists(path: &Path) -> bool {
    let name = wide(path.as_os_str());
    // SAFETY: NUL-terminated name.
    if unsafe { WaitNamedPipeW(name.as_ptr(), 1) } != 0 {
        return true;
    }
    // Busy instances exist too.
    io::Error::last_os_error().raw_os_error() == Some(ERROR_SEM_TIMEOUT)
}

/// A pipe name that is not usable: empty, or holding a backslash after `\\.\pipe\`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidPipeName(pub String);

impl fmt::Display for InvalidPipeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a pipe name (NAME or \\\\.\\pipe\\NAME, NAME non-empty without '\\')",
            self.0
        )
    }
}

impl std::error::Error for InvalidPipeName {}

/// `\\.\pipe\NAME` for `NAME` or `\\.\pipe\NAME` (as `DOTNET_DiagnosticPorts` takes
/// either a bare name or the full path on Windows).
pub fn pipe_path(name: &str) -> Result<PathBuf, InvalidPipeName> {
    let bare = name.strip_prefix(PIPE_NAMESPACE).unwrap_or(name);
    if bare.is_empty() || bare.contains('\\') || bare.contains('\0') || bare.len() > 240 {
        return Err(InvalidPipeName(name.to_string()));
    }
    Ok(PathBuf::from(format!("{}{}", PIPE_NAMESPACE, bare)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millis_rounds_up_and_never_zero() {
        assert_eq!(millis(None), INFINITE);
        assert_eq!(millis(Some(Duration::from_nanos(1))), 1);
        assert_eq!(millis(Some(Duration::from_micros(1500))), 2);
        assert_eq!(millis(Some(Duration::from_secs(u64::MAX))), INFINITE - 1);
    }

    #[test]
    fn pipe_paths() {
        assert_eq!(pipe_path("x").unwrap(), PathBuf::from(r"\\.\pipe\x"));
        assert_eq!(
            pipe_path(r"\\.\pipe\x").unwrap(),
            PathBuf::from(r"\\.\pipe\x")
        );
        assert!(pipe_path("").is_err());
        assert!(pipe_path(r"a\b").is_err());
        assert_eq!(
            pipe_for_pid(42),
            Path::new(r"\\.\pipe\dotnet-diagnostic-42")
        );
    }
}
