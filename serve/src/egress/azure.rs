//! Azure Blob Storage egress (dotnet-monitor's `AzureBlobStorage` provider): an artifact
//! streamed to the block blob `[BlobPrefix/]NAME` of a container, by Put Blob when it fits
//! in one block and by Put Block then Put Block List otherwise, with Shared Key (the
//! account key) or a SAS; then, when configured, a queue message naming the blob. Blocks
//! are committed only when the whole artifact is sent: a failed upload leaves no blob
//! visible (its uncommitted blocks are discarded by the service within a week).

use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use hyper::Method;
use tokio::io::AsyncRead;

use super::crypto::{base64, base64_decode, uri_encode, Utc};
use super::http::{self, send, service_error, xml_escape, Call, Limits, Url};
use super::sharedkey::shared_key;
use super::tls::{Connector, Trust};
use super::{check_metadata, fill, Artifact, EgressError, Secret};

/// The default block size, 4 MiB: the memory one upload holds (one block at a time); at
/// Azure's 50,000 blocks per blob that stores up to 195 GiB.
pub const DEFAULT_BLOCK_SIZE: usize = 4 * 1024 * 1024;
/// The largest block size accepted, 64 MiB: a bound on one upload's memory whatever the
/// configuration says (Azure itself takes up to 4000 MiB).
pub const MAX_BLOCK_SIZE: usize = 64 * 1024 * 1024;
/// Azure's most blocks in one blob.
const MAX_BLOCKS: u64 = 50_000;
/// The REST API version spoken (x-ms-version): one every Azure Storage account and
/// Azurite 3.x serve.
const VERSION: &str = "2021-08-06";

/// How to reach a container: dotnet-monitor's `AzureBlobStorage` options that this client
/// uses (`Metadata`'s environment lookups are made by the caller, into
/// [`Artifact::metadata`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AzureBlobOptions {
    /// `AccountUri`: `http://ACCOUNT.blob.core.windows.net` or, for an emulator,
    /// `http://127.0.0.1:10000/ACCOUNT`.
    pub account_uri: String,
    /// `AccountKey` (base64), for Shared Key authorization.
    pub account_key: Secret,
    /// `SharedAccessSignature`: a SAS token, used instead of the key when given.
    pub shared_access_signature: Secret,
    /// `ContainerName` (`$root` for the root container).
    pub container_name: String,
    /// `BlobPrefix`: the blob is `BlobPrefix/NAME`.
    pub blob_prefix: String,
    /// `QueueName`: the queue told the blob's name after each upload (with
    /// `queue_account_uri`).
    pub queue_name: String,
    /// `QueueAccountUri`.
    pub queue_account_uri: String,
    /// `QueueSharedAccessSignature` (else the SAS above, else the account key).
    pub queue_shared_access_signature: Secret,
    /// `CopyBufferSize`: the block size, 1..=[`MAX_BLOCK_SIZE`] (0: [`DEFAULT_BLOCK_SIZE`]).
    pub block_size: usize,
    /// The bounds of each HTTP call.
    pub limits: Limits,
    /// The certificates trusted for `https://` URIs besides the public roots.
    pub trust: Trust,
}

/// Where an artifact was stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AzureStored {
    /// The blob's URI without a query (dotnet-monitor's resource id: never the SAS).
    pub blob_uri: String,
    /// The blob's name in its container.
    pub blob_name: String,
    /// The artifact's length in bytes.
    pub size: u64,
    /// How many blocks were sent (1 for a Put Blob).
    pub blocks: u32,
    /// Why the queue message could not be sent, if it could not (dotnet-monitor logs this
    /// and keeps the upload a success, as here).
    pub queue_error: Option<String>,
}

/// How requests to one account are authorized.
#[derive(Clone, Debug)]
enum Auth {
    /// Shared Key: the account's name and its decoded key.
    Key { account: String, key: Secret },
    /// A SAS token appended to every request's query.
    Sas(Secret),
}

/// An account's endpoint and authorization.
#[derive(Clone, Debug)]
struct Account {
    url: Url,
    auth: Auth,
    connector: Connector,
}

/// An Azure Blob Storage client for one container (and its optional queue).
#[derive(Debug)]
pub struct AzureBlobClient {
    blob: Account,
    queue: Option<(Account, String)>,
    container: String,
    prefix: String,
    block_size: usize,
    limits: Limits,
}

