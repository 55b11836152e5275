//! Serving one connection: the Advertise on a reverse port, reading one request, and
//! the accept and reconnect loops.

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dsipc::conn::{Rejection, ServerConnection, ServerEvent};
use dsipc::payload::{Request, Response};
use dsipc::recv::{Poll, RecvBuffer};
use dsipc::wire::HeaderView;

use super::respond::answer;
use super::transport::{connect, is_timeout, Conn, Listener};
use super::{Received, Shared, TICK};

pub(super) fn accept_loop(shared: &Arc<Shared>, mut listener: Listener) {
    loop {
        let conn = listener.accept(TICK);
        if shared.stopping() {
            return;
        }
        match conn {
            Ok(Some(stream)) => serve(shared, stream, false),
            Ok(None) => {}
            // Out of descriptors, for example: try again a little later.
            Err(_) => thread::sleep(Duration::from_millis(10)),
        }
    }
}

pub(super) fn reverse_loop(shared: &Arc<Shared>, path: &Path) {
    let mut backoff = Duration::from_millis(10);
    while !shared.stopping() {
        match connect(path) {
            Ok(stream) => {
                backoff = Duration::from_millis(10);
                serve(shared, stream, true);
            }
            Err(_) => {
                sleep_unless_stopped(shared, backoff);
                backoff = (backoff * 5 / 4).min(Duration::from_millis(500));
            }
        }
    }
}

pub(super) fn sleep_unless_stopped(shared: &Shared, total: Duration) {
    let deadline = Instant::now() + total;
    loop {
        let now = Instant::now();
        if now >= deadline || shared.stopping() {
            return;
        }
        thread::sleep((deadline - now).min(TICK));
    }
}

/// Serves one connection: (advertise,) read one request, answer it.
pub(super) fn serve(shared: &Arc<Shared>, mut stream: Conn, reverse: bool) {
    let connection = shared.next_connection.fetch_add(1, Ordering::SeqCst);
    let mut machine = if reverse {
        ServerConnection::advertising(shared.advertise())
    } else {
        ServerConnection::new()
    };
    if reverse {
        let mut adv = [0u8; 64];
        let n = match machine.poll_transmit(&mut adv) {
            Ok(n) => n,
            Err(_) => return,
        };
        if stream.write_all(&adv[..n]).is_err() {
            return;
        }
        shared.update(|s| s.advertised += 1);
    }
    if stream.set_read_timeout(Some(TICK)).is_err() {
        return;
    }
    // Any request fits: its header's size field is 16 bits.
    let mut rx = RecvBuffer::with_limit(Vec::new(), usize::from(u16::MAX));
    let mut last_input = Instant::now();
    loop {
        // Reads stop at the request's end (below), so what is buffered is the request so far.
        let received = rx.pending().to_vec();
        let rejection = match rx.poll_server(&mut machine) {
            Ok(Poll::Event(ServerEvent::Request { request, reserved })) => {
                shared.update(|s| {
                    s.received.push(Received {
                        connection,
                        reverse,
                        bytes: received,
                        command: Some(request.command()),
                        reserved,
                        rejection: None,
                    })
                });
                if shared.reply_delay > Duration::ZERO {
                    sleep_unless_stopped(shared, shared.reply_delay);
                }
                answer(shared, stream, machine, &request, reverse);
                return;
            }
            Ok(Poll::Event(ServerEvent::Rejected(rejection))) => rejection,
            Ok(Poll::Event(_)) => continue,
            Ok(Poll::NeedInput) => {
                if read_request(shared, &mut stream, &mut rx, &mut last_input) {
                    continue;
                }
                // Stopping, idle too long, or a failed read: dropped unanswered.
                return;
            }
            Ok(Poll::End) | Err(_) => return,
        };
        reject(
            shared,
            &mut stream,
            &received,
            connection,
            reverse,
            rejection,
        );
        // After EOF the client reads the rejection from a half-closed socket.
        if !rx.is_eof() {
            stream.finish();
        }
        return;
    }
}

/// Reads into `rx` no more than the machine needs to complete the request, as the runtime
/// does: a descriptor passed after the request travels with the next byte, and a read that
/// took that byte would discard it. False when the connection is to be dropped: the stop
/// flag, the idle timeout, a failed read.
fn read_request(
    shared: &Shared,
    stream: &mut Conn,
    rx: &mut RecvBuffer<Vec<u8>>,
    last_input: &mut Instant,
) -> bool {
    let want = rx.needed().saturating_sub(rx.pending().len()).max(1);
    rx.reserve(rx.needed());
    let buf = match rx.read_buf() {
        Ok(buf) => buf,
        Err(_) => return false,
    };
    let want = want.min(buf.len());
    match stream.read(&mut buf[..want]) {
        Ok(0) => rx.eof(),
        Ok(n) => {
            rx.filled(n);
            *last_input = Instant::now();
        }
        Err(e) if is_timeout(&e) => {
            return !(shared.stopping() || last_input.elapsed() >= shared.idle_timeout)
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
        Err(_) => return false,
    }
    true
}

pub(super) fn reject(
    shared: &Shared,
    stream: &mut Conn,
    buf: &[u8],
    connection: u64,
    reverse: bool,
    rejection: Rejection,
) {
    let view = HeaderView::ref_from(buf);
    let command = view.map(|v| v.command());
    let reserved = view.map_or(0, |v| v.reserved.get());
    shared.update(|s| {
        s.received.push(Received {
            connection,
            reverse,
            bytes: buf.to_vec(),
            command,
            reserved,
            rejection: Some(rejection),
        })
    });
    let _ = stream.write_all(&rejection.reply());
}

pub(super) fn send(
    stream: &mut Conn,
    machine: &mut ServerConnection,
    response: &Response<'_>,
) -> bool {
    let mut out = vec![0u8; response.encoded_len()];
    match machine.send_response(response, &mut out) {
        Ok(n) => stream.write_all(&out[..n]).is_ok(),
        Err(_) => false,
    }
}
