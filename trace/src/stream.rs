//! The one stream driver: the core's receive buffer and nettrace parser together, fed the
//! bytes of a stream as they arrive (a live session, a file, a test), with one block limit
//! and one truncation rule for every caller.
//!
//! ```
//! use dsipc::nettrace::Item;
//! use dsipc_trace::{TraceAnalyzer, TraceStream};
//!
//! # fn chunks() -> Vec<Vec<u8>> { Vec::new() }
//! let mut stream = TraceStream::new();
//! let mut analyzer = TraceAnalyzer::new();
//! for chunk in chunks() {
//!     // Every complete item is handed over as soon as its bytes are in.
//!     if let Err(e) = stream.feed(&chunk, |item: &Item<'_>| {
//!         analyzer.on_item(item);
//!     }) {
//!         eprintln!("{}", e); // names the stream offset; later bytes are only counted
//!         break;
//!     }
//! }
//! // The stream is over: Ok only if it ended with its end-of-stream object.
//! match stream.finish(|item| {
//!     analyzer.on_item(item);
//! }) {
//!     Ok(()) => {}
//!     Err(e) if e.is_truncation() => eprintln!("truncated: {}", e),
//!     Err(e) => eprintln!("bad stream: {}", e),
//! }
//! ```

use std::fmt;

use dsipc::nettrace::{Item, NettraceError, NettraceParser, Status};
use dsipc::recv::{BufferTooSmall, Poll, RecvBuffer, RecvError};

/// The largest block the trace layer accepts: runtimes write blocks of about 100 KB, so a
/// larger announced size is hostile or corrupt and refused before it is buffered.
pub const MAX_BLOCK: usize = 16 << 20;

/// Initial receive capacity: one runtime block, in the CPU's cache.
const INITIAL: usize = 1 << 17;

/// Why a stream could not be parsed to its end. Everything before [`offset`](Self::offset)
/// was delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamError {
    /// Bytes the parser refused (a bad tag, a malformed record, bytes after the end of
    /// stream): the core's error, naming its offset.
    Malformed(NettraceError),
    /// A block announced larger than the limit.
    BlockTooLarge {
        /// Stream offset of the block.
        offset: u64,
        /// Contiguous bytes the block needs.
        needed: usize,
        /// The most the stream buffers.
        limit: usize,
    },
    /// The stream ended before its end-of-stream object.
    Truncated {
        /// Bytes of the stream received.
        offset: u64,
        /// Of those, bytes of an incomplete object left unparsed.
        unparsed: usize,
    },
}

impl StreamError {
    /// Stream offset the error concerns.
    pub fn offset(&self) -> u64 {
        match self {
            StreamError::Malformed(e) => e.offset(),
            StreamError::BlockTooLarge { offset, .. } => *offset,
            StreamError::Truncated { offset, .. } => *offset,
        }
    }

    /// True if the stream only ended early (what came was well formed).
    pub fn is_truncation(&self) -> bool {
        matches!(self, StreamError::Truncated { .. })
    }
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamError::Malformed(e) => e.fmt(f),
            StreamError::BlockTooLarge {
                offset,
                needed,
                limit,
            } => write!(
                f,
                "block at offset {} needs {} bytes, more than the {} accepted",
                offset, needed, limit
            ),
            StreamError::Truncated { offset, unparsed } => write!(
                f,
                "the stream ended at offset {} without its end-of-stream object (truncated; {} bytes of an incomplete object unparsed)",
                offset, unparsed
            ),
        }
    }
}

impl std::error::Error for StreamError {}

/// A nettrace stream being parsed: feed it bytes ([`feed`](Self::feed), or the zero-copy
/// [`read_buf`](Self::read_buf) + [`filled`](Self::filled)), then [`finish`](Self::finish).
/// Memory: one block at most (see [`MAX_BLOCK`]), never the stream's length.
#[derive(Debug)]
pub struct TraceStream {
    parser: NettraceParser,
    rx: RecvBuffer<Vec<u8>>,
    fed: u64,
    error: Option<StreamError>,
    peak: usize,
}

impl Default for TraceStream {
    fn default() -> Self {
        Self::new()
    }
}

impl TraceStream {
    /// A stream waiting for its first byte, accepting blocks up to [`MAX_BLOCK`].
    pub fn new() -> Self {
        Self::with_max_block_size(MAX_BLOCK)
    }