impl AzureBlobClient {
    /// Checks `options` (an `http://` account URI, a container, a key or SAS, a block size
    /// in range) and makes a client.
    pub fn new(options: AzureBlobOptions) -> Result<AzureBlobClient, EgressError> {
        if options.container_name.trim().is_empty() {
            return Err(EgressError::Options(
                "AzureBlobStorage: ContainerName is required".into(),
            ));
        }
        let connector = Connector::new(&options.trust)?;
        let blob = account(
            &options.account_uri,
            &options.shared_access_signature,
            &options.account_key,
            "AccountUri",
            &connector,
        )?;
        let queue = match (options.queue_name.trim(), options.queue_account_uri.trim()) {
            ("", _) | (_, "") => None,
            (name, uri) => {
                let sas = if options.queue_shared_access_signature.is_empty() {
                    &options.shared_access_signature
                } else {
                    &options.queue_shared_access_signature
                };
                Some((
                    account(
                        uri,
                        sas,
                        &options.account_key,
                        "QueueAccountUri",
                        &connector,
                    )?,
                    name.to_string(),
                ))
            }
        };
        let block_size = match options.block_size {
            0 => DEFAULT_BLOCK_SIZE,
            n if n <= MAX_BLOCK_SIZE => n,
            n => {
                return Err(EgressError::Options(format!(
                "AzureBlobStorage: CopyBufferSize {} is over {} (the memory bound of one upload)",
                n, MAX_BLOCK_SIZE
            )))
            }
        };
        Ok(AzureBlobClient {
            blob,
            queue,
            container: options.container_name.trim().to_string(),
            prefix: options.blob_prefix,
            block_size,
            limits: options.limits,
        })
    }

    /// The blob name of `artifact`: `BlobPrefix/NAME`, or `NAME` without a prefix.
    pub fn blob_name(&self, artifact: &Artifact) -> String {
        if self.prefix.is_empty() {
            artifact.name.clone()
        } else {
            format!("{}/{}", self.prefix, artifact.name)
        }
    }

    /// Streams `source` to the container, creating it if absent (as dotnet-monitor does),
    /// then sends the queue message if configured. Holds one block in memory at a time.
    pub async fn upload<R: AsyncRead + Unpin>(
        &self,
        artifact: &Artifact,
        source: R,
    ) -> Result<AzureStored, EgressError> {
        self.upload_until(artifact, source, std::future::pending())
            .await
    }

    /// [`AzureBlobClient::upload`], given up with [`EgressError::Cancelled`] when `cancel`
    /// finishes first (an operation's DELETE): the block list is then never committed, so
    /// no blob appears (the service discards uncommitted blocks within a week).
    pub async fn upload_until<R, C>(
        &self,
        artifact: &Artifact,
        source: R,
        cancel: C,
    ) -> Result<AzureStored, EgressError>
    where
        R: AsyncRead + Unpin,
        C: std::future::Future<Output = ()>,
    {
        tokio::select! {
            r = self.work(artifact, source) => r,
            () = cancel => Err(EgressError::Cancelled),
        }
    }

    async fn work<R: AsyncRead + Unpin>(
        &self,
        artifact: &Artifact,
        mut source: R,
    ) -> Result<AzureStored, EgressError> {
        check_metadata(&artifact.metadata)?;
        if artifact.name.is_empty() {
            return Err(EgressError::Options("the artifact has no name".into()));
        }
        self.ensure_container().await?;
        let name = self.blob_name(artifact);
        let path = format!(
            "{}/{}/{}",
            self.blob.url.path,
            uri_encode(&self.container, false),
            uri_encode(&name, true)
        );
        let mut meta: Vec<(String, String)> = artifact
            .metadata
            .iter()
            .map(|(k, v)| (format!("x-ms-meta-{}", k.to_ascii_lowercase()), v.clone()))
            .collect();
        let mut buf = BytesMut::new();
        fill(&mut source, &mut buf, self.block_size).await?;
        let (size, blocks) = if buf.len() < self.block_size {
            // The whole artifact fits in one block: one Put Blob.
            let size = buf.len() as u64;
            let mut headers = vec![
                ("x-ms-blob-type".to_string(), "BlockBlob".to_string()),
                (
                    "content-type".to_string(),
                    artifact.content_type().to_string(),
                ),
            ];
            headers.append(&mut meta);
            let answer = self
                .blob_call(Method::PUT, &path, &[], headers, buf.freeze(), "PutBlob")
                .await?;
            if answer.status != 201 {
                return Err(service_error("PutBlob", &answer));
            }
            (size, 1)
        } else {
            self.blocks(&path, artifact, meta, buf, &mut source).await?
        };
        let queue_error = match &self.queue {
            Some((queue, queue_name)) => self
                .tell_queue(queue, queue_name, &name)
                .await
                .err()
                .map(|e| e.to_string()),
            None => None,
        };
        Ok(AzureStored {
            blob_uri: format!(
                "{}",
                Url {
                    path,
                    query: String::new(),
                    ..self.blob.url.clone()
                }
            ),
            blob_name: name,
            size,
            blocks,
            queue_error,
        })
    }

