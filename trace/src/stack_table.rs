//! [`StackTable`]: a profile's stacks of frame indexes, in one table.

/// Stacks of frame indexes, all in one table: `table[i]` is stack `i`'s frames. A stack
/// costs its frames (4 bytes each) and 8 bytes, where a vector per stack cost 24 bytes more
/// and an allocation each (a trace of many small distinct stacks held mostly those).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackTable {
    frames: Vec<u32>,
    /// Where each stack ends in `frames`.
    ends: Vec<usize>,
}

impl StackTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a stack; returns its index.
    pub fn push(&mut self, stack: &[u32]) -> u32 {
        self.frames.extend_from_slice(stack);
        self.ends.push(self.frames.len());
        self.ends.len() as u32 - 1
    }

    /// How many stacks.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// True without stacks.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Stack `i`'s frames, if there is one.
    pub fn get(&self, i: usize) -> Option<&[u32]> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.frames[start..end])
    }

    /// Every stack, in order.
    pub fn iter(&self) -> impl Iterator<Item = &[u32]> + '_ {
        (0..self.len()).filter_map(move |i| self.get(i))
    }
}

impl std::ops::Index<usize> for StackTable {
    type Output = [u32];

    fn index(&self, i: usize) -> &[u32] {
        match self.get(i) {
            Some(s) => s,
            None => panic!("stack {} of {}", i, self.len()),
        }
    }
}
