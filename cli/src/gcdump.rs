//! `dsipc gcdump report --pid PID | FILE [--top N] [--format text|json]`: the live objects
//! of a runtime's heap (or of a `.gcdump` file) per type, as `dotnet-gcdump report` shows
//! them; `dsipc gcdump collect PID [-o FILE] [--force]`: the heap as a `.gcdump` file, as
//! `dotnet-gcdump collect` writes it (default name `YYYYMMDD_HHMMSS_PID.gcdump`, UTC).
//!
//! dotnet-gcdump's way: a short session first (the runtime provider enabled without its
//! Type keyword makes the runtime forget which types it already described, so the heap walk
//! names them all again), then a session with `Microsoft-Windows-DotNETRuntime` keywords
//! GC, GCHeapCollect, GCHeapDump, GCHeapAndTypeNames and Type (0x1980001) at level 5, no
//! rundown: the runtime runs a blocking gen-2 GC and walks the heap, sending the object
//! graph as GCBulk* events. The session is stopped at the GCEnd of that GC (the walk is
//! whole then). The sessions and the file reader are dsipc-recipes' (`collect_heap`,
//! `read_snapshot`), the graph dsipc-trace's [`HeapGraph`]; this module parses and prints.
//!
//! Both `collect` and `report --pid` close with the runtime's own pause for the walk on
//! stderr (`dsipc: the runtime paused 29.1 ms for the heap walk (GC 28.9 ms)`, from the
//! GC events of the walked GC: [`HeapGraph::pause`]), which dotnet-gcdump does not say;
//! nothing when those events did not come. The `.gcdump` file does not hold it.
//!
//! Text: dotnet-gcdump report's table (`Object Bytes`, `Count`, `Type`, biggest first)
//! under the heap's totals. JSON: one line, an array of `{"type","count","bytes"}`,
//! biggest first.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use dsipc_recipes::gcdump::{
    collect_heap, file_info, read_snapshot, warnings, Snapshot, SnapshotError,
};
use dsipc_std::DiagnosticsClient;
use dsipc_trace::heap::gcdump;
use dsipc_trace::heap::report::{graph_rows, json, text};
use dsipc_trace::heap::HeapGraph;

use crate::args::{parse_os, show};
use crate::output::{display, Output};
use crate::term::note;
use crate::{args, print_out, CliError, CliResult, Common};

/// The whole command's default time budget (dotnet-gcdump waits 30 s).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Format {
    Text,
    Json,
}

/// `dsipc gcdump SUBCOMMAND ...`.
pub(crate) fn cmd_gcdump(rest: &[OsString]) -> CliResult {
    // The subcommand is the first argument that is not a global option (`--timeout 5`
    // may come before it, from before the command name).
    let mut i = 0;
    while i < rest.len() && args::GLOBAL_VALUES.contains(&&*rest[i].to_string_lossy()) {
        i += 2;
    }
    let (sub, args) = match rest.get(i) {
        Some(s) => {
            let mut others = rest[..i].to_vec();
            others.extend_from_slice(&rest[i + 1..]);
            (s.to_string_lossy().into_owned(), others)
        }
        None => {
            return Err(CliError::Usage(
                "gcdump wants a subcommand: collect or report".to_string(),
            ))
        }
    };
    match sub.as_str() {
        "report" => report(&args),
        "collect" => collect_file(&args),
        other => Err(CliError::Usage(format!(
            "unknown gcdump subcommand {} (collect, report)",
            show(OsStr::new(other))
        ))),
    }
}

