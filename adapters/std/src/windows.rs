//! Windows transport of the blocking adapter: dsipc-platform's named pipes (re-exported
//! here: [`PipeStream`], [`connect`], [`PipeListener`], the pipe listing) as a
//! [`Connection`](crate::Connection), and the runtime's default pipe as a [`Transport`].

use std::time::Duration;

pub use dsipc_platform::windows::*;

use crate::{Endpoint, Error, Transport};

crate::transport::connection_of_stream!(PipeStream);

impl Transport for Endpoint {
    type Conn = PipeStream;
    fn connect(&self, timeout: Duration) -> Result<PipeStream, Error> {
        connect(self.path(), timeout).map_err(|source| Error::Connect {
            endpoint: self.path().to_path_buf(),
            source,
        })
    }
}

/// The endpoint of process `pid`: its default pipe.
pub fn endpoint_for_pid(pid: u32) -> Endpoint {
    Endpoint::new(pipe_for_pid(pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_of_a_pid_is_its_default_pipe() {
        assert_eq!(
            endpoint_for_pid(42).path(),
            std::path::Path::new(r"\\.\pipe\dotnet-diagnostic-42")
        );
    }
}
