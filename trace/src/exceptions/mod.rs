//! First-chance exceptions from the runtime's own events, without dotnet-monitor's in-process
//! startup hook: `Microsoft-Windows-DotNETRuntime`'s `Exception` keyword ([`KEYWORD_EXCEPTION`])
//! makes the runtime write an `ExceptionThrown_V1` event (id 80: ExceptionType,
//! ExceptionMessage, ExceptionEIP, ExceptionHRESULT, ExceptionFlags, ClrInstanceID) on every
//! throw, on the throwing thread, and EventPipe attaches that thread's managed stack to it.
//! [`ExceptionDecoder`] turns a session's stream into [`ThrownException`]s (type, message,
//! HRESULT, thread, time, the stack's instruction pointers) and names the stack's frames with
//! the one [`SymbolTable`] the profiles use ([`ExceptionDecoder::resolve`]).
//!
//! **Naming frames.** A frame is named by the method record whose code range holds its
//! address. Methods jitted while the session runs are named by `Method/LoadVerbose` (the
//! `JIT` and `Loader` keywords of [`SESSION_KEYWORDS`], at level Verbose); methods that had
//! code before the session (jitted earlier, or ReadyToRun code such as most of
//! `System.Private.CoreLib`) are named only by a rundown (`Method/DCStopVerbose`, written
//! when a session with rundown stops). The decoder takes both, from the stream it decodes and
//! from any other stream given to [`ExceptionDecoder::feed_symbols`] (a short rundown
//! session run beside a long one), and resolves addresses when asked, not when the event
//! comes: a frame unnamed at the throw is named once a later rundown covers it. A run of
//! addresses no record covers is one [`StackFrame::Native`] frame (`[Native Frames]`).
//! EventPipe walks managed frames only, so with every method named the top frame is the
//! throwing method, as dotnet-monitor's filters expect. .NET Core 3.1's rundown names
//! jitted methods only, not ReadyToRun code: there a ReadyToRun frame is named once tiered
//! compilation rejits its method (after 30 calls), and stays `[Native Frames]` before.
//!
//! Bounds: a string field longer than [`MAX_STRING`] UTF-16 units is cut there; a stack
//! holds at most [`MAX_FRAMES`] addresses; the stacks of one sequence-point window at most
//! [`MAX_WINDOW_STACK_BYTES`]; the symbol table at most [`MAX_METHODS`] methods; metadata
//! [`MAX_METADATA`] records. Past one, what does not fit is counted in
//! [`ExceptionStats`] and dropped, never a panic.
//!
//! ```
//! use dsipc_trace::exceptions::ExceptionDecoder;
//!
//! # fn chunks() -> Vec<Vec<u8>> { Vec::new() }
//! let mut decoder = ExceptionDecoder::new();
//! let mut thrown = Vec::new();
//! for chunk in chunks() {
//!     if let Err(e) = decoder.feed(&chunk, &mut |x| thrown.push(x)) {
//!         eprintln!("{}", e);
//!         break;
//!     }
//! }
//! let _ = decoder.finish(&mut |x| thrown.push(x));
//! for x in &thrown {
//!     let frames = decoder.resolve(&x.ips);
//!     println!("{}: {} ({} frames)", x.type_name, x.message, frames.len());
//! }
//! ```

use std::collections::HashMap;
use std::ops::Range;
use std::time::{SystemTime, UNIX_EPOCH};

use dsipc::nettrace::clr::{self, ClrEvent, ClrProvider};
use dsipc::nettrace::{Item, MetadataRecord};

use crate::{
    MetadataTable, MethodRecord, StackFrame, StreamError, SymbolTable, TraceClock, TraceStream,
};

mod writers;

pub use writers::{round_trip_utc, ExceptionFilter, ExceptionFormat, ExceptionsConfiguration};

/// `Microsoft-Windows-DotNETRuntime`'s `Exception` keyword.
pub const KEYWORD_EXCEPTION: u64 = 0x8000;
/// The runtime provider's `Loader` keyword (module loads: module names).
pub const KEYWORD_LOADER: u64 = 0x8;
/// The runtime provider's `JIT` keyword (Method/LoadVerbose at level Verbose: method names).
pub const KEYWORD_JIT: u64 = 0x10;
/// The keywords an exceptions session asks of the runtime provider, at level Verbose
/// ([`SESSION_LEVEL`]): exceptions, and the method and module records that name their
/// frames.
pub const SESSION_KEYWORDS: u64 = KEYWORD_EXCEPTION | KEYWORD_JIT | KEYWORD_LOADER;
/// The session's level: Verbose (Method/LoadVerbose is written at Verbose only).
pub const SESSION_LEVEL: u32 = 5;

