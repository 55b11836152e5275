//! The sample-profile builder: SampleProfiler samples per thread over an interned stack table.

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
    order: usize,
    first: i64,
    last: i64,
    counts: FxHashMap<(u32, SampleKind), u64>,
}

const NOT_INTERNED: u32 = u32::MAX;

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
    // The current window's stacks: id - window_base -> span in window_ips.
    window_base: u32,
    window_spans: Vec<(u32, u32)>,
    window_ips: Vec<u64>,
    window_interned: Vec<u32>,
    // The interned stack table (leaf first).
    stack_ips: Vec<u64>,
    stack_spans: Vec<(u32, u32)>,
    stack_by_hash: FxHashMap<u64, Vec<u32>>,
    threads: FxHashMap<u64, ThreadState>,
    samples: u64,
    // Sorted, deduplicated IPs of the interned stacks, rebuilt when stacks were added.
    sampled_ips: Vec<u64>,
    sampled_ips_from: usize,
}

/// Window stacks beyond this many ids past the window's first are refused (a hostile stream
/// announcing id 4 billion must not make the cache allocate for the gap).
const MAX_WINDOW_GAP: u32 = 1 << 20;

impl ProfileBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
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
        if self.window_spans.is_empty() {
            self.window_base = id;
        }
        let index = match id.checked_sub(self.window_base) {
            Some(i) if i <= self.window_spans.len() as u32 + MAX_WINDOW_GAP => i as usize,
            _ => return,
        };
        while self.window_spans.len() <= index {
            self.window_spans.push((0, 0));
            self.window_interned.push(NOT_INTERNED);
        }
        let start = self.window_ips.len() as u32;
        self.window_ips.extend(ips);
        self.window_spans[index] = (start, self.window_ips.len() as u32);
        self.window_interned[index] = NOT_INTERNED;
    }

    /// A sequence point: the stack ids of the window end here.
    pub fn on_sequence_point(&mut self) {
        self.window_spans.clear();
        self.window_ips.clear();
        self.window_interned.clear();
    }

    fn intern(&mut self, ips: &[u64]) -> u32 {
        let mut h = FxHasher::default();
        for &ip in ips {
            h.write_u64(ip);
        }
        h.write_usize(ips.len());
        let hash = h.finish();
        let candidates = self.stack_by_hash.entry(hash).or_default();
        for &c in candidates.iter() {
            let (a, b) = self.stack_spans[c as usize];
            if &self.stack_ips[a as usize..b as usize] == ips {
                return c;
            }
        }
        let id = self.stack_spans.len() as u32;
        let a = self.stack_ips.len() as u32;
        self.stack_ips.extend_from_slice(ips);
        self.stack_spans.push((a, self.stack_ips.len() as u32));
        candidates.push(id);
        id
    }

    /// The interned stack for window stack `id` (an unknown id or 0 is the empty stack).
    fn window_stack(&mut self, id: u32) -> u32 {
        let index = match id.checked_sub(self.window_base) {
            Some(i) if id != 0 && (i as usize) < self.window_spans.len() => i as usize,
            _ => return self.intern(&[]),
        };
        let memo = self.window_interned[index];
        if memo != NOT_INTERNED {
            return memo;
        }
        let (a, b) = self.window_spans[index];
        let ips = std::mem::take(&mut self.window_ips);
        let interned = self.intern(&ips[a as usize..b as usize]);
        self.window_ips = ips;
        self.window_interned[index] = interned;
        interned
    }

    /// A SampleProfiler sample of `thread` on window stack `stack_id` at `timestamp`.
    pub fn on_sample(&mut self, thread: u64, stack_id: u32, kind: SampleKind, timestamp: i64) {
        let stack = self.window_stack(stack_id);
        self.samples += 1;
        // Lookups first (a sample mostly finds its thread and stack known): `entry` would
        // check the table's room on every call.
        let order = self.threads.len();
        let t = match self.threads.get_mut(&thread) {
            Some(t) => t,
            None => self.threads.entry(thread).or_insert(ThreadState {
                order,
                first: timestamp,
                last: timestamp,
                counts: FxHashMap::default(),
            }),
        };
        t.first = t.first.min(timestamp);
        t.last = t.last.max(timestamp);
        match t.counts.get_mut(&(stack, kind)) {
            Some(n) => *n += 1,
            None => {
                t.counts.insert((stack, kind), 1);
            }
        }
    }

    /// True if an instruction pointer of a sampled stack lies in `[start, end)`: a method
    /// record no sample hit need not be kept. Cheap while no new stack was interned since
    /// the last call (the rundown, which names most methods, comes after the samples).
    pub fn is_sampled(&mut self, start: u64, end: u64) -> bool {
        if self.sampled_ips_from != self.stack_ips.len() {
            self.sampled_ips.clear();
            self.sampled_ips.extend_from_slice(&self.stack_ips);
            self.sampled_ips.sort_unstable();
            self.sampled_ips.dedup();
            self.sampled_ips_from = self.stack_ips.len();
        }
        let i = self.sampled_ips.partition_point(|&ip| ip < start);
        i < self.sampled_ips.len() && self.sampled_ips[i] < end
    }

    /// Samples seen so far.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Distinct stacks interned so far.
    pub fn distinct_stacks(&self) -> usize {
        self.stack_spans.len()
    }

    /// Resolves every sampled instruction pointer and returns the profile. With
    /// `managed_only`, samples taken in native code or while blocked are dropped.
    pub fn finish(mut self, managed_only: bool) -> Profile {
        let mut threads: Vec<(u64, ThreadState)> = self.threads.drain().collect();
        threads.sort_by_key(|(_, t)| t.order);
        let mut profile = Profile::default();
        // Interned stack -> profile stack (only stacks kept samples use).
        let mut stack_map: Vec<u32> = vec![NOT_INTERNED; self.stack_spans.len()];
        let mut frame_of_ip: FxHashMap<u64, u32> = FxHashMap::default();
        let mut frame_of_method: FxHashMap<usize, u32> = FxHashMap::default();
        let mut unresolved_frame: Option<u32> = None;
        for (thread_id, state) in threads {
            let mut samples: Vec<ThreadSamples> = Vec::with_capacity(state.counts.len());
            for ((stack, kind), count) in state.counts {
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
                                let f = match self.symbols.resolve(ip) {
                                    Some(m) => *frame_of_method.entry(m).or_insert_with(|| {
                                        profile.frames.push(self.symbols.frame_name(m));
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
                thread_id,
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
