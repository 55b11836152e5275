//! Which runtimes `dsipc serve` can reach, and which one a request names.
//!
//! As dotnet-monitor: every process with a diagnostic endpoint is listed; a request names
//! one by `pid`, `uid` (the runtime instance cookie) or `name` (the process name), all that
//! are given having to match; without any, the default process is the only one there is.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsipc::wire::Guid;
use dsipc_tokio::reverse::RuntimePool;
use dsipc_tokio::{DiagnosticsClient, Endpoint, ProcessInfo};
use tokio::sync::Semaphore;

use super::api::ApiError;

/// Time one runtime has to answer ProcessInfo while listing.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// Time a runtime that connected to serve's reverse port has to answer ResumeRuntime: the
/// same as ProcessInfo while listing, [`PROBE_TIMEOUT`]. The runtime answers at once (a
/// suspended one resumes, a running one ignores it); the wait for its connection counts,
/// and a runtime busy with another command reconnects within milliseconds of answering it.
pub const RESUME_TIMEOUT: Duration = PROBE_TIMEOUT;

/// A runtime serve can reach.
#[derive(Clone, Debug)]
pub struct Runtime {
    /// Process id.
    pub pid: u32,
    /// The runtime instance cookie, as a lowercase GUID (dotnet-monitor's `uid`).
    pub uid: String,
    /// The process name (`/proc/PID/comm`, else the command line's program).
    pub name: String,
    /// What ProcessInfo said.
    pub info: ProcessInfo,
    /// How to reach it.
    pub target: Target,
    /// Its user: its socket's owner (connect mode, Unix); `None` in listen mode, where
    /// serve knows only the pid the runtime advertises.
    pub owner: Option<u32>,
}

/// How serve reaches a runtime.
#[derive(Clone, Debug)]
pub enum Target {
    /// Its diagnostic endpoint (connect mode).
    Endpoint(PathBuf),
    /// Its connections to serve's reverse port (listen mode), by runtime instance cookie.
    Pooled(Arc<RuntimePool>, Guid),
}

impl Runtime {
    /// Its runtime's major version (ProcessInfo2+; `None` for .NET Core 3.x).
    pub fn major_version(&self) -> Option<u32> {
        self.info.clr_major()
    }

    /// What identifies it across listings (see [`cache_key`]).
    pub fn key(&self) -> (u32, String) {
        cache_key(self.pid, &self.target)
    }

    /// A client for it with `timeout`.
    pub fn client(&self, timeout: Duration) -> DiagnosticsClient {
        match &self.target {
            Target::Endpoint(path) => DiagnosticsClient::new(Endpoint::new(path)),
            Target::Pooled(pool, cookie) => pool.client(*cookie),
        }
        .with_timeout(timeout)
    }
}

/// Listen mode: sends ResumeRuntime to every runtime once it connects to serve's reverse
/// port, as dotnet-monitor's `ServerEndpointInfoSource` does for every runtime instance it
/// accepts. A runtime started with `DOTNET_DiagnosticPorts=PATH,connect` is suspended
/// (`suspend` is the default) until then; one that is not ignores the command.
///
/// Once per runtime instance (cookie) while it stays connected; one that is gone and comes
/// back is resumed again (dotnet-monitor accepts it afresh). An error reply (a runtime that
/// does not know the command) is ignored, as dotnet-monitor ignores `ServerErrorException`;
/// any other failure is logged, and not retried (dotnet-monitor logs it too). Runs until
/// aborted.
pub async fn resume_connected_runtimes(pool: Arc<RuntimePool>) {
    // The cookies of the runtimes resumed (or being resumed) and still listed: at most the
    // pool's own bound (MAX_POOLED_RUNTIMES) plus the ones that joined since the last look.
    let mut known: HashSet<Guid> = HashSet::new();
    loop {
        // No timeout worth having: `wait_until` treats this as "a year", and we wait again.
        let listed = match pool
            .wait_until(Duration::MAX, |list| {
                list.iter().any(|r| !known.contains(&r.cookie))
            })
            .await
        {
            Ok(list) => list,
            Err(_) => continue,
        };
        known.retain(|c| listed.iter().any(|r| r.cookie == *c));
        for r in listed {
            if known.insert(r.cookie) {
                tokio::spawn(resume(pool.client(r.cookie), r.pid));
            }
        }
    }
}

