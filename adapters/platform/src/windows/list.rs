//! Listing the processes that have a diagnostic pipe: enumerating `\\.\pipe\`, or probing
//! every process where enumeration is not supported (Wine).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io;
use std::os::windows::ffi::OsStringExt;
use std::os::windows::io::{FromRawHandle, OwnedHandle, RawHandle};
use std::path::PathBuf;

use dsipc::transport::PipeName;

use super::sys::*;
use super::{pipe_exists, pipe_for_pid, raw, wide};
use crate::Error;

/// A process with a diagnostic pipe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiagnosableProcess {
    /// Process id.
    pub pid: u32,
    /// Its pipe, `\\.\pipe\dotnet-diagnostic-{pid}`.
    pub pipe: PathBuf,
}

/// How [`list_processes`] found the pipes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListMethod {
    /// By enumerating `\\.\pipe\`.
    PipeDirectory,
    /// Enumeration is not supported here (as under Wine): by probing the pipe of every
    /// process in a process snapshot, without connecting.
    ProcessProbe,
}

/// Why the diagnosable processes could not be listed.
#[derive(Debug)]
#[non_exhaustive]
pub enum ListError {
    /// This account may not enumerate `\\.\pipe\` (`ERROR_ACCESS_DENIED`). A process whose
    /// pid is known can still be reached: [`pipe_for_pid`].
    Denied {
        /// The system's error.
        source: io::Error,
    },
    /// Enumerating `\\.\pipe\` is not supported here (only from [`list_pipes`];
    /// [`list_processes`] probes every process instead).
    Unsupported {
        /// The system's error.
        source: io::Error,
    },
    /// Another system error (enumeration, or the process snapshot).
    Io {
        /// What was being done.
        op: &'static str,
        /// The system's error.
        source: io::Error,
    },
}

impl fmt::Display for ListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListError::Denied { source } => write!(
                f,
                "listing the named pipes in \\\\.\\pipe\\ was denied ({}): this account may not \
                 enumerate pipes; a process with a known pid can still be reached by its pid",
                source
            ),
            ListError::Unsupported { source } => write!(
                f,
                "this system does not support listing \\\\.\\pipe\\ ({})",
                source
            ),
            ListError::Io { op, source } => write!(f, "{}: {}", op, source),
        }
    }
}

impl std::error::Error for ListError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ListError::Denied { source }
            | ListError::Unsupported { source }
            | ListError::Io { source, .. } => Some(source),
        }
    }
}

impl From<ListError> for Error {
    fn from(e: ListError) -> Error {
        let kind = match &e {
            ListError::Denied { .. } => io::ErrorKind::PermissionDenied,
            ListError::Unsupported { .. } => io::ErrorKind::Unsupported,
            ListError::Io { source, .. } => source.kind(),
        };
        Error::Io(io::Error::new(kind, e.to_string()))
    }
}

/// How an error of `FindFirstFileW(\\.\pipe\*)` is reported.
fn classify_enumeration_error(source: io::Error) -> ListError {
    match source.raw_os_error() {
        Some(ERROR_ACCESS_DENIED) => ListError::Denied { source },
        Some(ERROR_BAD_DEV_TYPE)
        | Some(ERROR_INVALID_FUNCTION)
        | Some(ERROR_NOT_SUPPORTED)
        | Some(ERROR_INVALID_PARAMETER)
        | Some(ERROR_INVALID_NAME)
        | Some(ERROR_BAD_PATHNAME)
        | Some(ERROR_BAD_NETPATH)
        | Some(ERROR_PATH_NOT_FOUND) => ListError::Unsupported { source },
        _ => ListError::Io {
            op: "list \\\\.\\pipe\\",
            source,
        },
    }
}

/// Closes a find handle on drop.
struct FindHandle(HANDLE);

impl Drop for FindHandle {
    fn drop(&mut self) {
        // SAFETY: a handle FindFirstFileW returned, closed once.
        unsafe { FindClose(self.0) };
    }
}

