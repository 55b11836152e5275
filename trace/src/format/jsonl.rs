//! JSON lines: one object per event, payload decoded by field name where a layout is known;
//! `activity_id` and `related_activity_id` (as TraceEvent's ActivityID and RelatedActivityID)
//! when the event has them.

use std::fmt::Write as _;

use crate::{EventMetadata, TraceInfo};
use dsipc::nettrace::clr::{self, ClrEvent, ClrProvider, SampleKind};
use dsipc::nettrace::{Event, FieldError, PayloadFields, TraceStr, Value};
use dsipc::wire::Guid;

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

fn push_num(out: &mut String, v: impl std::fmt::Display) {
    let _ = write!(out, "{}", v);
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
        Value::I8(x) => push_num(out, x),
        Value::U8(x) | Value::Utf8CodeUnit(x) => push_num(out, x),
        Value::I16(x) => push_num(out, x),
        Value::U16(x) => push_num(out, x),
        Value::I32(x) => push_num(out, x),
        Value::U32(x) => push_num(out, x),
        Value::I64(x) | Value::VarInt(x) => push_num(out, x),
        Value::U64(x) | Value::VarUInt(x) | Value::DateTime(x) => push_num(out, x),
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

/// Builds one JSON object (`{"k":v,...}`) into a string.
struct Obj<'o> {
    out: &'o mut String,
    first: bool,
}

impl<'o> Obj<'o> {
    fn new(out: &'o mut String) -> Self {
        out.push('{');
        Obj { out, first: true }
    }
    fn key(&mut self, k: &str) -> &mut String {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        self.out.push('"');
        self.out.push_str(k);
        self.out.push_str("\":");
        self.out
    }
    fn num(&mut self, k: &str, v: impl std::fmt::Display) -> &mut Self {
        let _ = write!(self.key(k), "{}", v);
        self
    }
    fn float(&mut self, k: &str, v: f64) -> &mut Self {
        push_f64(self.key(k), v);
        self
    }
    fn text(&mut self, k: &str, v: TraceStr<'_>) -> &mut Self {
        push_trace_str(self.key(k), v);
        self
    }
    fn str(&mut self, k: &str, v: &str) -> &mut Self {
        let s = json_string(v);
        self.key(k).push_str(&s);
        self
    }
    fn end(&mut self) {
        self.out.push('}');
    }
}

/// One field of a built-in layout, for [`Obj::fields`].
enum J<'a> {
    /// An unsigned integer.
    U(u64),
    /// A float.
    F(f64),
    /// A string.
    T(TraceStr<'a>),
    /// An optional field the event's version does not carry: left out.
    Skip,
}

fn u<'a>(v: impl Into<u64>) -> J<'a> {
    J::U(v.into())
}

fn opt<'a>(v: Option<impl Into<u64>>) -> J<'a> {
    v.map_or(J::Skip, u)
}

