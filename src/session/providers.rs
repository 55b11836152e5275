//! Which providers a session enables: dotnet-trace's `--providers` syntax
//! (`Name[:Keywords[:Level[:Args]]]`, comma-separated) and its built-in profiles
//! (`cpu-sampling`, `gc-verbose`, `gc-collect`, `database`), as owned [`ProviderSpec`]s.

use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use crate::payload::eventpipe::MAX_PROVIDERS;
use crate::payload::Provider;
use crate::wire::Text;

/// One provider to enable, owned (the core's [`Provider`] borrows from it). A plain record,
/// as the core's `Provider` is: build it with a literal or [`ProviderSpec::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderSpec {
    /// The provider's name (EventSource name).
    pub name: String,
    /// Keywords to enable.
    pub keywords: u64,
    /// Level, 0 (log always) to 5 (verbose).
    pub level: u32,
    /// `key=value;...` arguments.
    pub args: Option<String>,
}

impl ProviderSpec {
    /// A provider with no arguments.
    pub fn new(name: &str, keywords: u64, level: u32) -> Self {
        ProviderSpec {
            name: name.to_string(),
            keywords,
            level,
            args: None,
        }
    }

    /// The same provider with arguments.
    pub fn with_args(mut self, args: &str) -> Self {
        self.args = Some(args.to_string());
        self
    }

    /// The core's provider, borrowing from this one.
    pub fn as_provider(&self) -> Provider<'_> {
        Provider {
            keywords: self.keywords,
            log_level: self.level,
            provider_name: Text::Str(&self.name),
            arguments: self.args.as_deref().map_or(Text::Null, Text::Str),
        }
    }
}