/// Longest string field kept, in UTF-16 units (a message past it is cut): 64 Ki units, far
/// above any real exception message, so that one event cannot hold megabytes in a history.
pub const MAX_STRING: usize = 64 * 1024;
/// Most addresses kept of one stack. EventPipe walks at most 100 frames of a stack; this
/// leaves room for a runtime that walks more while keeping one exception under 32 KiB.
pub const MAX_FRAMES: usize = 4096;
/// Most bytes of stacks held for one sequence-point window (stack ids are valid until the
/// next sequence point): 16 MiB. A runtime writes a sequence point at least every few
/// hundred blocks, whose stacks are a few MiB; past the bound a stack is not kept and an
/// event referring to it gets no frames ([`ExceptionStats::stacks_dropped`]).
pub const MAX_WINDOW_STACK_BYTES: usize = 16 << 20;
/// Most methods the symbol table holds: 262,144. A large ASP.NET application jits and
/// loads 30,000 to 60,000 methods (tiered compilation adds a second code range for the hot
/// ones), so this is four times that; at about 200 bytes a method it stays under 64 MiB.
pub const MAX_METHODS: usize = 262_144;
/// Most distinct metadata records kept (runtimes write a few hundred).
pub const MAX_METADATA: usize = 4096;

/// One `ExceptionThrown` event: a first-chance exception.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThrownException {
    /// When it was thrown (the event's time on the trace's clock, in UTC).
    pub timestamp: SystemTime,
    /// The throwing thread's OS id.
    pub thread_id: u64,
    /// The exception's full type name (`System.FormatException`).
    pub type_name: String,
    /// Its message.
    pub message: String,
    /// Its HRESULT (version 1 of the event and later: every runtime since .NET Core 1).
    pub hresult: Option<u32>,
    /// ExceptionFlags (1: has an inner exception, 2: nested, 4: rethrown, 8: a corrupted
    /// state exception, 16: a CLS-compliant exception).
    pub flags: Option<u16>,
    /// The throwing thread's stack: instruction pointers, innermost first (empty when the
    /// stream had none for it). Name them with [`ExceptionDecoder::resolve`].
    pub ips: Vec<u64>,
}

/// What the decoder saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExceptionStats {
    /// Stream bytes fed.
    pub bytes: u64,
    /// Events decoded (any provider).
    pub events: u64,
    /// Exceptions handed out.
    pub exceptions: u64,
    /// Runtime events whose payload does not fit their layout (skipped).
    pub malformed: u64,
    /// Stacks not kept (past [`MAX_WINDOW_STACK_BYTES`]).
    pub stacks_dropped: u64,
    /// Method records not kept (past [`MAX_METHODS`]).
    pub methods_dropped: u64,
    /// Metadata records dropped over [`MAX_METADATA`].
    pub metadata_dropped: u64,
}

/// What an event is to the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Exception {
        version: u32,
    },
    Symbols {
        provider: ClrProvider,
        event_id: u32,
        version: u32,
    },
    Other,
}

impl Role {
    fn of(m: &MetadataRecord<'_>) -> Role {
        match ClrProvider::from_name(&m.provider_name) {
            Some(ClrProvider::Runtime) if m.event_id == clr::EXCEPTION_THROWN => {
                Role::Exception { version: m.version }
            }
            Some(p @ (ClrProvider::Runtime | ClrProvider::Rundown))
                if (clr::METHOD_LOAD_VERBOSE..=clr::MODULE_DC_STOP).contains(&m.event_id) =>
            {
                Role::Symbols {
                    provider: p,
                    event_id: m.event_id,
                    version: m.version,
                }
            }
            _ => Role::Other,
        }
    }
}

/// One stream's parsing state besides its parser: metadata, clock, the window's stacks.
#[derive(Debug)]
struct Window {
    metadata: MetadataTable<Role>,
    clock: Option<TraceClock>,
    pointer_size: u8,
    /// Stack id -> its addresses in `ips` (this sequence-point window).
    stacks: HashMap<u32, Range<usize>>,
    ips: Vec<u64>,
}

