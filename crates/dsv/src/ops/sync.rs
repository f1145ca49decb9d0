//! Sync with remotes: fetch (refs, pack indexes, metadata), push, pull, clone, and fetching
//! the chunks a checkout lacks.
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
//! `remote/mod.rs` (the backend), `ops/sync.rs` (fetch, push, pull, clone, `fetch_missing`,
//! `prepare_remote_revision`), `catalog/remotes.rs` (what the store records about each
//! remote). Keys and byte formats on the remote are in
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
//! ## fetch
//!
//! `fetch()` / `fetch_with()`:
//!
//! 1. **Refs.** LIST `refs/`. For each ref listed, if the recorded ETag equals the listed one,
//!    the recorded ref is kept; otherwise the ref is read (GET) and counts as changed.
//! 2. **Pack indexes** (`refresh_indexes`). LIST `packs/`. Only packs whose `.idx` exists are
//!    complete. The `.idx` of each pack not yet recorded is downloaded, `jobs` at a time, and
//!    checked by `parse_tail` (trailer magic, index position against the pack's listed size,
//!    index hash, every record); one that fails is `Error::Corrupt` and nothing is recorded.
//!    One transaction records the new indexes and forgets the packs the listing no longer
//!    shows.
//! 3. **Metadata.** Every version, provenance object, tree and file map that a recorded index
//!    lists and this store lacks (`remote_objects_missing_here`) is downloaded
//!    (below).
//! 4. **Record**, under the store lock: every version object the store now holds but has not
//!    recorded (`unrecorded_versions`) is read through `ObjectReader` (hash-checked) and
//!    recorded without moving any head, creating its dataset, without a head, if it is new;
//!    then one transaction deletes the refs the remote no longer has and records the others.
//!
//! Local heads and tags never move in a fetch.
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
//! ## push
//!
//! `push()`:
//!
//! 1. **Targets.** Every dataset's head, or the one revision given.
//! 2. **Refresh the pack indexes** (`refresh_indexes`, as in fetch step 2): LIST `packs/` and
//!    GET each `.idx` not seen yet, so the store knows what the remote holds now.
//! 3. **Check every head first.** One LIST of `refs/` gives every ref's ETag (`RemoteRefs`);
//!    a ref whose ETag equals the one recorded here is taken from the catalog, any other is
//!    read with a GET. For each target, if the remote head is neither the version pushed nor
//!    an ancestor of it (following parents in this store's version table), the push stops
//!    with `Error::RemoteDiverged` (exit 4) before anything is uploaded, unless `--force`.
//! 4. **Walk** (`objects_to_send`). For each target whose remote head differs: from the
//!    version back along its parents, stopping at the first older version the remote holds,
//!    every version, its provenance object if it has one, tree (each distinct tree once), file
//!    map (files of two or more chunks) and chunk. Each object the remote's recorded indexes lack is located locally
//!    (`Catalog::locate`), and the pack holding it is added to the set to upload. An object
//!    this store lacks is `MissingObject`.
//! 5. **Upload** (`Remote::put_packs`), `jobs` packs at a time. For each pack, the local index
//!    is read and checked again (`read_tail`). A pack smaller than `MULTIPART_THRESHOLD`
//!    (32 MiB) goes up in one create-only PUT; a larger one as a multipart upload in parts
//!    of `PART_SIZE` (8 MiB), `PARTS_IN_FLIGHT` (4) parts at a time. Then its `.idx` (the
//!    pack's tail) goes up with a create-only PUT, so the `.idx` appears only once the pack
//!    is complete. Progress counts each pack's bytes when it is done.
//! 6. **Record** the uploaded packs' indexes in `remote_packs` (one transaction, each pack's
//!    index read back from its file as it is recorded, so one index is in memory at a time).
//! 7. **Move refs**, one dataset at a time. A head that names the pushed version is left
//!    alone (`up-to-date`). A head that is an ancestor is moved by compare-and-swap with the
//!    ETag (and object version) read in step 3 (`updated`); a missing head is created with a
//!    create-only put (`created`); with `--force`, a head that is not an ancestor is
//!    overwritten unconditionally (`forced`). A compare-and-swap that fails (another writer
//!    moved the ref after step 3) is `Error::RemoteDiverged`. Then each local tag of the
//!    version and its ancestors, looked up in the same listing: create it if missing, leave
//!    it if it names the same version, else report it `rejected` (or overwrite it with
//!    `--force`). After each write, a HEAD reads the ref's new ETag and Last-Modified, and
//!    the ref is recorded in `remote_refs` at once (its own transaction), so a failure on a
//!    later ref leaves this store knowing what already moved.
//!
//! Data goes up before any ref moves, so a remote ref never names a version whose objects
//! the remote lacks.
//!
//! ## pull, and checkout of `REMOTE/NAME`
//!
//! `prepare_remote_revision()`, then:
//!
//! 1. **Ref cache.** For a head or a tag, one HEAD request on the ref (see [the rule
//!    below](#the-ref-cache)). On a hit nothing more is asked about refs or metadata; otherwise
//!    the whole remote is fetched as above. For an id prefix no ref is consulted, and the
//!    remote is fetched only when the prefix matches no version recorded here.
//! 2. **Resolve** the revision against the recorded refs (or the recorded versions, for an id
//!    prefix), then follow `~N` along recorded parents.
//! 3. **Missing chunks** (`fetch_missing`). Walk the version's trees (local now); for each
//!    file, or with `--include` each file whose path matches a glob, list its chunk ids from
//!    its file map (`ObjectReader::chunk_ids`), and keep those this store lacks. Then ask the
//!    named remote first and every other remote in name order: if the remote's recorded
//!    indexes lack any of the missing chunks, its pack indexes are refreshed first; then
//!    the frames holding the chunks are downloaded (above). A file
//!    with neither its chunk nor its file map here (a map rejected by its proof) is asked for
//!    as a file map; when any map was asked for, one more round lists and fetches the chunks
//!    the new maps name. A chunk no remote holds is `MissingObject` (exit 5).
//!    `pull` then checks that the pulled version is recorded here; a ref naming a version the
//!    remote does not hold is `Error::Corrupt` naming `remote NAME`.
//! 4. `pull` then takes the store lock and, in one transaction, moves the local head when that
//!    is a fast-forward (no head, or the head is an ancestor of the pulled version), leaves a
//!    diverged head alone, and copies the remote's tags of the dataset that name versions
//!    recorded here and do not exist locally. `checkout` instead checks out the exact
//!    version found in step 2 (checkout (`ops::checkout`)); no head moves.
//! 5. `pull --rebase` with a diverged head then runs `rebase` (`crates/dsv/src/ops/rebase.rs`): the
//!    common ancestor by parent links, a three-way merge of flat listings by path (base,
//!    local head, pulled version; any path both sides changed differently is a conflict, and
//!    then nothing is written), the local versions replayed one by one into new trees and
//!    versions written to new packs, and, under the store lock with the head checked
//!    unchanged, one transaction that records them and moves the head (ref log included).
//!    When the head moved, the workspace of the current directory follows if it held the old
//!    head and `status` finds it clean (a checkout of the new head).
//!
//! A checkout of a local revision in a store that has remotes runs step 3 for its version
//! (every remote in name order) before checking out. With every chunk already here, it sends
//! no request.
//!
//! ## clone
//!
//! `clone()`: `Store::init` in the target directory, `add_remote("origin", URL)`, a fetch,
//! then, under the store lock, a check that every fetched ref names a version now recorded
//! (`check_ref_target`: otherwise `Error::Corrupt` naming `origin:refs/heads/NAME` or
//! `origin:refs/tags/NAME/TAG`), and one transaction sets each dataset's head to the remote's head
//! and creates the remote's tags of those datasets. Only metadata is downloaded; chunks come
//! when a checkout or pull needs them. If any step fails, the new `.dsv` is removed (and the
//! directory, if clone created it).
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
use crate::revision::{MIN_PREFIX, Revision, check_name};
use crate::store::{SharedDataLock, Store};
use crate::tree::{Reached, walk_reachable};

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

