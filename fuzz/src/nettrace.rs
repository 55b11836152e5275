//! The trace stream parser: the fragmenting driver and the `nettrace` target.

use std::fmt::Write as _;

use crate::fragment::*;
use crate::util::*;
use crate::*;
use dsipc::nettrace::clr::{self};
use dsipc::nettrace::{Format, Item, MetadataRecord, NettraceError, NettraceParser};
use dsipc::recv::{Poll, RecvBuffer, RecvError};

/// Framing bytes a `Partial` may ask for beyond one block (object header with the longest
/// accepted name, size, padding, end tag; or the stream header and Trace object).
pub const NETTRACE_FRAMING: usize = 512;

/// What a nettrace parse reported, owned and independent of how the input was chunked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NtLog {
    /// Every item's Debug text, in order.
    pub items: Vec<String>,
    /// The error that ended the parse, normalized (see [`NtLog::normalize`]).
    pub error: Option<NettraceError>,
    /// The end-of-stream marker was reported (the `EndOfStream` item: whether `Status::Done`
    /// follows depends on whether bytes came after it in the same call).
    pub done: bool,
}

impl NtLog {
    /// Two error fields describe how much input the failing call was given, which depends on
    /// the chunking: `BadMagic::found` (the first bytes available) and `TrailingData::len`.
    fn normalize(e: NettraceError) -> NettraceError {
        match e {
            NettraceError::BadMagic { offset, .. } => NettraceError::BadMagic {
                offset,
                found: [0; 8],
            },
            NettraceError::TrailingData { offset, .. } => {
                NettraceError::TrailingData { offset, len: 0 }
            }
            e => e,
        }
    }
}
/// Feeds `input` to a parser in chunks of `chunk(remaining)` bytes (clamped), as a live
/// reader would, exercising every view of every item. Checks the `Partial` contract.
pub fn nettrace_drive(
    input: &[u8],
    max_block: usize,
    chunk: &mut dyn FnMut(usize) -> usize,
) -> NtLog {
    let mut log = NtLog::default();
    let mut p = NettraceParser::with_max_block_size(max_block);
    // The core's receive buffer: it applies `consumed` and checks the `Partial` contract
    // (consumes nothing, asks for more than is there) with debug assertions.
    let mut rx = RecvBuffer::with_limit(Vec::new(), usize::MAX);
    let mut fed = 0;
    let mut metas: std::collections::HashMap<u32, (Vec<u8>, Format)> = Default::default();
    let mut ptr = 8;
    loop {
        assert_eq!(
            p.offset(),
            (fed - rx.pending().len()) as u64,
            "offset() is not the bytes consumed"
        );
        let at_eof = rx.is_eof();
        let item = match rx.poll_nettrace(&mut p) {
            Ok(Poll::Event(i)) => i,
            Ok(poll @ (Poll::NeedInput | Poll::End)) if fed < input.len() => {
                if matches!(poll, Poll::NeedInput) {
                    assert!(
                        rx.needed() <= max_block + NETTRACE_FRAMING,
                        "past one block"
                    );
                }
                let n = chunk(input.len() - fed).clamp(1, input.len() - fed);
                fed += rx.push(&input[fed..fed + n]).expect("unbounded");
                continue;
            }
            Ok(Poll::NeedInput) => {
                assert!(
                    rx.needed() <= max_block + NETTRACE_FRAMING,
                    "past one block"
                );
                rx.eof();
                continue;
            }
            Ok(Poll::End) => {
                assert!(log.done, "Done before EndOfStream");
                if !at_eof {
                    assert_eq!(p.handle_eof(), Ok(()));
                }
                return log;
            }
            Err(RecvError::Machine(e)) => {
                show(&e);
                if at_eof {
                    assert!(!log.done);
                }
                assert!(
                    e.offset() <= input.len() as u64,
                    "error offset past the input"
                );
                assert_eq!(
                    p.handle_input(rx.pending()),
                    Err(e),
                    "a failed parser must repeat its error"
                );
                log.error = Some(NtLog::normalize(e));
                return log;
            }
            Err(e) => panic!("{}", e),
        };
        log.items.push(format!("{:?}", item));
        if item == Item::EndOfStream {
            log.done = true;
        }
        match item {
            Item::Trace(t) => {
                ptr = t.pointer_size;
                for (k, v) in t.key_values.iter() {
                    write!(Sink, "{}{}", k, v).unwrap();
                }
                let _ = t.nanos_since_start(i64::MAX);
            }
            Item::Metadata(m) => {
                let m = m.record().expect("a reported record decodes");
                write!(Sink, "{}{}", m.provider_name, m.event_name).unwrap();
                let again =
                    MetadataRecord::parse(m.raw, m.format, 0).expect("a reported record re-parses");
                assert_eq!(again.fields.len(), m.fields.len());
                metas.insert(m.metadata_id, (m.raw.to_vec(), m.format));
            }
            Item::Event(e) => {
                if let Some((raw, format)) = metas.get(&e.metadata_id) {
                    let m = MetadataRecord::parse(raw, *format, 0).unwrap();
                    walk_payload(&m.fields, e.payload);
                    if let Ok(ev) = clr::decode_with(&m, ptr, e.payload) {
                        debug(&ev);
                        let _ = (ev.name(), ev.as_method(), ev.as_module());
                    }
                }
            }
            Item::Stacks(s) => {
                let mut n = 0;
                for st in s.iter() {
                    assert!(s.contains(st.id));
                    assert_eq!(st.ips().count(), st.len());
                    n += 1;
                }
                assert_eq!(n, s.count);
            }
            Item::SequencePoint(sp) => {
                assert_eq!(sp.threads().count(), sp.thread_count as usize)
            }
            Item::Threads(t) => {
                for r in t.iter() {
                    debug(&r);
                    let _ = r.key_values().count();
                }
            }
            Item::RemoveThreads(r) => assert_eq!(r.iter().count(), r.count as usize),
            Item::LabelLists(l) => {
                let mut n = 0;
                for list in l.iter() {
                    let _ = list.labels().count();
                    n += 1;
                }
                assert_eq!(n, l.count);
            }
            _ => {}
        }
    }
}

/// Target `nettrace`: `[flags, n, n chunk sizes, stream...]`. Flags bits 0-1 pick the maximum
/// block size. The stream is parsed whole and in chunks of the given sizes (cycled; 1 byte
/// if none); both must report the same items and error.
pub fn nettrace(data: &[u8]) {
    let f = match Fragmented::split(data) {
        Some(f) => f,
        None => return,
    };
    let max_block = match f.flags & 3 {
        0 => 1 << 20,
        1 => 4096,
        2 => 64,
        _ => 100_000,
    };
    let all = nettrace_drive(f.input, max_block, &mut whole);
    let split = nettrace_drive(f.input, max_block, &mut f.chunker());
    assert_eq!(all, split, "chunked delivery differs from whole delivery");
}

/// Builds a `nettrace` input (for seeds and tests).
pub fn nettrace_input(max_block_sel: u8, chunks: &[u8], stream: &[u8]) -> Vec<u8> {
    fragmented_input(max_block_sel & 3, chunks, stream)
}
