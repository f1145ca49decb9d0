//! Sync with remotes: what fetch ([`mod@fetch`]), push ([`mod@push`]), pull ([`mod@pull`]), clone
//! ([`mod@clone`]) and copy between two remotes ([`mod@copy`]) share (opening a remote, pack indexes, downloading frames, fetching the chunks
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
//! `remote/mod.rs` (the backend), `transfer.rs` (downloads, `fetch_missing`, `fetch_files`:
//! below both this module and the read engine), `ops/sync/fetch.rs`, `push.rs`, `pull.rs` (with `prepare_remote_revision`),
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
//!   without asking the remote about single objects. A remote pack that is a local pack too
//!   (the same id and size: every pushed pack) is not copied: its `remote_packs` row has
//!   `local_index` set and `remote_locate` answers for it from the local `objects`, `frames`
//!   and `packs` rows (only its objects that `objects` locates in another local pack get
//!   rows of their own). Before `gc` forgets such a local pack, `drop_packs` copies its index
//!   into the remote tables. So a push adds one row per pack, not one per object, to the
//!   catalog; a clone or fetch, whose downloaded frames go into new local packs of their own
//!   ids, still records the remote's index row by row.
//!
//!
//! ## Downloading frames
//!
//! `download()`, used by fetch (metadata) and by `fetch_missing` (chunks):
//!
//! 1. **Locate.** For each wanted object, `remote_locate` gives the remote pack and frame
//!    that hold it. A delta frame (pack format 2) brings the frames holding its bases that
//!    this store lacks, transitively, resolved from the remote's index as recorded here
//!    (`remote_frames.bases`), so the whole closure comes in the same round of ranged GETs,
//!    never one round per level; a base this store holds ends the walk there. A base the
//!    remote does not hold is `Error::Corrupt` naming the remote (exit 5), before any
//!    request. Frames are de-duplicated and sorted by (pack, offset).
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
//!    (file maps are checked when their file is read: see below). A delta frame is checked
//!    as soon as its bases are at hand (after the response bringing the last of them), on
//!    the calling thread (`DeltaBases`): decoded with its bases' raw bytes as the prefix
//!    (from frames of the same download, or read from this store, each checked against its
//!    id) and every chunk hashed (`EncodedFrame::verified_delta`); a chain deeper than 16
//!    levels, a cycle, or a base that did not come by the download's end is
//!    `Error::Corrupt` naming the remote's pack. The frame's stored
//!    bytes (a delta's as they came: it stays a delta here, with its bases stored beside it)
//!    are then appended unchanged, on the calling thread, to a `PackSink`, the same
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
//! again, and, in a second round, for the chunks the maps it got list. Forgetting the map here
//! forgets nothing of what the remotes hold: a remote pack sharing the local pack's index gets
//! rows of its own for the map first, and a byte-identical pack sealed again by that fetch has
//! its forgotten objects indexed again (`add_pack`). When another remote lists a map of the
//! file, the remote that served the wrong one stops being asked for it (the next read gets it
//! from the next mirror); the last remote listing one keeps it, and is named again if it serves
//! the wrong map again. `verify` counts such a file as on a remote, not as missing data.
//! `dsv verify --remote --full` and `dsv copy` prove a remote's maps the same way (`prove`).
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
//!   missing, under the same count. A read that gets less than 1 KiB of answer in the
//!   remote's `stall_timeout` (5 s by default: a frozen or black-holed server, retries
//!   included) fails then, not retried (`remote::stall_timeout`, the rule `dsv import`'s
//!   `--stall-timeout` follows: `dsv_remote::stall`), so the next remote serves at once and
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
//! - Reads ask the remotes in the read order the user set (`dsv remote order`; see
//!   "Fallback" in `crate::transfer`), not by measured latency or cost: dsv does not find
//!   the nearest copy itself. A remote that answers slowly but successfully is not passed
//!   over, and one that lacks part of the data costs a listing of its packs before the next
//!   is asked. A remote that failed is asked again by the next command (within one process:
//!   after 60 s, doubled at each further failure), so an outage costs each command one
//!   failed try of it (a stall: its `stall_timeout`; a refused port: its retries' backoff,
//!   about 3 s; lower `max_retries` on a remote that is often away).
//! - `remote_objects` keeps one location per (remote, id, kind): the first pack indexed,
//!   except that a copy in a plain frame replaces one in a delta frame and no delta copy
//!   replaces a plain one (so a cycle of deltas across two encodings is never what a fetch
//!   reads; docs/format.md, "Remote layout"). If
//!   that pack disappears from the remote while another remote pack also holds the object,
//!   the store forgets the object for that remote (the other pack's index is not read
//!   again): a push uploads it again, and a download from that remote reports it missing.
//!   `dsv gc --remote` deletes remote packs; a writer's view (`crate::transfer::writer_view`)
//!   then reads every index again.
//! - Push uploads whole packs. A pack that holds an object the remote lacks goes up entire,
//!   with whatever else it holds: objects of other datasets, of versions not pushed, or of
//!   other frames downloaded together. The remote then holds data that no ref needs. Since
//!   a delta never goes anywhere without its bases, the packs holding the bases of every
//!   delta frame of those packs go up too (`push::close_over_bases`), whatever they hold.
//! - A download keeps the raw bytes of each base its deltas name until the last delta
//!   naming it is checked, and the stored bytes of each delta until its bases are at hand
//!   (`DeltaBases`). In memory that is at most `transfer::delta_memory()` bytes (256 MiB;
//!   the CLI reads `DSV_DELTA_MEMORY`), whatever the remote sends; past it, the rest goes to
//!   an unnamed file in `.dsv/tmp/`, gone when the download ends. That file holds at most the
//!   raw bytes of the bases named plus the deltas' stored bytes: the data asked for,
//!   decompressed. `verify --remote --full` keeps its delta checks within the same bound.
//! - Remote garbage is deleted only by `dsv gc --remote` (module [`remote_gc`]; the argument
//!   that no ref names deleted data is in docs/format.md, "Remote garbage
//!   collection"), which runs lock-free against writers that follow `transfer::writer_view`.
//!   dsv binaries built before it do not know its rules; the guard pack makes them refuse a
//!   collected remote (docs/format.md, "Remote layout").
//! - A fetch, and so a clone or a ref cache refresh, downloads the metadata of every dataset
//!   and version the remote holds, not only those asked for.
//! - `checkout REMOTE/NAME` and `REMOTE/NAME@TAG` always send their HEAD request, so they need
//!   the remote even when every byte is local; `checkout NAME` does not.
//! - Push sends only data this store holds. Every object a remote lacks must be here: pushing
//!   a clone's versions to a second remote fails with `MissingObject` (exit 5) for chunks the
//!   clone never downloaded; `dsv copy --from FIRST --to SECOND` moves them remote to remote.
//! - `copy` copies server-side within one bucket (any provider) and between two S3 buckets
//!   reached with the same options; between two Azure containers or GCS buckets, or two
//!   clouds, it streams every pack through this machine (`object_store` copies within one
//!   bucket only; Azure's Put Blob From URL and GCS's cross-bucket rewrite are not used).
//! - `push --force` overwrites refs without a compare-and-swap (on `file://`, without the
//!   lock), so it can overwrite a concurrent writer's update.
//! - Refs move one dataset at a time, each recorded here as soon as it moved: a push that
//!   fails part-way through step 8 of push leaves the later datasets' refs unmoved (a re-run moves them).
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
//! - `dsv_remote::failure::classify` recognizes a missing bucket and refused credentials by the
//!   service's error codes in the error text; an unrecognized refusal is reported as a
//!   network error (exit 6).