/// The outcome of `dsv fetch`.
#[derive(Debug, Serialize)]
pub struct FetchReport {
    /// The remote.
    pub remote: String,
    /// Every ref of the remote, as now recorded.
    pub refs: Vec<RemoteRef>,
    /// Refs that are new or moved since the last fetch.
    pub changed_refs: u64,
    /// Packs of the remote this store had not seen before.
    pub new_packs: u64,
    /// Metadata downloaded.
    pub transfer: Transfer,
}

/// One dataset's ref after a push.
#[derive(Debug, Serialize)]
pub struct PushedRef {
    /// The dataset.
    pub dataset: String,
    /// The tag, or `None` for the head.
    pub tag: Option<String>,
    /// The version the remote ref now names (or still names, when rejected).
    pub version: ObjectId,
    /// The version it named before, if any.
    pub previous: Option<ObjectId>,
    /// `created`, `updated`, `forced`, `up-to-date`, or `rejected` (a tag naming another
    /// version on the remote; `--force` moves it).
    pub status: &'static str,
}

/// The outcome of `dsv push`.
#[derive(Debug, Serialize)]
pub struct PushReport {
    /// The remote.
    pub remote: String,
    /// Heads and tags pushed.
    pub refs: Vec<PushedRef>,
    /// What was uploaded.
    pub transfer: Transfer,
}

/// How a remote revision was resolved: from the local copy of its ref, or after asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefCache {
    /// One HEAD request showed the ref unchanged (same ETag and Last-Modified): the local
    /// copy was used and no metadata downloaded.
    Hit,
    /// The ref was new or had changed: refs and metadata were fetched again.
    Refresh,
    /// The revision named a version id: no ref was consulted.
    NotARef,
}

/// What `pull` did to the local head of the dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum HeadUpdate {
    /// Moved to the pulled version (there was none, or it was an ancestor).
    Moved,
    /// Already at the pulled version.
    UpToDate,
    /// Kept: the local head has versions the pulled one lacks (no merges).
    Diverged,
}

/// The outcome of `dsv pull` (and of the fetching part of `dsv checkout REMOTE/NAME`).
#[derive(Debug, Serialize)]
pub struct PullReport {
    /// The remote.
    pub remote: String,
    /// The dataset.
    pub dataset: String,
    /// The version pulled.
    pub version: ObjectId,
    /// Whether the ref was checked by a HEAD and found unchanged.
    pub ref_cache: RefCache,
    /// What happened to the local head (`pull` only; `None` for a checkout and a dry run).
    pub head: Option<HeadUpdate>,
    /// Metadata and chunks downloaded.
    pub transfer: Transfer,
    /// `pull --rebase` when the local head had diverged (or a dry run): the local versions
    /// replayed onto the pulled one, or the conflicts that stopped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebase: Option<super::rebase::RebaseReport>,
    /// The workspace of the caller's directory when it held the old head: checked out at
    /// the new head, or left alone because it has uncommitted changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<super::rebase::WorkspaceFollow>,
}

/// How to pull ([`pull_with`]).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PullOptions {
    /// Only the files whose path matches one of these globs.
    pub include: Vec<String>,
    /// Requests in flight.
    pub requests: usize,
    /// When the local head has versions the pulled one lacks, replay them onto it
    /// ([`super::rebase::rebase`]) instead of keeping the local head.
    pub rebase: bool,
    /// With `rebase`: fetch, then only plan (no head moves, nothing recorded).
    pub dry_run: bool,
    /// A directory whose workspace follows the head when it held the old one and is clean
    /// (the CLI passes the current directory).
    pub workspace: Option<std::path::PathBuf>,
    /// Parallel workers of the workspace's status and checkout.
    pub jobs: usize,
}

impl PullOptions {
    /// Plain pull options: everything, `requests` in flight, no rebase, no workspace.
    pub fn new(requests: usize) -> PullOptions {
        PullOptions {
            requests,
            jobs: super::checkout::CheckoutOptions::default().jobs,
            ..PullOptions::default()
        }
    }
}

