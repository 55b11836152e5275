//! Dump command set (0x01): GenerateCoreDump, 2 and 3.

use crate::error::{DecodeError, EncodeError};
use crate::payload::{u32_enum, Request};
use crate::wire::{text_len, Command, Reader, Text, Writer};

u32_enum! {
    /// The kind of dump to write.
    pub enum DumpType {
        /// 1: stacks, modules and thread data (dotnet-dump `mini`).
        Normal = 1,
        /// 2: Normal plus the GC heap (dotnet-dump `heap`).
        WithHeap = 2,
        /// 3: Normal with personal data removed (dotnet-dump `triage`).
        Triage = 3,
        /// 4: all process memory (dotnet-dump `full`).
        Full = 4,
    }
}

/// Flags of GenerateCoreDump2 and 3.
pub mod flags {
    /// createdump logs to the target's stdout.
    pub const LOGGING: u32 = 0x1;
    /// createdump logs verbosely.
    pub const VERBOSE_LOGGING: u32 = 0x2;
    /// Also write `<dump>.crashreport.json`.
    pub const CRASH_REPORT: u32 = 0x4;
    /// Write only the crash report.
    pub const CRASH_REPORT_ONLY: u32 = 0x8;
}

fn validate_dump(name: &Text<'_>, ty: DumpType) -> Result<(), EncodeError> {
    if name.is_null() {
        return Err(EncodeError::InvalidField {
            field: "dump_name",
            reason: "must not be null (a null name crashes the runtime); \"\" means the default",
        });
    }
    if let DumpType::Unknown(_) = ty {
        return Err(EncodeError::InvalidField {
            field: "dump_type",
            reason: "must be Normal, WithHeap, Triage or Full",
        });
    }
    Ok(())
}

macro_rules! dump_request {
    ($(#[$doc:meta])* $name:ident, $third:ident, $third_doc:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        #[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
        pub struct $name<'a> {
            /// Path of the dump file (`%p` expands to the pid; `""` writes `/tmp/coredump.PID`).
            pub dump_name: Text<'a>,
            /// Kind of dump.
            pub dump_type: DumpType,
            #[doc = $third_doc]
            pub $third: u32,
        }

        impl<'a> $name<'a> {
            /// Decodes a payload.
            pub fn decode(payload: &'a [u8]) -> Result<Self, DecodeError> {
                let mut r = Reader::new(payload);
                Ok($name {
                    dump_name: r.text("dump_name")?,
                    dump_type: r.u32("dump_type")?.into(),
                    $third: r.u32(stringify!($third))?,
                })
            }
        }

        impl Request for $name<'_> {
            fn command(&self) -> Command {
                Command::$name
            }
            fn payload_len(&self) -> usize {
                text_len(&self.dump_name) + 8
            }
            fn write_payload(&self, w: &mut Writer<'_>) {
                w.text(&self.dump_name);
                w.u32(self.dump_type.into());
                w.u32(self.$third);
            }
            fn validate(&self) -> Result<(), EncodeError> {
                validate_dump(&self.dump_name, self.dump_type)
            }
        }
    };
}

dump_request!(
    /// 0x0101: write a dump; the OK reply comes once the dump is written.
    GenerateCoreDump,
    diagnostics,
    "1 to have createdump log to the target's console, else 0."
);
dump_request!(
    /// 0x0102: write a dump with [`flags`].
    GenerateCoreDump2,
    flags,
    "[`flags`] bits."
);
dump_request!(
    /// 0x0103: as GenerateCoreDump2; a failure reply carries createdump's message.
    GenerateCoreDump3,
    flags,
    "[`flags`] bits."
);
