//! user_events sessions on the fake runtime's side: after a CollectTracing5/6 user_events
//! request, the runtime `recvmsg`s one byte with the `user_events_data` descriptor
//! (`SCM_RIGHTS`) before it replies; without one it answers BAD_ENCODING. The fake does the
//! same, then writes one user_events record ([`user_events_record`] with
//! [`USER_EVENTS_MARKER`]) through the descriptor and closes its copy, so that a test
//! owning the other end of a pipe (or the file) can check what arrived. A descriptor that
//! cannot be written makes it answer `E_FAIL`, as a runtime whose tracepoint registration
//! fails does.
//!
//! The descriptor comes through dsipc-std's `unix::recv_with_fd` (dsipc-platform): this
//! crate has no unsafe code.

#[cfg(unix)]
use std::fs::{File, OpenOptions};
#[cfg(unix)]
use std::io::{Read, Write};
#[cfg(unix)]
use std::os::unix::io::{AsFd, BorrowedFd, OwnedFd};
#[cfg(unix)]
use std::os::unix::net::UnixStream;
#[cfg(unix)]
use std::path::PathBuf;
use std::time::Duration;
#[cfg(unix)]
use std::time::Instant;

use dsipc::payload::Request;
use dsipc::wire::Hresult;
use dsipc::AnyRequest;

use crate::answer::Answer;
#[cfg(unix)]
use crate::fake::is_timeout;
#[cfg(unix)]
use crate::socket::TempDir;

/// The payload of the record the fake runtime writes through a passed descriptor.
pub const USER_EVENTS_MARKER: &[u8] = b"dsipc-testkit user_events";

/// The tracepoint format version the runtime writes (Tracepoint Format V1).
pub const USER_EVENTS_VERSION: u8 = 1;

/// One event as the runtime writes it to `user_events_data` (one `writev`): the
/// tracepoint's `write_index` (u32), the format version (u8, [`USER_EVENTS_VERSION`]), the
/// event id (u16), then two `__rel_loc` fields (u32: size in the high 16 bits, offset from
/// the end of the field in the low 16) locating `extension` and `payload`, which follow.
/// All little-endian. `extension` and `payload` are cut at 65,535 bytes each.
pub fn user_events_record(
    write_index: u32,
    event_id: u16,
    extension: &[u8],
    payload: &[u8],
) -> Vec<u8> {
    let extension = &extension[..extension.len().min(0xffff)];
    let payload = &payload[..payload.len().min(0xffff)];
    let mut out = Vec::with_capacity(15 + extension.len() + payload.len());
    out.extend_from_slice(&write_index.to_le_bytes());
    out.push(USER_EVENTS_VERSION);
    out.extend_from_slice(&event_id.to_le_bytes());
    // The extension starts after the payload's __rel_loc (4 bytes on).
    let ext_loc = ((extension.len() as u32) << 16) | 4;
    out.extend_from_slice(&ext_loc.to_le_bytes());
    // The payload starts after the extension.
    let payload_loc = ((payload.len() as u32) << 16) | extension.len() as u32;
    out.extend_from_slice(&payload_loc.to_le_bytes());
    out.extend_from_slice(extension);
    out.extend_from_slice(payload);
    out
}

/// The record the fake runtime writes through every descriptor it is passed:
/// write index 0, event id 1, no extension, [`USER_EVENTS_MARKER`] as payload.
pub fn fake_user_events_record() -> Vec<u8> {
    user_events_record(0, 1, &[], USER_EVENTS_MARKER)
}

/// Reads `mine` to its end: it sees EOF only once every copy of its peer is closed (the
/// test's, the fake runtime's, any still in flight). `timeout` bounds the wait, so that a
/// copy leaked somewhere fails the test (a panic saying so) instead of hanging it.
#[cfg(unix)]
pub fn read_to_eof(mut mine: UnixStream, timeout: Duration) -> Vec<u8> {
    mine.set_read_timeout(Some(timeout))
        .expect("set a read timeout");
    let mut got = Vec::new();
    match mine.read_to_end(&mut got) {
        Ok(_) => got,
        Err(e) => panic!(
            "no EOF within {:?} ({:?} read): a copy of the passed descriptor is still open: {}",
            timeout, got, e
        ),
    }
}

/// A new, empty file `user_events_data` in `dir`, open for reading and writing: a
/// descriptor the test owns, passed where a runtime would get the root-only tracefs file.
#[cfg(unix)]
pub fn user_events_data_file(dir: &TempDir) -> (PathBuf, File) {
    let path = dir.join("user_events_data");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .expect("create the user_events_data file");
    (path, file)
}

