//! `commit`: snapshot a directory as a new version of a dataset.
//!
//! walk → stat cache says which files changed → ingest only those ([`super::ingest`]) →
//! build Merkle trees and store the new ones → under the store lock: read the head, write the
//! version object, seal the last pack durably, then one catalog transaction names the packs,
//! records the version, moves the head, sets the tag and refreshes the workspace's stat
//! cache. A crash before that transaction leaves only unnamed packs and temporary pack files
//! behind (reported by `verify`, the latter removed by the next commit), never a
//! half-recorded version.
//!
//! The stat cache is trusted without looking at the store: every id in it is content the
//! store holds (commit records what it stored, checkout what it wrote, status only files that
//! still hold their version's content).

use std::path::Path;

use super::ingest::{FRAME_TARGET, IngestFile, IngestOptions, IngestStats, PackSink, ingest_files};
use crate::catalog::StatEntry;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::{ObjectKind, Version};
use crate::pack::FrameBuilder;
use crate::progress::{Progress, Unit};
use crate::revision::check_name;
use crate::store::Store;
use crate::tree::{self, FlatEntry, FlatKind};
use crate::walk::ScanKind;
use crate::workspace;

/// What to commit and how.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CommitOptions {
    /// The dataset to add a version to (created if new).
    pub dataset: String,
    /// The commit message.
    pub message: String,
    /// A tag to give the new version.
    pub tag: Option<String>,
    /// Who commits; `None` uses `DSV_AUTHOR`, else `$USER@host`.
    pub author: Option<String>,
    /// Make a version even when the tree equals the head's.
    pub allow_empty: bool,
    /// Paths to leave out of this commit (gitignore-style globs relative to the directory;
    /// `.dsvignore` files are always obeyed).
    pub exclude: Vec<String>,
    /// Pipeline tuning.
    pub ingest: IngestOptions,
}

impl CommitOptions {
    /// Options for a commit to `dataset`: no message, tag or author, default tuning.
    pub fn new(dataset: impl Into<String>) -> CommitOptions {
        CommitOptions {
            dataset: dataset.into(),
            message: String::new(),
            tag: None,
            author: None,
            allow_empty: false,
            exclude: Vec::new(),
            ingest: IngestOptions::default(),
        }
    }
}

/// What a commit did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CommitReport {
    /// The dataset.
    pub dataset: String,
    /// The new version (or the unchanged parent when `created` is false).
    pub version: ObjectId,
    /// The new version's parent: the version the workspace held (git's `HEAD`) when it
    /// holds one of this dataset and it was not removed, else the dataset's head; `None` for a
    /// first version.
    pub parent: Option<ObjectId>,
    /// False when the directory equals the parent and nothing was recorded.
    pub created: bool,
    /// True when this commit made the dataset (it had no versions, or every one was removed):
    /// a typo in the name shows here.
    pub new_dataset: bool,
    /// The dataset's head before the commit when it was not the parent (the workspace held an
    /// older version): the head moved off that line, which stays in the store and the log
    /// (`dsv reset NAME VERSION` moves the head back).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replaced_head: Option<ObjectId>,
    /// The tag given, if any.
    pub tag: Option<String>,
    /// Files and symlinks in the version.
    pub files: u64,
    /// Total file bytes in the version.
    pub bytes: u64,
    /// Files the stat cache vouched for, so they were not read.
    pub files_unchanged: u64,
    /// Pipeline totals.
    #[serde(flatten)]
    pub ingest: IngestStats,
    /// Packs written.
    pub packs_written: u64,
}

