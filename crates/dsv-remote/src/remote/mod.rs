//! Remotes: object storage (S3, Azure Blob, GCS, a local directory) holding a store's packs and
//! refs, reached through the `object_store` crate.
//!
//! Layout under the remote's URL (see `docs/format.md`, "Remote layout"):
//!
//! ```text
//! packs/<pack id>.pack            a pack, byte for byte as in a local store
//! packs/<pack id>.idx             its tail (index + trailer); written after the pack, so its
//!                                 presence means the pack is complete
//! refs/heads/<dataset>            "<version id>\n": the dataset's head
//! refs/tags/<dataset>/<tag>       "<version id>\n": a tag
//! format, marks/<pack id>, clock  remote garbage collection (`dsv gc --remote`): see [`collect`]
//! ```
//!
//! Packs and indexes are content-addressed and written with create-only puts (an existing key
//! is success). Refs move by compare-and-swap: a conditional put (`If-Match` on the ETag the
//! writer read, or `If-None-Match: *` for a new ref), so of two writers racing, one loses and
//! is told so. A local directory has no conditional put in `object_store`; there dsv holds an
//! exclusive lock on `refs.lock` (in the remote's directory) around a check of the ETag and
//! an atomic rename.
//!
//! Credentials come from the environment as `object_store` reads it (`AWS_*`, `AZURE_*`,
//! `GOOGLE_*`) and, for S3, from the AWS profile files as the AWS CLI reads them (see
//! [`aws_profile`]; only where a front end set [`aws_profile::set_source`]), never from the
//! catalog. Transient failures (a 5xx, a reset, a timeout) are retried by `object_store`
//! with exponential backoff, under the policy of `retry_config`; a re-run of an
//! interrupted transfer sends only what is still missing, because every object it sent is
//! content-addressed. Reads from a cloud remote are also bounded by its stall timeout
//! ([`stall_timeout`], retries included): a read that stalls fails at once, not retried,
//! and goes on to the next remote in read order; the only or last remote waits longer
//! (`last_stall_timeout`).
//!
//! # The backend
//!
//! `Remote::open` builds an `object_store` client for the remote's URL: `AmazonS3Builder`
//! (with `S3ConditionalPut::ETagMatch`, so conditional puts send `If-Match` /
//! `If-None-Match`), `MicrosoftAzureBuilder` or `GoogleCloudStorageBuilder`, each
//! `from_env()` then `with_url`, then the remote's stored `--option` settings; or
//! `LocalFileSystem` for `file://`. For S3, the AWS profile (`remote::aws_profile`) goes in
//! between `from_env()` and the URL, below the environment: the library parses the profile
//! files (a pure `resolve` over their texts, read bounded to 1 MiB) but never looks at `HOME`
//! or `AWS_PROFILE` itself; the front ends (the CLI, the Python package) gather those and
//! hand them over once with `aws_profile::set_source`, a process-wide setting like the
//! environment `from_env` reads. The URL's path becomes a `PrefixStore`. Credentials come
//! only from the environment and the AWS profile files
//! (`docs/cli.md#remotes-and-credentials`); a URL that carries one (a password, or a
//! presigned URL's or SAS's signature, credential or token in its query:
//! `redact::credentials_in`) is refused by `check_url`, `check_options` (in a value) and
//! `cloud_backend`, so it is never recorded in the catalog, the ref log or a version's
//! source. `crates/dsv-format/src/redact.rs` is the one rule for showing URLs: `redact::url` replaces a
//! password and every secret-bearing parameter's value by `REDACTED`, `redact::text` does so
//! for every URL in a message; `Error`'s messages that hold a URL use it, and the CLI's
//! `report_error` applies it again to each message, cause and hint. A tokio runtime with
//! two worker threads drives the asynchronous client; the operations themselves are
//! synchronous and wait with `block_on`. Parallel requests are streams of futures, `jobs` in
//! flight (`--jobs`, default 8, `DEFAULT_JOBS`). Every request is counted for the reports'
//! `transfer.requests`. A failed request becomes `Error::Remote` (remote, what dsv was doing,
//! the backend's error).

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion, WriteMultipart,
};

pub mod aws_profile;
pub mod collect;
mod copy;

pub use collect::{ListedPack, RemoteFormat, guard_pack, mark_key};
pub use copy::CopyCounts;

use crate::catalog::RemoteRecord;
use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;
use crate::stall::{Ended, STALL_BYTES, StallWatch};

/// Packs of this size or more are uploaded in parts (multipart upload), several parts in
/// flight at once, in bytes. A full pack (the ingest target is 32 MiB) goes in parts.
pub(crate) const MULTIPART_THRESHOLD: u64 = 32 * 1024 * 1024;
/// Size of one part of a multipart upload, in bytes (S3's minimum is 5 MiB).
pub(crate) const PART_SIZE: usize = 8 * 1024 * 1024;
/// Parts of one multipart upload in flight at once.
pub(crate) const PARTS_IN_FLIGHT: usize = 4;
/// Default number of requests in flight.
pub const DEFAULT_JOBS: usize = 8;
/// The longest ref object dsv reads, in bytes (64 KiB; a ref holds 65). A longer one is
/// refused as corrupt without being downloaded.
pub(crate) const MAX_REF_LEN: u64 = 64 * 1024;

/// A remote URL as given, with a local path (`/srv/dsv-remote`, `./remote`, `../x`: no
/// `SCHEME://`) turned into the `file://` URL of its absolute path, as git accepts a path
/// for a remote. Anything else is returned as it is, for [`check_url`] to judge.
pub fn url_from_path(url: &str) -> String {
    let looks_like_path = !url.contains("://")
        && (url.starts_with('/')
            || url.starts_with("./")
            || url.starts_with("../")
            || url == "."
            || url == "..");
    if !looks_like_path {
        return url.to_string();
    }
    let absolute = std::path::absolute(url).unwrap_or_else(|_| std::path::PathBuf::from(url));
    // Lexically without `.` and `..`, so the URL names the directory plainly.
    let mut clean = std::path::PathBuf::new();
    for component in absolute.components() {
        match component {
            std::path::Component::ParentDir => {
                clean.pop();
            }
            std::path::Component::CurDir => {}
            other => clean.push(other),
        }
    }
    format!("file://{}", clean.display())
}

pub use crate::remote_url::{check_options, check_url};

