//! Targets over single messages: header, Advertise, reply and request payloads, and the
//! encode → decode round trips of arbitrary requests and responses.

use std::fmt::{self};

use arbitrary::{Arbitrary, Unstructured};
use dsipc::payload::*;
use dsipc::wire::{
    Advertise, AdvertiseError, Header, HeaderView, Seq, Writer, ADVERTISE_LEN, ADVERTISE_MAGIC,
    HEADER_LEN, MAGIC, MAX_MESSAGE_LEN,
};
use dsipc::{
    ClientConnection, ClientError, ClientEvent, Command, EncodeError, HeaderError, Status,
};

use crate::util::*;
use crate::*;

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
pub(crate) fn check_request_texts(req: &AnyRequest<'_>) {
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
