//! Trace bytes built from the committed captures: a nettrace stream of any size, and a
//! counters capture with a renamed counter.

use std::fs;

use super::repo_root;

/// About `target` bytes of valid nettrace built from the committed .NET 8 capture
/// (`tests/data/nettrace/net8.0.4-busy.nettrace`): its header and metadata once, then its
/// event, stack and sequence-point blocks again and again, re-framed (the benchmarks'
/// stream).
pub fn nettrace_stream(target: usize) -> Vec<u8> {
    use dsipc::nettrace::{Item, NettraceParser, Status};
    let path = repo_root().join("tests/data/nettrace/net8.0.4-busy.nettrace");
    let src = std::fs::read(&path).unwrap();
    // (name, version, content) of every block, and where the first block starts.
    let mut blocks: Vec<(Vec<u8>, i32, std::ops::Range<usize>)> = Vec::new();
    let mut first_block = None;
    let mut p = NettraceParser::new();
    let mut at = 0;
    loop {
        let h = p.handle_input(&src[at..]).unwrap();
        match h.status {
            Status::Event(Item::Block(b)) => {
                first_block.get_or_insert(b.offset as usize);
                let start = b.content_offset as usize;
                blocks.push((b.name.to_vec(), b.version, start..start + b.size as usize));
            }
            Status::Event(_) => {}
            Status::Done => break,
            Status::Partial { .. } => panic!("the capture is cut short"),
        }
        at += h.consumed;
    }
    // The header and trace object as recorded; then the blocks, re-framed.
    let mut out = src[..first_block.unwrap()].to_vec();
    let mut first = true;
    while out.len() < target {
        for (name, version, range) in &blocks {
            if !first && name.as_slice() == b"MetadataBlock" {
                continue;
            }
            nettrace_block(&mut out, name, *version, &src[range.clone()]);
        }
        first = false;
    }
    out.push(0x01); // end of stream
    out
}

/// A V4/V5 block object: its type header, size, padding to 4 from the stream's start, the
/// content and the end tag.
fn nettrace_block(out: &mut Vec<u8>, name: &[u8], version: i32, content: &[u8]) {
    out.extend_from_slice(&[0x05, 0x05, 0x01]);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&(name.len() as i32).to_le_bytes());
    out.extend_from_slice(name);
    out.push(0x06);
    out.extend_from_slice(&(content.len() as i32).to_le_bytes());
    while out.len() % 4 != 0 {
        out.push(0);
    }
    out.extend_from_slice(content);
    out.push(0x06);
}

/// The committed .NET Core 3.1 counters capture with every "CPU Usage" display name
/// replaced by `to` (9 UTF-16 units, as long: a hostile name such as an OSC sequence).
pub fn counters_capture_renaming_cpu_usage(to: &str) -> &'static [u8] {
    let path = repo_root().join("tests/data/counters/netcore3.1.23-system-runtime.nettrace");
    let mut data = fs::read(path).unwrap();
    let utf16 = |t: &str| -> Vec<u8> { t.encode_utf16().flat_map(|u| u.to_le_bytes()).collect() };
    let (from, to) = (utf16("CPU Usage"), utf16(to));
    assert_eq!(from.len(), to.len(), "the new name is 9 UTF-16 units");
    let mut replaced = 0;
    let mut i = 0;
    while i + from.len() <= data.len() {
        if data[i..i + from.len()] == from[..] {
            data[i..i + from.len()].copy_from_slice(&to);
            replaced += 1;
            i += from.len();
        } else {
            i += 1;
        }
    }
    assert!(replaced > 0, "the capture names CPU Usage");
    Box::leak(data.into_boxed_slice())
}
