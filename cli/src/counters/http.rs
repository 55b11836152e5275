//! A minimal HTTP/1.1 server for `GET /metrics`, on std alone.
//!
//! Why not a crate: the well-kept servers (hyper, axum, tiny_http) either need a newer Rust
//! than 1.63 or an async runtime, and the endpoint needs one route. Each connection gets its
//! own thread with read and write timeouts and an overall deadline for the request head, so
//! a client that connects and sends nothing (or trickles bytes) only ties up its own thread
//! until the deadline. At [`MAX_CONNECTIONS`] open connections a new one evicts the oldest
//! connection still sending its request head (a slow or idle client, never one being
//! answered), so idle and half-sent requests cannot lock scrapes out; only when every slot
//! is answering is a new connection answered 503. Every response closes its connection.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Open connections served at once; more are answered 503 and closed.
pub const MAX_CONNECTIONS: usize = 64;
/// Time a client has to send its whole request head.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Time a client has to take the response.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest request head accepted.
pub const MAX_HEAD: usize = 16 * 1024;

/// What the server serves: the `/metrics` body, made at each request.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// One open connection, as the accept loop sees it.
struct Slot {
    id: u64,
    /// Still reading the request head (may be evicted).
    reading: Arc<AtomicBool>,
    /// A handle to shut the connection down from the accept loop.
    stream: TcpStream,
}

/// The open connections, oldest first.
#[derive(Default)]
struct Slots {
    next_id: u64,
    open: Vec<Slot>,
}

/// A listening metrics endpoint.
pub struct Server {
    listener: TcpListener,
    render: Render,
    slots: Arc<Mutex<Slots>>,
}

fn lock(slots: &Mutex<Slots>) -> std::sync::MutexGuard<'_, Slots> {
    slots.lock().unwrap_or_else(|p| p.into_inner())
}

impl Server {
    /// Binds `addr` (`127.0.0.1:9090`, `[::]:0`, ...).
    pub fn bind(addr: &str, render: Render) -> io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(Server {
            listener,
            render,
            slots: Arc::new(Mutex::new(Slots::default())),
        })
    }

    /// The bound address (with the port chosen for port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `stop` is set (checked every 50 ms while no connection arrives).
    pub fn run(&self, stop: &AtomicBool) -> io::Result<()> {
        while !stop.load(Ordering::SeqCst) {
            match self.listener.accept() {
                Ok((stream, _)) => self.dispatch(stream),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Per-connection failures (reset before accept, fd limits): keep serving.
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
        Ok(())
    }

    fn dispatch(&self, stream: TcpStream) {
        // The accepted socket may inherit non-blocking mode on some platforms.
        if stream.set_nonblocking(false).is_err() {
            return;
        }
        let _ = stream.set_write_timeout(Some(WRITE_TIMEOUT));
        let handle = match stream.try_clone() {
            Ok(h) => h,
            Err(_) => return,
        };
        let reading = Arc::new(AtomicBool::new(true));
        let id = {
            let mut slots = lock(&self.slots);
            if slots.open.len() >= MAX_CONNECTIONS {
                // Evict the oldest connection still sending its request head.
                match slots
                    .open
                    .iter()
                    .position(|s| s.reading.load(Ordering::SeqCst))
                {
                    Some(i) => {
                        let old = slots.open.remove(i);
                        let _ = old.stream.shutdown(Shutdown::Both);
                    }
                    None => {
                        drop(slots);
                        let _ = respond(
                            &stream,
                            "503 Service Unavailable",
                            "text/plain",
                            b"busy\n",
                            false,
                        );
                        return;
                    }
                }
            }
            let id = slots.next_id;
            slots.next_id += 1;
            slots.open.push(Slot {
                id,
                reading: Arc::clone(&reading),
                stream: handle,
            });
            id
        };
        let slots = Arc::clone(&self.slots);
        let render = Arc::clone(&self.render);
        let spawned = std::thread::Builder::new()
            .name("metrics-http".into())
            .spawn(move || {
                let _ = serve_one(stream, &render, &reading);
                lock(&slots).open.retain(|s| s.id != id);
            });
        if spawned.is_err() {
            lock(&self.slots).open.retain(|s| s.id != id);
        }
    }
}

/// Reads the request head within [`REQUEST_DEADLINE`], answers, closes.
fn serve_one(mut stream: TcpStream, render: &Render, reading: &AtomicBool) -> io::Result<()> {
    let deadline = Instant::now() + REQUEST_DEADLINE;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 2048];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let _ = respond(
                &stream,
                "408 Request Timeout",
                "text/plain",
                b"timeout\n",
                false,
            );
            return Ok(());
        }
        stream.set_read_timeout(Some(left))?;
        let n = match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut =>
            {
                continue
            }
            Err(e) => return Err(e),
        };
        head.extend_from_slice(&buf[..n]);
        if find_end(&head).is_some() {
            // Being answered from here on: never evicted.
            reading.store(false, Ordering::SeqCst);
            break;
        }
        if head.len() > MAX_HEAD {
            respond(
                &stream,
                "431 Request Header Fields Too Large",
                "text/plain",
                b"too large\n",
                false,
            )?;
            return Ok(());
        }
    }
    let line_end = head
        .iter()
        .position(|&b| b == b'\r' || b == b'\n')
        .unwrap_or(head.len());
    let line = String::from_utf8_lossy(&head[..line_end]);
    let mut parts = line.split(' ');
    let method = parts.next().unwrap_or("");
    let target = parts.next().unwrap_or("");
    let path = target.split('?').next().unwrap_or("");
    let head_only = method == "HEAD";
    if method != "GET" && !head_only {
        return respond(
            &stream,
            "405 Method Not Allowed",
            "text/plain",
            b"GET only\n",
            false,
        );
    }
    match path {
        "/metrics" => {
            let body = render();
            respond(
                &stream,
                "200 OK",
                "text/plain; version=0.0.4; charset=utf-8",
                body.as_bytes(),
                head_only,
            )?;
        }
        "/" => respond(
            &stream,
            "200 OK",
            "text/plain; charset=utf-8",
            b"dsipc counters exporter: see /metrics\n",
            head_only,
        )?,
        _ => respond(
            &stream,
            "404 Not Found",
            "text/plain",
            b"not found\n",
            head_only,
        )?,
    }
    let _ = stream.shutdown(Shutdown::Write);
    // Let the client see the whole response before the socket closes.
    let _ = stream.set_read_timeout(Some(Duration::from_millis(200)));
    let _ = stream.read(&mut buf);
    Ok(())
}

