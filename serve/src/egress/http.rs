//! The HTTP/1.1 client both egress clients send through: hyper 1.x over a tokio TCP
//! connection (TLS by [`super::tls`] for `https://`), one connection per request (a part is megabytes: a new connection costs
//! little beside it, and no pool can go stale), with bounded waits, bounded retries and a
//! bounded read of each answer.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::tls::Connector;
use super::EgressError;

/// The bounds of one upload's HTTP calls.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long a TCP connection may take (10 s by default: a reachable endpoint connects
    /// in milliseconds; beyond seconds it is down or filtered).
    pub connect: Duration,
    /// How long a call may take from its first byte sent to its answer read, for a call
    /// without a body (30 s by default: a storage service answers a small call in well
    /// under a second, and a few seconds under load).
    pub response: Duration,
    /// The slowest upload rate tolerated, in bytes per second: a call with a body may take
    /// `response` plus its length at this rate (256 KiB/s by default, so an 8 MiB part may
    /// take 30 + 32 s: a link slower than that would take over an hour for 1 GiB).
    pub min_rate: u64,
    /// How many times a call is tried in all (3 by default): a refused connection, a
    /// timeout, a broken exchange or a 5xx answer (500, 503 SlowDown, 503 ServerBusy are
    /// the services' "try again") is retried after `backoff`, doubled each time; any other
    /// answer is final. So a call fails within `attempts` x (`connect` + its time bound)
    /// plus the backoffs.
    pub attempts: u32,
    /// The first wait before a retry (250 ms by default, then 500 ms...).
    pub backoff: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            connect: Duration::from_secs(10),
            response: Duration::from_secs(30),
            min_rate: 256 * 1024,
            attempts: 3,
            backoff: Duration::from_millis(250),
        }
    }
}

impl Limits {
    /// The time bound of one try of a call sending `len` bytes.
    pub fn call_bound(&self, len: usize) -> Duration {
        self.response + Duration::from_secs(len as u64 / self.min_rate.max(1))
    }
}

/// How much of an answer's body is read: 64 KiB. The answers read are small XML documents
/// (an upload id, an error's code and message, a short list); anything longer is cut,
/// so a misbehaving endpoint cannot grow an upload's memory.
const MAX_ANSWER: usize = 64 * 1024;

/// An `http://` or `https://` endpoint: host, port and base path (no trailing `/`), and
/// its query (a SAS token), kept apart so that it is never shown.
#[derive(Clone, PartialEq, Eq)]
pub struct Url {
    /// `https://`.
    pub tls: bool,
    /// The host name or address (IPv6 without brackets).
    pub host: String,
    /// The port (80, or 443 for `https://`, when not given).
    pub port: u16,
    /// The path, without a trailing `/` (empty for the root).
    pub path: String,
    /// The query after `?`, if any (a SAS token: never displayed).
    pub query: String,
}

impl std::fmt::Debug for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The query may be a SAS token: shown as its presence only.
        write!(
            f,
            "Url({}{})",
            self,
            if self.query.is_empty() {
                ""
            } else {
                "?:REDACTED:"
            }
        )
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{}://{}{}", scheme, self.authority(), self.path)
    }
}

impl Url {
    /// Parses `http[s]://host[:port][/path][?query]`; without the `tls` feature an
    /// `https://` URL is [`EgressError::TlsNotBuiltIn`]; anything else
    /// [`EgressError::Options`].
    pub fn parse(text: &str) -> Result<Url, EgressError> {
        let text = text.trim();
        let lower = text.to_ascii_lowercase();
        let (tls, rest) = if lower.starts_with("http://") {
            (false, &text[7..])
        } else if lower.starts_with("https://") {
            if !cfg!(feature = "tls") {
                let shown = text.split('?').next().unwrap_or_default().to_string();
                return Err(EgressError::TlsNotBuiltIn { endpoint: shown });
            }
            (true, &text[8..])
        } else {
            return Err(EgressError::Options(format!(
                "{:?} is not an http:// URL",
                text.split('?').next().unwrap_or_default()
            )));
        };
        let (rest, query) = match rest.find('?') {
            Some(i) => (&rest[..i], rest[i + 1..].to_string()),
            None => (rest, String::new()),
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].trim_end_matches('/').to_string()),
            None => (rest, String::new()),
        };
        let bad = || EgressError::Options(format!("{:?}: no valid host[:port]", authority));
        let default_port = if tls { 443 } else { 80 };
        if authority.contains('@') {
            return Err(EgressError::Options(
                "credentials in a URL are not accepted: use the options' keys".into(),
            ));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6.find(']').ok_or_else(bad)?;
            let port = match &v6[end + 1..] {
                "" => default_port,
                p => p
                    .strip_prefix(':')
                    .and_then(|p| p.parse().ok())
                    .ok_or_else(bad)?,
            };
            (v6[..end].to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p.parse().map_err(|_| bad())?),
                None => (authority.to_string(), default_port),
            }
        };
        if host.is_empty() {
            return Err(bad());
        }
        Ok(Url {
            tls,
            host,
            port,
            path,
            query,
        })
    }

    /// `host[:port]` as the `Host` header says it (the port omitted when the scheme's).
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == if self.tls { 443 } else { 80 } {
            host
        } else {
            format!("{}:{}", host, self.port)
        }
    }

    /// Whether the host is an IP address or `localhost` (an emulator's path-style address:
    /// the account or bucket is the path's first segment).
    pub fn is_ip_style(&self) -> bool {
        self.host.parse::<std::net::IpAddr>().is_ok() || self.host.eq_ignore_ascii_case("localhost")
    }
}