/// True when `text` is (or holds) a URL with a user name or password:
/// `scheme://user:password@host/…`.
pub fn has_userinfo(text: &str) -> bool {
    crate::redact::has_userinfo(text)
}

/// The remote options dsv reads itself rather than give to `object_store`, which has no
/// configuration key for them: `max_retries` (a count, 0 for none) and `retry_timeout` (a
/// duration such as `30s`, `500ms` or `2m`: no retry starts after it, counted from a
/// request's first try), see [`retry_config`]; and `stall_timeout` (a duration), see
/// [`stall_timeout`].
pub(crate) const RETRY_OPTIONS: [&str; 3] = ["max_retries", "retry_timeout", "stall_timeout"];

/// How long a read from a cloud remote may go without an answer unless the remote's
/// `stall_timeout` option says otherwise: 5 seconds. See [`stall_timeout`].
pub(crate) const DEFAULT_REMOTE_STALL_TIMEOUT: std::time::Duration =
    std::time::Duration::from_secs(5);

/// The stall timeout of a cloud remote's reads (GET, ranged GET, HEAD, LIST): a read fails
/// as stalled when fewer than [`crate::stall::STALL_BYTES`] (1 KiB) of its answer arrived
/// in this long, from the request's start (so the first byte, connecting and
/// `object_store`'s retries included) and then in every window of this length (a listing
/// counts each entry as that much). A stalled read is not retried: the read goes on to
/// the next remote in read order at once (see `dsv::transfer::fallback`). This bound holds
/// only while another remote remains to ask ([`Remote::set_others_remain`]); the only or
/// last remote gets `last_stall_timeout` (30 s by default) instead, as it has nothing
/// to fall back to. Uploads are not bounded by it (an upload's answer comes after its
/// last byte). `DEFAULT_REMOTE_STALL_TIMEOUT` unless the `stall_timeout` option (a
/// duration, `0s` for none) says otherwise.
///
/// # Errors
/// [`Error::InvalidRemote`] when the option's value does not parse.
pub fn stall_timeout(options: &BTreeMap<String, String>) -> Result<Option<std::time::Duration>> {
    let Some(value) = options.get("stall_timeout") else {
        return Ok(Some(DEFAULT_REMOTE_STALL_TIMEOUT));
    };
    let duration = parse_duration(value).ok_or_else(|| Error::InvalidRemote {
        what: "option",
        value: "stall_timeout".to_string(),
        reason: "expected a duration with its unit: 500ms, 5s, 1m (0s for none)".to_string(),
    })?;
    Ok((!duration.is_zero()).then_some(duration))
}

/// The request timeout `object_store` uses unless the `timeout` option says otherwise: 30 s.
pub(crate) const DEFAULT_REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The stall timeout of a cloud remote's reads when no other remote remains to ask (the
/// only remote, or the last in read order): the larger of `stall` (the [`stall_timeout`])
/// and the request timeout (the `timeout` option, [`DEFAULT_REQUEST_TIMEOUT`] unless set).
/// With nothing to fall back to, a slow answer (a server under load, `object_store`
/// retrying a 503, a first credential lookup) is waited for; a stalled only remote still
/// fails in about that long rather than after every retry.
pub(crate) fn last_stall_timeout(
    stall: std::time::Duration,
    options: &BTreeMap<String, String>,
) -> std::time::Duration {
    let request = options
        .get("timeout")
        .and_then(|value| parse_duration(value))
        .unwrap_or(DEFAULT_REQUEST_TIMEOUT);
    stall.max(request)
}

/// How many times a failed request is retried unless the remote's `max_retries` option says
/// otherwise: `object_store`'s default.
pub(crate) const DEFAULT_MAX_RETRIES: usize = 10;

/// How long after a request's first try a retry may still start, unless the remote's
/// `retry_timeout` option says otherwise: `object_store`'s default, 3 minutes.
pub(crate) const DEFAULT_RETRY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(180);

/// The retry policy of a cloud remote. `object_store` retries a request that failed with a
/// connection error or reset, a 5xx, 429 or 408 status, or (for reads) a timeout, waiting
/// with exponential backoff and jitter (100 ms doubling up to 15 s); a GET whose body stops
/// part-way (a reset, a close before the declared length, a stall past the request
/// `timeout`) is resumed with a ranged GET of the rest, under the same count. Everything a
/// backoff waits for is bounded by [`DEFAULT_MAX_RETRIES`] and [`DEFAULT_RETRY_TIMEOUT`],
/// or the `max_retries` and `retry_timeout` options. How long one try may take is
/// `object_store`'s `timeout` option (30 s by default, from the connection to the body's
/// last byte) and `connect_timeout` (5 s); `read_timeout` (none by default) bounds a stall
/// between two reads.
///
/// # Errors
/// [`Error::InvalidRemote`] naming the option whose value does not parse.
pub(crate) fn retry_config(
    options: &BTreeMap<String, String>,
) -> Result<object_store::RetryConfig> {
    let invalid = |key: &str, reason: &str| Error::InvalidRemote {
        what: "option",
        value: key.to_string(),
        reason: reason.to_string(),
    };
    let mut retry = object_store::RetryConfig {
        max_retries: DEFAULT_MAX_RETRIES,
        retry_timeout: DEFAULT_RETRY_TIMEOUT,
        ..Default::default()
    };
    if let Some(value) = options.get("max_retries") {
        retry.max_retries = value
            .trim()
            .parse()
            .map_err(|_| invalid("max_retries", "expected a count of retries, 0 or more"))?;
    }
    if let Some(value) = options.get("retry_timeout") {
        retry.retry_timeout = parse_duration(value).ok_or_else(|| {
            invalid(
                "retry_timeout",
                "expected a duration with its unit: 500ms, 30s, 2m, 1h",
            )
        })?;
    }
    Ok(retry)
}

/// A duration as `500ms`, `30s`, `1.5s`, `2m` or `1h` (one number, one unit).
fn parse_duration(text: &str) -> Option<std::time::Duration> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let seconds = match unit.trim() {
        "ms" => number / 1000.0,
        "s" | "sec" | "secs" => number,
        "m" | "min" | "mins" => number * 60.0,
        "h" => number * 3600.0,
        _ => return None,
    };
    std::time::Duration::try_from_secs_f64(seconds).ok()
}

