//! # dsipc-trace: the trace layer
//!
//! Everything between the core's nettrace parser ([`dsipc::nettrace`]) and a result, with no
//! I/O: no files, sockets, threads or clocks. Callers (dsipc-std, dsipc-mio, dsipc-tokio, the
//! `dsipc` CLI, an agent of your own) feed the bytes they received and get profiles, counters
//! and summaries back.
//!
//! The core (`dsipc::nettrace`) parses a nettrace stream without allocating; this module keeps
//! the state a profiler needs across events, bounded by the number of distinct metadata records,
//! methods, modules and stacks, never by the trace's length (no event is kept):
//!
//! - [`MetadataTable`]: the one metadata table, id -> what a consumer keeps per record
//!   ([`EventMetadata`]: provider, event id, name, version, field descriptions);
//! - [`SymbolTable`]: method address ranges from MethodLoadVerbose and the rundown's
//!   MethodDC*Verbose, module names from ModuleLoad / ModuleDC* / DomainModuleDC*; frame names
//!   are built only for the addresses that samples hit;
//! - [`ProfileBuilder`]: SampleProfiler samples per thread, managed vs external, with stack ids
//!   scoped to their sequence-point window and interned into one deduplicated stack table;
//! - [`LostEvents`]: events lost, from gaps in each capture thread's sequence numbers;
//! - [`TraceStream`]: the one stream driver (receive buffer + parser, one block limit, one
//!   truncation rule) every caller feeds;
//! - [`TraceDispatcher`]: one [`TraceStream`] handing each item to any number of
//!   [`TraceSink`]s (counters, logs, heap, profile, lost events) that share one metadata
//!   table ([`EventInfo`]: each record and its [`EventLayout`] decoded once) and one clock;
//! - [`TraceAnalyzer`]: all of the above fed from the core parser's items in one pass;
//! - [`analysis::analyze`]: a whole `.nettrace` from a `Read` through a [`TraceAnalyzer`]
//!   (the profile, its figures, where the stream broke off), its events as JSON lines to a
//!   `Write` if asked (`dsipc convert` and `dsipc report`);
//! - [`LiveProfile`]: a stream fed to an analyzer, for profiles built while a trace arrives;
//! - [`StackSnapshot`]: every thread's latest sample, resolved (`dsipc stack`, as
//!   `dotnet-stack report`);
//! - [`TimeOrder`]: optional time-ordered delivery, released at IsSorted events and sequence
//!   points;
//! - [`sync_time_utc`]: the trace's wall clock as a `SystemTime`.
//!
//! - [`format`](mod@format): the CPU profile's file formats (folded stacks, speedscope, pprof);
//! - [`heap`]: heap snapshots (the GC's heap walk as an object graph, per-type counts and
//!   bytes; the `.gcdump` file), as dotnet-gcdump;
//! - [`counters`]: EventCounters and System.Diagnostics.Metrics payloads decoded into typed
//!   samples, as dotnet-counters shows them;
//! - [`exceptions`]: first-chance exceptions from the runtime's `ExceptionThrown` events, their
//!   stacks named by the symbol table, written as dotnet-monitor's `/exceptions` writes them;
//! - [`logs`]: ILogger output (the `Microsoft-Extensions-Logging` provider) decoded into log
//!   entries and written as dotnet-monitor's `/logs` writes them;
//! - [`aspnet`]: ASP.NET Core request starts and stops (the DiagnosticSource bridge's
//!   `Activity1Start`/`Activity1Stop`), as dotnet-monitor's AspNet triggers read them.
//!
//! Pure computation: no I/O of its own (what it reads and writes goes through the caller's
//! `Read` and `Write`), no platform code.
#![deny(missing_docs)]

pub mod analysis;
mod analyzer;
pub mod aspnet;
/// The README's Rust examples, compiled (and run where they need no runtime) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub mod counters;
mod dispatch;
pub mod exceptions;
pub mod format;
mod hash;
pub mod heap;
mod layout;
mod live;
pub mod logs;
mod lost;
mod metadata;
mod order;
mod profile;
mod stack_table;
mod stacks;
mod stream;
mod symbols;
mod time;

pub use analyzer::{AnalyzerLimits, ProviderCount, TraceAnalyzer, TraceInfo};
pub use dispatch::{EventInfo, TraceContext, TraceDispatcher, TraceSink, DEFAULT_MAX_METADATA};
pub use layout::{EventLayout, LayoutField};
pub use live::{LiveCounter, LiveCounts, LiveProfile};
pub use lost::{LostEvents, MAX_CAPTURE_THREADS};
pub use metadata::{EventMetadata, MetadataTable};
pub use order::TimeOrder;
pub use profile::{
    LimitExceeded, Profile, ProfileBuilder, ProfileLimits, SampleKind, ThreadProfile, ThreadSamples,
};
pub use stack_table::StackTable;
pub use stacks::{StackFrame, StackSnapshot, ThreadStack, NATIVE_FRAMES};
pub use stream::{StreamError, TraceStream, MAX_BLOCK};
pub use symbols::{MethodName, MethodRecord, SymbolTable, UNRESOLVED_FRAME};
pub use time::{sync_time_utc, TraceClock};
