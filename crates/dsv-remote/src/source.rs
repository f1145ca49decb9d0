//! Import sources: what `dsv import` reads. An object or every object under a prefix of
//! object storage (S3, GCS, Azure through `object_store`), a URL (HTTP(S) through
//! `reqwest`), or a local file or directory. Each object is listed with what identifies its
//! content (ETag, VersionId, Last-Modified, size) and read as a stream: nothing is held
//! whole in memory.
//!
//! A read is pinned to what the listing saw: object storage reads ask for the listed
//! VersionId (when the bucket has versions) with `If-Match` on the listed ETag (RFC 9110
//! §13.1.1), so the bytes stored are the bytes the provenance names, or the import fails.

use std::collections::BTreeMap;
use std::future::Future;
use std::io::{self, Read};
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{GetOptions, ObjectMeta, ObjectStore};

use crate::error::{Error, IoResultExt, RemoteClass, Result};
use crate::stall::{Ended, humanize};

/// One object of a source.
#[derive(Debug, Clone)]
pub struct SourceObject {
    /// Its URL (`s3://bucket/key`, `https://…`, `file:///…`).
    pub url: String,
    /// Its path relative to the listed prefix or directory; for a single object, its name.
    pub path: String,
    /// The ETag (quotes included, as the server sends it); for a local file
    /// `"<mtime ns hex>-<size hex>"`.
    pub etag: Option<String>,
    /// The object version (S3 VersionId), when the store keeps versions.
    pub version_id: Option<String>,
    /// Last-Modified, Unix seconds.
    pub last_modified: Option<i64>,
    /// Size in bytes (0 when an HTTP server did not say: see `size_known`).
    pub size: u64,
    /// False when the server sent no Content-Length.
    pub size_known: bool,
    /// A local file's owner-execute bit.
    pub executable: bool,
    /// A local symlink's target (such an object has no bytes to read).
    pub symlink: Option<String>,
    location: Location,
}

impl SourceObject {
    /// An object at `url` of which nothing is known yet, read over HTTP(S) (no size, ETag or
    /// version): what a provenance record holds before the source is asked.
    pub fn unknown_http(url: &str) -> SourceObject {
        SourceObject::unknown(url, Location::Http)
    }

    /// An object at `url` of which nothing is known yet.
    fn unknown(url: &str, location: Location) -> SourceObject {
        SourceObject {
            url: url.to_string(),
            path: String::new(),
            etag: None,
            version_id: None,
            last_modified: None,
            size: 0,
            size_known: false,
            executable: false,
            symlink: None,
            location,
        }
    }
}

#[derive(Debug, Clone)]
enum Location {
    Cloud(Path),
    Http,
    Local(PathBuf),
}

/// What an import is pinned to (`--etag`, `--version-id`).
#[derive(Debug, Clone, Default)]
pub struct Pin {
    /// The ETag the object must have (with or without its quotes).
    pub etag: Option<String>,
    /// The object version to read.
    pub version_id: Option<String>,
}

impl Pin {
    /// True when neither is set.
    pub fn is_empty(&self) -> bool {
        self.etag.is_none() && self.version_id.is_none()
    }
}

/// What a source holds.
#[derive(Debug)]
pub struct Listing {
    /// The objects, sorted by path.
    pub objects: Vec<SourceObject>,
    /// True for a single object (a file, an object key, a URL); false for a prefix or a
    /// directory, whose objects' paths become the dataset's.
    pub single: bool,
}

/// A read is stalled when less than this arrives in [`ReadBounds::stall_timeout`]: a server
/// that sends a byte every few seconds holds no import.
pub use crate::stall::STALL_BYTES;
/// Default of [`ReadBounds::max_undeclared_bytes`] for an import from object storage or
/// HTTP(S) without `--max-bytes` (10 GiB): a body that declares no length (chunked HTTP) may
/// send that much, so an endless one cannot fill a shared disk.
pub const DEFAULT_MAX_UNDECLARED_BYTES: u64 = 10 << 30;
/// Default of [`ReadBounds::stall_timeout`].
pub const DEFAULT_STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// How far and how long reading a source may go. Every request and every byte read is
/// checked against them, and against the current operation's cancellation
/// ([`crate::interrupt`]), also while a read waits on the network.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ReadBounds {
    /// The most bytes read from the source, every object together. An object that declares
    /// more (Content-Length, a listed size) is refused before it is read; one whose body
    /// goes past what it declared, or past this bound, is refused while it is read.
    pub max_bytes: u64,
    /// The store's free space, when `max_bytes` was derived from it (for messages).
    pub disk_free: Option<u64>,
    /// The most bytes read of one object that declares no length (an HTTP body without
    /// Content-Length); one that declares its length is held to it.
    pub max_undeclared_bytes: u64,
    /// A request or a body fails once less than [`STALL_BYTES`] arrived in this long.
    pub stall_timeout: Duration,
    /// Every request fails once the source has been open this long (`--timeout`).
    pub timeout: Option<Duration>,
}

