//! Process command set (0x04, .NET 5+): process information, environment, resume, perf maps
//! and startup hooks.

use crate::error::{DecodeError, EncodeError};
use crate::payload::{empty_request, u32_enum, Request};
use crate::wire::{text_len, Command, Reader, Text, Writer};

empty_request!(
    /// 0x0400: pid, cookie, command line, OS and architecture.
    ProcessInfo
);
empty_request!(
    /// 0x0401: resume a runtime suspended at startup (send it on the suspending port).
    ResumeRuntime
);
empty_request!(
    /// 0x0402: the environment block, sent as a sized continuation.
    ProcessEnvironment
);
empty_request!(
    /// 0x0404: ProcessInfo plus entrypoint assembly and CLR product version.
    ProcessInfo2
);
empty_request!(
    /// 0x0406: stop writing perf maps.
    DisablePerfMap
);
empty_request!(
    /// 0x0408: versioned ProcessInfo2 plus the runtime identifier.
    ProcessInfo3
);

/// 0x0403: set `name` to `value` in the target's environment; a null value unsets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct SetEnvironmentVariable<'a> {
    /// Variable name (must not be null).
    pub name: Text<'a>,
    /// New value; [`Text::Null`] removes the variable.
    pub value: Text<'a>,
}

impl<'a> SetEnvironmentVariable<'a> {
    /// Decodes a payload.
    pub fn decode(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        Ok(SetEnvironmentVariable {
            name: r.text("name")?,
            value: r.text("value")?,
        })
    }
}

impl Request for SetEnvironmentVariable<'_> {
    fn command(&self) -> Command {
        Command::SetEnvironmentVariable
    }
    fn payload_len(&self) -> usize {
        text_len(&self.name) + text_len(&self.value)
    }
    fn write_payload(&self, w: &mut Writer<'_>) {
        w.text(&self.name);
        w.text(&self.value);
    }
    fn validate(&self) -> Result<(), EncodeError> {
        if self.name.is_empty() {
            return Err(EncodeError::InvalidField {
                field: "name",
                reason: "must not be empty or null",
            });
        }
        Ok(())
    }
}

u32_enum! {
    /// What EnablePerfMap writes.
    pub enum PerfMapType {
        /// 0: nothing (the runtime rejects it with E_INVALIDARG).
        Disabled = 0,
        /// 1: perf map and jitdump.
        All = 1,
        /// 2: jitdump only (`/tmp/jit-PID.dump`).
        JitDump = 2,
        /// 3: perf map only (`/tmp/perf-PID.map`).
        PerfMap = 3,
    }
}

/// 0x0405: start writing perf maps / jitdump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct EnablePerfMap {
    /// What to write.
    pub perf_map_type: PerfMapType,
}

impl EnablePerfMap {
    /// Decodes a payload.
    pub fn decode(payload: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        Ok(EnablePerfMap {
            perf_map_type: r.u32("perf_map_type")?.into(),
        })
    }
}

impl Request for EnablePerfMap {
    fn command(&self) -> Command {
        Command::EnablePerfMap
    }
    fn payload_len(&self) -> usize {
        4
    }
    fn write_payload(&self, w: &mut Writer<'_>) {
        w.u32(self.perf_map_type.into());
    }
}

/// 0x0407: add a startup hook assembly (runs at resume, or at once if already running).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct ApplyStartupHook<'a> {
    /// Absolute path of the managed assembly.
    pub startup_hook_path: Text<'a>,
}

impl<'a> ApplyStartupHook<'a> {
    /// Decodes a payload.
    pub fn decode(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        Ok(ApplyStartupHook {
            startup_hook_path: r.text("startup_hook_path")?,
        })
    }
}

impl Request for ApplyStartupHook<'_> {
    fn command(&self) -> Command {
        Command::ApplyStartupHook
    }
    fn payload_len(&self) -> usize {
        text_len(&self.startup_hook_path)
    }
    fn write_payload(&self, w: &mut Writer<'_>) {
        w.text(&self.startup_hook_path);
    }
    fn validate(&self) -> Result<(), EncodeError> {
        if self.startup_hook_path.is_null() {
            return Err(EncodeError::InvalidField {
                field: "startup_hook_path",
                reason: "must not be null",
            });
        }
        Ok(())
    }
}
