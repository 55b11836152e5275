//! The sample-profile builder: SampleProfiler samples per thread over an interned stack table.

use std::collections::hash_map::RandomState;
use std::collections::BTreeSet;
use std::fmt;
use std::hash::{BuildHasher, Hasher};

use super::hash::FxHashMap;
use super::stack_table::StackTable;
use super::symbols::{SymbolTable, UNRESOLVED_FRAME};

/// What the thread was doing when sampled (SampleProfiler's `u32` payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SampleKind {
    /// 0: the runtime failed to take the sample.
    Error,
    /// 1: the thread was in native code or blocked.
    External,
    /// 2: the thread was running managed code.
    Managed,
    /// Any other value.
    Unknown(u32),
}

impl SampleKind {
    /// The SampleProfiler payload value of this kind ([`SampleKind::from_payload`]'s
    /// inverse).
    fn payload(self) -> u32 {
        match self {
            SampleKind::Error => 0,
            SampleKind::External => 1,
            SampleKind::Managed => 2,
            SampleKind::Unknown(v) => v,
        }
    }

    /// The kind for a SampleProfiler payload value.
    pub fn from_payload(v: u32) -> Self {
        match v {
            0 => SampleKind::Error,
            1 => SampleKind::External,
            2 => SampleKind::Managed,
            other => SampleKind::Unknown(other),
        }
    }
}

/// Samples of one thread on one stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadSamples {
    /// Index into [`Profile::stacks`].
    pub stack: u32,
    /// Managed or external.
    pub kind: SampleKind,
    /// How many samples.
    pub count: u64,
}

/// The samples of one thread.
#[derive(Debug, Clone)]
pub struct ThreadProfile {
    /// The sampled thread's id.
    pub thread_id: u64,
    /// Timestamp (trace ticks) of its first sample.
    pub first_timestamp: i64,
    /// Timestamp (trace ticks) of its last sample.
    pub last_timestamp: i64,
    /// Sample counts by stack and kind.
    pub samples: Vec<ThreadSamples>,
}

impl ThreadProfile {
    /// Total samples of this thread.
    pub fn total(&self) -> u64 {
        self.samples.iter().map(|s| s.count).sum()
    }
}

/// A finished, resolved profile.
#[derive(Debug, Clone, Default)]
pub struct Profile {
    /// Frame names (`Module!Namespace.Method(args)`, or [`UNRESOLVED_FRAME`]).
    pub frames: Vec<String>,
    /// Stacks as frame indexes, leaf first.
    pub stacks: StackTable,
    /// Threads in order of their first sample.
    pub threads: Vec<ThreadProfile>,
    /// Distinct instruction pointers sampled stacks hold.
    pub distinct_ips: usize,
    /// Those no method covered.
    pub unresolved_ips: usize,
}

impl Profile {
    /// Total samples over all threads.
    pub fn total_samples(&self) -> u64 {
        self.threads.iter().map(|t| t.total()).sum()
    }

    /// What the profile holds, in one line: `N samples, N stacks, N frames (N of N
    /// addresses unresolved)` (what `dsipc convert` and `dsipc trace --format` say of it).
    pub fn summary(&self) -> String {
        format!(
            "{} samples, {} stacks, {} frames ({} of {} addresses unresolved)",
            self.total_samples(),
            self.stacks.len(),
            self.frames.len(),
            self.unresolved_ips,
            self.distinct_ips
        )
    }
}

struct ThreadState {
    thread_id: u64,
    first: i64,
    last: i64,
    samples: u64,
    // The interned stack and kind of the latest sample (the greatest timestamp; the later
    // of two with the same one).
    last_stack: u32,
    last_kind: SampleKind,
    // Its counters of managed and of external samples by interned stack: 4 bytes a
    // counter (a thread's table grows alone, so no table of every thread's counters is
    // ever copied whole). The other kinds (a failed sample, a value no runtime writes)
    // by their payload value and stack (`payload << 32 | stack`): 12 bytes a counter.
    // The multiples of 2^32 of a counter that went past u32::MAX are in the builder's
    // `counts`.
    managed: FxHashMap<u32, u32>,
    external: FxHashMap<u32, u32>,
    other: FxHashMap<u64, u32>,
}

