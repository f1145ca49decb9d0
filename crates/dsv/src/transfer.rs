//! Downloading from remotes, for every operation and the read engine: opening a remote by
//! name, refreshing its pack indexes, finding the remote frames that hold wanted objects,
//! merging neighbours within [`COALESCE_GAP`] into ranged GETs of at most [`MAX_SPAN`] bytes,
//! checking every frame as it arrives and recording the packs it lands in
//! (`fetch_spans`, `record_fetched`), and the two entry points built on them: the chunks a
//! checkout lacks ([`fetch_missing`]) and the files a reader opens ([`fetch_files`]).
//!
//! Below both `ops` (fetch, pull, clone and checkout: `ops::sync` re-exports what it used to
//! hold) and `read` (the read engine's fetcher), so neither depends on the other for it. How
//! downloads work, step by step, is in the rustdoc of `ops::sync` ("Downloading frames").
//!
//! # Fallback
//!
//! Data this store lacks is asked of the remotes in their read order
//! ([`crate::catalog::RemoteRecord::position`]; `dsv remote order`), and of the next remote
//! for what one lacks (a miss) or when one fails (`fallback::is_remote_failure`: a request
//! that failed after its retries — unreachable, refused, a missing bucket —, an answer that
//! is damaged, or a remote that cannot be opened). A failed download keeps nothing
//! (`download` abandons its packs; every frame is checked before it is kept). A remote
//! that stalls (its server accepts connections but does not answer: less than 1 KiB in
//! the remote's `stall_timeout`, 5 s by default, see `remote::stall_timeout`) fails its
//! read at once, without waiting out `object_store`'s retries. A remote that failed is not
//! asked again by the same operation (one checkout, pull or read: [`fallback::Attempts`]);
//! every later read of the process also asks it last, after every other remote, for
//! `fallback::FAILED_REMOTE_LAST_FOR` (doubled at each further failure:
//! `fallback::RemoteHealth`, one per process). Each remote that failed while another
//! served is told once per process to the front end ([`fallback::take_fallbacks`]: the CLI
//! warns on stderr, Python with `warnings.warn`); the library prints nothing. A remote
//! whose pack listing this store never read (added after a clone) has it read by the first
//! read that needs data (the read engine's fetcher; checkout and pull read a remote's
//! listing again whenever it lacks what is wanted), so the read order holds at once. Only
//! when every remote missed or failed does the read fail: with [`Error::MissingObject`] when every one
//! missed, else with the first failure (in read order) as [`Error::RemotesFailed`], whose
//! hint names every remote tried. [`Transfer::remotes`] reports what each remote asked
//! served, or why it was passed over.
//!
//! The remote that `pull` or `checkout REMOTE/NAME` names (its refs and metadata come from
//! it) is asked first, and the others after it in read order: it holds the version, and a
//! file map it serves replaces one another remote sent that failed its proof (a remote
//! earlier in the read order would send the same wrong map again). Every other read
//! (checkout of a local revision, mount, cat, export, Python) follows the read order.

pub mod fallback;
pub(crate) mod kept;
mod revision;

pub use kept::{DEFAULT_DELTA_MEMORY, delta_memory, set_delta_memory};

pub use revision::RemoteRevision;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;

use serde::Serialize;

use crate::catalog::{RemoteRecord, RemoteRef, unix_now};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::pack::format::Compression;
use crate::pack::{EncodedFrame, FrameRecord, PackFile};
use crate::pack_sink::PackSink;
use crate::progress::{Progress, Unit};
use crate::remote::{self, RefName, RefState, Remote};
use crate::store::{SharedDataLock, Store};
use crate::tree::{Reached, walk_reachable};

/// Frames of one pack closer than this many bytes are fetched in one ranged GET.
pub const COALESCE_GAP: u64 = 128 * 1024;
/// The longest ranged GET, in bytes.
pub const MAX_SPAN: u64 = 16 * 1024 * 1024;

/// What one remote did for a download ([`Transfer::remotes`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RemoteServed {
    /// The remote's name.
    pub remote: String,
    /// Objects received from it.
    pub objects: u64,
    /// Stored bytes received from it, as [`Transfer::bytes`] counts them.
    pub bytes: u64,
    /// Why it was passed over (its error, in words) when it failed; `None` when it served
    /// what it held of the data (perhaps none).
    pub error: Option<String>,
}

/// What one transfer moved.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Transfer {
    /// Requests made to the remote.
    pub requests: u64,
    /// Packs uploaded (push) or written locally from downloaded frames (fetch, pull).
    pub packs: u64,
    /// Stored (compressed) bytes sent or received.
    pub bytes: u64,
    /// Objects received (fetch, pull) or packs' objects sent (push).
    pub objects: u64,
    /// The remotes asked for data this store lacked (checkout, pull, fetch), in the order
    /// asked, with what each served or why it was passed over; empty for push, and when
    /// nothing was missing.
    pub remotes: Vec<RemoteServed>,
}

impl Transfer {
    /// Adds what `other` moved (packs, bytes, objects); requests are the caller's to count,
    /// as only it knows which remote's requests this transfer reports.
    pub(crate) fn add_moved(&mut self, other: &Transfer) {
        self.packs += other.packs;
        self.bytes += other.bytes;
        self.objects += other.objects;
        for served in &other.remotes {
            self.served(served);
        }
    }

    /// Adds `served` to [`Transfer::remotes`] (summed into the remote's entry when it has
    /// one; its first failure kept).
    fn served(&mut self, served: &RemoteServed) {
        match self.remotes.iter_mut().find(|r| r.remote == served.remote) {
            Some(entry) => {
                entry.objects += served.objects;
                entry.bytes += served.bytes;
                if entry.error.is_none() {
                    entry.error.clone_from(&served.error);
                }
            }
            None => self.remotes.push(served.clone()),
        }
    }
}

pub(crate) fn open(store: &Store, name: &str) -> Result<(RemoteRecord, Remote)> {
    let record = store.catalog().remote(name)?;
    let remote = Remote::open(&record)?;
    Ok((record, remote))
}

/// True when both ETags are known and equal. Backends differ in quoting them (a listing may
/// give `abc` where a HEAD gives `"abc"`), so the quotes are ignored.
pub(crate) fn same_etag(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.trim_matches('"') == b.trim_matches('"'),
        _ => false,
    }
}

pub(crate) fn remote_ref(name: &RefName, version: ObjectId, state: &RefState) -> RemoteRef {
    RemoteRef {
        dataset: name.dataset.clone(),
        tag: name.tag.clone(),
        version,
        etag: state.etag.clone(),
        object_version: state.version.clone(),
        last_modified: state.last_modified,
        fetched_at: unix_now(),
    }
}

/// Lists the remote's packs, downloads the index of each pack not seen before, and forgets
/// packs the remote no longer has. Returns how many packs were new.
pub(crate) fn refresh_indexes(
    store: &mut Store,
    record: &RemoteRecord,
    remote: &Remote,
    jobs: usize,
) -> Result<u64> {
    refresh_indexes_except(store, record, remote, jobs, &HashSet::new())
}

