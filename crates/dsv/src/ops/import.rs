//! `import` and `update`: a dataset version from object storage, a URL or a local path.
//!
//! list the source ([`crate::source`]) → for each object, reuse what the dataset's head
//! recorded when its ETag, Last-Modified, size and VersionId are unchanged, else stream it
//! (expanding an archive member by member, [`crate::archive`]) through the chunker
//! ([`super::ingest::StreamWriter`]) → build the trees and a [`Provenance`] naming each
//! file's source → record the version ([`super::commit::record_version`]). A failure before
//! the version is recorded deletes the packs written so far: no version, no dataset, no data
//! (a failure while recording, such as a full disk, leaves unnamed packs for `gc`).
//!
//! # How an import runs
//!
//! `ops/import.rs` (`import()`, `update()`, `run()`), `source.rs` (sources), `archive.rs`
//! (archives). An import ends like a commit, with the same pipeline and the same last stage;
//! what differs is where the bytes come from, and that the version also names a provenance
//! object. Flags, sources and errors are in `docs/cli.md#dsv-import`; the
//! provenance encoding in `docs/format.md#provenance-encoding`.
//!
//! | file | job |
//! | --- | --- |
//! | `source.rs` | `Source::open` parses the source: object storage through `remote::cloud_backend` (the `object_store` builders remotes use, from the environment, the URL and `--option`), HTTP(S) through `reqwest`, or a local path (canonicalized); `--option` with either of the last two is `InvalidImport`. `Source::list` returns a `Listing`: the objects, each with URL, path, ETag, VersionId, Last-Modified and size, and whether it is one object or a prefix. `Source::read` opens one listed object as a blocking `Read`, held to the source's `ReadBounds` (`Bounded`: the object's declared size and the import's byte bound; `Watch`: the stall timeout, the deadline and the cancellation, looked at while a request or a block is awaited). A tokio runtime with two worker threads drives the asynchronous clients (`BlockingStream` turns a byte stream into a `Read`). |
//! | `archive.rs` | `Format::detect` (by extension); `archive::read` calls back once per member with its checked path, its kind and a reader of its bytes, and returns how many members it skipped; `member_path` (the path checks); the expansion limits |
//! | `ops/import.rs` | the reuse decision (`Previous`), reading (`read_objects`, `add_member`), the version's listing (`flat_entries`, with `Collected::insert_new` refusing two keys for one path) and its `Provenance` |
//! | `ops/ingest.rs`, `parallel.rs` | `with_ingester` (compressor threads behind a bounded frame queue, into one `PackSink`) and `StreamWriter` (any `Read` → FastCDC chunks → BLAKE3 → chunks the store lacks into frames, a file map for a file of several chunks); `parallel::for_each_with` runs the reading threads, each with its own `StreamWriter`. Commit's `ingest_files` is built on the same three. |
//! | `ops/commit.rs` | `check_tag_free` (the early tag check, shared with commit); `record_version`: new trees and the provenance object, then the version, sealing and one catalog transaction (commit steps 12–17) |
//!
//! ## Data flow
//!
//! `run()`, for `import` and `update` alike:
//!
//! 1. **Open and name** (`import()`). `Source::open`; the tag's and dataset's names are
//!    checked; the default dataset name is `Source::basename` without an archive extension.
//! 2. **List** (`Source::list`), the only requests made before data is read. Object storage: a
//!    HEAD of the key, asking for the pinned VersionId (refused with `PermissionDenied`, as by
//!    servers that let anonymous readers GET but not HEAD, it is asked again as a GET whose
//!    body is dropped unread); if no object has the key and nothing is pinned, a LIST of the
//!    key as a prefix. HTTP: a HEAD. Local: a stat (anything but a regular file or a
//!    directory is refused: a device or FIFO has no size to hold its reads to), or for a directory
//!    the commit walk (`walk::scan`, `refuse_unsupported`), keeping files and symlinks. The pins
//!    are checked here (`--etag` against the listed ETag, quotes and `W/` ignored), so a pin
//!    that does not match fails before anything is written.
//! 3. **Archive or files.** A single object whose key or source name has an archive extension
//!    is expanded, unless `--no-extract`; anything else is read as files. Then
//!    `check_tag_free`: a `--tag` naming another version than the head fails here, before any
//!    object is read.
//! 4. **Reuse** (`Previous`). If the dataset's head names a provenance object, it is read and
//!    its records indexed by URL (`by_url`), so a prefix of N objects is checked in O(N). A
//!    listed object is unchanged when the head's records for its URL have the listing's ETag
//!    (or, when neither side has one, a Last-Modified), and Last-Modified and size equal the
//!    listing's (VersionId too, when both have one), and the head was expanded the same way.
//!    This is the rule of the ref cache (`ops::sync`), applied to the source: a copy is
//!    reused while the object's identity still matches what was recorded when the copy was
//!    made.
//!    - **The head stands** when nothing is to be read, the source is the head's, the
//!      unchanged objects account for every record of the head's provenance, and no tag is
//!      given: the report is made from the head's version record (`created: false`) and
//!      `run()` returns, without reading the head's trees, taking the data lock or making a
//!      sink. This is the usual answer of `update`.
//!    - Otherwise, if any object is unchanged, the head's tree is flattened and the files of
//!      the unchanged objects are taken from it as they are (ids, sizes, executable bits,
//!      link targets), with the head's directories for an archive; nothing of them is read.
//!      A file of a prefix or directory takes its path under this listing (`key_path`), which
//!      may differ from the head's when another prefix is imported into the dataset, and two
//!      keys making one path are refused (`InvalidImport`).
//! 5. **Bounds.** (Before the listing, `read_bounds` gave the source its `ReadBounds`: the
//!    byte bound from `--max-bytes`, else for a network source from `statvfs` of the store's
//!    disk; the stall timeout; the deadline.) The declared sizes of the objects to read are
//!    summed and refused past the byte bound (`Source::check_declared`), and the bound
//!    becomes the archive limits' `max_stored`. Then the **data lock** shared, held to the
//!    end as in commit (step 4); stale temporary packs removed; a `PackSink`.
//! 6. **Read** the remaining objects inside `with_ingester`, whose `jobs` compressor threads
//!    append frames to the sink:
//!    - **Files** (a prefix, a directory, a single object that is no archive): `read_objects`
//!      runs `parallel::for_each_with` on `--jobs` threads (default 8, `DEFAULT_JOBS`: each
//!      thread has one request in flight), each with its own `StreamWriter` and catalog
//!      connection, taking objects from a shared counter: `Source::read`, then
//!      `StreamWriter::ingest`. The bytes read must add up to the listed size, when the listing
//!      gave one. Progress counts the bytes read.
//!    - **An archive**: one `StreamWriter` on the calling thread. For tar formats, a thread of
//!      its own (`read_ahead`) reads the source, decompresses it (`flate2`, `bzip2`, `liblzma`,
//!      each accepting concatenated streams) and applies the expansion limits, up to four
//!      blocks of 1 MiB ahead of the `tar` crate, which parses headers on the calling thread.
//!      Each member's path is checked from its header before any of its bytes are stored,
//!      then its reader goes to `StreamWriter::ingest`; members that are not files,
//!      directories or links (devices, FIFOs) are skipped and counted (`members_skipped`). A
//!      zip's central directory is at its end: a local zip is read in place, any other is
//!      first copied to an unnamed temporary file in `.dsv/tmp/` (`tempfile_in`); then its
//!      declared sizes are checked against the limits, and its members are read in directory
//!      order.
//! 7. **Listing** (`flat_entries`): the reused and read files and symlinks, the directories
//!    their paths imply and an archive's own, sorted component-wise as the walk sorts. A path
//!    that is both a file and a directory is refused. Then the symlink-through-symlink check of
//!    commit step 10.
//! 8. **Trees and provenance.** `tree::build`, then the `Provenance`: the source, whether it
//!    was expanded, the pins, and one record per file and symlink (URL, ETag, VersionId,
//!    Last-Modified, size, archive member), sorted by path. When the source, the expansion and
//!    every record equal the head's, the head's provenance is kept instead, pins included: an
//!    unchanged pinned import then updates to nothing, and pins given to a re-import of
//!    unchanged objects are not recorded.
//! 9. **Record** (`record_version`): as commit steps 12–17, with the provenance object written
//!    after the new trees, and no workspace or stat cache. No version is made when the head has
//!    the same tree and the same provenance id. The transaction checks the tag again (step 3
//!    checked it before any read).
//!
//! `update()` reads the head's provenance (`NotImported` if there is none) and runs the same
//! stages on its `source`, without pins, expanding only if the head was expanded. So its cost
//! follows step 4: an unchanged single object is one HEAD, an unchanged prefix one listing,
//! plus reading the head's provenance locally (not its trees); a changed object is read whole,
//! and its unchanged content is found in the store by chunk and stored once.
//!
//! ## Streaming
//!
//! No object is held whole in memory. Every source is a `Read` consumed by the chunker in
//! 1 MiB blocks. Beyond commit's bounded frame queue, an import holds only the read-ahead
//! blocks of a tar format and, for a zip symlink, its target. The exception is on disk: a zip
//! downloaded from object storage or HTTP is read from a temporary copy, since its directory
//! comes last, so the store's disk needs room for it; the copy has no name and goes when the
//! import ends, however it ends. A local zip is read in place.
//!
//! ## Safety
//!
//! - **Outside input is bounded in bytes and time** (`ReadBounds`). Every object's reader
//!   (`Bounded`, around each source's stream, local files included) fails at the first byte
//!   past what the object declared, or past the import's byte bound (all objects together);
//!   declared sizes past the bound are refused before any read (step 5); an archive may
//!   expand no further than the bound either. Every wait on the network (HEAD, LIST, GET, each
//!   block of a body) runs in `Watch::wait`, which polls the future with a timeout of at most
//!   100 ms and fails it when less than `STALL_BYTES` (1 KiB) arrived in the stall timeout,
//!   when the deadline passed, or when the operation's `CancelToken` is cancelled. The
//!   token is taken from the reading thread (the tar read-ahead thread runs under its
//!   caller's), so Ctrl-C or SIGTERM stops an import blocked on a silent server within
//!   about 0.1 s. The errors travel through `Read` inside an `io::Error` of kind `Other`
//!   (`source::carried_error` takes them out), so they reach the user as themselves
//!   (`InvalidImport`, `Io` of kind `TimedOut`, `Interrupted`), not as a truncated archive.
//! - **Nothing is written before the pins are checked**: in step 2 the VersionId is asked for
//!   and the ETag compared, before the sink exists.
//! - **The bytes stored are the bytes the provenance names.** Each GET from object storage
//!   asks for the listed VersionId with `If-Match` on the listed ETag; an HTTP GET sends
//!   `If-Match` with the HEAD's ETag unless it is weak (`W/"…"`: `If-Match` compares strongly,
//!   RFC 9110 §13.1.1, so it would never match). An object replaced after the listing makes
//!   the read fail (HTTP 412, `SourceChanged`). A source that fails part-way is an I/O error;
//!   one that ends early fails as a plain file shorter than listed (I/O error) or as a
//!   truncated archive (`BadArchive`).
//! - **An archive cannot write outside its dataset**: member paths are checked before their
//!   bytes are stored (`member_path`: no absolute path, drive letter or `..`, and every
//!   component a valid tree name), symlink targets with the walk's lexical rule and then
//!   `tree::symlink_through_symlink`, hard links only to files already read. Checkout applies
//!   its own checks again when it writes a version.
//! - **Decompression bombs** are stopped by the limits, counted on the stream as it expands
//!   (and from a zip's directory before it expands).
//! - **Nothing is kept of a failed import.** An error before step 6 comes before anything is
//!   written. Any error in steps 6 and 7 (a read, a check, a refused member, a limit, a
//!   bound, a stall or deadline, Ctrl-C or SIGTERM, also while a read waits, another
//!   thread's failure) calls `PackSink::abandon`, which
//!   deletes the packs sealed so far and the open temporary pack, before anything is
//!   recorded: no dataset, no version, no data. Inside `record_version`, an error while
//!   writing trees or in the catalog transaction (a tag another process set since step 3)
//!   deletes them the same way, as for a failed commit; an error while sealing the last pack
//!   (a full disk) leaves the packs sealed so far unreferenced, for `gc`.
//!
//! ## Provenance is an object
//!
//! A version is a root tree plus metadata, provenance included, with an id that hashes its
//! canonical encoding (`docs/format.md`). Provenance holds one record per file, so it grows with
//! the dataset, like its trees. It is kept out of the version encoding, which stays a few
//! short lines that `log` and `show` read, and out of the catalog alone, which never leaves the
//! machine. Instead it is an object of its own kind (5), content-addressed like the others,
//! and the version names it in its `provenance` line. So:
//!
//! - the version id covers the provenance: changing any record gives another version;
//! - it is hash-checked whenever it is read (`ObjectReader::provenance`);
//! - it travels with its version: push sends it with the version (`objects_to_send`), fetch and
//!   clone download it with versions, trees and file maps (metadata frames, no chunks),
//!   `gc` keeps every provenance object as it keeps every version object, and `verify` reads
//!   each walked version's;
//! - a committed version has no `provenance` line, so versions made before imports existed
//!   keep their encoding and ids.
//!
//! ## Known limits of import
//!
//! - Local sources are not checked for changes while they are read (commit checks size and
//!   mtime after reading each file); only a plain file's size is compared with its listing.
//! - An HTTP source must answer HEAD. Without an ETag, or with a weak one, there is no
//!   `If-Match`; without an ETag, reuse rests on Last-Modified (whole seconds) and size.
//!   Without Content-Length the body is held to the byte bound only and the provenance
//!   records 0, so reuse then rests on the ETag or Last-Modified alone.
//! - The default byte bound is the free space when the import starts: it does not count what
//!   other processes write meanwhile, and it bounds bytes read (or expanded), not bytes
//!   stored, so an import that deduplicates well against the store may need a larger
//!   `--max-bytes`. A local source has no default bound (its files are held to their sizes).
//! - A second Ctrl-C or SIGTERM exits at once, as `kill -9` does: the packs sealed so far stay
//!   unreferenced, for `gc`. One is enough to stop an import.
//! - `--option` settings are not recorded, so `dsv update` needs them again.
//! - Objects under a prefix or in a directory are never expanded, and they bring no empty
//!   directories. Tar members other than files, directories and links are skipped, with a
//!   `WARN` log event and a count (`members_skipped`).
//! - An archive's members are chunked and hashed on one thread; objects of a prefix or a
//!   directory on `--jobs` threads.
//! - `dsv update` records a version whenever the provenance differs, even with the same tree:
//!   when an object was rewritten with the same bytes (a new ETag or Last-Modified). Pins
//!   given to a re-import of unchanged objects are not recorded (step 8).
//! - GCS sources go through the same `object_store` code as S3 but are not tested; the tests
//!   use moto (a versioned bucket, and a public one read without credentials), Azurite (a
//!   prefix), a static HTTP server with ETags (`scripts/http-server.py`) and local files.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::sync::Mutex;

