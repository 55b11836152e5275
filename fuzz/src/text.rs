//! Targets over text: the transport parsers and the UTF-16 conversions.

use dsipc::transport::{
    key_from_proc_stat, DiagnosticPorts, FormatPorts, PipeName, PortConfig, SocketName,
};
use dsipc::wire::{Guid, Reader, Text, TranscodeError, Utf16Str, Writer};

use crate::util::*;

/// The transport parsers: `DOTNET_DiagnosticPorts`, `PortConfig`, socket and pipe names,
/// GUIDs (on the input as text) and the `/proc/PID/stat` key (on the raw bytes). What
/// parses formats back to text that parses equal.
pub fn transport(data: &[u8]) {
    if let Ok(k) = key_from_proc_stat(data) {
        // The key is a run of digits after the last ')'.
        let close = data.iter().rposition(|&b| b == b')').unwrap();
        let digits = k.to_string();
        assert!(data[close..]
            .windows(digits.len())
            .any(|w| w == digits.as_bytes()));
    } else if let Err(e) = key_from_proc_stat(data) {
        show(&e);
    }

    let text = String::from_utf8_lossy(data);
    let s: &str = &text;

    let ports: Vec<PortConfig<'_>> = DiagnosticPorts::parse(s).collect();
    for p in &ports {
        debug(p);
        assert!(!p.address.is_empty());
        assert!(!p.address.contains(',') && !p.address.contains(';'));
        let formatted = p.to_string();
        assert_eq!(PortConfig::parse(&formatted), Some(*p));
    }
    let joined = FormatPorts(&ports).to_string();
    let back: Vec<PortConfig<'_>> = DiagnosticPorts::parse(&joined).collect();
    assert_eq!(back, ports);
    if let Some(p) = PortConfig::parse(s) {
        let formatted = p.to_string();
        assert_eq!(PortConfig::parse(&formatted), Some(p));
    }

    if let Some(n) = SocketName::parse(s) {
        let formatted = n.to_string();
        assert_eq!(SocketName::parse(&formatted), Some(n));
        assert!(formatted.starts_with(&SocketName::prefix_for(n.pid).to_string()));
        assert!(formatted.len() <= s.len());
    }
    if let Some(p) = PipeName::parse(s) {
        let formatted = p.to_string();
        assert_eq!(PipeName::parse(&formatted), Some(p));
    }
    match Guid::parse(s) {
        Ok(g) => {
            let formatted = g.to_string();
            assert_eq!(Guid::parse(&formatted), Ok(g));
            debug(&g);
        }
        Err(e) => show(&e),
    }
}

/// The UTF-16 conversions on the input as little-endian units: strict and lossy agree with
/// std and with each other, capacity errors report the exact size, nothing panics. When the
/// input is UTF-8, a `Text::Str` written and read back is equal.
pub fn utf16(data: &[u8]) {
    let s = Utf16Str::from_le_bytes_unchecked(data);
    let units: Vec<u16> = data
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    check_utf16(&s, &units);
    check_text(&Text::Utf16(s));

    if let Ok(text) = std::str::from_utf8(data) {
        let t = Text::Str(text);
        check_text(&t);
        assert_eq!(t.len_utf16(), text.encode_utf16().count());
        assert!(t.eq_str(text));
        let mut buf = vec![0u8; dsipc::wire::text_len(&t)];
        let mut w = Writer::new(&mut buf);
        w.text(&t);
        assert_eq!(w.finish(), Some(buf.len()));
        let mut r = Reader::new(&buf);
        let back = r.text("fuzz").unwrap();
        r.finish().unwrap();
        assert_eq!(back, t);
        let mut out = vec![0u8; text.len()];
        assert_eq!(back.to_utf8(&mut out).unwrap(), text);
    }
}

pub(crate) fn check_utf16(s: &Utf16Str<'_>, units: &[u16]) {
    assert_eq!(s.len(), units.len());
    assert!(s.units().eq(units.iter().copied()));
    assert_eq!(s.as_bytes().len(), 2 * units.len());
    let lossy = String::from_utf16_lossy(units);
    let strict = String::from_utf16(units);
    assert_eq!(s.is_valid(), strict.is_ok());
    assert_eq!(s.utf8_len_lossy(), lossy.len());
    assert!(s.chars_lossy().eq(lossy.chars()));
    assert_eq!(s.to_string(), lossy);
    debug(s);

    let needed = lossy.len();
    let mut out = vec![0u8; needed + 3];
    assert_eq!(s.to_utf8_lossy(&mut out).unwrap(), lossy);
    match (&strict, s.to_utf8(&mut out)) {
        (Ok(expected), Ok(got)) => {
            // Strict and lossy agree on valid input.
            assert_eq!(got, expected);
            assert_eq!(got, lossy);
        }
        (Err(_), Err(TranscodeError::LoneSurrogate { index, unit })) => {
            // The first unpaired surrogate, by unit index.
            let first = first_lone_surrogate(units).unwrap();
            assert_eq!((index, unit), first);
        }
        (expected, got) => panic!("strict conversion {:?}, std says {:?}", got, expected),
    }
    if needed > 0 {
        let mut small = vec![0u8; needed - 1];
        assert_eq!(
            s.to_utf8_lossy(&mut small),
            Err(TranscodeError::BufferTooSmall { needed })
        );
        match s.to_utf8(&mut small) {
            Err(TranscodeError::BufferTooSmall { needed: n }) => {
                assert!(strict.is_ok());
                assert_eq!(n, needed);
            }
            Err(TranscodeError::LoneSurrogate { .. }) => assert!(strict.is_err()),
            other => panic!("strict conversion into a short buffer gave {:?}", other),
        }
    }
}

fn first_lone_surrogate(units: &[u16]) -> Option<(usize, u16)> {
    let mut i = 0;
    while i < units.len() {
        let u = units[i];
        if (0xD800..0xDC00).contains(&u) {
            if i + 1 < units.len() && (0xDC00..0xE000).contains(&units[i + 1]) {
                i += 2;
                continue;
            }
            return Some((i, u));
        }
        if (0xDC00..0xE000).contains(&u) {
            return Some((i, u));
        }
        i += 1;
    }
    None
}
