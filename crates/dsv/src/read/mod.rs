//! The read engine: random access to any byte of any file of a version, from many threads at
//! once, without a checkout. `cat` ([`crate::ops::cat`]), the tar export
//! ([`crate::ops::export`]), the FUSE mount (crate `dsv-mount`) and the Python package are
//! front ends of it, built on its public API; the engine itself holds only random access.
//!
//! ```text
//! ReadEngine (Send + Sync, one per process)
//!   ├── CatalogPool: read-only catalog connections, one per thread reading at a time, so
//!   │   lookups take no store-wide lock (the store itself is locked only to write: recording
//!   │   fetched packs and proofs, taking a lease)
//!   ├── Fetcher: chunks fetched from remotes frame by frame; stripe locks by remote frame,
//!   │   so each frame is downloaded once per machine and fetches of other frames run beside it
//!   └── FrameCache: decompressed frames, weighted by bytes (quick_cache), shared by every
//!       handle; a frame that several threads want at once is read and decompressed once
//!       (single flight)
//! VersionHandle (Send + Sync): the version's paths, listed once (a sorted table with an index
//!   by path hash); its VersionListing (plain data) opens it again in a forked process
//! FileHandle (Send + Sync): the file's chunk list and a prefix table of their starts (from
//!   its file map); chunks located in the catalog lazily, fetched when first needed; `read_at`
//!   finds the chunk of an offset by binary search (O(log chunks)), as rustic_core's
//!   `OpenFile::read_at` does, and reads through the frame cache.
//! ```
//!
//! Every chunk is checked against its id the first time it is served from a cached frame. A
//! file map fetched from a remote is not trusted: each 64 KiB block a read touches is checked
//! against the file's outboard ([`crate::outboard`]) before any byte of it is served, so a
//! remote-only file serves its first byte after one ranged GET and a random read fetches only
//! the frames that cover it (a map without an outboard, from data pushed before outboards, is
//! proven whole at open, as checkout proves it). What is fetched is stored in the local store
//! and read locally by every later reader and process.
//!
//! # How the engine works
//!
//! `crates/dsv/src/read/` (`mod.rs`, `file.rs`: one open file's layout and proof, `fetch.rs`: the catalog
//! pool and the fetcher). Random access to any byte of any file of a version without a
//! checkout, the engine that `cat`, `export`, `mount` and the Python package stand on.
//!
//! - `ReadEngine` (`Send + Sync`, cheap to clone) owns the store behind a mutex, taken only to
//!   write (recording fetched packs and proofs), to take a lease, and for the whole-file fetch
//!   of data pushed before outboards; a `CatalogPool` of read-only catalog connections (a
//!   thread takes one for a lookup and puts it back: no lock is held while it is used, so
//!   `stat`, `open` and reads never wait on each other's queries); and a `FrameCache`:
//!   decompressed frames in a `quick_cache` weighted by bytes, evicting past
//!   `ReadOptions::cache_bytes` (default 256 MiB; O(1), frames read again kept over frames
//!   read once, a frame just put in kept). A frame that several threads want at once is read
//!   and decompressed once; the others wait on its placeholder (single flight). Each thread
//!   keeps its own pack reader (open files, a zstd context) for misses.
//! - `ReadEngine::version(REV)` resolves the revision, leases the version and reads its
//!   version object, nothing more. Until a call needs every path, `stat` and `open` read only
//!   the trees on their path (`tree::lookup`: one tree per component, searched by bisection,
//!   with the checks of a walk), so `cat` of one file of a million holds the trees of its
//!   path. The first call of `entries`, `files`, `list` or `select` (globs, a manifest, a
//!   shard) lists the version's paths once (`tree::flatten_version`, bounded by the version's
//!   own counts) and keeps the table for the handle's life (about 120 bytes a path); `stat`
//!   then answers from it. The mount and the Python package list at open (their inode table
//!   and `len` need every path).
//! - `VersionHandle::open(PATH)` reads the file's map (through the frame cache) and builds a
//!   prefix table of its chunks' starts; a file of one chunk is located at once. The other
//!   chunks are located in the catalog when a read first needs them (`file::FileState::make_local`),
//!   so opening a file of 10,000 chunks costs one map, not 10,000 queries. A chunk that is not
//!   here is fetched then (below) and kept, so every later reader and process uses the local
//!   copy.
//! - **Proof of a map from a remote.** A map written here, or proven before, is trusted. One
//!   fetched from a remote is not: each 64 KiB block a read touches is checked against the
//!   file's outboard (`docs/format.md#outboard-encoding`) before any byte of it is served,
//!   and the blocks that passed are remembered for the engine's life (every handle of the file
//!   shares them); when all have passed, the map is recorded as proven. A block that fails
//!   fails the read, naming the remote, and the map is forgotten so the next read fetches it
//!   again. A map without an outboard (data pushed before outboards) is proven whole at open,
//!   as checkout proves it.
//! - **Fetching** (`fetch::Fetcher`). The chunks a read needs that are not here: their frames,
//!   located in the remotes' indexes as this store last read them (a miss falls back to the
//!   whole-file fetch, which reads the indexes again), grouped into ranged GETs of at most
//!   `FETCH_SPAN` (4 MiB). Each remote frame maps to one of 4,096 lock files
//!   (`.dsv/locks/fetch-NNN.lock`, by a hash of pack and offset); a fetch takes its frames'
//!   locks in ascending order (no cycle), checks again under them what is still missing,
//!   downloads it, checks every frame (`ObjectKind::check`), stores it in a new pack (synced),
//!   puts the frames it just checked into the frame cache as they are (marked checked: the
//!   waiting read neither reads them back nor hashes them again) and *lands* the pack's
//!   chunks: threads of the engine waiting for them read them from then on, located in
//!   memory, while the fetch records the pack (a group commit: fetches that finish meanwhile
//!   share one transaction) and then lets its locks go (`landing`). Threads of one engine
//!   that want the same chunks wait for the fetch that claimed them, not on its lock files.
//!   At most `FETCH_BATCH_FRAMES` (64) frames are locked and
//!   fetched at a time, so a prefetch of a large file holds a bounded number of lock files. So a frame is downloaded once
//!   per machine however many threads and processes want it, and a fetch never blocks a read
//!   of another file. A corrupt or short response fails that fetch alone and stores nothing;
//!   the next read tries again. The data lock is held shared during a fetch, as a pull holds it.
//! - **Delta frames** (issue 39). A chunk stored as a delta frame is decoded against its
//!   bases: the frame cache's loader reads each base (through the cache, so a base that
//!   several deltas name is decoded once), checks it against its id, concatenates them into
//!   the reference prefix and decodes the frame (zstd's window capped); every chunk served
//!   from it is checked against its id as any other. A chain deeper than
//!   `MAX_DELTA_DEPTH` (16) or one that returns to itself is `Error::Corrupt`; a thread
//!   decoding a delta waits only a bounded time for a base frame another thread loads, so
//!   crossing chains cannot deadlock. A fetch adds to the chunks it wants the remote
//!   closure of their delta frames (`Catalog::remote_delta_bases_of`: the bases listed in
//!   the remote's indexes, transitively, those here left out), so a delta frame comes with
//!   everything needed to decode it in the same round of ranged GETs, not one round per
//!   level; plain frames are batched first. The prefetcher fetches through the same path.
//! - **Prefetch.** After a sequential read of a file not all here, once the reader is inside
//!   the last window asked for, the next window is fetched in the background, so one whole
//!   window is always in flight ahead of it: in pieces of `PREFETCH_PIECE` (16 MiB: each a
//!   blocking task on the shared runtime whose ranged GETs run at once and land in one pack; at
//!   most `MAX_PREFETCHES` = 8 at once per engine). The window starts at `FIRST_FETCH_WINDOW`
//!   (1 MiB) and grows fourfold each window up to `MAX_FETCH_WINDOW` (128 MiB), a ramp like
//!   mountpoint-s3's; a read far from the window (a seek) starts it small again, and a random
//!   reader fetches only its frames. The concurrent requests of a mount served out of order
//!   do not count as seeks. A prefetch also proves its piece's blocks of an unproven file map
//!   (above), so that hashing runs beside the fetches, not on the reader's thread.
//! - **Fork.** A child forked while a fetch holds a lock file would inherit the `flock` for its
//!   life. `read::before_fork` waits until no fetch of the process holds one and holds new ones
//!   back until `read::after_fork`; the Python package calls both around every fork
//!   (`os.register_at_fork`).
//! - Each fetch writes a pack of its own (a few MiB), so a large file read from a remote leaves
//!   many small packs; nothing merges them yet.
//! - **Cache limit** (`dsv cache limit`, [`ReadOptions::cache_limit`]). After a fetch brings
//!   the store's packs over the limit, the fetching reader evicts least-recently-used packs
//!   that hold only chunks a remote lists, never the packs that fetch just wrote
//!   (`crate::eviction`); a read that finds a located chunk's pack gone locates it again and
//!   fetches it again (`FileState::relocate`). Under a limit, `VersionHandle::prefetch`
//!   fetches only the frames that fit in the room left, so a prefetcher running ahead of its
//!   reader never evicts what it fetched for that reader.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

mod fetch;
mod file;
mod landing;

