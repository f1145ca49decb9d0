//! A store: the `.dsv/` directory holding the catalog, the packs and scratch space.
//!
//! Every file and directory of `.dsv/`, and the lock each lock file is, are listed in
//! `docs/architecture.md` ("Store directory", "Locks and leases"), which
//! `tests/it/architecture_docs.rs` holds to what the code creates.
//!
//! # Reading objects
//!
//! `Store` (`store.rs`) holds the `.dsv` path and one catalog connection. `ObjectReader`
//! (`store.rs`) reads trees, versions and files by id through a `PackReader` (a cache of 8
//! decompressed frames), and checks every object it reads against its hash. Catalog lookups
//! always name the kind they want, since objects are keyed by (id, kind)
//! (`docs/format.md#catalog-schema`): `Catalog::has_object(id, kind)`,
//! `Catalog::locate(id, kind)`, and `Catalog::locate_file(id)` for where a file's content
//! starts (its only chunk, or else its file map). `ObjectReader::file_chunks` turns a file id
//! and size into the file's chunks with their locations. A file map is not hashed (it is keyed
//! by the file id), so before any byte is served `file_chunks` checks each length the file map
//! lists against the length the catalog records for that chunk, and their sum against the
//! size the tree gives the file; a mismatch is `Error::Corrupt`. `cat`, checkout and `verify`
//! all go through it.
//!
//! # Processes sharing one store
//!
//! - **Catalog.** SQLite in WAL mode, `synchronous=FULL`, foreign keys on, a 60 s busy
//!   timeout (`catalog/mod.rs`). Readers do not block writers. Every write is one
//!   `BEGIN IMMEDIATE` transaction, which waits for other writers instead of failing part-way.
//! - **Deduplication across processes** happens at the catalog. Two commits running at once
//!   may both store the same new chunk in their own packs. The first transaction's location
//!   wins (`INSERT OR IGNORE` on the (id, kind) key). The second copy stays in its pack,
//!   unused.
//! - **Temporary files of other processes.** A commit removes `.dsv/tmp/` pack files, and a
//!   checkout removes `.dsv-tmp-<pid>-<n>` files, only when process `<pid>` no longer runs.
//!   Liveness is judged by `/proc/<pid>` on the machine (and in the PID namespace) running the
//!   command. A checkout never removes a directory that holds a running process's
//!   `.dsv-tmp-<pid>-<n>` file or a nested `.dsv` store, even with `--force`: it reports a
//!   conflict instead. Leftovers of dead processes do not block it.
//!
//! # Locks
//!
//! The store's locks. Each is a file lock (flock): released on drop, or by the kernel when
//! the process dies, so a killed process never leaves a store locked.
//!
//! | order | lock (type)                    | file                       | mode      | protects                                          | taken by |
//! |-------|--------------------------------|----------------------------|-----------|---------------------------------------------------|----------|
//! | 0     | open ([`Store`] holds it)      | `open.lock`                | shared    | the catalog file being there (not replaced)       | every open [`Store`], for its life |
//! |       | open                           | `open.lock`                | exclusive | no store open while the catalog is replaced (try only, never waits) | `repair` |
//! | 1     | data ([`SharedDataLock`])      | `data.lock`                | shared    | objects a running operation relies on (gc waits)  | commit, status, checkout, import, audit, verify, fetch, pull, push, rebase, leases, the read engine's fetches |
//! |       | data ([`ExclusiveDataLock`])   | `data.lock`                | exclusive | every pack and object row (nothing else reads or writes packs) | gc, repair; a cache limit's eviction (`try_take_at`, polled for at most 0.5 s, never waited on) |
//! | 2     | workspace ([`WorkspaceLock`])  | `locks/workspace-<h>.lock` | exclusive | one workspace directory and its stat cache rows   | commit, status, checkout (under data); `workspace forget` (alone) |
//! | 3     | downloads ([`DownloadLock`])   | `locks/downloads.lock`     | exclusive | one download from a remote at a time              | fetch, pull, checkout from a remote (under data) |
//! | 3     | fetch stripes                  | `locks/fetch-<n>.lock`     | exclusive | one remote frame fetched once (ascending stripes) | the read engine (under data) |
//! | 4     | head ([`HeadLock`])            | `lock`                     | exclusive | the heads, tags, pins and catalog rows that name packs | every catalog write that moves a name or records packs: commit's finish, gc's swap, fetch's record, rm, tag, ... |
//!
//! The read engine's store mutex (one per engine, in memory) comes before the data lock: its
//! paths that fetch a file map or refresh indexes hold the mutex and then wait for the data
//! lock shared, and its eviction holds the mutex while it polls for the data lock exclusive
//! (bounded, so a reader waiting on the mutex is delayed at most that long).
//!
//! The one order is the table's: a process never takes a lock while it holds one further
//! down the table, and never takes one it holds already. Data comes first because it is the lock held longest, by
//! the most operations (a checkout takes it before it reads the first tree, before the
//! directory even exists, so before the workspace lock can be named), and gc holds it
//! exclusive: were some operation to take the workspace lock and then the data lock while
//! another takes them the other way (as commit did, against status and checkout), a gc
//! waiting for the data lock between them would close a cycle on any lock implementation
//! that queues a shared request behind a waiting exclusive one. The head lock is last
//! because it is held briefly, to read and move names in one catalog transaction.
//!
//! The types encode the order: a [`WorkspaceLock`] and a [`DownloadLock`] are made only
//! from a `&SharedDataLock`, and a [`HeadLock`] from a held data lock of either mode
//! ([`Store::lock_head`], any [`DataGuard`]), and borrow it, so the data lock is held first
//! and released last. An operation that moves names only and holds no other lock takes the
//! head lock alone ([`Store::lock_head_alone`], as `workspace forget` takes its workspace
//! lock with [`Store::lock_workspace_alone`]); it is held in short scopes that take nothing
//! else. Repair, which takes everything exclusive, takes it in the same order (open, data,
//! head).

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::catalog::{Catalog, ObjectLocation};
use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;
use crate::object::{FileMap, ObjectKind, Tree, Version};
use crate::pack::PackReader;