/// Builds the `object_store` backend of a cloud URL (`s3://`, `s3a://`, `gs://`, `az://`,
/// `abfs://`, `abfss://`) with settings from the environment (`AWS_*`, `AZURE_*`,
/// `GOOGLE_*`), for S3 the AWS profile below them ([`aws_profile`]), and `options`
/// (object_store configuration keys, and dsv's [`RETRY_OPTIONS`]) above all; returns it
/// with the URL's path below the bucket ("" for none). The backend addresses the whole
/// bucket, and retries as [`retry_config`] says.
///
/// # Errors
/// [`Error::InvalidRemote`] for a URL or option the backend rejects (or a retry option
/// whose value does not parse); the errors of
/// [`aws_profile::AwsProfileSource::load`]; [`Error::AwsProfileUnsupported`] when the
/// profile's credentials are of a kind dsv cannot use and the environment gives none.
pub(crate) fn cloud_backend(
    url: &str,
    options: &BTreeMap<String, String>,
) -> Result<(Arc<dyn ObjectStore>, String)> {
    cloud_backend_parts(url, options).map(|(store, path, _)| (store, path))
}

/// [`cloud_backend`], with, for S3, what a server-side copy from another bucket needs.
fn cloud_backend_parts(
    url: &str,
    options: &BTreeMap<String, String>,
) -> Result<(Arc<dyn ObjectStore>, String, Option<copy::S3Account>)> {
    let mut account = None;
    let invalid = |e: object_store::Error| Error::InvalidRemote {
        what: "URL",
        value: url.to_string(),
        reason: e.to_string(),
    };
    // Credentials come from the environment, never from the URL (nor are they recorded
    // with it: an import records its source's URL).
    if let Some(what) = crate::redact::credentials_in(url) {
        return Err(Error::InvalidRemote {
            what: "URL",
            value: url.to_string(),
            reason: format!(
                "{what}; set credentials in the environment (AWS_*, AZURE_*, GOOGLE_*) or a profile"
            ),
        });
    }
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let retry = retry_config(options)?;
    stall_timeout(options)?;
    // The rest are object_store's keys, given to the builder as they are.
    let options: BTreeMap<String, String> = options
        .iter()
        .filter(|(key, _)| !RETRY_OPTIONS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let store: Arc<dyn ObjectStore> = match scheme {
        "s3" | "s3a" => {
            let mut builder = object_store::aws::AmazonS3Builder::from_env();
            if let Some(source) = aws_profile::source() {
                let profile = source.load()?;
                builder = aws_profile::apply_below_environment(builder, &profile);
                // A profile (named, or the implicit default) that gets its credentials in a
                // way dsv cannot use is refused, unless the environment gives credentials:
                // falling back to what object_store finds itself (instance metadata) would
                // sign as another identity than the one the profile names.
                // Whole credentials only: a key id without its secret signs nothing.
                let set = |key| builder.get_config_value(&key).is_some();
                let env_credentials = (set(object_store::aws::AmazonS3ConfigKey::AccessKeyId)
                    && set(object_store::aws::AmazonS3ConfigKey::SecretAccessKey))
                    || set(object_store::aws::AmazonS3ConfigKey::RoleArn);
                if let Some(how) = profile.unsupported
                    && !env_credentials
                {
                    return Err(Error::AwsProfileUnsupported {
                        profile: profile.name,
                        how,
                    });
                }
            }
            builder = builder
                .with_url(url)
                .with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch)
                .with_retry(retry);
            for (key, value) in &options {
                builder = builder.with_config(key.parse().map_err(invalid)?, value);
            }
            let config = |key| builder.get_config_value(&key);
            use object_store::aws::AmazonS3ConfigKey as Key;
            let settings = copy::S3Settings {
                // The URL is parsed at build(): the bucket is its host.
                bucket: rest.split('/').next().unwrap_or_default().to_string(),
                region: config(Key::Region).unwrap_or_else(|| "us-east-1".into()),
                endpoint: config(Key::Endpoint),
                virtual_hosted: config(Key::VirtualHostedStyleRequest)
                    .is_some_and(|v| v.eq_ignore_ascii_case("true")),
                skip_signature: config(Key::SkipSignature)
                    .is_some_and(|v| v.eq_ignore_ascii_case("true")),
            };
            let s3 = builder.build().map_err(invalid)?;
            account = Some(copy::S3Account::new(settings, s3.credentials().clone()));
            Arc::new(s3)
        }
        "az" | "abfs" | "abfss" => {
            let mut builder = object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_url(url)
                .with_retry(retry);
            for (key, value) in &options {
                builder = builder.with_config(key.parse().map_err(invalid)?, value);
            }
            Arc::new(builder.build().map_err(invalid)?)
        }
        "gs" => {
            let mut builder = object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_url(url)
                .with_retry(retry);
            for (key, value) in &options {
                builder = builder.with_config(key.parse().map_err(invalid)?, value);
            }
            Arc::new(builder.build().map_err(invalid)?)
        }
        _ => {
            return Err(Error::InvalidRemote {
                what: "URL",
                value: url.to_string(),
                reason: "not an object storage URL (s3://, gs://, az://)".into(),
            });
        }
    };
    Ok((store, path_part(rest), account))
}

/// Takes the exclusive `flock` on `<root>/refs.lock` that a file:// remote's ref
/// compare-and-swaps run under (`docs/format.md`, "Remote layout"); released when the file
/// is dropped.
///
/// # Errors
/// [`Error::Io`] when the lock file cannot be opened or locked.
fn lock_refs(root: &FsPath) -> Result<std::fs::File> {
    let lock_path = root.join("refs.lock");
    let lock = crate::store_file::open_lock(&lock_path).at(&lock_path)?;
    lock.lock().at(&lock_path)?;
    Ok(lock)
}

/// A remote ref's identity as the backend reports it: enough to ask "has it changed?" with
/// one HEAD request and to move it with a conditional put.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RefState {
    /// The ETag (RFC 9110 entity tag).
    pub etag: Option<String>,
    /// The object version id, when the backend has versions.
    pub version: Option<String>,
    /// Last-Modified, Unix seconds.
    pub last_modified: i64,
}

/// One ref found on a remote: which dataset, head or tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefName {
    /// The dataset.
    pub dataset: String,
    /// The tag; `None` for the head.
    pub tag: Option<String>,
}

