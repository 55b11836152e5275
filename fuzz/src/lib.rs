//! The fuzz harness of dsipc: one function per fuzz target, each taking the raw fuzzer input.
//!
//! The `fuzz_targets/*.rs` binaries are one-line wrappers around these functions, and
//! `tests/corpus.rs` calls the same functions over the seed corpus (`corpus-seeds/<target>/`)
//! and the regression inputs (`regressions/<target>/`) with a plain `cargo test`, so a crash
//! the fuzzer found stays covered without libFuzzer.
//!
//! Every function asserts properties, not just "no panic": decoders re-encode what they
//! accept to the same bytes, the client machine reports the same events however its input
//! is fragmented, arbitrary requests and responses survive encode → decode, and the UTF-16
//! conversions agree with std's.

use std::fmt::{self, Write as _};

use arbitrary::{Arbitrary, Unstructured};
use dsipc::conn::{RejectReason, ServerError};
use dsipc::payload::*;
use dsipc::recv::{Poll, RecvBuffer, RecvError};
use dsipc::transport::{
    key_from_proc_stat, DiagnosticPorts, FormatPorts, PipeName, PortConfig, SocketName,
};
use dsipc::wire::{
    Advertise, AdvertiseError, Guid, Header, HeaderView, Hresult, Reader, Seq, Text,
    TranscodeError, Utf16Str, Writer, ADVERTISE_LEN, ADVERTISE_MAGIC, HEADER_LEN, MAGIC,
    MAX_MESSAGE_LEN,
};
use dsipc::{
    ClientConnection, ClientError, ClientEvent, Command, EncodeError, HeaderError,
    ServerConnection, ServerEvent, Status,
};

/// A harness function: takes the raw fuzzer input, panics on a finding.
pub type Target = fn(&[u8]);

/// The names of every target, in the order of `Cargo.toml` (used by the corpus test and
/// `scripts/fuzz-ci.sh`).
pub const TARGETS: &[(&str, Target)] = &[
    ("header", header),
    ("advertise", advertise),
    ("reply", reply),
    ("request", request),
    ("transport", transport),
    ("client", client),
    ("roundtrip_request", roundtrip_request),
    ("roundtrip_response", roundtrip_response),
    ("utf16", utf16),
    ("server", server),
    ("nettrace", nettrace),
    ("nettrace_fields", nettrace_fields),
];

/// Largest `needed` a `Status::Partial` may report for a message (documented on
/// `dsipc::Status`: the `u16` size field). A ProcessEnvironment entry may need more, but never
/// more than the block size the reply announced.
pub const MAX_NEEDED: usize = MAX_MESSAGE_LEN;

// ---------------------------------------------------------------------------------------
// Small helpers.

/// A `fmt::Write` that drops everything: runs `Debug`/`Display` code without keeping text.
struct Sink;

impl fmt::Write for Sink {
    fn write_str(&mut self, _: &str) -> fmt::Result {
        Ok(())
    }
}

/// Runs the `Debug` and `Display` impls of `v`.
fn show<T: fmt::Debug + fmt::Display + ?Sized>(v: &T) {
    write!(Sink, "{:?} {}", v, v).unwrap();
}

/// Runs the `Debug` impl of `v`.
fn debug<T: fmt::Debug + ?Sized>(v: &T) {
    write!(Sink, "{:?}", v).unwrap();
}

/// Checks a decoded string: strict and lossy transcoding agree with std's on its units.
fn check_text(t: &Text<'_>) {
    debug(t);
    write!(Sink, "{}", t).unwrap();
    let units: Vec<u16> = t.units().collect();
    assert_eq!(units.len(), t.len_utf16());
    assert_eq!(t.is_empty(), units.is_empty());
    let lossy = String::from_utf16_lossy(&units);
    assert_eq!(t.utf8_len_lossy(), lossy.len());
    let mut out = vec![0u8; lossy.len()];
    assert_eq!(t.to_utf8_lossy(&mut out).unwrap(), lossy);
    match (t.to_utf8(&mut out), String::from_utf16(&units)) {
        (Ok(s), Ok(expected)) => assert_eq!(s, expected),
        (Err(TranscodeError::LoneSurrogate { .. }), Err(_)) => {}
        (got, expected) => panic!("strict transcoding {:?}, std says {:?}", got, expected),
    }
    assert!(t.chars_lossy().eq(lossy.chars()));
    if let Text::Utf16(u) = t {
        check_utf16(u, &units);
    }
}

fn texts_of_reply<'a>(r: &Reply<'a>) -> Vec<Text<'a>> {
    match r {
        Reply::ProcessInfo(p) => vec![p.command_line, p.os, p.arch],
        Reply::ProcessInfo2(p) => vec![
            p.command_line,
            p.os,
            p.arch,
            p.managed_entrypoint_assembly_name,
            p.clr_product_version,
        ],
        Reply::ProcessInfo3(p) => vec![
            p.command_line,
            p.os,
            p.arch,
            p.managed_entrypoint_assembly_name,
            p.clr_product_version,
            p.runtime_identifier,
        ],
        _ => vec![],
    }
}

/// The request command each reply shape answers, used to decode an encoded [`Response`].
fn command_for(resp: &Response<'_>, pick: u8) -> Command {
    match resp {
        Response::Ok(r) => match r.kind() {
            ReplyKind::Status => {
                const STATUS: [Command; 10] = [
                    Command::GenerateCoreDump,
                    Command::GenerateCoreDump2,
                    Command::GenerateCoreDump3,
                    Command::AttachProfiler,
                    Command::StartupProfiler,
                    Command::ResumeRuntime,
                    Command::SetEnvironmentVariable,
                    Command::EnablePerfMap,
                    Command::DisablePerfMap,
                    Command::ApplyStartupHook,
                ];
                STATUS[pick as usize % STATUS.len()]
            }
            ReplyKind::SessionId => {
                if pick & 1 == 0 {
                    Command::StopTracing
                } else {
                    Command::CollectTracing2
                }
            }
            ReplyKind::ProcessInfo => Command::ProcessInfo,
            ReplyKind::ProcessInfo2 => Command::ProcessInfo2,
            ReplyKind::ProcessInfo3 => Command::ProcessInfo3,
            ReplyKind::ProcessEnvironment => Command::ProcessEnvironment,
            other => panic!("unknown reply kind {:?}", other),
        },
        // Only GenerateCoreDump3's error reply may carry a message.
        Response::Error(_) => Command::GenerateCoreDump3,
    }
}

/// True for the commands `AnyRequest::decode` knows.
fn is_request(c: Command) -> bool {
    Command::ALL.contains(&c) && !c.is_reply()
}

// ---------------------------------------------------------------------------------------
// Targets.

/// `Header::parse`, `HeaderView::ref_from` and `Command::from_code` on any bytes; an accepted
/// header re-emits to the same 20 bytes.
pub fn header(data: &[u8]) {
    let view = HeaderView::ref_from(data);
    assert_eq!(view.is_some(), data.len() >= HEADER_LEN);
    let parsed = Header::parse(data);
    if let Some(v) = view {
        debug(v);
        let c = v.command();
        assert_eq!(c.code(), (v.command_set, v.command_id));
        assert_eq!(Command::from_code(v.command_set, v.command_id), c);
        show(&c);
        let _ = (c.set(), c.name(), c.is_reply(), c.is_collect_tracing());
        let unchecked = Header::from_view_unchecked_magic(v);
        if v.magic_ok() {
            assert_eq!(parsed, unchecked);
        }
    }
    match parsed {
        Ok(h) => {
            show(&HeaderErrorFree(h));
            assert!(h.size() as usize >= HEADER_LEN);
            assert_eq!(h.payload_len(), h.size() as usize - HEADER_LEN);
            let mut out = [0u8; HEADER_LEN];
            h.emit(&mut out).unwrap();
            assert_eq!(&out[..], &data[..HEADER_LEN]);
            assert_eq!(Header::parse(&out), Ok(h));
            assert_eq!(
                h.emit(&mut out[..HEADER_LEN - 1]),
                Err(EncodeError::BufferTooSmall { needed: HEADER_LEN })
            );
            // for_payload agrees with the size field.
            let again = Header::for_payload(h.command(), h.payload_len()).unwrap();
            assert_eq!((again.size(), again.command()), (h.size(), h.command()));
        }
        Err(e) => {
            show(&e);
            match e {
                HeaderError::Truncated { available } => {
                    assert!(data.len() < HEADER_LEN);
                    assert_eq!(available, data.len());
                }
                HeaderError::BadMagic { found } => {
                    assert_ne!(found, MAGIC);
                    assert_eq!(&found[..], &data[..14]);
                }
                HeaderError::SizeTooSmall { size } => {
                    assert!((size as usize) < HEADER_LEN);
                    assert_eq!(&data[..14], &MAGIC[..]);
                }
                other => panic!("new header error {:?}", other),
            }
        }
    }
}