fn report(rest: &[OsString]) -> CliResult {
    let started = Instant::now();
    let values: Vec<&'static str> = ["--top", "--format"]
        .iter()
        .chain(crate::TARGET_VALUES_PID.iter())
        .copied()
        .collect();
    let p = parse_os(rest, &values, &["--retained"])?;
    let with_retained = p.flag("--retained");
    let common = Common::from(&p)?;
    let format = match p.value_lower("--format")?.as_deref() {
        None | Some("text") => Format::Text,
        Some("json") => Format::Json,
        Some(other) => {
            return Err(CliError::Usage(format!(
                "--format must be text or json, not {}",
                show(OsStr::new(other))
            )))
        }
    };
    let top = match p.value_text("--top")? {
        None => None,
        Some(t) => match t.parse::<usize>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                return Err(CliError::Usage(format!(
                    "--top wants a positive integer, not {}",
                    show(OsStr::new(t))
                )))
            }
        },
    };
    let pid = crate::target_option(&p, &common)?;
    // The live runtime's pause, said once the report is out.
    let mut pause = None;
    let (stats, totals) = match (pid, p.positionals.len()) {
        (Some(pid), 0) => {
            let client = common.client(pid, DEFAULT_TIMEOUT)?;
            let graph = collect(&client, pid, started)?;
            pause = graph.pause;
            let rows = graph_rows(&graph, with_retained);
            (rows, (graph.total_bytes(), graph.object_count() as u64))
        }
        (None, 1) => {
            let path = args::path("FILE", &p.positionals[0])?;
            let snapshot = read_file(&path)?;
            (snapshot.rows(with_retained), snapshot.totals())
        }
        (Some(_), _) => {
            return Err(CliError::Usage(
                "gcdump report takes --pid PID or FILE, not both".to_string(),
            ))
        }
        (None, 0) => {
            return Err(CliError::Usage(
                "gcdump report wants --pid PID or a .gcdump FILE".to_string(),
            ))
        }
        (None, _) => return Err(CliError::Usage("gcdump report takes one FILE".to_string())),
    };
    let shown = match top {
        Some(n) => &stats[..n.min(stats.len())],
        None => &stats[..],
    };
    let out = match format {
        Format::Text => text(totals, shown),
        Format::Json => json(shown),
    };
    print_out(&out)?;
    if let Some(p) = &pause {
        note!("dsipc: {}", p);
    }
    Ok(())
}

/// A `.gcdump` or a heap `.nettrace` (dsipc-recipes' reader); an error names the file.
fn read_file(path: &Path) -> Result<Snapshot, CliError> {
    let cannot = |e| CliError::io(format!("cannot read {}", display(path)), e);
    let f = std::fs::File::open(path).map_err(cannot)?;
    read_snapshot(std::io::BufReader::new(f)).map_err(|e| match e {
        SnapshotError::Io(e) => cannot(e),
        e => CliError::Failed(format!("{}: {}", display(path), e)),
    })
}

/// `dsipc gcdump collect PID [-o FILE] [--force]`.
fn collect_file(rest: &[OsString]) -> CliResult {
    let started = Instant::now();
    let values: Vec<&'static str> = ["-o", "--output"]
        .iter()
        .chain(crate::TARGET_VALUES_PID.iter())
        .copied()
        .collect();
    let p = parse_os(rest, &values, &["--force"])?;
    let common = Common::from(&p)?;
    let pid = match (crate::target_option(&p, &common)?, p.positionals.len()) {
        (Some(pid), 0) => pid,
        (None, 1) => args::pid(&p.positionals[0])?,
        (None, 0) => return Err(CliError::Usage("gcdump collect wants PID".to_string())),
        _ => return Err(CliError::Usage("gcdump collect takes one PID".to_string())),
    };
    let now = SystemTime::now();
    let dest = match p.value_os("-o").or_else(|| p.value_os("--output")) {
        Some(o) => args::path("-o", o)?,
        None => PathBuf::from(format!(
            "{}_{}.gcdump",
            dsipc_trace::format::stamp(now),
            pid
        )),
    };
    // Refused before the runtime is asked anything (an existing FILE without --force).
    let mut out = Output::create(&dest, p.flag("--force"))?;
    let client = match common.client(pid, DEFAULT_TIMEOUT) {
        Ok(c) => c,
        Err(e) => {
            out.abandon();
            return Err(e);
        }
    };
    let graph = match collect(&client, pid, started) {
        Ok(g) => g,
        Err(e) => {
            out.abandon();
            return Err(e);
        }
    };
    let written = match gcdump::write(&graph, &file_info(pid, now), out.writer()) {
        Ok(w) => w,
        Err(e) => {
            out.abandon();
            return Err(CliError::io(format!("writing {}", display(&dest)), e));
        }
    };
    let placed = out.commit()?;
    note!(
        "dsipc: wrote {} ({} bytes: {} objects, {} bytes of heap)",
        display(placed.as_deref().unwrap_or(&dest)),
        written.bytes,
        graph.object_count(),
        graph.total_bytes()
    );
    if let Some(p) = &graph.pause {
        note!("dsipc: {}", p);
    }
    Ok(())
}

/// Runs dotnet-gcdump's sessions (dsipc-recipes' [`collect_heap`]) and says what the
/// graph lacks; the whole within the client's timeout from `started`.
pub(crate) fn collect(
    client: &DiagnosticsClient,
    pid: u32,
    started: Instant,
) -> Result<HeapGraph, CliError> {
    let graph = collect_heap(client, pid, started)?;
    for w in warnings(&graph) {
        note!("dsipc: warning: {}", w);
    }
    Ok(graph)
}