/// Resumes one runtime of the pool (see [`resume_connected_runtimes`]).
async fn resume(client: DiagnosticsClient, pid: u64) {
    match client.with_timeout(RESUME_TIMEOUT).resume_runtime().await {
        Ok(()) => {}
        // The runtime answered, with an error: it does not know ResumeRuntime.
        Err(dsipc_tokio::Error::ErrorReply { .. })
        | Err(dsipc_tokio::Error::NotSupported { .. }) => {}
        Err(e) => eprintln!(
            "dsipc: serve: cannot resume the runtime of pid {}: {}",
            pid, e
        ),
    }
}

/// What a request asked for.
#[derive(Default, Debug)]
pub struct Selector {
    pub pid: Option<u32>,
    pub uid: Option<String>,
    pub name: Option<String>,
}

impl Selector {
    fn is_empty(&self) -> bool {
        self.pid.is_none() && self.uid.is_none() && self.name.is_none()
    }

    fn matches(&self, r: &Runtime) -> bool {
        self.pid.map_or(true, |p| p == r.pid)
            && self
                .uid
                .as_ref()
                .map_or(true, |u| u.eq_ignore_ascii_case(&r.uid))
            && self
                .name
                .as_ref()
                .map_or(true, |n| n.eq_ignore_ascii_case(&r.name))
    }
}

/// The process name, as dotnet-monitor takes it: the file name of the command line's
/// program (without `.exe`), else `/proc/PID/comm`, else `unknown`.
fn process_name(pid: u32, command_line: &str) -> String {
    dsipc_std::program_name(command_line)
        .or_else(|| dsipc_std::process_name(pid))
        .unwrap_or_else(|| "unknown".to_string())
}

/// Every runtime endpoint in `tmpdir` (or where each runtime says).
async fn endpoints(tmpdir: Option<&Path>) -> Result<Vec<(u32, Target)>, ApiError> {
    let tmp = tmpdir.map(Path::to_path_buf);
    let endpoints = tokio::task::spawn_blocking(move || dsipc_std::list_processes(tmp.as_deref()))
        .await
        .map_err(|e| ApiError::internal(format!("listing processes: {}", e)))?
        .map_err(|e| ApiError::internal(format!("listing processes: {}", e)))?;
    Ok(endpoints
        .into_iter()
        .map(|ep| (ep.pid, Target::Endpoint(ep.endpoint)))
        .collect())
}

/// The runtimes connected to `pool`.
fn pooled(pool: &Arc<RuntimePool>) -> Vec<(u32, Target)> {
    pool.runtimes()
        .into_iter()
        .filter_map(|r| {
            let pid = u32::try_from(r.pid).ok()?;
            Some((pid, Target::Pooled(Arc::clone(pool), r.cookie)))
        })
        .collect()
}

/// What identifies a runtime across listings: its pid and endpoint (the socket's name
/// holds the process's start time), or its pid and cookie in listen mode.
fn cache_key(pid: u32, target: &Target) -> (u32, String) {
    match target {
        Target::Endpoint(p) => (pid, p.to_string_lossy().into_owned()),
        Target::Pooled(_, cookie) => (pid, cookie.to_string()),
    }
}

/// Probes running at once, over every listing (up to 128 requests may list at the same
/// time). A real runtime answers ProcessInfo within milliseconds, so 32 at a time still
/// probe thousands of runtimes a second (a host rarely has more than a few dozen); a socket
/// that accepts and never answers holds its turn for [`PROBE_TIMEOUT`], so 32 of them cost
/// 32 descriptors and tasks for 3 s: well inside the few dozen descriptors `fds::BASE`
/// keeps for discovery and sessions, however many such sockets anyone creates.
pub const MAX_PROBES: usize = 32;

/// How long a probe waits for its turn; past it the socket is not listed this time. Shorter
/// than [`PROBE_TIMEOUT`]: a listing takes at most this plus [`PROBE_TIMEOUT`] (4 s), and
/// when silent sockets hold every turn the waiters give up before any turn frees, so they
/// do not pile up. Real runtimes' probes free their turns within milliseconds: a second
/// lets hundreds of them through.
pub const PROBE_TURN_WAIT: Duration = Duration::from_secs(1);