/// Commits directory `dir` as a new version of `options.dataset`.
///
/// # Errors
/// [`Error::InvalidName`], [`Error::NotADirectory`], [`Error::Unsupported`] (an entry dsv
/// refuses, see [`crate::walk`]), [`Error::Io`] (a full disk, for one),
/// [`Error::Interrupted`]. On any error the catalog is unchanged.
pub fn commit(
    store: &mut Store,
    dir: &Path,
    options: &CommitOptions,
    progress: &dyn Progress,
) -> Result<CommitReport> {
    check_name("dataset", &options.dataset)?;
    if let Some(tag) = &options.tag {
        check_name("tag", tag)?;
    }
    let (dir, workspace_key) = workspace::canonical_dir(dir)?;
    if let Some(tag) = &options.tag {
        check_tag_free(store, &options.dataset, tag)?;
    }
    // Refused before any data is read, with the rule every reader applies.
    if options.message.len() > crate::object::MAX_MESSAGE_LEN {
        return Err(Error::Unsupported {
            path: dir,
            reason: format!(
                "the message is {} bytes, more than the limit of {}",
                options.message.len(),
                crate::object::MAX_MESSAGE_LEN
            ),
        });
    }
    // No checkout may write into the directory while it is being snapshotted.
    let _workspace_lock = store.lock_workspace(&workspace_key)?;
    // Chunks found in the store are relied on, not rewritten: gc must wait until recorded.
    let _data_lock = store.lock_data_shared()?;
    let started_ns = workspace::now_ns();
    let clock = std::time::Instant::now();
    progress.phase("scanning");
    let workspace = store.catalog().workspace(&workspace_key)?;
    // The walk and the stat cache advance in step (both in path order): no map of either.
    let mut stream = super::status::DiskStream::start(
        &dir,
        store.catalog().path(),
        workspace.as_ref().map(|w| w.id),
        &options.exclude,
        true,
    )?;
    // Which files must be read: those the stat cache cannot vouch for.
    let mut flat = Vec::new();
    let mut to_read = Vec::new();
    let mut to_read_index = Vec::new();
    // Stat cache entries at paths that are no longer files.
    let mut removed: Vec<String> = Vec::new();
    while let Some(batch) = stream.next_batch()? {
        for item in batch {
            let entry = item.entry;
            if item.in_cache && !matches!(entry.kind, ScanKind::File { .. }) {
                removed.push(entry.path.clone());
            }
            let (kind, size, id) = match entry.kind {
                ScanKind::Unsupported { reason } => {
                    return Err(Error::Unsupported {
                        path: dir.join(&entry.path),
                        reason,
                    });
                }
                ScanKind::Dir => (FlatKind::Dir, 0, ObjectId([0; 32])),
                ScanKind::Symlink { target } => {
                    let (size, id) = (target.len() as u64, ObjectId::of(target.as_bytes()));
                    (FlatKind::Symlink { target }, size, id)
                }
                ScanKind::File { executable } => {
                    if item.id.is_none() {
                        to_read_index.push(flat.len());
                        to_read.push(IngestFile {
                            path: dir.join(&entry.path),
                            stat: entry.stat,
                        });
                    }
                    (
                        FlatKind::File { executable },
                        entry.stat.size,
                        item.id.unwrap_or(ObjectId([0; 32])),
                    )
                }
            };
            flat.push(FlatEntry {
                path: entry.path,
                kind,
                size,
                id,
            });
        }
    }
    let (_, _, uncached) = stream.finish();
    removed.extend(uncached);
    tracing::debug!(entries = flat.len(), elapsed = ?clock.elapsed(), "walked beside the stat cache");

    // Checked before anything is written.
    if let Some(link) = tree::symlink_through_symlink(&flat) {
        return Err(Error::Unsupported {
            path: dir.join(&link.path),
            reason: "the symlink's target passes through another symlink, so it could point outside the directory"
                .into(),
        });
    }
    if let Err((path, reason)) = tree::check_listing(&flat) {
        return Err(Error::Unsupported {
            path: dir.join(path),
            reason,
        });
    }
    store.remove_stale_temp_packs()?;
    let sink = PackSink::new(&store.packs_dir(), &store.temp_dir());
    let total_bytes: u64 = to_read.iter().map(|f| f.stat.size).sum();
    progress.count_files(to_read.len() as u64);
    progress.start("reading", total_bytes, Unit::Bytes);
    let (ids, ingest) = if to_read.is_empty() {
        (Vec::new(), IngestStats::default())
    } else {
        match ingest_files(
            store.catalog().path(),
            &sink,
            &to_read,
            options.ingest,
            progress,
        ) {
            Ok(done) => done,
            Err(e) => {
                // A failed commit deletes its own packs at once.
                sink.abandon(store);
                return Err(e);
            }
        }
    };
    progress.phase("recording");
    // Entries of `flat` (by index, not a copy of the path) with their new stat cache entry.
    let mut new_cache: Vec<(usize, StatEntry)> = Vec::with_capacity(ids.len());
    for ((index, id), file) in to_read_index.iter().zip(&ids).zip(&to_read) {
        flat[*index].id = *id;
        new_cache.push((*index, workspace::entry(&file.stat, *id, started_ns)));
    }
    let files_read = to_read.len();
    drop(to_read);
    drop(ids);
    tracing::debug!(files = files_read, elapsed = ?clock.elapsed(), "ingested changed files");
    let built = tree::build(&flat);
    tracing::debug!(trees = built.trees.len(), elapsed = ?clock.elapsed(), "built trees");

    // Git's HEAD: the parent is the version this workspace holds when it holds one of this
    // dataset (the workspace lock, held until the end, keeps it so).
    // A removed version is no parent: its line was let go (the head's is taken then).
    let parent = match workspace
        .as_ref()
        .filter(|w| w.dataset.as_deref() == Some(options.dataset.as_str()))
        .and_then(|w| w.version)
    {
        Some(version) if store.catalog().removed_at(&version)?.is_none() => Some(version),
        _ => None,
    };
    let draft = VersionDraft {
        dataset: options.dataset.clone(),
        parent,
        message: options.message.clone(),
        tag: options.tag.clone(),
        author: options.author.clone(),
        source: workspace_key.clone(),
        provenance: None,
        allow_empty: options.allow_empty,
        compression_level: options.ingest.compression_level,
    };
    let recorded = record_version(store, sink, &built, &draft, |writer, version_id| {
        let workspace_id = writer.set_workspace(&workspace_key, &options.dataset, version_id)?;
        writer.update_stat_cache(
            workspace_id,
            new_cache
                .iter()
                .map(|(index, e)| (flat[*index].path.as_str(), Some(e)))
                .chain(removed.iter().map(|p| (p.as_str(), None))),
        )
    })?;
    tracing::debug!(packs = recorded.packs.len(), elapsed = ?clock.elapsed(), "recorded");

    Ok(CommitReport {
        dataset: options.dataset.clone(),
        version: recorded.version,
        parent: recorded.parent,
        created: recorded.created,
        new_dataset: recorded.new_dataset,
        replaced_head: recorded.replaced_head,
        tag: options.tag.clone(),
        files: built.files,
        bytes: built.bytes,
        files_unchanged: (flat
            .iter()
            .filter(|e| matches!(e.kind, FlatKind::File { .. }))
            .count()
            - files_read) as u64,
        ingest,
        packs_written: recorded.packs.len() as u64,
    })
}

