//! First-chance exceptions decoded from real runtimes' streams: `tests/data/nettrace/*-busy`
//! (tests/runtime/host.py --busy throws and catches `Int32.Parse("not a number")` every
//! ~50 ms; the session had the Exception, JIT and Loader keywords at Verbose, no rundown).

use std::path::PathBuf;

use dsipc_trace::exceptions::{ExceptionDecoder, ExceptionFormat, ThrownException};
use dsipc_trace::StackFrame;

fn capture(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/nettrace")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {}", path.display(), e))
}

/// Every exception of `bytes` fed in chunks of `chunk` bytes, with the decoder.
fn decode(bytes: &[u8], chunk: usize) -> (Vec<ThrownException>, ExceptionDecoder) {
    let mut d = ExceptionDecoder::new();
    let mut out = Vec::new();
    for c in bytes.chunks(chunk) {
        d.feed(c, &mut |x| out.push(x)).unwrap();
    }
    d.finish(&mut |x| out.push(x)).unwrap();
    (out, d)
}

const RUNTIMES: [&str; 2] = ["net8.0.4-busy.nettrace", "netcore3.1.23-busy.nettrace"];

#[test]
fn first_chance_exceptions_of_a_real_runtime_with_their_thread_and_stack() {
    for name in RUNTIMES {
        let (thrown, mut d) = decode(&capture(name), 1 << 20);
        assert!(!thrown.is_empty(), "{}: no exception", name);
        // Each call throws the FormatException, which pythonnet's reflection call wraps
        // in a TargetInvocationException (a second first-chance exception).
        for x in &thrown {
            if x.type_name == "System.FormatException" {
                assert!(
                    x.message.contains("correct format"),
                    "{}: message {:?}",
                    name,
                    x.message
                );
                // COR_E_FORMAT.
                assert_eq!(x.hresult, Some(0x8013_1537), "{}", name);
            } else {
                assert_eq!(x.type_name, "System.Reflection.TargetInvocationException");
                // COR_E_TARGETINVOCATION.
                assert_eq!(x.hresult, Some(0x8013_1604), "{}", name);
            }
            assert_ne!(x.thread_id, 0);
            assert!(!x.ips.is_empty(), "{}: no stack", name);
            assert!(
                x.timestamp > std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_600_000_000)
            );
        }
        assert!(thrown
            .iter()
            .any(|x| x.type_name == "System.FormatException"));
        // All thrown on the host's main thread.
        assert!(thrown.iter().all(|x| x.thread_id == thrown[0].thread_id));
        assert_eq!(d.stats().exceptions, thrown.len() as u64);
        assert_eq!(d.stats().malformed, 0);
        // The session named the methods it saw jitted: the frames of pythonnet's dynamic
        // invocation stubs and Int32.Parse's callers come out named, unnamed runs collapsed.
        let format = thrown
            .iter()
            .rposition(|x| x.type_name == "System.FormatException")
            .unwrap();
        let frames = d.resolve(&thrown[format].ips);
        assert!(
            frames.iter().any(|f| matches!(f, StackFrame::Method(_))),
            "{}: no named frame in {:?}",
            name,
            frames
        );
        assert!(!frames
            .windows(2)
            .any(|w| w[0] == StackFrame::Native && w[1] == StackFrame::Native));
        // EventPipe walks managed frames: on .NET 8 the throwing method is on top, named by
        // its JIT event (a generic instantiation); on Core 3.1 it is ReadyToRun code, which
        // only a rundown names (and this capture has none).
        if name.starts_with("net8") {
            assert!(
                matches!(frames[0], StackFrame::Method(_)),
                "{}: {:?}",
                name,
                frames
            );
        } else {
            assert_eq!(frames[0], StackFrame::Native, "{}: {:?}", name, frames);
        }
        let mut text = String::new();
        ExceptionFormat::Text.write(1, &thrown[format], "", &frames, &mut text);
        eprintln!("{}:\n{}", name, text);
    }
}

#[test]
fn exceptions_are_the_same_however_the_stream_is_cut() {
    for name in RUNTIMES {
        let bytes = capture(name);
        let (whole, mut d) = decode(&bytes, bytes.len());
        let named: Vec<Vec<StackFrame>> = whole.iter().map(|x| d.resolve(&x.ips)).collect();
        for chunk in [1, 7, 4096, 65_537] {
            let (cut, mut d2) = decode(&bytes, chunk);
            assert_eq!(cut, whole, "{} in chunks of {}", name, chunk);
            let named2: Vec<Vec<StackFrame>> = cut.iter().map(|x| d2.resolve(&x.ips)).collect();
            assert_eq!(named2, named, "{} in chunks of {}", name, chunk);
        }
    }
}

#[test]
fn a_rundown_stream_fed_beside_names_methods_the_session_did_not_see_jitted() {
    // Without method records, nothing is named; the same stream given as a symbols stream
    // afterwards names the frames of exceptions already handed out.
    let bytes = capture(RUNTIMES[0]);
    let (thrown, _) = decode(&bytes, bytes.len());
    let mut d = ExceptionDecoder::new();
    assert_eq!(d.resolve(&thrown[0].ips), vec![StackFrame::Native]);
    assert!(!d.is_resolved(&thrown[0].ips));
    for c in bytes.chunks(4096) {
        d.feed_symbols(c).unwrap();
    }
    d.finish_symbols().unwrap();
    assert!(d.methods() > 0);
    assert_eq!(d.stats().exceptions, 0);
    assert!(matches!(
        d.resolve(&thrown[0].ips)[0],
        StackFrame::Method(_)
    ));
}

#[test]
fn a_cut_stream_is_a_truncation_and_keeps_what_came() {
    let bytes = capture(RUNTIMES[0]);
    let (whole, _) = decode(&bytes, bytes.len());
    let mut d = ExceptionDecoder::new();
    let mut out = Vec::new();
    d.feed(&bytes[..bytes.len() / 2], &mut |x| out.push(x))
        .unwrap();
    let e = d.finish(&mut |x| out.push(x)).unwrap_err();
    assert!(e.is_truncation());
    assert!(out.len() < whole.len());
    assert_eq!(&whole[..out.len()], &out[..]);
}

#[test]
fn corrupted_streams_are_errors_or_fewer_exceptions_never_a_panic() {
    // Every 997th byte flipped in turn (a deterministic spread over headers, metadata,
    // stacks and payloads): the decoder returns an error naming an offset or decodes what
    // parses, with every string and stack within its bound.
    let bytes = capture(RUNTIMES[0]);
    for at in (0..bytes.len()).step_by(997) {
        let mut bad = bytes.clone();
        bad[at] ^= 0xA5;
        let mut d = ExceptionDecoder::new();
        let mut out = Vec::new();
        let fed = d.feed(&bad, &mut |x| out.push(x));
        if fed.is_ok() {
            let _ = d.finish(&mut |x| out.push(x));
        }
        for x in &out {
            assert!(x.message.encode_utf16().count() <= dsipc_trace::exceptions::MAX_STRING);
            assert!(x.ips.len() <= dsipc_trace::exceptions::MAX_FRAMES);
            let _ = d.resolve(&x.ips);
        }
    }
}