use super::commit::{VersionDraft, record_version};
use super::ingest::{
    IngestError, IngestOptions, IngestStats, PackSink, ParentFile, StreamWriter, with_ingester,
};
use crate::archive::{self, Format, Limits, MemberKind};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::{FileProvenance, Provenance};
use crate::progress::{Progress, Unit};
use crate::revision::check_name;
use crate::source::{Listing, Pin, ReadBounds, Source, SourceObject};
use crate::store::Store;
use crate::tree::{self, FlatEntry, FlatKind};

/// Whether archives are expanded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extract {
    /// A single object whose name ends in an archive extension is expanded; anything else
    /// is stored as it is.
    Auto,
    /// The single object must be an archive dsv can expand (`--extract`).
    Always,
    /// Store every object as it is (`--no-extract`).
    Never,
}

/// How sources are read, for `import` and `update`.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SourceSettings {
    /// object_store settings (as `remote add --option`).
    pub options: BTreeMap<String, String>,
    /// How far an archive may expand.
    pub limits: Limits,
    /// Pipeline tuning.
    pub ingest: IngestOptions,
    /// Objects of a prefix or directory read at once (each a request in flight).
    pub requests: usize,
    /// Who makes the version (`None`: "unknown"; the CLI passes `DSV_AUTHOR`,
    /// `$USER@hostname`, git's identity or the uid's account name).
    pub author: Option<String>,
    /// The most bytes read from the source, every object together; also the most an
    /// archive may expand to. `None`: for a source read over the network, what the store's
    /// disk can hold ([`ReadBounds::disk_bound`]); a local source is held to its files'
    /// listed sizes only.
    pub max_bytes: Option<u64>,
    /// Without `max_bytes`, the most bytes read of one object of a source read over the
    /// network that declares no length (an HTTP body without Content-Length): default
    /// [`crate::source::DEFAULT_MAX_UNDECLARED_BYTES`]. An object that declares its length is
    /// held to it.
    pub max_undeclared_bytes: u64,
    /// A request or a body fails once less than [`crate::source::STALL_BYTES`] arrived in
    /// this long.
    pub stall_timeout: std::time::Duration,
    /// The import fails once its source has been open this long (`None`: no deadline).
    pub timeout: Option<std::time::Duration>,
}

