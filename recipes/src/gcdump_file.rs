//! A heap snapshot read back ([`read_snapshot`]): a `.gcdump` file, or a `.nettrace`
//! recording dotnet-gcdump's session (`dsipc trace` with its keywords), told apart by
//! their first bytes; and both of dotnet-gcdump's sessions run in a row ([`collect_heap`]).

use std::fmt;
use std::io::Read;
use std::time::Instant;

use dsipc_std::DiagnosticsClient;
use dsipc_trace::heap::gcdump::{self, GcDump, GcDumpError};
use dsipc_trace::heap::{report, HeapError, HeapGraph, HeapStream, Walk};

use super::{HeapWalk, TypeFlush};
use crate::RecipeError;

/// What a heap file holds.
#[derive(Debug)]
#[non_exhaustive]
pub enum Snapshot {
    /// A `.gcdump`.
    Dump(GcDump),
    /// A `.nettrace` with a heap walk.
    Trace(HeapGraph),
}

impl Snapshot {
    /// The heap's totals: bytes and objects.
    pub fn totals(&self) -> (u64, u64) {
        match self {
            Snapshot::Dump(dump) => {
                let (objects, bytes) = dump.object_totals();
                (bytes, objects)
            }
            Snapshot::Trace(graph) => (graph.total_bytes(), graph.object_count() as u64),
        }
    }

    /// dotnet-gcdump report's rows, per type, biggest first; with `retained`, what each
    /// type retains too ([`report::graph_rows`]).
    pub fn rows(&self, retained: bool) -> Vec<report::Row> {
        match self {
            Snapshot::Dump(dump) => report::dump_rows(dump, retained),
            Snapshot::Trace(graph) => report::graph_rows(graph, retained),
        }
    }
}

/// Why a heap file gave no snapshot.
#[derive(Debug)]
#[non_exhaustive]
pub enum SnapshotError {
    /// It could not be read.
    Io(std::io::Error),
    /// It is not a `.nettrace`, and not a whole `.gcdump`.
    GcDump(GcDumpError),
    /// A `.nettrace` whose heap walk did not parse.
    Heap(HeapError),
    /// A `.nettrace` without a heap walk (no blocking gen-2 GC with the heap dump keywords).
    NoHeapWalk,
    /// A `.nettrace` whose gen-2 GC sent no objects.
    NoObjects,
    /// A `.nettrace` that ends before its heap walk is over.
    WalkUnfinished,
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SnapshotError::Io(e) => e.fmt(f),
            SnapshotError::GcDump(e) => e.fmt(f),
            SnapshotError::Heap(e) => write!(f, "the heap trace did not parse: {}", e),
            SnapshotError::NoHeapWalk => f.write_str(
                "the trace holds no heap walk (no blocking gen-2 GC with the GC heap dump keywords)",
            ),
            SnapshotError::NoObjects => {
                f.write_str("the trace holds no heap walk (its gen-2 GC sent no objects)")
            }
            SnapshotError::WalkUnfinished => {
                f.write_str("the trace ends before its heap walk is over")
            }
        }
    }
}

impl std::error::Error for SnapshotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SnapshotError::Io(e) => Some(e),
            SnapshotError::GcDump(e) => Some(e),
            SnapshotError::Heap(e) => Some(e),
            _ => None,
        }
    }
}

/// A `.gcdump` (read whole and checked) or a `.nettrace` holding a heap walk (streamed:
/// memory grows with the heap, not the file), told apart by their first bytes.
pub fn read_snapshot<R: Read>(mut from: R) -> Result<Snapshot, SnapshotError> {
    let mut head = Vec::new();
    (&mut from)
        .take(8)
        .read_to_end(&mut head)
        .map_err(SnapshotError::Io)?;
    if head != b"Nettrace" {
        from.read_to_end(&mut head).map_err(SnapshotError::Io)?;
        return gcdump::read(&head)
            .map(Snapshot::Dump)
            .map_err(SnapshotError::GcDump);
    }
    let mut heap = HeapStream::new();
    heap.feed(&head).map_err(SnapshotError::Heap)?;
    let mut buf = vec![0u8; 1 << 18];
    loop {
        let n = from.read(&mut buf).map_err(SnapshotError::Io)?;
        if n == 0 {
            break;
        }
        heap.feed(&buf[..n]).map_err(SnapshotError::Heap)?;
    }
    let ended = heap.finish();
    match (heap.builder().walk(), ended) {
        (Walk::Done { .. }, Err(e)) if !e.is_truncation() => return Err(SnapshotError::Heap(e)),
        (Walk::Done { .. }, _) => {}
        (_, Err(e)) => return Err(SnapshotError::Heap(e)),
        (Walk::NotStarted, Ok(())) => return Err(SnapshotError::NoHeapWalk),
        (Walk::Running { .. }, Ok(())) => return Err(SnapshotError::WalkUnfinished),
    }
    let graph = heap.into_graph().map_err(SnapshotError::Heap)?;
    if graph.object_count() == 0 {
        return Err(SnapshotError::NoObjects);
    }
    Ok(Snapshot::Trace(graph))
}

/// dotnet-gcdump's two sessions on runtime `pid` ([`TypeFlush`], then [`HeapWalk`]), the
/// whole within the client's timeout from `started`: the heap graph ([`super::warnings`]
/// says what it lacks).
pub fn collect_heap(
    client: &DiagnosticsClient,
    pid: u32,
    started: Instant,
) -> Result<HeapGraph, RecipeError> {
    let timeout = client.timeout();
    let deadline = started + timeout;
    crate::run(client, TypeFlush::new(pid, timeout), deadline)?;
    crate::run(client, HeapWalk::new(pid, timeout), deadline)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_snapshot_tells_what_a_file_is_not() {
        // Not a .gcdump (nor a .nettrace).
        let e = read_snapshot(&b"hello, world"[..]).unwrap_err();
        assert!(matches!(e, SnapshotError::GcDump(_)), "{:?}", e);
        assert!(matches!(
            read_snapshot(&b""[..]).unwrap_err(),
            SnapshotError::GcDump(_)
        ));
        // A .nettrace cut after its magic: no heap walk, said as a parse error or no walk.
        let e = read_snapshot(&b"Nettrace"[..]).unwrap_err();
        assert!(
            matches!(e, SnapshotError::Heap(_) | SnapshotError::NoHeapWalk),
            "{:?}",
            e
        );
    }
}
