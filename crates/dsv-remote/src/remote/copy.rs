//! Packs from one remote to another without a local copy (`dsv copy`): a server-side copy
//! when both remotes are prefixes of one bucket reached the same way, otherwise a streamed
//! GET -> PUT through bounded memory, checked in flight; and packs built in memory going up.
//!
//! # A streamed pack is checked before it exists on the destination
//!
//! The source's `.idx` is read first (bounded and checked by `parse_tail` against the
//! pack's listed size). Then the pack's bytes stream from a GET into the upload: every byte
//! is hashed with BLAKE3 as it passes and the last bytes are compared with the `.idx`. A
//! pack under [`MULTIPART_THRESHOLD`] is held whole (at most that many bytes) and put with a
//! create-only PUT only once its hash equals its name; a larger one goes up as a multipart
//! upload of [`PART_SIZE`] parts, [`PARTS_IN_FLIGHT`] at a time, whose completion (the
//! moment the key appears) is sent only once the hash and the tail match; on any mismatch
//! the upload is aborted, so a key on the destination never holds bytes other than its name
//! says. The `.idx` goes up last, as push does, so its presence still means the pack is
//! complete. Memory: at most `jobs` packs in flight, each holding at most
//! [`MULTIPART_THRESHOLD`] bytes (whole) or [`PARTS_IN_FLIGHT`] parts of [`PART_SIZE`] bytes.
//!
//! # Server-side copies
//!
//! The bytes never leave the provider when:
//! - the two remotes share scheme, bucket and options ([`Remote::shares_bucket_with`]):
//!   `object_store`'s `copy` (S3 CopyObject, Azure Copy Blob, GCS rewrite), which addresses
//!   keys of one bucket;
//! - both are S3 remotes with the same options (endpoint, region; the credentials come from
//!   the same environment) in two buckets: a CopyObject (`PUT` with `x-amz-copy-source`, AWS
//!   S3 API reference) sent by dsv itself, signed with SigV4 by `object_store`'s
//!   `AwsAuthorizer` with the destination's credentials, since `object_store`'s `copy` cannot
//!   name another bucket. A copy the service refuses (a 4xx or 5xx, or the 200 with an
//!   `<Error>` body S3 may send) falls back to streaming that pack.
//!
//! Remotes in two clouds (or Azure containers, GCS buckets) stream. The pack goes first, its
//! `.idx` after.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStoreExt, WriteMultipart};

use super::{MULTIPART_THRESHOLD, PART_SIZE, PARTS_IN_FLIGHT, Remote, index_key, pack_key};
use crate::error::{Error, Result};
use crate::id::ObjectId;

/// The S3 settings a request outside `object_store` needs (`object_store`'s configuration
/// keys as the builder resolved them).
#[derive(Debug, Clone)]
pub(super) struct S3Settings {
    pub(super) bucket: String,
    pub(super) region: String,
    pub(super) endpoint: Option<String>,
    pub(super) virtual_hosted: bool,
    pub(super) skip_signature: bool,
}

/// An S3 remote's account: its settings and credentials, and what two remotes must share for
/// a CopyObject between their buckets (scheme and options).
#[derive(Debug, Clone)]
pub(super) struct S3Account {
    settings: S3Settings,
    credentials: object_store::aws::AwsCredentialProvider,
    identity: String,
}

impl S3Account {
    pub(super) fn new(
        settings: S3Settings,
        credentials: object_store::aws::AwsCredentialProvider,
    ) -> Self {
        S3Account {
            settings,
            credentials,
            identity: String::new(),
        }
    }

    pub(super) fn with_identity(mut self, identity: String) -> Self {
        self.identity = identity;
        self
    }

    /// The URL of the bucket, as `object_store` builds it (`AmazonS3Builder::build`).
    fn bucket_endpoint(&self) -> String {
        let S3Settings {
            bucket,
            region,
            endpoint,
            virtual_hosted,
            ..
        } = &self.settings;
        match (endpoint, virtual_hosted) {
            (Some(endpoint), true) => endpoint.clone(),
            (Some(endpoint), false) => format!("{}/{bucket}", endpoint.trim_end_matches('/')),
            (None, true) => format!("https://{bucket}.s3.{region}.amazonaws.com"),
            (None, false) => format!("https://s3.{region}.amazonaws.com/{bucket}"),
        }
    }
}