impl RefName {
    /// The ref's key under the remote's prefix.
    pub fn key(&self) -> Path {
        match &self.tag {
            None => Path::from(format!("refs/heads/{}", self.dataset)),
            Some(tag) => Path::from(format!("refs/tags/{}/{tag}", self.dataset)),
        }
    }
}

/// An open remote: the backend, a runtime to drive it, and request counters.
pub struct Remote {
    name: String,
    store: Arc<dyn ObjectStore>,
    /// For file:// remotes: the directory (refs are swapped under a lock file there).
    local_root: Option<PathBuf>,
    /// The whole bucket (container) the remote lies in, and the remote's prefix in it: a
    /// server-side copy names keys of two remotes of one bucket ([`Remote::shares_bucket_with`]).
    bucket: Arc<dyn ObjectStore>,
    prefix: Path,
    /// What makes two remotes one bucket reached the same way: the scheme, the bucket and
    /// the options; `None` for a local directory.
    bucket_identity: Option<String>,
    /// For S3: the account and settings a CopyObject from another bucket is signed with.
    s3_account: Option<copy::S3Account>,
    runtime: crate::runtime::Runtime,
    requests: AtomicU64,
    /// The stall timeout of reads ([`stall_timeout`]) while another remote remains to ask;
    /// `None` for a local directory, or when the option turned it off.
    stall: Option<std::time::Duration>,
    /// The stall timeout of reads when no other remote remains to ask
    /// ([`last_stall_timeout`]); `None` as `stall` is.
    last_stall: Option<std::time::Duration>,
    /// Whether a read that fails here has another remote to go on to
    /// ([`Remote::set_others_remain`]); false until told.
    others_remain: AtomicBool,
}

/// A pack to upload: a sealed local file, or one built in memory (its index from
/// `index_offset` on).
enum PackBody {
    File(PathBuf),
    Memory { bytes: Bytes, index_offset: usize },
}

/// Pack key.
pub fn pack_key(id: &ObjectId) -> Path {
    Path::from(format!("packs/{id}.pack"))
}

/// Pack tail (index) key.
pub fn index_key(id: &ObjectId) -> Path {
    Path::from(format!("packs/{id}.idx"))
}

impl Remote {
    /// Opens `record`'s backend. Nothing is requested yet.
    ///
    /// # Errors
    /// [`Error::InvalidRemote`] for a URL or option the backend rejects; [`Error::Io`] when
    /// the local directory of a file:// remote cannot be created.
    pub fn open(record: &RemoteRecord) -> Result<Remote> {
        check_url(&record.url)?;
        let invalid = |e: object_store::Error| Error::InvalidRemote {
            what: "URL",
            value: record.url.clone(),
            reason: e.to_string(),
        };
        let (scheme, rest) = record.url.split_once("://").expect("checked");
        let mut local_root = None;
        let mut bucket_identity = None;
        let mut s3_account = None;
        let mut stall = None;
        let mut last_stall = None;
        let (store, prefix): (Arc<dyn ObjectStore>, String) = if scheme == "file" {
            let root = PathBuf::from(rest);
            std::fs::create_dir_all(&root).at(&root)?;
            let local =
                object_store::local::LocalFileSystem::new_with_prefix(&root).map_err(invalid)?;
            local_root = Some(root);
            (Arc::new(local), String::new())
        } else {
            let scheme = match scheme {
                "s3a" => "s3",
                "abfs" | "abfss" => "az",
                other => other,
            };
            let bucket = rest.split('/').next().unwrap_or_default();
            let options = serde_json::to_string(&record.options).unwrap_or_default();
            bucket_identity = Some(format!("{scheme}://{bucket} {options}"));
            let (store, path, account) = cloud_backend_parts(&record.url, &record.options)?;
            stall = stall_timeout(&record.options)?;
            last_stall = stall.map(|stall| last_stall_timeout(stall, &record.options));
            s3_account = account.map(|a| a.with_identity(format!("{scheme} {options}")));
            (store, path)
        };
        let bucket = Arc::clone(&store);
        let prefix = Path::from(prefix.as_str());
        let store: Arc<dyn ObjectStore> = if prefix.as_ref().is_empty() {
            store
        } else {
            Arc::new(object_store::prefix::PrefixStore::new(
                store,
                prefix.clone(),
            ))
        };
        let runtime = crate::runtime::shared()?;
        Ok(Remote {
            name: record.name.clone(),
            store,
            local_root,
            bucket,
            prefix,
            bucket_identity,
            s3_account,
            runtime,
            requests: AtomicU64::new(0),
            stall,
            last_stall,
            others_remain: AtomicBool::new(false),
        })
    }

