//! Streamed egress against real peers: moto's S3 server and Azurite (installed by
//! scripts/egress-peers.sh), each started on free ports by the test that needs it; what
//! was uploaded is read back with the services' own clients (boto3, azure-storage-blob,
//! azure-storage-queue: serve/tests/egress_reader.py) and compared byte for byte.
//!
//! Without the peers, a test prints a `SKIPPED` line naming what is missing (and appends it
//! to target/skipped-tests.txt); with DSIPC_REQUIRE_EGRESS_PEERS=1 (scripts/test.sh, CI) it
//! fails instead.

mod common;

use common::*;
use dsipc_serve::egress::azure::{AzureBlobClient, AzureBlobOptions};
use dsipc_serve::egress::s3::S3Client;
#[cfg(feature = "tls")]
use dsipc_serve::egress::tls::Trust;
use dsipc_serve::egress::{EgressError, Secret};

// ---- S3 ----

#[tokio::test]
async fn s3_streams_a_large_artifact_as_multipart_and_a_small_one_as_put_object() {
    let p = match peers() {
        Some(p) => p,
        None => return,
    };
    let (_peer, endpoint) = moto(&p);
    let client = S3Client::new(s3_options(&endpoint, "traces")).unwrap();
    let big = client
        .upload(&artifact("big.nettrace"), Pattern::new(1, 20 * MIB))
        .await
        .unwrap();
    assert_eq!((big.size, big.parts), (20 * MIB, 3)); // 8 + 8 + 4 MiB
    assert_eq!(big.resource_id(), "BucketName=traces, Key=big.nettrace");
    let small = client
        .upload(&artifact("small.gcdump"), Pattern::new(2, 1000))
        .await
        .unwrap();
    assert_eq!((small.size, small.parts), (1000, 1));
    // An empty artifact is an empty object (one empty PutObject).
    let empty = client
        .upload(&artifact("empty.txt"), Pattern::new(0, 0))
        .await
        .unwrap();
    assert_eq!((empty.size, empty.parts), (0, 1));
    assert!(read_back(&p, &["s3", "get", &endpoint, "traces", "empty.txt"]).is_empty());
    let got = read_back(&p, &["s3", "get", &endpoint, "traces", "big.nettrace"]);
    assert!(got == expected(1, 20 * MIB), "the 20 MiB object differs");
    let got = read_back(&p, &["s3", "get", &endpoint, "traces", "small.gcdump"]);
    assert!(got == expected(2, 1000), "the small object differs");
    for key in ["big.nettrace", "small.gcdump"] {
        let head = read_json(&p, &["s3", "head", &endpoint, "traces", key]);
        assert!(
            head.contains(r#""content_type": "application/octet-stream""#),
            "{}",
            head
        );
        assert!(head.contains(r#""processid": "4242""#), "{}", head);
    }
}

#[tokio::test]
async fn s3_a_stream_failing_midway_aborts_the_upload_and_leaves_no_object() {
    let p = match peers() {
        Some(p) => p,
        None => return,
    };
    let (_peer, endpoint) = moto(&p);
    let client = S3Client::new(s3_options(&endpoint, "traces")).unwrap();
    // Two parts are sent; reading the third fails.
    let err = client
        .upload(
            &artifact("cut.nettrace"),
            Pattern::new(3, 20 * MIB).failing_at(17 * MIB),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, EgressError::Source(_)), "{:?}", err);
    assert!(
        err.to_string()
            .contains("the trace session ended abnormally"),
        "{}",
        err
    );
    assert_eq!(
        read_json(&p, &["s3", "state", &endpoint, "traces"]),
        r#"{"keys": [], "uploads": []}"#
    );
}

#[tokio::test]
async fn s3_a_cancelled_upload_is_aborted_and_leaves_no_object() {
    let p = match peers() {
        Some(p) => p,
        None => return,
    };
    let (_peer, endpoint) = moto(&p);
    let client = S3Client::new(s3_options(&endpoint, "traces")).unwrap();
    // One part is sent, then the stream goes quiet and the operation is cancelled.
    let (reached, cancel) = tokio::sync::oneshot::channel();
    let source = Pattern::new(12, 20 * MIB).stalling_at(9 * MIB, reached);
    let err = client
        .upload_until(&artifact("cancelled.nettrace"), source, async {
            let _ = cancel.await;
        })
        .await
        .unwrap_err();
    assert!(matches!(err, EgressError::Cancelled), "{:?}", err);
    assert_eq!(
        read_json(&p, &["s3", "state", &endpoint, "traces"]),
        r#"{"keys": [], "uploads": []}"#
    );
}

#[tokio::test]
async fn s3_a_service_error_says_its_code_and_message() {
    let p = match peers() {
        Some(p) => p,
        None => return,
    };
    let (_peer, endpoint) = moto(&p);
    // "a" is no valid bucket name (3 to 63 characters): CreateBucket is refused.
    let client = S3Client::new(s3_options(&endpoint, "a")).unwrap();
    let err = client
        .upload(&artifact("x.dmp"), Pattern::new(4, 10))
        .await
        .unwrap_err();
    match &err {
        EgressError::Service { status, code, .. } => {
            assert_eq!(
                (*status, code.as_str()),
                (400, "InvalidBucketName"),
                "{}",
                err
            )
        }
        other => panic!("{:?}", other),
    }
    assert!(!format!("{} {:?}", err, client).contains("testing-secret-key"));
}

// ---- Azure ----

#[tokio::test]
async fn azure_streams_blocks_and_a_put_blob_with_prefix_metadata_and_queue_message() {
    let p = match peers() {
        Some(p) => p,
        None => return,
    };
    let (_peer, blob, queue) = azurite(&p);
    let client = AzureBlobClient::new(AzureBlobOptions {
        queue_name: "egress".into(),
        queue_account_uri: format!("http://127.0.0.1:{}/{}", queue, AZURITE_ACCOUNT),
        ..azure_options(blob)
    })
    .unwrap();
    let big = client
        .upload(&artifact("big.nettrace"), Pattern::new(5, 20 * MIB + 3))
        .await
        .unwrap();
    assert_eq!((big.size, big.blocks), (20 * MIB + 3, 6)); // 5 x 4 MiB + 3 bytes
    assert_eq!(
        big.blob_uri,
        format!(
            "http://127.0.0.1:{}/{}/dumps/artifacts/big.nettrace",
            blob, AZURITE_ACCOUNT
        )
    );
    assert_eq!(big.queue_error, None);
    let small = client
        .upload(&artifact("small.gcdump"), Pattern::new(6, 1000))
        .await
        .unwrap();
    assert_eq!((small.size, small.blocks), (1000, 1));
    let conn = connection_string(blob, queue);
    // An empty artifact is an empty blob (one empty Put Blob), and a queue message too.
    let empty = client
        .upload(&artifact("empty.txt"), Pattern::new(0, 0))
        .await
        .unwrap();
    assert_eq!((empty.size, empty.blocks), (0, 1));
    assert!(read_back(&p, &["blob", "get", &conn, "dumps", "artifacts/empty.txt"]).is_empty());
    let got = read_back(
        &p,
        &["blob", "get", &conn, "dumps", "artifacts/big.nettrace"],
    );
    assert!(got == expected(5, 20 * MIB + 3), "the 20 MiB blob differs");
    let got = read_back(
        &p,
        &["blob", "get", &conn, "dumps", "artifacts/small.gcdump"],
    );
    assert!(got == expected(6, 1000), "the small blob differs");
    for name in ["artifacts/big.nettrace", "artifacts/small.gcdump"] {
        let head = read_json(&p, &["blob", "head", &conn, "dumps", name]);
        assert!(
            head.contains(r#""content_type": "application/octet-stream""#),
            "{}",
            head
        );
        assert!(head.contains(r#""processid": "4242""#), "{}", head);
    }
    // dotnet-monitor's message: the blob's name (base64 on the wire).
    assert_eq!(
        read_json(&p, &["queue", "receive", &conn, "egress"]),
        r#"["artifacts/big.nettrace", "artifacts/small.gcdump", "artifacts/empty.txt"]"#
    );
}

#[tokio::test]
async fn azure_uploads_with_a_shared_access_signature() {
    let p = match peers() {
        Some(p) => p,
        None => return,
    };
    let (_peer, blob, queue) = azurite(&p);
    let conn = connection_string(blob, queue);
    let sas = read_json(&p, &["sas", &conn]);
    let client = AzureBlobClient::new(AzureBlobOptions {
        account_key: Secret::default(),
        shared_access_signature: Secret::new(sas.clone()),
        blob_prefix: String::new(),
        block_size: 1024 * 1024,
        ..azure_options(blob)
    })
    .unwrap();
    let stored = client
        .upload(&artifact("sas.nettrace"), Pattern::new(7, 3 * MIB + 5))
        .await
        .unwrap();
    assert_eq!(stored.blocks, 4);
    assert!(!stored.blob_uri.contains("sig="), "{}", stored.blob_uri);
    let got = read_back(&p, &["blob", "get", &conn, "dumps", "sas.nettrace"]);
    assert!(got == expected(7, 3 * MIB + 5), "the blob differs");
}

#[tokio::test]
async fn azure_a_stream_failing_midway_commits_nothing() {
    let p = match peers() {
        Some(p) => p,
        None => return,
    };
    let (_peer, blob, queue) = azurite(&p);
    let client = AzureBlobClient::new(azure_options(blob)).unwrap();
    let err = client
        .upload(
            &artifact("cut.nettrace"),
            Pattern::new(8, 20 * MIB).failing_at(9 * MIB),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, EgressError::Source(_)), "{:?}", err);
    assert_eq!(
        read_json(
            &p,
            &["blob", "list", &connection_string(blob, queue), "dumps"]
        ),
        r#"{"blobs": []}"#
    );
}

#[tokio::test]
async fn azure_a_cancelled_upload_commits_nothing() {
    let p = match peers() {
        Some(p) => p,
        None => return,
    };
    let (_peer, blob, queue) = azurite(&p);
    let client = AzureBlobClient::new(azure_options(blob)).unwrap();
    let (reached, cancel) = tokio::sync::oneshot::channel();
    let source = Pattern::new(13, 20 * MIB).stalling_at(5 * MIB, reached);
    let err = client
        .upload_until(&artifact("cancelled.nettrace"), source, async {
            let _ = cancel.await;
        })
        .await
        .unwrap_err();
    assert!(matches!(err, EgressError::Cancelled), "{:?}", err);
    assert_eq!(
        read_json(
            &p,
            &["blob", "list", &connection_string(blob, queue), "dumps"]
        ),
        r#"{"blobs": []}"#
    );
}

#[tokio::test]
async fn azure_a_wrong_key_fails_with_the_service_code_and_no_key() {
    let p = match peers() {
        Some(p) => p,
        None => return,
    };
    let (_peer, blob, _queue) = azurite(&p);
    let wrong = "d3Jvbmcga2V5IHdyb25nIGtleSB3cm9uZyBrZXk=";
    let client = AzureBlobClient::new(AzureBlobOptions {
        account_key: Secret::new(wrong),
        ..azure_options(blob)
    })
    .unwrap();
    let err = client
        .upload(&artifact("x.dmp"), Pattern::new(9, 10))
        .await
        .unwrap_err();
    match &err {
        EgressError::Service { status, code, .. } => {
            assert_eq!(
                (*status, code.as_str()),
                (403, "AuthorizationFailure"),
                "{}",
                err
            )
        }
        other => panic!("{:?}", other),
    }
    assert!(!format!("{} {:?}", err, client).contains(wrong));
}

#[cfg(feature = "tls")]
#[tokio::test]
async fn azure_uploads_over_https_to_a_trusted_certificate_and_refuses_an_untrusted_one() {
    let p = match peers() {
        Some(p) => p,
        None => return,
    };
    let dir = std::env::temp_dir().join(format!("dsipc-egress-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    read_back(&p, &["cert", dir.to_str().unwrap()]);
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let (_peer, blob, queue) = azurite_with(&p, Some((&cert, &key)));
    let https = |trust: Trust| AzureBlobOptions {
        account_uri: format!("https://127.0.0.1:{}/{}", blob, AZURITE_ACCOUNT),
        trust,
        ..azure_options(blob)
    };
    let untrusted = AzureBlobClient::new(https(Trust::default())).unwrap();
    let err = untrusted
        .upload(&artifact("tls.nettrace"), Pattern::new(10, 10))
        .await
        .unwrap_err();
    assert!(
        matches!(err, EgressError::Tls { ref message, .. } if message.contains("UnknownIssuer")),
        "{:?}",
        err
    );
    let trusted = AzureBlobClient::new(https(Trust {
        extra_roots_pem: std::fs::read_to_string(dir.join("ca.pem")).unwrap(),
    }))
    .unwrap();
    let stored = trusted
        .upload(&artifact("tls.nettrace"), Pattern::new(11, 5 * MIB))
        .await
        .unwrap();
    assert_eq!(stored.blocks, 2);
    assert!(
        stored.blob_uri.starts_with("https://"),
        "{}",
        stored.blob_uri
    );
    let conn = connection_string(blob, queue).replace("http://", "https://");
    let ca = dir.join("ca.pem");
    let got = read_back_trusting(
        &p,
        Some(&ca),
        &["blob", "get", &conn, "dumps", "artifacts/tls.nettrace"],
    );
    assert!(
        got == expected(11, 5 * MIB),
        "the blob read over https differs"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
