//! Event blobs (V4/V5 "event blobs", V6 "event rows"): the compressed or uncompressed header
//! and the payload slice.

use super::error::NettraceError;
use super::varint::Cur;
use crate::wire::Guid;

/// One event, its header decoded and its payload borrowed from the input.
///
/// Thread fields hold OS thread ids in V4/V5 and indexes into the thread table (see
/// [`Item::Threads`](super::Item::Threads)) in V6. The activity ids (V4/V5) are kept by the
/// parser, not here: [`NettraceParser::activity_ids`](super::NettraceParser::activity_ids)
/// (an event stays small: it is moved a few times per event on its way to the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct Event<'a> {
    /// The metadata record describing this event (see [`Item::Metadata`](super::Item::Metadata)).
    pub metadata_id: u32,
    /// Sequence number, counted per capture thread (a gap means dropped events).
    pub sequence_number: u32,
    /// The thread that wrote the event (V6: its index).
    pub capture_thread_id: u64,
    /// The thread the event is about (V6: its index); for a SampleProfiler sample, the
    /// sampled thread.
    pub thread_id: u64,
    /// Processor the capture thread ran on.
    pub processor_number: u32,
    /// Stack id (0: no stack), valid in the current sequence-point window.
    pub stack_id: u32,
    /// Timestamp (QPC ticks, see [`TraceHeader`](super::TraceHeader)).
    pub timestamp: i64,
    /// V6 label list id (0: none); always 0 in V4/V5.
    pub label_list_id: u32,
    /// No later event in the stream has an earlier timestamp.
    pub is_sorted: bool,
    /// The payload, borrowed from the input.
    pub payload: &'a [u8],
    /// Stream offset of the event's header.
    pub offset: u64,
}

/// The previous header of a block, the base of header compression. All zero at a block's
/// start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HeaderState {
    pub(crate) metadata_id: u32,
    pub(crate) sequence_number: u32,
    pub(crate) capture_thread_id: u64,
    pub(crate) thread_id: u64,
    pub(crate) processor_number: u32,
    pub(crate) stack_id: u32,
    pub(crate) timestamp: i64,
    pub(crate) activity_id: Guid,
    pub(crate) related_activity_id: Guid,
    pub(crate) label_list_id: u32,
    pub(crate) payload_size: u32,
}

const F_METADATA_ID: u8 = 0x01;
const F_CAPTURE_THREAD_AND_SEQUENCE: u8 = 0x02;
const F_THREAD_ID: u8 = 0x04;
const F_STACK_ID: u8 = 0x08;
const F_ACTIVITY_ID: u8 = 0x10; // V6: LabelListId
const F_RELATED_ACTIVITY_ID: u8 = 0x20;
const F_SORTED: u8 = 0x40;
const F_DATA_LENGTH: u8 = 0x80;

/// Reads one blob from `c` (which spans exactly the rest of the block), updating `st`.
/// Returns the event; `c` ends after its payload (and padding).
#[inline(always)]
pub(crate) fn read_blob<'a>(
    c: &mut Cur<'a>,
    st: &mut HeaderState,
    compressed: bool,
    v6: bool,
) -> Result<Event<'a>, NettraceError> {
    let offset = c.offset();
    let (payload, is_sorted) = read_header(c, st, compressed, v6)?;
    Ok(event(st, is_sorted, payload, offset))
}

/// [`read_blob`] leaving the header in `st`: returns the payload and the sorted flag, for a
/// caller that builds the [`Event`] (with [`event`]) where it is wanted, without moving it.
#[inline(always)]
pub(crate) fn read_header<'a>(
    c: &mut Cur<'a>,
    st: &mut HeaderState,
    compressed: bool,
    v6: bool,
) -> Result<(&'a [u8], bool), NettraceError> {
    if compressed {
        read_compressed(c, st, v6)
    } else {
        read_uncompressed(c, st, v6)
    }
}