impl Default for SourceSettings {
    fn default() -> Self {
        SourceSettings {
            options: BTreeMap::new(),
            limits: Limits::default(),
            ingest: IngestOptions::default(),
            requests: crate::remote::DEFAULT_JOBS,
            author: None,
            max_bytes: None,
            max_undeclared_bytes: crate::source::DEFAULT_MAX_UNDECLARED_BYTES,
            stall_timeout: crate::source::DEFAULT_STALL_TIMEOUT,
            timeout: None,
        }
    }
}

/// What to import and how.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ImportOptions {
    /// `s3://bucket/key`, `s3://bucket/prefix/`, `gs://…`, `az://…`, `http(s)://…`, or a
    /// local file or directory.
    pub source: String,
    /// The dataset; default: the source's last path element without its archive extension.
    pub dataset: Option<String>,
    /// `--etag` / `--version-id`.
    pub pin: Pin,
    /// Archive handling.
    pub extract: Extract,
    /// The message; default: "import SOURCE".
    pub message: Option<String>,
    /// A tag for the new version.
    pub tag: Option<String>,
    /// How the source is read.
    pub settings: SourceSettings,
}

impl ImportOptions {
    /// Options for an import of `source`: the dataset, message and pin from their defaults,
    /// archives expanded when recognized.
    pub fn new(source: impl Into<String>) -> ImportOptions {
        ImportOptions {
            source: source.into(),
            dataset: None,
            pin: Pin::default(),
            extract: Extract::Auto,
            message: None,
            tag: None,
            settings: SourceSettings::default(),
        }
    }
}

