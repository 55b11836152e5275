//! Egress and operations: an artifact sent to a file-system egress provider instead of the
//! client, tracked as dotnet-monitor's operations (`202 Accepted` with
//! `Location: /operations/{id}`, then `GET /operations`, `GET /operations/{id}` and
//! `DELETE /operations/{id}[?stop=true]`).
//!
//! A provider is a folder (`--egress NAME=DIR`). An artifact is written to a temporary file
//! there and linked to its name only when whole (an existing file of that name is never
//! replaced: the operation fails instead); a failed or cancelled one leaves nothing.

use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use http_body_util::BodyExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::Notify;

use super::models::{OperationError, OperationProcessInfo, OperationStatus, OperationSummary};
use crate::egress::{self, EgressError, EgressTarget};
use crate::http::Body;
use crate::json;

/// Operations kept for `GET /operations` (the oldest finished ones go first).
pub const MAX_OPERATIONS: usize = 1000;

/// An egress provider.
#[derive(Clone, Debug)]
pub struct Egress {
    /// Its name (`egressProvider=NAME`).
    pub name: String,
    /// Where it stores artifacts.
    pub target: EgressTarget,
}

/// `NAME=DIR[;NAME=DIR...]`.
pub fn parse_egress(list: &str) -> Result<Vec<Egress>, String> {
    let mut out: Vec<Egress> = Vec::new();
    for item in list.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, dir) = item
            .split_once('=')
            .ok_or_else(|| format!("--egress {:?}: wants NAME=DIR", item))?;
        if name.is_empty() || dir.is_empty() {
            return Err(format!("--egress {:?}: wants NAME=DIR", item));
        }
        if out.iter().any(|e| e.name.eq_ignore_ascii_case(name)) {
            return Err(format!("--egress names {:?} twice", name));
        }
        out.push(Egress {
            name: name.to_string(),
            target: EgressTarget::FileSystem(PathBuf::from(dir)),
        });
    }
    Ok(out)
}

/// dotnet-monitor's operation states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Running,
    Stopping,
    Succeeded,
    Failed,
    Cancelled,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            State::Running => "Running",
            State::Stopping => "Stopping",
            State::Succeeded => "Succeeded",
            State::Failed => "Failed",
            State::Cancelled => "Cancelled",
        }
    }

    fn is_over(self) -> bool {
        matches!(self, State::Succeeded | State::Failed | State::Cancelled)
    }
}

/// The process an operation is about.
#[derive(Clone, Debug)]
pub struct ProcessRef {
    pub pid: u32,
    pub uid: String,
    pub name: String,
}

struct Progress {
    state: State,
    resource: Option<String>,
    error: Option<String>,
}

/// One operation.
pub struct Operation {
    id: String,
    created: SystemTime,
    process: ProcessRef,
    egress: String,
    tags: Vec<String>,
    /// Ends the collection early, keeping what came (traces); `None`: not stoppable.
    stop: Option<Arc<Notify>>,
    cancel: Notify,
    progress: Mutex<Progress>,
    /// Becomes true when the operation is over (what [`Operation::finished`] waits for).
    over: tokio::sync::watch::Sender<bool>,
}

impl Operation {
    fn progress(&self) -> std::sync::MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.id
    }

    fn summary<'a>(&'a self, p: &Progress) -> OperationSummary<'a> {
        OperationSummary {
            operation_id: &self.id,
            created_date_time: rfc3339(self.created),
            status: p.state.name(),
            process: OperationProcessInfo {
                pid: self.process.pid,
                uid: &self.process.uid,
                name: &self.process.name,
            },
            egress_provider_name: &self.egress,
            is_stoppable: self.stop.is_some(),
            tags: &self.tags,
        }
    }

    /// `GET /operations`' body: an OperationSummary for each of `ops`, as a JSON array.
    pub fn summaries_json(ops: &[Arc<Operation>]) -> String {
        let summaries: Vec<OperationSummary<'_>> =
            ops.iter().map(|o| o.summary(&o.progress())).collect();
        json::to_string(&summaries)
    }

    /// OperationStatus.
    pub fn status_json(&self) -> String {
        let p = self.progress();
        json::to_string(&OperationStatus {
            resource_location: p.resource.as_deref(),
            error: p.error.as_deref().map(|message| OperationError {
                code: "OperationFailed",
                message,
            }),
            summary: self.summary(&p),
        })
    }

    /// Waits until the operation is over: where its artifact landed, or why it did not.
    pub async fn finished(&self) -> Result<String, String> {
        // Subscribed before looking: an end after the look wakes the wait.
        let mut over = self.over.subscribe();
        loop {
            {
                let p = self.progress();
                match p.state {
                    State::Succeeded => return Ok(p.resource.clone().unwrap_or_default()),
                    State::Failed => {
                        return Err(p.error.clone().unwrap_or_else(|| "failed".into()))
                    }
                    State::Cancelled => return Err("the operation was cancelled".into()),
                    State::Running | State::Stopping => {}
                }
            }
            if over.changed().await.is_err() {
                return Err("the operation was dropped".into());
            }
        }
    }

    /// Whether it succeeded (`GET /operations/{id}` is then 201).
    pub fn succeeded(&self) -> bool {
        self.progress().state == State::Succeeded
    }

    fn matches(
        &self,
        pid: Option<u32>,
        uid: Option<&str>,
        name: Option<&str>,
        tags: &[String],
    ) -> bool {
        pid.map_or(true, |p| p == self.process.pid)
            && uid.map_or(true, |u| u.eq_ignore_ascii_case(&self.process.uid))
            && name.map_or(true, |n| n.eq_ignore_ascii_case(&self.process.name))
            && tags.iter().all(|t| self.tags.contains(t))
    }
}

