//! Answering a request the way the configured [`Answer`] says.

use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dsipc::conn::{
    encode_environment_block, environment_answer_len, environment_block_len, ServerConnection,
};
use dsipc::payload::{ErrorReply, ProcessEnvironmentReply, Reply, Request, Response};
use dsipc::wire::{Hresult, Text};
use dsipc::{AnyRequest, Command};

use super::serve::send;
use super::session::{start_session, stop_session};
use super::transport::{is_timeout, Conn};
use super::{Shared, TICK};
use crate::answer::{Answer, Then};

/// Answers `request` as configured, then ends the connection like a runtime (the client
/// reads the answer first), unless the answer hands it to a stream thread or drops it.
pub(super) fn answer(
    shared: &Arc<Shared>,
    mut stream: Conn,
    machine: ServerConnection,
    request: &AnyRequest<'_>,
    reverse: bool,
) {
    let command = request.command();
    let mut configured = shared
        .lock()
        .answers
        .get(&command)
        .cloned()
        .unwrap_or_else(|| shared.default_answer.clone());
    if let Answer::Vanish { bytes } = configured {
        stream.vanish_after(bytes);
        configured = Answer::Default;
    }
    let finish = matches!(
        configured,
        Answer::Default
            | Answer::Status(_)
            | Answer::Error(_)
            | Answer::ErrorWithMessage(..)
            | Answer::IgnoreStop
            | Answer::Stream(_)
            | Answer::Dump(_)
    );
    if let Some(stream) = answer_with(shared, stream, machine, request, reverse, configured) {
        if finish && !shared.stopping() {
            stream.finish();
        }
    }
}

/// Answers `request` with `configured`; returns the connection unless a stream thread
/// took it.
fn answer_with(
    shared: &Arc<Shared>,
    mut stream: Conn,
    mut machine: ServerConnection,
    request: &AnyRequest<'_>,
    reverse: bool,
    configured: Answer,
) -> Option<Conn> {
    let command = request.command();
    let ok = Response::Ok(Reply::Ok(Hresult::S_OK));
    // user_events: the descriptor first, as the runtime reads it before it answers.
    let configured = crate::user_events::descriptor_first(
        &stream,
        request,
        configured,
        shared.idle_timeout,
        || shared.stopping(),
    );
    match configured {
        Answer::IgnoreStop if command == Command::StopTracing => {
            let id = match request {
                AnyRequest::StopTracing(stop) => stop.session_id,
                _ => 0,
            };
            send(
                &mut stream,
                &mut machine,
                &Response::Ok(Reply::SessionId(id)),
            );
        }
        Answer::EnvironmentAnnouncing(announced) if command == Command::ProcessEnvironment => {
            flood_environment(shared, &mut stream, &mut machine, announced);
        }
        Answer::Dump(plant) if dump_name(request).is_some() => {
            let name = dump_name(request).unwrap_or_default();
            let reply = match plant.plant(std::path::Path::new(&name)) {
                Ok(()) => ok,
                Err(_) => Response::Error(ErrorReply::new(Hresult::E_FAIL)),
            };
            send(&mut stream, &mut machine, &reply);
        }
        Answer::Close => {}
        Answer::Hang => hang(shared, &mut stream),
        Answer::Raw(bytes) => {
            let _ = stream.write_all(&bytes);
        }
        Answer::RawThen(bytes, then) => {
            if stream.write_all(&bytes).is_ok() {
                raw_tail(shared, &mut stream, then);
            }
        }
        Answer::Error(hresult) => {
            send(
                &mut stream,
                &mut machine,
                &Response::Error(ErrorReply::new(hresult)),
            );
        }
        Answer::ErrorWithMessage(hresult, message) => {
            let reply = ErrorReply {
                hresult,
                message: Some(Text::Str(&message)),
            };
            send(&mut stream, &mut machine, &Response::Error(reply));
        }
        Answer::Status(hresult) => {
            send(&mut stream, &mut machine, &Response::Ok(Reply::Ok(hresult)));
        }
        Answer::Stream(spec) if command.is_collect_tracing() => {
            start_session(shared, stream, machine, command, spec);
            return None;
        }
        Answer::Stream(_)
        | Answer::Default
        | Answer::IgnoreStop
        | Answer::EnvironmentAnnouncing(_)
        | Answer::Dump(_)
        | Answer::Vanish { .. } => match request {
            AnyRequest::ProcessInfo(_)
            | AnyRequest::ProcessInfo2(_)
            | AnyRequest::ProcessInfo3(_) => {
                let info = shared.identity.process_info();
                let mut out = vec![0u8; Response::Ok(Reply::ProcessInfo3(info)).encoded_len()];
                if let Ok(n) = machine.send_process_info(&info, &mut out) {
                    let _ = stream.write_all(&out[..n]);
                }
            }
            AnyRequest::ProcessEnvironment(_) => {
                let vars = shared.lock().environment.clone();
                let texts = vars.iter().map(|v| Text::Str(v));
                let mut out = vec![0u8; environment_answer_len(texts.clone())];
                if let Ok(n) = machine.send_environment(texts, &mut out) {
                    let _ = stream.write_all(&out[..n]);
                }
            }
            AnyRequest::SetEnvironmentVariable(set) => {
                let name: String = set.name.chars_lossy().collect();
                let value: Option<String> = if set.value.is_null() {
                    None
                } else {
                    Some(set.value.chars_lossy().collect())
                };
                shared.update(|s| {
                    let prefix = format!("{}=", name);
                    s.environment.retain(|v| !v.starts_with(&prefix));
                    if let Some(v) = value {
                        s.environment.push(format!("{}{}", prefix, v));
                    }
                });
                send(&mut stream, &mut machine, &ok);
            }
            AnyRequest::ResumeRuntime(_) => {
                // As on .NET 8: with a suspending reverse port, only a Resume that arrives
                // there resumes the runtime.
                if reverse || !shared.has_reverse {
                    shared.update(|s| s.resumed = true);
                }
                send(&mut stream, &mut machine, &ok);
            }
            AnyRequest::StopTracing(stop) => {
                stop_session(shared, stop.session_id);
                send(
                    &mut stream,
                    &mut machine,
                    &Response::Ok(Reply::SessionId(stop.session_id)),
                );
            }
            _ if command.is_collect_tracing() => {
                start_session(shared, stream, machine, command, shared.stream);
                return None;
            }
            _ => {
                send(&mut stream, &mut machine, &ok);
            }
        },
    }
    Some(stream)
}

