//! Thread stacks, as `dotnet-stack report` shows them: the latest SampleProfiler sample of
//! every thread, its frames resolved through the trace's method records (the session's
//! rundown names them) with the one [`SymbolTable`] the profiles use.
//!
//! Feed a [`TraceAnalyzer`](crate::TraceAnalyzer) (or a [`LiveProfile`](crate::LiveProfile)) the stream of a short
//! session with `Microsoft-DotNETCore-SampleProfiler` and rundown, stop it once
//! [`TraceAnalyzer::max_thread_samples`](crate::TraceAnalyzer::max_thread_samples) reaches 2 (the sampler went round every thread),
//! and take [`TraceAnalyzer::finish_stacks`](crate::TraceAnalyzer::finish_stacks).

use super::hash::FxHashMap;
use super::profile::{
    LastSample, Profile, ProfileBuilder, SampleKind, ThreadProfile, ThreadSamples,
};
use super::stack_table::StackTable;
use super::symbols::{MethodName, SymbolTable};

/// What `dotnet-stack report` prints for a run of frames no managed method covers (native
/// code, stubs and helpers the rundown does not name).
pub const NATIVE_FRAMES: &str = "[Native Frames]";

/// One frame of a thread's stack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StackFrame {
    /// A managed method.
    Method(MethodName),
    /// One or more consecutive frames no method record covers, shown as
    /// [`NATIVE_FRAMES`].
    Native,
}

impl StackFrame {
    /// The frame as `dotnet-stack report` prints it: `Module!Namespace.Type.Method(args)`
    /// ([`MethodName::frame_name`]) or [`NATIVE_FRAMES`].
    pub fn display_name(&self) -> String {
        match self {
            StackFrame::Method(m) => m.frame_name(),
            StackFrame::Native => NATIVE_FRAMES.to_string(),
        }
    }

    /// The method, for a managed frame.
    pub fn method(&self) -> Option<&MethodName> {
        match self {
            StackFrame::Method(m) => Some(m),
            StackFrame::Native => None,
        }
    }
}

/// A thread's latest sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadStack {
    /// The sampled thread's id (the OS thread id).
    pub thread_id: u64,
    /// Timestamp (trace ticks) of the sample.
    pub timestamp: i64,
    /// Managed code or external (native code, blocked) when sampled.
    pub kind: SampleKind,
    /// Samples of this thread in the trace.
    pub samples: u64,
    /// The frames, innermost first; consecutive unresolved frames are one
    /// [`StackFrame::Native`].
    pub frames: Vec<StackFrame>,
}

/// Every sampled thread's latest stack, in order of the threads' first samples.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackSnapshot {
    /// One entry per sampled thread.
    pub threads: Vec<ThreadStack>,
    /// Distinct instruction pointers in these stacks.
    pub distinct_ips: usize,
    /// Of those, the ones no method covers.
    pub unresolved_ips: usize,
}

impl StackSnapshot {
    /// The snapshot as a profile of one sample per thread (so the profile formats, such as
    /// speedscope for dotnet-monitor's `/stacks`, write it): frames named as
    /// [`StackFrame::display_name`], each thread's stack leaf first.
    pub fn to_profile(&self) -> Profile {
        let mut frames: Vec<String> = Vec::new();
        let mut index: FxHashMap<String, u32> = FxHashMap::default();
        let mut stacks = StackTable::new();
        let mut threads = Vec::with_capacity(self.threads.len());
        for t in &self.threads {
            let stack: Vec<u32> = t
                .frames
                .iter()
                .map(|f| {
                    let name = f.display_name();
                    match index.get(&name) {
                        Some(&i) => i,
                        None => {
                            let i = frames.len() as u32;
                            frames.push(name.clone());
                            index.insert(name, i);
                            i
                        }
                    }
                })
                .collect();
            threads.push(ThreadProfile {
                thread_id: t.thread_id,
                first_timestamp: t.timestamp,
                last_timestamp: t.timestamp,
                samples: vec![ThreadSamples {
                    stack: stacks.len() as u32,
                    kind: t.kind,
                    count: 1,
                }],
            });
            stacks.push(&stack);
        }
        Profile {
            frames,
            stacks,
            threads,
            distinct_ips: self.distinct_ips,
            unresolved_ips: self.unresolved_ips,
        }
    }

    /// Resolves the latest sample of every thread `profile` holds.
    pub fn from_profile(profile: ProfileBuilder) -> StackSnapshot {
        let (symbols, last) = profile.into_last_samples();
        Self::resolve(symbols, last)
    }

