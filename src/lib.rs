//! # dsipc: the .NET Diagnostic IPC protocol, sans-IO
//!
//! Every .NET runtime (CoreCLR 3.0+) serves the Diagnostic IPC protocol on a Unix socket
//! (`$TMPDIR/dotnet-diagnostic-{pid}-{key}-socket`) or a Windows named pipe
//! (`\\.\pipe\dotnet-diagnostic-{pid}`): dotnet-trace, dotnet-counters, dotnet-dump and
//! dotnet-monitor are built on it. This crate is its core: `#![no_std]`, no allocator, no
//! unsafe code, no clocks and no I/O. Adapters (blocking std, mio, Windows pipes) drive it.
//!
//! ## Layers
//! - [`wire`]: the 20-byte header ([`wire::HeaderView`] over received bytes, validated
//!   [`wire::Header`]), the payload encoding rules ([`wire::Reader`], [`wire::Writer`]),
//!   UTF-16 strings as borrowed views ([`wire::Text`], [`wire::Utf16Str`]), [`wire::Guid`],
//!   [`wire::Hresult`], command codes ([`wire::Command`]) and the reverse-port
//!   [`wire::Advertise`] message.
//! - [`payload`]: one typed request per command, named after the spec
//!   ([`payload::ProcessInfo3`], [`payload::CollectTracing2`], ...), all implementing
//!   [`payload::Request`]; typed replies ([`payload::Reply`], [`payload::ErrorReply`]).
//! - [`conn`]: [`ClientConnection`] (a tool's side of one connection, or a monitor's side of
//!   a reverse port) and [`ServerConnection`] (the runtime's side, optionally advertising).
//! - [`recv`]: [`recv::RecvBuffer`], the receive buffer that drives any of the machines
//!   over caller-owned storage (compaction, growth within a bound, EOF).
//! - [`transport`]: socket and pipe names, the `/proc/PID/stat` key, `DOTNET_DiagnosticPorts`.
//! - `session` (feature `alloc`): every policy above one exchange, still sans-IO: command
//!   versions and fallbacks (`Call`), EventPipe sessions with their stop and their end
//!   (`Tracing`), deadlines from the caller's clock. Adapters are its run loop.
//!
//! ## The drive loop
//! One request per connection. Encode it with [`ClientConnection::send_request`] and write
//! it in **one** write (.NET Core 3.1 reads header and payload with a single read each).
//! Then let a [`recv::RecvBuffer`] drive the machine: poll, act on each event, read into its
//! spare space when it asks for input, tell it about EOF. The same loop drives the server
//! machine and the nettrace parser (see [`recv`]).
//!
//! ```
//! use std::io::{Read, Write};
//! use dsipc::payload::{ProcessInfo, Reply};
//! use dsipc::recv::{Poll, RecvBuffer};
//! use dsipc::{ClientConnection, ClientEvent};
//!
//! /// Runs ProcessInfo over any byte stream and returns the pid it reports.
//! fn process_id<S: Read + Write>(sock: &mut S) -> Result<u64, Box<dyn std::error::Error>> {
//!     let mut conn = ClientConnection::new();
//!     let mut tx = [0u8; 64];
//!     let n = conn.send_request(&ProcessInfo, &mut tx)?;
//!     sock.write_all(&tx[..n])?; // one write
//!
//!     // Any reply fits in 64 KiB (the u16 size field).
//!     let mut storage = vec![0u8; 64 * 1024];
//!     let mut rx = RecvBuffer::new(&mut storage[..]);
//!     let mut pid = None;
//!     loop {
//!         match rx.poll_client(&mut conn)? {
//!             // Events borrow the buffer; their bytes are consumed already.
//!             Poll::Event(ClientEvent::Reply(Reply::ProcessInfo(info))) => {
//!                 pid = Some(info.process_id)
//!             }
//!             Poll::Event(ClientEvent::Error(e)) => return Err(e.hresult.to_string().into()),
//!             Poll::Event(other) => println!("event: {:?}", other),
//!             // Read once; 0 is EOF (an error if it cut a message short).
//!             Poll::NeedInput => match sock.read(rx.read_buf()?)? {
//!                 0 => rx.eof(),
//!                 got => rx.filled(got),
//!             },
//!             Poll::End => return pid.ok_or_else(|| "no reply".into()),
//!         }
//!     }
//! }
//!
//! // A fake runtime: reads nothing, answers with a ProcessInfo reply 3 bytes at a time.
//! struct Fake { reply: Vec<u8>, at: usize }
//! impl Read for Fake {
//!     fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
//!         let n = buf.len().min(3).min(self.reply.len() - self.at);
//!         buf[..n].copy_from_slice(&self.reply[self.at..self.at + n]);
//!         self.at += n;
//!         Ok(n)
//!     }
//! }
//! impl Write for Fake {
//!     fn write(&mut self, b: &[u8]) -> std::io::Result<usize> { Ok(b.len()) }
//!     fn flush(&mut self) -> std::io::Result<()> { Ok(()) }
//! }
//! let info = dsipc::payload::ProcessInfoReply {
//!     process_id: 4242,
//!     runtime_cookie: dsipc::Guid::NIL,
//!     command_line: "/usr/bin/dotnet app.dll".into(),
//!     os: "Linux".into(),
//!     arch: "x64".into(),
//! };
//! let mut reply = vec![0u8; 256];
//! let n = dsipc::Response::Ok(Reply::ProcessInfo(info)).encode(&mut reply).unwrap();
//! reply.truncate(n);
//! assert_eq!(process_id(&mut Fake { reply, at: 0 }).unwrap(), 4242);
//! ```
//!
//! ## Borrow rules
//! - Events borrow from the slice given to [`ClientConnection::handle_input`]; they are
//!   valid until the caller changes that buffer. The machine keeps no reference to it.
//! - Driving a machine by hand ([`ClientConnection::handle_input`]): on
//!   [`Status::Partial`] nothing was consumed: keep the bytes, append, call again.
//!   `needed` says how many contiguous bytes the next event needs (at most one message of
//!   65,535 bytes, or one environment entry, which Linux lets grow to about 256 KiB in
//!   UTF-16): a buffer smaller than that is the caller's capacity error
//!   ([`recv::BufferTooSmall`]), never a silent truncation.
//! - EventPipe data arrives as [`ClientEvent::StreamData`] slices of the input: the core
//!   copies no stream byte.
//! - Strings are [`wire::Text`] views over the received bytes. Convert them into a buffer
//!   you own with [`wire::Text::to_utf8`] (strict: lone surrogates are an error) or
//!   [`wire::Text::to_utf8_lossy`] (U+FFFD), or iterate [`wire::Text::chars`].
//!
//! ## Errors
//! Every failure is a typed, `Copy` value: [`EncodeError`] (with the size needed),
//! [`DecodeError`] (with the field and offset), [`ClientError`] (protocol violations, each
//! its own variant, and misuse such as a second request). After a protocol error the machine
//! stays failed and repeats the error. Nothing in this crate panics on peer input.
//!
//! ## Features
//! - `std` (default): implement `std::error::Error` for the error types. The crate itself
//!   never uses std; turn this off for `no_std` targets.
//! - `alloc`: a growable `Vec<u8>` storage for [`recv::RecvBuffer`], and the `session`
//!   layer (which owns one buffer per connection, and a few strings for replies it owns).
//! - `defmt`: derive `defmt::Format` on public types and log through defmt.
//! - `arbitrary`: derive `arbitrary::Arbitrary` on requests and responses.
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

#[cfg(feature = "std")]
extern crate std;

#[cfg(feature = "alloc")]
extern crate alloc;

pub(crate) mod fmt;

pub mod conn;
pub mod error;
#[cfg(feature = "fixtures")]
pub mod fixtures;
pub mod nettrace;
pub mod payload;
pub mod recv;
#[cfg(feature = "alloc")]
pub mod session;
pub mod transport;
pub mod wire;

/// The README's Rust examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// ARCHITECTURE.md's Rust examples (using the core and the session layer), compiled and
/// run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../ARCHITECTURE.md")]
pub struct ArchitectureDoctests;

pub use conn::{
    ClientConnection, ClientEvent, Handled, ServerConnection, ServerEvent, ServerStatus, Status,
};
pub use error::{ClientError, DecodeError, EncodeError, HeaderError, UsageError};
pub use nettrace::{NettraceError, NettraceParser};
pub use payload::{AnyRequest, ErrorReply, Reply, Request, Response};
pub use wire::{Command, Guid, Hresult, Text};
