//! One open file's layout (its chunks, where each is stored) and how its bytes are proven.
//!
//! Chunks are located lazily: opening a file of 10,000 chunks reads its file map, not
//! 10,000 catalog rows, and a chunk that is only on a remote is fetched when a read (or the
//! prefetcher) first needs it ([`FileState::make_local`]).
//!
//! Proof: every chunk is checked against its id when first served from a frame. That proves
//! the file only if the file map lists the right chunks, which a map written here (or proven
//! before) does. A map fetched from a remote is proven block by block instead: each 64 KiB
//! block is checked against the file's outboard ([`crate::outboard`]) before any byte of it
//! is served, so a remote-only file serves its first byte after fetching one frame. When
//! every block has passed, the map is recorded as proven. A remote map without an outboard
//! (data pushed before outboards) is proven whole at open, as before.

use crate::transfer::fallback::Attempts;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::Engine;
use super::fetch::FetchError;
use crate::catalog::ObjectLocation;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::{FileMap, ObjectKind};
use crate::outboard::{BLOCK_LEN, Outboard};
use crate::tree::FlatEntry;

/// How a file's bytes are proven before they are served.
pub(super) enum Proof {
    /// Checking each chunk against its id suffices: the chunk list was written here or has
    /// been proven.
    Trusted,
    /// A chunk list from a remote, not yet proven: each block is checked against the
    /// outboard before it is served.
    Blocks {
        outboard: Outboard,
        verified: Arc<BlockSet>,
        /// The remote the file map came from (what an error names).
        remote: String,
        /// Where the map is: proof and rejection apply to this map only (another may
        /// replace it meanwhile).
        map: ObjectLocation,
    },
}

/// Which blocks of a file have passed their check (shared by every handle of the file in
/// one engine).
pub(super) struct BlockSet {
    bits: Vec<AtomicU64>,
    count: AtomicUsize,
    blocks: usize,
}

impl BlockSet {
    pub(super) fn new(blocks: usize) -> BlockSet {
        BlockSet {
            bits: (0..blocks.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            count: AtomicUsize::new(0),
            blocks,
        }
    }

    fn contains(&self, block: usize) -> bool {
        self.bits[block / 64].load(Ordering::Acquire) & (1 << (block % 64)) != 0
    }

    /// Marks `block` checked; true when that made every block checked.
    fn insert(&self, block: usize) -> bool {
        let bit = 1 << (block % 64);
        let before = self.bits[block / 64].fetch_or(bit, Ordering::AcqRel);
        before & bit == 0 && self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.blocks
    }
}

/// An open file's chunks, their places, and its proof. Shared with background fetches.
pub(super) struct FileState {
    pub(super) entry: FlatEntry,
    /// Each chunk's id and length in bytes, in file order.
    chunks: Vec<(ObjectId, u32)>,
    /// Byte offset in the file where each chunk starts (a prefix table).
    starts: Vec<u64>,
    /// Where each chunk is stored here, once located.
    locations: Vec<OnceLock<ObjectLocation>>,
    located: AtomicUsize,
    /// Every chunk is located here: nothing left to fetch.
    all_local: AtomicBool,
    pub(super) proof: Proof,
}

impl FileState {
    /// The layout of file `entry`: its one chunk, or the chunks its file map lists. A
    /// file with neither here is fetched from a remote: its chunk (a file of one chunk), its
    /// map alone when a remote's index lists one (a map never fetched, or forgotten after a
    /// remote served a wrong one: from the first remote that lists one, the one that lied
    /// no longer among them while another does), proven block by block as any remote map,
    /// else the whole file the way checkout fetches it.
    ///
    /// # Errors
    /// [`Error::MissingObject`] when neither this store nor a remote holds it;
    /// [`Error::Corrupt`] for a malformed file map or outboard, or a map that does not
    /// reassemble its file; remote errors.
    pub(super) fn open(engine: &Engine, entry: FlatEntry) -> Result<FileState> {
        if entry.size == 0 {
            return Ok(FileState::new(entry, Vec::new(), Proof::Trusted));
        }
        let found = engine
            .catalogs
            .with(|catalog| catalog.locate_file_and_proof(&entry.id))?;
        match found {
            Some((location, _)) if location.kind == ObjectKind::Chunk => {
                FileState::one_chunk(engine, entry, location)
            }
            Some((location, unproven)) => FileState::mapped(engine, entry, location, unproven),
            None => {
                // A file of one chunk (no map anywhere), fetched alone; else the whole file.
                let mut attempts = Attempts::new();
                match engine.fetcher.fetch(engine, &[entry.id], &mut attempts) {
                    Ok(_) => FileState::open_fetched(engine, entry, &mut attempts),
                    Err(FetchError::NotIndexed) => {
                        // A map a remote lists (never fetched, or forgotten after a remote
                        // served a wrong one): fetched alone, then proven block by block as
                        // any remote map, so a range read fetches only what it reads.
                        if FileState::fetch_map(engine, &entry, &mut attempts)?
                            && let Some((location, unproven)) = engine
                                .catalogs
                                .with(|catalog| catalog.locate_file_and_proof(&entry.id))?
                            && location.kind == ObjectKind::FileMap
                        {
                            return FileState::mapped(engine, entry, location, unproven);
                        }
                        FileState::whole(engine, entry, None, &mut attempts)
                    }
                    Err(FetchError::Failed(e)) => Err(e),
                }
            }
        }
    }