pub mod clone;
pub mod copy;
pub mod fetch;
mod prove;
pub mod pull;
pub mod push;
pub mod remote_gc;
pub mod remotes;

pub use clone::{
    CloneOptions, CloneReport, cached_clone_dir, clone, clone_cached, default_clone_dir,
};
pub use copy::{CopyOptions, CopyReport, copy};
use fetch::fetch_with;
pub use fetch::{FetchOptions, FetchReport, fetch};
pub(crate) use pull::resolve_remote;
pub use pull::{HeadUpdate, PullOptions, PullReport, RefCache, prepare_remote_revision, pull};
pub use push::{PushOptions, PushReport, PushedDataset, PushedRef, push};
pub use remotes::{
    RemoteListing, add_remote, add_remote_placed, check_remote, default_remote, list_remotes,
    order_remotes, remove_remote,
};
// The downloading this module's commands share lives in `crate::transfer`, below the read
// engine too; its public items keep their paths here.
pub use crate::transfer::{
    COALESCE_GAP, MAX_SPAN, RemoteRevision, Transfer, fetch_files, fetch_missing,
};
pub(crate) use crate::transfer::{
    download, fetch_missing_under, is_ancestor, open, refresh_indexes, remote_ref, same_etag,
};

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::error::Error;
    use crate::store::Store;

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
            &[],
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