pub use fetch::{FETCH_BATCH_FRAMES, FETCH_SPAN, STRIPES, after_fork, before_fork};
use std::sync::{Arc, Mutex};

use quick_cache::sync::GuardResult;

use crate::catalog::ObjectLocation;
use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;
use crate::lease::Lease;
use crate::object::Version;
use crate::pack::{FrameLocation, PackReader};
use crate::revision::Revision;
use crate::store::{ObjectReader, Store};
use crate::tree::{FlatEntry, FlatKind};

/// Settings of a [`ReadEngine`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ReadOptions {
    /// Bytes of decompressed frames kept in memory for all handles (default 256 MiB).
    pub cache_bytes: u64,
    /// Requests in flight when data is fetched from a remote (default 8).
    pub fetch_jobs: usize,
    /// Bytes of packs the store keeps at most while this engine fetches (see
    /// [`crate::ops::cache::enforce_limit`]); `None` (the default): the store's own setting
    /// (`dsv cache limit`), read at each fetch.
    pub cache_limit: Option<u64>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            cache_bytes: 256 * 1024 * 1024,
            fetch_jobs: 8,
            cache_limit: None,
        }
    }
}

/// Opens versions of one store for reading. Cheap to clone (shared state); `Send + Sync`.
#[derive(Clone)]
pub struct ReadEngine {
    inner: Arc<Engine>,
}

struct Engine {
    /// The store, locked only to write (recording fetched packs and proofs), to take a
    /// lease, and for whole-file fetches of data pushed before outboards.
    store: Arc<Mutex<Store>>,
    /// Chunks this engine's fetches are downloading, and those landed but not recorded yet.
    landing: Arc<landing::Landing>,
    /// Records fetched packs, concurrent fetches' in one transaction.
    recorder: landing::Recorder,
    /// Read-only catalog connections: lookups take no store-wide lock.
    catalogs: fetch::CatalogPool,
    fetcher: fetch::Fetcher,
    block_sets: file::BlockSets,
    packs_dir: PathBuf,
    cache: FrameCache,
    options: ReadOptions,
    /// Background fetches running now (the prefetcher starts no more past a bound).
    prefetching: AtomicUsize,
    /// Background tasks (reads ahead and prefetches) running now, to wait for them.
    background: Background,
}

impl ReadEngine {
    /// An engine over the store whose `.dsv` directory is `root`.
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open(root: &Path, options: ReadOptions) -> Result<ReadEngine> {
        Ok(Self::new(Store::open(root)?, options))
    }

    /// The store's `packs/` directory (named in errors about the bytes read from it).
    pub fn packs_dir(&self) -> &Path {
        &self.inner.packs_dir
    }

    /// An engine over an open store (which it keeps).
    pub fn new(store: Store, options: ReadOptions) -> ReadEngine {
        let packs_dir = store.packs_dir();
        let catalogs = fetch::CatalogPool::new(store.catalog().path().to_path_buf());
        let fetcher = fetch::Fetcher::new(&store, options.fetch_jobs);
        let store = Arc::new(Mutex::new(store));
        let landing = Arc::new(landing::Landing::default());
        ReadEngine {
            inner: Arc::new(Engine {
                catalogs,
                fetcher,
                block_sets: file::BlockSets::default(),
                recorder: landing::Recorder::new(store.clone(), landing.clone()),
                landing,
                store,
                packs_dir,
                cache: FrameCache::new(options.cache_bytes),
                options,
                prefetching: AtomicUsize::new(0),
                background: Background::default(),
            }),
        }
    }

    /// Opens version `revision` (`DATASET`, `DATASET@TAG`, `DATASET@<id prefix>`, `~N`):
    /// reads its version object only. Its paths are listed once, on the first call that
    /// needs them all ([`VersionHandle::entries`], [`VersionHandle::files`],
    /// [`VersionHandle::list`], [`VersionHandle::select`]); until then [`VersionHandle::stat`]
    /// and [`VersionHandle::open`] read only the trees on their path, so opening a version of
    /// millions of files and reading one costs memory for that path, not for the listing.
    /// Its data need not be here: a file's chunks are fetched from the store's remotes when
    /// it is opened.
    ///
    /// # Errors
    /// Revision errors ([`Error::InvalidRevision`], [`Error::DatasetNotFound`], ...);
    /// [`Error::VersionRemoved`]; [`Error::MissingObject`] or [`Error::Corrupt`] for its trees.
    pub fn version(&self, revision: &str) -> Result<VersionHandle> {
        let revision = Revision::parse(revision)?;
        let store = self.inner.lock_store();
        let id = revision.resolve(store.catalog())?;
        // Leased before anything is read: from here on no gc deletes or moves what this
        // version holds (and if a gc ran since the resolve, the check below sees it).
        let lease = Arc::new(Lease::take(&store, &[id])?);
        if store.catalog().removed_at(&id)?.is_some() {
            return Err(Error::VersionRemoved {
                version: id.to_hex(),
            });
        }
        let version = store.reader().version(&id)?;
        // The dataset named (which a rename changes; the object keeps the old name, and two
        // datasets may share the version).
        let dataset = revision.dataset.clone();
        drop(store);
        Ok(VersionHandle {
            engine: self.inner.clone(),
            revision: revision.to_string(),
            id,
            dataset,
            version,
            entries: std::sync::OnceLock::new(),
            lease,
        })
    }

    /// Opens again, in this engine, the version `listing` was taken from
    /// ([`VersionHandle::listing`]), without resolving a revision or reading a tree: a new
    /// lease, a check that the version is still here and not removed, and the listing reused.
    /// This is how a process forked from the one that opened a version (a PyTorch
    /// `DataLoader` worker) gets a handle of its own at the cost of one catalog query, where
    /// [`ReadEngine::version`] would list every path again (or, unlisted, read the trees on
    /// every path it opens).
    ///
    /// # Errors
    /// [`Error::VersionRemoved`] when the version was removed since; [`Error::MissingObject`]
    /// when its version object is no longer in this store; catalog and lease errors.
    pub fn reopen(&self, listing: &VersionListing) -> Result<VersionHandle> {
        let store = self.inner.lock_store();
        let id = listing.inner.id;
        let lease = Arc::new(Lease::take(&store, &[id])?);
        if store.catalog().removed_at(&id)?.is_some() {
            return Err(Error::VersionRemoved {
                version: id.to_hex(),
            });
        }
        // Still here (a gc may have collected it since the listing was taken).
        let version = store.reader().version(&id)?;
        drop(store);
        let entries = std::sync::OnceLock::new();
        let _ = entries.set(listing.inner.listed.clone());
        Ok(VersionHandle {
            engine: self.inner.clone(),
            revision: listing.inner.revision.clone(),
            id,
            dataset: listing.inner.dataset.clone(),
            version,
            entries,
            lease,
        })
    }

    /// Bytes of decompressed frames held in the shared cache now.
    pub fn cached_bytes(&self) -> u64 {
        self.inner.cache.used()
    }

