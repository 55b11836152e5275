//! Transport names as pure functions: Unix socket names, the disambiguation key from
//! `/proc/PID/stat`, Windows pipe names, and the `DOTNET_DiagnosticPorts` syntax.
//!
//! Nothing here touches the file system; adapters read the files and call these.

use core::fmt;

/// `dotnet-diagnostic-`, the start of every default diagnostic socket or pipe name.
pub const NAME_PREFIX: &str = "dotnet-diagnostic-";
/// `-socket`, the end of a Unix socket name.
pub const SOCKET_SUFFIX: &str = "-socket";
/// `\\.\pipe\`, the Windows named-pipe namespace.
pub const PIPE_NAMESPACE: &str = r"\\.\pipe\";
/// Longest Unix socket path (`sun_path` is 108 bytes with its NUL): the runtime silently
/// truncates longer paths, so such a socket cannot be found under its real name.
pub const MAX_SOCKET_PATH: usize = 107;

/// The default Unix socket file name: `dotnet-diagnostic-{pid}-{key}-socket`, placed in
/// `$TMPDIR` or `/tmp`. The key is the process start time (clock ticks since boot on Linux,
/// seconds since the epoch on macOS and FreeBSD).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SocketName {
    /// Process id.
    pub pid: u32,
    /// Disambiguation key.
    pub key: u64,
}

impl SocketName {
    /// Parses a file name (not a path) such as `dotnet-diagnostic-123-4567-socket`.
    pub fn parse(name: &str) -> Option<SocketName> {
        let rest = name
            .strip_prefix(NAME_PREFIX)?
            .strip_suffix(SOCKET_SUFFIX)?;
        let (pid, key) = rest.split_once('-')?;
        Some(SocketName {
            pid: parse_decimal(pid)?,
            key: parse_decimal(key)?,
        })
    }

    /// The prefix every socket of `pid` starts with: `dotnet-diagnostic-{pid}-` (for
    /// matching directory entries when the key is unknown).
    pub fn prefix_for(pid: u32) -> PidPrefix {
        PidPrefix(pid)
    }
}

impl fmt::Display for SocketName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}-{}{}",
            NAME_PREFIX, self.pid, self.key, SOCKET_SUFFIX
        )
    }
}

/// Displays as `dotnet-diagnostic-{pid}-`; see [`SocketName::prefix_for`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PidPrefix(pub u32);

impl fmt::Display for PidPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}-", NAME_PREFIX, self.0)
    }
}

/// Parses a non-empty run of ASCII digits (no sign, no spaces) without overflow.
fn parse_decimal<T: TryFrom<u64>>(s: &str) -> Option<T> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut v: u64 = 0;
    for b in s.bytes() {
        v = v.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    T::try_from(v).ok()
}

/// Why the text of `/proc/PID/stat` gave no key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum StatError {
    /// No `)` closing the command name.
    NoCommandEnd,
    /// Fewer than 22 fields.
    MissingField,
    /// Field 22 is not a number.
    BadNumber,
}

impl fmt::Display for StatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StatError::NoCommandEnd => "no ')' ends the command name in /proc/PID/stat",
            StatError::MissingField => "/proc/PID/stat has fewer than 22 fields",
            StatError::BadNumber => "the start time in /proc/PID/stat is not a number",
        })
    }
}

/// The disambiguation key of a Linux process: field 22 (`starttime`) of `/proc/PID/stat`.
///
/// The command name (field 2) may itself contain spaces and parentheses, so fields are
/// counted after the **last** `)`.
pub fn key_from_proc_stat(stat: &[u8]) -> Result<u64, StatError> {
    let close = stat
        .iter()
        .rposition(|&b| b == b')')
        .ok_or(StatError::NoCommandEnd)?;
    // After ")" come fields 3 (state), 4, ...; starttime (22) is the 20th of them.
    let field = stat[close + 1..]
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty())
        .nth(19)
        .ok_or(StatError::MissingField)?;
    let text = core::str::from_utf8(field).map_err(|_| StatError::BadNumber)?;
    parse_decimal(text).ok_or(StatError::BadNumber)
}

/// The Windows pipe of a runtime: `\\.\pipe\dotnet-diagnostic-{pid}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PipeName {
    /// Process id.
    pub pid: u32,
}