#[derive(Debug)]
struct StreamState {
    stream: TraceStream,
    window: Window,
}

impl StreamState {
    fn new() -> StreamState {
        StreamState {
            stream: TraceStream::new(),
            window: Window {
                metadata: MetadataTable::new(),
                clock: None,
                pointer_size: 8,
                stacks: HashMap::new(),
                ips: Vec::new(),
            },
        }
    }
}

/// Decodes an exceptions session's nettrace stream, fed in chunks of any size, into
/// [`ThrownException`]s, and names their frames.
#[derive(Debug)]
pub struct ExceptionDecoder {
    main: StreamState,
    /// A second stream giving only symbols (a rundown session's), if one is being fed.
    side: Option<StreamState>,
    symbols: SymbolTable,
    stats: ExceptionStats,
}

impl Default for ExceptionDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ExceptionDecoder {
    /// A decoder waiting for the stream's first byte.
    pub fn new() -> ExceptionDecoder {
        ExceptionDecoder {
            main: StreamState::new(),
            side: None,
            symbols: SymbolTable::new(),
            stats: ExceptionStats::default(),
        }
    }

    /// What was seen so far.
    pub fn stats(&self) -> &ExceptionStats {
        &self.stats
    }

    /// Methods known to name frames.
    pub fn methods(&self) -> usize {
        self.symbols.methods()
    }

    /// Feeds the next stream bytes; exceptions go to `out` as soon as their block is whole.
    /// A stream that cannot be parsed is an error naming its offset (later bytes are only
    /// counted); a malformed event is counted and skipped.
    pub fn feed(
        &mut self,
        data: &[u8],
        out: &mut dyn FnMut(ThrownException),
    ) -> Result<(), StreamError> {
        self.stats.bytes += data.len() as u64;
        let (symbols, stats) = (&mut self.symbols, &mut self.stats);
        let StreamState { stream, window } = &mut self.main;
        stream.feed(data, |item| {
            window.item(item, symbols, stats, Some(&mut *out))
        })
    }

    /// End of the stream: `Ok` only if it ended with its end-of-stream object
    /// ([`StreamError::Truncated`] if it just stopped).
    pub fn finish(&mut self, out: &mut dyn FnMut(ThrownException)) -> Result<(), StreamError> {
        let (symbols, stats) = (&mut self.symbols, &mut self.stats);
        let StreamState { stream, window } = &mut self.main;
        stream.finish(|item| window.item(item, symbols, stats, Some(&mut *out)))
    }

    /// Feeds the next bytes of another stream that only names methods (a rundown session
    /// run beside the exceptions session); its exceptions, if any, are ignored. A new side
    /// stream starts after [`finish_symbols`](Self::finish_symbols).
    pub fn feed_symbols(&mut self, data: &[u8]) -> Result<(), StreamError> {
        let (symbols, stats) = (&mut self.symbols, &mut self.stats);
        let StreamState { stream, window } = self.side.get_or_insert_with(StreamState::new);
        stream.feed(data, |item| window.item(item, symbols, stats, None))
    }

    /// The side stream ended (see [`feed_symbols`](Self::feed_symbols)).
    pub fn finish_symbols(&mut self) -> Result<(), StreamError> {
        let (symbols, stats) = (&mut self.symbols, &mut self.stats);
        let StreamState {
            mut stream,
            mut window,
        } = match self.side.take() {
            Some(s) => s,
            None => return Ok(()),
        };
        stream.finish(|item| window.item(item, symbols, stats, None))
    }

    /// The frames of `ips` (innermost first) as the methods known now name them, each run
    /// of unnamed addresses one [`StackFrame::Native`] (an unnamed top stays: the throwing
    /// method is not known, and filters on the top frame must not match its caller).
    pub fn resolve(&mut self, ips: &[u64]) -> Vec<StackFrame> {
        let mut frames = Vec::new();
        for &ip in ips {
            match self
                .symbols
                .resolve(ip)
                .and_then(|i| self.symbols.method_name(i))
            {
                Some(m) => frames.push(StackFrame::Method(m)),
                None => {
                    if frames.last() != Some(&StackFrame::Native) {
                        frames.push(StackFrame::Native);
                    }
                }
            }
        }
        frames
    }

