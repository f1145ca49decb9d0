//! `import` and `update`: a dataset version from object storage, a URL or a local path.
//!
//! list the source ([`crate::source`]) → for each object, reuse what the dataset's head
//! recorded when its ETag, Last-Modified, size and VersionId are unchanged, else stream it
//! (expanding an archive member by member, [`crate::archive`]) through the chunker
//! ([`super::ingest::StreamWriter`]) → build the trees and a [`Provenance`] naming each
//! file's source → record the version ([`super::commit::record_version`]). A failure before
//! the version is recorded deletes the packs written so far: no version, no dataset, no data
//! (a failure while recording, such as a full disk, leaves unnamed packs for `gc`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::sync::Mutex;

use super::commit::{VersionDraft, record_version};
use super::ingest::{
    IngestError, IngestOptions, IngestStats, PackSink, StreamWriter, with_ingester,
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
/// [`Error::Io`], [`Error::Interrupted`]. On an error before the version is recorded,
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
/// network what the store's disk can hold.
fn read_bounds(store: &Store, source: &Source, settings: &SourceSettings) -> Result<ReadBounds> {
    let mut bounds = ReadBounds::new(settings.max_bytes, settings.stall_timeout, settings.timeout);
    if settings.max_bytes.is_none() && !source.is_local() {
        let (free, bound) = ReadBounds::disk_bound(&store.packs_dir())?;
        bounds.max_bytes = bound;
        bounds.disk_free = Some(free);
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
    // The archive format of a single object, when it is to be expanded.
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
    if let Some(tag) = &draft.tag {
        super::commit::check_tag_free(store, &draft.dataset, tag)?;
    }
    let _data_lock = data_lock;
    let mut reused = Vec::new();
    let mut to_read = Vec::new();
    for object in &listing.objects {
        match previous
            .as_ref()
            .and_then(|p| p.unchanged(object, format.is_some()))
        {
            Some(files) => reused.push((object, files)),
            None => to_read.push(object),
        }
    }
    let objects_unchanged = reused.len() as u64;
    let bytes_downloaded: u64 = to_read.iter().map(|o| o.size).sum();
    // Every object the head came from, and nothing else: the head stands (the common answer
    // of `update`, found without reading its trees).
    if let Some(previous) = &previous
        && to_read.is_empty()
        && draft.tag.is_none()
        && previous.provenance.source == source.spec()
        && reused.iter().map(|(_, files)| files.len()).sum::<usize>()
            == previous.provenance.files.len()
    {
        let head = &previous.head;
        return Ok(ImportReport {
            dataset: draft.dataset.clone(),
            version: head.id,
            parent: head.version.parent,
            created: false,
            tag: None,
            source: source.spec().to_string(),
            redacted_url: source.redacted(),
            archive: format,
            files: head.version.files,
            bytes: head.version.bytes,
            objects: listing.objects.len() as u64,
            objects_read: 0,
            objects_unchanged,
            bytes_downloaded: 0,
            members_skipped: 0,
            ingest: IngestStats::default(),
            packs_written: 0,
        });
    }
    // An object that declares more than the bound is refused before anything is read.
    source.check_declared(&to_read)?;
    let bounds = source.bounds();
    let limits = Limits {
        max_stored: (bounds.max_bytes != u64::MAX).then_some(bounds.max_bytes),
        ..settings.limits
    };
    let mut collected = Collected::default();
    if let Some(previous) = previous.as_ref().filter(|_| !reused.is_empty()) {
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
    }

    store.remove_stale_temp_packs()?;
    let sink = PackSink::new(&store.packs_dir(), &store.temp_dir());
    progress.start("importing", bytes_downloaded, Unit::Bytes);
    let read = with_ingester(
        store.catalog().path(),
        &sink,
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
                    &mut |member| add_member(&mut writer, &mut local, object, member),
                )?;
                writer.finish();
                Ok(local)
            }
            _ => read_objects(ingester, source, &to_read, settings.requests, progress),
        },
    );
    progress.finish();
    let (read, stats) = match read {
        Ok(done) => done,
        Err(e) => {
            sink.abandon(store);
            return Err(e);
        }
    };
    collected.items.extend(read.items);
    collected.dirs.extend(read.dirs);
    let members_skipped = read.skipped;

    let (flat, files) = match flat_entries(collected, source.spec()) {
        Ok(done) => done,
        Err(e) => {
            sink.abandon(store);
            return Err(e);
        }
    };
    if let Some(link) = tree::symlink_through_symlink(&flat) {
        sink.abandon(store);
        return Err(Error::UnsafeArchive {
            url: source.spec().to_string(),
            member: link.path.clone(),
            reason: "the symlink's target passes through another symlink, so it could point outside the dataset".into(),
        });
    }
    if let Err((path, reason)) = tree::check_listing(&flat) {
        sink.abandon(store);
        return Err(Error::InvalidImport {
            source_url: source.spec().to_string(),
            reason: format!("{path}: {reason}")
                .trim_start_matches(": ")
                .to_string(),
        });
    }
    let built = tree::build(&flat);
    let mut provenance = Provenance {
        format: 1,
        source: source.spec().to_string(),
        extract: format.is_some(),
        pinned_etag: pin.etag.clone(),
        pinned_version_id: pin.version_id.clone(),
        files,
    };
    // The same objects as the head's: keep its provenance (and its pins), so an update of an
    // unchanged pinned import records nothing.
    if let Some(previous) = previous.filter(|p| {
        p.provenance.source == provenance.source
            && p.provenance.extract == provenance.extract
            && p.provenance.files == provenance.files
    }) {
        provenance = previous.provenance;
    }
    draft.provenance = Some((provenance.id(), provenance.encode()));
    let recorded = record_version(store, sink, &built, &draft, |_, _| Ok(()))?;
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

/// Stores one archive member (a file through `writer`) into `collected`.
fn add_member(
    writer: &mut StreamWriter<'_>,
    collected: &mut Collected,
    object: &SourceObject,
    member: archive::Member<'_>,
) -> Result<()> {
    let (kind, size, id) = match member.kind {
        MemberKind::Dir => {
            collected.dirs.insert(member.path);
            return Ok(());
        }
        MemberKind::File { executable } => {
            let (id, size) = writer
                .ingest(&mut *member.reader, None)
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
    objects: &[&SourceObject],
    jobs: usize,
    progress: &dyn Progress,
) -> Result<Collected> {
    let collected = Mutex::new(Collected::default());
    crate::parallel::for_each_with(
        objects,
        jobs,
        || ingester.writer(),
        |writer, _, object| {
            let entry = read_object(writer, source, object, progress)?;
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
    object: &SourceObject,
    progress: &dyn Progress,
) -> Result<FlatEntry> {
    let path = key_path(object)?;
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
        .ingest(counted, Some(object.size).filter(|_| object.size_known))
        .map_err(|e| match e {
            // A bound, a stall, a deadline or a cancellation met while reading.
            IngestError::Read(e) => {
                crate::source::carried_error(e).unwrap_or_else(|source| Error::Io {
                    path: object.url.clone().into(),
                    source,
                })
            }
            IngestError::Store(e) => e,
        })?;
    if object.size_known && size != object.size {
        return Err(Error::Io {
            path: object.url.clone().into(),
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
        let object = SourceObject::for_tests("s3://b/x.tar");
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
