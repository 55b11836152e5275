//! The byte mover under the session layer: runs the [`Call`]s and [`Tracing`] sessions of
//! `session.rs` on the reactor's connections. Each is driven (polled at the reactor's
//! clock until it needs to wait) when it is new, when its connection is readable, when
//! its deadline comes, or when its stop is over; it waits only for a read that would
//! block (the connection is registered for readability, edge-triggered: every drive reads
//! until `WouldBlock`) or for its deadline (the timers). This opens connections when the
//! layer says [`Step::Connect`], queues [`Step::Transmit`]'s bytes (written at once in one
//! write when the socket takes them), reads into the layer's buffer, closes on
//! [`Step::Close`] and at the end, and hands what the layer passes up to the handler.
//!
//! [`Call`]: dsipc::session::Call
//! [`Tracing`]: dsipc::session::Tracing

use std::io::{self, Read as _};
use std::path::Path;

use mio::net::UnixStream;

use dsipc::session::{Outcome, SessionError, Step, TraceStep};
use dsipc::{ClientEvent, Command};

use crate::conn::{would_block, Conn, Machine};
use crate::read::READ_BUDGET;
use crate::session::{CallSlot, TraceSlot};
use crate::timers::Owner;
use crate::{CallId, CloseReason, ConnId, Control, Error, Event, Handler, TraceId};

/// How a drive stopped.
enum Flow<T> {
    /// A read would block: wait for readability or the deadline.
    Wait,
    /// The read budget is spent: drive again at the next poll, after the others.
    Yield,
    /// The call or session is over.
    Over(Result<T, Error>),
}

/// What a read on a driven connection gave.
enum Got {
    Data(usize),
    Eof,
    Blocked,
    /// The connection closed under its owner: the news is queued (`Queued::Lost`).
    Gone,
    Failed(Error),
}

/// Opens a connection for `owner` (non-blocking; a Unix-socket connect completes at once
/// on Linux, elsewhere writes wait for writability).
fn open(control: &mut Control, path: &Path, owner: Owner) -> Result<ConnId, Error> {
    let stream = UnixStream::connect(path).map_err(|source| Error::Io {
        op: "connect",
        source,
    })?;
    let id = control.insert(Conn::new(stream, Machine::Driven(owner), None));
    control.sync(id);
    Ok(id)
}

/// Queues `bytes` and writes what the socket takes (all of it, in one write, as a rule).
fn send(control: &mut Control, conn: Option<ConnId>, bytes: &[u8]) {
    let id = match conn {
        Some(id) => id,
        None => return,
    };
    if let Ok(c) = control.get_mut(id) {
        if c.tx_empty() {
            c.tx.clear();
            c.tx_at = 0;
        }
        c.tx.extend_from_slice(bytes);
    }
    control.sync(id);
}

/// Reads once into `buf` (retrying only an interrupted read).
fn read(control: &mut Control, conn: Option<ConnId>, buf: &mut [u8]) -> Got {
    let reads = &mut control.stats.reads;
    let c = match conn.and_then(|id| control.slots.get_mut(id.index as usize).map(|s| (id, s))) {
        Some((id, s)) if s.generation == id.generation => match s.conn.as_mut() {
            Some(c) => c,
            None => return Got::Gone,
        },
        _ => return Got::Gone,
    };
    if c.read_closed {
        return Got::Eof;
    }
    loop {
        *reads += 1;
        match c.stream.read(buf) {
            Ok(0) => {
                c.read_closed = true;
                return Got::Eof;
            }
            Ok(n) => return Got::Data(n),
            // (or a connect still in progress, where connects may not complete at once)
            Err(e) if would_block(&e) => return Got::Blocked,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // A peer that closed with unread input: its end, for the layer to judge.
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {
                c.read_closed = true;
                return Got::Eof;
            }
            Err(source) => return Got::Failed(Error::Io { op: "read", source }),
        }
    }
}