/// What the fake runtime answers to `request` once the descriptor question is settled: a
/// user_events request, when the runtime knows the command ([`reads_descriptor`]), first
/// gets its descriptor from `stream` and the record written through it; if that fails the
/// answer becomes the error a runtime sends then (see [`take_descriptor`]). Anything else
/// keeps `configured`. `stopping` and `idle` bound the wait for the descriptor.
#[cfg(unix)]
pub(crate) fn descriptor_first<S: AsFd + ?Sized>(
    stream: &S,
    request: &AnyRequest<'_>,
    configured: Answer,
    idle: Duration,
    stopping: impl Fn() -> bool,
) -> Answer {
    if !request.requires_fd_passing() || !reads_descriptor(&configured) {
        return configured;
    }
    let started = Instant::now();
    match take_descriptor(stream.as_fd(), || stopping() || started.elapsed() >= idle) {
        Ok(()) => configured,
        Err(hresult) => Answer::Error(hresult),
    }
}

/// Without Unix sockets no descriptor can come: a runtime that knows the command answers
/// BAD_ENCODING, as the runtime does when its `ds_ipc_stream_read_fd` fails.
#[cfg(not(unix))]
pub(crate) fn descriptor_first<S: ?Sized>(
    _stream: &S,
    request: &AnyRequest<'_>,
    configured: Answer,
    _idle: Duration,
    _stopping: impl Fn() -> bool,
) -> Answer {
    if request.requires_fd_passing() && reads_descriptor(&configured) {
        Answer::Error(Hresult::CORDIAGIPC_E_BAD_ENCODING)
    } else {
        configured
    }
}

/// True when a runtime answering `answer` reads the descriptor first: one that knows the
/// command does, whatever it answers then; one that does not know it (UNKNOWN_COMMAND, as
/// .NET 8 answers CollectTracing5), or that crashes, stalls or breaks the protocol on the
/// request, does not.
fn reads_descriptor(answer: &Answer) -> bool {
    match answer {
        Answer::Error(h) => *h != Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND,
        Answer::Close | Answer::Hang | Answer::Raw(_) | Answer::RawThen(..) => false,
        _ => true,
    }
}

/// Receives the descriptor that follows a user_events request (reading one byte, as the
/// runtime does) and writes [`fake_user_events_record`] through it. `give_up` is asked after
/// every read timeout of `stream` (the fake's tick). The error is the reply to send instead
/// of the session's: BAD_ENCODING when no descriptor came (the client closed, sent a plain
/// byte, or gave up), E_FAIL when it could not be written.
#[cfg(unix)]
fn take_descriptor(
    stream: BorrowedFd<'_>,
    mut give_up: impl FnMut() -> bool,
) -> Result<(), Hresult> {
    let fd = receive(stream, &mut give_up).ok_or(Hresult::CORDIAGIPC_E_BAD_ENCODING)?;
    let mut file = File::from(fd);
    file.write_all(&fake_user_events_record())
        .map_err(|_| Hresult::E_FAIL)
}

#[cfg(unix)]
fn receive(stream: BorrowedFd<'_>, give_up: &mut dyn FnMut() -> bool) -> Option<OwnedFd> {
    let mut byte = [0u8; 1];
    loop {
        match dsipc_std::unix::recv_with_fd(stream, &mut byte) {
            // The runtime takes what came with its one byte, descriptor or not.
            Ok((1, fd)) => return fd,
            Ok(_) => return None,
            Err(e) if is_timeout(&e) => {
                if give_up() {
                    return None;
                }
            }
            Err(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_locates_its_extension_and_payload() {
        let r = user_events_record(7, 0x1234, &[0xaa, 0xbb], b"xyz");
        assert_eq!(&r[..4], &7u32.to_le_bytes());
        assert_eq!(r[4], 1);
        assert_eq!(&r[5..7], &0x1234u16.to_le_bytes());
        let ext = u32::from_le_bytes([r[7], r[8], r[9], r[10]]);
        let payload = u32::from_le_bytes([r[11], r[12], r[13], r[14]]);
        // Each __rel_loc counts from the end of its own field.
        let ext_at = 11 + (ext & 0xffff) as usize;
        let payload_at = 15 + (payload & 0xffff) as usize;
        assert_eq!(&r[ext_at..ext_at + (ext >> 16) as usize], &[0xaa, 0xbb]);
        assert_eq!(
            &r[payload_at..payload_at + (payload >> 16) as usize],
            b"xyz"
        );
        assert_eq!(r.len(), 15 + 2 + 3);
    }
}