/// The path a GenerateCoreDump request (any version) names; `None` for other commands.
fn dump_name(request: &AnyRequest<'_>) -> Option<String> {
    match request {
        AnyRequest::GenerateCoreDump(r) => Some(r.dump_name.chars_lossy().collect()),
        AnyRequest::GenerateCoreDump2(r) => Some(r.dump_name.chars_lossy().collect()),
        AnyRequest::GenerateCoreDump3(r) => Some(r.dump_name.chars_lossy().collect()),
        _ => None,
    }
}

/// Announces `announced` bytes of environment and sends the configured entries over and
/// over until that many went out, the client left, or shutdown. The count announces every
/// whole repetition that fits: with `announced` = 4 + k × (the entries' size) the block is
/// well-formed (k repetitions).
pub(super) fn flood_environment(
    shared: &Shared,
    stream: &mut Conn,
    machine: &mut ServerConnection,
    announced: u32,
) {
    let reply = Response::Ok(Reply::ProcessEnvironment(ProcessEnvironmentReply {
        incoming_bytes: announced,
        future: 0,
    }));
    if !send(stream, machine, &reply) {
        return;
    }
    let vars = shared.lock().environment.clone();
    let texts = vars.iter().map(|v| Text::Str(v));
    let mut block = vec![0u8; environment_block_len(texts.clone())];
    let n = match encode_environment_block(texts, &mut block) {
        Ok(n) if n > 4 => n,
        _ => return,
    };
    let entries = &block[4..n];
    let reps = u64::from(announced).saturating_sub(4) / entries.len() as u64;
    let count = (reps * vars.len() as u64).min(u64::from(u32::MAX)) as u32;
    let _ = stream.set_write_timeout(Some(shared.idle_timeout));
    if stream.write_all(&count.to_le_bytes()).is_err() {
        return;
    }
    let mut left = u64::from(announced).saturating_sub(4);
    while left > 0 && !shared.stopping() {
        let take = (entries.len() as u64).min(left) as usize;
        if stream.write_all(&entries[..take]).is_err() {
            return;
        }
        left -= take as u64;
    }
}

/// Holds a connection without answering until the client closes it.
/// [`Then`] after [`Answer::RawThen`]'s bytes: ends when a write fails (the client left),
/// at the idle timeout or at shutdown.
pub(super) fn raw_tail(shared: &Shared, stream: &mut Conn, then: Then) {
    let started = Instant::now();
    let pause = match then {
        Then::Stall => return hang(shared, stream),
        Then::Trickle(pause) => pause,
        Then::Flood => Duration::ZERO,
    };
    let _ = stream.set_write_timeout(Some(TICK));
    let chunk = vec![0u8; if pause.is_zero() { 64 * 1024 } else { 1 }];
    while !shared.stopping() && started.elapsed() < shared.idle_timeout {
        match stream.write(&chunk) {
            Ok(_) => {}
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
        if !pause.is_zero() {
            std::thread::sleep(pause);
        }
    }
}

pub(super) fn hang(shared: &Shared, stream: &mut Conn) {
    let started = Instant::now();
    let mut sink = [0u8; 1024];
    while !shared.stopping() && started.elapsed() < shared.idle_timeout {
        match stream.read(&mut sink) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if is_timeout(&e) || e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}