    /// The remote's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Requests made so far (each LIST page, GET, HEAD, PUT and multipart part counts one).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    fn count(&self, n: u64) {
        self.requests.fetch_add(n, Ordering::Relaxed);
    }

    fn fail(&self, action: impl Into<String>) -> impl FnOnce(object_store::Error) -> Error {
        let remote = self.name.clone();
        let action = action.into();
        move |source| Error::Remote {
            remote,
            action,
            source: crate::failure::remote_failure(source),
        }
    }

    /// Tells the remote whether a read that fails here goes on to another remote
    /// (`true`: the caller asks remotes in read order and this one is not the last).
    /// While one does, reads stall after the `stall_timeout` option
    /// (`DEFAULT_REMOTE_STALL_TIMEOUT`); while none does (the default: the only or last
    /// remote, whose failure fails the read), after `last_stall_timeout`.
    pub fn set_others_remain(&self, remain: bool) {
        self.others_remain.store(remain, Ordering::Relaxed);
    }

    /// A watch for the stalls of one read, made on the calling thread (it takes the
    /// thread's cancellation token); `None` for a remote whose reads are not watched.
    fn watch(&self) -> Option<StallWatch> {
        let timeout = if self.others_remain.load(Ordering::Relaxed) {
            self.stall
        } else {
            self.last_stall
        };
        timeout.map(|timeout| StallWatch::new(timeout, None))
    }

    /// Awaits `future` (a read of `action`) under `watch` ([`stall_timeout`]): a stall
    /// fails it as [`Error::Remote`] (a timeout), a cancellation as [`Error::Interrupted`].
    /// Without a watch, awaits it as it is.
    async fn watched<F: Future>(
        &self,
        watch: &mut Option<StallWatch>,
        action: impl FnOnce() -> String,
        future: F,
    ) -> Result<F::Output> {
        let Some(watch) = watch else {
            return Ok(future.await);
        };
        watch
            .wait(future)
            .await
            .map_err(|ended| self.ended(watch, action(), ended))
    }

    /// Counts `bytes` of an answer that arrived under `watch`; fails as
    /// [`Remote::watched`] does.
    fn arrived(
        &self,
        watch: &mut Option<StallWatch>,
        action: impl FnOnce() -> String,
        bytes: u64,
    ) -> Result<()> {
        let Some(watch) = watch else {
            return Ok(());
        };
        watch
            .arrived(bytes)
            .map_err(|ended| self.ended(watch, action(), ended))
    }

    /// The error of a read of `action` that `watch` ended.
    fn ended(&self, watch: &StallWatch, action: String, ended: Ended) -> Error {
        match ended {
            Ended::Cancelled => Error::Interrupted,
            Ended::Stalled { bytes } => self.fail(action)(object_store::Error::Generic {
                store: "remote",
                source: Box::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "stalled: {bytes} bytes of the answer arrived in {} (less than {STALL_BYTES}; the remote's stall_timeout option): the server does not answer",
                        crate::stall::humanize(watch.stall_timeout())
                    ),
                )),
            }),
            Ended::Deadline(timeout) => self.fail(action)(object_store::Error::Generic {
                store: "remote",
                source: Box::new(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("no answer within {}", crate::stall::humanize(timeout)),
                )),
            }),
        }
    }

    /// Lists `prefix` under the stall watch: each entry listed counts as
    /// [`STALL_BYTES`] arrived. In key order whatever the backend (S3 and Azure list so; a
    /// `file://` remote lists in its filesystem's directory order, which differs between
    /// filesystems: ext4 and tmpfs gave `dsv fetch` its refs in different orders).
    async fn list_watched(&self, prefix: &str) -> Result<Vec<object_store::ObjectMeta>> {
        let mut watch = self.watch();
        let action = || format!("list {prefix}/");
        let prefix = Path::from(prefix);
        let mut stream = self.store.list(Some(&prefix));
        let mut listed = Vec::new();
        while let Some(meta) = self.watched(&mut watch, action, stream.next()).await? {
            listed.push(meta.map_err(self.fail(action()))?);
            self.arrived(&mut watch, action, STALL_BYTES)?;
        }
        listed.sort_by(|a, b| a.location.cmp(&b.location));
        Ok(listed)
    }

    /// Lists the complete packs (those whose `.idx` exists): id and pack size in bytes.
    ///
    /// # Errors
    /// [`Error::Remote`].
    pub fn list_packs(&self) -> Result<Vec<(ObjectId, u64)>> {
        let listed = self.runtime.block_on(self.list_watched("packs"))?;
        self.count(1 + listed.len() as u64 / 1000);
        let mut sizes = BTreeMap::new();
        let mut indexed = std::collections::HashSet::new();
        for meta in listed {
            let Some(name) = meta.location.filename() else {
                continue;
            };
            if let Some(id) = crate::pack::writer::pack_id_of(name) {
                if id == collect::guard_pack() {
                    continue;
                }
                sizes.insert(id, meta.size);
            } else if let Some(hex) = name.strip_suffix(".idx")
                && let Ok(id) = hex.parse::<ObjectId>()
            {
                indexed.insert(id);
            }
        }
        Ok(sizes
            .into_iter()
            .filter(|(id, _)| indexed.contains(id))
            .collect())
    }

    /// Downloads a whole object of at most `limit` bytes.
    ///
    /// # Errors
    /// [`Error::Remote`] (`NotFound` when absent); [`Error::Corrupt`] when the object is
    /// larger than `limit` (nothing past the limit is read).
    pub fn get(&self, key: &Path, limit: u64) -> Result<Bytes> {
        self.count(1);
        self.runtime
            .block_on(self.get_bounded(key, limit))
            .map(|(bytes, _)| bytes)
    }

    /// Downloads whole objects, each at most its limit in bytes, `jobs` requests at a time;
    /// results in the order of `keys`.
    ///
    /// # Errors
    /// As [`Remote::get`].
    pub fn get_many(&self, keys: Vec<(Path, u64)>, jobs: usize) -> Result<Vec<Bytes>> {
        self.count(keys.len() as u64);
        let watch = self.watch();
        self.runtime.block_on(
            futures_util::stream::iter(keys.into_iter().map(|(key, limit)| {
                let mut watch = watch.clone();
                async move {
                    self.get_bounded_under(&mut watch, &key, limit)
                        .await
                        .map(|(bytes, _)| bytes)
                }
            }))
            .buffered(crate::parallel::clamp_jobs(jobs))
            .try_collect(),
        )
    }

    /// GETs `key`, refusing it as corrupt when the backend reports more than `limit` bytes
    /// or sends more (the body is streamed and dropped past the limit), so a hostile remote
    /// cannot make dsv allocate more than `limit`.
    async fn get_bounded(
        &self,
        key: &Path,
        limit: u64,
    ) -> Result<(Bytes, object_store::ObjectMeta)> {
        let mut watch = self.watch();
        self.get_bounded_under(&mut watch, key, limit).await
    }

    /// [`Remote::get_bounded`] under `watch` (restarted: a new request).
    async fn get_bounded_under(
        &self,
        watch: &mut Option<StallWatch>,
        key: &Path,
        limit: u64,
    ) -> Result<(Bytes, object_store::ObjectMeta)> {
        if let Some(watch) = watch.as_mut() {
            watch.restart();
        }
        let action = || format!("download {key}");
        let too_large = |size: u64| {
            Error::corrupt(
                format!("{}:{key}", self.name),
                format!(
                    "the object is {size} bytes or more, larger than the {limit} bytes it may be"
                ),
            )
        };
        let got = self
            .watched(watch, action, self.store.get(key))
            .await?
            .map_err(self.fail(action()))?;
        let meta = got.meta.clone();
        if meta.size > limit {
            return Err(too_large(meta.size));
        }
        let mut body = Vec::with_capacity(meta.size as usize);
        let mut stream = got.into_stream();
        while let Some(piece) = self.watched(watch, action, stream.next()).await? {
            let piece = piece.map_err(self.fail(action()))?;
            if (body.len() + piece.len()) as u64 > limit {
                return Err(too_large((body.len() + piece.len()) as u64));
            }
            self.arrived(watch, action, piece.len() as u64)?;
            body.extend_from_slice(&piece);
        }
        Ok((Bytes::from(body), meta))
    }

    /// Downloads byte ranges of packs, `jobs` requests at a time. Each response goes through
    /// `check` on tokio's blocking pool (so checks run on every core while other requests
    /// are in flight), and each checked result to `each` on the calling thread, as results
    /// arrive. An error from either stops the rest.
    ///
    /// # Errors
    /// [`Error::Remote`], [`Error::Corrupt`] for a short response, or the first error of
    /// `check` or `each`.
    pub fn get_ranges<T: Send + 'static>(
        &self,
        ranges: Vec<(ObjectId, Range<u64>)>,
        jobs: usize,
        check: Arc<dyn Fn(ObjectId, Range<u64>, Bytes) -> Result<T> + Send + Sync>,
        mut each: impl FnMut(T) -> Result<()> + Send,
    ) -> Result<()> {
        self.count(ranges.len() as u64);
        let watch = self.watch();
        self.runtime.block_on(async {
            let mut stream = futures_util::stream::iter(ranges.into_iter().map(|(pack, range)| {
                let check = Arc::clone(&check);
                let mut watch = watch.clone();
                async move {
                    let key = pack_key(&pack);
                    let bytes = self
                        .get_range_under(&mut watch, &key, range.clone())
                        .await?;
                    if bytes.len() as u64 != range.end - range.start {
                        return Err(Error::corrupt(
                            format!("{}:{key}", self.name),
                            "the remote returned fewer bytes than asked",
                        ));
                    }
                    tokio::task::spawn_blocking(move || check(pack, range, bytes))
                        .await
                        .expect("a download check does not panic")
                }
            }))
            .buffer_unordered(crate::parallel::clamp_jobs(jobs));
            while let Some(result) = stream.next().await {
                crate::interrupt::check()?;
                each(result?)?;
            }
            Ok(())
        })
    }

    /// GETs bytes `range` of `key` under `watch` (restarted: a new request), the body
    /// streamed so that a stall part-way is seen; more bytes than asked are refused as
    /// corrupt.
    async fn get_range_under(
        &self,
        watch: &mut Option<StallWatch>,
        key: &Path,
        range: Range<u64>,
    ) -> Result<Bytes> {
        let Some(watch_now) = watch.as_mut() else {
            // Not watched (a local directory): one read of the range, as the backend does
            // it (streaming would read a file in 8 KiB pieces).
            return self
                .store
                .get_range(key, range.clone())
                .await
                .map_err(self.fail(format!("download {key} bytes {range:?}")));
        };
        watch_now.restart();
        let action = || format!("download {key} bytes {range:?}");
        let options = object_store::GetOptions {
            range: Some(range.clone().into()),
            ..Default::default()
        };
        let got = self
            .watched(watch, action, self.store.get_opts(key, options))
            .await?
            .map_err(self.fail(action()))?;
        let wanted = range.end - range.start;
        let mut stream = got.into_stream();
        let mut body = bytes::BytesMut::with_capacity(wanted as usize);
        while let Some(piece) = self.watched(watch, action, stream.next()).await? {
            let piece = piece.map_err(self.fail(action()))?;
            if (body.len() + piece.len()) as u64 > wanted {
                return Err(Error::corrupt(
                    format!("{}:{key}", self.name),
                    "the remote returned more bytes than asked",
                ));
            }
            self.arrived(watch, action, piece.len() as u64)?;
            body.extend_from_slice(&piece);
        }
        Ok(body.freeze())
    }

    /// Uploads local packs (with their `.idx`), `jobs` at a time; calls `done(bytes)` after
    /// each. A pack already on the remote is success.
    ///
    /// # Errors
    /// [`Error::Remote`]; [`Error::Io`] reading a local pack.
    pub fn put_packs(
        &self,
        packs: Vec<(ObjectId, PathBuf)>,
        jobs: usize,
        done: &(dyn Fn(u64) + Sync),
    ) -> Result<()> {
        let packs = packs
            .into_iter()
            .map(|(id, path)| (id, PackBody::File(path)))
            .collect();
        self.put_pack_bodies(packs, jobs, done)
    }

    /// Uploads `packs` (each followed by its `.idx`), `jobs` at a time; `done(bytes)` after
    /// each.
    fn put_pack_bodies(
        &self,
        packs: Vec<(ObjectId, PackBody)>,
        jobs: usize,
        done: &(dyn Fn(u64) + Sync),
    ) -> Result<()> {
        self.runtime.block_on(async {
            let mut stream =
                futures_util::stream::iter(packs.into_iter().map(|(id, body)| async move {
                    let size = self.put_pack(&id, body).await?;
                    crate::interrupt::check()?;
                    Ok::<_, Error>(size)
                }))
                .buffer_unordered(crate::parallel::clamp_jobs(jobs));
            while let Some(size) = stream.next().await {
                done(size?);
            }
            Ok(())
        })
    }

    /// One pack, then its `.idx` (the pack's tail): a create-only PUT below
    /// [`MULTIPART_THRESHOLD`], else a multipart upload of [`PART_SIZE`] parts,
    /// [`PARTS_IN_FLIGHT`] at a time. Returns the pack's size in bytes.
    async fn put_pack(&self, id: &ObjectId, body: PackBody) -> Result<u64> {
        let (tail, size) = match &body {
            PackBody::File(path) => (
                Bytes::from(crate::pack::reader::read_tail(path)?),
                std::fs::metadata(path).at(path)?.len(),
            ),
            PackBody::Memory {
                bytes,
                index_offset,
            } => (bytes.slice(*index_offset..), bytes.len() as u64),
        };
        let key = pack_key(id);
        if size >= MULTIPART_THRESHOLD {
            // Multipart uploads cannot be create-only; the content is addressed by its hash,
            // so overwriting an identical copy is harmless.
            let mut parts: Box<dyn Iterator<Item = Result<Bytes>> + Send> = match body {
                PackBody::File(path) => {
                    let mut file = crate::store_file::open_read(&path).at(&path)?;
                    Box::new(std::iter::from_fn(move || {
                        let mut part = vec![0u8; PART_SIZE];
                        match std::io::Read::read(&mut file, &mut part).at(&path) {
                            Ok(0) => None,
                            Ok(n) => {
                                part.truncate(n);
                                Some(Ok(Bytes::from(part)))
                            }
                            Err(e) => Some(Err(e)),
                        }
                    }))
                }
                PackBody::Memory { bytes, .. } => Box::new(
                    (0..bytes.len())
                        .step_by(PART_SIZE)
                        .map(move |at| Ok(bytes.slice(at..(at + PART_SIZE).min(bytes.len())))),
                ),
            };
            let upload = self
                .store
                .put_multipart(&key)
                .await
                .map_err(self.fail(format!("start upload of {key}")))?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
            for part in &mut parts {
                writer
                    .wait_for_capacity(PARTS_IN_FLIGHT)
                    .await
                    .map_err(self.fail(format!("upload {key}")))?;
                writer.put(part?);
                self.count(1);
            }
            writer
                .finish()
                .await
                .map_err(self.fail(format!("finish upload of {key}")))?;
            self.count(2);
        } else {
            let bytes = match body {
                PackBody::File(path) => {
                    let mut bytes = Vec::new();
                    let mut file = crate::store_file::open_read(&path).at(&path)?;
                    std::io::Read::read_to_end(&mut file, &mut bytes).at(&path)?;
                    Bytes::from(bytes)
                }
                PackBody::Memory { bytes, .. } => bytes,
            };
            self.put_create(&key, bytes).await?;
        }
        self.put_create(&index_key(id), tail).await?;
        Ok(size)
    }

    /// A create-only put: an existing object is success (keys are content-addressed).
    async fn put_create(&self, key: &Path, bytes: Bytes) -> Result<()> {
        self.count(1);
        let options = PutOptions::from(PutMode::Create);
        match self
            .store
            .put_opts(key, PutPayload::from_bytes(bytes), options)
            .await
        {
            Ok(_) | Err(object_store::Error::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(self.fail(format!("upload {key}"))(e)),
        }
    }

    /// Lists every ref on the remote with its state, in key order (heads by dataset name,
    /// then tags).
    ///
    /// # Errors
    /// [`Error::Remote`].
    pub fn list_refs(&self) -> Result<Vec<(RefName, RefState)>> {
        let listed = self.runtime.block_on(self.list_watched("refs"))?;
        self.count(1 + listed.len() as u64 / 1000);
        let mut refs = Vec::new();
        for meta in listed {
            if let Some(name) = parse_ref_key(meta.location.as_ref()) {
                refs.push((name, state_of(&meta)));
            }
        }
        Ok(refs)
    }

    /// Reads a ref: the version it names and its state, or `None` when absent (or holding
    /// `collect::REF_TOMBSTONE`: being deleted).
    ///
    /// # Errors
    /// [`Error::Remote`]; [`Error::Corrupt`] when the ref does not hold a version id or is
    /// longer than `MAX_REF_LEN` bytes (it is not downloaded then).
    pub fn get_ref(&self, name: &RefName) -> Result<Option<(ObjectId, RefState)>> {
        let key = name.key();
        self.count(1);
        let (bytes, state) = match self.runtime.block_on(self.get_bounded(&key, MAX_REF_LEN)) {
            Ok((bytes, meta)) => (bytes, state_of(&meta)),
            Err(Error::Remote { source, .. }) if source.is_not_found() => return Ok(None),
            Err(e) => return Err(e),
        };
        // A ref being deleted (`delete_ref`) is absent.
        if bytes.as_ref() == collect::REF_TOMBSTONE.as_bytes() {
            return Ok(None);
        }
        let id = decode_ref(&bytes).ok_or_else(|| {
            Error::corrupt(
                format!("{}:{key}", self.name),
                "a ref must hold one version id",
            )
        })?;
        Ok(Some((id, state)))
    }

    /// Asks for a ref's state (one HEAD request), `None` when absent.
    ///
    /// # Errors
    /// [`Error::Remote`].
    pub fn head_ref(&self, name: &RefName) -> Result<Option<RefState>> {
        let key = name.key();
        self.count(1);
        let mut watch = self.watch();
        let action = || format!("check {key}");
        let headed =
            self.runtime
                .block_on(self.watched(&mut watch, action, self.store.head(&key)))?;
        match headed {
            Ok(meta) => Ok(Some(state_of(&meta))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.fail(format!("check {key}"))(e)),
        }
    }

    /// Moves ref `name` to `id` if it is still as `expected` (`None`: it must not exist).
    /// Returns the new state.
    ///
    /// # Errors
    /// [`Error::RemoteDiverged`] when another writer changed it first; [`Error::Remote`].
    pub fn update_ref(
        &self,
        name: &RefName,
        id: &ObjectId,
        expected: Option<&RefState>,
    ) -> Result<RefState> {
        let key = name.key();
        let payload = PutPayload::from(format!("{id}\n"));
        let lost = || Error::RemoteDiverged {
            remote: self.name.clone(),
            dataset: name.dataset.clone(),
        };
        self.count(1);
        if let Some(root) = &self.local_root {
            // No conditional put on a local directory: compare and rename under a lock.
            let _lock = lock_refs(root)?;
            let current = self.head_ref(name)?;
            if current.as_ref().map(|s| &s.etag) != expected.map(|s| &s.etag) {
                return Err(lost());
            }
            self.runtime
                .block_on(self.store.put(&key, payload))
                .map_err(self.fail(format!("write {key}")))?;
            return self.head_ref(name)?.ok_or_else(lost);
        }
        let mode = match expected {
            None => PutMode::Create,
            Some(state) => PutMode::Update(UpdateVersion {
                e_tag: state.etag.clone(),
                version: state.version.clone(),
            }),
        };
        match self
            .runtime
            .block_on(self.store.put_opts(&key, payload, PutOptions::from(mode)))
        {
            Ok(_) => self.head_ref(name)?.ok_or_else(lost),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => Err(lost()),
            Err(e) => Err(self.fail(format!("write {key}"))(e)),
        }
    }

    /// Overwrites ref `name` unconditionally (`push --force`).
    ///
    /// # Errors
    /// [`Error::Remote`].
    pub fn force_ref(&self, name: &RefName, id: &ObjectId) -> Result<RefState> {
        let key = name.key();
        self.count(2);
        self.runtime
            .block_on(self.store.put(&key, PutPayload::from(format!("{id}\n"))))
            .map_err(self.fail(format!("write {key}")))?;
        self.head_ref(name)?.ok_or_else(|| Error::RemoteDiverged {
            remote: self.name.clone(),
            dataset: name.dataset.clone(),
        })
    }
}