/// Why a `--providers` list does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProviderError {
    /// A provider without a name (`:1`).
    NoName {
        /// The provider as given.
        spec: String,
    },
    /// Keywords that are not hexadecimal.
    Keywords {
        /// The keywords as given.
        token: String,
    },
    /// A level that is neither 0-5 nor a level name.
    Level {
        /// The level as given.
        token: String,
    },
    /// A double quote that is never closed (it would swallow the rest of the list).
    UnbalancedQuote {
        /// Byte offset of the quote.
        at: usize,
        /// The list as given.
        list: String,
    },
    /// One provider given twice, both times with arguments.
    ArgumentsTwice {
        /// The provider.
        name: String,
    },
    /// No provider at all.
    Empty,
    /// More than the runtime accepts ([`MAX_PROVIDERS`]).
    TooMany {
        /// How many were given.
        count: usize,
    },
    /// A profile name dotnet-trace does not know.
    UnknownProfile {
        /// The name as given.
        name: String,
    },
    /// A `--clrevents` keyword name dotnet-trace does not know.
    ClrEvent {
        /// The name as given.
        name: String,
    },
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProviderError::NoName { spec } => write!(f, "provider {spec:?} has no name"),
            ProviderError::Keywords { token } => {
                write!(f, "keywords {token:?} are not hexadecimal")
            }
            ProviderError::Level { token } => write!(f, "unknown event level {token:?}"),
            ProviderError::UnbalancedQuote { at, list } => write!(
                f,
                "unbalanced double quote in --providers at byte {at}: {list:?}"
            ),
            ProviderError::ArgumentsTwice { name } => {
                write!(f, "provider {name} is given twice with arguments")
            }
            ProviderError::Empty => f.write_str("no provider given"),
            ProviderError::TooMany { count } => {
                write!(f, "too many providers ({count}; at most {MAX_PROVIDERS})")
            }
            ProviderError::ClrEvent { name } => {
                write!(f, "{name:?} is not a valid CLR event keyword")
            }
            ProviderError::UnknownProfile { name } => write!(
                f,
                "unknown profile {name:?} (known: {})",
                Profile::ALL
                    .iter()
                    .map(|p| p.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ProviderError {}

/// dotnet-trace's keywords for a provider given without them (or with an empty field):
/// all of them (its `Extensions.ToProvider` passes -1).
pub const DEFAULT_KEYWORDS: u64 = u64::MAX;
/// dotnet-trace's level for a provider given without one: 5, Verbose.
pub const DEFAULT_LEVEL: u32 = 5;

/// The runtime provider.
pub const RUNTIME_PROVIDER: &str = "Microsoft-Windows-DotNETRuntime";
/// `ClrTraceEventParser.Keywords.Default`: what `cpu-sampling` asks of the runtime.
pub const RUNTIME_DEFAULT_KEYWORDS: u64 = 0x14_C14F_CCBD;

/// dotnet-trace's built-in profiles (`dotnet-trace list-profiles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Profile {
    /// `cpu-sampling`: the sample profiler and the runtime's default keywords; dotnet-trace's
    /// default when no profile or provider is given.
    CpuSampling,
    /// `gc-verbose`: GC collections and sampled allocations (GC, GCHandle and Exception at
    /// Verbose).
    GcVerbose,
    /// `gc-collect`: GC collections only, at very low overhead.
    GcCollect,
    /// `database`: ADO.NET and Entity Framework commands (DiagnosticSource with activity ids).
    Database,
}

impl Profile {
    /// Every profile, in dotnet-trace's order.
    pub const ALL: [Profile; 4] = [
        Profile::CpuSampling,
        Profile::GcVerbose,
        Profile::GcCollect,
        Profile::Database,
    ];

    /// Its name as dotnet-trace spells it.
    pub fn name(self) -> &'static str {
        match self {
            Profile::CpuSampling => "cpu-sampling",
            Profile::GcVerbose => "gc-verbose",
            Profile::GcCollect => "gc-collect",
            Profile::Database => "database",
        }
    }

    /// dotnet-trace's description of it.
    pub fn description(self) -> &'static str {
        match self {
            Profile::CpuSampling => "Useful for tracking CPU usage and general .NET runtime information. This is the default option if no profile or providers are specified.",
            Profile::GcVerbose => "Tracks GC collections and samples object allocations.",
            Profile::GcCollect => "Tracks GC collections only at very low overhead.",
            Profile::Database => "Captures ADO.NET and Entity Framework database commands",
        }
    }

    /// The profile named `name` (case-insensitive).
    pub fn parse(name: &str) -> Result<Profile, ProviderError> {
        Profile::ALL
            .iter()
            .copied()
            .find(|p| p.name().eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| ProviderError::UnknownProfile {
                name: name.to_string(),
            })
    }

    /// Its providers, as dotnet-trace enables them.
    pub fn providers(self) -> Vec<ProviderSpec> {
        // ClrTraceEventParser.Keywords: GC 0x1, GCHandle 0x2, Exception 0x8000.
        const GC: u64 = 0x1;
        match self {
            Profile::CpuSampling => vec![
                ProviderSpec::new("Microsoft-DotNETCore-SampleProfiler", 0xF000_0000_0000, 4),
                ProviderSpec::new(RUNTIME_PROVIDER, RUNTIME_DEFAULT_KEYWORDS, 4),
            ],
            Profile::GcVerbose => vec![ProviderSpec::new(RUNTIME_PROVIDER, GC | 0x2 | 0x8000, 5)],
            Profile::GcCollect => vec![
                ProviderSpec::new(RUNTIME_PROVIDER, GC, 4),
                ProviderSpec::new("Microsoft-Windows-DotNETRuntimePrivate", GC, 4),
            ],
            Profile::Database => vec![
                // TplEtwProviderTraceEventParser.Keywords.TasksFlowActivityIds.
                ProviderSpec::new("System.Threading.Tasks.TplEventSource", 0x80, 4),
                // DiagnosticSourceEventSource: Messages | Events.
                ProviderSpec::new("Microsoft-Diagnostics-DiagnosticSource", 0x3, 5).with_args(
                    concat!(
                        "FilterAndPayloadSpecs=",
                        "SqlClientDiagnosticListener/System.Data.SqlClient.WriteCommandBefore@Activity1Start:-Command;Command.CommandText;ConnectionId;Operation;Command.Connection.ServerVersion;Command.CommandTimeout;Command.CommandType;Command.Connection.ConnectionString;Command.Connection.Database;Command.Connection.DataSource;Command.Connection.PacketSize\r\n",
                        "SqlClientDiagnosticListener/System.Data.SqlClient.WriteCommandAfter@Activity1Stop:\r\n",
                        "Microsoft.EntityFrameworkCore/Microsoft.EntityFrameworkCore.Database.Command.CommandExecuting@Activity2Start:-Command.CommandText;Command;ConnectionId;IsAsync;Command.Connection.ClientConnectionId;Command.Connection.ServerVersion;Command.CommandTimeout;Command.CommandType;Command.Connection.ConnectionString;Command.Connection.Database;Command.Connection.DataSource;Command.Connection.PacketSize\r\n",
                        "Microsoft.EntityFrameworkCore/Microsoft.EntityFrameworkCore.Database.Command.CommandExecuted@Activity2Stop:",
                    ),
                ),
            ],
        }
    }
}

