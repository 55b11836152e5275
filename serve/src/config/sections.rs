//! dotnet-monitor's configuration sections as types (its option classes' names:
//! `Egress:FileSystem:NAME:DirectoryPath`...), bound from the merged tree.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{ConfigError, Secret, TimeSpan};

/// `Egress`: named egress providers, and `Properties` that `*Name` settings refer to.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct EgressOptions {
    /// `Egress:FileSystem:NAME`.
    #[serde(default)]
    pub file_system: BTreeMap<String, FileSystemEgressOptions>,
    /// `Egress:AzureBlobStorage:NAME`.
    #[serde(default)]
    pub azure_blob_storage: BTreeMap<String, AzureBlobEgressOptions>,
    /// `Egress:S3Storage:NAME`.
    #[serde(default, rename = "S3Storage")]
    pub s3_storage: BTreeMap<String, S3EgressOptions>,
    /// `Egress:Properties:NAME`: secrets the providers name (`AccountKeyName`...).
    #[serde(default)]
    pub properties: BTreeMap<String, Secret>,
}

impl EgressOptions {
    /// The secret an `*Name` setting names (`Properties` keys are case-insensitive).
    pub fn property(&self, name: &str) -> Option<&Secret> {
        self.properties
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }

    /// Every `*Name` names a property that is there.
    pub(crate) fn check_names(&self) -> Result<(), ConfigError> {
        for (provider, o) in &self.azure_blob_storage {
            for (field, name) in [
                ("AccountKeyName", &o.account_key_name),
                ("SharedAccessSignatureName", &o.shared_access_signature_name),
                (
                    "QueueSharedAccessSignatureName",
                    &o.queue_shared_access_signature_name,
                ),
            ] {
                if let Some(n) = name {
                    if self.property(n).is_none() {
                        return Err(ConfigError::Invalid {
                            key: format!("Egress:AzureBlobStorage:{}:{}", provider, field),
                            source: None,
                            message: format!(
                                "names {:?}, which Egress:Properties does not hold",
                                n
                            ),
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

/// `Egress:FileSystem:NAME`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct FileSystemEgressOptions {
    /// Where artifacts go.
    pub directory_path: String,
    /// Where they are written first, then moved into `DirectoryPath`.
    pub intermediate_directory_path: Option<String>,
    /// The copy buffer's size in bytes.
    pub copy_buffer_size: Option<i32>,
}

/// `Egress:AzureBlobStorage:NAME`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct AzureBlobEgressOptions {
    /// The blob service's URI (`https://ACCOUNT.blob.core.windows.net`).
    pub account_uri: String,
    /// The container (`$root` for the root container).
    pub container_name: String,
    /// A path prefix for the blobs.
    pub blob_prefix: Option<String>,
    /// The copy buffer's size in bytes.
    pub copy_buffer_size: Option<i32>,
    /// The account key.
    pub account_key: Option<Secret>,
    /// The `Egress:Properties` key holding the account key.
    pub account_key_name: Option<String>,
    /// A shared access signature.
    pub shared_access_signature: Option<Secret>,
    /// The `Egress:Properties` key holding the SAS.
    pub shared_access_signature_name: Option<String>,
    /// A managed identity's client id.
    pub managed_identity_client_id: Option<String>,
    /// Workload identity from the environment.
    pub use_workload_identity_from_environment: Option<bool>,
    /// A queue told of each blob.
    pub queue_name: Option<String>,
    /// The queue service's URI.
    pub queue_account_uri: Option<String>,
    /// The queue's SAS.
    pub queue_shared_access_signature: Option<Secret>,
    /// The `Egress:Properties` key holding the queue's SAS.
    pub queue_shared_access_signature_name: Option<String>,
    /// Blob metadata: metadata key to environment variable name.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

/// `Egress:S3Storage:NAME` (dotnet-monitor's S3 extension).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct S3EgressOptions {
    /// The endpoint (empty for AWS; `http://localhost:9000` for MinIO).
    pub endpoint: Option<String>,
    /// The bucket.
    pub bucket_name: String,
    /// The access key id.
    pub access_key_id: Option<String>,
    /// The secret access key.
    pub secret_access_key: Option<Secret>,
    /// An AWS profile's name.
    pub aws_profile_name: Option<String>,
    /// An AWS profile file.
    pub aws_profile_path: Option<String>,
    /// The region (the signing region when `Endpoint` is set).
    pub region_name: Option<String>,
    /// How long a returned pre-signed URL is valid (1 minute to 1 day).
    pub pre_signed_url_expiry: Option<TimeSpan>,
    /// Path-style addressing (`ENDPOINT/BUCKET/KEY`).
    pub force_path_style: Option<bool>,
    /// The copy buffer's size in bytes (at least 5 MB: multipart's smallest part).
    pub copy_buffer_size: Option<i32>,
    /// Server-side encryption with KMS.
    pub use_kms_encryption: Option<bool>,
    /// The KMS key's ARN.
    pub kms_encryption_key: Option<String>,
}

/// `DefaultProcess`: the process every filter matches.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct DefaultProcessOptions {
    /// `DefaultProcess:Filters:0`, ...
    #[serde(default)]
    pub filters: Vec<ProcessFilter>,
}

/// One process filter: `Key`/`Value`/`MatchType`, or the shorthand `ProcessName: NAME`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct ProcessFilter {
    /// What is matched (default `ProcessId`).
    pub key: Option<ProcessFilterKey>,
    /// The value matched.
    pub value: Option<String>,
    /// How (default `Exact`).
    pub match_type: Option<ProcessFilterType>,
    /// Shorthand: `ProcessId: PID`.
    pub process_id: Option<String>,
    /// Shorthand: `ProcessName: NAME`.
    pub process_name: Option<String>,
    /// Shorthand: `CommandLine: TEXT`.
    pub command_line: Option<String>,
}

/// What a process filter matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub enum ProcessFilterKey {
    /// The process id.
    ProcessId,
    /// The process name.
    ProcessName,
    /// The command line.
    CommandLine,
}

/// How a process filter matches (case-insensitively either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub enum ProcessFilterType {
    /// The whole value.
    Exact,
    /// A substring.
    Contains,
}

impl ProcessFilter {
    /// (key, value, match type), the shorthand resolved; `None` when no value is given.
    pub fn resolved(&self) -> Option<(ProcessFilterKey, &str, ProcessFilterType)> {
        let ty = self.match_type.unwrap_or(ProcessFilterType::Exact);
        if let Some(v) = &self.value {
            return Some((self.key.unwrap_or(ProcessFilterKey::ProcessId), v, ty));
        }
        [
            (ProcessFilterKey::ProcessId, &self.process_id),
            (ProcessFilterKey::ProcessName, &self.process_name),
            (ProcessFilterKey::CommandLine, &self.command_line),
        ]
        .iter()
        .find_map(|(k, v)| v.as_deref().map(|v| (*k, v, ty)))
    }
}

/// `Metrics`: the Prometheus endpoint.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct MetricsOptions {
    /// Whether `/metrics` is served and collected.
    pub enabled: Option<bool>,
    /// Its URLs (`;`-separated).
    pub endpoints: Option<String>,
    /// Samples kept per metric.
    pub metric_count: Option<i32>,
    /// Whether System.Runtime, Kestrel and Hosting are collected.
    pub include_default_providers: Option<bool>,
    /// The sampling interval (dotnet-monitor 6's setting; `GlobalCounter:IntervalSeconds`
    /// wins when both are set).
    pub update_interval_seconds: Option<i32>,
    /// Extra EventCounter providers.
    #[serde(default)]
    pub providers: Vec<MetricProvider>,
    /// Extra meters.
    #[serde(default)]
    pub meters: Vec<MetricMeter>,
}

/// `Metrics:Providers:N`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct MetricProvider {
    /// The provider.
    pub provider_name: String,
    /// Its counters (all when empty).
    #[serde(default)]
    pub counter_names: Vec<String>,
}

