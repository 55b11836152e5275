//! `array<T>` fields: a slice to encode, or a validated view over decoded wire bytes.

use core::fmt;
use core::marker::PhantomData;

use crate::error::DecodeError;
use crate::wire::codec::{Reader, WireItem, Writer};

/// A protocol `array<T>`: either a caller's slice (to encode) or a validated run of encoded
/// items borrowed from a payload (decoded lazily by [`Seq::iter`], never copied).
///
/// Equality compares the items, so a slice equals its own decoded form.
pub enum Seq<'a, T> {
    /// Items held by the caller.
    Slice(&'a [T]),
    /// Items still encoded: `count` items laid out in `bytes` (already validated).
    Wire {
        /// Number of items.
        count: u32,
        /// The encoded items, without the count prefix.
        bytes: &'a [u8],
    },
}

impl<'a, T> Clone for Seq<'a, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<'a, T> Copy for Seq<'a, T> {}

impl<'a, T: WireItem<'a>> Seq<'a, T> {
    /// An empty array.
    pub const EMPTY: Seq<'a, T> = Seq::Slice(&[]);

    /// Number of items.
    pub fn len(&self) -> usize {
        match self {
            Seq::Slice(s) => s.len(),
            Seq::Wire { count, .. } => *count as usize,
        }
    }

    /// True when there are no items.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The items, in order.
    pub fn iter(&self) -> SeqIter<'a, T> {
        match *self {
            Seq::Slice(s) => SeqIter::Slice(s.iter()),
            Seq::Wire { count, bytes } => SeqIter::Wire {
                left: count,
                reader: Reader::new(bytes),
                _t: PhantomData,
            },
        }
    }

    /// Encoded size, including the `u32` count.
    pub fn encoded_len(&self) -> usize {
        match self {
            Seq::Slice(s) => 4 + s.iter().map(WireItem::encoded_len).sum::<usize>(),
            Seq::Wire { bytes, .. } => 4 + bytes.len(),
        }
    }

    /// Writes the count and the items.
    pub fn encode(&self, w: &mut Writer<'_>) {
        w.u32(self.len() as u32);
        match self {
            Seq::Slice(s) => s.iter().for_each(|i| i.encode(w)),
            Seq::Wire { bytes, .. } => w.bytes(bytes),
        }
    }

    /// Reads a count and that many items, validating each; returns a [`Seq::Wire`] view.
    pub fn decode(r: &mut Reader<'a>, field: &'static str) -> Result<Self, DecodeError> {
        let count = r.u32(field)?;
        let rest = r.rest();
        let start = r.position();
        for _ in 0..count {
            // Every item takes at least one byte, so this loop ends within the payload.
            T::decode(r)?;
        }
        let len = r.position() - start;
        Ok(Seq::Wire {
            count,
            bytes: &rest[..len],
        })
    }
}

/// Iterator over a [`Seq`].
pub enum SeqIter<'a, T> {
    /// Over a slice.
    Slice(core::slice::Iter<'a, T>),
    /// Over validated wire bytes.
    Wire {
        /// Items left.
        left: u32,
        /// Cursor.
        reader: Reader<'a>,
        /// Item type.
        _t: PhantomData<T>,
    },
}

impl<'a, T: WireItem<'a>> Iterator for SeqIter<'a, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        match self {
            SeqIter::Slice(i) => i.next().copied(),
            SeqIter::Wire { left, reader, .. } => {
                if *left == 0 {
                    return None;
                }
                *left -= 1;
                // Validated at decode time; a failure here would end the iteration early
                // rather than panic.
                T::decode(reader).ok()
            }
        }
    }
}

impl<'a, T: WireItem<'a> + PartialEq> PartialEq for Seq<'a, T> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<'a, T: WireItem<'a> + Eq> Eq for Seq<'a, T> {}

impl<'a, T: WireItem<'a> + fmt::Debug> fmt::Debug for Seq<'a, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a, T> From<&'a [T]> for Seq<'a, T> {
    fn from(s: &'a [T]) -> Self {
        Seq::Slice(s)
    }
}

impl<'a, T, const N: usize> From<&'a [T; N]> for Seq<'a, T> {
    fn from(s: &'a [T; N]) -> Self {
        Seq::Slice(s)
    }
}

#[cfg(feature = "defmt")]
impl<'a, T: WireItem<'a> + defmt::Format> defmt::Format for Seq<'a, T> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "[{=usize} items]", self.len())
    }
}

#[cfg(feature = "arbitrary")]
impl<'a, T: WireItem<'a>> arbitrary::Arbitrary<'a> for Seq<'a, T> {
    /// Builds the wire form from fuzzer bytes: a count, then items that must decode.
    fn arbitrary(u: &mut arbitrary::Unstructured<'a>) -> arbitrary::Result<Self> {
        let count = u.int_in_range(0u32..=8)?;
        let len = u.arbitrary_len::<u8>()?;
        let bytes = u.bytes(len)?;
        let mut r = Reader::new(bytes);
        for _ in 0..count {
            T::decode(&mut r).map_err(|_| arbitrary::Error::IncorrectFormat)?;
        }
        Ok(Seq::Wire {
            count,
            bytes: &bytes[..r.position()],
        })
    }
}
