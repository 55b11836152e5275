//! One pass over a trace's items: metadata, symbols, samples and lost events together.

use dsipc::nettrace::clr::{self, ClrProvider};
use std::sync::Arc;

use dsipc::nettrace::{Event, Item, KeyValues, TraceHeader};

use super::dispatch::{EventInfo, TraceContext, TraceSink};
use super::lost::LostEvents;
use super::metadata::{EventMetadata, MetadataTable};
use super::profile::{LimitExceeded, Profile, ProfileBuilder, ProfileLimits, SampleKind};
use super::stacks::StackSnapshot;
use super::symbols::MethodRecord;

/// What the trace header said: the header without its V6 key/value pairs (the only part
/// that borrows the stream).
pub type TraceInfo = TraceHeader<'static>;

/// What an event is to the analysis, from its metadata record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// A SampleProfiler thread sample.
    Sample,
    /// A runtime or rundown event that may carry a method or a module record.
    Symbols(ClrProvider),
    Other,
}

impl Role {
    /// The role of the events `info` describes.
    pub(crate) fn of(info: &EventInfo) -> Role {
        Role::of_event(info.clr, info.meta.event_id)
    }

    /// The role of the event `event_id` of `clr` (a runtime provider, or `None`).
    pub(crate) fn of_event(clr: Option<ClrProvider>, event_id: u32) -> Role {
        match clr {
            Some(ClrProvider::SampleProfiler) if event_id == clr::THREAD_SAMPLE => Role::Sample,
            Some(p @ (ClrProvider::Runtime | ClrProvider::Rundown))
                if (143..=154).contains(&event_id) =>
            {
                Role::Symbols(p)
            }
            _ => Role::Other,
        }
    }
}

/// Small, so that the table's hot part (role and count) is dense.
struct Entry {
    role: Role,
    events: u64,
    /// Shared with the other sinks of a [`TraceDispatcher`](crate::TraceDispatcher).
    meta: Arc<EventInfo>,
}

/// Bounds on what an analysis keeps (see [`ProfileLimits`] for the profile's): past one, the
/// analyzer stops taking what would grow and reports it ([`TraceAnalyzer::limit_error`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnalyzerLimits {
    /// Distinct metadata records held (default 100,000; runtimes write a few thousand).
    pub max_metadata: usize,
    /// The profile's limits.
    pub profile: ProfileLimits,
}

impl Default for AnalyzerLimits {
    fn default() -> Self {
        AnalyzerLimits {
            max_metadata: 100_000,
            profile: ProfileLimits::default(),
        }
    }
}

/// Per-provider event counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderCount {
    /// Provider name.
    pub provider: String,
    /// Events seen.
    pub events: u64,
}

/// Consumes the items of [`dsipc::nettrace::NettraceParser`] in stream order and keeps what a
/// profile or a summary needs: the [metadata](EventMetadata) by id, method and module
/// symbols, SampleProfiler samples ([`ProfileBuilder`]) and lost events ([`LostEvents`]).
/// Works the same on a live session's stream and on a file. Memory: distinct metadata,
/// methods, modules, stacks and threads; no event is kept.
#[derive(Default)]
pub struct TraceAnalyzer {
    limits: AnalyzerLimits,
    metadata_limit: Option<LimitExceeded>,
    info: Option<TraceInfo>,
    metadata: MetadataTable<Entry>,
    profile: ProfileBuilder,
    lost: LostEvents,
    events: u64,
    unknown_metadata: u64,
    bad_payloads: u64,
    rundown_skipped: u64,
}

impl TraceAnalyzer {
    /// A fresh analyzer.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fresh analyzer with these limits.
    pub fn with_limits(limits: AnalyzerLimits) -> Self {
        TraceAnalyzer {
            limits,
            profile: ProfileBuilder::with_limits(limits.profile),
            ..Self::default()
        }
    }

    /// The first limit the trace went past, if any: what came after it was not all taken
    /// into account (the caller should say so, naming the limit).
    pub fn limit_error(&self) -> Option<LimitExceeded> {
        self.metadata_limit.or_else(|| self.profile.limit_error())
    }

