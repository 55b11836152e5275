//! Trace analysis over the core's streaming nettrace parser: what needs memory.
//!
//! The core (`dsipc::nettrace`) parses a nettrace stream without allocating; this module keeps
//! the state a profiler needs across events, bounded by the number of distinct metadata records,
//! methods, modules and stacks, never by the trace's length (no event is kept):
//!
//! - [`MetadataRegistry`]: metadata id -> provider, event id, name, version, field descriptions;
//! - [`SymbolTable`]: method address ranges from MethodLoadVerbose and the rundown's
//!   MethodDC*Verbose, module names from ModuleLoad / ModuleDC* / DomainModuleDC*; frame names
//!   are built only for the addresses that samples hit;
//! - [`ProfileBuilder`]: SampleProfiler samples per thread, managed vs external, with stack ids
//!   scoped to their sequence-point window and interned into one deduplicated stack table;
//! - [`LostEvents`]: events lost, from gaps in each capture thread's sequence numbers;
//! - [`TraceAnalyzer`]: all of the above fed from the core parser's items in one pass;
//! - [`TimeOrder`]: optional time-ordered delivery, released at IsSorted events and sequence
//!   points;
//! - [`sync_time_utc`]: the trace's wall clock as a `SystemTime`.
//!
//! Pure computation: no I/O, no platform code.

mod analyzer;
mod hash;
mod lost;
mod metadata;
mod order;
mod profile;
mod symbols;
mod time;

pub use analyzer::{ProviderCount, TraceAnalyzer, TraceInfo};
pub use lost::LostEvents;
pub use metadata::{EventMetadata, FieldDesc, MetadataRegistry};
pub use order::TimeOrder;
pub use profile::{Profile, ProfileBuilder, SampleKind, ThreadProfile, ThreadSamples};
pub use symbols::{MethodRecord, SymbolTable, UNRESOLVED_FRAME};
pub use time::sync_time_utc;
