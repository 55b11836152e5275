//! What the protocol driver needs from a transport: a byte stream with timeouts, and a way
//! to open a fresh one for every command (the protocol allows one command per connection).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// A connected byte stream to a diagnostic server, with settable timeouts.
pub trait Connection: Read + Write {
    /// Sets the read timeout (`None` blocks forever; the adapter never passes `None`).
    fn set_read_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;
    /// Sets the write timeout.
    fn set_write_timeout(&mut self, timeout: Option<Duration>) -> io::Result<()>;
}

/// Opens a new [`Connection`] to one diagnostic server for each command.
pub trait Transport {
    /// The connection type.
    type Conn: Connection;
    /// Connects within `timeout`, and returns a connection whose read and write timeouts
    /// are both set to `timeout` (the driver changes the read timeout when it needs another).
    fn connect(&self, timeout: Duration) -> Result<Self::Conn, crate::Error>;
}

/// `Connection` for streams whose own `set_read_timeout` and `set_write_timeout` it
/// forwards to (TCP here, Unix sockets in `unix`, named pipes in `windows`).
macro_rules! connection_of_stream {
    ($stream:ty) => {
        impl $crate::Connection for $stream {
            fn set_read_timeout(
                &mut self,
                timeout: Option<std::time::Duration>,
            ) -> std::io::Result<()> {
                <$stream>::set_read_timeout(self, timeout)
            }
            fn set_write_timeout(
                &mut self,
                timeout: Option<std::time::Duration>,
            ) -> std::io::Result<()> {
                <$stream>::set_write_timeout(self, timeout)
            }
        }
    };
}
pub(crate) use connection_of_stream;

connection_of_stream!(TcpStream);

/// The address of a runtime's default diagnostic server (dsipc-platform's, shared with
/// dsipc-tokio).
pub use dsipc_platform::Endpoint;