    /// Feeds one item. For an event, returns its metadata (None if its metadata id was never
    /// defined).
    #[inline]
    pub fn on_item(&mut self, item: &Item<'_>) -> Option<&EventMetadata> {
        // Events are nearly every item: their path is short and inlined, the rest is not.
        match item {
            Item::Event(e) => self.on_event(e),
            other => {
                self.on_other(other);
                None
            }
        }
    }

    #[inline(never)]
    fn on_other(&mut self, item: &Item<'_>) {
        match item {
            Item::Trace(h) => self.on_header(h),
            Item::Metadata(m) => {
                // The parser validated the record: it decodes.
                if let Ok(m) = m.record() {
                    self.define(m.metadata_id, || Arc::new(EventInfo::from_record(&m)));
                }
            }
            Item::Stacks(b) => {
                for s in b.iter() {
                    self.profile.on_stack(s.id, s.ips());
                }
            }
            Item::SequencePoint(sp) => {
                self.profile.on_sequence_point();
                for t in sp.threads() {
                    self.lost.on_sequence_point(t.thread_id, t.sequence_number);
                }
                if sp.flushes_metadata() {
                    self.metadata.clear();
                }
            }
            _ => {}
        }
    }

    /// Defines `id` as the record `info` gives, within the metadata limit.
    fn define(&mut self, id: u32, info: impl FnOnce() -> Arc<EventInfo>) {
        if !self.metadata.has_room_for(id, self.limits.max_metadata) {
            self.metadata_limit = Some(LimitExceeded::MetadataRecords {
                limit: self.limits.max_metadata,
            });
            return;
        }
        let meta = info();
        let role = Role::of(&meta);
        self.metadata.insert(
            id,
            Entry {
                meta,
                role,
                events: 0,
            },
        );
    }

    fn on_header(&mut self, h: &TraceHeader<'_>) {
        self.info = Some(TraceInfo {
            key_values: KeyValues::EMPTY,
            ..*h
        });
    }

    #[inline]
    fn on_event(&mut self, e: &Event<'_>) -> Option<&EventMetadata> {
        self.events += 1;
        self.lost.on_event(e.capture_thread_id, e.sequence_number);
        let i = match self.metadata.slot(e.metadata_id) {
            Some(i) => i,
            None => {
                self.unknown_metadata += 1;
                return None;
            }
        };
        let entry = self.metadata.at_mut(i);
        entry.events += 1;
        match entry.role {
            Role::Sample => {
                let kind = if e.payload.len() >= 4 {
                    SampleKind::from_payload(u32::from_le_bytes([
                        e.payload[0],
                        e.payload[1],
                        e.payload[2],
                        e.payload[3],
                    ]))
                } else {
                    SampleKind::Error
                };
                self.profile
                    .on_sample(e.thread_id, e.stack_id, kind, e.timestamp);
            }
            Role::Symbols(p) => self.on_symbols(p, i, e),
            Role::Other => {}
        }
        Some(&self.metadata.at(i).meta.meta)
    }

    /// A runtime or rundown event that may name a method or a module.
    #[inline(never)]
    fn on_symbols(&mut self, p: ClrProvider, i: usize, e: &Event<'_>) {
        let pointer_size = match &self.info {
            Some(info) => info.pointer_size,
            None => 8,
        };
        let m = &self.metadata.at(i).meta.meta;
        // Most rundown records name methods no sample hit. Their fixed head (MethodID u64,
        // ModuleID u64, MethodStartAddress u64, MethodSize u32) tells the range: skip those
        // before the full decode (which scans three strings).
        if p == ClrProvider::Rundown
            && (m.event_id == clr::METHOD_LOAD_VERBOSE || m.event_id == clr::METHOD_UNLOAD_VERBOSE)
            && e.payload.len() >= 28
        {
            let mut a = [0u8; 8];
            a.copy_from_slice(&e.payload[16..24]);
            let start = u64::from_le_bytes(a);
            let size =
                u32::from_le_bytes([e.payload[24], e.payload[25], e.payload[26], e.payload[27]]);
            if !self
                .profile
                .is_sampled(start, start.saturating_add(u64::from(size)))
            {
                self.rundown_skipped += 1;
                return;
            }
        }
        match clr::decode(p, m.event_id, m.version, pointer_size, e.payload) {
            Ok(ev) => {
                // Load, unload and rundown records all name a code range. The rundown comes
                // after the samples: keep only methods they hit.
                if let Some(mv) = ev.as_method() {
                    let end = mv
                        .method_start_address
                        .saturating_add(u64::from(mv.method_size));
                    if p == ClrProvider::Rundown
                        && !self.profile.is_sampled(mv.method_start_address, end)
                    {
                        self.rundown_skipped += 1;
                        return;
                    }
                    self.profile.symbols_mut().add_method(&MethodRecord {
                        method_id: mv.method_id,
                        module_id: mv.module_id,
                        start: mv.method_start_address,
                        size: mv.method_size,
                        token: mv.method_token,
                        namespace: mv.method_namespace.as_bytes(),
                        name: mv.method_name.as_bytes(),
                        signature: mv.method_signature.as_bytes(),
                    });
                } else if let Some((id, path)) = ev.as_module() {
                    if !self.profile.symbols().has_module(id) {
                        self.profile.symbols_mut().add_module(id, &path.to_string());
                    }
                }
            }
            Err(_) => self.bad_payloads += 1,
        }
    }