/// What an import (or update) did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ImportReport {
    /// The dataset.
    pub dataset: String,
    /// The new version (or the unchanged head when `created` is false).
    pub version: ObjectId,
    /// The previous head.
    pub parent: Option<ObjectId>,
    /// False when the source had not changed since the head was imported.
    pub created: bool,
    /// The tag given, if any.
    pub tag: Option<String>,
    /// The source as recorded.
    pub source: String,
    /// True when credentials (`user:password@`, a presigned URL's signature or token) were
    /// removed from the URL given before it was recorded anywhere.
    pub redacted_url: bool,
    /// The archive format expanded, if any.
    pub archive: Option<Format>,
    /// Files and symlinks in the version.
    pub files: u64,
    /// Total file bytes in the version.
    pub bytes: u64,
    /// Objects the source holds.
    pub objects: u64,
    /// Objects downloaded (or read) because they were new or changed.
    pub objects_read: u64,
    /// Objects whose ETag, Last-Modified and size matched the head's provenance: not read.
    pub objects_unchanged: u64,
    /// Bytes of the objects read (compressed size for an archive).
    pub bytes_downloaded: u64,
    /// Archive members skipped because they hold nothing to version (devices, FIFOs).
    pub members_skipped: u64,
    /// Pipeline totals.
    #[serde(flatten)]
    pub ingest: IngestStats,
    /// Packs written.
    pub packs_written: u64,
}

/// Imports `options.source` as a new version of a dataset.
///
/// # Errors
/// [`Error::SourceNotFound`], [`Error::EtagMismatch`], [`Error::SourceChanged`],
/// [`Error::InvalidImport`] (a pin on a prefix, `--extract` on a file that is no archive, no
/// usable dataset name, two keys making one path), [`Error::TagExists`],
/// [`Error::UnsafeArchive`], [`Error::BadArchive`], [`Error::Remote`], [`Error::Http`],
/// [`Error::Io`], [`Error::SourceIo`] (a source that breaks off, stalls, outlasts its
/// timeout or ends early), [`Error::Interrupted`]. On an error before the version is recorded,
/// nothing is recorded and the packs written are deleted; one while recording (a full disk)
/// leaves unnamed packs for `gc`.
pub fn import(
    store: &mut Store,
    options: &ImportOptions,
    progress: &dyn Progress,
) -> Result<ImportReport> {
    let mut source = Source::open(&options.source, &options.settings.options)?;
    source.set_bounds(read_bounds(store, &source, &options.settings)?);
    if let Some(tag) = &options.tag {
        check_name("tag", tag)?;
    }
    let dataset = match &options.dataset {
        Some(name) => {
            check_name("dataset", name)?;
            name.clone()
        }
        None => default_dataset(&source)?,
    };
    let listing = source.list(&options.pin)?;
    let draft = VersionDraft {
        dataset,
        message: options
            .message
            .clone()
            .unwrap_or_else(|| format!("import {}", source.spec())),
        tag: options.tag.clone(),
        author: options.settings.author.clone(),
        source: source.spec().to_string(),
        parent: None,
        provenance: None,
        allow_empty: false,
        compression_level: options.settings.ingest.compression_level,
    };
    let request = Request {
        source: &source,
        listing,
        pin: &options.pin,
        extract: options.extract,
    };
    // Chunks found in the store are relied on, not rewritten, and the head's provenance and
    // trees are read from packs: gc must wait until the version is recorded.
    let data_lock = store.lock_data_shared()?;
    let previous = Previous::load(store, &draft.dataset)?;
    run(
        store,
        request,
        previous,
        data_lock,
        draft,
        &options.settings,
        progress,
    )
}

/// Re-checks the source `dataset`'s head was imported from: downloads only the objects
/// whose ETag, Last-Modified, size or VersionId changed, and records a new version only
/// when something did. A pinned import (`--etag`, `--version-id`) follows the source's
/// current state: an unchanged object keeps the head (and its pins), a changed one is
/// imported without pins.
///
/// # Errors
/// [`Error::NotImported`] when the head has no provenance; the errors of [`import`].
pub fn update(
    store: &mut Store,
    dataset: &str,
    message: Option<String>,
    settings: &SourceSettings,
    progress: &dyn Progress,
) -> Result<ImportReport> {
    check_name("dataset", dataset)?;
    // An unknown dataset is DatasetNotFound; a known one whose head was not imported is
    // NotImported.
    store.catalog().head(dataset)?;
    let data_lock = store.lock_data_shared()?;
    let previous = Previous::load(store, dataset)?.ok_or_else(|| Error::NotImported {
        dataset: dataset.to_string(),
    })?;
    let mut source = Source::open(&previous.provenance.source, &settings.options)?;
    source.set_bounds(read_bounds(store, &source, settings)?);
    let listing = source.list(&Pin::default())?;
    let extract = if previous.provenance.extract {
        Extract::Auto
    } else {
        Extract::Never
    };
    let draft = VersionDraft {
        dataset: dataset.to_string(),
        message: message.unwrap_or_else(|| format!("update from {}", source.spec())),
        tag: None,
        author: settings.author.clone(),
        source: source.spec().to_string(),
        parent: None,
        provenance: None,
        allow_empty: false,
        compression_level: settings.ingest.compression_level,
    };
    let request = Request {
        source: &source,
        listing,
        pin: &Pin::default(),
        extract,
    };
    run(
        store,
        request,
        Some(previous),
        data_lock,
        draft,
        settings,
        progress,
    )
}

/// The bounds `source` is read under: `settings.max_bytes`, else for a source read over the
/// network what the store's disk can hold, and `settings.max_undeclared_bytes` for each
/// object that declares no length.
fn read_bounds(store: &Store, source: &Source, settings: &SourceSettings) -> Result<ReadBounds> {
    let mut bounds = ReadBounds::new(settings.max_bytes, settings.stall_timeout, settings.timeout);
    if settings.max_bytes.is_none() && !source.is_local() {
        let (free, bound) = ReadBounds::disk_bound(&store.packs_dir())?;
        bounds.max_bytes = bound;
        bounds.disk_free = Some(free);
        bounds.max_undeclared_bytes = settings.max_undeclared_bytes;
    }
    Ok(bounds)
}

/// The default dataset name: the source's last path element without its archive extension.
fn default_dataset(source: &Source) -> Result<String> {
    let base = source.basename();
    let name = Format::detect(&base).map_or(base.as_str(), |(_, stem)| stem);
    check_name("dataset", name).map_err(|e| Error::InvalidImport {
        source_url: source.spec().to_string(),
        reason: format!("{e}; pass --dataset NAME"),
    })?;
    Ok(name.to_string())
}

/// One file or symlink of the version being built, with where it came from.
struct Item {
    entry: FlatEntry,
    provenance: FileProvenance,
}

/// The version being built: files and symlinks by path, and directories given explicitly.
#[derive(Default)]
struct Collected {
    items: BTreeMap<String, Item>,
    dirs: BTreeSet<String>,
    /// Archive members that were not files, directories or links.
    skipped: u64,
}