/// The names of every pipe in `\\.\pipe\` (without the prefix), as `FindFirstFileW`
/// lists them.
pub fn list_pipes() -> Result<Vec<OsString>, ListError> {
    let pattern = wide(OsStr::new(r"\\.\pipe\*"));
    // SAFETY: WIN32_FIND_DATAW is plain old data.
    let mut data: WIN32_FIND_DATAW = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated pattern and a valid out structure.
    let h = unsafe { FindFirstFileW(pattern.as_ptr(), &mut data) };
    if h == INVALID_HANDLE_VALUE {
        let err = io::Error::last_os_error();
        return match err.raw_os_error() {
            // No pipe at all.
            Some(ERROR_FILE_NOT_FOUND) | Some(ERROR_NO_MORE_FILES) => Ok(Vec::new()),
            _ => Err(classify_enumeration_error(err)),
        };
    }
    let find = FindHandle(h);
    let mut names = Vec::new();
    loop {
        let len = data
            .cFileName
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(data.cFileName.len());
        names.push(OsString::from_wide(&data.cFileName[..len]));
        // SAFETY: a live find handle and a valid out structure.
        if unsafe { FindNextFileW(find.0, &mut data) } == 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() == Some(ERROR_NO_MORE_FILES) {
                break;
            }
            return Err(ListError::Io {
                op: "list \\\\.\\pipe\\",
                source: err,
            });
        }
    }
    Ok(names)
}

/// The pids of every process in a snapshot (`CreateToolhelp32Snapshot`).
pub fn process_ids() -> io::Result<Vec<u32>> {
    // SAFETY: plain call; the result is checked.
    let h = unsafe { CreateToolhelp32Snapshot(TH32CS_SNAPPROCESS, 0) };
    if h == INVALID_HANDLE_VALUE {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh handle that nothing else owns.
    let snapshot = unsafe { OwnedHandle::from_raw_handle(h as RawHandle) };
    // SAFETY: PROCESSENTRY32W is plain old data; dwSize is set as the API requires.
    let mut entry: PROCESSENTRY32W = unsafe { std::mem::zeroed() };
    entry.dwSize = std::mem::size_of::<PROCESSENTRY32W>() as u32;
    let mut pids = Vec::new();
    // SAFETY: a live snapshot handle and a valid out structure.
    let mut ok = unsafe { Process32FirstW(raw(&snapshot), &mut entry) };
    while ok != 0 {
        pids.push(entry.th32ProcessID);
        // SAFETY: as above.
        ok = unsafe { Process32NextW(raw(&snapshot), &mut entry) };
    }
    Ok(pids)
}

/// Lists the processes that have a diagnostic pipe, by pid, and says how it found them.
///
/// Enumerates `\\.\pipe\` for `dotnet-diagnostic-{pid}`. Where the account may not
/// enumerate pipes this is [`ListError::Denied`]. Where enumeration is not supported (Wine
/// answers `ERROR_BAD_DEV_TYPE`), it probes `\\.\pipe\dotnet-diagnostic-{pid}` for every
/// process in a snapshot instead ([`pipe_exists`]: without connecting).
pub fn list_processes_with_method() -> Result<(Vec<DiagnosableProcess>, ListMethod), ListError> {
    let (mut pids, method) = match list_pipes() {
        Ok(names) => (
            names
                .iter()
                .filter_map(|n| n.to_str().and_then(PipeName::parse))
                .map(|p| p.pid)
                .collect::<Vec<u32>>(),
            ListMethod::PipeDirectory,
        ),
        Err(ListError::Unsupported { .. }) => {
            let pids = process_ids().map_err(|source| ListError::Io {
                op: "snapshot the processes",
                source,
            })?;
            let found = pids
                .into_iter()
                .filter(|&pid| pipe_exists(&pipe_for_pid(pid)))
                .collect();
            (found, ListMethod::ProcessProbe)
        }
        Err(e) => return Err(e),
    };
    pids.sort_unstable();
    pids.dedup();
    let procs = pids
        .into_iter()
        .map(|pid| DiagnosableProcess {
            pid,
            pipe: pipe_for_pid(pid),
        })
        .collect();
    Ok((procs, method))
}

/// Lists the processes that have a diagnostic pipe, by pid (see
/// [`list_processes_with_method`]).
pub fn list_processes() -> Result<Vec<DiagnosableProcess>, ListError> {
    list_processes_with_method().map(|(p, _)| p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enumeration_errors_are_classified() {
        let e = |code| io::Error::from_raw_os_error(code);
        assert!(matches!(
            classify_enumeration_error(e(ERROR_ACCESS_DENIED)),
            ListError::Denied { .. }
        ));
        assert!(matches!(
            classify_enumeration_error(e(ERROR_BAD_DEV_TYPE)),
            ListError::Unsupported { .. }
        ));
        let denied = classify_enumeration_error(e(ERROR_ACCESS_DENIED)).to_string();
        assert!(denied.contains("denied"), "{}", denied);
    }
}