/// Runs a call until it waits or ends, handing its events to `on_event`.
fn run_call(
    control: &mut Control,
    owner: Owner,
    slot: &mut CallSlot,
    mut on_event: impl FnMut(&mut Control, Command, ClientEvent<'_>),
) -> Flow<()> {
    let mut budget = READ_BUDGET;
    loop {
        let command = slot.call.command();
        let now = control.sessions.now();
        let step = match slot.call.poll(now) {
            Ok(step) => step,
            Err(e) => return Flow::Over(Err(e.into())),
        };
        match step {
            Step::Connect => {
                match open(control, &slot.path, owner) {
                    Ok(c) => slot.conn = Some(c),
                    Err(e) => return Flow::Over(Err(e)),
                }
                if let Err(e) = slot.call.connected() {
                    return Flow::Over(Err(e.into()));
                }
            }
            Step::Transmit(bytes) => {
                send(control, slot.conn, bytes);
                if let Err(e) = slot.call.transmitted() {
                    return Flow::Over(Err(e.into()));
                }
            }
            Step::Receive => {
                if budget == 0 {
                    return Flow::Yield;
                }
                let buf = match slot.call.read_buf() {
                    Ok(buf) => buf,
                    Err(e) => return Flow::Over(Err(e.into())),
                };
                match read(control, slot.conn, buf) {
                    Got::Data(n) => {
                        slot.call.filled(n);
                        budget = budget.saturating_sub(n);
                    }
                    Got::Eof => slot.call.eof(),
                    Got::Blocked | Got::Gone => return Flow::Wait,
                    Got::Failed(e) => return Flow::Over(Err(e)),
                }
            }
            Step::Close => {
                if let Some(c) = slot.conn.take() {
                    control.release(c);
                }
            }
            Step::Event(event) => on_event(control, command, event),
            Step::Done => return Flow::Over(Ok(())),
            _ => {
                let e = SessionError::Misuse("a step this adapter does not know");
                return Flow::Over(Err(e.into()));
            }
        }
    }
}

/// Runs a session until it waits or ends, handing what it passes up to the handler.
fn run_trace<H: Handler + ?Sized>(
    control: &mut Control,
    id: u64,
    slot: &mut TraceSlot,
    handler: &mut H,
    delivered: &mut usize,
) -> Flow<Outcome> {
    let mut budget = READ_BUDGET;
    loop {
        // A stop asked by a handler during this drive.
        if std::mem::take(&mut control.sessions.busy_stop) {
            slot.stop_wanted = true;
        }
        let now = control.sessions.now();
        if slot.stop_wanted
            && slot.tracing.session_id().is_some()
            && !slot.tracing.is_stop_requested()
        {
            match slot.tracing.request_stop(now) {
                Ok(call) => {
                    slot.stop = Some(CallSlot::new(call, slot.path.clone()));
                    control.sessions.pending.push(Owner::Stop(id));
                }
                Err(e) => return Flow::Over(Err(e.into())),
            }
        }
        let step = match slot.tracing.poll(now) {
            Ok(step) => step,
            Err(e) => return Flow::Over(Err(e.into())),
        };
        let event = match step {
            TraceStep::Connect => {
                match open(control, &slot.path, Owner::Trace(id)) {
                    Ok(c) => slot.conn = Some(c),
                    Err(e) => return Flow::Over(Err(e)),
                }
                if let Err(e) = slot.tracing.connected() {
                    return Flow::Over(Err(e.into()));
                }
                continue;
            }
            TraceStep::Transmit(bytes) => {
                send(control, slot.conn, bytes);
                if let Err(e) = slot.tracing.transmitted() {
                    return Flow::Over(Err(e.into()));
                }
                continue;
            }
            TraceStep::Receive => {
                if budget == 0 {
                    return Flow::Yield;
                }
                let buf = match slot.tracing.read_buf() {
                    Ok(buf) => buf,
                    Err(e) => return Flow::Over(Err(e.into())),
                };
                match read(control, slot.conn, buf) {
                    Got::Data(n) => {
                        slot.tracing.filled(n);
                        budget = budget.saturating_sub(n);
                    }
                    Got::Eof => slot.tracing.eof(),
                    Got::Blocked | Got::Gone => return Flow::Wait,
                    Got::Failed(e) => return Flow::Over(Err(e)),
                }
                continue;
            }
            TraceStep::Close => {
                if let Some(c) = slot.conn.take() {
                    control.release(c);
                }
                continue;
            }
            TraceStep::End(outcome) => return Flow::Over(Ok(outcome)),
            TraceStep::Started { session_id } => Event::TraceStarted {
                id: TraceId(id),
                session_id,
            },
            TraceStep::Data(data) => Event::TraceData {
                id: TraceId(id),
                data,
            },
            _ => {
                let e = SessionError::Misuse("a step this adapter does not know");
                return Flow::Over(Err(e.into()));
            }
        };
        handler.on_event(control, event);
        *delivered += 1;
    }
}

/// Drives `owner` until it waits or ends; returns the events handed out.
pub(crate) fn drive<H: Handler + ?Sized>(
    control: &mut Control,
    owner: Owner,
    handler: &mut H,
) -> usize {
    match owner {
        Owner::Call(id) => drive_call(control, id, handler),
        Owner::Trace(id) => drive_trace(control, id, handler),
        Owner::Stop(id) => drive_stop(control, id, handler),
    }
}

/// Drives every owner that was pending when called (those that become pending meanwhile
/// wait for the next poll, which then does not block).
pub(crate) fn drive_pending<H: Handler + ?Sized>(control: &mut Control, handler: &mut H) -> usize {
    let owners = std::mem::take(&mut control.sessions.pending);
    owners.into_iter().map(|o| drive(control, o, handler)).sum()
}

/// Drives every owner whose deadline came.
pub(crate) fn drive_due<H: Handler + ?Sized>(control: &mut Control, handler: &mut H) -> usize {
    let now = control.sessions.now();
    let mut delivered = 0;
    for (at, owner) in control.sessions.timers.due(now) {
        if control.sessions.disarm(owner, at) {
            delivered += drive(control, owner, handler);
        }
    }
    control.sessions.compact_timers();
    delivered
}

fn drive_call<H: Handler + ?Sized>(control: &mut Control, id: u64, handler: &mut H) -> usize {
    let mut slot = match control.sessions.calls.remove(&id) {
        Some(s) => s,
        None => return 0,
    };
    let mut delivered = 0;
    let flow = run_call(
        control,
        Owner::Call(id),
        &mut slot,
        |ctl: &mut Control, command: Command, event: ClientEvent<'_>| {
            let id = CallId(id);
            handler.on_event(ctl, Event::Call { id, command, event });
            delivered += 1;
        },
    );
    match flow {
        Flow::Over(result) => delivered + end_call(control, id, slot, result, handler),
        Flow::Wait | Flow::Yield => {
            if matches!(flow, Flow::Yield) {
                control.sessions.pending.push(Owner::Call(id));
            }
            if let Some(c) = slot.conn {
                control.sync(c);
            }
            let at = slot.call.poll_timeout();
            control
                .sessions
                .timers
                .arm(Owner::Call(id), at, &mut slot.armed);
            control.sessions.calls.insert(id, slot);
            delivered
        }
    }
}

