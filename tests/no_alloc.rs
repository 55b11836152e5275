//! A counting global allocator shows that no core operation allocates: encoding every
//! request and response, decoding every request, driving the client machine through every
//! reply shape, streaming, the environment continuation, transcoding and transport parsing.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use dsipc::payload::*;
use dsipc::wire::{Header, HEADER_LEN};
use dsipc::{ClientConnection, Command, ServerConnection, ServerEvent, ServerStatus, Status};

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = COUNTING.try_with(|c| {
            if c.get() {
                COUNT.with(|n| n.set(n.get() + 1));
            }
        });
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        let _ = COUNTING.try_with(|c| {
            if c.get() {
                COUNT.with(|n| n.set(n.get() + 1));
            }
        });
        System.realloc(ptr, layout, new)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f` and returns how many allocations it made on this thread.
fn allocations(f: impl FnOnce()) -> usize {
    COUNT.with(|n| n.set(0));
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    COUNT.with(|n| n.get())
}

fn drain(conn: &mut ClientConnection, input: &[u8]) -> usize {
    let mut at = 0;
    let mut events = 0;
    loop {
        let h = conn.handle_input(&input[at..]).unwrap();
        at += h.consumed;
        match h.status {
            Status::Event(_) => events += 1,
            _ => return events,
        }
    }
}

#[test]
fn counting_allocator_counts() {
    // The allocator does see allocations: guard against a test that cannot fail.
    assert!(allocations(|| drop(std::hint::black_box(vec![1u8; 16]))) >= 1);
}

#[test]
fn core_operations_do_not_allocate() {
    // Buffers and inputs are prepared outside the counted region.
    let mut buf = vec![0u8; 70_000];
    let mut tx = vec![0u8; 70_000];
    let mut utf8 = vec![0u8; 4096];
    let pi3 = common::capture("net8.0.4", "process-info3.reply.bin");
    let env = common::capture("net8.0.4", "process-environment.reply.bin");
    let mut stream = common::capture("net8.0.4", "collect-tracing2.reply.bin");
    stream.extend(common::capture(
        "net8.0.4",
        "collect-tracing2.stream-head.bin",
    ));
    let dump3 = common::capture("net8.0.4", "generate-core-dump3-bad-dir.reply.bin");
    let stat = b"77 (dotnet) S 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 9 0 123456 0 0".to_vec();
    let ports = "/tmp/a.sock,nosuspend;/tmp/b.sock".to_string();
    let pi3_request = common::capture("net8.0.4", "process-info3.request.bin");
    let bad_magic = common::capture("net8.0.4", "bad-magic.request.bin");

    let mut requests = 0;
    let n = allocations(|| {
        common::each_request(|req| {
            let len = req.encode(&mut buf).unwrap();
            let h = Header::parse(&buf).unwrap();
            let back = AnyRequest::decode(h.command(), &buf[HEADER_LEN..len])
                .unwrap()
                .unwrap();
            assert!(back == req);
            let mut conn = ClientConnection::new();
            let _ = conn.send_request(&req, &mut tx).unwrap();
            requests += 1;
        });
        common::each_response(|command, resp| {
            let len = resp.encode(&mut buf).unwrap();
            let payload = &buf[HEADER_LEN..len];
            match resp {
                Response::Ok(_) => {
                    Reply::decode(command, payload).unwrap().unwrap();
                }
                Response::Error(_) => {
                    ErrorReply::decode(command, payload).unwrap();
                }
            }
        });

        let mut conn = ClientConnection::new();
        let _ = conn.send_request(&ProcessInfo3, &mut tx).unwrap();
        let h = conn.handle_input(&pi3).unwrap();
        if let Status::Event(dsipc::ClientEvent::Reply(Reply::ProcessInfo3(p))) = h.status {
            let s = p.command_line.to_utf8_lossy(&mut utf8).unwrap();
            assert!(s.contains("python"));
            assert!(p.runtime_identifier.chars().all(|c| c.is_ok()));
        } else {
            panic!("no reply");
        }

        let mut conn = ClientConnection::new();
        let _ = conn.send_request(&ProcessEnvironment, &mut tx).unwrap();
        assert!(drain(&mut conn, &env) > 3);

        let mut conn = ClientConnection::new();
        let _ = conn
            .send_request(&dsipc::fixtures::COLLECT_TRACING2, &mut tx)
            .unwrap();
        assert_eq!(drain(&mut conn, &stream), 2);
        conn.handle_eof().unwrap();

        let mut conn = ClientConnection::new();
        let dump = GenerateCoreDump3 {
            dump_name: "/nonexistent/x.dmp".into(),
            dump_type: DumpType::Normal,
            flags: 0,
        };
        let _ = conn.send_request(&dump, &mut tx).unwrap();
        assert_eq!(drain(&mut conn, &dump3), 1);

        // Errors and their Display go through core::fmt, which does not allocate either.
        let mut conn = ClientConnection::new();
        let _ = conn.send_request(&ProcessInfo, &mut tx).unwrap();
        let e = conn.handle_input(&[0u8; 20]).unwrap_err();
        use std::fmt::Write as _;
        let mut sink = Sink(0);
        write!(sink, "{} {}", e, Command::ProcessInfo3).unwrap();
        assert!(sink.0 > 0);

        // The server machine: every captured request parsed, answered, plus a rejection,
        // the advertising mode and an environment block.
        let mut server = ServerConnection::new();
        let h = server.handle_input(&pi3_request);
        assert!(matches!(
            h.status,
            ServerStatus::Event(ServerEvent::Request { .. })
        ));
        let reply = Reply::decode(Command::ProcessInfo3, &pi3[HEADER_LEN..])
            .unwrap()
            .unwrap();
        let n = server
            .send_response(&Response::Ok(reply), &mut buf)
            .unwrap();
        assert_eq!(&buf[..n], &pi3[..]);
        let mut server = ServerConnection::new();
        let h = server.handle_input(&bad_magic);
        match h.status {
            ServerStatus::Event(ServerEvent::Rejected(r)) => assert_eq!(r.reply().len(), 24),
            other => panic!("{:?}", other),
        }
        let mut server = ServerConnection::advertising(dsipc::fixtures::ADVERTISE);
        assert_eq!(server.poll_transmit(&mut buf).unwrap(), 34);
        let mut monitor = ClientConnection::expecting_advertise();
        assert!(matches!(
            monitor.handle_input(&buf[..34]).unwrap().status,
            Status::Event(_)
        ));
        let vars = [dsipc::Text::Str("A=1"), dsipc::Text::Str("B=2")];
        assert_eq!(
            dsipc::conn::encode_environment_block(vars, &mut buf).unwrap(),
            dsipc::conn::environment_block_len(vars)
        );

        assert_eq!(dsipc::transport::key_from_proc_stat(&stat), Ok(123456));
        assert_eq!(dsipc::transport::DiagnosticPorts::parse(&ports).count(), 2);
        assert!(dsipc::transport::SocketName::parse("dotnet-diagnostic-1-2-socket").is_some());
    });
    assert_eq!(requests, 27);
    assert_eq!(n, 0, "core operations allocated {} times", n);
}

/// A fmt::Write that only counts bytes.
struct Sink(usize);
impl std::fmt::Write for Sink {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// The nettrace parser, the field walker and the CLR decoders never allocate: a whole real
/// trace and one with V5 V2Params arrays are parsed, every self-described
/// payload is walked and every CLR event decoded, with the allocator counting. The metadata
/// table is a fixed array of borrowed records, filled without allocating.
#[test]
fn nettrace_parsing_does_not_allocate() {
    use dsipc::nettrace::clr::{self, ClrEvent, ClrProvider};
    use dsipc::nettrace::{Item, MetadataRecord, NettraceParser, Status, Value};

    // The project's own capture from .NET 8 always; two PerfView samples where shared/ is.
    let own = common::nettrace::repo().join("tests/data/nettrace/net8.0.4-busy.nettrace");
    let traces: Vec<Vec<u8>> = std::iter::once(std::fs::read(own).unwrap())
        .chain(
            [
                "mixed_managed_external_samples.nettrace",
                "eventpipe-dotnetcore5.0-win-x64-arraytypes.nettrace",
            ]
            .iter()
            .filter_map(|n| common::nettrace::sample(n)),
        )
        .collect();
    let mut all_fields = 0u64;
    for data in &traces {
        let mut metas: [Option<MetadataRecord<'_>>; 512] = [None; 512];
        let (mut events, mut fields, mut decoded, mut ips) = (0u64, 0u64, 0u64, 0u64);
        let mut sink = Sink(0);
        let n = allocations(|| {
            let mut p = NettraceParser::new();
            let mut at = 0;
            let mut ptr = 8;
            // Feed in 4 KiB steps, as a live reader would: the parser sees growing prefixes.
            let mut end = 0;
            loop {
                let h = p.handle_input(&data[at..end]).unwrap();
                at += h.consumed;
                match h.status {
                    Status::Event(Item::Trace(t)) => ptr = t.pointer_size,
                    Status::Event(Item::Metadata(m)) => {
                        metas[m.metadata_id as usize] = Some(m.record().unwrap());
                    }
                    Status::Event(Item::Event(e)) => {
                        events += 1;
                        let m = metas[e.metadata_id as usize].as_ref().unwrap();
                        for f in m.fields.walk(e.payload) {
                            let f = f.unwrap();
                            fields += 1;
                            std::fmt::Write::write_fmt(&mut sink, format_args!("{}", f.name))
                                .unwrap();
                            if let Value::Array(a) = f.value {
                                for v in a.iter() {
                                    v.unwrap();
                                }
                            }
                        }
                        if let Some(prov) = ClrProvider::from_name(&m.provider_name) {
                            let ev =
                                clr::decode(prov, m.event_id, m.version, ptr, e.payload).unwrap();
                            if !matches!(ev, ClrEvent::Unknown(_)) {
                                decoded += 1;
                            }
                            if let Some(mv) = ev.as_method() {
                                std::fmt::Write::write_fmt(
                                    &mut sink,
                                    format_args!("{}", mv.method_name),
                                )
                                .unwrap();
                            }
                        }
                    }
                    Status::Event(Item::Stacks(s)) => {
                        for st in s.iter() {
                            ips += st.ips().count() as u64;
                        }
                    }
                    Status::Event(Item::SequencePoint(sp)) => {
                        for t in sp.threads() {
                            std::hint::black_box(t);
                        }
                    }
                    Status::Event(_) => {}
                    Status::Partial { .. } => {
                        assert!(end < data.len());
                        end = (end + 4096).min(data.len());
                    }
                    Status::Done => break,
                }
            }
            p.handle_eof().unwrap();
            // Errors are values too.
            let e = NettraceParser::new().handle_input(b"nope").unwrap_err();
            std::fmt::Write::write_fmt(&mut sink, format_args!("{}", e)).unwrap();
        });
        assert!(events > 1000 && decoded > 0 && ips > 0 && sink.0 > 0);
        all_fields += fields;
        assert_eq!(n, 0, "nettrace parsing allocated {} times", n);
    }
    assert!(all_fields > 0);
}

/// The receive buffer over fixed storage: a reply and a stream read 100 bytes at a time, a
/// server request, a nettrace stream, the bound error and its text: no allocation.
#[test]
fn receive_buffer_does_not_allocate() {
    use dsipc::nettrace::NettraceParser;
    use dsipc::recv::{Poll, RecvBuffer, RecvError};

    let mut reply = common::capture("net8.0.4", "collect-tracing2.reply.bin");
    reply.extend(common::capture(
        "net8.0.4",
        "collect-tracing2.stream-head.bin",
    ));
    let mut request = vec![0u8; ProcessInfo.encoded_len()];
    ProcessInfo.encode(&mut request).unwrap();
    let trace = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fuzz/corpus-seeds/nettrace/net8.0.4-first-blocks"
    ))
    .unwrap();
    let trace = &trace[2..];
    let mut tx = [0u8; 256];
    let mut storage = [0u8; 64 * 1024];
    let mut sink = Sink(0);
    let (mut events, mut stream, mut items) = (0, 0, 0);
    let n = allocations(|| {
        // Pushes `data` 100 bytes at a time whenever `poll` asks, then EOF.
        fn feed<S: dsipc::recv::RecvStorage>(rx: &mut RecvBuffer<S>, data: &[u8], fed: &mut usize) {
            if *fed == data.len() {
                rx.eof();
            } else {
                let n = rx.push(&data[*fed..(*fed + 100).min(data.len())]).unwrap();
                *fed += n;
            }
        }
        let mut conn = ClientConnection::new();
        let _ = conn
            .send_request(&common::AnyRequestOwned(Command::CollectTracing2), &mut tx)
            .unwrap();
        let mut rx = RecvBuffer::new(&mut storage[..]);
        let mut fed = 0;
        loop {
            match rx.poll_client(&mut conn).unwrap() {
                Poll::Event(dsipc::ClientEvent::StreamData(d)) => stream += d.len(),
                Poll::Event(_) => events += 1,
                Poll::NeedInput => feed(&mut rx, &reply, &mut fed),
                Poll::End => break,
            }
        }
        let mut server = ServerConnection::new();
        let mut rx = RecvBuffer::new(&mut storage[..]);
        let mut fed = 0;
        loop {
            match rx.poll_server(&mut server).unwrap() {
                Poll::Event(_) => events += 1,
                Poll::NeedInput => feed(&mut rx, &request, &mut fed),
                Poll::End => break,
            }
        }
        let mut p = NettraceParser::with_max_block_size(60 * 1024);
        let mut rx = RecvBuffer::new(&mut storage[..]);
        let mut fed = 0;
        loop {
            match rx.poll_nettrace(&mut p).unwrap() {
                Poll::Event(_) => items += 1,
                Poll::NeedInput => feed(&mut rx, trace, &mut fed),
                Poll::End => break,
            }
        }
        // The bound error, and its text.
        let mut conn = ClientConnection::new();
        let _ = conn.send_request(&ProcessInfo, &mut tx).unwrap();
        let mut rx = RecvBuffer::new(&mut storage[..10]);
        let _ = rx.push(&reply[..10]).unwrap();
        let e: RecvError<dsipc::ClientError> = rx.poll_client(&mut conn).unwrap_err();
        std::fmt::Write::write_fmt(&mut sink, format_args!("{}", e)).unwrap();
    });
    assert!(events >= 2 && stream > 0 && items > 10 && sink.0 > 0);
    assert_eq!(n, 0, "the receive buffer allocated {} times", n);
}
