//! Walking a directory: a sorted, deterministic listing of everything dsv versions in it.
//!
//! Policy (also in `docs/format.md`): regular files (with their executable bit), directories
//! (empty ones too) and symlinks (stored as links, never followed) are versioned. Listed as
//! [`ScanKind::Unsupported`] (commit refuses them with a clear error; status and checkout
//! leave them alone as untracked): symlinks that are absolute or point outside the directory,
//! sockets, FIFOs and devices, and names dsv reserves (`.dsv` that is not a directory, any
//! other name starting with `.dsv-tmp-`). Refused outright: names that are not UTF-8 (object
//! stores key by UTF-8 and JSON output needs it). Skipped, and reported in [`Scan`]: any
//! directory named `.dsv` (a store) and dsv's own temporary files (`.dsv-tmp-<pid>-<n>`).
//! Left out, as if absent: what a `.dsvignore` file excludes ([`IGNORE_FILE`], gitignore
//! syntax) and, for one commit, `--exclude` patterns (`scan_excluding`). Nothing else is
//! skipped (a workspace's store link, a `.dsv` file naming its store, is a store's entry, not
//! data): hidden files, `.gitignore`d files and empty directories are versioned.
//!
//! # The walk, step by step
//!
//! `walk.rs`, `Walker` (and `scan`, which collects one). Commit, status, audit and checkout all
//! list a directory this way. A `Walker` gives the entries a batch at a time (2,048), in path
//! order; when it ends, `finish` gives `leftovers` (dsv's temporary files) and `stores` (the
//! relative paths of nested `.dsv` directories). It holds a few batches and the directory
//! levels being listed, never the whole listing: a walk of a million files costs what its
//! widest directory costs.
//!
//! 1. **List names.** One thread (`dsv-walk`) runs the `ignore` crate's sequential walker with
//!    its standard filters off (no `.gitignore`, hidden-file or other ignore rules), symlinks
//!    not followed, and siblings sorted by name bytes (`sort_by_file_path` comparing whole
//!    paths as bytes: siblings share their parent's prefix, and `sort_by_file_name` parsed both
//!    paths' components on every comparison, a fifth of status's own time at 1M files). A directory's
//!    entries come right after it, so the order is depth-first with sorted siblings: the order
//!    trees are encoded in (`walk::path_order`: component-wise bytes, `/` before every other
//!    byte). It looks only at the name and the type that `readdir` gives (a filter,
//!    `filter_entry`, keeps it from descending):
//!    - a directory named `.dsv` is recorded in `stores` and not descended into, and so is a
//!      regular file named `.dsv` that is a workspace's link to its store
//!      (`names::read_store_link`);
//!    - a file or directory named `.dsv-tmp-<pid>-<n>` (digits only) is recorded in
//!      `leftovers` (checkout's temporary files and staged subtrees), and neither listed nor
//!      descended into;
//!    - any other name that is `.dsv` (so not a directory) or starts with `.dsv-tmp-` is listed
//!      and marked reserved (a directory with such a name is listed but not descended into);
//!    - a path that is not UTF-8 is an error (`Error::Unsupported`, "the name is not valid
//!      UTF-8") for every command;
//!    - when `.dsvignore` files are obeyed, a directory whose `.dsvignore` is not a regular
//!      file (lstat: a FIFO, a symlink, a directory, a device), or holds a line that is not
//!      UTF-8 or a rule that does not parse, is an error (`Error::InvalidIgnoreFile`, naming
//!      the line, from `ignore_file::check_type`) and is not descended into. The `ignore` crate opens a directory's ignore file itself as it enters
//!      the directory, following a symlink and waiting forever on a FIFO; the filter runs
//!      before it enters, and `Walker::start` checks the root's the same way, so the crate is
//!      only ever given a regular file. (A file swapped for a FIFO between that lstat and the
//!      crate's open is not caught: that needs the rules read by dsv itself.) The check reads
//!      the file whole (`ignore_file::check`, `O_NOFOLLOW | O_NONBLOCK`) whether or not the walk
//!      lists it: a file that leaves itself out is obeyed all the same.
//!
//!    Names go to the caller in batches over a channel of four batches, so listing runs ahead
//!    of the stat calls by at most that much. The first error (a non-UTF-8 name, an unreadable
//!    directory) ends the walk; it is the first in path order.
//! 2. **lstat.** `Walker::next_batch` lstats a batch on one thread per CPU (`parallel::map`) and
//!    classifies each entry. Each parent directory holding at least 8 names of the batch is
//!    opened once (`O_PATH`, `O_NOFOLLOW`, `Parents`; at most 32 per batch, closed with it) and
//!    its entries are lstatted through it (`fstatat`, `readlinkat`), so the kernel resolves one
//!    name per entry instead of its whole path (measured with a C loop over 1M files four
//!    levels deep: 1.45 s against 1.93 s). The other entries (parents with few names or past the
//!    cap, a parent that cannot be opened, a path as long as PATH_MAX) are lstatted by their
//!    whole path, which reports an error as before. It classifies each entry (`ScanKind`): file with its executable bit, directory, symlink
//!    with its target, or `Unsupported` with a reason. `Unsupported` covers reserved names,
//!    sockets, FIFOs and devices, and symlinks whose target is not UTF-8 or fails the lexical
//!    check (`check_symlink_target`). Results keep the order.
//!
//! **Beside the stat cache** (`ops/disk.rs`, `DiskStream`). The stat cache is keyed in path
//! order (schema 10: the key is the relative path with `/` stored as a 0 byte, so SQLite's
//! byte order of keys is `path_order`). A thread of its own (`dsv-stat-cache`) reads a
//! workspace's cache through one cursor (`Catalog::stat_cache_in_order`) and hands it over
//! 4,096 rows at a time; `DiskStream` advances it in step with the walk, a merge of two sorted
//! streams. Each entry comes with whether the cache vouches for it (`DiskItem::vouched`: the
//! entry equals the file's lstat) and whether the cache had an entry for it; the caller takes a vouched
//! file's id from the entry the workspace's version has at that path, which it walks in step
//! (`DiskItem::id`; a symlink's id is the hash of its target);
//! cache rows that match no entry are collected as `uncached_rows` (deleted or left-out
//! files). Nothing of either stream is held past its batch.
//!
//! `Unsupported` entries are not errors of the walk. Commit refuses the first of them in path
//! order (so the same one is reported every run); status and
//! checkout treat them as untracked entries and leave them alone (see each command). The full
//! policy is in `docs/format.md#walk-policy`.