    /// A stream accepting blocks up to `max` bytes.
    pub fn with_max_block_size(max: usize) -> Self {
        let parser = NettraceParser::with_max_block_size(max);
        let rx = RecvBuffer::with_limit(Vec::new(), parser.max_needed());
        TraceStream {
            parser,
            rx,
            fed: 0,
            error: None,
            peak: 0,
        }
    }

    /// Parses `data`, the next bytes of the stream, handing every complete item to `each`.
    /// After an error (returned, and kept for [`error`](Self::error)) bytes are only
    /// counted.
    ///
    /// Items are parsed straight from `data` (no copy) while nothing is pending: only an
    /// object cut by the end of `data` is kept (copied), and completed from the next call's
    /// bytes by exactly what the parser asks for, after which parsing goes back to the
    /// caller's slice. Items, errors and offsets are the same however the stream is cut.
    pub fn feed<F: FnMut(&Item<'_>)>(
        &mut self,
        data: &[u8],
        mut each: F,
    ) -> Result<(), StreamError> {
        self.feed_with_parser(data, |item, _| each(item))
    }

    /// [`feed`](Self::feed), `each` also seeing the parser that built the item: what an
    /// event does not carry itself, such as its
    /// [`activity_ids`](NettraceParser::activity_ids) (V4/V5).
    pub fn feed_with_parser<F: FnMut(&Item<'_>, &NettraceParser)>(
        &mut self,
        data: &[u8],
        mut each: F,
    ) -> Result<(), StreamError> {
        self.fed += data.len() as u64;
        if let Some(e) = self.error {
            return Err(e);
        }
        let mut rest = data;
        // An object left pending: complete it with what the parser asked for, no more.
        while !rest.is_empty() && !self.rx.pending().is_empty() {
            let want = self
                .rx
                .needed()
                .saturating_sub(self.rx.pending().len())
                .max(1)
                .min(rest.len());
            match self.rx.push(&rest[..want]) {
                Ok(n) => rest = &rest[n..],
                Err(e) => return Err(self.fail_buffer(e)),
            }
            self.peak = self.peak.max(self.rx.capacity());
            self.drain(&mut each)?;
        }
        if !rest.is_empty() {
            let used = self.parse_direct(rest, &mut each)?;
            rest = &rest[used..];
            if !rest.is_empty() {
                // Keep the incomplete tail (less than the parser asked for: within the bound).
                while !rest.is_empty() {
                    match self.rx.push(rest) {
                        Ok(n) => rest = &rest[n..],
                        Err(e) => return Err(self.fail_buffer(e)),
                    }
                    self.peak = self.peak.max(self.rx.capacity());
                }
                // The buffer learns what the parser needs (the next feed completes exactly
                // that).
                self.drain(&mut each)?;
            }
        }
        // A long run of small blocks must not keep a large allocation around.
        if self.rx.pending().is_empty() && self.rx.capacity() > (4 << 20) {
            self.rx = RecvBuffer::with_limit(Vec::new(), self.parser.max_needed());
        }
        Ok(())
    }

    /// Parses items straight from `input` (nothing is pending in the receive buffer) until
    /// the parser wants more than is there; returns the bytes consumed.
    #[inline]
    fn parse_direct<F: FnMut(&Item<'_>, &NettraceParser)>(
        &mut self,
        input: &[u8],
        each: &mut F,
    ) -> Result<usize, StreamError> {
        let mut at = 0;
        loop {
            let r = self.parser.handle_input(&input[at..]);
            let h = match &r {
                Ok(h) => h,
                Err(e) => {
                    let e = StreamError::Malformed(*e);
                    self.error = Some(e);
                    return Err(e);
                }
            };
            match &h.status {
                Status::Event(item) => {
                    at += h.consumed;
                    each(item, &self.parser);
                }
                Status::Partial { needed } => {
                    // What the receive buffer would refuse, refused the same way.
                    let needed = (*needed).max(1);
                    if needed > self.rx.limit() {
                        let limit = self.rx.limit();
                        return Err(self.fail_buffer(BufferTooSmall { needed, limit }));
                    }
                    return Ok(at);
                }
                Status::Done => return Ok(at),
            }
        }
    }

