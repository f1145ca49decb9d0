//! `status`: how a workspace differs from the version it holds, reading only the files the
//! stat cache cannot vouch for.
//!
//! # Steps
//!
//! `ops/status.rs`, `status()`:
//!
//! 1. Canonicalize the directory; take the data lock shared, then from it the directory's
//!    workspace lock (the order of `dsv_store::store`). It must be a known workspace,
//!    the same directory as recorded (`NotAWorkspace` otherwise).
//! 2. Walk the version the workspace holds, tree by tree (`tree::walk_version`: the paths in
//!    path order, holding only the trees on the current path). A version removed since is
//!    `WorkspaceVersionRemoved` (exit 3), not a missing-object error.
//! 3. Walk the directory beside its stat cache (`DiskStream`, obeying `.dsvignore`) and merge
//!    the two walks, both in path order, a batch at a time (`disk::compare_with_disk`).
//!    Every untrusted file is hashed, untracked ones included; they are hashed together at
//!    the end (with a byte progress bar), and only they and the changes are held, so memory
//!    goes with what changed, not with the number of files. Leftover `.dsv-tmp-<pid>-<n>`
//!    files are skipped, not removed. `Unsupported` entries (special files, symlinks dsv
//!    cannot version, reserved names) are left out of the comparison: they are not reported
//!    as added (a path of the version that is now one is reported as deleted). A directory
//!    with a reserved name is not walked into.
//! 4. `tree::StreamingDiff`, fed one path at a time, gives the changes the whole-listing diff
//!    gave (a unit test compares them on thousands of generated pairs; `tree::diff_flat` is
//!    now a use of it): files and symlinks are compared by kind, executable bit and id. A directory is
//!    reported only when it holds no file on that side (empty directories are versioned),
//!    which is known once it closes.
//! 5. Of the files hashed, those that still hold the content the workspace's version has at
//!    their path get refreshed stat cache entries, written in one transaction. A modified or
//!    added file is not cached: its content is not in the store, and commit, which trusts the
//!    cache without looking at the store, must read it. Status never deletes stat cache
//!    entries. `files_hashed` counts every file hashed.

use std::path::{Path, PathBuf};

use super::disk::compare_with_disk;
use crate::catalog::StatEntry;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::progress::Progress;
use crate::store::Store;
use crate::tree::{self, Change, FlatEntry};
use crate::workspace;

/// How a workspace differs from its version.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StatusReport {
    /// The workspace directory.
    pub dir: PathBuf,
    /// The dataset of the version it holds.
    pub dataset: Option<String>,
    /// The version it holds.
    pub version: Option<ObjectId>,
    /// Added, modified and deleted paths (and renamed ones, after
    /// [`StatusReport::with_renames`]), sorted.
    pub changes: Vec<Change>,
    /// Files that had to be read because the stat cache could not vouch for them.
    pub files_hashed: u64,
    /// The dataset's local head and each remote's head of it (as last fetched, pulled or
    /// pushed) that is not the workspace's version, with how far apart they are: git's
    /// "behind origin/main by 2 commits".
    pub heads: Vec<HeadComparison>,
    /// A rebase or pull killed while this workspace moved to the dataset's new head: some
    /// files are at `to` already while the workspace still holds `from` (so `changes` lists
    /// them). `dsv checkout DATASET@TO DIR`, or the rebase run again, finishes the move.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted_rebase: Option<super::following::Following>,
}

impl StatusReport {
    /// The report with renames detected among its changes: a file deleted and a file added
    /// with the same content, kind and mode are one [`tree::ChangeKind::Renamed`] change, at
    /// the added file's place ([`tree::detect_renames`]). (`dsv status` does this unless
    /// `--no-renames`; a rebase compares plain additions and deletions.)
    pub fn with_renames(mut self) -> StatusReport {
        self.changes = tree::detect_renames(self.changes);
        self
    }
}

/// How a head of the workspace's dataset stands against the workspace's version.
#[derive(Debug, Clone, serde::Serialize)]
pub struct HeadComparison {
    /// `NAME` for the local head, `REMOTE/NAME` for a remote's.
    pub name: String,
    /// The version it names.
    pub version: ObjectId,
    /// Versions it has that the workspace's version lacks (the workspace is behind it by
    /// this many).
    pub behind: u64,
    /// Versions the workspace's version has that it lacks.
    pub ahead: u64,
}

