//! Wire primitives: the header, the payload encoding rules, command codes, strings, GUIDs,
//! HRESULTs and the Advertise message.

mod advertise;
mod codec;
mod command;
mod guid;
mod header;
mod hresult;
mod seq;
pub(crate) mod text;

pub use advertise::{Advertise, AdvertiseError, AdvertiseView, ADVERTISE_LEN, ADVERTISE_MAGIC};
pub use codec::{text_len, Reader, WireItem, Writer};
pub use command::{Command, CommandSet};
pub use guid::{Guid, ParseGuidError};
pub use header::{Header, HeaderView, HEADER_LEN, MAGIC, MAX_MESSAGE_LEN, MAX_PAYLOAD_LEN};
pub use hresult::Hresult;
pub use seq::{Seq, SeqIter};
pub use text::{Text, TextUnits, TranscodeError, Units, Utf16Str};