    /// A file of one chunk (its id is the chunk's), stored at `location`: nothing to prove
    /// beyond the chunk's own hash.
    fn one_chunk(engine: &Engine, entry: FlatEntry, location: ObjectLocation) -> Result<FileState> {
        let state = FileState::new(
            entry.clone(),
            vec![(entry.id, location.length)],
            Proof::Trusted,
        );
        state.set_location(0, location, engine)?;
        Ok(state)
    }

    /// Fetches file `entry`'s map alone from the first remote (in read order, those that
    /// failed lately last) whose index lists one; true when the map is here now. Remotes
    /// that fail are passed over and remembered in `attempts`.
    ///
    /// # Errors
    /// Local errors ([`Error::Catalog`], [`Error::Io`]); [`Error::Interrupted`].
    fn fetch_map(engine: &Engine, entry: &FlatEntry, attempts: &mut Attempts) -> Result<bool> {
        let wanted = [(entry.id, ObjectKind::FileMap)];
        let mut store = engine.lock_store();
        let data = store.lock_data_shared()?;
        let order = attempts.order(store.catalog().remotes()?);
        let last = order.len().saturating_sub(1);
        for (at, record) in order.into_iter().enumerate() {
            if store.catalog().has_object(&entry.id, ObjectKind::FileMap)? {
                return Ok(true);
            }
            if store
                .catalog()
                .remote_locate(record.id, &entry.id, ObjectKind::FileMap)?
                .is_none()
            {
                continue;
            }
            let Some(remote) =
                attempts.open(&record.name, || crate::remote::Remote::open(&record))?
            else {
                continue;
            };
            remote.set_others_remain(at < last);
            let got = attempts.attempt(&record.name, || {
                crate::transfer::download(
                    &mut store,
                    &data,
                    &record,
                    &remote,
                    &wanted,
                    engine.options.fetch_jobs,
                    &crate::progress::NoProgress,
                )
            })?;
            if got.is_some_and(|got| got.objects > 0) {
                attempts.served(&record.name);
            }
        }
        store.catalog().has_object(&entry.id, ObjectKind::FileMap)
    }

    /// After fetching a file's one chunk: its layout, now local.
    fn open_fetched(
        engine: &Engine,
        entry: FlatEntry,
        attempts: &mut Attempts,
    ) -> Result<FileState> {
        // Landed by a fetch of this engine and not recorded yet, else in the catalog (in that
        // order: see `locate`).
        let found = match engine.landing.locate(&entry.id) {
            Some(location) => Some(location),
            None => engine
                .catalogs
                .with(|catalog| catalog.locate_file(&entry.id))?,
        };
        match found {
            Some(location) if location.kind == ObjectKind::Chunk => {
                FileState::one_chunk(engine, entry, location)
            }
            _ => FileState::whole(engine, entry, None, attempts),
        }
    }

