//! Small helpers shared by the targets: Debug/Display runners, text checks, reply shapes.

use std::fmt::{self, Write as _};

use dsipc::payload::*;
use dsipc::wire::{Text, TranscodeError};
use dsipc::Command;

use crate::*;

/// A `fmt::Write` that drops everything: runs `Debug`/`Display` code without keeping text.
pub(crate) struct Sink;

impl fmt::Write for Sink {
    fn write_str(&mut self, _: &str) -> fmt::Result {
        Ok(())
    }
}

/// Runs the `Debug` and `Display` impls of `v`.
pub(crate) fn show<T: fmt::Debug + fmt::Display + ?Sized>(v: &T) {
    write!(Sink, "{:?} {}", v, v).unwrap();
}

/// Runs the `Debug` impl of `v`.
pub(crate) fn debug<T: fmt::Debug + ?Sized>(v: &T) {
    write!(Sink, "{:?}", v).unwrap();
}

/// Checks a decoded string: strict and lossy transcoding agree with std's on its units.
pub(crate) fn check_text(t: &Text<'_>) {
    debug(t);
    write!(Sink, "{}", t).unwrap();
    let units: Vec<u16> = t.units().collect();
    assert_eq!(units.len(), t.len_utf16());
    assert_eq!(t.is_empty(), units.is_empty());
    let lossy = String::from_utf16_lossy(&units);
    assert_eq!(t.utf8_len_lossy(), lossy.len());
    let mut out = vec![0u8; lossy.len()];
    assert_eq!(t.to_utf8_lossy(&mut out).unwrap(), lossy);
    match (t.to_utf8(&mut out), String::from_utf16(&units)) {
        (Ok(s), Ok(expected)) => assert_eq!(s, expected),
        (Err(TranscodeError::LoneSurrogate { .. }), Err(_)) => {}
        (got, expected) => panic!("strict transcoding {:?}, std says {:?}", got, expected),
    }
    assert!(t.chars_lossy().eq(lossy.chars()));
    if let Text::Utf16(u) = t {
        check_utf16(u, &units);
    }
}

pub(crate) fn texts_of_reply<'a>(r: &Reply<'a>) -> Vec<Text<'a>> {
    match r {
        Reply::ProcessInfo(p) => vec![p.command_line, p.os, p.arch],
        Reply::ProcessInfo2(p) => vec![
            p.command_line,
            p.os,
            p.arch,
            p.managed_entrypoint_assembly_name,
            p.clr_product_version,
        ],
        Reply::ProcessInfo3(p) => vec![
            p.command_line,
            p.os,
            p.arch,
            p.managed_entrypoint_assembly_name,
            p.clr_product_version,
            p.runtime_identifier,
        ],
        _ => vec![],
    }
}

/// The request command each reply shape answers, used to decode an encoded [`Response`].
pub(crate) fn command_for(resp: &Response<'_>, pick: u8) -> Command {
    match resp {
        Response::Ok(r) => match r.kind() {
            ReplyKind::Status => {
                const STATUS: [Command; 10] = [
                    Command::GenerateCoreDump,
                    Command::GenerateCoreDump2,
                    Command::GenerateCoreDump3,
                    Command::AttachProfiler,
                    Command::StartupProfiler,
                    Command::ResumeRuntime,
                    Command::SetEnvironmentVariable,
                    Command::EnablePerfMap,
                    Command::DisablePerfMap,
                    Command::ApplyStartupHook,
                ];
                STATUS[pick as usize % STATUS.len()]
            }
            ReplyKind::SessionId => {
                if pick & 1 == 0 {
                    Command::StopTracing
                } else {
                    Command::CollectTracing2
                }
            }
            ReplyKind::ProcessInfo => Command::ProcessInfo,
            ReplyKind::ProcessInfo2 => Command::ProcessInfo2,
            ReplyKind::ProcessInfo3 => Command::ProcessInfo3,
            ReplyKind::ProcessEnvironment => Command::ProcessEnvironment,
            other => panic!("unknown reply kind {:?}", other),
        },
        // Only GenerateCoreDump3's error reply may carry a message.
        Response::Error(_) => Command::GenerateCoreDump3,
    }
}

/// True for the commands `AnyRequest::decode` knows.
pub(crate) fn is_request(c: Command) -> bool {
    Command::ALL.contains(&c) && !c.is_reply()
}