impl Default for ReadBounds {
    fn default() -> Self {
        ReadBounds {
            max_bytes: u64::MAX,
            disk_free: None,
            max_undeclared_bytes: u64::MAX,
            stall_timeout: DEFAULT_STALL_TIMEOUT,
            timeout: None,
        }
    }
}

impl ReadBounds {
    /// Bounds of `max_bytes` (else unbounded), `stall_timeout` and `timeout`.
    pub fn new(max_bytes: Option<u64>, stall_timeout: Duration, timeout: Option<Duration>) -> Self {
        ReadBounds {
            max_bytes: max_bytes.unwrap_or(u64::MAX),
            disk_free: None,
            max_undeclared_bytes: u64::MAX,
            stall_timeout,
            timeout,
        }
    }

    /// The byte bound a store on the disk of `dir` can take: the free space (for an
    /// unprivileged user) less 5% of it and 16 MiB, kept for the catalog, trees and
    /// temporary files. Returns the free space and the bound.
    ///
    /// # Errors
    /// [`Error::Io`] when the file system cannot be asked.
    pub fn disk_bound(dir: &FsPath) -> Result<(u64, u64)> {
        let stat = nix::sys::statvfs::statvfs(dir).map_err(|errno| Error::Io {
            path: dir.to_path_buf(),
            source: io::Error::from(errno),
        })?;
        #[allow(clippy::useless_conversion)] // the field types differ between platforms
        let free =
            u64::from(stat.blocks_available()).saturating_mul(u64::from(stat.fragment_size()));
        let bound = free.saturating_sub(free / 20).saturating_sub(16 << 20);
        Ok((free, bound))
    }

    /// Why `max_bytes` is what it is, for messages.
    fn reason(&self) -> String {
        match self.disk_free {
            Some(free) => format!(
                "the store's disk has {free} bytes free, less a margin; free space or pass --max-bytes SIZE"
            ),
            None => "--max-bytes; pass a larger one to import it".into(),
        }
    }
}

enum Kind {
    Cloud {
        store: Arc<dyn ObjectStore>,
        /// `scheme://bucket`.
        bucket_url: String,
        /// The key or prefix below the bucket, without surrounding slashes.
        key: String,
        /// The URL ended in `/` (or named only the bucket): certainly a prefix.
        is_prefix: bool,
    },
    Http {
        client: reqwest::Client,
        /// The URL requested: as given, credentials included (the recorded one has none).
        url: String,
    },
    Local {
        path: PathBuf,
    },
}

/// An open source; keeps the runtime its streams are driven by.
pub struct Source {
    spec: String,
    /// Credentials were removed from the URL given before recording it.
    redacted: bool,
    kind: Kind,
    runtime: crate::runtime::Runtime,
    bounds: ReadBounds,
    /// When the source was opened (`ReadBounds::timeout` counts from here).
    opened: Instant,
    /// Bytes read from the source so far, every object together.
    read_total: Arc<AtomicU64>,
}

/// True when `spec` is an object storage URL (`s3://`, `s3a://`, `gs://`, `az://`,
/// `abfs://`, `abfss://`) that names a prefix by its form: it ends in `/`, or names only the
/// bucket (or container). Such a source is listed, never read as one object, so an import
/// of it takes no pin (`--etag`, `--version-id`). Any other source (an object key, which
/// may still turn out to be a prefix when listed; an HTTP URL; a local path) is `false`.
pub fn is_prefix_url(spec: &str) -> bool {
    match spec.split_once("://") {
        Some(("s3" | "s3a" | "gs" | "az" | "abfs" | "abfss", rest)) => {
            let key = rest.split_once('/').map_or("", |(_, key)| key);
            spec.ends_with('/') || key.trim_matches('/').is_empty()
        }
        _ => false,
    }
}

/// True when two ETags name the same entity: compared without their quotes and without a
/// weak `W/` prefix (RFC 9110 §8.8.3's weak comparison), so users may give either form.
pub fn etag_matches(a: &str, b: &str) -> bool {
    fn bare(tag: &str) -> &str {
        tag.trim().trim_start_matches("W/").trim_matches('"')
    }
    bare(a) == bare(b)
}

/// The ETag dsv records for a local file: its mtime in nanoseconds and size in hex (the
/// shape web servers give files), then its permission bits in octal (so a `chmod +x` is a
/// change).
pub fn local_etag(stat: &crate::walk::Stat) -> String {
    format!(
        "\"{:x}-{:x}-{:o}\"",
        stat.mtime_ns,
        stat.size,
        stat.mode & 0o7777
    )
}