/// A thread's latest sample with its stack's instruction pointers (leaf first), for
/// [`crate::StackSnapshot`].
pub(crate) struct LastSample {
    pub thread_id: u64,
    pub timestamp: i64,
    pub kind: SampleKind,
    pub samples: u64,
    pub ips: Vec<u64>,
}

const NOT_INTERNED: u32 = u32::MAX;

/// Bounds on what a profile keeps, so that no input makes memory grow faster than the
/// stream: past one, the builder stops taking samples and says which
/// ([`ProfileBuilder::limit_error`]). The defaults are far above what real runtimes write
/// (EventPipe walks at most 100 frames per stack).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProfileLimits {
    /// Frames in one stack (default 4096).
    pub max_stack_frames: usize,
    /// Distinct sampled threads (default 100,000).
    pub max_threads: usize,
}

impl Default for ProfileLimits {
    fn default() -> Self {
        ProfileLimits {
            max_stack_frames: 4096,
            max_threads: 100_000,
        }
    }
}

/// A [limit](ProfileLimits) a trace went past.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimitExceeded {
    /// A stack with more frames than `limit`.
    StackFrames {
        /// Frames the stack has.
        frames: usize,
        /// The limit.
        limit: usize,
    },
    /// More sampled threads than `limit`.
    Threads {
        /// The limit.
        limit: usize,
    },
    /// More metadata records than `limit`.
    MetadataRecords {
        /// The limit.
        limit: usize,
    },
}

impl fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LimitExceeded::StackFrames { frames, limit } => write!(
                f,
                "a stack of {} frames, more than the limit of {} (--max-stack-frames)",
                frames, limit
            ),
            LimitExceeded::Threads { limit } => write!(
                f,
                "more than {} sampled threads, the limit (--max-threads)",
                limit
            ),
            LimitExceeded::MetadataRecords { limit } => write!(
                f,
                "more than {} metadata records, the limit (--max-metadata)",
                limit
            ),
        }
    }
}

impl std::error::Error for LimitExceeded {}

/// Builds a [`Profile`] from stack blocks, sequence points and SampleProfiler events.
///
/// Stack ids are only valid within their sequence-point window: the builder interns each
/// stack as it comes into a compact, deduplicated stack table, and the window maps its ids
/// to interned stacks (dropped at the next sequence point); a sample marks its stack
/// sampled (only sampled stacks' addresses count for [`is_sampled`](Self::is_sampled) and
/// make the profile).
/// Samples are counted per (thread, stack, kind). Instruction pointers are resolved when the
/// profile is finished (the rundown, which names most methods, arrives last). Memory: the
/// current window, distinct stacks, threads and methods; never the number of samples.
#[derive(Default)]
pub struct ProfileBuilder {
    symbols: SymbolTable,
    limits: ProfileLimits,
    limit_error: Option<LimitExceeded>,
    // The current window's stacks with consecutive ids (as runtimes write them): id -
    // window_base -> its interned stack. Interned as they come, so the window holds 4 bytes
    // a stack, not a second copy of its addresses (a window without sequence points is as
    // large as the stream's stacks).
    window_base: u32,
    window_ids: Vec<u32>,
    // Stacks whose id does not follow (a gap or an id below the base): by id, so that a
    // hostile id never allocates room for the ids in between.
    window_far: FxHashMap<u32, u32>,
    // A stack's addresses while it is read.
    scratch: Vec<u64>,
    // The interned stack table (leaf first), and whether a sample used each stack.
    stack_ips: Vec<u64>,
    stack_spans: Vec<(u32, u32)>,
    stack_sampled: Vec<bool>,
    sampled_stacks: usize,
    // The interned stacks by content: open addressing over their indexes (NOT_INTERNED:
    // free), at most half full, so 8 to 16 bytes a stack where a map from hash to index
    // with collision chains took 24 to 44. Hashed with a key of this builder's own
    // (std's RandomState), so that no set of stacks can be crafted to collide and make
    // interning quadratic.
    stack_slots: Vec<u32>,
    stack_hasher: RandomState,
    threads: Vec<ThreadState>,
    thread_index: FxHashMap<u64, u32>,
    // The multiples of 2^32 of the threads' counters (see ThreadState). A table of every
    // (thread, stack, kind) took 24 bytes a counter, up to 75 with its free room and its
    // copy while it grew: 150 MiB for 2 million pairs of threads and stacks sampled once,
    // a stream of 16 MB.
    counts: FxHashMap<(u32, u32, SampleKind), u64>,
    samples: u64,
    max_thread_samples: u64,
    // Distinct instruction pointers of the interned stacks (the rundown asks about ranges).
    sampled_ips: BTreeSet<u64>,
}

