//! Decoding a CLR event's payload with its built-in layout.

use super::*;
use crate::error::DecodeError;
use crate::nettrace::metadata::MetadataRecord;
use crate::wire::{Guid, Reader};

/// Payload reader with the extra primitives CLR layouts need.
struct R<'a> {
    r: Reader<'a>,
    pointer_size: u8,
}

impl<'a> R<'a> {
    fn u8(&mut self, f: &'static str) -> Result<u8, DecodeError> {
        self.r.u8(f)
    }
    fn u16(&mut self, f: &'static str) -> Result<u16, DecodeError> {
        self.r.u16(f)
    }
    fn u32(&mut self, f: &'static str) -> Result<u32, DecodeError> {
        self.r.u32(f)
    }
    fn u64(&mut self, f: &'static str) -> Result<u64, DecodeError> {
        self.r.u64(f)
    }
    fn f64(&mut self, f: &'static str) -> Result<f64, DecodeError> {
        self.r.u64(f).map(f64::from_bits)
    }
    fn guid(&mut self, f: &'static str) -> Result<Guid, DecodeError> {
        self.r.guid(f)
    }
    fn ptr(&mut self, f: &'static str) -> Result<u64, DecodeError> {
        if self.pointer_size == 4 {
            self.r.u32(f).map(u64::from)
        } else {
            self.r.u64(f)
        }
    }
    /// A NUL-terminated UTF-16 string.
    fn string(&mut self, field: &'static str) -> Result<TraceStr<'a>, DecodeError> {
        let rest = self.r.rest();
        let offset = self.r.position();
        let mut i = 0;
        while i + 1 < rest.len() {
            if rest[i] == 0 && rest[i + 1] == 0 {
                let s = self.r.bytes(field, i + 2)?;
                return Ok(TraceStr::utf16(&s[..i]));
            }
            i += 2;
        }
        Err(DecodeError::UnterminatedString { field, offset })
    }
}

fn when<T>(
    cond: bool,
    f: impl FnOnce() -> Result<T, DecodeError>,
) -> Result<Option<T>, DecodeError> {
    if cond {
        f().map(Some)
    } else {
        Ok(None)
    }
}

fn method<'a>(r: &mut R<'a>, version: u32) -> Result<MethodVerbose<'a>, DecodeError> {
    let method_id = r.u64("MethodID")?;
    let module_id = r.u64("ModuleID")?;
    let method_start_address = r.u64("MethodStartAddress")?;
    let method_size = r.u32("MethodSize")?;
    let method_token = r.u32("MethodToken")?;
    let method_flags = r.u32("MethodFlags")?;
    let method_namespace = r.string("MethodNamespace")?;
    let method_name = r.string("MethodName")?;
    let method_signature = r.string("MethodSignature")?;
    let clr_instance_id = when(version >= 1, || r.u16("ClrInstanceID"))?;
    let rejit_id = when(version >= 2, || r.u64("ReJITID"))?;
    Ok(MethodVerbose {
        method_id,
        module_id,
        method_start_address,
        method_size,
        method_token,
        method_flags,
        method_namespace,
        method_name,
        method_signature,
        clr_instance_id,
        rejit_id,
    })
}

fn module<'a>(r: &mut R<'a>, version: u32) -> Result<ModuleLoad<'a>, DecodeError> {
    let module_id = r.u64("ModuleID")?;
    let assembly_id = r.u64("AssemblyID")?;
    let module_flags = r.u32("ModuleFlags")?;
    r.u32("Reserved1")?;
    let module_il_path = r.string("ModuleILPath")?;
    let module_native_path = r.string("ModuleNativePath")?;
    let clr_instance_id = when(version >= 1, || r.u16("ClrInstanceID"))?;
    let v2 = version >= 2;
    let managed_pdb_signature = when(v2, || r.guid("ManagedPdbSignature"))?;
    let managed_pdb_age = when(v2, || r.u32("ManagedPdbAge"))?;
    let managed_pdb_build_path = when(v2, || r.string("ManagedPdbBuildPath"))?;
    let native_pdb_signature = when(v2, || r.guid("NativePdbSignature"))?;
    let native_pdb_age = when(v2, || r.u32("NativePdbAge"))?;
    let native_pdb_build_path = when(v2, || r.string("NativePdbBuildPath"))?;
    Ok(ModuleLoad {
        module_id,
        assembly_id,
        module_flags,
        module_il_path,
        module_native_path,
        clr_instance_id,
        managed_pdb_signature,
        managed_pdb_age,
        managed_pdb_build_path,
        native_pdb_signature,
        native_pdb_age,
        native_pdb_build_path,
    })
}