/// What a new version will say about itself (see [`record_version`]).
#[derive(Debug, Clone)]
pub struct VersionDraft {
    /// The dataset.
    pub dataset: String,
    /// The parent; `None` takes the dataset's head when the version is recorded.
    pub parent: Option<ObjectId>,
    /// The message.
    pub message: String,
    /// A tag to give it.
    pub tag: Option<String>,
    /// Who makes it; `None` records [`UNKNOWN_AUTHOR`].
    pub author: Option<String>,
    /// Where it came from (a directory or a URL).
    pub source: String,
    /// For an import: the encoded provenance object and its id.
    pub provenance: Option<(ObjectId, Vec<u8>)>,
    /// Record a version even when the tree (and provenance) equal the head's.
    pub allow_empty: bool,
    /// zstd level of the metadata frames.
    pub compression_level: i32,
}

/// What [`record_version`] did.
#[derive(Debug)]
pub struct Recorded {
    /// The new version, or the head when nothing changed.
    pub version: ObjectId,
    /// The new version's parent (for an unchanged tree: the parent's own parent).
    pub parent: Option<ObjectId>,
    /// False when the parent already had this tree (and provenance).
    pub created: bool,
    /// True when the dataset had no head before.
    pub new_dataset: bool,
    /// The head before, when it was not the parent.
    pub replaced_head: Option<ObjectId>,
    /// Packs named by the transaction.
    pub packs: Vec<crate::pack::SealedPack>,
}

