//! The listener's bounds with a handler that holds its requests as long as a test wants:
//! what happens when every connection is being answered.

use std::sync::atomic::AtomicUsize;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

/// Answers `/hold` only when the test releases it (counting those it holds), the rest at
/// once.
struct Holding {
    held: AtomicUsize,
    changed: Notify,
    release: Notify,
}

impl Handler for Holding {
    fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Pin<Box<dyn Future<Output = Response<Body>> + Send>> {
        Box::pin(async move {
            if req.uri().path() == "/hold" {
                let released = self.release.notified();
                tokio::pin!(released);
                released.as_mut().enable();
                self.held.fetch_add(1, Ordering::SeqCst);
                self.changed.notify_waiters();
                released.await;
            }
            Response::new(full("ok\n"))
        })
    }
}

async fn send(addr: SocketAddr, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!(
            "GET {} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            path
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    s
}

/// What came back until the server closed (a reset counts as closed).
async fn answer(mut s: TcpStream) -> String {
    let mut raw = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut raw)).await;
    String::from_utf8_lossy(&raw).into_owned()
}

#[test]
fn a_full_listener_answers_503_and_closes_what_it_cannot_even_refuse() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let handler = Arc::new(Holding {
            held: AtomicUsize::new(0),
            changed: Notify::new(),
            release: Notify::new(),
        });
        tokio::spawn(serve(listener, Arc::clone(&handler)));
        let mut holding = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            holding.push(send(addr, "/hold").await);
        }
        loop {
            let changed = handler.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if handler.held.load(Ordering::SeqCst) == MAX_CONNECTIONS {
                break;
            }
            changed.await;
        }
        // Every connection is being answered: the next client is told 503.
        let busy = answer(send(addr, "/").await).await;
        assert!(busy.starts_with("HTTP/1.1 503"), "{}", busy);
        assert!(
            busy.to_ascii_lowercase().contains("retry-after: 1"),
            "{}",
            busy
        );
        // Silent clients hold every refusal; one more is closed without an answer.
        let mut silent = Vec::new();
        for _ in 0..MAX_REFUSING {
            silent.push(TcpStream::connect(addr).await.unwrap());
        }
        assert_eq!(answer(send(addr, "/").await).await, "");
        // Once the requests are answered, new clients are served again.
        drop(silent);
        handler.release.notify_waiters();
        for s in holding {
            assert!(answer(s).await.contains("ok"));
        }
        let ok = answer(send(addr, "/").await).await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{}", ok);
    });
}
