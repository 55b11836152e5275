//! Golden bytes and round trips of the EventPipe requests.

use super::*;
use crate::wire::Text;

/// The spec's 80-byte CollectTracing example: buffer 250, format 1, one provider
/// "MyEventSource" with keywords 100, level 2, null arguments.
#[test]
fn spec_collect_tracing_example() {
    let providers = [Provider {
        keywords: 100,
        log_level: 2,
        provider_name: Text::Str("MyEventSource"),
        arguments: Text::Null,
    }];
    let req = CollectTracing {
        circular_buffer_mb: 250,
        format: TraceFormat::NetTrace,
        providers: Seq::Slice(&providers),
    };
    let mut out = [0u8; 128];
    let n = req.encode(&mut out).unwrap();
    assert_eq!(n, 80);
    assert_eq!(&out[..14], b"DOTNET_IPC_V1\0");
    assert_eq!(&out[14..20], &[80, 0, 0x02, 0x02, 0, 0]);
    assert_eq!(&out[20..24], &250u32.to_le_bytes());
    assert_eq!(&out[24..28], &1u32.to_le_bytes());
    assert_eq!(&out[28..32], &1u32.to_le_bytes());
    assert_eq!(&out[32..40], &100u64.to_le_bytes());
    assert_eq!(&out[40..44], &2u32.to_le_bytes());
    assert_eq!(&out[44..48], &14u32.to_le_bytes());
    let name: [u8; 28] = *b"M\0y\0E\0v\0e\0n\0t\0S\0o\0u\0r\0c\0e\0\0\0";
    assert_eq!(&out[48..76], &name);
    assert_eq!(&out[76..80], &0u32.to_le_bytes());
    let back = CollectTracing::decode(&out[20..80]).unwrap();
    assert_eq!(back, req);
}

#[test]
fn rejects_what_crashes_runtimes() {
    let providers = [Provider::new("P", 1, 4)];
    let mut req = CollectTracing2 {
        circular_buffer_mb: 0,
        format: TraceFormat::NetTrace,
        request_rundown: true,
        providers: Seq::Slice(&providers),
    };
    let mut out = [0u8; 128];
    assert!(matches!(
        req.encode(&mut out),
        Err(EncodeError::InvalidField {
            field: "circular_buffer_mb",
            ..
        })
    ));
    req.circular_buffer_mb = 1;
    req.format = TraceFormat::Unknown(2);
    assert!(req.encode(&mut out).is_err());
    req.format = TraceFormat::NetTrace;
    req.providers = Seq::EMPTY;
    assert!(req.encode(&mut out).is_err());
    let bad_level = [Provider::new("P", 1, 6)];
    req.providers = Seq::Slice(&bad_level);
    assert!(req.encode(&mut out).is_err());
    let empty_name = [Provider::new("", 1, 4)];
    req.providers = Seq::Slice(&empty_name);
    assert!(req.encode(&mut out).is_err());
}

/// The spec's event_filter and tracepoint_config serialization examples.
#[test]
fn spec_filter_and_tracepoint_examples() {
    let mut buf = [0u8; 128];
    let ids = [4u32, 5];
    let f = EventFilter {
        enable: false,
        event_ids: Seq::Slice(&ids),
    };
    let mut w = Writer::new(&mut buf);
    f.encode(&mut w);
    let n = w.finish().unwrap();
    assert_eq!(&buf[..n], &[0, 2, 0, 0, 0, 4, 0, 0, 0, 5, 0, 0, 0]);

    let low = [1u32, 2, 3, 4, 5, 6, 7, 8, 9];
    let sets = [TracepointSet {
        tracepoint_name: Text::Str("LowEvents"),
        event_ids: Seq::Slice(&low),
    }];
    let tc = TracepointConfig {
        default_tracepoint_name: Text::Str("MyTracepoint"),
        tracepoints: Seq::Slice(&sets),
    };
    let mut w = Writer::new(&mut buf);
    tc.encode(&mut w);
    let n = w.finish().unwrap();
    // The spec's table gives "MyTracepoint" a count of 14, but it is 12 units plus the
    // NUL: 13, as the string rule (and the runtime's parser) requires.
    assert_eq!(n, tc.encoded_len());
    assert_eq!(n, 4 + 26 + 4 + 4 + 20 + 4 + 36);
    assert_eq!(&buf[..4], &13u32.to_le_bytes());
    assert_eq!(&buf[30..34], &1u32.to_le_bytes());
    assert_eq!(&buf[34..38], &10u32.to_le_bytes());
    let mut r = Reader::new(&buf[..n]);
    assert_eq!(TracepointConfig::decode(&mut r).unwrap(), tc);
}
