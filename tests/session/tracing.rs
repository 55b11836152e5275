//! EventPipe sessions against an in-memory runtime: stopped from a second connection, ended
//! by the runtime, cut mid-block, refused; how each stream ends, at every chunk size.

use super::*;

/// A session's runtime: the stream connection answers the start (after `unknown_first`
/// UNKNOWN_COMMANDs), then streams `stream`; `end` says whether it closes after it.
struct Runtime<'s> {
    starts: Vec<Command>,
    unknown_first: usize,
    stream: &'s [u8],
    at: usize,
    reply_sent: usize,
    close_at_end: bool,
    /// After the stream, keep sending a byte per read (a stream that never ends).
    endless: bool,
}

/// Drives a session; `stop_after` stream bytes, a stop is requested and its call driven in
/// the same loop (the stop connection answers with `stop_reply` once the stream is all
/// out, as a runtime flushes before it answers). Returns the bytes received and the end.
fn run_tracing(
    mut tracing: Tracing,
    rt: &mut Runtime<'_>,
    chunk: usize,
    stop_after: Option<u64>,
    stop_reply: Vec<u8>,
) -> (Vec<u8>, Result<Outcome, SessionError>) {
    let mut got = Vec::new();
    let mut now = 0;
    let mut reply = Vec::new();
    let mut stop: Option<Call> = None;
    let mut stop_sent = false;
    loop {
        // The stop connection, driven in the same loop.
        if let Some(call) = stop.as_mut() {
            match call.poll(now) {
                Ok(Step::Connect) => call.connected().unwrap(),
                Ok(Step::Transmit(b)) => {
                    assert_eq!(command_of(b), Command::StopTracing);
                    call.transmitted().unwrap();
                }
                Ok(Step::Receive)
                    if rt.at >= rt.stream.len() && !stop_sent && !stop_reply.is_empty() =>
                {
                    stop_sent = true;
                    let buf = call.read_buf().unwrap();
                    buf[..stop_reply.len()].copy_from_slice(&stop_reply);
                    call.filled(stop_reply.len());
                    call.eof();
                }
                Ok(Step::Done) => {
                    tracing.stop_answered(now);
                    stop = None;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing.stop_failed(e);
                    stop = None;
                }
            }
        }
        match tracing.poll(now) {
            Err(e) => return (got, Err(e)),
            Ok(TraceStep::Connect) => {
                reply.clear();
                rt.reply_sent = 0;
                tracing.connected().unwrap();
            }
            Ok(TraceStep::Transmit(b)) => {
                let c = command_of(b);
                rt.starts.push(c);
                reply = if rt.starts.len() <= rt.unknown_first {
                    unknown()
                } else {
                    encode(Response::Ok(Reply::SessionId(0x7f00)))
                };
                tracing.transmitted().unwrap();
            }
            Ok(TraceStep::Close) => {}
            Ok(TraceStep::Receive) => {
                let buf = tracing.read_buf().unwrap();
                let (src, at) = if rt.reply_sent < reply.len() {
                    (&reply[..], rt.reply_sent)
                } else {
                    (rt.stream, rt.at)
                };
                let n = (src.len() - at).min(chunk).min(buf.len());
                if n == 0 && rt.endless && rt.reply_sent >= reply.len() {
                    buf[0] = 0;
                    now += 1;
                    tracing.filled(1);
                    continue;
                }
                if n == 0 {
                    if src.as_ptr() != rt.stream.as_ptr()
                        || rt.close_at_end && (stop.is_none() || stop_reply.is_empty())
                    {
                        tracing.eof();
                    } else {
                        now += 1;
                    }
                    continue;
                }
                buf[..n].copy_from_slice(&src[at..at + n]);
                if rt.reply_sent < reply.len() {
                    rt.reply_sent += n;
                } else {
                    rt.at += n;
                }
                tracing.filled(n);
            }
            Ok(TraceStep::Started { session_id }) => assert_eq!(session_id, 0x7f00),
            Ok(TraceStep::Data(d)) => {
                let len = d.len();
                assert_eq!(tracing.last_data().len(), len);
                got.extend_from_slice(tracing.last_data());
                if stop_after.map_or(false, |s| got.len() as u64 >= s)
                    && stop.is_none()
                    && !tracing.is_stop_requested()
                {
                    stop = Some(tracing.request_stop(now).unwrap());
                }
            }
            Ok(TraceStep::End(o)) => return (got, Ok(o)),
            Ok(other) => panic!("unexpected step {other:?}"),
        }
    }
}