pub use crate::names::STORE_DIR;

/// An open store.
pub struct Store {
    root: PathBuf,
    catalog: Catalog,
    /// A shared lock on `open.lock`, held while the store is open: `dsv repair`, which
    /// replaces the catalog file, runs only when no other process has the store open.
    _open: Option<OpenLock>,
}

impl Store {
    /// Creates a store in `dir/.dsv`, creating `dir` if missing: made whole beside it and
    /// renamed into place ([`Store::init_staged`], [`StagedStore::publish`]), so another
    /// process sees either no store or a whole one, and of two processes creating one store
    /// at once exactly one succeeds.
    ///
    /// # Errors
    /// [`Error::StoreExists`] when one is there already (or another process made it
    /// meanwhile); [`Error::NotADirectory`] when `dir` is a file; [`Error::Io`].
    pub fn init(dir: &Path) -> Result<Store> {
        Store::init_staged(dir)?.publish()
    }

    /// Creates a new, empty store beside `dir/.dsv`, in a directory of `dir` named as
    /// checkout's temporary files are (`.dsv-tmp-<pid>-<n>`: walks skip it, and a checkout
    /// into `dir` or a later init or clone there removes it once its process is gone), for
    /// the caller to fill (`dsv clone`
    /// fetches into it) and then [`StagedStore::publish`] into place. `dir` is created if
    /// missing.
    ///
    /// # Errors
    /// As [`Store::init`].
    pub fn init_staged(dir: &Path) -> Result<StagedStore> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        if dir.exists() && !dir.is_dir() {
            return Err(Error::NotADirectory {
                path: dir.to_path_buf(),
            });
        }
        fs::create_dir_all(dir).at(dir)?;
        let root = dir.join(STORE_DIR);
        if root.join("catalog.db").exists() {
            return Err(Error::StoreExists { path: root });
        }
        if let Some(linked) = crate::names::read_store_link(&root) {
            return Err(Error::Unsupported {
                path: root,
                reason: format!(
                    "it links this workspace to the store {}; delete it first to make a store here",
                    linked.display()
                ),
            });
        }
        // A store with packs or a ref log is never new: its catalog was lost.
        if let Some(reason) = lost_catalog_evidence(&root) {
            return Err(Error::CatalogLost { path: root, reason });
        }
        // Anything else in a `.dsv` without a catalog is not a store, and the staged one
        // cannot be renamed over it: say what is there rather than "a store exists".
        if let Some(names) = leftover_names(&root) {
            return Err(Error::Unsupported {
                path: root.clone(),
                reason: format!(
                    "it holds {names} but no catalog: not a store (the leftovers of an interrupted dsv?); remove it (`rm -r {}`) to make a store here",
                    root.display()
                ),
            });
        }
        remove_stale_staging(dir);
        let staging = dir.join(format!(
            "{}{}-{}",
            crate::names::TEMP_PREFIX,
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir(&staging).at(&staging)?;
        let made = (|| {
            for sub in ["packs", "tmp"] {
                fs::create_dir_all(staging.join(sub)).at(&staging.join(sub))?;
            }
            crate::store_file::open_lock(&staging.join("lock")).at(&staging.join("lock"))?;
            let open = OpenLock::take_shared(&staging)?;
            let catalog = Catalog::open(&staging.join("catalog.db"), true)?;
            Ok(Store {
                root: staging.clone(),
                catalog,
                _open: Some(open),
            })
        })();
        match made {
            Ok(store) => Ok(StagedStore {
                store: Some(store),
                dir: dir.to_path_buf(),
            }),
            Err(e) => {
                let _ = fs::remove_dir_all(&staging);
                Err(e)
            }
        }
    }

    /// Opens the store whose `.dsv` directory is `root`.
    ///
    /// # Errors
    /// [`Error::NoStore`] when `root` holds no catalog; catalog errors from [`Catalog::open`].
    pub fn open(root: &Path) -> Result<Store> {
        let catalog_path = root.join("catalog.db");
        if !catalog_path.is_file() {
            if let Some(reason) = lost_catalog_evidence(root) {
                return Err(Error::CatalogLost {
                    path: root.to_path_buf(),
                    reason,
                });
            }
            return Err(Error::NoStore {
                start: root.to_path_buf(),
            });
        }
        // Waits while a repair runs (it holds this lock exclusive).
        let open = OpenLock::take_shared(root)?;
        let catalog = Catalog::open(&catalog_path, false)?;
        Ok(Store {
            root: root.to_path_buf(),
            catalog,
            _open: Some(open),
        })
    }

    /// Finds the store for `start`: `start` itself when it is a `.dsv` directory or holds
    /// one, else the nearest parent that holds one (as git finds `.git`). A `.dsv` that is a
    /// workspace's store link ([`crate::names::read_store_link`], written by checkout and
    /// commit in a workspace outside its store's directory tree) stands for the store it
    /// names.
    ///
    /// # Errors
    /// [`Error::NoStore`] when there is none; [`Error::WorkspaceStoreMissing`] when the
    /// nearest is a store link naming no store; [`Error::CatalogLost`] when the nearest store
    /// has data but no catalog; errors of [`Store::open`].
    pub fn discover(start: &Path) -> Result<Store> {
        Store::open(&Store::find_root(start)?)
    }

    /// The `.dsv` directory [`Store::discover`] would open, without opening it: one that
    /// holds a catalog, or data whose catalog was lost (for `dsv repair`).
    ///
    /// # Errors
    /// [`Error::NoStore`].
    pub fn find_root(start: &Path) -> Result<PathBuf> {
        let start = fs::canonicalize(start).map_err(|_| Error::NoStore {
            start: start.to_path_buf(),
        })?;
        let is_store =
            |dir: &Path| dir.join("catalog.db").is_file() || lost_catalog_evidence(dir).is_some();
        if start.file_name().is_some_and(|n| n == STORE_DIR) && is_store(&start) {
            return Ok(start);
        }
        for dir in start.ancestors() {
            let candidate = dir.join(STORE_DIR);
            if is_store(&candidate) {
                return Ok(candidate);
            }
            if let Some(linked) = crate::names::read_store_link(&candidate) {
                if is_store(&linked) {
                    return Ok(linked);
                }
                return Err(Error::WorkspaceStoreMissing {
                    workspace: dir.to_path_buf(),
                    store: linked,
                });
            }
        }
        Err(Error::NoStore { start })
    }

    /// Refuses a new store in `dir` that another store would enclose: `dir` is inside the
    /// tree of a store (a parent directory holds a `.dsv`, so commands run in `dir` find that
    /// store now), or inside a workspace of that store or of `other` (the store `--store`
    /// names, whose workspaces may lie anywhere). A store in `dir` itself is left to
    /// [`Store::init`] ([`Error::StoreExists`]). A store that cannot be opened is judged by
    /// its tree alone.
    ///
    /// # Errors
    /// [`Error::NestedStore`]; [`Error::Io`] when `dir` cannot be made absolute.
    pub fn check_not_nested(dir: &Path, other: Option<&Path>) -> Result<()> {
        let absolute = std::path::absolute(dir).at(dir)?;
        // `dir` may not exist yet: its nearest existing ancestor stands for it.
        let Some(existing) = absolute
            .ancestors()
            .find_map(|a| fs::canonicalize(a).ok().filter(|c| c.is_dir()))
        else {
            return Ok(());
        };
        let target = match fs::canonicalize(&absolute) {
            Ok(canonical) => canonical,
            Err(_) => absolute.clone(),
        };
        let tree_store = Store::find_root(&existing)
            .ok()
            .filter(|root| root.parent() != Some(target.as_path()));
        let other = other.and_then(|o| Store::find_root(o).ok());
        for root in tree_store.iter().chain(other.iter()) {
            let workspace = Store::open(root).ok().and_then(|store| {
                store
                    .catalog()
                    .enclosing_workspace(&existing)
                    .ok()
                    .flatten()
            });
            if workspace.is_some() || Some(root) == tree_store.as_ref() {
                return Err(Error::NestedStore {
                    dir: target,
                    store: root.clone(),
                    workspace: workspace.map(|w| PathBuf::from(w.path)),
                });
            }
        }
        Ok(())
    }

    /// A store over a catalog opened by other means (`dsv repair`'s new catalog).
    pub fn from_parts(root: PathBuf, catalog: Catalog) -> Store {
        Store {
            root,
            catalog,
            _open: None,
        }
    }

    /// The store's settings (`.dsv/config.toml`), read now.
    ///
    /// # Errors
    /// As [`crate::config::Config::load`].
    pub fn config(&self) -> Result<crate::config::Config> {
        crate::config::Config::load(&self.root)
    }

    /// The `.dsv` directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The catalog.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The catalog, for writing.
    pub fn catalog_mut(&mut self) -> &mut Catalog {
        &mut self.catalog
    }

    /// Where packs live.
    pub fn packs_dir(&self) -> PathBuf {
        self.root.join("packs")
    }

    /// Scratch space on the store's filesystem.
    pub fn temp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// Removes temporary pack files whose writing process is gone (killed mid-commit), and
    /// the passthrough copies of a `dsv mount` that was killed (directories
    /// `mount-<pid>-<n>`); returns their names.
    ///
    /// # Errors
    /// [`Error::Io`] when `tmp/` cannot be read.
    pub fn remove_stale_temp_packs(&self) -> Result<Vec<String>> {
        let dir = self.temp_dir();
        let mut removed = Vec::new();
        let gone = |pid: u32| pid != std::process::id() && !crate::names::process_alive(pid);
        for entry in fs::read_dir(&dir).at(&dir)? {
            let entry = entry.at(&dir)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if crate::names::temp_owner(&name).is_some_and(gone) {
                fs::remove_file(entry.path()).at(&entry.path())?;
                removed.push(name);
            } else if mount_dir_owner(&name).is_some_and(gone)
                && entry.file_type().at(&entry.path())?.is_dir()
            {
                // Best effort: a killed mount's directory another user owns (a mount runs as
                // root for passthrough), or one a concurrent command removes first, must not
                // fail this command; what stays is removed by a later run that may.
                if fs::remove_dir_all(entry.path()).is_ok() {
                    removed.push(name);
                }
            }
        }
        Ok(removed)
    }

    /// Takes the head lock ([`HeadLock`], exclusive), waiting for it; held until the guard
    /// drops. The last lock in the order, taken under the data lock `_data` (shared or
    /// exclusive), which the caller holds for as long: the guard borrows it, so the data
    /// lock cannot be released first, nor taken while the head lock is held.
    ///
    /// ```compile_fail,E0597
    /// # fn f(store: &dsv_store::Store) -> dsv_store::Result<()> {
    /// let head = {
    ///     let data = store.lock_data_shared()?;
    ///     store.lock_head(&data)?
    /// };
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn lock_head<'d>(&self, _data: &'d impl DataGuard) -> Result<HeadLock<'d>> {
        HeadLock::take_at(&self.root)
    }

    /// Takes the head lock without a data guard at hand: for an operation that moves names
    /// only (tag, reset, rename, rm, pin, a remote's record), which reads no pack and need not
    /// wait for a running `gc`; and for the records made deep in a call whose caller holds
    /// the data lock but does not pass its guard down (push's missing outboards, the read
    /// engine's group commit, a pack sink's cleanup).
    /// Either way nothing else is taken while it is held; the order is then kept by that
    /// rule, not by the types.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn lock_head_alone(&self) -> Result<HeadLock<'static>> {
        HeadLock::take_at(&self.root)
    }

    /// Takes the data lock shared ([`SharedDataLock`]): held by every operation that reads
    /// or writes packs (commit, checkout, fetch, pull, push, verify) for its whole run, so
    /// that `gc`, which takes it exclusive ([`Store::lock_data_exclusive`]), never deletes an
    /// object that a running operation has found and is about to rely on (a commit that
    /// deduplicates against a chunk, a checkout reading it). Many holders share it at once.
    /// The first lock in the order: taken before any workspace, download or head lock.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn lock_data_shared(&self) -> Result<SharedDataLock> {
        SharedDataLock::take_at(&self.root)
    }

    /// Takes the data lock exclusive ([`ExclusiveDataLock`], `gc`): waits for every running
    /// commit, checkout and transfer, and keeps new ones waiting until released.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn lock_data_exclusive(&self) -> Result<ExclusiveDataLock> {
        ExclusiveDataLock::take_at(&self.root)
    }

    /// Takes the store's download lock ([`DownloadLock`], exclusive): held while objects are
    /// downloaded from a remote, so concurrent pulls of the same data download it once.
    /// Taken under the shared data lock `_data`, which the caller holds for as long.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn lock_downloads<'d>(&self, _data: &'d SharedDataLock) -> Result<DownloadLock<'d>> {
        let dir = self.root.join("locks");
        fs::create_dir_all(&dir).at(&dir)?;
        Ok(DownloadLock {
            _file: LockFile::take(&dir.join("downloads.lock"), false)?,
            _data: std::marker::PhantomData,
        })
    }

    /// Takes the exclusive lock of the workspace keyed `key` (its canonical path), so two
    /// processes never check out into one directory at once ([`WorkspaceLock`]). Taken under
    /// the shared data lock `_data`, which the caller holds for as long: this is what makes
    /// "data, then workspace" the only order a call site can write.
    ///
    /// ```
    /// # fn f(store: &dsv_store::Store) -> dsv_store::Result<()> {
    /// let data = store.lock_data_shared()?;
    /// let _workspace = store.lock_workspace(&data, "/work/dir")?;
    /// # Ok(()) }
    /// ```
    ///
    /// Without the data lock there is no workspace lock, and the data lock cannot be
    /// released first:
    ///
    /// ```compile_fail,E0597
    /// # fn f(store: &dsv_store::Store) -> dsv_store::Result<()> {
    /// let workspace = {
    ///     let data = store.lock_data_shared()?;
    ///     store.lock_workspace(&data, "/work/dir")?
    /// };
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn lock_workspace<'d>(
        &self,
        _data: &'d SharedDataLock,
        key: &str,
    ) -> Result<WorkspaceLock<'d>> {
        WorkspaceLock::take(&self.root, key)
    }

    /// Takes the exclusive lock of the workspace keyed `key` without the data lock, for an
    /// operation that takes no other lock while holding it and reads no pack (`workspace
    /// forget`, which only deletes the workspace's catalog rows): it need not wait for gc.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn lock_workspace_alone(&self, key: &str) -> Result<WorkspaceLock<'static>> {
        WorkspaceLock::take(&self.root, key)
    }

    /// A reader of this store's objects, for use on the calling thread. The first read of
    /// a file through an unproven file map (one fetched from a remote) proves it: see
    /// [`ObjectReader::file_chunks`].
    pub fn reader(&self) -> ObjectReader<'_> {
        ObjectReader {
            catalog: &self.catalog,
            packs: PackReader::new(&self.packs_dir(), 8),
            record_proofs: true,
        }
    }

    /// A reader that checks unproven file maps like [`Store::reader`] but records nothing
    /// (`verify`, which reports and never fixes).
    pub fn checking_reader(&self) -> ObjectReader<'_> {
        ObjectReader {
            record_proofs: false,
            ..self.reader()
        }
    }

    /// A reader of this store's packs through `catalog`, a second connection to its catalog
    /// ([`Catalog::open_reader`]): for reading trees while this store's own connection
    /// writes (its snapshot is the one that connection last committed). It records nothing,
    /// as [`Store::checking_reader`].
    pub fn reader_through<'c>(&self, catalog: &'c Catalog) -> ObjectReader<'c> {
        ObjectReader {
            catalog,
            packs: PackReader::new(&self.packs_dir(), 8),
            record_proofs: false,
        }
    }
}

