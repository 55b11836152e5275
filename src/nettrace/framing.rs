//! [`Framing`]: a stream's object framing followed without parsing its content, to tell a
//! whole stream (ended by its end-of-stream marker) from one cut short.

use super::block::{end_tag, object_header, Step};
use super::error::NettraceError;
use super::header::{MAX_MAJOR_VERSION, V4_STREAM_HEADER_LEN, V6_STREAM_HEADER_LEN};
use super::{Item, NettraceParser, Status, MAX_FRAMING};

/// Follows the framing of a nettrace stream (V4/V5 objects, V6 blocks) in slices of any size,
/// skipping every block's content: a few comparisons per slice and a header parse per block.
///
/// It holds no more than one object header ([`MAX_FRAMING`] bytes, in place) and never
/// needs a block whole, so it can watch a stream passed through as it arrives (what an
/// EventPipe session's end is judged by: a stream is whole only when its end-of-stream
/// marker arrived before EOF). Block contents are not validated: that is
/// [`NettraceParser`]'s job.
#[derive(Debug, Clone)]
pub struct Framing {
    state: State,
    /// Stream offset of the next byte fed.
    offset: u64,
    /// Framing bytes gathered so far (a stream header or an object header and its size).
    acc: [u8; MAX_FRAMING],
    have: usize,
    v6: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Gathering the stream header and the trace object (or V6's trace block header).
    Start,
    /// Gathering the next object header (or the end marker).
    Between,
    /// Skipping `left` bytes of content; then an `06` end tag when `tag`.
    Skip { left: u64, tag: bool },
    /// Expecting a V4/V5 object's `06` end tag.
    EndTag,
    /// The end-of-stream marker arrived.
    Done,
    /// The framing is broken; repeated on every call.
    Failed(NettraceError),
}

impl Default for Framing {
    fn default() -> Self {
        Self::new()
    }
}

impl Framing {
    /// A tracker expecting the first byte of a stream.
    pub const fn new() -> Self {
        Framing {
            state: State::Start,
            offset: 0,
            acc: [0; MAX_FRAMING],
            have: 0,
            v6: false,
        }
    }

    /// Bytes fed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// True once the end-of-stream marker arrived.
    pub fn is_complete(&self) -> bool {
        self.state == State::Done
    }

    /// Follows `data`, the bytes after those fed before. Bytes after the end-of-stream marker
    /// are [`NettraceError::TrailingData`]; a broken frame is its typed error (with its
    /// offset), repeated on every later call.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<(), NettraceError> {
        while !data.is_empty() {
            let used = match self.state {
                State::Failed(e) => return Err(e),
                State::Done => {
                    let e = NettraceError::TrailingData {
                        offset: self.offset,
                        len: data.len(),
                    };
                    self.state = State::Failed(e);
                    return Err(e);
                }
                State::Skip { left, tag } => {
                    let n = (data.len() as u64).min(left) as usize;
                    self.state = match left - n as u64 {
                        0 if tag => State::EndTag,
                        0 => State::Between,
                        left => State::Skip { left, tag },
                    };
                    n
                }
                State::EndTag => {
                    if let Err(e) = end_tag(data, 0, self.offset) {
                        self.state = State::Failed(e);
                        return Err(e);
                    }
                    self.state = State::Between;
                    1
                }
                State::Start | State::Between => {
                    let n = self.gather(data);
                    if let Err(e) = self.frame() {
                        self.state = State::Failed(e);
                        return Err(e);
                    }
                    n
                }
            };
            self.offset += used as u64;
            data = &data[used..];
        }
        Ok(())
    }

    /// The stream ended (EOF): Ok after the end-of-stream marker, otherwise
    /// [`NettraceError::Truncated`] at the offset where the stream stopped (or the framing
    /// error already found).
    pub fn eof(&self) -> Result<(), NettraceError> {
        match self.state {
            State::Done => Ok(()),
            State::Failed(e) => Err(e),
            State::Skip { left, tag } => Err(NettraceError::Truncated {
                offset: self.offset,
                needed: (left + u64::from(tag)).min(usize::MAX as u64) as usize,
                available: 0,
            }),
            _ => Err(NettraceError::Truncated {
                offset: self.offset - self.have as u64,
                needed: self.have + 1,
                available: self.have,
            }),
        }
    }

