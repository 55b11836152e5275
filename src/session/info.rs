//! [`ProcessInfo`]: what any ProcessInfo version reported, owned; and [`text_to_string`].

use alloc::string::String;
use alloc::vec;

use crate::payload::Reply;
use crate::wire::{Command, Guid, Text};

/// A [`Text`] as a `String`, with U+FFFD for lone surrogates.
pub fn text_to_string(t: &Text<'_>) -> String {
    // The core's lossy transcoder has an ASCII fast path; one exactly sized allocation.
    let mut v = vec![0u8; t.utf8_len_lossy()];
    if t.to_utf8_lossy(&mut v).is_ok() {
        if let Ok(s) = String::from_utf8(v) {
            return s;
        }
    }
    // Unreachable in practice (the buffer is exactly the size asked for).
    t.chars_lossy().collect()
}

/// What ProcessInfo (any version) reported, owned.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProcessInfo {
    /// The command that answered: ProcessInfo3, ProcessInfo2 or ProcessInfo.
    pub command: Command,
    /// Process id, in the target's pid namespace.
    pub pid: u64,
    /// Runtime instance cookie.
    pub cookie: Guid,
    /// Command line (on Linux the executable's path, then argv as the runtime saw it).
    pub command_line: String,
    /// Operating system (`Linux`, `Windows`, `macOS`).
    pub os: String,
    /// Architecture (`x64`, `arm64`, ...).
    pub arch: String,
    /// Entry assembly name (ProcessInfo2+; empty in hosted runtimes).
    pub entrypoint_assembly: Option<String>,
    /// CLR product version, such as `8.0.4` (ProcessInfo2+).
    pub clr_version: Option<String>,
    /// Runtime identifier, such as `linux-x64` (ProcessInfo3).
    pub runtime_identifier: Option<String>,
}

impl ProcessInfo {
    /// The runtime's major version (`8` of `8.0.4`); `None` when the reply carried no version
    /// (ProcessInfo, before ProcessInfo2).
    pub fn clr_major(&self) -> Option<u32> {
        self.clr_version.as_deref()?.split('.').next()?.parse().ok()
    }

    /// The owned form of a ProcessInfo, ProcessInfo2 or ProcessInfo3 reply (`command` is
    /// the request that got it); `None` for any other reply.
    pub fn from_reply(command: Command, reply: &Reply<'_>) -> Option<ProcessInfo> {
        // Narrow every version to the shared fields, keeping what the newer ones add.
        let (v2, rid) = match reply {
            Reply::ProcessInfo3(r) => (Some(r.as_process_info2()), Some(r.runtime_identifier)),
            Reply::ProcessInfo2(r) => (Some(*r), None),
            Reply::ProcessInfo(_) => (None, None),
            _ => return None,
        };
        let base = match (reply, &v2) {
            (Reply::ProcessInfo(r), _) => *r,
            (_, Some(v2)) => v2.as_process_info(),
            _ => return None,
        };
        let s = text_to_string;
        Some(ProcessInfo {
            command,
            pid: base.process_id,
            cookie: base.runtime_cookie,
            command_line: s(&base.command_line),
            os: s(&base.os),
            arch: s(&base.arch),
            entrypoint_assembly: v2.map(|v| s(&v.managed_entrypoint_assembly_name)),
            clr_version: v2.map(|v| s(&v.clr_product_version)),
            runtime_identifier: rid.map(|r| s(&r)),
        })
    }

    /// A ProcessInfo with only a pid and a cookie (the rest empty): what a reverse
    /// connection's Advertise tells, or a test's.
    pub fn new(command: Command, pid: u64, cookie: Guid) -> Self {
        ProcessInfo {
            command,
            pid,
            cookie,
            command_line: String::new(),
            os: String::new(),
            arch: String::new(),
            entrypoint_assembly: None,
            clr_version: None,
            runtime_identifier: None,
        }
    }
}

/// Collects what a ProcessInfo [`Call`](super::Call) passes up: feed it every event, then
/// [`finish`](Self::finish) gives the owned [`ProcessInfo`] (or why there is none).
#[derive(Debug, Default)]
pub struct ProcessInfoSink {
    info: Option<ProcessInfo>,
    last: Option<Command>,
}

impl ProcessInfoSink {
    /// One event of the call, answering `command`.
    pub fn on_event(&mut self, command: Command, ev: &crate::ClientEvent<'_>) {
        self.last = Some(command);
        if let crate::ClientEvent::Reply(r) = ev {
            self.info = ProcessInfo::from_reply(command, r);
        }
    }

    /// The information once the call is done; [`SessionError::UnexpectedReply`](super::SessionError::UnexpectedReply) when no
    /// ProcessInfo reply came.
    pub fn finish(self) -> Result<ProcessInfo, super::SessionError> {
        let command = self.last.unwrap_or(Command::ProcessInfo);
        self.info
            .ok_or(super::SessionError::UnexpectedReply { command })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    fn info(version: Option<&str>) -> ProcessInfo {
        let mut i = ProcessInfo::new(Command::ProcessInfo2, 1, Guid::NIL);
        i.clr_version = version.map(|v| v.to_string());
        i
    }

    #[test]
    fn clr_major_is_the_first_number_of_the_version() {
        assert_eq!(info(Some("8.0.4")).clr_major(), Some(8));
        assert_eq!(info(Some("10.0.0-preview.1")).clr_major(), Some(10));
        assert_eq!(info(Some("x.1")).clr_major(), None);
        assert_eq!(info(None).clr_major(), None);
    }
}
