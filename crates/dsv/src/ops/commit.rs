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
//! The stat cache is trusted without looking at the store: an entry vouches that its file
//! holds the content of the workspace's version at its path ([`crate::workspace`]), a version
//! the store keeps whole while the directory exists, so the id is taken from that version's
//! tree, walked in step with the directory.
//!
//! # Stages, step by step
//!
//! `ops/commit.rs`, `commit()`. Stages in order:
//!
//! 1. **Check names.** The dataset name and the tag, if any, must pass `revision::check_name`.
//! 2. **Canonical path.** `workspace::canonical_dir` resolves the directory. The result is the
//!    workspace key and the version's `source`.
//! 3. **Early tag check.** If the dataset already has the tag and it names a version other
//!    than the dataset's current head, the commit stops with `TagExists` before anything is
//!    read. A tag naming the head passes, so re-running the same tagged commit on an
//!    unchanged directory succeeds (no version is made, and the tag already names the head).
//!    If the commit does record a new version (the directory changed, or `--allow-empty`),
//!    the final transaction refuses the tag (step 17).
//! 4. **Take the data lock** shared (`Store::lock_data_shared`), held until the commit
//!    returns: a chunk the store already holds is relied on, not written again, so `gc` must
//!    wait until the version is recorded (`ops::gc`). Then, from it, take the **workspace
//!    lock** (`Store::lock_workspace`), also held until the commit returns, so no checkout
//!    writes into the directory while it is snapshotted (the lock order of `dsv_store::store`:
//!    data, then workspace, then head).
//! 5. **Start time.** `started_ns = workspace::now_ns()` is taken *before* the scan. It becomes
//!    the `checked_ns` against which every stat cache entry this commit writes is settled.
//! 6. **Walk beside the stat cache** (`DiskStream`, above (`walk`)), obeying `.dsvignore`
//!    and `--exclude`. The first `Unsupported` entry in path order stops the commit ("cannot
//!    version PATH: REASON", `Error::Unsupported`).
//! 7. **Stat cache.** If the catalog knows this directory as a workspace (the same directory
//!    as recorded: device, inode, birth time), its stat cache is read in step with the walk
//!    (`catalog/workspaces.rs`), and none at all when the workspace's version is removed,
//!    evicted or unrecorded. For each regular file whose entry vouches for it (its lstat equals
//!    the entry, see Stat cache (`workspace`)), the id is the one the workspace's version
//!    has at that path: that version is walked beside the directory (`tree::Cursor` over
//!    `tree::walk_version`), started at the first vouched file. The id is used without asking
//!    the catalog whether the store holds it: the workspace's version is whole in the store.
//!    Files without an id from the cache go on the read list.
//!    Symlinks get id = BLAKE3 of their target bytes. Directories are not read. Cache entries
//!    at paths that are no longer files (deleted, left out, or now a directory or symlink)
//!    are deleted when the version is recorded.
//!
//!    The listing is not held in memory. Each entry is written, in path order, to an unnamed
//!    temporary file in `.dsv/tmp/` (`Listing`, `tempfile::tempfile_in`: it has no name, so
//!    it is gone with the process whatever happens), with its lstat and, for a file the cache
//!    vouched for, its id. Commit keeps only counts, the symlinks (for step 10) and the paths
//!    of cache entries to delete. Step 11 reads the file back from the start, and so do steps
//!    9 and 17 when some file is read. A text length read back is bounded (65,535 bytes)
//!    before it sizes anything, and a listing that does not read back as written is an error.
//! 8. **Stale temporary packs.** `Store::remove_stale_temp_packs` deletes files in `.dsv/tmp/`
//!    named `pack-<pid>-…` (or `.dsv-tmp-<pid>-…`) whose process `<pid>` is not this one and
//!    no longer runs (`/proc/<pid>` is absent): packs a killed commit was writing.
//! 9. **Ingest** (`ops/ingest.rs`, `ingest_files`), only when the read list is not empty: the
//!    listing is read back and its files without a trusted id are ingested 65,536 at a time
//!    (`INGEST_BATCH`: enough for full frames from tiny files, a few megabytes of paths),
//!    under one progress bar whose total (files and bytes) the walk counted. Their ids are
//!    appended in listing order to another unnamed temporary file (`ReadIds`, 33 bytes a
//!    file read: the id and whether the file read still had the walk's stat, which decides
//!    whether its stat is cached). Per batch, two stages run at once, joined
//!    by a bounded queue of frames:
//!    - **Readers** (`ReadWorker`) take files from the read list one at a time. Per file, a
//!      reader opens it and cuts it with `chunk::Chunker` (FastCDC, 16/64/256 KiB). It hashes
//!      each chunk with BLAKE3 (`ObjectId::of`) and asks its own catalog connection whether
//!      the store holds it as a chunk (`Catalog::has_object(id, Chunk)`). For a chunk the
//!      store lacks, it claims (id, chunk) in the `PackSink`, so no object is written twice in
//!      one run, and pushes the chunk into its own `FrameBuilder`. A frame buffer is
//!      allocated at its final size (1 MiB plus one largest chunk, `FRAME_CAPACITY`), so it
//!      never grows. When the frame holds ≥ 1 MiB
//!      (`FRAME_TARGET`), the reader sends it to the queue and starts a new one. After the
//!      last chunk, the reader compares the file's size and mtime with the stat from the walk.
//!      A file that changed while being read is an error ("the file changed while it was
//!      being read; run the command again"). The file id is the single chunk's id, or BLAKE3
//!      of the whole file otherwise. For several chunks the reader also pushes a file map
//!      object (chunk ids and lengths), keyed by the file id, if the store lacks a file map
//!      with that id (`has_object(file_id, FileMap)`) and this run has not claimed it. At the
//!      end each reader sends its partial frame.
//!    - **Compressors** (`compress_worker`) take frames from the queue. Each thread creates
//!      one zstd compression context (`zstd::bulk::Compressor`) and reuses it for every frame
//!      (`FrameBuilder::encode_with`: zstd, but stored raw unless zstd saves more than 1/32
//!      of the size). It appends the frame to the shared `PackSink`, which seals a pack once
//!      it reaches 32 MiB (`PACK_TARGET`) or 131,072 objects (`PACK_TARGET_OBJECTS`). The
//!      sink keeps only each sealed pack's id and size (`PackFile`); the final catalog
//!      transaction reads each pack's index back from its file, one at a time. Its claims
//!      (`PackSink::claim`, which keeps an object from being written twice) are a
//!      `key_set::KeySet` that moves past half a million keys to an unnamed file in
//!      `.dsv/tmp`.
//!    - **Deltas** (`ops/ingest/deltas.rs`, unless `ingest.deltas` is false): the listing is
//!      walked beside the tree of the version the workspace holds (else the dataset's
//!      head: `delta_parent`), so each file read comes with the file its path held there
//!      (`ParentFiles`). A reader resolves that file's chunk list, and for each new chunk
//!      picks the parent's chunks around the same offset scaled by the ratio of the two
//!      lengths, keeps those this store holds whose chains are under
//!      `COMMIT_DELTA_DEPTH` (4) deep, reads them (checked) and queues the chunk with that
//!      prefix; a compressor keeps the delta frame only when it stores at most half of the
//!      chunk compressed alone and the chunk's closure stores at most twice its length,
//!      else the chunk joins a plain frame. A file at a new path costs nothing more.
//!    - An ingest that fails (an error in any thread, Ctrl-C) returns its error after
//!      `PackSink::abandon` has deleted the open temporary pack and every pack this commit
//!      sealed that the catalog does not name.
//! 10. **Symlinks through symlinks**, checked right after step 7, before step 8 and before
//!     anything is written. `tree::symlink_through_symlink` refuses a symlink whose
//!     target, resolved lexically from the link's directory, passes through another symlink
//!     of the listing as a directory (for example `x -> d/l/..` when `d/l` is a symlink).
//!     Each link passed the lexical check on its own, but `d/l -> ..` plus `x -> d/l/..`
//!     would point outside the directory. The commit stops with `Error::Unsupported` (exit 3).
//! 11. **Trees.** The listing is read back a second time, each file that was read taking the
//!     next id of step 9, into `tree::TreeBuilder`: a directory's tree is encoded when the
//!     listing leaves it, children before parents, and totals files and bytes. Only the
//!     directories open at the current path are in memory.
//! 12. **Write trees**, still outside the store lock (trees are content-addressed), each as it
//!     is built (`TreeWriter`): a tree the catalog has (`has_object(id, Tree)`) is not written
//!     (a tree is stored together with all its subtrees, which were built and checked before
//!     it). Otherwise a tree that this run has not claimed yet goes into a tree frame. A non-empty frame is appended to the sink before a tree that would take it past
//!     1 MiB (`FRAME_TARGET`), so no tree frame exceeds 1 MiB unless it holds a single larger
//!     tree, however large the commit. The last partial frame is appended too.
//! 13. **Take the head lock** (`Store::lock_head`, from the data lock; `.dsv/lock`). Everything below runs under it.
//! 14. **Read the head.** The dataset's current head becomes the parent. If the new root tree
//!     equals the parent's tree and `--allow-empty` was not given, no version is made
//!     (`created: false`), but the tag, workspace and stat cache are still recorded.
//! 15. **Version frame.** Unless no version is made, the version object
//!     (`object::Version::encode`) goes into a frame of its own, appended to the sink.
//!     `author` and `source` have line breaks replaced by spaces first, so the catalog row and
//!     the encoded object agree.
//! 16. **Seal.** `PackSink::finish` seals the open pack, if it holds any frame. `PackWriter::finish`
//!     (`pack/writer.rs`) writes index and trailer, flushes, makes the file read-only (mode
//!     0444), fsyncs it, renames it from `.dsv/tmp/` to `.dsv/packs/<id>.pack` and fsyncs
//!     `packs/`.
//! 17. **One catalog transaction** (`Catalog::writer`, `BEGIN IMMEDIATE`): `add_pack` for each
//!     sealed pack (its frames and objects, read back from the pack's index one pack at a
//!     time, `PackFile::read_index`; an object already present with the same id and kind keeps
//!     its old location),
//!     `add_version` (creates the dataset if new, inserts the version, moves the head),
//!     `set_tag` (fails with `TagExists` if the tag names another version; commit never
//!     moves a tag), `set_workspace` (which also sets the version's `last_used` and clears
//!     its `evicted_at`), and `update_stat_cache` (deletions for paths that are no longer
//!     regular files, then new entries for the files read, from a third pass over the
//!     listing, 65,536 at a time). Then `COMMIT`, which first
//!     appends the head and tag changes to the ref log (Crash safety (`ops`)). A tag
//!     that named the head in step 3 fails here when the commit made a new version. On any
//!     error in this transaction it is rolled back and the commit deletes, still under the
//!     store lock, the packs it sealed that the catalog does not name (another writer may have
//!     recorded a byte-identical pack). An error while ingesting (step 9 on) or writing trees
//!     deletes them too (`PackSink::abandon`); an error while sealing the last pack (step 16)
//!     leaves the packs sealed so far unreferenced.
//! 18. The head lock, the workspace lock and the data lock are released when their guards
//!     drop, in that order (each borrows the data lock's guard).
//!
//! With `DSV_LOG=debug`, commit logs the elapsed time after the walk (beside the stat cache),
//! ingest, the trees, and the transaction.
//!
//! Cost: with a trusted stat cache, a commit reads only changed files, and writes only new
//! chunks, new file maps, the trees on changed paths, and the version. When nothing changed
//! and the stat cache vouches for every file, nothing is read, and each tree is looked up once
//! (about one catalog query per directory). Memory holds the symlinks, the open
//! directories, the open pack's index (at most `PACK_TARGET_OBJECTS` objects) and the pack
//! sink's claims (at most about half a million keys in memory), not the listing.

