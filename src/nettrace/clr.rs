//! Built-in layouts for the CLR events that carry no self-description (runtime, rundown and
//! SampleProfiler events arrive with an empty name and no fields), with TraceEvent's names.
//!
//! [`decode`] turns a payload into a typed, borrowed [`ClrEvent`]; events without a built-in
//! layout come back as [`ClrEvent::Unknown`] with their raw payload. Fields added by later
//! event versions are `Option`s, `None` for earlier versions.
//!
//! ```
//! use dsipc::nettrace::clr::{self, ClrEvent, ClrProvider};
//!
//! // A SampleProfiler ThreadSample: u32 type 2 = managed code.
//! let ev = clr::decode(ClrProvider::SampleProfiler, 0, 0, 8, &[2, 0, 0, 0]).unwrap();
//! assert_eq!(ev.name(), Some("Thread/Sample"));
//! assert!(matches!(ev, ClrEvent::ThreadSample(s) if s.kind == clr::SampleKind::Managed));
//! ```

use super::metadata::MetadataRecord;
use super::text::TraceStr;
use crate::error::DecodeError;
use crate::wire::{Guid, Reader};

/// The providers whose events have built-in layouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum ClrProvider {
    /// `Microsoft-Windows-DotNETRuntime`.
    Runtime,
    /// `Microsoft-Windows-DotNETRuntimeRundown`.
    Rundown,
    /// `Microsoft-DotNETCore-SampleProfiler`.
    SampleProfiler,
}

impl ClrProvider {
    /// The provider's name.
    pub fn name(&self) -> &'static str {
        match self {
            ClrProvider::Runtime => "Microsoft-Windows-DotNETRuntime",
            ClrProvider::Rundown => "Microsoft-Windows-DotNETRuntimeRundown",
            ClrProvider::SampleProfiler => "Microsoft-DotNETCore-SampleProfiler",
        }
    }

    /// The provider with this name, if it is one of these.
    pub fn from_name(name: &TraceStr<'_>) -> Option<ClrProvider> {
        [
            ClrProvider::Runtime,
            ClrProvider::Rundown,
            ClrProvider::SampleProfiler,
        ]
        .into_iter()
        .find(|p| name.eq_str(p.name()))
    }
}

// Event ids.
/// SampleProfiler ThreadSample.
pub const THREAD_SAMPLE: u32 = 0;
/// Runtime GCStart.
pub const GC_START: u32 = 1;
/// Runtime GCEnd ("GC/Stop").
pub const GC_STOP: u32 = 2;
/// Runtime GCRestartEEEnd.
pub const GC_RESTART_EE_STOP: u32 = 3;
/// Runtime GCHeapStats.
pub const GC_HEAP_STATS: u32 = 4;
/// Runtime GCRestartEEBegin.
pub const GC_RESTART_EE_START: u32 = 7;
/// Runtime GCSuspendEEEnd.
pub const GC_SUSPEND_EE_STOP: u32 = 8;
/// Runtime GCSuspendEEBegin.
pub const GC_SUSPEND_EE_START: u32 = 9;
/// Runtime GCAllocationTick.
pub const GC_ALLOCATION_TICK: u32 = 10;
/// Runtime ThreadPoolWorkerThreadAdjustmentSample.
pub const THREAD_POOL_ADJUSTMENT_SAMPLE: u32 = 54;
/// Runtime ThreadPoolWorkerThreadAdjustmentAdjustment.
pub const THREAD_POOL_ADJUSTMENT_ADJUSTMENT: u32 = 55;
/// Runtime ThreadPoolWorkerThreadAdjustmentStats.
pub const THREAD_POOL_ADJUSTMENT_STATS: u32 = 56;
/// Runtime ExceptionThrown ("Exception/Start").
pub const EXCEPTION_THROWN: u32 = 80;
/// Runtime ContentionStart.
pub const CONTENTION_START: u32 = 81;
/// Runtime ContentionStop.
pub const CONTENTION_STOP: u32 = 91;
/// Runtime MethodLoadVerbose; rundown MethodDCStartVerbose.
pub const METHOD_LOAD_VERBOSE: u32 = 143;
/// Runtime MethodUnloadVerbose; rundown MethodDCEndVerbose.
pub const METHOD_UNLOAD_VERBOSE: u32 = 144;
/// Runtime DomainModuleLoad; rundown DomainModuleDCStart.
pub const DOMAIN_MODULE_LOAD: u32 = 151;
/// Runtime ModuleLoad; rundown DomainModuleDCEnd.
pub const MODULE_LOAD: u32 = 152;
/// Runtime ModuleUnload; rundown ModuleDCStart.
pub const MODULE_UNLOAD: u32 = 153;
/// Rundown ModuleDCEnd.
pub const MODULE_DC_STOP: u32 = 154;

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

