//! JSON lines: one object per event, payload decoded by field name where a layout is known.

use std::fmt::Write as _;

use dsipc::nettrace::clr::{self, ClrEvent, ClrProvider, SampleKind};
use dsipc::nettrace::{Event, FieldError, PayloadFields, TraceStr, Value};
use dsipc_std::nettrace::{EventMetadata, TraceInfo};

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
    fn opt(&mut self, k: &str, v: Option<impl std::fmt::Display>) -> &mut Self {
        if let Some(v) = v {
            self.num(k, v);
        }
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
        | ClrEvent::MethodDCStopVerbose(m) => {
            o.num("MethodID", m.method_id)
                .num("ModuleID", m.module_id)
                .num("MethodStartAddress", m.method_start_address)
                .num("MethodSize", m.method_size)
                .num("MethodToken", m.method_token)
                .num("MethodFlags", m.method_flags)
                .text("MethodNamespace", m.method_namespace)
                .text("MethodName", m.method_name)
                .text("MethodSignature", m.method_signature)
                .opt("ClrInstanceID", m.clr_instance_id)
                .opt("ReJITID", m.rejit_id);
        }
        ClrEvent::ModuleLoad(m)
        | ClrEvent::ModuleUnload(m)
        | ClrEvent::ModuleDCStart(m)
        | ClrEvent::ModuleDCStop(m) => {
            o.num("ModuleID", m.module_id)
                .num("AssemblyID", m.assembly_id)
                .num("ModuleFlags", m.module_flags)
                .text("ModuleILPath", m.module_il_path)
                .text("ModuleNativePath", m.module_native_path)
                .opt("ClrInstanceID", m.clr_instance_id);
        }
        ClrEvent::DomainModuleLoad(m)
        | ClrEvent::DomainModuleDCStart(m)
        | ClrEvent::DomainModuleDCStop(m) => {
            o.num("ModuleID", m.module_id)
                .num("AssemblyID", m.assembly_id)
                .num("AppDomainID", m.app_domain_id)
                .num("ModuleFlags", m.module_flags)
                .text("ModuleILPath", m.module_il_path)
                .text("ModuleNativePath", m.module_native_path)
                .opt("ClrInstanceID", m.clr_instance_id);
        }
        ClrEvent::GcStart(g) => {
            o.num("Count", g.count)
                .opt("Depth", g.depth)
                .num("Reason", g.reason)
                .opt("Type", g.gc_type)
                .opt("ClrInstanceID", g.clr_instance_id)
                .opt("ClientSequenceNumber", g.client_sequence_number);
        }
        ClrEvent::GcStop(g) => {
            o.num("Count", g.count)
                .num("Depth", g.depth)
                .opt("ClrInstanceID", g.clr_instance_id);
        }
        ClrEvent::GcHeapStats(h) => {
            for (i, v) in h.generation_size.iter().enumerate() {
                o.num(&format!("GenerationSize{}", i), v);
            }
            for (i, v) in h.total_promoted_size.iter().enumerate() {
                o.num(&format!("TotalPromotedSize{}", i), v);
            }
            o.num("FinalizationPromotedSize", h.finalization_promoted_size)
                .num("FinalizationPromotedCount", h.finalization_promoted_count)
                .num("PinnedObjectCount", h.pinned_object_count)
                .num("SinkBlockCount", h.sink_block_count)
                .num("GCHandleCount", h.gc_handle_count)
                .opt("ClrInstanceID", h.clr_instance_id)
                .opt("GenerationSize4", h.generation_size_4)
                .opt("TotalPromotedSize4", h.total_promoted_size_4);
        }
        ClrEvent::GcAllocationTick(a) => {
            o.num("AllocationAmount", a.allocation_amount)
                .num("AllocationKind", a.allocation_kind)
                .opt("ClrInstanceID", a.clr_instance_id)
                .opt("AllocationAmount64", a.allocation_amount64)
                .opt("TypeID", a.type_id);
            if let Some(t) = a.type_name {
                o.text("TypeName", t);
            }
            o.opt("HeapIndex", a.heap_index)
                .opt("Address", a.address)
                .opt("ObjectSize", a.object_size);
        }
        ClrEvent::GcSuspendEeStart(s) => {
            o.num("Reason", s.reason)
                .opt("Count", s.count)
                .opt("ClrInstanceID", s.clr_instance_id);
        }
        ClrEvent::GcSuspendEeStop(c)
        | ClrEvent::GcRestartEeStart(c)
        | ClrEvent::GcRestartEeStop(c) => {
            o.opt("ClrInstanceID", c.clr_instance_id);
        }
        ClrEvent::ExceptionThrown(x) => {
            o.text("ExceptionType", x.exception_type)
                .text("ExceptionMessage", x.exception_message)
                .opt("ExceptionEIP", x.exception_eip)
                .opt("ExceptionHRESULT", x.exception_hresult)
                .opt("ExceptionFlags", x.exception_flags)
                .opt("ClrInstanceID", x.clr_instance_id);
        }
        ClrEvent::ContentionStart(c) => {
            o.num("ContentionFlags", c.contention_flags)
                .num("ClrInstanceID", c.clr_instance_id)
                .opt("LockID", c.lock_id)
                .opt("AssociatedObjectID", c.associated_object_id)
                .opt("LockOwnerThreadID", c.lock_owner_thread_id);
        }
        ClrEvent::ContentionStop(c) => {
            o.num("ContentionFlags", c.contention_flags)
                .num("ClrInstanceID", c.clr_instance_id);
            if let Some(d) = c.duration_ns {
                o.float("DurationNs", d);
            }
        }
        ClrEvent::ThreadPoolAdjustmentSample(t) => {
            o.float("Throughput", t.throughput)
                .num("ClrInstanceID", t.clr_instance_id);
        }
        ClrEvent::ThreadPoolAdjustment(t) => {
            o.float("AverageThroughput", t.average_throughput)
                .num("NewWorkerThreadCount", t.new_worker_thread_count)
                .num("Reason", t.reason)
                .num("ClrInstanceID", t.clr_instance_id);
        }
        ClrEvent::ThreadPoolAdjustmentStats(t) => {
            o.float("Duration", t.duration)
                .float("Throughput", t.throughput)
                .float("ThreadWave", t.thread_wave)
                .float("ThroughputWave", t.throughput_wave)
                .float("ThroughputErrorEstimate", t.throughput_error_estimate)
                .float(
                    "AverageThroughputErrorEstimate",
                    t.average_throughput_error_estimate,
                )
                .float("ThroughputRatio", t.throughput_ratio)
                .float("Confidence", t.confidence)
                .float("NewControlSetting", t.new_control_setting)
                .num("NewThreadWaveMagnitude", t.new_thread_wave_magnitude)
                .num("ClrInstanceID", t.clr_instance_id);
        }
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
    meta: Option<&EventMetadata>,
    info: Option<&TraceInfo>,
) {
    let ts = info.map_or(0, |i| i.nanos_since_start(e.timestamp));
    let clr_provider = meta.and_then(|m| {
        let p = ClrProvider::from_name(&TraceStr::Utf8(m.provider.as_bytes()));
        p
    });
    let clr_event = match (clr_provider, meta) {
        (Some(p), Some(m)) if m.fields.is_empty() => clr::decode(
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
    let out = o.key("payload");
    let mark = out.len();
    let mut done = false;
    if let Some(m) = meta {
        if !m.fields.is_empty() {
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
