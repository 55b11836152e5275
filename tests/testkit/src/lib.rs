//! # dsipc-testkit: test doubles for the .NET Diagnostic IPC protocol
//!
//! - [`FakeRuntime`]: a fake .NET runtime built on the core's
//!   [`ServerConnection`](dsipc::ServerConnection), over Unix sockets or (on Windows)
//!   dsipc-std's named pipes: the same code, only the transport differs. It listens as
//!   `dotnet-diagnostic-{pid}-{key}-socket` in a directory of your choice (mode 0600), or
//!   at a path or pipe of your choice ([`Config::listen_at`]),
//!   and/or connects to a monitor's reverse port (Advertise, one command, reconnect),
//!   answers every command like a .NET 8 runtime unless told otherwise per command
//!   ([`Answer`]: status, error, error with message, raw bytes, close, hang, custom
//!   stream), streams EventPipe continuations of a chosen size, stops them on StopTracing
//!   from another connection (replying only after the stream ended, like the runtime), and
//!   records every request for assertions. Use it where a real runtime cannot answer:
//!   CollectTracing4/5/6, StartupProfiler when not suspended, error paths. For user_events
//!   sessions it receives the passed descriptor and writes one record through it
//!   ([`fake_user_events_record`]).
//! - [`HostedRuntime`]: a real .NET runtime in a child process (`tests/runtime/host.py`
//!   with the interpreter from `DSIPC_PYTHON`), killed on drop.
//! - [`bind_private`] (dsipc-std's: mode 0600, a stale socket removed, nothing else ever
//!   removed; errors are [`ListenError`]) and [`TempDir`].
//!
//! Std and dsipc-std only, no unsafe code, and Rust 1.63 compatible. The Windows workspace
//! (`windows/`) builds it for `x86_64-pc-windows-gnu` and its pipe tests use the fake
//! runtime; the socket helpers ([`bind_private`], [`TempDir`]...) are Unix only.
//!
//! ```
//! # #[cfg(unix)] {
//! use std::io::{Read, Write};
//! use std::time::Duration;
//! use dsipc::payload::ProcessInfo;
//! use dsipc::{ClientConnection, ClientEvent, Command, Reply, Status};
//! use dsipc_testkit::{Answer, Config, TempDir};
//!
//! let dir = TempDir::new("doc").unwrap();
//! let rt = Config::new()
//!     .pid(4242)
//!     .answer(Command::ProcessInfo3, Answer::unknown_command())
//!     .listen_in(dir.path())
//!     .start()
//!     .unwrap();
//!
//! let mut sock = std::os::unix::net::UnixStream::connect(rt.socket_path().unwrap()).unwrap();
//! let mut conn = ClientConnection::new();
//! let mut tx = [0u8; 64];
//! let n = conn.send_request(&ProcessInfo, &mut tx).unwrap();
//! sock.write_all(&tx[..n]).unwrap();
//! let mut rx = Vec::new();
//! sock.read_to_end(&mut rx).unwrap();
//! match conn.handle_input(&rx).unwrap().status {
//!     Status::Event(ClientEvent::Reply(Reply::ProcessInfo(info))) => {
//!         assert_eq!(info.process_id, 4242)
//!     }
//!     other => panic!("{:?}", other),
//! }
//! let got = rt.wait_received(1, Duration::from_secs(5));
//! assert_eq!(got[0].command, Some(Command::ProcessInfo));
//! # }
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod answer;
mod artifact;
mod fake;
mod host;
mod pattern;
pub mod samples;
#[cfg(unix)]
mod socket;
mod unique;
mod user_events;

pub use answer::{Answer, DumpPlant, Identity, StreamSpec, Then};
pub use artifact::is_artifact_name;
pub use fake::{Config, FakeRuntime, Received, ReversePort, StreamEnd, StreamRecord};
pub use host::{host_script, python, HostError, HostOptions, HostedRuntime, Ready};
pub use pattern::{check_pattern, fill_pattern, pattern_byte};
#[cfg(unix)]
pub use socket::{bind_private, socket_name, stale_socket, ListenError, TempDir};
pub use user_events::{
    fake_user_events_record, user_events_record, USER_EVENTS_MARKER, USER_EVENTS_VERSION,
};
#[cfg(unix)]
pub use user_events::{read_to_eof, user_events_data_file};

/// The core crate, re-exported.
pub use dsipc;
