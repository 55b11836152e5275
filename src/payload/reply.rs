//! Server replies (command set 0xFF): OK with a command-specific payload, or an error.

use crate::error::{DecodeError, EncodeError};
use crate::payload::encode_message;
use crate::wire::{text_len, Command, Guid, Hresult, Reader, Text, Writer};

/// The shape of the OK reply a command gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ReplyKind {
    /// An HRESULT (`int32`), or an empty payload (the spec's 20-byte OK).
    Status,
    /// A `u64` session id (CollectTracing*, StopTracing).
    SessionId,
    /// ProcessInfo's payload.
    ProcessInfo,
    /// ProcessInfo2's payload.
    ProcessInfo2,
    /// ProcessInfo3's payload.
    ProcessInfo3,
    /// ProcessEnvironment's size announcement, followed by the environment block.
    ProcessEnvironment,
    /// The payload as sent: the reply to a command this crate does not know.
    Raw,
}

impl ReplyKind {
    /// The reply shape for a request command, or `None` for reply and unknown commands.
    pub fn of(command: Command) -> Option<ReplyKind> {
        Some(match command {
            Command::StopTracing
            | Command::CollectTracing
            | Command::CollectTracing2
            | Command::CollectTracing3
            | Command::CollectTracing4
            | Command::CollectTracing5
            | Command::CollectTracing6 => ReplyKind::SessionId,
            Command::ProcessInfo => ReplyKind::ProcessInfo,
            Command::ProcessInfo2 => ReplyKind::ProcessInfo2,
            Command::ProcessInfo3 => ReplyKind::ProcessInfo3,
            Command::ProcessEnvironment => ReplyKind::ProcessEnvironment,
            Command::GenerateCoreDump
            | Command::GenerateCoreDump2
            | Command::GenerateCoreDump3
            | Command::AttachProfiler
            | Command::StartupProfiler
            | Command::ResumeRuntime
            | Command::SetEnvironmentVariable
            | Command::EnablePerfMap
            | Command::DisablePerfMap
            | Command::ApplyStartupHook => ReplyKind::Status,
            _ => return None,
        })
    }
}

/// ProcessInfo's reply (0x0400).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct ProcessInfoReply<'a> {
    /// Process id in the target's pid namespace.
    pub process_id: u64,
    /// Runtime instance cookie (equals the Advertise cookie).
    pub runtime_cookie: Guid,
    /// Command line (on Linux: the executable's full path, then argv).
    pub command_line: Text<'a>,
    /// `Linux`, `Windows`, `macOS` or `Unknown`.
    pub os: Text<'a>,
    /// `x64`, `x86`, `arm32`, `arm64` or `Unknown`.
    pub arch: Text<'a>,
}

/// ProcessInfo2's reply (0x0404).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct ProcessInfo2Reply<'a> {
    /// Process id in the target's pid namespace.
    pub process_id: u64,
    /// Runtime instance cookie.
    pub runtime_cookie: Guid,
    /// Command line.
    pub command_line: Text<'a>,
    /// Operating system.
    pub os: Text<'a>,
    /// Architecture.
    pub arch: Text<'a>,
    /// Entry assembly name (empty in hosted runtimes).
    pub managed_entrypoint_assembly_name: Text<'a>,
    /// CLR product version, such as `8.0.4`.
    pub clr_product_version: Text<'a>,
}

/// ProcessInfo3's reply (0x0408): a version, then ProcessInfo2's fields and the RID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct ProcessInfo3Reply<'a> {
    /// Payload version (1 in .NET 8). Later versions may append fields.
    pub version: u32,
    /// Process id in the target's pid namespace.
    pub process_id: u64,
    /// Runtime instance cookie.
    pub runtime_cookie: Guid,
    /// Command line.
    pub command_line: Text<'a>,
    /// Operating system.
    pub os: Text<'a>,
    /// Architecture.
    pub arch: Text<'a>,
    /// Entry assembly name.
    pub managed_entrypoint_assembly_name: Text<'a>,
    /// CLR product version.
    pub clr_product_version: Text<'a>,
    /// Runtime identifier, such as `linux-x64`.
    pub runtime_identifier: Text<'a>,
    /// Fields appended by a payload version above 1, kept undecoded (empty for version 1).
    pub extension: &'a [u8],
}