impl Collected {
    /// Adds (or, as tar does for a repeated path, replaces) a file or symlink.
    fn insert(&mut self, entry: FlatEntry, object: &SourceObject, member: Option<String>) {
        let provenance = FileProvenance {
            path: entry.path.clone(),
            url: object.url.clone(),
            etag: object.etag.clone(),
            version_id: object.version_id.clone(),
            last_modified: object.last_modified,
            size: object.size,
            member,
        };
        self.items
            .insert(entry.path.clone(), Item { entry, provenance });
    }
}

impl Collected {
    /// Adds a file of a prefix or directory; two keys that make the same path (`a//b` and
    /// `a/b`) are refused rather than one silently replacing the other.
    fn insert_new(&mut self, entry: FlatEntry, object: &SourceObject) -> Result<()> {
        if let Some(existing) = self.items.get(&entry.path) {
            return Err(Error::InvalidImport {
                source_url: object.url.clone(),
                reason: format!(
                    "it and {} would both be stored as {:?}",
                    existing.provenance.url, entry.path
                ),
            });
        }
        self.insert(entry, object, None);
        Ok(())
    }
}

/// The dataset path of an object of a prefix or directory: its key below the prefix, checked
/// like an archive member's name.
fn key_path(object: &SourceObject) -> Result<String> {
    match archive::member_path(&object.path) {
        Ok(Some(path)) => Ok(path),
        Ok(None) | Err(_) => Err(Error::UnsafeArchive {
            url: object.url.clone(),
            member: object.path.clone(),
            reason: "the key does not make a path inside the dataset (absolute, '..', or empty)"
                .into(),
        }),
    }
}

/// What the head recorded, for reuse.
struct Previous {
    head: crate::catalog::VersionRecord,
    provenance: Provenance,
    /// Indexes into `provenance.files`, by source URL.
    by_url: HashMap<String, Vec<usize>>,
}

impl Previous {
    fn load(store: &Store, dataset: &str) -> Result<Option<Previous>> {
        let Some(head) = store.catalog().head_or_none(dataset)? else {
            return Ok(None);
        };
        let head = store.catalog().version_record(&head)?;
        let Some(provenance_id) = head.version.provenance else {
            return Ok(None);
        };
        let provenance = store.reader().provenance(&provenance_id)?;
        let mut by_url: HashMap<String, Vec<usize>> = HashMap::new();
        for (index, file) in provenance.files.iter().enumerate() {
            by_url.entry(file.url.clone()).or_default().push(index);
        }
        Ok(Some(Previous {
            head,
            provenance,
            by_url,
        }))
    }

    /// The head's entries by path (read only when something is reused).
    fn entries(&self, store: &Store) -> Result<HashMap<String, FlatEntry>> {
        Ok(
            tree::flatten_version(&mut store.reader(), &self.head.version)?
                .into_iter()
                .map(|e| (e.path.clone(), e))
                .collect(),
        )
    }

    /// The files the head took from `object`, if the object is unchanged since (same ETag,
    /// Last-Modified, size, and VersionId when both have one).
    fn unchanged(&self, object: &SourceObject, extract: bool) -> Option<Vec<&FileProvenance>> {
        if self.provenance.extract != extract {
            return None;
        }
        let files: Vec<&FileProvenance> = self
            .by_url
            .get(&object.url)?
            .iter()
            .map(|&index| &self.provenance.files[index])
            .collect();
        let first = files.first()?;
        let same_version = match (&first.version_id, &object.version_id) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        // Without an ETag (some HTTP servers), Last-Modified and size must do.
        let same_identity = match (&first.etag, &object.etag) {
            (Some(a), Some(b)) => a == b,
            (None, None) => first.last_modified.is_some(),
            _ => false,
        };
        (same_identity
            && first.last_modified == object.last_modified
            && first.size == object.size
            && same_version)
            .then_some(files)
    }
}

/// What one import or update reads: the source, what it listed, the pins and archive
/// handling asked for.
struct Request<'a> {
    source: &'a Source,
    listing: Listing,
    pin: &'a Pin,
    extract: Extract,
}

/// Imports `request` as a version of `draft.dataset`, reusing what `previous` (the head's
/// import, loaded by the caller under `data_lock`) recorded.
///
/// The phases, each a function: [`archive_format`] (refuses what cannot be imported),
/// [`reuse_plan`] (which objects are unchanged since the head's import), [`head_stands`]
/// (nothing changed: the head is the answer), [`collect_reused`] (the head's entries for
/// the unchanged objects), [`read_new`] (the other objects, into packs), [`checked_listing`]
/// (the version's listing), [`provenance_of`], then [`record_version`].
fn run(
    store: &mut Store,
    request: Request<'_>,
    previous: Option<Previous>,
    data_lock: crate::store::SharedDataLock,
    mut draft: VersionDraft,
    settings: &SourceSettings,
    progress: &dyn Progress,
) -> Result<ImportReport> {
    let Request {
        source,
        listing,
        pin,
        extract,
    } = request;
    let format = archive_format(source, &listing, extract)?;
    if let Some(tag) = &draft.tag {
        super::commit::check_tag_free(store, &draft.dataset, tag)?;
    }
    let data_lock = data_lock;
    let (reused, to_read) = reuse_plan(previous.as_ref(), &listing, format);
    let objects_unchanged = reused.len() as u64;
    let bytes_downloaded: u64 = to_read.iter().map(|o| o.size).sum();
    if let Some(report) = head_stands(previous.as_ref(), &reused, &to_read, &draft, source) {
        return Ok(ImportReport {
            archive: format,
            objects: listing.objects.len() as u64,
            objects_unchanged,
            ..report
        });
    }
    // An object that declares more than the bound is refused before anything is read.
    source.check_declared(&to_read)?;
    let mut collected = match previous.as_ref().filter(|_| !reused.is_empty()) {
        Some(previous) => collect_reused(store, previous, reused, format)?,
        None => Collected::default(),
    };
    store.remove_stale_temp_packs()?;
    let parents = delta_parents(store, &draft.dataset, &to_read, format, settings.ingest)?;
    let sink = PackSink::new(&store.packs_dir(), &store.temp_dir());
    progress.start("importing", bytes_downloaded, Unit::Bytes);
    let reading = (&to_read[..], &parents);
    let read = read_new(store, &sink, source, reading, format, settings, progress);
    progress.finish();
    let listed = read.and_then(|(read, stats)| {
        collected.items.extend(read.items);
        collected.dirs.extend(read.dirs);
        let (flat, files) = checked_listing(collected, source)?;
        Ok((flat, files, stats, read.skipped))
    });
    let (flat, files, stats, members_skipped) = match listed {
        Ok(done) => done,
        Err(e) => {
            sink.abandon(store);
            return Err(e);
        }
    };
    let built = tree::build(&flat);
    let provenance = provenance_of(previous, source, format, pin, files);
    draft.provenance = Some((provenance.id(), provenance.encode()));
    let recorded = record_version(store, &data_lock, sink, &built, &draft, |_, _| Ok(()))?;
    Ok(ImportReport {
        dataset: draft.dataset.clone(),
        version: recorded.version,
        parent: recorded.parent,
        created: recorded.created,
        tag: draft.tag.clone(),
        source: source.spec().to_string(),
        redacted_url: source.redacted(),
        archive: format,
        files: built.files,
        bytes: built.bytes,
        objects: listing.objects.len() as u64,
        objects_read: to_read.len() as u64,
        objects_unchanged,
        bytes_downloaded,
        members_skipped,
        ingest: stats,
        packs_written: recorded.packs.len() as u64,
    })
}