/// Why `root` (a `.dsv` directory without a catalog) must have had one: it holds packs or
/// a non-empty ref log. `None` when it holds neither.
fn lost_catalog_evidence(root: &Path) -> Option<String> {
    let log = fs::metadata(root.join(crate::reflog::FILE_NAME)).map_or(0, |m| m.len());
    if log > 0 {
        return Some("it has a ref log (a record of heads and tags) but no catalog".into());
    }
    let packs = fs::read_dir(root.join("packs"))
        .ok()?
        .flatten()
        .any(|e| e.file_name().to_str().is_some_and(|n| n.ends_with(".pack")));
    packs.then(|| "it has packs but no catalog".into())
}

/// The names in `root` (a `.dsv` holding no catalog), a few of them quoted and joined,
/// when it is a directory holding anything; `None` when it is absent or empty.
fn leftover_names(root: &Path) -> Option<String> {
    let mut names: Vec<String> = fs::read_dir(root)
        .ok()?
        .flatten()
        .map(|e| format!("{:?}", e.file_name().to_string_lossy()))
        .collect();
    if names.is_empty() {
        return None;
    }
    names.sort();
    let more = names.len().saturating_sub(5);
    names.truncate(5);
    let mut text = names.join(", ");
    if more > 0 {
        text.push_str(&format!(" and {more} more"));
    }
    Some(text)
}