/// [`refresh_indexes`], treating the packs of `except` (gc-marked ones, for a writer) as
/// absent. When a pack recorded here is gone (deleted by a gc, or excluded), every index is
/// read again: the store records one location per object, and an object of a gone pack may
/// also be in a pack recorded earlier, whose index rows for it were not kept.
pub(crate) fn refresh_indexes_except(
    store: &mut Store,
    record: &RemoteRecord,
    remote: &Remote,
    jobs: usize,
    except: &HashSet<ObjectId>,
) -> Result<u64> {
    let listed: Vec<(ObjectId, u64)> = remote
        .list_packs()?
        .into_iter()
        .filter(|(id, _)| !except.contains(id))
        .collect();
    let present: HashSet<ObjectId> = listed.iter().map(|(id, _)| *id).collect();
    let mut known = store.catalog().remote_packs(record.id)?;
    let gone = known.iter().any(|id| !present.contains(id));
    if gone {
        known.clear();
    }
    let new: Vec<(ObjectId, u64)> = listed
        .iter()
        .filter(|(id, _)| !known.contains(id))
        .copied()
        .collect();
    // A tail is at most the pack after its header, and at most the longest index plus trailer.
    let tail_limit = |size: u64| {
        size.saturating_sub(crate::pack::format::HEADER_LEN)
            .min(crate::pack::format::MAX_INDEX_LEN + crate::pack::format::TRAILER_LEN)
    };
    let tails = remote.get_many(
        new.iter()
            .map(|(id, size)| (remote::index_key(id), tail_limit(*size)))
            .collect(),
        jobs,
    )?;
    let mut indexes = Vec::with_capacity(new.len());
    for ((id, size), tail) in new.iter().zip(tails) {
        let index = crate::pack::reader::parse_tail(&tail, *size).map_err(|detail| {
            let key = format!("{}:{}", record.name, remote::index_key(id));
            crate::pack::reader::tail_error(key, &tail, detail)
        })?;
        indexes.push((id, size, index));
    }
    let writer = store.catalog_mut().writer()?;
    // Packs gone first: an object that moved to a new pack (a remote repacked) keeps one row,
    // the new pack's. Added first, the new rows would be ignored as duplicates and then
    // deleted with the old pack's frames. With a pack gone, all are forgotten and read again.
    if gone {
        writer.retain_remote_packs(record.id, &HashSet::new())?;
    } else {
        writer.retain_remote_packs(record.id, &present)?;
    }
    for (id, size, index) in &indexes {
        writer.add_remote_pack(
            record.id,
            id,
            **size,
            &index.frames,
            &index.objects,
            &index.deltas,
        )?;
    }
    writer.commit()?;
    Ok(new.len() as u64)
}

/// Reads again the pack indexes of every remote of `store` (new packs added, packs gone
/// dropped), in read order: for a reader whose data was pushed since this store last
/// looked. A remote that fails is skipped (and remembered in `attempts`).
///
/// # Errors
/// [`Error::Catalog`], and errors that are not a remote's failure.
pub(crate) fn refresh_all_indexes(
    store: &mut Store,
    jobs: usize,
    attempts: &mut fallback::Attempts,
) -> Result<()> {
    let order = attempts.order(store.catalog().remotes()?);
    let last = order.len().saturating_sub(1);
    for (at, record) in order.into_iter().enumerate() {
        let Some(remote) = attempts.open(&record.name, || Remote::open(&record))? else {
            continue;
        };
        remote.set_others_remain(at < last);
        attempts.attempt(&record.name, || {
            refresh_indexes(store, &record, &remote, jobs)
        })?;
    }
    Ok(())
}

/// One checked frame of a span: a plain frame checked (with its raw bytes when asked for,
/// and the bases in it that deltas of this download name, kept), or a delta frame to check
/// once its bases are at hand ([`DeltaBases`]).
enum Checked {
    Plain {
        /// Its remote pack and offset.
        at: (ObjectId, u64),
        frame: EncodedFrame,
        /// Its raw bytes when the caller asked for them, else empty.
        raw: Vec<u8>,
        /// The chunks in it that deltas of this download name as bases, kept
        /// ([`kept::keep_base`]: within the memory budget, else on disk).
        bases: Vec<(ObjectId, kept::Held)>,
    },
    Delta(ArrivedDelta),
}

/// One span's frames as checked, its object count and its bytes.
type CheckedSpan = (Vec<Checked>, u64, u64);

/// The frames of one span with their objects (id, kind, offset, length) and bases (empty for
/// a plain frame), for checking.
type PreparedSpan = Vec<(
    FrameRecord,
    Vec<(ObjectId, ObjectKind, u32, u32)>,
    Vec<ObjectId>,
)>;

/// What [`DeltaBases::resolve`] does with each delta checked: the delta as it came, the
/// frame checked and its raw bytes.
type KeepDelta<'a> = dyn FnMut(&PendingDelta, EncodedFrame, Vec<u8>) -> Result<()> + 'a;

/// A delta frame as downloaded: its bytes as stored, where it came from and what its index
/// says of it.
struct ArrivedDelta {
    pack: ObjectId,
    frame: FrameRecord,
    objects: Vec<(ObjectId, ObjectKind, u32, u32)>,
    bases: Vec<ObjectId>,
    stored: Vec<u8>,
}

/// A delta frame downloaded and not yet checked: [`ArrivedDelta`] with its stored bytes kept
/// by the download's [`kept::BaseStore`].
struct PendingDelta {
    pack: ObjectId,
    frame: FrameRecord,
    objects: Vec<(ObjectId, ObjectKind, u32, u32)>,
    bases: Vec<ObjectId>,
    stored: kept::Held,
}

/// The bases of the delta frames a download receives, and the deltas waiting for them.
///
/// A delta frame is checked against its bases before it is kept
/// ([`EncodedFrame::verified_delta`]: decoded with the bases' raw bytes as its prefix, every
/// chunk hashing to its id). The bases come from the frames of the same download (checked
/// first) or from this store (read through [`crate::store::ObjectReader`], which checks
/// them, once the download's responses are in, a waiting delta at a time:
/// [`DeltaBases::read_local`]). A delta is checked as soon as its bases are at hand (after
/// each span arrives, not once the download ends), and a base is let go once the last delta
/// of the download naming it is checked. What is kept meanwhile (bases, and the stored bytes
/// of deltas waiting for theirs) stays within [`delta_memory`] bytes of memory; past it, it
/// goes to an unnamed file in the store's temp directory ([`kept`]). A delta whose bases are
/// not at hand when its download ends is [`Error::Corrupt`] naming the remote
/// ([`fetch_spans`] with [`DeltaBases::new`]), or, with [`DeltaBases::carried`], waits for
/// the next download of the same operation (`dsv copy` moves frames in batches) until
/// [`DeltaBases::finish`]. Chains are followed at most
/// [`crate::pack::format::MAX_DELTA_DEPTH`] levels deep within a download.
pub(crate) struct DeltaBases {
    packs_dir: Option<std::path::PathBuf>,
    carry: bool,
    store: kept::BaseStore,
    /// Bases deltas of the download name that this store holds: read once the responses are
    /// in ([`DeltaBases::read_local`]).
    local: HashSet<ObjectId>,
    depth: HashMap<ObjectId, u32>,
    /// Deltas waiting for their bases, by arrival number.
    pending: BTreeMap<u64, PendingDelta>,
    arrivals: u64,
    /// Frames (pack, offset) a download brings only to check a delta against them: checked,
    /// not kept ([`DeltaBases::check_only`]).
    check_only: HashSet<(ObjectId, u64)>,
    remote: String,
}

impl DeltaBases {
    /// Bases read from this store's packs in `packs_dir` when it holds them (`None`: only
    /// from the download itself); what is kept past [`delta_memory`] goes to an unnamed file
    /// in `temp_dir` (the store's). A delta still waiting when a [`fetch_spans`] ends fails it.
    pub(crate) fn new(packs_dir: Option<&std::path::Path>, temp_dir: &std::path::Path) -> Self {
        DeltaBases::with_memory(packs_dir, temp_dir, delta_memory())
    }

    /// [`DeltaBases::new`] keeping at most `memory` bytes in memory.
    fn with_memory(
        packs_dir: Option<&std::path::Path>,
        temp_dir: &std::path::Path,
        memory: u64,
    ) -> Self {
        DeltaBases {
            packs_dir: packs_dir.map(std::path::Path::to_path_buf),
            carry: false,
            store: kept::BaseStore::new(memory, Some(temp_dir)),
            local: HashSet::new(),
            depth: HashMap::new(),
            pending: BTreeMap::new(),
            arrivals: 0,
            check_only: HashSet::new(),
            remote: String::new(),
        }
    }

    /// The frames at `frames` (pack, offset) are a delta's bases this download brings only to
    /// check the delta: [`fetch_spans`] checks them and does not keep them.
    pub(crate) fn check_only(&mut self, frames: HashSet<(ObjectId, u64)>) {
        self.check_only = frames;
    }

    /// Bases that deltas of a later download of the operation name: kept when they arrive
    /// before those deltas (with [`DeltaBases::carried`]), until [`DeltaBases::finish`].
    pub(crate) fn expect(&mut self, bases: impl IntoIterator<Item = ObjectId>) {
        self.store.keep_until_end(bases);
    }

