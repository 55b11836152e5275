//! The server side of [`Control`]: answering requests and writing continuation data.

use std::io::{self, Write};

use mio::net::UnixStream;

use dsipc::conn::{encode_environment_block, environment_block_len, ServerConnection};
use dsipc::payload::{ProcessEnvironmentReply, Reply, Response};
use dsipc::wire::Text;

use crate::conn::{would_block, Conn, Machine, Slot};
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
            Machine::Client(_) => Err(Error::NotAServer(conn)),
        }
    }

    /// Answers the request of a server connection. An OK reply to CollectTracing opens the
    /// EventPipe stream ([`write_continuation`](Self::write_continuation), then
    /// [`finish_stream`](Self::finish_stream)); any other reply closes the connection once
    /// written. For ProcessEnvironment use [`respond_environment`](Self::respond_environment).
    pub fn respond(&mut self, conn: ConnId, response: &Response<'_>) -> Result<(), Error> {
        let p = self.server(conn)?;
        let at = p.tx.len();
        p.tx.resize(at + response.encoded_len(), 0);
        match p.machine.send_response(response, &mut p.tx[at..]) {
            Ok(n) => p.tx.truncate(at + n),
            Err(e) => {
                p.tx.truncate(at);
                return Err(e.into());
            }
        }
        self.sync(conn);
        Ok(())
    }

    /// Answers ProcessEnvironment: the OK reply announcing the block's size, then the
    /// block holding `vars` (`NAME=VALUE` entries); the connection closes once written.
    pub fn respond_environment<'a, I>(&mut self, conn: ConnId, vars: I) -> Result<(), Error>
    where
        I: IntoIterator<Item = Text<'a>> + Clone,
    {
        let len = environment_block_len(vars.clone());
        let incoming_bytes = u32::try_from(len).map_err(|_| {
            Error::Encode(dsipc::EncodeError::InvalidField {
                field: "environment",
                reason: "block larger than 4 GiB",
            })
        })?;
        let p = self.server(conn)?;
        let reply = Response::Ok(Reply::ProcessEnvironment(ProcessEnvironmentReply {
            incoming_bytes,
            future: 0,
        }));
        // Run both steps on a copy of the machine before anything is queued.
        let mut probe = p.machine.clone();
        let at = p.tx.len();
        p.tx.resize(at + reply.encoded_len() + len, 0);
        let head = match probe.send_response(&reply, &mut p.tx[at..]) {
            Ok(n) => n,
            Err(e) => {
                p.tx.truncate(at);
                return Err(e.into());
            }
        };
        let block = probe
            .continuation_sent(len)
            .map_err(Error::from)
            .and_then(|()| {
                encode_environment_block(vars, &mut p.tx[at + head..]).map_err(Error::from)
            });
        match block {
            Ok(n) => p.tx.truncate(at + head + n),
            Err(e) => {
                p.tx.truncate(at);
                return Err(e);
            }
        }
        *p.machine = probe;
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
        // Refuse before writing: a copy of the machine checks the length.
        p.machine.clone().continuation_sent(data.len())?;
        let mut written = 0;
        let mut failure = None;
        while *p.tx_at < p.tx.len() {
            *p.writes += 1;
            match p.stream.write(&p.tx[*p.tx_at..]) {
                Ok(0) => {
                    failure = Some(io::Error::from(io::ErrorKind::WriteZero));
                    break;
                }
                Ok(n) => *p.tx_at += n,
                Err(e) if would_block(&e) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if failure.is_none() && *p.tx_at == p.tx.len() {
            while written < data.len() {
                *p.writes += 1;
                match p.stream.write(&data[written..]) {
                    Ok(0) => {
                        failure = Some(io::Error::from(io::ErrorKind::WriteZero));
                        break;
                    }
                    Ok(n) => written += n,
                    Err(e) if would_block(&e) => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
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
