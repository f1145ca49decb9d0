//! What the read engine needs from the store without a store-wide lock: read-only catalog
//! connections for every thread ([`CatalogPool`]), and chunks fetched from remotes on demand
//! ([`Fetcher`]), frame by frame.
//!
//! A fetch holds no lock across a network round trip that a read of another file waits on.
//! Each remote frame maps to one of [`STRIPES`] lock files (`.dsv/locks/fetch-NNN.lock`); a
//! fetch takes the locks of its frames in ascending order (so two fetches never wait on each
//! other in a cycle), checks again which frames are still missing (another thread or process
//! may have stored them meanwhile), downloads those, stores them in a new local pack and
//! records it, then lets go. Every frame is therefore downloaded once per machine however
//! many threads and processes want it, while fetches of other frames run beside it. The
//! store lock is taken by the short catalog transaction that records a pack, and by the
//! rarer steps that read a remote's pack listing (a remote never listed, or indexes read
//! again) or fetch a file map alone: those hold it across their requests.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use crate::catalog::Catalog;
use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::pack::FrameRecord;
use crate::pack_sink::PackSink;
use crate::remote::Remote;
use crate::store::{SharedDataLock, Store, StripeLock};
use crate::transfer as sync;
use crate::transfer::fallback::Attempts;

/// Read-only connections to the store's catalog, one per thread that reads at a time:
/// taken for one query or a few, then put back. No lock is held while a connection is used.
pub(super) struct CatalogPool {
    path: PathBuf,
    idle: Mutex<Vec<Catalog>>,
}

/// Connections kept idle for reuse; more may be open while many threads read at once.
const IDLE_CONNECTIONS: usize = 16;