/// `Header` has no Display; this shows its Debug and its command's Display.
struct HeaderErrorFree(Header);

impl fmt::Debug for HeaderErrorFree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for HeaderErrorFree {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0.command(), f)
    }
}

/// `Advertise::parse` on any bytes; an accepted message re-emits to the same 34 bytes.
pub fn advertise(data: &[u8]) {
    match Advertise::parse(data) {
        Ok(a) => {
            debug(&a);
            let mut out = [0u8; ADVERTISE_LEN];
            assert_eq!(a.emit(&mut out), Ok(ADVERTISE_LEN));
            assert_eq!(&out[..], &data[..ADVERTISE_LEN]);
            assert_eq!(Advertise::parse(&out), Ok(a));
            show(&a.runtime_cookie);
        }
        Err(e) => {
            show(&e);
            match e {
                AdvertiseError::Truncated { available } => {
                    assert!(data.len() < ADVERTISE_LEN);
                    assert_eq!(available, data.len());
                }
                AdvertiseError::BadMagic { found } => {
                    assert_ne!(found, ADVERTISE_MAGIC);
                    assert_eq!(&found[..], &data[..8]);
                }
                other => panic!("new advertise error {:?}", other),
            }
        }
    }
}

/// `Reply::decode` and `ErrorReply::decode` for the command in the first two bytes, on the
/// rest as payload. What decodes re-encodes to the same payload and decodes again equal.
pub fn reply(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let command = Command::from_code(data[0], data[1]);
    let payload = &data[2..];

    match Reply::decode(command, payload) {
        Ok(Some(r)) => {
            assert_eq!(ReplyKind::of(command), Some(r.kind()));
            debug(&r);
            for t in texts_of_reply(&r) {
                check_text(&t);
            }
            let resp = Response::Ok(r);
            let mut buf = vec![0u8; resp.encoded_len()];
            match resp.encode(&mut buf) {
                Ok(n) => {
                    assert_eq!(n, buf.len());
                    let h = Header::parse(&buf).unwrap();
                    assert_eq!(h.command(), Command::ServerOk);
                    let again = &buf[HEADER_LEN..];
                    if payload.is_empty() && r.kind() == ReplyKind::Status {
                        // The spec's 20-byte OK decodes as S_OK and encodes as 24 bytes.
                        assert_eq!(again, &[0u8; 4][..]);
                    } else {
                        assert_eq!(again, payload);
                    }
                    assert_eq!(Reply::decode(command, again), Ok(Some(r)));
                }
                Err(EncodeError::MessageTooLarge { size }) => {
                    assert!(size > MAX_MESSAGE_LEN && payload.len() + HEADER_LEN > MAX_MESSAGE_LEN)
                }
                Err(e) => panic!("re-encoding a decoded reply failed: {:?}", e),
            }
        }
        Ok(None) => assert_eq!(ReplyKind::of(command), None),
        Err(e) => show(&e),
    }

    match ErrorReply::decode(command, payload) {
        Ok(e) => {
            debug(&e);
            let _ = (e.hresult.name(), e.hresult.description());
            show(&e.hresult);
            if let Some(m) = &e.message {
                assert_eq!(command, Command::GenerateCoreDump3);
                check_text(m);
            }
            let resp = Response::Error(e);
            let mut buf = vec![0u8; resp.encoded_len()];
            match resp.encode(&mut buf) {
                Ok(n) => {
                    assert_eq!(n, buf.len());
                    assert_eq!(&buf[HEADER_LEN..], payload);
                    assert_eq!(ErrorReply::decode(command, &buf[HEADER_LEN..]), Ok(e));
                }
                Err(EncodeError::MessageTooLarge { size }) => assert!(size > MAX_MESSAGE_LEN),
                Err(err) => panic!("re-encoding a decoded error reply failed: {:?}", err),
            }
        }
        Err(e) => show(&e),
    }
}

/// `AnyRequest::decode` (every request decoder) for the command in the first two bytes, on
/// the rest as payload. What decodes re-encodes (validation bypassed: the peer may send what
/// this crate refuses to send) to a payload that decodes equal.
pub fn request(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let command = Command::from_code(data[0], data[1]);
    let payload = &data[2..];
    match AnyRequest::decode(command, payload) {
        Ok(Some(req)) => {
            assert!(is_request(command));
            assert_eq!(req.command(), command);
            debug(&req);
            let valid = req.validate();
            let len = req.payload_len();
            // Decoders ignore bytes after the last field; re-encoding writes exactly the
            // fields, so it is never longer than what was received.
            assert!(len <= payload.len(), "{} > {}", len, payload.len());
            let mut buf = vec![0u8; len];
            let mut w = Writer::new(&mut buf);
            req.write_payload(&mut w);
            assert_eq!(w.finish(), Some(len));
            let back = AnyRequest::decode(command, &buf).unwrap().unwrap();
            assert_eq!(back, req);
            // Re-encoding is a fixpoint.
            let mut again = vec![0u8; len];
            let mut w = Writer::new(&mut again);
            back.write_payload(&mut w);
            assert_eq!(w.finish(), Some(len));
            assert_eq!(again, buf);
            // The full message when the request is one this crate would send.
            if valid.is_ok() {
                let mut msg = vec![0u8; len + HEADER_LEN];
                assert_eq!(req.encode(&mut msg), Ok(len + HEADER_LEN));
                assert_eq!(&msg[HEADER_LEN..], &buf[..]);
            } else {
                let mut msg = vec![0u8; len + HEADER_LEN];
                assert_eq!(req.encode(&mut msg).err(), valid.err());
            }
            check_request_texts(&req);
        }
        Ok(None) => assert!(!is_request(command)),
        Err(e) => show(&e),
    }
}

/// Walks every string and nested array of a decoded request.
fn check_request_texts(req: &AnyRequest<'_>) {
    fn provider(p: &Provider<'_>) {
        check_text(&p.provider_name);
        check_text(&p.arguments);
    }
    fn filter(f: &EventFilter<'_>) {
        assert_eq!(f.event_ids.iter().count(), f.event_ids.len());
    }
    fn streaming(s: &StreamingSession<'_>) {
        assert_eq!(s.providers.iter().count(), s.providers.len());
        for p in s.providers.iter() {
            provider(&p.provider);
            filter(&p.filter);
        }
    }
    fn user_events(s: &UserEventsSession<'_>) {
        assert_eq!(s.providers.iter().count(), s.providers.len());
        for p in s.providers.iter() {
            provider(&p.provider);
            filter(&p.filter);
            check_text(&p.tracepoint_config.default_tracepoint_name);
            let sets = &p.tracepoint_config.tracepoints;
            assert_eq!(sets.iter().count(), sets.len());
            for set in sets.iter() {
                check_text(&set.tracepoint_name);
                assert_eq!(set.event_ids.iter().count(), set.event_ids.len());
            }
        }
    }
    fn plain(ps: &Seq<'_, Provider<'_>>) {
        assert_eq!(ps.iter().count(), ps.len());
        ps.iter().for_each(|p| provider(&p));
    }
    match req {
        AnyRequest::GenerateCoreDump(r) => check_text(&r.dump_name),
        AnyRequest::GenerateCoreDump2(r) => check_text(&r.dump_name),
        AnyRequest::GenerateCoreDump3(r) => check_text(&r.dump_name),
        AnyRequest::CollectTracing(r) => plain(&r.providers),
        AnyRequest::CollectTracing2(r) => plain(&r.providers),
        AnyRequest::CollectTracing3(r) => plain(&r.providers),
        AnyRequest::CollectTracing4(r) => plain(&r.providers),
        AnyRequest::CollectTracing5(CollectTracing5::Streaming(s)) => streaming(s),
        AnyRequest::CollectTracing5(CollectTracing5::UserEvents(s)) => user_events(s),
        AnyRequest::CollectTracing6(CollectTracing6::Streaming { session, .. }) => {
            streaming(session)
        }
        AnyRequest::CollectTracing6(CollectTracing6::UserEvents(s)) => user_events(s),
        AnyRequest::AttachProfiler(r) => check_text(&r.profiler_path),
        AnyRequest::StartupProfiler(r) => check_text(&r.profiler_path),
        AnyRequest::SetEnvironmentVariable(r) => {
            check_text(&r.name);
            check_text(&r.value);
        }
        AnyRequest::ApplyStartupHook(r) => check_text(&r.startup_hook_path),
        _ => {}
    }
}