use std::path::{Path, PathBuf};

use super::ingest::{
    IngestFile, IngestOptions, IngestStats, PackSink, ParentFile, TreeWriter, ingest_files,
};
use crate::catalog::StatEntry;
use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;
use crate::object::{ObjectKind, Version};
use crate::progress::{Progress, Unit};
use crate::revision::check_name;
use crate::store::Store;
use crate::tree::{self, FlatEntry, FlatKind};
use crate::walk::{ScanEntry, ScanKind};
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
    /// Who commits; `None` records [`UNKNOWN_AUTHOR`] (the library reads no environment:
    /// the CLI passes `DSV_AUTHOR`, `$USER@host`, git's identity or the uid's account name).
    pub author: Option<String>,
    /// Make a version even when the tree equals the head's.
    pub allow_empty: bool,
    /// Paths to leave out of this commit (gitignore-style globs relative to the directory;
    /// `.dsvignore` files are always obeyed).
    pub exclude: Vec<String>,
    /// Commit a directory inside another workspace of the same dataset
    /// ([`Error::InsideWorkspace`] otherwise): the CLI's `--force`.
    pub allow_nested: bool,
    /// Pipeline tuning; `ingest.deltas` (default true) stores a new chunk of a file whose
    /// path the parent version held as a delta against that file's chunks when that saves
    /// at least half (false: every chunk whole, the CLI's `--no-deltas`).
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
            allow_nested: false,
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
/// The phases, each a function: `check_commit` (names, nesting, tag, message; nothing
/// read), `walk_beside_cache` (the directory beside its stat cache into a `Walked`
/// listing), `ingest_listing` (the files the cache does not vouch for, into packs),
/// `build_trees` (the trees, into packs), `record_commit` (the version and the
/// workspace, one catalog transaction).
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
    let (dir, workspace_key) = check_commit(store, dir, options)?;
    // Chunks found in the store are relied on, not rewritten: gc must wait until recorded.
    // Taken first, as every operation takes it (the lock order: see crate::store).
    let data_lock = store.lock_data_shared()?;
    // No checkout may write into the directory while it is being snapshotted.
    let _workspace_lock = store.lock_workspace(&data_lock, &workspace_key)?;
    // A move to a new head killed part-way: this snapshot's parent would be the head before.
    if let Some(following) = super::following::interrupted_following(store, &workspace_key)? {
        return Err(Error::RebaseInterrupted {
            dir,
            dataset: following.dataset,
            version: following.to.short(),
        });
    }
    let started_ns = workspace::now_ns();
    let clock = std::time::Instant::now();
    progress.phase("scanning");
    let workspace = store.catalog().workspace(&workspace_key)?;
    let mut walked = walk_beside_cache(store, &dir, workspace.as_ref(), options)?;
    tracing::debug!(entries = walked.regular_files + walked.other_files + walked.dirs, elapsed = ?clock.elapsed(), "walked beside the stat cache");
    store.remove_stale_temp_packs()?;
    let delta_parent = match options.ingest.deltas {
        true => delta_parent(store, workspace.as_ref(), &options.dataset)?,
        false => None,
    };
    let sink = PackSink::new(&store.packs_dir(), &store.temp_dir());
    let listed = (dir.as_path(), delta_parent.as_ref());
    let written = ingest_listing(store, &sink, listed, &mut walked, options, progress).and_then(
        |(ingest, mut ids)| {
            progress.phase("recording");
            tracing::debug!(files = ids.count, elapsed = ?clock.elapsed(), "ingested changed files");
            let built = build_trees(store, &sink, &mut walked.listing, &mut ids, options)?;
            tracing::debug!(elapsed = ?clock.elapsed(), "built and wrote trees");
            Ok((ingest, ids, built))
        },
    );
    let (ingest, mut ids, built) = match written {
        Ok(done) => done,
        Err(e) => {
            // A failed commit deletes its own packs at once.
            sink.abandon(store);
            return Err(e);
        }
    };
    let at = Workspace {
        data: &data_lock,
        key: &workspace_key,
        held: workspace.as_ref(),
        started_ns,
    };
    let recorded = record_commit(store, sink, &built, &at, &mut walked, &mut ids, options)?;
    tracing::debug!(packs = recorded.packs.len(), elapsed = ?clock.elapsed(), "recorded");
    // A workspace outside the store's tree finds its store through this link.
    super::workspace::link_store(store, &dir);
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
        files_unchanged: walked.regular_files - walked.files_to_read,
        ingest,
        packs_written: recorded.packs.len() as u64,
    })
}

