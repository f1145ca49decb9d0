//! `status`: how a workspace differs from the version it holds, reading only the files the
//! stat cache cannot vouch for.
//!
//! # Steps
//!
//! `ops/status.rs`, `status()`:
//!
//! 1. Canonicalize the directory and take its workspace lock. It must be a known workspace,
//!    the same directory as recorded (`NotAWorkspace` otherwise).
//! 2. Walk the version the workspace holds, tree by tree (`tree::walk_version`: the paths in
//!    path order, holding only the trees on the current path). A version removed since is
//!    `WorkspaceVersionRemoved` (exit 3), not a missing-object error.
//! 3. Walk the directory beside its stat cache (`DiskStream`, obeying `.dsvignore`) and merge
//!    the two walks, both in path order, a batch at a time (`status::compare_with_disk`).
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

use crate::catalog::StatEntry;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::progress::{Progress, Unit};
use crate::store::Store;
use crate::tree::{self, Change, FlatEntry, FlatKind};
use crate::walk::{self, ScanEntry, ScanKind};
use crate::workspace;

/// One entry of a directory as a [`DiskStream`] gives it.
pub(crate) struct DiskItem {
    /// The entry as the walk found it.
    pub entry: ScanEntry,
    /// True when the stat cache has an entry at this path whose stat the file still has:
    /// the file holds the content of the workspace's version at this path (see
    /// [`DiskItem::id`]).
    pub vouched: bool,
    /// True when the stat cache has an entry at this path (vouching or not).
    pub in_cache: bool,
}

impl DiskItem {
    /// The entry's content id when known without reading it: a symlink's (the hash of its
    /// target), or a regular file's that the stat cache vouches for, which is the id of
    /// `held`, the entry the workspace's version (the version the cache vouches for) has at
    /// this path, when that is a file of the same size. `None`: the file must be hashed.
    pub fn id(&self, held: Option<&FlatEntry>) -> Option<ObjectId> {
        match &self.entry.kind {
            ScanKind::Symlink { target } => Some(ObjectId::of(target.as_bytes())),
            ScanKind::File { .. } if self.vouched => held
                .filter(|h| matches!(h.kind, FlatKind::File { .. }))
                .filter(|h| h.size == self.entry.stat.size)
                .map(|h| h.id),
            _ => None,
        }
    }
}

/// Stat cache entries the reading thread sends at once.
const CACHE_BATCH: usize = 4096;

/// A directory's entries in path order with what the stat cache says of each: the walk
/// ([`walk::Walker`]) and the cache (one cursor on a connection of its own, on a thread of
/// its own) advance in step, as both are in [`walk::path_order`]. Holds a few batches of
/// each, whatever the directory's size.
pub(crate) struct DiskStream {
    walker: walk::Walker,
    cache: Option<CacheRows>,
    /// Paths of stat cache entries that no entry of the walk had (deleted or left-out files).
    uncached_rows: Vec<String>,
}

impl DiskStream {
    /// Starts walking `dir` (obeying `.dsvignore` when `obey_ignore_files`, leaving out
    /// `exclude`) beside the stat cache of workspace `cache_of` in `catalog` (none: no cache).
    ///
    /// # Errors
    /// As [`walk::Walker::start`].
    pub fn start(
        dir: &Path,
        catalog: &Path,
        cache_of: Option<i64>,
        exclude: &[String],
        obey_ignore_files: bool,
    ) -> Result<DiskStream> {
        let walker = walk::Walker::start(dir, exclude, obey_ignore_files)?;
        Ok(DiskStream {
            walker,
            cache: cache_of.map(|workspace| CacheRows::start(catalog, workspace)),
            uncached_rows: Vec::new(),
        })
    }