/// How long a socket whose runtime did not answer ProcessInfo within [`PROBE_TIMEOUT`] is
/// left out of listings before it is asked again. A runtime answers at once even while
/// suspended at startup; one that does not is hung or not a runtime, and asking it on every
/// listing would cost a turn and 3 s each time. A minute lets a runtime that was only
/// stalled (a debugger, a long GC suspension) be listed again soon.
pub const SILENT_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Discovery's probing state, shared by every listing.
pub struct Probes {
    /// The turns ([`MAX_PROBES`]).
    turns: Arc<Semaphore>,
    /// The runtimes that did not answer in time, and when they were last asked, keyed as
    /// [`Discovery::cache`] (forgotten with it when their socket goes).
    silent: Mutex<HashMap<(u32, String), Instant>>,
    /// The sockets already said on stderr to have been skipped for want of a turn.
    told: Mutex<HashSet<(u32, String)>>,
}

impl Default for Probes {
    fn default() -> Probes {
        Probes {
            turns: Arc::new(Semaphore::new(MAX_PROBES)),
            silent: Mutex::new(HashMap::new()),
            told: Mutex::new(HashSet::new()),
        }
    }
}

/// What probing one runtime came to.
enum Probed {
    /// It answered (or is a .NET Core 3.x runtime).
    Listed(Box<Runtime>),
    /// It did not answer within [`PROBE_TIMEOUT`].
    Silent,
    /// No turn came within [`PROBE_TURN_WAIT`].
    NoTurn,
    /// Gone, stale, or failing otherwise.
    Failed,
}

/// Asks each runtime for ProcessInfo ([`MAX_PROBES`] at a time over every listing, each
/// within [`PROBE_TIMEOUT`] once its turn came); the ones that answer, and the keys of
/// the ones that did not answer in time and of the ones that got no turn.
async fn probe_all(
    turns: &Arc<Semaphore>,
    targets: Vec<(u32, Target)>,
) -> (Vec<Runtime>, Vec<(u32, String)>, Vec<(u32, String)>) {
    let mut probes = Vec::with_capacity(targets.len());
    for (pid, target) in targets {
        let key = cache_key(pid, &target);
        let turns = Arc::clone(turns);
        probes.push((
            key,
            tokio::spawn(async move {
                let turn = match tokio::time::timeout(PROBE_TURN_WAIT, turns.acquire_owned()).await
                {
                    Ok(Ok(turn)) => turn,
                    _ => return Probed::NoTurn,
                };
                let probed = probe(pid, target).await;
                drop(turn);
                probed
            }),
        ));
    }
    let mut out = Vec::new();
    let mut silent = Vec::new();
    let mut skipped = Vec::new();
    for (key, p) in probes {
        match p.await {
            Ok(Probed::Listed(r)) => out.push(*r),
            Ok(Probed::Silent) => silent.push(key),
            Ok(Probed::NoTurn) => skipped.push(key),
            Ok(Probed::Failed) | Err(_) => {}
        }
    }
    (out, silent, skipped)
}

/// What a runtime that has no ProcessInfo (.NET Core 3.x) is listed with.
fn unknown_info(pid: u32) -> ProcessInfo {
    let mut info = ProcessInfo::new(dsipc::Command::ProcessInfo, u64::from(pid), Guid::NIL);
    info.os = "unknown".into();
    info.arch = "unknown".into();
    info
}