/// ProcessEnvironment's reply (0x0402): how many continuation bytes follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct ProcessEnvironmentReply {
    /// Size of the environment block that follows the reply.
    pub incoming_bytes: u32,
    /// Unused.
    pub future: u16,
}

/// A successful reply (header 0xFF00), decoded according to the request's command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[non_exhaustive]
pub enum Reply<'a> {
    /// An HRESULT reply. Real runtimes send `int32 0` (24 bytes); an empty payload (the spec's
    /// 20-byte OK) decodes as [`Hresult::S_OK`].
    Ok(Hresult),
    /// A session id: CollectTracing's new session, or the one StopTracing stopped.
    SessionId(u64),
    /// ProcessInfo's payload.
    ProcessInfo(ProcessInfoReply<'a>),
    /// ProcessInfo2's payload.
    ProcessInfo2(ProcessInfo2Reply<'a>),
    /// ProcessInfo3's payload.
    ProcessInfo3(ProcessInfo3Reply<'a>),
    /// ProcessEnvironment's size announcement.
    ProcessEnvironment(ProcessEnvironmentReply),
    /// The OK reply to a command this crate does not know (a [`Request`](super::Request)
    /// of the caller's own, for a command of a newer runtime): its payload as sent.
    Raw(&'a [u8]),
}

/// An error reply (header 0xFFFF): an HRESULT, and for GenerateCoreDump3 createdump's message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct ErrorReply<'a> {
    /// The error.
    pub hresult: Hresult,
    /// GenerateCoreDump3's message string; `None` when the payload ends after the HRESULT.
    pub message: Option<Text<'a>>,
}

/// A whole reply message: what the server side sends and the client side receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum Response<'a> {
    /// Header 0xFF00.
    Ok(Reply<'a>),
    /// Header 0xFFFF.
    Error(ErrorReply<'a>),
}

impl<'a> ProcessInfoReply<'a> {
    fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        Ok(ProcessInfoReply {
            process_id: r.u64("process_id")?,
            runtime_cookie: r.guid("runtime_cookie")?,
            command_line: r.text("command_line")?,
            os: r.text("os")?,
            arch: r.text("arch")?,
        })
    }
    fn len(&self) -> usize {
        24 + text_len(&self.command_line) + text_len(&self.os) + text_len(&self.arch)
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.u64(self.process_id);
        w.guid(&self.runtime_cookie);
        w.text(&self.command_line);
        w.text(&self.os);
        w.text(&self.arch);
    }
}

impl<'a> ProcessInfo2Reply<'a> {
    fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let base = ProcessInfoReply::decode(r)?;
        Ok(ProcessInfo2Reply {
            process_id: base.process_id,
            runtime_cookie: base.runtime_cookie,
            command_line: base.command_line,
            os: base.os,
            arch: base.arch,
            managed_entrypoint_assembly_name: r.text("managed_entrypoint_assembly_name")?,
            clr_product_version: r.text("clr_product_version")?,
        })
    }
    /// The fields ProcessInfo also reports.
    pub fn as_process_info(&self) -> ProcessInfoReply<'a> {
        ProcessInfoReply {
            process_id: self.process_id,
            runtime_cookie: self.runtime_cookie,
            command_line: self.command_line,
            os: self.os,
            arch: self.arch,
        }
    }
    fn len(&self) -> usize {
        self.as_process_info().len()
            + text_len(&self.managed_entrypoint_assembly_name)
            + text_len(&self.clr_product_version)
    }
    fn write(&self, w: &mut Writer<'_>) {
        self.as_process_info().write(w);
        w.text(&self.managed_entrypoint_assembly_name);
        w.text(&self.clr_product_version);
    }
}

