//! S3 egress (dotnet-monitor's `S3Storage` provider): an artifact streamed to an object
//! named after it in a bucket, by PutObject when it fits in one part and by a multipart
//! upload otherwise, signed with SigV4; any failure aborts the multipart upload, so no
//! partial object is ever visible.

use std::time::{Duration, SystemTime};

use bytes::BytesMut;
use hyper::Method;
use tokio::io::AsyncRead;

use super::crypto::{sha256_hex, uri_encode, Utc};
use super::http::{self, send, service_error, xml_escape, xml_text, Call, Limits, Url};
use super::sigv4::{authorization, Scope, Signed};
use super::tls::{Connector, Trust};
use super::{check_metadata, fill, Artifact, EgressError, Secret};

/// S3 requires every part but the last to hold at least 5 MiB.
pub const MIN_PART_SIZE: usize = 5 * 1024 * 1024;
/// The default part size, 8 MiB: the memory one upload holds (one part at a time), and at
/// S3's limit of 10,000 parts an object of up to 78 GiB, more than any dump.
pub const DEFAULT_PART_SIZE: usize = 8 * 1024 * 1024;
/// The largest part size accepted, 64 MiB: a bound on the memory one upload may hold
/// whatever the configuration says.
pub const MAX_PART_SIZE: usize = 64 * 1024 * 1024;
/// S3's most parts in one multipart upload.
const MAX_PARTS: u64 = 10_000;

/// How to reach a bucket: dotnet-monitor's `S3Storage` options that this client uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Options {
    /// `Endpoint`: the service's URL (`http://127.0.0.1:9000` for an S3-compatible
    /// server). Empty: AWS's `https://s3.REGION.amazonaws.com` (which needs TLS).
    pub endpoint: String,
    /// `RegionName` (`us-east-1` when empty).
    pub region: String,
    /// `BucketName`.
    pub bucket: String,
    /// `AccessKeyId`.
    pub access_key_id: String,
    /// `SecretAccessKey`.
    pub secret_access_key: Secret,
    /// `ForcePathStyle`: address the bucket as the path's first segment rather than as a
    /// host name (always so for an IP address or `localhost` endpoint).
    pub force_path_style: bool,
    /// `CopyBufferSize`: the part size, [`MIN_PART_SIZE`]..=[`MAX_PART_SIZE`] (0:
    /// [`DEFAULT_PART_SIZE`]).
    pub part_size: usize,
    /// The bounds of each HTTP call.
    pub limits: Limits,
    /// The certificates trusted for an `https://` endpoint besides the public roots.
    pub trust: Trust,
}

impl Default for S3Options {
    fn default() -> S3Options {
        S3Options {
            endpoint: String::new(),
            region: String::new(),
            bucket: String::new(),
            access_key_id: String::new(),
            secret_access_key: Secret::new(""),
            force_path_style: false,
            part_size: 0,
            limits: Limits::default(),
            trust: Trust::default(),
        }
    }
}

/// Where an artifact was stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct S3Stored {
    /// The bucket.
    pub bucket: String,
    /// The object key.
    pub key: String,
    /// The artifact's length in bytes.
    pub size: u64,
    /// How many parts were sent (1 for a PutObject).
    pub parts: u32,
}

impl S3Stored {
    /// dotnet-monitor's resource id for an S3 artifact: `BucketName=B, Key=K`.
    pub fn resource_id(&self) -> String {
        format!("BucketName={}, Key={}", self.bucket, self.key)
    }
}

/// An S3 client for one bucket.
#[derive(Debug)]
pub struct S3Client {
    url: Url,
    path_style: bool,
    region: String,
    bucket: String,
    access_key_id: String,
    secret: Secret,
    part_size: usize,
    limits: Limits,
    connector: Connector,
}

impl S3Client {
    /// Checks `options` (a bucket, credentials, an `http://` endpoint, a part size in
    /// range) and makes a client.
    pub fn new(options: S3Options) -> Result<S3Client, EgressError> {
        let region = if options.region.trim().is_empty() {
            "us-east-1".to_string()
        } else {
            options.region.trim().to_string()
        };
        let endpoint = if options.endpoint.trim().is_empty() {
            format!("https://s3.{}.amazonaws.com", region)
        } else {
            options.endpoint.clone()
        };
        let url = Url::parse(&endpoint)?;
        if options.bucket.trim().is_empty() {
            return Err(EgressError::Options(
                "S3Storage: BucketName is required".into(),
            ));
        }
        if options.access_key_id.trim().is_empty() || options.secret_access_key.is_empty() {
            return Err(EgressError::Options(
                "S3Storage: AccessKeyId and SecretAccessKey are required (AWS profiles are \
                 not supported)"
                    .into(),
            ));
        }
        let part_size = match options.part_size {
            0 => DEFAULT_PART_SIZE,
            n if (MIN_PART_SIZE..=MAX_PART_SIZE).contains(&n) => n,
            n => {
                return Err(EgressError::Options(format!(
                    "S3Storage: CopyBufferSize {} is outside {}..={} (S3's smallest part, and \
                     the memory bound of one upload)",
                    n, MIN_PART_SIZE, MAX_PART_SIZE
                )))
            }
        };
        Ok(S3Client {
            path_style: options.force_path_style || url.is_ip_style(),
            url,
            region,
            bucket: options.bucket.trim().to_string(),
            access_key_id: options.access_key_id.trim().to_string(),
            secret: options.secret_access_key,
            part_size,
            limits: options.limits,
            connector: Connector::new(&options.trust)?,
        })
    }

