//! Egress within bounds: an endpoint that answers 500, refuses, or never answers fails the
//! upload after the bounded retries of `Limits`, with the reason; an `https://` endpoint is
//! a typed error (no TLS is built in). Local fake endpoints: no peer needed.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use dsipc_serve::egress::azure::{AzureBlobClient, AzureBlobOptions};
use dsipc_serve::egress::http::Limits;
use dsipc_serve::egress::s3::{S3Client, S3Options};
use dsipc_serve::egress::EgressError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

// ---- bounds: endpoints that answer 500, refuse, or never answer ----

fn quick_limits() -> Limits {
    Limits {
        connect: Duration::from_secs(2),
        response: Duration::from_secs(1),
        min_rate: 1024 * 1024,
        attempts: 3,
        backoff: Duration::from_millis(10),
    }
}

/// A local endpoint that counts its connections and, for each, either answers every
/// request head with `answer` or (None) reads and never answers.
async fn fake_endpoint(answer: Option<&'static str>) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            seen.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut b = [0u8; 4096];
                loop {
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                    if let Some(answer) = answer {
                        if head.windows(4).any(|w| w == b"\r\n\r\n") {
                            let _ = s.write_all(answer.as_bytes()).await;
                            return;
                        }
                    }
                }
            });
        }
    });
    (url, count)
}

const ANSWER_500: &str = "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/xml\r\n\
    Content-Length: 92\r\nConnection: close\r\n\r\n\
    <Error><Code>InternalError</Code><Message>We encountered an internal error</Message></Error>";

#[tokio::test]
async fn egress_to_an_endpoint_answering_500_fails_after_the_bounded_retries() {
    let (url, count) = fake_endpoint(Some(ANSWER_500)).await;
    let s3 = S3Client::new(S3Options {
        limits: quick_limits(),
        ..s3_options(&url, "traces")
    })
    .unwrap();
    let err = s3
        .upload(&artifact("x.dmp"), Pattern::new(1, 10))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "HeadBucket failed with HTTP 500" // a HEAD answer has no body
    );
    assert_eq!(
        count.load(Ordering::SeqCst),
        3,
        "three tries, then the error"
    );
    let (url, count) = fake_endpoint(Some(ANSWER_500)).await;
    let azure = AzureBlobClient::new(AzureBlobOptions {
        account_uri: format!("{}/{}", url, AZURITE_ACCOUNT),
        limits: quick_limits(),
        ..azure_options(0)
    })
    .unwrap();
    let err = azure
        .upload(&artifact("x.dmp"), Pattern::new(1, 10))
        .await
        .unwrap_err();
    assert!(
        matches!(err, EgressError::Service { status: 500, ref code, .. } if code == "InternalError"),
        "{:?}",
        err
    );
    assert_eq!(count.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn egress_to_a_refusing_endpoint_fails_with_the_connect_error() {
    let port = free_port(); // bound, then closed: nothing listens there
    let s3 = S3Client::new(S3Options {
        limits: quick_limits(),
        ..s3_options(&format!("http://127.0.0.1:{}", port), "traces")
    })
    .unwrap();
    let err = s3
        .upload(&artifact("x.dmp"), Pattern::new(1, 10))
        .await
        .unwrap_err();
    match &err {
        EgressError::Connect { address, error } => {
            assert_eq!(address, &format!("127.0.0.1:{}", port));
            assert_eq!(error.kind(), std::io::ErrorKind::ConnectionRefused);
        }
        other => panic!("{:?}", other),
    }
}

#[tokio::test]
async fn egress_to_an_endpoint_that_never_answers_times_out_after_the_bounded_retries() {
    let (url, count) = fake_endpoint(None).await;
    let limits = Limits {
        attempts: 2,
        ..quick_limits()
    };
    let s3 = S3Client::new(S3Options {
        limits,
        ..s3_options(&url, "traces")
    })
    .unwrap();
    let err = s3
        .upload(&artifact("x.dmp"), Pattern::new(1, 10))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "HeadBucket: no answer within 1 s");
    assert_eq!(count.load(Ordering::SeqCst), 2);
}

#[cfg(not(feature = "tls"))]
#[tokio::test]
async fn egress_to_an_https_endpoint_says_tls_is_not_built_in() {
    let err =
        S3Client::new(s3_options("https://s3.eu-west-1.amazonaws.com", "traces")).unwrap_err();
    assert!(err.to_string().contains("needs TLS"), "{}", err);
    let err = AzureBlobClient::new(AzureBlobOptions {
        account_uri: "https://acct.blob.core.windows.net/?sv=2022&sig=SECRETSIG".into(),
        ..azure_options(0)
    })
    .unwrap_err();
    assert!(
        matches!(err, EgressError::TlsNotBuiltIn { .. }),
        "{:?}",
        err
    );
    assert!(!err.to_string().contains("SECRETSIG"), "{}", err);
}

/// A local S3 endpoint for a multipart upload whose CompleteMultipartUpload answers after
/// `complete_after` (S3 assembles the object first); it counts the Complete calls.
async fn slow_complete_endpoint(complete_after: Duration) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let completes = Arc::new(AtomicUsize::new(0));
    let seen = completes.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut raw = Vec::new();
                let mut b = vec![0u8; 64 * 1024];
                // The head, then the body its Content-Length announces.
                let end = loop {
                    if let Some(i) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                        break i + 4;
                    }
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => raw.extend_from_slice(&b[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                while raw.len() < end + len {
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => raw.extend_from_slice(&b[..n]),
                    }
                }
                let request = head.lines().next().unwrap_or("").to_string();
                let body = if request.starts_with("post") && request.contains("?uploads") {
                    "<InitiateMultipartUploadResult><UploadId>up</UploadId></InitiateMultipartUploadResult>"
                } else if request.starts_with("post") {
                    seen.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(complete_after).await;
                    "<CompleteMultipartUploadResult></CompleteMultipartUploadResult>"
                } else {
                    ""
                };
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nETag: \"e\"\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                    body.len(),
                    body
                );
                let _ = s.write_all(answer.as_bytes()).await;
            });
        }
    });
    (url, completes)
}

#[tokio::test]
async fn s3_complete_multipart_upload_gets_a_second_per_part_beyond_the_response_bound() {
    // Two parts: CompleteMultipartUpload may take the 1 s of `response` plus 2 s; the
    // endpoint answers it after 1.5 s, once.
    let (url, completes) = slow_complete_endpoint(Duration::from_millis(1500)).await;
    let s3 = S3Client::new(S3Options {
        limits: quick_limits(),
        part_size: dsipc_serve::egress::s3::MIN_PART_SIZE,
        ..s3_options(&url, "traces")
    })
    .unwrap();
    let stored = s3
        .upload(&artifact("x.nettrace"), Pattern::new(1, 6 * MIB))
        .await
        .expect("the upload succeeds");
    assert_eq!(stored.parts, 2);
    assert_eq!(
        completes.load(Ordering::SeqCst),
        1,
        "one Complete, no retry"
    );
}