impl Source {
    /// Opens `spec`: `s3://…`, `gs://…`, `az://…` (settings from the environment and
    /// `options`, as for remotes), `http(s)://…`, `file:///…` or a local path. Nothing is
    /// requested yet.
    ///
    /// # Errors
    /// [`Error::InvalidImport`] for an unsupported scheme; [`Error::InvalidRemote`] for
    /// options the backend refuses; [`Error::SourceNotFound`] for a missing local path.
    pub fn open(spec: &str, options: &BTreeMap<String, String>) -> Result<Source> {
        crate::remote::check_options(options)?;
        let invalid = |reason: &str| Error::InvalidImport {
            source_url: spec.to_string(),
            reason: reason.to_string(),
        };
        let runtime = crate::runtime::shared()?;
        let mut redacted = false;
        let (kind, spec) = {
            // The HTTP client's timers belong to this runtime.
            let _entered = runtime.enter();
            match spec.split_once("://") {
                Some(("s3" | "s3a" | "gs" | "az" | "abfs" | "abfss", rest)) => {
                    let (bucket, _) = rest.split_once('/').unwrap_or((rest, ""));
                    if bucket.is_empty() {
                        return Err(invalid("the bucket name is missing"));
                    }
                    if crate::remote::has_userinfo(spec) {
                        return Err(invalid(
                            "the URL holds a user name or password; set credentials in the environment",
                        ));
                    }
                    let (store, key) = crate::remote::cloud_backend(spec, options)?;
                    let scheme = spec.split_once("://").expect("matched").0;
                    (
                        Kind::Cloud {
                            store,
                            bucket_url: format!("{scheme}://{bucket}"),
                            is_prefix: is_prefix_url(spec),
                            key,
                        },
                        spec.to_string(),
                    )
                }
                Some(("http" | "https", _)) => {
                    if !options.is_empty() {
                        return Err(invalid("--option applies to object storage sources only"));
                    }
                    let client = reqwest::Client::builder()
                        .user_agent(concat!("dsv/", env!("CARGO_PKG_VERSION")))
                        // A stalled server fails the import instead of hanging it.
                        .connect_timeout(std::time::Duration::from_secs(30))
                        .read_timeout(std::time::Duration::from_secs(120))
                        .build()
                        .map_err(|source| Error::Http {
                            url: spec.to_string(),
                            action: "setting up the HTTP client".into(),
                            source: crate::failure::http_failure(source),
                        })?;
                    let recorded;
                    (recorded, redacted) = crate::redact::for_record(spec);
                    let url = spec.to_string();
                    (Kind::Http { client, url }, recorded)
                }
                Some(("file", rest)) => local(spec, rest, options)?,
                Some(_) => {
                    return Err(invalid(
                        "unsupported scheme; use s3://, gs://, az://, http(s)://, file:// or a path",
                    ));
                }
                None => local(spec, spec, options)?,
            }
        };
        Ok(Source {
            spec,
            redacted,
            kind,
            runtime,
            bounds: ReadBounds::default(),
            opened: Instant::now(),
            read_total: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Sets how far and how long reading may go (default: no byte bound, a stall timeout of
    /// [`DEFAULT_STALL_TIMEOUT`], no deadline).
    pub fn set_bounds(&mut self, bounds: ReadBounds) {
        self.bounds = bounds;
    }

    /// The bounds reads are held to.
    pub fn bounds(&self) -> ReadBounds {
        self.bounds
    }

    /// True for a local file or directory (read from this machine's disks, not a network).
    pub fn is_local(&self) -> bool {
        matches!(self.kind, Kind::Local { .. })
    }

    /// Refuses, before anything is read, `objects` whose declared sizes (Content-Length, the
    /// listed size) add up to more than [`ReadBounds::max_bytes`].
    ///
    /// # Errors
    /// [`Error::InvalidImport`].
    pub fn check_declared(&self, objects: &[&SourceObject]) -> Result<()> {
        let declared = objects
            .iter()
            .filter(|o| o.size_known)
            .fold(0u64, |sum, o| sum.saturating_add(o.size));
        if declared > self.bounds.max_bytes {
            return Err(Error::InvalidImport {
                source_url: self.spec.clone(),
                reason: format!(
                    "it declares {declared} bytes to read, more than the import's bound of {} bytes ({}); nothing was read",
                    self.bounds.max_bytes,
                    self.bounds.reason()
                ),
            });
        }
        Ok(())
    }

    /// What waits on this source's requests: its stall timeout, its deadline and the
    /// calling thread's cancellation.
    fn watch(&self, url: &str) -> Watch {
        Watch {
            url: url.to_string(),
            inner: crate::stall::StallWatch::new(
                self.bounds.stall_timeout,
                self.bounds
                    .timeout
                    .map(|timeout| (self.opened + timeout, timeout)),
            ),
        }
    }

    /// The source as recorded in provenance: the URL as given (an HTTP(S) URL without its
    /// credentials: see [`crate::redact::for_record`]), or a local path made absolute.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// True when [`Source::spec`] is the URL given with credentials removed.
    pub fn redacted(&self) -> bool {
        self.redacted
    }

    /// The last path element of the source (for a default dataset name): `s3://b/x/mnist.zip`
    /// → `mnist.zip`, `s3://b` → `b`.
    pub fn basename(&self) -> String {
        let trimmed = self.spec.trim_end_matches('/');
        let after_scheme = trimmed.split_once("://").map_or(trimmed, |(_, rest)| rest);
        let path = after_scheme
            .split(['?', '#'])
            .next()
            .unwrap_or(after_scheme);
        path.rsplit('/').next().unwrap_or(path).to_string()
    }

    /// The local file `object` is, when the source is on this machine.
    pub fn local_path<'o>(&self, object: &'o SourceObject) -> Option<&'o FsPath> {
        match &object.location {
            Location::Local(path) => Some(path),
            _ => None,
        }
    }

    /// Lists what the source holds. A cloud key that is not an object is taken as a prefix;
    /// a pinned import must name a single object.
    ///
    /// # Errors
    /// [`Error::SourceNotFound`] when nothing is there (or not the pinned version);
    /// [`Error::EtagMismatch`]; [`Error::InvalidImport`] for a pin on a prefix or directory;
    /// [`Error::Remote`] / [`Error::Http`] when a request fails.
    pub fn list(&self, pin: &Pin) -> Result<Listing> {
        let listing = match &self.kind {
            Kind::Cloud {
                store,
                bucket_url,
                key,
                is_prefix,
            } => self.watch(&self.spec).wait(
                &self.runtime,
                cloud_list(&self.spec, store.as_ref(), bucket_url, key, *is_prefix, pin),
            )??,
            Kind::Http { client, url } => {
                if pin.version_id.is_some() {
                    return Err(Error::InvalidImport {
                        source_url: self.spec.clone(),
                        reason:
                            "--version-id applies to object storage (an HTTP URL has no versions)"
                                .into(),
                    });
                }
                let object = self
                    .watch(&self.spec)
                    .wait(&self.runtime, http_head(client, url, &self.spec))??;
                Listing {
                    objects: vec![object],
                    single: true,
                }
            }
            Kind::Local { path } => {
                if !pin.is_empty() {
                    return Err(Error::InvalidImport {
                        source_url: self.spec.clone(),
                        reason: "--etag and --version-id apply to object storage and HTTP sources"
                            .into(),
                    });
                }
                local_list(path)?
            }
        };
        if !listing.single && !pin.is_empty() {
            return Err(Error::InvalidImport {
                source_url: self.spec.clone(),
                reason: "--etag and --version-id pin a single object, and this is a prefix".into(),
            });
        }
        if let (Some(expected), [object]) = (&pin.etag, listing.objects.as_slice()) {
            let actual = object.etag.clone().unwrap_or_else(|| "(none)".into());
            if !etag_matches(expected, &actual) {
                return Err(Error::EtagMismatch {
                    url: object.url.clone(),
                    expected: expected.clone(),
                    actual,
                });
            }
        }
        Ok(listing)
    }

    /// Opens `object` (from [`Source::list`]) for reading, pinned to the listed version and
    /// ETag. The stream fails if the object changed since it was listed.
    ///
    /// # Errors
    /// [`Error::SourceChanged`] when it changed; [`Error::SourceNotFound`]; [`Error::Remote`],
    /// [`Error::Http`], [`Error::Io`].
    pub fn read(&self, object: &SourceObject) -> Result<Box<dyn Read + Send>> {
        let inner: Box<dyn Read + Send> = match (&self.kind, &object.location) {
            (Kind::Cloud { store, .. }, Location::Cloud(path)) => {
                let options = GetOptions {
                    if_match: object.etag.clone(),
                    version: object.version_id.clone(),
                    ..Default::default()
                };
                let mut watch = self.watch(&object.url);
                let result = watch
                    .wait(&self.runtime, store.get_opts(path, options))?
                    .map_err(|e| cloud_error(&object.url, object, "GET", e))?;
                let stream = result
                    .into_stream()
                    .map_err(|e| io::Error::other(Box::new(e)))
                    .boxed();
                Box::new(BlockingStream::new(&self.runtime, stream, watch))
            }
            (Kind::Http { client, url }, Location::Http) => {
                let mut request = client.get(url);
                // If-Match compares strongly (RFC 9110 §13.1.1): a weak tag never matches.
                if let Some(etag) = object.etag.as_ref().filter(|e| !e.starts_with("W/")) {
                    request = request.header(reqwest::header::IF_MATCH, etag);
                }
                let mut watch = self.watch(&object.url);
                let response = watch
                    .wait(&self.runtime, async { request.send().await })?
                    .and_then(reqwest::Response::error_for_status)
                    .map_err(|e| http_error(&object.url, "GET", e))?;
                let stream = response
                    .bytes_stream()
                    .map_err(|e| io::Error::other(Box::new(e)))
                    .boxed();
                Box::new(BlockingStream::new(&self.runtime, stream, watch))
            }
            (_, Location::Local(path)) => Box::new(std::fs::File::open(path).at(path)?),
            _ => unreachable!("objects come from their own source's listing"),
        };
        Ok(Box::new(Bounded {
            inner,
            url: object.url.clone(),
            declared: object.size_known.then_some(object.size),
            read: 0,
            total: self.read_total.clone(),
            bounds: self.bounds,
        }))
    }
}

fn local(spec: &str, path: &str, options: &BTreeMap<String, String>) -> Result<(Kind, String)> {
    if !options.is_empty() {
        return Err(Error::InvalidImport {
            source_url: spec.to_string(),
            reason: "--option applies to object storage sources only".into(),
        });
    }
    let path = PathBuf::from(path);
    let absolute = std::fs::canonicalize(&path).map_err(|e| Error::SourceNotFound {
        url: spec.to_string(),
        detail: format!("cannot open it: {e}"),
    })?;
    let spec = absolute.to_string_lossy().into_owned();
    Ok((Kind::Local { path: absolute }, spec))
}

fn object_url(bucket_url: &str, location: &Path) -> String {
    format!("{bucket_url}/{location}")
}

fn from_meta(bucket_url: &str, meta: ObjectMeta, path: String) -> SourceObject {
    SourceObject {
        url: object_url(bucket_url, &meta.location),
        path,
        etag: meta.e_tag,
        version_id: meta.version,
        last_modified: Some(meta.last_modified.timestamp()),
        size: meta.size,
        size_known: true,
        executable: false,
        symlink: None,
        location: Location::Cloud(meta.location),
    }
}

async fn cloud_list(
    spec: &str,
    store: &dyn ObjectStore,
    bucket_url: &str,
    key: &str,
    is_prefix: bool,
    pin: &Pin,
) -> Result<Listing> {
    let url = format!("{bucket_url}/{key}");
    if !is_prefix {
        let path = Path::from(key);
        let options = GetOptions {
            head: true,
            version: pin.version_id.clone(),
            ..Default::default()
        };
        let mut found = store.get_opts(&path, options.clone()).await;
        // HEAD needs the same permission as GET, but some S3-compatible servers apply
        // anonymous-read policies to GET only: ask for the metadata with a GET whose body is
        // dropped unread.
        if matches!(found, Err(object_store::Error::PermissionDenied { .. })) {
            found = store
                .get_opts(
                    &path,
                    GetOptions {
                        head: false,
                        ..options
                    },
                )
                .await;
        }
        match found {
            Ok(result) => {
                let name = key.rsplit('/').next().unwrap_or(key).to_string();
                let mut object = from_meta(bucket_url, result.meta, name);
                // A HEAD of a pinned version may not echo it back; record what was asked.
                if object.version_id.is_none() {
                    object.version_id = pin.version_id.clone();
                }
                return Ok(Listing {
                    objects: vec![object],
                    single: true,
                });
            }
            Err(object_store::Error::NotFound { .. }) if pin.is_empty() => {}
            Err(e) => {
                let target = SourceObject {
                    version_id: pin.version_id.clone(),
                    ..SourceObject::unknown(&url, Location::Cloud(path))
                };
                return Err(cloud_error(&url, &target, "HEAD", e));
            }
        }
    }
    let prefix = (!key.is_empty()).then(|| Path::from(key));
    let metas: Vec<ObjectMeta> =
        store
            .list(prefix.as_ref())
            .try_collect()
            .await
            .map_err(|source| {
                // A key such as `a//b` or `a/./b` has no path dsv (or object_store) can use.
                if let object_store::Error::InvalidPath { source } = &source {
                    return Error::InvalidImport {
                        source_url: spec.to_string(),
                        reason: format!("a key under it cannot be a path in a dataset: {source}"),
                    };
                }
                if crate::failure::classify(&source) == RemoteClass::MissingBucket {
                    return Error::SourceNotFound {
                        url: spec.to_string(),
                        detail: "the bucket does not exist".into(),
                    };
                }
                Error::Remote {
                    remote: spec.to_string(),
                    action: format!("list {url}"),
                    source: crate::failure::remote_failure(source),
                }
            })?;
    if metas.is_empty() {
        return Err(Error::SourceNotFound {
            url: spec.to_string(),
            detail: "no object has this key, and none is under it".into(),
        });
    }
    let mut objects: Vec<SourceObject> = metas
        .into_iter()
        .map(|meta| {
            let full = meta.location.to_string();
            let relative = if key.is_empty() {
                full
            } else {
                full.strip_prefix(key)
                    .map(|r| r.trim_start_matches('/').to_string())
                    .unwrap_or(full)
            };
            from_meta(bucket_url, meta, relative)
        })
        .collect();
    // Zero-byte "folder" placeholders (`prefix/`, `prefix/sub/`, made by storage consoles)
    // are directories, not files; object_store lists them without their slash.
    let mut dirs = std::collections::HashSet::new();
    for object in &objects {
        let mut end = 0;
        while let Some(slash) = object.path[end..].find('/') {
            end += slash;
            dirs.insert(object.path[..end].to_string());
            end += 1;
        }
    }
    objects.retain(|o| !(o.size == 0 && (o.path.is_empty() || dirs.contains(&o.path))));
    objects.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Listing {
        objects,
        single: false,
    })
}

/// Maps an object_store failure on `object` to the error a user can act on.
fn cloud_error(url: &str, object: &SourceObject, action: &str, e: object_store::Error) -> Error {
    let text = format!("{e} {:?}", std::error::Error::source(&e));
    match e {
        object_store::Error::Precondition { .. } => Error::SourceChanged {
            url: url.to_string(),
        },
        _ if crate::failure::classify(&e) == RemoteClass::MissingBucket => Error::SourceNotFound {
            url: url.to_string(),
            detail: "the bucket does not exist".into(),
        },
        object_store::Error::NotFound { .. } => Error::SourceNotFound {
            url: url.to_string(),
            detail: match &object.version_id {
                Some(version) => format!("no object version {version:?} has this key"),
                None => "no object has this key".into(),
            },
        },
        // S3 answers an unknown VersionId with 400 InvalidArgument or 404 NoSuchVersion.
        _ if object.version_id.is_some()
            && (text.contains("NoSuchVersion") || text.contains("InvalidArgument")) =>
        {
            Error::SourceNotFound {
                url: url.to_string(),
                detail: format!(
                    "no object version {:?} has this key",
                    object.version_id.as_deref().unwrap_or_default()
                ),
            }
        }
        source => Error::Remote {
            remote: url.to_string(),
            action: format!("{action} {url}"),
            source: crate::failure::remote_failure(source),
        },
    }
}

fn http_error(url: &str, action: &str, e: reqwest::Error) -> Error {
    match e.status() {
        Some(reqwest::StatusCode::NOT_FOUND | reqwest::StatusCode::GONE) => Error::SourceNotFound {
            url: url.to_string(),
            detail: "the server has no such file (HTTP 404)".into(),
        },
        Some(reqwest::StatusCode::PRECONDITION_FAILED) => Error::SourceChanged {
            url: url.to_string(),
        },
        // reqwest's message repeats the URL requested, credentials included: drop it.
        _ => Error::Http {
            url: url.to_string(),
            action: action.to_string(),
            source: crate::failure::http_failure(e.without_url()),
        },
    }
}

/// HEAD (or GET) of `request_url`; the object is recorded as `url` (without credentials).
async fn http_head(client: &reqwest::Client, request_url: &str, url: &str) -> Result<SourceObject> {
    let mut object = SourceObject::unknown(url, Location::Http);
    let mut response = client.head(request_url).send().await;
    // Some servers refuse HEAD (a presigned S3 URL signs the method too): the headers of a
    // GET whose body is dropped unread say the same.
    if response.as_ref().is_ok_and(|r| {
        matches!(
            r.status(),
            reqwest::StatusCode::FORBIDDEN
                | reqwest::StatusCode::METHOD_NOT_ALLOWED
                | reqwest::StatusCode::NOT_IMPLEMENTED
        )
    }) {
        response = client.get(request_url).send().await;
    }
    let response = response
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| http_error(url, "HEAD", e))?;
    let header = |name: reqwest::header::HeaderName| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    object.etag = header(reqwest::header::ETAG);
    object.last_modified = header(reqwest::header::LAST_MODIFIED)
        .and_then(|v| httpdate::parse_http_date(&v).ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs() as i64);
    let length = header(reqwest::header::CONTENT_LENGTH).and_then(|v| v.parse().ok());
    object.size = length.unwrap_or(0);
    object.size_known = length.is_some();
    let path = response.url().path().to_string();
    object.path = path.rsplit('/').next().unwrap_or("").to_string();
    Ok(object)
}