    /// Streams `source` to the object `artifact.name`, creating the bucket if it does not
    /// exist (as dotnet-monitor does). Holds one part in memory at a time.
    pub async fn upload<R: AsyncRead + Unpin>(
        &self,
        artifact: &Artifact,
        source: R,
    ) -> Result<S3Stored, EgressError> {
        self.upload_until(artifact, source, std::future::pending())
            .await
    }

    /// [`S3Client::upload`], given up with [`EgressError::Cancelled`] when `cancel`
    /// finishes first (an operation's DELETE). Whatever ends it early, a started multipart
    /// upload is aborted before this returns: no part stays stored.
    pub async fn upload_until<R, C>(
        &self,
        artifact: &Artifact,
        source: R,
        cancel: C,
    ) -> Result<S3Stored, EgressError>
    where
        R: AsyncRead + Unpin,
        C: std::future::Future<Output = ()>,
    {
        let mut upload_id = None;
        let result = {
            let work = self.work(artifact, source, &mut upload_id);
            tokio::select! {
                r = work => r,
                () = cancel => Err(EgressError::Cancelled),
            }
        };
        if let (Err(_), Some(upload_id)) = (&result, upload_id) {
            // Nothing of the artifact may stay: the upload's parts are discarded. Its own
            // failure is not reported over the first one (the cause), and a bucket
            // lifecycle rule reaps what an unreachable endpoint keeps.
            let abort = self.call(
                Method::DELETE,
                &artifact.name,
                &[("uploadId", &upload_id)],
                Vec::new(),
                bytes::Bytes::new(),
            );
            let _ = self.send(&abort, "AbortMultipartUpload").await;
        }
        result
    }

    /// The upload itself; `upload_id` is set as soon as a multipart upload exists.
    async fn work<R: AsyncRead + Unpin>(
        &self,
        artifact: &Artifact,
        mut source: R,
        upload_id_out: &mut Option<String>,
    ) -> Result<S3Stored, EgressError> {
        check_metadata(&artifact.metadata)?;
        if artifact.name.is_empty() {
            return Err(EgressError::Options("the artifact has no name".into()));
        }
        self.ensure_bucket().await?;
        let key = artifact.name.clone();
        let mut object_headers = vec![(
            "content-type".to_string(),
            artifact.content_type().to_string(),
        )];
        for (k, v) in &artifact.metadata {
            object_headers.push((format!("x-amz-meta-{}", k.to_ascii_lowercase()), v.clone()));
        }
        let mut buf = BytesMut::new();
        fill(&mut source, &mut buf, self.part_size).await?;
        let stored = |size: u64, parts: u32| S3Stored {
            bucket: self.bucket.clone(),
            key: key.clone(),
            size,
            parts,
        };
        if buf.len() < self.part_size {
            // The whole artifact fits in one part: one PutObject.
            let size = buf.len() as u64;
            let call = self.call(Method::PUT, &key, &[], object_headers, buf.freeze());
            let answer = self.send(&call, "PutObject").await?;
            if answer.status != 200 {
                return Err(service_error("PutObject", &answer));
            }
            return Ok(stored(size, 1));
        }
        let create = self.call(
            Method::POST,
            &key,
            &[("uploads", "")],
            object_headers,
            bytes::Bytes::new(),
        );
        let answer = self.send(&create, "CreateMultipartUpload").await?;
        if answer.status != 200 {
            return Err(service_error("CreateMultipartUpload", &answer));
        }
        let upload_id = xml_text(&answer.body, "UploadId")
            .filter(|id| !id.is_empty())
            .ok_or_else(|| EgressError::Http {
                operation: "CreateMultipartUpload".into(),
                message: "the answer holds no UploadId".into(),
            })?;
        *upload_id_out = Some(upload_id.clone());
        let (size, parts) = self.parts(&key, &upload_id, buf, &mut source).await?;
        Ok(stored(size, parts))
    }

