//! Sequence points: a time barrier, per-thread sequence numbers, and the end of the current
//! stack (and label list) window.

use super::error::NettraceError;
use super::varint::Cur;

/// A sequence point (V4/V5 `SPBlock`, V6 SequencePoint block), validated when read.
///
/// After it, stack ids (and V6 label list ids) restart: drop cached stacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SequencePoint<'a> {
    /// Every event before it in the stream is no later than this; every event after it is
    /// no earlier.
    pub timestamp: i64,
    /// V6 flags (bit 0: flush the thread table, bit 1: flush metadata); 0 in V4/V5.
    pub flags: u32,
    /// Number of thread entries.
    pub thread_count: u32,
    v6: bool,
    bytes: &'a [u8],
}

impl<'a> SequencePoint<'a> {
    pub(crate) fn parse(content: &'a [u8], base: u64, v6: bool) -> Result<Self, NettraceError> {
        let mut c = Cur::new(content, base);
        let timestamp = c.i64("sequence point TimeStamp")?;
        let flags = if v6 {
            c.u32("sequence point Flags")?
        } else {
            0
        };
        let thread_count = c.u32("sequence point ThreadCount")?;
        let start = c.pos;
        for _ in 0..thread_count {
            if v6 {
                c.varu64()?;
                c.varu32()?;
            } else {
                c.take(12, "sequence point thread entry")?;
            }
        }
        if !c.is_empty() {
            return Err(c.malformed("sequence point (bytes after the last thread)"));
        }
        Ok(SequencePoint {
            timestamp,
            flags,
            thread_count,
            v6,
            bytes: &content[start..],
        })
    }

    /// V6: the thread table is flushed after this point.
    pub fn flushes_threads(&self) -> bool {
        self.flags & 1 != 0
    }

    /// V6: the metadata table is flushed after this point.
    pub fn flushes_metadata(&self) -> bool {
        self.flags & 2 != 0
    }

    /// The per-thread sequence numbers: a lower bound of the last sequence number each
    /// capture thread (V6: thread index) attempted to log.
    pub fn threads(&self) -> ThreadSequences<'a> {
        ThreadSequences {
            cur: Cur::new(self.bytes, 0),
            left: self.thread_count,
            v6: self.v6,
        }
    }
}

/// A thread's sequence number, in a sequence point or a V6 RemoveThread block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ThreadSequence {
    /// Capture thread id (V6: thread index).
    pub thread_id: u64,
    /// Its sequence number.
    pub sequence_number: u32,
}

/// Iterator over the [`ThreadSequence`] entries of a sequence point or RemoveThread block.
#[derive(Debug, Clone)]
pub struct ThreadSequences<'a> {
    pub(crate) cur: Cur<'a>,
    pub(crate) left: u32,
    pub(crate) v6: bool,
}

impl<'a> Iterator for ThreadSequences<'a> {
    type Item = ThreadSequence;
    fn next(&mut self) -> Option<ThreadSequence> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        if self.v6 {
            let thread_id = self.cur.varu64().ok()?;
            let sequence_number = self.cur.varu32().ok()?;
            Some(ThreadSequence {
                thread_id,
                sequence_number,
            })
        } else {
            let thread_id = self.cur.u64("").ok()?;
            let sequence_number = self.cur.u32("").ok()?;
            Some(ThreadSequence {
                thread_id,
                sequence_number,
            })
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left as usize, Some(self.left as usize))
    }
}
