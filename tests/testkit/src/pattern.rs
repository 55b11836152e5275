//! The fake runtime's stream content: a byte pattern a reader can check at any offset.

/// The byte at `offset` of every fake EventPipe stream. The period (251, a prime) does not
/// divide any power-of-two chunk size, so a lost, repeated or reordered chunk is detected.
pub fn pattern_byte(offset: u64) -> u8 {
    (offset % 251) as u8
}

/// Fills `buf` with the pattern starting at `offset`.
pub fn fill_pattern(offset: u64, buf: &mut [u8]) {
    let mut v = (offset % 251) as u8;
    for b in buf.iter_mut() {
        *b = v;
        v = if v == 250 { 0 } else { v + 1 };
    }
}

/// Index (within `data`) of the first byte that differs from the pattern at `offset`.
pub fn check_pattern(offset: u64, data: &[u8]) -> Option<usize> {
    let mut v = (offset % 251) as u8;
    for (i, &b) in data.iter().enumerate() {
        if b != v {
            return Some(i);
        }
        v = if v == 250 { 0 } else { v + 1 };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_matches_byte() {
        let mut buf = [0u8; 1000];
        fill_pattern(777, &mut buf);
        for (i, b) in buf.iter().enumerate() {
            assert_eq!(*b, pattern_byte(777 + i as u64));
        }
        assert_eq!(check_pattern(777, &buf), None);
        buf[500] ^= 1;
        assert_eq!(check_pattern(777, &buf), Some(500));
    }
}
