//! API keys: `dsipc serve generatekey` makes one, `--api-key-file` verifies it.
//!
//! A key is 32 bytes from the OS's CSPRNG, sent as base64url in `Authorization: Bearer KEY`.
//! What is stored (the key file, and serve's memory) is only its SHA-256, as dotnet-monitor's
//! `ApiKeyHash` / `ApiKeyHashType: SHA256` settings hold it: a file that leaks lets nobody in.
//! A presented key is hashed and compared to the stored hash in constant time.

use sha2::{Digest, Sha256};

/// Bytes of randomness in a key (dotnet-monitor's keys are 32 bytes too).
pub const KEY_BYTES: usize = 32;

/// A key file holds at most this much (it is JSON of about 150 bytes).
pub const MAX_KEY_FILE: u64 = 64 * 1024;

/// What verifies a key: its SHA-256.
#[derive(Clone)]
pub struct Verifier {
    hash: [u8; 32],
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Neither the key nor its hash: a hash of a weak key can be guessed.
        f.write_str("Verifier { .. }")
    }
}

/// A new key: (the token a client sends, its verifier).
pub fn generate() -> Result<(String, Verifier), String> {
    let mut raw = [0u8; KEY_BYTES];
    getrandom::getrandom(&mut raw)
        .map_err(|e| format!("the OS gave no random bytes for a key: {}", e))?;
    let token = base64url(&raw);
    let verifier = Verifier::for_token(&token);
    Ok((token, verifier))
}

impl Verifier {
    /// The verifier of `token`.
    pub fn for_token(token: &str) -> Verifier {
        let mut hash = [0u8; 32];
        hash.copy_from_slice(&Sha256::digest(token.as_bytes()));
        Verifier { hash }
    }

    /// The hash as uppercase hex (dotnet-monitor's `ApiKeyHash` spelling).
    pub fn hash_hex(&self) -> String {
        self.hash.iter().map(|b| format!("{:02X}", b)).collect()
    }

    /// The key-file text: dotnet-monitor's settings shape, holding only the hash (indented
    /// as `dotnet monitor generatekey` prints it).
    pub fn settings_json(&self) -> String {
        let settings = Settings {
            authentication: Authentication {
                monitor_api_key: MonitorApiKey {
                    api_key_hash: self.hash_hex(),
                    api_key_hash_type: "SHA256",
                },
            },
        };
        // Hex digits and names only: nothing for the terminal-safe escaping to do.
        serde_json::to_string_pretty(&settings).unwrap_or_default() + "\n"
    }

    /// Reads a key file: the settings JSON [`settings_json`](Self::settings_json) writes
    /// (also with a top-level `MonitorApiKey`, or a bare 64-digit hex hash).
    pub fn parse_settings(text: &str) -> Result<Verifier, String> {
        let trimmed = text.trim();
        if trimmed.len() == 64 && trimmed.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Verifier::from_hex(trimmed);
        }
        let doc: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| format!("not JSON (line {}, column {})", e.line(), e.column()))?;
        let key = doc
            .get("Authentication")
            .and_then(|a| a.get("MonitorApiKey"))
            .or_else(|| doc.get("MonitorApiKey"))
            .ok_or("no Authentication.MonitorApiKey object")?;
        match key.get("ApiKeyHashType").and_then(|t| t.as_str()) {
            Some(t) if t.eq_ignore_ascii_case("SHA256") => {}
            Some(t) => {
                return Err(format!(
                    "ApiKeyHashType {:?} is not supported (SHA256 is)",
                    t.chars().take(40).collect::<String>()
                ))
            }
            None => return Err("no ApiKeyHashType (SHA256)".into()),
        }
        let hex = key
            .get("ApiKeyHash")
            .and_then(|h| h.as_str())
            .ok_or("no ApiKeyHash string")?;
        Verifier::from_hex(hex)
    }

    fn from_hex(hex: &str) -> Result<Verifier, String> {
        if hex.len() != 64 {
            return Err(format!(
                "ApiKeyHash must be 64 hex digits (SHA-256), not {} characters",
                hex.len()
            ));
        }
        let mut hash = [0u8; 32];
        for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
            let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
            match (digit(pair[0]), digit(pair[1])) {
                (Some(h), Some(l)) => hash[i] = h << 4 | l,
                _ => return Err("ApiKeyHash holds a character that is not a hex digit".into()),
            }
        }
        Ok(Verifier { hash })
    }

    /// Whether an `Authorization` header value carries this key (`Bearer KEY`, the
    /// scheme's case ignored). Constant time in the key's bytes.
    pub fn accepts(&self, authorization: &[u8]) -> bool {
        let text = match std::str::from_utf8(authorization) {
            Ok(t) => t.trim(),
            Err(_) => return false,
        };
        let token = match text.split_once(' ') {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim(),
            _ => return false,
        };
        let presented = Sha256::digest(token.as_bytes());
        let mut diff = 0u8;
        for (a, b) in presented.iter().zip(self.hash.iter()) {
            diff |= a ^ b;
        }
        diff == 0
    }
}

