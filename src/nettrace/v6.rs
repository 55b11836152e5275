//! V6-only blocks: Thread, RemoveThread and LabelList.

use super::error::NettraceError;
use super::sequence::ThreadSequences;
use super::text::TraceStr;
use super::varint::Cur;
use crate::wire::Guid;

// ---------------------------------------------------------------------------------------
// Thread block

/// A V6 Thread block: rows describing thread indexes, validated when read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ThreadBlock<'a> {
    bytes: &'a [u8],
    base: u64,
}

impl<'a> ThreadBlock<'a> {
    pub(crate) fn parse(content: &'a [u8], base: u64) -> Result<Self, NettraceError> {
        let mut c = Cur::new(content, base);
        while !c.is_empty() {
            let size = c.u16("thread row size")? as usize;
            let row_base = c.offset();
            let row = c.take(size, "thread row")?;
            parse_thread_row(row, row_base)?;
        }
        Ok(ThreadBlock {
            bytes: content,
            base,
        })
    }

    /// The rows, in stream order.
    pub fn iter(&self) -> ThreadRows<'a> {
        ThreadRows {
            cur: Cur::new(self.bytes, self.base),
        }
    }
}

impl<'a> IntoIterator for ThreadBlock<'a> {
    type Item = ThreadRow<'a>;
    type IntoIter = ThreadRows<'a>;
    fn into_iter(self) -> ThreadRows<'a> {
        self.iter()
    }
}

/// One V6 thread row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ThreadRow<'a> {
    /// The index events use to refer to this thread.
    pub index: u64,
    /// Thread name, if given.
    pub name: Option<TraceStr<'a>>,
    /// OS process id, if given.
    pub process_id: Option<u64>,
    /// OS thread id, if given.
    pub thread_id: Option<u64>,
    key_values: &'a [u8],
}

impl<'a> ThreadRow<'a> {
    /// The row's key/value entries.
    pub fn key_values(&self) -> ThreadKeyValues<'a> {
        ThreadKeyValues {
            cur: Cur::new(self.key_values, 0),
        }
    }
}

const THREAD_NAME: u8 = 1;
const THREAD_PROCESS_ID: u8 = 2;
const THREAD_OS_ID: u8 = 3;
const THREAD_KEY_VALUE: u8 = 4;

fn parse_thread_row(row: &[u8], base: u64) -> Result<ThreadRow<'_>, NettraceError> {
    let mut c = Cur::new(row, base);
    let index = c.varu64()?;
    let mut r = ThreadRow {
        index,
        name: None,
        process_id: None,
        thread_id: None,
        key_values: &[],
    };
    let mut kv_start = None;
    let mut kv_end = 0;
    while !c.is_empty() {
        let at = c.pos;
        match c.u8("thread info kind")? {
            THREAD_NAME => r.name = Some(TraceStr::Utf8(c.str8("thread name")?)),
            THREAD_PROCESS_ID => r.process_id = Some(c.varu64()?),
            THREAD_OS_ID => r.thread_id = Some(c.varu64()?),
            THREAD_KEY_VALUE => {
                c.str8("thread key")?;
                c.str8("thread value")?;
                kv_start.get_or_insert(at);
                kv_end = c.pos;
            }
            // Unknown entry kinds cannot be sized: the rest of the row is skipped.
            _ => break,
        }
    }
    if let Some(s) = kv_start {
        r.key_values = &row[s..kv_end];
    }
    Ok(r)
}

/// Iterator over the rows of a [`ThreadBlock`].
#[derive(Debug, Clone)]
pub struct ThreadRows<'a> {
    cur: Cur<'a>,
}

impl<'a> Iterator for ThreadRows<'a> {
    type Item = ThreadRow<'a>;
    fn next(&mut self) -> Option<ThreadRow<'a>> {
        if self.cur.is_empty() {
            return None;
        }
        let size = self.cur.u16("").ok()? as usize;
        let base = self.cur.offset();
        let row = self.cur.take(size, "").ok()?;
        parse_thread_row(row, base).ok()
    }
}

/// Iterator over the key/value entries of a [`ThreadRow`].
#[derive(Debug, Clone)]
pub struct ThreadKeyValues<'a> {
    cur: Cur<'a>,
}

impl<'a> Iterator for ThreadKeyValues<'a> {
    type Item = (TraceStr<'a>, TraceStr<'a>);
    fn next(&mut self) -> Option<Self::Item> {
        while !self.cur.is_empty() {
            match self.cur.u8("").ok()? {
                THREAD_KEY_VALUE => {
                    let k = self.cur.str8("").ok()?;
                    let v = self.cur.str8("").ok()?;
                    return Some((TraceStr::Utf8(k), TraceStr::Utf8(v)));
                }
                THREAD_NAME => {
                    self.cur.str8("").ok()?;
                }
                THREAD_PROCESS_ID | THREAD_OS_ID => {
                    self.cur.varu64().ok()?;
                }
                _ => return None,
            }
        }
        None
    }
}

// ---------------------------------------------------------------------------------------
// RemoveThread block

/// A V6 RemoveThread block: thread indexes that are no longer used, with each one's last
/// sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct RemoveThreadBlock<'a> {
    /// Number of entries.
    pub count: u32,
    bytes: &'a [u8],
}

impl<'a> RemoveThreadBlock<'a> {
    pub(crate) fn parse(content: &'a [u8], base: u64) -> Result<Self, NettraceError> {
        let mut c = Cur::new(content, base);
        let mut count = 0u32;
        while !c.is_empty() {
            c.varu64()?;
            c.varu32()?;
            count = count.saturating_add(1);
        }
        Ok(RemoveThreadBlock {
            count,
            bytes: content,
        })
    }