impl<'o> Obj<'o> {
    /// Appends each present field of a table of `(name, value)`.
    fn fields(&mut self, table: &[(&str, J<'_>)]) {
        for (k, v) in table {
            match *v {
                J::U(x) => {
                    self.num(k, x);
                }
                J::F(x) => {
                    self.float(k, x);
                }
                J::T(x) => {
                    self.text(k, x);
                }
                J::Skip => {}
            }
        }
    }
}

/// Appends a runtime event's payload decoded with its built-in layout (TraceEvent's field
/// names); false if the event has none.
fn push_clr(out: &mut String, ev: &ClrEvent<'_>) -> bool {
    let mut o = Obj::new(out);
    match ev {
        ClrEvent::ThreadSample(s) => {
            let kind = match s.kind {
                SampleKind::Error => "Error".to_string(),
                SampleKind::External => "External".to_string(),
                SampleKind::Managed => "Managed".to_string(),
                SampleKind::Unknown(v) => v.to_string(),
            };
            o.str("Type", &kind);
        }
        ClrEvent::MethodLoadVerbose(m)
        | ClrEvent::MethodUnloadVerbose(m)
        | ClrEvent::MethodDCStartVerbose(m)
        | ClrEvent::MethodDCStopVerbose(m) => o.fields(&[
            ("MethodID", u(m.method_id)),
            ("ModuleID", u(m.module_id)),
            ("MethodStartAddress", u(m.method_start_address)),
            ("MethodSize", u(m.method_size)),
            ("MethodToken", u(m.method_token)),
            ("MethodFlags", u(m.method_flags)),
            ("MethodNamespace", J::T(m.method_namespace)),
            ("MethodName", J::T(m.method_name)),
            ("MethodSignature", J::T(m.method_signature)),
            ("ClrInstanceID", opt(m.clr_instance_id)),
            ("ReJITID", opt(m.rejit_id)),
        ]),
        ClrEvent::ModuleLoad(m)
        | ClrEvent::ModuleUnload(m)
        | ClrEvent::ModuleDCStart(m)
        | ClrEvent::ModuleDCStop(m) => o.fields(&[
            ("ModuleID", u(m.module_id)),
            ("AssemblyID", u(m.assembly_id)),
            ("ModuleFlags", u(m.module_flags)),
            ("ModuleILPath", J::T(m.module_il_path)),
            ("ModuleNativePath", J::T(m.module_native_path)),
            ("ClrInstanceID", opt(m.clr_instance_id)),
        ]),
        ClrEvent::DomainModuleLoad(m)
        | ClrEvent::DomainModuleDCStart(m)
        | ClrEvent::DomainModuleDCStop(m) => o.fields(&[
            ("ModuleID", u(m.module_id)),
            ("AssemblyID", u(m.assembly_id)),
            ("AppDomainID", u(m.app_domain_id)),
            ("ModuleFlags", u(m.module_flags)),
            ("ModuleILPath", J::T(m.module_il_path)),
            ("ModuleNativePath", J::T(m.module_native_path)),
            ("ClrInstanceID", opt(m.clr_instance_id)),
        ]),
        ClrEvent::GcStart(g) => o.fields(&[
            ("Count", u(g.count)),
            ("Depth", opt(g.depth)),
            ("Reason", u(g.reason)),
            ("Type", opt(g.gc_type)),
            ("ClrInstanceID", opt(g.clr_instance_id)),
            ("ClientSequenceNumber", opt(g.client_sequence_number)),
        ]),
        ClrEvent::GcStop(g) => o.fields(&[
            ("Count", u(g.count)),
            ("Depth", u(g.depth)),
            ("ClrInstanceID", opt(g.clr_instance_id)),
        ]),
        ClrEvent::GcHeapStats(h) => {
            for (i, v) in h.generation_size.iter().enumerate() {
                o.num(&format!("GenerationSize{}", i), v);
            }
            for (i, v) in h.total_promoted_size.iter().enumerate() {
                o.num(&format!("TotalPromotedSize{}", i), v);
            }
            o.fields(&[
                ("FinalizationPromotedSize", u(h.finalization_promoted_size)),
                (
                    "FinalizationPromotedCount",
                    u(h.finalization_promoted_count),
                ),
                ("PinnedObjectCount", u(h.pinned_object_count)),
                ("SinkBlockCount", u(h.sink_block_count)),
                ("GCHandleCount", u(h.gc_handle_count)),
                ("ClrInstanceID", opt(h.clr_instance_id)),
                ("GenerationSize4", opt(h.generation_size_4)),
                ("TotalPromotedSize4", opt(h.total_promoted_size_4)),
            ]);
        }
        ClrEvent::GcAllocationTick(a) => o.fields(&[
            ("AllocationAmount", u(a.allocation_amount)),
            ("AllocationKind", u(a.allocation_kind)),
            ("ClrInstanceID", opt(a.clr_instance_id)),
            ("AllocationAmount64", opt(a.allocation_amount64)),
            ("TypeID", opt(a.type_id)),
            ("TypeName", a.type_name.map_or(J::Skip, J::T)),
            ("HeapIndex", opt(a.heap_index)),
            ("Address", opt(a.address)),
            ("ObjectSize", opt(a.object_size)),
        ]),
        ClrEvent::GcSuspendEeStart(s) => o.fields(&[
            ("Reason", u(s.reason)),
            ("Count", opt(s.count)),
            ("ClrInstanceID", opt(s.clr_instance_id)),
        ]),
        ClrEvent::GcSuspendEeStop(c)
        | ClrEvent::GcRestartEeStart(c)
        | ClrEvent::GcRestartEeStop(c) => o.fields(&[("ClrInstanceID", opt(c.clr_instance_id))]),
        ClrEvent::ExceptionThrown(x) => o.fields(&[
            ("ExceptionType", J::T(x.exception_type)),
            ("ExceptionMessage", J::T(x.exception_message)),
            ("ExceptionEIP", opt(x.exception_eip)),
            ("ExceptionHRESULT", opt(x.exception_hresult)),
            ("ExceptionFlags", opt(x.exception_flags)),
            ("ClrInstanceID", opt(x.clr_instance_id)),
        ]),
        ClrEvent::ContentionStart(c) => o.fields(&[
            ("ContentionFlags", u(c.contention_flags)),
            ("ClrInstanceID", u(c.clr_instance_id)),
            ("LockID", opt(c.lock_id)),
            ("AssociatedObjectID", opt(c.associated_object_id)),
            ("LockOwnerThreadID", opt(c.lock_owner_thread_id)),
        ]),
        ClrEvent::ContentionStop(c) => o.fields(&[
            ("ContentionFlags", u(c.contention_flags)),
            ("ClrInstanceID", u(c.clr_instance_id)),
            ("DurationNs", c.duration_ns.map_or(J::Skip, J::F)),
        ]),
        ClrEvent::ThreadPoolAdjustmentSample(t) => o.fields(&[
            ("Throughput", J::F(t.throughput)),
            ("ClrInstanceID", u(t.clr_instance_id)),
        ]),
        ClrEvent::ThreadPoolAdjustment(t) => o.fields(&[
            ("AverageThroughput", J::F(t.average_throughput)),
            ("NewWorkerThreadCount", u(t.new_worker_thread_count)),
            ("Reason", u(t.reason)),
            ("ClrInstanceID", u(t.clr_instance_id)),
        ]),
        ClrEvent::ThreadPoolAdjustmentStats(t) => o.fields(&[
            ("Duration", J::F(t.duration)),
            ("Throughput", J::F(t.throughput)),
            ("ThreadWave", J::F(t.thread_wave)),
            ("ThroughputWave", J::F(t.throughput_wave)),
            ("ThroughputErrorEstimate", J::F(t.throughput_error_estimate)),
            (
                "AverageThroughputErrorEstimate",
                J::F(t.average_throughput_error_estimate),
            ),
            ("ThroughputRatio", J::F(t.throughput_ratio)),
            ("Confidence", J::F(t.confidence)),
            ("NewControlSetting", J::F(t.new_control_setting)),
            ("NewThreadWaveMagnitude", u(t.new_thread_wave_magnitude)),
            ("ClrInstanceID", u(t.clr_instance_id)),
        ]),
        _ => {
            // No layout: undo the opening brace.
            o.out.pop();
            return false;
        }
    }
    o.end();
    true
}

/// One event as a JSON line (with its newline): provider, id, version, name, timestamp (ns
/// since the trace's start), thread, stack_id, payload (decoded by field name, or hex).
pub fn event_line(
    line: &mut String,
    e: &Event<'_>,
    (activity, related): (Guid, Guid),
    meta: Option<&EventMetadata>,
    info: Option<&TraceInfo>,
) {
    let ts = info.map_or(0, |i| i.nanos_since_start(e.timestamp));
    let clr_provider = meta.and_then(|m| {
        let p = ClrProvider::from_name(&TraceStr::Utf8(m.provider.as_bytes()));
        p
    });
    let clr_event = match (clr_provider, meta) {
        (Some(p), Some(m)) if m.field_count == 0 => clr::decode(
            p,
            m.event_id,
            m.version,
            info.map_or(8, |i| i.pointer_size),
            e.payload,
        )
        .ok(),
        _ => None,
    };
    let name: String = match meta {
        Some(m) if !m.name.is_empty() => m.name.clone(),
        _ => match (clr_provider, meta) {
            (Some(p), Some(m)) => clr::event_name(p, m.event_id).unwrap_or("").to_string(),
            _ => String::new(),
        },
    };
    let mut o = Obj::new(line);
    o.str("provider", meta.map_or("", |m| m.provider.as_str()))
        .num("id", meta.map_or(0, |m| m.event_id))
        .num("version", meta.map_or(0, |m| m.version))
        .str("name", &name)
        .num("timestamp", ts)
        .num("thread", e.thread_id)
        .num("capture_thread", e.capture_thread_id)
        .num("seq", e.sequence_number)
        .num("stack_id", e.stack_id)
        .num("metadata_id", e.metadata_id);
    // TraceEvent's ActivityID and RelatedActivityID, when the event has them.
    if activity != Guid::NIL {
        o.str("activity_id", &activity.to_string());
    }
    if related != Guid::NIL {
        o.str("related_activity_id", &related.to_string());
    }
    let out = o.key("payload");
    let mark = out.len();
    let mut done = false;
    if let Some(m) = meta {
        if m.field_count > 0 {
            if let Ok(rec) = m.record() {
                done = push_fields(out, rec.fields.walk(e.payload), 0).is_ok();
                if !done {
                    out.truncate(mark);
                }
            }
        }
    }
    if !done {
        if let Some(ev) = &clr_event {
            done = push_clr(out, ev);
        }
    }
    if !done {
        push_hex(out, e.payload);
    }
    o.end();
    line.push('\n');
}