    /// Copies up to one byte of framing from `data` into the gathered bytes: one at a time,
    /// so a frame never takes bytes of the content after it. Returns 1 (or 0 when full,
    /// which `frame` turns into an error first).
    fn gather(&mut self, data: &[u8]) -> usize {
        if self.have == self.acc.len() {
            return 0;
        }
        self.acc[self.have] = data[0];
        self.have += 1;
        1
    }

    /// Acts on the gathered bytes when they form a whole frame.
    fn frame(&mut self) -> Result<(), NettraceError> {
        // Stream offset of the first gathered byte (the byte just gathered is not counted
        // in `self.offset` yet).
        let base = self.offset + 1 - self.have as u64;
        let acc = &self.acc[..self.have];
        match self.state {
            State::Start => self.start(base),
            _ if self.v6 => {
                if acc.len() < 4 {
                    return Ok(());
                }
                let x = u32::from_le_bytes([acc[0], acc[1], acc[2], acc[3]]);
                let (size, code) = (u64::from(x & 0xFF_FFFF), (x >> 24) as u8);
                if code == 1 {
                    return Err(NettraceError::Malformed {
                        offset: base,
                        what: "second Trace block",
                    });
                }
                self.have = 0;
                self.state = match (code, size) {
                    (0, 0) => State::Done,
                    (0, _) => {
                        return Err(NettraceError::Malformed {
                            offset: base,
                            what: "end-of-stream block with content",
                        })
                    }
                    (_, 0) => State::Between,
                    (_, left) => State::Skip { left, tag: false },
                };
                Ok(())
            }
            _ => {
                if acc[0] == 0x01 {
                    self.have = 0;
                    self.state = State::Done;
                    return Ok(());
                }
                let hdr = match object_header(acc, base)? {
                    Step::Ready(h) => h,
                    Step::Need(_) => return Ok(()),
                };
                let at = hdr.len;
                if acc.len() < at + 4 {
                    return Ok(());
                }
                let raw = i32::from_le_bytes([acc[at], acc[at + 1], acc[at + 2], acc[at + 3]]);
                if raw < 0 {
                    return Err(NettraceError::Malformed {
                        offset: base + at as u64,
                        what: "block size (negative)",
                    });
                }
                // Content starts 4-aligned, counted from the stream's first byte.
                let after_size = base + at as u64 + 4;
                let pad = (4 - after_size % 4) % 4;
                self.have = 0;
                self.state = State::Skip {
                    left: pad + raw as u64,
                    tag: true,
                };
                Ok(())
            }
        }
    }

    /// The stream header and trace object, checked by the parser itself (they are at most
    /// a few hundred bytes in V4/V5); V6's trace block is skipped by its size.
    fn start(&mut self, base: u64) -> Result<(), NettraceError> {
        let acc = &self.acc[..self.have];
        if acc.len() >= 12 && acc[..8] == super::MAGIC[..] && acc[8..12] == [0, 0, 0, 0] {
            let header = V6_STREAM_HEADER_LEN + 4;
            if acc.len() < header {
                return Ok(());
            }
            let u32_at =
                |i: usize| u32::from_le_bytes([acc[i], acc[i + 1], acc[i + 2], acc[i + 3]]);
            let major = u32_at(12);
            if !(6..=MAX_MAJOR_VERSION).contains(&major) {
                return Err(NettraceError::UnsupportedVersion {
                    offset: base + 12,
                    version: major,
                });
            }
            let x = u32_at(20);
            if (x >> 24) != 1 {
                return Err(NettraceError::Malformed {
                    offset: base + 20,
                    what: "first block (expected a Trace block)",
                });
            }
            self.v6 = true;
            self.have = 0;
            self.state = match u64::from(x & 0xFF_FFFF) {
                0 => State::Between,
                left => State::Skip { left, tag: false },
            };
            return Ok(());
        }
        let handled = NettraceParser::new().handle_input(acc)?;
        match handled.status {
            Status::Event(Item::Trace(_)) => {
                debug_assert_eq!(handled.consumed, acc.len());
                self.have = 0;
                self.state = State::Between;
                Ok(())
            }
            Status::Partial { needed } if needed <= self.acc.len() => Ok(()),
            _ => Err(NettraceError::Malformed {
                offset: base + V4_STREAM_HEADER_LEN as u64,
                what: "trace object (longer than a stream header can be)",
            }),
        }
    }
}
