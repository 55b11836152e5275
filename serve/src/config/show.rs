//! `config show`: the merged configuration as dotnet-monitor's `config show` writes it
//! (its sections in its order, `:NOT PRESENT:` for an absent one, keys `0`, `1`, ... as
//! arrays), with secrets written `:REDACTED:` unless the level is Full: `PublicKey`,
//! every `Egress:Properties` value, Azure's keys and signatures, and every value of an
//! egress provider it does not know field by field (`S3Storage`).

use super::{Section, REDACTED};

/// What dotnet-monitor writes for an absent section.
pub const NOT_PRESENT: &str = ":NOT PRESENT:";

/// `config show --level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShowLevel {
    /// Secrets redacted (the default).
    Redacted,
    /// Everything as configured.
    Full,
}

/// The top-level sections written whole, after `urls` and `Kestrel`, in dotnet-monitor's
/// order.
const PLAIN: &[&str] = &[
    "CollectionRuleDefaults",
    "GlobalCounter",
    "CollectionRules",
    "Templates",
    "CorsConfiguration",
    "DiagnosticPort",
    "Metrics",
    "Storage",
    "DefaultProcess",
    "Logging",
];

/// An Azure provider's fields, and whether each is redacted.
const AZURE_FIELDS: &[(&str, bool)] = &[
    ("AccountUri", false),
    ("BlobPrefix", false),
    ("ContainerName", false),
    ("CopyBufferSize", false),
    ("QueueName", false),
    ("QueueAccountUri", false),
    ("SharedAccessSignature", true),
    ("AccountKey", true),
    ("QueueSharedAccessSignature", true),
    ("SharedAccessSignatureName", false),
    ("AccountKeyName", false),
    ("QueueSharedAccessSignatureName", false),
    ("ManagedIdentityClientId", false),
];

/// A filesystem provider's fields.
const FILE_SYSTEM_FIELDS: &[&str] = &[
    "DirectoryPath",
    "IntermediateDirectoryPath",
    "CopyBufferSize",
];

/// The JSON written (kept in order).
enum Out {
    Value(Option<String>, Option<String>),
    Object(Vec<(String, Out)>),
    Array(Vec<Out>),
}

/// `config show`'s JSON text for the merged `root` (with `--show-sources`, each value is
/// followed by a `/* source */` comment, as dotnet-monitor writes them).
pub fn show(root: &Section, level: ShowLevel, show_sources: bool) -> String {
    let w = Writer {
        full: level == ShowLevel::Full,
        sources: show_sources,
    };
    let mut top = Vec::new();
    w.child(&mut top, root, "urls", false);
    if let Some(kestrel) = root.get("Kestrel").filter(|s| s.exists()) {
        let mut k = Vec::new();
        if let Some(certs) = kestrel.get("Certificates").filter(|s| s.exists()) {
            let mut c = Vec::new();
            if let Some(default) = certs.get("Default").filter(|s| s.exists()) {
                let mut d = Vec::new();
                w.child(&mut d, default, "Path", false);
                w.child(&mut d, default, "Password", !w.full);
                c.push((default.key().to_string(), Out::Object(d)));
            } else {
                c.push(("Default".into(), not_present()));
            }
            k.push((certs.key().to_string(), Out::Object(c)));
        } else {
            k.push(("Certificates".into(), not_present()));
        }
        top.push((kestrel.key().to_string(), Out::Object(k)));
    } else {
        top.push(("Kestrel".into(), not_present()));
    }
    for name in PLAIN {
        w.child(&mut top, root, name, false);
    }
    if w.full {
        w.child(&mut top, root, "Authentication", false);
        w.child(&mut top, root, "Egress", false);
    } else {
        w.authentication(&mut top, root);
        w.egress(&mut top, root);
    }
    let mut text = String::new();
    write(&mut text, &Out::Object(top), 0);
    text.push('\n');
    text
}

fn not_present() -> Out {
    Out::Value(Some(NOT_PRESENT.into()), None)
}

struct Writer {
    full: bool,
    sources: bool,
}

impl Writer {
    /// `parent:key`, whole, or `:NOT PRESENT:`.
    fn child(&self, out: &mut Vec<(String, Out)>, parent: &Section, key: &str, redact: bool) {
        match parent.get(key).filter(|s| s.exists()) {
            Some(s) => out.push((s.key().to_string(), self.section(s, redact))),
            None => out.push((key.to_string(), not_present())),
        }
    }