use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, IoResultExt, Result};
pub use crate::ignore_file::IGNORE_FILE;
pub use crate::names::{
    STORE_DIR, TEMP_PREFIX, check_reserved_name, check_symlink_target, is_reserved_name,
    is_temp_name, path_order, process_alive, temp_owner,
};
pub use crate::stat::Stat;

/// Refuses a workspace directory (checked out into, committed, audited, cloned into) that is
/// a `.dsv` store directory or lies inside one: gc and repair own everything there. `dir`
/// need not exist: its nearest existing ancestor is resolved (symlinks followed) and the
/// rest applied to it.
///
/// # Errors
/// [`Error::Unsupported`] naming the directory; [`Error::Io`] when the working directory
/// cannot be read.
pub fn check_workspace_dir(dir: &Path) -> Result<()> {
    let absolute = std::path::absolute(dir).at(dir)?;
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    let mut resolved = loop {
        if let Ok(found) = std::fs::canonicalize(existing) {
            break found;
        }
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_os_string());
                existing = parent;
            }
            _ => break existing.to_path_buf(),
        }
    };
    for name in rest.iter().rev() {
        match name.to_str() {
            Some("..") => {
                resolved.pop();
            }
            Some(".") => {}
            _ => resolved.push(name),
        }
    }
    if resolved
        .components()
        .any(|c| matches!(c, Component::Normal(name) if name == STORE_DIR))
    {
        return Err(Error::Unsupported {
            path: dir.to_path_buf(),
            reason: format!(
                "it is inside a store's {STORE_DIR} directory ({}), which only dsv writes",
                resolved.display()
            ),
        });
    }
    Ok(())
}

/// What a directory entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanKind {
    /// A regular file.
    File {
        /// The owner's execute bit.
        executable: bool,
    },
    /// A directory.
    Dir,
    /// A symbolic link with its (relative, in-tree) target.
    Symlink {
        /// The link target as stored in the link.
        target: String,
    },
    /// Something dsv cannot version (see the module docs).
    Unsupported {
        /// Why, for the error commit reports.
        reason: String,
    },
}

/// One entry found by [`scan`].
#[derive(Debug, Clone)]
pub struct ScanEntry {
    /// Path relative to the scanned root, `/`-separated.
    pub path: String,
    /// What it is.
    pub kind: ScanKind,
    /// Its lstat fields.
    pub stat: Stat,
}

/// What [`scan`] found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Every entry, depth-first, siblings sorted by name bytes (the order trees are encoded in).
    pub entries: Vec<ScanEntry>,
    /// dsv's temporary files and directories (`.dsv-tmp-<pid>-<n>`), left by an interrupted
    /// checkout or being written by a running one (not walked into).
    pub leftovers: Vec<PathBuf>,
    /// Relative paths of `.dsv` store directories, which are never walked into.
    pub stores: Vec<String>,
}

