//! What the tests share: a fake runtime and a client of it, polling helpers (Rust 1.63 has no `std::future::poll_fn`) and
//! waits on the fake runtime's records that do not block the runtime's thread.
#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use dsipc::payload::Provider;
use dsipc::wire::Command;
use dsipc_testkit::{Config, FakeRuntime, Received, TempDir};
use dsipc_tokio::{DiagnosticsClient, Endpoint};

/// Polls a future once: `Some(output)` if it was ready, `None` if it was pending.
pub fn poll_once<F: Future + Unpin>(fut: F) -> PollOnce<F> {
    PollOnce(Some(fut))
}

/// The future of [`poll_once`].
pub struct PollOnce<F>(Option<F>);

impl<F: Future + Unpin> Future for PollOnce<F> {
    type Output = Option<F::Output>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut fut = self.0.take().expect("polled after completion");
        match Pin::new(&mut fut).poll(cx) {
            Poll::Ready(v) => Poll::Ready(Some(v)),
            Poll::Pending => Poll::Ready(None),
        }
    }
}

/// The next item of a `futures_core::Stream`.
pub struct NextItem<'a, S>(pub &'a mut S);

impl<S: futures_core::Stream + Unpin> Future for NextItem<'_, S> {
    type Output = Option<S::Item>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut *self.0).poll_next(cx)
    }
}

/// Waits (on a blocking thread) until the fake runtime recorded `count` requests.
pub async fn wait_received(rt: &FakeRuntime, count: usize) -> Vec<Received> {
    tokio::task::block_in_place(|| rt.wait_received(count, Duration::from_secs(10)))
}

/// The client's timeout in the tests.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// A fake runtime listening in a fresh directory, and a client of it.
pub fn start(config: Config) -> (TempDir, FakeRuntime, DiagnosticsClient) {
    let dir = TempDir::new("tokio").unwrap();
    let rt = config.listen_in(dir.path()).start().unwrap();
    let client =
        DiagnosticsClient::new(Endpoint::new(rt.socket_path().unwrap())).with_timeout(TIMEOUT);
    (dir, rt, client)
}

/// The commands the fake runtime received, in order.
pub fn commands(rt: &FakeRuntime) -> Vec<Option<Command>> {
    rt.received().iter().map(|r| r.command).collect()
}

/// One provider (the runtime's own events).
pub fn providers() -> [Provider<'static>; 1] {
    [Provider::new("Microsoft-Windows-DotNETRuntime", 0x1, 4)]
}
