//! `status`: how a workspace differs from the version it holds, reading only the files the
//! stat cache cannot vouch for.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::catalog::StatEntry;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::progress::{Progress, Unit};
use crate::store::Store;
use crate::tree::{self, Change, FlatEntry, FlatKind};
use crate::walk::{self, ScanEntry, ScanKind};
use crate::workspace;

/// A directory as it is on disk now, with every file's content id (from the stat cache or
/// by hashing).
pub(crate) struct DiskState {
    /// The stat cache the entries were checked against (see [`beside_stat_cache`]).
    pub cache: HashMap<String, StatEntry>,
    /// The entries, depth-first, siblings sorted.
    pub entries: Vec<ScanEntry>,
    /// Content ids of the files and symlinks, by index into `entries` (`None` for
    /// directories, unsupported entries and files not hashed): no second copy of the paths.
    pub ids: Vec<Option<ObjectId>>,
    /// Stat cache entries for the files that were hashed. Only those whose content is known
    /// to be in the store may be written to the cache: commit trusts the cache and does not
    /// store what it vouches for.
    pub hashed: Vec<(String, StatEntry)>,
    /// dsv's temporary files and directories (`.dsv-tmp-<pid>-<n>`).
    pub leftovers: Vec<PathBuf>,
    /// Relative paths of nested `.dsv` stores (never walked into).
    pub stores: Vec<String>,
}

impl DiskState {
    /// Scans `dir` and finds each file's content id. Only files in `wanted` are hashed when
    /// `wanted` is given (others get no id); the stat cache of workspace `cache_of` (none:
    /// empty), loaded from `catalog` while the scan runs, vouches for unchanged files.
    /// `.dsvignore` files are obeyed when `obey_ignore_files` (status, audit); checkout sees
    /// everything, so an ignored file in the way of one a version writes is protected as any
    /// untracked file is.
    pub fn read(
        dir: &Path,
        catalog: &Path,
        cache_of: Option<i64>,
        wanted: Option<&dyn Fn(&str) -> bool>,
        obey_ignore_files: bool,
        jobs: usize,
        progress: &dyn Progress,
    ) -> Result<DiskState> {
        let started_ns = workspace::now_ns();
        progress.phase("scanning");
        let (
            cache,
            walk::Scan {
                entries,
                leftovers,
                stores,
            },
        ) = beside_stat_cache(catalog, cache_of, || {
            if obey_ignore_files {
                walk::scan(dir)
            } else {
                walk::scan_everything(dir)
            }
        })?;
        let mut ids = vec![None; entries.len()];
        let mut to_hash = Vec::new();
        for (index, entry) in entries.iter().enumerate() {
            match &entry.kind {
                ScanKind::Dir | ScanKind::Unsupported { .. } => {}
                ScanKind::Symlink { target } => {
                    ids[index] = Some(ObjectId::of(target.as_bytes()));
                }
                ScanKind::File { .. } => {
                    match cache
                        .get(&entry.path)
                        .and_then(|c| workspace::cached_id(c, &entry.stat))
                    {
                        Some(id) => ids[index] = Some(id),
                        None if wanted.is_none_or(|w| w(&entry.path)) => {
                            to_hash.push((index, entry));
                        }
                        None => {}
                    }
                }
            }
        }
        progress.count_files(to_hash.len() as u64);
        progress.start(
            "hashing",
            to_hash.iter().map(|(_, e)| e.stat.size).sum(),
            Unit::Bytes,
        );
        let hashed = crate::parallel::map(&to_hash, jobs, |(_, entry)| {
            let id = workspace::hash_file(&dir.join(&entry.path))?;
            progress.advance(entry.stat.size);
            progress.file_done();
            Ok(id)
        })?;
        progress.finish();
        let mut fresh = Vec::with_capacity(hashed.len());
        for ((index, entry), id) in to_hash.iter().zip(hashed) {
            ids[*index] = Some(id);
            fresh.push((
                entry.path.clone(),
                workspace::entry(&entry.stat, id, started_ns),
            ));
        }
        Ok(DiskState {
            cache,
            entries,
            ids,
            hashed: fresh,
            leftovers,
            stores,
        })
    }

    /// The content id of `entries[index]` (`None` for a directory, an unsupported entry or
    /// a file that was not hashed).
    pub fn id(&self, index: usize) -> Option<ObjectId> {
        self.ids.get(index).copied().flatten()
    }

    /// Every entry as a [`FlatEntry`], in order, but files that were not hashed and
    /// unsupported entries.
    pub fn listing(&self) -> Vec<FlatEntry> {
        (0..self.entries.len())
            .filter_map(|index| self.flat(index))
            .collect()
    }

    /// `entries[index]` as a [`FlatEntry`] (`None` for a file that was not hashed).
    pub fn flat(&self, index: usize) -> Option<FlatEntry> {
        let entry = self.entries.get(index)?;
        let (kind, size, id) = match &entry.kind {
            ScanKind::Unsupported { .. } => return None,
            ScanKind::Dir => (FlatKind::Dir, 0, ObjectId([0; 32])),
            ScanKind::File { executable } => (
                FlatKind::File {
                    executable: *executable,
                },
                entry.stat.size,
                self.id(index)?,
            ),
            ScanKind::Symlink { target } => (
                FlatKind::Symlink {
                    target: target.clone(),
                },
                target.len() as u64,
                self.id(index)?,
            ),
        };
        Some(FlatEntry {
            path: entry.path.clone(),
            kind,
            size,
            id,
        })
    }
}