/// `Metrics:Meters:N`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct MetricMeter {
    /// The meter.
    pub meter_name: String,
    /// Its instruments (all when empty).
    #[serde(default)]
    pub instrument_names: Vec<String>,
}

/// `GlobalCounter`: counter sessions' settings.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct GlobalCounterOptions {
    /// The sampling interval in seconds (default 5).
    pub interval_seconds: Option<f64>,
    /// Histograms tracked at most.
    pub max_histograms: Option<i32>,
    /// Time series tracked at most.
    pub max_time_series: Option<i32>,
    /// Per-provider intervals.
    #[serde(default)]
    pub providers: BTreeMap<String, GlobalProviderOptions>,
}

/// `GlobalCounter:Providers:NAME`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct GlobalProviderOptions {
    /// This provider's interval in seconds.
    pub interval_seconds: Option<f64>,
}

/// `Authentication`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct AuthenticationOptions {
    /// `Authentication:MonitorApiKey`.
    pub monitor_api_key: Option<MonitorApiKeyOptions>,
    /// `Authentication:AzureAd` (read, not acted on).
    pub azure_ad: Option<serde_json::Value>,
}

/// `Authentication:MonitorApiKey`: dotnet-monitor's JWT key (`Subject`, `PublicKey`), or
/// the hash of a key (`ApiKeyHash`, `ApiKeyHashType`), which `dsipc serve generatekey`
/// writes and serve verifies.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct MonitorApiKeyOptions {
    /// The JWT's subject.
    pub subject: Option<String>,
    /// The JWT's public key (a JWK, base64url).
    pub public_key: Option<Secret>,
    /// The key's hash (64 hex digits).
    pub api_key_hash: Option<Secret>,
    /// The hash's algorithm (`SHA256`).
    pub api_key_hash_type: Option<String>,
}

/// `Storage`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct StorageOptions {
    /// Where runtimes write dumps before they are sent.
    pub dump_temp_folder: Option<String>,
    /// A folder shared with the runtimes.
    pub default_shared_path: Option<String>,
    /// Where shared libraries are put for the runtimes.
    pub shared_library_path: Option<String>,
}

/// `DiagnosticPort` (or `"DiagnosticPort": "PATH"`, listen mode on PATH).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
#[non_exhaustive]
pub struct DiagnosticPortOptions {
    /// Connect (to runtimes' own ports) or Listen (runtimes connect to serve).
    pub connection_mode: Option<DiagnosticPortConnectionMode>,
    /// The listening socket's path (Listen).
    pub endpoint_name: Option<String>,
    /// Runtimes connected at most (Listen).
    pub max_connections: Option<i32>,
    /// Whether a stale socket file is removed at start.
    pub delete_endpoint_on_startup: Option<bool>,
}

/// `DiagnosticPort:ConnectionMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub enum DiagnosticPortConnectionMode {
    /// serve connects to each runtime's own socket.
    Connect,
    /// Runtimes connect to serve's socket.
    Listen,
}