    /// A file with a file map here, at `location`; `unproven` names the remote it came from
    /// when it is not proven yet.
    fn mapped(
        engine: &Engine,
        entry: FlatEntry,
        location: ObjectLocation,
        unproven: Option<String>,
    ) -> Result<FileState> {
        let pack = crate::pack::writer::pack_path(&engine.packs_dir, &location.frame.pack);
        // A map from a remote that is malformed or disagrees with the tree lied: it is
        // forgotten (so the next read fetches it again) and the error names the remote.
        let lied = |detail: String| match &unproven {
            Some(remote) => reject(engine, &entry, &location, remote, &detail),
            None => Error::corrupt(&pack, detail),
        };
        let frame = engine.frame(&location.frame)?;
        let map = crate::store::decode_file_map(
            frame.raw(&location, &engine.packs_dir)?,
            &entry.id,
            entry.size,
        )
        .map_err(lied)?;
        if map.size() != entry.size {
            return Err(lied(format!(
                "file {} has {} bytes in its file map but {} in its tree",
                entry.id.short(),
                map.size(),
                entry.size
            )));
        }
        let Some(remote) = unproven else {
            return Ok(FileState::new(entry, map.chunks, Proof::Trusted));
        };
        let found = engine
            .catalogs
            .with(|catalog| catalog.locate(&entry.id, ObjectKind::Outboard))?;
        let outboard = match found {
            Some(at) => {
                let frame = engine.frame(&at.frame)?;
                // Proven against the file id as it decodes. Its size field is not covered
                // by the hash (sizes with the same blocks merge alike): one that disagrees
                // with the tree is not used.
                Outboard::decode(frame.raw(&at, &engine.packs_dir)?, &entry.id)
                    .ok()
                    .filter(|outboard| outboard.size() == entry.size)
            }
            None => None,
        };
        let Some(outboard) = outboard else {
            // Pushed before outboards (or an unusable one): proven whole, as checkout does.
            let mut attempts = Attempts::new();
            return FileState::whole(engine, entry, Some(&map), &mut attempts);
        };
        let verified = engine
            .block_sets
            .get(&entry.id, &location, outboard.blocks());
        Ok(FileState::new(
            entry,
            map.chunks,
            Proof::Blocks {
                outboard,
                verified,
                remote,
                map: location,
            },
        ))
    }

    /// The whole file made local and proven the way checkout does it. With its map here,
    /// the chunks are fetched first without any store-wide lock; the store is locked only to
    /// prove them (local reads), or, when no remote's index as last read lists them, for the
    /// fetch that reads the indexes again.
    fn whole(
        engine: &Engine,
        entry: FlatEntry,
        map: Option<&FileMap>,
        attempts: &mut Attempts,
    ) -> Result<FileState> {
        if let Some(map) = map {
            let ids: Vec<ObjectId> = map.chunks.iter().map(|(id, _)| *id).collect();
            match engine.fetcher.fetch(engine, &ids, attempts) {
                Ok(_) | Err(FetchError::NotIndexed) => {}
                Err(FetchError::Failed(e)) => return Err(e),
            }
            // Proven from the catalog below: chunks other fetches of this engine landed are
            // waited for until they are recorded.
            engine.landing.wait_recorded(&ids);
        }
        let chunks = {
            let mut store = engine.lock_store();
            match store.reader().file_chunks(&entry.id, entry.size) {
                Err(Error::MissingObject { .. }) => {
                    crate::transfer::fetch_files_with(
                        &mut store,
                        &[(entry.id, entry.size)],
                        engine.options.fetch_jobs,
                        &crate::progress::NoProgress,
                        attempts,
                    )?;
                    store.reader().file_chunks(&entry.id, entry.size)?
                }
                other => other?,
            }
        };
        let listed = chunks
            .iter()
            .map(|(id, location)| (*id, location.length))
            .collect();
        let state = FileState::new(entry, listed, Proof::Trusted);
        for (index, (_, location)) in chunks.into_iter().enumerate() {
            state.set_location(index, location, engine)?;
        }
        Ok(state)
    }

    fn new(entry: FlatEntry, chunks: Vec<(ObjectId, u32)>, proof: Proof) -> FileState {
        let mut starts = Vec::with_capacity(chunks.len());
        let mut offset = 0u64;
        for (_, length) in &chunks {
            starts.push(offset);
            offset += u64::from(*length);
        }
        FileState {
            entry,
            locations: (0..chunks.len()).map(|_| OnceLock::new()).collect(),
            located: AtomicUsize::new(0),
            all_local: AtomicBool::new(chunks.is_empty()),
            chunks,
            starts,
            proof,
        }
    }