fn runtime(stream: &[u8]) -> Runtime<'_> {
    Runtime {
        starts: Vec::new(),
        unknown_first: 0,
        stream,
        at: 0,
        reply_sent: 0,
        close_at_end: true,
        endless: false,
    }
}

fn stop_ok() -> Vec<u8> {
    encode(Response::Ok(Reply::SessionId(0x7f00)))
}

#[test]
fn a_stopped_session_ends_stopped_with_every_byte_at_every_chunk_size() {
    let p = providers();
    for chunk in [1, 2, 3, 7, 64, 1000, 100_000] {
        let tracing = Tracing::new(TraceConfig::new(&p), 0, 1_000).unwrap();
        let mut rt = runtime(TRACE);
        let (got, end) = run_tracing(tracing, &mut rt, chunk, Some(1), stop_ok());
        assert_eq!(got, TRACE, "chunk {chunk}");
        assert_eq!(
            end.unwrap(),
            Outcome::Stopped {
                bytes: TRACE.len() as u64
            }
        );
        assert_eq!(rt.starts, [Command::CollectTracing2]);
    }
}

#[test]
fn a_stream_the_runtime_ends_whole_without_our_stop_is_ended() {
    let p = providers();
    let tracing = Tracing::new(TraceConfig::new(&p), 0, 1_000).unwrap();
    let (_, end) = run_tracing(tracing, &mut runtime(TRACE), 100, None, stop_ok());
    assert_eq!(
        end.unwrap(),
        Outcome::Ended {
            bytes: TRACE.len() as u64
        }
    );
}

