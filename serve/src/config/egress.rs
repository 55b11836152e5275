//! `Egress` as serve uses it: each configured provider made into an [`Egress`] (for S3 and
//! Azure a client, its options checked now), so that a provider that cannot work stops
//! serve at start with the key named, not an operation later.

use std::path::PathBuf;
use std::sync::Arc;

use super::{AzureBlobEgressOptions, ConfigError, EgressOptions, S3EgressOptions, Secret};
use crate::egress::azure::{AzureBlobClient, AzureBlobOptions};
use crate::egress::s3::{S3Client, S3Options};
use crate::egress::EgressTarget;
use crate::Egress;

/// Every provider `egress` names, `FileSystem` first, then `AzureBlobStorage`, then
/// `S3Storage`; a name already taken (names are case-insensitive) is left out, as
/// dotnet-monitor keeps one provider per name.
pub fn egress_providers(egress: &EgressOptions) -> Result<Vec<Egress>, ConfigError> {
    let mut out: Vec<Egress> = Vec::new();
    let taken = |out: &[Egress], name: &str| out.iter().any(|e| e.name.eq_ignore_ascii_case(name));
    for (name, o) in &egress.file_system {
        if o.directory_path.is_empty() {
            return Err(ConfigError::Missing {
                key: format!("Egress:FileSystem:{}:DirectoryPath", name),
            });
        }
        if !taken(&out, name) {
            out.push(Egress {
                name: name.clone(),
                target: EgressTarget::FileSystem(PathBuf::from(&o.directory_path)),
            });
        }
    }
    for (name, o) in &egress.azure_blob_storage {
        if !taken(&out, name) {
            let (client, metadata) = azure(egress, name, o)?;
            out.push(Egress {
                name: name.clone(),
                target: EgressTarget::AzureBlob(Arc::new(client), metadata),
            });
        }
    }
    for (name, o) in &egress.s3_storage {
        if !taken(&out, name) {
            out.push(Egress {
                name: name.clone(),
                target: EgressTarget::S3(Arc::new(s3(name, o)?)),
            });
        }
    }
    Ok(out)
}

/// A setting serve does not offer, or options a client refused: the key named.
fn invalid(key: String, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key,
        source: None,
        message: message.into(),
    }
}

/// The secret given in place, or through `Egress:Properties` by its `*Name` setting.
fn secret(egress: &EgressOptions, given: &Option<Secret>, named: &Option<String>) -> Secret {
    given
        .as_ref()
        .or_else(|| named.as_deref().and_then(|n| egress.property(n)))
        .cloned()
        .unwrap_or_default()
}

fn azure(
    egress: &EgressOptions,
    name: &str,
    o: &AzureBlobEgressOptions,
) -> Result<(AzureBlobClient, Vec<(String, String)>), ConfigError> {
    let key = format!("Egress:AzureBlobStorage:{}", name);
    if o.managed_identity_client_id.is_some()
        || o.use_workload_identity_from_environment == Some(true)
    {
        return Err(invalid(
            key,
            "managed and workload identities are not offered by dsipc serve: give AccountKey(Name) or SharedAccessSignature(Name)",
        ));
    }
    let options = AzureBlobOptions {
        account_uri: o.account_uri.clone(),
        account_key: secret(egress, &o.account_key, &o.account_key_name),
        shared_access_signature: secret(
            egress,
            &o.shared_access_signature,
            &o.shared_access_signature_name,
        ),
        container_name: o.container_name.clone(),
        blob_prefix: o.blob_prefix.clone().unwrap_or_default(),
        queue_name: o.queue_name.clone().unwrap_or_default(),
        queue_account_uri: o.queue_account_uri.clone().unwrap_or_default(),
        queue_shared_access_signature: secret(
            egress,
            &o.queue_shared_access_signature,
            &o.queue_shared_access_signature_name,
        ),
        block_size: o.copy_buffer_size.map_or(0, |n| n.max(0) as usize),
        ..AzureBlobOptions::default()
    };
    let client = AzureBlobClient::new(options).map_err(|e| invalid(key.clone(), e.to_string()))?;
    // dotnet-monitor's Metadata: blob metadata key → the environment variable whose value
    // it takes (serve's environment; an unset variable is left out).
    let metadata = o
        .metadata
        .iter()
        .filter_map(|(k, var)| std::env::var(var).ok().map(|v| (k.clone(), v)))
        .collect();
    Ok((client, metadata))
}

fn s3(name: &str, o: &S3EgressOptions) -> Result<S3Client, ConfigError> {
    let key = format!("Egress:S3Storage:{}", name);
    if o.aws_profile_name.is_some() || o.aws_profile_path.is_some() {
        return Err(invalid(
            key,
            "AWS profiles are not offered by dsipc serve: give AccessKeyId and SecretAccessKey",
        ));
    }
    if o.use_kms_encryption == Some(true) {
        return Err(invalid(key, "KMS encryption is not offered by dsipc serve"));
    }
    let options = S3Options {
        endpoint: o.endpoint.clone().unwrap_or_default(),
        region: o.region_name.clone().unwrap_or_default(),
        bucket: o.bucket_name.clone(),
        access_key_id: o.access_key_id.clone().unwrap_or_default(),
        secret_access_key: o.secret_access_key.clone().unwrap_or_default(),
        force_path_style: o.force_path_style.unwrap_or(false),
        part_size: o.copy_buffer_size.map_or(0, |n| n.max(0) as usize),
        ..S3Options::default()
    };
    S3Client::new(options).map_err(|e| invalid(key, e.to_string()))
}
