//! The session layer over any bytes a runtime could send: a `Tracing` session started with
//! CollectTracing2 (falling back to CollectTracing), its reply and stream taken from the
//! input, a stop requested part way. Properties: the session always ends (an outcome or a
//! typed error, never a panic or a loop), every stream byte is handed over once, the
//! outcome's byte count is what was handed over, and delivery in fragments ends the same way
//! as whole delivery; the stream's framing agrees with the nettrace parser: a stream the
//! parser reads to its end-of-stream marker is one the framing calls whole.

use dsipc::nettrace::{Framing, NettraceParser, Status};
use dsipc::payload::Provider;
use dsipc::session::{Outcome, TraceConfig, TraceStep, Tracing};

/// How a session over `wire` ended: the stream bytes handed over and the outcome (or that
/// it failed).
#[derive(Debug, PartialEq, Eq)]
struct End {
    stream: Vec<u8>,
    started: bool,
    outcome: Option<Outcome>,
}

/// Drives a session whose first connection reads `first` and whose later ones (a
/// fallback after UNKNOWN_COMMAND) read `rest`, each then EOF, `chunk` bytes per read; a
/// stop requested once `stop_after` stream bytes arrived (answered at once: what matters
/// here is the stream's connection). What a connection holds is fixed by the input, never
/// by how much an earlier connection happened to read.
fn drive(first: &[u8], rest: &[u8], chunk: usize, stop_after: u64) -> End {
    let providers = [Provider::new("Microsoft-DotNETCore-SampleProfiler", 0, 5)];
    let mut tracing =
        Tracing::new(TraceConfig::new(&providers), 0, u64::MAX / 4).expect("a valid configuration");
    let mut end = End {
        stream: Vec::new(),
        started: false,
        outcome: None,
    };
    let mut wire = first;
    let mut connections = 0;
    let mut at = 0;
    let mut eof = false;
    // Every turn consumes input, ends, or follows one that did: bounded by the input.
    for now in 0..(4 * (first.len() + rest.len()) as u64 + 64) {
        match tracing.poll(now) {
            Err(_) => return end,
            Ok(TraceStep::Connect) => {
                if connections > 0 {
                    wire = rest;
                }
                connections += 1;
                at = 0;
                eof = false;
                tracing.connected().expect("connect after Connect");
            }
            Ok(TraceStep::Transmit(b)) => {
                assert!(b.len() >= 20, "a request is at least a header");
                tracing.transmitted().expect("transmitted after Transmit");
            }
            Ok(TraceStep::Close) => {}
            Ok(TraceStep::Started { .. }) => end.started = true,
            Ok(TraceStep::Data(d)) => {
                assert!(!d.is_empty(), "empty Data step");
                let len = d.len();
                // The same bytes again, for loops that cannot keep the step's borrow.
                let again = tracing.last_data();
                assert_eq!(again.len(), len);
                end.stream.extend_from_slice(again);
                if end.stream.len() as u64 >= stop_after && !tracing.is_stop_requested() {
                    let _stop_call = tracing.request_stop(now).expect("a stop once started");
                    tracing.stop_answered(now);
                }
            }
            Ok(TraceStep::End(o)) => {
                assert_eq!(o.bytes(), end.stream.len() as u64, "{:?}", o);
                end.outcome = Some(o);
                return end;
            }
            Ok(TraceStep::Receive) => {
                assert!(!eof, "Receive after EOF");
                let buf = tracing.read_buf().expect("a buffer to read into");
                let n = buf.len().min(chunk).min(wire.len() - at);
                if n == 0 {
                    tracing.eof();
                    eof = true;
                } else {
                    buf[..n].copy_from_slice(&wire[at..at + n]);
                    at += n;
                    tracing.filled(n);
                }
            }
            Ok(other) => panic!("a step this driver does not know: {:?}", other),
        }
    }
    panic!("the session did not end within its input's bound");
}

/// The `session` target: byte 0 picks the chunk size (1 + b % 64), byte 1 when to stop
/// (after b × 16 stream bytes), byte 2 where the first connection's bytes end (b × 8; 255:
/// all of them); the rest is what the runtime sends: on the first connection (its reply,
/// then the stream), and after the split on a fallback's connection.
pub fn session(data: &[u8]) {
    if data.len() < 3 {
        return;
    }
    let chunk = 1 + data[0] as usize % 64;
    let stop_after = u64::from(data[1]) * 16;
    let wire = &data[3..];
    let split = match data[2] {
        255 => wire.len(),
        b => (usize::from(b) * 8).min(wire.len()),
    };
    let (first, rest) = wire.split_at(split);
    let pieces = drive(first, rest, chunk, stop_after);
    let whole = drive(first, rest, wire.len().max(1), stop_after);
    assert_eq!(pieces.started, whole.started);
    assert_eq!(pieces.stream, whole.stream);
    assert_eq!(pieces.outcome.is_some(), whole.outcome.is_some());
    if let (Some(a), Some(b)) = (pieces.outcome, whole.outcome) {
        assert_eq!(a.is_whole(), b.is_whole(), "{:?} / {:?}", a, b);
        assert_eq!(a.bytes(), b.bytes());
    }
    framing_agrees_with_the_parser(wire);
    framing_agrees_with_the_parser(rest);
}

/// The framing follows the stream in fragments the same way as whole, and whatever the
/// parser reads to its end-of-stream marker the framing calls whole, at the same length.
fn framing_agrees_with_the_parser(stream: &[u8]) {
    let mut whole = Framing::new();
    let whole_ok = whole.feed(stream).is_ok();
    let mut bytewise = Framing::new();
    let bytewise_ok = stream.iter().all(|b| bytewise.feed(&[*b]).is_ok());
    assert_eq!(whole_ok, bytewise_ok);
    assert_eq!(whole.eof().is_ok(), bytewise.eof().is_ok());
    let mut parser = NettraceParser::new();
    let mut at = 0;
    loop {
        match parser.handle_input(&stream[at..]) {
            Ok(h) => {
                at += h.consumed;
                match h.status {
                    Status::Event(_) => continue,
                    Status::Done => {
                        // Read to its end marker: the framing calls it whole up to there.
                        let mut f = Framing::new();
                        assert!(f.feed(&stream[..at]).is_ok());
                        assert!(
                            f.is_complete(),
                            "the parser ended at {} but the framing did not",
                            at
                        );
                        return;
                    }
                    Status::Partial { .. } => return,
                }
            }
            Err(_) => return,
        }
    }
}