    /// As [`DeltaBases::new`], but a delta whose bases have not arrived when a
    /// [`fetch_spans`] ends waits for the next one; [`DeltaBases::finish`] ends the wait.
    pub(crate) fn carried(
        packs_dir: Option<&std::path::Path>,
        temp_dir: &std::path::Path,
    ) -> DeltaBases {
        DeltaBases {
            carry: true,
            ..DeltaBases::new(packs_dir, temp_dir)
        }
    }

    /// The most bytes kept in memory at once so far, and the bytes kept on disk.
    #[cfg(test)]
    fn kept_bytes(&self) -> (u64, u64) {
        let kept = kept::lock(&self.store.kept);
        (kept.peak(), kept.spilled())
    }

    /// A download whose delta frames name `deltas` (each frame's bases) starts: each base is
    /// kept until the last of them naming it is checked; those this store holds (and the
    /// download does not bring first) are read from it once the download's responses are in
    /// ([`DeltaBases::read_local`]), one at a time, rather than all now.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    fn starting(
        &mut self,
        catalog: &crate::catalog::Catalog,
        deltas: &[&[ObjectId]],
    ) -> Result<()> {
        for bases in deltas {
            self.store.will_use(bases);
        }
        if self.packs_dir.is_none() {
            return Ok(());
        }
        let named: Vec<ObjectId> = deltas
            .iter()
            .flat_map(|bases| bases.iter())
            .chain(self.pending.values().flat_map(|d| d.bases.iter()))
            .copied()
            .collect();
        for base in named {
            if !self.store.has(&base)
                && !self.local.contains(&base)
                && catalog.has_object(&base, ObjectKind::Chunk)?
            {
                self.local.insert(base);
            }
        }
        Ok(())
    }

    /// Reads from this store the bases waiting deltas lack that it holds, a delta at a time
    /// in arrival order (each checked as it is read), and checks each delta they complete
    /// ([`DeltaBases::resolve`], handing it to `keep`): a base is let go after its last delta,
    /// so what is kept stays bounded however many deltas name this store's chunks.
    ///
    /// # Errors
    /// Errors reading a base from this store; [`DeltaBases::resolve`]'s.
    fn read_local(
        &mut self,
        catalog: &crate::catalog::Catalog,
        keep: &mut KeepDelta<'_>,
    ) -> Result<()> {
        let Some(dir) = self.packs_dir.clone() else {
            return Ok(());
        };
        if self.local.is_empty() {
            return Ok(());
        }
        let mut reader = None;
        let waiting: Vec<u64> = self.pending.keys().copied().collect();
        for number in waiting {
            let Some(delta) = self.pending.get(&number) else {
                continue;
            };
            let lacking: Vec<ObjectId> = delta
                .bases
                .iter()
                .filter(|base| self.local.contains(base) && !self.store.has(base))
                .copied()
                .collect();
            for base in lacking {
                let reader =
                    reader.get_or_insert_with(|| crate::store::ObjectReader::over(catalog, &dir));
                let bytes = reader.bytes(&base, ObjectKind::Chunk)?;
                self.store.arrived_bytes(base, &bytes)?;
            }
            self.resolve(keep)?;
        }
        Ok(())
    }

    /// A delta frame arrived: it waits for its bases (its stored bytes kept meanwhile).
    ///
    /// # Errors
    /// [`kept::KeptBytes::put`]'s.
    fn arrived(&mut self, delta: ArrivedDelta) -> Result<()> {
        let stored = kept::lock(&self.store.kept).put(delta.stored)?;
        let number = self.arrivals;
        self.arrivals += 1;
        self.store.wait(number, &delta.bases);
        self.pending.insert(
            number,
            PendingDelta {
                pack: delta.pack,
                frame: delta.frame,
                objects: delta.objects,
                bases: delta.bases,
                stored,
            },
        );
        Ok(())
    }

    /// Checks every waiting delta whose bases are at hand (those a checked one brings next),
    /// and hands each checked frame (with its raw bytes) to `keep`; lets go each base no
    /// delta still to be checked names. Those still waiting stay.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming the remote's pack for a delta that fails its check or a
    /// chain deeper than [`crate::pack::format::MAX_DELTA_DEPTH`]; errors reading what is
    /// kept on disk; `keep`'s errors.
    fn resolve(&mut self, keep: &mut KeepDelta<'_>) -> Result<()> {
        while let Some(number) = self.store.next_ready() {
            let Some(delta) = self.pending.remove(&number) else {
                continue;
            };
            let depth = 1 + delta
                .bases
                .iter()
                .map(|b| self.depth.get(b).copied().unwrap_or(0))
                .max()
                .unwrap_or(0);
            let place = || format!("{}:{}", self.remote, crate::remote::pack_key(&delta.pack));
            if depth > crate::pack::format::MAX_DELTA_DEPTH {
                return Err(Error::corrupt(
                    place(),
                    format!(
                        "frame at offset {}: a delta chain deeper than {} levels",
                        delta.frame.offset,
                        crate::pack::format::MAX_DELTA_DEPTH
                    ),
                ));
            }
            // Bounded before the prefix is built: a hostile index may name large bases.
            let prefix = match self
                .store
                .prefix(&delta.bases, crate::pack::format::MAX_DELTA_PREFIX)?
            {
                Ok(prefix) => prefix,
                Err(prefix_len) => {
                    return Err(Error::corrupt(
                        place(),
                        format!(
                            "delta frame at offset {}: its bases hold {prefix_len} bytes, more \
                             than the {} a delta's prefix may",
                            delta.frame.offset,
                            crate::pack::format::MAX_DELTA_PREFIX
                        ),
                    ));
                }
            };
            let stored = {
                let mut kept = kept::lock(&self.store.kept);
                let stored = kept.get(&delta.stored)?.into_owned();
                kept.release(&delta.stored);
                stored
            };
            let bad = |detail: String| {
                Error::corrupt(
                    place(),
                    format!("delta frame at offset {}: {detail}", delta.frame.offset),
                )
            };
            let (frame, raw) = EncodedFrame::verified_delta(
                stored,
                delta.frame.raw_length,
                delta.objects.clone(),
                delta.bases.clone(),
                &prefix,
            )
            .map_err(bad)?;
            drop(prefix);
            for (id, kind, offset, length) in &delta.objects {
                if *kind == ObjectKind::Chunk {
                    self.depth.insert(*id, depth);
                    let piece = &raw[*offset as usize..(*offset + *length) as usize];
                    self.store.arrived_bytes(*id, piece)?;
                }
            }
            self.store.used(&delta.bases);
            keep(&delta, frame, raw)?;
        }
        Ok(())
    }

    /// Ends a download: a delta still waiting for a base is [`Error::Corrupt`] naming the
    /// remote (it holds a delta whose base it lacks, or a cycle of bases).
    ///
    /// # Errors
    /// As described.
    pub(crate) fn finish(&mut self) -> Result<()> {
        let result = match self.pending.values().next() {
            None => Ok(()),
            Some(delta) => {
                let missing = self
                    .store
                    .first_missing(&delta.bases)
                    .map_or_else(String::new, |b| b.short());
                Err(Error::corrupt(
                    format!("{}:{}", self.remote, crate::remote::pack_key(&delta.pack)),
                    format!(
                        "delta frame at offset {} names base chunk {missing}, which neither \
                         the remote nor this store holds (or its bases make a cycle)",
                        delta.frame.offset
                    ),
                ))
            }
        };
        if result.is_err() {
            let mut kept = kept::lock(&self.store.kept);
            for delta in self.pending.values() {
                kept.release(&delta.stored);
            }
            drop(kept);
            self.pending.clear();
            self.store.clear();
        }
        result
    }
}

/// One ranged GET: a span of a remote pack and the frames inside it.
pub(crate) struct Span {
    pack: ObjectId,
    range: Range<u64>,
    frames: Vec<(FrameRecord, i64)>,
}

impl Span {
    /// The remote pack the span is in.
    pub(crate) fn pack(&self) -> ObjectId {
        self.pack
    }