    /// Blocks until the background work this engine's reads started (the reads ahead of
    /// sequential readers into the cache, the prefetches of remote data ahead of them) has
    /// ended: [`ReadEngine::cached_bytes`] then counts all they loaded. A read that returned
    /// before this call started all the work it would; work started by reads during the
    /// wait is waited for too. A prefetch from a remote ends as its fetch does (bounded by
    /// the remote's timeouts); its failure is left for the foreground read to report.
    pub fn wait_for_background(&self) {
        let background = &self.inner.background;
        let mut running = background.running.lock().unwrap_or_else(|e| e.into_inner());
        while *running > 0 {
            running = background
                .ended
                .wait(running)
                .unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// The count of an engine's background tasks running now, with a condition variable
/// notified when one ends ([`ReadEngine::wait_for_background`]).
#[derive(Default)]
struct Background {
    running: Mutex<usize>,
    ended: std::sync::Condvar,
}

/// One background task of an engine, counted in [`Engine::background`] from its creation
/// (before the task is spawned, by the read that asks for it) to its drop (the task's end).
struct BackgroundTask(Arc<Engine>);

impl BackgroundTask {
    fn start(engine: &Arc<Engine>) -> BackgroundTask {
        *engine
            .background
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner()) += 1;
        BackgroundTask(engine.clone())
    }
}

impl Drop for BackgroundTask {
    fn drop(&mut self) {
        let background = &self.0.background;
        let mut running = background.running.lock().unwrap_or_else(|e| e.into_inner());
        *running -= 1;
        if *running == 0 {
            background.ended.notify_all();
        }
    }
}

impl Engine {
    fn lock_store(&self) -> std::sync::MutexGuard<'_, Store> {
        // A panic while holding it leaves nothing half-written in the store (writes are
        // transactions): the store can still be used.
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The decompressed frame at `location` (a local frame), through the frame cache. A
    /// delta frame is decoded against its bases: each read through the cache too (so a
    /// base that several deltas name is decoded once), checked against its id, located
    /// here (landed or in the catalog) or fetched when it is not.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a frame that fails its checks, a base that fails its id, a
    /// chain deeper than [`crate::pack::format::MAX_DELTA_DEPTH`] or that returns to itself,
    /// a prefix longer than [`crate::pack::format::MAX_DELTA_PREFIX`];
    /// [`Error::MissingObject`] for a base neither here nor on a remote; [`Error::Io`].
    fn frame(&self, location: &FrameLocation) -> Result<Arc<CachedFrame>> {
        self.frame_in_chain(location, &mut Vec::new())
    }

    /// [`Engine::frame`] for a frame read as a base of the delta frames in `chain` (the
    /// outermost first).
    fn frame_in_chain(
        &self,
        location: &FrameLocation,
        chain: &mut Vec<FrameLocation>,
    ) -> Result<Arc<CachedFrame>> {
        let outermost = chain.is_empty();
        let mut prefix_of = |at: &FrameLocation| self.delta_prefix(at, chain);
        if outermost {
            self.cache.get(&self.packs_dir, location, &mut prefix_of)
        } else {
            // A base's frame is waited for a bounded time only: a thread decoding a delta
            // holds that delta frame's slot while it reads the bases, so two threads whose
            // chains cross (a forged cycle across frames) must not wait on each other; after
            // the wait it is read here, uncached, and the chain check below refuses a cycle.
            self.cache
                .get_bounded(&self.packs_dir, location, BASE_WAIT, &mut prefix_of)
        }
    }

    /// Reads the frame at `location` into the cache unless it is there or being loaded
    /// (read-ahead).
    fn preload(&self, location: &FrameLocation) -> Result<()> {
        let mut chain = Vec::new();
        self.cache.preload(&self.packs_dir, location, &mut |at| {
            self.delta_prefix(at, &mut chain)
        })
    }

    /// The reference prefix of delta frame `location`: the raw bytes of its bases,
    /// concatenated in listed order. `chain`: the delta frames being decoded that led here.
    fn delta_prefix(
        &self,
        location: &FrameLocation,
        chain: &mut Vec<FrameLocation>,
    ) -> Result<Vec<u8>> {
        let pack = || crate::pack::writer::pack_path(&self.packs_dir, &location.pack);
        if chain.contains(location) {
            return Err(Error::corrupt(
                pack(),
                format!(
                    "the delta frame at offset {} is a base of itself (a delta cycle)",
                    location.offset
                ),
            ));
        }
        if chain.len() as u64 >= u64::from(crate::pack::format::MAX_DELTA_DEPTH) {
            return Err(Error::corrupt(
                pack(),
                format!(
                    "the delta frame at offset {} lies more than {} delta levels deep",
                    location.offset,
                    crate::pack::format::MAX_DELTA_DEPTH
                ),
            ));
        }
        let bases = self.frame_bases(location)?;
        if bases.is_empty() {
            return Err(Error::corrupt(
                pack(),
                format!(
                    "the delta frame at offset {} lists no base",
                    location.offset
                ),
            ));
        }
        chain.push(*location);
        let built = self.build_prefix(&bases, chain);
        chain.pop();
        built
    }

    /// The raw bytes of chunks `bases`, concatenated, each checked against its id.
    fn build_prefix(&self, bases: &[ObjectId], chain: &mut Vec<FrameLocation>) -> Result<Vec<u8>> {
        let mut prefix = Vec::new();
        for base in bases {
            let at = self.locate_base(base)?;
            let frame = self.frame_in_chain(&at.frame, chain)?;
            let bytes = frame.chunk(base, &at, &self.packs_dir)?;
            if (prefix.len() + bytes.len()) as u64 > crate::pack::format::MAX_DELTA_PREFIX {
                return Err(Error::corrupt(
                    crate::pack::writer::pack_path(&self.packs_dir, &at.frame.pack),
                    format!(
                        "the bases of a delta frame hold more than {} bytes",
                        crate::pack::format::MAX_DELTA_PREFIX
                    ),
                ));
            }
            prefix.extend_from_slice(bytes);
        }
        Ok(prefix)
    }

    /// The bases of local delta frame `location`, from the catalog, or for a pack a fetch
    /// of this engine landed and has not recorded yet, from the pack's own index.
    fn frame_bases(&self, location: &FrameLocation) -> Result<Vec<ObjectId>> {
        let bases = self
            .catalogs
            .with(|catalog| catalog.frame_bases(location))?;
        if !bases.is_empty() {
            return Ok(bases);
        }
        let path = crate::pack::writer::pack_path(&self.packs_dir, &location.pack);
        let file = std::fs::File::open(&path).at(&path)?;
        let index = crate::pack::reader::read_index(&file, &path)?;
        let number = index
            .frames
            .iter()
            .position(|frame| frame.offset == location.offset);
        Ok(number
            .and_then(|number| {
                index
                    .deltas
                    .iter()
                    .find(|delta| delta.frame as usize == number)
            })
            .map(|delta| delta.bases.clone())
            .unwrap_or_default())
    }

    /// Where base chunk `id` is: landed by a fetch of this engine, in the catalog, or
    /// fetched now from the remotes (a base is fetched with its delta, so this is rare: a
    /// base evicted alone, or data copied here without its closure).
    fn locate_base(&self, id: &ObjectId) -> Result<ObjectLocation> {
        let locate = || -> Result<Option<ObjectLocation>> {
            match self.landing.locate(id) {
                Some(location) => Ok(Some(location)),
                None => self
                    .catalogs
                    .with(|catalog| catalog.locate(id, crate::object::ObjectKind::Chunk)),
            }
        };
        if let Some(location) = locate()? {
            return Ok(location);
        }
        let mut attempts = crate::transfer::fallback::Attempts::new();
        match self.fetcher.fetch(self, &[*id], &mut attempts) {
            Ok(_) | Err(fetch::FetchError::NotIndexed) => {}
            Err(fetch::FetchError::Failed(e)) => return Err(e),
        }
        locate()?.ok_or_else(|| {
            attempts.missing(Error::MissingObject {
                id: id.to_hex(),
                what: "chunk",
            })
        })
    }
}

/// How long a thread decoding a delta frame waits for another thread reading one of its
/// bases' frames before it reads that frame itself (see [`Engine::frame_in_chain`]).
const BASE_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// One version, open for reading. `Send + Sync`: share it between threads.
pub struct VersionHandle {
    engine: Arc<Engine>,
    revision: String,
    id: ObjectId,
    dataset: String,
    version: Version,
    /// In path order ([`crate::walk::path_order`]), as the version's trees list them: a
    /// path is found by binary search, and a directory's entries follow it. Listed on the
    /// first call that needs every path (or taken from a [`VersionListing`]), with an index
    /// by path.
    entries: std::sync::OnceLock<Arc<Listed>>,
    /// Keeps gc from deleting or moving what the version holds while it is read.
    lease: Arc<Lease>,
}

impl VersionHandle {
    /// The version's id.
    pub fn id(&self) -> ObjectId {
        self.id
    }

    /// The dataset that holds the version (the catalog's answer: after a rename, the new
    /// name, while the version object keeps the name it was committed to).
    pub fn dataset(&self) -> &str {
        &self.dataset
    }

    /// The version object (tree, parent, counts, message, the dataset it was committed to).
    pub fn version(&self) -> &Version {
        &self.version
    }

    /// Every entry (directories, files, symlinks) in depth-first order, siblings sorted:
    /// listed on the first call (about 120 bytes a path), kept for the handle's life.
    ///
    /// # Errors
    /// [`Error::MissingObject`] or [`Error::Corrupt`] for its trees.
    pub fn entries(&self) -> Result<&[FlatEntry]> {
        Ok(&self.listed()?.entries)
    }

    fn listed(&self) -> Result<&Arc<Listed>> {
        if let Some(listed) = self.entries.get() {
            return Ok(listed);
        }
        // A listing this process may not hold is refused, not aborted on (`ulimit -v`).
        crate::object::check_listable(&self.id, self.version.files)?;
        let entries = self.engine.catalogs.with(|catalog| {
            crate::tree::flatten_version(
                &mut ObjectReader::over(catalog, &self.engine.packs_dir),
                &self.version,
            )
        })?;
        // Two threads may list at once; both listings are the same.
        Ok(self.entries.get_or_init(|| Arc::new(Listed::new(entries))))
    }

    /// The version's identity and path listing as plain data ([`VersionListing`]), listing
    /// it first when needed (as [`VersionHandle::entries`]). Shares the listing: no copy.
    ///
    /// # Errors
    /// As [`VersionHandle::entries`].
    pub fn listing(&self) -> Result<VersionListing> {
        let listed = self.listed()?.clone();
        Ok(VersionListing {
            inner: Arc::new(ListingData {
                revision: self.revision.clone(),
                id: self.id,
                dataset: self.dataset.clone(),
                listed,
            }),
        })
    }

    /// Whether the version's paths have been listed (by a call that needs them all): until
    /// then the handle holds no listing.
    pub fn is_listed(&self) -> bool {
        self.entries.get().is_some()
    }

    /// The regular files, in path order (lists the version, as [`VersionHandle::entries`]).
    ///
    /// # Errors
    /// As [`VersionHandle::entries`].
    pub fn files(&self) -> Result<impl Iterator<Item = &FlatEntry>> {
        Ok(self
            .entries()?
            .iter()
            .filter(|e| matches!(e.kind, FlatKind::File { .. })))
    }

    /// The entry at `path` (`/`-separated, relative), or `None`. Once the version is listed,
    /// a binary search of the listing; before, a read of the trees on `path` only
    /// ([`crate::tree::lookup`]).
    ///
    /// # Errors
    /// [`Error::MissingObject`] or [`Error::Corrupt`] for a tree on the path.
    pub fn stat(&self, path: &str) -> Result<Option<FlatEntry>> {
        let path = path.trim_matches('/');
        if let Some(listed) = self.entries.get() {
            return Ok(listed.position(path).map(|i| listed.entries[i].clone()));
        }
        if path.is_empty() {
            return Ok(None);
        }
        self.engine.catalogs.with(|catalog| {
            crate::tree::lookup(
                &mut ObjectReader::over(catalog, &self.engine.packs_dir),
                &self.version.tree,
                path,
            )
        })
    }

    /// Every entry below directory `path` (`""` for the root: every entry), in depth-first
    /// order with siblings sorted, as one slice of the listing: what a recursive `find` or a
    /// glob walks in one pass. A file's `path` gives itself.
    ///
    /// # Errors
    /// [`Error::PathNotFound`] when the version has no `path`.
    pub fn walk(&self, path: &str) -> Result<&[FlatEntry]> {
        let path = path.trim_matches('/');
        let listed = self.listed()?;
        let entries = &listed.entries[..];
        if path.is_empty() {
            return Ok(entries);
        }
        let Some(at) = listed.position(path) else {
            return Err(self.not_found(path));
        };
        if entries[at].kind != FlatKind::Dir {
            return Ok(&entries[at..=at]);
        }
        let inner = format!("{path}/");
        let below = entries[at + 1..].partition_point(|e| e.path.starts_with(&inner));
        Ok(&entries[at + 1..at + 1 + below])
    }

    /// The entries directly inside directory `path` (`""` for the root).
    ///
    /// # Errors
    /// [`Error::PathNotFound`] when `path` is not a directory of the version.
    pub fn list(&self, path: &str) -> Result<Vec<&FlatEntry>> {
        let path = path.trim_matches('/');
        let listed = self.listed()?;
        let entries = &listed.entries[..];
        // A directory's entries follow it; each child directory's own entries are skipped
        // by binary search, so a listing costs its children, not its subtree.
        let start = if path.is_empty() {
            0
        } else {
            match listed.position(path) {
                Some(i) if entries[i].kind == FlatKind::Dir => i + 1,
                _ => return Err(self.not_found(path)),
            }
        };
        let prefix = if path.is_empty() {
            String::new()
        } else {
            format!("{path}/")
        };
        let mut children = Vec::new();
        let mut next = start;
        while let Some(entry) = entries.get(next) {
            if !entry.path.starts_with(prefix.as_str()) {
                break;
            }
            children.push(entry);
            next += 1;
            if entry.kind == FlatKind::Dir {
                let inner = format!("{}/", entry.path);
                next += entries[next..].partition_point(|e| e.path.starts_with(&inner));
            }
        }
        Ok(children)
    }

    /// Opens file `path` for reading. When its chunks are not all here, they are fetched
    /// first from the store's remotes (and kept, for every later reader).
    ///
    /// # Errors
    /// [`Error::PathNotFound`] when the version has no `path`; [`Error::NotAFile`] when it
    /// is a directory or symlink;
    /// [`Error::MissingObject`] when neither this store nor a remote holds its data;
    /// [`Error::Corrupt`] (a file map that does not reassemble its file, naming the remote it
    /// came from); remote errors.
    pub fn open(&self, path: &str) -> Result<FileHandle> {
        let entry = self.stat(path)?.ok_or_else(|| self.not_found(path))?;
        if !matches!(entry.kind, FlatKind::File { .. }) {
            return Err(Error::NotAFile {
                revision: self.revision.clone(),
                path: path.to_string(),
                kind: match entry.kind {
                    FlatKind::Dir => "a directory",
                    _ => "a symlink",
                },
            });
        }
        let state = file::FileState::open(&self.engine, entry)?;
        Ok(FileHandle {
            engine: self.engine.clone(),
            _lease: self.lease.clone(),
            file: Arc::new(state),
            sequential_from: AtomicU64::new(0),
            read_ahead_until: AtomicU64::new(0),
            fetch_from: AtomicU64::new(0),
            fetch_until: AtomicU64::new(0),
            fetch_window: AtomicU64::new(FIRST_FETCH_WINDOW),
        })
    }

    /// Fetches the data of files `paths` that this store lacks from its remotes, in one
    /// round of ranged GETs, and keeps it (as reads would, file by file): for a reader that
    /// knows what it reads next (`dsv.torch` calls it ahead of its reads). Directories and
    /// symlinks are skipped. Returns the bytes downloaded: 0, contacting nothing, when
    /// everything is here. Holds no store-wide lock across a request, as reads do not.
    /// Under a cache limit ([`crate::ops::cache::enforce_limit`]) it fetches only the first
    /// of `paths` that fit in the room left under the limit, and leaves the rest to their
    /// reads.
    ///
    /// # Errors
    /// [`Error::PathNotFound`]; [`Error::MissingObject`] when no remote holds a needed
    /// chunk; remote and corruption errors (naming the remote).
    pub fn prefetch(&self, paths: &[&str]) -> Result<u64> {
        // A store without remotes holds everything it can read: nothing to look up.
        if self
            .engine
            .catalogs
            .with(|catalog| catalog.remotes())?
            .is_empty()
        {
            return Ok(0);
        }
        let mut files = self.stat_all(paths)?;
        // Under a cache limit, a prefetch fetches only into the room left under it (the
        // first files asked for whose frames fit): it never makes room by evicting, since
        // what it would evict first is what an earlier prefetch fetched and the reader has
        // not read yet (a prefetcher running windows ahead of its reader would fetch
        // everything twice). The files left out are fetched by their reads, which evict.
        let room = match self.engine.fetcher.cache_limit(&self.engine)? {
            Some(limit) => {
                let held = self.engine.catalogs.with(crate::eviction::held_bytes)?;
                Some(limit.saturating_sub(held))
            }
            None => None,
        };
        if let Some(room) = room {
            // A first cut by the files' sizes (their frames hold at least as much, unless
            // compressed); the frames themselves are counted below.
            let mut total = 0u64;
            let keep = files
                .iter()
                .take_while(|entry| {
                    total = total.saturating_add(entry.size);
                    total <= room.saturating_mul(4)
                })
                .count();
            files.truncate(keep);
        }
        let mut chunks = Vec::new();
        for entry in &files {
            let engine = &self.engine;
            let found = engine
                .catalogs
                .with(|catalog| catalog.locate_file(&entry.id))?;
            match found {
                Some(location) if location.kind == crate::object::ObjectKind::Chunk => {}
                Some(location) => {
                    let frame = engine.frame(&location.frame)?;
                    let pack =
                        crate::pack::writer::pack_path(&engine.packs_dir, &location.frame.pack);
                    let map = crate::store::decode_file_map(
                        frame.raw(&location, &engine.packs_dir)?,
                        &entry.id,
                        entry.size,
                    )
                    .map_err(|detail| Error::corrupt(&pack, detail))?;
                    engine.catalogs.with(|catalog| {
                        for (chunk, _) in &map.chunks {
                            if !catalog.has_object(chunk, crate::object::ObjectKind::Chunk)? {
                                chunks.push(*chunk);
                            }
                        }
                        Ok(())
                    })?;
                }
                // A file of one chunk, or one whose map this store never got.
                None => chunks.push(entry.id),
            }
        }
        if let Some(room) = room {
            let fits = self.chunks_that_fit(&chunks, room)?;
            chunks.truncate(fits);
        }
        if chunks.is_empty() {
            return Ok(0);
        }
        let mut attempts = crate::transfer::fallback::Attempts::new();
        match self
            .engine
            .fetcher
            .fetch(&self.engine, &chunks, &mut attempts)
        {
            Ok(bytes) => Ok(bytes),
            Err(fetch::FetchError::Failed(e)) => Err(e),
            // Under a cache limit, the reads fetch what no index listed (they read the
            // indexes again themselves): the whole-file fetch below is not bounded.
            Err(fetch::FetchError::NotIndexed) if room.is_some() => Ok(0),
            Err(fetch::FetchError::NotIndexed) => {
                // Pushed since this store read the remotes' indexes, files whose map is
                // not here, or chunks only remotes that failed list: the fetch that reads
                // the indexes again and walks maps.
                let mut store = self.engine.lock_store();
                let files: Vec<(ObjectId, u64)> = files.iter().map(|e| (e.id, e.size)).collect();
                let transfer = crate::transfer::fetch_files_with(
                    &mut store,
                    &files,
                    self.engine.options.fetch_jobs,
                    &crate::progress::NoProgress,
                    &mut attempts,
                )?;
                Ok(transfer.bytes)
            }
        }
    }

    /// The non-empty regular files among `paths`.
    ///
    /// # Errors
    /// [`Error::PathNotFound`] when one does not exist; tree errors.
    /// How many of `chunks` (in order) a fetch can bring without its frames passing `room`
    /// bytes: their frames on the first remote in read order that lists them, each frame
    /// counted once (a chunk no remote lists counts nothing: the fetch finds it or not).
    fn chunks_that_fit(&self, chunks: &[ObjectId], room: u64) -> Result<usize> {
        let wanted: Vec<(ObjectId, crate::object::ObjectKind)> = chunks
            .iter()
            .map(|id| (*id, crate::object::ObjectKind::Chunk))
            .collect();
        let mut frame_of: HashMap<ObjectId, ((ObjectId, u64), u64)> = HashMap::new();
        self.engine.catalogs.with(|catalog| {
            for remote in catalog.remotes()? {
                let frames = crate::transfer::frames_of(catalog, remote.id, &wanted)?;
                for (key, (record, _, objects)) in frames {
                    for (id, _) in objects {
                        frame_of
                            .entry(id)
                            .or_insert((key, u64::from(record.stored_length)));
                    }
                }
            }
            Ok(())
        })?;
        let mut counted = HashSet::new();
        let mut total = 0u64;
        for (index, id) in chunks.iter().enumerate() {
            if let Some((key, length)) = frame_of.get(id)
                && counted.insert(*key)
            {
                total = total.saturating_add(*length);
            }
            if total > room {
                return Ok(index);
            }
        }
        Ok(chunks.len())
    }

    fn stat_all(&self, paths: &[&str]) -> Result<Vec<FlatEntry>> {
        let mut files = Vec::new();
        for path in paths {
            let entry = self.stat(path)?.ok_or_else(|| self.not_found(path))?;
            if matches!(entry.kind, FlatKind::File { .. }) && entry.size > 0 {
                files.push(entry);
            }
        }
        Ok(files)
    }

    fn not_found(&self, path: &str) -> Error {
        Error::PathNotFound {
            revision: self.revision.clone(),
            path: path.to_string(),
        }
    }
}

/// A version's identity (id, the dataset and revision it was opened as) and its path listing,
/// as plain data: no file descriptor, database connection, lock or lease. Made only by
/// [`VersionHandle::listing`], so it always describes the version it names; cheap to clone
/// (shared). A process keeps it across `fork()` (where the handle's connection and lease
/// must not be used) and opens the version again with [`ReadEngine::reopen`].
#[derive(Clone)]
pub struct VersionListing {
    inner: Arc<ListingData>,
}

struct ListingData {
    revision: String,
    id: ObjectId,
    dataset: String,
    listed: Arc<Listed>,
}

/// A version's entries in path order and an index from each path's hash to its position: a
/// lookup by path is one hash and one string compare (a binary search of a large listing
/// touches ~17 entries scattered in memory: measured 26% of a small-file read's time).
struct Listed {
    entries: Vec<FlatEntry>,
    /// Position by [`path_hash`]; [`Listed::SHARED`] where several paths share a hash (the
    /// binary search decides those). Built by the first lookup: a reader that only walks
    /// the listing (export, shards, a mount's directories) never pays for it.
    by_hash: std::sync::OnceLock<HashMap<u64, u32>>,
}

impl Listed {
    const SHARED: u32 = u32::MAX;

    fn new(entries: Vec<FlatEntry>) -> Listed {
        Listed {
            entries,
            by_hash: std::sync::OnceLock::new(),
        }
    }

    /// The index by path hash (empty when the entries are more than a `u32` counts).
    fn index(&self) -> &HashMap<u64, u32> {
        self.by_hash.get_or_init(|| {
            let mut by_hash = HashMap::new();
            if self.entries.len() < Self::SHARED as usize {
                by_hash.reserve(self.entries.len());
                for (i, entry) in self.entries.iter().enumerate() {
                    by_hash
                        .entry(path_hash(&entry.path))
                        .and_modify(|at| *at = Self::SHARED)
                        .or_insert(i as u32);
                }
            }
            by_hash
        })
    }

    /// The position of `path` in the listing.
    fn position(&self, path: &str) -> Option<usize> {
        let by_hash = self.index();
        if by_hash.is_empty() {
            // Not indexed (no entries, or more than a u32 counts).
            return crate::tree::position(&self.entries, path);
        }
        match by_hash.get(&path_hash(path)) {
            // Every listed path's hash is a key: none here, no such path.
            None => None,
            Some(&Self::SHARED) => crate::tree::position(&self.entries, path),
            Some(&at) => {
                let at = at as usize;
                (self.entries[at].path == path).then_some(at)
            }
        }
    }
}

/// A 64-bit hash of a path (SipHash-1-3 with fixed keys, as `std` gives it): the same in every
/// process, so a listing's index stays valid in a forked child.
fn path_hash(path: &str) -> u64 {
    use std::hash::Hasher;
    let mut hasher = std::hash::DefaultHasher::new();
    hasher.write(path.as_bytes());
    hasher.finish()
}

impl VersionListing {
    /// The version's id.
    pub fn id(&self) -> ObjectId {
        self.inner.id
    }

    /// The number of entries listed (directories, files and symlinks).
    pub fn len(&self) -> usize {
        self.inner.listed.entries.len()
    }

    /// True when the version has no entry at all.
    pub fn is_empty(&self) -> bool {
        self.inner.listed.entries.is_empty()
    }
}

/// Which files of a version to read: globs, a manifest, a shard, combined (the shard is
/// taken of the subset the globs and the manifest select).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct Selection {
    /// Glob patterns (`train/**`); a file matching any is selected. Empty: every file.
    pub include: Vec<String>,
    /// A manifest: exact paths (SageMaker's manifest files). Every one must be a file of the
    /// version.
    pub files_from: Option<Vec<String>>,
    /// Only this worker's shard ([`crate::shard`]).
    pub shard: Option<crate::shard::ShardSpec>,
}

impl Selection {
    /// Whether this selects every file.
    pub fn is_everything(&self) -> bool {
        self.include.is_empty() && self.files_from.is_none() && self.shard.is_none()
    }
}

impl VersionHandle {
    /// The files `selection` picks, in path order.
    ///
    /// # Errors
    /// [`Error::InvalidPattern`] for a glob that does not parse; [`Error::PathsNotFound`]
    /// naming every manifest path that is not a file of the version.
    pub fn select(&self, selection: &Selection) -> Result<Vec<&FlatEntry>> {
        selection.apply(self.entries()?, &self.revision)
    }
}

impl Selection {
    /// The files of `entries` (a version's flattened entries, as
    /// [`crate::tree::flatten_version`] gives them) this selection picks, in path order.
    /// `revision` names the version in errors.
    ///
    /// # Errors
    /// [`Error::InvalidPattern`] for a glob that does not parse; [`Error::PathsNotFound`]
    /// naming every manifest path that is not a file of the version.
    pub fn apply<'a>(
        &self,
        entries: &'a [FlatEntry],
        revision: &str,
    ) -> Result<Vec<&'a FlatEntry>> {
        let globs = if self.include.is_empty() {
            None
        } else {
            Some(glob_set(&self.include)?)
        };
        let is_file = |e: &&FlatEntry| matches!(e.kind, FlatKind::File { .. });
        let listed: Option<HashSet<&str>> = match &self.files_from {
            Some(paths) => {
                let files: HashSet<&str> = entries
                    .iter()
                    .filter(is_file)
                    .map(|e| e.path.as_str())
                    .collect();
                let missing: Vec<String> = paths
                    .iter()
                    .filter(|p| !files.contains(p.trim_matches('/')))
                    .cloned()
                    .collect();
                if !missing.is_empty() {
                    return Err(Error::PathsNotFound {
                        revision: revision.to_string(),
                        paths: missing,
                    });
                }
                Some(paths.iter().map(|p| p.trim_matches('/')).collect())
            }
            None => None,
        };
        if let Some(globs) = &globs {
            let mut matched = vec![false; self.include.len()];
            for entry in entries.iter().filter(is_file) {
                for index in globs.matches(&entry.path) {
                    matched[index] = true;
                }
            }
            check_all_matched(&self.include, &matched, revision)?;
        }
        let mut files: Vec<&FlatEntry> = entries
            .iter()
            .filter(is_file)
            .filter(|e| globs.as_ref().is_none_or(|g| g.is_match(&e.path)))
            .filter(|e| listed.as_ref().is_none_or(|l| l.contains(e.path.as_str())))
            .collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        if let Some(shard) = self.shard {
            let sizes: Vec<(&str, u64)> = files.iter().map(|e| (e.path.as_str(), e.size)).collect();
            let shards = crate::shard::assign(&sizes, shard.count);
            files = shards
                .get(shard.index as usize)
                .map(|members| members.iter().map(|i| files[*i]).collect())
                .unwrap_or_default();
        }
        Ok(files)
    }
}