/// A key percent-encoded for a URL path: every byte but unreserved characters and `/`.
fn encode_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for byte in key.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// How long a CopyObject may take before it counts as refused (and the pack streams): S3
/// copies a pack of tens of MiB in well under a second; a copy still running after this is
/// stuck, not slow.
const COPY_OBJECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// The longest CopyObject response read, in bytes (a result or an error is a few hundred).
const MAX_COPY_RESPONSE: usize = 64 * 1024;

/// The HTTP client of CopyObject requests, one per process: 5 s to connect (as
/// `object_store`'s default), [`COPY_OBJECT_TIMEOUT`] in all.
fn http_client() -> &'static reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(5))
            .timeout(COPY_OBJECT_TIMEOUT)
            .build()
            .unwrap_or_default()
    })
}

/// What [`Remote::copy_packs_from`] moved.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CopyCounts {
    /// Packs copied by the provider itself (no byte passed through this machine).
    pub server_side: u64,
    /// Packs streamed through this machine.
    pub streamed: u64,
    /// Bytes of the packs copied either way (their `.idx` are part of them).
    pub bytes: u64,
}

/// The largest `.idx` a pack of `size` bytes can have, as `refresh_indexes` bounds it.
fn index_limit(size: u64) -> u64 {
    size.saturating_sub(crate::pack::format::HEADER_LEN)
        .min(crate::pack::format::MAX_INDEX_LEN + crate::pack::format::TRAILER_LEN)
}

/// Checks bytes of a pack as they pass: their BLAKE3 against the pack's name, and the bytes
/// at the end against its `.idx`.
struct InFlightCheck<'a> {
    hasher: blake3::Hasher,
    position: u64,
    size: u64,
    tail: &'a [u8],
}

impl InFlightCheck<'_> {
    /// Takes the next piece; an error names what is wrong.
    fn update(&mut self, piece: &[u8]) -> std::result::Result<(), String> {
        let end = self.position + piece.len() as u64;
        if end > self.size {
            return Err(format!(
                "the pack is longer than the {} bytes listed",
                self.size
            ));
        }
        let tail_start = self.size - self.tail.len() as u64;
        if end > tail_start {
            let from = self.position.max(tail_start);
            let got = &piece[(from - self.position) as usize..];
            let want = &self.tail[(from - tail_start) as usize..(end - tail_start) as usize];
            if got != want {
                return Err("the pack's last bytes differ from its .idx".into());
            }
        }
        self.hasher.update(piece);
        self.position = end;
        Ok(())
    }

    /// Whether the whole pack passed: every byte seen and its hash its name.
    fn finish(&self, id: &ObjectId) -> std::result::Result<(), String> {
        if self.position != self.size {
            return Err(format!(
                "the pack ended after {} of the {} bytes listed",
                self.position, self.size
            ));
        }
        if ObjectId::from(self.hasher.finalize()) != *id {
            return Err("the pack's BLAKE3 is not its name".into());
        }
        Ok(())
    }
}

impl Remote {
    /// True when this remote and `other` lie in one bucket (container) reached with the same
    /// scheme and options, so an object can go from one to the other with a server-side
    /// copy. Never true for local directories.
    pub(crate) fn shares_bucket_with(&self, other: &Remote) -> bool {
        self.bucket_identity.is_some() && self.bucket_identity == other.bucket_identity
    }

    /// True when a pack can go from `other` to this remote without passing through this
    /// machine: one bucket, or two S3 buckets reached with the same options.
    pub(crate) fn can_copy_server_side_from(&self, other: &Remote) -> bool {
        self.shares_bucket_with(other)
            || matches!((&self.s3_account, &other.s3_account),
                (Some(a), Some(b)) if a.identity == b.identity && !a.settings.skip_signature)
    }

    /// The key of `key` in the whole bucket.
    fn in_bucket(&self, key: &Path) -> Path {
        if self.prefix.as_ref().is_empty() {
            key.clone()
        } else {
            Path::from(format!("{}/{key}", self.prefix))
        }
    }

