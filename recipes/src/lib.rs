//! Short .NET diagnostic sessions as recipes: a [`Collect`] says which providers to ask for
//! ([`Collect::request`]), takes the stream's bytes ([`Collect::feed`]), says when it has
//! enough ([`Collect::enough`]) and makes the result from how the session ended
//! ([`Collect::finish`]). A recipe does no I/O and reads no clock: the elapsed time is
//! given to it.
//!
//! One blocking driver ([`run`], on dsipc-std) and one async driver ([`run_async`], on
//! dsipc-tokio) run any recipe the same way:
//!
//! ```text
//! start the session (Request)        ──► runtime
//! loop until the stream ends or the deadline:
//!     bytes ──► Budget::take ──► Collect::feed
//!     Collect::enough(elapsed)? ──► stop the session once (the rundown follows)
//! close the connection; Collect::finish(End, stop_asked) ──► result
//! ```
//!
//! Longer sessions that run until stopped have their drivers here too: [`counters`]
//! (dotnet-counters' session, blocking or on tokio).
//!
//! The recipes: [`stack::Sampling`] (every thread's managed stack, dotnet-stack's session),
//! [`gcdump::TypeFlush`] and [`gcdump::HeapWalk`] (the heap graph, dotnet-gcdump's two
//! sessions).
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod collect;
pub mod counters;
mod drive;
mod error;
pub mod gcdump;
pub mod stack;

pub use collect::{Budget, Collect, End, Request, MAX_SESSION_BYTES, MAX_WALK_BYTES, TICK};
pub use drive::{run, run_async};
pub use error::RecipeError;
