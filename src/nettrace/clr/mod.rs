//! Built-in layouts for the CLR events that carry no self-description (runtime, rundown and
//! SampleProfiler events arrive with an empty name and no fields), with TraceEvent's names.
//!
//! [`decode()`] turns a payload into a typed, borrowed [`ClrEvent`]; events without a built-in
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

mod decode;
mod payloads;

pub use decode::{decode, decode_with};
pub use payloads::*;

use super::text::TraceStr;

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
