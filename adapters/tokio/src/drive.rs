//! The one drive loop of a one-shot command: [`run_call`] moves the bytes of a
//! session-layer [`Call`] over an async connection (connect, one `write_all`, reads). What
//! to send, what to fall back to and the deadline are the call's; the caller's timer waits
//! until that deadline. Reads are cancel safe: a read that did not complete took no bytes.

use dsipc::conn::ClientEvent;
use dsipc::session::{Ask, Call, Step};
use dsipc::wire::Command;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::conn::{BoxStream, Target};
use crate::Error;

pub use dsipc::session::{MAX_RECV_BUFFER_LEN, RECV_BUFFER_LEN};

/// Writes a step's bytes, whole, on the connection the machine opened (a call's, a
/// session start's): the one write of both drive loops.
pub(crate) async fn transmit(
    conn: &mut Option<BoxStream>,
    bytes: &[u8],
    command: Command,
) -> Result<(), Error> {
    let c = conn.as_mut().ok_or(Error::UnexpectedReply { command })?;
    c.write_all(bytes).await?;
    c.flush().await?;
    Ok(())
}

/// Reads what the connection the machine opened has into `buf`: the byte count, 0 at its
/// end (an interrupted read is retried). The one read of both drive loops.
pub(crate) async fn receive(
    conn: &mut Option<BoxStream>,
    buf: &mut [u8],
    command: Command,
) -> Result<usize, Error> {
    let c = conn.as_mut().ok_or(Error::UnexpectedReply { command })?;
    loop {
        match c.read(buf).await {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::Io(e)),
        }
    }
}

/// Runs a session-layer [`Call`] to its end over connections from `target`: the call
/// decides what to send, what to fall back to and its deadline; this only connects,
/// writes and reads. The caller's tokio timer waits until the call's deadline (`timeout`
/// from now), so the call is driven without reading a clock of its own.
///
/// The call is built (and an ill-formed request refused) before the future exists, so the
/// future holds it once (boxed), not the ask beside it: a call's future stays small when a
/// thousand are in flight.
pub(crate) fn run_call<'a, F>(
    target: &'a Target,
    ask: Ask<'a>,
    timeout: std::time::Duration,
    mut on_event: F,
) -> impl std::future::Future<Output = Result<(), Error>> + 'a
where
    F: FnMut(Command, ClientEvent<'_>) -> Result<(), Error> + 'a,
{
    // Boxed: the call lives across every await, and a thousand calls in flight each keep
    // their future; on the heap it costs one small allocation instead of 300 bytes of
    // every future.
    let call = Call::new(ask, 0, dsipc_platform::millis_ceil(timeout)).map(Box::new);
    async move {
        let session = |e| Error::from_session(e, timeout);
        let mut call = call.map_err(session)?;
        let mut conn: Option<BoxStream> = None;
        loop {
            let command = call.command();
            // Time 0 throughout: the deadline is tokio's timer's to keep.
            match call.poll(0).map_err(session)? {
                Step::Connect => {
                    conn = Some(target.open().await?);
                    call.connected().map_err(session)?;
                }
                Step::Transmit(bytes) => {
                    transmit(&mut conn, bytes, command).await?;
                    call.transmitted().map_err(session)?;
                }
                Step::Receive => {
                    match receive(&mut conn, call.read_buf().map_err(session)?, command).await? {
                        0 => call.eof(),
                        n => call.filled(n),
                    }
                }
                Step::Close => conn = None,
                Step::Event(ev) => on_event(command, ev)?,
                Step::Done => return Ok(()),
                _ => return Err(Error::UnexpectedReply { command }),
            }
        }
    }
}