/// Removes the staging directories ([`Store::init_staged`]) in `dir` whose process is gone
/// (a clone or init killed before it published): directories named as temporary files
/// (`.dsv-tmp-<pid>-<n>`) holding a store's `lock` or `catalog.db`. Best effort: what cannot
/// be read or removed is left.
/// The process id in the name of a `dsv mount`'s directory of passthrough copies under
/// `tmp/`: `mount-<pid>-<n>`.
fn mount_dir_owner(name: &str) -> Option<u32> {
    let mut parts = name.strip_prefix("mount-")?.split('-');
    let pid = parts.next()?.parse().ok()?;
    let _n: u32 = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some(pid)
}

fn remove_stale_staging(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            continue;
        };
        if !crate::names::is_temp_name(name.as_bytes()) {
            continue;
        }
        let gone = crate::names::temp_owner(name)
            .is_some_and(|pid| pid != std::process::id() && !crate::names::process_alive(pid));
        let path = entry.path();
        let staged = entry.file_type().is_ok_and(|t| t.is_dir())
            && (path.join("lock").exists() || path.join("catalog.db").exists());
        if gone && staged {
            let _ = fs::remove_dir_all(&path);
        }
    }
}

/// Decodes the file map of file `id` of `size` bytes, refusing one that lists more chunks
/// than such a file can have (every chunk but the last is at least the minimum chunk size,
/// 16 KiB, so at most `ceil(size / 16 KiB)`). Every reader of file maps calls it.
///
/// # Errors
/// What is wrong, for the caller to name where the map came from.
pub fn decode_file_map(
    bytes: &[u8],
    id: &ObjectId,
    size: u64,
) -> std::result::Result<FileMap, String> {
    let map = FileMap::decode(bytes).map_err(|e| format!("file map {}: {e}", id.short()))?;
    let min = crate::chunk::ChunkParams::DEFAULT.min as u64;
    if map.chunks.len() as u64 > size.div_ceil(min) {
        return Err(format!(
            "file map {} lists {} chunks, more than a file of {size} bytes can have",
            id.short(),
            map.chunks.len()
        ));
    }
    Ok(map)
}

