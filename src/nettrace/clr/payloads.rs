//! The payloads of the CLR events with built-in layouts, as typed, borrowed views.

use crate::nettrace::text::TraceStr;
use crate::wire::Guid;

/// What a SampleProfiler sample caught the thread doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SampleKind {
    /// 0: the sample failed.
    Error,
    /// 1: the thread was in native code or blocked.
    External,
    /// 2: the thread was running managed code.
    Managed,
    /// Any other value.
    Unknown(u32),
}

/// SampleProfiler event 0, `Thread/Sample`. The event's thread is the sampled thread, its
/// stack the sampled stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct ThreadSample {
    /// What the thread was doing.
    pub kind: SampleKind,
}

/// MethodLoadVerbose / MethodUnloadVerbose / MethodDCStartVerbose / MethodDCStopVerbose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct MethodVerbose<'a> {
    /// MethodID.
    pub method_id: u64,
    /// ModuleID (matches [`ModuleLoad::module_id`]).
    pub module_id: u64,
    /// Start of the method's code.
    pub method_start_address: u64,
    /// Size of the method's code in bytes: the method covers
    /// `[method_start_address, method_start_address + method_size)`.
    pub method_size: u32,
    /// Metadata token.
    pub method_token: u32,
    /// MethodFlags (bit 0 dynamic, 1 generic, 2 shared generic, 3 jitted, 4 helper, ...).
    pub method_flags: u32,
    /// Namespace (the declaring type, e.g. `System.Threading.Thread`).
    pub method_namespace: TraceStr<'a>,
    /// Name, e.g. `Sleep`.
    pub method_name: TraceStr<'a>,
    /// Signature, e.g. `void  (int32)`.
    pub method_signature: TraceStr<'a>,
    /// ClrInstanceID (version 1+).
    pub clr_instance_id: Option<u16>,
    /// ReJITID (version 2+).
    pub rejit_id: Option<u64>,
}

/// ModuleLoad / ModuleUnload / ModuleDCStart / ModuleDCStop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct ModuleLoad<'a> {
    /// ModuleID.
    pub module_id: u64,
    /// AssemblyID.
    pub assembly_id: u64,
    /// ModuleFlags.
    pub module_flags: u32,
    /// IL image path.
    pub module_il_path: TraceStr<'a>,
    /// Native image path.
    pub module_native_path: TraceStr<'a>,
    /// ClrInstanceID (version 1+).
    pub clr_instance_id: Option<u16>,
    /// Managed PDB signature (version 2+).
    pub managed_pdb_signature: Option<Guid>,
    /// Managed PDB age (version 2+).
    pub managed_pdb_age: Option<u32>,
    /// Managed PDB path (version 2+).
    pub managed_pdb_build_path: Option<TraceStr<'a>>,
    /// Native PDB signature (version 2+).
    pub native_pdb_signature: Option<Guid>,
    /// Native PDB age (version 2+).
    pub native_pdb_age: Option<u32>,
    /// Native PDB path (version 2+).
    pub native_pdb_build_path: Option<TraceStr<'a>>,
}

/// DomainModuleLoad / DomainModuleDCStart / DomainModuleDCStop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct DomainModuleLoad<'a> {
    /// ModuleID.
    pub module_id: u64,
    /// AssemblyID.
    pub assembly_id: u64,
    /// AppDomainID.
    pub app_domain_id: u64,
    /// ModuleFlags.
    pub module_flags: u32,
    /// IL image path.
    pub module_il_path: TraceStr<'a>,
    /// Native image path.
    pub module_native_path: TraceStr<'a>,
    /// ClrInstanceID (version 1+).
    pub clr_instance_id: Option<u16>,
}

/// GCStart (`GC/Start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct GcStart {
    /// The GC's number.
    pub count: u32,
    /// Generation collected (version 1+).
    pub depth: Option<u32>,
    /// Why (0 small alloc, 1 induced, 2 low memory, ...).
    pub reason: u32,
    /// 0 blocking, 1 background, 2 foreground during background (version 1+).
    pub gc_type: Option<u32>,
    /// ClrInstanceID (version 1+).
    pub clr_instance_id: Option<u16>,
    /// ClientSequenceNumber (version 2+).
    pub client_sequence_number: Option<u64>,
}

/// GCEnd (`GC/Stop`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct GcStop {
    /// The GC's number.
    pub count: u32,
    /// Generation collected.
    pub depth: u32,
    /// ClrInstanceID (version 1+).
    pub clr_instance_id: Option<u16>,
}

/// GCHeapStats (`GC/HeapStats`): sizes after a GC, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct GcHeapStats {
    /// Size of generations 0, 1, 2 and the large object heap (3).
    pub generation_size: [u64; 4],
    /// Bytes promoted out of generations 0, 1, 2 and the LOH.
    pub total_promoted_size: [u64; 4],
    /// Bytes promoted by finalization.
    pub finalization_promoted_size: u64,
    /// Objects promoted by finalization.
    pub finalization_promoted_count: u64,
    /// Pinned objects.
    pub pinned_object_count: u32,
    /// Sync blocks.
    pub sink_block_count: u32,
    /// GC handles.
    pub gc_handle_count: u32,
    /// ClrInstanceID (version 1+).
    pub clr_instance_id: Option<u16>,
    /// Pinned object heap size (version 2+).
    pub generation_size_4: Option<u64>,
    /// Bytes promoted out of the pinned object heap (version 2+).
    pub total_promoted_size_4: Option<u64>,
}

