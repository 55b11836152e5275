//! Streamed egress of artifacts to Azure Blob Storage ([`azure::AzureBlobClient`]) and S3
//! ([`s3::S3Client`]), as dotnet-monitor's `AzureBlobStorage` and `S3Storage` providers
//! store them.
//!
//! An artifact is a `tokio::io::AsyncRead` of unknown length. It is read one part (S3) or
//! one block (Azure) at a time, and each is sent before the next is read: an upload holds
//! at most one part in memory and never writes to disk. Nothing is visible until the whole
//! artifact is stored: S3's multipart upload is completed (or Azure's block list committed)
//! only after the source's end, and aborted on any failure.
//!
//! `https://` endpoints are spoken with rustls (the `tls` feature, on by default; see
//! [`tls`]); a build without it answers them with [`EgressError::TlsNotBuiltIn`].

pub mod azure;
pub mod crypto;
pub mod http;
pub mod s3;
pub mod sharedkey;
pub mod sigv4;
pub mod target;
pub mod tls;

use std::fmt;

/// Credentials are the crate's one [`Secret`](crate::Secret) (`:REDACTED:` when shown).
pub use crate::secret::Secret;
pub(crate) use target::upload;
pub use target::EgressTarget;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

/// What is uploaded besides its bytes: dotnet-monitor's `EgressArtifactSettings`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Artifact {
    /// The artifact's file name (`20231010_101010_1234.nettrace`): the blob name after the
    /// prefix, the S3 object key.
    pub name: String,
    /// Its `Content-Type` (`application/octet-stream` when empty).
    pub content_type: String,
    /// Metadata stored with it (`x-ms-meta-NAME`, `x-amz-meta-NAME`). Names must be
    /// C# identifiers for Azure (letters, digits, `_`), checked before any request.
    pub metadata: Vec<(String, String)>,
}

impl Artifact {
    /// The content type sent: the artifact's or `application/octet-stream`.
    pub(crate) fn content_type(&self) -> &str {
        if self.content_type.is_empty() {
            "application/octet-stream"
        } else {
            &self.content_type
        }
    }
}

/// Why an upload failed. Never holds a credential: URLs are shown without their query
/// (where a SAS token lives), and signatures are not kept.
#[derive(Debug)]
pub enum EgressError {
    /// The options cannot work (a missing bucket or container, a malformed URL or key).
    Options(String),
    /// The endpoint is `https://` and this build speaks plain HTTP only.
    TlsNotBuiltIn {
        /// The endpoint, without its query.
        endpoint: String,
    },
    /// The TLS handshake failed (an untrusted or mismatched certificate, a protocol error).
    Tls {
        /// The server's name.
        host: String,
        /// rustls's description.
        message: String,
    },
    /// A TCP connection could not be made (after the retries of [`http::Limits`]).
    Connect {
        /// `host:port`.
        address: String,
        /// The last attempt's error.
        error: std::io::Error,
    },
    /// The endpoint did not answer within the bound of [`http::Limits`].
    Timeout {
        /// The call that timed out (`UploadPart 3`, `PutBlockList`...).
        operation: String,
        /// The bound, in seconds.
        seconds: u64,
    },
    /// The HTTP exchange broke (a reset connection, a malformed answer).
    Http {
        /// The call.
        operation: String,
        /// hyper's description.
        message: String,
    },
    /// The service answered with an error status: its error code and message, from the
    /// XML body (S3's `<Error><Code>`, Azure's `<Error><Code>` or `x-ms-error-code`).
    Service {
        /// The call (`CreateMultipartUpload`, `PutBlock 2`...).
        operation: String,
        /// The HTTP status.
        status: u16,
        /// The service's error code (`NoSuchBucket`, `AuthenticationFailed`...), or empty.
        code: String,
        /// The service's message, or empty.
        message: String,
    },
    /// The artifact's own stream failed; the upload was aborted.
    Source(std::io::Error),
    /// The caller cancelled the upload (its `cancel` future finished); nothing was stored.
    Cancelled,
    /// The artifact is larger than the service's limit for one object at this part size.
    TooLarge {
        /// The limit in bytes.
        limit: u64,
    },
}

