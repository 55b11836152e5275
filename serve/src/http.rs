//! The HTTP side of `dsipc serve`: listeners, bounded connections, hyper.
//!
//! hyper 1.x parses and writes HTTP/1.1; this module only decides who gets a connection.
//! Bounds: [`MAX_CONNECTIONS`] per listener, request heads of at most [`MAX_HEAD`] bytes
//! that must arrive within [`HEAD_TIMEOUT`] (also the most a keep-alive connection may sit
//! idle), request bodies ([`read_body`]) at Kestrel's minimum data rate. At the limit a new
//! connection evicts the oldest one that is not being answered (idle, still sending its
//! head, or still sending its body: that one is answered 408), so slow or idle clients
//! cannot lock others out; only when every connection is being answered is the new one
//! answered 503. A request without exactly one Host header is answered 400 (RFC 9112 §3.2).

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
/// Connections being answered 503 at once per listener (each for at most twice
/// [`HEAD_TIMEOUT`]); past that a connection there is no room for is closed at once, so a
/// flood costs at most this many descriptors more.
pub const MAX_REFUSING: usize = 16;
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
    pub fn fail(&self, e: io::Error) {
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
        self.conn.shift(Phase::Answering, Phase::Idle);
    }
}

/// Where a connection is in its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No request being answered: idle, or its head still coming. Evictable.
    Idle,
    /// The handler waits for the request body (the client decides how fast). Evictable: the
    /// reader is answered 408.
    Body,
    /// A request is being answered (its response body is not done): not evicted.
    Answering,
    /// Evicted; `reading` when it was waiting for a body (it gets a moment to say 408).
    Evicted { reading: bool },
}

/// One open connection as its listener sees it.
struct ConnState {
    id: u64,
    phase: Mutex<Phase>,
    /// Evicted: the connection's task closes it.
    evict: Notify,
    /// Evicted while reading a body: [`read_body`] answers 408.
    body_evict: Notify,
    /// The answer asks the client to close (its body was left unread).
    close_after: AtomicBool,
}

impl ConnState {
    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `from` → `to`; false (and no change) when the connection is elsewhere (evicted).
    fn shift(&self, from: Phase, to: Phase) -> bool {
        let mut p = self.phase();
        if *p == from {
            *p = to;
            true
        } else {
            false
        }
    }
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

    /// A slot for a new connection (evicting the oldest one that is idle or waiting for a
    /// request body at the limit), or `None` when every connection is being answered.
    fn admit(&self) -> Option<Arc<ConnState>> {
        let mut open = self.lock();
        if open.len() >= MAX_CONNECTIONS {
            let victim = open.iter().position(|c| {
                let mut p = c.phase();
                match *p {
                    Phase::Idle | Phase::Body => {
                        *p = Phase::Evicted {
                            reading: *p == Phase::Body,
                        };
                        true
                    }
                    _ => false,
                }
            })?;
            let c = open.remove(victim).expect("index from position");
            c.body_evict.notify_one();
            c.evict.notify_one();
        }
        let c = Arc::new(ConnState {
            id: self.next.fetch_add(1, Ordering::Relaxed),
            phase: Mutex::new(Phase::Idle),
            evict: Notify::new(),
            body_evict: Notify::new(),
            close_after: AtomicBool::new(false),
        });
        open.push_back(Arc::clone(&c));
        Some(c)
    }

    fn remove(&self, id: u64) {
        self.lock().retain(|c| c.id != id);
    }
}

/// A request's connection, for [`read_body`] (a request extension).
#[derive(Clone)]
struct ConnOf(Arc<ConnState>);