/// Runs `work` on this thread while another loads the stat cache of workspace `workspace`
/// (none: an empty cache) through a connection of its own to `catalog`; returns both. The
/// two take about as long (at 100,000 files on 2 cores, 0.3 s to walk the directory and
/// 0.4 s to load its cache) and neither needs the other.
///
/// # Errors
/// The error of `work`, else that of the load ([`Error::Catalog`]).
pub(crate) fn beside_stat_cache<T: Send>(
    catalog: &Path,
    workspace: Option<i64>,
    work: impl FnOnce() -> Result<T>,
) -> Result<(HashMap<String, StatEntry>, T)> {
    let Some(workspace) = workspace else {
        return Ok((HashMap::new(), work()?));
    };
    std::thread::scope(|scope| {
        let loading =
            scope.spawn(|| crate::catalog::Catalog::open_reader(catalog)?.stat_cache(workspace));
        let done = work();
        let cache = loading
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        Ok((cache?, done?))
    })
}

/// Reads `dir` as [`DiskState::read`] does for status and audit (obeying `.dsvignore`,
/// hashing every file the stat cache of workspace `cache_of` cannot vouch for), and compares
/// it with `expected`, a version's listing in path order: (the disk's state, the changes
/// from `expected` to the disk, sorted by path).
///
/// # Errors
/// As [`DiskState::read`].
pub(crate) fn compare_with_disk(
    dir: &Path,
    catalog: &Path,
    cache_of: Option<i64>,
    expected: &[FlatEntry],
    jobs: usize,
    progress: &dyn Progress,
) -> Result<(DiskState, Vec<Change>)> {
    let disk = DiskState::read(dir, catalog, cache_of, None, true, jobs, progress)?;
    let changes = tree::diff_flat(expected, &disk.listing());
    Ok((disk, changes))
}

/// How a workspace differs from its version.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StatusReport {
    /// The workspace directory.
    pub dir: PathBuf,
    /// The dataset of the version it holds.
    pub dataset: Option<String>,
    /// The version it holds.
    pub version: Option<ObjectId>,
    /// Added, modified and deleted paths, sorted.
    pub changes: Vec<Change>,
    /// Files that had to be read because the stat cache could not vouch for them.
    pub files_hashed: u64,
}

/// Compares the workspace holding `dir` (its root or any directory inside it) with the version
/// it holds, refreshing its stat cache.
///
/// # Errors
/// [`Error::NotADirectory`], [`Error::NotAWorkspace`], read errors.
pub fn status(
    store: &mut Store,
    dir: &Path,
    jobs: usize,
    progress: &dyn Progress,
) -> Result<StatusReport> {
    workspace::canonical_dir(dir)?;
    // From a subdirectory too, as git finds its work tree.
    let key = super::workspace::enclosing(store, dir)?
        .ok_or_else(|| Error::NotAWorkspace {
            path: dir.to_path_buf(),
        })?
        .path;
    let dir = PathBuf::from(&key);
    let _data_lock = store.lock_data_shared()?;
    let _lock = store.lock_workspace(&key)?;
    let workspace = store
        .catalog()
        .workspace(&key)?
        .ok_or_else(|| Error::NotAWorkspace { path: dir.clone() })?;
    let old = match &workspace.version {
        Some(version) if store.catalog().removed_at(version)?.is_some() => {
            return Err(Error::WorkspaceVersionRemoved {
                dir: dir.clone(),
                version: version.to_hex(),
            });
        }
        Some(version) => {
            let record = store.catalog().version_record(version)?;
            tree::flatten_version(&mut store.reader(), &record.version)?
        }
        None => Vec::new(),
    };
    let (disk, changes) = compare_with_disk(
        &dir,
        store.catalog().path(),
        Some(workspace.id),
        &old,
        jobs,
        progress,
    )?;
    // Refresh the cache only for files that still hold their version's content: that content
    // is in the store. A modified or new file's content is not, and commit must read it.
    // `old` is in path order (as flatten gives it): searched, not copied into a map.
    let old_id = |path: &str| {
        old.binary_search_by(|e| walk::path_order(&e.path, path))
            .ok()
            .map(|i| old[i].id)
    };
    let refreshed: Vec<&(String, StatEntry)> = disk
        .hashed
        .iter()
        .filter(|(path, entry)| old_id(path) == Some(entry.file_id))
        .collect();
    if !refreshed.is_empty() {
        let writer = store.catalog_mut().writer()?;
        writer.update_stat_cache(
            workspace.id,
            refreshed.iter().map(|(p, e)| (p.as_str(), Some(e))),
        )?;
        writer.commit()?;
    }
    Ok(StatusReport {
        dir,
        dataset: workspace.dataset,
        version: workspace.version,
        changes,
        files_hashed: disk.hashed.len() as u64,
    })
}