/// One HTTP call: the method, the path and query (already encoded), the headers and the
/// body (a part: `Bytes`, so a retry resends it without a copy).
#[derive(Clone, Debug)]
pub(crate) struct Call {
    pub method: hyper::Method,
    pub path_and_query: String,
    pub headers: Vec<(String, String)>,
    pub body: Bytes,
}

/// An answer: its status, headers and body (at most [`MAX_ANSWER`] bytes of it).
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl Answer {
    /// A header's value as text, or empty.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }
}

/// Sends `call` to `url`'s host, retrying as [`Limits`] says; `sign` is asked for the
/// headers of each try (a retry re-signs: a signature carries its time).
pub(crate) async fn send(
    connector: &Connector,
    url: &Url,
    call: &Call,
    limits: &Limits,
    operation: &str,
    sign: &(dyn Fn(&Call) -> Vec<(String, String)> + Sync),
) -> Result<Answer, EgressError> {
    let mut backoff = limits.backoff;
    let attempts = limits.attempts.max(1);
    let mut attempt = 1;
    loop {
        let extra = sign(call);
        let result = once(connector, url, call, &extra, limits, operation).await;
        let retry = match &result {
            Ok(a) => a.status >= 500,
            Err(EgressError::Connect { .. })
            | Err(EgressError::Timeout { .. })
            | Err(EgressError::Http { .. }) => true,
            Err(_) => false,
        };
        if !retry || attempt >= attempts {
            return result;
        }
        attempt += 1;
        tokio::time::sleep(backoff).await;
        backoff *= 2;
    }
}

async fn once(
    connector: &Connector,
    url: &Url,
    call: &Call,
    extra: &[(String, String)],
    limits: &Limits,
    operation: &str,
) -> Result<Answer, EgressError> {
    let address = format!("{}:{}", url.host, url.port);
    let stream = match tokio::time::timeout(
        limits.connect,
        TcpStream::connect((url.host.as_str(), url.port)),
    )
    .await
    {
        Ok(Ok(s)) => s,
        Ok(Err(error)) => return Err(EgressError::Connect { address, error }),
        Err(_) => {
            return Err(EgressError::Timeout {
                operation: format!("{} (connecting to {})", operation, address),
                seconds: limits.connect.as_secs(),
            })
        }
    };
    let _ = stream.set_nodelay(true);
    #[cfg(feature = "tls")]
    if url.tls {
        // The handshake is part of connecting: the same bound.
        let handshake = connector.handshake(&url.host, stream);
        let tls = match tokio::time::timeout(limits.connect, handshake).await {
            Ok(r) => r?,
            Err(_) => {
                return Err(EgressError::Timeout {
                    operation: format!("{} (TLS handshake with {})", operation, address),
                    seconds: limits.connect.as_secs(),
                })
            }
        };
        return exchange(TokioIo::new(tls), url, call, extra, limits, operation).await;
    }
    let _ = connector; // plain HTTP: the connector has nothing to do
    exchange(TokioIo::new(stream), url, call, extra, limits, operation).await
}

/// One request and its answer over `io` (a TCP or TLS stream), within the call's bound.
async fn exchange<T>(
    io: T,
    url: &Url,
    call: &Call,
    extra: &[(String, String)],
    limits: &Limits,
    operation: &str,
) -> Result<Answer, EgressError>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let bound = limits.call_bound(call.body.len());
    let exchange = async {
        let http = |e: hyper::Error| EgressError::Http {
            operation: operation.to_string(),
            message: e.to_string(),
        };
        let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(http)?;
        // The connection is driven beside the request; it ends when the answer is read and
        // the sender dropped (or with the timeout below, which drops both).
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut builder = Request::builder()
            .method(call.method.clone())
            .uri(call.path_and_query.as_str());
        // The endpoint's authority, unless the signer names another host (an S3 bucket
        // addressed virtual-hosted style).
        if !call
            .headers
            .iter()
            .chain(extra)
            .any(|(k, _)| k.eq_ignore_ascii_case("host"))
        {
            builder = builder.header("host", url.authority());
        }
        for (k, v) in call.headers.iter().chain(extra) {
            builder = builder.header(k.as_str(), v.as_str());
        }
        let request =
            builder
                .body(Full::new(call.body.clone()))
                .map_err(|e| EgressError::Http {
                    operation: operation.to_string(),
                    message: format!("request not built: {}", e),
                })?;
        let response = sender.send_request(request).await.map_err(http)?;
        let status = response.status().as_u16();
        let (parts, mut body) = response.into_parts();
        let mut read = BytesMut::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.map_err(http)?.into_data() {
                let room = MAX_ANSWER - read.len();
                read.extend_from_slice(&data[..data.len().min(room)]);
                if read.len() >= MAX_ANSWER {
                    break;
                }
            }
        }
        drop(sender);
        driver.abort();
        Ok(Answer {
            status,
            headers: parts.headers,
            body: read.freeze(),
        })
    };
    match tokio::time::timeout(bound, exchange).await {
        Ok(r) => r,
        Err(_) => Err(EgressError::Timeout {
            operation: operation.to_string(),
            seconds: bound.as_secs(),
        }),
    }
}

