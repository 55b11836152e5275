//! Stack blocks: interned stacks, referenced from events by id within one sequence-point
//! window.

use super::error::NettraceError;
use super::varint::Cur;

/// A stack block: `count` stacks with ids `first_id..first_id + count`, validated when the
/// block was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct StackBlock<'a> {
    /// Id of the first stack.
    pub first_id: u32,
    /// Number of stacks.
    pub count: u32,
    /// Size of each IP (4 or 8, the trace's pointer size).
    pub pointer_size: u8,
    bytes: &'a [u8],
}

impl<'a> StackBlock<'a> {
    /// Parses and validates a stack block's content at stream offset `base`.
    pub(crate) fn parse(
        content: &'a [u8],
        base: u64,
        pointer_size: u8,
    ) -> Result<StackBlock<'a>, NettraceError> {
        let mut c = Cur::new(content, base);
        let first_id = c.u32("stack block FirstId")?;
        let count = c.u32("stack block Count")?;
        let start = c.pos;
        for _ in 0..count {
            let at = c.offset();
            let len = c.u32("stack size")? as usize;
            if len % usize::from(pointer_size) != 0 {
                return Err(NettraceError::Malformed {
                    offset: at,
                    what: "stack size (not a multiple of the pointer size)",
                });
            }
            c.take(len, "stack bytes")?;
        }
        if !c.is_empty() {
            return Err(c.malformed("stack block (bytes after the last stack)"));
        }
        if first_id.checked_add(count).is_none() {
            return Err(NettraceError::Malformed {
                offset: base,
                what: "stack block ids (FirstId + Count overflows)",
            });
        }
        Ok(StackBlock {
            first_id,
            count,
            pointer_size,
            bytes: &content[start..],
        })
    }

    /// The id after the last stack of this block (`first_id + count`).
    pub fn end_id(&self) -> u32 {
        self.first_id + self.count
    }

    /// True if `id` is defined by this block.
    pub fn contains(&self, id: u32) -> bool {
        id >= self.first_id && id < self.end_id()
    }

    /// The stacks, in id order.
    pub fn iter(&self) -> Stacks<'a> {
        Stacks {
            bytes: self.bytes,
            next_id: self.first_id,
            left: self.count,
            pointer_size: self.pointer_size,
        }
    }
}

impl<'a> IntoIterator for StackBlock<'a> {
    type Item = Stack<'a>;
    type IntoIter = Stacks<'a>;
    fn into_iter(self) -> Stacks<'a> {
        self.iter()
    }
}

/// Iterator over the stacks of a [`StackBlock`].
#[derive(Debug, Clone)]
pub struct Stacks<'a> {
    bytes: &'a [u8],
    next_id: u32,
    left: u32,
    pointer_size: u8,
}

impl<'a> Iterator for Stacks<'a> {
    type Item = Stack<'a>;
    fn next(&mut self) -> Option<Stack<'a>> {
        if self.left == 0 || self.bytes.len() < 4 {
            return None;
        }
        let len = u32::from_le_bytes([self.bytes[0], self.bytes[1], self.bytes[2], self.bytes[3]])
            as usize;
        let ips = self.bytes.get(4..4 + len)?;
        self.bytes = &self.bytes[4 + len..];
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.left -= 1;
        Some(Stack {
            id,
            pointer_size: self.pointer_size,
            bytes: ips,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}

/// One stack: instruction pointers, leaf first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Stack<'a> {
    /// The stack's id.
    pub id: u32,
    /// Size of each IP (4 or 8).
    pub pointer_size: u8,
    bytes: &'a [u8],
}

impl<'a> Stack<'a> {
    /// Number of frames.
    pub fn len(&self) -> usize {
        self.bytes.len() / usize::from(self.pointer_size.max(1))
    }

    /// True for an empty stack.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The raw IP bytes (little-endian, `pointer_size` each).
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The instruction pointers, leaf first, widened to `u64`.
    pub fn ips(&self) -> Ips<'a> {
        Ips {
            bytes: self.bytes,
            pointer_size: self.pointer_size,
        }
    }
}

/// Iterator over the instruction pointers of a [`Stack`], leaf first.
#[derive(Debug, Clone)]
pub struct Ips<'a> {
    bytes: &'a [u8],
    pointer_size: u8,
}

impl<'a> Iterator for Ips<'a> {
    type Item = u64;
    #[inline]
    fn next(&mut self) -> Option<u64> {
        if self.pointer_size == 4 {
            let (b, rest) = (self.bytes.get(..4)?, &self.bytes[4..]);
            self.bytes = rest;
            Some(u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
        } else {
            let (b, rest) = (self.bytes.get(..8)?, &self.bytes[8..]);
            self.bytes = rest;
            Some(u64::from_le_bytes([
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
            ]))
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.bytes.len() / usize::from(self.pointer_size.max(1));
        (n, Some(n))
    }
}

impl ExactSizeIterator for Ips<'_> {}