/// The archive format of a single object, when it is to be expanded (by its path's or the
/// source's extension, as `extract` asks); `None` for a prefix or directory, or a single
/// object stored as it is. Reads nothing.
///
/// # Errors
/// [`Error::InvalidImport`]: `--extract` of an object that is no archive dsv expands or of
/// a prefix, or a single file with no name to store it as.
fn archive_format(source: &Source, listing: &Listing, extract: Extract) -> Result<Option<Format>> {
    let format = match (listing.single, extract) {
        (true, Extract::Never) => None,
        (true, _) => {
            let object = &listing.objects[0];
            let basename = source.basename();
            let found = Format::detect(&object.path)
                .or_else(|| Format::detect(&basename))
                .map(|(format, _)| format);
            if found.is_none() && extract == Extract::Always {
                return Err(Error::InvalidImport {
                    source_url: source.spec().to_string(),
                    reason: format!(
                        "--extract: {:?} does not end in an archive extension dsv expands ({})",
                        object.path,
                        Format::known_extensions()
                    ),
                });
            }
            found
        }
        (false, Extract::Always) => {
            return Err(Error::InvalidImport {
                source_url: source.spec().to_string(),
                reason: "--extract applies to a single archive, and this is a prefix or directory"
                    .into(),
            });
        }
        (false, _) => None,
    };
    if listing.single && format.is_none() && listing.objects[0].path.is_empty() {
        return Err(Error::InvalidImport {
            source_url: source.spec().to_string(),
            reason: "the URL does not end in a file name to store the file as".into(),
        });
    }
    Ok(format)
}

/// The objects of `listing` unchanged since `previous` (the head's import) took them, each
/// with the files it gave, and the objects to read.
type Reuse<'l, 'p> = (
    Vec<(&'l SourceObject, Vec<&'p FileProvenance>)>,
    Vec<&'l SourceObject>,
);

/// Reuse plan: which objects of `listing` are unchanged since `previous` (the head's
/// import) took them (same identity, and expanded as before when `format` is given), and
/// which are to be read. Reads nothing.
fn reuse_plan<'l, 'p>(
    previous: Option<&'p Previous>,
    listing: &'l Listing,
    format: Option<Format>,
) -> Reuse<'l, 'p> {
    let mut reused = Vec::new();
    let mut to_read = Vec::new();
    for object in &listing.objects {
        match previous.and_then(|p| p.unchanged(object, format.is_some())) {
            Some(files) => reused.push((object, files)),
            None => to_read.push(object),
        }
    }
    (reused, to_read)
}

/// The report of an import whose objects are every object the head came from, and nothing
/// else, with no tag: the head stands (the common answer of `update`, found without reading
/// its trees). `archive`, `objects` and `objects_unchanged` are for the caller to fill in.
/// `None` when something changed. Reads nothing.
fn head_stands(
    previous: Option<&Previous>,
    reused: &[(&SourceObject, Vec<&FileProvenance>)],
    to_read: &[&SourceObject],
    draft: &VersionDraft,
    source: &Source,
) -> Option<ImportReport> {
    let previous = previous?;
    if !to_read.is_empty()
        || draft.tag.is_some()
        || previous.provenance.source != source.spec()
        || reused.iter().map(|(_, files)| files.len()).sum::<usize>()
            != previous.provenance.files.len()
    {
        return None;
    }
    let head = &previous.head;
    Some(ImportReport {
        dataset: draft.dataset.clone(),
        version: head.id,
        parent: head.version.parent,
        created: false,
        tag: None,
        source: source.spec().to_string(),
        redacted_url: source.redacted(),
        archive: None,
        files: head.version.files,
        bytes: head.version.bytes,
        objects: 0,
        objects_read: 0,
        objects_unchanged: 0,
        bytes_downloaded: 0,
        members_skipped: 0,
        ingest: IngestStats::default(),
        packs_written: 0,
    })
}

/// The head's entries for the `reused` objects (under each object's path in this listing,
/// or, for an archive, as the head had them, with the archive's directories). Reads the
/// head's trees.
///
/// # Errors
/// Reading the trees; two keys for one path.
fn collect_reused(
    store: &Store,
    previous: &Previous,
    reused: Vec<(&SourceObject, Vec<&FileProvenance>)>,
    format: Option<Format>,
) -> Result<Collected> {
    let mut collected = Collected::default();
    let entries = previous.entries(store)?;
    for (object, files) in reused {
        for file in files {
            let Some(entry) = entries.get(&file.path) else {
                continue;
            };
            if format.is_some() {
                collected.insert(entry.clone(), object, file.member.clone());
            } else {
                // The object's path under this listing, which may differ from the head's.
                let entry = FlatEntry {
                    path: key_path(object)?,
                    ..entry.clone()
                };
                collected.insert_new(entry, object)?;
            }
        }
    }
    // Directories of a reused archive (empty ones included) stay too.
    if format.is_some() {
        collected.dirs.extend(
            entries
                .values()
                .filter(|e| e.kind == FlatKind::Dir)
                .map(|e| e.path.clone()),
        );
    }
    Ok(collected)
}