#[inline(always)]
fn read_compressed<'a>(
    c: &mut Cur<'a>,
    st: &mut HeaderState,
    v6: bool,
) -> Result<(&'a [u8], bool), NettraceError> {
    let flags = c.u8("event header flags")?;
    if flags & F_METADATA_ID != 0 {
        st.metadata_id = c.varu32()?;
    }
    if flags & F_CAPTURE_THREAD_AND_SEQUENCE != 0 {
        let delta = c.varu32()?;
        st.sequence_number = st.sequence_number.wrapping_add(delta).wrapping_add(1);
        st.capture_thread_id = c.varu64()?;
        st.processor_number = c.varu32()?;
    } else if st.metadata_id != 0 {
        // Metadata records (id 0) never advance the sequence (the runtime's rule).
        st.sequence_number = st.sequence_number.wrapping_add(1);
    }
    if flags & F_THREAD_ID != 0 {
        st.thread_id = c.varu64()?;
    }
    if flags & F_STACK_ID != 0 {
        st.stack_id = c.varu32()?;
    }
    let delta = c.varu64()?;
    st.timestamp = st.timestamp.wrapping_add(delta as i64);
    if v6 {
        if flags & F_ACTIVITY_ID != 0 {
            st.label_list_id = c.varu32()?;
        }
    } else {
        if flags & F_ACTIVITY_ID != 0 {
            st.activity_id = c.guid("ActivityId")?;
        }
        if flags & F_RELATED_ACTIVITY_ID != 0 {
            st.related_activity_id = c.guid("RelatedActivityId")?;
        }
    }
    if flags & F_DATA_LENGTH != 0 {
        st.payload_size = c.varu32()?;
    }
    let payload = c.take(st.payload_size as usize, "event payload (PayloadSize)")?;
    Ok((payload, flags & F_SORTED != 0))
}

#[inline(always)]
pub(crate) fn event<'a>(
    st: &HeaderState,
    is_sorted: bool,
    payload: &'a [u8],
    offset: u64,
) -> Event<'a> {
    Event {
        metadata_id: st.metadata_id,
        sequence_number: st.sequence_number,
        capture_thread_id: st.capture_thread_id,
        thread_id: st.thread_id,
        processor_number: st.processor_number,
        stack_id: st.stack_id,
        timestamp: st.timestamp,
        label_list_id: st.label_list_id,
        is_sorted,
        payload,
        offset,
    }
}

/// An uncompressed blob. V4/V5: a fixed 80-byte header, payload, zero padding to 4. V6 (a
/// row): the same header with a `LabelListId` instead of the two activity ids.
#[inline(always)]
fn read_uncompressed<'a>(
    c: &mut Cur<'a>,
    st: &mut HeaderState,
    v6: bool,
) -> Result<(&'a [u8], bool), NettraceError> {
    let start = c.pos;
    let event_size = c.u32("EventSize")? as usize;
    let id = c.u32("MetadataId")?;
    st.metadata_id = id & 0x7FFF_FFFF;
    st.sequence_number = c.u32("SequenceNumber")?;
    let (thread, capture_thread) = if v6 {
        ("ThreadIndex", "CaptureThreadIndex")
    } else {
        ("ThreadId", "CaptureThreadId")
    };
    st.thread_id = c.u64(thread)?;
    st.capture_thread_id = c.u64(capture_thread)?;
    st.processor_number = c.u32("ProcessorNumber")?;
    st.stack_id = c.u32("StackId")?;
    st.timestamp = c.i64("TimeStamp")?;
    if v6 {
        st.label_list_id = c.u32("LabelListId")?;
    } else {
        st.activity_id = c.guid("ActivityId")?;
        st.related_activity_id = c.guid("RelatedActivityId")?;
    }
    st.payload_size = c.u32("PayloadSize")?;
    let payload = c.take(st.payload_size as usize, "event payload (PayloadSize)")?;
    // The blob spans 4 + EventSize bytes; EventSize covers at least the payload (padding is
    // included when present).
    let end = start
        .checked_add(4)
        .and_then(|x| x.checked_add(event_size))
        .filter(|&e| e >= c.pos && e <= c.bytes.len())
        .ok_or_else(|| c.malformed("EventSize"))?;
    c.pos = end;
    // Bit 31 of the id: V6 sets it on sorted events; V4/V5 set it on events NOT sorted (the
    // runtime's writer; the format texts say the opposite).
    let bit31 = id & 0x8000_0000 != 0;
    Ok((payload, bit31 == v6))
}
