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
//! - **Store lock** `.dsv/lock`. An exclusive `flock` on the file, taken by the same helper
//!   as the workspace locks (`StoreLock::take`, through `File::lock`). Commit takes it only
//!   for finalization (step 13 on): reading the head, writing the version frame,
//!   sealing the last pack, the catalog transaction; import and update take it at the same
//!   point (`record_version`). So two commits or imports to one dataset never both take the
//!   same parent. Reading, chunking, compressing and writing
//!   trees run outside the lock, in parallel with other commits. Packs that fill up before
//!   the lock is taken are sealed outside it. The remote operations take it only around
//!   their catalog transactions that record downloaded packs, fetched versions and refs, and
//!   pull's move of a local head (Sync with remotes (`ops::sync`)); never while a
//!   request is in flight. Push does not take it. `gc` takes it for its catalog swap, `rm` for
//!   its transaction, and `cache prune` for the transaction that marks versions.
//! - **Data lock** `.dsv/data.lock`, created on first use. A `flock` held shared by commit,
//!   import, update, checkout, status, audit, verify, rebase, fetch, push, the remote and
//!   download steps of pull and checkout, a read engine fetch and `Lease::take`, and
//!   exclusive by `gc` and `repair`, so that `gc` never deletes an object a running operation relies
//!   on. Who holds it when, and why it is a lock and not a grace period, is in
//!   Cleanup and audits (`ops::gc`).
//! - **Workspace locks** `.dsv/locks/workspace-<12 hex digits>.lock`. The digits are the first
//!   12 hex digits of BLAKE3 of the workspace's canonical path. Commit holds this lock for its
//!   whole run (from before the walk until its transaction commits), checkout from before it
//!   reads the workspace state until its transaction commits, and status for its whole run.
//!   So commits, checkouts and status runs on one directory run one after the other. Commit
//!   takes the workspace lock before the store lock; checkout and status never take the store
//!   lock while they hold a workspace lock (a checkout that first downloads from a remote
//!   takes and releases the store lock before it takes the workspace lock).
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
//! - Locks are blocking and have no timeout. All are `flock` locks on a lock file
//!   (`StoreLock`; the data lock and the open lock shared or exclusive, the others exclusive), released when the
//!   guard drops, or by the kernel when the holding process dies, `kill -9` included.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::catalog::{Catalog, ObjectLocation};
use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;
use crate::object::{FileMap, ObjectKind, Tree, Version};
use crate::pack::PackReader;

/// The name of a store directory.
pub const STORE_DIR: &str = ".dsv";

/// An open store.
pub struct Store {
    root: PathBuf,
    catalog: Catalog,
    /// A shared lock on `open.lock`, held while the store is open: `dsv repair`, which
    /// replaces the catalog file, runs only when no other process has the store open.
    _open: Option<StoreLock>,
}

impl Store {
    /// Creates a store in `dir/.dsv`, creating `dir` if missing.
    ///
    /// # Errors
    /// [`Error::StoreExists`] when one is there already; [`Error::NotADirectory`] when `dir`
    /// is a file; [`Error::Io`].
    pub fn init(dir: &Path) -> Result<Store> {
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
        // A store with packs or a ref log is never new: its catalog was lost.
        if let Some(reason) = lost_catalog_evidence(&root) {
            return Err(Error::CatalogLost { path: root, reason });
        }
        for sub in ["packs", "tmp"] {
            fs::create_dir_all(root.join(sub)).at(&root.join(sub))?;
        }
        File::create(root.join("lock")).at(&root.join("lock"))?;
        let open = StoreLock::take_with(&root.join("open.lock"), true)?;
        let catalog = Catalog::open(&root.join("catalog.db"), true)?;
        Ok(Store {
            root,
            catalog,
            _open: Some(open),
        })
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
        let open = StoreLock::take_with(&root.join("open.lock"), true)?;
        let catalog = Catalog::open(&catalog_path, false)?;
        Ok(Store {
            root: root.to_path_buf(),
            catalog,
            _open: Some(open),
        })
    }