    /// Bytes the span's GET asks for.
    pub(crate) fn len(&self) -> u64 {
        self.range.end - self.range.start
    }
}

/// The remote frames (by pack and offset: the frame, its catalog row, and the wanted objects
/// in it) holding those of `wanted` that this store lacks and remote `remote` holds.
pub(crate) type FramesOf =
    BTreeMap<(ObjectId, u64), (FrameRecord, i64, Vec<(ObjectId, ObjectKind)>)>;

/// The remote frames holding those of `wanted` that this store lacks and remote `remote`
/// holds, with the wanted objects in each, and, for each delta frame among them, the frames
/// holding its bases (transitively) that this store lacks.
///
/// # Errors
/// [`Error::Catalog`]; [`Error::Corrupt`] naming the remote when it lacks a base of a delta
/// frame it holds.
pub(crate) fn frames_of(
    catalog: &crate::catalog::Catalog,
    remote: i64,
    wanted: &[(ObjectId, ObjectKind)],
) -> Result<FramesOf> {
    let mut frames: FramesOf = BTreeMap::new();
    let mut deltas = Vec::new();
    for (id, kind) in wanted {
        if catalog.has_object(id, *kind)? {
            continue;
        }
        // A location through a local pack's index means another process stored the object
        // here since `has_object`: nothing to download.
        if let Some(location) = catalog.remote_locate(remote, id, *kind)?
            && !location.in_local_pack()
        {
            let entry = frames
                .entry((location.pack, location.frame.offset))
                .or_insert_with(|| {
                    if location.frame.compression == Compression::Delta {
                        deltas.push(location.frame_row);
                    }
                    (location.frame, location.frame_row, Vec::new())
                });
            entry.2.push((*id, *kind));
        }
    }
    add_delta_closure(catalog, remote, &mut frames, deltas)?;
    Ok(frames)
}

/// Adds to `frames` the remote frames holding the bases (transitively) of the delta frames
/// whose rows are `deltas`, each base this store lacks wanted in it: a delta frame travels
/// only with its bases, in the same round of ranged GETs, resolved from the catalog's copy of
/// the remote's index (never one round per level). A base this store holds stops the walk
/// there (its own bases are here too: a delta is never stored without them).
///
/// # Errors
/// [`Error::Corrupt`] naming the remote when it does not hold a base (a damaged or hostile
/// remote: nothing is downloaded); [`Error::Catalog`].
fn add_delta_closure(
    catalog: &crate::catalog::Catalog,
    remote: i64,
    frames: &mut FramesOf,
    mut deltas: Vec<i64>,
) -> Result<()> {
    let mut seen = HashSet::new();
    while let Some(row) = deltas.pop() {
        for base in catalog.remote_frame_bases(row)? {
            if !seen.insert(base) || catalog.has_object(&base, ObjectKind::Chunk)? {
                continue;
            }
            let Some(location) = catalog.remote_locate(remote, &base, ObjectKind::Chunk)? else {
                return Err(missing_base(catalog, remote, &base));
            };
            // Through a local pack's index: stored here meanwhile.
            if location.in_local_pack() {
                continue;
            }
            let entry = frames
                .entry((location.pack, location.frame.offset))
                .or_insert_with(|| {
                    if location.frame.compression == Compression::Delta {
                        deltas.push(location.frame_row);
                    }
                    (location.frame, location.frame_row, Vec::new())
                });
            if !entry.2.contains(&(base, ObjectKind::Chunk)) {
                entry.2.push((base, ObjectKind::Chunk));
            }
        }
    }
    Ok(())
}

/// The error for a delta frame of remote `remote` whose base chunk `base` the remote does
/// not hold (nor this store).
fn missing_base(catalog: &crate::catalog::Catalog, remote: i64, base: &ObjectId) -> Error {
    let name = catalog
        .remotes()
        .ok()
        .and_then(|all| all.into_iter().find(|r| r.id == remote))
        .map_or_else(
            || format!("remote #{remote}"),
            |r| format!("remote {}", r.name),
        );
    Error::corrupt(
        name,
        format!(
            "a delta frame names base chunk {}, which neither the remote nor this store \
             holds (the remote is damaged: a delta is never stored without its bases)",
            base.short()
        ),
    )
}

/// Frames grouped into ranged GETs: neighbours in one pack within [`COALESCE_GAP`] merged,
/// each GET at most `max_span` bytes (a single larger frame alone).
pub(crate) fn spans(
    frames: BTreeMap<(ObjectId, u64), (FrameRecord, i64)>,
    max_span: u64,
) -> Vec<Span> {
    let mut spans: Vec<Span> = Vec::new();
    for ((pack, offset), (frame, row)) in frames {
        let end = offset + u64::from(frame.stored_length);
        match spans.last_mut() {
            Some(span)
                if span.pack == pack
                    && offset <= span.range.end + COALESCE_GAP
                    && end - span.range.start <= max_span =>
            {
                span.range.end = span.range.end.max(end);
                span.frames.push((frame, row));
            }
            _ => spans.push(Span {
                pack,
                range: offset..end,
                frames: vec![(frame, row)],
            }),
        }
    }
    spans
}