/// Ingest phase: reads `to_read` from `source` into `sink`'s packs: a single archive
/// (`format`) expanded member by member within the settings' limits (and the source's
/// bound), or each object as a file, `settings.requests` at a time. What was read, and the
/// pipeline's totals. Writes only packs (through `sink`) and temporary files.
///
/// # Errors
/// Reading the source; archive errors; [`Error::Io`]; [`Error::Interrupted`].
fn read_new(
    store: &Store,
    sink: &PackSink,
    source: &Source,
    (to_read, parents): (&[&SourceObject], &Parents),
    format: Option<Format>,
    settings: &SourceSettings,
    progress: &dyn Progress,
) -> Result<(Collected, IngestStats)> {
    let bounds = source.bounds();
    let limits = Limits {
        max_stored: (bounds.max_bytes != u64::MAX).then_some(bounds.max_bytes),
        ..settings.limits
    };
    with_ingester(
        store.catalog().path(),
        sink,
        settings.ingest,
        None,
        |ingester| match format {
            Some(format) if !to_read.is_empty() => {
                let object = to_read[0];
                let mut writer = ingester.writer()?;
                let input = match source.local_path(object) {
                    Some(path) => {
                        archive::Input::File(std::fs::File::open(path).map_err(|source| {
                            Error::Io {
                                path: path.to_path_buf(),
                                source,
                            }
                        })?)
                    }
                    None => archive::Input::Stream(source.read(object)?),
                };
                let mut local = Collected::default();
                local.skipped = archive::read(
                    format,
                    input,
                    &object.url,
                    &store.temp_dir(),
                    limits,
                    progress,
                    &mut |member| {
                        let parent = parents.get(&member.path);
                        add_member(&mut writer, &mut local, (object, parent), member)
                    },
                )?;
                writer.finish();
                Ok(local)
            }
            _ => read_objects(
                ingester,
                source,
                (to_read, parents),
                settings.requests,
                progress,
            ),
        },
    )
}

/// The version's listing from what was collected, and each file's provenance, refusing
/// symlinks through symlinks and a listing no version may hold. Reads nothing.
///
/// # Errors
/// [`Error::UnsafeArchive`], [`Error::InvalidImport`].
fn checked_listing(
    collected: Collected,
    source: &Source,
) -> Result<(Vec<FlatEntry>, Vec<FileProvenance>)> {
    let (flat, files) = flat_entries(collected, source.spec())?;
    if let Some(link) = tree::symlink_through_symlink(&flat) {
        return Err(Error::UnsafeArchive {
            url: source.spec().to_string(),
            member: link.path.clone(),
            reason: "the symlink's target passes through another symlink, so it could point outside the dataset".into(),
        });
    }
    if let Err((path, reason)) = tree::check_listing(&flat) {
        return Err(Error::InvalidImport {
            source_url: source.spec().to_string(),
            reason: format!("{path}: {reason}")
                .trim_start_matches(": ")
                .to_string(),
        });
    }
    Ok((flat, files))
}

/// The provenance of an import of `source` (`format`: expanded) with `pin`, whose files came
/// from `files`: the head's own (with its pins) when it took the same objects, so an update
/// of an unchanged pinned import records nothing.
fn provenance_of(
    previous: Option<Previous>,
    source: &Source,
    format: Option<Format>,
    pin: &Pin,
    files: Vec<FileProvenance>,
) -> Provenance {
    let provenance = Provenance {
        format: 1,
        source: source.spec().to_string(),
        extract: format.is_some(),
        pinned_etag: pin.etag.clone(),
        pinned_version_id: pin.version_id.clone(),
        files,
    };
    match previous.filter(|p| {
        p.provenance.source == provenance.source
            && p.provenance.extract == provenance.extract
            && p.provenance.files == provenance.files
    }) {
        Some(previous) => previous.provenance,
        None => provenance,
    }
}

/// The files of the dataset's head by path, each a file an imported file at the same path
/// may be stored as deltas against ([`super::ingest::deltas`]).
#[derive(Default)]
struct Parents {
    files: HashMap<String, ParentFile>,
    /// For an archive: the one top directory every file of the head lies in, when there is
    /// one. A new release of an archive often renames it (`data-2022-05-04/` becomes
    /// `data-2023-04-03/`), so a member under another top directory is matched by the rest
    /// of its path.
    root: Option<String>,
}

impl Parents {
    /// The head's file at `path`, else (for an archive with one top directory) at `path`
    /// under the head's top directory.
    fn get(&self, path: &str) -> Option<ParentFile> {
        if let Some(parent) = self.files.get(path) {
            return Some(*parent);
        }
        let root = self.root.as_ref()?;
        let (_, rest) = path.split_once('/')?;
        self.files.get(&format!("{root}/{rest}")).copied()
    }
}

/// The [`Parents`] of an import of `to_read` into `dataset` (the head's files at the paths
/// read, or every file of it for an archive, whose member paths are known only when read):
/// empty without deltas or a head, or when the head's trees cannot be read (a delta is only
/// saved compression).
///
/// # Errors
/// Catalog errors; [`Error::Interrupted`].
fn delta_parents(
    store: &Store,
    dataset: &str,
    to_read: &[&SourceObject],
    format: Option<Format>,
    ingest: IngestOptions,
) -> Result<Parents> {
    let mut parents = Parents::default();
    if !ingest.deltas || to_read.is_empty() {
        return Ok(parents);
    }
    let Some(head) = store.catalog().head_or_none(dataset)? else {
        return Ok(parents);
    };
    let Some(record) = store.catalog().version(&head)? else {
        return Ok(parents);
    };
    let wanted: Option<BTreeSet<String>> = match format {
        Some(_) => None,
        None => Some(to_read.iter().filter_map(|o| key_path(o).ok()).collect()),
    };
    let mut reader = store.checking_reader();
    let walk = match tree::walk_version(&mut reader, &record.version) {
        Ok(walk) => walk,
        Err(Error::Interrupted) => return Err(Error::Interrupted),
        Err(_) => return Ok(Parents::default()),
    };
    // An archive's top directory: the first name of every path, while they agree.
    let mut roots: Option<(String, bool)> = None;
    for entry in walk {
        match entry {
            Ok(entry) => {
                // A file at the top leaves no top directory.
                let (first, nested) = match entry.path.split_once('/') {
                    Some((first, _)) => (first, true),
                    None => (entry.path.as_str(), entry.kind == FlatKind::Dir),
                };
                let (root, one) = roots.get_or_insert_with(|| (first.to_string(), true));
                *one = *one && nested && root == first;
                let file = matches!(entry.kind, FlatKind::File { .. }) && entry.size > 0;
                if file && wanted.as_ref().is_none_or(|w| w.contains(&entry.path)) {
                    let parent = ParentFile::at(&entry.path, entry.id, entry.size);
                    parents.files.insert(entry.path, parent);
                }
            }
            Err(Error::Interrupted) => return Err(Error::Interrupted),
            Err(_) => return Ok(Parents::default()),
        }
    }
    parents.root = roots
        .filter(|(_, one)| *one && format.is_some())
        .map(|(root, _)| root);
    Ok(parents)
}