/// A new store made beside its place ([`Store::init_staged`]): filled through
/// [`StagedStore::store`], then renamed into place by [`StagedStore::publish`]. Dropped
/// unpublished, it is deleted.
pub struct StagedStore {
    /// The store, at its staging directory (taken by `publish`).
    store: Option<Store>,
    /// The directory whose `.dsv` it becomes.
    dir: PathBuf,
}

impl StagedStore {
    /// The store being made (its root is the staging directory).
    pub fn store(&mut self) -> &mut Store {
        self.store
            .as_mut()
            .expect("a staged store is held until published")
    }

    /// Renames the store into place, `dir/.dsv` (one `rename`: another process sees no store
    /// or this whole one), and opens it there. An empty `.dsv` directory there is replaced.
    ///
    /// # Errors
    /// [`Error::StoreExists`] when a store (or anything but an empty directory) is at
    /// `dir/.dsv` now: another process made it meanwhile; this one is deleted. [`Error::Io`];
    /// as [`Store::open`].
    pub fn publish(mut self) -> Result<Store> {
        let store = self.store.take().expect("published once");
        let staging = store.root.clone();
        // The catalog is closed (its WAL checkpointed) before its directory moves.
        drop(store);
        let root = self.dir.join(STORE_DIR);
        if let Err(e) = fs::rename(&staging, &root) {
            let _ = fs::remove_dir_all(&staging);
            let taken = matches!(
                e.raw_os_error(),
                Some(
                    libc_errno::ENOTEMPTY
                        | libc_errno::EEXIST
                        | libc_errno::ENOTDIR
                        | libc_errno::EISDIR
                )
            );
            return Err(if taken {
                Error::StoreExists { path: root }
            } else {
                Error::Io {
                    path: root,
                    source: e,
                }
            });
        }
        Store::open(&root)
    }
}

impl Drop for StagedStore {
    fn drop(&mut self) {
        if let Some(store) = self.store.take() {
            let staging = store.root.clone();
            drop(store);
            let _ = fs::remove_dir_all(&staging);
        }
    }
}