fn local_list(path: &FsPath) -> Result<Listing> {
    let url = |p: &FsPath| format!("file://{}", p.display());
    let metadata = std::fs::metadata(path).at(path)?;
    // A device or a FIFO has no size to hold its reads to (`/dev/urandom` never ends).
    if !metadata.is_dir() && !metadata.is_file() {
        return Err(Error::InvalidImport {
            source_url: url(path),
            reason: "it is not a regular file or a directory (a device, FIFO or socket has no fixed content)".into(),
        });
    }
    if !metadata.is_dir() {
        let stat = crate::walk::Stat::of(&metadata);
        return Ok(Listing {
            objects: vec![SourceObject {
                url: url(path),
                path: path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                etag: Some(local_etag(&stat)),
                version_id: None,
                last_modified: Some(stat.mtime_ns.div_euclid(1_000_000_000)),
                size: stat.size,
                size_known: true,
                executable: std::os::unix::fs::PermissionsExt::mode(&metadata.permissions())
                    & 0o100
                    != 0,
                symlink: None,
                location: Location::Local(path.to_path_buf()),
            }],
            single: true,
        });
    }
    let scan = crate::walk::scan(path)?;
    scan.refuse_unsupported(path)?;
    let mut objects = Vec::new();
    for entry in scan.entries {
        let full = path.join(&entry.path);
        let (executable, symlink) = match entry.kind {
            crate::walk::ScanKind::File { executable } => (executable, None),
            crate::walk::ScanKind::Symlink { target } => (false, Some(target)),
            _ => continue,
        };
        objects.push(SourceObject {
            url: url(&full),
            path: entry.path,
            etag: Some(local_etag(&entry.stat)),
            version_id: None,
            last_modified: Some(entry.stat.mtime_ns.div_euclid(1_000_000_000)),
            size: entry.stat.size,
            size_known: true,
            executable,
            symlink,
            location: Location::Local(full),
        });
    }
    objects.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(Listing {
        objects,
        single: false,
    })
}