fn domain_module<'a>(r: &mut R<'a>, version: u32) -> Result<DomainModuleLoad<'a>, DecodeError> {
    let module_id = r.u64("ModuleID")?;
    let assembly_id = r.u64("AssemblyID")?;
    let app_domain_id = r.u64("AppDomainID")?;
    let module_flags = r.u32("ModuleFlags")?;
    r.u32("Reserved1")?;
    let module_il_path = r.string("ModuleILPath")?;
    let module_native_path = r.string("ModuleNativePath")?;
    let clr_instance_id = when(version >= 1, || r.u16("ClrInstanceID"))?;
    Ok(DomainModuleLoad {
        module_id,
        assembly_id,
        app_domain_id,
        module_flags,
        module_il_path,
        module_native_path,
        clr_instance_id,
    })
}

fn clr_instance(r: &mut R<'_>, version: u32) -> Result<ClrInstance, DecodeError> {
    Ok(ClrInstance {
        clr_instance_id: when(version >= 1, || r.u16("ClrInstanceID"))?,
    })
}

/// Decodes a payload with the built-in layout of (provider, event id, version).
/// `pointer_size` is the trace's ([`TraceHeader::pointer_size`](crate::nettrace::TraceHeader)).
/// Bytes after the fields the layout knows are ignored (later runtimes append fields).
pub fn decode(
    provider: ClrProvider,
    event_id: u32,
    version: u32,
    pointer_size: u8,
    payload: &[u8],
) -> Result<ClrEvent<'_>, DecodeError> {
    use ClrProvider::*;
    let mut r = R {
        r: Reader::new(payload),
        pointer_size,
    };
    let r = &mut r;
    let v = version;
    Ok(match (provider, event_id) {
        (SampleProfiler, THREAD_SAMPLE) => {
            let kind = match r.u32("Type")? {
                0 => SampleKind::Error,
                1 => SampleKind::External,
                2 => SampleKind::Managed,
                k => SampleKind::Unknown(k),
            };
            ClrEvent::ThreadSample(ThreadSample { kind })
        }
        (Runtime, METHOD_LOAD_VERBOSE) => ClrEvent::MethodLoadVerbose(method(r, v)?),
        (Runtime, METHOD_UNLOAD_VERBOSE) => ClrEvent::MethodUnloadVerbose(method(r, v)?),
        (Rundown, METHOD_LOAD_VERBOSE) => ClrEvent::MethodDCStartVerbose(method(r, v)?),
        (Rundown, METHOD_UNLOAD_VERBOSE) => ClrEvent::MethodDCStopVerbose(method(r, v)?),
        (Runtime, MODULE_LOAD) => ClrEvent::ModuleLoad(module(r, v)?),
        (Runtime, MODULE_UNLOAD) => ClrEvent::ModuleUnload(module(r, v)?),
        (Rundown, MODULE_UNLOAD) => ClrEvent::ModuleDCStart(module(r, v)?),
        (Rundown, MODULE_DC_STOP) => ClrEvent::ModuleDCStop(module(r, v)?),
        (Runtime, DOMAIN_MODULE_LOAD) => ClrEvent::DomainModuleLoad(domain_module(r, v)?),
        (Rundown, DOMAIN_MODULE_LOAD) => ClrEvent::DomainModuleDCStart(domain_module(r, v)?),
        (Rundown, MODULE_LOAD) => ClrEvent::DomainModuleDCStop(domain_module(r, v)?),
        (Runtime, GC_START) => {
            let count = r.u32("Count")?;
            let (depth, reason, gc_type, clr_instance_id) = if v >= 1 {
                let depth = r.u32("Depth")?;
                let reason = r.u32("Reason")?;
                let ty = r.u32("Type")?;
                (Some(depth), reason, Some(ty), Some(r.u16("ClrInstanceID")?))
            } else {
                (None, r.u32("Reason")?, None, None)
            };
            let client_sequence_number = when(v >= 2, || r.u64("ClientSequenceNumber"))?;
            ClrEvent::GcStart(GcStart {
                count,
                depth,
                reason,
                gc_type,
                clr_instance_id,
                client_sequence_number,
            })
        }
        (Runtime, GC_STOP) => {
            let count = r.u32("Count")?;
            let depth = if v >= 1 {
                r.u32("Depth")?
            } else {
                u32::from(r.u16("Depth")?)
            };
            let clr_instance_id = when(v >= 1, || r.u16("ClrInstanceID"))?;
            ClrEvent::GcStop(GcStop {
                count,
                depth,
                clr_instance_id,
            })
        }
        (Runtime, GC_HEAP_STATS) => {
            let mut generation_size = [0u64; 4];
            let mut total_promoted_size = [0u64; 4];
            for i in 0..4 {
                generation_size[i] = r.u64("GenerationSize")?;
                total_promoted_size[i] = r.u64("TotalPromotedSize")?;
            }
            let finalization_promoted_size = r.u64("FinalizationPromotedSize")?;
            let finalization_promoted_count = r.u64("FinalizationPromotedCount")?;
            let pinned_object_count = r.u32("PinnedObjectCount")?;
            let sink_block_count = r.u32("SinkBlockCount")?;
            let gc_handle_count = r.u32("GCHandleCount")?;
            let clr_instance_id = when(v >= 1, || r.u16("ClrInstanceID"))?;
            let generation_size_4 = when(v >= 2, || r.u64("GenerationSize4"))?;
            let total_promoted_size_4 = when(v >= 2, || r.u64("TotalPromotedSize4"))?;
            ClrEvent::GcHeapStats(GcHeapStats {
                generation_size,
                total_promoted_size,
                finalization_promoted_size,
                finalization_promoted_count,
                pinned_object_count,
                sink_block_count,
                gc_handle_count,
                clr_instance_id,
                generation_size_4,
                total_promoted_size_4,
            })
        }
        (Runtime, GC_ALLOCATION_TICK) => {
            let allocation_amount = r.u32("AllocationAmount")?;
            let allocation_kind = r.u32("AllocationKind")?;
            let clr_instance_id = when(v >= 1, || r.u16("ClrInstanceID"))?;
            let allocation_amount64 = when(v >= 2, || r.u64("AllocationAmount64"))?;
            let type_id = when(v >= 2, || r.ptr("TypeID"))?;
            let type_name = when(v >= 2, || r.string("TypeName"))?;
            let heap_index = when(v >= 2, || r.u32("HeapIndex"))?;
            let address = when(v >= 3, || r.ptr("Address"))?;
            let object_size = when(v >= 4, || r.u64("ObjectSize"))?;
            ClrEvent::GcAllocationTick(GcAllocationTick {
                allocation_amount,
                allocation_kind,
                clr_instance_id,
                allocation_amount64,
                type_id,
                type_name,
                heap_index,
                address,
                object_size,
            })
        }
        (Runtime, GC_SUSPEND_EE_START) => {
            let reason = if v >= 1 {
                r.u32("Reason")?
            } else {
                u32::from(r.u16("Reason")?)
            };
            let count = when(v >= 1, || r.u32("Count"))?;
            let clr_instance_id = when(v >= 1, || r.u16("ClrInstanceID"))?;
            ClrEvent::GcSuspendEeStart(GcSuspendEe {
                reason,
                count,
                clr_instance_id,
            })
        }
        (Runtime, GC_SUSPEND_EE_STOP) => ClrEvent::GcSuspendEeStop(clr_instance(r, v)?),
        (Runtime, GC_RESTART_EE_START) => ClrEvent::GcRestartEeStart(clr_instance(r, v)?),
        (Runtime, GC_RESTART_EE_STOP) => ClrEvent::GcRestartEeStop(clr_instance(r, v)?),
        (Runtime, EXCEPTION_THROWN) => {
            let exception_type = r.string("ExceptionType")?;
            let exception_message = r.string("ExceptionMessage")?;
            let v1 = v >= 1;
            let exception_eip = when(v1, || r.ptr("ExceptionEIP"))?;
            let exception_hresult = when(v1, || r.u32("ExceptionHRESULT"))?;
            let exception_flags = when(v1, || r.u16("ExceptionFlags"))?;
            let clr_instance_id = when(v1, || r.u16("ClrInstanceID"))?;
            ClrEvent::ExceptionThrown(ExceptionThrown {
                exception_type,
                exception_message,
                exception_eip,
                exception_hresult,
                exception_flags,
                clr_instance_id,
            })
        }
        (Runtime, CONTENTION_START) => {
            let contention_flags = r.u8("ContentionFlags")?;
            let clr_instance_id = r.u16("ClrInstanceID")?;
            let lock_id = when(v >= 2, || r.ptr("LockID"))?;
            let associated_object_id = when(v >= 2, || r.ptr("AssociatedObjectID"))?;
            let lock_owner_thread_id = when(v >= 2, || r.u64("LockOwnerThreadID"))?;
            ClrEvent::ContentionStart(ContentionStart {
                contention_flags,
                clr_instance_id,
                lock_id,
                associated_object_id,
                lock_owner_thread_id,
            })
        }
        (Runtime, CONTENTION_STOP) => {
            let contention_flags = r.u8("ContentionFlags")?;
            let clr_instance_id = r.u16("ClrInstanceID")?;
            let duration_ns = when(v >= 1, || r.f64("DurationNs"))?;
            ClrEvent::ContentionStop(ContentionStop {
                contention_flags,
                clr_instance_id,
                duration_ns,
            })
        }
        (Runtime, THREAD_POOL_ADJUSTMENT_SAMPLE) => {
            ClrEvent::ThreadPoolAdjustmentSample(ThreadPoolAdjustmentSample {
                throughput: r.f64("Throughput")?,
                clr_instance_id: r.u16("ClrInstanceID")?,
            })
        }
        (Runtime, THREAD_POOL_ADJUSTMENT_ADJUSTMENT) => {
            ClrEvent::ThreadPoolAdjustment(ThreadPoolAdjustment {
                average_throughput: r.f64("AverageThroughput")?,
                new_worker_thread_count: r.u32("NewWorkerThreadCount")?,
                reason: r.u32("Reason")?,
                clr_instance_id: r.u16("ClrInstanceID")?,
            })
        }
        (Runtime, THREAD_POOL_ADJUSTMENT_STATS) => {
            ClrEvent::ThreadPoolAdjustmentStats(ThreadPoolAdjustmentStats {
                duration: r.f64("Duration")?,
                throughput: r.f64("Throughput")?,
                thread_wave: r.f64("ThreadWave")?,
                throughput_wave: r.f64("ThroughputWave")?,
                throughput_error_estimate: r.f64("ThroughputErrorEstimate")?,
                average_throughput_error_estimate: r.f64("AverageThroughputErrorEstimate")?,
                throughput_ratio: r.f64("ThroughputRatio")?,
                confidence: r.f64("Confidence")?,
                new_control_setting: r.f64("NewControlSetting")?,
                new_thread_wave_magnitude: r.u16("NewThreadWaveMagnitude")?,
                clr_instance_id: r.u16("ClrInstanceID")?,
            })
        }
        _ => ClrEvent::Unknown(payload),
    })
}

/// [`decode()`] for an event described by `metadata` ([`ClrEvent::Unknown`] when the provider
/// is not one of [`ClrProvider`]).
pub fn decode_with<'a>(
    metadata: &MetadataRecord<'_>,
    pointer_size: u8,
    payload: &'a [u8],
) -> Result<ClrEvent<'a>, DecodeError> {
    match ClrProvider::from_name(&metadata.provider_name) {
        Some(p) => decode(
            p,
            metadata.event_id,
            metadata.version,
            pointer_size,
            payload,
        ),
        None => Ok(ClrEvent::Unknown(payload)),
    }
}