/// Why `DELETE /operations/{id}` was refused.
pub enum DeleteError {
    /// No operation has that id.
    Unknown,
    /// It is over already.
    Finished,
    /// Asked to stop, but it cannot be stopped (only cancelled).
    Unstoppable,
}

/// Every operation.
#[derive(Default)]
pub struct Operations {
    list: Mutex<VecDeque<Arc<Operation>>>,
}

impl Operations {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Operation>>> {
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts sending `body` (`content_type`) to `egress` as `file_name`; returns the
    /// operation.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &self,
        egress: &Egress,
        file_name: &str,
        content_type: &str,
        body: Body,
        process: ProcessRef,
        tags: Vec<String>,
        stop: Option<Arc<Notify>>,
    ) -> Result<Arc<Operation>, String> {
        let op = Arc::new(Operation {
            id: new_uuid()?,
            created: SystemTime::now(),
            process,
            egress: egress.name.clone(),
            tags,
            stop,
            cancel: Notify::new(),
            progress: Mutex::new(Progress {
                state: State::Running,
                resource: None,
                error: None,
            }),
            over: tokio::sync::watch::channel(false).0,
        });
        {
            let mut list = self.lock();
            if list.len() >= MAX_OPERATIONS {
                match list.iter().position(|o| o.progress().state.is_over()) {
                    Some(i) => {
                        list.remove(i);
                    }
                    None => {
                        return Err(format!(
                            "{} operations are running; no room for another",
                            MAX_OPERATIONS
                        ))
                    }
                }
            }
            list.push_back(Arc::clone(&op));
        }
        let task_op = Arc::clone(&op);
        let target = egress.target.clone();
        let file_name = file_name.to_string();
        let content_type = content_type.to_string();
        tokio::spawn(async move {
            let outcome = match &target {
                EgressTarget::FileSystem(dir) => tokio::select! {
                    r = write_file(body, dir, &file_name) => {
                        Some(r.map(|p| Some(p.to_string_lossy().into_owned())))
                    }
                    _ = task_op.cancel.notified() => None,
                },
                cloud => {
                    // The clients abort themselves when cancelled: nothing stays stored.
                    let r = egress::upload(
                        cloud,
                        &file_name,
                        &content_type,
                        body,
                        task_op.cancel.notified(),
                    )
                    .await;
                    match r {
                        Err(EgressError::Cancelled) => None,
                        r => Some(
                            r.map(Some)
                                .map_err(|e| format!("{} egress failed: {}", cloud.kind(), e)),
                        ),
                    }
                }
            };
            let mut p = task_op.progress();
            match outcome {
                Some(Ok(resource)) => {
                    p.state = State::Succeeded;
                    p.resource = resource;
                }
                Some(Err(e)) => {
                    p.state = State::Failed;
                    p.error = Some(e);
                }
                None => p.state = State::Cancelled,
            }
            drop(p);
            task_op.over.send_replace(true);
        });
        Ok(op)
    }

    /// The operations matching the filters, oldest first.
    pub fn list(
        &self,
        pid: Option<u32>,
        uid: Option<&str>,
        name: Option<&str>,
        tags: &[String],
    ) -> Vec<Arc<Operation>> {
        self.lock()
            .iter()
            .filter(|o| o.matches(pid, uid, name, tags))
            .cloned()
            .collect()
    }

    /// Operation `id`.
    pub fn get(&self, id: &str) -> Option<Arc<Operation>> {
        self.lock()
            .iter()
            .find(|o| o.id.eq_ignore_ascii_case(id))
            .cloned()
    }

    /// Cancels operation `id` (its partial file removed), or with `stop` ends its
    /// collection early keeping what came.
    pub fn delete(&self, id: &str, stop: bool) -> Result<(), DeleteError> {
        let op = self.get(id).ok_or(DeleteError::Unknown)?;
        let mut p = op.progress();
        if p.state.is_over() {
            return Err(DeleteError::Finished);
        }
        if stop {
            let s = op.stop.as_ref().ok_or(DeleteError::Unstoppable)?;
            p.state = State::Stopping;
            s.notify_one();
        } else {
            op.cancel.notify_one();
        }
        Ok(())
    }
}