/// Unwraps the [`Error`] a source's reader returned inside an [`io::Error`] (a bound, a
/// stall, a deadline, [`Error::Interrupted`]); any other read error stays as it is.
///
/// # Errors
/// The `io::Error` itself when it carries no [`Error`].
pub fn carried_error(e: io::Error) -> std::result::Result<Error, io::Error> {
    if e.get_ref().is_some_and(|inner| inner.is::<Error>()) {
        let inner = e.into_inner().expect("checked");
        return Ok(*inner.downcast::<Error>().expect("checked"));
    }
    Err(e)
}

/// `e` as an [`io::Error`] of kind `Other` (never `Interrupted`, which `io::copy` and
/// `read_exact` retry), for [`carried_error`] to unwrap.
fn carry(e: Error) -> io::Error {
    io::Error::other(e)
}

/// Waits on a source's requests and body: a stall (less than [`STALL_BYTES`] in
/// `stall_timeout`), the deadline and cancellation end the wait ([`crate::stall`], the rule
/// remote reads follow too), each as the import's error.
struct Watch {
    url: String,
    inner: crate::stall::StallWatch,
}

impl Watch {
    /// The import's error for a wait that `ended`.
    fn error(&self, ended: Ended) -> Error {
        match ended {
            Ended::Cancelled => Error::Interrupted,
            Ended::Deadline(timeout) => Error::SourceIo {
                url: self.url.clone(),
                source: io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the import did not finish within its {} (--timeout); nothing was imported: run it again with a longer --timeout",
                        humanize(timeout)
                    ),
                ),
            },
            Ended::Stalled { bytes } => Error::SourceIo {
                url: self.url.clone(),
                source: io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the source stalled: {bytes} bytes arrived in {} (less than {STALL_BYTES}, --stall-timeout); nothing was imported: check the server or the network, or raise --stall-timeout",
                        humanize(self.inner.stall_timeout())
                    ),
                ),
            },
        }
    }

    /// Counts `bytes` that arrived; fails when the window closed with too few.
    fn arrived(&mut self, bytes: u64) -> Result<()> {
        self.inner.arrived(bytes).map_err(|ended| self.error(ended))
    }

    /// Runs `future` on `runtime` until it completes, or until the watch ends the wait.
    fn wait<F>(&mut self, runtime: &crate::runtime::Runtime, future: F) -> Result<F::Output>
    where
        F: Future + Send,
        F::Output: Send,
    {
        let inner = &mut self.inner;
        let waited = runtime.block_on(inner.wait(future));
        waited.map_err(|ended| self.error(ended))
    }
}

