//! Connection state machines. They never do I/O: they consume received bytes and produce
//! bytes to send, in buffers the caller owns.
//!
//! - [`ClientConnection`]: a tool's side (also the monitor's side of a reverse port, with
//!   [`ClientConnection::expecting_advertise`]).
//! - [`ServerConnection`]: the runtime's side (also its reverse-port side, with
//!   [`ServerConnection::advertising`]).

mod client;
mod server;

pub use client::{ClientConnection, ClientEvent, Handled, Status};
pub use server::{
    encode_environment_block, environment_answer_len, environment_block_len, process_info3_from_v2,
    process_info_answer_len, process_info_reply, RejectReason, Rejection, ServerConnection,
    ServerError, ServerEvent, ServerHandled, ServerStatus, ERROR_REPLY_LEN,
};