/// GCAllocationTick (`GC/AllocationTick`), about every 100 KB allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct GcAllocationTick<'a> {
    /// Bytes allocated since the last tick (32-bit; see `allocation_amount64`).
    pub allocation_amount: u32,
    /// 0 small object heap, 1 large object heap, 2 pinned object heap.
    pub allocation_kind: u32,
    /// ClrInstanceID (version 1+).
    pub clr_instance_id: Option<u16>,
    /// Bytes allocated since the last tick (version 2+).
    pub allocation_amount64: Option<u64>,
    /// TypeID of the last object allocated (version 2+).
    pub type_id: Option<u64>,
    /// Its type name (version 2+).
    pub type_name: Option<TraceStr<'a>>,
    /// Heap index (version 2+).
    pub heap_index: Option<u32>,
    /// Address of the object (version 3+).
    pub address: Option<u64>,
    /// Size of the object (version 4+).
    pub object_size: Option<u64>,
}

/// GCSuspendEEBegin (`GC/SuspendEEStart`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct GcSuspendEe {
    /// Why (1 for GC, ...).
    pub reason: u32,
    /// The GC's number (version 1+).
    pub count: Option<u32>,
    /// ClrInstanceID (version 1+).
    pub clr_instance_id: Option<u16>,
}

/// Events whose only field is ClrInstanceID (GC/SuspendEEStop, GC/RestartEEStart,
/// GC/RestartEEStop).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct ClrInstance {
    /// ClrInstanceID (version 1+).
    pub clr_instance_id: Option<u16>,
}

/// ExceptionThrown (`Exception/Start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct ExceptionThrown<'a> {
    /// Exception type name.
    pub exception_type: TraceStr<'a>,
    /// Message.
    pub exception_message: TraceStr<'a>,
    /// Instruction pointer of the throw (version 1+).
    pub exception_eip: Option<u64>,
    /// HRESULT (version 1+).
    pub exception_hresult: Option<u32>,
    /// Flags (version 1+).
    pub exception_flags: Option<u16>,
    /// ClrInstanceID (version 1+).
    pub clr_instance_id: Option<u16>,
}

/// ContentionStart (`Contention/Start`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct ContentionStart {
    /// 0 managed, 1 native.
    pub contention_flags: u8,
    /// ClrInstanceID.
    pub clr_instance_id: u16,
    /// The lock (version 2+, .NET 8).
    pub lock_id: Option<u64>,
    /// The object locked on (version 2+).
    pub associated_object_id: Option<u64>,
    /// The owner's thread id (version 2+).
    pub lock_owner_thread_id: Option<u64>,
}

/// ContentionStop (`Contention/Stop`).
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct ContentionStop {
    /// 0 managed, 1 native.
    pub contention_flags: u8,
    /// ClrInstanceID.
    pub clr_instance_id: u16,
    /// Time waited in ns (version 1+).
    pub duration_ns: Option<f64>,
}

/// ThreadPoolWorkerThreadAdjustmentSample (`ThreadPoolWorkerThreadAdjustment/Sample`).
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct ThreadPoolAdjustmentSample {
    /// Completions per second.
    pub throughput: f64,
    /// ClrInstanceID.
    pub clr_instance_id: u16,
}

/// ThreadPoolWorkerThreadAdjustmentAdjustment (`ThreadPoolWorkerThreadAdjustment/Adjustment`).
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct ThreadPoolAdjustment {
    /// Average throughput.
    pub average_throughput: f64,
    /// The new worker thread count.
    pub new_worker_thread_count: u32,
    /// 0 warmup, 1 initializing, 2 random move, 3 climbing move, 4 change point, 5
    /// stabilizing, 6 starvation, 7 thread timed out.
    pub reason: u32,
    /// ClrInstanceID.
    pub clr_instance_id: u16,
}

/// ThreadPoolWorkerThreadAdjustmentStats (`ThreadPoolWorkerThreadAdjustment/Stats`).
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub struct ThreadPoolAdjustmentStats {
    /// Duration.
    pub duration: f64,
    /// Throughput.
    pub throughput: f64,
    /// ThreadWave.
    pub thread_wave: f64,
    /// ThroughputWave.
    pub throughput_wave: f64,
    /// ThroughputErrorEstimate.
    pub throughput_error_estimate: f64,
    /// AverageThroughputErrorEstimate.
    pub average_throughput_error_estimate: f64,
    /// ThroughputRatio.
    pub throughput_ratio: f64,
    /// Confidence.
    pub confidence: f64,
    /// NewControlSetting.
    pub new_control_setting: f64,
    /// NewThreadWaveMagnitude.
    pub new_thread_wave_magnitude: u16,
    /// ClrInstanceID.
    pub clr_instance_id: u16,
}