impl fmt::Display for EgressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EgressError::Options(m) => write!(f, "egress options: {}", m),
            EgressError::TlsNotBuiltIn { endpoint } => write!(
                f,
                "{} needs TLS, which this build of dsipc-serve leaves out (its `tls` \
                 feature): use an http:// endpoint or a build with TLS",
                endpoint
            ),
            EgressError::Tls { host, message } => {
                write!(f, "TLS with {} failed: {}", host, message)
            }
            EgressError::Connect { address, error } => {
                write!(f, "cannot connect to {}: {}", address, error)
            }
            EgressError::Timeout { operation, seconds } => {
                write!(f, "{}: no answer within {} s", operation, seconds)
            }
            EgressError::Http { operation, message } => write!(f, "{}: {}", operation, message),
            EgressError::Service {
                operation,
                status,
                code,
                message,
            } => {
                write!(f, "{} failed with HTTP {}", operation, status)?;
                if !code.is_empty() {
                    write!(f, " {}", code)?;
                }
                if !message.is_empty() {
                    write!(f, ": {}", message)?;
                }
                Ok(())
            }
            EgressError::Source(e) => write!(f, "reading the artifact failed: {}", e),
            EgressError::Cancelled => f.write_str("the upload was cancelled"),
            EgressError::TooLarge { limit } => write!(
                f,
                "the artifact exceeds {} bytes, the most one upload stores at this part size",
                limit
            ),
        }
    }
}

impl std::error::Error for EgressError {}

/// Reads from `source` until `buf` holds `limit` bytes or the source ends (then the buffer
/// may be shorter, or empty). The one read loop both clients use for their parts.
pub(crate) async fn fill<R: AsyncRead + Unpin>(
    source: &mut R,
    buf: &mut BytesMut,
    limit: usize,
) -> Result<(), EgressError> {
    while buf.len() < limit {
        // read_buf reads at most the spare capacity: reserve exactly what is missing, so
        // that the buffer never grows past `limit`.
        buf.reserve(limit - buf.len());
        let mut take = (&mut *source).take((limit - buf.len()) as u64);
        let n = take.read_buf(buf).await.map_err(EgressError::Source)?;
        if n == 0 {
            break;
        }
    }
    Ok(())
}

/// The metadata names Azure accepts (C# identifiers: a letter or `_`, then letters, digits
/// or `_`), which S3 accepts too.
pub(crate) fn check_metadata(metadata: &[(String, String)]) -> Result<(), EgressError> {
    for (name, value) in metadata {
        let mut chars = name.chars();
        let ok = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(EgressError::Options(format!(
                "metadata name {:?} is not a C# identifier (letters, digits, _)",
                name
            )));
        }
        if value.chars().any(|c| c.is_control() || !c.is_ascii()) {
            return Err(EgressError::Options(format!(
                "metadata {:?}: a header value must be printable ASCII",
                name
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_names_must_be_identifiers() {
        assert!(check_metadata(&[("ProcessId".into(), "12".into())]).is_ok());
        assert!(check_metadata(&[("1x".into(), "v".into())]).is_err());
        assert!(check_metadata(&[("a-b".into(), "v".into())]).is_err());
        assert!(check_metadata(&[("a".into(), "line\nbreak".into())]).is_err());
    }

    #[tokio::test]
    async fn fill_stops_at_the_limit_and_at_the_end() {
        let data = [7u8; 10];
        let mut src = &data[..];
        let mut buf = BytesMut::new();
        fill(&mut src, &mut buf, 4).await.unwrap();
        assert_eq!(buf.len(), 4);
        assert!(buf.capacity() >= 4);
        let mut rest = BytesMut::new();
        fill(&mut src, &mut rest, 100).await.unwrap();
        assert_eq!(rest.len(), 6);
    }
}