    /// The next entries in path order; `None` at the end.
    ///
    /// # Errors
    /// As [`walk::Walker::next_batch`]; [`Error::Catalog`] reading the cache.
    pub fn next_batch(&mut self) -> Result<Option<Vec<DiskItem>>> {
        let Some(batch) = self.walker.next_batch()? else {
            if let Some(cache) = &mut self.cache {
                while let Some((path, _)) = cache.next()? {
                    self.uncached_rows.push(path);
                }
            }
            return Ok(None);
        };
        let mut items = Vec::with_capacity(batch.len());
        for entry in batch {
            let mut cached = None;
            if let Some(cache) = &mut self.cache {
                while let Some(order) = cache.peek_order(&entry.path)? {
                    match order {
                        std::cmp::Ordering::Less => {
                            let (path, _) = cache.next()?.expect("peeked");
                            self.uncached_rows.push(path);
                        }
                        std::cmp::Ordering::Equal => {
                            cached = cache.next()?.map(|(_, row)| row);
                            break;
                        }
                        std::cmp::Ordering::Greater => break,
                    }
                }
            }
            let vouched = matches!(entry.kind, ScanKind::File { .. })
                && cached.as_ref().is_some_and(|c| *c == entry.stat);
            items.push(DiskItem {
                entry,
                vouched,
                in_cache: cached.is_some(),
            });
        }
        Ok(Some(items))
    }

    /// dsv's temporary files and directories and the nested stores met (see
    /// [`walk::Walker::finish`]), and the paths of stat cache entries no entry of the walk
    /// had (deleted or left-out files): whole once [`DiskStream::next_batch`] gave `None`.
    pub fn finish(self) -> (Vec<PathBuf>, Vec<String>, Vec<String>) {
        let (leftovers, stores) = self.walker.finish();
        (leftovers, stores, self.uncached_rows)
    }
}

/// A workspace's stat cache read in path order by a thread of its own.
struct CacheRows {
    receiver: std::sync::mpsc::Receiver<Result<Vec<(String, StatEntry)>>>,
    batch: std::collections::VecDeque<(String, StatEntry)>,
    done: bool,
}

impl CacheRows {
    fn start(catalog: &Path, workspace: i64) -> CacheRows {
        let (sender, receiver) = std::sync::mpsc::sync_channel(2);
        let catalog = catalog.to_path_buf();
        // A thread that cannot start leaves an empty cache: files are hashed instead.
        let _ = std::thread::Builder::new()
            .name("dsv-stat-cache".into())
            .spawn(move || {
                let mut batch = Vec::with_capacity(CACHE_BATCH);
                let read = crate::catalog::Catalog::open_reader(&catalog).and_then(|catalog| {
                    catalog.stat_cache_in_order(workspace, |path, entry| {
                        batch.push((path, entry));
                        if batch.len() < CACHE_BATCH {
                            return Ok(true);
                        }
                        let full = std::mem::replace(&mut batch, Vec::with_capacity(CACHE_BATCH));
                        Ok(sender.send(Ok(full)).is_ok())
                    })
                });
                let _ = sender.send(read.map(|()| batch));
            });
        CacheRows {
            receiver,
            batch: Default::default(),
            done: false,
        }
    }

    /// Fills the batch when it is empty; false at the end of the cache.
    fn fill(&mut self) -> Result<bool> {
        while self.batch.is_empty() && !self.done {
            match self.receiver.recv() {
                Ok(rows) => self.batch.extend(rows?),
                Err(_) => self.done = true,
            }
        }
        Ok(!self.batch.is_empty())
    }

    /// How the next entry's path orders against `path`; `None` at the end.
    fn peek_order(&mut self, path: &str) -> Result<Option<std::cmp::Ordering>> {
        Ok(if self.fill()? {
            self.batch
                .front()
                .map(|(next, _)| walk::path_order(next, path))
        } else {
            None
        })
    }

    fn next(&mut self) -> Result<Option<(String, StatEntry)>> {
        self.fill()?;
        Ok(self.batch.pop_front())
    }
}

