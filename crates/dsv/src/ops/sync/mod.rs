//! Sync with remotes: what fetch ([`mod@fetch`]), push ([`mod@push`]), pull ([`mod@pull`]) and clone
//! ([`mod@clone`]) share (opening a remote, pack indexes, downloading frames, fetching the chunks
//! a checkout or a reader lacks), and the remotes a store knows ([`remotes`]).
//!
//! What moves is frames and packs, never single objects:
//! - push uploads whole local packs that hold objects the remote lacks (so 70,000 small
//!   files travel in a few dozen requests), each followed by its index (`.idx`), then moves
//!   the refs with a compare-and-swap;
//! - fetch and pull download byte ranges of remote packs: only the frames holding wanted
//!   objects, neighbours within [`COALESCE_GAP`] merged into one ranged GET of at most
//!   [`MAX_SPAN`] bytes. Each frame is checked (it decompresses to its length, every object
//!   hashes to its id) and appended byte for byte to a new local pack; if any check fails,
//!   the packs of that download are deleted and nothing is recorded.
//!
//! Metadata (versions, trees, file maps) lives in frames of its own, so a fetch or clone
//! downloads it without any chunk; chunks come when a checkout or pull needs them.
//!
//! # How sync works
//!
//! `remote/mod.rs` (the backend), `ops/sync/mod.rs` (downloads, `fetch_missing`,
//! `fetch_files`), `ops/sync/fetch.rs`, `push.rs`, `pull.rs` (with `prepare_remote_revision`),
//! `clone.rs`, `remotes.rs`, `catalog/remotes.rs` (what the store records about each
//! remote). Each command's steps are in its module's rustdoc. Keys and byte formats on the remote are in
//! `docs/format.md#remote-layout`; commands in `docs/cli.md#dsv-remote-add`.
//!
//! What travels is packs and frames, never single objects: push uploads whole local packs, and
//! fetch, pull and checkout download byte ranges of remote packs, one frame or a run of
//! neighbouring frames per request. So 3,000 small files go up in a handful of requests (a
//! test holds a push of 3,000 files to 20 requests or fewer).
//!
//! ## What the store records
//!
//! - `remote_refs`: each ref as last fetched or pushed: the version, and the ref object's
//!   ETag, object version and Last-Modified as the backend reported them.
//! - `remote_packs`, `remote_frames`, `remote_objects`: a copy of the index of every remote pack
//!   this store has seen. With it, dsv knows without asking which objects a remote holds
//!   (push) and which byte range of which remote pack holds the frame of an object (fetch),
//!   without asking the remote about single objects.
//!
//!
//! ## Downloading frames
//!
//! `download()`, used by fetch (metadata) and by `fetch_missing` (chunks):
//!
//! 1. **Locate.** For each wanted object, `remote_locate` gives the remote pack and frame
//!    that hold it. Frames are de-duplicated and sorted by (pack, offset).
//! 2. **Coalesce.** Neighbouring frames of one pack are merged into one span when the next
//!    frame starts at most `COALESCE_GAP` (128 KiB) after the span's end and the span stays
//!    within `MAX_SPAN` (16 MiB). The bytes between merged frames are downloaded and
//!    discarded. A single frame larger than `MAX_SPAN` is a span of its own.
//! 3. **Ranged GETs**, `jobs` in flight, handled in the order they complete. A response
//!    shorter than its range is `Error::Corrupt`. Ctrl-C is checked after each response.
//! 4. **Verify and append.** Each response is checked on tokio's blocking pool as soon as
//!    it arrives (so checks use every core while other requests are in flight), with frame
//!    and object lists read from the catalog before the first request; for each frame,
//!    `EncodedFrame::verified` checks that its raw length is at most 256 MiB, that it
//!    decompresses to exactly its raw length, that every object the remote's index lists in
//!    that frame lies inside it, and that every chunk, tree and version hashes to its id
//!    (file maps are checked when their file is read: see below). The frame's stored
//!    bytes are then appended unchanged, on the calling thread, to a `PackSink`, the same
//!    writer commit uses:
//!    new local packs in `.dsv/tmp/`, sealed at 32 MiB, fsynced, renamed into `.dsv/packs/`.
//!    Every object of the frame is kept, not only the wanted ones.
//! 5. **On any failure** (a check, a request, Ctrl-C), `PackSink::abandon` deletes the packs
//!    this download sealed and its open temporary pack, nothing is recorded, and the error
//!    is returned. On success, the last pack is sealed and one transaction, under the store
//!    lock, catalogues the new packs (`add_pack`, `INSERT OR IGNORE` as for a commit) and
//!    lists in `unproven_file_maps`, with the remote's name, every file map whose row names one
//!    of the new packs once they are added (decided inside the transaction, so a map another
//!    reader forgot meanwhile is never recorded as proven).
//!
//! **Unproven file maps.** A file map is keyed by its file's id, not by the hash of its own
//! bytes, so no frame check can tell a wrong one from the right one, and a damaged or hostile
//! remote could send a map listing other chunks of the right lengths. So the first read of the
//! file through `ObjectReader::file_chunks` (checkout step 7, `cat`, `verify`) proves it:
//! the chunks are reassembled and hashed, and a hash equal to the file id deletes its
//! `unproven_file_maps` row. A different hash deletes the map from `objects` (its bytes stay in
//! their pack until `gc`) and fails the read with `Error::Corrupt` naming `remote NAME`. Both
//! apply only to the map that was checked (`Catalog::prove_file_map_at`,
//! `reject_file_map_at`: still at the same place and unproven), and the map's place and its
//! proof are read in one query (`locate_file_and_proof`). The read engine proves such a map
//! block by block against the file's outboard instead (see "The read engine"). With
//! no map catalogued, the file's walk sees it as its own only chunk, so the next
//! `fetch_missing` (pull, or a checkout in a store with remotes) asks the remotes for the map
//! again, and, in a second round, for the chunks the maps it got list.
//!
//! Since file maps are written in frames of their own (`docs/format.md#frames-and-compression`),
//! the metadata frames hold no chunk. Packs of an older dsv may mix file maps and chunks in one
//! frame; they still work, and a fetch then downloads those chunks too.
//!
//!
//!
//!
//! ## The ref cache
//!
//! The rule is the Determined/YogaDL data layer's: a local copy of remote data, keyed by the
//! dataset's version, is reused as long as the remote object's identity still matches what
//! was recorded when the copy was made. Here the remote object is the ref, and its identity is
//! its ETag and Last-Modified. `prepare_remote_revision` sends one HEAD for the ref and
//! compares with the recorded `etag` (quotes ignored: some backends quote ETags in a HEAD but
//! not in a listing) and `last_modified` (seconds); it is a hit only when both match and the
//! version the ref names is recorded here. Otherwise (no record, a changed or deleted ref) it
//! is a refresh: refs, pack indexes and metadata are fetched again. `fetch` applies the same
//! idea per ref, comparing the recorded ETag with the one the listing gives. Chunks need no
//! such rule: they are content-addressed, so a chunk held here is right whatever a ref says,
//! and only missing chunks are ever downloaded.
//!
//! ## Retries and resumption
//!
//! - **Retries** are `object_store`'s, under the `RetryConfig` of `remote::retry_config`:
//!   a request that failed with a connection error or reset, a server error (HTTP 5xx), 429
//!   or 408, and a timeout for idempotent requests, is retried up to 10 times within 3 minutes
//!   (the remote options `max_retries` and `retry_timeout` change both), waiting with
//!   exponential backoff (100 ms doubling up to 15 s, with jitter). A GET whose body fails
//!   part-way (a reset, a close before the declared length, the request `timeout` of 30 s
//!   passing during a stall) is resumed by `object_store` with a ranged GET of what is still
//!   missing, under the same count; so a stall is bounded by `timeout` (an option too), and
//!   no read waits forever. After that the request fails with `Error::Remote` (exit 6 for a
//!   network or server error). An answer that arrives whole but is wrong (a byte changed, or
//!   fewer bytes than asked for under a consistent `Content-Length`) is not retried: the
//!   frame check or the length check refuses it as `Error::Corrupt` (exit 5), naming the
//!   remote and the pack, and nothing of the download is kept. `tests/it/faults.rs` makes
//!   each of these faults real with `scripts/fault-proxy.py`, a proxy in front of moto.
//! - **Resumption** comes from content addressing. A push that stops before its refs move (an
//!   error, Ctrl-C, `kill -9`, the server going away during the uploads) has moved no ref, so
//!   the remote never names incomplete data. Its complete packs (those whose `.idx` arrived) are found by the next
//!   push's listing and not sent again; a `.pack` without its `.idx` is ignored and sent
//!   again. A fetch, pull or checkout that stops part-way keeps nothing of the interrupted
//!   download on an error or Ctrl-C (above). After a `kill -9`, its temporary pack is left in
//!   `.dsv/tmp/` (the next commit removes it) and packs it sealed stay unreferenced, as for a
//!   killed commit (Crash safety (`ops`)); the next run downloads what is still
//!   missing. Versions catalogued in a pack but not yet recorded (a kill between the two
//!   transactions) are recorded by the next fetch (`unrecorded_versions`).
//!
//! ## Concurrency with remotes
//!
//! - Responses are checked (decompressed and hashed) on tokio's blocking pool, in parallel
//!   with each other and with requests in flight; only appending to the local pack happens on
//!   the calling thread.
//! - The store lock is taken only around the catalog transactions that record downloaded
//!   packs, fetched versions and refs, and pull's head move.
//! - Downloads into one store take `.dsv/locks/downloads.lock` (exclusive) and, once they hold
//!   it, skip every object another process catalogued meanwhile: processes pulling the same
//!   data (one per GPU) download it once (tested with four parallel pulls). Downloads of
//!   unrelated data into one store therefore run one after another.
//! - Two writers pushing to one remote are serialized by the refs' compare-and-swap: one
//!   wins, the other gets `RemoteDiverged` (tested with two processes creating the same
//!   dataset at once on S3).
//!
//! ## Known limits
//!
//! - `remote_objects` keeps one location per (remote, id, kind), the first pack indexed. If
//!   that pack disappears from the remote while another remote pack also holds the object,
//!   the store forgets the object for that remote (the other pack's index is not read
//!   again): a push uploads it again, and a download from that remote reports it missing.
//!   dsv itself never deletes remote packs.
//! - Push uploads whole packs. A pack that holds an object the remote lacks goes up entire,
//!   with whatever else it holds: objects of other datasets, of versions not pushed, or of
//!   other frames downloaded together. The remote then holds data that no ref needs.
//! - Nothing is ever deleted on a remote: no garbage collection of remote packs (packs of a
//!   push whose ref then lost a race, or left behind by `push --force`), and no deletion of
//!   refs.
//! - A fetch, and so a clone or a ref cache refresh, downloads the metadata of every dataset
//!   and version the remote holds, not only those asked for.
//! - `checkout REMOTE/NAME` and `REMOTE/NAME@TAG` always send their HEAD request, so they need
//!   the remote even when every byte is local; `checkout NAME` does not.
//! - Push sends only data this store holds. Every object a remote lacks must be here: pushing
//!   a clone's versions to a second remote fails with `MissingObject` (exit 5) for chunks the
//!   clone never downloaded.
//! - `push --force` overwrites refs without a compare-and-swap (on `file://`, without the
//!   lock), so it can overwrite a concurrent writer's update.
//! - Refs move one dataset at a time, each recorded here as soon as it moved: a push that
//!   fails part-way through step 7 leaves the later datasets' refs unmoved (a re-run moves them).
//! - `pull` never merges: a diverged local head is kept (`pull --rebase` replays the local
//!   versions onto the remote's when they changed other paths; a path changed on both sides
//!   is a conflict, never merged within a file). A tag that names another version on
//!   the remote is reported `rejected`, not an error.
//! - The `file://` compare-and-swap relies on `flock` on `refs.lock`, so it protects writers
//!   on one machine (and on filesystems where `flock` works across machines).
//! - S3 needs a service that honours `If-Match` / `If-None-Match` on PUT. The tests run against
//!   a local directory, moto's S3 server and Azurite (`scripts/test-servers`). GCS is
//!   configuration-tested only: its URLs are accepted and its client is built, but no test
//!   talks to a GCS server.
//! - `remote_refusal` recognizes a missing bucket and refused credentials by the service's
//!   error codes in the error text; an unrecognized refusal is reported as a network error
//!   (exit 6).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Range;