    fn resolve(mut symbols: SymbolTable, last: Vec<LastSample>) -> StackSnapshot {
        let mut snapshot = StackSnapshot::default();
        let mut method_of_ip: FxHashMap<u64, Option<usize>> = FxHashMap::default();
        for sample in last {
            let mut frames: Vec<StackFrame> = Vec::with_capacity(sample.ips.len());
            for &ip in &sample.ips {
                let method = match method_of_ip.get(&ip) {
                    Some(&m) => m,
                    None => {
                        let m = symbols.resolve(ip);
                        snapshot.distinct_ips += 1;
                        if m.is_none() {
                            snapshot.unresolved_ips += 1;
                        }
                        method_of_ip.insert(ip, m);
                        m
                    }
                };
                match method.and_then(|m| symbols.method_name(m)) {
                    Some(name) => frames.push(StackFrame::Method(name)),
                    None => {
                        if frames.last() != Some(&StackFrame::Native) {
                            frames.push(StackFrame::Native);
                        }
                    }
                }
            }
            snapshot.threads.push(ThreadStack {
                thread_id: sample.thread_id,
                timestamp: sample.timestamp,
                kind: sample.kind,
                samples: sample.samples,
                frames,
            });
        }
        snapshot
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
    fn latest_sample_per_thread_resolved_with_native_runs_collapsed() {
        let mut b = ProfileBuilder::new();
        b.on_stack(1, vec![0x105, 0x999, 0x998, 0x205]);
        b.on_stack(2, vec![0x205]);
        b.on_sample(7, 2, SampleKind::Managed, 10);
        b.on_sample(8, 2, SampleKind::External, 11);
        // Thread 7's latest sample comes later in time; thread 8's arrives later in the
        // stream but is older.
        b.on_sample(7, 1, SampleKind::External, 20);
        b.on_sample(8, 1, SampleKind::Managed, 5);
        assert_eq!(b.max_thread_samples(), 2);
        assert_eq!(b.sampled_threads(), 2);
        let (ns, sleep, run, sig) = (
            u16le("System.Threading.Thread"),
            u16le("Sleep"),
            u16le("Run"),
            u16le("void  (int32)"),
        );
        for (start, name, token) in [(0x100, &sleep, 0x0600_0010), (0x200, &run, 0x0600_0020)] {
            b.symbols_mut().add_method(&MethodRecord {
                method_id: start,
                module_id: 1,
                start,
                size: 0x10,
                token,
                namespace: &ns,
                name,
                signature: &sig,
            });
        }
        b.symbols_mut()
            .add_module(1, "/usr/share/dotnet/System.Private.CoreLib.dll");
        let s = StackSnapshot::from_profile(b);
        assert_eq!(s.threads.len(), 2);
        let t7 = &s.threads[0];
        assert_eq!((t7.thread_id, t7.timestamp, t7.samples), (7, 20, 2));
        assert_eq!(t7.kind, SampleKind::External);
        let names: Vec<String> = t7.frames.iter().map(|f| f.display_name()).collect();
        assert_eq!(
            names,
            vec![
                "System.Private.CoreLib!System.Threading.Thread.Sleep(int32)",
                "[Native Frames]",
                "System.Private.CoreLib!System.Threading.Thread.Run(int32)",
            ]
        );
        let top = t7.frames[0].method().unwrap();
        assert_eq!(top.token, 0x0600_0010);
        assert_eq!(top.type_name, "System.Threading.Thread");
        let t8 = &s.threads[1];
        assert_eq!((t8.thread_id, t8.timestamp), (8, 11));
        assert_eq!(t8.frames.len(), 1);
        assert_eq!(s.distinct_ips, 4);
        assert_eq!(s.unresolved_ips, 2);

        // As a profile: one sample per thread, leaf first, frames shared.
        let p = s.to_profile();
        assert_eq!(p.threads.len(), 2);
        assert_eq!(p.total_samples(), 2);
        assert_eq!(p.frames.len(), 3);
        let leaf_first: Vec<&str> = p.stacks[0]
            .iter()
            .map(|&f| p.frames[f as usize].as_str())
            .collect();
        assert_eq!(leaf_first, names);
        assert_eq!(p.stacks[1], vec![2]);
        assert_eq!((p.distinct_ips, p.unresolved_ips), (4, 2));
    }

    #[test]
    fn an_empty_stack_has_no_frames() {
        let mut b = ProfileBuilder::new();
        b.on_sample(3, 0, SampleKind::External, 1);
        let s = StackSnapshot::from_profile(b);
        assert_eq!(s.threads.len(), 1);
        assert!(s.threads[0].frames.is_empty());
    }
}