/// The transport parsers: `DOTNET_DiagnosticPorts`, `PortConfig`, socket and pipe names,
/// GUIDs (on the input as text) and the `/proc/PID/stat` key (on the raw bytes). What
/// parses formats back to text that parses equal.
pub fn transport(data: &[u8]) {
    if let Ok(k) = key_from_proc_stat(data) {
        // The key is a run of digits after the last ')'.
        let close = data.iter().rposition(|&b| b == b')').unwrap();
        let digits = k.to_string();
        assert!(data[close..]
            .windows(digits.len())
            .any(|w| w == digits.as_bytes()));
    } else if let Err(e) = key_from_proc_stat(data) {
        show(&e);
    }

    let text = String::from_utf8_lossy(data);
    let s: &str = &text;

    let ports: Vec<PortConfig<'_>> = DiagnosticPorts::parse(s).collect();
    for p in &ports {
        debug(p);
        assert!(!p.address.is_empty());
        assert!(!p.address.contains(',') && !p.address.contains(';'));
        let formatted = p.to_string();
        assert_eq!(PortConfig::parse(&formatted), Some(*p));
    }
    let joined = FormatPorts(&ports).to_string();
    let back: Vec<PortConfig<'_>> = DiagnosticPorts::parse(&joined).collect();
    assert_eq!(back, ports);
    if let Some(p) = PortConfig::parse(s) {
        let formatted = p.to_string();
        assert_eq!(PortConfig::parse(&formatted), Some(p));
    }

    if let Some(n) = SocketName::parse(s) {
        let formatted = n.to_string();
        assert_eq!(SocketName::parse(&formatted), Some(n));
        assert!(formatted.starts_with(&SocketName::prefix_for(n.pid).to_string()));
        assert!(formatted.len() <= s.len());
    }
    if let Some(p) = PipeName::parse(s) {
        let formatted = p.to_string();
        assert_eq!(PipeName::parse(&formatted), Some(p));
    }
    match Guid::parse(s) {
        Ok(g) => {
            let formatted = g.to_string();
            assert_eq!(Guid::parse(&formatted), Ok(g));
            debug(&g);
        }
        Err(e) => show(&e),
    }
}

/// The UTF-16 conversions on the input as little-endian units: strict and lossy agree with
/// std and with each other, capacity errors report the exact size, nothing panics. When the
/// input is UTF-8, a `Text::Str` written and read back is equal.
pub fn utf16(data: &[u8]) {
    let s = Utf16Str::from_le_bytes_unchecked(data);
    let units: Vec<u16> = data
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    check_utf16(&s, &units);
    check_text(&Text::Utf16(s));

    if let Ok(text) = std::str::from_utf8(data) {
        let t = Text::Str(text);
        check_text(&t);
        assert_eq!(t.len_utf16(), text.encode_utf16().count());
        assert!(t.eq_str(text));
        let mut buf = vec![0u8; dsipc::wire::text_len(&t)];
        let mut w = Writer::new(&mut buf);
        w.text(&t);
        assert_eq!(w.finish(), Some(buf.len()));
        let mut r = Reader::new(&buf);
        let back = r.text("fuzz").unwrap();
        r.finish().unwrap();
        assert_eq!(back, t);
        let mut out = vec![0u8; text.len()];
        assert_eq!(back.to_utf8(&mut out).unwrap(), text);
    }
}

fn check_utf16(s: &Utf16Str<'_>, units: &[u16]) {
    assert_eq!(s.len(), units.len());
    assert!(s.units().eq(units.iter().copied()));
    assert_eq!(s.as_bytes().len(), 2 * units.len());
    let lossy = String::from_utf16_lossy(units);
    let strict = String::from_utf16(units);
    assert_eq!(s.is_valid(), strict.is_ok());
    assert_eq!(s.utf8_len_lossy(), lossy.len());
    assert!(s.chars_lossy().eq(lossy.chars()));
    assert_eq!(s.to_string(), lossy);
    debug(s);

    let needed = lossy.len();
    let mut out = vec![0u8; needed + 3];
    assert_eq!(s.to_utf8_lossy(&mut out).unwrap(), lossy);
    match (&strict, s.to_utf8(&mut out)) {
        (Ok(expected), Ok(got)) => {
            // Strict and lossy agree on valid input.
            assert_eq!(got, expected);
            assert_eq!(got, lossy);
        }
        (Err(_), Err(TranscodeError::LoneSurrogate { index, unit })) => {
            // The first unpaired surrogate, by unit index.
            let first = first_lone_surrogate(units).unwrap();
            assert_eq!((index, unit), first);
        }
        (expected, got) => panic!("strict conversion {:?}, std says {:?}", got, expected),
    }
    if needed > 0 {
        let mut small = vec![0u8; needed - 1];
        assert_eq!(
            s.to_utf8_lossy(&mut small),
            Err(TranscodeError::BufferTooSmall { needed })
        );
        match s.to_utf8(&mut small) {
            Err(TranscodeError::BufferTooSmall { needed: n }) => {
                assert!(strict.is_ok());
                assert_eq!(n, needed);
            }
            Err(TranscodeError::LoneSurrogate { .. }) => assert!(strict.is_err()),
            other => panic!("strict conversion into a short buffer gave {:?}", other),
        }
    }
}

fn first_lone_surrogate(units: &[u16]) -> Option<(usize, u16)> {
    let mut i = 0;
    while i < units.len() {
        let u = units[i];
        if (0xD800..0xDC00).contains(&u) {
            if i + 1 < units.len() && (0xDC00..0xE000).contains(&units[i + 1]) {
                i += 2;
                continue;
            }
            return Some((i, u));
        }
        if (0xDC00..0xE000).contains(&u) {
            return Some((i, u));
        }
        i += 1;
    }
    None
}

/// An arbitrary request: if it encodes (validation may refuse it, or it may exceed the
/// 65,535-byte limit), it decodes equal and re-encodes to the same bytes.
pub fn roundtrip_request(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let req = match AnyRequest::arbitrary(&mut u) {
        Ok(r) => r,
        Err(_) => return,
    };
    let len = req.encoded_len();
    let mut buf = vec![0u8; len.min(MAX_MESSAGE_LEN)];
    match req.encode(&mut buf) {
        Ok(n) => {
            assert_eq!(n, len);
            let h = Header::parse(&buf).unwrap();
            assert_eq!(h.size() as usize, n);
            assert_eq!(h.command(), req.command());
            let back = AnyRequest::decode(h.command(), &buf[HEADER_LEN..])
                .unwrap()
                .unwrap();
            assert_eq!(back, req);
            let mut again = vec![0u8; n];
            assert_eq!(back.encode(&mut again), Ok(n));
            assert_eq!(again, buf);
            let mut small = vec![0u8; n - 1];
            assert_eq!(
                req.encode(&mut small),
                Err(EncodeError::BufferTooSmall { needed: n })
            );
            // A machine accepts it too.
            let mut conn = ClientConnection::new();
            assert_eq!(conn.send_request(&req, &mut again), Ok(n));
            assert_eq!(again, buf);
            assert_eq!(
                conn.send_request(&req, &mut again),
                Err(ClientError::Misuse(dsipc::UsageError::AlreadySent))
            );
        }
        Err(e @ EncodeError::InvalidField { .. }) => {
            show(&e);
            assert_eq!(req.validate(), Err(e));
        }
        Err(EncodeError::MessageTooLarge { size }) => {
            assert_eq!(size, len);
            assert!(size > MAX_MESSAGE_LEN);
        }
        Err(e) => panic!("encoding into a large enough buffer failed: {:?}", e),
    }
}