    /// True if every address of `ips` is named by a known method.
    pub fn is_resolved(&mut self, ips: &[u64]) -> bool {
        ips.iter().all(|&ip| self.symbols.resolve(ip).is_some())
    }
}

/// UTF-16 of a payload string, cut at [`MAX_STRING`] units.
fn bounded(s: &dsipc::nettrace::TraceStr<'_>) -> String {
    let mut out = String::new();
    let mut units = 0;
    for c in s.chars_lossy() {
        units += c.len_utf16();
        if units > MAX_STRING {
            break;
        }
        out.push(c);
    }
    out
}

impl Window {
    fn item(
        &mut self,
        item: &Item<'_>,
        symbols: &mut SymbolTable,
        stats: &mut ExceptionStats,
        out: Option<&mut dyn FnMut(ThrownException)>,
    ) {
        match item {
            Item::Trace(h) => {
                self.clock = Some(TraceClock::new(h));
                self.pointer_size = h.pointer_size;
            }
            Item::Metadata(m) => {
                if let Ok(m) = m.record() {
                    if !self.metadata.has_room_for(m.metadata_id, MAX_METADATA) {
                        stats.metadata_dropped += 1;
                        return;
                    }
                    self.metadata.insert(m.metadata_id, Role::of(&m));
                }
            }
            Item::Stacks(b) => {
                for s in b.iter() {
                    let bytes = (self.ips.len() + s.len()) * 8;
                    if bytes > MAX_WINDOW_STACK_BYTES {
                        stats.stacks_dropped += 1;
                        continue;
                    }
                    let start = self.ips.len();
                    self.ips.extend(s.ips().take(MAX_FRAMES));
                    self.stacks.insert(s.id, start..self.ips.len());
                }
            }
            Item::SequencePoint(sp) => {
                self.stacks.clear();
                self.ips.clear();
                if sp.flushes_metadata() {
                    self.metadata.clear();
                }
            }
            Item::Event(e) => {
                stats.events += 1;
                let role = match self.metadata.get(e.metadata_id) {
                    Some(r) => *r,
                    None => return,
                };
                match role {
                    Role::Other => {}
                    Role::Exception { version } => {
                        let out = match out {
                            Some(o) => o,
                            None => return,
                        };
                        let ev = clr::decode(
                            ClrProvider::Runtime,
                            clr::EXCEPTION_THROWN,
                            version,
                            self.pointer_size,
                            e.payload,
                        );
                        let x = match ev {
                            Ok(ClrEvent::ExceptionThrown(x)) => x,
                            _ => {
                                stats.malformed += 1;
                                return;
                            }
                        };
                        let ips = match self.stacks.get(&e.stack_id) {
                            Some(r) => self.ips[r.clone()].to_vec(),
                            None => Vec::new(),
                        };
                        let timestamp = match &self.clock {
                            Some(c) => c.time(e.timestamp),
                            None => UNIX_EPOCH,
                        };
                        stats.exceptions += 1;
                        out(ThrownException {
                            timestamp,
                            thread_id: e.thread_id,
                            type_name: bounded(&x.exception_type),
                            message: bounded(&x.exception_message),
                            hresult: x.exception_hresult,
                            flags: x.exception_flags,
                            ips,
                        });
                    }
                    Role::Symbols {
                        provider,
                        event_id,
                        version,
                    } => {
                        match clr::decode(provider, event_id, version, self.pointer_size, e.payload)
                        {
                            Ok(ev) => {
                                if let Some(mv) = ev.as_method() {
                                    if symbols.methods() >= MAX_METHODS {
                                        stats.methods_dropped += 1;
                                        return;
                                    }
                                    symbols.add_method(&MethodRecord {
                                        method_id: mv.method_id,
                                        module_id: mv.module_id,
                                        start: mv.method_start_address,
                                        size: mv.method_size,
                                        token: mv.method_token,
                                        namespace: mv.method_namespace.as_bytes(),
                                        name: mv.method_name.as_bytes(),
                                        signature: mv.method_signature.as_bytes(),
                                    });
                                } else if let Some((id, path)) = ev.as_module() {
                                    if !symbols.has_module(id) {
                                        symbols.add_module(id, &path.to_string());
                                    }
                                }
                            }
                            Err(_) => stats.malformed += 1,
                        }
                    }
                }
            }
            _ => {}
        }
    }
}