/// Counts one more sample at `key` in `table`: the new count, 0 when it went past
/// u32::MAX (the caller keeps the 2^32).
fn count<K: std::hash::Hash + Eq>(table: &mut FxHashMap<K, u32>, key: K) -> u32 {
    // A lookup first (a sample mostly finds its counter): `entry` would check the table's
    // room on every call.
    match table.get_mut(&key) {
        Some(n) => {
            *n = n.wrapping_add(1);
            *n
        }
        None => {
            table.insert(key, 1);
            1
        }
    }
}

impl ProfileBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty builder with these limits.
    pub fn with_limits(limits: ProfileLimits) -> Self {
        ProfileBuilder {
            limits,
            ..Self::default()
        }
    }

    /// The limit the trace went past, if any (samples after it were not counted).
    pub fn limit_error(&self) -> Option<LimitExceeded> {
        self.limit_error
    }

    /// The symbol table (feed it methods and modules).
    pub fn symbols_mut(&mut self) -> &mut SymbolTable {
        &mut self.symbols
    }

    /// The symbol table.
    pub fn symbols(&self) -> &SymbolTable {
        &self.symbols
    }

    /// One stack of a stack block: `id` and its instruction pointers, leaf first.
    pub fn on_stack(&mut self, id: u32, ips: impl IntoIterator<Item = u64>) {
        if self.limit_error.is_some() {
            return;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        // Kept up to one past the limit; the rest only counted (for the error).
        let mut ips = ips.into_iter();
        scratch.extend(ips.by_ref().take(self.limits.max_stack_frames + 1));
        if scratch.len() > self.limits.max_stack_frames {
            self.limit_error = Some(LimitExceeded::StackFrames {
                frames: scratch.len() + ips.count(),
                limit: self.limits.max_stack_frames,
            });
            self.scratch = scratch;
            return;
        }
        let stack = self.intern(&scratch);
        self.scratch = scratch;
        if self.window_ids.is_empty() && self.window_far.is_empty() {
            self.window_base = id;
        }
        match id.checked_sub(self.window_base) {
            Some(i) if (i as usize) < self.window_ids.len() => self.window_ids[i as usize] = stack,
            Some(i) if i as usize == self.window_ids.len() => self.window_ids.push(stack),
            _ => {
                self.window_far.insert(id, stack);
            }
        }
    }

    /// A sequence point: the stack ids of the window end here.
    pub fn on_sequence_point(&mut self) {
        self.window_ids.clear();
        self.window_far.clear();
    }

    fn stack_hash(&self, ips: &[u64]) -> u64 {
        let mut h = self.stack_hasher.build_hasher();
        for &ip in ips {
            h.write_u64(ip);
        }
        h.write_usize(ips.len());
        h.finish()
    }

    /// The slot of `ips` in `stack_slots`: the one holding it, or the free one it goes to.
    fn stack_slot(&self, ips: &[u64]) -> usize {
        let mask = self.stack_slots.len() - 1;
        let mut i = self.stack_hash(ips) as usize & mask;
        loop {
            let c = self.stack_slots[i];
            if c == NOT_INTERNED {
                return i;
            }
            let (a, b) = self.stack_spans[c as usize];
            if &self.stack_ips[a as usize..b as usize] == ips {
                return i;
            }
            i = (i + 1) & mask;
        }
    }

    /// Doubles `stack_slots` (at least 64) and places every interned stack again.
    fn grow_stack_slots(&mut self) {
        let size = (self.stack_slots.len() * 2).max(64);
        self.stack_slots = vec![NOT_INTERNED; size];
        for id in 0..self.stack_spans.len() {
            let (a, b) = self.stack_spans[id];
            let mut i =
                self.stack_hash(&self.stack_ips[a as usize..b as usize]) as usize & (size - 1);
            while self.stack_slots[i] != NOT_INTERNED {
                i = (i + 1) & (size - 1);
            }
            self.stack_slots[i] = id as u32;
        }
    }

    fn intern(&mut self, ips: &[u64]) -> u32 {
        if (self.stack_spans.len() + 1) * 2 > self.stack_slots.len() {
            self.grow_stack_slots();
        }
        let slot = self.stack_slot(ips);
        if self.stack_slots[slot] != NOT_INTERNED {
            return self.stack_slots[slot];
        }
        let id = self.stack_spans.len() as u32;
        let a = self.stack_ips.len() as u32;
        self.stack_ips.extend_from_slice(ips);
        self.stack_spans.push((a, self.stack_ips.len() as u32));
        self.stack_slots[slot] = id;
        self.stack_sampled.push(false);
        id
    }

    /// Notes that a sample used interned stack `s` (its addresses then count as sampled).
    fn mark_sampled(&mut self, s: u32) {
        if !self.stack_sampled[s as usize] {
            self.stack_sampled[s as usize] = true;
            self.sampled_stacks += 1;
            let (a, b) = self.stack_spans[s as usize];
            self.sampled_ips
                .extend(self.stack_ips[a as usize..b as usize].iter().copied());
        }
    }

    /// The interned stack for window stack `id` (an unknown id or 0 is the empty stack),
    /// marked sampled.
    fn window_stack(&mut self, id: u32) -> u32 {
        let found = match id.checked_sub(self.window_base) {
            _ if id == 0 => None,
            Some(i) if (i as usize) < self.window_ids.len() => Some(self.window_ids[i as usize]),
            _ => self.window_far.get(&id).copied(),
        };
        let stack = match found {
            Some(s) => s,
            None => self.intern(&[]),
        };
        self.mark_sampled(stack);
        stack
    }

    /// A SampleProfiler sample of `thread` on window stack `stack_id` at `timestamp`.
    pub fn on_sample(&mut self, thread: u64, stack_id: u32, kind: SampleKind, timestamp: i64) {
        if self.limit_error.is_some() {
            return;
        }
        let t = match self.thread_index.get(&thread) {
            Some(&t) => t,
            None => {
                if self.threads.len() >= self.limits.max_threads {
                    self.limit_error = Some(LimitExceeded::Threads {
                        limit: self.limits.max_threads,
                    });
                    return;
                }
                let t = self.threads.len() as u32;
                self.threads.push(ThreadState {
                    thread_id: thread,
                    first: timestamp,
                    last: timestamp,
                    samples: 0,
                    last_stack: NOT_INTERNED,
                    last_kind: kind,
                    managed: FxHashMap::default(),
                    external: FxHashMap::default(),
                    other: FxHashMap::default(),
                });
                self.thread_index.insert(thread, t);
                t
            }
        };
        let stack = self.window_stack(stack_id);
        self.samples += 1;
        let state = &mut self.threads[t as usize];
        state.first = state.first.min(timestamp);
        if timestamp >= state.last || state.last_stack == NOT_INTERNED {
            state.last_stack = stack;
            state.last_kind = kind;
        }
        state.last = state.last.max(timestamp);
        state.samples += 1;
        self.max_thread_samples = self.max_thread_samples.max(state.samples);
        let n = match kind {
            SampleKind::Managed => count(&mut state.managed, stack),
            SampleKind::External => count(&mut state.external, stack),
            _ => count(
                &mut state.other,
                u64::from(kind.payload()) << 32 | u64::from(stack),
            ),
        };
        // Past u32::MAX: 2^32 more in the builder's table, the thread's counter at 0.
        if n == 0 {
            let spill = 1 << 32;
            match self.counts.get_mut(&(t, stack, kind)) {
                Some(n) => *n += spill,
                None => {
                    self.counts.insert((t, stack, kind), spill);
                }
            }
        }
    }

    /// True if an instruction pointer of a sampled stack lies in `[start, end)`: a method
    /// record no sample hit need not be kept. Logarithmic in the sampled addresses, however
    /// samples and method records interleave.
    pub fn is_sampled(&mut self, start: u64, end: u64) -> bool {
        start < end && self.sampled_ips.range(start..end).next().is_some()
    }

    /// Samples seen so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Threads sampled so far.
    pub fn sampled_threads(&self) -> usize {
        self.threads.len()
    }

    /// The most samples one thread has so far. The sampler goes round every managed thread
    /// in turn, writing their samples in order: once one thread has two, every thread
    /// there was has one.
    pub fn max_thread_samples(&self) -> u64 {
        self.max_thread_samples
    }

    /// The symbol table and every thread's latest sample, in order of the threads' first
    /// samples (for [`crate::StackSnapshot`], which resolves them).
    pub(crate) fn into_last_samples(self) -> (SymbolTable, Vec<LastSample>) {
        let stack_ips = &self.stack_ips;
        let stack_spans = &self.stack_spans;
        let last = self
            .threads
            .iter()
            .filter(|t| t.last_stack != NOT_INTERNED)
            .map(|t| {
                let (a, b) = stack_spans[t.last_stack as usize];
                LastSample {
                    thread_id: t.thread_id,
                    timestamp: t.last,
                    kind: t.last_kind,
                    samples: t.samples,
                    ips: stack_ips[a as usize..b as usize].to_vec(),
                }
            })
            .collect();
        (self.symbols, last)
    }

    /// Distinct stacks sampled so far.
    pub fn distinct_stacks(&self) -> usize {
        self.sampled_stacks
    }

    /// Resolves every sampled instruction pointer and returns the profile. With
    /// `managed_only`, samples taken in native code or while blocked are dropped.
    pub fn finish(self, managed_only: bool) -> Profile {
        // What the profile is made of; the rest (the last window, which without sequence
        // points is as large as the stream's stacks, and the interning indexes) is freed
        // before the profile grows.
        let ProfileBuilder {
            symbols,
            stack_ips,
            stack_spans,
            threads,
            counts,
            sampled_ips,
            window_ids,
            window_far,
            stack_slots,
            stack_sampled,
            thread_index,
            ..
        } = self;
        drop((
            window_ids,
            window_far,
            stack_slots,
            stack_sampled,
            thread_index,
        ));
        // The counters, per thread (in order of the threads' first samples), read straight
        // into each thread's samples, with room for exactly what it has: the counters' table
        // is freed once read, and no other copy of them is made.
        let keeps = |kind: SampleKind| !managed_only || kind == SampleKind::Managed;
        let mut counts = counts;
        let mut threads = threads;
        let mut per_thread: Vec<Vec<ThreadSamples>> = Vec::with_capacity(threads.len());
        // Each thread's tables are freed as they are read.
        for (t, state) in threads.iter_mut().enumerate() {
            let managed = std::mem::take(&mut state.managed);
            let external = std::mem::take(&mut state.external);
            let other = std::mem::take(&mut state.other);
            let mut samples = Vec::with_capacity(
                managed.len()
                    + if managed_only {
                        0
                    } else {
                        external.len() + other.len()
                    },
            );
            let mut add = |stack: u32, kind: SampleKind, n: u32| {
                if keeps(kind) {
                    let high = counts.remove(&(t as u32, stack, kind)).unwrap_or(0);
                    samples.push(ThreadSamples {
                        stack,
                        kind,
                        count: high + u64::from(n),
                    });
                }
            };
            for (stack, n) in managed {
                add(stack, SampleKind::Managed, n);
            }
            for (stack, n) in external {
                add(stack, SampleKind::External, n);
            }
            for (key, n) in other {
                add(key as u32, SampleKind::from_payload((key >> 32) as u32), n);
            }
            per_thread.push(samples);
        }
        drop(counts);
        let threads = threads;
        let mut profile = Profile::default();
        // Interned stack -> profile stack (only stacks kept samples use).
        let mut stack_map: Vec<u32> = vec![NOT_INTERNED; stack_spans.len()];
        // Every sampled address in order (the set freed as it is read), and its frame once
        // resolved: 12 bytes an address, where a hash map from address to frame took three
        // times that (and twice more while it grew).
        let ips: Vec<u64> = sampled_ips.into_iter().collect();
        let mut frame_of_ip: Vec<u32> = vec![NOT_INTERNED; ips.len()];
        let mut frame_of_method: FxHashMap<usize, u32> = FxHashMap::default();
        let mut unresolved_frame: Option<u32> = None;
        let mut symbols = symbols;
        let mut frames: Vec<u32> = Vec::new();
        let by_count = |a: &ThreadSamples, b: &ThreadSamples| {
            b.count.cmp(&a.count).then(a.stack.cmp(&b.stack))
        };
        for (t, mut samples) in per_thread.into_iter().enumerate() {
            if samples.is_empty() {
                continue;
            }
            // Most sampled first, so that profile stacks are numbered in that order.
            samples.sort_by(by_count);
            for sample in samples.iter_mut() {
                let stack = sample.stack;
                let mapped = stack_map[stack as usize];
                sample.stack = if mapped != NOT_INTERNED {
                    mapped
                } else {
                    let (a, b) = stack_spans[stack as usize];
                    frames.clear();
                    for &ip in &stack_ips[a as usize..b as usize] {
                        // Every address of a sampled stack is in the set.
                        let slot = match ips.binary_search(&ip) {
                            Ok(i) => i,
                            Err(_) => continue,
                        };
                        let frame = match frame_of_ip[slot] {
                            f if f != NOT_INTERNED => f,
                            _ => {
                                profile.distinct_ips += 1;
                                let f = match symbols.resolve(ip) {
                                    Some(m) => *frame_of_method.entry(m).or_insert_with(|| {
                                        profile.frames.push(symbols.frame_name(m));
                                        profile.frames.len() as u32 - 1
                                    }),
                                    None => {
                                        profile.unresolved_ips += 1;
                                        *unresolved_frame.get_or_insert_with(|| {
                                            profile.frames.push(UNRESOLVED_FRAME.to_string());
                                            profile.frames.len() as u32 - 1
                                        })
                                    }
                                };
                                frame_of_ip[slot] = f;
                                f
                            }
                        };
                        frames.push(frame);
                    }
                    let id = profile.stacks.push(&frames);
                    stack_map[stack as usize] = id;
                    id
                };
            }
            samples.sort_by(by_count);
            let state = &threads[t];
            profile.threads.push(ThreadProfile {
                thread_id: state.thread_id,
                first_timestamp: state.first,
                last_timestamp: state.last,
                samples,
            });
        }
        profile
    }
}

#[cfg(test)]
mod tests;