    /// Uploads `first` and the rest of `source` as parts, then completes the upload.
    async fn parts<R: AsyncRead + Unpin>(
        &self,
        key: &str,
        upload_id: &str,
        first: BytesMut,
        source: &mut R,
    ) -> Result<(u64, u32), EgressError> {
        let mut etags: Vec<String> = Vec::new();
        let mut size = 0u64;
        let mut buf = first;
        while !buf.is_empty() {
            let number = etags.len() as u64 + 1;
            if number > MAX_PARTS {
                return Err(EgressError::TooLarge {
                    limit: MAX_PARTS * self.part_size as u64,
                });
            }
            size += buf.len() as u64;
            let operation = format!("UploadPart {}", number);
            let n = number.to_string();
            let call = self.call(
                Method::PUT,
                key,
                &[("partNumber", &n), ("uploadId", upload_id)],
                Vec::new(),
                buf.freeze(),
            );
            let answer = self.send(&call, &operation).await?;
            drop(call); // the part's memory, before the next part is read
            if answer.status != 200 {
                return Err(service_error(&operation, &answer));
            }
            let etag = answer.header("etag").to_string();
            if etag.is_empty() {
                return Err(EgressError::Http {
                    operation,
                    message: "the answer holds no ETag".into(),
                });
            }
            etags.push(etag);
            buf = BytesMut::new();
            fill(source, &mut buf, self.part_size).await?;
        }
        let mut xml = String::from("<CompleteMultipartUpload>");
        for (i, etag) in etags.iter().enumerate() {
            xml.push_str(&format!(
                "<Part><PartNumber>{}</PartNumber><ETag>{}</ETag></Part>",
                i + 1,
                xml_escape(etag)
            ));
        }
        xml.push_str("</CompleteMultipartUpload>");
        let call = self.call(
            Method::POST,
            key,
            &[("uploadId", upload_id)],
            vec![("content-type".into(), "application/xml".into())],
            xml.into(),
        );
        // S3 assembles the object before it answers, which "could take several minutes"
        // (its documentation): a second more for each part than a small call gets (moto
        // took 31 s for 128 parts of 8 MiB, over the 30 s of `response`; the retry then
        // found no upload and failed an upload that had succeeded).
        let limits = Limits {
            response: self.limits.response + Duration::from_secs(etags.len() as u64),
            ..self.limits.clone()
        };
        let answer = self
            .send_within(&call, "CompleteMultipartUpload", &limits)
            .await?;
        // S3 may answer 200 and still fail, with an <Error> body.
        if answer.status != 200 || xml_text(&answer.body, "Code").is_some() {
            return Err(service_error("CompleteMultipartUpload", &answer));
        }
        Ok((size, etags.len() as u32))
    }

    /// Makes the bucket if a HEAD says it does not exist (dotnet-monitor's
    /// `DoesS3BucketExist` then `PutBucket`).
    async fn ensure_bucket(&self) -> Result<(), EgressError> {
        let head = self.call(Method::HEAD, "", &[], Vec::new(), bytes::Bytes::new());
        let answer = self.send(&head, "HeadBucket").await?;
        match answer.status {
            200 | 403 => return Ok(()), // 403: it exists, or we may not look: try the upload
            404 => {}
            _ => return Err(service_error("HeadBucket", &answer)),
        }
        let body = if self.region == "us-east-1" {
            bytes::Bytes::new()
        } else {
            format!(
                "<CreateBucketConfiguration><LocationConstraint>{}</LocationConstraint></CreateBucketConfiguration>",
                xml_escape(&self.region)
            )
            .into()
        };
        let put = self.call(Method::PUT, "", &[], Vec::new(), body);
        let answer = self.send(&put, "CreateBucket").await?;
        match answer.status {
            200 | 409 => Ok(()), // 409: made meanwhile (BucketAlreadyOwnedByYou)
            _ => Err(service_error("CreateBucket", &answer)),
        }
    }

    /// A call on `key` (the bucket itself when empty).
    fn call(
        &self,
        method: Method,
        key: &str,
        query: &[(&str, &str)],
        headers: Vec<(String, String)>,
        body: bytes::Bytes,
    ) -> Call {
        let mut path = self.url.path.clone();
        if self.path_style {
            path.push('/');
            path.push_str(&uri_encode(&self.bucket, false));
        }
        path.push('/');
        path.push_str(&uri_encode(key, true));
        let mut pq = path;
        for (i, (k, v)) in query.iter().enumerate() {
            pq.push(if i == 0 { '?' } else { '&' });
            pq.push_str(&uri_encode(k, false));
            if !v.is_empty() {
                pq.push('=');
                pq.push_str(&uri_encode(v, false));
            }
        }
        Call {
            method,
            path_and_query: pq,
            headers,
            body,
        }
    }

    fn host(&self) -> String {
        if self.path_style {
            self.url.authority()
        } else {
            format!("{}.{}", self.bucket, self.url.authority())
        }
    }

