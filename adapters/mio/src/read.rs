//! The read path: reading a connection into the shared (or its own) buffer, feeding its
//! machine, and handing every event to the handler.

use std::io::{self, Read};

use dsipc::conn::{ServerEvent, ServerStatus};
use dsipc::{ClientError, ClientEvent, Status};

use crate::conn::{Conn, Machine};
use crate::reactor::{MAX_READ_BUFFER_LEN, READ_BUFFER_LEN};
use crate::{CloseReason, Error};
use crate::{ConnId, Control, Event, Handler};

/// Bytes read from one connection per readiness event before the others get their turn
/// (the rest is read on the next [`Reactor::poll`], which then does not block).
pub(crate) const READ_BUDGET: usize = 1024 * 1024;

/// What [`read_step`] leaves to do.
pub(crate) enum Next {
    /// The connection is closed (or its EOF handled): nothing to keep.
    Stop,
    /// `WouldBlock` or budget spent: keep `buf[..end]` for the next readiness.
    Keep,
    /// The next item needs this many bytes, more than the buffer holds.
    Grow(usize),
}

pub(crate) struct Step {
    pub(crate) delivered: usize,
    pub(crate) next: Next,
}

/// A buffer of the connection's own when `needed` bytes do not fit the shared one (`None`
/// when they do); at most [`MAX_READ_BUFFER_LEN`].
pub(crate) fn own_buffer(needed: usize) -> Option<Vec<u8>> {
    if needed <= READ_BUFFER_LEN {
        return None;
    }
    Some(vec![0u8; needed.min(MAX_READ_BUFFER_LEN)])
}