impl Scan {
    /// Fails on the first entry dsv cannot version (what commit does).
    ///
    /// # Errors
    /// [`Error::Unsupported`] naming the entry and the reason.
    pub fn refuse_unsupported(&self, root: &Path) -> Result<()> {
        match self
            .entries
            .iter()
            .find(|e| matches!(e.kind, ScanKind::Unsupported { .. }))
        {
            Some(ScanEntry {
                path,
                kind: ScanKind::Unsupported { reason },
                ..
            }) => Err(Error::Unsupported {
                path: root.join(path),
                reason: reason.clone(),
            }),
            _ => Ok(()),
        }
    }
}

/// Lists everything under `root` (not `root` itself) but what `.dsvignore` files exclude.
///
/// # Errors
/// [`Error::NotADirectory`] when `root` is not a directory; [`Error::Unsupported`] for a name
/// that is not UTF-8, or a path longer than the system opens (nested too deep);
/// [`Error::Io`] when a directory cannot be read.
pub fn scan(root: &Path) -> Result<Scan> {
    scan_excluding(root, &[])
}

/// As [`scan`], also leaving out paths matching any of `exclude` (gitignore-style globs
/// relative to `root`: `*.tmp`, `cache/`, `/top-level-only`; a directory excluded is not
/// walked into).
///
/// # Errors
/// As [`scan`]; [`Error::InvalidPattern`] for a pattern that does not parse.
pub(crate) fn scan_excluding(root: &Path, exclude: &[String]) -> Result<Scan> {
    scan_with(root, exclude, true).map_err(|e| too_long(root, e))
}

/// Turns the system's refusal of a path as too long (`ENAMETOOLONG`: over PATH_MAX, 4096
/// bytes on Linux), met listing or statting an entry, into [`Error::Unsupported`]: such an
/// entry is nested deeper than any path reaches (about 2,000 levels of one-byte names, long
/// before [`MAX_TREE_DEPTH`]), and dsv cannot read it. Other errors pass unchanged.
///
/// [`MAX_TREE_DEPTH`]: crate::tree::MAX_TREE_DEPTH
fn too_long(root: &Path, error: Error) -> Error {
    match error {
        Error::Io { path, source } if source.kind() == std::io::ErrorKind::InvalidFilename => {
            let depth = path
                .strip_prefix(root)
                .map_or(0, |relative| relative.components().count());
            Error::Unsupported {
                reason: format!(
                    "it is {depth} levels deep in a path of {} bytes, longer than the \
                     operating system can open (PATH_MAX, 4096 bytes); dsv versions at most {} \
                     levels, in paths the system can open",
                    path.as_os_str().len(),
                    crate::tree::MAX_TREE_DEPTH
                ),
                path,
            }
        }
        other => other,
    }
}

fn scan_with(root: &Path, exclude: &[String], ignore_files: bool) -> Result<Scan> {
    let mut walker = Walker::start(root, exclude, ignore_files)?;
    let mut entries = Vec::new();
    while let Some(batch) = walker.next_batch()? {
        entries.extend(batch);
    }
    let (leftovers, stores) = walker.finish();
    Ok(Scan {
        entries,
        leftovers,
        stores,
    })
}

/// Entries a [`Walker`] stats at once (on every core): large enough to keep the cores busy,
/// small enough that a walk of millions of files holds a few of them.
const WALK_BATCH: usize = 2048;

/// What the walking thread sends a [`Walker`].
enum Walked {
    /// Entries to list, in path order: relative path, and whether the name is reserved.
    Names(Vec<(String, bool)>),
    /// A temporary name of dsv's (not walked into).
    Leftover(PathBuf),
    /// A nested `.dsv` store (not walked into).
    Store(String),
    /// The walk failed; nothing follows.
    Failed(Error),
}

/// A walk of a directory that yields its entries in [`path_order`], a batch at a time, as
/// [`scan`] lists them, holding only what one directory level and a few batches need: the
/// memory of a walk of a million files is that of its widest directory, not of the million.
///
/// One thread lists names (readdir, siblings sorted by name bytes, `.dsvignore` and
/// `--exclude` obeyed) up to a few batches ahead; [`Walker::next_batch`] lstats a batch on
/// every core. Dropping the walker stops the listing thread at its next batch.
pub struct Walker {
    root: PathBuf,
    receiver: std::sync::mpsc::Receiver<Walked>,
    jobs: usize,
    leftovers: Vec<PathBuf>,
    stores: Vec<String>,
    done: bool,
}

