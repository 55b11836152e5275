//! dotnet-trace's provider syntax: `Name[:Keywords[:Level[:Args]]]`, comma-separated.

/// One provider to enable, owned (the core's `Provider` borrows from it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSpec {
    pub name: String,
    pub keywords: u64,
    pub level: u32,
    pub args: Option<String>,
}

impl ProviderSpec {
    /// The core's provider, borrowing from this one.
    pub fn as_provider(&self) -> dsipc::payload::Provider<'_> {
        dsipc::payload::Provider {
            keywords: self.keywords,
            log_level: self.level,
            provider_name: dsipc::wire::Text::Str(&self.name),
            arguments: self
                .args
                .as_deref()
                .map_or(dsipc::wire::Text::Null, dsipc::wire::Text::Str),
        }
    }
}

/// dotnet-trace's default keywords (0) and level (4, Informational) for `--providers`.
const DEFAULT_KEYWORDS: u64 = 0;
const DEFAULT_LEVEL: u32 = 4;

/// dotnet-trace's `cpu-sampling` profile, its default when no provider is given:
/// the sample profiler (keywords 0xF00000000000) and the runtime provider with
/// `ClrTraceEventParser.Keywords.Default` (0x14C14FCCBD), both at Informational (4).
pub fn default_providers() -> Vec<ProviderSpec> {
    vec![
        ProviderSpec {
            name: "Microsoft-DotNETCore-SampleProfiler".into(),
            keywords: 0xF000_0000_0000,
            level: 4,
            args: None,
        },
        ProviderSpec {
            name: "Microsoft-Windows-DotNETRuntime".into(),
            keywords: 0x14_C14F_CCBD,
            level: 4,
            args: None,
        },
    ]
}

fn parse_level(token: &str) -> Result<u32, String> {
    if let Ok(n) = token.parse::<u32>() {
        // dotnet-trace clamps numbers above Verbose.
        return Ok(n.min(5));
    }
    Ok(match token.to_ascii_lowercase().as_str() {
        "logalways" => 0,
        "critical" => 1,
        "error" => 2,
        "warning" => 3,
        "informational" => 4,
        "verbose" => 5,
        _ => return Err(format!("unknown event level {:?}", token)),
    })
}

fn parse_keywords(token: &str) -> Result<u64, String> {
    let hex = token
        .strip_prefix("0x")
        .or_else(|| token.strip_prefix("0X"))
        .unwrap_or(token);
    u64::from_str_radix(hex, 16).map_err(|_| format!("keywords {:?} are not hexadecimal", token))
}

/// Splits on `sep` outside double quotes; an unbalanced quote is an error (it would
/// swallow everything after it).
fn split_unquoted(s: &str, sep: char, limit: usize) -> Result<Vec<&str>, String> {
    let mut parts = Vec::new();
    let mut quoted = None;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        if c == '"' {
            quoted = match quoted {
                Some(_) => None,
                None => Some(i),
            };
        } else if c == sep && quoted.is_none() && parts.len() + 1 < limit {
            parts.push(&s[start..i]);
            start = i + c.len_utf8();
        }
    }
    if let Some(at) = quoted {
        return Err(format!(
            "unbalanced double quote in --providers at byte {}: {:?}",
            at, s
        ));
    }
    parts.push(&s[start..]);
    Ok(parts)
}

/// Parses one `Name[:Keywords[:Level[:Args]]]`.
fn parse_one(spec: &str) -> Result<ProviderSpec, String> {
    let tokens = split_unquoted(spec, ':', 4)?;
    let name = tokens[0].trim();
    if name.is_empty() {
        return Err(format!("provider {:?} has no name", spec));
    }
    let field = |i: usize| tokens.get(i).map(|t| t.trim()).filter(|t| !t.is_empty());
    Ok(ProviderSpec {
        name: name.to_string(),
        keywords: field(1).map_or(Ok(DEFAULT_KEYWORDS), parse_keywords)?,
        level: field(2).map_or(Ok(DEFAULT_LEVEL), parse_level)?,
        args: tokens
            .get(3)
            .filter(|a| !a.is_empty())
            .map(|a| a.to_string()),
    })
}

/// Parses a comma-separated list; a provider named twice gets its keywords OR-ed and the
/// more verbose level, as dotnet-trace merges them.
pub fn parse_providers(list: &str) -> Result<Vec<ProviderSpec>, String> {
    let mut out: Vec<ProviderSpec> = Vec::new();
    for spec in split_unquoted(list, ',', usize::MAX)? {
        if spec.trim().is_empty() {
            continue;
        }
        let p = parse_one(spec)?;
        if let Some(existing) = out
            .iter_mut()
            .find(|e| e.name.eq_ignore_ascii_case(&p.name))
        {
            if existing.args.is_some() && p.args.is_some() {
                return Err(format!("provider {} is given twice with arguments", p.name));
            }
            existing.keywords |= p.keywords;
            existing.level = if existing.level == 0 || p.level == 0 {
                0
            } else {
                existing.level.max(p.level)
            };
            if existing.args.is_none() {
                existing.args = p.args;
            }
        } else {
            out.push(p);
        }
    }
    if out.is_empty() {
        return Err("no provider given".into());
    }
    if out.len() > dsipc::payload::eventpipe::MAX_PROVIDERS {
        return Err("too many providers (at most 1000)".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotnet_trace_syntax() {
        let p = parse_providers(
            "Microsoft-Windows-DotNETRuntime:0x8001:5,System.Runtime:::EventCounterIntervalSec=1,Foo:ff:Verbose:a=b:c",
        )
        .unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(p[0].keywords, 0x8001);
        assert_eq!(p[0].level, 5);
        assert_eq!(p[0].args, None);
        assert_eq!(p[1].keywords, 0);
        assert_eq!(p[1].level, 4);
        assert_eq!(p[1].args.as_deref(), Some("EventCounterIntervalSec=1"));
        assert_eq!(p[2].keywords, 0xff);
        assert_eq!(p[2].level, 5);
        assert_eq!(p[2].args.as_deref(), Some("a=b:c"));
        let merged = parse_providers("A:1:2,a:2:4").unwrap();
        assert_eq!(merged.len(), 1);
        assert_eq!((merged[0].keywords, merged[0].level), (3, 4));
        assert_eq!(parse_providers("A::9").unwrap()[0].level, 5);
        assert!(parse_providers("A:zz").is_err());
        assert!(parse_providers(":1").is_err());
        assert!(parse_providers("A::loud").is_err());
        assert!(parse_providers(",").is_err());
        let q = parse_providers("A:::F=\"x,y\",B").unwrap();
        assert_eq!(q.len(), 2);
        assert_eq!(q[0].args.as_deref(), Some("F=\"x,y\""));
    }

    #[test]
    fn unbalanced_quote_is_an_error_not_a_swallowed_provider() {
        let e = parse_providers("A:::x=\"1,B").unwrap_err();
        assert!(e.contains("unbalanced"), "{}", e);
        assert!(parse_providers("A:::\"x\"\"").is_err());
        assert!(parse_providers("A:::\"x\"\"y\",B").is_ok());
    }
}