async fn probe(pid: u32, target: Target) -> Probed {
    let mut r = Runtime {
        pid,
        uid: String::new(),
        name: String::new(),
        info: unknown_info(pid),
        owner: None,
        target,
    };
    #[cfg(unix)]
    if let Target::Endpoint(path) = &r.target {
        use std::os::unix::fs::MetadataExt;
        r.owner = std::fs::metadata(path).ok().map(|m| m.uid());
    }
    match r.client(PROBE_TIMEOUT).process_info().await {
        Ok(info) => r.info = info,
        // .NET Core 3.x has no ProcessInfo: listed as dotnet-monitor lists it (a nil uid,
        // "unknown" where it has no answer), its command line from /proc. In listen mode
        // its Advertise named its cookie.
        Err(dsipc_tokio::Error::NotSupported { .. }) => {
            r.info.command_line = dsipc_std::command_line(pid).unwrap_or_else(|| "unknown".into());
            if let Target::Pooled(_, cookie) = &r.target {
                r.info.cookie = *cookie;
            }
        }
        Err(e) if e.is_timeout() => return Probed::Silent,
        // Gone, stale, or failing: not listed.
        Err(_) => return Probed::Failed,
    }
    r.uid = r.info.cookie.to_string();
    r.name = process_name(pid, &r.info.command_line);
    Probed::Listed(Box::new(r))
}

/// dotnet-monitor's words when a request names no single process.
const MULTIPLE: &str =
    "Unable to select a single target process because multiple target processes have been discovered.";
/// dotnet-monitor's words when a request names no process there is.
const NONE: &str = "Unable to discover a target process.";

/// One of dotnet-monitor's `DefaultProcess:Filters` (or `--default-process KEY=VALUE`):
/// case-insensitive, the whole value or (`MatchType: Contains`) a substring. The flag's
/// `ProcessName` is exact, its `CommandLine` a substring.
#[derive(Clone, Debug)]
pub enum DefaultFilter {
    /// `ProcessId=PID`.
    ProcessId(u32),
    /// `ProcessName=NAME`: exactly (case-insensitively), or as a part with `contains`.
    ProcessName {
        /// The name.
        name: String,
        /// Whether a part of the name matches.
        contains: bool,
    },
    /// `CommandLine=TEXT`: `text` lowercased, the whole line or (with `contains`) a part.
    CommandLine {
        /// The text, lowercased.
        text: String,
        /// Whether a part of the command line matches.
        contains: bool,
    },
}

impl DefaultFilter {
    /// `ProcessId=1234`, `ProcessName=dotnet`, `CommandLine=MyApp.dll` (keys
    /// case-insensitive).
    pub fn parse(text: &str) -> Result<DefaultFilter, String> {
        let (k, v) = text
            .split_once('=')
            .ok_or_else(|| format!("--default-process {:?}: wants KEY=VALUE", text))?;
        if v.is_empty() {
            return Err(format!("--default-process {:?}: the value is empty", text));
        }
        match k.trim().to_ascii_lowercase().as_str() {
            "processid" | "pid" => v
                .parse()
                .map(DefaultFilter::ProcessId)
                .map_err(|_| format!("--default-process {:?}: not a process id", text)),
            "processname" | "name" => Ok(DefaultFilter::ProcessName {
                name: v.to_string(),
                contains: false,
            }),
            "commandline" => Ok(DefaultFilter::CommandLine {
                text: v.to_ascii_lowercase(),
                contains: true,
            }),
            _ => Err(format!(
                "--default-process {:?}: the key is ProcessId, ProcessName or CommandLine",
                text
            )),
        }
    }

    fn matches(&self, r: &Runtime) -> bool {
        match self {
            DefaultFilter::ProcessId(p) => r.pid == *p,
            DefaultFilter::ProcessName { name, contains } => {
                let have = r.name.to_ascii_lowercase();
                let want = name.to_ascii_lowercase();
                if *contains {
                    have.contains(&want)
                } else {
                    have == want
                }
            }
            DefaultFilter::CommandLine { text, contains } => {
                let have = r.info.command_line.to_ascii_lowercase();
                if *contains {
                    have.contains(text.as_str())
                } else {
                    have == *text
                }
            }
        }
    }
}

/// Where serve finds runtimes, and which is the default.
pub struct Discovery {
    /// Where runtimes' sockets are (`--tmpdir`; `None`: where each runtime says).
    pub tmpdir: Option<PathBuf>,
    /// Listen mode (`--diagnostic-port PATH`): the runtimes connected to serve's reverse
    /// port, instead of their own sockets.
    pub pool: Option<Arc<RuntimePool>>,
    /// `DefaultProcess:Filters` (`--default-process`), all matching; without any the
    /// default is the only runtime there is.
    pub default_filter: Vec<DefaultFilter>,
    /// What each runtime answered when first listed (ProcessInfo does not change while a
    /// runtime lives), so a listing asks only runtimes it has not seen.
    pub cache: Mutex<HashMap<(u32, String), Runtime>>,
    /// The probes' turns, and the runtimes that did not answer.
    pub probes: Probes,
}