/// The outcome of `dsv clone`.
#[derive(Debug, Serialize)]
pub struct CloneReport {
    /// The new store's directory.
    pub store: std::path::PathBuf,
    /// The remote's name in the new store (`origin`).
    pub remote: String,
    /// The URL cloned.
    pub url: String,
    /// Each dataset and its head.
    pub datasets: BTreeMap<String, ObjectId>,
    /// Metadata downloaded (chunks come when first needed).
    pub transfer: Transfer,
}

/// A revision on a remote: `REMOTE/NAME[@REV]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteRevision {
    /// The remote's name.
    pub remote: String,
    /// The revision within it.
    pub revision: Revision,
}

impl RemoteRevision {
    /// Splits `REMOTE/NAME[@REV]` when `text` has a `/` before any `@` (dataset names have
    /// none); `None` for a local revision.
    ///
    /// # Errors
    /// As [`Revision::parse`]; [`Error::InvalidName`] for a bad remote name.
    pub fn parse(text: &str) -> Result<Option<RemoteRevision>> {
        let before_at = text.split('@').next().unwrap_or(text);
        let Some((remote, _)) = before_at.split_once('/') else {
            return Ok(None);
        };
        check_name("remote", remote)?;
        let revision = Revision::parse(&text[remote.len() + 1..])?;
        Ok(Some(RemoteRevision {
            remote: remote.to_string(),
            revision,
        }))
    }
}

/// Adds a remote after checking its URL and options (nothing is contacted). A local path is
/// taken as the `file://` URL of its absolute path ([`remote::url_from_path`]).
///
/// # Errors
/// [`Error::InvalidName`], [`Error::InvalidRemote`], [`Error::RemoteExists`].
pub fn add_remote(
    store: &mut Store,
    name: &str,
    url: &str,
    options: &BTreeMap<String, String>,
) -> Result<RemoteRecord> {
    check_name("remote", name)?;
    let url = &remote::url_from_path(url);
    remote::check_url(url)?;
    remote::check_options(options)?;
    let record = RemoteRecord {
        id: 0,
        name: name.to_string(),
        url: url.to_string(),
        options: options.clone(),
    };
    // Opening builds the backend client: a bad option is refused now, not at first push.
    Remote::open(&record)?;
    let writer = store.catalog_mut().writer()?;
    writer.add_remote(name, url, options)?;
    writer.commit()?;
    store.catalog().remote(name)
}

/// Removes a remote and what this store recorded about it; its data stays where it is.
///
/// # Errors
/// [`Error::RemoteNotFound`].
pub fn remove_remote(store: &mut Store, name: &str) -> Result<()> {
    let writer = store.catalog_mut().writer()?;
    writer.remove_remote(name)?;
    writer.commit()
}

/// The remote a command uses: `name` when one is given, else the store's setting
/// `remote.default` (`.dsv/config.toml`), else the store's only remote, else the one called
/// `origin`. A given or configured name is returned as it is (an unknown one fails where it
/// is used, with [`Error::RemoteNotFound`]).
///
/// # Errors
/// [`Error::NoRemote`] when the store has no remote; [`Error::AmbiguousRemote`] when it has
/// several and none is called `origin`; [`Error::InvalidConfig`] for a settings file that
/// does not parse.
pub fn default_remote(store: &Store, name: Option<&str>) -> Result<String> {
    if let Some(name) = name {
        return Ok(name.to_string());
    }
    if let Some(name) = store.config()?.remote.default {
        return Ok(name);
    }
    let remotes = store.catalog().remotes()?;
    match remotes.as_slice() {
        [only] => Ok(only.name.clone()),
        _ if remotes.iter().any(|r| r.name == "origin") => Ok("origin".into()),
        [] => Err(Error::NoRemote),
        _ => Err(Error::AmbiguousRemote {
            names: remotes.into_iter().map(|r| r.name).collect(),
        }),
    }
}

/// A configured remote with its refs as last fetched or pushed (`dsv remote ls`). The
/// fields are in name order, as the JSON of `remote ls` has always listed them.
#[derive(Debug, Clone, Serialize)]
pub struct RemoteListing {
    /// Its name (`origin`).
    pub name: String,
    /// Non-secret backend settings.
    pub options: BTreeMap<String, String>,
    /// Its refs as this store last saw them (nothing before the first fetch or push).
    pub refs: Vec<RemoteRef>,
    /// Its URL.
    pub url: String,
}

/// Every configured remote, in name order, with its refs as last fetched or pushed. Nothing
/// is contacted.
///
/// # Errors
/// Catalog errors.
pub fn list_remotes(store: &Store) -> Result<Vec<RemoteListing>> {
    let mut listed = Vec::new();
    for record in store.catalog().remotes()? {
        let refs = store.catalog().remote_refs(record.id)?;
        listed.push(RemoteListing {
            name: record.name,
            options: record.options,
            refs,
            url: record.url,
        });
    }
    Ok(listed)
}

fn open(store: &Store, name: &str) -> Result<(RemoteRecord, Remote)> {
    let record = store.catalog().remote(name)?;
    let remote = Remote::open(&record)?;
    Ok((record, remote))
}

/// Fetches `name`'s refs, the indexes of packs not seen before, and every version, tree and
/// file map this store lacks. No chunk is downloaded; local heads do not move.
///
/// # Errors
/// [`Error::RemoteNotFound`], [`Error::Remote`], [`Error::Corrupt`] (nothing of a corrupt
/// download is kept), [`Error::Interrupted`].
pub fn fetch(
    store: &mut Store,
    name: &str,
    jobs: usize,
    progress: &dyn Progress,
) -> Result<FetchReport> {
    let data_lock = store.lock_data_shared()?;
    let (record, remote) = open(store, name)?;
    fetch_with(store, &data_lock, &record, &remote, jobs, progress)
}