/// Check phase: the dataset and tag names, that `dir` is not inside another dataset's
/// workspace (unless `allow_nested`), that the tag is free, and the message's length, all
/// before any data is read. Reads the catalog only. The canonical directory and its
/// workspace key.
///
/// # Errors
/// [`Error::InvalidName`], [`Error::NoSuchPath`], [`Error::Unsupported`], tag and nesting
/// errors.
fn check_commit(store: &Store, dir: &Path, options: &CommitOptions) -> Result<(PathBuf, String)> {
    check_name("dataset", &options.dataset)?;
    if let Some(tag) = &options.tag {
        check_name("tag", tag)?;
    }
    let (dir, workspace_key) = workspace::canonical_dir(dir)?;
    if !options.allow_nested {
        check_not_nested(store, &dir, &options.dataset)?;
    }
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
    Ok((dir, workspace_key))
}

/// What [`walk_beside_cache`] found: the directory's listing and counts.
struct Walked {
    /// Every entry, in path order, on disk (read back to ingest, then to build trees).
    listing: Listing,
    /// Stat cache entries at paths that are no longer files.
    removed: Vec<String>,
    regular_files: u64,
    /// Symlinks.
    other_files: u64,
    dirs: u64,
    /// Files the stat cache does not vouch for, and their bytes: read.
    files_to_read: u64,
    bytes_to_read: u64,
}