/// The text of the first `<tag>...</tag>` in `xml` (the services' answers are flat enough:
/// `UploadId`, `Code`, `Message`), with XML's five entities decoded.
pub(crate) fn xml_text(xml: &[u8], tag: &str) -> Option<String> {
    let xml = String::from_utf8_lossy(xml);
    let open = format!("<{}>", tag);
    let close = format!("</{}>", tag);
    let start = xml.find(&open)? + open.len();
    let end = start + xml[start..].find(&close)?;
    Some(xml_unescape(&xml[start..end]))
}

fn xml_unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// `s` escaped for XML text.
pub(crate) fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// The [`EgressError::Service`] of an error answer: the code and message of its XML body
/// (S3 and Azure both answer `<Error><Code>..</Code><Message>..</Message></Error>`), or
/// Azure's `x-ms-error-code` header for a body-less answer (a HEAD, a 409).
pub(crate) fn service_error(operation: &str, answer: &Answer) -> EgressError {
    let code = xml_text(&answer.body, "Code")
        .unwrap_or_else(|| answer.header("x-ms-error-code").to_string());
    let message = xml_text(&answer.body, "Message")
        .map(|m| m.lines().next().unwrap_or_default().to_string())
        .unwrap_or_default();
    EgressError::Service {
        operation: operation.to_string(),
        status: answer.status,
        code,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_port_path_and_a_hidden_query() {
        let u = Url::parse("http://127.0.0.1:10000/devstoreaccount1/?sv=1&sig=SECRET").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("127.0.0.1", 10000));
        assert_eq!(u.path, "/devstoreaccount1");
        assert_eq!(u.query, "sv=1&sig=SECRET");
        assert!(u.is_ip_style());
        assert!(!format!("{} {:?}", u, u).contains("SECRET"));
        let u = Url::parse("http://acct.blob.core.windows.net").unwrap();
        assert_eq!((u.port, u.path.as_str()), (80, ""));
        assert!(!u.is_ip_style());
        assert_eq!(
            Url::parse("http://[::1]:9000/").unwrap().authority(),
            "[::1]:9000"
        );
    }

    #[cfg(feature = "tls")]
    #[test]
    fn https_urls_default_to_port_443() {
        let u = Url::parse("https://acct.blob.core.windows.net/?sig=SECRET").unwrap();
        assert!(u.tls);
        assert_eq!(
            (u.port, u.authority().as_str()),
            (443, "acct.blob.core.windows.net")
        );
        assert_eq!(u.to_string(), "https://acct.blob.core.windows.net");
        assert_eq!(Url::parse("https://h:8443").unwrap().authority(), "h:8443");
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn https_urls_are_a_typed_error_without_their_query() {
        match Url::parse("https://acct.blob.core.windows.net/?sig=SECRET") {
            Err(EgressError::TlsNotBuiltIn { endpoint }) => {
                assert_eq!(endpoint, "https://acct.blob.core.windows.net/")
            }
            other => panic!("{:?}", other),
        }
    }

    #[test]
    fn other_schemes_and_bad_authorities_are_refused() {
        assert!(matches!(
            Url::parse("ftp://x"),
            Err(EgressError::Options(_))
        ));
        assert!(matches!(
            Url::parse("http://:80"),
            Err(EgressError::Options(_))
        ));
        assert!(matches!(
            Url::parse("http://u:p@h/"),
            Err(EgressError::Options(_))
        ));
    }

    #[test]
    fn error_answers_give_code_and_message() {
        let a = Answer {
            status: 404,
            headers: hyper::HeaderMap::new(),
            body: Bytes::from_static(
                b"<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>The bucket &amp; all</Message></Error>",
            ),
        };
        assert_eq!(
            service_error("PutObject", &a).to_string(),
            "PutObject failed with HTTP 404 NoSuchBucket: The bucket & all"
        );
    }
}