    /// Room to read the stream's next bytes into (no copy: report them with
    /// [`filled`](Self::filled)). Grows up to one block as the parser asks.
    pub fn read_buf(&mut self) -> Result<&mut [u8], StreamError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.rx.capacity() == 0 {
            self.rx.reserve(INITIAL);
        }
        if let Err(b) = self.rx.read_buf() {
            return Err(self.fail_buffer(b));
        }
        self.peak = self.peak.max(self.rx.capacity());
        let offset = self.parser.offset();
        self.rx.read_buf().map_err(|b| StreamError::BlockTooLarge {
            offset,
            needed: b.needed,
            limit: b.limit,
        })
    }

    /// `n` bytes were read into [`read_buf`](Self::read_buf): parses them, handing every
    /// complete item to `each`.
    pub fn filled<F: FnMut(&Item<'_>)>(
        &mut self,
        n: usize,
        mut each: F,
    ) -> Result<(), StreamError> {
        self.filled_with_parser(n, |item, _| each(item))
    }

    /// [`filled`](Self::filled), `each` also seeing the parser (as in
    /// [`feed_with_parser`](Self::feed_with_parser)).
    pub fn filled_with_parser<F: FnMut(&Item<'_>, &NettraceParser)>(
        &mut self,
        n: usize,
        mut each: F,
    ) -> Result<(), StreamError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        self.fed += n as u64;
        self.rx.filled(n);
        self.drain(&mut each)
    }

    /// The stream is over (EOF, or the session ended): delivers what is left and returns
    /// `Ok` only if the stream ended with its end-of-stream object;
    /// [`StreamError::Truncated`] if it just stopped, or the error met earlier.
    pub fn finish<F: FnMut(&Item<'_>)>(&mut self, mut each: F) -> Result<(), StreamError> {
        self.finish_with_parser(|item, _| each(item))
    }

    /// [`finish`](Self::finish), `each` also seeing the parser (as in
    /// [`feed_with_parser`](Self::feed_with_parser)).
    pub fn finish_with_parser<F: FnMut(&Item<'_>, &NettraceParser)>(
        &mut self,
        mut each: F,
    ) -> Result<(), StreamError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        if self.parser.is_done() {
            // Bytes after the end of stream are the parser's to judge.
            self.drain(&mut each)?;
            return Ok(());
        }
        self.drain(&mut each)?;
        if self.parser.is_done() {
            return Ok(());
        }
        let unparsed = self.rx.pending().len();
        self.rx.eof();
        let e = StreamError::Truncated {
            offset: self.fed,
            unparsed,
        };
        self.error = Some(e);
        Err(e)
    }

    /// True once the end-of-stream object was parsed.
    pub fn is_done(&self) -> bool {
        self.parser.is_done()
    }

    /// The error that stopped parsing, if any.
    pub fn error(&self) -> Option<StreamError> {
        self.error
    }

    /// Bytes fed so far.
    pub fn fed(&self) -> u64 {
        self.fed
    }

    /// The largest capacity the receive buffer reached, in bytes.
    pub fn peak_buffer(&self) -> usize {
        self.peak
    }

    /// The parser (its offset, format, pointer size, activity ids).
    pub fn parser(&self) -> &NettraceParser {
        &self.parser
    }

    /// Hands every complete buffered item to `each`, until more input is needed.
    #[inline]
    fn drain<F: FnMut(&Item<'_>, &NettraceParser)>(
        &mut self,
        each: &mut F,
    ) -> Result<(), StreamError> {
        loop {
            match self
                .rx
                .poll_nettrace_with(&mut self.parser, |item, parser| each(item, parser))
            {
                Ok(Poll::Event(())) => {}
                Ok(Poll::NeedInput) | Ok(Poll::End) => return Ok(()),
                Err(RecvError::Machine(e)) => {
                    let e = StreamError::Malformed(e);
                    self.error = Some(e);
                    return Err(e);
                }
                Err(RecvError::BufferTooSmall(b)) => return Err(self.fail_buffer(b)),
                // RecvError is non_exhaustive: anything else is the buffer's refusal too.
                Err(_) => {
                    let b = BufferTooSmall {
                        needed: self.rx.needed(),
                        limit: self.rx.limit(),
                    };
                    return Err(self.fail_buffer(b));
                }
            }
        }
    }

    fn fail_buffer(&mut self, b: BufferTooSmall) -> StreamError {
        let e = StreamError::BlockTooLarge {
            offset: self.parser.offset(),
            needed: b.needed,
            limit: b.limit,
        };
        self.error = Some(e);
        e
    }
}