impl CatalogPool {
    pub(super) fn new(path: PathBuf) -> CatalogPool {
        CatalogPool {
            path,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Runs `work` with a connection of this thread's own.
    pub(super) fn with<T>(&self, work: impl FnOnce(&Catalog) -> Result<T>) -> Result<T> {
        // SQLite's own mutexes (its allocator's, its file system's) are process-wide: a
        // `fork()` while another thread is inside SQLite gives the child a mutex no thread
        // will ever release, and the child's first catalog open waits for ever. So catalog
        // work counts as a fetch for `before_fork`.
        let _gate = InFetch::enter();
        let idle = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let catalog = match idle {
            Some(catalog) => catalog,
            None => Catalog::open_reader(&self.path)?,
        };
        let result = work(&catalog);
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < IDLE_CONNECTIONS {
            idle.push(catalog);
        }
        result
    }
}

/// The fetches of this process holding lock files now, and whether a `fork()` is waiting
/// for them ([`before_fork`]).
struct ForkGate {
    fetches: usize,
    forking: bool,
}

static FORK_GATE: Mutex<ForkGate> = Mutex::new(ForkGate {
    fetches: 0,
    forking: false,
});
static FORK_GATE_CHANGED: Condvar = Condvar::new();

/// A fetch of this process under way (while it may hold lock files), or catalog work (while
/// it may be inside SQLite). Entries nest on a thread: only the outermost waits for a fork
/// and counts (an inner one waiting would wait for itself).
struct InFetch;

thread_local! {
    /// How many [`InFetch`] this thread holds.
    static IN_FETCH_DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl InFetch {
    fn enter() -> InFetch {
        let depth = IN_FETCH_DEPTH.with(|d| d.replace(d.get() + 1));
        if depth > 0 {
            return InFetch;
        }
        let mut gate = FORK_GATE.lock().unwrap_or_else(|e| e.into_inner());
        while gate.forking {
            gate = FORK_GATE_CHANGED
                .wait(gate)
                .unwrap_or_else(|e| e.into_inner());
        }
        gate.fetches += 1;
        InFetch
    }
}

impl Drop for InFetch {
    fn drop(&mut self) {
        let depth = IN_FETCH_DEPTH.with(|d| {
            d.set(d.get() - 1);
            d.get()
        });
        if depth > 0 {
            return;
        }
        let mut gate = FORK_GATE.lock().unwrap_or_else(|e| e.into_inner());
        gate.fetches -= 1;
        FORK_GATE_CHANGED.notify_all();
    }
}

/// Call just before `fork()` in a process that reads through a [`super::ReadEngine`]: waits
/// until no fetch of this process holds a lock file, and keeps new fetches from starting
/// until [`after_fork`]. A child forked while a fetch held a `flock` would inherit the lock
/// and hold it for its whole life: its own fetch of that frame would wait forever, and so
/// would every other process's. The Python package calls both around every fork
/// (`os.register_at_fork`).
pub fn before_fork() {
    let mut gate = FORK_GATE.lock().unwrap_or_else(|e| e.into_inner());
    gate.forking = true;
    while gate.fetches > 0 {
        gate = FORK_GATE_CHANGED
            .wait(gate)
            .unwrap_or_else(|e| e.into_inner());
    }
}

/// Call after `fork()`, in the parent and in the child: lets fetches start again.
pub fn after_fork() {
    let mut gate = FORK_GATE.lock().unwrap_or_else(|e| e.into_inner());
    gate.forking = false;
    FORK_GATE_CHANGED.notify_all();
}

/// One entry of [`sync::FramesOf`]: a remote frame by (pack, offset), with its catalog row
/// and the wanted objects in it.
type FrameEntry = (
    (ObjectId, u64),
    (FrameRecord, i64, Vec<(ObjectId, ObjectKind)>),
);

thread_local! {
    /// The packs of this thread's latest fetch, each open with a shared `flock`: a cache
    /// limit's eviction passes over them (`crate::eviction`), in this process or another,
    /// until this thread fetches again.
    static HELD_PACKS: std::cell::RefCell<Vec<std::fs::File>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Lock files that remote frames are spread over (by a hash of pack and offset).
pub const STRIPES: u64 = 4096;

/// The longest ranged GET a read makes, in bytes: a few frames. Small enough that a reader
/// waiting on a frame another fetch holds waits for little more than that frame.
pub const FETCH_SPAN: u64 = 4 * 1024 * 1024;

/// Frames one fetch locks and downloads at a time, at most (each holds a lock file open).
pub const FETCH_BATCH_FRAMES: usize = 64;

/// Fetches chunks from the store's remotes for the read engine.
pub(super) struct Fetcher {
    /// The store's `.dsv` directory.
    root: PathBuf,
    packs_dir: PathBuf,
    temp_dir: PathBuf,
    /// Remotes opened so far, by name (an opened remote keeps its HTTP connections).
    remotes: Mutex<HashMap<String, Arc<Remote>>>,
    /// Remotes whose pack listing this fetcher read because the store had none of it (a
    /// remote added since the clone, never fetched from): read once, on first use.
    listed: Mutex<HashSet<String>>,
    jobs: usize,
}

/// Why [`Fetcher::fetch`] could not fetch everything asked.
pub(super) enum FetchError {
    /// No remote's pack indexes (as this store last read them) list these chunks: the
    /// caller falls back to a fetch that reads the remotes' indexes again.
    NotIndexed,
    /// Anything else.
    Failed(Error),
}

impl From<Error> for FetchError {
    fn from(e: Error) -> Self {
        FetchError::Failed(e)
    }
}

impl Fetcher {
    pub(super) fn new(store: &Store, jobs: usize) -> Fetcher {
        Fetcher {
            root: store.root().to_path_buf(),
            packs_dir: store.packs_dir(),
            temp_dir: store.temp_dir(),
            remotes: Mutex::new(HashMap::new()),
            listed: Mutex::new(HashSet::new()),
            jobs,
        }
    }

    /// Makes `chunks` local: downloads the frames holding those this store lacks from the
    /// remotes whose indexes list them, in read order (a remote that fails is passed over
    /// and remembered in `attempts`; one that failed lately is asked last), stores and
    /// records them. `store` is locked only to record. Returns the bytes downloaded.
    ///
    /// # Errors
    /// [`FetchError::NotIndexed`] when some chunk is on no remote's index, or only on
    /// remotes that failed (the caller reads the indexes again and makes the error); else
    /// I/O and catalog errors. A failed download stores nothing of it.
    pub(super) fn fetch(
        &self,
        engine: &super::Engine,
        chunks: &[ObjectId],
        attempts: &mut Attempts,
    ) -> std::result::Result<u64, FetchError> {
        let catalogs = &engine.catalogs;
        let in_fetch = InFetch::enter();
        let mut downloaded = 0u64;
        // The packs this fetch writes: its reader is about to read them, so a cache limit
        // never evicts them in this call.
        let mut written = HashSet::new();
        let mut held = Vec::new();
        // Chunks another fetch of this engine is downloading now are waited for, not
        // fetched again (below); those landed already are here.
        let (claim, others) = engine.landing.claim(chunks);
        let mut remaining: Vec<(ObjectId, ObjectKind)> = claim
            .chunks()
            .iter()
            .map(|id| (*id, ObjectKind::Chunk))
            .collect();
        let records = attempts.order(catalogs.with(|catalog| catalog.remotes())?);
        let last = records.len().saturating_sub(1);
        for (at, record) in records.into_iter().enumerate() {
            // A stall is a failure only while another remote can serve instead.
            let others_remain = at < last;
            if remaining.is_empty() {
                break;
            }
            let mut by_frame = catalogs
                .with(|catalog| frames_with_bases(engine, catalog, record.id, &remaining))?;
            if by_frame.is_empty() && self.never_listed(engine, &record)? {
                // A remote whose packs this store never listed (added with `--first` after
                // a clone from another): read its listing now, so the read order holds from
                // the first read, not only after a `dsv fetch`.
                if let Some(remote) = attempts.open(&record.name, || self.remote(&record))? {
                    remote.set_others_remain(others_remain);
                    let refreshed = attempts.attempt(&record.name, || {
                        sync::refresh_indexes(&mut engine.lock_store(), &record, &remote, self.jobs)
                    })?;
                    // Taken as listed only once it was: a listing that failed is read
                    // again by a later read.
                    if refreshed.is_some() {
                        self.listed
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .insert(record.name.clone());
                    }
                }
                by_frame = catalogs
                    .with(|catalog| frames_with_bases(engine, catalog, record.id, &remaining))?;
            }
            if !by_frame.is_empty()
                && let Some(remote) = attempts.open(&record.name, || self.remote(&record))?
            {
                remote.set_others_remain(others_remain);
                let got = attempts.attempt(&record.name, || {
                    self.fetch_frames(
                        engine,
                        &remote,
                        by_frame.into_iter().collect(),
                        &mut written,
                        &mut held,
                    )
                })?;
                if got.is_some_and(|bytes| bytes > 0) {
                    attempts.served(&record.name);
                }
                downloaded += got.unwrap_or(0);
            }
            remaining = catalogs.with(|catalog| {
                let mut still = Vec::new();
                for (id, kind) in remaining {
                    if engine.landing.locate(&id).is_none() && !catalog.has_object(&id, kind)? {
                        still.push((id, kind));
                    }
                }
                Ok(still)
            })?;
        }
        drop(claim);
        if !written.is_empty() {
            // This thread's reader holds what it just fetched until it fetches again.
            HELD_PACKS.with(|cell| *cell.borrow_mut() = held);
            self.enforce_limit(engine, &written)?;
        }
        let mut missing = !remaining.is_empty();
        if !others.is_empty() {
            // Fetched by another thread of this engine: landed when it is done, or failed
            // (then fetched here, now).
            engine.landing.wait_for(&others);
            let again = catalogs.with(|catalog| {
                let mut again = Vec::new();
                for id in others {
                    if engine.landing.locate(&id).is_none()
                        && !catalog.has_object(&id, ObjectKind::Chunk)?
                    {
                        again.push(id);
                    }
                }
                Ok(again)
            })?;
            if !again.is_empty() {
                drop(in_fetch);
                match self.fetch(engine, &again, attempts) {
                    Ok(bytes) => downloaded += bytes,
                    Err(FetchError::NotIndexed) => missing = true,
                    Err(e) => return Err(e),
                }
            }
        }
        if missing {
            Err(FetchError::NotIndexed)
        } else {
            Ok(downloaded)
        }
    }

    /// Downloads frames `by_frame` of `remote` that are still missing, a batch at a time
    /// under their stripe locks; returns the bytes downloaded.
    fn fetch_frames(
        &self,
        engine: &super::Engine,
        remote: &Remote,
        by_frame: Vec<FrameEntry>,
        written: &mut HashSet<ObjectId>,
        held: &mut Vec<std::fs::File>,
    ) -> Result<u64> {
        let catalogs = &engine.catalogs;
        let mut downloaded = 0;
        // Plain frames first: when more than a batch is fetched, the bases of the delta
        // frames (plain, or deltas themselves) come in an earlier batch or the same one,
        // never a later one, for the common chains of one level.
        let mut by_frame = by_frame;
        by_frame.sort_by_key(|((pack, offset), (frame, ..))| {
            (
                frame.compression == crate::pack::Compression::Delta,
                *pack,
                *offset,
            )
        });
        // One check of deltas across the batches: a base may arrive in an earlier batch than
        // its delta (stored, but not yet recorded when the next batch is checked), or a delta
        // wait for a base in a later one; every base a delta of this fetch names is kept
        // until the deltas naming it are checked.
        let mut bases = sync::DeltaBases::carried(Some(&self.packs_dir), &self.temp_dir);
        catalogs.with(|catalog| {
            for (_, (frame, row, _)) in &by_frame {
                if frame.compression == crate::pack::Compression::Delta {
                    bases.expect(catalog.remote_frame_bases(*row)?);
                }
            }
            Ok(())
        })?;
        // A bounded number of lock files held at once (each an open descriptor).
        for batch in by_frame.chunks(FETCH_BATCH_FRAMES) {
            // The data lock, shared: no gc runs between storing and recording.
            let data = SharedDataLock::take_at(&self.root)?;
            let stripes = self.lock_stripes(&data, batch.iter().map(|(key, _)| key))?;
            // Again under the locks: another thread or process may have fetched some.
            let still = catalogs.with(|catalog| {
                let mut still = BTreeMap::new();
                for (key, (frame, row, objects)) in batch {
                    for (id, kind) in objects {
                        if !catalog.has_object(id, *kind)? {
                            still.insert(*key, (*frame, *row));
                            break;
                        }
                    }
                }
                Ok(still)
            })?;
            if !still.is_empty() {
                let batch = Batch {
                    frames: still,
                    bases: &mut bases,
                };
                downloaded +=
                    self.download(engine, remote, batch, written, held, (data, stripes))?;
            }
        }
        // A delta still waiting for a base: the remote lacks it (or the bases make a cycle).
        bases.finish()?;
        Ok(downloaded)
    }

    /// Downloads `frames` of `remote` (whose stripe locks the caller holds, in `locks`) into
    /// a new pack, lands it for this engine's readers, then records it in a group commit and
    /// lets `locks` go (see [`super::landing`]); returns the bytes downloaded.
    ///
    /// # Errors
    /// Download and check errors (nothing stored); the recording's I/O and catalog errors.
    fn download(
        &self,
        engine: &super::Engine,
        remote: &Remote,
        batch: Batch<'_>,
        written: &mut HashSet<ObjectId>,
        held: &mut Vec<std::fs::File>,
        locks: (SharedDataLock, Vec<StripeLock>),
    ) -> Result<u64> {
        let Batch { frames, bases } = batch;
        let spans = sync::spans(frames, FETCH_SPAN);
        let sink = PackSink::new(&self.packs_dir, &self.temp_dir);
        let mut raws = Vec::new();
        let fetched = engine.catalogs.with(|catalog| {
            sync::fetch_spans(
                catalog,
                remote,
                &spans,
                self.jobs,
                (&sink, Some(&mut raws)),
                bases,
                &crate::progress::NoProgress,
            )
        });
        let transfer = match fetched {
            Ok(transfer) => transfer,
            Err(e) => {
                sink.abandon(&engine.lock_store());
                return Err(e);
            }
        };
        let sealed = sink.finish()?;
        written.extend(sealed.iter().map(|pack| pack.id));
        // Held (a shared flock) before the data lock goes: no eviction runs in between.
        for pack in &sealed {
            let path = crate::pack::writer::pack_path(&self.packs_dir, &pack.id);
            if let Ok(file) = std::fs::File::open(&path)
                && file.lock_shared().is_ok()
            {
                held.push(file);
            }
        }
        // The frames just checked go into the frame cache as they are, every object in them
        // checked: the read that waits for them neither reads them back nor hashes them
        // again. The packs hold them in the order they were added. Then their chunks land:
        // this engine's readers locate them before the catalog records them.
        let mut raws = raws.into_iter();
        let mut places = Vec::new();
        let mut paired = true;
        // Each index read back once: for the places here and for the recording below.
        let indexes = sealed
            .iter()
            .map(|pack| pack.read_index(&self.packs_dir))
            .collect::<Result<Vec<_>>>()?;
        for index in &indexes {
            let locations: Vec<crate::pack::FrameLocation> = index
                .frames
                .iter()
                .map(|frame| crate::pack::FrameLocation {
                    pack: index.id,
                    offset: frame.offset,
                    stored_length: frame.stored_length,
                    raw_length: frame.raw_length,
                    compression: frame.compression,
                })
                .collect();
            for (number, location) in locations.iter().enumerate() {
                let Some(raw) = raws.next() else {
                    break;
                };
                // One raw buffer per frame, in order (a delta frame's decoded bytes too); a
                // length that disagrees means the pairing is off: nothing more is cached
                // as checked (the reads read the pack and check it).
                if !paired || raw.len() != location.raw_length as usize {
                    paired = false;
                    break;
                }
                let checked = index
                    .objects
                    .iter()
                    .filter(|o| o.frame as usize == number)
                    .map(|o| o.offset)
                    .collect();
                engine.cache.insert(*location, raw, checked);
            }
            places.extend(
                index
                    .objects
                    .iter()
                    .filter(|o| o.kind == ObjectKind::Chunk)
                    .filter_map(|o| {
                        Some((
                            o.id,
                            crate::catalog::ObjectLocation {
                                kind: o.kind,
                                frame: *locations.get(o.frame as usize)?,
                                offset: o.offset,
                                length: o.length,
                            },
                        ))
                    }),
            );
        }
        let chunks = places.iter().map(|(id, _)| *id).collect();
        engine.landing.land(places);
        let (data, stripes) = locks;
        // Threads waiting for these chunks read them landed now, while this thread records
        // the pack (with other fetches' packs, in one transaction).
        engine.recorder.record_and_wait(super::landing::Recording {
            packs: indexes,
            remote: remote.name().to_string(),
            chunks,
            _stripes: stripes,
            _data: data,
        })?;
        Ok(transfer.bytes)
    }

    /// The cache limit this engine reads under: [`super::ReadOptions::cache_limit`], else
    /// the store's setting (read from its settings file each time).
    pub(super) fn cache_limit(&self, engine: &super::Engine) -> Result<Option<u64>> {
        match engine.options.cache_limit {
            Some(limit) => Ok(Some(limit)),
            None => Ok(crate::config::Config::load(&self.root)?.cache.limit),
        }
    }

    /// Applies the store's cache limit (`dsv cache limit`, read from its settings each time,
    /// so a limit set while a reader runs holds from its next fetch) after a fetch that
    /// wrote packs `written`: evicts least-recently-used packs of data a remote holds,
    /// never those (see [`crate::eviction::enforce_limit`]). Called with no lock held.
    fn enforce_limit(&self, engine: &super::Engine, written: &HashSet<ObjectId>) -> Result<()> {
        let Some(limit) = self.cache_limit(engine)? else {
            return Ok(());
        };
        if engine.catalogs.with(crate::eviction::held_bytes)? <= limit {
            return Ok(());
        }
        // The store's mutex before the data lock, as every reader path takes them (a map's
        // fetch, `fetch_files`, a prefetch's index refresh hold the mutex and then wait for
        // the data lock shared): taken the other way round, an eviction holding the data lock
        // exclusive would wait on the mutex while such a reader holds it waiting on the data
        // lock, for ever. The data lock's attempt is bounded (`take_eviction_lock` gives up
        // after 0.5 s and this round is skipped), so holding the mutex meanwhile is too.
        let mut store = engine.lock_store();
        // Only what the remotes list now is evictable (their listings read again first).
        if !crate::eviction::refresh_remote_listings(&mut store)? {
            return Ok(());
        }
        let Some(data) = crate::eviction::take_eviction_lock(&self.root)? else {
            return Ok(());
        };
        crate::eviction::enforce_limit_under(&mut store, &data, limit, written)?;
        Ok(())
    }

    /// Whether this store holds no pack listing of `record` and this fetcher has not read
    /// it yet (the caller marks it read in `listed` once a listing succeeded: once per
    /// remote and fetcher).
    fn never_listed(
        &self,
        engine: &super::Engine,
        record: &crate::catalog::RemoteRecord,
    ) -> Result<bool> {
        if self
            .listed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&record.name)
        {
            return Ok(false);
        }
        let known = engine
            .catalogs
            .with(|catalog| catalog.remote_packs(record.id))?;
        Ok(known.is_empty())
    }

    /// The opened remote of `record` (opened once, then shared).
    fn remote(&self, record: &crate::catalog::RemoteRecord) -> Result<Arc<Remote>> {
        let mut remotes = self.remotes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(remote) = remotes.get(&record.name) {
            return Ok(remote.clone());
        }
        let remote = Arc::new(Remote::open(record)?);
        remotes.insert(record.name.clone(), remote.clone());
        Ok(remote)
    }

    /// Takes the stripe locks of `frames`, in ascending order.
    fn lock_stripes<'a>(
        &self,
        data: &SharedDataLock,
        frames: impl Iterator<Item = &'a (ObjectId, u64)>,
    ) -> Result<Vec<StripeLock>> {
        let stripes: BTreeSet<u64> = frames.map(|(pack, offset)| stripe(pack, *offset)).collect();
        let dir = self.root.join("locks");
        std::fs::create_dir_all(&dir).at(&dir)?;
        stripes
            .into_iter()
            .map(|n| StripeLock::take(&stripe_path(&dir, n), data))
            .collect()
    }
}

/// The remote frames holding those of `wanted` that this store lacks and remote `remote`
/// holds ([`sync::frames_of`]), and the frames holding the bases of their delta frames,
/// transitively, as the remote's index (this store's copy of it) lists them: so one fetch
/// downloads a delta frame with everything needed to decode it, in one round of ranged GETs,
/// not one round per level of the chain. A base here already (or landed by a fetch of this
/// engine) ends the walk there: its own bases are here too.
///
/// # Errors
/// [`Error::Catalog`]; [`Error::Corrupt`] for a chain the remote's index lists deeper than
/// [`crate::pack::format::MAX_DELTA_DEPTH`] (a cycle).
fn frames_with_bases(
    engine: &super::Engine,
    catalog: &Catalog,
    remote: i64,
    wanted: &[(ObjectId, ObjectKind)],
) -> Result<sync::FramesOf> {
    let mut all = wanted.to_vec();
    let mut seen: HashSet<ObjectId> = wanted.iter().map(|(id, _)| *id).collect();
    let mut level: Vec<ObjectId> = wanted
        .iter()
        .filter(|(_, kind)| *kind == ObjectKind::Chunk)
        .map(|(id, _)| *id)
        .collect();
    let mut depth = 0;
    while !level.is_empty() {
        let mut next = Vec::new();
        for id in &level {
            for base in catalog.remote_chunk_bases(remote, id)? {
                if seen.insert(base)
                    && engine.landing.locate(&base).is_none()
                    && !catalog.has_object(&base, ObjectKind::Chunk)?
                {
                    all.push((base, ObjectKind::Chunk));
                    next.push(base);
                }
            }
        }
        if !next.is_empty() {
            depth += 1;
            if depth > crate::pack::format::MAX_DELTA_DEPTH {
                return Err(Error::corrupt(
                    catalog.path(),
                    format!(
                        "the remote's index lists delta chains from chunk {} deeper than {} levels (a cycle?)",
                        next[0].short(),
                        crate::pack::format::MAX_DELTA_DEPTH
                    ),
                ));
            }
        }
        level = next;
    }
    sync::frames_of(catalog, remote, &all)
}

/// The stripe of a remote frame.
fn stripe(pack: &ObjectId, offset: u64) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&pack.0[..8]);
    // The pack id is a hash already; frames of one pack spread by their offset.
    (u64::from_le_bytes(bytes) ^ offset.wrapping_mul(0x9E37_79B9_7F4A_7C15)) % STRIPES
}

fn stripe_path(dir: &Path, stripe: u64) -> PathBuf {
    dir.join(format!("fetch-{stripe:03x}.lock"))
}

/// One batch of a fetch: the frames still missing, and the check of deltas shared by the
/// fetch's batches.
struct Batch<'b> {
    frames: BTreeMap<(ObjectId, u64), (FrameRecord, i64)>,
    bases: &'b mut sync::DeltaBases,
}