#[test]
fn a_stream_cut_mid_block_is_cut_at_its_offset_never_a_clean_end() {
    let p = providers();
    for cut in [1, 40, 200, TRACE.len() / 2, TRACE.len() - 1] {
        for stop_after in [None, Some(1)] {
            let tracing = Tracing::new(TraceConfig::new(&p), 0, 1_000).unwrap();
            let mut rt = runtime(&TRACE[..cut]);
            let (got, end) = run_tracing(tracing, &mut rt, 13, stop_after, stop_ok());
            assert_eq!(got.len(), cut);
            match end.unwrap() {
                Outcome::Cut {
                    bytes,
                    offset,
                    stop_requested,
                    ..
                } => {
                    assert_eq!(bytes, cut as u64);
                    assert!(offset <= cut as u64, "offset {offset} past the cut {cut}");
                    assert_eq!(stop_requested, stop_after.is_some());
                }
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
    }
}

#[test]
fn a_stop_racing_the_runtimes_own_end_still_ends_whole() {
    // The stream ends (whole) before the stop is answered: the stop's reply never comes.
    let p = providers();
    let tracing = Tracing::new(TraceConfig::new(&p), 0, 1_000).unwrap();
    let mut rt = runtime(TRACE);
    let (got, end) = run_tracing(tracing, &mut rt, TRACE.len(), Some(1), Vec::new());
    assert_eq!(got, TRACE);
    assert_eq!(
        end.unwrap(),
        Outcome::Stopped {
            bytes: TRACE.len() as u64
        }
    );
}

#[test]
fn a_stop_the_runtime_refuses_ends_the_session_with_its_error() {
    let p = providers();
    let tracing = Tracing::new(TraceConfig::new(&p), 0, 1_000).unwrap();
    let mut rt = runtime(TRACE);
    rt.close_at_end = false;
    let refused = encode(Response::Error(ErrorReply {
        hresult: Hresult(-2147467259),
        message: None,
    }));
    let (_, end) = run_tracing(tracing, &mut rt, 500, Some(1), refused);
    assert!(
        matches!(
            end,
            Err(SessionError::ErrorReply {
                command: Command::StopTracing,
                ..
            })
        ),
        "{end:?}"
    );
}

#[test]
fn a_second_connection_refused_ends_the_session_with_its_error() {
    // The caller's own loop cannot open the stop's connection and says so.
    let p = providers();
    let mut tracing = Tracing::new(TraceConfig::new(&p), 0, 1_000).unwrap();
    let reply = encode(Response::Ok(Reply::SessionId(0x7f00)));
    assert_eq!(tracing.poll(0), Ok(TraceStep::Connect));
    tracing.connected().unwrap();
    assert!(matches!(tracing.poll(0), Ok(TraceStep::Transmit(_))));
    tracing.transmitted().unwrap();
    assert_eq!(tracing.poll(0), Ok(TraceStep::Receive));
    tracing.read_buf().unwrap()[..reply.len()].copy_from_slice(&reply);
    tracing.filled(reply.len());
    assert_eq!(
        tracing.poll(0),
        Ok(TraceStep::Started { session_id: 0x7f00 })
    );
    let mut stop = tracing.request_stop(1).unwrap();
    assert_eq!(stop.poll(1), Ok(Step::Connect));
    let refused = SessionError::Transport {
        command: stop.command(),
        what: "connection refused",
    };
    tracing.stop_failed(refused.clone());
    assert_eq!(tracing.poll(2), Err(refused.clone()));
    // Failed for good: the same error again, and no second stop.
    assert_eq!(tracing.poll(3), Err(refused));
    assert!(matches!(
        tracing.request_stop(3),
        Err(SessionError::Misuse(_))
    ));
}

#[test]
fn a_stream_still_running_after_the_stop_was_answered_is_bounded() {
    let p = providers();
    let tracing = Tracing::new(TraceConfig::new(&p), 0, 50).unwrap();
    let mut rt = runtime(TRACE);
    rt.close_at_end = false;
    rt.endless = true;
    let (_, end) = run_tracing(tracing, &mut rt, 500, Some(1), stop_ok());
    assert_eq!(
        end.unwrap_err(),
        SessionError::StreamNotEnded {
            session_id: 0x7f00,
            timeout_ms: 50
        }
    );
}

#[test]
fn a_runtime_silent_after_the_stop_times_out() {
    let p = providers();
    let tracing = Tracing::new(TraceConfig::new(&p), 0, 50).unwrap();
    let mut rt = runtime(TRACE);
    rt.close_at_end = false;
    // The stop is never answered (no reply bytes) and the stream goes quiet.
    let (_, end) = run_tracing(tracing, &mut rt, 500, Some(1), Vec::new());
    assert_eq!(
        end.unwrap_err(),
        SessionError::Timeout {
            command: Command::StopTracing,
            timeout_ms: 50
        }
    );
}

#[test]
fn collect_tracing2_with_rundown_falls_back_to_collect_tracing() {
    let p = providers();
    let tracing = Tracing::new(TraceConfig::new(&p), 0, 1_000).unwrap();
    let mut rt = runtime(TRACE);
    rt.unknown_first = 1;
    let (_, end) = run_tracing(tracing, &mut rt, 100, None, stop_ok());
    assert!(end.unwrap().is_whole());
    assert_eq!(
        rt.starts,
        [Command::CollectTracing2, Command::CollectTracing]
    );

    // Without rundown CollectTracing cannot carry the request, nor CollectTracing2 a
    // request without stacks: UNKNOWN_COMMAND is NotSupported.
    for config in [
        TraceConfig::new(&p).with_rundown(Rundown::None),
        TraceConfig::new(&p).with_stackwalk(false),
    ] {
        let command = config.command();
        let tracing = Tracing::new(config, 0, 1_000).unwrap();
        let mut rt = runtime(TRACE);
        rt.unknown_first = 1;
        let (_, end) = run_tracing(tracing, &mut rt, 100, None, stop_ok());
        assert_eq!(
            end.unwrap_err(),
            SessionError::NotSupported {
                command,
                hresult: Hresult::CORDIAGIPC_E_UNKNOWN_COMMAND
            }
        );
        assert_eq!(rt.starts.len(), 1);
    }
}

#[test]
fn framing_tells_a_whole_stream_from_a_cut_one_at_every_split() {
    for chunk in [1, 2, 5, 64, 4096] {
        let mut f = Framing::new();
        for c in TRACE.chunks(chunk) {
            f.feed(c).unwrap();
        }
        assert!(f.is_complete());
        assert_eq!(f.eof(), Ok(()));
    }
    for cut in 0..TRACE.len() {
        let mut f = Framing::new();
        f.feed(&TRACE[..cut]).unwrap();
        assert!(!f.is_complete(), "complete at {cut}");
        assert!(matches!(f.eof(), Err(NettraceError::Truncated { .. })));
    }
    let mut f = Framing::new();
    f.feed(TRACE).unwrap();
    assert!(matches!(
        f.feed(b"x"),
        Err(NettraceError::TrailingData { .. })
    ));
    let mut f = Framing::new();
    assert!(matches!(
        f.feed(b"NotATrace"),
        Err(NettraceError::BadMagic { .. })
    ));
}

#[test]
fn framing_follows_core_3_1_streams_too() {
    let trace: &[u8] = include_bytes!("../data/nettrace/activities-netcore3.1.23.nettrace");
    let mut f = Framing::new();
    for c in trace.chunks(3) {
        f.feed(c).unwrap();
    }
    assert!(f.is_complete());
}

fn advertise_bytes() -> Vec<u8> {
    let mut b = vec![0u8; dsipc::wire::ADVERTISE_LEN];
    let n = dsipc::fixtures::ADVERTISE.emit(&mut b).unwrap();
    b.truncate(n);
    b
}

#[test]
fn a_reverse_connections_advertise_is_read_exactly_at_every_chunk_size() {
    use dsipc::session::AwaitAdvertise;
    // The runtime's next bytes follow at once: none of them may be taken.
    let mut wire = advertise_bytes();
    wire.extend_from_slice(b"DOTNET_IPC_V1\0 next");
    for chunk in 1..=wire.len() {
        let mut wait = AwaitAdvertise::new(0, 100);
        let mut at = 0;
        let adv = loop {
            match wait.poll(0).unwrap() {
                Some(adv) => break adv,
                None => {
                    let buf = wait.read_buf();
                    let n = buf.len().min(chunk).min(wire.len() - at);
                    buf[..n].copy_from_slice(&wire[at..at + n]);
                    at += n;
                    wait.filled(n);
                }
            }
        };
        assert_eq!(adv, dsipc::fixtures::ADVERTISE);
        assert_eq!(at, dsipc::wire::ADVERTISE_LEN, "chunk {chunk}");
    }
}

#[test]
fn a_reverse_connection_that_is_short_garbled_or_silent_is_typed() {
    use dsipc::session::AwaitAdvertise;
    // Closed half way.
    let bytes = advertise_bytes();
    let mut wait = AwaitAdvertise::new(0, 100);
    let buf = wait.read_buf();
    buf[..10].copy_from_slice(&bytes[..10]);
    wait.filled(10);
    assert_eq!(wait.poll(0), Ok(None));
    wait.eof();
    assert!(matches!(wait.poll(0), Err(SessionError::Protocol(_))));
    // Not an Advertise at all.
    let mut wait = AwaitAdvertise::new(0, 100);
    wait.read_buf().copy_from_slice(&[b'x'; 34]);
    wait.filled(34);
    assert!(matches!(wait.poll(0), Err(SessionError::Protocol(_))));
    // Silent past the deadline, on fake time.
    let mut wait = AwaitAdvertise::new(1_000, 50);
    assert_eq!(wait.poll_timeout(), 1_050);
    assert_eq!(wait.poll(1_049), Ok(None));
    assert_eq!(
        wait.poll(1_050),
        Err(SessionError::AdvertiseTimeout { timeout_ms: 50 })
    );
}
