//! What a remote's URL and options may hold, checked before anything records them (`dsv
//! remote add`, `dsv clone`, a replay of the ref log): a scheme dsv can open, and no
//! credential anywhere (credentials belong in the environment or a profile, never in the
//! catalog or on a remote). The remote crate (`dsv::remote`) re-exports both checks.

use std::collections::BTreeMap;

use crate::error::{Error, Result};

/// Checks a remote URL: its scheme must be one dsv can open.
///
/// # Errors
/// [`Error::InvalidRemote`] naming what is wrong.
pub fn check_url(url: &str) -> Result<()> {
    let invalid = |reason: &str| Error::InvalidRemote {
        what: "URL",
        value: url.to_string(),
        reason: reason.to_string(),
    };
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| {
            invalid("expected SCHEME://…, for example s3://bucket/prefix, or a local path such as /srv/remote or ./remote (file://)")
        })?;
    if crate::redact::has_userinfo(url) {
        return Err(invalid(
            "the URL holds a user name or password; credentials are never stored in the store, set them in the environment",
        ));
    }
    if let Some(what) = crate::redact::credentials_in(url) {
        return Err(invalid(&format!(
            "{what}; credentials are never stored in the store, set them in the environment (AWS_*, AZURE_*, GOOGLE_*) or a profile"
        )));
    }
    match scheme {
        "s3" | "s3a" | "gs" | "az" | "abfs" | "abfss" => {
            if rest.split('/').next().unwrap_or("").is_empty() {
                return Err(invalid("the bucket (or container) name is missing"));
            }
            Ok(())
        }
        "file" => {
            if !rest.starts_with('/') {
                return Err(invalid(
                    "a file:// URL needs an absolute path: file:///path",
                ));
            }
            Ok(())
        }
        _ => Err(invalid(
            "unsupported scheme; use s3://, gs://, az:// or file://",
        )),
    }
}

/// Checks `--option` settings: no credentials (they belong in the environment, never in the
/// catalog or on a remote). A key is parsed the way object_store parses it (every alias:
/// `master_key` and `azure_storage_master_key` are the Azure account key) and refused by
/// what it configures, for any backend; a value holding a URL with a user or password
/// (`aws_endpoint`, `proxy_url`) is refused too.
///
/// # Errors
/// [`Error::InvalidRemote`] naming the key.
pub fn check_options(options: &BTreeMap<String, String>) -> Result<()> {
    for (key, value) in options {
        let reason = if is_secret_key(key) {
            "credentials are never stored in the store; set them in the environment (AWS_*, AZURE_*, GOOGLE_*) or a profile"
        } else if crate::redact::has_userinfo(value) {
            "the value is a URL with a user name or password; credentials are never stored in the store, set them in the environment"
        } else if crate::redact::credentials_in(value).is_some() {
            "the value is a URL whose query holds a signature, credential or token; credentials are never stored in the store, set them in the environment"
        } else {
            continue;
        };
        return Err(Error::InvalidRemote {
            what: "option",
            value: key.clone(),
            reason: reason.into(),
        });
    }
    Ok(())
}

/// True when object_store reads `key` (in any case, under any alias, for any backend) as a
/// credential: an access key, secret, session or bearer token, SAS, client secret, service
/// account key, or customer-provided encryption key.
fn is_secret_key(key: &str) -> bool {
    use object_store::aws::AmazonS3ConfigKey as S3;
    use object_store::azure::AzureConfigKey as Azure;
    use object_store::gcp::GoogleConfigKey as Gcs;
    let key = key.trim().to_ascii_lowercase();
    // S3EncryptionConfigKey is not exported: compare with the parsed canonical key.
    let sse_customer_key = "aws_sse_customer_key_base64".parse::<S3>().ok();
    let s3 = key.parse::<S3>().ok().is_some_and(|parsed| {
        matches!(parsed, S3::AccessKeyId | S3::SecretAccessKey | S3::Token)
            || Some(&parsed) == sse_customer_key.as_ref()
    });
    let azure = key.parse::<Azure>().ok().is_some_and(|parsed| {
        matches!(
            parsed,
            Azure::AccessKey
                | Azure::ClientSecret
                | Azure::SasKey
                | Azure::Token
                | Azure::FabricSessionToken
                | Azure::EncryptionKey
        )
    });
    let gcs = key
        .parse::<Gcs>()
        .ok()
        .is_some_and(|parsed| matches!(parsed, Gcs::ServiceAccountKey | Gcs::BearerToken));
    // No ClientConfigKey (the settings every backend shares, `aws_proxy_url` and the like)
    // names a credential; a proxy URL's password is caught by `has_userinfo` on its value.
    s3 || azure || gcs
}
