//! Windows transport: `\\.\pipe\dotnet-diagnostic-{pid}`.
//!
//! A placeholder so that the crate and its users build on Windows: connecting reports
//! `Unsupported`. A named-pipe client with timeouts (overlapped I/O) replaces
//! [`PipeStream`] and [`Transport::connect`] here; nothing else in the crate changes.

use std::io::{self, Read, Write};
use std::time::Duration;

use dsipc::transport::PipeName;

use crate::{Connection, Endpoint, Error, Transport};

/// A connected pipe (not implemented yet, so it has no values).
#[derive(Debug)]
pub enum PipeStream {}

impl Read for PipeStream {
    fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
        match *self {}
    }
}

impl Write for PipeStream {
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        match *self {}
    }
    fn flush(&mut self) -> io::Result<()> {
        match *self {}
    }
}

impl Connection for PipeStream {
    fn set_read_timeout(&mut self, _: Option<Duration>) -> io::Result<()> {
        match *self {}
    }
    fn set_write_timeout(&mut self, _: Option<Duration>) -> io::Result<()> {
        match *self {}
    }
}

impl Transport for Endpoint {
    type Conn = PipeStream;
    fn connect(&self, _timeout: Duration) -> Result<PipeStream, Error> {
        Err(Error::Connect {
            endpoint: self.path().to_path_buf(),
            source: io::Error::new(
                io::ErrorKind::Unsupported,
                "the Windows named-pipe transport is not implemented yet",
            ),
        })
    }
}

/// The endpoint of process `pid`: its default pipe.
pub fn endpoint_for_pid(pid: u32) -> Endpoint {
    Endpoint::new(PipeName { pid }.to_string())
}