/// Walk phase: walks `dir` (obeying `.dsvignore`, leaving out `options.exclude`) beside the
/// stat cache of `workspace`, in step (both in path order: no map of either), into a
/// [`Listing`] on an unnamed temporary file (memory holds what changed and the open
/// directories, not the listing). A file the cache vouches for takes its id from the
/// version the workspace holds, walked beside from the first such file. Refuses, before
/// anything is written, unsupported entries, symlinks through symlinks and too many
/// entries. Reads the directory, the cache and the trees; writes only the temporary file.
///
/// # Errors
/// [`Error::Unsupported`]; walking, reading the cache or the trees; [`Error::Io`].
fn walk_beside_cache(
    store: &Store,
    dir: &Path,
    workspace: Option<&crate::catalog::Workspace>,
    options: &CommitOptions,
) -> Result<Walked> {
    let mut stream = super::disk::DiskStream::start(
        dir,
        store.catalog().path(),
        workspace.map(|w| w.id),
        &options.exclude,
        true,
    )?;
    // The version the stat cache vouches for (the one the workspace holds).
    let vouched_version = match workspace.and_then(|w| w.version) {
        Some(version) if store.catalog().removed_at(&version)?.is_none() => store
            .catalog()
            .version(&version)?
            .map(|record| record.version),
        _ => None,
    };
    let mut held_reader = store.reader();
    let mut held: Option<tree::Cursor<tree::Walk<'_, '_>>> = None;
    let mut walked = Walked {
        listing: Listing::create(&store.temp_dir())?,
        removed: Vec::new(),
        regular_files: 0,
        other_files: 0,
        dirs: 0,
        files_to_read: 0,
        bytes_to_read: 0,
    };
    // Symlinks, for the check that none passes through another.
    let mut links: Vec<FlatEntry> = Vec::new();
    while let Some(batch) = stream.next_batch()? {
        for item in batch {
            let id = match (&item.entry.kind, &vouched_version) {
                (ScanKind::File { .. }, Some(version)) if item.vouched => {
                    if held.is_none() {
                        held = Some(tree::Cursor::new(tree::walk_version(
                            &mut held_reader,
                            version,
                        )?));
                    }
                    let cursor = held.as_mut().expect("started above");
                    item.id(cursor.seek(&item.entry.path)?.map(|(_, e)| e))
                }
                _ => None,
            };
            if item.in_cache && !matches!(item.entry.kind, ScanKind::File { .. }) {
                walked.removed.push(item.entry.path.clone());
            }
            let record = walked.record_of(dir, item.entry, id, &mut links)?;
            walked.listing.write(&record)?;
        }
    }
    drop(held);
    drop(held_reader);
    let (_, _, uncached) = stream.finish();
    walked.removed.extend(uncached);
    // Checked before anything is written.
    if let Some(link) = tree::symlink_through_symlink(&links) {
        return Err(Error::Unsupported {
            path: dir.join(&link.path),
            reason: "the symlink's target passes through another symlink, so it could point outside the directory"
                .into(),
        });
    }
    drop(links);
    if let Err(reason) = tree::check_counts(walked.regular_files + walked.other_files, walked.dirs)
    {
        return Err(Error::Unsupported {
            path: dir.to_path_buf(),
            reason,
        });
    }
    Ok(walked)
}

impl Walked {
    /// The listing record of `entry` (of `dir`; `id`: its content id when the stat cache
    /// vouched for it), counted; a symlink is noted in `links` too.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for an entry dsv refuses.
    fn record_of(
        &mut self,
        dir: &Path,
        entry: ScanEntry,
        id: Option<ObjectId>,
        links: &mut Vec<FlatEntry>,
    ) -> Result<Record> {
        Ok(match entry.kind {
            ScanKind::Unsupported { reason } => {
                return Err(Error::Unsupported {
                    path: dir.join(&entry.path),
                    reason,
                });
            }
            ScanKind::Dir => {
                self.dirs += 1;
                Record::Dir { path: entry.path }
            }
            ScanKind::Symlink { target } => {
                self.other_files += 1;
                links.push(FlatEntry {
                    path: entry.path.clone(),
                    kind: FlatKind::Symlink {
                        target: target.clone(),
                    },
                    size: target.len() as u64,
                    id: ObjectId::of(target.as_bytes()),
                });
                Record::Symlink {
                    path: entry.path,
                    target,
                }
            }
            ScanKind::File { executable } => {
                self.regular_files += 1;
                if id.is_none() {
                    self.files_to_read += 1;
                    self.bytes_to_read += entry.stat.size;
                }
                Record::File {
                    path: entry.path,
                    executable,
                    id,
                    stat: entry.stat,
                }
            }
        })
    }
}

/// Ingest phase: reads the files of the listing the stat cache did not vouch for, in
/// batches of [`INGEST_BATCH`], chunking them into `sink`'s packs (see
/// [`super::ingest::ingest_files`]); their ids, in listing order, go to a [`ReadIds`] file.
/// Nothing to read (the cache vouched for every file): the listing is not read. Writes only
/// packs (through `sink`) and temporary files.
///
/// # Errors
/// [`Error::Io`]; [`Error::Interrupted`]; a file that changed while read.
fn ingest_listing(
    store: &Store,
    sink: &PackSink,
    (dir, parent): (&Path, Option<&Version>),
    walked: &mut Walked,
    options: &CommitOptions,
    progress: &dyn Progress,
) -> Result<(IngestStats, ReadIds)> {
    progress.count_files(walked.files_to_read);
    progress.start("reading", walked.bytes_to_read, Unit::Bytes);
    let mut ingest = IngestStats::default();
    // Ids of the files read, in listing order (on disk, 32 bytes each).
    let mut ids = ReadIds::create(&store.temp_dir())?;
    let mut batch: Vec<IngestFile> = Vec::new();
    let mut read_batch = |batch: &mut Vec<IngestFile>| -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let (read, stats) = ingest_files(
            store.catalog().path(),
            sink,
            batch,
            options.ingest,
            progress,
        )?;
        ids.push_all(&read)?;
        ingest.add(&stats);
        batch.clear();
        Ok(())
    };
    let mut records = match walked.files_to_read {
        0 => None,
        _ => Some(walked.listing.read()?),
    };
    // The parent version's files, walked beside the listing (both in path order).
    let (mut parent_reader, mut root_reader) = (store.checking_reader(), store.checking_reader());
    let readers = (&mut parent_reader, &mut root_reader);
    let mut parent_files = ParentFiles::start(readers, parent.filter(|_| records.is_some()))?;
    while let Some((path, stat)) = match records.as_mut() {
        Some(records) => records.next_file_to_read()?,
        None => None,
    } {
        let parent = parent_files.file(&path)?;
        batch.push(IngestFile {
            path: dir.join(path),
            stat,
            parent,
        });
        if batch.len() >= INGEST_BATCH {
            read_batch(&mut batch)?;
        }
    }
    read_batch(&mut batch)?;
    drop(records);
    Ok((ingest, ids))
}

