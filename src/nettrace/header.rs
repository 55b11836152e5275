//! The stream header and the `Trace` object (V4/V5) or Trace block (V6).

use super::error::NettraceError;
use super::text::TraceStr;
use super::varint::Cur;

/// `Nettrace`, the first 8 bytes of every V4, V5 and V6 stream.
pub const MAGIC: [u8; 8] = *b"Nettrace";

/// The FastSerialization signature after the magic in V4/V5 streams (`i32 20` + 20 ASCII
/// bytes); NetPerf streams start with it directly.
pub const FAST_SERIALIZATION: [u8; 24] = *b"\x14\x00\x00\x00!FastSerialization.1";

/// Length of a V4/V5 stream header (`Nettrace` + [`FAST_SERIALIZATION`]).
pub const V4_STREAM_HEADER_LEN: usize = 32;

/// Length of a V6 stream header (`Nettrace`, `u32 0`, `u32 major`, `u32 minor`).
pub const V6_STREAM_HEADER_LEN: usize = 20;

/// The highest V6-style major version this parser reads.
pub const MAX_MAJOR_VERSION: u32 = 6;

/// The framing of a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Format {
    /// FastSerialization framing: nettrace V4 or V5 (every runtime from .NET Core 3.0 to
    /// .NET 10). Both declare `Trace` version 4; V5 metadata tags are decoded when present.
    V4,
    /// Block framing without FastSerialization (`dotnet-trace collect-linux`).
    V6 {
        /// The minor version (later minors only add things a reader may skip).
        minor: u32,
    },
}

impl Format {
    /// True for [`Format::V6`].
    pub fn is_v6(&self) -> bool {
        matches!(self, Format::V6 { .. })
    }
}

/// A Windows `SYSTEMTIME` (UTC), the wall-clock time of the trace's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct SystemTime {
    /// Year.
    pub year: u16,
    /// Month, 1-12.
    pub month: u16,
    /// Day of the week, 0 = Sunday.
    pub day_of_week: u16,
    /// Day of the month, 1-31.
    pub day: u16,
    /// Hour, 0-23.
    pub hour: u16,
    /// Minute.
    pub minute: u16,
    /// Second.
    pub second: u16,
    /// Millisecond.
    pub millisecond: u16,
}

impl SystemTime {
    pub(crate) fn read(c: &mut Cur<'_>) -> Result<SystemTime, NettraceError> {
        Ok(SystemTime {
            year: c.u16("SyncTimeUTC")?,
            month: c.u16("SyncTimeUTC")?,
            day_of_week: c.u16("SyncTimeUTC")?,
            day: c.u16("SyncTimeUTC")?,
            hour: c.u16("SyncTimeUTC")?,
            minute: c.u16("SyncTimeUTC")?,
            second: c.u16("SyncTimeUTC")?,
            millisecond: c.u16("SyncTimeUTC")?,
        })
    }
}

/// What the trace says about itself: its first item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct TraceHeader<'a> {
    /// The stream's framing.
    pub format: Format,
    /// Wall-clock (UTC) time of the trace's start.
    pub sync_time_utc: SystemTime,
    /// The QPC timestamp taken at `sync_time_utc`; event timestamps are on the same clock.
    pub sync_time_qpc: i64,
    /// QPC ticks per second.
    pub qpc_frequency: i64,
    /// Pointer size of the traced process (4 or 8): the size of each IP in stack blocks.
    pub pointer_size: u8,
    /// Process id of the traced process (V6: the `ProcessId` key, 0 when absent).
    pub process_id: u32,
    /// Number of processors (V6: the `HardwareThreadCount` key, 0 when absent).
    pub number_of_processors: u32,
    /// Expected CPU sampling interval in ns (V6: the `ExpectedCPUSamplingRate` key, 0 when
    /// absent).
    pub sampling_interval_ns: u32,
    /// V6 key/value pairs (empty for V4/V5).
    pub key_values: KeyValues<'a>,
}

impl<'a> TraceHeader<'a> {
    /// Converts a timestamp of this trace to nanoseconds since the trace's start
    /// (`sync_time_qpc`); negative for earlier timestamps. 0 if the frequency is not positive.
    pub fn nanos_since_start(&self, timestamp: i64) -> i64 {
        if self.qpc_frequency <= 0 {
            return 0;
        }
        let d = i128::from(timestamp) - i128::from(self.sync_time_qpc);
        let ns = d * 1_000_000_000 / i128::from(self.qpc_frequency);
        ns.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
    }