    /// The trace header, once seen.
    pub fn info(&self) -> Option<&TraceInfo> {
        self.info.as_ref()
    }

    /// Events seen (metadata records excluded).
    pub fn events(&self) -> u64 {
        self.events
    }

    /// Events whose metadata id was never defined.
    pub fn unknown_metadata_events(&self) -> u64 {
        self.unknown_metadata
    }

    /// Runtime events whose built-in layout did not fit their payload.
    pub fn bad_payloads(&self) -> u64 {
        self.bad_payloads
    }

    /// Rundown method records dropped because no sampled address lies in them.
    pub fn rundown_methods_skipped(&self) -> u64 {
        self.rundown_skipped
    }

    /// Events lost (sequence-number gaps).
    pub fn lost_events(&self) -> u64 {
        self.lost.lost()
    }

    /// SampleProfiler samples seen.
    pub fn samples(&self) -> u64 {
        self.profile.samples()
    }

    /// Methods in the symbol table.
    pub fn methods(&self) -> usize {
        self.profile.symbols().methods()
    }

    /// Metadata records held.
    pub fn metadata_records(&self) -> usize {
        self.metadata.len()
    }

    /// Events per provider, sorted by provider name.
    pub fn provider_counts(&self) -> Vec<ProviderCount> {
        let mut by: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
        for e in self.metadata.values() {
            *by.entry(e.meta.meta.provider.as_str()).or_insert(0) += e.events;
        }
        by.into_iter()
            .map(|(p, n)| ProviderCount {
                provider: p.to_string(),
                events: n,
            })
            .collect()
    }

    /// Threads sampled so far.
    pub fn sampled_threads(&self) -> usize {
        self.profile.sampled_threads()
    }

    /// The most samples one thread has so far (see [`ProfileBuilder::max_thread_samples`]:
    /// 2 means every thread has been sampled).
    pub fn max_thread_samples(&self) -> u64 {
        self.profile.max_thread_samples()
    }

    /// Resolves every thread's latest sample (see [`StackSnapshot`]).
    pub fn finish_stacks(self) -> StackSnapshot {
        StackSnapshot::from_profile(self.profile)
    }

    /// Resolves the samples' frames and returns the profile (see [`ProfileBuilder::finish`]).
    pub fn finish_profile(self, managed_only: bool) -> Profile {
        self.profile.finish(managed_only)
    }
}

/// The profile (symbols, samples, lost events, counts) as one sink of a
/// [`TraceDispatcher`](crate::TraceDispatcher): the records come decoded from the shared
/// table.
impl TraceSink for TraceAnalyzer {
    #[inline]
    fn event(&mut self, e: &Event<'_>, _: Option<&EventInfo>, _: &TraceContext<'_>) {
        self.on_event(e);
    }

    fn item(&mut self, item: &Item<'_>, cx: &TraceContext<'_>) {
        match item {
            Item::Metadata(m) => match cx.metadata().get(m.metadata_id) {
                Some(info) => self.define(m.metadata_id, || Arc::clone(info)),
                // The shared table is full.
                None => {
                    self.metadata_limit = Some(LimitExceeded::MetadataRecords {
                        limit: cx.max_metadata().min(self.limits.max_metadata),
                    })
                }
            },
            other => self.on_other(other),
        }
    }
}