/// Fails with [`Error::NothingMatches`] naming each of `patterns` whose `matched` flag is
/// false (an `--include` glob that selects no file of `revision` is a mistake to report, not
/// an empty result).
///
/// # Errors
/// [`Error::NothingMatches`].
pub(crate) fn check_all_matched(
    patterns: &[String],
    matched: &[bool],
    revision: &str,
) -> Result<()> {
    let unmatched: Vec<String> = patterns
        .iter()
        .zip(matched)
        .filter(|(_, m)| !**m)
        .map(|(p, _)| p.clone())
        .collect();
    if unmatched.is_empty() {
        Ok(())
    } else {
        Err(Error::NothingMatches {
            revision: revision.to_string(),
            patterns: unmatched,
        })
    }
}

/// The glob set of `patterns` (`/` matched only by `/`, as in `.gitignore`).
///
/// # Errors
/// [`Error::InvalidPattern`] naming a pattern that does not parse.
pub(crate) fn glob_set(patterns: &[String]) -> Result<globset::GlobSet> {
    let mut set = globset::GlobSetBuilder::new();
    for pattern in patterns {
        set.add(
            globset::GlobBuilder::new(pattern)
                .literal_separator(true)
                .build()
                .map_err(|e| Error::InvalidPattern {
                    pattern: pattern.clone(),
                    reason: e.to_string(),
                })?,
        );
    }
    set.build().map_err(|e| Error::InvalidPattern {
        pattern: patterns.join(" "),
        reason: e.to_string(),
    })
}