/// [`fetch`] under the shared data lock `data`, which the caller holds.
fn fetch_with(
    store: &mut Store,
    data: &SharedDataLock,
    record: &RemoteRecord,
    remote: &Remote,
    jobs: usize,
    progress: &dyn Progress,
) -> Result<FetchReport> {
    let before = remote.requests();
    progress.phase("listing the remote's refs");
    let listed = remote.list_refs()?;
    let mut refs = Vec::with_capacity(listed.len());
    let mut changed = 0;
    for (ref_name, state) in &listed {
        let stored =
            store
                .catalog()
                .remote_ref(record.id, &ref_name.dataset, ref_name.tag.as_deref())?;
        match stored {
            Some(stored) if same_etag(stored.etag.as_deref(), state.etag.as_deref()) => {
                refs.push(stored);
            }
            _ => {
                // Deleted between the listing and now: skip it like a ref never listed.
                let Some((version, state)) = remote.get_ref(ref_name)? else {
                    continue;
                };
                changed += 1;
                refs.push(remote_ref(ref_name, version, &state));
            }
        }
    }
    progress.phase("reading the remote's pack indexes");
    let new_packs = refresh_indexes(store, record, remote, jobs)?;
    let wanted = store.catalog().remote_objects_missing_here(
        record.id,
        &[
            ObjectKind::Version,
            ObjectKind::Provenance,
            ObjectKind::Tree,
            ObjectKind::FileMap,
            ObjectKind::Outboard,
        ],
    )?;
    let mut transfer = download(store, data, record, remote, &wanted, jobs, progress)?;
    let _lock = store.lock()?;
    record_fetched_versions(store)?;
    // Refs deleted on the remote since the last fetch.
    let gone: Vec<RemoteRef> = store
        .catalog()
        .remote_refs(record.id)?
        .into_iter()
        .filter(|stored| {
            !listed
                .iter()
                .any(|(n, _)| n.dataset == stored.dataset && n.tag == stored.tag)
        })
        .collect();
    let writer = store.catalog_mut().writer()?;
    for stored in &gone {
        writer.remove_remote_ref(record.id, &stored.dataset, stored.tag.as_deref())?;
    }
    for reference in &refs {
        writer.set_remote_ref(record.id, reference)?;
    }
    writer.commit()?;
    transfer.requests = remote.requests() - before;
    Ok(FetchReport {
        remote: record.name.clone(),
        refs,
        changed_refs: changed,
        new_packs,
        transfer,
    })
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

/// Records in the version table every version object the store holds but has not recorded.
fn record_fetched_versions(store: &mut Store) -> Result<()> {
    let ids = store.catalog().unrecorded_versions()?;
    if ids.is_empty() {
        return Ok(());
    }
    let mut versions = Vec::with_capacity(ids.len());
    {
        let mut reader = store.reader();
        let mut checked = crate::tree::CheckedTrees::new();
        // What passes can be served here: a version whose listing this machine's memory
        // cannot hold is refused before any command lists it.
        let memory = crate::object::machine_memory();
        for id in ids {
            let version = reader.version(&id)?;
            if let Some(memory) = memory {
                let limit = crate::object::servable_files(memory);
                if version.files > limit {
                    return Err(Error::VersionTooLarge {
                        version: id.to_hex(),
                        files: version.files,
                        limit,
                        memory,
                    });
                }
            }
            // A hostile remote's tree is refused here, before any command walks it (a tree
            // the remote did not send is for a later fetch to bring).
            match crate::tree::check_version(&mut reader, &version, &mut checked) {
                Ok(()) | Err(Error::MissingObject { .. }) => {}
                Err(e) => return Err(e),
            }
            versions.push((id, version));
        }
    }
    let writer = store.catalog_mut().writer()?;
    for (id, version) in &versions {
        writer.record_version(id, version)?;
    }
    writer.commit()
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
/// [`Error::MissingObject`] when no remote holds a needed chunk; as [`fetch`].
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

/// Resolves `revision` against `record`'s refs as recorded (heads, tags) or the versions
/// this store knows (id prefixes), then walks `~N`.
fn resolve_remote(store: &Store, record: &RemoteRecord, revision: &Revision) -> Result<ObjectId> {
    let text = format!("{}/{revision}", record.name);
    let not_found = || Error::RevisionNotFound {
        revision: text.clone(),
    };
    let catalog = store.catalog();
    let base = if revision.base == "latest" {
        catalog.remote_ref(record.id, &revision.dataset, None)?
    } else {
        catalog.remote_ref(record.id, &revision.dataset, Some(&revision.base))?
    };
    let mut id = match base {
        Some(reference) => reference.version,
        None if revision.base.len() >= MIN_PREFIX && crate::id::is_hex_prefix(&revision.base) => {
            let local = Revision {
                dataset: revision.dataset.clone(),
                base: revision.base.clone(),
                ancestors: 0,
            };
            local.resolve(catalog).map_err(|_| not_found())?
        }
        None => return Err(not_found()),
    };
    for _ in 0..revision.ancestors {
        id = catalog
            .version(&id)?
            .and_then(|r| r.version.parent)
            .ok_or_else(not_found)?;
    }
    Ok(id)
}

/// Makes `REMOTE/NAME[@REV]` available here: for a head or tag, one HEAD request decides
/// whether the recorded ref is current (the Determined/YogaDL rule: compare the remote
/// object's ETag and Last-Modified with those recorded when it was fetched); if so nothing
/// else is asked, else refs and metadata are fetched again. Then the chunks the version
/// needs are downloaded (under `include`). Moves no local head.
///
/// # Errors
/// [`Error::RevisionNotFound`]; as [`fetch`] and [`fetch_missing`].
pub fn prepare_remote_revision(
    store: &mut Store,
    target: &RemoteRevision,
    include: Option<&globset::GlobSet>,
    jobs: usize,
    progress: &dyn Progress,
) -> Result<PullReport> {
    let data_lock = store.lock_data_shared()?;
    let (record, remote) = open(store, &target.remote)?;
    let revision = &target.revision;
    let ref_name = if revision.base == "latest" {
        Some(RefName {
            dataset: revision.dataset.clone(),
            tag: None,
        })
    } else if crate::id::is_hex_prefix(&revision.base) && revision.base.len() >= MIN_PREFIX {
        None
    } else {
        Some(RefName {
            dataset: revision.dataset.clone(),
            tag: Some(revision.base.clone()),
        })
    };
    let mut transfer = Transfer::default();
    let ref_cache = match &ref_name {
        Some(name) => {
            let stored =
                store
                    .catalog()
                    .remote_ref(record.id, &name.dataset, name.tag.as_deref())?;
            let now = remote.head_ref(name)?;
            let current = match (&stored, &now) {
                (Some(stored), Some(now)) => {
                    same_etag(stored.etag.as_deref(), now.etag.as_deref())
                        && stored.last_modified == now.last_modified
                        && store.catalog().version(&stored.version)?.is_some()
                }
                _ => false,
            };
            if current {
                RefCache::Hit
            } else {
                let fetched = fetch_with(store, &data_lock, &record, &remote, jobs, progress)?;
                transfer = fetched.transfer;
                RefCache::Refresh
            }
        }
        None => {
            if resolve_remote(store, &record, revision).is_err() {
                let fetched = fetch_with(store, &data_lock, &record, &remote, jobs, progress)?;
                transfer = fetched.transfer;
            }
            RefCache::NotARef
        }
    };
    let version = resolve_remote(store, &record, revision)?;
    let got = fetch_missing_under(
        store,
        &data_lock,
        &[version],
        include,
        Some((&record, &remote)),
        jobs,
        progress,
    )?;
    transfer.bytes += got.bytes;
    transfer.packs += got.packs;
    transfer.objects += got.objects;
    transfer.requests = remote.requests() + got.requests;
    Ok(PullReport {
        remote: record.name.clone(),
        dataset: revision.dataset.clone(),
        version,
        ref_cache,
        head: None,
        transfer,
        rebase: None,
        workspace: None,
    })
}

/// `dsv pull` with its options: [`pull`], then, with `options.rebase` and a local head that
/// has diverged, [`super::rebase::rebase`] onto the pulled version; when the head moved, the
/// workspace of `options.workspace` follows it if it held the old head and is clean
/// ([`super::rebase::follow_head`]). A dry run fetches and plans, and moves nothing.
///
/// # Errors
/// As [`pull`] and [`super::rebase::rebase`]. Conflicts are no error: the report's
/// `rebase` lists them, and nothing was changed.
pub fn pull_with(
    store: &mut Store,
    target: &RemoteRevision,
    options: &PullOptions,
    progress: &dyn Progress,
) -> Result<PullReport> {
    let dataset = target.revision.dataset.clone();
    let old_head = store.catalog().head_or_none(&dataset)?;
    let revision = &target.revision;
    let onto_name = if revision.base == "latest" && revision.ancestors == 0 {
        format!("{}/{}", target.remote, revision.dataset)
    } else {
        format!("{}/{revision}", target.remote)
    };
    let mut rebase_options = super::rebase::RebaseOptions::new(onto_name);
    rebase_options.dry_run = options.dry_run;
    rebase_options.workspace = options.workspace.clone();
    rebase_options.jobs = options.jobs;
    rebase_options.requests = options.requests;
    // A dry run moves no head: it fetches ONTO and plans the rebase. A real pull moves the
    // head when it can, and rebases when the lines diverged.
    let dry_rebase = options.rebase && options.dry_run;
    let mut report = if dry_rebase {
        prepare_remote_revision(store, target, None, options.requests, progress)?
    } else {
        pull(store, target, &options.include, options.requests, progress)?
    };
    if dry_rebase || (options.rebase && matches!(report.head, Some(HeadUpdate::Diverged))) {
        report.rebase = Some(super::rebase::rebase(
            store,
            &report.dataset,
            &report.version,
            &rebase_options,
            progress,
        )?);
    } else if matches!(report.head, Some(HeadUpdate::Moved))
        && let (Some(dir), Some(old)) = (&options.workspace, old_head)
    {
        report.workspace = super::rebase::follow_head(
            store,
            dir,
            &dataset,
            &old,
            &report.version,
            options.jobs,
            options.requests,
            progress,
        )?;
    }
    Ok(report)
}

/// `dsv pull`: [`prepare_remote_revision`], then moves the local head of the dataset to the
/// pulled version when that is a fast-forward (the local head is absent or an ancestor), and
/// copies the remote's tags of the dataset that do not clash with local ones.
///
/// # Errors
/// As [`prepare_remote_revision`].
pub fn pull(
    store: &mut Store,
    target: &RemoteRevision,
    include: &[String],
    jobs: usize,
    progress: &dyn Progress,
) -> Result<PullReport> {
    let globs = (!include.is_empty())
        .then(|| crate::read::glob_set(include))
        .transpose()?;
    let mut report = prepare_remote_revision(store, target, globs.as_ref(), jobs, progress)?;
    if let Some(globs) = &globs {
        // Each pattern must select something: a typo is an error, not an empty pull.
        let mut matched = vec![false; include.len()];
        let mut reader = store.reader();
        let root = reader.version(&report.version)?.tree;
        walk_reachable(&mut reader, &root, None, &mut |reached| {
            if let Reached::File { path, .. } = reached {
                for index in globs.matches(path) {
                    matched[index] = true;
                }
            }
            Ok(())
        })?;
        crate::read::check_all_matched(
            include,
            &matched,
            &format!("{}/{}", target.remote, target.revision),
        )?;
    }
    let record = store.catalog().remote(&target.remote)?;
    let _lock = store.lock()?;
    let head = store.catalog().head_or_none(&report.dataset)?;
    let update = match head {
        None => HeadUpdate::Moved,
        Some(head) if head == report.version => HeadUpdate::UpToDate,
        Some(head) if is_ancestor(store, &head, &report.version)? => HeadUpdate::Moved,
        Some(_) => HeadUpdate::Diverged,
    };
    let tags: Vec<RemoteRef> = store
        .catalog()
        .remote_refs(record.id)?
        .into_iter()
        .filter(|r| r.dataset == report.dataset && r.tag.is_some())
        .collect();
    let mut copy_tags = Vec::new();
    for tag in tags {
        let name = tag.tag.clone().expect("filtered");
        if store.catalog().version(&tag.version)?.is_some()
            && store
                .catalog()
                .tag(&report.dataset, &name)
                .ok()
                .flatten()
                .is_none()
        {
            copy_tags.push((name, tag.version));
        }
    }
    if store.catalog().version(&report.version)?.is_none() {
        return Err(Error::corrupt(
            format!("remote {}", record.name),
            format!(
                "its ref names version {} of {}, which it does not hold",
                report.version.short(),
                report.dataset
            ),
        ));
    }
    let writer = store.catalog_mut().writer()?;
    if update == HeadUpdate::Moved {
        writer.set_head(&report.dataset, &report.version)?;
    }
    for (name, version) in &copy_tags {
        writer.set_tag(&report.dataset, name, version, false)?;
    }
    writer.commit()?;
    report.head = Some(update);
    Ok(report)
}

/// Records one remote ref as now known.
/// Fails (naming the remote's ref) when a ref fetched from `remote` names a version the
/// fetch did not bring: the remote does not hold it (a damaged or hostile remote).
fn check_ref_target(
    catalog: &crate::catalog::Catalog,
    remote: &str,
    reference: &RemoteRef,
) -> Result<()> {
    if catalog.version(&reference.version)?.is_some() {
        return Ok(());
    }
    let key = match &reference.tag {
        Some(tag) => format!("refs/tags/{}/{tag}", reference.dataset),
        None => format!("refs/heads/{}", reference.dataset),
    };
    Err(Error::corrupt(
        format!("{remote}:{key}"),
        format!(
            "names version {}, which the remote does not hold",
            reference.version.short()
        ),
    ))
}

fn record_ref(store: &mut Store, remote: i64, reference: &RemoteRef) -> Result<()> {
    let writer = store.catalog_mut().writer()?;
    writer.set_remote_ref(remote, reference)?;
    writer.commit()
}

/// A remote's refs as listed by one LIST request, read lazily: a ref whose ETag matches the
/// one recorded at the last fetch or push is not downloaded again.
struct RemoteRefs<'a> {
    remote: &'a Remote,
    listed: Vec<(RefName, RefState)>,
    recorded: Vec<RemoteRef>,
}

impl<'a> RemoteRefs<'a> {
    fn list(store: &Store, record: &RemoteRecord, remote: &'a Remote) -> Result<Self> {
        Ok(RemoteRefs {
            remote,
            listed: remote.list_refs()?,
            recorded: store.catalog().remote_refs(record.id)?,
        })
    }

    /// The version `name` names on the remote and its state, `None` when absent.
    fn current(&self, name: &RefName) -> Result<Option<(ObjectId, RefState)>> {
        let Some((_, state)) = self.listed.iter().find(|(n, _)| n == name) else {
            return Ok(None);
        };
        let recorded = self
            .recorded
            .iter()
            .find(|r| r.dataset == name.dataset && r.tag == name.tag);
        match recorded {
            Some(r) if same_etag(r.etag.as_deref(), state.etag.as_deref()) => {
                // The recorded state came from a HEAD or GET: its ETag is spelled as the
                // backend expects it back in If-Match (a listing may spell it otherwise).
                let recorded_state = RefState {
                    etag: r.etag.clone(),
                    version: r.object_version.clone(),
                    last_modified: r.last_modified,
                };
                Ok(Some((r.version, recorded_state)))
            }
            _ => self.remote.get_ref(name),
        }
    }
}

/// Every object reachable from `version` that `record`'s remote lacks, with the local pack
/// holding each: the version, its trees, file maps and chunks, and the same for each parent
/// until one the remote holds.
fn objects_to_send(
    store: &Store,
    record: &RemoteRecord,
    version: &ObjectId,
    lacking_outboards: &mut Vec<ObjectId>,
) -> Result<HashSet<ObjectId>> {
    let catalog = store.catalog();
    let mut reader = store.reader();
    let mut packs = HashSet::new();
    let mut need = |id: &ObjectId, kind: ObjectKind| -> Result<()> {
        if catalog.remote_locate(record.id, id, kind)?.is_none() {
            let location = catalog
                .locate(id, kind)?
                .ok_or_else(|| Error::MissingObject {
                    id: id.to_hex(),
                    what: kind.name(),
                })?;
            packs.insert(location.frame.pack);
        }
        Ok(())
    };
    let mut seen_trees = HashSet::new();
    let mut next = Some(*version);
    while let Some(id) = next {
        if catalog
            .remote_locate(record.id, &id, ObjectKind::Version)?
            .is_some()
            && id != *version
        {
            break;
        }
        need(&id, ObjectKind::Version)?;
        let version = reader.version(&id)?;
        if let Some(provenance) = &version.provenance {
            need(provenance, ObjectKind::Provenance)?;
        }
        walk_reachable(
            &mut reader,
            &version.tree,
            Some(&mut seen_trees),
            &mut |reached| match reached {
                Reached::Tree(tree) => need(&tree, ObjectKind::Tree),
                Reached::File { id, chunks, .. } => {
                    if chunks.len() > 1 {
                        need(&id, ObjectKind::FileMap)?;
                        // An outboard travels where there is one (a store made before
                        // outboards has none until `dsv repair` writes them).
                        if catalog.has_object(&id, ObjectKind::Outboard)? {
                            need(&id, ObjectKind::Outboard)?;
                        } else {
                            lacking_outboards.push(id);
                        }
                    }
                    chunks
                        .iter()
                        .try_for_each(|chunk| need(chunk, ObjectKind::Chunk))
                }
            },
        )?;
        next = version.parent;
    }
    Ok(packs)
}

/// `dsv push`: uploads what the remote lacks for each dataset's head (or for `only`), then
/// moves the remote heads by compare-and-swap and creates the tags of the pushed versions.
///
/// A head moves only forward: if the remote's head is not an ancestor of the pushed version
/// the push is refused ([`Error::RemoteDiverged`]) unless `force`; the same error reports a
/// race lost to another writer. Data is uploaded before any ref moves, so a ref never names
/// a version whose objects the remote lacks; an interrupted push leaves only unreferenced
/// packs, and a re-run skips them.
///
/// # Errors
/// [`Error::RemoteDiverged`], [`Error::Remote`], [`Error::MissingObject`] (a version whose
/// data this store does not hold), revision errors, [`Error::Interrupted`].
pub fn push(
    store: &mut Store,
    name: &str,
    only: Option<&Revision>,
    force: bool,
    jobs: usize,
    progress: &dyn Progress,
) -> Result<PushReport> {
    let _data_lock = store.lock_data_shared()?;
    let (record, remote) = open(store, name)?;
    progress.phase("comparing with the remote");
    let targets: Vec<(String, ObjectId)> = match only {
        Some(revision) => vec![(revision.dataset.clone(), revision.resolve(store.catalog())?)],
        None => store
            .catalog()
            .datasets()?
            .into_iter()
            .filter_map(|d| d.head.map(|head| (d.name, head)))
            .collect(),
    };
    refresh_indexes(store, &record, &remote, jobs)?;
    let remote_refs = RemoteRefs::list(store, &record, &remote)?;
    // Check every head first: refuse before uploading anything.
    let mut plans = Vec::new();
    for (dataset, version) in &targets {
        let ref_name = RefName {
            dataset: dataset.clone(),
            tag: None,
        };
        let current = remote_refs.current(&ref_name)?;
        if let Some((remote_head, _)) = &current
            && remote_head != version
            && !is_ancestor(store, remote_head, version)?
            && !force
        {
            // On one line, only older: say so (pulling would not help).
            if is_ancestor(store, version, remote_head)? {
                return Err(Error::PushBehind {
                    remote: record.name.clone(),
                    dataset: dataset.clone(),
                    version: version.short(),
                });
            }
            return Err(Error::RemoteDiverged {
                remote: record.name.clone(),
                dataset: dataset.clone(),
            });
        }
        plans.push((ref_name, *version, current));
    }
    let mut packs = HashSet::new();
    let mut lacking_outboards = Vec::new();
    // Outboards written here since the last push (`gc` writes those that data committed
    // before them lacks) travel even when the remote's head is already this version.
    let outboards_pending = store.catalog().outboards_missing_on(record.id)?;
    for (_, version, current) in &plans {
        if outboards_pending || current.as_ref().is_none_or(|(head, _)| head != version) {
            packs.extend(objects_to_send(
                store,
                &record,
                version,
                &mut lacking_outboards,
            )?);
        }
    }
    // Files pushed without an outboard get one first, where their chunks are here.
    if !lacking_outboards.is_empty()
        && super::ingest::write_missing_outboards(store, &lacking_outboards)? > 0
    {
        for id in &lacking_outboards {
            if let Some(location) = store.catalog().locate(id, ObjectKind::Outboard)? {
                packs.insert(location.frame.pack);
            }
        }
    }
    let sizes: HashMap<ObjectId, u64> = store.catalog().packs()?.into_iter().collect();
    let total: u64 = packs.iter().filter_map(|p| sizes.get(p)).sum();
    let uploads: Vec<(ObjectId, std::path::PathBuf)> = packs
        .iter()
        .map(|id| (*id, crate::pack::writer::pack_path(&store.packs_dir(), id)))
        .collect();
    let mut transfer = Transfer {
        packs: uploads.len() as u64,
        bytes: total,
        ..Transfer::default()
    };
    progress.start("upload", total, Unit::Bytes);
    let uploaded = remote.put_packs(uploads.clone(), jobs, &|bytes| progress.advance(bytes));
    progress.phase("moving the remote's refs");
    uploaded?;
    {
        // One uploaded pack's index in memory at a time.
        let writer = store.catalog_mut().writer()?;
        for (id, path) in &uploads {
            let file = std::fs::File::open(path).map_err(|source| Error::Io {
                path: path.clone(),
                source,
            })?;
            let (frames, objects) = crate::pack::reader::read_index(&file, path)?;
            transfer.objects += objects.len() as u64;
            let size = sizes.get(id).copied().unwrap_or(0);
            writer.add_remote_pack(record.id, id, size, &frames, &objects)?;
        }
        writer.commit()?;
    }
    let mut refs = Vec::new();
    for (ref_name, version, current) in plans {
        let previous = current.as_ref().map(|(id, _)| *id);
        let (status, state) = match &current {
            Some((head, state)) if *head == version => ("up-to-date", state.clone()),
            Some((head, state)) => {
                if is_ancestor(store, head, &version)? {
                    (
                        "updated",
                        remote.update_ref(&ref_name, &version, Some(state))?,
                    )
                } else {
                    ("forced", remote.force_ref(&ref_name, &version)?)
                }
            }
            None => ("created", remote.update_ref(&ref_name, &version, None)?),
        };
        // Recorded at once: a failure on a later ref leaves this store knowing what moved.
        record_ref(store, record.id, &remote_ref(&ref_name, version, &state))?;
        refs.push(PushedRef {
            dataset: ref_name.dataset.clone(),
            tag: None,
            version,
            previous,
            status,
        });
        // Tags of the pushed version and its ancestors.
        let mut next = Some(version);
        while let Some(id) = next {
            for tag in store.catalog().tags_of(&id)? {
                let tag_name = RefName {
                    dataset: ref_name.dataset.clone(),
                    tag: Some(tag.clone()),
                };
                let existing = remote_refs.current(&tag_name)?;
                let (status, state, named) = match existing {
                    Some((named, state)) if named == id => ("up-to-date", state, id),
                    Some((_, _)) if force => ("forced", remote.force_ref(&tag_name, &id)?, id),
                    Some((named, state)) => ("rejected", state, named),
                    None => ("created", remote.update_ref(&tag_name, &id, None)?, id),
                };
                record_ref(store, record.id, &remote_ref(&tag_name, named, &state))?;
                refs.push(PushedRef {
                    dataset: ref_name.dataset.clone(),
                    tag: Some(tag),
                    version: named,
                    previous: None,
                    status,
                });
            }
            next = store.catalog().version(&id)?.and_then(|r| r.version.parent);
        }
    }
    transfer.requests = remote.requests();
    Ok(PushReport {
        remote: record.name.clone(),
        refs,
        transfer,
    })
}

/// The directory `clone` creates when none is given: the URL's last path element
/// (`s3://b/team/mnist` → `mnist`, `s3://b` → `b`), relative to the current directory.
///
/// # Errors
/// [`Error::CloneDirUnnamed`] when that element names no new directory (`.`, `..`,
/// nothing, `.dsv`, the scheme of `file:///`): the store would land in the current or
/// parent directory.
pub fn default_clone_dir(url: &str) -> Result<std::path::PathBuf> {
    let path = url.split_once("://").map_or(url, |(_, rest)| rest);
    let name = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    if crate::object::check_name(name).is_err() || crate::walk::check_reserved_name(name).is_err() {
        return Err(Error::CloneDirUnnamed {
            url: url.to_string(),
            name: name.to_string(),
        });
    }
    Ok(std::path::PathBuf::from(name))
}

/// `dsv clone`: a new store in `dir` with remote `origin` at `url`, its refs, pack indexes
/// and metadata, and local heads and tags at the remote's. No chunk is downloaded: a
/// checkout fetches what it needs.
///
/// `dir` must not lie inside a store's `.dsv` directory (see
/// [`crate::walk::check_workspace_dir`]); [`default_clone_dir`] names one from the URL.
///
/// # Errors
/// [`Error::Unsupported`] for a `dir` inside a store's directory; [`Error::StoreExists`],
/// [`Error::InvalidRemote`], as [`fetch`]. A failed clone removes the store it created.
pub fn clone(
    url: &str,
    dir: &std::path::Path,
    options: &BTreeMap<String, String>,
    jobs: usize,
    progress: &dyn Progress,
) -> Result<CloneReport> {
    // Never inside a store's own directory: dsv alone writes there.
    crate::walk::check_workspace_dir(dir)?;
    let url = &remote::url_from_path(url);
    remote::check_url(url)?;
    remote::check_options(options)?;
    let existed = dir.exists();
    let mut store = Store::init(dir)?;
    let result = (|| {
        let record = add_remote(&mut store, "origin", url, options)?;
        let remote = Remote::open(&record)?;
        // A new store, but another process may open it already: in the one lock order.
        let data_lock = store.lock_data_shared()?;
        let fetched = fetch_with(&mut store, &data_lock, &record, &remote, jobs, progress)?;
        let _lock = store.lock()?;
        for reference in &fetched.refs {
            check_ref_target(store.catalog(), &record.name, reference)?;
        }
        let writer = store.catalog_mut().writer()?;
        let mut datasets = BTreeMap::new();
        for reference in &fetched.refs {
            if reference.tag.is_none() {
                writer.set_head(&reference.dataset, &reference.version)?;
                datasets.insert(reference.dataset.clone(), reference.version);
            }
        }
        for reference in &fetched.refs {
            if let Some(tag) = &reference.tag
                && datasets.contains_key(&reference.dataset)
            {
                writer.set_tag(&reference.dataset, tag, &reference.version, true)?;
            }
        }
        writer.commit()?;
        Ok(CloneReport {
            store: std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()),
            remote: record.name.clone(),
            url: url.to_string(),
            datasets,
            transfer: fetched.transfer,
        })
    })();
    if result.is_err() {
        let created = store.root().to_path_buf();
        drop(store);
        let _ = std::fs::remove_dir_all(&created);
        if !existed {
            let _ = std::fs::remove_dir(dir);
        }
    }
    result
}

