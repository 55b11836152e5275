//! The one drive loop of a one-shot command: [`run_call`] moves the bytes of a
//! session-layer [`Call`] over any [`Connection`] (connect, one `write_all`, reads with the
//! call's deadline as timeout). What to send, what to fall back to and when time is up are
//! the call's.

use std::io::{self, ErrorKind};
use std::time::{Duration, Instant};

use dsipc::conn::ClientEvent;
use dsipc::session::{Ask, Call, Step};
use dsipc::wire::Command;

use crate::{Connection, Error};

pub use dsipc::session::{MAX_RECV_BUFFER_LEN, RECV_BUFFER_LEN};

thread_local! {
    /// The last receive buffer this thread released: commands in a row reuse it instead
    /// of allocating (and faulting in) a fresh one each time. At most [`MAX_RECV_BUFFER_LEN`]
    /// per thread.
    static SPARE: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// This thread's spare buffer (empty when there is none).
fn take_buffer() -> Vec<u8> {
    SPARE
        .try_with(|s| std::mem::take(&mut *s.borrow_mut()))
        .unwrap_or_default()
}

/// Gives a buffer back for the next command on this thread.
fn release_buffer(buf: Vec<u8>) {
    let _ = SPARE.try_with(|s| {
        if let Ok(mut spare) = s.try_borrow_mut() {
            if buf.len() > spare.len() {
                *spare = buf;
            }
        }
    });
}

pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

pub(crate) use dsipc_platform::millis_ceil;

/// Writes a step's bytes whole on the connection the machine opened (a call's, a session
/// start's); a write past the connection's timeout is [`Error::Timeout`] for `command`
/// (`timeout`: the budget as the caller set it).
pub(crate) fn transmit<C: Connection>(
    conn: Option<&mut C>,
    bytes: &[u8],
    command: Command,
    timeout: Duration,
) -> Result<(), Error> {
    let c = conn.ok_or(Error::UnexpectedReply { command })?;
    match c.write_all(bytes) {
        Ok(()) => Ok(()),
        Err(e) if is_timeout(&e) => Err(Error::Timeout { command, timeout }),
        Err(e) => Err(Error::Io(e)),
    }
}

/// Reads into `buf`, waiting up to `wait`: the byte count (0 at the end), `None` when the
/// wait passed or a signal interrupted it (the machine's next poll says whether its
/// deadline passed). `set` is the read timeout set on `conn`, kept when it is at most 1/8
/// longer than `wait` (one system call less per read). The one read of the drive loops.
pub(crate) fn receive<C: Connection>(
    conn: &mut C,
    set: &mut Duration,
    buf: &mut [u8],
    wait: Duration,
) -> Result<Option<usize>, Error> {
    if *set < wait || *set > wait.saturating_add(wait / 8) {
        conn.set_read_timeout(Some(wait))?;
        *set = wait;
    }
    match conn.read(buf) {
        Ok(n) => Ok(Some(n)),
        Err(e) if e.kind() == ErrorKind::Interrupted || is_timeout(&e) => Ok(None),
        Err(e) => Err(Error::Io(e)),
    }
}

/// Runs a session-layer [`Call`] to its end over connections opened with `connect`:
/// the call decides what to send, what to fall back to and when time is up; this only
/// connects, writes, reads with a timeout, and hands the events it passes up to
/// `on_event` (with the command they answer).
pub(crate) fn run_call<C, K, F>(
    ask: Ask<'_>,
    mut connect: K,
    timeout: Duration,
    mut on_event: F,
) -> Result<(), Error>
where
    C: Connection,
    K: FnMut(Duration) -> Result<C, Error>,
    F: FnMut(Command, ClientEvent<'_>) -> Result<(), Error>,
{
    let epoch = Instant::now();
    let now = || millis_ceil(epoch.elapsed());
    let mut call = Call::with_buffer(ask, 0, millis_ceil(timeout), take_buffer())
        .map_err(|e| Error::from_session(e, timeout))?;
    let result = (|| {
        let mut conn: Option<(C, Duration)> = None;
        loop {
            let command = call.command();
            let deadline = call.poll_timeout().unwrap_or(0);
            let left = || {
                let ms = deadline.saturating_sub(now());
                Duration::from_millis(ms.max(1))
            };
            let step = call
                .poll(now())
                .map_err(|e| Error::from_session(e, timeout))?;
            match step {
                Step::Connect => {
                    let left = left();
                    conn = Some((connect(left)?, left));
                    call.connected()
                        .map_err(|e| Error::from_session(e, timeout))?;
                }
                Step::Transmit(bytes) => {
                    transmit(conn.as_mut().map(|(c, _)| c), bytes, command, timeout)?;
                    call.transmitted()
                        .map_err(|e| Error::from_session(e, timeout))?;
                }
                Step::Receive => {
                    let left = left();
                    let (c, set) = conn.as_mut().ok_or(Error::UnexpectedReply { command })?;
                    let buf = call
                        .read_buf()
                        .map_err(|e| Error::from_session(e, timeout))?;
                    match receive(c, set, buf, left)? {
                        Some(0) => call.eof(),
                        Some(n) => call.filled(n),
                        None => {}
                    }
                }
                Step::Close => conn = None,
                Step::Event(ev) => on_event(command, ev)?,
                Step::Done => return Ok(()),
                _ => return Err(Error::UnexpectedReply { command }),
            }
        }
    })();
    release_buffer(call.into_buffer());
    result
}
