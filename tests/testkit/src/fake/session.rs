//! EventPipe sessions: the stream thread, and StopTracing ending it.

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::thread::{self};
use std::time::Duration;

use dsipc::conn::ServerConnection;
use dsipc::payload::{Reply, Response};
use dsipc::Command;

use super::serve::send;
use super::transport::{is_timeout, Conn};
use super::{Session, Shared, StreamEnd, StreamRecord};
use crate::answer::StreamSpec;
use crate::pattern::fill_pattern;

pub(super) const RUNNING: u8 = 0;
pub(super) const STOPPED: u8 = 1;
pub(super) const SHUTDOWN: u8 = 2;

pub(super) fn start_session(
    shared: &Arc<Shared>,
    mut stream: Conn,
    mut machine: ServerConnection,
    command: Command,
    spec: StreamSpec,
) {
    // Pointer-like ids, as the runtime's are.
    let session_id = 0x7f3a_b000_1000 + 0x40 * shared.next_session.fetch_add(1, Ordering::SeqCst);
    let stop = Arc::new(AtomicU8::new(RUNNING));
    // Registered before the reply goes out, so that a fast StopTracing finds it.
    let mut sessions = shared.sessions_lock();
    if !send(
        &mut stream,
        &mut machine,
        &Response::Ok(Reply::SessionId(session_id)),
    ) {
        return;
    }
    let closer = stream.closer();
    let s = shared.clone();
    let flag = stop.clone();
    let thread = thread::Builder::new()
        .name("fake-runtime-stream".into())
        .spawn(move || stream_session(&s, stream, machine, command, session_id, spec, &flag));
    if let Ok(t) = thread {
        sessions.insert(
            session_id,
            Session {
                stop,
                thread: Some(t),
                closer,
            },
        );
    }
}

pub(super) fn stream_session(
    shared: &Shared,
    mut stream: Conn,
    mut machine: ServerConnection,
    command: Command,
    session_id: u64,
    spec: StreamSpec,
    stop: &AtomicU8,
) {
    let _ = stream.set_write_timeout(Some(shared.idle_timeout));
    let mut buf = vec![0u8; spec.chunk.max(1)];
    let mut sent = 0u64;
    let end = loop {
        match stop.load(Ordering::SeqCst) {
            RUNNING => {}
            STOPPED => break StreamEnd::Stopped,
            _ => break StreamEnd::Shutdown,
        }
        let len = match (spec.len, spec.content) {
            (Some(len), Some(c)) => Some(len.min(c.len() as u64)),
            (None, Some(c)) => Some(c.len() as u64),
            (len, None) => len,
        };
        let n = match len {
            Some(len) => (len - sent).min(buf.len() as u64) as usize,
            None => buf.len(),
        };
        if n == 0 {
            break StreamEnd::Completed;
        }
        match spec.content {
            Some(c) => buf[..n].copy_from_slice(&c[sent as usize..sent as usize + n]),
            None => fill_pattern(sent, &mut buf[..n]),
        }
        if machine.continuation_sent(n).is_err() {
            break StreamEnd::Completed;
        }
        if let Err(e) = stream.write_all(&buf[..n]) {
            break if stop.load(Ordering::SeqCst) == SHUTDOWN {
                StreamEnd::Shutdown
            } else if is_timeout(&e) {
                StreamEnd::TimedOut
            } else {
                StreamEnd::PeerClosed
            };
        }
        sent += n as u64;
        if spec.pause > Duration::ZERO {
            thread::sleep(spec.pause);
        }
    };
    if spec.end_marker && matches!(end, StreamEnd::Completed | StreamEnd::Stopped) {
        // The nettrace end: the last object's end tag, then the end-of-stream byte.
        if machine.continuation_sent(2).is_ok() && stream.write_all(&[0x06, 0x01]).is_ok() {
            sent += 2;
        }
    }
    let _ = machine.finish_stream();
    if matches!(end, StreamEnd::Completed | StreamEnd::Stopped) && !shared.stopping() {
        // The client reads the stream to its end.
        stream.finish();
    } else {
        stream.close();
    }
    shared.update(|s| {
        s.streams.push(StreamRecord {
            session_id,
            command,
            bytes: sent,
            end,
        })
    });
}

/// Ends a session's stream and waits until its connection is closed (the runtime replies
/// to StopTracing only after the session's data has been flushed).
pub(super) fn stop_session(shared: &Shared, session_id: u64) {
    let session = shared.sessions_lock().remove(&session_id);
    if let Some(mut session) = session {
        let _ = session
            .stop
            .compare_exchange(RUNNING, STOPPED, Ordering::SeqCst, Ordering::SeqCst);
        if let Some(t) = session.thread.take() {
            let _ = t.join();
        }
    }
}