/// An arbitrary response: encoded, then decoded as the reply to a command of its shape, it
/// is equal. (ProcessInfo3 with version <= 1 has no extension on the wire: normalized.)
pub fn roundtrip_response(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let (mut resp, pick) = match <(Response<'_>, u8)>::arbitrary(&mut u) {
        Ok(r) => r,
        Err(_) => return,
    };
    if let Response::Ok(Reply::ProcessInfo3(p)) = &mut resp {
        if p.version <= 1 {
            p.extension = &[];
        }
    }
    // A raw reply answers a command this crate does not know: no request of ours yields it
    // (tests/client_machine.rs `replies_to_unknown_commands_are_surfaced_raw` covers it).
    if let Response::Ok(Reply::Raw(_)) = resp {
        return;
    }
    let command = command_for(&resp, pick);
    let len = resp.encoded_len();
    let mut buf = vec![0u8; len.min(MAX_MESSAGE_LEN)];
    match resp.encode(&mut buf) {
        Ok(n) => {
            assert_eq!(n, len);
            let h = Header::parse(&buf).unwrap();
            assert_eq!(h.size() as usize, n);
            let payload = &buf[HEADER_LEN..];
            let back = match h.command() {
                Command::ServerOk => {
                    Response::Ok(Reply::decode(command, payload).unwrap().unwrap())
                }
                Command::ServerError => {
                    Response::Error(ErrorReply::decode(command, payload).unwrap())
                }
                other => panic!("response encoded with command {}", other),
            };
            assert_eq!(back, resp);
            // Error replies without a message decode the same for any request.
            if let Response::Error(e) = resp {
                if e.message.is_none() {
                    assert_eq!(ErrorReply::decode(Command::ProcessInfo, payload), Ok(e));
                }
            }
            // A client machine that sent that command sees it as its first event.
            let mut conn = ClientConnection::new();
            let mut tx = vec![0u8; 1024];
            let request = sample_request_for(command);
            conn.send_request(&request, &mut tx).unwrap();
            let h = conn.handle_input(&buf).unwrap();
            let expected = match resp {
                Response::Ok(r) => ClientEvent::Reply(r),
                Response::Error(e) => ClientEvent::Error(e),
            };
            assert_eq!(h.consumed, n);
            assert_eq!(h.status, Status::Event(expected));
        }
        Err(EncodeError::MessageTooLarge { size }) => {
            assert_eq!(size, len);
            assert!(size > MAX_MESSAGE_LEN);
        }
        Err(e) => panic!("encoding into a large enough buffer failed: {:?}", e),
    }
}

// ---------------------------------------------------------------------------------------
// The client machine.

static PROVIDERS: [Provider<'static>; 1] = [Provider {
    keywords: 0x14C14FCCBD,
    log_level: 4,
    provider_name: Text::Str("Microsoft-Windows-DotNETRuntime"),
    arguments: Text::Null,
}];

static STREAMING: [StreamingProvider<'static>; 1] = [StreamingProvider {
    provider: PROVIDERS[0],
    filter: EventFilter {
        enable: false,
        event_ids: Seq::Slice(&[]),
    },
}];

static USER_EVENTS: [UserEventsProvider<'static>; 1] = [UserEventsProvider {
    provider: PROVIDERS[0],
    filter: EventFilter {
        enable: false,
        event_ids: Seq::Slice(&[]),
    },
    tracepoint_config: TracepointConfig {
        default_tracepoint_name: Text::Str("dotnet"),
        tracepoints: Seq::Slice(&[]),
    },
}];

const SESSION: StreamingSession<'static> = StreamingSession {
    circular_buffer_mb: 64,
    format: TraceFormat::NetTrace,
    rundown_keyword: 0,
    request_stackwalk: true,
    providers: Seq::Slice(&STREAMING),
};

const USER_SESSION: UserEventsSession<'static> = UserEventsSession {
    rundown_keyword: 0,
    providers: Seq::Slice(&USER_EVENTS),
};

/// One valid request per request command (and both CollectTracing5/6 session kinds). The
/// `client` target picks one with its first byte (`& 0x7F`, modulo the length).
pub static CLIENT_REQUESTS: [AnyRequest<'static>; 23] = [
    AnyRequest::GenerateCoreDump(GenerateCoreDump {
        dump_name: Text::Str("/tmp/core.%p"),
        dump_type: DumpType::Normal,
        diagnostics: 0,
    }),
    AnyRequest::GenerateCoreDump2(GenerateCoreDump2 {
        dump_name: Text::Str(""),
        dump_type: DumpType::Full,
        flags: 0,
    }),
    AnyRequest::GenerateCoreDump3(GenerateCoreDump3 {
        dump_name: Text::Str("/nonexistent/x.dmp"),
        dump_type: DumpType::Normal,
        flags: 0,
    }),
    AnyRequest::StopTracing(StopTracing { session_id: 1 }),
    AnyRequest::CollectTracing(CollectTracing {
        circular_buffer_mb: 64,
        format: TraceFormat::NetTrace,
        providers: Seq::Slice(&PROVIDERS),
    }),
    AnyRequest::CollectTracing2(CollectTracing2 {
        circular_buffer_mb: 64,
        format: TraceFormat::NetTrace,
        request_rundown: true,
        providers: Seq::Slice(&PROVIDERS),
    }),
    AnyRequest::CollectTracing3(CollectTracing3 {
        circular_buffer_mb: 64,
        format: TraceFormat::NetTrace,
        request_rundown: true,
        request_stackwalk: true,
        providers: Seq::Slice(&PROVIDERS),
    }),
    AnyRequest::CollectTracing4(CollectTracing4 {
        circular_buffer_mb: 64,
        format: TraceFormat::NetTrace,
        rundown_keyword: 0x8002_0139,
        request_stackwalk: true,
        providers: Seq::Slice(&PROVIDERS),
    }),
    AnyRequest::CollectTracing5(CollectTracing5::Streaming(SESSION)),
    AnyRequest::CollectTracing6(CollectTracing6::Streaming {
        session: SESSION,
        buffering_mode: BufferingMode::Drop,
    }),
    AnyRequest::AttachProfiler(AttachProfiler {
        attach_timeout: 5,
        profiler_guid: Guid::NIL,
        profiler_path: Text::Str("/opt/libprof.so"),
        client_data: b"data",
    }),
    AnyRequest::StartupProfiler(StartupProfiler {
        profiler_guid: Guid::NIL,
        profiler_path: Text::Str("/opt/libprof.so"),
    }),
    AnyRequest::ProcessInfo(ProcessInfo),
    AnyRequest::ResumeRuntime(ResumeRuntime),
    AnyRequest::ProcessEnvironment(ProcessEnvironment),
    AnyRequest::SetEnvironmentVariable(SetEnvironmentVariable {
        name: Text::Str("DIAG"),
        value: Text::Str("1"),
    }),
    AnyRequest::ProcessInfo2(ProcessInfo2),
    AnyRequest::EnablePerfMap(EnablePerfMap {
        perf_map_type: PerfMapType::PerfMap,
    }),
    AnyRequest::DisablePerfMap(DisablePerfMap),
    AnyRequest::ApplyStartupHook(ApplyStartupHook {
        startup_hook_path: Text::Str("/app/Hook.dll"),
    }),
    AnyRequest::ProcessInfo3(ProcessInfo3),
    AnyRequest::CollectTracing5(CollectTracing5::UserEvents(USER_SESSION)),
    AnyRequest::CollectTracing6(CollectTracing6::UserEvents(USER_SESSION)),
];

/// The index in [`CLIENT_REQUESTS`] of the sample for `command` (for seeds).
pub fn client_selector(command: Command) -> u8 {
    CLIENT_REQUESTS
        .iter()
        .position(|r| r.command() == command)
        .unwrap_or_else(|| panic!("no client sample for {}", command)) as u8
}

/// The sample request for `command`.
pub fn sample_request_for(command: Command) -> AnyRequest<'static> {
    CLIENT_REQUESTS[client_selector(command) as usize]
}

/// What a client machine reported, owned and independent of how the input was chunked:
/// stream bytes concatenated, other events as their Debug text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Log {
    /// Non-stream events, in order.
    pub events: Vec<String>,
    /// All `StreamData` bytes, concatenated.
    pub stream: Vec<u8>,
    /// The error that ended the exchange.
    pub error: Option<ClientError>,
}

impl Log {
    /// The log with the one chunking-dependent value normalized: `UnexpectedData { len }`
    /// counts the bytes of the call that found them, which depends on the chunk size.
    pub fn normalized(mut self) -> Log {
        if let Some(ClientError::UnexpectedData { .. }) = self.error {
            self.error = Some(ClientError::UnexpectedData { len: 0 });
        }
        self
    }
}