    /// Sends `first` and the rest of `source` as blocks, then commits them.
    async fn blocks<R: AsyncRead + Unpin>(
        &self,
        path: &str,
        artifact: &Artifact,
        mut meta: Vec<(String, String)>,
        first: BytesMut,
        source: &mut R,
    ) -> Result<(u64, u32), EgressError> {
        let mut ids: Vec<String> = Vec::new();
        let mut size = 0u64;
        let mut buf = first;
        while !buf.is_empty() {
            let number = ids.len() as u64;
            if number >= MAX_BLOCKS {
                return Err(EgressError::TooLarge {
                    limit: MAX_BLOCKS * self.block_size as u64,
                });
            }
            // Every id of a blob has the same length (Azure's rule): a fixed-width number.
            let id = base64(format!("dsipc-block-{:06}", number).as_bytes());
            size += buf.len() as u64;
            let operation = format!("PutBlock {}", number + 1);
            let answer = self
                .blob_call(
                    Method::PUT,
                    path,
                    &[("comp", "block"), ("blockid", &id)],
                    Vec::new(),
                    buf.freeze(),
                    &operation,
                )
                .await?;
            if answer.status != 201 {
                return Err(service_error(&operation, &answer));
            }
            ids.push(id);
            buf = BytesMut::new();
            fill(source, &mut buf, self.block_size).await?;
        }
        let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
        for id in &ids {
            xml.push_str(&format!("<Latest>{}</Latest>", xml_escape(id)));
        }
        xml.push_str("</BlockList>");
        let mut headers = vec![
            ("content-type".to_string(), "application/xml".to_string()),
            (
                "x-ms-blob-content-type".to_string(),
                artifact.content_type().to_string(),
            ),
        ];
        headers.append(&mut meta);
        let answer = self
            .blob_call(
                Method::PUT,
                path,
                &[("comp", "blocklist")],
                headers,
                xml.into(),
                "PutBlockList",
            )
            .await?;
        if answer.status != 201 {
            return Err(service_error("PutBlockList", &answer));
        }
        Ok((size, ids.len() as u32))
    }

    /// Creates the container unless it exists (409) or a SAS may not look (403).
    async fn ensure_container(&self) -> Result<(), EgressError> {
        let path = format!(
            "{}/{}",
            self.blob.url.path,
            uri_encode(&self.container, false)
        );
        let answer = self
            .blob_call(
                Method::PUT,
                &path,
                &[("restype", "container")],
                Vec::new(),
                Bytes::new(),
                "CreateContainer",
            )
            .await?;
        match answer.status {
            201 | 409 => Ok(()),
            403 if matches!(self.blob.auth, Auth::Sas(_)) => Ok(()),
            _ => Err(service_error("CreateContainer", &answer)),
        }
    }

    /// Puts dotnet-monitor's message on the queue: the blob's name, base64-encoded (its
    /// `QueueMessageEncoding.Base64`), creating the queue if absent.
    async fn tell_queue(
        &self,
        queue: &Account,
        name: &str,
        blob_name: &str,
    ) -> Result<(), EgressError> {
        let path = format!("{}/{}", queue.url.path, uri_encode(name, false));
        let answer = call(
            queue,
            &self.limits,
            Method::PUT,
            &path,
            &[],
            Vec::new(),
            Bytes::new(),
            "CreateQueue",
        )
        .await?;
        match answer.status {
            201 | 204 => {}
            403 if matches!(queue.auth, Auth::Sas(_)) => {}
            _ => return Err(service_error("CreateQueue", &answer)),
        }
        let body = format!(
            "<QueueMessage><MessageText>{}</MessageText></QueueMessage>",
            base64(blob_name.as_bytes())
        );
        let path = format!("{}/messages", path);
        let headers = vec![("content-type".to_string(), "application/xml".to_string())];
        let answer = call(
            queue,
            &self.limits,
            Method::POST,
            &path,
            &[],
            headers,
            body.into(),
            "PutMessage",
        )
        .await?;
        if answer.status != 201 {
            return Err(service_error("PutMessage", &answer));
        }
        Ok(())
    }

    async fn blob_call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
        headers: Vec<(String, String)>,
        body: Bytes,
        operation: &str,
    ) -> Result<http::Answer, EgressError> {
        call(
            &self.blob,
            &self.limits,
            method,
            path,
            query,
            headers,
            body,
            operation,
        )
        .await
    }
}

