//! The server side of [`Control`]: answering requests and writing continuation data.

use mio::net::UnixStream;

use dsipc::conn::{environment_answer_len, process_info_answer_len, ServerConnection, ServerError};
use dsipc::payload::{ProcessInfo3Reply, Response};
use dsipc::wire::Text;

use crate::conn::{write_until_blocked, Conn, Machine, Slot};
use crate::Error;
#[cfg(doc)]
use crate::Event;
use crate::{ConnId, Control};

impl Control {
    // ---- server side -------------------------------------------------------------------

    pub(crate) fn server(&mut self, conn: ConnId) -> Result<ServerParts<'_>, Error> {
        let c = match self.slots.get_mut(conn.index as usize) {
            Some(Slot {
                generation,
                conn: Some(c),
            }) if *generation == conn.generation => c,
            _ => return Err(Error::UnknownConnection(conn)),
        };
        let Conn {
            stream,
            machine,
            tx,
            tx_at,
            want_writable,
            ..
        } = c;
        match machine {
            Machine::Server(machine) => Ok(ServerParts {
                writes: &mut self.stats.writes,
                stream,
                machine,
                tx,
                tx_at,
                want_writable,
            }),
            Machine::Client(_) | Machine::Driven(_) => Err(Error::NotAServer(conn)),
        }
    }

    /// Answers the request of a server connection. An OK reply to CollectTracing opens the
    /// EventPipe stream ([`write_continuation`](Self::write_continuation), then
    /// [`finish_stream`](Self::finish_stream)); any other reply closes the connection once
    /// written. For ProcessEnvironment use [`respond_environment`](Self::respond_environment).
    pub fn respond(&mut self, conn: ConnId, response: &Response<'_>) -> Result<(), Error> {
        self.queue_answer(conn, response.encoded_len(), |m, out| {
            m.send_response(response, out)
        })
    }

    /// Answers ProcessEnvironment: the OK reply announcing the block's size, then the
    /// block holding `vars` (`NAME=VALUE` entries), both encoded by the core
    /// ([`ServerConnection::send_environment`]); the connection closes once written.
    pub fn respond_environment<'a, I>(&mut self, conn: ConnId, vars: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = Text<'a>> + Clone,
    {
        self.queue_answer(conn, environment_answer_len(vars.clone()), |m, out| {
            m.send_environment(vars, out)
        })
    }

    /// Answers whichever ProcessInfo version was asked from one value with every field
    /// ([`ServerConnection::send_process_info`] picks the reply); the connection closes
    /// once written.
    pub fn respond_process_info(
        &mut self,
        conn: ConnId,
        info: &ProcessInfo3Reply<'_>,
    ) -> Result<(), Error> {
        let len = process_info_answer_len(info);
        self.queue_answer(conn, len, |m, out| m.send_process_info(info, out))
    }

    /// Queues the answer `encode` writes (at most `len` bytes) and writes what the socket
    /// takes now. Nothing is queued on error.
    fn queue_answer(
        &mut self,
        conn: ConnId,
        len: usize,
        encode: impl FnOnce(&mut ServerConnection, &mut [u8]) -> Result<usize, ServerError>,
    ) -> Result<(), Error> {
        let p = self.server(conn)?;
        let at = p.tx.len();
        p.tx.resize(at + len, 0);
        match encode(p.machine, &mut p.tx[at..]) {
            Ok(n) => p.tx.truncate(at + n),
            Err(e) => {
                p.tx.truncate(at);
                return Err(e.into());
            }
        }
        self.sync(conn);
        Ok(())
    }

    /// Writes continuation bytes (EventPipe data after an OK reply to CollectTracing, or
    /// an environment block after a hand-made ProcessEnvironment reply) straight from
    /// `data`, as many as the socket takes now; returns how many. When that is less than
    /// `data.len()`, [`Event::Writable`] comes once the socket takes more: write the rest
    /// then. Nothing is copied or buffered.
    pub fn write_continuation(&mut self, conn: ConnId, data: &[u8]) -> Result<usize, Error> {
        let p = self.server(conn)?;
        // Refuse before writing anything.
        p.machine.check_continuation(data.len())?;
        let mut written = 0;
        // Queued output first, then `data` straight from the caller's buffer.
        let mut failure = write_until_blocked(p.stream, p.writes, p.tx, p.tx_at).err();
        if failure.is_none() && *p.tx_at == p.tx.len() {
            failure = write_until_blocked(p.stream, p.writes, data, &mut written).err();
        }
        if let Some(e) = failure {
            self.write_failed(conn, &e);
            return Err(Error::Io {
                op: "write",
                source: e,
            });
        }
        p.machine.continuation_sent(written)?;
        *p.want_writable = written < data.len();
        self.sync(conn);
        Ok(written)
    }

    /// Ends an EventPipe stream (the session stopped); the connection closes once its
    /// output is written.
    pub fn finish_stream(&mut self, conn: ConnId) -> Result<(), Error> {
        let p = self.server(conn)?;
        p.machine.finish_stream()?;
        *p.want_writable = false;
        self.sync(conn);
        Ok(())
    }
}

/// The parts of a server connection an operation needs at once.
pub(crate) struct ServerParts<'c> {
    pub(crate) writes: &'c mut u64,
    pub(crate) stream: &'c mut UnixStream,
    pub(crate) machine: &'c mut ServerConnection,
    pub(crate) tx: &'c mut Vec<u8>,
    pub(crate) tx_at: &'c mut usize,
    pub(crate) want_writable: &'c mut bool,
}
