//! # dsipc-mio: many Diagnostic IPC connections in one mio event loop
//!
//! A [`Reactor`] drives any number of [`dsipc`] client and server machines over Unix
//! sockets in one thread: tools talking to many runtimes at once, monitors accepting
//! runtimes on a reverse port (`DOTNET_DiagnosticPorts=PATH,connect,suspend`), fake
//! runtimes and routers serving requests. It never encodes or decodes protocol bytes
//! itself, nor decides anything the protocol leaves open: the core's machines and its
//! session layer ([`dsipc::session`]) do, and this crate moves bytes and reports what they
//! say.
//!
//! - **Calls**: [`Control::call`] runs one command with the session layer's policy (the
//!   command version, the fallbacks after UNKNOWN_COMMAND to older versions,
//!   replies judged into typed errors, one deadline); what the runtime says comes as
//!   [`Event::Call`], the end as [`Event::CallDone`]. See [Calls and
//!   sessions](#calls-and-sessions).
//! - **EventPipe sessions**: [`Control::trace`] starts one (the CollectTracing version
//!   its options need); [`Event::TraceStarted`], the stream as [`Event::TraceData`], and
//!   [`Event::TraceDone`] with its [`Outcome`](dsipc::session::Outcome) (stopped, ended by
//!   the runtime, or cut). [`Control::stop_trace`] stops it from a second connection while
//!   the session's own is read to its end, every wait then bounded.
//! - **Raw client connections**: [`Control::connect`] sends exactly one request and
//!   passes its reply, EventPipe data or environment entries up as they come
//!   ([`Event::Client`], then [`Event::Closed`]), error replies included: for commands the
//!   session layer has no policy for.
//! - **Reverse ports**: [`Control::listen_reverse`] binds (mode 0600, replacing only a
//!   stale *socket*); each runtime that connects produces [`Event::Advertise`] (pid and
//!   cookie); answer with [`Control::send_request`]. Runtimes reconnect after every
//!   command, so each command has its own connection and Advertise.
//! - **A whole monitor**: [`monitor::run`] serves a reverse port as `dsipc monitor` does
//!   (each runtime resumed once or held, a cap on connections, every connection with its
//!   own deadline), reporting each event to a callback.
//! - **Server connections**: [`Control::listen`] accepts clients; each request comes as
//!   [`Event::Request`]; answer with [`Control::respond`], stream with
//!   [`Control::write_continuation`] (flow-controlled by [`Event::Writable`]) and end
//!   with [`Control::finish_stream`]. Malformed requests are answered for you
//!   ([`Event::Rejected`]). [`Control::connect_advertising`] plays the runtime side of a
//!   reverse port.
//!
//! Each connection is registered for exactly what its machine wants (read, write, both),
//! re-registered only when that changes. Each connection reads until `WouldBlock`
//! (edge-triggered) into its own [`dsipc::recv::RecvBuffer`], which drives its machine
//! and hands events out borrowing the bytes read (no copy); the buffer starts empty and
//! grows with what arrives (to [`READ_BUFFER_LEN`] for a stream, to
//! [`MAX_READ_BUFFER_LEN`] for an item needed in one piece). Output the socket does not
//! take at once is kept and written on writability. Nothing spins: an idle reactor sleeps in `epoll_wait`. Nothing panics on
//! peer input: protocol violations close that connection with a typed
//! [`CloseReason::Failed`].
//!
//! ## The loop
//!
//! A monitor that resumes every runtime suspended on its reverse port, then asks each one
//! for its process information. Here the "runtime" is a server machine in the same loop
//! ([`Control::connect_advertising`]); a real one is started with
//! `DOTNET_DiagnosticPorts=/path/to/port.sock,connect,suspend`.
//!
//! ```
//! use std::collections::HashSet;
//! use std::time::{Duration, Instant};
//! use dsipc::payload::{ProcessInfo, ProcessInfoReply, ResumeRuntime};
//! use dsipc::wire::{Advertise, Guid};
//! use dsipc::{AnyRequest, ClientEvent, Hresult, Reply, Response};
//! use dsipc_mio::{CloseReason, Control, Event, Reactor};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = std::env::temp_dir().join(format!("dsipc-mio-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let port = dir.join("port.sock");
//!
//! let mut reactor = Reactor::new()?;
//! reactor.control().listen_reverse(&port)?;
//!
//! // The runtime side, for this example only: a real runtime connects by itself.
//! let me = Advertise { runtime_cookie: Guid::from_fields(1, 2, 3, [4; 8]), process_id: 4242, future: 0 };
//! let mut runtime = reactor.control().connect_advertising(&port, me)?;
//!
//! let mut resumed = HashSet::new(); // cookies
//! let mut pids = Vec::new();
//! let deadline = Instant::now() + Duration::from_secs(10);
//! while pids.is_empty() && Instant::now() < deadline {
//!     reactor.poll(Some(Duration::from_millis(100)), &mut |ctl: &mut Control, event: Event<'_>| {
//!         match event {
//!             // The monitor: one command per Advertise.
//!             Event::Advertise { conn, advertise, .. } => {
//!                 let sent = if resumed.insert(advertise.runtime_cookie) {
//!                     ctl.send_request(conn, &ResumeRuntime)
//!                 } else {
//!                     ctl.send_request(conn, &ProcessInfo)
//!                 };
//!                 if let Err(e) = sent {
//!                     eprintln!("{}: {}", conn, e);
//!                 }
//!             }
//!             Event::Client { event: ClientEvent::Reply(Reply::ProcessInfo(info)), .. } => {
//!                 pids.push(info.process_id)
//!             }
//!             Event::Client { conn, event: ClientEvent::Error(e) } => {
//!                 eprintln!("{}: error reply {}", conn, e.hresult)
//!             }
//!             Event::Closed { conn, reason } => {
//!                 if let CloseReason::Failed(e) = reason {
//!                     eprintln!("{}: {}", conn, e);
//!                 }
//!                 // (example runtime: reconnect after each command, as a runtime does)
//!                 if conn == runtime {
//!                     runtime = ctl.connect_advertising(&port, me).unwrap();
//!                 }
//!             }
//!             // The example runtime answers.
//!             Event::Request { conn, request, .. } => {
//!                 let reply = match request {
//!                     AnyRequest::ProcessInfo(_) => Reply::ProcessInfo(ProcessInfoReply {
//!                         process_id: 4242,
//!                         runtime_cookie: me.runtime_cookie,
//!                         command_line: "app".into(),
//!                         os: "Linux".into(),
//!                         arch: "x64".into(),
//!                     }),
//!                     _ => Reply::Ok(Hresult::S_OK),
//!                 };
//!                 ctl.respond(conn, &Response::Ok(reply)).unwrap();
//!             }
//!             _ => {}
//!         }
//!     })?;
//! }
//! assert_eq!(pids, [4242]);
//! drop(reactor); // closes every connection and removes the socket file
//! assert!(!port.exists());
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```
//!
//! ## Calls and sessions
//!
//! [`Control::call`] and [`Control::trace`] hand the protocol's decisions to
//! [`dsipc::session`]: the reactor opens the connections its [`Call`](dsipc::session::Call)
//! or [`Tracing`](dsipc::session::Tracing) asks for (one per command version tried, and a
//! second one for a session's stop), writes and reads for it, and wakes by itself at its
//! deadline (one timer heap for all of them, beside the connections' own
//! [`Control::set_timeout`]). Here the runtime is a server machine in the same loop that
//! knows the first ProcessInfo only (an older runtime): the call falls back to it; a real
//! runtime's socket is found with `dsipc_platform::discovery::find_socket(pid, None)`.
//!
//! ```
//! use std::time::Duration;
//! use dsipc::session::{Ask, ProcessInfo};
//! use dsipc::{AnyRequest, ClientEvent, ErrorReply, Hresult, Reply, Response};
//! use dsipc_mio::{Control, Event, Reactor};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = std::env::temp_dir().join(format!("dsipc-mio-call-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! let socket = dir.join("dotnet-diagnostic-4242-1-socket");
//!
//! let mut reactor = Reactor::new()?;
//! reactor.control().listen(&socket)?; // the example runtime
//! let call = reactor.control().call(&socket, Ask::ProcessInfo, Duration::from_secs(5))?;
//!
//! let (mut info, mut result) = (None, None);
//! while result.is_none() {
//!     reactor.poll(None, &mut |ctl: &mut Control, event: Event<'_>| match event {
//!         Event::Call { id, command, event: ClientEvent::Reply(reply) } if id == call => {
//!             // `command`: the version that answered
//!             info = ProcessInfo::from_reply(command, &reply);
//!         }
//!         Event::CallDone { id, result: r } if id == call => result = Some(r),
//!         // The example runtime knows ProcessInfo (0x0400) only.
//!         Event::Request { conn, request: AnyRequest::ProcessInfo(_), .. } => {
//!             let reply = dsipc::payload::ProcessInfoReply {
//!                 process_id: 4242,
//!                 runtime_cookie: dsipc::wire::Guid::from_fields(1, 2, 3, [4; 8]),
//!                 command_line: "app".into(),
//!                 os: "Linux".into(),
//!                 arch: "x64".into(),
//!             };
//!             ctl.respond(conn, &Response::Ok(Reply::ProcessInfo(reply))).unwrap();
//!         }
//!         Event::Request { conn, .. } => {
//!             let unknown = ErrorReply::new(Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND);
//!             ctl.respond(conn, &Response::Error(unknown)).unwrap();
//!         }
//!         _ => {}
//!     })?;
//! }
//! result.unwrap()?; // a typed dsipc_mio::Error::Session when the runtime said no
//! let info = info.unwrap();
//! assert_eq!((info.pid, info.command), (4242, dsipc::Command::ProcessInfo));
//! # drop(reactor);
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```
//!
//! A session runs the same way: [`Control::trace`] with a
//! [`TraceConfig`](dsipc::session::TraceConfig), [`Control::stop_trace`] when enough
//! arrived (from a handler or outside), and [`Event::TraceDone`] says how it ended.
//!
//! ## Borrowing
//! Events borrow the reactor's read buffer (or a call's or session's): copy what you keep. A request may be
//! answered later (outside the handler, through [`Reactor::control`]), but its borrowed
//! fields must be copied before the handler returns.
//!
//! ## Limits
//! Unix sockets only. user_events sessions (CollectTracing5/6 passing a descriptor with
//! `SCM_RIGHTS`) go through [`Control::connect_user_events`] (or
//! [`Control::send_user_events_request`] on a reverse connection); [`Control::connect`]
//! refuses them with [`Error::FdPassingUnsupported`]. A process serving
//! 1,000 connections needs about 1,000 descriptors per side: raise `RLIMIT_NOFILE` if
//! needed.
#![deny(missing_docs)]
#![cfg(unix)]

/// The README's Rust examples, compiled (and run where they need no runtime) as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

mod conn;
mod control;
mod drive;
mod error;
mod event;
mod fdpass;
mod ids;
mod listen;
pub mod monitor;
mod reactor;
mod read;
mod respond;
mod session;
mod timers;

pub use control::Control;
/// Why a listener could not be created: dsipc-platform's (the same type as
/// `dsipc_std::reverse::ListenError`), whose [`bind_private`](dsipc_platform::bind_private)
/// binds every listener of this crate.
pub use dsipc_platform::ListenError;
pub use error::{CloseReason, Error};
pub use event::{Event, Handler};
pub use ids::{CallId, ConnId, ListenerId, ListenerKind, Stats, TraceId};
pub use listen::bind_private;
pub use reactor::{Reactor, MAX_READ_BUFFER_LEN, READ_BUFFER_LEN};

/// The core crate, re-exported.
pub use dsipc;
/// mio, re-exported (for [`mio::Waker`]).
pub use mio;
