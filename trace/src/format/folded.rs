//! Brendan Gregg's folded stacks: `root;caller;leaf COUNT`, one line per distinct stack.

use std::collections::BTreeMap;
use std::io::{self, Write};

use crate::Profile;

use super::Selection;

/// A frame name safe inside a folded line (`;` separates frames, the last space the count).
fn clean(name: &str) -> std::borrow::Cow<'_, str> {
    if name.contains(';') || name.contains('\n') {
        std::borrow::Cow::Owned(name.replace(';', ":").replace('\n', " "))
    } else {
        std::borrow::Cow::Borrowed(name)
    }
}

/// Writes `profile` folded, weight = sample count, lines sorted. Samples without any frame
/// have no line (a folded line needs a frame); their number is returned.
pub fn write(profile: &Profile, sel: Selection, out: &mut dyn Write) -> io::Result<u64> {
    // Several threads and kinds share stacks: sum per stack first.
    let mut per_stack: Vec<u64> = vec![0; profile.stacks.len()];
    for t in &profile.threads {
        for s in &t.samples {
            if sel.keeps(s.kind) {
                per_stack[s.stack as usize] += s.count;
            }
        }
    }
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    let mut frameless = 0;
    for (stack, &count) in per_stack.iter().enumerate() {
        if count == 0 {
            continue;
        }
        let frames = &profile.stacks[stack];
        if frames.is_empty() {
            frameless += count;
            continue;
        }
        let mut line = String::new();
        for (i, &f) in frames.iter().rev().enumerate() {
            if i > 0 {
                line.push(';');
            }
            line.push_str(&clean(&profile.frames[f as usize]));
        }
        // Distinct IP stacks can name the same frames: merge them.
        *lines.entry(line).or_insert(0) += count;
    }
    for (line, count) in &lines {
        writeln!(out, "{} {}", line, count)?;
    }
    Ok(frameless)
}
