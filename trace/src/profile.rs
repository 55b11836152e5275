//! The sample-profile builder: SampleProfiler samples per thread over an interned stack table.

use std::collections::BTreeSet;
use std::fmt;
use std::hash::Hasher;

use super::hash::{FxHashMap, FxHasher};
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
    pub stacks: Vec<Vec<u32>>,
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
/// Stack ids are only valid within their sequence-point window: the builder caches the
/// current window's stacks and, when a sample references one, interns it into a compact,
/// deduplicated stack table (the window cache is dropped at the next sequence point).
/// Samples are counted per (thread, stack, kind). Instruction pointers are resolved when the
/// profile is finished (the rundown, which names most methods, arrives last). Memory: the
/// current window, distinct stacks, threads and methods; never the number of samples.
#[derive(Default)]
pub struct ProfileBuilder {
    symbols: SymbolTable,
    limits: ProfileLimits,
    limit_error: Option<LimitExceeded>,
    // The current window's stacks with consecutive ids (as runtimes write them): id -
    // window_base -> span in window_ips, and its interned stack once a sample used it.
    window_base: u32,
    window_spans: Vec<(u32, u32)>,
    window_ips: Vec<u64>,
    window_interned: Vec<u32>,
    // Stacks whose id does not follow (a gap or an id below the base): by id, so that a
    // hostile id never allocates room for the ids in between.
    window_far: FxHashMap<u32, (u32, u32, u32)>,
    // The interned stack table (leaf first).
    stack_ips: Vec<u64>,
    stack_spans: Vec<(u32, u32)>,
    stack_by_hash: FxHashMap<u64, u32>,
    // Collision chains of `stack_by_hash`: the next interned stack of the same hash.
    stack_next: Vec<u32>,
    threads: Vec<ThreadState>,
    thread_index: FxHashMap<u64, u32>,
    counts: FxHashMap<(u32, u32, SampleKind), u64>,
    samples: u64,
    max_thread_samples: u64,
    // Distinct instruction pointers of the interned stacks (the rundown asks about ranges).
    sampled_ips: BTreeSet<u64>,
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
        let start = self.window_ips.len();
        self.window_ips.extend(ips);
        let frames = self.window_ips.len() - start;
        if frames > self.limits.max_stack_frames {
            self.window_ips.truncate(start);
            self.limit_error = Some(LimitExceeded::StackFrames {
                frames,
                limit: self.limits.max_stack_frames,
            });
            return;
        }
        let span = (start as u32, self.window_ips.len() as u32);
        if self.window_spans.is_empty() && self.window_far.is_empty() {
            self.window_base = id;
        }
        match id.checked_sub(self.window_base) {
            Some(i) if (i as usize) < self.window_spans.len() => {
                self.window_spans[i as usize] = span;
                self.window_interned[i as usize] = NOT_INTERNED;
            }
            Some(i) if i as usize == self.window_spans.len() => {
                self.window_spans.push(span);
                self.window_interned.push(NOT_INTERNED);
            }
            _ => {
                self.window_far.insert(id, (span.0, span.1, NOT_INTERNED));
            }
        }
    }

    /// A sequence point: the stack ids of the window end here.
    pub fn on_sequence_point(&mut self) {
        self.window_spans.clear();
        self.window_ips.clear();
        self.window_interned.clear();
        self.window_far.clear();
    }

    fn intern(&mut self, ips: &[u64]) -> u32 {
        let mut h = FxHasher::default();
        for &ip in ips {
            h.write_u64(ip);
        }
        h.write_usize(ips.len());
        let hash = h.finish();
        let mut c = self
            .stack_by_hash
            .get(&hash)
            .copied()
            .unwrap_or(NOT_INTERNED);
        let head = c;
        while c != NOT_INTERNED {
            let (a, b) = self.stack_spans[c as usize];
            if &self.stack_ips[a as usize..b as usize] == ips {
                return c;
            }
            c = self.stack_next[c as usize];
        }
        let id = self.stack_spans.len() as u32;
        let a = self.stack_ips.len() as u32;
        self.stack_ips.extend_from_slice(ips);
        self.stack_spans.push((a, self.stack_ips.len() as u32));
        self.stack_next.push(head);
        self.stack_by_hash.insert(hash, id);
        self.sampled_ips.extend(ips.iter().copied());
        id
    }

    /// The interned stack for window stack `id` (an unknown id or 0 is the empty stack).
    fn window_stack(&mut self, id: u32) -> u32 {
        if id == 0 {
            return self.intern(&[]);
        }
        let near = match id.checked_sub(self.window_base) {
            Some(i) if (i as usize) < self.window_spans.len() => Some(i as usize),
            _ => None,
        };
        let (a, b, memo) = match near {
            Some(i) => {
                let (a, b) = self.window_spans[i];
                (a, b, self.window_interned[i])
            }
            None => match self.window_far.get(&id) {
                Some(&far) => far,
                None => return self.intern(&[]),
            },
        };
        if memo != NOT_INTERNED {
            return memo;
        }
        let ips = std::mem::take(&mut self.window_ips);
        let interned = self.intern(&ips[a as usize..b as usize]);
        self.window_ips = ips;
        match near {
            Some(i) => self.window_interned[i] = interned,
            None => {
                self.window_far.insert(id, (a, b, interned));
            }
        }
        interned
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
        // A lookup first (a sample mostly finds its counter): `entry` would check the
        // table's room on every call.
        match self.counts.get_mut(&(t, stack, kind)) {
            Some(n) => *n += 1,
            None => {
                self.counts.insert((t, stack, kind), 1);
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

    /// Distinct stacks interned so far.
    pub fn distinct_stacks(&self) -> usize {
        self.stack_spans.len()
    }

    /// Resolves every sampled instruction pointer and returns the profile. With
    /// `managed_only`, samples taken in native code or while blocked are dropped.
    pub fn finish(self, managed_only: bool) -> Profile {
        // Counters grouped by thread, in order of the threads' first samples.
        let mut counts: Vec<((u32, u32, SampleKind), u64)> = self.counts.into_iter().collect();
        counts.sort_unstable_by_key(|&((t, _, _), _)| t);
        let mut profile = Profile::default();
        // Interned stack -> profile stack (only stacks kept samples use).
        let mut stack_map: Vec<u32> = vec![NOT_INTERNED; self.stack_spans.len()];
        let mut frame_of_ip: FxHashMap<u64, u32> = FxHashMap::default();
        let mut frame_of_method: FxHashMap<usize, u32> = FxHashMap::default();
        let mut unresolved_frame: Option<u32> = None;
        let mut symbols = self.symbols;
        let mut rest = &counts[..];
        while let Some(&((t, _, _), _)) = rest.first() {
            let n = rest.iter().take_while(|((u, _, _), _)| *u == t).count();
            let (mine, others) = rest.split_at(n);
            rest = others;
            let state = &self.threads[t as usize];
            let mut samples: Vec<ThreadSamples> = Vec::with_capacity(mine.len());
            for &((_, stack, kind), count) in mine {
                if managed_only && kind != SampleKind::Managed {
                    continue;
                }
                let mapped = stack_map[stack as usize];
                let mapped = if mapped != NOT_INTERNED {
                    mapped
                } else {
                    let (a, b) = self.stack_spans[stack as usize];
                    let mut frames = Vec::with_capacity((b - a) as usize);
                    for &ip in &self.stack_ips[a as usize..b as usize] {
                        let frame = match frame_of_ip.get(&ip) {
                            Some(&f) => f,
                            None => {
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
                                frame_of_ip.insert(ip, f);
                                f
                            }
                        };
                        frames.push(frame);
                    }
                    profile.stacks.push(frames);
                    let id = profile.stacks.len() as u32 - 1;
                    stack_map[stack as usize] = id;
                    id
                };
                samples.push(ThreadSamples {
                    stack: mapped,
                    kind,
                    count,
                });
            }
            if samples.is_empty() {
                continue;
            }
            samples.sort_by(|a, b| b.count.cmp(&a.count).then(a.stack.cmp(&b.stack)));
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
mod tests {
    use super::super::symbols::MethodRecord;
    use super::*;

    fn u16le(s: &str) -> Vec<u8> {
        s.encode_utf16().flat_map(|u| u.to_le_bytes()).collect()
    }

    #[test]
    fn windows_intern_and_resolve() {
        let mut b = ProfileBuilder::new();
        b.on_stack(1, vec![0x105, 0x205]);
        b.on_stack(2, vec![0x205]);
        b.on_sample(7, 1, SampleKind::Managed, 10);
        b.on_sample(7, 1, SampleKind::Managed, 11);
        b.on_sample(8, 2, SampleKind::External, 12);
        b.on_sequence_point();
        // Ids restart: id 1 is now a different stack, equal to the old id 2.
        b.on_stack(1, vec![0x205]);
        b.on_sample(7, 1, SampleKind::Managed, 13);
        b.on_sample(7, 5, SampleKind::Managed, 14); // unknown id: empty stack
        assert_eq!(b.distinct_stacks(), 3);
        let (leaf, root) = (u16le("Leaf"), u16le("Root"));
        let (ns, sig) = (u16le("N"), u16le("void  (int32)"));
        for (method_id, start, name, signature) in
            [(1, 0x100, &leaf, &sig[..]), (2, 0x200, &root, &[])]
        {
            b.symbols_mut().add_method(&MethodRecord {
                method_id,
                module_id: 1,
                start,
                size: 0x10,
                token: 0,
                namespace: &ns,
                name,
                signature,
            });
        }
        b.symbols_mut().add_module(1, "/x/App.dll");
        let p = b.finish(false);
        assert_eq!(p.total_samples(), 5);
        assert_eq!(p.threads.len(), 2);
        let t7 = &p.threads[0];
        assert_eq!(t7.thread_id, 7);
        let name = |s: &ThreadSamples| -> Vec<&str> {
            p.stacks[s.stack as usize]
                .iter()
                .map(|&f| p.frames[f as usize].as_str())
                .collect()
        };
        assert_eq!(
            name(&t7.samples[0]),
            vec!["App!N.Leaf(int32)", "App!N.Root"]
        );
        assert_eq!(t7.samples[0].count, 2);
        let rest: Vec<_> = t7.samples[1..].iter().map(|s| (name(s), s.count)).collect();
        assert!(rest.contains(&(vec!["App!N.Root"], 1)));
        assert!(rest.contains(&(vec![], 1)));
        assert_eq!((t7.first_timestamp, t7.last_timestamp), (10, 14));
        assert_eq!(p.unresolved_ips, 0);
    }

    #[test]
    fn managed_only_and_unresolved() {
        let mut b = ProfileBuilder::new();
        b.on_stack(3, vec![0x999]);
        b.on_sample(1, 3, SampleKind::External, 0);
        b.on_sample(1, 3, SampleKind::Managed, 1);
        let p = b.finish(true);
        assert_eq!(p.total_samples(), 1);
        assert_eq!(p.frames, vec![UNRESOLVED_FRAME.to_string()]);
        assert_eq!(p.unresolved_ips, 1);
    }
}
