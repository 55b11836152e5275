//! A pooled connection as a command holds it.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use dsipc::wire::Guid;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::shared::Shared;
use crate::conn::BoxStream;
use crate::Error;

/// A pooled connection taken by a command: tells the pool when the command drops it.
pub(super) struct PooledStream {
    pub(super) inner: BoxStream,
    pub(super) shared: Arc<Shared>,
    pub(super) cookie: Guid,
    pub(super) epoch: u64,
}

impl Drop for PooledStream {
    fn drop(&mut self) {
        self.shared.release(self.cookie, self.epoch);
    }
}

impl AsyncRead for PooledStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for PooledStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The connection for one command of a pooled runtime (`conn::Target::Pool`).
pub(crate) async fn open(shared: &Arc<Shared>, cookie: Guid) -> Result<BoxStream, Error> {
    shared.take(cookie).await
}