/// The version a commit's new chunks take their delta bases from: the version the workspace
/// holds when it holds one of `dataset` (not removed), else the dataset's head (read without
/// the head lock: any version whose chunks the store holds serves as well, as the data lock
/// keeps them). `None` for a new dataset.
///
/// # Errors
/// Catalog errors.
fn delta_parent(
    store: &Store,
    workspace: Option<&crate::catalog::Workspace>,
    dataset: &str,
) -> Result<Option<Version>> {
    let held = workspace
        .filter(|w| w.dataset.as_deref() == Some(dataset))
        .and_then(|w| w.version);
    let version = match held {
        Some(version) if store.catalog().removed_at(&version)?.is_none() => Some(version),
        _ => store.catalog().head_or_none(dataset)?,
    };
    Ok(match version {
        Some(id) => store.catalog().version(&id)?.map(|record| record.version),
        None => None,
    })
}

/// The parent version's files, read forward beside a listing in path order: which file a
/// path held there. A parent whose trees cannot be read gives no file (deltas are only
/// lost compression); an interruption stops the commit.
struct ParentFiles<'r, 'a> {
    cursor: Option<tree::Cursor<tree::Walk<'r, 'a>>>,
    /// When the parent holds a single directory at its top: its name.
    top: Option<String>,
    /// And its files by their paths below it: the parents of the files under another top
    /// directory (a dated release unpacked with its own top directory, `data-2022-05-04/`
    /// then `data-2023-04-03/`).
    below_top: Option<tree::Cursor<tree::Walk<'r, 'a>>>,
}

impl<'r, 'a> ParentFiles<'r, 'a> {
    /// Starts before the first file of `version` (none when `None`).
    ///
    /// # Errors
    /// [`Error::Interrupted`].
    fn start(
        (reader, root_reader): (
            &'r mut crate::store::ObjectReader<'a>,
            &'r mut crate::store::ObjectReader<'a>,
        ),
        version: Option<&Version>,
    ) -> Result<ParentFiles<'r, 'a>> {
        let cursor = match version.map(|v| tree::walk_version(reader, v)) {
            Some(Ok(walk)) => Some(tree::Cursor::new(walk)),
            Some(Err(Error::Interrupted)) => return Err(Error::Interrupted),
            _ => None,
        };
        let top = match version.map(|v| root_reader.tree(&v.tree)) {
            Some(Ok(tree)) => match tree.entries.as_slice() {
                [only] if matches!(only.kind, crate::object::EntryKind::Dir { .. }) => {
                    Some((only.name.clone(), only.id))
                }
                _ => None,
            },
            Some(Err(Error::Interrupted)) => return Err(Error::Interrupted),
            _ => None,
        };
        let (top, below_top) = match top.map(|(name, id)| (name, tree::walk_tree(root_reader, &id)))
        {
            Some((name, Ok(walk))) => (Some(name), Some(tree::Cursor::new(walk))),
            Some((_, Err(Error::Interrupted))) => return Err(Error::Interrupted),
            _ => (None, None),
        };
        Ok(ParentFiles {
            cursor,
            top,
            below_top,
        })
    }

    /// The regular file of at least one byte the parent held at `path`, else (when the
    /// parent holds a single top directory and `path` lies under another) at the same path
    /// below the parent's top directory. Paths are asked in path order.
    ///
    /// # Errors
    /// [`Error::Interrupted`].
    fn file(&mut self, path: &str) -> Result<Option<ParentFile>> {
        if let Some(found) = Self::seek(&mut self.cursor, path, path)? {
            return Ok(Some(found));
        }
        match (self.top.as_deref(), path.split_once('/')) {
            (Some(top), Some((first, below))) if first != top => {
                Self::seek(&mut self.below_top, below, path)
            }
            _ => Ok(None),
        }
    }

    /// The file at `at` in `cursor`'s listing, as the parent of `path`; a listing that
    /// cannot be read is dropped (no parents from it).
    fn seek(
        cursor: &mut Option<tree::Cursor<tree::Walk<'r, 'a>>>,
        at: &str,
        path: &str,
    ) -> Result<Option<ParentFile>> {
        let Some(walking) = cursor.as_mut() else {
            return Ok(None);
        };
        match walking.seek(at) {
            Ok(Some((_, entry))) => Ok(match entry.kind {
                FlatKind::File { .. } if entry.size > 0 => {
                    Some(ParentFile::at(path, entry.id, entry.size))
                }
                _ => None,
            }),
            Ok(None) => Ok(None),
            Err(Error::Interrupted) => Err(Error::Interrupted),
            Err(_) => {
                *cursor = None;
                Ok(None)
            }
        }
    }
}

/// Trees phase: builds the version's trees from the listing (each file's id from the
/// listing, or from `ids` for a file read), each written to `sink`'s packs (unless the
/// store has it) as its directory closes. The root tree and the totals.
///
/// # Errors
/// [`Error::Io`]; a listing that disagrees with the ids read (changed meanwhile).
fn build_trees(
    store: &Store,
    sink: &PackSink,
    listing: &mut Listing,
    ids: &mut ReadIds,
    options: &CommitOptions,
) -> Result<tree::BuiltTrees> {
    let mut trees = TreeWriter::new(options.ingest.compression_level)?;
    let mut emit = |id: ObjectId, bytes: Vec<u8>| trees.add(store, sink, id, &bytes);
    let mut builder = tree::TreeBuilder::new();
    let mut read = ids.read()?;
    let mut records = listing.read()?;
    while let Some(record) = records.next_record()? {
        let entry = record
            .into_flat(|| Ok(read.next()?.map(|(id, _)| id)))?
            .ok_or_else(|| records.changed())?;
        builder.push(entry, &mut emit)?;
    }
    let (root, files, bytes) = builder.finish(&mut emit)?;
    trees.flush(sink)?;
    Ok(tree::BuiltTrees {
        root,
        trees: Vec::new(),
        files,
        bytes,
    })
}

/// The workspace a commit records: its key, its catalog row before the commit (if any),
/// and when the walk began (the stat cache's racy-timestamp reference).
struct Workspace<'a> {
    /// The commit's data lock, which the head lock of its record is made from.
    data: &'a crate::store::SharedDataLock,
    key: &'a str,
    held: Option<&'a crate::catalog::Workspace>,
    started_ns: i64,
}

