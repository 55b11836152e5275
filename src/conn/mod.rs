//! Connection state machines. They never do I/O: they consume received bytes and produce
//! bytes to send, in buffers the caller owns.

mod client;

pub use client::{ClientConnection, ClientEvent, Handled, Status};
