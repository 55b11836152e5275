//! # dsipc: the .NET Diagnostic IPC protocol, sans-IO
//!
//! PLACEHOLDER
#![no_std]
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub(crate) mod fmt;

pub mod conn;
pub mod error;
pub mod payload;
pub mod transport;
pub mod wire;

pub use conn::{ClientConnection, ClientEvent, Handled, Status};
pub use error::{ClientError, DecodeError, EncodeError, HeaderError};
pub use payload::{AnyRequest, ErrorReply, Reply, Request, Response};
pub use wire::{Command, Guid, Hresult, Text};