    /// Copies packs of remote `from` (id and size in bytes as `from` lists them), each with
    /// its `.idx` after it, into this remote, `jobs` packs at a time; calls `done(bytes)`
    /// after each. A server-side copy where `Remote::shares_bucket_with` holds, else a
    /// stream checked in flight (see the module's rustdoc). Requests are counted on the
    /// remote that receives them.
    ///
    /// # Errors
    /// [`Error::Remote`]; [`Error::Corrupt`] naming `FROM:packs/<id>.pack` (or `.idx`) when
    /// the source's bytes are not what their name says (nothing is left under that key
    /// here); [`Error::Interrupted`].
    pub fn copy_packs_from(
        &self,
        from: &Remote,
        packs: Vec<(ObjectId, u64)>,
        jobs: usize,
        done: &(dyn Fn(u64) + Sync),
    ) -> Result<CopyCounts> {
        let same_bucket = self.shares_bucket_with(from);
        let across_buckets = !same_bucket && self.can_copy_server_side_from(from);
        let copied_bytes = AtomicU64::new(0);
        let server_side = AtomicU64::new(0);
        let count = packs.len() as u64;
        self.runtime.block_on(async {
            let mut stream = futures_util::stream::iter(packs.into_iter().map(|(id, size)| {
                let (copied_bytes, server_side) = (&copied_bytes, &server_side);
                async move {
                    let copied = if same_bucket {
                        self.copy_server_side(from, &id).await?;
                        true
                    } else {
                        across_buckets && self.copy_object_across_buckets(from, &id).await
                    };
                    if copied {
                        server_side.fetch_add(1, Ordering::Relaxed);
                    } else {
                        self.copy_streamed(from, &id, size).await?;
                    }
                    crate::interrupt::check()?;
                    copied_bytes.fetch_add(size, Ordering::Relaxed);
                    Ok::<_, Error>(size)
                }
            }))
            .buffer_unordered(crate::parallel::clamp_jobs(jobs));
            while let Some(size) = stream.next().await {
                done(size?);
            }
            Ok::<_, Error>(())
        })?;
        let server_side = server_side.into_inner();
        Ok(CopyCounts {
            server_side,
            streamed: count - server_side,
            bytes: copied_bytes.into_inner(),
        })
    }

    async fn copy_server_side(&self, from: &Remote, id: &ObjectId) -> Result<()> {
        for key in [pack_key(id), index_key(id)] {
            self.count(1);
            self.bucket
                .copy(&from.in_bucket(&key), &self.in_bucket(&key))
                .await
                .map_err(self.fail(format!("copy {key} from {}", from.name)))?;
        }
        Ok(())
    }

    /// Copies pack `id` and then its `.idx` from `from`'s bucket into this remote's with
    /// CopyObject requests signed here (see the module's rustdoc); false when the service
    /// refused either (the caller streams the pack instead).
    async fn copy_object_across_buckets(&self, from: &Remote, id: &ObjectId) -> bool {
        let (Some(to_account), Some(from_account)) = (&self.s3_account, &from.s3_account) else {
            return false;
        };
        for key in [pack_key(id), index_key(id)] {
            self.count(1);
            let source = format!(
                "/{}/{}",
                from_account.settings.bucket,
                encode_key(from.in_bucket(&key).as_ref())
            );
            let url = format!(
                "{}/{}",
                to_account.bucket_endpoint(),
                encode_key(self.in_bucket(&key).as_ref())
            );
            match self.send_copy_object(to_account, &url, &source).await {
                Ok(()) => {}
                Err(reason) => {
                    tracing::debug!(remote = %self.name, %key, %reason, "server-side copy refused; streaming");
                    return false;
                }
            }
        }
        true
    }

    async fn send_copy_object(
        &self,
        account: &S3Account,
        url: &str,
        source: &str,
    ) -> std::result::Result<(), String> {
        let credential = account
            .credentials
            .get_credential()
            .await
            .map_err(|e| e.to_string())?;
        let mut request: object_store::client::HttpRequest = http::Request::builder()
            .method("PUT")
            .uri(url)
            .header("x-amz-copy-source", source)
            .body(object_store::client::HttpRequestBody::from(Bytes::new()))
            .map_err(|e| e.to_string())?;
        object_store::aws::AwsAuthorizer::new(&credential, "s3", &account.settings.region)
            .try_authorize(&mut request, None)
            .map_err(|e| e.to_string())?;
        let mut send = http_client().put(url).header("content-length", "0");
        for (name, value) in request.headers() {
            send = send.header(name, value);
        }
        let mut response = send.send().await.map_err(|e| e.to_string())?;
        let status = response.status();
        // S3 may answer 200 and then report a failure in the body. A CopyObjectResult or an
        // Error is a few hundred bytes: the body is read up to MAX_COPY_RESPONSE, never more,
        // and a longer one is a refusal.
        let mut body = Vec::new();
        while let Some(piece) = response.chunk().await.map_err(|e| e.to_string())? {
            body.extend_from_slice(&piece);
            if body.len() > MAX_COPY_RESPONSE {
                return Err(format!(
                    "{status}: a response longer than {MAX_COPY_RESPONSE} bytes"
                ));
            }
        }
        let body = String::from_utf8_lossy(&body);
        if !status.is_success() || body.contains("<Error>") {
            return Err(format!(
                "{status}: {}",
                body.chars().take(1000).collect::<String>()
            ));
        }
        Ok(())
    }

