//! The disk side of a comparison: a directory's entries in path order beside what its
//! workspace's stat cache says of each ([`DiskStream`]), the hashing of the files the cache
//! cannot vouch for ([`hash_files`]), and the comparison of a directory with a version's
//! listing that status, audit and commit build on ([`compare_with_disk`]). A mechanism shared
//! by the operations that read a workspace (status, commit, checkout's plan, audit): it names
//! none of them.

use std::path::{Path, PathBuf};

use crate::catalog::StatEntry;
use crate::error::Result;
use crate::id::ObjectId;
use crate::progress::{Progress, Unit};
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