fn find_end(head: &[u8]) -> Option<usize> {
    head.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .or_else(|| head.windows(2).position(|w| w == b"\n\n"))
}

fn respond(
    mut stream: &TcpStream,
    status: &str,
    content_type: &str,
    body: &[u8],
    head_only: bool,
) -> io::Result<()> {
    let mut out = format!(
        "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        status,
        content_type,
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body);
    }
    stream.write_all(&out)?;
    stream.flush()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    fn get(addr: SocketAddr, req: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(req).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    }

    #[test]
    fn serves_metrics_while_an_idle_client_holds_a_connection() {
        let server = Server::bind(
            "127.0.0.1:0",
            Arc::new(|| "x_total{pid=\"1\"} 3\n".to_string()),
        )
        .unwrap();
        let addr = server.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let t = std::thread::spawn(move || server.run(&stop2));
        // An idle client: connects, sends nothing.
        let idle = TcpStream::connect(addr).unwrap();
        let r = get(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{}", r);
        assert!(r.ends_with("\r\n\r\nx_total{pid=\"1\"} 3\n"), "{}", r);
        assert!(get(addr, b"GET /nope HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(get(addr, b"POST /metrics HTTP/1.0\r\n\r\n").starts_with("HTTP/1.1 405"));
        // The idle client is answered 408 and closed by the deadline.
        let mut lines = std::io::BufReader::new(idle);
        let mut first = String::new();
        lines
            .get_mut()
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        lines.read_line(&mut first).unwrap();
        assert!(first.starts_with("HTTP/1.1 408"), "{:?}", first);
        stop.store(true, Ordering::SeqCst);
        t.join().unwrap().unwrap();
    }

    #[test]
    fn metrics_listener_serves_scrapes_while_hundreds_of_clients_hold_half_requests() {
        let server = Server::bind("127.0.0.1:0", Arc::new(|| "up 1\n".to_string())).unwrap();
        let addr = server.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let t = std::thread::spawn(move || server.run(&stop2));
        let mut held = Vec::new();
        // 800 (a process limit of 1024 descriptors leaves room for the server's side).
        for round in 0..10 {
            for _ in 0..80 {
                // Half a request each, never finished.
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(b"GET /metrics HTTP/1.1\r\nHo").unwrap();
                held.push(s);
            }
            // A real scrape between the rounds is answered, never 503.
            let r = get(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
            assert!(
                r.starts_with("HTTP/1.1 200 OK\r\n"),
                "round {}: {}",
                round,
                r
            );
            assert!(r.ends_with("up 1\n"), "{}", r);
        }
        // The oldest half-sent requests were closed to make room (the server never holds
        // more than MAX_CONNECTIONS).
        let mut closed = 0;
        for s in held.iter_mut().take(80) {
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let mut b = [0u8; 64];
            match s.read(&mut b) {
                Ok(0) | Err(_) => closed += 1,
                Ok(_) => {}
            }
        }
        assert_eq!(closed, 80);
        stop.store(true, Ordering::SeqCst);
        t.join().unwrap().unwrap();
    }
}