/// Downloads `spans` of `remote`'s packs, `jobs` GETs at a time, checks every frame (it
/// decompresses to its length, every object matches its key: [`ObjectKind::check`]) and
/// appends the frames to `sink` (and, with `raws`, their raw bytes, in the same order). A
/// delta frame is checked against its bases once they are at hand (`bases`: see
/// [`DeltaBases`]; after the span bringing the last of them) and appended then, so what
/// waits stays within [`delta_memory`] bytes of memory. Frames `bases` names as check-only
/// ([`DeltaBases::check_only`]: a delta's base this download brings only to check it) are
/// checked and not appended. Nothing is recorded: see [`record_fetched`].
///
/// # Errors
/// [`Error::Remote`]; [`Error::Corrupt`] naming the remote's pack for a frame that fails its
/// check, a short response, or a delta whose bases did not come (unless `bases` carries
/// them over); [`Error::Catalog`]; [`Error::Interrupted`].
pub(crate) fn fetch_spans(
    catalog: &crate::catalog::Catalog,
    remote: &Remote,
    spans: &[Span],
    jobs: usize,
    (sink, mut raws): (&PackSink, Option<&mut Vec<Vec<u8>>>),
    bases: &mut DeltaBases,
    progress: &dyn Progress,
) -> Result<Transfer> {
    // Kept in `bases` for the next download of the operation (a copy's batches).
    let check_only = bases.check_only.clone();
    let total: u64 = spans.iter().map(|s| s.range.end - s.range.start).sum();
    bases.remote = remote.name().to_string();
    // Everything a check needs, read from the catalog up front: checks run on other threads.
    let mut prepared: HashMap<(ObjectId, u64), PreparedSpan> = HashMap::new();
    for span in spans {
        let mut frames = Vec::with_capacity(span.frames.len());
        for (frame, row) in &span.frames {
            let frame_bases = if frame.compression == Compression::Delta {
                catalog.remote_frame_bases(*row)?
            } else {
                Vec::new()
            };
            frames.push((*frame, catalog.remote_frame_objects(*row)?, frame_bases));
        }
        prepared.insert((span.pack, span.range.start), frames);
    }
    // The bases the deltas of this download name, kept until the last delta naming each is
    // checked (those this store holds read now); a plain frame holding one keeps its bytes.
    let named: Vec<&[ObjectId]> = prepared
        .values()
        .flatten()
        .filter(|(frame, ..)| frame.compression == Compression::Delta)
        .map(|(_, _, frame_bases)| frame_bases.as_slice())
        .collect();
    bases.starting(catalog, &named)?;
    drop(named);
    let wanted_bases = std::sync::Arc::new(bases.store.wanted_set());
    let kept = std::sync::Arc::clone(&bases.store.kept);
    let prepared = std::sync::Arc::new(prepared);
    let ranges = spans.iter().map(|s| (s.pack, s.range.clone())).collect();
    let remote_name = remote.name().to_string();
    let keep_raw = raws.is_some();
    let check = {
        std::sync::Arc::new(
            move |pack: ObjectId, range: Range<u64>, bytes: bytes::Bytes| -> Result<CheckedSpan> {
                let frames = &prepared[&(pack, range.start)];
                let mut encoded = Vec::with_capacity(frames.len());
                let mut objects = 0;
                for (frame, members, frame_bases) in frames {
                    let start = (frame.offset - range.start) as usize;
                    let stored = bytes[start..start + frame.stored_length as usize].to_vec();
                    objects += members.len() as u64;
                    if frame.compression == Compression::Delta {
                        encoded.push(Checked::Delta(ArrivedDelta {
                            pack,
                            frame: *frame,
                            objects: members.clone(),
                            bases: frame_bases.clone(),
                            stored,
                        }));
                        continue;
                    }
                    let is_base = members.iter().any(|(id, kind, ..)| {
                        *kind == ObjectKind::Chunk && wanted_bases.contains(id)
                    });
                    let checked = if keep_raw || is_base {
                        EncodedFrame::verified_with_raw(
                            stored,
                            frame.raw_length,
                            frame.compression,
                            members.clone(),
                        )
                    } else {
                        EncodedFrame::verified(
                            stored,
                            frame.raw_length,
                            frame.compression,
                            members.clone(),
                        )
                        .map(|frame| (frame, Vec::new()))
                    };
                    let (frame_checked, raw) = checked.map_err(|detail| {
                        Error::corrupt(
                            format!("{remote_name}:{}", remote::pack_key(&pack)),
                            format!("frame at offset {}: {detail}", frame.offset),
                        )
                    })?;
                    // Kept within the download's memory budget (past it, on disk) as they
                    // are checked: a span of compressible frames may hold far more raw bytes
                    // than it stores.
                    let mut base_pieces = Vec::new();
                    for (id, kind, offset, length) in members {
                        if *kind == ObjectKind::Chunk && wanted_bases.contains(id) {
                            let piece = &raw[*offset as usize..(*offset + *length) as usize];
                            base_pieces.push((*id, kept::keep_base(&kept, piece)?));
                        }
                    }
                    encoded.push(Checked::Plain {
                        at: (pack, frame.offset),
                        frame: frame_checked,
                        raw: if keep_raw { raw } else { Vec::new() },
                        bases: base_pieces,
                    });
                }
                Ok((encoded, objects, bytes.len() as u64))
            },
        )
    };
    let mut transfer = Transfer::default();
    progress.start("download", total, Unit::Bytes);
    remote.get_ranges(ranges, jobs, check, |(frames, objects, bytes)| {
        for checked in frames {
            match checked {
                Checked::Plain {
                    at,
                    frame,
                    raw,
                    bases: pieces,
                } => {
                    for (id, held) in pieces {
                        bases.store.arrived(id, held);
                    }
                    if check_only.contains(&at) {
                        continue;
                    }
                    sink.add(frame)?;
                    if let Some(raws) = raws.as_deref_mut() {
                        raws.push(raw);
                    }
                }
                Checked::Delta(delta) => bases.arrived(delta)?,
            }
        }
        // The deltas whose bases are now at hand, checked at once: what waits stays small.
        bases.resolve(&mut |delta, frame, raw| {
            append_delta(&check_only, (sink, raws.as_deref_mut()), delta, frame, raw)
        })?;
        transfer.objects += objects;
        transfer.bytes += bytes;
        progress.advance(bytes);
        Ok(())
    })?;
    // The deltas waiting for bases this store holds (or for deltas that do).
    bases.read_local(catalog, &mut |delta, frame, raw| {
        append_delta(&check_only, (sink, raws.as_deref_mut()), delta, frame, raw)
    })?;
    if !bases.carry {
        bases.finish()?;
    }
    Ok(transfer)
}

/// Appends a checked delta frame (and its raw bytes, when the caller keeps them) to `sink`,
/// unless it came only to check another delta (`check_only`).
///
/// # Errors
/// The sink's errors.
fn append_delta(
    check_only: &HashSet<(ObjectId, u64)>,
    (sink, raws): (&PackSink, Option<&mut Vec<Vec<u8>>>),
    delta: &PendingDelta,
    frame: EncodedFrame,
    raw: Vec<u8>,
) -> Result<()> {
    if check_only.contains(&(delta.pack, delta.frame.offset)) {
        return Ok(());
    }
    sink.add(frame)?;
    if let Some(raws) = raws {
        raws.push(raw);
    }
    Ok(())
}

/// Records packs downloaded from remote `remote_name` in the catalog, under the store lock.
/// File maps among them are recorded as unproven: keyed by their file's id, not by their
/// own bytes, a map is trusted only once its file's bytes are checked against it (see
/// `ObjectReader::file_chunks`). Each pack's index is read back once (which checks the pack's
/// length and its index's hash).
///
/// # Errors
/// [`Error::Io`], [`Error::Catalog`].
pub(crate) fn record_fetched(
    store: &mut Store,
    sealed: &[PackFile],
    remote_name: &str,
) -> Result<()> {
    let packs_dir = store.packs_dir();
    let indexes = sealed
        .iter()
        .map(|pack| pack.read_index(&packs_dir))
        .collect::<Result<Vec<_>>>()?;
    record_fetched_indexes(store, &[(&indexes, remote_name)])
}

/// [`record_fetched`] for packs whose indexes the caller has read back already
/// ([`PackFile::read_index`]), several downloads at once, each `(indexes, remote name)`, in
/// one transaction (the read engine's group commit batches its fetches so).
///
/// # Errors
/// [`Error::Catalog`]; nothing is recorded then.
pub(crate) fn record_fetched_indexes(
    store: &mut Store,
    groups: &[(&[crate::pack::SealedPack], &str)],
) -> Result<()> {
    let _lock = store.lock_head_alone()?;
    let writer = store.catalog_mut().writer()?;
    let mut maps = Vec::new();
    for (indexes, remote_name) in groups {
        for index in *indexes {
            writer.add_pack(index)?;
            maps.extend(
                index
                    .objects
                    .iter()
                    .filter(|o| o.kind == ObjectKind::FileMap)
                    .map(|o| (o.id, index.id, *remote_name)),
            );
        }
    }
    // Decided inside the transaction: a map is unproven when the row now names this
    // download's pack (no map was here, or another reader forgot a wrong one meanwhile).
    for (id, pack, remote_name) in maps {
        if writer.file_map_pack(&id)? == Some(pack) {
            writer.add_unproven_file_map(&id, remote_name)?;
        }
    }
    writer.commit()
}

/// Downloads the frames holding `wanted` objects from `remote` into new local packs and
/// records those packs. Objects the remote does not hold are left out (the caller checks).
pub(crate) fn download(
    store: &mut Store,
    data: &SharedDataLock,
    record: &RemoteRecord,
    remote: &Remote,
    wanted: &[(ObjectId, ObjectKind)],
    jobs: usize,
    progress: &dyn Progress,
) -> Result<Transfer> {
    // One download at a time per store: processes pulling the same data (one per GPU) wait
    // for each other, and each downloads only what is still missing once it has the lock.
    let _download_lock = store.lock_downloads(data)?;
    let frames: BTreeMap<_, _> = frames_of(store.catalog(), record.id, wanted)?
        .into_iter()
        .map(|(key, (frame, row, _))| (key, (frame, row)))
        .collect();
    if frames.is_empty() {
        return Ok(Transfer::default());
    }
    let spans = spans(frames, MAX_SPAN);
    let sink = PackSink::new(&store.packs_dir(), &store.temp_dir());
    let mut bases = DeltaBases::new(Some(&store.packs_dir()), &store.temp_dir());
    let fetched = fetch_spans(
        store.catalog(),
        remote,
        &spans,
        jobs,
        (&sink, None),
        &mut bases,
        progress,
    );
    progress.phase("recording");
    let mut transfer = match fetched {
        Ok(transfer) => transfer,
        Err(e) => {
            sink.abandon(store);
            return Err(e);
        }
    };
    let sealed = sink.finish()?;
    transfer.packs = sealed.len() as u64;
    record_fetched(store, &sealed, &record.name)?;
    Ok(transfer)
}