impl<'a> ProcessInfo3Reply<'a> {
    fn decode(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let version = r.u32("version")?;
        let v2 = ProcessInfo2Reply::decode(r)?;
        let runtime_identifier = r.text("runtime_identifier")?;
        // Later payload versions may append fields; version 1 must end here.
        let extension = if version > 1 {
            r.bytes("extension", r.remaining())?
        } else {
            &[]
        };
        Ok(ProcessInfo3Reply {
            version,
            extension,
            ..crate::conn::process_info3_from_v2(&v2, runtime_identifier)
        })
    }

    /// The fields ProcessInfo2 also reports.
    pub fn as_process_info2(&self) -> ProcessInfo2Reply<'a> {
        ProcessInfo2Reply {
            process_id: self.process_id,
            runtime_cookie: self.runtime_cookie,
            command_line: self.command_line,
            os: self.os,
            arch: self.arch,
            managed_entrypoint_assembly_name: self.managed_entrypoint_assembly_name,
            clr_product_version: self.clr_product_version,
        }
    }

    fn extension(&self) -> &'a [u8] {
        if self.version > 1 {
            self.extension
        } else {
            &[]
        }
    }

    fn len(&self) -> usize {
        4 + self.as_process_info2().len()
            + text_len(&self.runtime_identifier)
            + self.extension().len()
    }
    fn write(&self, w: &mut Writer<'_>) {
        w.u32(self.version);
        self.as_process_info2().write(w);
        w.text(&self.runtime_identifier);
        w.bytes(self.extension());
    }
}

impl<'a> Reply<'a> {
    /// Decodes an OK payload as the reply to `request`. The payload must be exactly the
    /// reply's size ([`DecodeError::TrailingBytes`] otherwise), except ProcessInfo3 with a
    /// version above 1. `Ok(None)` if `request` has no known reply shape.
    pub fn decode(request: Command, payload: &'a [u8]) -> Result<Option<Self>, DecodeError> {
        let kind = match ReplyKind::of(request) {
            Some(k) => k,
            None => return Ok(None),
        };
        let mut r = Reader::new(payload);
        let reply = match kind {
            ReplyKind::Status if payload.is_empty() => Reply::Ok(Hresult::S_OK),
            ReplyKind::Status => Reply::Ok(Hresult(r.i32("hresult")?)),
            ReplyKind::SessionId => Reply::SessionId(r.u64("session_id")?),
            ReplyKind::ProcessInfo => Reply::ProcessInfo(ProcessInfoReply::decode(&mut r)?),
            ReplyKind::ProcessInfo2 => Reply::ProcessInfo2(ProcessInfo2Reply::decode(&mut r)?),
            ReplyKind::ProcessInfo3 => Reply::ProcessInfo3(ProcessInfo3Reply::decode(&mut r)?),
            ReplyKind::ProcessEnvironment => Reply::ProcessEnvironment(ProcessEnvironmentReply {
                incoming_bytes: r.u32("incoming_bytes")?,
                future: r.u16("future")?,
            }),
            ReplyKind::Raw => Reply::Raw(r.bytes("payload", payload.len())?),
        };
        r.finish()?;
        Ok(Some(reply))
    }

    /// The reply shape.
    pub fn kind(&self) -> ReplyKind {
        match self {
            Reply::Ok(_) => ReplyKind::Status,
            Reply::SessionId(_) => ReplyKind::SessionId,
            Reply::ProcessInfo(_) => ReplyKind::ProcessInfo,
            Reply::ProcessInfo2(_) => ReplyKind::ProcessInfo2,
            Reply::ProcessInfo3(_) => ReplyKind::ProcessInfo3,
            Reply::ProcessEnvironment(_) => ReplyKind::ProcessEnvironment,
            Reply::Raw(_) => ReplyKind::Raw,
        }
    }