/// dotnet-trace's `--clrevents` keyword names (its `Extensions.CLREventKeywords`, from the
/// runtime's ClrEtwAll.man), matched case-insensitively.
pub const CLR_EVENT_KEYWORDS: [(&str, u64); 35] = [
    ("gc", 0x1),
    ("gchandle", 0x2),
    ("fusion", 0x4),
    ("loader", 0x8),
    ("jit", 0x10),
    ("ngen", 0x20),
    ("startenumeration", 0x40),
    ("endenumeration", 0x80),
    ("security", 0x400),
    ("appdomainresourcemanagement", 0x800),
    ("jittracing", 0x1000),
    ("interop", 0x2000),
    ("contention", 0x4000),
    ("exception", 0x8000),
    ("threading", 0x10000),
    ("jittedmethodiltonativemap", 0x20000),
    ("overrideandsuppressngenevents", 0x40000),
    ("type", 0x80000),
    ("gcheapdump", 0x10_0000),
    ("gcsampledobjectallocationhigh", 0x20_0000),
    ("gcheapsurvivalandmovement", 0x40_0000),
    ("gcheapcollect", 0x80_0000),
    ("gcheapandtypenames", 0x100_0000),
    ("gcsampledobjectallocationlow", 0x200_0000),
    ("perftrack", 0x2000_0000),
    ("stack", 0x4000_0000),
    ("threadtransfer", 0x8000_0000),
    ("debugger", 0x1_0000_0000),
    ("monitoring", 0x2_0000_0000),
    ("codesymbols", 0x4_0000_0000),
    ("eventsource", 0x8_0000_0000),
    ("compilation", 0x10_0000_0000),
    ("compilationdiagnostic", 0x20_0000_0000),
    ("methoddiagnostic", 0x40_0000_0000),
    ("typediagnostic", 0x80_0000_0000),
];

/// dotnet-trace's `--clrevents gc+jit` (keyword names joined by `+`) with its
/// `--clreventlevel` (a level number or name; default 4, Informational): the runtime
/// provider with those keywords.
pub fn clr_events_provider(list: &str, level: Option<&str>) -> Result<ProviderSpec, ProviderError> {
    let mut keywords = 0;
    for name in list.split('+') {
        let name = name.trim();
        keywords |= CLR_EVENT_KEYWORDS
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, bits)| *bits)
            .ok_or_else(|| ProviderError::ClrEvent {
                name: name.to_string(),
            })?;
    }
    let level = match level.map(str::trim).filter(|l| !l.is_empty()) {
        Some(l) => parse_level(l)?,
        None => 4,
    };
    Ok(ProviderSpec::new(RUNTIME_PROVIDER, keywords, level))
}

/// What a dotnet-trace collect command line asks for: `--providers`, `--profile` (one or
/// more names, comma-separated) and `--clrevents`/`--clreventlevel`, combined as dotnet-trace
/// combines them. Nothing at all is the `cpu-sampling` profile. A provider named in
/// `--providers` overrides the profile's; `--clrevents` is ignored (a note says so) when
/// the runtime provider is already enabled by one of the others.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CollectArgs<'a> {
    /// `--providers`.
    pub providers: Option<&'a str>,
    /// `--profile`.
    pub profile: Option<&'a str>,
    /// `--clrevents`.
    pub clrevents: Option<&'a str>,
    /// `--clreventlevel`.
    pub clreventlevel: Option<&'a str>,
}