/// Every chunk (and file map) `versions` need that this store lacks, restricted to paths
/// matching `include` when given. Trees and file maps must be here (fetched) already.
pub(crate) fn missing_chunks(
    store: &Store,
    versions: &[ObjectId],
    include: Option<&globset::GlobSet>,
) -> Result<Vec<(ObjectId, ObjectKind)>> {
    let mut reader = store.reader();
    let mut missing = HashSet::new();
    // With a filter, a subtree shared by two paths must be seen under each.
    let mut seen_trees = HashSet::new();
    for id in versions {
        let root = reader.version(id)?.tree;
        let seen = include.is_none().then_some(&mut seen_trees);
        walk_reachable(&mut reader, &root, seen, &mut |reached| {
            if let Reached::File { path, id, chunks } = reached
                && include.is_none_or(|set| set.is_match(path))
            {
                // No file map here (never fetched, or rejected by its proof): the file is
                // its own only chunk, or its map must come from a remote first.
                if chunks == [id]
                    && !store.catalog().has_object(&id, ObjectKind::Chunk)?
                    && !store.catalog().has_object(&id, ObjectKind::FileMap)?
                {
                    missing.insert((id, ObjectKind::FileMap));
                }
                for chunk in chunks {
                    if !store.catalog().has_object(&chunk, ObjectKind::Chunk)? {
                        missing.insert((chunk, ObjectKind::Chunk));
                    }
                }
            }
            Ok(())
        })?;
    }
    Ok(missing.into_iter().collect())
}

/// Downloads whatever chunks `versions` need (under `include`) from the configured remotes,
/// in read order, falling back to the next on a miss or a failure ("Fallback" above).
/// `first`, a remote the caller opened already (pull's), is asked before the others and its
/// requests are left to the caller to count. Without remotes, or with nothing
/// missing, contacts nothing.
///
/// # Errors
/// [`Error::MissingObject`] when no remote holds a needed chunk; [`Error::RemotesFailed`]
/// (or the one remote's error) when a remote failed and no other served the data.
pub fn fetch_missing(
    store: &mut Store,
    versions: &[ObjectId],
    include: Option<&globset::GlobSet>,
    first: Option<(&RemoteRecord, &Remote)>,
    jobs: usize,
    progress: &dyn Progress,
) -> Result<Transfer> {
    let data_lock = store.lock_data_shared()?;
    fetch_missing_under(store, &data_lock, versions, include, first, jobs, progress)
}

/// [`fetch_missing`] under the shared data lock `data`, which the caller holds (the lock is
/// never taken twice: see crate::store).
pub(crate) fn fetch_missing_under(
    store: &mut Store,
    data: &SharedDataLock,
    versions: &[ObjectId],
    include: Option<&globset::GlobSet>,
    first: Option<(&RemoteRecord, &Remote)>,
    jobs: usize,
    progress: &dyn Progress,
) -> Result<Transfer> {
    for version in versions {
        if store.catalog().removed_at(version)?.is_some() {
            return Err(Error::VersionRemoved {
                version: version.to_hex(),
            });
        }
    }
    // One operation: a remote that fails in the first round is not asked in the second.
    let mut attempts = fallback::Attempts::new();
    let wanted = Wanted {
        versions,
        include,
        first,
        jobs,
    };
    let (mut transfer, fetched_maps) =
        fetch_missing_round(store, data, &wanted, progress, &mut attempts)?;
    // File maps that came now list chunks of their own: fetch those too (once).
    if fetched_maps {
        let (more, _) = fetch_missing_round(store, data, &wanted, progress, &mut attempts)?;
        transfer.add_moved(&more);
        transfer.requests += more.requests;
    }
    Ok(transfer)
}

/// What a round of [`fetch_missing_under`] looks for and where: the chunks `versions` need
/// (under `include`), `first` asked first, `jobs` requests in flight.
struct Wanted<'a> {
    versions: &'a [ObjectId],
    include: Option<&'a globset::GlobSet>,
    first: Option<(&'a RemoteRecord, &'a Remote)>,
    jobs: usize,
}

/// One round of [`fetch_missing_under`]: lists what `wanted` lacks, then fetches it. Returns
/// the transfer and whether file maps were asked for (their chunks need another round).
fn fetch_missing_round(
    store: &mut Store,
    data: &SharedDataLock,
    wanted: &Wanted<'_>,
    progress: &dyn Progress,
    attempts: &mut fallback::Attempts,
) -> Result<(Transfer, bool)> {
    progress.phase("finding the missing data");
    let missing = missing_chunks(store, wanted.versions, wanted.include)?;
    let wanted_maps = missing.iter().any(|(_, kind)| *kind == ObjectKind::FileMap);
    let (first, jobs) = (wanted.first, wanted.jobs);
    let transfer = fetch_objects(store, data, missing, first, jobs, progress, attempts)?;
    Ok((transfer, wanted_maps))
}

/// Downloads objects `missing` from the configured remotes, in read order, each remote asked
/// for what the ones before it did not serve, a remote that fails (or failed before in
/// `attempts`) passed over ("Fallback" above). `first` is a remote the caller opened (its
/// requests are the caller's to count). Contacts nothing when `missing` is empty.
///
/// # Errors
/// [`Error::MissingObject`] when every remote missed one of them; the failure
/// ([`Error::RemotesFailed`] when several were asked) when a remote failed and none served
/// it; local errors ([`Error::Catalog`], [`Error::Io`]) as they come.
fn fetch_objects(
    store: &mut Store,
    data: &SharedDataLock,
    mut missing: Vec<(ObjectId, ObjectKind)>,
    first: Option<(&RemoteRecord, &Remote)>,
    jobs: usize,
    progress: &dyn Progress,
    attempts: &mut fallback::Attempts,
) -> Result<Transfer> {
    let mut transfer = Transfer::default();
    if missing.is_empty() {
        return Ok(transfer);
    }
    let mut order = attempts.order(store.catalog().remotes()?);
    if let Some((named, _)) = first
        && let Some(at) = order.iter().position(|r| r.name == named.name)
    {
        let named = order.remove(at);
        order.insert(0, named);
    }
    let last = order.len().saturating_sub(1);
    for (at, record) in order.into_iter().enumerate() {
        if missing.is_empty() {
            break;
        }
        let opened;
        let (remote, callers) = match first {
            Some((f, remote)) if f.name == record.name => (remote, true),
            _ => match attempts.open(&record.name, || Remote::open(&record))? {
                Some(remote) => {
                    opened = remote;
                    (&opened, false)
                }
                None => {
                    transfer.served(&failed_served(&record.name, attempts));
                    continue;
                }
            },
        };
        // A stall here is a failure only while another remote can serve instead.
        remote.set_others_remain(at < last);
        let before = remote.requests();
        let got = attempts.attempt(&record.name, || {
            // The remote may hold packs pushed since this store last looked.
            let has_all = missing.iter().try_fold(true, |all, (id, kind)| {
                Ok::<_, Error>(
                    all && store
                        .catalog()
                        .remote_locate(record.id, id, *kind)?
                        .is_some(),
                )
            })?;
            if !has_all {
                refresh_indexes(store, &record, remote, jobs)?;
            }
            download(store, data, &record, remote, &missing, jobs, progress)
        })?;
        // The caller's remote goes back as it came (its other reads have no fallback).
        remote.set_others_remain(false);
        if !callers {
            transfer.requests += remote.requests() - before;
        }
        match got {
            Some(got) => {
                if got.objects > 0 {
                    attempts.served(&record.name);
                }
                transfer.add_moved(&got);
                transfer.served(&RemoteServed {
                    remote: record.name.clone(),
                    objects: got.objects,
                    bytes: got.bytes,
                    error: None,
                });
            }
            None => transfer.served(&failed_served(&record.name, attempts)),
        }
        let catalog = store.catalog();
        // A file wanted as its own chunk or as a file map needs only one of the two.
        missing.retain(|(id, kind)| {
            let has = |kind| catalog.has_object(id, kind).unwrap_or(false);
            !has(*kind)
                && match kind {
                    ObjectKind::FileMap => !has(ObjectKind::Chunk),
                    ObjectKind::Chunk => !has(ObjectKind::FileMap),
                    _ => true,
                }
        });
    }
    if let Some((id, kind)) = missing.first() {
        return Err(attempts.missing(Error::MissingObject {
            id: id.to_hex(),
            what: kind.name(),
        }));
    }
    Ok(transfer)
}