impl PipeName {
    /// Parses `\\.\pipe\dotnet-diagnostic-{pid}` or the bare `dotnet-diagnostic-{pid}`
    /// (as pipe enumeration lists it).
    pub fn parse(name: &str) -> Option<PipeName> {
        let bare = name.strip_prefix(PIPE_NAMESPACE).unwrap_or(name);
        Some(PipeName {
            pid: parse_decimal(bare.strip_prefix(NAME_PREFIX)?)?,
        })
    }
}

impl fmt::Display for PipeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}{}", PIPE_NAMESPACE, NAME_PREFIX, self.pid)
    }
}

/// Whether a diagnostic port is one the runtime connects to or listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PortKind {
    /// The runtime connects to a monitor and sends Advertise (the default).
    Connect,
    /// The runtime listens (ignored by real runtimes for configured ports).
    Listen,
}

/// Whether the runtime waits for ResumeRuntime on this port before starting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum SuspendMode {
    /// Pause startup until ResumeRuntime arrives on this port (the default).
    Suspend,
    /// Do not pause.
    NoSuspend,
}

/// One entry of `DOTNET_DiagnosticPorts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PortConfig<'a> {
    /// Socket path (Unix) or pipe name without `\\.\pipe\` (Windows).
    pub address: &'a str,
    /// Connect or listen.
    pub kind: PortKind,
    /// Suspend or not.
    pub suspend: SuspendMode,
}

impl<'a> PortConfig<'a> {
    /// A `connect,suspend` port: the runtime waits for a monitor at `address`.
    pub fn connect(address: &'a str) -> Self {
        PortConfig {
            address,
            kind: PortKind::Connect,
            suspend: SuspendMode::Suspend,
        }
    }

    /// Parses one `;`-separated entry the way the runtime does: `,`-separated parts, empty
    /// parts skipped, the first part is the address (even if it looks like a tag), the rest
    /// are tags matched case-insensitively; the first tag of each kind wins, unknown tags
    /// are ignored. `None` if there is no address.
    pub fn parse(entry: &'a str) -> Option<Self> {
        let mut parts = entry.split(',').filter(|p| !p.is_empty());
        let address = parts.next()?;
        let mut kind = None;
        let mut suspend = None;
        for tag in parts {
            if tag.eq_ignore_ascii_case("connect") {
                kind.get_or_insert(PortKind::Connect);
            } else if tag.eq_ignore_ascii_case("listen") {
                kind.get_or_insert(PortKind::Listen);
            } else if tag.eq_ignore_ascii_case("suspend") {
                suspend.get_or_insert(SuspendMode::Suspend);
            } else if tag.eq_ignore_ascii_case("nosuspend") {
                suspend.get_or_insert(SuspendMode::NoSuspend);
            }
        }
        Some(PortConfig {
            address,
            kind: kind.unwrap_or(PortKind::Connect),
            suspend: suspend.unwrap_or(SuspendMode::Suspend),
        })
    }
}

impl fmt::Display for PortConfig<'_> {
    /// `address,connect,suspend`: explicit tags, read back identically by the runtime.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.kind {
            PortKind::Connect => "connect",
            PortKind::Listen => "listen",
        };
        let suspend = match self.suspend {
            SuspendMode::Suspend => "suspend",
            SuspendMode::NoSuspend => "nosuspend",
        };
        write!(f, "{},{},{}", self.address, kind, suspend)
    }
}

/// Iterator over the entries of a `DOTNET_DiagnosticPorts` value (`;`-separated, empty
/// entries skipped, as the runtime's `strtok` does).
#[derive(Debug, Clone)]
pub struct DiagnosticPorts<'a> {
    entries: core::str::Split<'a, char>,
}

impl<'a> DiagnosticPorts<'a> {
    /// Parses `value`.
    pub fn parse(value: &'a str) -> Self {
        DiagnosticPorts {
            entries: value.split(';'),
        }
    }
}

impl<'a> Iterator for DiagnosticPorts<'a> {
    type Item = PortConfig<'a>;
    fn next(&mut self) -> Option<PortConfig<'a>> {
        self.entries.by_ref().find_map(PortConfig::parse)
    }
}