/// The error numbers [`StagedStore::publish`] reads as "a store is there".
mod libc_errno {
    pub(crate) const ENOTEMPTY: i32 = nix::errno::Errno::ENOTEMPTY as i32;
    pub(crate) const EEXIST: i32 = nix::errno::Errno::EEXIST as i32;
    pub const ENOTDIR: i32 = nix::errno::Errno::ENOTDIR as i32;
    pub const EISDIR: i32 = nix::errno::Errno::EISDIR as i32;
}

// The store's locks: see the lock table in this module's documentation.

/// A lock on a lock file (flock), shared or exclusive; released on drop.
struct LockFile {
    _file: File,
}

impl LockFile {
    /// Opens (creating, never truncating) the lock file at `path`: a regular file only,
    /// never a FIFO waited on or a symlink followed ([`crate::store_file::open_lock`]).
    fn open_file(path: &Path) -> Result<File> {
        crate::store_file::open_lock(path).at(path)
    }

    /// Opens (creating) `path` and takes its exclusive lock if no one holds it, else `None`.
    fn try_take_exclusive(path: &Path) -> Result<Option<LockFile>> {
        let file = Self::open_file(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(LockFile { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(e).at(path),
        }
    }

    /// Opens (creating) `path` and waits for its shared or exclusive lock.
    fn take(path: &Path, shared: bool) -> Result<LockFile> {
        let file = Self::open_file(path)?;
        if shared {
            file.lock_shared().at(path)?;
        } else {
            file.lock().at(path)?;
        }
        Ok(LockFile { _file: file })
    }
}

/// The open lock (`open.lock`, order 0): shared by every open [`Store`], exclusive by
/// `repair`.
pub struct OpenLock {
    _file: LockFile,
}

impl OpenLock {
    /// Waits for the shared open lock of the store `root` (while a repair runs).
    fn take_shared(root: &Path) -> Result<OpenLock> {
        Ok(OpenLock {
            _file: LockFile::take(&root.join("open.lock"), true)?,
        })
    }

    /// The exclusive open lock of the store `root` if no process has the store open, else
    /// `None` (never waits).
    pub fn try_take_exclusive(root: &Path) -> Result<Option<OpenLock>> {
        Ok(LockFile::try_take_exclusive(&root.join("open.lock"))?.map(|f| OpenLock { _file: f }))
    }
}

/// The data lock held shared (order 1): see [`Store::lock_data_shared`].
pub struct SharedDataLock {
    _file: LockFile,
}

impl SharedDataLock {
    /// Waits for the data lock of the store `root`, shared.
    pub fn take_at(root: &Path) -> Result<SharedDataLock> {
        Ok(SharedDataLock {
            _file: LockFile::take(&root.join("data.lock"), true)?,
        })
    }
}

/// The data lock held exclusive (order 1): see [`Store::lock_data_exclusive`].
pub struct ExclusiveDataLock {
    _file: LockFile,
}

impl ExclusiveDataLock {
    /// Waits for the data lock of the store `root`, exclusive.
    pub fn take_at(root: &Path) -> Result<ExclusiveDataLock> {
        Ok(ExclusiveDataLock {
            _file: LockFile::take(&root.join("data.lock"), false)?,
        })
    }

    /// The data lock of the store `root`, exclusive, if no one holds it now, else `None`
    /// (never waits).
    pub fn try_take_at(root: &Path) -> Result<Option<ExclusiveDataLock>> {
        Ok(LockFile::try_take_exclusive(&root.join("data.lock"))?
            .map(|file| ExclusiveDataLock { _file: file }))
    }
}

/// A workspace's lock (order 2, exclusive): see [`Store::lock_workspace`]. It borrows the
/// shared data lock it was taken under.
pub struct WorkspaceLock<'d> {
    _file: LockFile,
    _data: std::marker::PhantomData<&'d SharedDataLock>,
}

impl WorkspaceLock<'_> {
    fn take<'d>(root: &Path, key: &str) -> Result<WorkspaceLock<'d>> {
        let dir = root.join("locks");
        fs::create_dir_all(&dir).at(&dir)?;
        let path = dir.join(format!(
            "workspace-{}.lock",
            ObjectId::of(key.as_bytes()).short()
        ));
        Ok(WorkspaceLock {
            _file: LockFile::take(&path, false)?,
            _data: std::marker::PhantomData,
        })
    }
}

/// The download lock (order 3, exclusive): see [`Store::lock_downloads`]. It borrows the
/// shared data lock it was taken under.
pub struct DownloadLock<'d> {
    _file: LockFile,
    _data: std::marker::PhantomData<&'d SharedDataLock>,
}

/// A fetch stripe's lock (order 3, exclusive): the read engine takes those of one batch of
/// remote frames in ascending stripe order, under the shared data lock.
pub struct StripeLock {
    _file: LockFile,
}

impl StripeLock {
    /// Waits for the stripe lock file at `path`.
    pub fn take(path: &Path, _data: &SharedDataLock) -> Result<StripeLock> {
        Ok(StripeLock {
            _file: LockFile::take(path, false)?,
        })
    }
}

/// The head lock (order 4, the last; exclusive): held while a catalog transaction reads and
/// moves heads, tags and pins or records and forgets packs. Nothing else is taken while it
/// is held. Made by [`Store::lock_head`] from a held data lock, whose guard it borrows
/// (`'d`), or by [`Store::lock_head_alone`] for an operation that holds no other lock.
pub struct HeadLock<'d> {
    _file: LockFile,
    _data: std::marker::PhantomData<&'d ()>,
}

impl HeadLock<'static> {
    /// Waits for the head lock of the store `root`, for `repair`, which takes every lock
    /// of a store it has not opened, in the one order (open, data, head).
    pub fn take_at(root: &Path) -> Result<HeadLock<'static>> {
        Ok(HeadLock {
            _file: LockFile::take(&root.join("lock"), false)?,
            _data: std::marker::PhantomData,
        })
    }
}

