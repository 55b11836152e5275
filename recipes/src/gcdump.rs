//! dotnet-gcdump's sessions: the heap of a runtime as a graph of objects and references.
//!
//! A short session first ([`TypeFlush`]: the runtime provider enabled without its Type
//! keyword makes the runtime forget which types it already described, so the heap walk names
//! them all again), then [`HeapWalk`]: `Microsoft-Windows-DotNETRuntime` keywords GC,
//! GCHeapCollect, GCHeapDump, GCHeapAndTypeNames and Type (0x1980001) at level 5, no
//! rundown: the runtime runs a blocking gen-2 GC and walks the heap, sending the object
//! graph as GCBulk* events. The session is stopped at the GCEnd of that GC (the walk is
//! whole then). The graph is dsipc-trace's [`HeapGraph`]; [`warnings`] says what it lacks.
//! [`collect_heap`] runs both sessions; [`read_snapshot`] reads a `.gcdump` or a heap
//! `.nettrace` back.

use std::time::{Duration, SystemTime};

use dsipc::session::providers::ProviderSpec;
use dsipc_trace::heap::gcdump::{self, GcDumpInfo};
use dsipc_trace::heap::{HeapError, HeapGraph, HeapStream, Walk};

use crate::collect::{Collect, End, Request, MAX_WALK_BYTES};
use crate::RecipeError;

#[path = "gcdump_file.rs"]
mod file;
pub use file::{collect_heap, read_snapshot, Snapshot, SnapshotError};

const RUNTIME: &str = "Microsoft-Windows-DotNETRuntime";
/// GC (0x1), GCHeapCollect (0x800000), GCHeapDump (0x100000), GCHeapAndTypeNames
/// (0x1000000) and Type (0x80000): dotnet-gcdump's GCHeapSnapshot keywords.
const HEAP_KEYWORDS: u64 = 0x1980001;
const VERBOSE: u32 = 5;
const GC_KEYWORD: u64 = 0x1;
const CRITICAL: u32 = 1;
/// The runtime's buffer for the heap session, as dotnet-gcdump asks: events the runtime
/// drops break the graph.
const BUFFER_MB: u32 = 1024;

/// What a `.gcdump` of runtime `pid` walked at `now` says about where it came from.
pub fn file_info(pid: u32, now: SystemTime) -> GcDumpInfo {
    GcDumpInfo {
        process_id: pid as i32,
        process_name: proc_text(pid, "comm"),
        machine_name: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim_end().to_string()),
        time_ticks: gcdump::dotnet_ticks(now),
        creation_tool: Some(format!("dsipc {}", env!("CARGO_PKG_VERSION"))),
    }
}

/// `/proc/PID/NAME`'s first line, if readable.
fn proc_text(pid: u32, name: &str) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{}/{}", pid, name))
        .ok()
        .map(|s| s.lines().next().unwrap_or("").to_string())
}

fn late(pid: u32, timeout: Duration, what: &str) -> RecipeError {
    RecipeError::Failed(format!(
        "pid {}: no heap snapshot within {:.1} s (--timeout): {}",
        pid,
        timeout.as_secs_f64(),
        what
    ))
}

/// The type-table flush: a session started and stopped at once, enabling the runtime
/// provider without its Type keyword (the runtime forgets which types it described when
/// told of keywords without it; .NET Core 3.1 only when the runtime provider itself is
/// enabled, so SampleProfiler alone, as dotnet-gcdump does, is not enough there). Level
/// Critical: none of its GC events is sent.
pub struct TypeFlush {
    pid: u32,
    timeout: Duration,
}

impl TypeFlush {
    /// The flush before a snapshot of runtime `pid`.
    pub fn new(pid: u32, timeout: Duration) -> TypeFlush {
        TypeFlush { pid, timeout }
    }
}

impl Collect for TypeFlush {
    type Output = ();

    fn request(&self) -> Request {
        Request {
            providers: vec![ProviderSpec {
                name: RUNTIME.to_string(),
                keywords: GC_KEYWORD,
                level: CRITICAL,
                args: None,
            }],
            buffer_mb: 16,
            rundown: false,
        }
    }

    fn feed(&mut self, _data: &[u8]) -> Result<(), RecipeError> {
        Ok(())
    }

    fn enough(&mut self, _elapsed: Duration) -> bool {
        true
    }