/// Writes `body` to `dir/name` through a temporary file linked into place when whole;
/// the path, or why not. Whatever happens, the temporary file is removed.
async fn write_file(mut body: Body, dir: &Path, name: &str) -> Result<PathBuf, String> {
    tokio::fs::create_dir_all(dir).await.map_err(|e| {
        format!(
            "File system egress failed: cannot create {}: {}",
            dir.display(),
            e
        )
    })?;
    let dest = dir.join(name);
    let tmp = dir.join(format!(".{}.{}.dsipc-partial", name, new_uuid()?));
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .await
        .map_err(|e| format!("File system egress failed: {}: {}", tmp.display(), e))?;
    let guard = RemoveOnDrop(Some(tmp.clone()));
    loop {
        match body.frame().await {
            None => break,
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    file.write_all(&data)
                        .await
                        .map_err(|e| format!("File system egress failed: {}", e))?;
                }
            }
            Some(Err(e)) => return Err(format!("the artifact was cut short: {}", e)),
        }
    }
    file.flush()
        .await
        .map_err(|e| format!("File system egress failed: {}", e))?;
    file.sync_all()
        .await
        .map_err(|e| format!("File system egress failed: {}", e))?;
    drop(file);
    // A hard link never replaces an existing file.
    std::fs::hard_link(&tmp, &dest).map_err(|e| {
        if e.kind() == io::ErrorKind::AlreadyExists {
            format!(
                "File system egress failed: {} exists; not replacing it",
                dest.display()
            )
        } else {
            format!("File system egress failed: {}: {}", dest.display(), e)
        }
    })?;
    drop(guard);
    Ok(dest)
}

struct RemoveOnDrop(Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A random (version 4) UUID, lowercase.
fn new_uuid() -> Result<String, String> {
    let mut b = [0u8; 16];
    getrandom::getrandom(&mut b).map_err(|e| format!("no random bytes: {}", e))?;
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: Vec<String> = b.iter().map(|x| format!("{:02x}", x)).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        h[0..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..16].concat()
    ))
}

/// `2021-07-21T06:21:15.315861Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let (y, mo, d, h, mi, s) = dsipc_trace::format::civil(t);
    let micros = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.subsec_micros())
        .unwrap_or(0);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        y, mo, d, h, mi, s, micros
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn egress_providers_parse_name_equals_dir() {
        let e = parse_egress("a=/tmp/x; b=rel").unwrap();
        assert_eq!(e.len(), 2);
        assert!(matches!(&e[1].target, EgressTarget::FileSystem(d) if d == &PathBuf::from("rel")));
        assert!(parse_egress("a").is_err());
        assert!(parse_egress("=x").is_err());
        assert!(parse_egress("a=x;a=y").is_err());
        // Names are case-insensitive, as dotnet-monitor's provider names.
        assert!(parse_egress("a=x;A=y").is_err());
    }

    #[test]
    fn operation_ids_are_version_4_uuids() {
        let id = new_uuid().unwrap();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!(matches!(&id[19..20], "8" | "9" | "a" | "b"));
        assert_ne!(id, new_uuid().unwrap());
    }
}

#[cfg(test)]
mod file_tests {
    use super::*;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    fn temp() -> PathBuf {
        let d = std::env::temp_dir().join(format!("dsipc-egress-unit-{}", new_uuid().unwrap()));
        std::fs::create_dir(&d).unwrap();
        d
    }

    #[test]
    fn egress_never_replaces_an_existing_file_and_leaves_no_partial_one() {
        let dir = temp();
        std::fs::write(dir.join("a.nettrace"), b"theirs").unwrap();
        let e = block_on(write_file(
            crate::http::full(&b"ours"[..]),
            &dir,
            "a.nettrace",
        ))
        .unwrap_err();
        assert!(e.contains("exists; not replacing it"), "{}", e);
        assert_eq!(std::fs::read(dir.join("a.nettrace")).unwrap(), b"theirs");
        let landed = block_on(write_file(
            crate::http::full(&b"ours"[..]),
            &dir,
            "b.nettrace",
        ))
        .unwrap();
        assert_eq!(std::fs::read(landed).unwrap(), b"ours");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 2, "{:?}", names);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn egress_of_a_cut_artifact_fails_and_leaves_nothing() {
        let dir = temp();
        let (tx, body) = crate::http::channel(2, std::time::Duration::from_secs(5));
        let writer = std::thread::spawn(move || {
            block_on(async move {
                tx.send(bytes::Bytes::from_static(b"part")).await.unwrap();
                tx.fail(io::Error::new(io::ErrorKind::UnexpectedEof, "cut"));
            })
        });
        let e = block_on(write_file(body, &dir, "c.nettrace")).unwrap_err();
        writer.join().unwrap();
        assert!(e.contains("cut short"), "{}", e);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