/// A stream of byte blocks read as [`Read`], driving the async stream on `runtime` from a
/// plain thread; each wait for a block is watched ([`Watch`]).
struct BlockingStream {
    runtime: crate::runtime::Runtime,
    stream: BoxStream<'static, io::Result<Bytes>>,
    current: Bytes,
    watch: Watch,
}

impl BlockingStream {
    fn new(
        runtime: &crate::runtime::Runtime,
        stream: BoxStream<'static, io::Result<Bytes>>,
        watch: Watch,
    ) -> Self {
        BlockingStream {
            runtime: runtime.clone(),
            stream,
            current: Bytes::new(),
            watch,
        }
    }
}

impl Read for BlockingStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            let next = self
                .watch
                .wait(&self.runtime, self.stream.next())
                .map_err(carry)?;
            match next {
                Some(Ok(block)) => {
                    self.watch.arrived(block.len() as u64).map_err(carry)?;
                    self.current = block;
                }
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        Ok(n)
    }
}

/// A source object's bytes, held to what it declared and to the import's byte bound, and
/// stopped by cancellation between reads.
struct Bounded {
    inner: Box<dyn Read + Send>,
    url: String,
    /// What the listing said the object holds.
    declared: Option<u64>,
    /// Bytes read of this object.
    read: u64,
    /// Bytes read of the source, every object together.
    total: Arc<AtomicU64>,
    bounds: ReadBounds,
}