/// The report of remote `name`, which just failed in `attempts`.
fn failed_served(name: &str, attempts: &fallback::Attempts) -> RemoteServed {
    RemoteServed {
        remote: name.to_string(),
        error: attempts
            .failures()
            .into_iter()
            .find(|(failed, _)| failed == name)
            .map(|(_, message)| message),
        ..RemoteServed::default()
    }
}

pub(crate) fn is_ancestor(
    store: &Store,
    ancestor: &ObjectId,
    descendant: &ObjectId,
) -> Result<bool> {
    store.catalog().is_ancestor(ancestor, descendant)
}

/// Downloads whatever chunks files `files` (file id, size in bytes) need from the configured
/// remotes, as [`fetch_missing`] does for whole versions, but without walking a version's
/// trees: for a reader that knows which files it reads next (the Python package prefetches
/// the files its workers are about to read). Without remotes, or with nothing missing,
/// contacts nothing.
///
/// # Errors
/// [`Error::MissingObject`] when no remote holds a needed chunk; [`Error::Corrupt`] for a
/// malformed file map; as [`fetch_missing`].
pub fn fetch_files(
    store: &mut Store,
    files: &[(ObjectId, u64)],
    jobs: usize,
    progress: &dyn Progress,
) -> Result<Transfer> {
    fetch_files_with(store, files, jobs, progress, &mut fallback::Attempts::new())
}

/// [`fetch_files`] as part of a read whose remotes' failures `attempts` remembers.
///
/// # Errors
/// As [`fetch_files`].
pub(crate) fn fetch_files_with(
    store: &mut Store,
    files: &[(ObjectId, u64)],
    jobs: usize,
    progress: &dyn Progress,
    attempts: &mut fallback::Attempts,
) -> Result<Transfer> {
    let data_lock = store.lock_data_shared()?;
    let mut transfer = Transfer::default();
    // A second round for the chunks of file maps that arrive in the first.
    for _ in 0..2 {
        let mut missing = HashSet::new();
        {
            let mut reader = store.reader();
            for (id, size) in files {
                // A file stored as one chunk (its own id) is here whole: one lookup.
                if store.catalog().has_object(id, ObjectKind::Chunk)? {
                    continue;
                }
                let chunks = reader.chunk_ids(id, *size)?;
                // As in `missing_chunks`: no file map here, so the file is its own only
                // chunk, or its map must come from a remote first.
                if chunks == [*id]
                    && !store.catalog().has_object(id, ObjectKind::Chunk)?
                    && !store.catalog().has_object(id, ObjectKind::FileMap)?
                {
                    missing.insert((*id, ObjectKind::FileMap));
                }
                for chunk in chunks {
                    if !store.catalog().has_object(&chunk, ObjectKind::Chunk)? {
                        missing.insert((chunk, ObjectKind::Chunk));
                    }
                }
            }
        }
        let wanted_maps = missing.iter().any(|(_, kind)| *kind == ObjectKind::FileMap);
        let got = fetch_objects(
            store,
            &data_lock,
            missing.into_iter().collect(),
            None,
            jobs,
            progress,
            attempts,
        )?;
        transfer.add_moved(&got);
        transfer.requests += got.requests;
        if !wanted_maps {
            break;
        }
    }
    Ok(transfer)
}

/// The grace writers assume when a remote has no format object yet (no `gc --remote` has
/// run): the default of `dsv gc --remote --grace`, 24 hours, in seconds.
pub(crate) const DEFAULT_REMOTE_GRACE_SECONDS: u64 = 24 * 3600;

/// What a writer (push, copy) may rely on in a remote that `dsv gc --remote` collects: the
/// remote's pack indexes (refreshed) minus the packs with a gc mark. The writers' rule
/// (docs/format.md, "Remote garbage collection"):
///
/// 1. An object found only in marked packs counts as absent: the writer sends it again, in
///    a pack whose id is not marked (`WriterView::is_marked`; a local pack whose id is
///    marked goes up as a fresh copy under a new id).
/// 2. Every remote pack the writer relies on (holding an object it did not send, or one it
///    sent) is remembered, and `WriterView::recheck` right before the writer moves refs
///    lists the marks again: a relied-on pack marked meanwhile sends its objects again.
/// 3. While moving refs, a writer whose last check is older than half the grace
///    ([`WriterView::stale`]) checks again.
///
/// Opening the view refuses a remote whose format is newer than this dsv knows
/// ([`Error::RemoteFormatTooNew`]).
#[derive(Debug)]
pub struct WriterView {
    remote: String,
    collected: bool,
    marked: HashSet<ObjectId>,
    grace: std::time::Duration,
    checked_at: std::time::Instant,
}

/// Opens a writer's view of `remote` (see [`WriterView`]): reads the format key (refusing a
/// newer format), refreshes the store's record of the remote's pack indexes
/// (`refresh_indexes`) and lists the gc marks. Three requests plus the new indexes.
///
/// # Errors
/// [`Error::RemoteFormatTooNew`]; as [`refresh_indexes`] (remote errors, [`Error::Corrupt`]
/// for a malformed index, [`Error::Catalog`]).
pub(crate) fn writer_view(
    store: &mut Store,
    record: &RemoteRecord,
    remote: &Remote,
    jobs: usize,
) -> Result<WriterView> {
    let (grace, collected) = check_remote_format(remote)?;
    let marked = remote.list_marks()?.into_keys().collect();
    refresh_indexes_except(store, record, remote, jobs, &marked)?;
    Ok(WriterView {
        remote: remote.name().to_string(),
        collected,
        marked,
        grace,
        checked_at: std::time::Instant::now(),
    })
}

/// Reads `remote`'s format key: its grace (the default when there is none), and whether it
/// has one (a `gc --remote` has run there).
///
/// # Errors
/// [`Error::RemoteFormatTooNew`]; [`Error::Remote`]; [`Error::Corrupt`] for a malformed
/// format object.
pub(crate) fn check_remote_format(remote: &Remote) -> Result<(std::time::Duration, bool)> {
    match remote.get_format()? {
        Some((format, _)) if format.format > remote::collect::REMOTE_FORMAT => {
            Err(Error::RemoteFormatTooNew {
                remote: remote.name().to_string(),
                found: format.format,
                known: remote::collect::REMOTE_FORMAT,
            })
        }
        Some((format, _)) => Ok((std::time::Duration::from_secs(format.grace_seconds), true)),
        None => Ok((
            std::time::Duration::from_secs(DEFAULT_REMOTE_GRACE_SECONDS),
            false,
        )),
    }
}

impl WriterView {
    /// The remote pack holding object `id` of `kind` that a writer may rely on: the pack the
    /// store's record of the remote's indexes names, unless it is marked. `None`: absent,
    /// send it.
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn locate(
        &self,
        catalog: &crate::catalog::Catalog,
        remote: i64,
        id: &ObjectId,
        kind: ObjectKind,
    ) -> Result<Option<ObjectId>> {
        Ok(self
            .locate_frame(catalog, remote, id, kind)?
            .map(|location| location.pack))
    }

    /// As [`WriterView::locate`], with the frame that holds the object (a delta frame's
    /// bases must be on the remote too: [`crate::catalog::Catalog::remote_frame_bases`]).
    ///
    /// # Errors
    /// [`Error::Catalog`].
    pub fn locate_frame(
        &self,
        catalog: &crate::catalog::Catalog,
        remote: i64,
        id: &ObjectId,
        kind: ObjectKind,
    ) -> Result<Option<crate::catalog::RemoteLocation>> {
        Ok(catalog
            .remote_locate(remote, id, kind)?
            .filter(|location| !self.marked.contains(&location.pack)))
    }