/// Record phase: the parent (git's `HEAD`: the version this workspace holds when it holds
/// one of this dataset and it was not removed; the workspace lock, held until the end,
/// keeps it so), then [`record_version`] with, in its transaction, the workspace's version
/// and its stat cache (entries gone at paths that are no longer files; fresh ones for the
/// files read, none for a racy stat).
///
/// # Errors
/// As [`record_version`]; [`Error::Io`] reading the listing or the ids.
fn record_commit(
    store: &mut Store,
    sink: PackSink,
    built: &tree::BuiltTrees,
    at: &Workspace<'_>,
    walked: &mut Walked,
    ids: &mut ReadIds,
    options: &CommitOptions,
) -> Result<Recorded> {
    let parent = match at
        .held
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
        source: at.key.to_string(),
        provenance: None,
        allow_empty: options.allow_empty,
        compression_level: options.ingest.compression_level,
    };
    let (removed, listing) = (&walked.removed, &mut walked.listing);
    record_version(store, at.data, sink, built, &draft, |writer, version_id| {
        let workspace_id = writer.set_workspace(at.key, &options.dataset, version_id)?;
        writer.update_stat_cache(workspace_id, removed.iter().map(|p| (p.as_str(), None)))?;
        // The files read get fresh entries: their content is the new version's, which the
        // workspace now holds (a racy stat gets none, and its old entry goes).
        let mut fresh: Vec<(String, Option<StatEntry>)> = Vec::new();
        let write = |fresh: &mut Vec<(String, Option<StatEntry>)>| {
            writer.update_stat_cache(
                workspace_id,
                fresh.iter().map(|(p, e)| (p.as_str(), e.as_ref())),
            )?;
            fresh.clear();
            Ok::<_, Error>(())
        };
        if ids.count == 0 {
            return Ok(());
        }
        let mut read = ids.read()?;
        let mut records = listing.read()?;
        while let Some((path, stat)) = records.next_file_to_read()? {
            let (_, unchanged) = read.next()?.ok_or_else(|| records.changed())?;
            // The walk's stat is cached only for the file that was read.
            let entry = unchanged
                .then(|| workspace::entry(&stat, at.started_ns))
                .flatten();
            fresh.push((path, entry));
            if fresh.len() >= INGEST_BATCH {
                write(&mut fresh)?;
            }
        }
        write(&mut fresh)
    })
}

/// Files commit reads (and stat cache entries it writes) at once: enough for frames of
/// [`FRAME_TARGET`] bytes from tiny files, a few megabytes of paths at most.
const INGEST_BATCH: usize = 65_536;

/// One entry of the listing a commit keeps in a temporary file ([`Listing`]).
enum Record {
    Dir {
        path: String,
    },
    File {
        path: String,
        executable: bool,
        /// The id the stat cache vouched for; `None`: the file is read.
        id: Option<ObjectId>,
        stat: crate::walk::Stat,
    },
    Symlink {
        path: String,
        target: String,
    },
}

impl Record {
    /// The entry for the tree builder; a file that was read takes the next id `read` gives
    /// (`None` when none is left: the listing changed).
    ///
    /// # Errors
    /// `read`'s.
    fn into_flat(
        self,
        read: impl FnOnce() -> Result<Option<ObjectId>>,
    ) -> Result<Option<FlatEntry>> {
        Ok(Some(match self {
            Record::Dir { path } => FlatEntry {
                path,
                kind: FlatKind::Dir,
                size: 0,
                id: ObjectId([0; 32]),
            },
            Record::File {
                path,
                executable,
                id,
                stat,
            } => FlatEntry {
                path,
                kind: FlatKind::File { executable },
                size: stat.size,
                id: match id {
                    Some(id) => id,
                    None => match read()? {
                        Some(id) => id,
                        None => return Ok(None),
                    },
                },
            },
            Record::Symlink { path, target } => FlatEntry {
                path,
                size: target.len() as u64,
                id: ObjectId::of(target.as_bytes()),
                kind: FlatKind::Symlink { target },
            },
        }))
    }
}

/// The ids of the files a commit read, in listing order, each with whether the file read
/// still had the walk's stat ([`super::ingest::ingest_files`]), in an unnamed temporary file
/// (33 bytes each; a crash leaves nothing): read back in order for the trees, then for the
/// stat cache. Held in memory they took 32 MB at a million files.
struct ReadIds {
    path: std::path::PathBuf,
    file: std::io::BufWriter<std::fs::File>,
    count: u64,
}

impl ReadIds {
    fn create(temp_dir: &Path) -> Result<ReadIds> {
        let file = tempfile::tempfile_in(temp_dir).at(temp_dir)?;
        Ok(ReadIds {
            path: temp_dir.to_path_buf(),
            file: std::io::BufWriter::with_capacity(1 << 16, file),
            count: 0,
        })
    }

    fn push_all(&mut self, ids: &[(ObjectId, bool)]) -> Result<()> {
        use std::io::Write;
        for (id, unchanged) in ids {
            self.file.write_all(&id.0).at(&self.path)?;
            self.file
                .write_all(&[u8::from(*unchanged)])
                .at(&self.path)?;
        }
        self.count += ids.len() as u64;
        Ok(())
    }

    /// A reader from the first id (what was written is flushed first).
    fn read(&mut self) -> Result<ReadIdsReader> {
        use std::io::{Seek, Write};
        self.file.flush().at(&self.path)?;
        let mut file = self.file.get_ref().try_clone().at(&self.path)?;
        file.seek(std::io::SeekFrom::Start(0)).at(&self.path)?;
        Ok(ReadIdsReader {
            path: self.path.clone(),
            file: std::io::BufReader::with_capacity(1 << 16, file),
            left: self.count,
        })
    }
}

/// Reads [`ReadIds`] back.
struct ReadIdsReader {
    path: std::path::PathBuf,
    file: std::io::BufReader<std::fs::File>,
    left: u64,
}

impl ReadIdsReader {
    /// The next id, and whether the file read still had the walk's stat; `None` past the
    /// last one written.
    fn next(&mut self) -> Result<Option<(ObjectId, bool)>> {
        use std::io::Read;
        if self.left == 0 {
            return Ok(None);
        }
        let mut record = [0u8; 33];
        self.file.read_exact(&mut record).at(&self.path)?;
        self.left -= 1;
        let mut id = [0u8; 32];
        id.copy_from_slice(&record[..32]);
        Ok(Some((ObjectId(id), record[32] == 1)))
    }
}