/// One shard of [`shards`]: its files and bytes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShardPlan {
    /// The shard's index (0-based).
    pub index: u32,
    /// Its files.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Their paths, in order.
    pub paths: Vec<String>,
}

/// Who reads what: the `count` shards (at most `crate::shard::MAX_SHARDS`) of the files
/// `selection` picks (its own `shard` is ignored), as `--shard I/N` assigns them:
/// [`shards_each`] collected.
///
/// # Errors
/// As [`shards_each`].
pub fn shards(
    engine: &ReadEngine,
    revision: &str,
    count: u32,
    selection: &Selection,
) -> Result<Vec<ShardPlan>> {
    let mut plans = Vec::new();
    shards_each(engine, revision, count, selection, |summary, paths| {
        plans.push(ShardPlan {
            paths: paths.map(str::to_string).collect(),
            ..summary
        });
        Ok(())
    })?;
    Ok(plans)
}

/// [`shards`] a shard at a time: hands `visit` each shard's plan (its `paths` left empty)
/// with an iterator over its paths in order, borrowed from the version's listing, so the
/// paths are never copied (the listing holds about 120 bytes a file; the assignment 8 more).
///
/// # Errors
/// As [`ReadEngine::version`] and [`VersionHandle::select`]; the first error of `visit`.
pub fn shards_each(
    engine: &ReadEngine,
    revision: &str,
    count: u32,
    selection: &Selection,
    mut visit: impl FnMut(ShardPlan, &mut dyn Iterator<Item = &str>) -> Result<()>,
) -> Result<()> {
    let version = engine.version(revision)?;
    let mut all = selection.clone();
    all.shard = None;
    let files = version.select(&all)?;
    let sizes: Vec<(&str, u64)> = files.iter().map(|e| (e.path.as_str(), e.size)).collect();
    drop(files);
    let count = count.clamp(1, crate::shard::MAX_SHARDS);
    let assigned = crate::shard::assign(&sizes, count);
    for index in 0..count {
        let members = assigned.get(index as usize).map_or(&[][..], Vec::as_slice);
        let plan = ShardPlan {
            index,
            files: members.len() as u64,
            bytes: members.iter().map(|i| sizes[*i].1).sum(),
            paths: Vec::new(),
        };
        visit(plan, &mut members.iter().map(|i| sizes[*i].0))?;
    }
    Ok(())
}