    /// Finds the store for `start`: `start` itself when it is a `.dsv` directory or holds
    /// one, else the nearest parent that holds one (as git finds `.git`).
    ///
    /// # Errors
    /// [`Error::NoStore`] when there is none; [`Error::CatalogLost`] when the nearest store
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
                crate::workspace::enclosing(&store, &existing)
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

    /// Removes temporary pack files whose writing process is gone (killed mid-commit);
    /// returns their names.
    ///
    /// # Errors
    /// [`Error::Io`] when `tmp/` cannot be read.
    pub fn remove_stale_temp_packs(&self) -> Result<Vec<String>> {
        let dir = self.temp_dir();
        let mut removed = Vec::new();
        for entry in fs::read_dir(&dir).at(&dir)? {
            let entry = entry.at(&dir)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let owner = crate::walk::temp_owner(&name);
            if owner
                .is_some_and(|pid| pid != std::process::id() && !crate::walk::process_alive(pid))
            {
                fs::remove_file(entry.path()).at(&entry.path())?;
                removed.push(name);
            }
        }
        Ok(removed)
    }

    /// Takes the store's exclusive lock (waiting for it), held until the guard drops.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn lock(&self) -> Result<StoreLock> {
        StoreLock::take(&self.root.join("lock"))
    }

    /// Takes the data lock shared: held by every operation that reads or writes packs
    /// (commit, checkout, fetch, pull, push, verify) for its whole run, so that `gc`, which
    /// takes it exclusive ([`Store::lock_data_exclusive`]), never deletes an object that a
    /// running operation has found and is about to rely on (a commit that deduplicates
    /// against a chunk, a checkout reading it). Many holders share it at once.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn lock_data_shared(&self) -> Result<StoreLock> {
        StoreLock::take_with(&self.root.join("data.lock"), true)
    }

    /// Takes the data lock exclusive (`gc`): waits for every running commit, checkout and
    /// transfer, and keeps new ones waiting until released.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn lock_data_exclusive(&self) -> Result<StoreLock> {
        StoreLock::take_with(&self.root.join("data.lock"), false)
    }

    /// Takes the store's download lock (exclusive): held while objects are downloaded from a
    /// remote, so concurrent pulls of the same data download it once.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn lock_downloads(&self) -> Result<StoreLock> {
        let dir = self.root.join("locks");
        fs::create_dir_all(&dir).at(&dir)?;
        StoreLock::take(&dir.join("downloads.lock"))
    }

    /// Takes the exclusive lock of the workspace keyed `key` (its canonical path), so two
    /// processes never check out into one directory at once.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn lock_workspace(&self, key: &str) -> Result<StoreLock> {
        let dir = self.root.join("locks");
        fs::create_dir_all(&dir).at(&dir)?;
        StoreLock::take(&dir.join(format!(
            "workspace-{}.lock",
            ObjectId::of(key.as_bytes()).short()
        )))
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

/// An exclusive lock on a lock file (flock); released on drop, or by the kernel when the
/// process dies, so a killed process never leaves a store locked.
pub struct StoreLock {
    _file: File,
}

impl StoreLock {
    /// Opens (creating) `path` and waits for its exclusive lock.
    fn take(path: &Path) -> Result<StoreLock> {
        Self::take_with(path, false)
    }

    /// Opens (creating, never truncating) the lock file at `path`.
    fn open_file(path: &Path) -> Result<File> {
        fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .at(path)
    }

    /// Opens (creating) `path` and takes its exclusive lock if no one holds it, else `None`.
    pub fn try_take_exclusive(path: &Path) -> Result<Option<StoreLock>> {
        let file = Self::open_file(path)?;
        match file.try_lock() {
            Ok(()) => Ok(Some(StoreLock { _file: file })),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(e).at(path),
        }
    }

    /// Opens (creating) `path` and waits for its shared or exclusive lock.
    pub fn take_with(path: &Path, shared: bool) -> Result<StoreLock> {
        let file = Self::open_file(path)?;
        if shared {
            file.lock_shared().at(path)?;
        } else {
            file.lock().at(path)?;
        }
        Ok(StoreLock { _file: file })
    }
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