fn record(log: &mut Log, ev: ClientEvent<'_>) {
    match ev {
        ClientEvent::StreamData(d) => {
            assert!(!d.is_empty(), "empty StreamData event");
            log.stream.extend_from_slice(d)
        }
        ClientEvent::EnvironmentVariable(t) => {
            check_text(&t);
            log.events.push(format!("{:?}", ev))
        }
        other => log.events.push(format!("{:?}", other)),
    }
}

/// Sends `request` on a fresh machine and feeds it `input` in chunks of `chunk(remaining)`
/// bytes (clamped to 1..=remaining), as an adapter would: append, drain events, keep what was
/// not consumed. Checks the `Partial` contract and that a failed machine repeats its error.
///
/// With `advertise`, the machine is a reverse-port one
/// ([`ClientConnection::expecting_advertise`]): the request is sent when the Advertise
/// event arrives.
pub fn drive(
    request: &AnyRequest<'_>,
    input: &[u8],
    chunk: &mut dyn FnMut(usize) -> usize,
    eof: bool,
    advertise: bool,
) -> Log {
    let mut tx = vec![0u8; request.encoded_len()];
    let mut log = Log::default();
    let mut conn = if advertise {
        let mut conn = ClientConnection::expecting_advertise();
        assert_eq!(
            conn.send_request(request, &mut tx),
            Err(ClientError::Misuse(dsipc::UsageError::AdvertiseNotReceived))
        );
        conn
    } else {
        let mut conn = ClientConnection::new();
        conn.send_request(request, &mut tx)
            .expect("sample requests encode");
        let user_events = matches!(
            request,
            AnyRequest::CollectTracing5(CollectTracing5::UserEvents(_))
                | AnyRequest::CollectTracing6(CollectTracing6::UserEvents(_))
        );
        assert_eq!(request.requires_fd_passing(), user_events);
        assert_eq!(conn.requires_fd_passing(), user_events);
        conn
    };
    // The core's receive buffer: it applies `consumed` and checks the machine's `Partial`
    // contract (consumes nothing, asks for more than is there) with debug assertions.
    let mut rx = RecvBuffer::with_limit(Vec::new(), usize::MAX);
    let mut fed = 0;
    let mut env_announced: Option<u32> = None;
    let fail = |conn: &mut ClientConnection, log: &mut Log, e: ClientError| {
        show(&e);
        // A failed machine stays failed and repeats the error.
        assert_eq!(conn.handle_input(&[]), Err(e));
        assert_eq!(conn.handle_input(b"more"), Err(e));
        assert_eq!(conn.handle_eof(), Err(e));
        assert!(conn.is_finished());
        log.error = Some(e);
    };
    loop {
        let at_eof = rx.is_eof();
        match rx.poll_client(&mut conn) {
            Ok(Poll::Event(ev)) => {
                if at_eof {
                    // Only the machine's handle_eof speaks after EOF.
                    assert_eq!(ev, ClientEvent::EndOfStream);
                }
                if let ClientEvent::Reply(Reply::ProcessEnvironment(e)) = ev {
                    env_announced = Some(e.incoming_bytes);
                }
                record(&mut log, ev);
                if let ClientEvent::Advertise(a) = ev {
                    let mut b = [0u8; ADVERTISE_LEN];
                    assert_eq!(a.emit(&mut b), Ok(ADVERTISE_LEN));
                    assert_eq!(&b[..], &input[..ADVERTISE_LEN]);
                    conn.send_request(request, &mut tx)
                        .expect("sample requests encode");
                }
            }
            // After the end, more bytes are the machine's to judge.
            Ok(Poll::NeedInput) | Ok(Poll::End) if fed < input.len() => {
                let n = chunk(input.len() - fed).clamp(1, input.len() - fed);
                fed += rx.push(&input[fed..fed + n]).expect("unbounded");
            }
            Ok(Poll::NeedInput) => {
                // One message, or one environment entry (bounded by the announced block
                // size, which may exceed 64 KiB).
                let bound = env_announced.map_or(MAX_NEEDED, |a| MAX_NEEDED.max(a as usize));
                assert!(
                    rx.needed() <= bound,
                    "Partial needs {} bytes, over the bound {}",
                    rx.needed(),
                    bound
                );
                if !eof {
                    break;
                }
                assert!(!rx.is_eof(), "NeedInput after EOF");
                rx.eof();
            }
            Ok(Poll::End) => {
                assert!(conn.is_finished());
                if eof && !rx.is_eof() {
                    // Ended by the machine: EOF changes nothing then.
                    assert_eq!(conn.handle_eof(), Ok(None));
                }
                break;
            }
            Err(RecvError::Machine(e)) => {
                fail(&mut conn, &mut log, e);
                return log;
            }
            Err(e) => panic!("{}", e),
        }
    }
    log
}

/// The client machine with fuzzer-chosen fragmentation.
///
/// Input: `[selector, n, c_1 .. c_n, peer bytes ...]`. `selector & 0x1F` picks the request
/// from [`CLIENT_REQUESTS`] (modulo its length), bit 5 makes the machine a reverse-port one
/// (the peer bytes start with an Advertise), bit 7 delivers EOF at the end; `n & 0x0F`
/// chunk sizes follow (chunk `i` is `c_(i mod n) + 1` bytes; none means one byte at a time).
/// The log of that delivery must equal the log of delivering everything at once.
pub fn client(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let request = &CLIENT_REQUESTS[(data[0] & 0x1F) as usize % CLIENT_REQUESTS.len()];
    let advertise = data[0] & 0x20 != 0;
    let eof = data[0] & 0x80 != 0;
    let n = (data[1] & 0x0F) as usize;
    let chunks = match data.get(2..2 + n) {
        Some(c) => c,
        None => return,
    };
    let input = &data[2 + n..];
    let whole = drive(request, input, &mut |rest| rest, eof, advertise).normalized();
    let mut i = 0;
    let mut next = |_rest: usize| {
        let c = if chunks.is_empty() {
            1
        } else {
            chunks[i % chunks.len()] as usize + 1
        };
        i += 1;
        c
    };
    let split = drive(request, input, &mut next, eof, advertise).normalized();
    assert_eq!(whole, split, "chunked delivery differs from whole delivery");
}

/// Builds a `client` input (for seeds and tests); with `advertise`, `peer` must start with
/// the Advertise.
pub fn client_input(
    command: Command,
    eof: bool,
    advertise: bool,
    chunks: &[u8],
    peer: &[u8],
) -> Vec<u8> {
    assert!(chunks.len() < 16);
    let mut v = vec![
        client_selector(command) | if eof { 0x80 } else { 0 } | if advertise { 0x20 } else { 0 },
    ];
    v.push(chunks.len() as u8);
    v.extend_from_slice(chunks);
    v.extend_from_slice(peer);
    v
}

/// Builds a `reply`/`request` input: the command's two bytes, then the payload.
pub fn command_input(command: Command, payload: &[u8]) -> Vec<u8> {
    let (s, i) = command.code();
    let mut v = vec![s, i];
    v.extend_from_slice(payload);
    v
}

// ---------------------------------------------------------------------------------------
// The server machine.

/// The environment the `server` target sends for ProcessEnvironment.
pub static ENVIRONMENT: [Text<'static>; 3] = [
    Text::Str("PATH=/usr/bin:/bin"),
    Text::Str("HOME=/root"),
    Text::Str("LANG=é€𝄞"),
];

/// The Advertise an advertising `server` sends first.
pub const ADVERTISE: Advertise = Advertise {
    runtime_cookie: Guid([7; 16]),
    process_id: 4242,
    future: 0,
};

static PROCESS_INFO: ProcessInfoReply<'static> = ProcessInfoReply {
    process_id: 4242,
    runtime_cookie: Guid([7; 16]),
    command_line: Text::Str("/usr/bin/dotnet app.dll"),
    os: Text::Str("Linux"),
    arch: Text::Str("x64"),
};

