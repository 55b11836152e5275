//! Profiler command set (0x03): AttachProfiler and StartupProfiler.

use crate::error::{DecodeError, EncodeError};
use crate::payload::Request;
use crate::wire::{text_len, Command, Guid, Reader, Text, Writer};

fn validate_path(path: &Text<'_>) -> Result<(), EncodeError> {
    if path.is_empty() {
        return Err(EncodeError::InvalidField {
            field: "profiler_path",
            reason: "must not be empty",
        });
    }
    Ok(())
}

/// 0x0301: load a profiler into a running runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct AttachProfiler<'a> {
    /// Attach timeout. The spec says milliseconds; the official client sends **seconds**,
    /// which is what the runtime uses.
    pub attach_timeout: u32,
    /// The profiler's CLSID.
    pub profiler_guid: Guid,
    /// Path of the profiler library.
    pub profiler_path: Text<'a>,
    /// Bytes handed to the profiler's `InitializeForAttach`.
    pub client_data: &'a [u8],
}

impl<'a> AttachProfiler<'a> {
    /// Decodes a payload.
    pub fn decode(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        Ok(AttachProfiler {
            attach_timeout: r.u32("attach_timeout")?,
            profiler_guid: r.guid("profiler_guid")?,
            profiler_path: r.text("profiler_path")?,
            client_data: r.byte_array("client_data")?,
        })
    }
}

impl Request for AttachProfiler<'_> {
    fn command(&self) -> Command {
        Command::AttachProfiler
    }
    fn payload_len(&self) -> usize {
        4 + 16 + text_len(&self.profiler_path) + 4 + self.client_data.len()
    }
    fn write_payload(&self, w: &mut Writer<'_>) {
        w.u32(self.attach_timeout);
        w.guid(&self.profiler_guid);
        w.text(&self.profiler_path);
        w.byte_array(self.client_data);
    }
    fn validate(&self) -> Result<(), EncodeError> {
        validate_path(&self.profiler_path)
    }
}

/// 0x0302: register a profiler to load at startup (send while the runtime is suspended).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct StartupProfiler<'a> {
    /// The profiler's CLSID.
    pub profiler_guid: Guid,
    /// Path of the profiler library.
    pub profiler_path: Text<'a>,
}

impl<'a> StartupProfiler<'a> {
    /// Decodes a payload.
    pub fn decode(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        Ok(StartupProfiler {
            profiler_guid: r.guid("profiler_guid")?,
            profiler_path: r.text("profiler_path")?,
        })
    }
}

impl Request for StartupProfiler<'_> {
    fn command(&self) -> Command {
        Command::StartupProfiler
    }
    fn payload_len(&self) -> usize {
        16 + text_len(&self.profiler_path)
    }
    fn write_payload(&self, w: &mut Writer<'_>) {
        w.guid(&self.profiler_guid);
        w.text(&self.profiler_path);
    }
    fn validate(&self) -> Result<(), EncodeError> {
        validate_path(&self.profiler_path)
    }
}
