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
    /// The entries, depth-first, siblings sorted.
    pub entries: Vec<ScanEntry>,
    /// Content ids of the files and symlinks, by path (directories absent).
    pub ids: HashMap<String, ObjectId>,
    /// New stat cache entries for files that were hashed.
    pub refreshed: Vec<(String, StatEntry)>,
    /// dsv's temporary files left by an interrupted checkout.
    pub leftovers: Vec<PathBuf>,
}

impl DiskState {
    /// Scans `dir` and finds each file's content id. Only files in `wanted` are hashed when
    /// `wanted` is given (others get no id); `cache` vouches for unchanged files.
    pub fn read(
        dir: &Path,
        cache: &HashMap<String, StatEntry>,
        wanted: Option<&dyn Fn(&str) -> bool>,
        jobs: usize,
        progress: &dyn Progress,
    ) -> Result<DiskState> {
        let started_ns = workspace::now_ns();
        let (entries, leftovers) = walk::scan_with_leftovers(dir)?;
        let mut ids = HashMap::with_capacity(entries.len());
        let mut to_hash = Vec::new();
        for entry in &entries {
            match &entry.kind {
                ScanKind::Dir => {}
                ScanKind::Symlink { target } => {
                    ids.insert(entry.path.clone(), ObjectId::of(target.as_bytes()));
                }
                ScanKind::File { .. } => {
                    match cache
                        .get(&entry.path)
                        .and_then(|c| workspace::cached_id(c, &entry.stat))
                    {
                        Some(id) => {
                            ids.insert(entry.path.clone(), id);
                        }
                        None if wanted.is_none_or(|w| w(&entry.path)) => to_hash.push(entry),
                        None => {}
                    }
                }
            }
        }
        progress.start(
            "hashing",
            to_hash.iter().map(|e| e.stat.size).sum(),
            Unit::Bytes,
        );
        let hashed = crate::parallel::map(&to_hash, jobs, |entry| {
            let id = workspace::hash_file(&dir.join(&entry.path))?;
            progress.advance(entry.stat.size);
            Ok(id)
        })?;
        progress.finish();
        let mut refreshed = Vec::with_capacity(hashed.len());
        for (entry, id) in to_hash.iter().zip(hashed) {
            ids.insert(entry.path.clone(), id);
            refreshed.push((
                entry.path.clone(),
                workspace::entry(&entry.stat, id, started_ns),
            ));
        }
        Ok(DiskState {
            entries,
            ids,
            refreshed,
            leftovers,
        })
    }

    /// The disk entry at `path` as a [`FlatEntry`] (`None` for a file that was not hashed).
    pub fn flat(&self, entry: &ScanEntry) -> Option<FlatEntry> {
        let (kind, size, id) = match &entry.kind {
            ScanKind::Dir => (FlatKind::Dir, 0, ObjectId([0; 32])),
            ScanKind::File { executable } => (
                FlatKind::File {
                    executable: *executable,
                },
                entry.stat.size,
                *self.ids.get(&entry.path)?,
            ),
            ScanKind::Symlink { target } => (
                FlatKind::Symlink {
                    target: target.clone(),
                },
                target.len() as u64,
                *self.ids.get(&entry.path)?,
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

/// Compares workspace `dir` with the version it holds, refreshing its stat cache.
///
/// # Errors
/// [`Error::NotADirectory`], [`Error::NotAWorkspace`], read errors.
pub fn status(
    store: &mut Store,
    dir: &Path,
    jobs: usize,
    progress: &dyn Progress,
) -> Result<StatusReport> {
    let (dir, key) = workspace::canonical_dir(dir)?;
    let _lock = store.lock_workspace(&key)?;
    let workspace = store
        .catalog()
        .workspace(&key)?
        .ok_or_else(|| Error::NotAWorkspace { path: dir.clone() })?;
    let cache = store.catalog().stat_cache(workspace.id)?;
    let old = match &workspace.version {
        Some(version) => {
            let record = store
                .catalog()
                .version(version)?
                .ok_or_else(|| Error::MissingObject {
                    id: version.to_hex(),
                    what: "version",
                })?;
            tree::flatten(&mut store.reader(), &record.version.tree)?
        }
        None => Vec::new(),
    };
    let disk = DiskState::read(&dir, &cache, None, jobs, progress)?;
    let current: Vec<FlatEntry> = disk.entries.iter().filter_map(|e| disk.flat(e)).collect();
    let changes = tree::diff_flat(&old, &current);
    if !disk.refreshed.is_empty() {
        let writer = store.catalog_mut().writer()?;
        writer.update_stat_cache(
            workspace.id,
            disk.refreshed.iter().map(|(p, e)| (p.as_str(), Some(e))),
        )?;
        writer.commit()?;
    }
    Ok(StatusReport {
        dir,
        dataset: workspace.dataset,
        version: workspace.version,
        changes,
        files_hashed: disk.refreshed.len() as u64,
    })
}