impl Walker {
    /// Starts walking `root`, leaving out what `exclude` matches (as `scan_excluding`) and,
    /// when `ignore_files`, what `.dsvignore` files exclude.
    ///
    /// # Errors
    /// [`Error::NotADirectory`]; [`Error::InvalidPattern`] for a pattern that does not parse.
    pub fn start(root: &Path, exclude: &[String], ignore_files: bool) -> Result<Walker> {
        if !root.is_dir() {
            return Err(Error::NotADirectory {
                path: root.to_path_buf(),
            });
        }
        let mut overrides = ignore::overrides::OverrideBuilder::new(root);
        for pattern in exclude {
            overrides
                .add(&format!("!{pattern}"))
                .map_err(|e| Error::InvalidPattern {
                    pattern: pattern.clone(),
                    reason: e.to_string(),
                })?;
        }
        let overrides = overrides.build().map_err(|e| Error::InvalidPattern {
            pattern: exclude.join(" "),
            reason: e.to_string(),
        })?;
        let mut builder = ignore::WalkBuilder::new(root);
        builder.standard_filters(false);
        if ignore_files {
            // The `ignore` crate opens a directory's `.dsvignore` as it enters it, following
            // a symlink and waiting forever on a FIFO. Each one is lstatted first (the root's
            // here, every other directory's in the filter below, which runs before the crate
            // enters the directory): one that is not a regular file is refused, its
            // directory never entered.
            crate::ignore_file::check_type(root)?;
            builder.add_custom_ignore_filename(IGNORE_FILE);
        }
        // Siblings sorted by name bytes, each directory's entries right after it: path order.
        // Siblings' paths share their parent's prefix, so comparing whole paths as bytes
        // orders them by name; `sort_by_file_name` parses both paths' components on every
        // comparison (a fifth of status's own time at a million files).
        builder
            .overrides(overrides)
            .follow_links(false)
            .sort_by_file_path(|a, b| {
                a.as_os_str()
                    .as_encoded_bytes()
                    .cmp(b.as_os_str().as_encoded_bytes())
            });
        // Stores, temporary names and reserved directories are not walked into. The filter
        // says so and notes them; the walking thread passes the notes on in order.
        let notes: std::sync::Arc<Mutex<Vec<(PathBuf, Note)>>> = Default::default();
        let noted = notes.clone();
        builder.filter_entry(move |entry| {
            if entry.depth() == 0 {
                return true;
            }
            let name = last_name(entry.path());
            let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
            let is_file = entry.file_type().is_some_and(|t| t.is_file());
            // A store, or a workspace's link to its store (`crate::names::read_store_link`).
            let note = if name == STORE_DIR.as_bytes()
                && (is_dir || is_file && crate::names::read_store_link(entry.path()).is_some())
            {
                Note::Store
            } else if is_temp_name(name) {
                Note::Leftover
            } else if is_dir && is_reserved_name(name) {
                Note::ReservedDir
            } else if is_dir
                && ignore_files
                && let Err(error) = crate::ignore_file::check_type(entry.path())
            {
                Note::Refused(error)
            } else {
                return true;
            };
            lock(&noted).push((entry.path().to_path_buf(), note));
            false
        });
        let walk = builder.build();
        let (sender, receiver) = std::sync::mpsc::sync_channel(4);
        let owned_root = root.to_path_buf();
        std::thread::Builder::new()
            .name("dsv-walk".into())
            .spawn(move || list_names(&owned_root, walk, &notes, &sender))
            .map_err(|source| Error::Io {
                path: root.to_path_buf(),
                source,
            })?;
        Ok(Walker {
            root: root.to_path_buf(),
            receiver,
            jobs: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(2),
            leftovers: Vec::new(),
            stores: Vec::new(),
            done: false,
        })
    }

    /// The next entries in path order, lstatted and classified; `None` once the walk is over.
    ///
    /// # Errors
    /// As [`scan`]: [`Error::Unsupported`] for a name that is not UTF-8, a path longer than
    /// the system opens or nesting past [`crate::tree::MAX_TREE_DEPTH`]; [`Error::Io`] when a
    /// directory or entry cannot be read. The walk is over after an error.
    pub fn next_batch(&mut self) -> Result<Option<Vec<ScanEntry>>> {
        while !self.done {
            let Ok(message) = self.receiver.recv() else {
                self.done = true;
                break;
            };
            match message {
                Walked::Names(names) => {
                    let root = &self.root;
                    let parents = Parents::open(root, &names);
                    let jobs: Vec<(&(String, bool), Option<&OwnedFd>)> = names
                        .iter()
                        .zip(&parents.of_name)
                        .map(|(name, parent)| (name, parent.map(|i| &parents.fds[i])))
                        .collect();
                    let stats =
                        crate::parallel::map(&jobs, self.jobs, |((relative, reserved), parent)| {
                            match parent {
                                Some(parent) => stat_entry_at(parent, root, relative, *reserved),
                                None => stat_entry(&root.join(relative), relative, *reserved),
                            }
                        })
                        .map_err(|e| too_long(root, e));
                    drop(jobs);
                    drop(parents);
                    let stats = match stats {
                        Ok(stats) => stats,
                        Err(e) => {
                            self.done = true;
                            return Err(e);
                        }
                    };
                    // Each path moves into its entry: never two copies of the listing.
                    return Ok(Some(
                        stats
                            .into_iter()
                            .zip(names)
                            .map(|((kind, stat), (path, _))| ScanEntry { path, kind, stat })
                            .collect(),
                    ));
                }
                Walked::Leftover(path) => self.leftovers.push(path),
                Walked::Store(relative) => self.stores.push(relative),
                Walked::Failed(error) => {
                    self.done = true;
                    return Err(too_long(&self.root, error));
                }
            }
        }
        Ok(None)
    }