/// A decoded CLR event. Strings are borrowed UTF-16 views.
#[derive(Debug, Clone, Copy, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ClrEvent<'a> {
    /// SampleProfiler 0, `Thread/Sample`.
    ThreadSample(ThreadSample),
    /// Runtime 143, `Method/LoadVerbose` (a method was jitted).
    MethodLoadVerbose(MethodVerbose<'a>),
    /// Runtime 144, `Method/UnloadVerbose`.
    MethodUnloadVerbose(MethodVerbose<'a>),
    /// Rundown 143, `Method/DCStartVerbose`.
    MethodDCStartVerbose(MethodVerbose<'a>),
    /// Rundown 144, `Method/DCStopVerbose` (rundown at the end of a session).
    MethodDCStopVerbose(MethodVerbose<'a>),
    /// Runtime 152, `Loader/ModuleLoad`.
    ModuleLoad(ModuleLoad<'a>),
    /// Runtime 153, `Loader/ModuleUnload`.
    ModuleUnload(ModuleLoad<'a>),
    /// Rundown 153, `Loader/ModuleDCStart`.
    ModuleDCStart(ModuleLoad<'a>),
    /// Rundown 154, `Loader/ModuleDCStop`.
    ModuleDCStop(ModuleLoad<'a>),
    /// Runtime 151, `Loader/DomainModuleLoad`.
    DomainModuleLoad(DomainModuleLoad<'a>),
    /// Rundown 151, `Loader/DomainModuleDCStart`.
    DomainModuleDCStart(DomainModuleLoad<'a>),
    /// Rundown 152, `Loader/DomainModuleDCStop`.
    DomainModuleDCStop(DomainModuleLoad<'a>),
    /// Runtime 1, `GC/Start`.
    GcStart(GcStart),
    /// Runtime 2, `GC/Stop`.
    GcStop(GcStop),
    /// Runtime 4, `GC/HeapStats`.
    GcHeapStats(GcHeapStats),
    /// Runtime 10, `GC/AllocationTick`.
    GcAllocationTick(GcAllocationTick<'a>),
    /// Runtime 9, `GC/SuspendEEStart`.
    GcSuspendEeStart(GcSuspendEe),
    /// Runtime 8, `GC/SuspendEEStop`.
    GcSuspendEeStop(ClrInstance),
    /// Runtime 7, `GC/RestartEEStart`.
    GcRestartEeStart(ClrInstance),
    /// Runtime 3, `GC/RestartEEStop`.
    GcRestartEeStop(ClrInstance),
    /// Runtime 80, `Exception/Start`.
    ExceptionThrown(ExceptionThrown<'a>),
    /// Runtime 81, `Contention/Start`.
    ContentionStart(ContentionStart),
    /// Runtime 91, `Contention/Stop`.
    ContentionStop(ContentionStop),
    /// Runtime 54, `ThreadPoolWorkerThreadAdjustment/Sample`.
    ThreadPoolAdjustmentSample(ThreadPoolAdjustmentSample),
    /// Runtime 55, `ThreadPoolWorkerThreadAdjustment/Adjustment`.
    ThreadPoolAdjustment(ThreadPoolAdjustment),
    /// Runtime 56, `ThreadPoolWorkerThreadAdjustment/Stats`.
    ThreadPoolAdjustmentStats(ThreadPoolAdjustmentStats),
    /// No built-in layout: the raw payload.
    Unknown(&'a [u8]),
}

impl<'a> ClrEvent<'a> {
    /// TraceEvent's name for the event (None for [`ClrEvent::Unknown`]).
    pub fn name(&self) -> Option<&'static str> {
        Some(match self {
            ClrEvent::ThreadSample(_) => "Thread/Sample",
            ClrEvent::MethodLoadVerbose(_) => "Method/LoadVerbose",
            ClrEvent::MethodUnloadVerbose(_) => "Method/UnloadVerbose",
            ClrEvent::MethodDCStartVerbose(_) => "Method/DCStartVerbose",
            ClrEvent::MethodDCStopVerbose(_) => "Method/DCStopVerbose",
            ClrEvent::ModuleLoad(_) => "Loader/ModuleLoad",
            ClrEvent::ModuleUnload(_) => "Loader/ModuleUnload",
            ClrEvent::ModuleDCStart(_) => "Loader/ModuleDCStart",
            ClrEvent::ModuleDCStop(_) => "Loader/ModuleDCStop",
            ClrEvent::DomainModuleLoad(_) => "Loader/DomainModuleLoad",
            ClrEvent::DomainModuleDCStart(_) => "Loader/DomainModuleDCStart",
            ClrEvent::DomainModuleDCStop(_) => "Loader/DomainModuleDCStop",
            ClrEvent::GcStart(_) => "GC/Start",
            ClrEvent::GcStop(_) => "GC/Stop",
            ClrEvent::GcHeapStats(_) => "GC/HeapStats",
            ClrEvent::GcAllocationTick(_) => "GC/AllocationTick",
            ClrEvent::GcSuspendEeStart(_) => "GC/SuspendEEStart",
            ClrEvent::GcSuspendEeStop(_) => "GC/SuspendEEStop",
            ClrEvent::GcRestartEeStart(_) => "GC/RestartEEStart",
            ClrEvent::GcRestartEeStop(_) => "GC/RestartEEStop",
            ClrEvent::ExceptionThrown(_) => "Exception/Start",
            ClrEvent::ContentionStart(_) => "Contention/Start",
            ClrEvent::ContentionStop(_) => "Contention/Stop",
            ClrEvent::ThreadPoolAdjustmentSample(_) => "ThreadPoolWorkerThreadAdjustment/Sample",
            ClrEvent::ThreadPoolAdjustment(_) => "ThreadPoolWorkerThreadAdjustment/Adjustment",
            ClrEvent::ThreadPoolAdjustmentStats(_) => "ThreadPoolWorkerThreadAdjustment/Stats",
            ClrEvent::Unknown(_) => return None,
        })
    }

    /// The method record of the four `Method/*Verbose` events.
    pub fn as_method(&self) -> Option<&MethodVerbose<'a>> {
        match self {
            ClrEvent::MethodLoadVerbose(m)
            | ClrEvent::MethodUnloadVerbose(m)
            | ClrEvent::MethodDCStartVerbose(m)
            | ClrEvent::MethodDCStopVerbose(m) => Some(m),
            _ => None,
        }
    }

    /// Module id and IL path of the module events (`Loader/Module*`, `Loader/DomainModule*`).
    pub fn as_module(&self) -> Option<(u64, TraceStr<'a>)> {
        match self {
            ClrEvent::ModuleLoad(m)
            | ClrEvent::ModuleUnload(m)
            | ClrEvent::ModuleDCStart(m)
            | ClrEvent::ModuleDCStop(m) => Some((m.module_id, m.module_il_path)),
            ClrEvent::DomainModuleLoad(m)
            | ClrEvent::DomainModuleDCStart(m)
            | ClrEvent::DomainModuleDCStop(m) => Some((m.module_id, m.module_il_path)),
            _ => None,
        }
    }
}

/// TraceEvent's name for an event id of a provider, if it has a built-in layout here
/// (names do not depend on the version).
pub fn event_name(provider: ClrProvider, event_id: u32) -> Option<&'static str> {
    use ClrProvider::*;
    Some(match (provider, event_id) {
        (SampleProfiler, THREAD_SAMPLE) => "Thread/Sample",
        (Runtime, METHOD_LOAD_VERBOSE) => "Method/LoadVerbose",
        (Runtime, METHOD_UNLOAD_VERBOSE) => "Method/UnloadVerbose",
        (Rundown, METHOD_LOAD_VERBOSE) => "Method/DCStartVerbose",
        (Rundown, METHOD_UNLOAD_VERBOSE) => "Method/DCStopVerbose",
        (Runtime, MODULE_LOAD) => "Loader/ModuleLoad",
        (Runtime, MODULE_UNLOAD) => "Loader/ModuleUnload",
        (Rundown, MODULE_UNLOAD) => "Loader/ModuleDCStart",
        (Rundown, MODULE_DC_STOP) => "Loader/ModuleDCStop",
        (Runtime, DOMAIN_MODULE_LOAD) => "Loader/DomainModuleLoad",
        (Rundown, DOMAIN_MODULE_LOAD) => "Loader/DomainModuleDCStart",
        (Rundown, MODULE_LOAD) => "Loader/DomainModuleDCStop",
        (Runtime, GC_START) => "GC/Start",
        (Runtime, GC_STOP) => "GC/Stop",
        (Runtime, GC_HEAP_STATS) => "GC/HeapStats",
        (Runtime, GC_ALLOCATION_TICK) => "GC/AllocationTick",
        (Runtime, GC_SUSPEND_EE_START) => "GC/SuspendEEStart",
        (Runtime, GC_SUSPEND_EE_STOP) => "GC/SuspendEEStop",
        (Runtime, GC_RESTART_EE_START) => "GC/RestartEEStart",
        (Runtime, GC_RESTART_EE_STOP) => "GC/RestartEEStop",
        (Runtime, EXCEPTION_THROWN) => "Exception/Start",
        (Runtime, CONTENTION_START) => "Contention/Start",
        (Runtime, CONTENTION_STOP) => "Contention/Stop",
        (Runtime, THREAD_POOL_ADJUSTMENT_SAMPLE) => "ThreadPoolWorkerThreadAdjustment/Sample",
        (Runtime, THREAD_POOL_ADJUSTMENT_ADJUSTMENT) => {
            "ThreadPoolWorkerThreadAdjustment/Adjustment"
        }
        (Runtime, THREAD_POOL_ADJUSTMENT_STATS) => "ThreadPoolWorkerThreadAdjustment/Stats",
        _ => return None,
    })
}

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
/// `pointer_size` is the trace's ([`TraceHeader::pointer_size`](super::TraceHeader)).
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

/// [`decode`] for an event described by `metadata` ([`ClrEvent::Unknown`] when the provider
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
