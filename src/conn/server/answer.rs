//! Answers in more than one part, built by the core so that adapters do not compose them
//! field by field: ProcessInfo 1/2/3 from one value, and ProcessEnvironment's reply with its
//! block.

use super::{ServerConnection, ServerError, State};
use crate::error::EncodeError;
use crate::payload::{
    ProcessEnvironmentReply, ProcessInfo2Reply, ProcessInfo3Reply, ProcessInfoReply, Reply,
    Response,
};
use crate::wire::{text_len, Command, Text, Writer};

impl ServerConnection {
    /// Answers ProcessInfo, ProcessInfo2 or ProcessInfo3, whichever was requested, from one
    /// value holding every field (the older replies are its prefixes: ProcessInfo leaves out
    /// the entrypoint, the CLR version and the runtime identifier; ProcessInfo2 the
    /// identifier). `info.version` and `info.extension` go out as given for ProcessInfo3.
    /// Any other request is [`ServerError::WrongReply`]; nothing changes on error.
    #[must_use = "the returned bytes must be sent"]
    pub fn send_process_info(
        &mut self,
        info: &ProcessInfo3Reply<'_>,
        out: &mut [u8],
    ) -> Result<usize, ServerError> {
        let reply = match self.state {
            State::Requested(command) => process_info_reply(info, command)
                .ok_or(ServerError::WrongReply { request: command })?,
            State::AwaitRequest { .. } => return Err(ServerError::NoRequest),
            _ => return Err(ServerError::AlreadyReplied),
        };
        self.send_response(&Response::Ok(reply), out)
    }

    /// Answers ProcessEnvironment whole: the OK reply announcing the block's size, then the
    /// block holding `vars` (`NAME=VALUE` entries), both into `out` (size it with
    /// [`environment_answer_len`]); the connection should then close. Nothing is written
    /// and the state does not change on error (a block over 4 GiB is
    /// [`EncodeError::InvalidField`], a short `out` [`EncodeError::BufferTooSmall`] with
    /// the whole size).
    #[must_use = "the returned bytes must be sent"]
    pub fn send_environment<'a, I>(&mut self, vars: I, out: &mut [u8]) -> Result<usize, ServerError>
    where
        I: IntoIterator<Item = Text<'a>> + Clone,
    {
        match self.state {
            State::Requested(Command::ProcessEnvironment) => {}
            State::Requested(request) => return Err(ServerError::WrongReply { request }),
            State::AwaitRequest { .. } => return Err(ServerError::NoRequest),
            _ => return Err(ServerError::AlreadyReplied),
        }
        let block = environment_block_len(vars.clone());
        let incoming_bytes = u32::try_from(block).map_err(|_| EncodeError::InvalidField {
            field: "environment",
            reason: "block larger than 4 GiB",
        })?;
        let reply = Response::Ok(Reply::ProcessEnvironment(ProcessEnvironmentReply {
            incoming_bytes,
            future: 0,
        }));
        let head = reply.encoded_len();
        if out.len() < head + block {
            return Err(EncodeError::BufferTooSmall {
                needed: head + block,
            }
            .into());
        }
        // Encode on a copy: the state changes only once both parts are in `out`.
        let mut next = self.clone();
        let n = next.send_response(&reply, out)?;
        let m = encode_environment_block(vars, &mut out[n..])?;
        next.continuation_sent(m)?;
        *self = next;
        Ok(n + m)
    }
}

/// The reply to `command` (ProcessInfo, ProcessInfo2 or ProcessInfo3) built from `info`,
/// which holds every field; `None` for any other command. The older replies take the
/// fields they have, in the same order.
pub fn process_info_reply<'a>(info: &ProcessInfo3Reply<'a>, command: Command) -> Option<Reply<'a>> {
    let v2 = ProcessInfo2Reply {
        process_id: info.process_id,
        runtime_cookie: info.runtime_cookie,
        command_line: info.command_line,
        os: info.os,
        arch: info.arch,
        managed_entrypoint_assembly_name: info.managed_entrypoint_assembly_name,
        clr_product_version: info.clr_product_version,
    };
    match command {
        Command::ProcessInfo => Some(Reply::ProcessInfo(ProcessInfoReply {
            process_id: v2.process_id,
            runtime_cookie: v2.runtime_cookie,
            command_line: v2.command_line,
            os: v2.os,
            arch: v2.arch,
        })),
        Command::ProcessInfo2 => Some(Reply::ProcessInfo2(v2)),
        Command::ProcessInfo3 => Some(Reply::ProcessInfo3(*info)),
        _ => None,
    }
}

/// ProcessInfo3's fields from ProcessInfo2's and a runtime identifier (payload version 1):
/// the one value [`ServerConnection::send_process_info`] answers every version from.
pub fn process_info3_from_v2<'a>(
    v2: &ProcessInfo2Reply<'a>,
    runtime_identifier: Text<'a>,
) -> ProcessInfo3Reply<'a> {
    ProcessInfo3Reply {
        version: 1,
        process_id: v2.process_id,
        runtime_cookie: v2.runtime_cookie,
        command_line: v2.command_line,
        os: v2.os,
        arch: v2.arch,
        managed_entrypoint_assembly_name: v2.managed_entrypoint_assembly_name,
        clr_product_version: v2.clr_product_version,
        runtime_identifier,
        extension: &[],
    }
}

/// Bytes [`ServerConnection::send_environment`] writes for `vars`: the 26-byte reply and
/// the block.
pub fn environment_answer_len<'a>(vars: impl IntoIterator<Item = Text<'a>>) -> usize {
    let reply = Response::Ok(Reply::ProcessEnvironment(ProcessEnvironmentReply {
        incoming_bytes: 0,
        future: 0,
    }));
    reply.encoded_len() + environment_block_len(vars)
}

/// The most bytes [`ServerConnection::send_process_info`] writes for `info`, whichever
/// version was asked (the newest answer carries every field).
pub fn process_info_answer_len(info: &ProcessInfo3Reply<'_>) -> usize {
    Response::Ok(Reply::ProcessInfo3(*info)).encoded_len()
}

/// Size of an environment block holding `vars` (`u32` count, then one string each).
pub fn environment_block_len<'a>(vars: impl IntoIterator<Item = Text<'a>>) -> usize {
    4 + vars.into_iter().map(|v| text_len(&v)).sum::<usize>()
}

/// Writes an environment block (the ProcessEnvironment continuation) into `out`.
pub fn encode_environment_block<'a, I>(vars: I, out: &mut [u8]) -> Result<usize, EncodeError>
where
    I: IntoIterator<Item = Text<'a>> + Clone,
{
    let len = environment_block_len(vars.clone());
    let dst = out
        .get_mut(..len)
        .ok_or(EncodeError::BufferTooSmall { needed: len })?;
    let mut w = Writer::new(dst);
    let mut count = 0u32;
    for _ in vars.clone() {
        count += 1;
    }
    w.u32(count);
    for v in vars {
        w.text(&v);
    }
    match w.finish() {
        Some(n) if n == len => Ok(n),
        _ => Err(EncodeError::InvalidField {
            field: "environment",
            reason: "encoder wrote a different length than it computed",
        }),
    }
}