/// Hashes the files `(_, entry)` of `files` (paths relative to `dir`) on `jobs` threads,
/// reporting bytes and files; their ids, in order, each with the stat cache entry the walk's
/// stat (`entry.stat`, taken no earlier than `checked_ns`) makes: `None` when that stat is racy
/// ([`workspace::entry`]) or the file read no longer had it once read
/// ([`workspace::hash_open_file`]), so that an entry vouches only for a file read.
pub(crate) fn hash_files<T: Sync>(
    dir: &Path,
    files: &[(T, &ScanEntry)],
    checked_ns: i64,
    jobs: usize,
    progress: &dyn Progress,
) -> Result<Vec<(ObjectId, Option<StatEntry>)>> {
    progress.count_files(files.len() as u64);
    progress.start(
        "hashing",
        files.iter().map(|(_, e)| e.stat.size).sum(),
        Unit::Bytes,
    );
    // Opened beneath `dir` (crate::beneath): a directory swapped for a symlink since the walk
    // is an error, never a read outside it.
    let root = crate::beneath::BeneathDir::open(dir)?;
    let hashed = crate::parallel::map(files, jobs, |(_, entry)| {
        let file = root.open_file(&entry.path, false)?;
        let (id, read) = workspace::hash_open_file(&file, &dir.join(&entry.path))?;
        progress.advance(entry.stat.size);
        progress.file_done();
        let cached = (read == entry.stat)
            .then(|| workspace::entry(&entry.stat, checked_ns))
            .flatten();
        Ok((id, cached))
    })?;
    progress.finish();
    Ok(hashed)
}

/// A scan entry as a listing entry (`None` for an unsupported one); a file without `id`
/// gets a zero id.
fn flat_entry(entry: &ScanEntry, id: Option<ObjectId>) -> Option<FlatEntry> {
    let (kind, size) = match &entry.kind {
        ScanKind::Unsupported { .. } => return None,
        ScanKind::Dir => (FlatKind::Dir, 0),
        ScanKind::File { executable } => (
            FlatKind::File {
                executable: *executable,
            },
            entry.stat.size,
        ),
        ScanKind::Symlink { target } => (
            FlatKind::Symlink {
                target: target.clone(),
            },
            target.len() as u64,
        ),
    };
    Some(FlatEntry {
        path: entry.path.clone(),
        kind,
        size,
        id: id.unwrap_or(ObjectId([0; 32])),
    })
}

/// What [`compare_with_disk`] found.
pub(crate) struct Compared {
    /// The changes from the expected listing to the disk, sorted by path.
    pub changes: Vec<Change>,
    /// Files that had to be hashed: path, fresh stat cache entry (`None` when the walk's
    /// stat was racy, or the file read no longer had it), and whether the content is that of
    /// the expected listing's file at that path (so the store holds it).
    pub hashed: Vec<(String, Option<StatEntry>, bool)>,
    /// Entries dsv cannot version (sockets, devices, escaping symlinks, reserved names).
    pub unsupported: Vec<ScanEntry>,
}

