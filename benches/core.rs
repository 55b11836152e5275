//! Core benchmarks (issue targets in parentheses):
//! - header parse (≤ 10 ns)
//! - encode CollectTracing2 with 3 providers (≤ 250 ns)
//! - decode a real .NET 8 ProcessInfo3 reply, string transcoding excluded (≤ 100 ns)
//! - a 64 MiB EventPipe continuation through the client machine in 64 KiB chunks (≥ 5 GB/s)

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use dsipc::fixtures;
use dsipc::payload::{Reply, Request};
use dsipc::recv::{Poll, RecvBuffer};
use dsipc::wire::Header;
use dsipc::{ClientConnection, ClientEvent, Command, Status};

fn capture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/data/captures/net8.0.4/{}",
        env!("CARGO_MANIFEST_DIR"),
        name
    ))
    .unwrap()
}

fn header_parse(c: &mut Criterion) {
    let bytes = capture("process-info3.reply.bin");
    // Checked once; the timed loop returns the Result (criterion black-boxes it) so that the
    // figure is the parse, not a panic path.
    assert_eq!(Header::parse(&bytes).unwrap().size(), 214);
    c.bench_function("header_parse", |b| {
        b.iter(|| Header::parse(black_box(&bytes[..])))
    });
}

fn encode_collect_tracing2(c: &mut Criterion) {
    // dotnet-trace's default providers plus a counters provider with arguments.
    let req = fixtures::COLLECT_TRACING2;
    let mut out = [0u8; 1024];
    c.bench_function("encode_collect_tracing2_3_providers", |b| {
        b.iter(|| black_box(&req).encode(black_box(&mut out)).unwrap())
    });
}

fn decode_process_info3(c: &mut Criterion) {
    let bytes = capture("process-info3.reply.bin");
    let payload = &bytes[20..];
    c.bench_function("decode_process_info3_reply", |b| {
        b.iter(|| Reply::decode(Command::ProcessInfo3, black_box(payload)).unwrap())
    });
    // The same through the client machine (header check + typing + decode).
    let mut tx = [0u8; 64];
    c.bench_function("client_machine_process_info3_reply", |b| {
        b.iter(|| {
            let mut conn = ClientConnection::new();
            let _ = conn
                .send_request(&dsipc::payload::ProcessInfo3, &mut tx)
                .unwrap();
            conn.handle_input(black_box(&bytes)).unwrap()
        })
    });
}

fn stream_64mib(c: &mut Criterion) {
    const TOTAL: usize = 64 << 20;
    const CHUNK: usize = 64 << 10;
    let reply = capture("collect-tracing2.reply.bin");
    let chunk = vec![0xA5u8; CHUNK];
    let req = fixtures::COLLECT_TRACING2;
    let mut tx = [0u8; 1024];
    let mut group = c.benchmark_group("eventpipe_stream");
    group.throughput(Throughput::Bytes(TOTAL as u64));
    group.sample_size(20);
    group.bench_function("64MiB_in_64KiB_chunks", |b| {
        b.iter(|| {
            let mut conn = ClientConnection::new();
            let _ = conn.send_request(&req, &mut tx).unwrap();
            let h = conn.handle_input(&reply).unwrap();
            assert!(matches!(h.status, Status::Event(ClientEvent::Reply(_))));
            let mut seen = 0usize;
            for _ in 0..TOTAL / CHUNK {
                let h = conn.handle_input(black_box(&chunk)).unwrap();
                if let Status::Event(ClientEvent::StreamData(d)) = h.status {
                    seen += d.len();
                }
            }
            assert_eq!(seen, TOTAL);
            conn.handle_eof().unwrap()
        })
    });
    // The same stream through the receive buffer: each 64 KiB "read" is a copy into its
    // spare space (what a socket read costs in memory traffic), then one poll.
    let mut storage = vec![0u8; CHUNK + 4096];
    group.bench_function("64MiB_via_RecvBuffer_64KiB_reads", |b| {
        b.iter(|| {
            let mut conn = ClientConnection::new();
            let _ = conn.send_request(&req, &mut tx).unwrap();
            let mut rx = RecvBuffer::new(&mut storage[..]);
            let (mut seen, mut reads) = (0usize, 0usize);
            loop {
                match rx.poll_client(&mut conn).unwrap() {
                    Poll::Event(ClientEvent::StreamData(d)) => seen += d.len(),
                    Poll::Event(_) => {}
                    Poll::NeedInput if reads == 0 => {
                        let _ = rx.push(&reply).unwrap();
                        reads += 1;
                    }
                    Poll::NeedInput if reads <= TOTAL / CHUNK => {
                        let _ = rx.push(black_box(&chunk)).unwrap();
                        reads += 1;
                    }
                    Poll::NeedInput => rx.eof(),
                    Poll::End => break,
                }
            }
            assert_eq!(seen, TOTAL);
        })
    });
    group.finish();
}

criterion_group!(
    benches,
    header_parse,
    encode_collect_tracing2,
    decode_process_info3,
    stream_64mib
);
criterion_main!(benches);