impl Discovery {
    /// Every runtime that answers.
    pub async fn list(&self) -> Result<Vec<Runtime>, ApiError> {
        let targets = match &self.pool {
            Some(pool) => pooled(pool),
            None => endpoints(self.tmpdir.as_deref()).await?,
        };
        let keys: Vec<(u32, String)> = targets.iter().map(|(p, t)| cache_key(*p, t)).collect();
        let now = Instant::now();
        let (mut known, unknown): (Vec<Runtime>, Vec<(u32, Target)>) = {
            let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            let silent = self.probes.silent.lock().unwrap_or_else(|p| p.into_inner());
            let mut known = Vec::new();
            let mut unknown = Vec::new();
            for (key, (pid, target)) in keys.iter().zip(targets) {
                match cache.get(key) {
                    Some(r) => known.push(r.clone()),
                    // Silent not long ago: not asked again yet.
                    None if silent
                        .get(key)
                        .map_or(false, |t| now.duration_since(*t) < SILENT_RETRY_AFTER) => {}
                    None => unknown.push((pid, target)),
                }
            }
            (known, unknown)
        };
        let (probed, silent, skipped) = probe_all(&self.probes.turns, unknown).await;
        {
            let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
            for r in &probed {
                cache.insert(cache_key(r.pid, &r.target), r.clone());
            }
            // Runtimes no longer listed are forgotten.
            cache.retain(|k, _| keys.contains(k));
        }
        {
            let mut s = self.probes.silent.lock().unwrap_or_else(|p| p.into_inner());
            for key in silent {
                s.insert(key, Instant::now());
            }
            s.retain(|k, _| keys.contains(k));
        }
        self.tell_skipped(&keys, skipped);
        known.extend(probed);
        known.sort_by_key(|r| r.pid);
        Ok(known)
    }

    /// Says once on stderr which sockets were not listed for want of a probe's turn (each
    /// socket once while it stays).
    fn tell_skipped(&self, keys: &[(u32, String)], skipped: Vec<(u32, String)>) {
        let mut told = self.probes.told.lock().unwrap_or_else(|p| p.into_inner());
        told.retain(|k| keys.contains(k));
        let new: Vec<(u32, String)> = skipped
            .into_iter()
            .filter(|k| told.insert(k.clone()))
            .collect();
        if let Some((_, first)) = new.first() {
            eprintln!(
                "dsipc: serve: {} runtime endpoint(s) not listed this time: no probe turn within {} s ({} probes at a time, others not answering), e.g. {}",
                new.len(),
                PROBE_TURN_WAIT.as_secs(),
                MAX_PROBES,
                first
            );
        }
    }

    /// The default process among `all` (see [`DefaultFilter`]).
    pub fn default_of<'a>(&self, all: &'a [Runtime]) -> Result<&'a Runtime, ApiError> {
        let mut found = all
            .iter()
            .filter(|r| self.default_filter.iter().all(|f| f.matches(r)));
        match (found.next(), found.next()) {
            (Some(r), None) => Ok(r),
            (None, _) => Err(ApiError::bad_request(NONE)),
            (Some(_), Some(_)) => Err(ApiError::bad_request(MULTIPLE)),
        }
    }

    /// The runtime `sel` names (or the default one).
    pub async fn select(&self, sel: &Selector) -> Result<Runtime, ApiError> {
        let all = self.list().await?;
        if sel.is_empty() {
            return self.default_of(&all).cloned();
        }
        let mut found = all.into_iter().filter(|r| sel.matches(r));
        match (found.next(), found.next()) {
            (Some(r), None) => Ok(r),
            (None, _) => Err(ApiError::bad_request(NONE)),
            (Some(_), Some(_)) => Err(ApiError::bad_request(MULTIPLE)),
        }
    }
}
