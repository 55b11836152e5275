//! Command sets and command ids: every `(command_set, command_id)` pair the protocol names.

use core::fmt;

/// A command set (the header's `command_set` byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum CommandSet {
    /// 0x01: dumps.
    Dump,
    /// 0x02: EventPipe tracing.
    EventPipe,
    /// 0x03: profiler attach.
    Profiler,
    /// 0x04: process information and control (.NET 5+).
    Process,
    /// 0xFF: server replies.
    Server,
    /// Any other value.
    Unknown(u8),
}

impl From<u8> for CommandSet {
    fn from(v: u8) -> Self {
        match v {
            0x01 => CommandSet::Dump,
            0x02 => CommandSet::EventPipe,
            0x03 => CommandSet::Profiler,
            0x04 => CommandSet::Process,
            0xFF => CommandSet::Server,
            other => CommandSet::Unknown(other),
        }
    }
}

impl From<CommandSet> for u8 {
    fn from(s: CommandSet) -> u8 {
        match s {
            CommandSet::Dump => 0x01,
            CommandSet::EventPipe => 0x02,
            CommandSet::Profiler => 0x03,
            CommandSet::Process => 0x04,
            CommandSet::Server => 0xFF,
            CommandSet::Unknown(v) => v,
        }
    }
}

macro_rules! commands {
    ($( $(#[$doc:meta])* $name:ident = ($set:literal, $id:literal); )*) => {
        /// A command: the header's `(command_set, command_id)` pair, named after the spec.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[cfg_attr(feature = "defmt", derive(defmt::Format))]
        #[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
        #[non_exhaustive]
        pub enum Command {
            $( $(#[$doc])* $name, )*
            /// A pair this crate does not know.
            Unknown {
                /// The command set byte.
                command_set: u8,
                /// The command id byte.
                command_id: u8,
            },
        }

        impl Command {
            /// Every named command, in code order.
            pub const ALL: &'static [Command] = &[$( Command::$name, )*];

            /// The command for a header's `(command_set, command_id)` (a table lookup per set).
            #[inline]
            pub fn from_code(command_set: u8, command_id: u8) -> Command {
                let table: &[Option<Command>] = match command_set {
                    0x01 => &BY_ID[0],
                    0x02 => &BY_ID[1],
                    0x03 => &BY_ID[2],
                    0x04 => &BY_ID[3],
                    0xFF if command_id == 0x00 => return Command::ServerOk,
                    0xFF if command_id == 0xFF => return Command::ServerError,
                    _ => &[],
                };
                match table.get(usize::from(command_id)) {
                    Some(Some(c)) => *c,
                    _ => Command::Unknown { command_set, command_id },
                }
            }

            /// Slow reference lookup, for the table's own test.
            #[cfg(test)]
            fn from_code_match(command_set: u8, command_id: u8) -> Command {
                match (command_set, command_id) {
                    $( ($set, $id) => Command::$name, )*
                    _ => Command::Unknown { command_set, command_id },
                }
            }

            /// The `(command_set, command_id)` pair.
            pub const fn code(self) -> (u8, u8) {
                match self {
                    $( Command::$name => ($set, $id), )*
                    Command::Unknown { command_set, command_id } => (command_set, command_id),
                }
            }

            /// The spec's name of the command (`"Unknown"` for an unknown pair).
            pub fn name(self) -> &'static str {
                match self {
                    $( Command::$name => stringify!($name), )*
                    Command::Unknown { .. } => "Unknown",
                }
            }

        }
    };
}

commands! {
    /// 0x0101: write a core dump.
    GenerateCoreDump = (0x01, 0x01);
    /// 0x0102: write a core dump, with flags.
    GenerateCoreDump2 = (0x01, 0x02);
    /// 0x0103: write a core dump; failures carry a message.
    GenerateCoreDump3 = (0x01, 0x03);
    /// 0x0201: stop an EventPipe session.
    StopTracing = (0x02, 0x01);
    /// 0x0202: start an EventPipe session streaming on this connection.
    CollectTracing = (0x02, 0x02);
    /// 0x0203: as CollectTracing, choosing whether to run rundown.
    CollectTracing2 = (0x02, 0x03);
    /// 0x0204: as CollectTracing2, choosing whether to collect stacks.
    CollectTracing3 = (0x02, 0x04);
    /// 0x0205: as CollectTracing3 with an explicit rundown keyword.
    CollectTracing4 = (0x02, 0x05);
    /// 0x0206: streaming or user_events sessions, with event filters.
    CollectTracing5 = (0x02, 0x06);
    /// 0x0207: CollectTracing5 plus a buffering mode for streaming sessions.
    CollectTracing6 = (0x02, 0x07);
    /// 0x0301: attach a profiler to a running runtime.
    AttachProfiler = (0x03, 0x01);
    /// 0x0302: register a startup profiler while suspended.
    StartupProfiler = (0x03, 0x02);
    /// 0x0400: basic process information.
    ProcessInfo = (0x04, 0x00);
    /// 0x0401: resume a runtime suspended at startup.
    ResumeRuntime = (0x04, 0x01);
    /// 0x0402: read the process environment.
    ProcessEnvironment = (0x04, 0x02);
    /// 0x0403: set or unset an environment variable.
    SetEnvironmentVariable = (0x04, 0x03);
    /// 0x0404: ProcessInfo plus entrypoint assembly and CLR version.
    ProcessInfo2 = (0x04, 0x04);
    /// 0x0405: start writing perf maps / jitdump.
    EnablePerfMap = (0x04, 0x05);
    /// 0x0406: stop writing perf maps / jitdump.
    DisablePerfMap = (0x04, 0x06);
    /// 0x0407: add a startup hook.
    ApplyStartupHook = (0x04, 0x07);
    /// 0x0408: versioned ProcessInfo with the runtime identifier.
    ProcessInfo3 = (0x04, 0x08);
    /// 0xFF00: generic success reply.
    ServerOk = (0xFF, 0x00);
    /// 0xFFFF: error reply.
    ServerError = (0xFF, 0xFF);
}

/// Commands of sets 0x01 to 0x04, indexed by id (set 0xFF is matched directly).
const BY_ID: [[Option<Command>; 9]; 4] = {
    let mut t = [[None; 9]; 4];
    let mut i = 0;
    while i < Command::ALL.len() {
        let c = Command::ALL[i];
        let (set, id) = c.code();
        if set >= 1 && set <= 4 {
            t[set as usize - 1][id as usize] = Some(c);
        }
        i += 1;
    }
    t
};

impl Command {
    /// The command set.
    pub fn set(self) -> CommandSet {
        CommandSet::from(self.code().0)
    }

    /// True for the two server reply codes.
    pub fn is_reply(self) -> bool {
        matches!(self, Command::ServerOk | Command::ServerError)
    }

    /// The .NET major version that first served this command, where a runtime older than
    /// that rejects it (UNKNOWN_COMMAND) and a client may want to say so: CollectTracing4, 5
    /// and 6 (.NET 9, 10, 11) and the Process set (.NET 5, when the set arrived; some of its
    /// commands came later). `None` for the rest (served by every runtime since .NET Core
    /// 3.0, or unknown).
    pub fn introduced_in(self) -> Option<u8> {
        match self {
            Command::CollectTracing4 => Some(9),
            Command::CollectTracing5 => Some(10),
            Command::CollectTracing6 => Some(11),
            c if c.set() == CommandSet::Process => Some(5),
            _ => None,
        }
    }

    /// True for the commands that start an EventPipe session (CollectTracing 1-6).
    pub fn is_collect_tracing(self) -> bool {
        matches!(
            self,
            Command::CollectTracing
                | Command::CollectTracing2
                | Command::CollectTracing3
                | Command::CollectTracing4
                | Command::CollectTracing5
                | Command::CollectTracing6
        )
    }
}

impl fmt::Display for Command {
    /// `ProcessInfo (0x0400)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (s, i) = self.code();
        write!(f, "{} (0x{:02X}{:02X})", self.name(), s, i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_lookup_equals_the_match() {
        for set in 0..=255u8 {
            for id in 0..=255u8 {
                assert_eq!(
                    Command::from_code(set, id),
                    Command::from_code_match(set, id)
                );
            }
        }
    }

    #[test]
    fn introduced_in_names_the_late_commands() {
        assert_eq!(Command::CollectTracing4.introduced_in(), Some(9));
        assert_eq!(Command::CollectTracing6.introduced_in(), Some(11));
        assert_eq!(Command::ProcessInfo3.introduced_in(), Some(5));
        assert_eq!(Command::CollectTracing2.introduced_in(), None);
        assert_eq!(Command::GenerateCoreDump.introduced_in(), None);
        assert_eq!(Command::from_code(9, 9).introduced_in(), None);
    }

    #[test]
    fn codes_round_trip() {
        for &c in Command::ALL {
            let (s, i) = c.code();
            assert_eq!(Command::from_code(s, i), c);
        }
        assert_eq!(
            Command::from_code(0x04, 0x09),
            Command::Unknown {
                command_set: 4,
                command_id: 9
            }
        );
        assert_eq!(Command::from_code(2, 4), Command::CollectTracing3);
        assert_eq!(Command::from_code(4, 6), Command::DisablePerfMap);
        assert_eq!(CommandSet::from(7), CommandSet::Unknown(7));
    }
}