/// Kestrel's MinRequestBodyDataRate, which dotnet-monitor runs under: after
/// [`BODY_GRACE`], a request body must keep coming at this many bytes a second on average,
/// or the request is answered 408. A client on any real link sends far faster; one that
/// trickles bytes to hold a connection is cut off.
pub const MIN_BODY_RATE: u64 = 240;
/// Kestrel's grace period before [`MIN_BODY_RATE`] applies.
pub const BODY_GRACE: Duration = Duration::from_secs(5);
/// How long an evicted connection that was waiting for its body has to be told 408 before
/// it is closed (the answer is a few hundred bytes: it fits the socket buffer at once).
const EVICTED_ANSWER_TIME: Duration = Duration::from_secs(1);

/// Why a request body was not read.
#[derive(Debug)]
pub enum BodyError {
    /// Its Content-Length, or what came, is over the limit given.
    TooLarge(usize),
    /// It came slower than [`MIN_BODY_RATE`] after [`BODY_GRACE`].
    TooSlow,
    /// The connection was closed to make room for a new one while its body was awaited.
    Evicted,
    /// hyper could not read it (a malformed chunk, the client went away).
    Failed(String),
}

impl BodyError {
    /// Whether the answer is 408 (Request Timeout) rather than 400.
    pub fn is_timeout(&self) -> bool {
        matches!(self, BodyError::TooSlow | BodyError::Evicted)
    }
}

impl std::fmt::Display for BodyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BodyError::TooLarge(max) => write!(f, "The request body is larger than {} bytes.", max),
            BodyError::TooSlow => write!(
                f,
                "The request body came slower than {} bytes/s after {} s: the request timed out.",
                MIN_BODY_RATE,
                BODY_GRACE.as_secs()
            ),
            BodyError::Evicted => write!(
                f,
                "The request body did not arrive before every connection was needed: the request timed out."
            ),
            BodyError::Failed(e) => write!(f, "The request body could not be read: {}", e),
        }
    }
}

/// Says `what` on stderr the first time `flag` is raised in this process (a bound that
/// many clients hit is reported once, not once per client).
pub fn report_once(flag: &AtomicBool, what: &str) {
    if !flag.swap(true, Ordering::SeqCst) {
        eprintln!("dsipc: serve: {} (reported once)", what);
    }
}

static SLOW_BODY_REPORTED: AtomicBool = AtomicBool::new(false);
static EVICTED_BODY_REPORTED: AtomicBool = AtomicBool::new(false);

/// The request body, at most `max` bytes, read at no less than [`MIN_BODY_RATE`] after
/// [`BODY_GRACE`]. While it is awaited the connection may be evicted for a new one (then
/// this answers [`BodyError::Evicted`]). A body left unread closes the connection after
/// the answer.
pub async fn read_body(req: Request<Incoming>, max: usize) -> Result<Bytes, BodyError> {
    let conn = req.extensions().get::<ConnOf>().map(|c| Arc::clone(&c.0));
    let announced = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let result = match announced {
        Some(n) if n > max as u64 => Err(BodyError::TooLarge(max)),
        _ => match &conn {
            Some(c) if c.shift(Phase::Answering, Phase::Body) => {
                let r = tokio::select! {
                    r = collect(req.into_body(), max) => r,
                    _ = c.body_evict.notified() => Err(BodyError::Evicted),
                };
                if c.shift(Phase::Body, Phase::Answering) {
                    r
                } else {
                    Err(BodyError::Evicted)
                }
            }
            Some(_) => Err(BodyError::Evicted),
            None => collect(req.into_body(), max).await,
        },
    };
    if let Err(e) = &result {
        if let Some(c) = &conn {
            c.close_after.store(true, Ordering::SeqCst);
        }
        match e {
            BodyError::TooSlow => report_once(
                &SLOW_BODY_REPORTED,
                &format!(
                    "a request body came slower than {} bytes/s after {} s: answered 408",
                    MIN_BODY_RATE,
                    BODY_GRACE.as_secs()
                ),
            ),
            BodyError::Evicted => report_once(
                &EVICTED_BODY_REPORTED,
                &format!(
                    "all {} connections were taken; one still waiting for its request body was answered 408 to make room",
                    MAX_CONNECTIONS
                ),
            ),
            _ => {}
        }
    }
    result
}