use serde::Serialize;

use super::ingest::PackSink;
use crate::catalog::{RemoteRecord, RemoteRef, unix_now};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::pack::{EncodedFrame, FrameRecord, PackFile};
use crate::progress::{Progress, Unit};
use crate::remote::{self, RefName, RefState, Remote};
use crate::store::{SharedDataLock, Store};
use crate::tree::{Reached, walk_reachable};

pub mod clone;
pub mod fetch;
pub mod pull;
pub mod push;
pub mod remotes;

pub use clone::{CloneOptions, CloneReport, clone, default_clone_dir};
use fetch::fetch_with;
pub use fetch::{FetchOptions, FetchReport, fetch};
pub use pull::{
    HeadUpdate, PullOptions, PullReport, RefCache, RemoteRevision, prepare_remote_revision, pull,
};
pub use push::{PushOptions, PushReport, PushedRef, push};
pub use remotes::{RemoteListing, add_remote, default_remote, list_remotes, remove_remote};

/// Frames of one pack closer than this many bytes are fetched in one ranged GET.
pub const COALESCE_GAP: u64 = 128 * 1024;
/// The longest ranged GET, in bytes.
pub const MAX_SPAN: u64 = 16 * 1024 * 1024;

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
}

fn open(store: &Store, name: &str) -> Result<(RemoteRecord, Remote)> {
    let record = store.catalog().remote(name)?;
    let remote = Remote::open(&record)?;
    Ok((record, remote))
}

