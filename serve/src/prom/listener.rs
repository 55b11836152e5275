//! The `/metrics` endpoint of `counters export` and `monitor --metrics`: dsipc-serve's HTTP
//! listener ([`crate::http`]: hyper, bounded connections, request heads within a deadline,
//! the oldest idle connection evicted for a new one) on a small tokio runtime of the
//! thread that calls `Server::run`. `GET /metrics` renders the exposition at each
//! request; every response closes its connection, as Prometheus does not need more.

use std::future::Future;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::pin::Pin;
use std::sync::Arc;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONNECTION, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};

use crate::http::{self, Body};

/// What the server serves: the `/metrics` body, made at each request.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// A bound metrics endpoint.
pub struct Server {
    listener: TcpListener,
    render: Render,
}

impl Server {
    /// Binds `addr` (`127.0.0.1:9090`, `[::]:0`, ...).
    pub fn bind(addr: &str, render: Render) -> io::Result<Server> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(Server { listener, render })
    }

    /// The bound address (with the port chosen for port 0).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves on the current tokio runtime until the future is dropped (an error only if
    /// the listener cannot join the runtime).
    pub async fn serve(&self) -> io::Result<()> {
        let listener = tokio::net::TcpListener::from_std(self.listener.try_clone()?)?;
        let handler = Arc::new(Metrics {
            render: Arc::clone(&self.render),
        });
        http::serve(listener, handler).await;
        Ok(())
    }

    /// Serves on a tokio runtime of this thread until `stop` is set (looked at every 50 ms).
    #[cfg(test)]
    pub fn run(&self, stop: &std::sync::atomic::AtomicBool) -> io::Result<()> {
        use std::sync::atomic::Ordering;
        use std::time::Duration;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            tokio::select! {
                r = self.serve() => r,
                _ = async {
                    while !stop.load(Ordering::SeqCst) {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                } => Ok(()),
            }
        })
    }
}

struct Metrics {
    render: Render,
}

fn answer(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<bytes::Bytes>,
) -> Response<Body> {
    let mut r = Response::new(http::full(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r.headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    r
}

impl http::Handler for Metrics {
    fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> {
        let r = if req.method() != Method::GET && req.method() != Method::HEAD {
            answer(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n")
        } else {
            match req.uri().path() {
                "/metrics" => answer(
                    StatusCode::OK,
                    "text/plain; version=0.0.4; charset=utf-8",
                    (self.render)(),
                ),
                "/" => answer(
                    StatusCode::OK,
                    "text/plain; charset=utf-8",
                    "dsipc counters exporter: see /metrics\n",
                ),
                _ => answer(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
            }
        };
        Box::pin(async move { r })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, Read, Write};
    use std::net::TcpStream;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

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
        let status = |r: String| r.split(' ').nth(1).unwrap_or("").to_string();
        assert_eq!(status(get(addr, b"GET /nope HTTP/1.0\r\n\r\n")), "404");
        assert_eq!(status(get(addr, b"POST /metrics HTTP/1.0\r\n\r\n")), "405");
        // The idle client is closed by the request-head deadline (hyper may say 408 first).
        let mut lines = std::io::BufReader::new(idle);
        let mut first = String::new();
        lines
            .get_mut()
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        lines.read_line(&mut first).unwrap();
        assert!(
            first.is_empty() || first.starts_with("HTTP/1.1 408"),
            "{:?}",
            first
        );
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
