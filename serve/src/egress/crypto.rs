//! The small encodings both clouds sign with: HMAC-SHA256 (RFC 2104 over sha2), hex, base64
//! (RFC 4648, padded: Azure's account keys, block ids and signatures), URI percent-encoding
//! (RFC 3986 unreserved characters kept, as SigV4 and Azure want) and UTC timestamps.

use sha2::{Digest, Sha256};
use std::time::{SystemTime, UNIX_EPOCH};

/// SHA-256's block size in bytes (RFC 2104's B for HMAC-SHA256).
const BLOCK: usize = 64;

/// HMAC-SHA256 of `msg` under `key` (RFC 2104; RFC 4231's vectors in the tests).
pub fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut k = [0u8; BLOCK];
    if key.len() > BLOCK {
        k[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(k.iter().map(|b| b ^ 0x36).collect::<Vec<u8>>());
    inner.update(msg);
    let inner = inner.finalize();
    let mut outer = Sha256::new();
    outer.update(k.iter().map(|b| b ^ 0x5c).collect::<Vec<u8>>());
    outer.update(inner);
    outer.finalize().into()
}

/// SHA-256 of `data`, lowercase hex (SigV4's hashed payload and canonical request).
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

/// Lowercase hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (RFC 4648 section 4).
pub fn base64(bytes: &[u8]) -> String {
    let mut s = String::with_capacity((bytes.len() + 2) / 3 * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | u32::from(*b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                s.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// Decodes standard padded base64 (an Azure account key); `None` on any other input.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let t = text.trim().as_bytes();
    if t.len() % 4 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(t.len() / 4 * 3);
    for (ci, chunk) in t.chunks(4).enumerate() {
        let last = ci + 1 == t.len() / 4;
        let mut n = 0u32;
        let mut pad = 0;
        for (i, &c) in chunk.iter().enumerate() {
            let v = if c == b'=' && last && i >= 2 {
                pad += 1;
                0
            } else if pad > 0 {
                return None;
            } else {
                B64.iter().position(|&d| d == c)? as u32
            };
            n = n << 6 | v;
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

/// Percent-encodes `s` keeping RFC 3986's unreserved characters (and `/` when
/// `keep_slash`): SigV4's `UriEncode` and the paths of blob and object names.
pub fn uri_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) || (keep_slash && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{:02X}", b));
        }
    }
    out
}

/// A UTC instant split into its calendar fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Utc {
    /// Year.
    pub year: i64,
    /// Month, 1..=12.
    pub month: u32,
    /// Day of the month, 1..=31.
    pub day: u32,
    /// Hour, minute, second.
    pub hms: (u32, u32, u32),
    /// Day of the week, 0 = Sunday.
    pub weekday: u32,
}

impl Utc {
    /// The calendar fields of `t` (dsipc-trace's one calendar conversion).
    pub fn from_system(t: SystemTime) -> Utc {
        let (year, month, day, h, mi, s) = dsipc_trace::format::civil(t);
        let secs = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_secs() as i64,
            Err(e) => -(e.duration().as_secs() as i64) - i64::from(e.duration().subsec_nanos() > 0),
        };
        Utc {
            year,
            month,
            day,
            hms: (h, mi, s),
            // 1970-01-01 was a Thursday (4).
            weekday: (secs.div_euclid(86_400) + 4).rem_euclid(7) as u32,
        }
    }

    /// SigV4's `X-Amz-Date`: `20150830T123600Z`.
    pub fn amz(&self) -> String {
        format!(
            "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
            self.year, self.month, self.day, self.hms.0, self.hms.1, self.hms.2
        )
    }

    /// HTTP's IMF-fixdate (RFC 7231), Azure's `x-ms-date`: `Sun, 30 Aug 2015 12:36:00 GMT`.
    pub fn http_date(&self) -> String {
        const DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
        const MONTHS: [&str; 12] = [
            "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
        ];
        format!(
            "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
            DAYS[self.weekday as usize % 7],
            self.day,
            MONTHS[(self.month as usize + 11) % 12],
            self.year,
            self.hms.0,
            self.hms.1,
            self.hms.2
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        // Test case 1 and test case 6 (a key longer than the block).
        assert_eq!(
            hex(&hmac_sha256(&[0x0b; 20], b"Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        assert_eq!(
            hex(&hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn base64_matches_rfc_4648_and_round_trips() {
        for (raw, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(raw.as_bytes()), enc);
            assert_eq!(base64_decode(enc).unwrap(), raw.as_bytes());
        }
        assert_eq!(base64_decode("Zm9"), None);
        assert_eq!(base64_decode("Z=9v"), None);
        assert_eq!(base64_decode("Zm9*"), None);
    }

    #[test]
    fn utc_formats_amz_and_http_dates() {
        let t = UNIX_EPOCH + Duration::from_secs(1_440_938_160); // 2015-08-30 12:36:00
        let u = Utc::from_system(t);
        assert_eq!(u.amz(), "20150830T123600Z");
        assert_eq!(u.http_date(), "Sun, 30 Aug 2015 12:36:00 GMT");
        assert_eq!(
            Utc::from_system(UNIX_EPOCH).http_date(),
            "Thu, 01 Jan 1970 00:00:00 GMT"
        );
    }

    #[test]
    fn uri_encode_keeps_unreserved_only() {
        assert_eq!(uri_encode("a b/c~d+é", true), "a%20b/c~d%2B%C3%A9");
        assert_eq!(uri_encode("a/b", false), "a%2Fb");
    }
}