/// True when both ETags are known and equal. Backends differ in quoting them (a listing may
/// give `abc` where a HEAD gives `"abc"`), so the quotes are ignored.
fn same_etag(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.trim_matches('"') == b.trim_matches('"'),
        _ => false,
    }
}

fn remote_ref(name: &RefName, version: ObjectId, state: &RefState) -> RemoteRef {
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
fn refresh_indexes(
    store: &mut Store,
    record: &RemoteRecord,
    remote: &Remote,
    jobs: usize,
) -> Result<u64> {
    let listed = remote.list_packs()?;
    let known = store.catalog().remote_packs(record.id)?;
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
        let (frames, objects) =
            crate::pack::reader::parse_tail(&tail, *size).map_err(|detail| {
                Error::corrupt(format!("{}:{}", record.name, remote::index_key(id)), detail)
            })?;
        indexes.push((id, size, frames, objects));
    }
    let present: HashSet<ObjectId> = listed.iter().map(|(id, _)| *id).collect();
    let writer = store.catalog_mut().writer()?;
    // Packs gone first: an object that moved to a new pack (a remote repacked) keeps one row,
    // the new pack's. Added first, the new rows would be ignored as duplicates and then
    // deleted with the old pack's frames.
    writer.retain_remote_packs(record.id, &present)?;
    for (id, size, frames, objects) in &indexes {
        writer.add_remote_pack(record.id, id, **size, frames, objects)?;
    }
    writer.commit()?;
    Ok(new.len() as u64)
}