/// A held data lock, shared ([`SharedDataLock`]) or exclusive ([`ExclusiveDataLock`]):
/// what the head lock is made from ([`Store::lock_head`]). Sealed: no other type is one.
pub trait DataGuard: sealed::Sealed {}

impl DataGuard for SharedDataLock {}
impl DataGuard for ExclusiveDataLock {}

mod sealed {
    /// Implemented by the data lock guards only.
    pub trait Sealed {}
    impl Sealed for super::SharedDataLock {}
    impl Sealed for super::ExclusiveDataLock {}
}

/// Reads objects (trees, versions, files) by id, checking every byte against its hash.
pub struct ObjectReader<'a> {
    catalog: &'a Catalog,
    packs: PackReader,
    record_proofs: bool,
}

impl<'c> ObjectReader<'c> {
    /// A reader of the packs in `packs_dir` through `catalog` (a read-only connection of
    /// the read engine's): it records nothing, as [`Store::checking_reader`].
    pub fn over(catalog: &'c Catalog, packs_dir: &Path) -> ObjectReader<'c> {
        ObjectReader {
            catalog,
            packs: PackReader::new(packs_dir, 8),
            record_proofs: false,
        }
    }
}

impl ObjectReader<'_> {
    fn locate(&self, id: &ObjectId, kind: ObjectKind) -> Result<ObjectLocation> {
        self.catalog
            .locate(id, kind)?
            .ok_or_else(|| Error::MissingObject {
                id: id.to_hex(),
                what: kind.name(),
            })
    }

    /// The stored bytes of object `id` of `kind`, checked against the id (file maps, keyed
    /// by their file's id, are not).
    ///
    /// # Errors
    /// [`Error::MissingObject`], [`Error::Corrupt`], [`Error::Io`].
    pub fn bytes(&mut self, id: &ObjectId, kind: ObjectKind) -> Result<Vec<u8>> {
        self.bytes_and_pack(id, kind).map(|(bytes, _)| bytes)
    }

    /// As [`ObjectReader::bytes`], with the pack file that holds the object (what a decoding
    /// error names: the object may have come from a remote, and the catalog is not at fault).
    fn bytes_and_pack(&mut self, id: &ObjectId, kind: ObjectKind) -> Result<(Vec<u8>, PathBuf)> {
        let location = self.locate(id, kind)?;
        let verify = kind.is_hashed();
        self.packs.prepare(&location.frame, self.catalog)?;
        let bytes = self.packs.object(
            &location.frame,
            location.offset,
            location.length,
            id,
            verify,
        )?;
        Ok((bytes, self.packs.pack_path(&location.frame.pack)))
    }

    /// The tree `id`.
    ///
    /// # Errors
    /// [`Error::MissingObject`], [`Error::Corrupt`] (hash mismatch or malformed tree), [`Error::Io`].
    pub fn tree(&mut self, id: &ObjectId) -> Result<Tree> {
        let (bytes, pack) = self.bytes_and_pack(id, ObjectKind::Tree)?;
        Tree::decode(&bytes).map_err(|e| Error::corrupt(pack, format!("tree {}: {e}", id.short())))
    }

    /// The version object `id`, decoded from its pack.
    ///
    /// # Errors
    /// As [`ObjectReader::tree`].
    pub fn version(&mut self, id: &ObjectId) -> Result<Version> {
        let (bytes, pack) = self.bytes_and_pack(id, ObjectKind::Version)?;
        Version::decode(&bytes)
            .map_err(|e| Error::corrupt(pack, format!("version {}: {e}", id.short())))
    }

    /// Reads and decodes provenance object `id`.
    ///
    /// # Errors
    /// [`Error::MissingObject`], [`Error::Corrupt`] (hash mismatch or bad encoding), [`Error::Io`].
    pub fn provenance(&mut self, id: &ObjectId) -> Result<crate::object::Provenance> {
        let (bytes, pack) = self.bytes_and_pack(id, ObjectKind::Provenance)?;
        crate::object::Provenance::decode(&bytes)
            .map_err(|e| Error::corrupt(pack, format!("provenance {}: {e}", id.short())))
    }

    /// The ids of the chunks of file `id` of `size` bytes, in order, whether or not the
    /// chunks are stored here: its file map's list when the store has one, else the file
    /// itself (a file of one chunk). Used to find what a remote must supply.
    ///
    /// # Errors
    /// [`Error::Corrupt`] when the file map is malformed; [`Error::Io`].
    pub fn chunk_ids(&mut self, id: &ObjectId, size: u64) -> Result<Vec<ObjectId>> {
        if size == 0 {
            return Ok(Vec::new());
        }
        let Some(location) = self.catalog.locate(id, ObjectKind::FileMap)? else {
            return Ok(vec![*id]);
        };
        let bytes =
            self.packs
                .object(&location.frame, location.offset, location.length, id, false)?;
        let map = decode_file_map(&bytes, id, size)
            .map_err(|detail| Error::corrupt(self.packs.pack_path(&location.frame.pack), detail))?;
        Ok(map.chunks.into_iter().map(|(chunk, _)| chunk).collect())
    }