impl CollectArgs<'_> {
    /// The providers to enable, and notes for the user (an ignored `--clrevents`).
    pub fn resolve(&self) -> Result<(Vec<ProviderSpec>, Vec<String>), ProviderError> {
        let mut notes = Vec::new();
        let mut out = match self.providers {
            Some(list) => parse_providers(list)?,
            None => Vec::new(),
        };
        let profile = match (self.profile, self.providers, self.clrevents) {
            (None, None, None) => Some(Profile::CpuSampling.name()),
            (p, _, _) => p,
        };
        if let Some(names) = profile {
            for name in names.split(',').filter(|n| !n.trim().is_empty()) {
                for p in Profile::parse(name)?.providers() {
                    if !out.iter().any(|o| o.name.eq_ignore_ascii_case(&p.name)) {
                        out.push(p);
                    }
                }
            }
        }
        if let Some(list) = self.clrevents {
            if out
                .iter()
                .any(|o| o.name.eq_ignore_ascii_case(RUNTIME_PROVIDER))
            {
                notes.push(alloc::format!(
                    "--clrevents {list} is ignored: --profile or --providers already enables {RUNTIME_PROVIDER}"
                ));
            } else {
                out.push(clr_events_provider(list, self.clreventlevel)?);
            }
        } else if self.clreventlevel.is_some() {
            notes.push("--clreventlevel is ignored without --clrevents".to_string());
        }
        if out.is_empty() {
            return Err(ProviderError::Empty);
        }
        if out.len() > MAX_PROVIDERS {
            return Err(ProviderError::TooMany { count: out.len() });
        }
        Ok((out, notes))
    }
}

fn parse_level(token: &str) -> Result<u32, ProviderError> {
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
        _ => {
            return Err(ProviderError::Level {
                token: token.to_string(),
            })
        }
    })
}

fn parse_keywords(token: &str) -> Result<u64, ProviderError> {
    let hex = token
        .strip_prefix("0x")
        .or_else(|| token.strip_prefix("0X"))
        .unwrap_or(token);
    u64::from_str_radix(hex, 16).map_err(|_| ProviderError::Keywords {
        token: token.to_string(),
    })
}

/// Splits on `sep` outside double quotes; an unbalanced quote is an error (it would
/// swallow everything after it).
fn split_unquoted(s: &str, sep: char, limit: usize) -> Result<Vec<&str>, ProviderError> {
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
        return Err(ProviderError::UnbalancedQuote {
            at,
            list: s.to_string(),
        });
    }
    parts.push(&s[start..]);
    Ok(parts)
}