/// Reads again the pack indexes of every remote of `store` (new packs added, packs gone
/// dropped): for a reader whose data was pushed since this store last looked.
///
/// # Errors
/// Remote errors; [`Error::Corrupt`] for a malformed index; [`Error::Catalog`].
pub(crate) fn refresh_all_indexes(store: &mut Store, jobs: usize) -> Result<()> {
    for record in store.catalog().remotes()? {
        let remote = Remote::open(&record)?;
        refresh_indexes(store, &record, &remote, jobs)?;
    }
    Ok(())
}

/// One span's frames as checked (each with its raw bytes when asked for, else empty), its
/// object count and its bytes.
type CheckedSpan = (Vec<(EncodedFrame, Vec<u8>)>, u64, u64);

/// The frames of one span with their objects (id, kind, offset, length), for checking.
type PreparedSpan = Vec<(FrameRecord, Vec<(ObjectId, ObjectKind, u32, u32)>)>;

/// One ranged GET: a span of a remote pack and the frames inside it.
pub(crate) struct Span {
    pack: ObjectId,
    range: Range<u64>,
    frames: Vec<(FrameRecord, i64)>,
}

/// The remote frames (by pack and offset: the frame, its catalog row, and the wanted objects
/// in it) holding those of `wanted` that this store lacks and remote `remote` holds.
pub(crate) type FramesOf =
    BTreeMap<(ObjectId, u64), (FrameRecord, i64, Vec<(ObjectId, ObjectKind)>)>;

