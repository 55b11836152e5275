//! The payload field walker and the CLR layouts: the `nettrace_fields` target.

use std::fmt::Write as _;

use crate::util::*;
use dsipc::nettrace::clr::{self, ClrProvider};
use dsipc::nettrace::{FieldDescriptions, Format, MetadataRecord, Value};

/// Visits a value and everything nested in it, at most `budget` values in all.
fn visit_value(v: &Value<'_>, budget: &mut u32) {
    if *budget == 0 {
        return;
    }
    *budget -= 1;
    debug(v);
    let _ = (v.as_u64(), v.as_i64(), v.as_f64());
    match v {
        Value::String(t) => {
            write!(Sink, "{}", t).unwrap();
            let n: usize = t.chars_lossy().map(char::len_utf8).sum();
            assert_eq!(n, t.utf8_len_lossy());
        }
        Value::Object(o) => visit_fields(o.fields(), budget),
        Value::Array(a) => {
            let mut n = 0;
            for e in a.iter() {
                if *budget == 0 {
                    return;
                }
                match e {
                    Ok(e) => visit_value(&e, budget),
                    Err(err) => {
                        show(&err);
                        return;
                    }
                }
                n += 1;
            }
            assert_eq!(n, a.count, "array yielded a different count");
        }
        _ => {}
    }
}

fn visit_fields(fields: dsipc::nettrace::PayloadFields<'_>, budget: &mut u32) {
    let mut last = 0;
    let mut fields = fields;
    for f in &mut fields {
        match f {
            Ok(f) => {
                assert!(f.offset >= last, "field offsets go backwards");
                last = f.offset;
                write!(Sink, "{}", f.name).unwrap();
                let _ = f.ty.fixed_size();
                visit_value(&f.value, budget);
            }
            Err(e) => {
                show(&e);
                return;
            }
        }
        if *budget == 0 {
            return;
        }
    }
    assert!(fields.position() >= last);
}

/// Walks a payload with field descriptions, checking the walker's invariants.
pub fn walk_payload(fields: &FieldDescriptions<'_>, payload: &[u8]) {
    for d in fields.iter() {
        write!(Sink, "{}", d.name).unwrap();
        let _ = (d.ty.element(), d.ty.fixed_size());
    }
    let mut budget = 100_000;
    let walk = fields.walk(payload);
    let all = walk.clone();
    visit_fields(walk, &mut budget);
    let mut all = all;
    for f in &mut all {
        if f.is_err() {
            break;
        }
    }
    assert!(all.position() <= payload.len());
    assert!(all.rest().len() <= payload.len());
}
/// Target `nettrace_fields`: `[selector, u16 len, descriptions (len bytes), payload...]`.
/// Selector bits 0-1: 0 = V4 fields (the bytes start with `u32 FieldCount`), 1 = a V5
/// V2Params tag (same), 2 = V6 (they start with `u16 count`). The descriptions become a
/// metadata record; if it parses, the payload is walked with it, every nested value visited.
/// The payload also goes through every built-in CLR layout (bits 2-3: version, bit 4:
/// 4-byte pointers).
pub fn nettrace_fields(data: &[u8]) {
    if data.len() < 3 {
        return;
    }
    let sel = data[0];
    let len = u16::from_le_bytes([data[1], data[2]]) as usize;
    let desc = match data.get(3..3 + len) {
        Some(d) => d,
        None => return,
    };
    let payload = &data[3 + len..];
    let mut raw = Vec::new();
    let format = if sel & 3 == 2 {
        Format::V6 { minor: 0 }
    } else {
        Format::V4
    };
    if format.is_v6() {
        raw.extend_from_slice(&[1, 1, b'P', 5, 1, b'E']);
        raw.extend_from_slice(desc);
    } else {
        raw.extend_from_slice(&1u32.to_le_bytes());
        raw.extend_from_slice(&[b'P', 0, 0, 0]);
        raw.extend_from_slice(&5u32.to_le_bytes());
        raw.extend_from_slice(&[b'E', 0, 0, 0]);
        raw.extend_from_slice(&[0; 16]);
        if sel & 3 == 1 {
            raw.extend_from_slice(&0u32.to_le_bytes());
            raw.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            raw.push(2);
        }
        raw.extend_from_slice(desc);
    }
    if let Ok(m) = MetadataRecord::parse(&raw, format, 0) {
        debug(&m);
        walk_payload(&m.fields, payload);
    }
    let version = u32::from((sel >> 2) & 3);
    let ptr = if sel & 0x10 != 0 { 4 } else { 8 };
    for provider in [
        ClrProvider::Runtime,
        ClrProvider::Rundown,
        ClrProvider::SampleProfiler,
    ] {
        for id in [
            0u32, 1, 2, 3, 4, 7, 8, 9, 10, 54, 55, 56, 80, 81, 91, 143, 144, 151, 152, 153, 154,
        ] {
            match clr::decode(provider, id, version, ptr, payload) {
                Ok(ev) => {
                    debug(&ev);
                    assert_eq!(
                        ev.name(),
                        if matches!(ev, clr::ClrEvent::Unknown(_)) {
                            None
                        } else {
                            clr::event_name(provider, id)
                        }
                    );
                }
                Err(e) => show(&e),
            }
        }
    }
}

/// Builds a `nettrace_fields` input.
pub fn nettrace_fields_input(sel: u8, desc: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut v = vec![sel];
    v.extend_from_slice(&(desc.len() as u16).to_le_bytes());
    v.extend_from_slice(desc);
    v.extend_from_slice(payload);
    v
}