    /// True when `pack` has a gc mark: a pack of this id must not be uploaded (a create-only
    /// put of an existing key does nothing, and the marked pack may be deleted); send its
    /// objects in a pack with another id.
    pub(crate) fn is_marked(&self, pack: &ObjectId) -> bool {
        self.marked.contains(pack)
    }

    /// True when the remote has a format key: a `gc --remote` collects it, so it keeps a
    /// version's data only while a ref reaches it, and a writer must walk (and rely on
    /// packs for) every object of what its refs will name. On a remote never collected, a
    /// version the remote holds implies its data, as before remote gc.
    pub fn collected(&self) -> bool {
        self.collected
    }

    /// True when the last check of the marks is older than half the grace: check again
    /// (`WriterView::recheck`) before moving another ref.
    pub fn stale(&self) -> bool {
        self.checked_at.elapsed() > self.grace / 2
    }

    /// Reads the format key and lists the marks again; returns the packs of `relied` that
    /// are marked now (their objects must be sent again before any ref names them). When
    /// the remote became collected since the view was opened, every pack of `relied` is
    /// returned: the writer's walk took shortcuts only a remote never collected allows.
    ///
    /// # Errors
    /// As [`writer_view`], without refreshing the indexes.
    pub(crate) fn recheck(
        &mut self,
        remote: &Remote,
        relied: &HashSet<ObjectId>,
    ) -> Result<Vec<ObjectId>> {
        let was_collected = self.collected;
        (self.grace, self.collected) = check_remote_format(remote)?;
        self.marked = remote.list_marks()?.into_keys().collect();
        self.checked_at = std::time::Instant::now();
        if self.collected && !was_collected {
            return Ok(relied.iter().copied().collect());
        }
        Ok(relied
            .iter()
            .filter(|pack| self.marked.contains(pack))
            .copied()
            .collect())
    }

    /// Records the remote's pack indexes again without the packs marked now (after a
    /// [`WriterView::recheck`] found new marks), so that the objects of those packs count
    /// as absent and copies sent again are recorded.
    ///
    /// # Errors
    /// As [`writer_view`].
    pub(crate) fn reindex(
        &self,
        store: &mut Store,
        record: &RemoteRecord,
        remote: &Remote,
        jobs: usize,
    ) -> Result<()> {
        refresh_indexes_except(store, record, remote, jobs, &self.marked).map(|_| ())
    }

    /// The remote's name.
    pub fn remote(&self) -> &str {
        &self.remote
    }
}

/// Writes a copy of local pack `source` of `store` under a new id (its frames, then one
/// frame holding a random 32-byte chunk that nothing names) into `dir`, for a writer whose
/// remote has a mark on `source`'s id. Returns the new pack's id and path. Every frame is
/// checked again; a delta frame against its bases, read from `store`.
///
/// # Errors
/// [`Error::Io`], [`Error::Corrupt`] for a pack that fails its checks; errors reading a
/// delta's bases.
pub(crate) fn fresh_copy(
    store: &Store,
    source: &std::path::Path,
    dir: &std::path::Path,
) -> Result<(ObjectId, std::path::PathBuf)> {
    let mut file = crate::store_file::open_read(source).map_err(|e| Error::Io {
        path: source.to_path_buf(),
        source: e,
    })?;
    let index = crate::pack::reader::read_index(&file, source)?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut file, &mut bytes).map_err(|e| Error::Io {
        path: source.to_path_buf(),
        source: e,
    })?;
    let mut reader = store.reader();
    let mut writer = crate::pack::PackWriter::create(dir, dir)?;
    for (at, frame) in index.frames.iter().enumerate() {
        let members: Vec<(ObjectId, ObjectKind, u32, u32)> = index
            .objects
            .iter()
            .filter(|o| o.frame as usize == at)
            .map(|o| (o.id, o.kind, o.offset, o.length))
            .collect();
        let start = frame.offset as usize;
        let stored = bytes
            .get(start..start + frame.stored_length as usize)
            .ok_or_else(|| Error::corrupt(source, "a frame lies past the end of the pack"))?
            .to_vec();
        let bases = index
            .deltas
            .iter()
            .find(|d| d.frame as usize == at)
            .map(|d| d.bases.clone());
        let encoded = match bases {
            Some(bases) => {
                let mut prefix = Vec::new();
                for base in &bases {
                    prefix.extend_from_slice(&reader.bytes(base, ObjectKind::Chunk)?);
                }
                EncodedFrame::verified_delta(stored, frame.raw_length, members, bases, &prefix)
                    .map(|(frame, _)| frame)
            }
            None => EncodedFrame::verified(stored, frame.raw_length, frame.compression, members),
        }
        .map_err(|detail| Error::corrupt(source, detail))?;
        writer.add_frame(encoded)?;
    }
    writer.add_frame(salt_frame(&source.display().to_string()))?;
    let sealed = writer.finish()?;
    Ok((sealed.id, crate::pack::writer::pack_path(dir, &sealed.id)))
}

/// A frame holding one 32-byte chunk that nothing names, different at every call (the time,
/// the process, a counter and `context` hashed): added to a pack that must not come out
/// under the id of a pack a remote has marked (the same frames in the same order would).
pub(crate) fn salt_frame(context: &str) -> EncodedFrame {
    static SALTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let salt = *blake3::hash(
        format!(
            "{nanos} {} {} {context}",
            std::process::id(),
            SALTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        )
        .as_bytes(),
    )
    .as_bytes();
    let mut builder = crate::pack::FrameBuilder::default();
    builder.push(ObjectId::of(&salt), ObjectKind::Chunk, &salt);
    builder.encode(3)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noise(len: usize, seed: u64) -> Vec<u8> {
        let mut state = seed | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 24) as u8
            })
            .collect()
    }

    /// 20 bases of 200 KiB arrive before the 20 deltas naming them (one each) with 1 MiB of
    /// memory allowed: at most 1 MiB is held at once, the rest goes to disk and reads back,
    /// every delta checks, and nothing is held once they are.
    #[test]
    fn bases_past_the_memory_limit_go_to_disk_and_every_delta_still_checks() {
        let dir = tempfile::tempdir().unwrap();
        let limit = 1024 * 1024;
        let mut bases = DeltaBases::with_memory(None, dir.path(), limit);
        let mut compressor = crate::pack::DeltaCompressor::default();
        let mut arrivals = Vec::new();
        let mut expected = HashMap::new();
        for n in 0..20u64 {
            let base = noise(200 * 1024, 2 * n + 1);
            let base_id = ObjectId::of(&base);
            let mut chunk = base[..50_000].to_vec();
            chunk[100..108].copy_from_slice(&n.to_le_bytes());
            let id = ObjectId::of(&chunk);
            let encoded = compressor.compress(3, &base, &chunk).unwrap();
            bases.store.will_use(&[base_id]);
            expected.insert(id, chunk);
            arrivals.push((base_id, base, id, encoded));
        }
        for (base_id, base, ..) in &arrivals {
            let held = kept::keep_base(&bases.store.kept, base).unwrap();
            bases.store.arrived(*base_id, held);
        }
        let mut checked = Vec::new();
        for (n, (base_id, _, id, encoded)) in arrivals.into_iter().enumerate() {
            bases
                .arrived(ArrivedDelta {
                    pack: ObjectId::of(b"pack"),
                    frame: FrameRecord {
                        offset: n as u64,
                        stored_length: encoded.len() as u32,
                        raw_length: 50_000,
                        compression: Compression::Delta,
                    },
                    objects: vec![(id, ObjectKind::Chunk, 0, 50_000)],
                    bases: vec![base_id],
                    stored: encoded,
                })
                .unwrap();
            bases
                .resolve(&mut |delta, _, raw| {
                    checked.push((delta.objects[0].0, raw));
                    Ok(())
                })
                .unwrap();
        }
        assert_eq!(checked.len(), 20);
        for (id, raw) in checked {
            assert!(expected[&id] == raw);
        }
        let (peak, spilled) = bases.kept_bytes();
        assert!(peak <= limit, "{peak} bytes held at once");
        assert!(spilled >= 15 * 200 * 1024, "{spilled} bytes on disk");
        assert_eq!(bases.store.len(), 0, "every base is let go");
        bases.finish().unwrap();
    }
}