/// Parses one `Name[:Keywords[:Level[:Args]]]`.
fn parse_one(spec: &str) -> Result<ProviderSpec, ProviderError> {
    let tokens = split_unquoted(spec, ':', 4)?;
    let name = tokens[0].trim();
    if name.is_empty() {
        return Err(ProviderError::NoName {
            spec: spec.to_string(),
        });
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

/// Adds `p` to `out`, merged as dotnet-trace merges a provider named twice: keywords
/// or'ed, the more verbose level (0, LogAlways, wins), one set of arguments.
pub fn merge_provider(out: &mut Vec<ProviderSpec>, p: ProviderSpec) -> Result<(), ProviderError> {
    if let Some(existing) = out
        .iter_mut()
        .find(|e| e.name.eq_ignore_ascii_case(&p.name))
    {
        if existing.args.is_some() && p.args.is_some() && existing.args != p.args {
            return Err(ProviderError::ArgumentsTwice { name: p.name });
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
    Ok(())
}

/// Parses a comma-separated `--providers` list; a provider named twice is merged
/// ([`merge_provider`]).
pub fn parse_providers(list: &str) -> Result<Vec<ProviderSpec>, ProviderError> {
    let mut out: Vec<ProviderSpec> = Vec::new();
    for spec in split_unquoted(list, ',', usize::MAX)? {
        if spec.trim().is_empty() {
            continue;
        }
        merge_provider(&mut out, parse_one(spec)?)?;
    }
    if out.is_empty() {
        return Err(ProviderError::Empty);
    }
    if out.len() > MAX_PROVIDERS {
        return Err(ProviderError::TooMany { count: out.len() });
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
        assert_eq!(
            (p[0].keywords, p[0].level, p[0].args.as_deref()),
            (0x8001, 5, None)
        );
        // A bare name is every keyword at Verbose, as dotnet-trace enables it.
        assert_eq!((p[1].keywords, p[1].level), (u64::MAX, 5));
        assert_eq!(p[1].args.as_deref(), Some("EventCounterIntervalSec=1"));
        assert_eq!((p[2].keywords, p[2].level), (0xff, 5));
        assert_eq!(p[2].args.as_deref(), Some("a=b:c"));
        let bare = parse_providers("Microsoft-Windows-DotNETRuntime").unwrap();
        assert_eq!((bare[0].keywords, bare[0].level), (u64::MAX, 5));
        let merged = parse_providers("A:1:2,a:2:4").unwrap();
        assert_eq!(merged.len(), 1);
        assert_eq!((merged[0].keywords, merged[0].level), (3, 4));
        assert_eq!(parse_providers("A::9").unwrap()[0].level, 5);
        assert!(matches!(
            parse_providers("A:zz"),
            Err(ProviderError::Keywords { .. })
        ));
        assert!(matches!(
            parse_providers(":1"),
            Err(ProviderError::NoName { .. })
        ));
        assert!(matches!(
            parse_providers("A::loud"),
            Err(ProviderError::Level { .. })
        ));
        assert_eq!(parse_providers(","), Err(ProviderError::Empty));
        let q = parse_providers("A:::F=\"x,y\",B").unwrap();
        assert_eq!(q.len(), 2);
        assert_eq!(q[0].args.as_deref(), Some("F=\"x,y\""));
    }

    #[test]
    fn unbalanced_quote_is_an_error_not_a_swallowed_provider() {
        let e = parse_providers("A:::x=\"1,B").unwrap_err();
        assert!(e.to_string().contains("unbalanced"), "{e}");
        assert!(parse_providers("A:::\"x\"\"").is_err());
        assert!(parse_providers("A:::\"x\"\"y\",B").is_ok());
    }

    #[test]
    fn clrevents_and_profiles_combine_as_in_dotnet_trace() {
        let gc = clr_events_provider("gc+GCHandle", Some("5")).unwrap();
        assert_eq!(
            (gc.name.as_str(), gc.keywords, gc.level),
            (RUNTIME_PROVIDER, 3, 5)
        );
        assert_eq!(clr_events_provider("jit", None).unwrap().level, 4);
        assert_eq!(
            clr_events_provider("gc+nope", None),
            Err(ProviderError::ClrEvent {
                name: "nope".into()
            })
        );
        // Nothing: cpu-sampling.
        let (p, _) = CollectArgs::default().resolve().unwrap();
        assert_eq!(p, Profile::CpuSampling.providers());
        // --providers overrides the profile's runtime provider, keeps the rest.
        let (p, _) = CollectArgs {
            providers: Some("Microsoft-Windows-DotNETRuntime:0x8:5"),
            profile: Some("cpu-sampling"),
            ..CollectArgs::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(p.len(), 2);
        assert_eq!((p[0].keywords, p[0].level), (0x8, 5));
        assert_eq!(p[1].name, "Microsoft-DotNETCore-SampleProfiler");
        // --clrevents alone is the runtime provider only; beside a profile that enables
        // it, ignored with a note.
        let (p, notes) = CollectArgs {
            clrevents: Some("gc"),
            ..CollectArgs::default()
        }
        .resolve()
        .unwrap();
        assert_eq!((p.len(), p[0].keywords, notes.len()), (1, 1, 0));
        let (p, notes) = CollectArgs {
            profile: Some("gc-collect"),
            clrevents: Some("jit"),
            ..CollectArgs::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(p, Profile::GcCollect.providers());
        assert!(notes[0].contains("ignored"), "{notes:?}");
        assert!(CollectArgs {
            profile: Some("cpu"),
            ..CollectArgs::default()
        }
        .resolve()
        .is_err());
    }

    #[test]
    fn profiles_are_dotnet_traces() {
        assert_eq!(Profile::parse("CPU-Sampling"), Ok(Profile::CpuSampling));
        assert!(matches!(
            Profile::parse("cpu"),
            Err(ProviderError::UnknownProfile { .. })
        ));
        let cpu = Profile::CpuSampling.providers();
        assert_eq!(cpu[1].keywords, RUNTIME_DEFAULT_KEYWORDS);
        let gc = Profile::GcVerbose.providers();
        assert_eq!((gc[0].keywords, gc[0].level), (0x8003, 5));
        assert_eq!(Profile::GcCollect.providers().len(), 2);
        let db = Profile::Database.providers();
        assert!(db[1]
            .args
            .as_deref()
            .unwrap()
            .starts_with("FilterAndPayloadSpecs="));
        for p in Profile::ALL {
            assert_eq!(Profile::parse(p.name()), Ok(p));
            assert!(!p.description().is_empty());
        }
    }
}