    /// Reads what both versions start with (clock, tick rate, pointer size), naming the two
    /// tick fields as the version does; the rest is zero (V4).
    fn read_start(
        c: &mut Cur<'a>,
        ticks: &'static str,
        frequency: &'static str,
    ) -> Result<TraceHeader<'a>, NettraceError> {
        let sync_time_utc = SystemTime::read(c)?;
        let sync_time_qpc = c.i64(ticks)?;
        let qpc_frequency = c.i64(frequency)?;
        let ptr_at = c.offset();
        let pointer_size = check_pointer_size(c.u32("PointerSize")?, ptr_at)?;
        Ok(TraceHeader {
            format: Format::V4,
            sync_time_utc,
            sync_time_qpc,
            qpc_frequency,
            pointer_size,
            process_id: 0,
            number_of_processors: 0,
            sampling_interval_ns: 0,
            key_values: KeyValues::EMPTY,
        })
    }

    /// Parses the 48-byte body of a V4/V5 `Trace` object at stream offset `base`.
    pub(crate) fn parse_v4(body: &'a [u8], base: u64) -> Result<TraceHeader<'a>, NettraceError> {
        let mut c = Cur::new(body, base);
        let mut h = Self::read_start(&mut c, "SyncTimeQPC", "QPCFrequency")?;
        h.process_id = c.u32("ProcessId")?;
        h.number_of_processors = c.u32("NumberOfProcessors")?;
        h.sampling_interval_ns = c.u32("ExpectedCPUSamplingRate")?;
        Ok(h)
    }

    /// Parses the content of a V6 Trace block at stream offset `base`.
    pub(crate) fn parse_v6(
        body: &'a [u8],
        base: u64,
        minor: u32,
    ) -> Result<TraceHeader<'a>, NettraceError> {
        let mut c = Cur::new(body, base);
        let mut h = Self::read_start(&mut c, "SyncTimeTicks", "TickFrequency")?;
        h.format = Format::V6 { minor };
        let count = c.u32("KeyValueCount")?;
        let kv_start = c.pos;
        for _ in 0..count {
            let k = c.str8("trace key")?;
            let v = c.str8("trace value")?;
            let num = parse_decimal(v);
            match k {
                b"ProcessId" => h.process_id = num,
                b"HardwareThreadCount" => h.number_of_processors = num,
                b"ExpectedCPUSamplingRate" => h.sampling_interval_ns = num,
                _ => {}
            }
        }
        h.key_values = KeyValues {
            bytes: &body[kv_start..c.pos],
            count,
        };
        Ok(h)
    }
}

fn check_pointer_size(p: u32, offset: u64) -> Result<u8, NettraceError> {
    match p {
        4 | 8 => Ok(p as u8),
        _ => Err(NettraceError::Malformed {
            offset,
            what: "PointerSize (must be 4 or 8)",
        }),
    }
}

/// A decimal number in ASCII, 0 if it is not one or overflows `u32`.
fn parse_decimal(b: &[u8]) -> u32 {
    if b.is_empty() || b.len() > 10 {
        return 0;
    }
    let mut v = 0u64;
    for &d in b {
        if !d.is_ascii_digit() {
            return 0;
        }
        v = v * 10 + u64::from(d - b'0');
    }
    u32::try_from(v).unwrap_or(0)
}

/// V6 trace key/value pairs (validated when the header was parsed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct KeyValues<'a> {
    bytes: &'a [u8],
    count: u32,
}

impl<'a> KeyValues<'a> {
    /// No pairs.
    pub const EMPTY: KeyValues<'static> = KeyValues {
        bytes: &[],
        count: 0,
    };

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    /// True when there are no pairs.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The pairs, in stream order.
    pub fn iter(&self) -> KeyValueIter<'a> {
        KeyValueIter {
            cur: Cur::new(self.bytes, 0),
            left: self.count,
        }
    }

    /// The value of the first pair with key `key`.
    pub fn get(&self, key: &str) -> Option<TraceStr<'a>> {
        self.iter().find(|(k, _)| k.eq_str(key)).map(|(_, v)| v)
    }
}

/// Iterator over [`KeyValues`].
#[derive(Debug, Clone)]
pub struct KeyValueIter<'a> {
    cur: Cur<'a>,
    left: u32,
}

impl<'a> Iterator for KeyValueIter<'a> {
    type Item = (TraceStr<'a>, TraceStr<'a>);
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let k = self.cur.str8("key").ok()?;
        let v = self.cur.str8("value").ok()?;
        Some((TraceStr::Utf8(k), TraceStr::Utf8(v)))
    }
}