    /// The chunks of file `id` of `size` bytes, in order, with where each is stored: the file
    /// itself for a file of one chunk, else the chunks its file map lists. The file map is not
    /// hashed (it is keyed by the file id), so its lengths are checked against the chunks'
    /// and their sum against `size` before anything is read.
    ///
    /// # Errors
    /// [`Error::MissingObject`]; [`Error::Corrupt`] when the file map is malformed or its
    /// lengths disagree; [`Error::Io`].
    pub fn file_chunks(
        &mut self,
        id: &ObjectId,
        size: u64,
    ) -> Result<Vec<(ObjectId, ObjectLocation)>> {
        if size == 0 {
            return Ok(Vec::new());
        }
        // Where it is and, for a map from a remote, that it is unproven: one query, so a map
        // another reader forgets meanwhile is never taken for a proven one.
        let (location, unproven) =
            self.catalog
                .locate_file_and_proof(id)?
                .ok_or_else(|| Error::MissingObject {
                    id: id.to_hex(),
                    what: "file",
                })?;
        let pack = self.packs.pack_path(&location.frame.pack);
        let listed = if location.kind == ObjectKind::Chunk {
            vec![(*id, location.length)]
        } else {
            let bytes =
                self.packs
                    .object(&location.frame, location.offset, location.length, id, false)?;
            decode_file_map(&bytes, id, size)
                .map_err(|detail| Error::corrupt(&pack, detail))?
                .chunks
        };
        let mut chunks = Vec::with_capacity(listed.len());
        let mut total = 0u64;
        for (chunk_id, length) in listed {
            // A file of one chunk was located already (no second query: checkout locates
            // every file of a version this way).
            let chunk = if location.kind == ObjectKind::Chunk {
                location
            } else {
                self.locate(&chunk_id, ObjectKind::Chunk)?
            };
            if chunk.length != length {
                let detail = format!(
                    "file map {} lists chunk {} as {length} bytes, but it holds {}",
                    id.short(),
                    chunk_id.short(),
                    chunk.length
                );
                return Err(Error::corrupt(&pack, detail));
            }
            total += u64::from(length);
            chunks.push((chunk_id, chunk));
        }
        if total != size {
            let detail = format!(
                "file {} has {total} bytes in its chunks but {size} in its tree",
                id.short()
            );
            return Err(Error::corrupt(&pack, detail));
        }
        if let Some(remote) = unproven {
            self.prove_file_map(id, &location, &chunks, &remote)?;
        }
        Ok(chunks)
    }

    /// Proves the unproven file map at `map` (fetched from `remote`): its chunks,
    /// reassembled, must hash to the file id. A map that passes is recorded as proven; one
    /// that fails is forgotten (so the right one can be fetched again) and reported as corrupt
    /// data from that remote; either only while it is still the unproven map at `map`. A
    /// reader made by [`Store::checking_reader`] records neither.
    fn prove_file_map(
        &mut self,
        id: &ObjectId,
        map: &ObjectLocation,
        chunks: &[(ObjectId, ObjectLocation)],
        remote: &str,
    ) -> Result<()> {
        let mut hasher = blake3::Hasher::new();
        for (chunk_id, location) in chunks {
            self.packs.prepare(&location.frame, self.catalog)?;
            self.packs.with_object(
                &location.frame,
                location.offset,
                location.length,
                chunk_id,
                true,
                |bytes| {
                    hasher.update(bytes);
                },
            )?;
        }
        if ObjectId::from(hasher.finalize()) == *id {
            if self.record_proofs {
                self.catalog.prove_file_map_at(id, map)?;
            }
            return Ok(());
        }
        if self.record_proofs {
            self.catalog.reject_file_map_at(id, map)?;
        }
        Err(Error::corrupt(
            format!("remote {remote}"),
            format!(
                "the file map of file {} fetched from it lists chunks that do not reassemble the file; it was not used{}",
                id.short(),
                if self.record_proofs {
                    " and is forgotten, so the next checkout fetches it again"
                } else {
                    ""
                }
            ),
        ))
    }

    /// Writes file `id` (of `size` bytes) to `out`, chunk by chunk, each chunk checked against
    /// its id and, when the whole file is written, the whole against the file id. `range`
    /// limits the output to a byte range.
    ///
    /// # Errors
    /// As [`ObjectReader::file_chunks`]; [`Error::Corrupt`] when the bytes do not hash to
    /// `id`; [`Error::IoOperation`] when writing to `out` fails.
    pub fn write_file(
        &mut self,
        id: &ObjectId,
        size: u64,
        range: Option<std::ops::Range<u64>>,
        out: &mut dyn Write,
    ) -> Result<()> {
        let chunks = self.file_chunks(id, size)?;
        let mut hasher = blake3::Hasher::new();
        let mut offset = 0u64;
        for (chunk_id, location) in &chunks {
            let end = offset + u64::from(location.length);
            if range
                .as_ref()
                .is_none_or(|r| r.start < end && offset < r.end)
            {
                let (from, to) = match &range {
                    Some(r) => (
                        r.start.saturating_sub(offset) as usize,
                        (r.end.min(end) - offset) as usize,
                    ),
                    None => (0, location.length as usize),
                };
                self.packs.prepare(&location.frame, self.catalog)?;
                self.packs
                    .with_object(
                        &location.frame,
                        location.offset,
                        location.length,
                        chunk_id,
                        true,
                        |bytes| {
                            if range.is_none() {
                                hasher.update(bytes);
                            }
                            out.write_all(&bytes[from..to])
                        },
                    )?
                    .during("writing the output")?;
            }
            offset = end;
        }
        if range.is_none() && ObjectId::from(hasher.finalize()) != *id {
            return Err(Error::corrupt(
                self.catalog.path(),
                format!("file {} does not match its id", id.short()),
            ));
        }
        Ok(())
    }
}
