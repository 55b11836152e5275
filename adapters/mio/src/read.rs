//! The read path: reading a connection into its receive buffer, driving its machine
//! through it, and handing every event (borrowing the buffer: no copy) to the handler.

use std::io::{self, Read};

use dsipc::conn::ServerEvent;
use dsipc::recv::{BufferTooSmall, Poll, RecvBuffer, RecvError};
use dsipc::ClientEvent;

use crate::conn::Machine;
use crate::reactor::{MAX_READ_BUFFER_LEN, READ_BUFFER_LEN};
use crate::{CloseReason, Error};
use crate::{ConnId, Control, Event, Handler};

/// Bytes read from one connection per readiness event before the others get their turn
/// (the rest is read on the next [`Reactor::poll`](crate::Reactor::poll), which then does not block).
pub(crate) const READ_BUDGET: usize = 1024 * 1024;

/// A connection's receive buffer before its first read: no memory until bytes arrive; it
/// grows with them up to [`MAX_READ_BUFFER_LEN`].
pub(crate) fn empty_rx() -> RecvBuffer<Vec<u8>> {
    RecvBuffer::with_limit(Vec::new(), MAX_READ_BUFFER_LEN)
}

fn too_small(control: &mut Control, id: ConnId, e: BufferTooSmall) {
    control.finish(id, CloseReason::Failed(Error::BufferTooSmall(e)));
}

/// Feeds what `rx` holds to the connection's machine and reads until `WouldBlock`, EOF,
/// or the budget. Returns how many events were handed out.
pub(crate) fn read_conn<H: Handler + ?Sized>(
    control: &mut Control,
    id: ConnId,
    rx: &mut RecvBuffer<Vec<u8>>,
    handler: &mut H,
) -> usize {
    let mut delivered = 0;
    let mut budget = READ_BUDGET;
    loop {
        if !feed(control, id, rx, handler, &mut delivered) {
            return delivered;
        }
        if budget == 0 {
            control.again.push(id);
            return delivered;
        }
        let c = match control.get_mut(id) {
            Ok(c) => c,
            Err(_) => return delivered,
        };
        let buf = match rx.read_buf() {
            Ok(buf) => buf,
            Err(e) => {
                too_small(control, id, e);
                return delivered;
            }
        };
        let room = buf.len();
        let got = c.stream.read(buf);
        control.stats.reads += 1;
        match got {
            Ok(0) => return delivered + on_eof(control, id, rx, handler),
            Ok(n) => {
                rx.filled(n);
                budget = budget.saturating_sub(n);
                // A read that filled the buffer (a stream): larger reads from now on.
                if n == room {
                    rx.reserve(rx.capacity().saturating_mul(2).min(READ_BUFFER_LEN));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return delivered,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                let reason = match e.kind() {
                    io::ErrorKind::ConnectionReset => CloseReason::PeerClosed,
                    _ => CloseReason::Failed(Error::Io {
                        op: "read",
                        source: e,
                    }),
                };
                control.finish(id, reason);
                return delivered;
            }
        }
    }
}

/// Polls the connection's machine through `rx` and hands out every event until it needs
/// more input. False when the connection is closed (protocol error, or the handler).
fn feed<H: Handler + ?Sized>(
    control: &mut Control,
    id: ConnId,
    rx: &mut RecvBuffer<Vec<u8>>,
    handler: &mut H,
    delivered: &mut usize,
) -> bool {
    loop {
        let c = match control.get_mut(id) {
            Ok(c) => c,
            // Closed by the handler: drop the rest.
            Err(_) => return false,
        };
        match &mut c.machine {
            Machine::Client(m) => match rx.poll_client(m) {
                Ok(Poll::Event(ClientEvent::Advertise(advertise))) => {
                    c.advertise = Some(advertise);
                    let event = match c.listener {
                        Some(listener) => Event::Advertise {
                            listener,
                            conn: id,
                            advertise,
                        },
                        None => Event::Client {
                            conn: id,
                            event: ClientEvent::Advertise(advertise),
                        },
                    };
                    handler.on_event(control, event);
                    *delivered += 1;
                }
                Ok(Poll::Event(event)) => {
                    handler.on_event(control, Event::Client { conn: id, event });
                    *delivered += 1;
                }
                // `End`: the exchange is complete; later bytes are the machine's to judge.
                Ok(Poll::NeedInput) | Ok(Poll::End) => return true,
                // A reverse connection whose runtime sends before being asked, or a reply
                // that breaks the protocol.
                Err(RecvError::Machine(e)) => {
                    control.finish(id, CloseReason::Failed(Error::Client(e)));
                    return false;
                }
                Err(RecvError::BufferTooSmall(e)) => {
                    too_small(control, id, e);
                    return false;
                }
                Err(e) => {
                    debug_assert!(false, "unknown receive error {:?}", e);
                    return false;
                }
            },
            // Read by `drive.rs`, never here.
            Machine::Driven(_) => return false,
            Machine::Server(m) => match rx.poll_server(m) {
                Ok(Poll::Event(ServerEvent::Request { request, reserved })) => {
                    handler.on_event(
                        control,
                        Event::Request {
                            conn: id,
                            request,
                            reserved,
                        },
                    );
                    *delivered += 1;
                }
                Ok(Poll::Event(ServerEvent::Rejected(rejection))) => {
                    // Sent before the close (EOF inside the request too: a half-closed
                    // client can still read it); `sync` closes once it is written.
                    c.tx.extend_from_slice(&rejection.reply());
                    handler.on_event(
                        control,
                        Event::Rejected {
                            conn: id,
                            rejection,
                        },
                    );
                    *delivered += 1;
                }
                Ok(Poll::Event(_)) => {}
                Ok(Poll::NeedInput) => return true,
                // Bytes after the request: the runtime does not read them either.
                Ok(Poll::End) => {
                    rx.discard();
                    return true;
                }
                Err(e) => {
                    too_small(control, id, e);
                    return false;
                }
            },
        }
    }
}

/// The peer closed its side (a read returned 0): the EOF goes through `rx` like every other
/// input (its machine's `handle_eof` answers the last `Partial`), then the connection
/// closes, or drains what is queued first.
fn on_eof<H: Handler + ?Sized>(
    control: &mut Control,
    id: ConnId,
    rx: &mut RecvBuffer<Vec<u8>>,
    handler: &mut H,
) -> usize {
    let idle_reverse = match control.get_mut(id) {
        Ok(c) => {
            c.read_closed = true;
            match &c.machine {
                Machine::Client(m) => c.advertise.is_some() && m.command().is_none(),
                Machine::Server(_) | Machine::Driven(_) => false,
            }
        }
        Err(_) => return 0,
    };
    rx.eof();
    let mut delivered = 0;
    if !feed(control, id, rx, handler, &mut delivered) {
        return delivered;
    }
    let c = match control.get_mut(id) {
        Ok(c) => c,
        Err(_) => return delivered,
    };
    let reason = match &c.machine {
        // A runtime closing its idle reverse connection (it reconnects).
        Machine::Client(_) if idle_reverse => CloseReason::PeerClosed,
        Machine::Client(_) | Machine::Driven(_) => CloseReason::Done,
        // A reply or a rejection's error reply is out or queued: let it drain (a
        // half-closed client can still read it); `sync` closes once it is written.
        Machine::Server(m) if m.should_close() => return delivered,
        // Inside a request or a stream: the session ends, as the runtime ends it.
        Machine::Server(_) => CloseReason::PeerClosed,
    };
    control.finish(id, reason);
    delivered
}