async fn collect(mut body: Incoming, max: usize) -> Result<Bytes, BodyError> {
    let start = tokio::time::Instant::now();
    let mut got = Vec::new();
    loop {
        // The next bytes are due when the average since the start would fall under the
        // minimum rate (after the grace).
        let due =
            start + BODY_GRACE + Duration::from_millis(got.len() as u64 * 1000 / MIN_BODY_RATE);
        let frame = match tokio::time::timeout_at(due, body.frame()).await {
            Err(_) => return Err(BodyError::TooSlow),
            Ok(None) => return Ok(Bytes::from(got)),
            Ok(Some(Err(e))) => return Err(BodyError::Failed(e.to_string())),
            Ok(Some(Ok(f))) => f,
        };
        if let Ok(data) = frame.into_data() {
            if got.len() + data.len() > max {
                return Err(BodyError::TooLarge(max));
            }
            got.extend_from_slice(&data);
        }
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
    let refusing = Arc::new(tokio::sync::Semaphore::new(MAX_REFUSING));
    let accept_failed = AtomicBool::new(false);
    let refused = AtomicBool::new(false);
    loop {
        let (stream, _peer): (TcpStream, SocketAddr) = match listener.accept().await {
            Ok(a) => a,
            Err(e) => {
                // Out of descriptors and the like: wait a little rather than spin.
                report_once(
                    &accept_failed,
                    &format!("cannot accept a connection: {}", e),
                );
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
                report_once(
                    &refused,
                    &format!(
                        "all {} connections of {} are being answered: new ones are answered 503 until one is done",
                        MAX_CONNECTIONS,
                        listener
                            .local_addr()
                            .map_or_else(|_| "a listener".to_string(), |a| format!("http://{}", a))
                    ),
                );
                if let Ok(permit) = Arc::clone(&refusing).try_acquire_owned() {
                    tokio::spawn(async move {
                        refuse(stream).await;
                        drop(permit);
                    });
                }
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
    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
        let handler = Arc::clone(&handler);
        let conn = Arc::clone(&conn_state);
        conn.shift(Phase::Idle, Phase::Answering);
        req.extensions_mut().insert(ConnOf(Arc::clone(&conn)));
        async move {
            let mut response = match host_problem(&req) {
                Some(why) => bad_request(why),
                None => handler.handle(req).await,
            };
            if conn.close_after.swap(false, Ordering::SeqCst) {
                response.headers_mut().insert(
                    hyper::header::CONNECTION,
                    hyper::header::HeaderValue::from_static("close"),
                );
            }
            Ok::<_, Infallible>(response.map(|inner| Tracked { inner, conn }.boxed()))
        }
    });
    let served = builder().serve_connection(TokioIo::new(stream), service);
    tokio::pin!(served);
    tokio::select! {
        _ = &mut served => {}
        _ = state.evict.notified() => {
            if *state.phase() == (Phase::Evicted { reading: true }) {
                let _ = tokio::time::timeout(EVICTED_ANSWER_TIME, served).await;
            }
        }
    }
    conns.remove(state.id);
}

/// RFC 9112 §3.2: an HTTP/1.1 request without a Host header, or any request with more than
/// one, is answered 400 (as Kestrel does).
fn host_problem(req: &Request<Incoming>) -> Option<&'static str> {
    let hosts = req.headers().get_all(hyper::header::HOST).iter().count();
    if hosts > 1 {
        Some("The request has more than one Host header.\n")
    } else if hosts == 0 && req.version() == hyper::Version::HTTP_11 {
        Some("An HTTP/1.1 request must have a Host header.\n")
    } else {
        None
    }
}

fn bad_request(why: &'static str) -> Response<Body> {
    let mut r = Response::new(full(why));
    *r.status_mut() = hyper::StatusCode::BAD_REQUEST;
    r.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    r
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

#[cfg(test)]
mod tests;