fn end_call<H: Handler + ?Sized>(
    control: &mut Control,
    id: u64,
    mut slot: CallSlot,
    result: Result<(), Error>,
    handler: &mut H,
) -> usize {
    if let Some(c) = slot.conn.take() {
        control.release(c);
    }
    control.sessions.in_flight -= 1;
    let id = CallId(id);
    handler.on_event(control, Event::CallDone { id, result });
    1
}

fn drive_trace<H: Handler + ?Sized>(control: &mut Control, id: u64, handler: &mut H) -> usize {
    let mut slot = match control.sessions.traces.remove(&id) {
        Some(s) if s.ended.is_none() => s,
        // Over, waiting for its stop only.
        Some(s) => {
            control.sessions.traces.insert(id, s);
            return 0;
        }
        None => return 0,
    };
    control.sessions.busy = Some(id);
    let mut delivered = 0;
    let flow = run_trace(control, id, &mut slot, handler, &mut delivered);
    control.sessions.busy = None;
    if std::mem::take(&mut control.sessions.busy_stop) {
        // Asked during the last event: requested at the next drive.
        slot.stop_wanted = true;
        control.sessions.pending.push(Owner::Trace(id));
    }
    match flow {
        Flow::Over(result) => delivered + end_trace(control, id, slot, result, handler),
        Flow::Wait | Flow::Yield => {
            if matches!(flow, Flow::Yield) {
                control.sessions.pending.push(Owner::Trace(id));
            }
            if let Some(c) = slot.conn {
                control.sync(c);
            }
            let at = slot.tracing.poll_timeout();
            control
                .sessions
                .timers
                .arm(Owner::Trace(id), at, &mut slot.armed);
            control.sessions.traces.insert(id, slot);
            delivered
        }
    }
}