/// Downloads whatever chunks files `files` (file id, size in bytes) need from the configured
/// remotes, as [`fetch_missing`] does for whole versions, but without walking a version's
/// trees: for a reader that knows which files it reads next (the Python package prefetches
/// the files its workers are about to read). Without remotes, or with nothing missing,
/// contacts nothing.
///
/// # Errors
/// [`Error::MissingObject`] when no remote holds a needed chunk; [`Error::Corrupt`] for a
/// malformed file map; as [`fetch`].
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
    fn the_default_remote_is_the_named_one_else_the_only_one_else_origin() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::init(dir.path()).unwrap();
        assert!(matches!(default_remote(&store, None), Err(Error::NoRemote)));
        assert_eq!(default_remote(&store, Some("x")).unwrap(), "x");
        let url = |name: &str| format!("file://{}", dir.path().join(name).display());
        let none = BTreeMap::new();
        add_remote(&mut store, "backup", &url("backup"), &none).unwrap();
        assert_eq!(default_remote(&store, None).unwrap(), "backup");
        add_remote(&mut store, "mirror", &url("mirror"), &none).unwrap();
        match default_remote(&store, None) {
            Err(Error::AmbiguousRemote { names }) => assert_eq!(names, ["backup", "mirror"]),
            other => panic!("{other:?}"),
        }
        add_remote(&mut store, "origin", &url("origin"), &none).unwrap();
        assert_eq!(default_remote(&store, None).unwrap(), "origin");
        // The store's setting beats origin; a name given beats the setting.
        let mut config = store.config().unwrap();
        config
            .set(crate::config::Setting::DefaultRemote, "mirror")
            .unwrap();
        config.save(store.root()).unwrap();
        assert_eq!(default_remote(&store, None).unwrap(), "mirror");
        assert_eq!(default_remote(&store, Some("backup")).unwrap(), "backup");
        let listed = list_remotes(&store).unwrap();
        let names: Vec<_> = listed.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["backup", "mirror", "origin"]);
        assert!(listed.iter().all(|r| r.refs.is_empty()));
    }

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
            false,
            2,
            &crate::progress::NoProgress,
        )
        .unwrap();
        clone(
            &url,
            &dir.path().join("clone"),
            &BTreeMap::new(),
            2,
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

    #[test]
    fn a_clone_is_named_after_the_urls_last_element_unless_that_names_no_new_directory() {
        assert_eq!(
            default_clone_dir("s3://b/team/mnist/").unwrap(),
            std::path::Path::new("mnist")
        );
        assert_eq!(
            default_clone_dir("s3://b").unwrap(),
            std::path::Path::new("b")
        );
        for url in ["file:///", "s3://b/..", "s3://b/.dsv", "s3://b/."] {
            assert!(
                matches!(default_clone_dir(url), Err(Error::CloneDirUnnamed { .. })),
                "{url}"
            );
        }
    }
}