/// Base64url without padding (RFC 4648 §5): the token's text.
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity((bytes.len() * 4 + 2) / 3);
    for chunk in bytes.chunks(3) {
        let n = (chunk[0] as u32) << 16
            | (*chunk.get(1).unwrap_or(&0) as u32) << 8
            | *chunk.get(2).unwrap_or(&0) as u32;
        let digits = chunk.len() + 1;
        for i in 0..digits {
            out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

/// dotnet-monitor's settings holding an API key's hash (`Authentication:MonitorApiKey`).
#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
struct Settings {
    authentication: Authentication,
}

/// `Authentication`.
#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
struct Authentication {
    monitor_api_key: MonitorApiKey,
}

/// `MonitorApiKey`: the hash, never the key.
#[derive(serde::Serialize)]
#[serde(rename_all = "PascalCase")]
struct MonitorApiKey {
    api_key_hash: String,
    api_key_hash_type: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_matches_rfc_4648_vectors() {
        assert_eq!(base64url(b""), "");
        assert_eq!(base64url(b"f"), "Zg");
        assert_eq!(base64url(b"fo"), "Zm8");
        assert_eq!(base64url(b"foo"), "Zm9v");
        assert_eq!(base64url(b"foob"), "Zm9vYg");
        assert_eq!(base64url(&[0xfb, 0xff]), "-_8");
    }

    #[test]
    fn api_key_verifies_only_its_own_token_and_the_file_holds_no_token() {
        let (token, v) = generate().unwrap();
        assert_eq!(token.len(), 43);
        let file = v.settings_json();
        assert!(!file.contains(&token));
        let back = Verifier::parse_settings(&file).unwrap();
        assert!(back.accepts(format!("Bearer {}", token).as_bytes()));
        assert!(back.accepts(format!("bearer  {} ", token).as_bytes()));
        assert!(!back.accepts(token.as_bytes()));
        assert!(!back.accepts(format!("Bearer {}x", token).as_bytes()));
        assert!(!back.accepts(b"Basic dXNlcjpwYXNz"));
        assert!(!back.accepts(&[0xff, 0xfe]));
        // dotnet-monitor's settings shape, indented as `generatekey` prints it.
        assert_eq!(
            Verifier::for_token("abc").settings_json(),
            "{\n  \"Authentication\": {\n    \"MonitorApiKey\": {\n      \"ApiKeyHash\": \"BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD\",\n      \"ApiKeyHashType\": \"SHA256\"\n    }\n  }\n}\n"
        );
        // SHA-256 of "abc" (FIPS 180-2), the hex spelling dotnet-monitor uses.
        assert_eq!(
            Verifier::for_token("abc").hash_hex(),
            "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"
        );
    }

    #[test]
    fn api_key_files_that_are_not_ours_are_named_errors() {
        for (text, needle) in [
            ("", "not JSON"),
            ("{}", "no Authentication.MonitorApiKey"),
            (
                r#"{"MonitorApiKey":{"ApiKeyHash":"00"}}"#,
                "no ApiKeyHashType",
            ),
            (
                r#"{"MonitorApiKey":{"ApiKeyHash":"00","ApiKeyHashType":"MD5"}}"#,
                "MD5",
            ),
            (
                r#"{"MonitorApiKey":{"ApiKeyHash":"00","ApiKeyHashType":"SHA256"}}"#,
                "64 hex",
            ),
        ] {
            let e = Verifier::parse_settings(text).err().unwrap();
            assert!(e.contains(needle), "{:?}: {}", text, e);
        }
    }
}