/// A commit's listing in an unnamed temporary file in the store's `tmp/` (gone with the
/// process, whatever happens): written once in path order, read back as often as needed.
/// Each record: path length (u32 LE) and bytes, a tag byte (0 directory, 1 file, 2 file
/// to read, 3 symlink); a file adds its executable bit (u8) and its lstat (size u64, mtime
/// i64, ctime i64, inode u64, mode u32, LE), then its 32-byte id unless it is read; a
/// symlink adds its target's length (u32 LE) and bytes.
struct Listing {
    path: std::path::PathBuf,
    file: std::io::BufWriter<std::fs::File>,
}

impl Listing {
    fn create(temp_dir: &Path) -> Result<Listing> {
        let file = tempfile::tempfile_in(temp_dir).map_err(|source| Error::Io {
            path: temp_dir.to_path_buf(),
            source,
        })?;
        Ok(Listing {
            path: temp_dir.to_path_buf(),
            file: std::io::BufWriter::with_capacity(1 << 20, file),
        })
    }

    fn io(&self, source: std::io::Error) -> Error {
        Error::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// The listing did not read back as written (the file was changed under dsv).
    fn changed(&self) -> Error {
        self.io(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "commit's temporary listing changed while it was read",
        ))
    }

    fn write(&mut self, record: &Record) -> Result<()> {
        use std::io::Write;
        let mut bytes = Vec::with_capacity(128);
        let text = |bytes: &mut Vec<u8>, text: &str| {
            bytes.extend_from_slice(&(text.len() as u32).to_le_bytes());
            bytes.extend_from_slice(text.as_bytes());
        };
        match record {
            Record::Dir { path } => {
                text(&mut bytes, path);
                bytes.push(0);
            }
            Record::File {
                path,
                executable,
                id,
                stat,
            } => {
                text(&mut bytes, path);
                bytes.push(if id.is_some() { 1 } else { 2 });
                bytes.push(u8::from(*executable));
                bytes.extend_from_slice(&stat.size.to_le_bytes());
                bytes.extend_from_slice(&stat.mtime_ns.to_le_bytes());
                bytes.extend_from_slice(&stat.ctime_ns.to_le_bytes());
                bytes.extend_from_slice(&stat.inode.to_le_bytes());
                bytes.extend_from_slice(&stat.mode.to_le_bytes());
                if let Some(id) = id {
                    bytes.extend_from_slice(&id.0);
                }
            }
            Record::Symlink { path, target } => {
                text(&mut bytes, path);
                bytes.push(3);
                text(&mut bytes, target);
            }
        }
        self.file.write_all(&bytes).map_err(|e| self.io(e))
    }

    /// A reader from the first record (what was written is flushed first).
    fn read(&mut self) -> Result<ListingReader<'_>> {
        use std::io::{Seek, Write};
        self.file.flush().map_err(|e| self.io(e))?;
        let mut file = self.file.get_ref().try_clone().map_err(|e| self.io(e))?;
        file.seek(std::io::SeekFrom::Start(0))
            .map_err(|e| self.io(e))?;
        Ok(ListingReader {
            listing: self,
            file: std::io::BufReader::with_capacity(1 << 20, file),
        })
    }
}

/// Reads a [`Listing`] back, record by record.
struct ListingReader<'l> {
    listing: &'l Listing,
    file: std::io::BufReader<std::fs::File>,
}

impl ListingReader<'_> {
    /// The listing did not read back as written.
    fn changed(&self) -> Error {
        self.listing.changed()
    }

    /// The next file the stat cache did not vouch for (it is read): path and lstat.
    fn next_file_to_read(&mut self) -> Result<Option<(String, crate::walk::Stat)>> {
        while let Some(record) = self.next_record()? {
            if let Record::File {
                path,
                id: None,
                stat,
                ..
            } = record
            {
                return Ok(Some((path, stat)));
            }
        }
        Ok(None)
    }

    fn next_record(&mut self) -> Result<Option<Record>> {
        use std::io::BufRead;
        if self
            .file
            .fill_buf()
            .map_err(|e| self.listing.io(e))?
            .is_empty()
        {
            return Ok(None);
        }
        read_record(&mut self.file)
            .map(Some)
            .map_err(|_| self.changed())
    }
}

fn read_exact(file: &mut impl std::io::Read, length: usize) -> std::io::Result<Vec<u8>> {
    let mut bytes = vec![0; length];
    file.read_exact(&mut bytes)?;
    Ok(bytes)
}

/// A little-endian number of `length` bytes (at most 8).
fn read_number(file: &mut impl std::io::Read, length: usize) -> std::io::Result<u64> {
    let mut wide = [0u8; 8];
    file.read_exact(&mut wide[..length])?;
    Ok(u64::from_le_bytes(wide))
}