/// Reads `dir` as status and audit do (obeying `.dsvignore`, hashing every file the stat
/// cache of workspace `cache_of` cannot vouch for) and compares it with `expected`, a
/// version's paths in path order ([`tree::walk_version`]), one batch at a time: memory goes
/// with what changed and with the widest directory, not with the number of files.
/// `cache_of` must be `None` unless `expected` is that workspace's version: the cache
/// vouches for that version's content.
///
/// # Errors
/// As [`walk::Walker`]; errors of `expected`; read errors hashing a file.
pub(crate) fn compare_with_disk(
    dir: &Path,
    catalog: &Path,
    cache_of: Option<i64>,
    expected: impl Iterator<Item = Result<FlatEntry>>,
    jobs: usize,
    progress: &dyn Progress,
) -> Result<Compared> {
    let started_ns = workspace::now_ns();
    progress.phase("scanning");
    let mut expected = expected.peekable();
    // The next expected entry if it sorts before `path` (any, for `None`), or is at `path`
    // when `same`.
    let mut take_expected = |path: Option<&str>, same: bool| -> Result<Option<FlatEntry>> {
        match expected.peek() {
            Some(Ok(next)) => {
                let order = path.map_or(std::cmp::Ordering::Less, |p| {
                    walk::path_order(&next.path, p)
                });
                if order
                    != if same {
                        std::cmp::Ordering::Equal
                    } else {
                        std::cmp::Ordering::Less
                    }
                {
                    return Ok(None);
                }
            }
            Some(Err(_)) => return Err(expected.next().expect("peeked").expect_err("an error")),
            None => return Ok(None),
        }
        expected.next().transpose()
    };
    let mut diff = tree::StreamingDiff::new();
    // Files to hash: the entry, and the expected id at its path.
    let mut pending: Vec<(ScanEntry, Option<ObjectId>)> = Vec::new();
    let mut unsupported = Vec::new();
    let mut stream = DiskStream::start(dir, catalog, cache_of, &[], true)?;
    while let Some(batch) = stream.next_batch()? {
        for item in batch {
            while let Some(before) = take_expected(Some(&item.entry.path), false)? {
                diff.pair(Some(before), None, None);
            }
            let old = take_expected(Some(&item.entry.path), true)?;
            let id = item.id(old.as_ref());
            let Some(new) = flat_entry(&item.entry, id) else {
                // What the version had here is gone from the versionable entries.
                if old.is_some() {
                    diff.pair(old, None, None);
                }
                unsupported.push(item.entry);
                continue;
            };
            let waiting = matches!(item.entry.kind, ScanKind::File { .. }) && id.is_none();
            let number = waiting.then_some(pending.len());
            if waiting {
                // Only a file's id is content the store holds as a file.
                let expected_file = old
                    .as_ref()
                    .filter(|o| matches!(o.kind, FlatKind::File { .. }))
                    .map(|o| o.id);
                pending.push((item.entry, expected_file));
            }
            diff.pair(old, Some(new), number);
        }
    }
    while let Some(rest) = take_expected(None, false)? {
        diff.pair(Some(rest), None, None);
    }
    drop(stream);
    let files: Vec<(Option<ObjectId>, &ScanEntry)> =
        pending.iter().map(|(entry, old)| (*old, entry)).collect();
    let ids = hash_files(dir, &files, started_ns, jobs, progress)?;
    let changes = diff.finish(|number| ids[number].0);
    let hashed = pending
        .into_iter()
        .zip(ids)
        .map(|((entry, old), (id, cached))| (entry.path, cached, old == Some(id)))
        .collect();
    Ok(Compared {
        changes,
        hashed,
        unsupported,
    })
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
    pub interrupted_rebase: Option<super::rebase::Following>,
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
        if let Some((ahead, behind)) = super::rebase::ahead_behind(catalog, version, &head)? {
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
    let interrupted_rebase = super::rebase::interrupted_following(store, &key)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::NoProgress;

    /// A file replaced between the walk's lstat and its hashing (here: when the version's
    /// walk ends, which is after the directory's walk and before hashing) gets no stat cache
    /// entry, although its new content is the version's: the walk's stat is the old file's,
    /// and an entry for it would vouch for that file once it is back (a directory renamed
    /// away and back keeps its files' ctimes).
    #[test]
    fn a_file_replaced_while_status_runs_gets_no_stat_cache_entry() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, b"YYYY").unwrap();
        let old =
            std::time::SystemTime::UNIX_EPOCH + std::time::Duration::new(1_000_000, 123_456_789);
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(old)
            .unwrap();
        // Past the racy margin of its ctime (set now): its walk's stat may be cached.
        std::thread::sleep(std::time::Duration::from_millis(150));
        let expected = FlatEntry {
            path: "f".into(),
            kind: FlatKind::File { executable: false },
            size: 4,
            id: ObjectId::of(b"XXXX"),
        };
        let compare = |swap: bool| {
            let swapped = std::iter::from_fn(|| {
                if swap {
                    std::fs::rename(&file, dir.path().join("f.old")).unwrap();
                    std::fs::write(&file, b"XXXX").unwrap();
                }
                None
            });
            compare_with_disk(
                dir.path(),
                Path::new("unused"),
                None,
                std::iter::once(Ok(expected.clone())).chain(swapped),
                1,
                &NoProgress,
            )
            .unwrap()
        };
        // Unswapped: the file is modified (hashed, not the version's content), and a stat
        // cache entry could be made for it (only status decides not to store it).
        let plain = compare(false);
        assert_eq!(plain.changes.len(), 1);
        assert!(plain.hashed[0].1.is_some() && !plain.hashed[0].2);
        // Swapped while status ran: the content read is the version's, but no entry.
        let swapped = compare(true);
        assert_eq!(swapped.changes, []);
        assert_eq!(swapped.hashed.len(), 1);
        assert!(swapped.hashed[0].2, "the content read is the version's");
        assert_eq!(swapped.hashed[0].1, None, "no entry for a stat not read");
    }
}