/// The account of `uri`, authorized by `sas` if given, else by `key`.
fn account(
    uri: &str,
    sas: &Secret,
    key: &Secret,
    option: &str,
    connector: &Connector,
) -> Result<Account, EgressError> {
    if uri.trim().is_empty() {
        return Err(EgressError::Options(format!(
            "AzureBlobStorage: {} is required",
            option
        )));
    }
    let mut url = Url::parse(uri)?;
    // An emulator's URI names the account in its path; a service's in its host name.
    let name = if url.is_ip_style() {
        let first = url
            .path
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap_or_default()
            .to_string();
        url.path = format!("/{}", first);
        first
    } else {
        url.path.clear();
        url.host.split('.').next().unwrap_or_default().to_string()
    };
    if name.is_empty() {
        return Err(EgressError::Options(format!(
            "AzureBlobStorage: {} names no storage account",
            option
        )));
    }
    let auth = if !sas.is_empty() {
        Auth::Sas(Secret::new(sas.expose().trim().trim_start_matches('?')))
    } else if !url.query.is_empty() {
        // A SAS given in the URI itself.
        Auth::Sas(Secret::new(url.query.clone()))
    } else if !key.is_empty() {
        if base64_decode(key.expose()).is_none() {
            return Err(EgressError::Options(
                "AzureBlobStorage: AccountKey is not base64".into(),
            ));
        }
        Auth::Key {
            account: name,
            key: key.clone(),
        }
    } else {
        return Err(EgressError::Options(
            "AzureBlobStorage: AccountKey or SharedAccessSignature is required (managed \
             identities are not supported)"
                .into(),
        ));
    };
    url.query.clear();
    Ok(Account {
        url,
        auth,
        connector: connector.clone(),
    })
}

/// Sends one call to `account`, authorized by its SAS or signed with Shared Key.
#[allow(clippy::too_many_arguments)]
async fn call(
    account: &Account,
    limits: &Limits,
    method: Method,
    path: &str,
    query: &[(&str, &str)],
    mut headers: Vec<(String, String)>,
    body: Bytes,
    operation: &str,
) -> Result<http::Answer, EgressError> {
    headers.push(("x-ms-version".into(), VERSION.into()));
    headers.push(("content-length".into(), body.len().to_string()));
    let mut pq = path.to_string();
    let mut sep = '?';
    for (k, v) in query {
        pq.push(sep);
        sep = '&';
        pq.push_str(&format!(
            "{}={}",
            uri_encode(k, false),
            uri_encode(v, false)
        ));
    }
    if let Auth::Sas(sas) = &account.auth {
        pq.push(sep);
        pq.push_str(sas.expose());
    }
    let call = Call {
        method,
        path_and_query: pq,
        headers,
        body,
    };
    let decoded: Vec<(String, String)> = query
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let sign = |call: &Call| -> Vec<(String, String)> {
        let date = Utc::from_system(SystemTime::now()).http_date();
        let mut extra = vec![("x-ms-date".to_string(), date)];
        if let Auth::Key { account, key } = &account.auth {
            let mut all = call.headers.clone();
            all.extend(extra.iter().cloned());
            let key = base64_decode(key.expose()).unwrap_or_default();
            let auth = shared_key(account, &key, call.method.as_str(), path, &decoded, &all);
            extra.push(("authorization".into(), auth));
        }
        extra
    };
    send(
        &account.connector,
        &account.url,
        &call,
        limits,
        operation,
        &sign,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    const AZURITE_KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

    #[test]
    fn accounts_come_from_the_host_or_the_emulator_path() {
        let key = Secret::new(AZURITE_KEY);
        let c = Connector::new(&Trust::default()).unwrap();
        let a = account(
            "http://127.0.0.1:10000/devstoreaccount1",
            &Secret::default(),
            &key,
            "AccountUri",
            &c,
        )
        .unwrap();
        assert_eq!(a.url.path, "/devstoreaccount1");
        assert!(matches!(a.auth, Auth::Key { ref account, .. } if account == "devstoreaccount1"));
        let a = account(
            "http://acct.blob.core.windows.net/?sv=x&sig=S",
            &Secret::default(),
            &key,
            "AccountUri",
            &c,
        )
        .unwrap();
        assert!(matches!(a.auth, Auth::Sas(ref s) if s.expose() == "sv=x&sig=S"));
        assert_eq!(a.url.path, "");
        assert!(account(
            "http://acct.blob.core.windows.net",
            &Secret::default(),
            &Secret::new("not base64!"),
            "AccountUri",
            &c
        )
        .is_err());
    }

    #[test]
    fn blob_names_take_the_prefix() {
        let c = AzureBlobClient::new(AzureBlobOptions {
            account_uri: "http://127.0.0.1:10000/devstoreaccount1".into(),
            account_key: Secret::new(AZURITE_KEY),
            container_name: "dumps".into(),
            blob_prefix: "artifacts".into(),
            ..AzureBlobOptions::default()
        })
        .unwrap();
        let a = Artifact {
            name: "x.dmp".into(),
            ..Artifact::default()
        };
        assert_eq!(c.blob_name(&a), "artifacts/x.dmp");
        assert!(!format!("{:?}", c).contains(AZURITE_KEY));
    }
}