impl Bounded {
    fn refuse(&self, reason: String) -> io::Error {
        carry(Error::InvalidImport {
            source_url: self.url.clone(),
            reason,
        })
    }
}

impl Read for Bounded {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        crate::interrupt::check().map_err(carry)?;
        // One byte past a bound is enough to know it was passed.
        let total = self.total.load(Ordering::Relaxed);
        let mut room = self.bounds.max_bytes.saturating_sub(total);
        let declared = self.declared.unwrap_or(self.bounds.max_undeclared_bytes);
        room = room.min(declared.saturating_sub(self.read));
        let want = buf
            .len()
            .min(usize::try_from(room.saturating_add(1)).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.read += n as u64;
        let total = self.total.fetch_add(n as u64, Ordering::Relaxed) + n as u64;
        if let Some(declared) = self.declared
            && self.read > declared
        {
            return Err(self.refuse(format!(
                "it sent more than the {declared} bytes it declared (Content-Length or listed size); refused, nothing was imported (a misbehaving server, or a file that grew while it was read)"
            )));
        }
        if self.declared.is_none() && self.read > self.bounds.max_undeclared_bytes {
            return Err(self.refuse(format!(
                "it declared no length (no Content-Length) and sent more than {} bytes, the bound of such a body; refused, nothing was imported (pass --max-bytes SIZE or --max-undeclared-bytes SIZE to read more)",
                self.bounds.max_undeclared_bytes
            )));
        }
        if total > self.bounds.max_bytes {
            return Err(self.refuse(format!(
                "it sent more than {} bytes, the import's bound ({}); refused, nothing was imported",
                self.bounds.max_bytes,
                self.bounds.reason()
            )));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_match_with_or_without_quotes() {
        assert!(etag_matches("\"abc\"", "abc"));
        assert!(etag_matches("W/\"abc\"", "\"abc\""));
        assert!(!etag_matches("\"abc\"", "\"abd\""));
    }

    #[test]
    fn basenames() {
        let open = |spec: &str| Source::open(spec, &BTreeMap::new()).unwrap();
        assert_eq!(open("s3://b/x/mnist.zip").basename(), "mnist.zip");
        assert_eq!(open("s3://b").basename(), "b");
        assert_eq!(open("s3://b/prefix/").basename(), "prefix");
        assert_eq!(open("https://h/a/f.tar.gz?x=1").basename(), "f.tar.gz");
    }

    #[test]
    fn a_prefix_by_its_form_is_an_object_storage_url_ending_in_a_slash_or_naming_a_bucket() {
        for prefix in [
            "s3://b",
            "s3://b/",
            "gs://b/team/",
            "az://c//",
            "abfss://c/p/",
        ] {
            assert!(is_prefix_url(prefix), "{prefix}");
        }
        for single in [
            "s3://b/key",
            "s3://b/team/mnist.zip",
            "https://h/",
            "http://h/dir/",
            "file:///data/",
            "data/",
            "ftp://host",
        ] {
            assert!(!is_prefix_url(single), "{single}");
        }
    }
}
