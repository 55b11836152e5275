//! .NET diagnostic sessions as recipes: a [`Collect`] says which providers to ask for
//! ([`Collect::request`]), takes the stream's bytes ([`Collect::feed`]), says when to stop
//! ([`Collect::enough`]: it has enough, or a stop came from outside: a duration, Ctrl-C, a
//! [`Stop`], a client gone) and makes the result from how the session ended
//! ([`Collect::finish`], with the session layer's [`Outcome`](dsipc::session::Outcome):
//! stopped, ended by the runtime, or cut at an offset). A recipe does no I/O of the
//! session's and reads no clock: the elapsed time is given to it. Its consumer of the bytes
//! may be anything (a file, a response body that pushes back: [`Collect::poll_ready`]).
//!
//! One blocking driver ([`run`](fn@run), on dsipc-std) and one async driver ([`run_async`], on
//! dsipc-tokio) run any recipe the same way, short or long ([`run_session`] and
//! [`run_session_async`]: the same, on a session the caller started). What they decide
//! (how long to wait, the budget, when to stop, when to stop reading) is [`Run`]'s, sans-IO,
//! so a caller's own event loop can drive a recipe alike:
//!
//! ```text
//! start the session (Request)        ──► runtime
//! loop until the stream ends, the recipe abandons it, or the deadline:
//!     [async: wait until Collect::poll_ready]
//!     bytes ──► Run::feed (Budget::take, Collect::feed)
//!     Run::after_read: Collect::tick (after every read, or Collect::quiet_for's wait,
//!                      or Collect::poll_wake's wake), then
//!       Collect::enough(elapsed)? ──► stop the session once (the rundown follows, read
//!                                     within the session layer's bounds)
//!     Run::abandoned: Collect::abandon()? ──► stop reading (the connection closes)
//! close the connection; Collect::finish(End, stop_asked) ──► result
//! ```
//!
//! The recipes: [`stack::Sampling`] (every thread's managed stack, dotnet-stack's session),
//! [`gcdump::TypeFlush`] and [`gcdump::HeapWalk`] (the heap graph, dotnet-gcdump's two
//! sessions), [`counters::Counters`] (dotnet-counters' session, until stopped; run by
//! [`counters::CounterRun`], [`counters::CounterSession`] and
//! [`counters::AsyncCounterRun`]); [`trace::Live`], the live parse `dsipc trace` feeds.
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod collect;
pub mod counters;
mod drive;
mod error;
pub mod gcdump;
mod run;
pub mod stack;
pub mod trace;

pub use collect::{
    Budget, Collect, End, Request, Stop, Tick, MAX_SESSION_BYTES, MAX_WALK_BYTES, TICK,
};
pub use drive::{run, run_async, run_session, run_session_async};
pub use error::RecipeError;
pub use run::{Run, MIN_WAIT};