/// Reads into `buf[*end..]` and dispatches until `WouldBlock`, EOF, the budget, or an item
/// that needs more than `buf` holds. Unconsumed input stays at the front, in `buf[..*end]`.
pub(crate) fn read_step<H: Handler + ?Sized>(
    control: &mut Control,
    id: ConnId,
    buf: &mut [u8],
    end: &mut usize,
    budget: &mut usize,
    handler: &mut H,
) -> Step {
    let mut delivered = 0;
    let mut start = 0;
    let stop = |delivered| Step {
        delivered,
        next: Next::Stop,
    };
    loop {
        let needed = match control.get(id) {
            Ok(c) => c.rx_needed,
            Err(_) => return stop(delivered),
        };
        if needed > buf.len() || *end == buf.len() {
            // An empty read buffer would read as EOF: a larger one is needed first.
            return Step {
                delivered,
                next: Next::Grow(needed.max(*end + 1)),
            };
        }
        let c = match control.get_mut(id) {
            Ok(c) => c,
            Err(_) => return stop(delivered),
        };
        let mut eof = false;
        let mut would_block = false;
        let got = c.stream.read(&mut buf[*end..]);
        control.stats.reads += 1;
        match got {
            Ok(0) => eof = true,
            Ok(n) => {
                *end += n;
                *budget = budget.saturating_sub(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => would_block = true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let reason = match e.kind() {
                    io::ErrorKind::ConnectionReset => CloseReason::PeerClosed,
                    _ => CloseReason::Failed(Error::Io {
                        op: "read",
                        source: e,
                    }),
                };
                control.finish(id, reason);
                return stop(delivered);
            }
        }
        delivered += dispatch(control, id, &buf[..*end], &mut start, handler);
        if !control.is_open(id) {
            return stop(delivered);
        }
        // Keep what was not consumed at the front.
        buf.copy_within(start..*end, 0);
        *end -= start;
        start = 0;
        if eof {
            return stop(delivered + on_eof(control, id, handler));
        }
        if would_block {
            break;
        }
        if *budget == 0 {
            control.again.push(id);
            break;
        }
    }
    Step {
        delivered,
        next: Next::Keep,
    }
}

/// Feeds `input[*start..]` to the connection's machine and hands out every event; returns
/// how many. The connection may be closed afterwards (protocol error, or the handler).
pub(crate) fn dispatch<H: Handler + ?Sized>(
    control: &mut Control,
    id: ConnId,
    input: &[u8],
    start: &mut usize,
    handler: &mut H,
) -> usize {
    let mut delivered = 0;
    loop {
        let c = match control.get_mut(id) {
            Ok(c) => c,
            // Closed by the handler: drop the rest.
            Err(_) => {
                *start = input.len();
                return delivered;
            }
        };
        let rest = &input[*start..];
        match &mut c.machine {
            Machine::Client(m) => match m.handle_input(rest) {
                Ok(h) => {
                    *start += h.consumed;
                    match h.status {
                        Status::Event(ClientEvent::Advertise(advertise)) => {
                            c.rx_needed = 0;
                            c.advertise = Some(advertise);
                            match c.listener {
                                Some(listener) => handler.on_event(
                                    control,
                                    Event::Advertise {
                                        listener,
                                        conn: id,
                                        advertise,
                                    },
                                ),
                                None => handler.on_event(
                                    control,
                                    Event::Client {
                                        conn: id,
                                        event: ClientEvent::Advertise(advertise),
                                    },
                                ),
                            }
                            delivered += 1;
                        }
                        Status::Event(event) => {
                            c.rx_needed = 0;
                            handler.on_event(control, Event::Client { conn: id, event });
                            delivered += 1;
                        }
                        Status::Partial { needed } => {
                            if needed > MAX_READ_BUFFER_LEN {
                                control.finish(
                                    id,
                                    CloseReason::Failed(Error::Client(
                                        ClientError::BufferTooSmall { needed },
                                    )),
                                );
                                return delivered;
                            }
                            c.rx_needed = needed;
                            return delivered;
                        }
                        Status::Done => return delivered,
                    }
                }
                Err(e) => {
                    // A reverse connection whose runtime sends before being asked, or a
                    // reply that breaks the protocol.
                    control.finish(id, CloseReason::Failed(Error::Client(e)));
                    return delivered;
                }
            },
            Machine::Server(m) => {
                let h = m.handle_input(rest);
                *start += h.consumed;
                match h.status {
                    ServerStatus::Event(ServerEvent::Request { request, reserved }) => {
                        handler.on_event(
                            control,
                            Event::Request {
                                conn: id,
                                request,
                                reserved,
                            },
                        );
                        delivered += 1;
                    }
                    ServerStatus::Event(ServerEvent::Rejected(rejection)) => {
                        queue_rejection(c);
                        handler.on_event(
                            control,
                            Event::Rejected {
                                conn: id,
                                rejection,
                            },
                        );
                        delivered += 1;
                    }
                    // Bytes after the request: the runtime does not read them either.
                    ServerStatus::Event(_) => {}
                    ServerStatus::Partial { .. } => return delivered,
                    ServerStatus::Done => {
                        *start = input.len();
                        return delivered;
                    }
                }
            }
        }
    }
}

pub(crate) fn queue_rejection(c: &mut Conn) {
    if let Machine::Server(m) = &mut c.machine {
        let mut out = [0u8; 64];
        if let Ok(n) = m.poll_transmit(&mut out) {
            c.tx.extend_from_slice(&out[..n]);
        }
    }
}

/// The peer closed its side.
pub(crate) fn on_eof<H: Handler + ?Sized>(
    control: &mut Control,
    id: ConnId,
    handler: &mut H,
) -> usize {
    let c = match control.get_mut(id) {
        Ok(c) => c,
        Err(_) => return 0,
    };
    c.read_closed = true;
    c.pending_rx.clear();
    c.own_rx = Vec::new();
    let mut delivered = 0;
    let reason = match &mut c.machine {
        Machine::Client(m) => {
            let idle_reverse = c.advertise.is_some() && m.command().is_none();
            match m.handle_eof() {
                Ok(Some(event)) => {
                    handler.on_event(control, Event::Client { conn: id, event });
                    delivered += 1;
                    CloseReason::Done
                }
                // A runtime closing its idle reverse connection (it reconnects).
                Ok(None) if idle_reverse => CloseReason::PeerClosed,
                Ok(None) => CloseReason::Done,
                Err(e) => CloseReason::Failed(Error::Client(e)),
            }
        }
        Machine::Server(m) => {
            let finished = m.should_close();
            match m.handle_eof() {
                Some(ServerEvent::Rejected(rejection)) => {
                    // EOF inside the request: the runtime answers BAD_ENCODING, which a
                    // half-closed client can still read; `sync` closes once it is written.
                    queue_rejection(c);
                    handler.on_event(
                        control,
                        Event::Rejected {
                            conn: id,
                            rejection,
                        },
                    );
                    return delivered + 1;
                }
                Some(_) => CloseReason::PeerClosed,
                None if finished => {
                    // Reply already produced: let it drain (a half-closed client can still
                    // read it); `sync` closes once it is written.
                    return delivered;
                }
                None => CloseReason::PeerClosed,
            }
        }
    };
    control.finish(id, reason);
    delivered
}