    fn section(&self, s: &Section, redact: bool) -> Out {
        // `"DiagnosticPort": "PATH"` is written as its value.
        let leaf = s.children().is_empty()
            || (s.path().eq_ignore_ascii_case("DiagnosticPort")
                && s.value().map_or(false, |v| !v.is_empty()));
        if leaf {
            let value = if redact {
                Some(REDACTED.to_string())
            } else {
                s.value().map(str::to_string)
            };
            let source = if self.sources {
                s.source().map(|x| x.to_string())
            } else {
                None
            };
            return Out::Value(value, source);
        }
        // A rule named "0" is still a rule: CollectionRules is never an array.
        if s.is_array() && !s.path().eq_ignore_ascii_case("CollectionRules") {
            Out::Array(
                s.children()
                    .iter()
                    .map(|c| self.section(c, redact))
                    .collect(),
            )
        } else {
            Out::Object(
                s.children()
                    .iter()
                    .map(|c| (c.key().to_string(), self.section(c, redact)))
                    .collect(),
            )
        }
    }

    /// `Authentication:MonitorApiKey`'s fields only; the public key and a key hash
    /// redacted (a JWK may hold the private key by accident).
    fn authentication(&self, out: &mut Vec<(String, Out)>, root: &Section) {
        let auth = match root.get("Authentication").filter(|s| s.exists()) {
            Some(a) => a,
            None => return out.push(("Authentication".into(), not_present())),
        };
        let mut a = Vec::new();
        match auth.get("MonitorApiKey").filter(|s| s.exists()) {
            Some(key) => {
                let mut k = Vec::new();
                self.child(&mut k, key, "Subject", false);
                self.child(&mut k, key, "PublicKey", true);
                for (field, redact) in [("ApiKeyHash", true), ("ApiKeyHashType", false)] {
                    if let Some(s) = key.get(field).filter(|s| s.exists()) {
                        k.push((s.key().to_string(), self.section(s, redact)));
                    }
                }
                a.push((key.key().to_string(), Out::Object(k)));
            }
            None => a.push(("MonitorApiKey".into(), not_present())),
        }
        out.push((auth.key().to_string(), Out::Object(a)));
    }

    /// `Egress`: `Properties` redacted, Azure's and the file system's known fields (secrets
    /// redacted), any other provider (`S3Storage`) redacted whole.
    fn egress(&self, out: &mut Vec<(String, Out)>, root: &Section) {
        let egress = match root.get("Egress").filter(|s| s.exists()) {
            Some(e) => e,
            None => return out.push(("Egress".into(), not_present())),
        };
        let mut e = Vec::new();
        self.child(&mut e, egress, "Properties", true);
        let mut providers =
            |kind: &str, fields: &[(&str, bool)]| match egress.get(kind).filter(|s| s.exists()) {
                Some(section) => {
                    let mut named = Vec::new();
                    for p in section.children() {
                        let mut f = Vec::new();
                        for (field, redact) in fields {
                            self.child(&mut f, p, field, *redact);
                        }
                        if kind == "AzureBlobStorage" {
                            if let Some(m) = p.get("Metadata").filter(|s| s.exists()) {
                                f.push((m.key().to_string(), self.section(m, false)));
                            }
                        }
                        named.push((p.key().to_string(), Out::Object(f)));
                    }
                    e.push((section.key().to_string(), Out::Object(named)));
                }
                None => e.push((kind.to_string(), not_present())),
            };
        providers("AzureBlobStorage", AZURE_FIELDS);
        let fs: Vec<(&str, bool)> = FILE_SYSTEM_FIELDS.iter().map(|f| (*f, false)).collect();
        providers("FileSystem", &fs);
        for c in egress.children() {
            let known = ["Properties", "AzureBlobStorage", "FileSystem"]
                .iter()
                .any(|k| c.key().eq_ignore_ascii_case(k));
            if !known && c.exists() {
                e.push((c.key().to_string(), self.section(c, true)));
            }
        }
        out.push((egress.key().to_string(), Out::Object(e)));
    }
}

/// Indented two spaces, as dotnet-monitor's writer indents.
fn write(text: &mut String, out: &Out, depth: usize) {
    let pad = |text: &mut String, d: usize| text.push_str(&"  ".repeat(d));
    match out {
        Out::Value(v, source) => {
            match v {
                Some(v) => text.push_str(&serde_json::Value::String(v.clone()).to_string()),
                None => text.push_str("null"),
            }
            if let Some(s) = source {
                // `*/` would end the comment early.
                text.push_str(&format!(" /* {} */", s.replace("*/", "* /")));
            }
        }
        Out::Object(items) if items.is_empty() => text.push_str("{}"),
        Out::Array(items) if items.is_empty() => text.push_str("[]"),
        Out::Object(items) => {
            text.push_str("{\n");
            for (i, (k, v)) in items.iter().enumerate() {
                pad(text, depth + 1);
                text.push_str(&serde_json::Value::String(k.clone()).to_string());
                text.push_str(": ");
                write(text, v, depth + 1);
                text.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
            }
            pad(text, depth);
            text.push('}');
        }
        Out::Array(items) => {
            text.push_str("[\n");
            for (i, v) in items.iter().enumerate() {
                pad(text, depth + 1);
                write(text, v, depth + 1);
                text.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
            }
            pad(text, depth);
            text.push(']');
        }
    }
}