/// The last stage of commit and import: stores the new trees of `built` (and the
/// provenance), then under the store lock reads the head, writes the version object, seals
/// the packs and records everything in one catalog transaction, in which `extra` adds its
/// own rows. The parent is `draft.parent`, else the head read under the lock. Nothing changes
/// when the parent has the same tree (and, for an import, the same provenance) unless
/// `allow_empty`; the parent is returned then. The dataset's head moves to the new version.
///
/// # Errors
/// [`Error::TagExists`], [`Error::Io`], catalog errors, or `extra`'s; on any error the
/// catalog is unchanged and the packs of `sink` are unnamed.
pub fn record_version(
    store: &mut Store,
    sink: PackSink,
    built: &tree::BuiltTrees,
    draft: &VersionDraft,
    extra: impl FnOnce(&crate::catalog::CatalogWriter<'_>, &ObjectId) -> Result<()>,
) -> Result<Recorded> {
    // Trees are content-addressed: written before the lock, in frames of about FRAME_TARGET.
    // One zstd context for every metadata frame (setting one up costs megabytes).
    let mut compressor =
        zstd::bulk::Compressor::new(draft.compression_level).map_err(|source| Error::Io {
            path: "zstd".into(),
            source,
        })?;
    // The limits every reader applies (message, author, source): refused before anything.
    let probe = Version {
        dataset: String::new(),
        tree: built.root,
        parent: None,
        author: one_line(
            &draft
                .author
                .clone()
                .unwrap_or_else(|| UNKNOWN_AUTHOR.to_string()),
        ),
        time: 0,
        files: built.files,
        bytes: built.bytes,
        source: one_line(&draft.source),
        provenance: None,
        message: draft.message.clone(),
    };
    let written = (|| {
        probe.check_limits().map_err(|reason| Error::Unsupported {
            path: draft.source.clone().into(),
            reason,
        })?;
        let mut metadata = FrameBuilder::default();
        // Trees are recorded together with all their subtrees: if the root is known, all are.
        let known_root = store.catalog().has_object(&built.root, ObjectKind::Tree)?;
        for (id, bytes) in built.trees.iter().filter(|_| !known_root) {
            if !store.catalog().has_object(id, ObjectKind::Tree)?
                && sink.claim(id, ObjectKind::Tree)
            {
                if !metadata.is_empty() && metadata.len() + bytes.len() > FRAME_TARGET {
                    sink.add(metadata.encode_with(&mut compressor))?;
                }
                metadata.push(*id, ObjectKind::Tree, bytes);
            }
        }
        if let Some((id, bytes)) = &draft.provenance
            && !store.catalog().has_object(id, ObjectKind::Provenance)?
            && sink.claim(id, ObjectKind::Provenance)
        {
            metadata.push(*id, ObjectKind::Provenance, bytes);
        }
        if !metadata.is_empty() {
            sink.add(metadata.encode_with(&mut compressor))?;
        }
        Ok::<_, Error>(())
    })();
    if let Err(e) = written {
        // A failed commit deletes its own packs at once (a full disk stays full otherwise).
        sink.abandon(store);
        return Err(e);
    }

    // Finalize under the store lock, so the parent read here is still the head when recorded.
    let _lock = store.lock()?;
    let head = store.catalog().head_or_none(&draft.dataset)?;
    let parent = draft.parent.or(head);
    let parent_version = match parent {
        Some(id) => store.catalog().version(&id)?.map(|v| v.version),
        None => None,
    };
    let provenance = draft.provenance.as_ref().map(|(id, _)| *id);
    let unchanged = !draft.allow_empty
        && parent_version.as_ref().is_some_and(|p| {
            p.tree == built.root && (provenance.is_none() || p.provenance == provenance)
        });
    let version = Version {
        dataset: draft.dataset.clone(),
        tree: built.root,
        parent,
        // One line each: the catalog row and the encoded object must agree.
        author: one_line(
            &draft
                .author
                .clone()
                .unwrap_or_else(|| UNKNOWN_AUTHOR.to_string()),
        ),
        time: crate::catalog::unix_now(),
        files: built.files,
        bytes: built.bytes,
        source: one_line(&draft.source),
        provenance,
        message: draft.message.clone(),
    };
    let version_id = if unchanged {
        parent.expect("unchanged implies a parent")
    } else {
        version.id()
    };
    if !unchanged {
        let mut frame = FrameBuilder::default();
        frame.push(version_id, ObjectKind::Version, &version.encode());
        sink.add(frame.encode_with(&mut compressor))?;
    }
    let packs = sink.finish()?;
    let recorded = (|| {
        let writer = store.catalog_mut().writer()?;
        for pack in &packs {
            writer.add_pack(pack)?;
        }
        if !unchanged {
            writer.add_version(&version_id, &version)?;
        }
        if let Some(tag) = &draft.tag {
            writer.set_tag(&draft.dataset, tag, &version_id, false)?;
        }
        extra(&writer, &version_id)?;
        writer.commit()
    })();
    if let Err(e) = recorded {
        // Nothing was recorded: delete this commit's packs now (under the store lock, only
        // those the catalog does not name: another writer may have recorded an identical one).
        for pack in &packs {
            if matches!(store.catalog().has_pack(&pack.id), Ok(false)) {
                let _ = std::fs::remove_file(crate::pack::writer::pack_path(
                    &store.packs_dir(),
                    &pack.id,
                ));
            }
        }
        return Err(e);
    }
    Ok(Recorded {
        version: version_id,
        parent: if unchanged {
            parent_version.and_then(|v| v.parent)
        } else {
            parent
        },
        created: !unchanged,
        new_dataset: head.is_none(),
        replaced_head: head.filter(|h| Some(*h) != parent),
        packs,
    })
}

/// Fails when `tag` of `dataset` names another version than the head: checked before any
/// data is read (a run that changes nothing records the head, which may hold the tag). The
/// final transaction checks again.
///
/// # Errors
/// [`Error::TagExists`]; catalog errors.
pub fn check_tag_free(store: &Store, dataset: &str, tag: &str) -> Result<()> {
    let head = store.catalog().head_or_none(dataset)?;
    if store
        .catalog()
        .tag(dataset, tag)?
        .is_some_and(|tagged| Some(tagged) != head)
    {
        return Err(Error::TagExists {
            dataset: dataset.to_string(),
            tag: tag.to_string(),
        });
    }
    Ok(())
}

/// `value` with line breaks replaced by spaces (version fields other than the message are
/// single lines).
fn one_line(value: &str) -> String {
    value.replace(['\n', '\r'], " ")
}

/// The author of a version made without one: the library reads no environment, so it does
/// not guess (the CLI passes `DSV_AUTHOR` or `$USER@hostname`).
pub const UNKNOWN_AUTHOR: &str = "unknown";