/// The OK response the `server` target gives to `command`, by reply shape.
pub fn sample_response(command: Command) -> Response<'static> {
    let p = PROCESS_INFO;
    Response::Ok(
        match ReplyKind::of(command).expect("a request command has a reply shape") {
            ReplyKind::Status => Reply::Ok(Hresult::S_OK),
            ReplyKind::SessionId => Reply::SessionId(0x7f9e_b000_10c0),
            ReplyKind::ProcessInfo => Reply::ProcessInfo(p),
            ReplyKind::ProcessInfo2 => Reply::ProcessInfo2(ProcessInfo2Reply {
                process_id: p.process_id,
                runtime_cookie: p.runtime_cookie,
                command_line: p.command_line,
                os: p.os,
                arch: p.arch,
                managed_entrypoint_assembly_name: Text::Str("app"),
                clr_product_version: Text::Str("8.0.4"),
            }),
            ReplyKind::ProcessInfo3 => Reply::ProcessInfo3(ProcessInfo3Reply {
                version: 1,
                process_id: p.process_id,
                runtime_cookie: p.runtime_cookie,
                command_line: p.command_line,
                os: p.os,
                arch: p.arch,
                managed_entrypoint_assembly_name: Text::Str("app"),
                clr_product_version: Text::Str("8.0.4"),
                runtime_identifier: Text::Str("linux-x64"),
                extension: &[],
            }),
            ReplyKind::ProcessEnvironment => Reply::ProcessEnvironment(ProcessEnvironmentReply {
                incoming_bytes: dsipc::conn::environment_block_len(ENVIRONMENT.iter().copied())
                    as u32,
                future: 0,
            }),
            other => panic!("unknown reply kind {:?}", other),
        },
    )
}

/// What a server machine reported and sent, owned and independent of chunking.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerLog {
    /// Request, Rejected and PeerClosed events (Debug text), in order.
    pub events: Vec<String>,
    /// All `ClientData` bytes, concatenated.
    pub client_data: Vec<u8>,
    /// Everything the server wrote: Advertise, replies, continuations.
    pub transmitted: Vec<u8>,
}

fn expected_hresult(reason: &RejectReason) -> Hresult {
    match reason {
        RejectReason::BadMagic { .. } => Hresult::CORDIAGIPC_E_UNKNOWN_MAGIC,
        RejectReason::UnknownCommand { .. } => Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND,
        _ => Hresult::CORDIAGIPC_E_BAD_ENCODING,
    }
}

/// Acts on one server event the way a runtime would, checking the machine's contract, and
/// checks that a client machine accepts what the server sent for a served request.
///
/// With `half_close`, the client shuts down its sending side right after its request (or
/// its rejected message): the server still answers. Returns true when that happened (the
/// driver then feeds nothing more).
fn on_server_event(
    conn: &mut ServerConnection,
    ev: ServerEvent<'_>,
    log: &mut ServerLog,
    half_close: bool,
) -> bool {
    let mut out = vec![0u8; 4096];
    match ev {
        ServerEvent::Request { request, .. } => {
            log.events.push(format!("{:?}", ev));
            let command = request.command();
            check_request_texts(&request);
            assert_eq!(conn.command(), Some(command));
            assert!(conn.wants_read() && !conn.should_close() && !conn.wants_write());
            if half_close {
                assert_eq!(conn.handle_eof(), Some(ServerEvent::PeerClosed));
                log.events.push(format!("{:?}", ServerEvent::PeerClosed));
                assert!(!conn.wants_read() && !conn.should_close());
                assert_eq!(conn.handle_eof(), None, "PeerClosed is reported once");
                assert_eq!(conn.command(), Some(command));
            }
            // A served request is one this crate would send: it encodes and decodes equal.
            let mut msg = vec![0u8; request.encoded_len()];
            let n = request
                .encode(&mut msg)
                .unwrap_or_else(|e| panic!("served request does not encode: {:?}", e));
            assert_eq!(
                AnyRequest::decode(command, &msg[HEADER_LEN..n]),
                Ok(Some(request))
            );

            // The wrong reply shape and a short buffer are refused without changing state.
            let resp = sample_response(command);
            let wrong = match ReplyKind::of(command) {
                Some(ReplyKind::SessionId) => Response::Ok(Reply::Ok(Hresult::S_OK)),
                _ => Response::Ok(Reply::SessionId(1)),
            };
            assert_eq!(
                conn.send_response(&wrong, &mut out),
                Err(ServerError::WrongReply { request: command })
            );
            let need = resp.encoded_len();
            assert_eq!(
                conn.send_response(&resp, &mut out[..need - 1]),
                Err(ServerError::Encode(EncodeError::BufferTooSmall {
                    needed: need
                }))
            );
            let n = conn.send_response(&resp, &mut out).unwrap();
            assert_eq!(n, need);
            let mut sent = out[..n].to_vec();
            assert_eq!(
                conn.send_response(&resp, &mut out),
                Err(ServerError::AlreadyReplied)
            );

            // The continuation.
            match resp {
                Response::Ok(Reply::ProcessEnvironment(e)) => {
                    let len = dsipc::conn::encode_environment_block(
                        ENVIRONMENT.iter().copied(),
                        &mut out,
                    )
                    .unwrap();
                    assert_eq!(len, e.incoming_bytes as usize);
                    assert!(!conn.should_close());
                    assert_eq!(conn.check_continuation(len), Ok(()));
                    assert!(conn.check_continuation(len + 1).is_err());
                    assert_eq!(
                        conn.continuation_sent(len + 1),
                        Err(ServerError::ContinuationTooLong {
                            announced: e.incoming_bytes,
                            attempted: len as u64 + 1,
                        })
                    );
                    conn.continuation_sent(len - 1).unwrap();
                    conn.continuation_sent(1).unwrap();
                    sent.extend_from_slice(&out[..len]);
                }
                Response::Ok(Reply::SessionId(_)) if command.is_collect_tracing() => {
                    conn.continuation_sent(8).unwrap();
                    sent.extend_from_slice(b"Nettrace");
                    assert!(!conn.should_close());
                    conn.finish_stream().unwrap();
                }
                _ => {}
            }
            assert!(conn.should_close());
            assert_eq!(conn.continuation_sent(1), Err(ServerError::NotStreaming));
            assert_eq!(conn.finish_stream(), Err(ServerError::NotStreaming));

            // A client that sent this request reads exactly that reply and continuation.
            let client = drive(&request, &sent, &mut |rest| rest, true, false);
            let expected = match resp {
                Response::Ok(r) => format!("{:?}", ClientEvent::Reply(r)),
                Response::Error(e) => format!("{:?}", ClientEvent::Error(e)),
            };
            assert_eq!(client.error, None, "client rejects the server's reply");
            assert_eq!(client.events.first(), Some(&expected));
            if command.is_collect_tracing() {
                assert_eq!(client.stream, b"Nettrace");
            }
            if command == Command::ProcessEnvironment {
                assert_eq!(client.events.len(), 1 + ENVIRONMENT.len() + 1);
            }
            log.transmitted.extend_from_slice(&sent);
            half_close
        }
        ServerEvent::Rejected(r) => {
            log.events.push(format!("{:?}", ev));
            debug(&r);
            assert_eq!(r.hresult, expected_hresult(&r.reason));
            // The error reply travels in the event: nothing is pending in the machine.
            assert!(!conn.wants_write() && conn.should_close());
            if half_close {
                assert_eq!(conn.handle_eof(), None);
            }
            let reply = r.reply();
            let h = Header::parse(&reply).unwrap();
            assert_eq!(h.command(), Command::ServerError);
            assert_eq!(
                ErrorReply::decode(Command::ProcessInfo, &reply[HEADER_LEN..]),
                Ok(ErrorReply::new(r.hresult))
            );
            log.transmitted.extend_from_slice(&reply);
            assert_eq!(conn.poll_transmit(&mut out), Ok(0));
            assert_eq!(
                conn.send_response(&Response::Ok(Reply::Ok(Hresult::S_OK)), &mut out),
                Err(ServerError::AlreadyReplied)
            );
            half_close
        }
        ServerEvent::ClientData(d) => {
            assert!(!d.is_empty(), "empty ClientData event");
            log.client_data.extend_from_slice(d);
            false
        }
        ServerEvent::PeerClosed => {
            log.events.push(format!("{:?}", ev));
            false
        }
        other => {
            log.events.push(format!("{:?}", other));
            false
        }
    }
}

