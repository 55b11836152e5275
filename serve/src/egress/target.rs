//! Where an egress provider stores an operation's artifact: a folder (dotnet-monitor's
//! `FileSystem`), an S3 bucket (`S3Storage`) or an Azure Blob Storage container
//! (`AzureBlobStorage`); and the one place an artifact's body is handed to the one it names.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::Body as _;
use tokio::io::{AsyncRead, ReadBuf};

use super::azure::AzureBlobClient;
use super::s3::S3Client;
use super::{Artifact, EgressError};
use crate::http::Body;

/// Where an egress provider stores artifacts.
#[derive(Clone)]
#[non_exhaustive]
pub enum EgressTarget {
    /// A folder (created if missing): dotnet-monitor's `FileSystem` provider.
    FileSystem(PathBuf),
    /// A bucket: dotnet-monitor's `S3Storage` provider.
    S3(Arc<S3Client>),
    /// A container: dotnet-monitor's `AzureBlobStorage` provider, with the blob metadata
    /// its `Metadata` setting names (values read from serve's environment at start).
    AzureBlob(Arc<AzureBlobClient>, Vec<(String, String)>),
}

impl fmt::Debug for EgressTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The clients' options hold credentials: only the kind is said.
        match self {
            EgressTarget::FileSystem(dir) => f.debug_tuple("FileSystem").field(dir).finish(),
            EgressTarget::S3(_) => f.write_str("S3(..)"),
            EgressTarget::AzureBlob(..) => f.write_str("AzureBlob(..)"),
        }
    }
}

impl EgressTarget {
    /// The kind of provider, as dotnet-monitor's configuration names it.
    pub fn kind(&self) -> &'static str {
        match self {
            EgressTarget::FileSystem(_) => "FileSystem",
            EgressTarget::S3(_) => "S3Storage",
            EgressTarget::AzureBlob(..) => "AzureBlobStorage",
        }
    }
}

/// Sends `body` to a cloud `target` as `name` (`content_type`), until it is whole or
/// `cancel` finishes ([`EgressError::Cancelled`]); the stored artifact's resource id (S3:
/// `BucketName=B, Key=K`, as dotnet-monitor; Azure: the blob's URI without its query), or
/// why not. Nothing stays stored when it fails or is cancelled (the clients abort or never
/// commit).
pub(crate) async fn upload<C>(
    target: &EgressTarget,
    name: &str,
    content_type: &str,
    body: Body,
    cancel: C,
) -> Result<String, EgressError>
where
    C: std::future::Future<Output = ()>,
{
    let mut artifact = Artifact {
        name: name.to_string(),
        content_type: content_type.to_string(),
        metadata: Vec::new(),
    };
    let source = BodyReader {
        body,
        chunk: Bytes::new(),
    };
    match target {
        EgressTarget::FileSystem(_) => Err(EgressError::Options("not a cloud provider".into())),
        EgressTarget::S3(client) => client
            .upload_until(&artifact, source, cancel)
            .await
            .map(|s| s.resource_id()),
        EgressTarget::AzureBlob(client, metadata) => {
            artifact.metadata = metadata.clone();
            client
                .upload_until(&artifact, source, cancel)
                .await
                .map(|s| {
                    if let Some(q) = &s.queue_error {
                        eprintln!(
                            "dsipc: serve: {} stored, but its queue message failed: {}",
                            s.blob_name, q
                        );
                    }
                    s.blob_uri
                })
        }
    }
}

/// A response body read as bytes (what the clients stream from), one frame at a time: no
/// more of the artifact is held than one frame.
struct BodyReader {
    body: Body,
    chunk: Bytes,
}

impl AsyncRead for BodyReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.chunk.is_empty() {
                let n = self.chunk.len().min(buf.remaining());
                let part = self.chunk.split_to(n);
                buf.put_slice(&part);
                return Poll::Ready(Ok(()));
            }
            match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Ready(Some(Err(e))) => {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("the artifact was cut short: {}", e),
                    )))
                }
                Poll::Ready(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.chunk = data;
                    }
                }
            }
        }
    }
}
