//! user_events sessions: after a CollectTracing5/6 user_events request the client passes
//! the `user_events_data` descriptor with `SCM_RIGHTS` (one data byte), which the runtime
//! reads before it replies. [`Control::connect_user_events`] and
//! [`Control::send_user_events_request`] queue the request and a copy of the descriptor;
//! the connection sends the descriptor (dsipc-platform's
//! [`send_fd`](dsipc_platform::fdpass::send_fd)) as soon as the request bytes are all
//! written, waiting for writability if the socket is full, then closes its copy.

use std::io;
use std::os::unix::io::{AsFd, OwnedFd};
use std::path::Path;

use mio::net::UnixStream;

use dsipc::payload::Request;
use dsipc::ClientConnection;

use crate::conn::Machine;
#[cfg(doc)]
use crate::{CloseReason, Event};
use crate::{ConnId, Control, Error};

/// Sends the pending descriptor, if any, once the request bytes before it are written:
/// `Ok` when sent, when the socket is full (it stays pending, the connection waits for
/// writability), or when the peer has closed (the copy is dropped: what the peer said
/// before closing, such as a runtime's UNKNOWN_COMMAND, and its close come through the read
/// path, as for any request); the error of `sendmsg` otherwise.
pub(crate) fn flush_fd(stream: &UnixStream, pending: &mut Option<OwnedFd>) -> io::Result<()> {
    let fd = match pending {
        Some(fd) => fd,
        None => return Ok(()),
    };
    match dsipc_platform::fdpass::send_fd(stream.as_fd(), fd.as_fd()) {
        Ok(()) => {
            *pending = None;
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        // A real runtime that does not know the command answers and closes at once, often
        // before the descriptor goes out: its answer is in the socket, unread.
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            ) =>
        {
            *pending = None;
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Encodes a user_events `request` with the client machine, and copies the descriptor.
fn prepare<R, F>(
    machine: &mut ClientConnection,
    request: &R,
    user_events_data: &F,
) -> Result<(Vec<u8>, OwnedFd), Error>
where
    R: Request + ?Sized,
    F: AsFd + ?Sized,
{
    if !request.requires_fd_passing() {
        return Err(Error::NotUserEvents {
            command: request.command(),
        });
    }
    let tx = crate::control::encode(machine, request)?;
    let fd = user_events_data
        .as_fd()
        .try_clone_to_owned()
        .map_err(|source| Error::Io {
            op: "duplicate the descriptor",
            source,
        })?;
    Ok((tx, fd))
}

impl Control {
    /// Connects to a diagnostic server at `path`, sends a user_events session `request`
    /// (CollectTracing5/6 with `UserEvents`), then passes `user_events_data` (normally
    /// `/sys/kernel/tracing/user_events_data`, opened read-write) with `SCM_RIGHTS`. The
    /// connection keeps a copy of the descriptor until it is sent (the caller keeps its
    /// own). Then as [`connect`](Self::connect): the reply (a session id, or an error) as
    /// [`Event::Client`]. A real runtime writes the session's events through the
    /// descriptor, not on this connection, and neither closes it when the session stops
    /// nor stops the session when it closes: stop it with StopTracing (its id is in the
    /// reply), then close the connection.
    ///
    /// Errors: [`Error::NotUserEvents`] for any other request (nothing sent), the rest as
    /// [`connect`](Self::connect). A peer that closes before the descriptor went out is
    /// reported like any peer closing on a request: what it answered first, if anything
    /// (an older runtime answers CollectTracing5 with `UNKNOWN_COMMAND` at once, without
    /// reading the descriptor), then [`Event::Closed`] (without an answer:
    /// [`CloseReason::Failed`] with `ClientError::ClosedBeforeReply`).
    pub fn connect_user_events<R, F>(
        &mut self,
        path: impl AsRef<Path>,
        request: &R,
        user_events_data: &F,
    ) -> Result<ConnId, Error>
    where
        R: Request + ?Sized,
        F: AsFd + ?Sized,
    {
        let mut machine = ClientConnection::new();
        let (tx, fd) = prepare(&mut machine, request, user_events_data)?;
        self.connect_with(path.as_ref(), Machine::Client(machine), tx, Some(fd))
    }

    /// [`send_request`](Self::send_request) for a user_events session on a reverse
    /// connection: the request, then `user_events_data` with `SCM_RIGHTS` (see
    /// [`connect_user_events`](Self::connect_user_events)).
    pub fn send_user_events_request<R, F>(
        &mut self,
        conn: ConnId,
        request: &R,
        user_events_data: &F,
    ) -> Result<(), Error>
    where
        R: Request + ?Sized,
        F: AsFd + ?Sized,
    {
        self.queue_request(conn, |m| {
            let (tx, fd) = prepare(m, request, user_events_data)?;
            Ok((tx, Some(fd)))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::time::Duration;

    use super::*;
    use crate::conn::Conn;
    use crate::{CloseReason, Event, Reactor};
    use dsipc::ClientError;

    #[test]
    fn a_pending_descriptor_goes_out_once_and_is_closed() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut mine, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut pending = Some(theirs.as_fd().try_clone_to_owned().unwrap());
        drop(theirs);
        flush_fd(&a, &mut pending).unwrap();
        assert!(pending.is_none());
        flush_fd(&a, &mut pending).unwrap();
        // The receiver got it; no other copy is left once it closes its own.
        let mut byte = [0u8; 4];
        let (n, fd) = dsipc_platform::fdpass::recv_with_fd(b.as_fd(), &mut byte).unwrap();
        assert_eq!(n, 1);
        drop(fd.expect("a descriptor"));
        mine.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut rest = Vec::new();
        mine.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
    }

    /// A peer that wrote `answer` (if any) and closed before the descriptor went out: what
    /// the connection reported, in order, once closed; and no copy of the descriptor is left.
    fn peer_closed_first(answer: Option<dsipc::payload::Response<'_>>) -> (ConnId, Vec<String>) {
        let mut reactor = Reactor::new().unwrap();
        let (a, b) = UnixStream::pair().unwrap();
        if let Some(r) = answer {
            let mut out = vec![0u8; r.encoded_len()];
            let n = r.encode(&mut out).unwrap();
            std::io::Write::write_all(&mut &b, &out[..n]).unwrap();
        }
        drop(b);
        let (mut mine, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut machine = ClientConnection::new();
        let mut scratch = vec![0u8; 4096];
        let _ = machine
            .send_request(&dsipc::payload::ResumeRuntime, &mut scratch)
            .unwrap();
        let mut conn = Conn::new(a, Machine::Client(machine), None);
        // The request already went out; only the descriptor is left.
        conn.fd_out = Some(theirs.as_fd().try_clone_to_owned().unwrap());
        drop(theirs);
        let ctl = reactor.control();
        let id = ctl.insert(conn);
        ctl.sync(id);
        let mut seen = Vec::new();
        let mut closed = false;
        for _ in 0..100 {
            if closed {
                break;
            }
            reactor
                .poll(
                    Some(Duration::from_millis(100)),
                    &mut |_: &mut Control, ev: Event<'_>| match ev {
                        Event::Closed { reason, .. } => {
                            closed = true;
                            seen.push(format!("{:?}", reason));
                        }
                        Event::Client { event, .. } => seen.push(format!("{:?}", event)),
                        _ => {}
                    },
                )
                .unwrap();
        }
        assert!(closed, "{:?}", seen);
        mine.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut rest = Vec::new();
        mine.read_to_end(&mut rest).unwrap();
        assert!(rest.is_empty());
        (id, seen)
    }

    #[test]
    fn a_peer_closed_before_the_descriptor_without_answer_is_closed_before_reply() {
        let (_, seen) = peer_closed_first(None);
        let expected = CloseReason::Failed(Error::Client(ClientError::ClosedBeforeReply));
        assert_eq!(seen, [format!("{:?}", expected)]);
    }

    #[test]
    fn a_peer_that_answered_before_closing_is_heard() {
        let unknown = dsipc::wire::Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND;
        let answer = dsipc::payload::Response::Error(dsipc::payload::ErrorReply::new(unknown));
        let (_, seen) = peer_closed_first(Some(answer));
        assert_eq!(seen.len(), 2, "{:?}", seen);
        assert!(
            seen[0].contains("CORDIAGIPC_E_UNKNOWN_COMMAND"),
            "{:?}",
            seen
        );
    }
}