/// Formats ports as a `DOTNET_DiagnosticPorts` value (`;`-separated).
#[derive(Debug, Clone, Copy)]
pub struct FormatPorts<'a, 'b>(pub &'b [PortConfig<'a>]);

impl fmt::Display for FormatPorts<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(";")?;
            }
            fmt::Display::fmt(p, f)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::fmt::Write;

    #[test]
    fn socket_names() {
        let n = SocketName {
            pid: 4242,
            key: 987654,
        };
        let mut s = heapless::String::<64>::new();
        write!(s, "{}", n).unwrap();
        assert_eq!(s.as_str(), "dotnet-diagnostic-4242-987654-socket");
        assert_eq!(SocketName::parse(&s), Some(n));
        for bad in [
            "dotnet-diagnostic-4242-socket",
            "dotnet-diagnostic--1-socket",
            "dotnet-diagnostic-+1-2-socket",
            "dotnet-diagnostic-1-2-socketx",
            "dotnet-diagnostic-99999999999-2-socket",
            "clr-debug-pipe-1-2-in",
        ] {
            assert_eq!(SocketName::parse(bad), None, "{}", bad);
        }
        let mut p = heapless::String::<64>::new();
        write!(p, "{}", SocketName::prefix_for(7)).unwrap();
        assert_eq!(p.as_str(), "dotnet-diagnostic-7-");
    }

    #[test]
    fn stat_key_after_last_paren() {
        let stat = b"1234 (we ) ird) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 3 0 5551212 100000 200 18446744073709551615";
        assert_eq!(key_from_proc_stat(stat), Ok(5551212));
        assert_eq!(
            key_from_proc_stat(b"1 (x S 1"),
            Err(StatError::NoCommandEnd)
        );
        assert_eq!(
            key_from_proc_stat(b"1 (x) S 1 2"),
            Err(StatError::MissingField)
        );
        let bad = b"1 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 12a3 0";
        assert_eq!(key_from_proc_stat(bad), Err(StatError::BadNumber));
    }

    #[test]
    fn pipe_names() {
        let mut s = heapless::String::<64>::new();
        write!(s, "{}", PipeName { pid: 31 }).unwrap();
        assert_eq!(s.as_str(), r"\\.\pipe\dotnet-diagnostic-31");
        assert_eq!(PipeName::parse(&s), Some(PipeName { pid: 31 }));
        assert_eq!(
            PipeName::parse("dotnet-diagnostic-31"),
            Some(PipeName { pid: 31 })
        );
        assert_eq!(PipeName::parse("dotnet-diagnostic-31-x"), None);
    }

    #[test]
    fn diagnostic_ports_like_the_runtime() {
        let v = "/a.sock,nosuspend;;/b.sock,SUSPEND,nosuspend,listen,connect;nosuspend,connect;,,/c,bogus";
        let mut it = DiagnosticPorts::parse(v);
        assert_eq!(
            it.next(),
            Some(PortConfig {
                address: "/a.sock",
                kind: PortKind::Connect,
                suspend: SuspendMode::NoSuspend
            })
        );
        assert_eq!(
            it.next(),
            Some(PortConfig {
                address: "/b.sock",
                kind: PortKind::Listen,
                suspend: SuspendMode::Suspend
            })
        );
        // Only tags: the first tag is the address (the spec's own example).
        assert_eq!(
            it.next(),
            Some(PortConfig {
                address: "nosuspend",
                kind: PortKind::Connect,
                suspend: SuspendMode::Suspend
            })
        );
        assert_eq!(it.next(), Some(PortConfig::connect("/c")));
        assert_eq!(it.next(), None);
        assert_eq!(DiagnosticPorts::parse(";;,").next(), None);

        let ports = [
            PortConfig::connect("/x"),
            PortConfig {
                address: "/y",
                kind: PortKind::Connect,
                suspend: SuspendMode::NoSuspend,
            },
        ];
        let mut s = heapless::String::<64>::new();
        write!(s, "{}", FormatPorts(&ports)).unwrap();
        assert_eq!(s.as_str(), "/x,connect,suspend;/y,connect,nosuspend");
        assert!(DiagnosticPorts::parse(&s).eq(ports.iter().copied()));
    }
}
