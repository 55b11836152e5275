//! Every diagnosable process at once: ProcessInfo asked of many runtimes in parallel under
//! one deadline ([`probe_all`], what `dsipc ps` shows), the names each goes by
//! ([`process_names`]) and the processes of one name ([`pids_named`], dotnet-trace's `-n`).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{DiagnosticsClient, Endpoint, Error};

/// Probes in flight at once: enough that a few hundred silent sockets cost one timeout, few
/// enough to stay polite to the machine.
pub const PARALLEL_PROBES: usize = 16;

/// What a probe found out about one process.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Probe {
    /// ProcessInfo's command line.
    Command(String),
    /// The runtime does not know ProcessInfo (.NET Core 3.x).
    NotSupported,
    /// This user may not connect to its socket: the error, which names the owner.
    Denied(String),
    /// No answer (an error, or no time left).
    Failed,
}

/// Probes every endpoint with ProcessInfo, [`PARALLEL_PROBES`] at a time, all by
/// `deadline`: one answer per endpoint, in their order ([`Probe::Failed`] for those not
/// reached in time).
pub fn probe_all(endpoints: &[PathBuf], deadline: Instant) -> Vec<Probe> {
    let results: Vec<Mutex<Option<Probe>>> = endpoints.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let workers = PARALLEL_PROBES.min(endpoints.len());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= endpoints.len() {
                    return;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left < Duration::from_millis(1) {
                    return;
                }
                let client =
                    DiagnosticsClient::new(Endpoint::new(&endpoints[i])).with_timeout(left);
                let probe = match client.process_info_basic() {
                    Ok(info) => Probe::Command(info.command_line),
                    Err(e) if e.is_not_supported() => Probe::NotSupported,
                    Err(e @ Error::Connect { .. })
                        if std::error::Error::source(&e)
                            .and_then(|s| s.downcast_ref::<io::Error>())
                            .map(io::Error::kind)
                            == Some(io::ErrorKind::PermissionDenied) =>
                    {
                        Probe::Denied(e.to_string())
                    }
                    Err(_) => Probe::Failed,
                };
                if let Ok(mut slot) = results[i].lock() {
                    *slot = Some(probe);
                }
            });
        }
    });
    results
        .into_iter()
        .map(|m| {
            m.into_inner()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or(Probe::Failed)
        })
        .collect()
}

/// The names a process goes by, as `Process.GetProcessesByName` (dotnet-trace's `-n`)
/// matches them: its `comm` and its executable's file name from `/proc`; elsewhere (or
/// when `/proc` says nothing) the file name of ProcessInfo's command line in `probe`,
/// without `.exe`.
pub fn process_names(pid: u32, probe: Option<&Probe>) -> Vec<String> {
    let mut names: Vec<String> = crate::process_name(pid).into_iter().collect();
    if let Ok(exe) = std::fs::read_link(format!("/proc/{}/exe", pid)) {
        if let Some(f) = exe.file_name() {
            names.push(f.to_string_lossy().into_owned());
        }
    }
    if names.is_empty() {
        if let Some(Probe::Command(line)) = probe {
            names.extend(crate::program_name(line));
        }
    }
    names
}

/// The diagnosable processes named `name` (any case on Windows, as its process names are),
/// in discovery order. ProcessInfo is asked, within `timeout`, only of those `/proc`
/// cannot name (Windows).
pub fn pids_named(tmpdir: Option<&Path>, name: &str, timeout: Duration) -> Result<Vec<u32>, Error> {
    let procs = crate::list_processes(tmpdir)?;
    let from_proc: Vec<Vec<String>> = procs.iter().map(|p| process_names(p.pid, None)).collect();
    let need_probe: Vec<PathBuf> = procs
        .iter()
        .zip(&from_proc)
        .filter(|(_, names)| names.is_empty())
        .map(|(p, _)| p.endpoint.clone())
        .collect();
    let mut probes = probe_all(&need_probe, Instant::now() + timeout).into_iter();
    let mut found = Vec::new();
    for (p, mut names) in procs.iter().zip(from_proc) {
        if names.is_empty() {
            names = process_names(p.pid, probes.next().as_ref());
        }
        let matches = |n: &String| {
            if cfg!(windows) {
                n.eq_ignore_ascii_case(name)
            } else {
                n == name
            }
        };
        if names.iter().any(matches) {
            found.push(p.pid);
        }
    }
    Ok(found)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn probe_all_answers_once_per_endpoint_in_order() {
        assert!(probe_all(&[], Instant::now() + Duration::from_secs(1)).is_empty());
        let dir = std::env::temp_dir().join(format!("dsipc-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // No socket at all, and a socket whose owner never answers: both Failed, the
        // second by the deadline.
        let silent = dir.join("silent-socket");
        let _ = std::fs::remove_file(&silent);
        let _listener = std::os::unix::net::UnixListener::bind(&silent).unwrap();
        let endpoints = [dir.join("absent-socket"), silent.clone()];
        let probes = probe_all(&endpoints, Instant::now() + Duration::from_millis(200));
        assert_eq!(probes, [Probe::Failed, Probe::Failed]);
        // Past the deadline, nothing is tried.
        assert_eq!(
            probe_all(&endpoints, Instant::now()),
            [Probe::Failed, Probe::Failed]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn process_names_come_from_proc_or_the_command_line() {
        #[cfg(target_os = "linux")]
        assert!(!process_names(std::process::id(), None).is_empty());
        let probe = Probe::Command("/usr/bin/dotnet app.dll".into());
        assert_eq!(process_names(u32::MAX, Some(&probe)), ["dotnet"]);
        assert!(process_names(u32::MAX, Some(&Probe::Failed)).is_empty());
    }

    #[test]
    fn pids_named_in_an_empty_folder_is_none() {
        let dir = std::env::temp_dir().join(format!("dsipc-probe-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let found = pids_named(Some(&dir), "app", Duration::from_secs(1)).unwrap();
        assert!(found.is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
