//! The profile builder's unit tests.

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
    for (method_id, start, name, signature) in [(1, 0x100, &leaf, &sig[..]), (2, 0x200, &root, &[])]
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

/// A thread's counter past u32::MAX carries into the builder's table: the profile counts
/// every sample, of every kind (seeded near the top: 4 billion samples take too long).
#[test]
fn sample_counters_carry_past_u32_max() {
    let mut b = ProfileBuilder::new();
    b.on_stack(1, vec![0x105]);
    for kind in [SampleKind::Managed, SampleKind::Unknown(7)] {
        b.on_sample(7, 1, kind, 10);
    }
    let stack = b.threads[0].managed.keys().copied().next().unwrap();
    let other = u64::from(7u32) << 32 | u64::from(stack);
    b.threads[0].managed.insert(stack, u32::MAX - 1);
    b.threads[0].other.insert(other, u32::MAX);
    for kind in [
        SampleKind::Managed,
        SampleKind::Managed,
        SampleKind::Unknown(7),
    ] {
        b.on_sample(7, 1, kind, 11);
    }
    let p = b.finish(false);
    let mut counts: Vec<(SampleKind, u64)> = p.threads[0]
        .samples
        .iter()
        .map(|s| (s.kind, s.count))
        .collect();
    counts.sort();
    assert_eq!(
        counts,
        [
            (SampleKind::Managed, 1 << 32),
            (SampleKind::Unknown(7), 1 << 32)
        ]
    );
    assert_eq!(p.total_samples(), 1 << 33);
}