/// Feeds `input` (what a client sent) to a server machine in chunks, answering as a runtime
/// would; ends with EOF when `eof` is set. With `advertise` the machine first sends an
/// Advertise; with `half_close` the client closes its side right after its first message
/// (nothing after it is fed) and must still be answered.
pub fn drive_server(
    input: &[u8],
    chunk: &mut dyn FnMut(usize) -> usize,
    eof: bool,
    advertise: bool,
    half_close: bool,
) -> ServerLog {
    let mut log = ServerLog::default();
    let mut out = [0u8; 64];
    let mut conn = if advertise {
        let mut conn = ServerConnection::advertising(ADVERTISE);
        assert!(conn.wants_write());
        assert_eq!(
            conn.poll_transmit(&mut out[..ADVERTISE_LEN - 1]),
            Err(ServerError::Encode(EncodeError::BufferTooSmall {
                needed: ADVERTISE_LEN
            }))
        );
        let n = conn.poll_transmit(&mut out).unwrap();
        assert_eq!(Advertise::parse(&out[..n]), Ok(ADVERTISE));
        log.transmitted.extend_from_slice(&out[..n]);
        conn
    } else {
        ServerConnection::new()
    };
    assert!(!conn.wants_write() && conn.wants_read() && !conn.should_close());
    assert_eq!(conn.poll_transmit(&mut out), Ok(0));
    assert_eq!(conn.command(), None);
    assert_eq!(
        conn.send_response(&Response::Ok(Reply::Ok(Hresult::S_OK)), &mut out),
        Err(ServerError::NoRequest)
    );

    // The core's receive buffer (see `drive`); nothing past one message is ever needed.
    let mut rx = RecvBuffer::with_limit(Vec::new(), MAX_MESSAGE_LEN);
    let mut fed = 0;
    loop {
        let at_eof = rx.is_eof();
        match rx.poll_server(&mut conn) {
            Ok(Poll::Event(ev)) => {
                if at_eof {
                    assert!(!matches!(ev, ServerEvent::ClientData(_)));
                    on_server_event(&mut conn, ev, &mut log, false);
                    continue;
                }
                if on_server_event(&mut conn, ev, &mut log, half_close) {
                    assert!(conn.should_close());
                    break;
                }
            }
            Ok(Poll::NeedInput) | Ok(Poll::End) if fed < input.len() => {
                let n = chunk(input.len() - fed).clamp(1, input.len() - fed);
                fed += rx.push(&input[fed..fed + n]).expect("one message fits");
            }
            Ok(Poll::NeedInput) if eof && !at_eof => rx.eof(),
            Ok(Poll::NeedInput) => break,
            Ok(Poll::End) => {
                if !at_eof {
                    assert!(conn.should_close());
                }
                break;
            }
            Err(e) => panic!("a request needs more than one message: {}", e),
        }
    }
    if eof {
        if !rx.is_eof() {
            // The exchange ended before the input did: the EOF comes now.
            if let Some(ev) = conn.handle_eof() {
                assert!(!matches!(ev, ServerEvent::ClientData(_)));
                on_server_event(&mut conn, ev, &mut log, false);
            }
        }
        assert!(!conn.wants_read());
        // A second EOF changes nothing.
        assert_eq!(conn.handle_eof(), None);
    }
    log
}

/// The server machine with fuzzer-chosen fragmentation.
///
/// Input: `[flags, n, c_1 .. c_n, client bytes ...]`. `flags` bit 0 makes the machine an
/// advertising (reverse-port) one, bit 1 half-closes the client right after its first
/// message (it must still be answered), bit 7 delivers EOF at the end; chunk sizes as in
/// [`client`]. Events, client data and everything transmitted must equal those of whole
/// delivery; every served request is answered and the reply read back by a client machine.
pub fn server(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let advertise = data[0] & 0x01 != 0;
    let half_close = data[0] & 0x02 != 0;
    let eof = data[0] & 0x80 != 0;
    let n = (data[1] & 0x0F) as usize;
    let chunks = match data.get(2..2 + n) {
        Some(c) => c,
        None => return,
    };
    let input = &data[2 + n..];
    let whole = drive_server(input, &mut |rest| rest, eof, advertise, half_close);
    let mut i = 0;
    let mut next = |_rest: usize| {
        let c = if chunks.is_empty() {
            1
        } else {
            chunks[i % chunks.len()] as usize + 1
        };
        i += 1;
        c
    };
    let split = drive_server(input, &mut next, eof, advertise, half_close);
    assert_eq!(whole, split, "chunked delivery differs from whole delivery");
}

/// Builds a `server` input (for seeds and tests).
pub fn server_input(
    eof: bool,
    advertise: bool,
    half_close: bool,
    chunks: &[u8],
    client: &[u8],
) -> Vec<u8> {
    assert!(chunks.len() < 16);
    let mut v = vec![if eof { 0x80 } else { 0 } | u8::from(advertise) | u8::from(half_close) << 1];
    v.push(chunks.len() as u8);
    v.extend_from_slice(chunks);
    v.extend_from_slice(client);
    v
}

// ---------------------------------------------------------------------------------------
// nettrace: the trace stream parser and the payload field walker.

use dsipc::nettrace::clr::{self, ClrProvider};
use dsipc::nettrace::{
    FieldDescriptions, Format, Item, MetadataRecord, NettraceError, NettraceParser, Value,
};

/// Framing bytes a `Partial` may ask for beyond one block (object header with the longest
/// accepted name, size, padding, end tag; or the stream header and Trace object).
pub const NETTRACE_FRAMING: usize = 512;

/// What a nettrace parse reported, owned and independent of how the input was chunked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NtLog {
    /// Every item's Debug text, in order.
    pub items: Vec<String>,
    /// The error that ended the parse, normalized (see [`NtLog::normalize`]).
    pub error: Option<NettraceError>,
    /// The end-of-stream marker was reported (the `EndOfStream` item: whether `Status::Done`
    /// follows depends on whether bytes came after it in the same call).
    pub done: bool,
}

impl NtLog {
    /// Two error fields describe how much input the failing call was given, which depends on
    /// the chunking: `BadMagic::found` (the first bytes available) and `TrailingData::len`.
    fn normalize(e: NettraceError) -> NettraceError {
        match e {
            NettraceError::BadMagic { offset, .. } => NettraceError::BadMagic {
                offset,
                found: [0; 8],
            },
            NettraceError::TrailingData { offset, .. } => {
                NettraceError::TrailingData { offset, len: 0 }
            }
            e => e,
        }
    }
}

/// Visits a value and everything nested in it, at most `budget` values in all.
fn visit_value(v: &Value<'_>, budget: &mut u32) {
    if *budget == 0 {
        return;
    }
    *budget -= 1;
    debug(v);
    let _ = (v.as_u64(), v.as_i64(), v.as_f64());
    match v {
        Value::String(t) => {
            write!(Sink, "{}", t).unwrap();
            let n: usize = t.chars_lossy().map(char::len_utf8).sum();
            assert_eq!(n, t.utf8_len_lossy());
        }
        Value::Object(o) => visit_fields(o.fields(), budget),
        Value::Array(a) => {
            let mut n = 0;
            for e in a.iter() {
                if *budget == 0 {
                    return;
                }
                match e {
                    Ok(e) => visit_value(&e, budget),
                    Err(err) => {
                        show(&err);
                        return;
                    }
                }
                n += 1;
            }
            assert_eq!(n, a.count, "array yielded a different count");
        }
        _ => {}
    }
}

fn visit_fields(fields: dsipc::nettrace::PayloadFields<'_>, budget: &mut u32) {
    let mut last = 0;
    let mut fields = fields;
    for f in &mut fields {
        match f {
            Ok(f) => {
                assert!(f.offset >= last, "field offsets go backwards");
                last = f.offset;
                write!(Sink, "{}", f.name).unwrap();
                let _ = f.ty.fixed_size();
                visit_value(&f.value, budget);
            }
            Err(e) => {
                show(&e);
                return;
            }
        }
        if *budget == 0 {
            return;
        }
    }
    assert!(fields.position() >= last);
}

/// Walks a payload with field descriptions, checking the walker's invariants.
pub fn walk_payload(fields: &FieldDescriptions<'_>, payload: &[u8]) {
    for d in fields.iter() {
        write!(Sink, "{}", d.name).unwrap();
        let _ = (d.ty.element(), d.ty.fixed_size());
    }
    let mut budget = 100_000;
    let walk = fields.walk(payload);
    let all = walk.clone();
    visit_fields(walk, &mut budget);
    let mut all = all;
    for f in &mut all {
        if f.is_err() {
            break;
        }
    }
    assert!(all.position() <= payload.len());
    assert!(all.rest().len() <= payload.len());
}