/// The heads of `dataset` (local, then each remote's in read order) that are not `version`,
/// compared with it; heads whose line shares no version with it are left out.
fn compare_heads(store: &Store, dataset: &str, version: &ObjectId) -> Result<Vec<HeadComparison>> {
    let catalog = store.catalog();
    let mut heads = Vec::new();
    if let Some(head) = catalog.head_or_none(dataset)? {
        heads.push((dataset.to_string(), head));
    }
    for remote in catalog.remotes()? {
        if let Some(reference) = catalog.remote_ref(remote.id, dataset, None)?
            && catalog.version(&reference.version)?.is_some()
        {
            heads.push((format!("{}/{dataset}", remote.name), reference.version));
        }
    }
    let mut out = Vec::new();
    for (name, head) in heads {
        if head == *version {
            continue;
        }
        if let Some((ahead, behind)) = super::history::ahead_behind(catalog, version, &head)? {
            out.push(HeadComparison {
                name,
                version: head,
                behind,
                ahead,
            });
        }
    }
    Ok(out)
}

/// How to compute a status ([`status`]).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct StatusOptions {
    /// Files hashed at once (default: the number of CPUs).
    pub jobs: usize,
}

impl Default for StatusOptions {
    fn default() -> StatusOptions {
        StatusOptions {
            jobs: super::ingest::IngestOptions::default().jobs,
        }
    }
}

/// Compares the workspace holding `dir` (its root or any directory inside it) with the version
/// it holds, refreshing its stat cache.
///
/// # Errors
/// [`Error::NotADirectory`], [`Error::NotAWorkspace`], read errors.
pub fn status(
    store: &mut Store,
    dir: &Path,
    options: &StatusOptions,
    progress: &dyn Progress,
) -> Result<StatusReport> {
    let jobs = options.jobs;
    workspace::canonical_dir(dir)?;
    // From a subdirectory too, as git finds its work tree.
    let key = super::workspace::enclosing(store, dir)?
        .ok_or_else(|| Error::NotAWorkspace {
            path: dir.to_path_buf(),
            store: store.root().to_path_buf(),
        })?
        .path;
    let dir = PathBuf::from(&key);
    let data_lock = store.lock_data_shared()?;
    let _lock = store.lock_workspace(&data_lock, &key)?;
    let workspace = store
        .catalog()
        .workspace(&key)?
        .ok_or_else(|| Error::NotAWorkspace {
            path: dir.clone(),
            store: store.root().to_path_buf(),
        })?;
    let record = match &workspace.version {
        Some(version) if store.catalog().removed_at(version)?.is_some() => {
            return Err(Error::WorkspaceVersionRemoved {
                dir: dir.clone(),
                version: version.to_hex(),
            });
        }
        Some(version) => Some(store.catalog().version_record(version)?),
        None => None,
    };
    let catalog_path = store.catalog().path().to_path_buf();
    let compared = {
        let mut reader = store.reader();
        let expected: Box<dyn Iterator<Item = Result<FlatEntry>>> = match &record {
            Some(record) => Box::new(tree::walk_version(&mut reader, &record.version)?),
            None => Box::new(std::iter::empty()),
        };
        compare_with_disk(
            &dir,
            &catalog_path,
            Some(workspace.id),
            expected,
            jobs,
            progress,
        )?
    };
    // Refresh the cache only for files that still hold their version's content: that content
    // is in the store. A modified or new file's content is not, and commit must read it.
    // A racy stat is not cached (`None` deletes the path's stale entry).
    let refreshed: Vec<(&str, Option<&StatEntry>)> = compared
        .hashed
        .iter()
        .filter(|(_, _, held)| *held)
        .map(|(path, entry, _)| (path.as_str(), entry.as_ref()))
        .collect();
    if !refreshed.is_empty() {
        let writer = store.catalog_mut().writer()?;
        writer.update_stat_cache(workspace.id, refreshed)?;
        writer.commit()?;
    }
    let heads = match (&workspace.dataset, &workspace.version) {
        (Some(dataset), Some(version)) => compare_heads(store, dataset, version)?,
        _ => Vec::new(),
    };
    let interrupted_rebase = super::following::interrupted_following(store, &key)?;
    Ok(StatusReport {
        dir,
        dataset: workspace.dataset,
        version: workspace.version,
        changes: compared.changes,
        files_hashed: compared.hashed.len() as u64,
        heads,
        interrupted_rebase,
    })
}