/// Reads a ref's bytes (`"<version id>\n"`, as [`Remote::update_ref`] writes them): the
/// version id, or `None` when they do not hold exactly one id (surrounding whitespace is
/// ignored). Public so the decoding of bytes from a remote can be fuzzed.
pub fn decode_ref(bytes: &[u8]) -> Option<ObjectId> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| text.trim().parse::<ObjectId>().ok())
}

/// Parses a listed key (`refs/heads/<dataset>` or `refs/tags/<dataset>/<tag>`, the inverse of
/// [`RefName::key`]); `None` for any other key, or a dataset or tag name dsv would refuse,
/// which [`Remote::list_refs`] skips. Public so it can be fuzzed.
pub fn parse_ref_key(key: &str) -> Option<RefName> {
    let parts: Vec<&str> = key.split('/').collect();
    let name = match parts.as_slice() {
        ["refs", "heads", dataset] => RefName {
            dataset: dataset.to_string(),
            tag: None,
        },
        ["refs", "tags", dataset, tag] => RefName {
            dataset: dataset.to_string(),
            tag: Some(tag.to_string()),
        },
        _ => return None,
    };
    if crate::revision::check_name("dataset", &name.dataset).is_err()
        || name
            .tag
            .as_deref()
            .is_some_and(|t| crate::revision::check_name("tag", t).is_err())
    {
        return None;
    }
    Some(name)
}