/// The remote frames holding those of `wanted` that this store lacks and remote `remote`
/// holds, with the wanted objects in each.
///
/// # Errors
/// [`Error::Catalog`].
pub(crate) fn frames_of(
    catalog: &crate::catalog::Catalog,
    remote: i64,
    wanted: &[(ObjectId, ObjectKind)],
) -> Result<FramesOf> {
    let mut frames: FramesOf = BTreeMap::new();
    for (id, kind) in wanted {
        if catalog.has_object(id, *kind)? {
            continue;
        }
        if let Some(location) = catalog.remote_locate(remote, id, *kind)? {
            frames
                .entry((location.pack, location.frame.offset))
                .or_insert_with(|| (location.frame, location.frame_row, Vec::new()))
                .2
                .push((*id, *kind));
        }
    }
    Ok(frames)
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
/// appends the frames to `sink` (and, with `raws`, their raw bytes, in the same order).
/// Nothing is recorded: see [`record_fetched`].
///
/// # Errors
/// [`Error::Remote`]; [`Error::Corrupt`] naming the remote's pack for a frame that fails its
/// check or a short response; [`Error::Catalog`]; [`Error::Interrupted`].
pub(crate) fn fetch_spans(
    catalog: &crate::catalog::Catalog,
    remote: &Remote,
    spans: &[Span],
    jobs: usize,
    sink: &PackSink,
    mut raws: Option<&mut Vec<Vec<u8>>>,
    progress: &dyn Progress,
) -> Result<Transfer> {
    let total: u64 = spans.iter().map(|s| s.range.end - s.range.start).sum();
    // Everything a check needs, read from the catalog up front: checks run on other threads.
    let mut prepared: HashMap<(ObjectId, u64), PreparedSpan> = HashMap::new();
    for span in spans {
        let mut frames = Vec::with_capacity(span.frames.len());
        for (frame, row) in &span.frames {
            frames.push((*frame, catalog.remote_frame_objects(*row)?));
        }
        prepared.insert((span.pack, span.range.start), frames);
    }
    let prepared = std::sync::Arc::new(prepared);
    let ranges = spans.iter().map(|s| (s.pack, s.range.clone())).collect();
    let remote_name = remote.name().to_string();
    let keep_raw = raws.is_some();
    let check = std::sync::Arc::new(
        move |pack: ObjectId, range: Range<u64>, bytes: bytes::Bytes| -> Result<CheckedSpan> {
            let frames = &prepared[&(pack, range.start)];
            let mut encoded = Vec::with_capacity(frames.len());
            let mut objects = 0;
            for (frame, members) in frames {
                let start = (frame.offset - range.start) as usize;
                let stored = bytes[start..start + frame.stored_length as usize].to_vec();
                objects += members.len() as u64;
                let checked = if keep_raw {
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
                encoded.push(checked.map_err(|detail| {
                    Error::corrupt(
                        format!("{remote_name}:{}", remote::pack_key(&pack)),
                        format!("frame at offset {}: {detail}", frame.offset),
                    )
                })?);
            }
            Ok((encoded, objects, bytes.len() as u64))
        },
    );
    let mut transfer = Transfer::default();
    progress.start("download", total, Unit::Bytes);
    remote.get_ranges(ranges, jobs, check, |(frames, objects, bytes)| {
        for (frame, raw) in frames {
            sink.add(frame)?;
            if let Some(raws) = raws.as_deref_mut() {
                raws.push(raw);
            }
        }
        transfer.objects += objects;
        transfer.bytes += bytes;
        progress.advance(bytes);
        Ok(())
    })?;
    Ok(transfer)
}

/// Records packs downloaded from remote `remote_name` in the catalog, under the store lock.
/// File maps among them are recorded as unproven: keyed by their file's id, not by their
/// own bytes, a map is trusted only once its file's bytes are checked against it (see
/// `ObjectReader::file_chunks`). Each pack's index is read back once, one at a time, and
/// handed to `visit` as well.
///
/// # Errors
/// [`Error::Io`], [`Error::Catalog`].
pub(crate) fn record_fetched(
    store: &mut Store,
    sealed: &[PackFile],
    remote_name: &str,
    visit: &mut dyn FnMut(&crate::pack::SealedPack),
) -> Result<()> {
    let _lock = store.lock()?;
    let packs_dir = store.packs_dir();
    let writer = store.catalog_mut().writer()?;
    let mut maps = Vec::new();
    for pack in sealed {
        let index = pack.read_index(&packs_dir)?;
        writer.add_pack(&index)?;
        maps.extend(
            index
                .objects
                .iter()
                .filter(|o| o.kind == ObjectKind::FileMap)
                .map(|o| (o.id, pack.id)),
        );
        visit(&index);
    }
    // Decided inside the transaction: a map is unproven when the row now names this
    // download's pack (no map was here, or another reader forgot a wrong one meanwhile).
    for (id, pack) in maps {
        if writer.file_map_pack(&id)? == Some(pack) {
            writer.add_unproven_file_map(&id, remote_name)?;
        }
    }
    writer.commit()
}

/// Downloads the frames holding `wanted` objects from `remote` into new local packs and
/// records those packs. Objects the remote does not hold are left out (the caller checks).
fn download(
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
    let fetched = fetch_spans(store.catalog(), remote, &spans, jobs, &sink, None, progress);
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
    record_fetched(store, &sealed, &record.name, &mut |_| {})?;
    Ok(transfer)
}

/// Every chunk (and file map) `versions` need that this store lacks, restricted to paths
/// matching `include` when given. Trees and file maps must be here (fetched) already.
fn missing_chunks(
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
/// in name order, preferring `first`. Without remotes, or with nothing missing, contacts
/// nothing.
///
/// # Errors
/// [`Error::MissingObject`] when no remote holds a needed chunk; as [`fetch()`].
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
fn fetch_missing_under(
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
    let (mut transfer, fetched_maps) =
        fetch_missing_round(store, data, versions, include, first, jobs, progress)?;
    // File maps that came now list chunks of their own: fetch those too (once).
    if fetched_maps {
        let (more, _) = fetch_missing_round(store, data, versions, include, first, jobs, progress)?;
        transfer.bytes += more.bytes;
        transfer.packs += more.packs;
        transfer.objects += more.objects;
        transfer.requests += more.requests;
    }
    Ok(transfer)
}

fn fetch_missing_round(
    store: &mut Store,
    data: &SharedDataLock,
    versions: &[ObjectId],
    include: Option<&globset::GlobSet>,
    first: Option<(&RemoteRecord, &Remote)>,
    jobs: usize,
    progress: &dyn Progress,
) -> Result<(Transfer, bool)> {
    progress.phase("finding the missing data");
    let missing = missing_chunks(store, versions, include)?;
    let wanted_maps = missing.iter().any(|(_, kind)| *kind == ObjectKind::FileMap);
    let transfer = fetch_objects(store, data, missing, first, jobs, progress)?;
    Ok((transfer, wanted_maps))
}

/// Downloads objects `missing` from the configured remotes, in name order, preferring
/// `first`; contacts nothing when `missing` is empty.
///
/// # Errors
/// [`Error::MissingObject`] when no remote holds one of them; as [`fetch`].
fn fetch_objects(
    store: &mut Store,
    data: &SharedDataLock,
    mut missing: Vec<(ObjectId, ObjectKind)>,
    first: Option<(&RemoteRecord, &Remote)>,
    jobs: usize,
    progress: &dyn Progress,
) -> Result<Transfer> {
    let mut transfer = Transfer::default();
    if missing.is_empty() {
        return Ok(transfer);
    }
    let mut opened = Vec::new();
    for record in store.catalog().remotes()? {
        if first.is_some_and(|(f, _)| f.name == record.name) {
            continue;
        }
        opened.push(record);
    }
    let mut try_remote = |store: &mut Store,
                          record: &RemoteRecord,
                          remote: &Remote,
                          missing: &mut Vec<(ObjectId, ObjectKind)>|
     -> Result<()> {
        let before = remote.requests();
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
            refresh_indexes(store, record, remote, jobs)?;
        }
        let got = download(store, data, record, remote, missing, jobs, progress)?;
        transfer.bytes += got.bytes;
        transfer.packs += got.packs;
        transfer.objects += got.objects;
        if first.is_none_or(|(f, _)| f.name != record.name) {
            transfer.requests += remote.requests() - before;
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
        Ok(())
    };
    if let Some((record, remote)) = first {
        try_remote(store, record, remote, &mut missing)?;
    }
    for record in opened {
        if missing.is_empty() {
            break;
        }
        let remote = Remote::open(&record)?;
        try_remote(store, &record, &remote, &mut missing)?;
    }
    if let Some((id, kind)) = missing.first() {
        return Err(Error::MissingObject {
            id: id.to_hex(),
            what: kind.name(),
        });
    }
    Ok(transfer)
}

fn is_ancestor(store: &Store, ancestor: &ObjectId, descendant: &ObjectId) -> Result<bool> {
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
/// malformed file map; as [`fetch()`].
pub fn fetch_files(
    store: &mut Store,
    files: &[(ObjectId, u64)],
    jobs: usize,
    progress: &dyn Progress,
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
        )?;
        transfer.bytes += got.bytes;
        transfer.packs += got.packs;
        transfer.objects += got.objects;
        transfer.requests += got.requests;
        if !wanted_maps {
            break;
        }
    }
    Ok(transfer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetch_files_downloads_what_the_named_files_need_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        // Two files far apart (different frames), each larger than a frame.
        let bytes = |seed: u8| -> Vec<u8> {
            (0..1_500_000u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ seed)
                .collect()
        };
        std::fs::write(data.join("a.bin"), bytes(1)).unwrap();
        std::fs::write(data.join("b.bin"), bytes(2)).unwrap();
        let mut origin = Store::init(&dir.path().join("origin")).unwrap();
        let mut options = crate::ops::commit::CommitOptions::new("d");
        options.message = "m".into();
        let version =
            crate::ops::commit::commit(&mut origin, &data, &options, &crate::progress::NoProgress)
                .unwrap()
                .version;
        let url = format!("file://{}", dir.path().join("remote").display());
        std::fs::create_dir_all(dir.path().join("remote")).unwrap();
        add_remote(&mut origin, "origin", &url, &BTreeMap::new()).unwrap();
        push(
            &mut origin,
            "origin",
            None,
            &PushOptions {
                force: false,
                requests: 2,
            },
            &crate::progress::NoProgress,
        )
        .unwrap();
        clone(
            &url,
            &dir.path().join("clone"),
            &CloneOptions {
                remote_options: BTreeMap::new(),
                requests: 2,
            },
            &crate::progress::NoProgress,
        )
        .unwrap();
        let mut store =
            Store::open(&dir.path().join("clone").join(crate::store::STORE_DIR)).unwrap();
        let files = crate::tree::flatten_version(
            &mut store.reader(),
            &store.catalog().version_record(&version).unwrap().version,
        )
        .unwrap();
        let file = |name: &str| {
            let entry = files.iter().find(|e| e.path == name).unwrap();
            (entry.id, entry.size)
        };
        let (a, b) = (file("a.bin"), file("b.bin"));
        let got = fetch_files(&mut store, &[a], 2, &crate::progress::NoProgress).unwrap();
        assert!(got.bytes > 0);
        assert!(store.reader().file_chunks(&a.0, a.1).is_ok());
        assert!(matches!(
            store.reader().file_chunks(&b.0, b.1),
            Err(Error::MissingObject { .. })
        ));
        // Again: nothing is missing, nothing is asked.
        let again = fetch_files(&mut store, &[a], 2, &crate::progress::NoProgress).unwrap();
        assert_eq!((again.bytes, again.requests), (0, 0));
        fetch_files(&mut store, &[a, b], 2, &crate::progress::NoProgress).unwrap();
        assert!(store.reader().file_chunks(&b.0, b.1).is_ok());
    }
}