/// One file, open for reading at any offset. `Send + Sync`.
///
/// A file whose data is only on a remote serves its first byte after one ranged GET: reads
/// fetch the frames they need (and nothing else), and sequential reads start a prefetch that
/// ramps up as mountpoint-s3's does (a window of `FIRST_FETCH_WINDOW`, growing fourfold
/// each window up to `MAX_FETCH_WINDOW`, fetched as many ranged GETs at once). What is
/// fetched is stored in the local store, so the next reader reads it locally.
pub struct FileHandle {
    engine: Arc<Engine>,
    /// The version's lease, held as long as the file is open.
    _lease: Arc<Lease>,
    file: Arc<file::FileState>,
    /// Where the last read ended: a read that starts there is sequential.
    sequential_from: AtomicU64,
    /// How far read-ahead has been asked for (bytes of the file).
    read_ahead_until: AtomicU64,
    /// The last window the remote prefetch asked for, `[fetch_from, fetch_until)` (bytes of
    /// the file).
    fetch_from: AtomicU64,
    fetch_until: AtomicU64,
    /// The remote prefetch's next window, in bytes.
    fetch_window: AtomicU64,
}

/// How far past a sequential read the engine reads ahead, in bytes of the file: a few
/// ~1 MiB frames, decompressed in the background while the reader consumes the current one.
pub(crate) const READ_AHEAD_BYTES: u64 = 8 * 1024 * 1024;

/// The remote prefetch's first window, in bytes (then doubled each sequential step).
pub(crate) const FIRST_FETCH_WINDOW: u64 = 1024 * 1024;

/// The remote prefetch's largest window, in bytes.
pub(crate) const MAX_FETCH_WINDOW: u64 = 128 * 1024 * 1024;

/// Bytes of the file one background fetch covers, at most: its ranged GETs (of up to
/// [`FETCH_SPAN`] bytes each) run at once and land in one pack.
pub(crate) const PREFETCH_PIECE: u64 = 16 * 1024 * 1024;

/// Background fetches one engine runs at once, at most.
pub(crate) const MAX_PREFETCHES: usize = 8;

impl FileHandle {
    /// The file's size in bytes.
    pub fn size(&self) -> u64 {
        self.file.entry.size
    }

    /// The file's entry (path, size, id, executable bit).
    pub fn entry(&self) -> &FlatEntry {
        &self.file.entry
    }

    /// Reads up to `buf.len()` bytes at byte `offset` into `buf`; returns how many were read
    /// (0 at or past the end). Fills `buf` unless the file ends first. Chunks not here are
    /// fetched first; with a file map from a remote, every 64 KiB block the read touches is
    /// checked against the file's outboard before any byte is served.
    ///
    /// # Errors
    /// [`Error::Corrupt`] when stored bytes fail their check (naming the remote, for a
    /// block that does not hash to its value); remote errors; [`Error::Io`].
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let size = self.file.entry.size;
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let end = (offset + buf.len() as u64).min(size);
        let range = offset..end;
        self.file.prove(&self.engine, &range)?;
        self.file
            .make_local(&self.engine, self.file.chunk_range(&range))?;
        let want = (end - offset) as usize;
        let done = self.file.copy(&self.engine, offset, &mut buf[..want])?;
        let position = offset + done as u64;
        let sequential = self.sequential_from.swap(position, Ordering::Relaxed) == offset;
        if sequential {
            self.prefetch(position);
            self.read_ahead(position);
        } else if offset + READ_AHEAD_BYTES < self.fetch_from.load(Ordering::Relaxed)
            || offset > self.fetch_until.load(Ordering::Relaxed) + READ_AHEAD_BYTES
        {
            // A seek away from what was fetched ahead (not a request of a sequential reader
            // served out of order, as the kernel's parallel read-ahead through a mount does):
            // the prefetch starts small again.
            self.fetch_from.store(0, Ordering::Relaxed);
            self.fetch_until.store(0, Ordering::Relaxed);
            self.fetch_window
                .store(FIRST_FETCH_WINDOW, Ordering::Relaxed);
        }
        Ok(done)
    }

    /// After a sequential read that ended at `position`, on a file not all here: once the
    /// reader is inside the last window asked for (or has none), fetches the next window in
    /// the background, so that one whole window is in flight ahead of the reader. A window
    /// is fetched in pieces of up to [`PREFETCH_PIECE`] bytes (each ranged GETs of up to
    /// [`FETCH_SPAN`] bytes, at once) and grows fourfold for the next time, up to
    /// [`MAX_FETCH_WINDOW`], from [`FIRST_FETCH_WINDOW`] after a seek. Fourfold rather than
    /// twofold: a 200 MB remote-only `cat` took 0.82-0.91 s against 0.94-1.01 s; the price is
    /// that a short sequential run (a 1 MiB read as eight 128 KiB requests, a mount's reads
    /// without root) fetches about 5 MiB ahead.
    fn prefetch(&self, position: u64) {
        if self.file.is_local() {
            return;
        }
        let size = self.file.entry.size;
        let (from, until) = (
            self.fetch_from.load(Ordering::Relaxed),
            self.fetch_until.load(Ordering::Relaxed),
        );
        if until > position && position < from {
            return;
        }
        let window = self.fetch_window.load(Ordering::Relaxed);
        let from = until.max(position);
        let until = (from + window).min(size);
        if from >= until {
            return;
        }
        self.fetch_from.store(from, Ordering::Relaxed);
        self.fetch_until.store(until, Ordering::Relaxed);
        self.fetch_window
            .store((window * 4).min(MAX_FETCH_WINDOW), Ordering::Relaxed);
        let Ok(runtime) = crate::runtime::shared() else {
            return;
        };
        let mut start = from;
        while start < until {
            let end = (start + PREFETCH_PIECE).min(until);
            let Some(slot) = PrefetchSlot::take(&self.engine) else {
                // Not asked after all: the next sequential read asks again from here.
                self.fetch_until.store(start, Ordering::Relaxed);
                return;
            };
            let engine = self.engine.clone();
            let file = self.file.clone();
            let chunks = file.chunk_range(&(start..end));
            let task = BackgroundTask::start(&engine);
            runtime.spawn_blocking(move || {
                let _slot = slot;
                let _task = task;
                // A failure is the foreground read's to report, when it gets there. The
                // piece's blocks are proven here too (a map fetched from a remote), so the
                // reader finds them checked and hashes nothing.
                if file.make_local(&engine, chunks).is_ok() {
                    let _ = file.prove_ahead(&engine, &(start..end));
                }
            });
            start = end;
        }
    }

    /// After a sequential read that ended at `position`: loads the frames of the next
    /// [`READ_AHEAD_BYTES`] of the file that are here into the shared cache in the
    /// background (each frame once: the cache is single-flight, and a window already asked
    /// for is not asked again).
    fn read_ahead(&self, position: u64) {
        let size = self.file.entry.size;
        let until = (position + READ_AHEAD_BYTES).min(size);
        let asked = self.read_ahead_until.load(Ordering::Relaxed);
        // Ask again only once the reader has used half of the window asked for before.
        if asked >= until.saturating_sub(READ_AHEAD_BYTES / 2) && asked > position {
            return;
        }
        let from = asked.max(position);
        if from >= until {
            return;
        }
        self.read_ahead_until.store(until, Ordering::Relaxed);
        let Ok(runtime) = crate::runtime::shared() else {
            return;
        };
        let engine = self.engine.clone();
        let file = self.file.clone();
        let task = BackgroundTask::start(&engine);
        runtime.spawn_blocking(move || {
            let _task = task;
            // Frames not here yet are read ahead by a later step, once fetched. A failure
            // is the foreground read's to report, when it gets there.
            if file
                .locate_here(&engine, file.chunk_range(&(from..until)))
                .is_err()
            {
                return;
            }
            for frame in file.local_frames(&(from..until)) {
                if engine.preload(&frame).is_err() {
                    break;
                }
            }
        });
    }

    /// A reader over the whole file (or from `start`), for `std::io::copy` and friends.
    pub fn reader(&self, start: u64) -> FileReader<'_> {
        FileReader {
            file: self,
            position: start,
        }
    }
}