    /// dsv's temporary files and directories met (`.dsv-tmp-<pid>-<n>`, not walked into) and
    /// the relative paths of nested `.dsv` stores, each sorted: complete once
    /// [`Walker::next_batch`] has given `None`.
    pub fn finish(mut self) -> (Vec<PathBuf>, Vec<String>) {
        self.leftovers.sort();
        self.stores.sort();
        (self.leftovers, self.stores)
    }
}

/// What the walk's filter noted about an entry it does not walk into.
enum Note {
    Store,
    Leftover,
    ReservedDir,
    /// A directory whose `.dsvignore` is not a regular file: the walk fails with this.
    Refused(Error),
}

/// The walking thread: lists `walk` under `root`, sending names a batch at a time; stops when
/// the [`Walker`] is gone.
fn list_names(
    root: &Path,
    walk: ignore::Walk,
    notes: &Mutex<Vec<(PathBuf, Note)>>,
    sender: &std::sync::mpsc::SyncSender<Walked>,
) {
    // The walk yields `root`, then paths that are `root` + '/' + a relative path: sliced as
    // bytes (`Path::strip_prefix` parses every component).
    let root_bytes = root.as_os_str().as_encoded_bytes();
    let relative_of = |path: &Path| -> Result<String> {
        let bytes = path.as_os_str().as_encoded_bytes();
        bytes
            .strip_prefix(root_bytes)
            .map(|rest| rest.strip_prefix(b"/").unwrap_or(rest))
            .and_then(|rest| std::str::from_utf8(rest).ok())
            .map(str::to_string)
            .ok_or_else(|| Error::Unsupported {
                path: path.to_path_buf(),
                reason: "the name is not valid UTF-8".into(),
            })
    };
    let mut walk = walk;
    let mut batch = Vec::with_capacity(WALK_BATCH);
    let mut listing = || -> Result<()> {
        loop {
            let next = walk.next();
            // What the filter left out while finding `next` comes before it in path order.
            for (path, note) in std::mem::take(&mut *lock(notes)) {
                let message = match note {
                    Note::Store => Walked::Store(relative_of(&path)?),
                    Note::Leftover => Walked::Leftover(path),
                    Note::Refused(error) => return Err(error),
                    Note::ReservedDir => {
                        // Listed (commit refuses it, status leaves it alone), not walked into.
                        batch.push((relative_of(&path)?, true));
                        continue;
                    }
                };
                if sender.send(message).is_err() {
                    return Ok(());
                }
            }
            let Some(result) = next else {
                break;
            };
            let entry = result.map_err(|e| walk_error(root, e))?;
            if entry.depth() == 0 {
                continue;
            }
            if entry.depth() > crate::tree::MAX_TREE_DEPTH {
                return Err(Error::Unsupported {
                    path: entry.into_path(),
                    reason: format!(
                        "it is nested more than {} levels deep",
                        crate::tree::MAX_TREE_DEPTH
                    ),
                });
            }
            let relative = relative_of(entry.path())?;
            let reserved = is_reserved_name(name_of(&relative).as_bytes());
            batch.push((relative, reserved));
            if batch.len() >= WALK_BATCH
                && sender
                    .send(Walked::Names(std::mem::replace(
                        &mut batch,
                        Vec::with_capacity(WALK_BATCH),
                    )))
                    .is_err()
            {
                return Ok(());
            }
        }
        if !batch.is_empty() {
            let _ = sender.send(Walked::Names(std::mem::take(&mut batch)));
        }
        Ok(())
    };
    if let Err(error) = listing() {
        let _ = sender.send(Walked::Failed(error));
    }
}

