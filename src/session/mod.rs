//! # The session layer: every protocol policy above one exchange, sans-IO
//!
//! The [`conn`](crate::conn) machines stop at one request and its reply. A real client needs
//! more, and this module holds all of it, once, for every adapter (blocking std, tokio, mio)
//! and for a user's own event loop:
//! - which command version to send and what to fall back to: [`Ask`] (ProcessInfo3 → 2 →
//!   1, GenerateCoreDump3 → 2 → 1) and [`TraceConfig::command`] (the lowest CollectTracing
//!   version the options need, as Microsoft.Diagnostics.NETCore.Client picks it);
//! - what a reply must be, and the typed [`SessionError`] when it is not (an error reply,
//!   UNKNOWN_COMMAND with no older version left, an environment larger than allowed);
//! - an EventPipe session ([`Tracing`]): the start, the stop from a second connection
//!   ([`Tracing::request_stop`] gives the [`Call`] to run there), the bounded drain after
//!   it, and the [`Outcome`]: stopped, ended by the runtime, or cut at an offset (the
//!   stream's framing is followed as it passes, so a runtime killed mid-session is never
//!   a clean end);
//! - which providers: dotnet-trace's `--providers` syntax and built-in profiles
//!   ([`providers`]: [`parse_providers`], [`Profile`]);
//! - the reverse port: a runtime's Advertise, read exactly, within a deadline
//!   ([`AwaitAdvertise`]), and a monitor's runtimes on it: which to resume once, which
//!   to hold, which connection holds each ([`ReverseBook`], [`ReverseConnections`]);
//! - deadlines: the caller passes the time ([`Millis`], from any monotonic clock) and waits
//!   until [`Call::poll_timeout`] / [`Tracing::poll_timeout`]; nothing here reads a clock.
//!
//! Connections are the caller's: the layer says when to open one ([`Step::Connect`]),
//! what to write on it ([`Step::Transmit`], in one write), when to read ([`Step::Receive`],
//! into [`Call::read_buf`]) and when to close it. Buffers are the layer's (feature
//! `alloc`): one per connection, grown within [`MAX_RECV_BUFFER_LEN`].
//!
//! ## The run loop
//! Written once here; every adapter is this loop with its own way of waiting.
//!
//! ```no_run
//! use std::io::{Read, Write};
//! use std::os::unix::net::UnixStream;
//! use std::time::Instant;
//! use dsipc::session::{Ask, Call, ProcessInfo, Step};
//! use dsipc::ClientEvent;
//!
//! fn process_info(socket: &str) -> Result<ProcessInfo, Box<dyn std::error::Error>> {
//!     let epoch = Instant::now();
//!     let now = || epoch.elapsed().as_millis() as u64;
//!     let mut call = Call::new(Ask::ProcessInfo, now(), 5_000)?;
//!     let mut conn: Option<UnixStream> = None;
//!     let mut info = None;
//!     loop {
//!         let command = call.command();
//!         match call.poll(now())? {
//!             Step::Connect => {
//!                 conn = Some(UnixStream::connect(socket)?);
//!                 call.connected()?;
//!             }
//!             Step::Transmit(bytes) => {
//!                 conn.as_mut().ok_or("no connection")?.write_all(bytes)?;
//!                 call.transmitted()?;
//!             }
//!             Step::Receive => {
//!                 let sock = conn.as_mut().ok_or("no connection")?;
//!                 // Wait at most until the call's deadline.
//!                 let left = call.poll_timeout().unwrap_or(0).saturating_sub(now()).max(1);
//!                 sock.set_read_timeout(Some(std::time::Duration::from_millis(left)))?;
//!                 match sock.read(call.read_buf()?) {
//!                     Ok(0) => call.eof(),
//!                     Ok(n) => call.filled(n),
//!                     // A timeout: the next poll says whether the deadline passed.
//!                     Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
//!                     Err(e) => return Err(e.into()),
//!                 }
//!             }
//!             Step::Event(ClientEvent::Reply(r)) => info = ProcessInfo::from_reply(command, &r),
//!             Step::Event(_) => {}
//!             // UNKNOWN_COMMAND: an older version follows on a new connection.
//!             Step::Close => conn = None,
//!             Step::Done => return info.ok_or_else(|| "no reply".into()),
//!             _ => {}
//!         }
//!     }
//! }
//! ```
//!
//! A [`Tracing`] session is driven the same way ([`TraceStep`]); its stop is a second
//! [`Call`] on a second connection, driven in the same loop (wait on both connections) or
//! elsewhere. `examples/custom_loop.rs` is the whole thing over `poll(2)`.

mod advertise;
mod call;
mod error;
mod info;
mod link;
mod monitor;
mod plan;
pub mod providers;
mod tracing;

pub use advertise::AwaitAdvertise;
pub use call::{Call, Step};
pub use error::SessionError;
pub use info::{text_to_string, ProcessInfo, ProcessInfoSink};
pub use monitor::{
    AdvertiseAction, HoldsRuntime, ReverseBook, ReverseConnections, REMEMBERED_RUNTIMES,
};
pub use plan::{attach_profiler, Ask, Rundown, TraceConfig, DEFAULT_CIRCULAR_BUFFER_MB};
pub use providers::{
    clr_events_provider, parse_providers, CollectArgs, Profile, ProviderError, ProviderSpec,
};
pub use tracing::{Outcome, TraceStep, Tracing};

/// Default budget of one call (connecting, sending, every reply and every fallback to an
/// older command version), and of each wait of a stopping session.
pub const DEFAULT_TIMEOUT: core::time::Duration = core::time::Duration::from_secs(10);

/// Default bound on the environment block a runtime may announce (16 MiB: real
/// environments are a few KiB; Linux caps argv plus environment near 2 MiB by default).
pub const DEFAULT_MAX_ENVIRONMENT: u64 = 16 * 1024 * 1024;

/// How long a runtime's connection to a reverse port may take to send its Advertise (real
/// runtimes send it at once).
pub const DEFAULT_ADVERTISE_TIMEOUT: core::time::Duration = core::time::Duration::from_secs(5);

/// A time on the caller's monotonic clock, in milliseconds from any origin it keeps
/// (the layer only compares and adds).
pub type Millis = u64;

/// Receive buffer of a stream: one whole message (at most 65,535 bytes) plus 4 KiB, so a
/// read can bring in what follows. A connection starts small (most replies are), doubles
/// when a message needs more, and grows to at least this size when a stream starts.
pub const RECV_BUFFER_LEN: usize = 64 * 1024 + 4 * 1024;

/// Bound on a receive buffer: a ProcessEnvironment entry may exceed one message (Linux
/// allows a 128 KiB variable, about 256 KiB in UTF-16); anything needing more is
/// [`SessionError::BufferTooSmall`].
pub const MAX_RECV_BUFFER_LEN: usize = 512 * 1024;