    /// The removed threads: `thread_id` is the thread index, `sequence_number` its last.
    pub fn iter(&self) -> ThreadSequences<'a> {
        ThreadSequences {
            cur: Cur::new(self.bytes, 0),
            left: self.count,
            v6: true,
        }
    }
}

// ---------------------------------------------------------------------------------------
// LabelList block

/// A V6 LabelList block: label lists with ids `first_index..first_index + count`, valid
/// until the next sequence point. Id 0 is the implicit empty list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LabelListBlock<'a> {
    /// Id of the first list.
    pub first_index: u32,
    /// Number of lists.
    pub count: u32,
    bytes: &'a [u8],
}

impl<'a> LabelListBlock<'a> {
    pub(crate) fn parse(content: &'a [u8], base: u64) -> Result<Self, NettraceError> {
        let mut c = Cur::new(content, base);
        let first_index = c.u32("label list firstIndex")?;
        let count = c.u32("label list count")?;
        let start = c.pos;
        for _ in 0..count {
            loop {
                let (_, last) = read_label(&mut c)?;
                if last {
                    break;
                }
            }
        }
        if !c.is_empty() {
            return Err(c.malformed("label list block (bytes after the last list)"));
        }
        if first_index == 0 && count > 0 {
            return Err(NettraceError::Malformed {
                offset: base,
                what: "label list firstIndex (must be >= 1)",
            });
        }
        Ok(LabelListBlock {
            first_index,
            count,
            bytes: &content[start..],
        })
    }

    /// The lists, in id order.
    pub fn iter(&self) -> LabelLists<'a> {
        LabelLists {
            cur: Cur::new(self.bytes, 0),
            next: self.first_index,
            left: self.count,
        }
    }
}

/// Iterator over the lists of a [`LabelListBlock`].
#[derive(Debug, Clone)]
pub struct LabelLists<'a> {
    cur: Cur<'a>,
    next: u32,
    left: u32,
}

impl<'a> Iterator for LabelLists<'a> {
    type Item = LabelList<'a>;
    fn next(&mut self) -> Option<LabelList<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let start = self.cur.pos;
        loop {
            let (_, last) = read_label(&mut self.cur).ok()?;
            if last {
                break;
            }
        }
        let id = self.next;
        self.next = self.next.wrapping_add(1);
        Some(LabelList {
            id,
            bytes: &self.cur.bytes[start..self.cur.pos],
        })
    }
}

/// One label list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct LabelList<'a> {
    /// Its id (events refer to it by `label_list_id`).
    pub id: u32,
    bytes: &'a [u8],
}

impl<'a> LabelList<'a> {
    /// The labels.
    pub fn labels(&self) -> Labels<'a> {
        Labels {
            cur: Cur::new(self.bytes, 0),
        }
    }

    /// The activity id label, if any.
    pub fn activity_id(&self) -> Option<Guid> {
        self.labels().find_map(|l| match l {
            Label::ActivityId(g) => Some(g),
            _ => None,
        })
    }
}

/// Iterator over the labels of a [`LabelList`].
#[derive(Debug, Clone)]
pub struct Labels<'a> {
    cur: Cur<'a>,
}

impl<'a> Iterator for Labels<'a> {
    type Item = Label<'a>;
    fn next(&mut self) -> Option<Label<'a>> {
        if self.cur.is_empty() {
            return None;
        }
        read_label(&mut self.cur).ok().map(|(l, _)| l)
    }
}

/// One label of a V6 label list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum Label<'a> {
    /// Kind 1.
    ActivityId(Guid),
    /// Kind 2.
    RelatedActivityId(Guid),
    /// Kind 3: a W3C trace id.
    TraceId([u8; 16]),
    /// Kind 4: a W3C span id.
    SpanId(u64),
    /// Kind 5: a string value.
    KeyValueString(TraceStr<'a>, TraceStr<'a>),
    /// Kind 6: an integer value.
    KeyValueInt(TraceStr<'a>, i64),
    /// Kind 7: overrides the metadata's opcode.
    OpCode(u8),
    /// Kind 8: overrides the metadata's keywords.
    Keywords(u64),
    /// Kind 9: overrides the metadata's level.
    Level(u8),
    /// Kind 10: overrides the metadata's version.
    Version(u8),
}

/// Reads one label; returns it and whether it ends its list.
fn read_label<'a>(c: &mut Cur<'a>) -> Result<(Label<'a>, bool), NettraceError> {
    let at = c.offset();
    let kind = c.u8("label kind")?;
    let label = match kind & 0x7F {
        1 => Label::ActivityId(c.guid("ActivityId label")?),
        2 => Label::RelatedActivityId(c.guid("RelatedActivityId label")?),
        3 => Label::TraceId(c.array("TraceId label")?),
        4 => Label::SpanId(c.u64("SpanId label")?),
        5 => {
            let k = c.str8("label key")?;
            let v = c.str8("label value")?;
            Label::KeyValueString(TraceStr::Utf8(k), TraceStr::Utf8(v))
        }
        6 => {
            let k = c.str8("label key")?;
            let v = super::varint::zigzag(c.varu64()?);
            Label::KeyValueInt(TraceStr::Utf8(k), v)
        }
        7 => Label::OpCode(c.u8("OpCode label")?),
        8 => Label::Keywords(c.u64("Keywords label")?),
        9 => Label::Level(c.u8("Level label")?),
        10 => Label::Version(c.u8("Version label")?),
        _ => {
            return Err(NettraceError::Malformed {
                offset: at,
                what: "label kind (unknown kinds cannot be sized)",
            })
        }
    };
    Ok((label, kind & 0x80 != 0))
}