    fn finish(self, end: End, _stop_asked: bool) -> Result<(), RecipeError> {
        match end {
            End::Stream(_) => Ok(()),
            End::TimedOut => Err(late(
                self.pid,
                self.timeout,
                "the first session did not end after its stop",
            )),
            End::Failed(e) => Err(RecipeError::Ipc(e)),
        }
    }
}

/// dotnet-gcdump's heap session (`0x1980001:5`, no rundown): the runtime runs a blocking
/// gen-2 GC and walks its heap; stopped at that GC's end; the graph built as it arrives.
pub struct HeapWalk {
    heap: HeapStream,
    pid: u32,
    timeout: Duration,
}

impl HeapWalk {
    /// A snapshot of runtime `pid`, due within `timeout`.
    pub fn new(pid: u32, timeout: Duration) -> HeapWalk {
        HeapWalk {
            heap: HeapStream::new(),
            pid,
            timeout,
        }
    }
}

impl Collect for HeapWalk {
    type Output = HeapGraph;

    fn request(&self) -> Request {
        Request {
            providers: vec![ProviderSpec {
                name: RUNTIME.to_string(),
                keywords: HEAP_KEYWORDS,
                level: VERBOSE,
                args: None,
            }],
            buffer_mb: BUFFER_MB,
            rundown: false,
        }
    }

    fn feed(&mut self, data: &[u8]) -> Result<(), RecipeError> {
        self.heap.feed(data).map_err(|e| bad_stream(&e))
    }

    fn enough(&mut self, _elapsed: Duration) -> bool {
        matches!(self.heap.builder().walk(), Walk::Done { .. })
    }

    fn max_bytes(&self) -> u64 {
        MAX_WALK_BYTES
    }

    fn finish(mut self, end: End, _stop_asked: bool) -> Result<HeapGraph, RecipeError> {
        let pid = self.pid;
        let walk = self.heap.builder().walk();
        let result = match end {
            End::TimedOut => {
                let what = match walk {
                    Walk::NotStarted => "the runtime started no blocking gen-2 GC",
                    Walk::Running { .. } => "the heap walk did not finish",
                    Walk::Done { .. } => "the session did not end after its stop",
                };
                return Err(late(pid, self.timeout, what));
            }
            End::Stream(_) => Ok(()),
            End::Failed(e) => Err(e),
        };
        let ended = self.heap.finish();
        match (result, walk) {
            // The walk is whole: what came after it does not matter.
            (_, Walk::Done { .. }) => {
                if let Err(e) = &ended {
                    if !e.is_truncation() {
                        return Err(bad_stream(e));
                    }
                }
            }
            (Err(e), _) => return Err(RecipeError::Ipc(e)),
            (Ok(()), _) => {
                return Err(RecipeError::Failed(match ended {
                    Err(e) if !e.is_truncation() => return Err(bad_stream(&e)),
                    Err(e) => format!(
                        "pid {}: the runtime ended the stream before the heap walk was over (did it exit?): {}",
                        pid, e
                    ),
                    Ok(()) => format!(
                        "pid {}: the stream ended without a heap walk (no blocking gen-2 GC)",
                        pid
                    ),
                }))
            }
        }
        let graph = self.heap.into_graph().map_err(|e| bad_stream(&e))?;
        if graph.object_count() == 0 {
            return Err(RecipeError::Failed(format!(
                "pid {}: the runtime's gen-2 GC sent no heap walk (no GCBulkNode events)",
                pid
            )));
        }
        Ok(graph)
    }
}

fn bad_stream(e: &HeapError) -> RecipeError {
    RecipeError::Failed(format!("the heap snapshot did not parse: {}", e))
}

/// What `graph` lacks, one sentence each (events the runtime dropped, objects of types it
/// did not name, references to objects that never came): for the caller to print.
pub fn warnings(graph: &HeapGraph) -> Vec<String> {
    let mut out = Vec::new();
    if graph.lost_events > 0 {
        out.push(format!(
            "the runtime dropped {} events: the snapshot is incomplete",
            graph.lost_events
        ));
    }
    let unnamed = graph
        .objects()
        .filter(|o| graph.types[o.type_index as usize].name.is_none())
        .count();
    if unnamed > 0 {
        out.push(format!(
            "{} objects are of types the runtime did not name (UNKNOWN_TYPE)",
            unnamed
        ));
    }
    if graph.missing_edges > 0 {
        out.push(format!(
            "{} references the objects announced never came",
            graph.missing_edges
        ));
    }
    out
}
