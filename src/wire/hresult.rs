//! HRESULTs carried by replies, with the codes the diagnostic server is known to send.

use core::fmt;

/// An HRESULT as sent in a reply (`int32`). Zero is success.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct Hresult(pub i32);

macro_rules! hresults {
    ($( $(#[$doc:meta])* $name:ident = $value:literal, $text:literal; )*) => {
        impl Hresult {
            $( $(#[$doc])* pub const $name: Hresult = Hresult($value as u32 as i32); )*

            /// The symbolic name of a known code, such as `CORDIAGIPC_E_UNKNOWN_COMMAND`.
            pub fn name(self) -> Option<&'static str> {
                match self { $( Hresult::$name => Some(stringify!($name)), )* _ => None }
            }

            /// A short description of a known code.
            pub fn description(self) -> Option<&'static str> {
                match self { $( Hresult::$name => Some($text), )* _ => None }
            }
        }
    };
}

hresults! {
    /// Success.
    S_OK = 0x0000_0000, "success";
    /// The request was not correctly encoded (also: size < 20, EOF inside the message).
    CORDIAGIPC_E_BAD_ENCODING = 0x8013_1384, "the request was not encoded correctly";
    /// The runtime does not know this command set or id.
    CORDIAGIPC_E_UNKNOWN_COMMAND = 0x8013_1385, "the runtime does not know this command";
    /// The header magic was not `DOTNET_IPC_V1`.
    CORDIAGIPC_E_UNKNOWN_MAGIC = 0x8013_1386, "the request header has an unknown magic";
    /// The server hit an unexpected error.
    CORDIAGIPC_E_UNKNOWN_ERROR = 0x8013_1387, "the diagnostic server hit an unknown error";
    /// Not available yet (e.g. AttachProfiler during startup suspension).
    CORPROF_E_NOT_YET_AVAILABLE = 0x8013_135B, "not available yet in this runtime state";
    /// A type could not be loaded (e.g. a startup hook assembly without a StartupHook type).
    COR_E_TYPELOAD = 0x8013_1522, "a type could not be loaded";
    /// Invalid argument.
    E_INVALIDARG = 0x8007_0057, "invalid argument";
    /// Unspecified failure.
    E_FAIL = 0x8000_4005, "unspecified failure";
    /// Not implemented.
    E_NOTIMPL = 0x8000_4001, "not implemented";
    /// Out of memory.
    E_OUTOFMEMORY = 0x8007_000E, "out of memory";
    /// Access denied.
    E_ACCESSDENIED = 0x8007_0005, "access denied";
    /// A module (e.g. a profiler library) was not found.
    ERROR_MOD_NOT_FOUND = 0x8007_007E, "the module could not be found";
    /// A file was not found.
    ERROR_FILE_NOT_FOUND = 0x8007_0002, "the file could not be found";
}

impl Hresult {
    /// True for success codes (high bit clear).
    pub fn is_success(self) -> bool {
        self.0 >= 0
    }

    /// The code as an unsigned 32-bit value, as it is usually written.
    pub fn code(self) -> u32 {
        self.0 as u32
    }
}

impl fmt::Display for Hresult {
    /// `0x80131385 (CORDIAGIPC_E_UNKNOWN_COMMAND: the runtime does not know this command)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:08X}", self.code())?;
        if let (Some(n), Some(d)) = (self.name(), self.description()) {
            write!(f, " ({}: {})", n, d)?;
        }
        Ok(())
    }
}

impl fmt::Debug for Hresult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "Hresult({})", n),
            None => write!(f, "Hresult(0x{:08X})", self.code()),
        }
    }
}