/// Stores one archive member (a file through `writer`) into `collected`.
fn add_member(
    writer: &mut StreamWriter<'_>,
    collected: &mut Collected,
    (object, parent): (&SourceObject, Option<ParentFile>),
    member: archive::Member<'_>,
) -> Result<()> {
    let (kind, size, id) = match member.kind {
        MemberKind::Dir => {
            collected.dirs.insert(member.path);
            return Ok(());
        }
        MemberKind::File { executable } => {
            let (id, size) = writer
                .ingest_beside(&mut *member.reader, None, parent)
                .map_err(|e| match e {
                    IngestError::Read(e) => archive::input_error(&object.url, e),
                    IngestError::Store(e) => e,
                })?;
            (FlatKind::File { executable }, size, id)
        }
        MemberKind::Symlink { target } => {
            let (size, id) = (target.len() as u64, ObjectId::of(target.as_bytes()));
            (FlatKind::Symlink { target }, size, id)
        }
        MemberKind::HardLink { target } => match collected.items.get(&target) {
            Some(item) if matches!(item.entry.kind, FlatKind::File { .. }) => {
                (item.entry.kind.clone(), item.entry.size, item.entry.id)
            }
            _ => {
                return Err(Error::UnsafeArchive {
                    url: object.url.clone(),
                    member: member.name,
                    reason: format!(
                        "a hard link to {target:?}, which is not a file earlier in the archive"
                    ),
                });
            }
        },
    };
    collected.insert(
        FlatEntry {
            path: member.path,
            kind,
            size,
            id,
        },
        object,
        Some(member.name),
    );
    Ok(())
}

/// Reads `objects` as files (no expansion), `jobs` at once (each thread one request in
/// flight, then chunking and hashing what it receives).
fn read_objects(
    ingester: &super::ingest::Ingester<'_>,
    source: &Source,
    (objects, parents): (&[&SourceObject], &Parents),
    jobs: usize,
    progress: &dyn Progress,
) -> Result<Collected> {
    let collected = Mutex::new(Collected::default());
    crate::parallel::for_each_with(
        objects,
        jobs,
        || ingester.writer(),
        |writer, _, object| {
            let entry = read_object(writer, source, (object, parents), progress)?;
            collected
                .lock()
                .expect("no panics while holding the lock")
                .insert_new(entry, object)
        },
        StreamWriter::finish,
    )?;
    Ok(collected
        .into_inner()
        .expect("no panics while holding the lock"))
}

/// Reads one object of a prefix or directory as a file (or a local symlink).
fn read_object(
    writer: &mut StreamWriter<'_>,
    source: &Source,
    (object, parents): (&SourceObject, &Parents),
    progress: &dyn Progress,
) -> Result<FlatEntry> {
    let path = key_path(object)?;
    let parent = parents.get(&path);
    if let Some(target) = &object.symlink {
        let kind = FlatKind::Symlink {
            target: target.clone(),
        };
        return Ok(FlatEntry {
            path,
            kind,
            size: target.len() as u64,
            id: ObjectId::of(target.as_bytes()),
        });
    }
    let counted = Counted {
        inner: source.read(object)?,
        progress,
    };
    let (id, size) = writer
        .ingest_beside(
            counted,
            Some(object.size).filter(|_| object.size_known),
            parent,
        )
        .map_err(|e| match e {
            // A bound, a stall, a deadline or a cancellation met while reading.
            IngestError::Read(e) => {
                crate::source::carried_error(e).unwrap_or_else(|source| Error::SourceIo {
                    url: object.url.clone(),
                    source,
                })
            }
            IngestError::Store(e) => e,
        })?;
    if object.size_known && size != object.size {
        return Err(Error::SourceIo {
            url: object.url.clone(),
            source: std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("read {size} bytes of the {} listed", object.size),
            ),
        });
    }
    Ok(FlatEntry {
        path,
        kind: FlatKind::File {
            executable: object.executable,
        },
        size,
        id,
    })
}

/// Reports the bytes read from a source object as progress.
struct Counted<'p, R> {
    inner: R,
    progress: &'p dyn Progress,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.advance(n as u64);
        Ok(n)
    }
}

/// The version's flat listing (depth-first, siblings sorted, directories implied by paths
/// added) and its provenance records.
///
/// # Errors
/// [`Error::InvalidImport`] when a path is both a file and a directory.
fn flat_entries(collected: Collected, spec: &str) -> Result<(Vec<FlatEntry>, Vec<FileProvenance>)> {
    let mut dirs = collected.dirs;
    for path in collected.items.keys() {
        let mut end = 0;
        while let Some(slash) = path[end..].find('/') {
            end += slash;
            dirs.insert(path[..end].to_string());
            end += 1;
        }
    }
    if let Some(both) = dirs.iter().find(|d| collected.items.contains_key(*d)) {
        return Err(Error::InvalidImport {
            source_url: spec.to_string(),
            reason: format!("{both:?} is both a file and a directory in the source"),
        });
    }
    let mut flat: Vec<FlatEntry> = dirs
        .into_iter()
        .map(|path| FlatEntry {
            path,
            kind: FlatKind::Dir,
            size: 0,
            id: ObjectId([0; 32]),
        })
        .collect();
    let mut files = Vec::with_capacity(collected.items.len());
    for (_, item) in collected.items {
        flat.push(item.entry);
        files.push(item.provenance);
    }
    // Sorting by path components gives depth-first order with siblings sorted by name bytes.
    flat.sort_by(|a, b| a.path.split('/').cmp(b.path.split('/')));
    Ok((flat, files))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_entries_add_directories_in_depth_first_order() {
        let mut collected = Collected::default();
        let object = SourceObject::unknown_http("s3://b/x.tar");
        for path in ["b/c.txt", "a.b/d", "a/z", "a/y/x"] {
            collected.insert(
                FlatEntry {
                    path: path.into(),
                    kind: FlatKind::File { executable: false },
                    size: 1,
                    id: ObjectId::of(path.as_bytes()),
                },
                &object,
                Some(path.into()),
            );
        }
        collected.dirs.insert("empty".into());
        let (flat, files) = flat_entries(collected, "s3://b/x.tar").unwrap();
        let paths: Vec<&str> = flat.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "a", "a/y", "a/y/x", "a/z", "a.b", "a.b/d", "b", "b/c.txt", "empty"
            ]
        );
        assert_eq!(files.len(), 4);
        let mut clash = Collected::default();
        for path in ["a", "a/b"] {
            clash.insert(
                FlatEntry {
                    path: path.into(),
                    kind: FlatKind::File { executable: false },
                    size: 1,
                    id: ObjectId::of(b"x"),
                },
                &object,
                None,
            );
        }
        assert!(flat_entries(clash, "s3://b/x.tar").is_err());
    }
}
