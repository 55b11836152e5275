//! The HTTP side of `dsipc serve`: listeners, bounded connections, hyper.
//!
//! hyper 1.x parses and writes HTTP/1.1; this module only decides who gets a connection.
//! Bounds: [`MAX_CONNECTIONS`] per listener, request heads of at most [`MAX_HEAD`] bytes
//! that must arrive within [`HEAD_TIMEOUT`] (also the most a keep-alive connection may sit
//! idle). At the limit a new connection evicts the oldest one that is not being answered
//! (idle, or still sending its head), so slow or idle clients cannot lock others out; only
//! when every connection is being answered is the new one answered 503.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Notify};

/// Connections served at once per listener.
pub const MAX_CONNECTIONS: usize = 64;
/// Longest request head (request line and headers).
pub const MAX_HEAD: usize = 16 * 1024;
/// Time a client has to send a request head (and the most a connection may idle).
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// Every response body: whole, or streamed from a channel.
pub type Body = BoxBody<Bytes, io::Error>;

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed()
}

/// How long a streamed body waits for its reader to take a chunk by default
/// (`--send-timeout`): a reader that takes nothing for this long is treated as gone (its
/// session stops, its permit returns).
pub const SEND_TIMEOUT: Duration = Duration::from_secs(60);

/// A body streamed from a channel, and its sending half, which waits at most
/// `send_timeout` for the reader to take a chunk.
pub fn channel(capacity: usize, send_timeout: Duration) -> (BodySender, Body) {
    let (tx, rx) = mpsc::channel(capacity);
    let failure = Arc::new(Mutex::new(None));
    (
        BodySender {
            tx,
            failure: Arc::clone(&failure),
            send_timeout,
        },
        ChannelBody { rx, failure }.boxed(),
    )
}

/// Why a chunk was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gone {
    /// The reader went away (the client disconnected, or the response was dropped).
    Closed,
    /// The reader took nothing for the send timeout.
    Stalled,
}

/// The sending half of a streamed body. Dropping it ends the body cleanly;
/// [`fail`](Self::fail) ends it abnormally (the client sees a cut body, never a whole one).
pub struct BodySender {
    tx: mpsc::Sender<io::Result<Bytes>>,
    failure: Arc<Mutex<Option<io::Error>>>,
    send_timeout: Duration,
}

impl BodySender {
    /// Sends a chunk, waiting at most the send timeout for room.
    pub async fn send(&self, data: Bytes) -> Result<(), Gone> {
        match tokio::time::timeout(self.send_timeout, self.tx.send(Ok(data))).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(Gone::Closed),
            Err(_) => Err(Gone::Stalled),
        }
    }

    /// Ends the body with `e` after what was sent.
    pub fn fail(self, e: io::Error) {
        *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
    }

    /// Waits until the reader went away.
    pub async fn closed(&self) {
        self.tx.closed().await
    }

    /// Whether the reader went away.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }

    /// The send timeout.
    pub fn send_timeout(&self) -> Duration {
        self.send_timeout
    }
}

struct ChannelBody {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    failure: Arc<Mutex<Option<io::Error>>>,
}

impl HttpBody for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(None) => {
                let failed = self
                    .failure
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .take();
                Poll::Ready(failed.map(Err))
            }
            other => other.map(|chunk| chunk.map(|r| r.map(Frame::data))),
        }
    }
}

/// A body that marks its connection idle again once it is done or dropped.
struct Tracked {
    inner: Body,
    conn: Arc<ConnState>,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.conn.answering.store(false, Ordering::SeqCst);
    }
}

/// One open connection as its listener sees it.
struct ConnState {
    id: u64,
    /// A request is being answered (its response body is not done): not evicted.
    answering: AtomicBool,
    /// Evicted: the connection's task closes it.
    evict: Notify,
}

/// The open connections of one listener, oldest first.
#[derive(Default)]
struct Conns {
    open: Mutex<VecDeque<Arc<ConnState>>>,
    next: AtomicU64,
}

impl Conns {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<ConnState>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a new connection (evicting the oldest idle one at the limit), or `None`
    /// when every connection is being answered.
    fn admit(&self) -> Option<Arc<ConnState>> {
        let mut open = self.lock();
        if open.len() >= MAX_CONNECTIONS {
            let victim = open
                .iter()
                .position(|c| !c.answering.load(Ordering::SeqCst))?;
            let c = open.remove(victim).expect("index from position");
            c.evict.notify_one();
        }
        let c = Arc::new(ConnState {
            id: self.next.fetch_add(1, Ordering::Relaxed),
            answering: AtomicBool::new(false),
            evict: Notify::new(),
        });
        open.push_back(Arc::clone(&c));
        Some(c)
    }

    fn remove(&self, id: u64) {
        self.lock().retain(|c| c.id != id);
    }
}

/// What answers requests.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request.
    fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>>;
}

/// Serves `listener` with `handler` until the process ends.
pub async fn serve<H: Handler>(listener: TcpListener, handler: Arc<H>) {
    let conns = Arc::new(Conns::default());
    loop {
        let (stream, _peer): (TcpStream, SocketAddr) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors and the like: wait a little rather than spin.
                eprintln!("dsipc: serve: accept: {}", e);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        match conns.admit() {
            Some(state) => {
                tokio::spawn(connection(
                    stream,
                    Arc::clone(&handler),
                    state,
                    Arc::clone(&conns),
                ));
            }
            None => {
                tokio::spawn(refuse(stream));
            }
        }
    }
}

fn builder() -> hyper::server::conn::http1::Builder {
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(MAX_HEAD.max(8192))
        .keep_alive(true);
    b
}

async fn connection<H: Handler>(
    stream: TcpStream,
    handler: Arc<H>,
    state: Arc<ConnState>,
    conns: Arc<Conns>,
) {
    let conn_state = Arc::clone(&state);
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let handler = Arc::clone(&handler);
        let conn = Arc::clone(&conn_state);
        conn.answering.store(true, Ordering::SeqCst);
        async move {
            let response = handler.handle(req).await;
            Ok::<_, Infallible>(response.map(|inner| Tracked { inner, conn }.boxed()))
        }
    });
    let served = builder().serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        _ = served => {}
        _ = state.evict.notified() => {}
    }
    conns.remove(state.id);
}

/// Answers 503 on a connection there is no room for.
async fn refuse(stream: TcpStream) {
    let service = hyper::service::service_fn(|_req: Request<Incoming>| async {
        let mut r = Response::new(full("every connection is being answered; try again\n"));
        *r.status_mut() = hyper::StatusCode::SERVICE_UNAVAILABLE;
        r.headers_mut().insert(
            hyper::header::RETRY_AFTER,
            hyper::header::HeaderValue::from_static("1"),
        );
        Ok::<_, Infallible>(r)
    });
    let mut b = builder();
    b.keep_alive(false);
    let _ = tokio::time::timeout(
        HEAD_TIMEOUT * 2,
        b.serve_connection(TokioIo::new(stream), service),
    )
    .await;
}
