//! # dsipc-tokio: an async client for the .NET Diagnostic IPC protocol
//!
//! A thin tokio layer over the sans-IO [`dsipc`] core, with the surface of dsipc-std's
//! blocking client: every command opens its own connection (a Unix socket, or on Windows a
//! named pipe), writes the request the core encodes in one write, and feeds the core's
//! [`ClientConnection`](dsipc::ClientConnection) what it reads. It never encodes or decodes
//! protocol bytes itself, and never sends a request the core refuses.
//!
//! - [`DiagnosticsClient`]: one `async` method per command, each within the client's
//!   timeout ([`DEFAULT_TIMEOUT`]); ProcessInfo and GenerateCoreDump fall back to older
//!   versions as the official client does, sharing that one timeout.
//! - [`TraceSession`]: an EventPipe session's stream as chunks of nettrace bytes
//!   ([`TraceSession::next_chunk`], or `futures_core::Stream`), stopped from a second
//!   connection by [`TraceSession::stop`] (from the reading task), a [`StopHandle`] (from
//!   any task) or [`TraceSession::copy_to`]'s predicate, as in dsipc-std; the stream ends
//!   when the runtime closes it.
//! - [`reverse::ReverseListener`]: a reverse port (`DOTNET_DiagnosticPorts=...,connect`)
//!   yielding each runtime's Advertise and its connection.
//! - [`reverse::RuntimePool`]: listen mode for a monitor: a reverse port that keeps each
//!   runtime's latest idle connection (at most one per runtime, at most
//!   [`MAX_POOLED_RUNTIMES`](reverse::MAX_POOLED_RUNTIMES) runtimes), lists the runtimes
//!   alive, and gives a full [`DiagnosticsClient`] per runtime whose every command takes
//!   the runtime's next connection (waiting for it within the command's timeout).
//!
//! **Cancel safety.** The protocol runs one command per connection, and so does this crate:
//! dropping any future closes only the connection that future opened, so no connection is
//! ever used again with half a request or an unread reply on it. Reading a trace session is
//! cancel safe too (a dropped read took no bytes).
//!
//! The client is built as dsipc-std's is (`DiagnosticsClient::new(Endpoint)`, `for_pid`,
//! [`ClientOptions`]); errors are dsipc-platform's [`Error`], shared with dsipc-std, so
//! both adapters report failures alike.
//! The crate builds with Rust 1.63 (tokio 1.38).
//!
//! ```no_run
//! use std::time::Duration;
//! use dsipc::payload::Provider;
//! use dsipc_tokio::DiagnosticsClient;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = DiagnosticsClient::for_pid(1234)?.with_timeout(Duration::from_secs(5));
//! let info = client.process_info().await?; // the newest ProcessInfo the runtime knows
//! println!("{} {}", info.pid, info.command_line);
//!
//! // Two seconds of runtime events. StopTracing goes out on a second connection (its own
//! // task) while this one keeps reading the stream to its end.
//! let runtime = Provider::new("Microsoft-Windows-DotNETRuntime", 0x1, 4);
//! let mut session = client.collect_tracing(&[runtime], 256, true).await?;
//! let stop = session.stop_handle();
//! let stopper = tokio::spawn(async move {
//!     tokio::time::sleep(Duration::from_secs(2)).await;
//!     stop.stop().await
//! });
//! let mut trace = Vec::new();
//! while let Some(chunk) = session.next_chunk().await {
//!     trace.extend_from_slice(&chunk?);
//! }
//! stopper.await??;
//! assert!(trace.starts_with(b"Nettrace"));
//! # Ok(())
//! # }
//! ```
//!
//! The same as dsipc-std spells it: a client of an [`Endpoint`], and `copy_to` with a stop
//! predicate (asked after every chunk and every 200 ms), or [`TraceSession::stop`] from the
//! reading task.
//!
//! ```no_run
//! # use std::time::{Duration, Instant};
//! # use dsipc::payload::Provider;
//! use dsipc_tokio::{DiagnosticsClient, Endpoint};
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let client = DiagnosticsClient::new(Endpoint::new("/tmp/dotnet-diagnostic-1234-1-socket"));
//! let runtime = Provider::new("Microsoft-Windows-DotNETRuntime", 0x1, 4);
//! let mut session = client.collect_tracing(&[runtime], 256, true).await?;
//! let mut trace = Vec::new();
//! let start = Instant::now();
//! let outcome = session
//!     .copy_to(&mut trace, |_bytes| start.elapsed() > Duration::from_secs(2))
//!     .await?;
//! // Stopped (whole, after our stop), Ended (by the runtime), or Cut at an offset.
//! println!("{:?}: {} bytes", outcome, outcome.bytes());
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod client;
mod conn;
/// The README's Rust examples, compiled (and run where they need no runtime) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

mod drive;
mod pool;
mod session;

pub mod reverse;

pub use client::DiagnosticsClient;
pub use conn::AsyncStream;
pub use drive::{MAX_RECV_BUFFER_LEN, RECV_BUFFER_LEN};
pub use session::{NextChunk, StopHandle, TraceSession};

/// What ProcessInfo (any version) reported, owned (the session layer's, as in dsipc-std).
pub use dsipc::session::ProcessInfo;
/// Default timeout of a call, and default bound on an announced environment block.
pub use dsipc::session::{DEFAULT_MAX_ENVIRONMENT, DEFAULT_TIMEOUT};
/// The error type (dsipc-platform's, shared by both adapters): `#[non_exhaustive]`, one line of
/// text naming the HRESULT and its meaning where the runtime sent one.
pub use dsipc_platform::Error;
/// A runtime's diagnostic server address, and the options of a client's calls
/// (dsipc-platform's, shared with dsipc-std).
pub use dsipc_platform::{ClientOptions, Endpoint};

/// The core crate, re-exported: requests, providers, GUIDs and HRESULTs come from here.
pub use dsipc;
