//! `dsipc report`: the top methods by exclusive and inclusive samples (dotnet-trace's
//! `report topN`).

use std::fmt::Write;

use crate::{Profile, SampleKind};

use super::Selection;

/// One method's counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodCounts {
    /// Frame name.
    pub name: String,
    /// Samples with this method as the leaf.
    pub exclusive: u64,
    /// Samples with this method anywhere on the stack (counted once per sample).
    pub inclusive: u64,
}

/// Exclusive and inclusive counts per frame (in frame order: [`top_methods`] sorts), and the
/// total of samples considered.
pub fn counts(profile: &Profile, sel: Selection) -> (Vec<MethodCounts>, u64) {
    let mut per_stack: Vec<u64> = vec![0; profile.stacks.len()];
    let mut total = 0;
    for t in &profile.threads {
        for s in &t.samples {
            if sel.keeps(s.kind) {
                per_stack[s.stack as usize] += s.count;
                total += s.count;
            }
        }
    }
    let mut exclusive = vec![0u64; profile.frames.len()];
    let mut inclusive = vec![0u64; profile.frames.len()];
    let mut seen: Vec<u32> = vec![u32::MAX; profile.frames.len()];
    for (i, &count) in per_stack.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let frames = &profile.stacks[i];
        if let Some(&leaf) = frames.first() {
            exclusive[leaf as usize] += count;
        }
        for &f in frames {
            // Recursion counts once per sample.
            if seen[f as usize] != i as u32 {
                seen[f as usize] = i as u32;
                inclusive[f as usize] += count;
            }
        }
    }
    let methods = profile
        .frames
        .iter()
        .enumerate()
        .filter(|(i, _)| inclusive[*i] > 0)
        .map(|(i, name)| MethodCounts {
            name: name.clone(),
            exclusive: exclusive[i],
            inclusive: inclusive[i],
        })
        .collect();
    (methods, total)
}

/// Hottest first: by exclusive samples, then inclusive, then name (a stable order).
pub fn sort_by_exclusive(methods: &mut [MethodCounts]) {
    methods.sort_by(|a, b| {
        b.exclusive
            .cmp(&a.exclusive)
            .then(b.inclusive.cmp(&a.inclusive))
            .then(a.name.cmp(&b.name))
    });
}

/// The `n` methods with the most exclusive samples, hottest first
/// ([`sort_by_exclusive`]), and the total of samples considered.
pub fn top_methods(profile: &Profile, sel: Selection, n: usize) -> (Vec<MethodCounts>, u64) {
    let (mut methods, total) = counts(profile, sel);
    sort_by_exclusive(&mut methods);
    methods.truncate(n);
    (methods, total)
}

fn pct(n: u64, total: u64) -> f64 {
    if total == 0 {
        0.0
    } else {
        n as f64 * 100.0 / total as f64
    }
}

/// Samples taken while their thread ran managed code, and all samples.
pub fn managed_share(profile: &Profile) -> (u64, u64) {
    let (mut managed, mut total) = (0, 0);
    for s in profile.threads.iter().flat_map(|t| &t.samples) {
        total += s.count;
        if s.kind == SampleKind::Managed {
            managed += s.count;
        }
    }
    (managed, total)
}

/// The report text: two tables of at most `top` rows; when most samples are of threads
/// outside managed code (waiting, sleeping, in native code), a last line says so and how
/// `--managed-only` shows the CPU instead.
pub fn render(profile: &Profile, sel: Selection, top: usize) -> String {
    let mut out = tables(profile, sel, top);
    let (managed, all) = managed_share(profile);
    if !sel.managed_only && all > 0 && managed * 2 < all {
        let _ = writeln!(
            out,
            "\n{:.0}% of the samples are of threads outside managed code (waiting, sleeping or in \
             native code), and the tables count them; --managed-only shows where managed code \
             spends the CPU ({} samples)",
            pct(all - managed, all),
            managed
        );
    }
    out
}

/// The two tables.
fn tables(profile: &Profile, sel: Selection, top: usize) -> String {
    let (mut methods, total) = counts(profile, sel);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} samples ({}), {} threads, {} distinct stacks",
        total,
        if sel.managed_only {
            "managed only"
        } else {
            "managed and external"
        },
        profile.threads.len(),
        profile.stacks.len()
    );
    let mut table = |title: &str, methods: &[MethodCounts]| {
        let _ = writeln!(out, "\nTop {} methods by {} samples", top, title);
        let _ = writeln!(
            out,
            "{:>4}  {:>9} {:>7}  {:>9} {:>7}  method",
            "#", "exclusive", "%", "inclusive", "%"
        );
        for (i, m) in methods.iter().take(top).enumerate() {
            let _ = writeln!(
                out,
                "{:>4}  {:>9} {:>6.2}%  {:>9} {:>6.2}%  {}",
                i + 1,
                m.exclusive,
                pct(m.exclusive, total),
                m.inclusive,
                pct(m.inclusive, total),
                m.name
            );
        }
    };
    sort_by_exclusive(&mut methods);
    let by_exclusive: Vec<MethodCounts> = methods.iter().take(top).cloned().collect();
    table("exclusive", &by_exclusive);
    methods.sort_by(|a, b| {
        b.inclusive
            .cmp(&a.inclusive)
            .then(b.exclusive.cmp(&a.exclusive))
            .then(a.name.cmp(&b.name))
    });
    table("inclusive", &methods);
    out
}