/// One of the engine's [`MAX_PREFETCHES`] background fetches, given back when dropped (also
/// when the fetch panics).
struct PrefetchSlot(Arc<Engine>);

impl PrefetchSlot {
    fn take(engine: &Arc<Engine>) -> Option<PrefetchSlot> {
        if engine.prefetching.fetch_add(1, Ordering::AcqRel) >= MAX_PREFETCHES {
            engine.prefetching.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(PrefetchSlot(engine.clone()))
    }
}

impl Drop for PrefetchSlot {
    fn drop(&mut self) {
        self.0.prefetching.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Sequential [`std::io::Read`] over a [`FileHandle`].
pub struct FileReader<'a> {
    file: &'a FileHandle,
    position: u64,
}

impl std::io::Read for FileReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self
            .file
            .read_at(self.position, buf)
            .map_err(std::io::Error::other)?;
        self.position += n as u64;
        Ok(n)
    }
}

/// A decompressed frame in the cache, with the objects of it already checked.
struct CachedFrame {
    bytes: Vec<u8>,
    /// Offsets (in the frame) of the objects checked against their ids so far.
    verified: Mutex<HashSet<u32>>,
}

impl CachedFrame {
    /// The bytes of the object at `location`, unchecked (objects keyed by a file id: file
    /// maps, checked by their readers, and outboards, proven when decoded).
    fn raw(&self, location: &ObjectLocation, packs_dir: &Path) -> Result<&[u8]> {
        let range = location.offset as usize..location.offset as usize + location.length as usize;
        self.bytes.get(range).ok_or_else(|| {
            Error::corrupt(
                crate::pack::writer::pack_path(packs_dir, &location.frame.pack),
                "an object lies outside its frame",
            )
        })
    }

    /// Chunk `id` at `location`, checked against its id the first time it is served.
    fn chunk(&self, id: &ObjectId, location: &ObjectLocation, packs_dir: &Path) -> Result<&[u8]> {
        let range = location.offset as usize..location.offset as usize + location.length as usize;
        let pack = || crate::pack::writer::pack_path(packs_dir, &location.frame.pack);
        let bytes = self.bytes.get(range).ok_or_else(|| {
            Error::corrupt(
                pack(),
                format!("object {} lies outside its frame", id.short()),
            )
        })?;
        let mut verified = self.verified.lock().unwrap_or_else(|e| e.into_inner());
        if !verified.contains(&location.offset) {
            if ObjectId::of(bytes) != *id {
                return Err(Error::corrupt(
                    pack(),
                    format!("object {} does not match its hash", id.short()),
                ));
            }
            verified.insert(location.offset);
        }
        Ok(bytes)
    }
}

/// Decompressed frames shared by every handle, weighted by their bytes: a `quick_cache`
/// cache (sharded by location; inserts and evictions O(1); past the byte budget it evicts
/// CLOCK-Pro style, frames read again kept over frames read once); a frame wanted by several
/// threads at once is loaded once (its placeholder guard: the others wait for it, or for its
/// failure, then try themselves).
struct FrameCache {
    frames: quick_cache::sync::Cache<FrameLocation, Arc<CachedFrame>, FrameBytes>,
    /// The last frame read that is too large for a shard of `frames` (more than half a
    /// shard's budget: a budget smaller than a frame, or one large object in its own frame),
    /// which `frames` would not keep: kept here, so a frame just read stays whatever its size.
    large: Mutex<Option<(FrameLocation, Arc<CachedFrame>)>>,
}

/// A cached frame weighs its bytes (at least 1: an item weighing 0 is never evicted).
#[derive(Clone)]
struct FrameBytes;

impl quick_cache::Weighter<FrameLocation, Arc<CachedFrame>> for FrameBytes {
    fn weight(&self, _: &FrameLocation, frame: &Arc<CachedFrame>) -> u64 {
        (frame.bytes.len() as u64).max(1)
    }
}

/// A slot of [`FrameCache::frames`] being filled by this thread (others wanting the frame
/// wait for it).
type FrameGuard<'a> = quick_cache::sync::PlaceholderGuard<
    'a,
    FrameLocation,
    Arc<CachedFrame>,
    FrameBytes,
    quick_cache::DefaultHashBuilder,
    quick_cache::sync::DefaultLifecycle<FrameLocation, Arc<CachedFrame>>,
>;

/// Builds the reference prefix of a delta frame (the raw bytes of its bases, checked):
/// [`Engine::delta_prefix`], or for frames that cannot be deltas, an error.
type PrefixOf<'a> = dyn FnMut(&FrameLocation) -> Result<Vec<u8>> + 'a;

thread_local! {
    /// Each thread's pack reader (open files, a zstd context) for cache misses.
    static PACKS: std::cell::RefCell<Option<(PathBuf, PackReader)>> = const { std::cell::RefCell::new(None) };
}

impl FrameCache {
    /// Frames are near 1 MiB: what the cache expects to hold, to size its shards.
    const TYPICAL_FRAME: u64 = 1024 * 1024;

    fn new(capacity: u64) -> FrameCache {
        let items = (capacity / Self::TYPICAL_FRAME).max(1);
        // Half the budget for frames read again (hot), half a queue of the others (cold, in
        // the order they came): a frame just put in is evicted only after the cold frames
        // put in before it, so the read that wanted it (or the read-ahead's reader) finds
        // it. (quick_cache's default, 97% hot, would evict a new frame at once whenever the
        // cold part held no other: reads here favour recency, and a frame no larger than
        // half a shard always fits beside a hot half.)
        let options = quick_cache::OptionsBuilder::new()
            .estimated_items_capacity(usize::try_from(items).unwrap_or(usize::MAX))
            .weight_capacity(capacity)
            .hot_allocation(0.5)
            .build()
            .expect("both capacities are set");
        FrameCache {
            frames: quick_cache::sync::Cache::with_options(
                options,
                FrameBytes,
                Default::default(),
                Default::default(),
            ),
            large: Mutex::new(None),
        }
    }

    fn used(&self) -> u64 {
        let large = self.large.lock().unwrap_or_else(|e| e.into_inner());
        self.frames.weight() + large.as_ref().map_or(0, |(_, f)| f.bytes.len() as u64)
    }

    /// The large frame kept beside the cache, when it is the one at `location`.
    fn large(&self, location: &FrameLocation) -> Option<Arc<CachedFrame>> {
        let large = self.large.lock().unwrap_or_else(|e| e.into_inner());
        match &*large {
            Some((at, frame)) if at == location => Some(frame.clone()),
            _ => None,
        }
    }

    /// Keeps `frame` (read into `guard`'s slot): in the cache, or beside it when too large.
    fn keep(&self, guard: FrameGuard<'_>, location: FrameLocation, frame: Arc<CachedFrame>) {
        if frame.bytes.len() as u64 > self.frames.shard_capacity() / 2 {
            *self.large.lock().unwrap_or_else(|e| e.into_inner()) = Some((location, frame));
            // Dropped unfilled: a thread waiting for it finds the frame in `large`.
            drop(guard);
        } else {
            // Fails only when the slot was removed meanwhile (nothing here removes one).
            let _ = guard.insert(frame);
        }
    }

    /// Reads and decompresses the frame at `location` with this thread's pack reader; a
    /// delta frame against the prefix `prefix_of` builds (before the reader is borrowed:
    /// building it reads other frames).
    fn load(
        packs_dir: &Path,
        location: &FrameLocation,
        prefix_of: &mut PrefixOf<'_>,
    ) -> Result<Arc<CachedFrame>> {
        let prefix = match location.compression {
            crate::pack::Compression::Delta => Some(prefix_of(location)?),
            _ => None,
        };
        let bytes = PACKS.with(|cell| {
            let mut cell = cell.borrow_mut();
            if cell.as_ref().is_none_or(|(dir, _)| dir != packs_dir) {
                *cell = Some((packs_dir.to_path_buf(), PackReader::new(packs_dir, 1)));
            }
            let (_, reader) = cell.as_mut().expect("just set");
            if let Some(prefix) = &prefix {
                reader.load_delta(location, prefix)?;
            }
            reader.frame(location)
        })?;
        Ok(Arc::new(CachedFrame {
            bytes,
            verified: Mutex::new(HashSet::new()),
        }))
    }

