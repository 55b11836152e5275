//! JSON lines: one object per event, payload decoded by field name where a layout is known.

use std::fmt::Write as _;

use dsipc::nettrace::{FieldError, PayloadFields, TraceStr, Value};

use super::json_string;

/// Appends `s` as a JSON string.
pub fn push_trace_str(out: &mut String, s: TraceStr<'_>) {
    let text: String = s.chars_lossy().collect();
    out.push_str(&json_string(&text));
}

/// Appends `bytes` as a lowercase hex JSON string.
pub fn push_hex(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for b in bytes {
        let _ = write!(out, "{:02x}", b);
    }
    out.push('"');
}

fn push_f64(out: &mut String, v: f64) {
    if v.is_finite() {
        let _ = write!(out, "{}", v);
    } else {
        // JSON has no NaN or infinity.
        out.push_str(&json_string(&format!("{}", v)));
    }
}

/// Appends one value as JSON.
pub fn push_value(out: &mut String, v: &Value<'_>, depth: u32) -> Result<(), FieldError> {
    match *v {
        Value::Boolean(b) => out.push_str(if b { "true" } else { "false" }),
        Value::Char(c) => {
            let s: String = char::decode_utf16([c])
                .map(|r| r.unwrap_or(char::REPLACEMENT_CHARACTER))
                .collect();
            out.push_str(&json_string(&s));
        }
        Value::I8(x) => {
            let _ = write!(out, "{}", x);
        }
        Value::U8(x) | Value::Utf8CodeUnit(x) => {
            let _ = write!(out, "{}", x);
        }
        Value::I16(x) => {
            let _ = write!(out, "{}", x);
        }
        Value::U16(x) => {
            let _ = write!(out, "{}", x);
        }
        Value::I32(x) => {
            let _ = write!(out, "{}", x);
        }
        Value::U32(x) => {
            let _ = write!(out, "{}", x);
        }
        Value::I64(x) | Value::VarInt(x) => {
            let _ = write!(out, "{}", x);
        }
        Value::U64(x) | Value::VarUInt(x) | Value::DateTime(x) => {
            let _ = write!(out, "{}", x);
        }
        Value::F32(x) => push_f64(out, f64::from(x)),
        Value::F64(x) => push_f64(out, x),
        Value::Guid(g) => out.push_str(&json_string(&format!("{}", g))),
        Value::String(s) => push_trace_str(out, s),
        Value::Object(o) => {
            if depth > 16 {
                push_hex(out, o.as_bytes());
            } else {
                push_fields(out, o.fields(), depth + 1)?;
            }
        }
        Value::Array(a) => {
            out.push('[');
            for (i, e) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_value(out, &e?, depth + 1)?;
            }
            out.push(']');
        }
    }
    Ok(())
}

/// Appends a walked payload as a JSON object `{name: value, ...}`.
pub fn push_fields(
    out: &mut String,
    fields: PayloadFields<'_>,
    depth: u32,
) -> Result<(), FieldError> {
    out.push('{');
    let mut first = true;
    for f in fields {
        let f = f?;
        if !first {
            out.push(',');
        }
        first = false;
        push_trace_str(out, f.name);
        out.push(':');
        push_value(out, &f.value, depth)?;
    }
    out.push('}');
    Ok(())
}