/// The session's stream is over (or it failed): reported now, or once its stop in
/// flight is over (the runtime answers the stop just after it closed the stream).
fn end_trace<H: Handler + ?Sized>(
    control: &mut Control,
    id: u64,
    mut slot: TraceSlot,
    mut result: Result<Outcome, Error>,
    handler: &mut H,
) -> usize {
    if let Some(c) = slot.conn.take() {
        control.release(c);
    }
    if let (Err(Error::Session(SessionError::Transport { .. })), Some(e)) =
        (&result, slot.stop_error.take())
    {
        // The stop's connection failed: its own error says more.
        result = Err(e);
    }
    if result.is_ok() && slot.stop.is_some() {
        slot.ended = Some(result);
        control.sessions.traces.insert(id, slot);
        return 0;
    }
    if let Some(c) = slot.stop.take().and_then(|s| s.conn) {
        control.release(c);
    }
    control.sessions.in_flight -= 1;
    let id = TraceId(id);
    handler.on_event(control, Event::TraceDone { id, result });
    1
}

fn drive_stop<H: Handler + ?Sized>(control: &mut Control, id: u64, handler: &mut H) -> usize {
    let mut slot = match control.sessions.traces.remove(&id) {
        Some(s) => s,
        None => return 0,
    };
    let mut stop = match slot.stop.take() {
        Some(s) => s,
        None => {
            control.sessions.traces.insert(id, slot);
            return 0;
        }
    };
    // StopTracing's reply (the session id) is the layer's to check; nothing to pass up.
    let flow = run_call(
        control,
        Owner::Stop(id),
        &mut stop,
        |_: &mut Control, _, _| {},
    );
    match flow {
        Flow::Over(result) => {
            if let Some(c) = stop.conn.take() {
                control.release(c);
            }
            stop_over(control, id, slot, result, handler)
        }
        Flow::Wait | Flow::Yield => {
            if matches!(flow, Flow::Yield) {
                control.sessions.pending.push(Owner::Stop(id));
            }
            if let Some(c) = stop.conn {
                control.sync(c);
            }
            let at = stop.call.poll_timeout();
            control
                .sessions
                .timers
                .arm(Owner::Stop(id), at, &mut stop.armed);
            slot.stop = Some(stop);
            control.sessions.traces.insert(id, slot);
            0
        }
    }
}

/// The stop is over: the session is told, and goes on (or ends, if its stream did).
fn stop_over<H: Handler + ?Sized>(
    control: &mut Control,
    id: u64,
    mut slot: TraceSlot,
    result: Result<(), Error>,
    handler: &mut H,
) -> usize {
    let now = control.sessions.now();
    match result {
        Ok(()) => slot.tracing.stop_answered(now),
        Err(Error::Session(e)) => slot.tracing.stop_failed(e),
        Err(e) => {
            slot.tracing.stop_failed(SessionError::Transport {
                command: Command::StopTracing,
                what: "the stop's connection failed",
            });
            slot.stop_error = Some(e);
        }
    }
    if let Some(ended) = slot.ended.take() {
        // The stream ended whole before the answer: that is the session's end.
        return end_trace(control, id, slot, ended, handler);
    }
    control.sessions.traces.insert(id, slot);
    // Its bounds changed (or it failed): poll it.
    control.sessions.pending.push(Owner::Trace(id));
    0
}

/// A driven connection closed under its owner (a write that failed, a deadline set on it
/// with [`Control::set_timeout`]): the owner ends with the reason.
pub(crate) fn lost<H: Handler + ?Sized>(
    control: &mut Control,
    owner: Owner,
    conn: ConnId,
    reason: CloseReason,
    handler: &mut H,
) -> usize {
    let error = match reason {
        CloseReason::Failed(e) => e,
        other => Error::Io {
            op: "connection",
            source: io::Error::new(io::ErrorKind::ConnectionAborted, other.to_string()),
        },
    };
    match owner {
        Owner::Call(id) => match control.sessions.calls.remove(&id) {
            Some(mut slot) if slot.conn == Some(conn) => {
                slot.conn = None;
                end_call(control, id, slot, Err(error), handler)
            }
            Some(slot) => {
                control.sessions.calls.insert(id, slot);
                0
            }
            None => 0,
        },
        Owner::Trace(id) => match control.sessions.traces.remove(&id) {
            Some(mut slot) if slot.conn == Some(conn) => {
                slot.conn = None;
                end_trace(control, id, slot, Err(error), handler)
            }
            Some(slot) => {
                control.sessions.traces.insert(id, slot);
                0
            }
            None => 0,
        },
        Owner::Stop(id) => match control.sessions.traces.remove(&id) {
            Some(mut slot) if slot.stop.as_ref().and_then(|s| s.conn) == Some(conn) => {
                slot.stop = None;
                stop_over(control, id, slot, Err(error), handler)
            }
            Some(slot) => {
                control.sessions.traces.insert(id, slot);
                0
            }
            None => 0,
        },
    }
}