    /// Fills `guard`'s slot: from `large` when the frame is kept there, else read.
    fn fill(
        &self,
        guard: FrameGuard<'_>,
        packs_dir: &Path,
        location: &FrameLocation,
        prefix_of: &mut PrefixOf<'_>,
    ) -> Result<Arc<CachedFrame>> {
        if let Some(frame) = self.large(location) {
            return Ok(frame);
        }
        // On failure the guard is dropped unfilled: a waiting thread tries itself.
        let frame = Self::load(packs_dir, location, prefix_of)?;
        self.keep(guard, *location, frame.clone());
        Ok(frame)
    }

    /// Puts a frame whose objects at `checked` (offsets) have been checked already into the
    /// cache, unless it is there or being loaded.
    fn insert(&self, location: FrameLocation, bytes: Vec<u8>, checked: HashSet<u32>) {
        let zero = Some(std::time::Duration::ZERO);
        if let GuardResult::Guard(guard) = self.frames.get_value_or_guard(&location, zero) {
            if self.large(&location).is_some() {
                return;
            }
            let frame = Arc::new(CachedFrame {
                bytes,
                verified: Mutex::new(checked),
            });
            self.keep(guard, location, frame);
        }
    }

    /// Reads the frame at `location` into the cache unless it is there or being loaded
    /// (read-ahead).
    fn preload(
        &self,
        packs_dir: &Path,
        location: &FrameLocation,
        prefix_of: &mut PrefixOf<'_>,
    ) -> Result<()> {
        if self.frames.contains_key(location) {
            return Ok(());
        }
        let zero = Some(std::time::Duration::ZERO);
        if let GuardResult::Guard(guard) = self.frames.get_value_or_guard(location, zero) {
            self.fill(guard, packs_dir, location, prefix_of)?;
        }
        Ok(())
    }

    fn get(
        &self,
        packs_dir: &Path,
        location: &FrameLocation,
        prefix_of: &mut PrefixOf<'_>,
    ) -> Result<Arc<CachedFrame>> {
        // Another thread reading this frame: waits for it (or for its failure, then tries).
        match self.frames.get_value_or_guard(location, None) {
            GuardResult::Value(frame) => Ok(frame),
            GuardResult::Guard(guard) => self.fill(guard, packs_dir, location, prefix_of),
            // Not with no timeout; read uncached rather than fail.
            GuardResult::Timeout => Self::load(packs_dir, location, prefix_of),
        }
    }

    /// [`FrameCache::get`], waiting at most `wait` for another thread loading the frame;
    /// then it is read here, uncached.
    fn get_bounded(
        &self,
        packs_dir: &Path,
        location: &FrameLocation,
        wait: std::time::Duration,
        prefix_of: &mut PrefixOf<'_>,
    ) -> Result<Arc<CachedFrame>> {
        if let Some(frame) = self.large(location) {
            return Ok(frame);
        }
        match self.frames.get_value_or_guard(location, Some(wait)) {
            GuardResult::Value(frame) => Ok(frame),
            GuardResult::Guard(guard) => self.fill(guard, packs_dir, location, prefix_of),
            GuardResult::Timeout => Self::load(packs_dir, location, prefix_of),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    fn entry(path: &str) -> FlatEntry {
        FlatEntry {
            path: path.to_string(),
            kind: FlatKind::File { executable: false },
            size: 0,
            id: ObjectId([0; 32]),
        }
    }

    fn frame_at(n: u64, len: usize) -> (FrameLocation, Vec<u8>) {
        let location = FrameLocation {
            pack: ObjectId([7; 32]),
            offset: n,
            stored_length: len as u32,
            raw_length: len as u32,
            compression: crate::pack::Compression::None,
        };
        (location, vec![(n % 251) as u8; len])
    }

    /// For frames that are not deltas: never called.
    fn no_bases() -> impl FnMut(&FrameLocation) -> Result<Vec<u8>> {
        |_| panic!("no delta frame here")
    }

    /// No pack is there: a frame that `get` returns came from the cache.
    fn no_packs() -> PathBuf {
        PathBuf::from("/nonexistent/dsv-frame-cache-test")
    }

    #[test]
    fn the_frame_cache_holds_its_budget_in_bytes() {
        const MIB: u64 = 1024 * 1024;
        let cache = FrameCache::new(8 * MIB);
        // Many more frames than fit, of several sizes: what is held never exceeds the
        // budget, and is counted in bytes.
        let size = |n: u64| [256 * 1024, 512 * 1024, 64 * 1024][n as usize % 3];
        for n in 0..200u64 {
            let (location, bytes) = frame_at(n, size(n));
            cache.insert(location, bytes, HashSet::new());
            assert!(cache.used() <= 8 * MIB, "{} bytes held", cache.used());
            // The frame just put in stays (the read that waits for it finds it).
            assert!(
                cache.frames.contains_key(&location),
                "frame {n} evicted at once"
            );
            // Some are read again.
            if n % 5 == 0 {
                cache.get(&no_packs(), &location, &mut no_bases()).unwrap();
            }
        }
        assert!(cache.used() >= 4 * MIB, "only {} bytes held", cache.used());
        // The frame just put in is served from memory.
        let (last, bytes) = frame_at(199, size(199));
        let frame = cache.get(&no_packs(), &last, &mut no_bases()).unwrap();
        assert_eq!(frame.bytes, bytes);
        // A frame evicted long ago is read again (and here, with no pack, fails).
        assert!(
            cache
                .get(&no_packs(), &frame_at(0, size(0)).0, &mut no_bases())
                .is_err()
        );
        // Inserting what is there already changes nothing.
        let before = cache.used();
        cache.insert(last, vec![1; size(199)], HashSet::new());
        assert_eq!(cache.used(), before);
        assert_eq!(
            cache
                .get(&no_packs(), &last, &mut no_bases())
                .unwrap()
                .bytes,
            bytes
        );
    }

    #[test]
    fn the_frame_cache_inserts_in_constant_time_past_its_budget() {
        // 100,000 small frames through a cache that holds 1,000: a scan of the cache on
        // each insert past the budget (the hand-written LRU) would take 10^8 steps.
        let cache = FrameCache::new(1024 * 1024);
        for n in 0..100_000u64 {
            let (location, bytes) = frame_at(n, 1024);
            cache.insert(location, bytes, HashSet::new());
        }
        assert!(cache.used() <= 1024 * 1024);
        let (last, bytes) = frame_at(99_999, 1024);
        assert_eq!(
            cache
                .get(&no_packs(), &last, &mut no_bases())
                .unwrap()
                .bytes,
            bytes
        );
    }

    #[test]
    fn a_frame_larger_than_the_budget_stays_until_the_next_one() {
        let cache = FrameCache::new(1024 * 1024);
        let (big, bytes) = frame_at(1, 3 * 1024 * 1024);
        cache.insert(big, bytes.clone(), HashSet::from([0]));
        assert_eq!(cache.used(), 3 * 1024 * 1024);
        let frame = cache.get(&no_packs(), &big, &mut no_bases()).unwrap();
        assert_eq!(frame.bytes, bytes);
        assert!(frame.verified.lock().unwrap().contains(&0));
        let (other, _) = frame_at(2, 2 * 1024 * 1024);
        cache.insert(other, vec![2; 2 * 1024 * 1024], HashSet::new());
        assert_eq!(cache.used(), 2 * 1024 * 1024);
        assert!(cache.get(&no_packs(), &big, &mut no_bases()).is_err());
        assert!(cache.get(&no_packs(), &other, &mut no_bases()).is_ok());
    }

    #[test]
    fn the_path_index_finds_what_the_binary_search_finds() {
        let mut paths = ["a", "a/b", "a/b/c.txt", "a.txt", "b", "b/x", "c d/é.png"];
        paths.sort_by(|a, b| crate::walk::path_order(a, b));
        let listed = Listed::new(paths.iter().map(|p| entry(p)).collect());
        for (i, path) in paths.iter().enumerate() {
            assert_eq!(listed.position(path), Some(i), "{path}");
        }
        for absent in ["", "a/", "a/b/c", "zz", "b/x/y", "A"] {
            assert_eq!(listed.position(absent), None, "{absent}");
        }
        // A hash two paths share is decided by the binary search.
        let mut shared = Listed::new(paths.iter().map(|p| entry(p)).collect());
        let b = path_hash("b");
        shared.index();
        shared.by_hash.get_mut().unwrap().insert(b, Listed::SHARED);
        assert_eq!(shared.position("b"), paths.iter().position(|p| *p == "b"));
        assert_eq!(Listed::new(Vec::new()).position("a"), None);
    }

    #[test]
    fn handles_are_send_and_sync() {
        assert_send_sync::<ReadEngine>();
        assert_send_sync::<VersionHandle>();
        assert_send_sync::<FileHandle>();
    }
}