    async fn copy_streamed(&self, from: &Remote, id: &ObjectId, size: u64) -> Result<()> {
        let corrupt =
            |key: &Path, detail: String| Error::corrupt(format!("{}:{key}", from.name), detail);
        let index = index_key(id);
        from.count(1);
        let (tail, _) = from.get_bounded(&index, index_limit(size)).await?;
        crate::pack::reader::parse_tail(&tail, size).map_err(|detail| corrupt(&index, detail))?;
        let key = pack_key(id);
        from.count(1);
        let got = from
            .store
            .get(&key)
            .await
            .map_err(from.fail(format!("download {key}")))?;
        if got.meta.size != size {
            return Err(corrupt(
                &key,
                format!(
                    "{} bytes now, {size} when listed (a pack never changes)",
                    got.meta.size
                ),
            ));
        }
        let mut body = got.into_stream();
        let mut check = InFlightCheck {
            hasher: blake3::Hasher::new(),
            position: 0,
            size,
            tail: &tail,
        };
        if size < MULTIPART_THRESHOLD {
            let mut bytes = Vec::with_capacity(size as usize);
            while let Some(piece) = body.next().await {
                let piece = piece.map_err(from.fail(format!("download {key}")))?;
                check.update(&piece).map_err(|d| corrupt(&key, d))?;
                bytes.extend_from_slice(&piece);
            }
            check.finish(id).map_err(|d| corrupt(&key, d))?;
            self.put_create(&key, Bytes::from(bytes)).await?;
        } else {
            // Multipart: the key appears only when the upload completes, which happens only
            // once every byte passed the check; otherwise the upload is aborted.
            let upload = self
                .store
                .put_multipart(&key)
                .await
                .map_err(self.fail(format!("start upload of {key}")))?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, PART_SIZE);
            let mut failure = None;
            while let Some(piece) = body.next().await {
                let piece = match piece {
                    Ok(piece) => piece,
                    Err(e) => {
                        failure = Some(from.fail(format!("download {key}"))(e));
                        break;
                    }
                };
                if let Err(detail) = check.update(&piece) {
                    failure = Some(corrupt(&key, detail));
                    break;
                }
                if let Err(e) = writer.wait_for_capacity(PARTS_IN_FLIGHT).await {
                    failure = Some(self.fail(format!("upload {key}"))(e));
                    break;
                }
                writer.write(&piece);
            }
            if failure.is_none()
                && let Err(detail) = check.finish(id)
            {
                failure = Some(corrupt(&key, detail));
            }
            if let Some(failure) = failure {
                let _ = writer.abort().await;
                return Err(failure);
            }
            self.count(2 + size.div_ceil(PART_SIZE as u64));
            writer
                .finish()
                .await
                .map_err(self.fail(format!("finish upload of {key}")))?;
        }
        self.put_create(&index, tail).await
    }

    /// Uploads packs held in memory, each `(id, bytes, index offset)`, with its `.idx` (the
    /// bytes from the index offset on) after it, `jobs` at a time; calls `done(bytes)` after
    /// each. The caller built them ([`crate::pack::PackWriter::in_memory`]), so their names
    /// are their hashes. A pack already on the remote is success.
    ///
    /// # Errors
    /// [`Error::Remote`]; [`Error::Interrupted`].
    pub fn put_packs_in_memory(
        &self,
        packs: Vec<(ObjectId, Bytes, usize)>,
        jobs: usize,
        done: &(dyn Fn(u64) + Sync),
    ) -> Result<()> {
        let packs = packs
            .into_iter()
            .map(|(id, bytes, index_offset)| {
                (
                    id,
                    super::PackBody::Memory {
                        bytes,
                        index_offset,
                    },
                )
            })
            .collect();
        self.put_pack_bodies(packs, jobs, done)
    }
}