/// The last name of `path` as bytes (all of it when it has no `/`), without parsing its
/// components as `Path::file_name` does.
fn last_name(path: &Path) -> &[u8] {
    let bytes = path.as_os_str().as_encoded_bytes();
    bytes.rsplit(|&b| b == b'/').next().unwrap_or(bytes)
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().expect("no panics while holding the lock")
}

/// Converts a walk error into [`Error::Io`] (or [`Error::Unsupported`] for a loop).
fn walk_error(root: &Path, error: ignore::Error) -> Error {
    let mut error = error;
    let mut path = root.to_path_buf();
    loop {
        match error {
            ignore::Error::WithPath { path: p, err } => {
                path = p;
                error = *err;
            }
            ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
                error = *err
            }
            ignore::Error::Io(source) => return Error::Io { path, source },
            ignore::Error::Loop { child, .. } => {
                return Error::Unsupported {
                    path: child,
                    reason: "filesystem loop".into(),
                };
            }
            other => {
                return Error::Io {
                    path,
                    source: std::io::Error::other(other.to_string()),
                };
            }
        }
    }
}

/// The longest path the system opens, in bytes, counting the terminating NUL (Linux).
const PATH_MAX: usize = 4096;

/// The parent directories of a batch of names, each opened once (`O_PATH`), so that the
/// entries are lstatted relative to their directory (`fstatat`): the kernel then resolves one
/// name per entry instead of every component of its path (a quarter less system time per
/// stat at a million files four levels deep, measured with a C loop on this machine).
///
/// Only a parent holding at least [`MIN_NAMES_PER_PARENT`] names of the batch is opened (for
/// fewer, an open costs about what it saves), and at most [`MAX_OPEN_PARENTS`] per batch, so
/// that a walk never holds more than that many descriptors beside the listing thread's: a
/// batch of 2,048 names in 1,024 one-file directories opens none.
struct Parents {
    /// The parents opened.
    fds: Vec<OwnedFd>,
    /// For each name of the batch, the index of its opened parent in `fds`; `None`: lstatted
    /// by its whole path (a parent with few names, past the cap, or not openable, which the
    /// whole-path lstat then reports as before; and a path as long as PATH_MAX, so that it
    /// fails here as before, not later where it is opened).
    of_name: Vec<Option<usize>>,
}

/// The most parent directories one batch opens ([`Parents`]).
const MAX_OPEN_PARENTS: usize = 32;
/// The fewest names of a batch a parent directory must hold to be opened ([`Parents`]).
const MIN_NAMES_PER_PARENT: usize = 8;

impl Parents {
    /// The parents of `names` (paths relative to `root`), opened as directories without
    /// following a symlink, by the rules of [`Parents`].
    fn open(root: &Path, names: &[(String, bool)]) -> Parents {
        let mut counts: std::collections::HashMap<&str, usize> = Default::default();
        for (relative, _) in names {
            *counts.entry(parent_of(relative)).or_default() += 1;
        }
        let root_length = root.as_os_str().len();
        let mut slots: std::collections::HashMap<&str, Option<usize>> = Default::default();
        let mut parents = Parents {
            fds: Vec::new(),
            of_name: Vec::with_capacity(names.len()),
        };
        for (relative, _) in names {
            let parent = parent_of(relative);
            let slot = *slots.entry(parent).or_insert_with(|| {
                if counts[parent] < MIN_NAMES_PER_PARENT || parents.fds.len() >= MAX_OPEN_PARENTS {
                    return None;
                }
                parents.fds.push(open_parent(root, parent)?);
                Some(parents.fds.len() - 1)
            });
            let openable = root_length + 1 + relative.len() < PATH_MAX;
            parents.of_name.push(slot.filter(|_| openable));
        }
        parents
    }
}

/// The parent of `relative` (a `/`-separated path), "" for a name at the root.
fn parent_of(relative: &str) -> &str {
    relative.rsplit_once('/').map_or("", |(parent, _)| parent)
}

/// The last name of `relative` (a `/`-separated path).
fn name_of(relative: &str) -> &str {
    relative.rsplit_once('/').map_or(relative, |(_, name)| name)
}

/// The directory `parent` (relative to `root`; "" for the root) opened with `O_PATH`,
/// `O_DIRECTORY` and `O_NOFOLLOW`; `None` when it cannot be (gone, not a directory, a
/// symlink, too long a path, no descriptor left).
fn open_parent(root: &Path, parent: &str) -> Option<OwnedFd> {
    let flags = nix::fcntl::OFlag::O_PATH
        | nix::fcntl::OFlag::O_DIRECTORY
        | nix::fcntl::OFlag::O_NOFOLLOW
        | nix::fcntl::OFlag::O_CLOEXEC;
    nix::fcntl::open(&root.join(parent), flags, nix::sys::stat::Mode::empty()).ok()
}