/// Feeds `input` to a parser in chunks of `chunk(remaining)` bytes (clamped), as a live
/// reader would, exercising every view of every item. Checks the `Partial` contract.
pub fn nettrace_drive(
    input: &[u8],
    max_block: usize,
    chunk: &mut dyn FnMut(usize) -> usize,
) -> NtLog {
    let mut log = NtLog::default();
    let mut p = NettraceParser::with_max_block_size(max_block);
    // The core's receive buffer: it applies `consumed` and checks the `Partial` contract
    // (consumes nothing, asks for more than is there) with debug assertions.
    let mut rx = RecvBuffer::with_limit(Vec::new(), usize::MAX);
    let mut fed = 0;
    let mut metas: std::collections::HashMap<u32, (Vec<u8>, Format)> = Default::default();
    let mut ptr = 8;
    loop {
        assert_eq!(
            p.offset(),
            (fed - rx.pending().len()) as u64,
            "offset() is not the bytes consumed"
        );
        let at_eof = rx.is_eof();
        let item = match rx.poll_nettrace(&mut p) {
            Ok(Poll::Event(i)) => i,
            Ok(poll @ (Poll::NeedInput | Poll::End)) if fed < input.len() => {
                if matches!(poll, Poll::NeedInput) {
                    assert!(
                        rx.needed() <= max_block + NETTRACE_FRAMING,
                        "past one block"
                    );
                }
                let n = chunk(input.len() - fed).clamp(1, input.len() - fed);
                fed += rx.push(&input[fed..fed + n]).expect("unbounded");
                continue;
            }
            Ok(Poll::NeedInput) => {
                assert!(
                    rx.needed() <= max_block + NETTRACE_FRAMING,
                    "past one block"
                );
                rx.eof();
                continue;
            }
            Ok(Poll::End) => {
                assert!(log.done, "Done before EndOfStream");
                if !at_eof {
                    assert_eq!(p.handle_eof(), Ok(()));
                }
                return log;
            }
            Err(RecvError::Machine(e)) => {
                show(&e);
                if at_eof {
                    assert!(!log.done);
                }
                assert!(
                    e.offset() <= input.len() as u64,
                    "error offset past the input"
                );
                assert_eq!(
                    p.handle_input(rx.pending()),
                    Err(e),
                    "a failed parser must repeat its error"
                );
                log.error = Some(NtLog::normalize(e));
                return log;
            }
            Err(e) => panic!("{}", e),
        };
        log.items.push(format!("{:?}", item));
        if item == Item::EndOfStream {
            log.done = true;
        }
        match item {
            Item::Trace(t) => {
                ptr = t.pointer_size;
                for (k, v) in t.key_values.iter() {
                    write!(Sink, "{}{}", k, v).unwrap();
                }
                let _ = t.nanos_since_start(i64::MAX);
            }
            Item::Metadata(m) => {
                let m = m.record().expect("a reported record decodes");
                write!(Sink, "{}{}", m.provider_name, m.event_name).unwrap();
                let again =
                    MetadataRecord::parse(m.raw, m.format, 0).expect("a reported record re-parses");
                assert_eq!(again.fields.len(), m.fields.len());
                metas.insert(m.metadata_id, (m.raw.to_vec(), m.format));
            }
            Item::Event(e) => {
                if let Some((raw, format)) = metas.get(&e.metadata_id) {
                    let m = MetadataRecord::parse(raw, *format, 0).unwrap();
                    walk_payload(&m.fields, e.payload);
                    if let Ok(ev) = clr::decode_with(&m, ptr, e.payload) {
                        debug(&ev);
                        let _ = (ev.name(), ev.as_method(), ev.as_module());
                    }
                }
            }
            Item::Stacks(s) => {
                let mut n = 0;
                for st in s.iter() {
                    assert!(s.contains(st.id));
                    assert_eq!(st.ips().count(), st.len());
                    n += 1;
                }
                assert_eq!(n, s.count);
            }
            Item::SequencePoint(sp) => {
                assert_eq!(sp.threads().count(), sp.thread_count as usize)
            }
            Item::Threads(t) => {
                for r in t.iter() {
                    debug(&r);
                    let _ = r.key_values().count();
                }
            }
            Item::RemoveThreads(r) => assert_eq!(r.iter().count(), r.count as usize),
            Item::LabelLists(l) => {
                let mut n = 0;
                for list in l.iter() {
                    let _ = list.labels().count();
                    n += 1;
                }
                assert_eq!(n, l.count);
            }
            _ => {}
        }
    }
}

/// Target `nettrace`: `[flags, n, n chunk sizes, stream...]`. Flags bits 0-1 pick the maximum
/// block size. The stream is parsed whole and in chunks of the given sizes (cycled; 1 byte
/// if none); both must report the same items and error.
pub fn nettrace(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let max_block = match data[0] & 3 {
        0 => 1 << 20,
        1 => 4096,
        2 => 64,
        _ => 100_000,
    };
    let n = (data[1] & 0x0F) as usize;
    let chunks = match data.get(2..2 + n) {
        Some(c) => c,
        None => return,
    };
    let input = &data[2 + n..];
    let whole = nettrace_drive(input, max_block, &mut |rest| rest);
    let mut i = 0;
    let mut next = |_rest: usize| {
        let c = if chunks.is_empty() {
            1
        } else {
            chunks[i % chunks.len()] as usize + 1
        };
        i += 1;
        c
    };
    let split = nettrace_drive(input, max_block, &mut next);
    assert_eq!(whole, split, "chunked delivery differs from whole delivery");
}

/// Builds a `nettrace` input (for seeds and tests).
pub fn nettrace_input(max_block_sel: u8, chunks: &[u8], stream: &[u8]) -> Vec<u8> {
    assert!(chunks.len() < 16);
    let mut v = vec![max_block_sel & 3, chunks.len() as u8];
    v.extend_from_slice(chunks);
    v.extend_from_slice(stream);
    v
}

/// Target `nettrace_fields`: `[selector, u16 len, descriptions (len bytes), payload...]`.
/// Selector bits 0-1: 0 = V4 fields (the bytes start with `u32 FieldCount`), 1 = a V5
/// V2Params tag (same), 2 = V6 (they start with `u16 count`). The descriptions become a
/// metadata record; if it parses, the payload is walked with it, every nested value visited.
/// The payload also goes through every built-in CLR layout (bits 2-3: version, bit 4:
/// 4-byte pointers).
pub fn nettrace_fields(data: &[u8]) {
    if data.len() < 3 {
        return;
    }
    let sel = data[0];
    let len = u16::from_le_bytes([data[1], data[2]]) as usize;
    let desc = match data.get(3..3 + len) {
        Some(d) => d,
        None => return,
    };
    let payload = &data[3 + len..];
    let mut raw = Vec::new();
    let format = if sel & 3 == 2 {
        Format::V6 { minor: 0 }
    } else {
        Format::V4
    };
    if format.is_v6() {
        raw.extend_from_slice(&[1, 1, b'P', 5, 1, b'E']);
        raw.extend_from_slice(desc);
    } else {
        raw.extend_from_slice(&1u32.to_le_bytes());
        raw.extend_from_slice(&[b'P', 0, 0, 0]);
        raw.extend_from_slice(&5u32.to_le_bytes());
        raw.extend_from_slice(&[b'E', 0, 0, 0]);
        raw.extend_from_slice(&[0; 16]);
        if sel & 3 == 1 {
            raw.extend_from_slice(&0u32.to_le_bytes());
            raw.extend_from_slice(&(desc.len() as u32).to_le_bytes());
            raw.push(2);
        }
        raw.extend_from_slice(desc);
    }
    if let Ok(m) = MetadataRecord::parse(&raw, format, 0) {
        debug(&m);
        walk_payload(&m.fields, payload);
    }
    let version = u32::from((sel >> 2) & 3);
    let ptr = if sel & 0x10 != 0 { 4 } else { 8 };
    for provider in [
        ClrProvider::Runtime,
        ClrProvider::Rundown,
        ClrProvider::SampleProfiler,
    ] {
        for id in [
            0u32, 1, 2, 3, 4, 7, 8, 9, 10, 54, 55, 56, 80, 81, 91, 143, 144, 151, 152, 153, 154,
        ] {
            match clr::decode(provider, id, version, ptr, payload) {
                Ok(ev) => {
                    debug(&ev);
                    assert_eq!(
                        ev.name(),
                        if matches!(ev, clr::ClrEvent::Unknown(_)) {
                            None
                        } else {
                            clr::event_name(provider, id)
                        }
                    );
                }
                Err(e) => show(&e),
            }
        }
    }
}

/// Builds a `nettrace_fields` input.
pub fn nettrace_fields_input(sel: u8, desc: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut v = vec![sel];
    v.extend_from_slice(&(desc.len() as u16).to_le_bytes());
    v.extend_from_slice(desc);
    v.extend_from_slice(payload);
    v
}