    /// Records where chunk `index` is, after checking its length against the file map's.
    fn set_location(&self, index: usize, location: ObjectLocation, engine: &Engine) -> Result<()> {
        let (id, length) = &self.chunks[index];
        if location.length != *length {
            let detail = format!(
                "file map {} lists chunk {} as {length} bytes, but it holds {}",
                self.entry.id.short(),
                id.short(),
                location.length
            );
            if let Proof::Blocks { remote, map, .. } = &self.proof {
                return Err(reject(engine, &self.entry, map, remote, &detail));
            }
            let pack = crate::pack::writer::pack_path(&engine.packs_dir, &location.frame.pack);
            return Err(Error::corrupt(pack, detail));
        }
        if self.locations[index].set(location).is_ok()
            && self.located.fetch_add(1, Ordering::AcqRel) + 1 == self.chunks.len()
        {
            self.all_local.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Whether every chunk is here.
    pub(super) fn is_local(&self) -> bool {
        self.all_local.load(Ordering::Acquire)
    }

    /// The chunks holding bytes `range` (non-empty, inside the file).
    pub(super) fn chunk_range(&self, range: &Range<u64>) -> Range<usize> {
        let first = self.starts.partition_point(|start| *start <= range.start) - 1;
        let last = self.starts.partition_point(|start| *start < range.end);
        first..last
    }

    /// Locates chunks `chunks` here, fetching from the remotes those this store lacks.
    ///
    /// # Errors
    /// [`Error::MissingObject`] when no remote holds one; fetch errors.
    pub(super) fn make_local(&self, engine: &Engine, chunks: Range<usize>) -> Result<()> {
        if self.is_local() {
            return Ok(());
        }
        let pending: Vec<usize> = chunks
            .filter(|i| self.locations[*i].get().is_none())
            .collect();
        if pending.is_empty() {
            return Ok(());
        }
        let mut missing = self.locate(engine, &pending)?;
        let mut attempts = Attempts::new();
        // Twice at most: a chunk another fetch of this engine landed can go again when that
        // fetch's recording fails (its error is that fetch's; this one fetches it itself).
        for _ in 0..2 {
            if missing.is_empty() {
                return Ok(());
            }
            let ids: Vec<ObjectId> = missing.iter().map(|i| self.chunks[*i].0).collect();
            fetch(engine, &ids, &mut attempts)?;
            missing = self.locate(engine, &missing)?;
        }
        if let Some(index) = missing.first() {
            return Err(attempts.missing(Error::MissingObject {
                id: self.chunks[*index].0.to_hex(),
                what: "chunk",
            }));
        }
        Ok(())
    }

    /// Where chunk `index` is now, for a read that found the pack it was located in gone (a
    /// cache limit evicted it since: `crate::eviction::enforce_limit`): located again,
    /// fetched again when it is no longer here. The handle's first location stays (a later
    /// read that finds it gone comes here again).
    ///
    /// # Errors
    /// [`Error::MissingObject`] when no remote holds it; fetch errors.
    fn relocate(&self, engine: &Engine, index: usize) -> Result<ObjectLocation> {
        let (id, length) = self.chunks[index];
        let mut attempts = Attempts::new();
        // A pack can be evicted again between the fetch and the read (another reader's
        // fetch under a small limit): a few tries.
        for _ in 0..4 {
            // Landed first, then the catalog (see `locate`).
            let found = match engine.landing.locate(&id) {
                Some(location) => Some(location),
                None => engine
                    .catalogs
                    .with(|catalog| catalog.locate(&id, ObjectKind::Chunk))?,
            };
            match found {
                Some(location)
                    if crate::pack::writer::pack_path(&engine.packs_dir, &location.frame.pack)
                        .exists() =>
                {
                    if location.length != length {
                        return Err(Error::corrupt(
                            crate::pack::writer::pack_path(&engine.packs_dir, &location.frame.pack),
                            format!(
                                "file map {} lists chunk {} as {length} bytes, but it holds {}",
                                self.entry.id.short(),
                                id.short(),
                                location.length
                            ),
                        ));
                    }
                    return Ok(location);
                }
                Some(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
                None => fetch(engine, &[id], &mut attempts)?,
            }
        }
        Err(attempts.missing(Error::MissingObject {
            id: id.to_hex(),
            what: "chunk",
        }))
    }

    /// Locates those of chunks `chunks` that are stored here, fetching nothing (for
    /// read-ahead).
    ///
    /// # Errors
    /// Catalog errors; [`Error::Corrupt`] for a length that disagrees with the file map.
    pub(super) fn locate_here(&self, engine: &Engine, chunks: Range<usize>) -> Result<()> {
        if self.is_local() {
            return Ok(());
        }
        let pending: Vec<usize> = chunks
            .filter(|i| self.locations[*i].get().is_none())
            .collect();
        if !pending.is_empty() {
            self.locate(engine, &pending)?;
        }
        Ok(())
    }

    /// Locates chunks `indexes` in the catalog; returns those not stored here.
    fn locate(&self, engine: &Engine, indexes: &[usize]) -> Result<Vec<usize>> {
        // Landed by a fetch of this engine whose pack is being recorded (`super::landing`),
        // else in the catalog. In this order: the recorder forgets a landed place only after
        // the catalog has committed it, so a chunk is never missed between the two.
        let found = engine.catalogs.with(|catalog| {
            indexes
                .iter()
                .map(|i| {
                    let id = &self.chunks[*i].0;
                    let location = match engine.landing.locate(id) {
                        Some(location) => Some(location),
                        None => catalog.locate(id, ObjectKind::Chunk)?,
                    };
                    Ok((*i, location))
                })
                .collect::<Result<Vec<_>>>()
        })?;
        let mut missing = Vec::new();
        for (index, location) in found {
            match location {
                Some(location) => self.set_location(index, location, engine)?,
                None => missing.push(index),
            }
        }
        Ok(missing)
    }

    /// Checks every block overlapping bytes `range` that has not passed yet (no-op unless
    /// the file map is unproven).
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming the remote when a block does not hash to its value (the
    /// file map lied: it is forgotten, so the next open fetches it again); fetch errors.
    pub(super) fn prove(&self, engine: &Engine, range: &Range<u64>) -> Result<()> {
        let Proof::Blocks {
            outboard,
            verified,
            remote,
            map,
        } = &self.proof
        else {
            return Ok(());
        };
        let first = (range.start / BLOCK_LEN) as usize;
        let last = ((range.end - 1) / BLOCK_LEN) as usize;
        let pending: Vec<usize> = (first..=last).filter(|b| !verified.contains(*b)).collect();
        let (Some(&low), Some(&high)) = (pending.first(), pending.last()) else {
            return Ok(());
        };
        let span = outboard.block_range(low).start..outboard.block_range(high).end;
        self.make_local(engine, self.chunk_range(&span))?;
        let mut block = vec![0u8; BLOCK_LEN as usize];
        for index in pending {
            let bytes = outboard.block_range(index);
            let length = (bytes.end - bytes.start) as usize;
            self.copy(engine, bytes.start, &mut block[..length])?;
            if let Err(detail) = outboard.check_block(index, &block[..length]) {
                let detail = format!(
                    "the file map of {} fetched from it lists chunks whose {detail}; nothing of it was served",
                    self.entry.path
                );
                return Err(reject(engine, &self.entry, map, remote, &detail));
            }
            if verified.insert(index) {
                // Every block passed: this map is proven, for every later reader.
                let store = engine.lock_store();
                if let Ok(_lock) = store.lock_head_alone() {
                    let _ = store.catalog().prove_file_map_at(&self.entry.id, map);
                }
            }
        }
        Ok(())
    }

    /// Proves, ahead of its reader, the blocks of an unproven file map that lie wholly inside
    /// bytes `range` (a prefetched piece, its chunks here now): the hashing runs on the
    /// prefetch's thread, beside the others, not on the reader's. Blocks that straddle the
    /// piece's ends are left to the reader (they would need the next piece's chunks). A
    /// no-op for a proven map.
    ///
    /// # Errors
    /// As [`FileState::prove`].
    pub(super) fn prove_ahead(&self, engine: &Engine, range: &Range<u64>) -> Result<()> {
        if !matches!(self.proof, Proof::Blocks { .. }) {
            return Ok(());
        }
        let start = range.start.div_ceil(BLOCK_LEN) * BLOCK_LEN;
        let end = if range.end >= self.entry.size {
            self.entry.size
        } else {
            range.end / BLOCK_LEN * BLOCK_LEN
        };
        if start >= end {
            return Ok(());
        }
        self.prove(engine, &(start..end))
    }

    /// Copies the file's bytes from `offset` into `buf` (chunks already local); returns how
    /// many (fewer only at the end of the file).
    ///
    /// # Errors
    /// [`Error::Corrupt`] when stored bytes fail their check; [`Error::Io`].
    pub(super) fn copy(&self, engine: &Engine, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let mut index = self.starts.partition_point(|start| *start <= offset) - 1;
        let mut done = 0;
        let mut position = offset;
        while done < buf.len() && index < self.chunks.len() {
            let (chunk_id, _) = &self.chunks[index];
            let location = self.locations[index]
                .get()
                .ok_or_else(|| Error::MissingObject {
                    id: chunk_id.to_hex(),
                    what: "chunk",
                })?;
            let relocated;
            let (frame, location) = match engine.frame(&location.frame) {
                Ok(frame) => (frame, location),
                Err(e) => {
                    let pack =
                        crate::pack::writer::pack_path(&engine.packs_dir, &location.frame.pack);
                    if pack.exists() {
                        return Err(e);
                    }
                    // Evicted under a cache limit since it was located: here again.
                    relocated = self.relocate(engine, index)?;
                    (engine.frame(&relocated.frame)?, &relocated)
                }
            };
            let chunk = frame.chunk(chunk_id, location, &engine.packs_dir)?;
            let from = (position - self.starts[index]) as usize;
            let n = (chunk.len() - from).min(buf.len() - done);
            buf[done..done + n].copy_from_slice(&chunk[from..from + n]);
            done += n;
            position += n as u64;
            index += 1;
        }
        Ok(done)
    }

    /// The local frames of bytes `range` whose chunks are located (for read-ahead into the
    /// frame cache), each once, in file order.
    pub(super) fn local_frames(&self, range: &Range<u64>) -> Vec<crate::pack::FrameLocation> {
        let mut frames: Vec<crate::pack::FrameLocation> = Vec::new();
        for index in self.chunk_range(range) {
            if let Some(location) = self.locations[index].get()
                && frames.last() != Some(&location.frame)
            {
                frames.push(location.frame);
            }
        }
        frames
    }
}

/// Forgets file `entry`'s map at `map` (fetched from `remote`, found to lie: `detail`) if
/// it is still that map and unproven, under the store lock, and makes the error that names
/// the remote. The next read fetches the map again.
fn reject(
    engine: &Engine,
    entry: &FlatEntry,
    map: &ObjectLocation,
    remote: &str,
    detail: &str,
) -> Error {
    engine.block_sets.remove(&entry.id, map);
    {
        let store = engine.lock_store();
        if let Ok(_lock) = store.lock_head_alone() {
            let _ = store.catalog().reject_file_map_at(&entry.id, map);
        }
    }
    Error::corrupt(
        format!("remote {remote}"),
        format!(
            "{detail} (file {}); the map is forgotten, so the next read fetches it again",
            entry.id.short()
        ),
    )
}

/// The engine's record of which blocks of each unproven file map have passed, so that
/// handles opened again (a mount opens a file per `open(2)`) do not check them again. Keyed
/// by the file and where its map is stored: a block passed under one map says nothing of
/// another map of the same file.
#[derive(Default)]
pub(super) struct BlockSets {
    sets: Mutex<std::collections::HashMap<(ObjectId, ObjectLocation), Arc<BlockSet>>>,
}

impl BlockSets {
    pub(super) fn get(&self, id: &ObjectId, map: &ObjectLocation, blocks: usize) -> Arc<BlockSet> {
        let mut sets = self.sets.lock().unwrap_or_else(|e| e.into_inner());
        let set = sets
            .entry((*id, *map))
            .or_insert_with(|| Arc::new(BlockSet::new(blocks)));
        if set.blocks != blocks {
            *set = Arc::new(BlockSet::new(blocks));
        }
        set.clone()
    }

    pub(super) fn remove(&self, id: &ObjectId, map: &ObjectLocation) {
        self.sets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(*id, *map));
    }
}

/// Fetches chunks `ids` from the remotes, reading the remotes' indexes again when none lists
/// some (pushed since this store last read them, or held only by remotes that failed). A
/// chunk no remote holds is left out (the caller locates and makes the error).
///
/// # Errors
/// Fetch errors.
fn fetch(engine: &Engine, ids: &[ObjectId], attempts: &mut Attempts) -> Result<()> {
    match engine.fetcher.fetch(engine, ids, attempts) {
        Ok(_) => Ok(()),
        Err(FetchError::Failed(e)) => Err(e),
        Err(FetchError::NotIndexed) => {
            crate::transfer::refresh_all_indexes(
                &mut engine.lock_store(),
                engine.options.fetch_jobs,
                attempts,
            )?;
            match engine.fetcher.fetch(engine, ids, attempts) {
                Ok(_) | Err(FetchError::NotIndexed) => Ok(()),
                Err(FetchError::Failed(e)) => Err(e),
            }
        }
    }
}