/// Stats and classifies one entry found by the walk, `relative` to `root`, through its
/// parent directory `parent` (`fstatat` and `readlinkat` of its last name).
fn stat_entry_at(
    parent: &OwnedFd,
    root: &Path,
    relative: &str,
    reserved: bool,
) -> Result<(ScanKind, Stat)> {
    let name = name_of(relative);
    let at = |errno: nix::errno::Errno| Error::Io {
        path: root.join(relative),
        source: std::io::Error::from(errno),
    };
    let stat = nix::sys::stat::fstatat(parent, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(at)?;
    let found = Stat::of_file_stat(&stat);
    let kind = classify(found.mode, relative, reserved, || {
        nix::fcntl::readlinkat(parent, name)
            .map(PathBuf::from)
            .map_err(at)
    })?;
    Ok((kind, found))
}

/// Stats and classifies one entry found by the walk (at `path`, `relative` to the root).
fn stat_entry(path: &Path, relative: &str, reserved: bool) -> Result<(ScanKind, Stat)> {
    let metadata = std::fs::symlink_metadata(path).at(path)?;
    let kind = classify(metadata.mode(), relative, reserved, || {
        std::fs::read_link(path).at(path)
    })?;
    Ok((kind, Stat::of(&metadata)))
}

/// What an entry of `st_mode` `mode` at `relative` is; `read_link` gives a symlink's target.
fn classify(
    mode: u32,
    relative: &str,
    reserved: bool,
    read_link: impl FnOnce() -> Result<PathBuf>,
) -> Result<ScanKind> {
    let unsupported = |reason: &str| ScanKind::Unsupported {
        reason: reason.to_string(),
    };
    let file_type = mode & nix::libc::S_IFMT;
    let kind = if reserved {
        unsupported(&format!(
            "dsv reserves the names {STORE_DIR} and {TEMP_PREFIX}*; rename it"
        ))
    } else if file_type == nix::libc::S_IFREG {
        ScanKind::File {
            executable: mode & 0o100 != 0,
        }
    } else if file_type == nix::libc::S_IFDIR {
        ScanKind::Dir
    } else if file_type == nix::libc::S_IFLNK {
        let target = read_link()?;
        match target.to_str() {
            None => unsupported("the symlink target is not valid UTF-8"),
            Some(target) => match check_symlink_target(relative, target) {
                Ok(()) => ScanKind::Symlink {
                    target: target.to_string(),
                },
                Err(reason) => unsupported(reason),
            },
        }
    } else {
        unsupported(
            "only regular files, directories and symlinks can be versioned (this is a socket, FIFO or device)",
        )
    };
    Ok(kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition: the paths' bytes compared with `/` mapped below every other byte.
    fn path_order_by_definition(a: &str, b: &str) -> std::cmp::Ordering {
        let key = |c: u8| if c == b'/' { 0 } else { c };
        a.bytes().map(key).cmp(b.bytes().map(key))
    }

    #[test]
    fn path_order_agrees_with_its_definition_around_word_boundaries() {
        let parts = [
            "",
            "a",
            "a/",
            "a.",
            "a/x",
            "a.txt",
            "\0",
            "/",
            "abcdefg",
            "abcdefgh",
            "abcdefghi",
        ];
        let mut paths = Vec::new();
        for x in parts {
            for y in parts {
                for z in ["", "/", "-", "\0", "/b", "zz"] {
                    paths.push(format!("{x}{y}{z}"));
                    paths.push(format!("copy3/mnist-10k-test-png/{x}{z}{y}"));
                }
            }
        }
        for a in &paths {
            for b in &paths {
                assert_eq!(
                    path_order(a, b),
                    path_order_by_definition(a, b),
                    "{a:?} vs {b:?}"
                );
            }
        }
        assert_eq!(path_order("a/x", "a.txt"), std::cmp::Ordering::Less);
        assert_eq!(path_order("a", "a/x"), std::cmp::Ordering::Less);
    }

    /// The walk lstats through each entry's parent directory (`fstatat`): every kind of
    /// entry, and a missing one, comes out as a whole-path lstat gives it.
    #[test]
    fn an_entry_stats_the_same_through_its_parent_as_by_its_whole_path() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("a"), b"data").unwrap();
        std::fs::set_permissions(root.join("a"), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/b"), b"more data").unwrap();
        std::os::unix::fs::symlink("b", root.join("sub/link")).unwrap();
        std::os::unix::fs::symlink("../../outside", root.join("sub/escaping")).unwrap();
        nix::unistd::mkfifo(&root.join("sub/pipe"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        for (relative, reserved) in [
            ("a", false),
            (".dsv", true),
            ("gone", false),
            ("sub", false),
            ("sub/b", false),
            ("sub/escaping", false),
            ("sub/link", false),
            ("sub/pipe", false),
        ] {
            let fd = open_parent(root, parent_of(relative)).unwrap();
            let through_parent = stat_entry_at(&fd, root, relative, reserved);
            let whole = stat_entry(&root.join(relative), relative, reserved);
            match (through_parent, whole) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{relative}"),
                (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{relative}"),
                (a, b) => panic!("{relative}: {a:?} against {b:?}"),
            }
        }
        let kind = |relative: &str| stat_entry(&root.join(relative), relative, false).unwrap().0;
        assert_eq!(kind("a"), ScanKind::File { executable: true });
        assert_eq!(kind("sub/link"), ScanKind::Symlink { target: "b".into() });
        assert!(matches!(kind("sub/pipe"), ScanKind::Unsupported { .. }));
        // Neither a file nor a symlink to a directory is opened as a parent.
        assert!(open_parent(root, "a").is_none());
        std::os::unix::fs::symlink("sub", root.join("to-sub")).unwrap();
        assert!(open_parent(root, "to-sub").is_none());
    }

    /// A batch opens each parent once, only parents with several of its names, and at most
    /// MAX_OPEN_PARENTS of them; every entry of a walk over such a tree (wide directories
    /// past the cap, one-file directories) stats as a whole-path lstat gives it.
    #[test]
    fn a_walk_opens_few_parents_and_stats_every_entry_as_a_whole_path_lstat() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let mut names = Vec::new();
        for d in 0..40 {
            names.push((format!("wide{d:02}"), false));
            std::fs::create_dir(root.join(format!("wide{d:02}"))).unwrap();
            for f in 0..10 {
                let relative = format!("wide{d:02}/f{f}");
                std::fs::write(root.join(&relative), relative.as_bytes()).unwrap();
                names.push((relative, false));
            }
        }
        for d in 0..100 {
            std::fs::create_dir(root.join(format!("x{d:03}"))).unwrap();
            std::fs::write(root.join(format!("x{d:03}/only")), b"1").unwrap();
        }
        // Alternating parents (the root, then each one-file directory): nothing but the root.
        let alternating: Vec<(String, bool)> = (0..100)
            .flat_map(|d| [format!("x{d:03}"), format!("x{d:03}/only")])
            .map(|name| (name, false))
            .collect();
        let parents = Parents::open(root, &alternating);
        assert_eq!(parents.fds.len(), 1, "the root only");
        assert!(
            parents
                .of_name
                .iter()
                .skip(1)
                .step_by(2)
                .all(Option::is_none)
        );
        // Wide directories: the root and 31 of them (the cap), each once.
        let parents = Parents::open(root, &names);
        assert_eq!(parents.fds.len(), MAX_OPEN_PARENTS);
        assert_eq!(parents.of_name[1], parents.of_name[10]);
        assert!(parents.of_name.last().unwrap().is_none(), "past the cap");
        let mut walker = Walker::start(root, &[], false).unwrap();
        let mut seen = 0;
        while let Some(batch) = walker.next_batch().unwrap() {
            for entry in batch {
                let (kind, stat) = stat_entry(&root.join(&entry.path), &entry.path, false).unwrap();
                assert_eq!((entry.kind, entry.stat), (kind, stat), "{}", entry.path);
                seen += 1;
            }
        }
        assert_eq!(seen, 40 * 11 + 100 * 2);
    }

    /// A file dated past what i64 nanoseconds hold (ext4 keeps times up to 2446) is walked:
    /// its times saturate instead of overflowing.
    #[test]
    fn a_file_dated_past_2262_is_walked_with_saturated_times() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("far");
        std::fs::write(&file, b"x").unwrap();
        let far =
            std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(15_032_385_535);
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(far)
            .unwrap();
        let (kind, stat) = stat_entry(&file, "far", false).unwrap();
        assert_eq!(kind, ScanKind::File { executable: false });
        assert_eq!(stat.mtime_ns, i64::MAX);
        let parent = open_parent(dir.path(), "").unwrap();
        assert_eq!(
            stat_entry_at(&parent, dir.path(), "far", false).unwrap().1,
            stat
        );
    }

    #[test]
    fn symlink_targets_must_stay_inside() {
        assert!(check_symlink_target("a", "b").is_ok());
        assert!(check_symlink_target("d/a", "../b").is_ok());
        assert!(check_symlink_target("d/a", "../../b").is_err());
        assert!(check_symlink_target("a", "../b").is_err());
        assert!(check_symlink_target("a", "x/../../b").is_err());
        assert!(check_symlink_target("a", "/etc/passwd").is_err());
        assert!(check_symlink_target("a", "").is_err());
    }
}