fn state_of(meta: &object_store::ObjectMeta) -> RefState {
    RefState {
        etag: meta.e_tag.clone(),
        version: meta.version.clone(),
        last_modified: meta.last_modified.timestamp(),
    }
}

/// The path part of `bucket/prefix/…`: `prefix/…` without surrounding slashes.
fn path_part(rest: &str) -> String {
    rest.split_once('/')
        .map(|(_, path)| path.trim_matches('/').to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_refused_under_every_alias_object_store_accepts() {
        let refused = |key: &str, value: &str| {
            check_options(&BTreeMap::from([(key.to_string(), value.to_string())])).is_err()
        };
        for key in [
            "aws_secret_access_key",
            "secret_access_key",
            "AWS_SECRET_ACCESS_KEY",
            "aws_access_key_id",
            "aws_session_token",
            "aws_token",
            "token",
            "aws_sse_customer_key_base64",
            "sse_customer_key_base64",
            "master_key",
            "azure_storage_master_key",
            "azure_storage_account_key",
            "account_key",
            "access_key",
            "azure_storage_sas_key",
            "sas_token",
            "azure_client_secret",
            "client_secret",
            "bearer_token",
            "azure_storage_token",
            "azure_fabric_session_token",
            "azure_storage_encryption_key",
            "google_service_account_key",
            "service_account_key",
            "google_bearer_token",
        ] {
            assert!(refused(key, "x"), "{key} accepted");
        }
        for key in [
            "aws_region",
            "region",
            "aws_endpoint",
            "azure_storage_account_name",
            "azure_client_id",
            "google_service_account",
            "aws_allow_http",
            "allow_http",
            "proxy_url",
            "aws_sse_kms_key_id",
        ] {
            assert!(!refused(key, "http://host:1234"), "{key} refused");
        }
        for key in ["aws_endpoint", "proxy_url", "aws_proxy_url", "endpoint"] {
            assert!(refused(key, "http://user:password@host:1234"), "{key}");
            assert!(refused(key, "https://user@host/"), "{key}");
        }
        assert!(!refused("aws_endpoint", "http://host/path@x"));
        assert!(check_url("s3://user:password@bucket/x").is_err());
        assert!(check_url("file://user@/tmp/x").is_err());
    }

    #[test]
    fn retry_options_are_read_by_dsv_and_checked() {
        let options = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let default = retry_config(&BTreeMap::new()).unwrap();
        assert_eq!(default.max_retries, DEFAULT_MAX_RETRIES);
        assert_eq!(default.retry_timeout, DEFAULT_RETRY_TIMEOUT);
        let set =
            retry_config(&options(&[("max_retries", "2"), ("retry_timeout", "1.5s")])).unwrap();
        assert_eq!(set.max_retries, 2);
        assert_eq!(set.retry_timeout, std::time::Duration::from_millis(1500));
        for (text, millis) in [
            ("500ms", 500),
            ("30s", 30_000),
            ("2m", 120_000),
            ("1h", 3_600_000),
        ] {
            assert_eq!(
                parse_duration(text),
                Some(std::time::Duration::from_millis(millis))
            );
        }
        for bad in ["", "30", "s", "-1s", "1d", "1.2.3s", "inf s"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
        for (key, value) in [
            ("max_retries", "many"),
            ("max_retries", "-1"),
            ("retry_timeout", "30"),
        ] {
            let error = retry_config(&options(&[(key, value)])).unwrap_err();
            assert!(
                matches!(&error, Error::InvalidRemote { what: "option", value, .. } if value == key),
                "{error}"
            );
            // A remote is refused when it is added, as for any option the backend rejects.
            assert!(cloud_backend("s3://bucket/prefix", &options(&[(key, value)])).is_err());
        }
        // Given to object_store, these keys would be unknown ones.
        cloud_backend(
            "s3://bucket/prefix",
            &options(&[
                ("max_retries", "0"),
                ("retry_timeout", "10s"),
                ("timeout", "5s"),
            ]),
        )
        .unwrap();
    }

    #[test]
    fn urls_and_options_are_checked() {
        for good in [
            "s3://bucket",
            "s3://bucket/a/b",
            "az://c/p",
            "gs://b",
            "file:///tmp/x",
        ] {
            check_url(good).unwrap();
        }
        for bad in [
            "bucket",
            "s3://",
            "http://x/y",
            "file://relative",
            "ftp://h/p",
        ] {
            assert!(check_url(bad).is_err(), "{bad} accepted");
        }
        let mut options = BTreeMap::new();
        options.insert("aws_region".to_string(), "eu-west-1".to_string());
        check_options(&options).unwrap();
        options.insert("aws_secret_access_key".to_string(), "x".to_string());
        assert!(check_options(&options).is_err());
        assert_eq!(path_part("bucket/a/b/"), "a/b");
        assert_eq!(path_part("bucket"), "");
    }
}