/// A path or symlink target: at most [`MAX_TEXT`] bytes (the walk refuses longer ones), so a
/// damaged length never sizes an allocation.
fn read_text(file: &mut impl std::io::Read) -> std::io::Result<String> {
    let length = read_number(file, 4)? as usize;
    if length > MAX_TEXT {
        return Err(std::io::ErrorKind::InvalidData.into());
    }
    String::from_utf8(read_exact(file, length)?)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// The longest text a [`Listing`] record holds: a symlink target (at most 65,535 bytes,
/// `walk::check_symlink_target`) or a relative path (at most PATH_MAX, 4,096).
const MAX_TEXT: usize = u16::MAX as usize;

/// One record of a [`Listing`] (its format is there).
fn read_record(file: &mut impl std::io::Read) -> std::io::Result<Record> {
    let path = read_text(file)?;
    let tag = read_number(file, 1)?;
    Ok(match tag {
        0 => Record::Dir { path },
        1 | 2 => {
            let executable = read_number(file, 1)? != 0;
            let stat = crate::walk::Stat {
                size: read_number(file, 8)?,
                mtime_ns: read_number(file, 8)? as i64,
                ctime_ns: read_number(file, 8)? as i64,
                inode: read_number(file, 8)?,
                mode: read_number(file, 4)? as u32,
            };
            let id = if tag == 1 {
                let mut id = [0u8; 32];
                file.read_exact(&mut id)?;
                Some(ObjectId(id))
            } else {
                None
            };
            Record::File {
                path,
                executable,
                id,
                stat,
            }
        }
        3 => Record::Symlink {
            path,
            target: read_text(file)?,
        },
        _ => return Err(std::io::ErrorKind::InvalidData.into()),
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
    pub packs: Vec<crate::pack::PackFile>,
}

impl VersionDraft {
    /// The version object this draft makes of `built` with `parent`, `provenance` and
    /// `time`: the author (or [`UNKNOWN_AUTHOR`]) and the source on one line each, as the
    /// catalog row and the encoded object must agree.
    fn version(
        &self,
        built: &tree::BuiltTrees,
        parent: Option<ObjectId>,
        provenance: Option<ObjectId>,
        time: i64,
    ) -> Version {
        Version {
            dataset: self.dataset.clone(),
            tree: built.root,
            parent,
            author: one_line(self.author.as_deref().unwrap_or(UNKNOWN_AUTHOR)),
            time,
            files: built.files,
            bytes: built.bytes,
            source: one_line(&self.source),
            provenance,
            message: self.message.clone(),
        }
    }
}

/// The last stage of commit and import: stores the new trees of `built` (and the
/// provenance), then under the head lock (made from `data`, the caller's data lock) reads
/// the head, writes the version object, seals
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
    data: &crate::store::SharedDataLock,
    sink: PackSink,
    built: &tree::BuiltTrees,
    draft: &VersionDraft,
    extra: impl FnOnce(&crate::catalog::CatalogWriter<'_>, &ObjectId) -> Result<()>,
) -> Result<Recorded> {
    // Trees are content-addressed: written before the lock, in frames of about FRAME_TARGET.
    let mut trees = TreeWriter::new(draft.compression_level)?;
    // The limits every reader applies (message, author, source): refused before anything.
    let probe = Version {
        dataset: String::new(),
        ..draft.version(built, None, None, 0)
    };
    let written = (|| {
        probe.check_limits().map_err(|reason| Error::Unsupported {
            path: draft.source.clone().into(),
            reason,
        })?;
        // Trees are recorded together with all their subtrees: if the root is known, all are.
        let known_root = store.catalog().has_object(&built.root, ObjectKind::Tree)?;
        for (id, bytes) in built.trees.iter().filter(|_| !known_root) {
            trees.add(store, &sink, *id, bytes)?;
        }
        if let Some((id, bytes)) = &draft.provenance {
            trees.add_provenance(store, &sink, *id, bytes)?;
        }
        trees.flush(&sink)?;
        Ok::<_, Error>(())
    })();
    if let Err(e) = written {
        // A failed commit deletes its own packs at once (a full disk stays full otherwise).
        sink.abandon(store);
        return Err(e);
    }

    // Finalize under the store lock, so the parent read here is still the head when recorded.
    let _lock = store.lock_head(data)?;
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
    let version = draft.version(built, parent, provenance, crate::catalog::unix_now());
    let version_id = if unchanged {
        parent.expect("unchanged implies a parent")
    } else {
        version.id()
    };
    if !unchanged {
        trees.add_alone(&sink, version_id, ObjectKind::Version, &version.encode())?;
    }
    let packs = sink.finish()?;
    let recorded = (|| {
        let packs_dir = store.packs_dir();
        let writer = store.catalog_mut().writer()?;
        // One pack's index in memory at a time.
        for pack in &packs {
            writer.add_pack(&pack.read_index(&packs_dir)?)?;
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
        // Nothing was recorded: delete this commit's packs now (under the store lock).
        super::ingest::remove_unrecorded_packs(store, &packs);
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
        // Nothing recorded moves the head: an unchanged workspace of an older version
        // replaces nothing.
        replaced_head: head.filter(|h| !unchanged && Some(*h) != parent),
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

/// Refuses to commit `dir` (canonical) to `dataset` when a directory above it is a workspace
/// holding `dataset`: the version would hold only `dir`'s part of that workspace, so the
/// dataset's layout would be replaced by a subdirectory's, and `dir` would become a second
/// workspace nested in the first.
///
/// # Errors
/// [`Error::InsideWorkspace`]; [`Error::Catalog`].
fn check_not_nested(store: &Store, dir: &Path, dataset: &str) -> Result<()> {
    for ancestor in dir.ancestors().skip(1) {
        let Some(key) = ancestor.to_str() else {
            continue;
        };
        if let Some(record) = store.catalog().workspace(key)?
            && record.dataset.as_deref() == Some(dataset)
        {
            return Err(Error::InsideWorkspace {
                dir: dir.to_path_buf(),
                workspace: PathBuf::from(record.path),
                dataset: dataset.to_string(),
            });
        }
    }
    Ok(())
}

/// `value` with line breaks replaced by spaces (version fields other than the message are
/// single lines).
fn one_line(value: &str) -> String {
    value.replace(['\n', '\r'], " ")
}

/// The author of a version made without one: the library reads no environment, so it does
/// not guess (the CLI passes `DSV_AUTHOR`, `$USER@hostname`, git's identity or the uid's
/// account name).
pub const UNKNOWN_AUTHOR: &str = "unknown";

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind of record reads back as written, in order, twice.
    #[test]
    fn a_listing_reads_back_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let mut listing = Listing::create(dir.path()).unwrap();
        let stat = crate::walk::Stat {
            size: 12,
            mtime_ns: -3,
            ctime_ns: 1 << 40,
            inode: u64::MAX,
            mode: 0o100755,
        };
        let records = [
            Record::Dir { path: "d".into() },
            Record::File {
                path: "d/ü.bin".into(),
                executable: true,
                id: Some(ObjectId([7; 32])),
                stat,
            },
            Record::File {
                path: "d/x".into(),
                executable: false,
                id: None,
                stat,
            },
            Record::Symlink {
                path: "l".into(),
                target: "d/x".into(),
            },
        ];
        for record in &records {
            listing.write(record).unwrap();
        }
        let describe = |record: &Record| match record {
            Record::Dir { path } => format!("dir {path}"),
            Record::File {
                path,
                executable,
                id,
                stat,
            } => format!("file {path} {executable} {id:?} {stat:?}"),
            Record::Symlink { path, target } => format!("link {path} {target}"),
        };
        let expected: Vec<String> = records.iter().map(describe).collect();
        for _ in 0..2 {
            let mut reader = listing.read().unwrap();
            let mut read = Vec::new();
            while let Some(record) = reader.next_record().unwrap() {
                read.push(describe(&record));
            }
            assert_eq!(read, expected);
        }
    }
}
