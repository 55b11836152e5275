//! The fragmentation shared by the streaming targets (`client`, `server`, `nettrace`): their
//! input is `[flags, n, c_1 .. c_n, bytes ...]` and they deliver `bytes` once whole and once
//! in chunks of the fuzzer's sizes, asserting both deliveries report the same.

/// A fragmented input, split: the flags byte, the chunk sizes and the bytes to deliver.
pub struct Fragmented<'a> {
    /// The target's flags (first byte).
    pub flags: u8,
    /// The chunk sizes (`n & 0x0F` of them): chunk `i` is `c_(i mod n) + 1` bytes; none means
    /// one byte at a time.
    pub chunks: &'a [u8],
    /// The bytes to deliver.
    pub input: &'a [u8],
}

impl<'a> Fragmented<'a> {
    /// Splits `[flags, n, c_1 .. c_n, bytes ...]`; `None` when it is too short.
    pub fn split(data: &'a [u8]) -> Option<Self> {
        if data.len() < 2 {
            return None;
        }
        let n = (data[1] & 0x0F) as usize;
        let chunks = data.get(2..2 + n)?;
        Some(Fragmented {
            flags: data[0],
            chunks,
            input: &data[2 + n..],
        })
    }

    /// The chunk-size function of the fragmented delivery (cycles through the sizes).
    pub fn chunker(&self) -> impl FnMut(usize) -> usize + 'a {
        let chunks = self.chunks;
        let mut i = 0;
        move |_rest: usize| {
            let c = if chunks.is_empty() {
                1
            } else {
                chunks[i % chunks.len()] as usize + 1
            };
            i += 1;
            c
        }
    }
}

/// The chunk-size function of whole delivery: everything that remains, at once.
pub fn whole(rest: usize) -> usize {
    rest
}

/// Builds a fragmented input: `[flags, chunks.len(), chunks.., bytes..]` (fewer than 16 chunks).
pub fn fragmented_input(flags: u8, chunks: &[u8], bytes: &[u8]) -> Vec<u8> {
    assert!(chunks.len() < 16);
    let mut v = vec![flags, chunks.len() as u8];
    v.extend_from_slice(chunks);
    v.extend_from_slice(bytes);
    v
}