    async fn send(&self, call: &Call, operation: &str) -> Result<http::Answer, EgressError> {
        self.send_within(call, operation, &self.limits).await
    }

    /// [`send`](Self::send) within `limits`.
    async fn send_within(
        &self,
        call: &Call,
        operation: &str,
        limits: &Limits,
    ) -> Result<http::Answer, EgressError> {
        let payload = sha256_hex(&call.body);
        let host = self.host();
        let sign = |call: &Call| -> Vec<(String, String)> {
            let date = Utc::from_system(SystemTime::now()).amz();
            let mut headers = call.headers.clone();
            headers.push(("x-amz-date".into(), date.clone()));
            headers.push(("x-amz-content-sha256".into(), payload.clone()));
            let mut signed = headers.clone();
            signed.push(("host".into(), host.clone()));
            let (path, query) = split_query(&call.path_and_query);
            let req = Signed {
                method: call.method.as_str(),
                path,
                query: &query,
                headers: &signed,
                payload_sha256: &payload,
            };
            let scope = Scope {
                amz_date: &date,
                region: &self.region,
                service: "s3",
            };
            let auth = authorization(&req, &scope, &self.access_key_id, self.secret.expose());
            let mut extra = vec![
                ("x-amz-date".to_string(), date),
                ("x-amz-content-sha256".to_string(), payload.clone()),
                ("authorization".to_string(), auth),
            ];
            if !self.path_style {
                extra.push(("host".into(), host.clone()));
            }
            extra
        };
        let mut target = self.url.clone();
        if !self.path_style {
            // Virtual-hosted style: the connection still goes to the endpoint's host.
            target.path.clear();
        }
        send(&self.connector, &target, call, limits, operation, &sign).await
    }
}

/// The path and the decoded query pairs of an encoded `path?query`.
fn split_query(pq: &str) -> (&str, Vec<(String, String)>) {
    let (path, query) = match pq.find('?') {
        Some(i) => (&pq[..i], &pq[i + 1..]),
        None => (pq, ""),
    };
    let pairs = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect();
    (path, pairs)
}

/// Decodes `%XX` escapes (of text this module encoded itself).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> S3Options {
        S3Options {
            endpoint: "http://127.0.0.1:9000".into(),
            bucket: "dumps".into(),
            access_key_id: "AKID".into(),
            secret_access_key: Secret::new("TOPSECRET"),
            ..S3Options::default()
        }
    }

    #[test]
    fn s3_options_are_checked_and_never_show_the_secret() {
        let c = S3Client::new(options()).unwrap();
        assert!(c.path_style);
        assert!(!format!("{:?}", c).contains("TOPSECRET"));
        let mut o = options();
        o.part_size = 1024;
        assert!(matches!(S3Client::new(o), Err(EgressError::Options(_))));
        let mut o = options();
        o.bucket.clear();
        assert!(matches!(S3Client::new(o), Err(EgressError::Options(_))));
        // No endpoint: AWS's, over https.
        let mut o = options();
        o.endpoint.clear();
        o.region = "eu-west-1".into();
        match S3Client::new(o) {
            #[cfg(feature = "tls")]
            Ok(c) => {
                assert!(!c.path_style);
                assert_eq!(c.host(), "dumps.s3.eu-west-1.amazonaws.com");
                assert_eq!(c.url.to_string(), "https://s3.eu-west-1.amazonaws.com");
            }
            #[cfg(not(feature = "tls"))]
            Err(EgressError::TlsNotBuiltIn { .. }) => {}
            other => panic!("{:?}", other),
        }
    }

    #[test]
    fn s3_calls_address_path_style_and_virtual_hosted_buckets() {
        let c = S3Client::new(options()).unwrap();
        let call = c.call(
            Method::PUT,
            "a b.nettrace",
            &[("partNumber", "1"), ("uploadId", "x/y")],
            vec![],
            bytes::Bytes::new(),
        );
        assert_eq!(
            call.path_and_query,
            "/dumps/a%20b.nettrace?partNumber=1&uploadId=x%2Fy"
        );
        assert_eq!(c.host(), "127.0.0.1:9000");
        let (p, q) = split_query(&call.path_and_query);
        assert_eq!(p, "/dumps/a%20b.nettrace");
        assert_eq!(q[1], ("uploadId".to_string(), "x/y".to_string()));
        let mut o = options();
        o.endpoint = "http://s3.example.com".into();
        let c = S3Client::new(o).unwrap();
        assert_eq!(c.host(), "dumps.s3.example.com");
        assert_eq!(
            c.call(
                Method::POST,
                "k",
                &[("uploads", "")],
                vec![],
                bytes::Bytes::new()
            )
            .path_and_query,
            "/k?uploads"
        );
    }
}