    fn payload_len(&self) -> usize {
        match self {
            Reply::Ok(_) => 4,
            Reply::SessionId(_) => 8,
            Reply::ProcessInfo(p) => p.len(),
            Reply::ProcessInfo2(p) => p.len(),
            Reply::ProcessInfo3(p) => p.len(),
            Reply::ProcessEnvironment(_) => 6,
            Reply::Raw(b) => b.len(),
        }
    }

    fn write(&self, w: &mut Writer<'_>) {
        match self {
            Reply::Ok(h) => w.i32(h.0),
            Reply::SessionId(id) => w.u64(*id),
            Reply::ProcessInfo(p) => p.write(w),
            Reply::ProcessInfo2(p) => p.write(w),
            Reply::ProcessInfo3(p) => p.write(w),
            Reply::ProcessEnvironment(e) => {
                w.u32(e.incoming_bytes);
                w.u16(e.future);
            }
            Reply::Raw(b) => w.bytes(b),
        }
    }
}

impl<'a> ErrorReply<'a> {
    /// An error reply with only an HRESULT (24 bytes on the wire).
    pub fn new(hresult: Hresult) -> Self {
        ErrorReply {
            hresult,
            message: None,
        }
    }

    /// Decodes an error payload for `request`: `int32` HRESULT, then for GenerateCoreDump3
    /// an optional message string. Other commands' error payloads must be exactly 4 bytes.
    pub fn decode(request: Command, payload: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        let hresult = Hresult(r.i32("hresult")?);
        let message = if request == Command::GenerateCoreDump3 && r.remaining() > 0 {
            Some(r.text("message")?)
        } else {
            None
        };
        r.finish()?;
        Ok(ErrorReply { hresult, message })
    }

    fn payload_len(&self) -> usize {
        4 + self.message.as_ref().map_or(0, text_len)
    }
}

impl<'a> Response<'a> {
    /// Size of the whole message.
    pub fn encoded_len(&self) -> usize {
        crate::wire::HEADER_LEN + self.payload_len()
    }

    fn payload_len(&self) -> usize {
        match self {
            Response::Ok(r) => r.payload_len(),
            Response::Error(e) => e.payload_len(),
        }
    }

    /// Writes the reply message (header and payload) to the start of `out`.
    pub fn encode(&self, out: &mut [u8]) -> Result<usize, EncodeError> {
        match self {
            Response::Ok(r) => {
                encode_message(Command::ServerOk, r.payload_len(), out, |w| r.write(w))
            }
            Response::Error(e) => encode_message(Command::ServerError, e.payload_len(), out, |w| {
                w.i32(e.hresult.0);
                if let Some(m) = &e.message {
                    w.text(m);
                }
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_reply_is_24_bytes() {
        let mut out = [0u8; 64];
        let n = Response::Error(ErrorReply::new(Hresult::CORDIAGIPC_E_BAD_ENCODING))
            .encode(&mut out)
            .unwrap();
        assert_eq!(n, 24);
        assert_eq!(&out[14..20], &[24, 0, 0xFF, 0xFF, 0, 0]);
        assert_eq!(&out[20..24], &[0x84, 0x13, 0x13, 0x80]);
    }

    #[test]
    fn status_reply_accepts_spec_20_byte_ok() {
        assert_eq!(
            Reply::decode(Command::ResumeRuntime, &[]),
            Ok(Some(Reply::Ok(Hresult::S_OK)))
        );
        assert_eq!(
            Reply::decode(Command::ResumeRuntime, &[0, 0]),
            Err(DecodeError::Truncated {
                field: "hresult",
                offset: 0,
                needed: 4,
                available: 2
            })
        );
        assert_eq!(
            Reply::decode(Command::StopTracing, &[0; 9]),
            Err(DecodeError::TrailingBytes { count: 1 })
        );
    }
}
