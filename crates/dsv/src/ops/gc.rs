//! Garbage collection: `gc` deletes what no remaining version reaches. Which versions remain
//! is retention ([`super::retention`]: `rm`, `pin`, `unpin`) and eviction ([`super::cache`]).
//!
//! Safety:
//! - gc holds the store's data lock exclusive ([`Store::lock_data_exclusive`]) from plan to
//!   the last deletion: [`plan`] decides (a [`GcPlan`], plain data) and [`execute`] carries
//!   out, both taking the held lock as an argument; `--dry-run` is [`measure`], which
//!   sizes the plan's repack without writing. Every commit, checkout and transfer holds it shared for its whole
//!   run, so gc waits for them and they wait for gc: a commit can never rely on a chunk
//!   (deduplicate against it) that gc then deletes. A lock rather than a grace period,
//!   because a commit may reuse a chunk of any age.
//! - Pack files the catalog does not name (left by a killed commit or gc) are deleted only
//!   when older than the grace period (default 1 h), a second guard for stores on
//!   filesystems where locks are unreliable.
//! - Execution order makes a kill at any point safe: live objects of mostly-dead packs are
//!   first copied into new packs (durable); one transaction then swaps the catalog from the
//!   old packs to the new; only then are old pack files deleted. A kill leaves at worst
//!   unnamed pack files, which a later gc deletes once they are older than the grace period.
//! - The version objects of removed versions stay, so `log` still shows a version removed
//!   with `rm NAME@REV` (`rm NAME` also clears the head, so `log NAME` starts empty).
//!
//! # What is kept, the data lock, gc step by step
//!
//! `ops/gc.rs` (`gc`), `ops/retention.rs` (`rm`, `pin`, `unpin`), `ops/cache.rs` (`cache ls`,
//! `cache prune`), `ops/audit.rs` (audits), `ops/lock_file.rs` (lock files),
//! `catalog/retention.rs` (the catalog side), schema 4
//! and 5 (`docs/format.md#catalog-schema`). Commands and flags are in
//! `docs/cli.md#dsv-gc`.
//!
//! ## What is kept
//!
//! - **Removal.** `dsv rm` sets `versions.removed_at` and deletes the versions' tags, in one
//!   transaction under the store lock; `dsv rm NAME` also clears the dataset's head. It refuses
//!   (`VersionHeld`) a dataset's head named on its own, a version a live pin holds, one that a
//!   workspace holds (a directory the store recorded with it that still exists and is the same
//!   directory: device, inode, birth time), and a tagged one without `--force`. The message
//!   names every pin and workspace that holds it; `dsv workspace forget DIR` drops a record.
//!   The version row and the version object stay, so `log` still lists a version removed on its
//!   own, marked; nothing is deleted until `gc`.
//! - **Live versions** are those not removed. `gc` keeps every object they reach and reads
//!   neither pins nor workspaces: pins and directories only stop `rm` and `cache prune` from
//!   removing or evicting a version.
//! - **Eviction** (`cache prune`) sets `versions.evicted_at` on a version whose version object
//!   and every chunk a remote holds. The version stays live: its version object, trees and
//!   file maps are kept, so `log`, `ls`, `diff` and `audit` still work and a checkout knows
//!   exactly which chunks to fetch back (`fetch_missing`, from the remotes in read order, as
//!   for a clone). Only its chunks stop being kept for it. A commit or checkout that records
//!   the version for a directory (`set_workspace`) sets `last_used` to now and clears
//!   `evicted_at`. "A remote holds it" means the remote's pack indexes as this store last
//!   recorded them (at a fetch or push); the remote is not asked again before the chunks go.
//!
//! ## The data lock, not a grace period
//!
//! A commit deduplicates: a chunk the catalog already holds is not written again, and the new
//! version relies on the stored copy, whatever its age (a file unchanged since the dataset's
//! first version is still that first version's chunk). A grace period that protects only
//! recent objects cannot protect it: `gc` could delete an old chunk between the commit's
//! `has_object` lookup and its transaction, and the commit would record a version whose data
//! is gone. So `.dsv/data.lock` (created on first use) is a `flock` that data operations hold
//! shared and `gc` holds exclusive (`Store::lock_data_shared`, `Store::lock_data_exclusive`):
//!
//! | holder | mode | held |
//! | --- | --- | --- |
//! | commit | shared | from just after the workspace lock (before the walk) until it returns |
//! | import, update | shared | from just before the first object is read (after listing the source and reading the head's provenance and, when something is reused, its trees) until it returns; not taken when the head stands (import step 4) |
//! | checkout | shared | from before it resolves the version (before the workspace lock) until it returns |
//! | status, audit | shared | their whole run (status: before its workspace lock) |
//! | rebase | shared | its whole run |
//! | a read engine fetch (`cat`, `export`, `mount`, Python) | shared | one batch of frames |
//! | `Lease::take` | shared | while the lease file is written |
//! | fetch, push, `prepare_remote_revision` (the remote step of pull and `checkout REMOTE/NAME`), `fetch_missing` (the chunk downloads of pull and checkout) | shared | for the call |
//! | verify | shared | its whole run |
//! | gc (also run by `cache prune`) | exclusive | from the plan to the last deletion |
//! | repair | exclusive (and the store lock, exclusive) | its whole run |
//!
//! Many shared holders run at once; `gc` waits for all of them, and they wait for `gc`. The
//! order of the locks, and why it has no cycle, is in `docs/architecture.md` ("Locks and
//! leases"). `log`, `ls`, `show`, `diff`, `tag`, `rm`, `pin`, `unpin`, `pins`, `lock`,
//! `cache ls` and `remote` take no data lock; `cat`, `export` and `mount` take a lease.
//!
//! The grace period (`--grace`, default 1 hour) applies only to pack files the catalog does not
//! name. A running commit or download seals its packs into `packs/` before the transaction
//! that names them, so for a while they look exactly like a killed run's leftovers. The data
//! lock keeps `gc` away from them; the grace period is a second guard for filesystems where
//! `flock` does not hold.
//!
//! ## gc
//!
//! `gc()` plans, then executes unless `--dry-run`:
//!
//! 1. **Live set** (`live_set`). For each live version, its trees, the file maps of its files
//!    of two or more chunks, and, unless it is evicted, its chunks. Evicted versions are walked
//!    last: trees are walked once each, so a subtree that a kept version shares is first seen
//!    through the kept version and keeps its chunks. Every version object and every
//!    provenance object is live, removed versions' included. A live version whose tree or file map is missing stops `gc` here
//!    (`MissingObject`).
//! 2. **Plan.** For each pack the catalog names, the raw bytes of the objects the catalog
//!    locates in it, and of the live ones among them. No live byte: delete. At most half live
//!    (`live × 2 ≤ total`): repack. Otherwise kept. Files in `packs/` that the catalog does not
//!    name are deleted once their modification time is at least the grace period old, except
//!    a `.pack` file that is not a readable pack (its contents cannot be accounted for), which
//!    is kept. An unnamed readable pack holding versions that the ref log names and the
//!    catalog lacks stops `gc` before anything changes (`CatalogLost`, exit 5): the catalog
//!    forgot data, and `dsv repair` gets it back.
//!    **Reverse deltas** ([`deltas`], issue 39): each dataset's head stored whole, older
//!    versions' chunks as deltas against newer versions' chunks; a pack holding a chunk
//!    stored anew is repacked. **Liveness follows closures**: every base (transitively) of
//!    a live chunk, as the chunks are stored once gc is done, is live; a leased chunk's bases
//!    are leased with it (their packs stay).
//! 3. **Copy** the live objects of the packs to repack, each read through `ObjectReader` (so
//!    checked against its id), into frames of about 1 MiB (zstd level 3) appended to a
//!    `PackSink`: new packs written in `tmp/`, fsynced and renamed into `packs/` as a commit's
//!    are. A dry run copies into a measuring `PackSink` (`PackSink::measuring`, whose
//!    `PackWriter`s write no file but hash and count the same bytes), then stops: so its
//!    `bytes_freed`, `pack_files_deleted` and `packs_written` (computed by one function,
//!    `Outcome::of`, from the plan and the new packs' ids and sizes) are what the real run
//!    reports and frees.
//! 4. **Swap**, in one catalog transaction under the store lock: forget the deleted and repacked
//!    packs (their `objects`, `frames` and `packs` rows, `drop_packs`), name the new packs, and
//!    delete every stat-cache entry naming content the store no longer holds
//!    (`drop_unheld_stat_entries`).
//! 5. **Delete** the files of the packs forgotten in step 4 and the unnamed files past the
//!    grace, except any file the catalog names at this moment.
//!
//! Why a kill at any point is safe: the catalog never names a pack that is not durably on disk,
//! and a pack file is deleted only once the catalog has stopped naming it.
//!
//! | killed during | left behind | next run |
//! | --- | --- | --- |
//! | plan | nothing | a re-run plans again |
//! | copy | a `tmp/` file, and new packs sealed in `packs/` that the catalog does not name; the catalog still names the old packs, which are all there | `verify` lists the new packs as unreferenced and reports the store consistent. The next commit removes the `tmp/` file; the next `gc` past the grace deletes the packs, or its repack writes the same pack again (below) |
//! | swap | — | SQLite rolls the transaction back: the old catalog, as if killed during copy |
//! | delete | files of packs the catalog no longer names | unreferenced packs; the next `gc` past the grace deletes them |
//!
//! Step 5 re-reads the catalog's pack list instead of trusting the plan, because a re-run can
//! write a byte-identical pack. After a `gc` killed between copy and swap, the re-run repacks
//! the same live objects in the same order into a pack with the same id, and so the same file
//! name, as the leftover its own plan listed as unnamed (and, with `--grace 0s` or an hour
//! later, as due for deletion). Without the check, step 5 would delete the pack the swap had
//! just named. A test reproduces that state deterministically
//! (`a_rerun_after_a_gc_killed_before_its_catalog_swap_keeps_the_repacked_data`).
//!
//! ## Known limits of cleanup and audits
//!
//! - `last_used` is kept in whole seconds; ties are broken by history (older first), not by
//!   the order of use within the second.
//! - `cache ls`, and `cache prune`, which lists first, walk every live version's trees on every
//!   run (memoized per tree within the run, so shared subtrees are read once) and read the file
//!   maps of multi-chunk files. Which chunks are here comes from one set of every chunk id the
//!   catalog holds, loaded once; `on_remotes` still makes one catalog lookup per chunk of each
//!   version and remote. `scripts/bench-cleanup` times `cache ls`, `gc --dry-run` and a no-op
//!   `gc` on a store of 100 versions against a target of under 1 s each (and `verify --full`
//!   and `audit`), but no figures are recorded here yet: the performance has not been measured
//!   against that target.
//! - Nothing is collected on a remote: no `gc` of remote packs, no deletion of refs. Eviction
//!   relies on the remote keeping what its recorded indexes list.
//! - The repack threshold is fixed at 50 % of a pack's raw object bytes live; there is no flag.
//!   Repacked frames are compressed at zstd level 3 whatever level the data was committed with,
//!   and put chunks, trees, file maps and versions together in the same frames, as packs of an
//!   older dsv did (`docs/format.md#frames-and-compression`): a fetch of a pushed
//!   repacked pack's metadata downloads chunks with it.
//! - `--max-size` counts raw chunk bytes, not pack bytes on disk, and its running total does
//!   not count chunks shared only among versions evicted in the same run.
//! - Commands that take no data lock and no lease (`ls`, `show`, `diff`)
//!   read packs that a concurrent `gc` may repack and delete; such a read can fail with a
//!   missing pack, and a re-run succeeds. (`cat`, `export` and `mount` lease their version.)
//! - `dsv rm NAME` clears the head, so `dsv log NAME` no longer lists the removed versions
//!   (`show NAME@<id prefix>` finds them).
//! - `cache prune --allow-data-loss` marks versions removed without `rm`'s checks: tags are
//!   dropped without `--force`, and with `--keep-last 0` a dataset's head can be marked removed
//!   while the dataset still names it (a checkout of `NAME` then fails).
//! - No command undoes a removal, and a removed version is refused by `checkout REMOTE/NAME@REV`
//!   too, although the `VersionRemoved` hint suggests it.
//! - Push walks a dataset's versions back to the first the remote holds, removed ones included:
//!   once `gc` has freed a removed version's trees, pushing that dataset to a remote that lacks
//!   the version fails with `MissingObject` (exit 5).
//! - A fetch downloads again the trees and file maps of removed versions that a remote holds
//!   (they are missing here after `gc`); the next `gc` deletes them again.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde::Serialize;

use super::ingest::{FRAME_TARGET, PackSink};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::pack::FrameBuilder;
use crate::pack::writer::pack_id_of;
use crate::progress::{Progress, Unit};
use crate::store::{ExclusiveDataLock, Store};
use crate::tree::{Reached, walk_reachable};

pub mod deltas;
pub mod resemblance;
pub use deltas::{GC_DELTA_DEPTH, GC_DELTA_LEVEL, GC_WHOLE_LEVEL};

/// What gc's reverse deltas store anew (`dsv gc --json`: `deltas`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeltaReport {
    /// Chunks rewritten as deltas: an older version's against newer versions' chunks, or
    /// any chunk against chunks of its dataset stored whole that resemble it.
    pub rewritten_as_deltas: u64,
    /// Chunks rewritten whole (a head's chunks stored as deltas, or a delta whose chain
    /// gc shortened).
    pub rewritten_whole: u64,
    /// Raw bytes of the chunks rewritten as deltas.
    pub delta_raw_bytes: u64,
    /// Stored bytes of those deltas.
    pub delta_stored_bytes: u64,
}

/// A pack that is kept, repacked or deleted, with its live bytes.
#[derive(Debug, Clone, Serialize)]
pub struct PackPlan {
    /// The pack id.
    pub pack: ObjectId,
    /// Its size in bytes.
    pub bytes: u64,
    /// Raw bytes of the live objects in it.
    pub live_bytes: u64,
}

/// A pack file the catalog does not name.
#[derive(Debug, Clone, Serialize)]
pub struct OrphanFile {
    /// Its file name.
    pub name: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its age in seconds.
    pub age_seconds: u64,
    /// Whether it is deleted: older than the grace period, and not a `.pack` file whose
    /// contents gc cannot account for.
    pub deleted: bool,
    /// Kept although older than the grace period: named `<id>.pack` but not a readable pack,
    /// so gc cannot tell what it holds.
    pub unreadable: bool,
    /// Kept although older than the grace period: it holds versions the ref log names that
    /// the catalog lacks (`dsv verify` lists them; `dsv repair` records them).
    pub holds_versions: bool,
}

/// What gc deletes (the plan), and whether it was carried out.
#[derive(Debug, Clone, Serialize)]
pub struct GcReport {
    /// Versions whose data is kept.
    pub live_versions: u64,
    /// Versions marked removed.
    pub removed_versions: u64,
    /// Objects reachable from the live versions (plus every version object).
    pub live_objects: u64,
    /// Packs holding nothing live: deleted.
    pub delete: Vec<PackPlan>,
    /// Packs at most half live: their live objects are copied to new packs, then deleted.
    pub repack: Vec<PackPlan>,
    /// Packs with some garbage, kept (more than half live).
    pub kept_with_garbage: Vec<PackPlan>,
    /// Pack files the catalog does not name.
    pub orphans: Vec<OrphanFile>,
    /// Bytes the plan frees: pack files deleted minus new packs written. A dry run states the
    /// same number the real run then frees: it computes the new packs without writing them.
    pub bytes_freed: i64,
    /// Pack files deleted (packs deleted or repacked, and unnamed files).
    pub pack_files_deleted: u64,
    /// True when only planned (`--dry-run`).
    pub dry_run: bool,
    /// New packs written by repacking (that a dry run would write).
    pub packs_written: u64,
    /// Versions leased by running readers (a mount, a training job): kept whole, even if
    /// removed or evicted, and their packs not repacked.
    pub leased_versions: Vec<ObjectId>,
    /// Outboards written for live files of several blocks that had none (data committed
    /// before outboards existed; see `docs/format.md`). 0 in a dry run.
    pub outboards_written: u64,
    /// Chunks stored anew by the reverse deltas: the head of each dataset whole, older
    /// versions as deltas against newer ones.
    pub deltas: DeltaReport,
}

/// The ids of every non-empty file that a live (not removed) version holds: the content
/// that stays recoverable from this store (gc keeps it, or a remote holds an evicted
/// version's chunks). Content only removed versions hold is not in it: the next gc frees it.
///
/// # Errors
/// As [`gc`]'s walk: [`Error::MissingObject`], [`Error::Corrupt`], [`Error::Io`].
pub fn live_file_ids(store: &Store) -> Result<HashSet<ObjectId>> {
    let mut files = HashSet::new();
    let mut reader = store.reader();
    let mut seen_trees = HashSet::new();
    for version in store.catalog().live_versions()? {
        let root = reader.version(&version)?.tree;
        walk_reachable(&mut reader, &root, Some(&mut seen_trees), &mut |reached| {
            if let Reached::File { id, chunks, .. } = reached
                && !chunks.is_empty()
            {
                files.insert(id);
            }
            Ok(())
        })?;
    }
    Ok(files)
}

/// Every object a live version reaches, plus every version object and provenance (kept for
/// the log), plus everything a leased version reaches (removed or evicted ones too).
fn live_set(
    store: &Store,
    leased: &HashSet<(ObjectId, ObjectKind)>,
    lacking_outboards: &mut Vec<ObjectId>,
) -> Result<HashSet<(ObjectId, ObjectKind)>> {
    let mut live = leased.clone();
    let mut reader = store.reader();
    let mut seen_trees = HashSet::new();
    // Evicted versions last: their trees and file maps stay, their chunks only if another
    // version needs them (a tree seen first through a kept version keeps its chunks).
    let mut versions: Vec<(bool, ObjectId)> = Vec::new();
    for version in store.catalog().live_versions()? {
        versions.push((store.catalog().is_evicted(&version)?, version));
    }
    versions.sort_by_key(|(evicted, _)| *evicted);
    for (evicted, version) in versions {
        let root = reader.version(&version)?.tree;
        walk_reachable(&mut reader, &root, Some(&mut seen_trees), &mut |reached| {
            match reached {
                Reached::Tree(id) => {
                    live.insert((id, ObjectKind::Tree));
                }
                Reached::File { id, chunks, .. } => {
                    if chunks.len() > 1 {
                        live.insert((id, ObjectKind::FileMap));
                        if live.insert((id, ObjectKind::Outboard))
                            && !store.catalog().has_object(&id, ObjectKind::Outboard)?
                        {
                            lacking_outboards.push(id);
                        }
                    }
                    if !evicted {
                        live.extend(chunks.into_iter().map(|c| (c, ObjectKind::Chunk)));
                    }
                }
            }
            Ok(())
        })?;
    }
    Ok(live)
}

/// Every object the versions leased by running readers ([`crate::lease`]) reach: trees,
/// file maps and every chunk here (a reader may have fetched an evicted version's chunks).
fn leased_set(store: &Store, versions: &[ObjectId]) -> Result<HashSet<(ObjectId, ObjectKind)>> {
    let mut leased = HashSet::new();
    let mut reader = store.reader();
    let mut seen_trees = HashSet::new();
    for version in versions {
        let root = match reader.version(version) {
            Ok(version) => version.tree,
            // A lease taken on a version this store never had (a reader that failed
            // before its fetch) protects nothing.
            Err(Error::MissingObject { .. }) => continue,
            Err(e) => return Err(e),
        };
        walk_reachable(&mut reader, &root, Some(&mut seen_trees), &mut |reached| {
            match reached {
                Reached::Tree(id) => {
                    leased.insert((id, ObjectKind::Tree));
                }
                Reached::File { id, chunks, .. } => {
                    if chunks.len() > 1 {
                        leased.insert((id, ObjectKind::FileMap));
                        leased.insert((id, ObjectKind::Outboard));
                    }
                    leased.extend(chunks.into_iter().map(|c| (c, ObjectKind::Chunk)));
                }
            }
            Ok(())
        })?;
    }
    Ok(leased)
}

/// Adds to `objects` every base, transitively, of the chunks in it, `bases_of` giving a
/// chunk's bases. Chunks not held here add nothing more.
fn add_closure<'a>(
    objects: &mut HashSet<(ObjectId, ObjectKind)>,
    storage: &HashMap<ObjectId, crate::catalog::ChunkStorage>,
    bases_of: impl Fn(&ObjectId) -> &'a [ObjectId],
) {
    let mut stack: Vec<ObjectId> = objects
        .iter()
        .filter(|(id, kind)| *kind == ObjectKind::Chunk && storage.contains_key(id))
        .map(|(id, _)| *id)
        .collect();
    while let Some(chunk) = stack.pop() {
        for base in bases_of(&chunk) {
            if objects.insert((*base, ObjectKind::Chunk)) {
                stack.push(*base);
            }
        }
    }
}

/// Adds to `live` the closure of the dead deltas whose rows stay: a pack that stays (more
/// than half live, or leased, and nothing in it rewritten) keeps the rows of its dead chunks
/// too, and a later commit or pull that finds such a chunk held stores nothing, so a dead
/// delta's bases must stay decodable as long as its row does. Bases made live may move their
/// packs from delete to repack or keep: repeated until nothing changes. `bases_after`: a
/// chunk's bases once gc is done.
fn keep_bases_of_kept_rows<'a>(
    live: &mut HashSet<(ObjectId, ObjectKind)>,
    by_pack: &HashMap<ObjectId, Vec<(ObjectId, ObjectKind, u32)>>,
    (leased, rewritten_in): (&HashSet<(ObjectId, ObjectKind)>, &HashSet<ObjectId>),
    storage: &HashMap<ObjectId, crate::catalog::ChunkStorage>,
    bases_after: impl Fn(&ObjectId) -> &'a [ObjectId],
) {
    loop {
        let mut bases = Vec::new();
        for (pack, objects) in by_pack {
            let total: u64 = objects.iter().map(|o| u64::from(o.2)).sum();
            let live_bytes: u64 = objects
                .iter()
                .filter(|(id, kind, _)| {
                    matches!(kind, ObjectKind::Version | ObjectKind::Provenance)
                        || live.contains(&(*id, *kind))
                })
                .map(|o| u64::from(o.2))
                .sum();
            let leased_here = objects
                .iter()
                .any(|(id, kind, _)| leased.contains(&(*id, *kind)));
            let stays = live_bytes > 0
                && !rewritten_in.contains(pack)
                && (live_bytes * 2 > total || leased_here);
            if !stays {
                continue;
            }
            for (id, kind, _) in objects {
                if *kind == ObjectKind::Chunk && !live.contains(&(*id, *kind)) {
                    bases.extend(storage.get(id).map_or(&[][..], |s| &s.bases[..]));
                }
            }
        }
        let before = live.len();
        live.extend(bases.into_iter().map(|b| (b, ObjectKind::Chunk)));
        // As the chunks will be stored once gc is done (a dead chunk keeps its encoding).
        add_closure(live, storage, &bases_after);
        if live.len() == before {
            return;
        }
    }
}

/// What `dsv gc` is asked to do.
#[derive(Debug, Clone)]
pub struct GcOptions {
    /// Only plan (and size what the repack would write); change nothing (`--dry-run`).
    pub dry_run: bool,
    /// Unnamed pack files younger than this are kept (`--grace`).
    pub grace: Duration,
    /// Also compare the compressible chunks gc would leave as they are with the chunks
    /// stored whole that resemble them, and store them as deltas where that pays
    /// (`--aggressive`, as `git gc --aggressive`). Without it, only chunks gc stores anew
    /// anyway (a commit's forward deltas) are compared: a gc costs no more than the data it
    /// rewrites. Comparing runs zstd at [`GC_WHOLE_LEVEL`] (a few MB/s of compressible data).
    pub aggressive: bool,
}

impl GcOptions {
    /// A real run with `grace`, not aggressive.
    pub fn with_grace(grace: Duration) -> GcOptions {
        GcOptions {
            grace,
            ..GcOptions::default()
        }
    }
}

impl Default for GcOptions {
    /// A real run with the CLI's default grace period (1 h), not aggressive.
    fn default() -> GcOptions {
        GcOptions {
            dry_run: false,
            grace: Duration::from_secs(3600),
            aggressive: false,
        }
    }
}

/// What gc will do, decided under the exclusive data lock by [`plan`] before anything
/// changes, and carried out by [`execute`] (or sized by [`measure`], the dry run). Plain
/// data: nothing in it refers to the store.
#[derive(Debug, Clone)]
pub struct GcPlan {
    /// Versions whose data is kept.
    pub live_versions: u64,
    /// Versions marked removed.
    pub removed_versions: u64,
    /// Objects reachable from the live versions (plus every version object), in the packs
    /// the catalog names now (the outboards [`execute`] writes come on top).
    pub live_objects: u64,
    /// Versions leased by running readers: kept whole, their packs not repacked.
    pub leased_versions: Vec<ObjectId>,
    /// Live files of several blocks without an outboard: [`execute`] writes them first.
    pub outboards: Vec<ObjectId>,
    /// Packs holding nothing live: deleted.
    pub delete: Vec<PackPlan>,
    /// Packs at most half live: their live objects ([`GcPlan::copy`]) go to new packs,
    /// then they are deleted.
    pub repack: Vec<PackPlan>,
    /// Packs with some garbage, kept (more than half live).
    pub kept_with_garbage: Vec<PackPlan>,
    /// The live objects of the packs to repack, in the order they are copied (pack by
    /// pack, in [`GcPlan::repack`]'s order), with their raw sizes.
    pub copy: Vec<(ObjectId, ObjectKind, u32)>,
    /// Pack files the catalog does not name; those marked `deleted` are deleted.
    pub orphans: Vec<OrphanFile>,
    /// Every pack the catalog names, with its size in bytes.
    pub named_packs: std::collections::HashMap<ObjectId, u64>,
    /// Chunks stored anew (reverse deltas), in the order the pass chose them; their packs
    /// are repacked.
    pub encodings: deltas::Encodings,
    /// Copied chunks that stay deltas against the bases they have, with how they are stored
    /// now (a delta frame of one chunk is copied byte for byte).
    pub kept_deltas: HashMap<ObjectId, crate::catalog::ChunkStorage>,
    /// Plain frames of the packs to repack whose every object is copied as it is, of
    /// [`FRAME_TARGET`] / 4 raw bytes or more: copied byte for byte (checked as a received
    /// frame is), not decompressed and compressed again, so a frame keeps the level it was written at (a head stored at
    /// [`GC_WHOLE_LEVEL`] stays so when its pack is repacked) and costs no compression.
    pub reused_frames: Vec<ReusedFrame>,
    /// The frame in [`GcPlan::reused_frames`] each of their objects is copied with.
    pub reused: HashMap<(ObjectId, ObjectKind), usize>,
}

/// A frame a repack copies byte for byte ([`GcPlan::reused_frames`]).
#[derive(Debug, Clone)]
pub struct ReusedFrame {
    /// The pack it is in.
    pub pack: ObjectId,
    /// Where and how it is stored there.
    pub record: crate::pack::format::FrameRecord,
    /// Its objects: id, kind, offset and length in its raw bytes.
    pub objects: Vec<(ObjectId, ObjectKind, u32, u32)>,
}

impl GcPlan {
    /// Bytes of live objects the repack copies.
    pub fn copy_bytes(&self) -> u64 {
        self.repack.iter().map(|p| p.live_bytes).sum()
    }

    /// Whether carrying the plan out would change nothing.
    pub fn is_empty(&self) -> bool {
        self.outboards.is_empty()
            && self.delete.is_empty()
            && self.repack.is_empty()
            && self.orphans.iter().all(|o| !o.deleted)
    }

    /// The report of this plan, once its repack wrote (or would write) `sealed`.
    fn report(
        &self,
        sealed: &[crate::pack::PackFile],
        dry_run: bool,
        outboards: u64,
        deltas: DeltaReport,
    ) -> GcReport {
        let outcome = Outcome::of(self, sealed);
        GcReport {
            live_versions: self.live_versions,
            removed_versions: self.removed_versions,
            // Each outboard written is one more live object.
            live_objects: self.live_objects + outboards,
            delete: self.delete.clone(),
            repack: self.repack.clone(),
            kept_with_garbage: self.kept_with_garbage.clone(),
            orphans: self.orphans.clone(),
            bytes_freed: outcome.bytes_freed,
            pack_files_deleted: outcome.deleted_files,
            dry_run,
            packs_written: sealed.len() as u64,
            leased_versions: self.leased_versions.clone(),
            outboards_written: outboards,
            deltas,
        }
    }
}

/// Plans gc and, unless `options.dry_run`, carries the plan out: [`plan`], then
/// [`execute`] (or [`measure`] for a dry run), under the data lock held exclusive.
///
/// # Errors
/// [`Error::MissingObject`] when a live version's tree or file map is missing (gc refuses to
/// run on a store that `verify` would fail); [`Error::Io`]; [`Error::Interrupted`].
pub fn gc(store: &mut Store, options: &GcOptions, progress: &dyn Progress) -> Result<GcReport> {
    let data_lock = store.lock_data_exclusive()?;
    let plan = plan(store, &data_lock, options, progress)?;
    if options.dry_run {
        measure(store, &data_lock, &plan, progress)
    } else {
        execute(store, &data_lock, &plan, progress)
    }
}

/// Decides what gc does, changing nothing: finds what the live and leased versions reach,
/// sorts the named packs into deleted, repacked and kept, and lists the unnamed pack files
/// (deleted when older than `grace`, unless gc cannot account for what they hold). Under
/// the data lock `_data`, held exclusive until the plan is carried out.
///
/// # Errors
/// As [`gc`].
pub fn plan(
    store: &Store,
    _data: &ExclusiveDataLock,
    options: &GcOptions,
    progress: &dyn Progress,
) -> Result<GcPlan> {
    let grace = options.grace;
    progress.phase("finding live data");
    let leased_versions = crate::lease::leased_versions(store.root())?;
    let storage = store.catalog().chunk_storage()?;
    let mut leased = leased_set(store, &leased_versions)?;
    // A leased chunk's bases are read with it: they stay where they are too.
    add_closure(&mut leased, &storage, |chunk| {
        storage.get(chunk).map_or(&[][..], |s| &s.bases[..])
    });
    let mut outboards = Vec::new();
    let mut live = live_set(store, &leased, &mut outboards)?;
    let by_pack = store.catalog().objects_by_pack()?;
    // Chunks in packs a reader has leased stay as they are: the reader knows them by their
    // place.
    let fixed: HashSet<ObjectId> = by_pack
        .values()
        .filter(|objects| {
            objects
                .iter()
                .any(|(id, kind, _)| leased.contains(&(*id, *kind)))
        })
        .flatten()
        .filter(|(_, kind, _)| *kind == ObjectKind::Chunk)
        .map(|(id, _, _)| *id)
        .collect();
    let live_chunks: HashSet<ObjectId> = live
        .iter()
        .filter(|(_, kind)| *kind == ObjectKind::Chunk)
        .map(|(id, _)| *id)
        .collect();
    // A chunk a remote holds keeps its encoding: the remote keeps the one it was sent, and a
    // second encoding there could make two deltas name each other.
    let mut fixed = fixed;
    fixed.extend(store.catalog().chunks_on_remotes()?);
    let encodings = deltas::plan_encodings(
        store,
        (&storage, &live_chunks, &fixed),
        options.aggressive,
        progress,
    )?;
    // Liveness follows closures: every base (transitively) of a live chunk, as the chunks
    // are stored once gc is done, is live. A chunk rewritten whole needs none.
    add_closure(&mut live, &storage, |chunk| {
        encodings.bases_after(chunk, &storage)
    });
    let rewritten_in: HashSet<ObjectId> = encodings
        .rewrites
        .iter()
        .filter_map(|r| storage.get(&r.chunk).map(|s| s.pack))
        .collect();
    keep_bases_of_kept_rows(
        &mut live,
        &by_pack,
        (&leased, &rewritten_in),
        &storage,
        |chunk| encodings.bases_after(chunk, &storage),
    );
    let named_packs: std::collections::HashMap<ObjectId, u64> =
        store.catalog().packs()?.into_iter().collect();
    let all_versions: HashSet<ObjectId> = by_pack
        .values()
        .flatten()
        .filter(|(_, kind, _)| *kind == ObjectKind::Version)
        .map(|(id, _, _)| *id)
        .collect();
    let live_versions = store.catalog().live_versions()?.len() as u64;
    let mut plan = GcPlan {
        live_versions,
        removed_versions: (all_versions.len() as u64).saturating_sub(live_versions),
        live_objects: 0,
        leased_versions,
        outboards,
        delete: Vec::new(),
        repack: Vec::new(),
        kept_with_garbage: Vec::new(),
        copy: Vec::new(),
        orphans: Vec::new(),
        named_packs,
        encodings,
        kept_deltas: HashMap::new(),
        reused_frames: Vec::new(),
        reused: HashMap::new(),
    };
    let is_live = |(id, kind, _): &(ObjectId, ObjectKind, u32)| {
        matches!(kind, ObjectKind::Version | ObjectKind::Provenance) || live.contains(&(*id, *kind))
    };
    for (pack, objects) in &by_pack {
        let bytes = plan.named_packs.get(pack).copied().unwrap_or(0);
        let total: u64 = objects.iter().map(|o| u64::from(o.2)).sum();
        let live_bytes: u64 = objects
            .iter()
            .filter(|o| is_live(o))
            .map(|o| u64::from(o.2))
            .sum();
        plan.live_objects += objects.iter().filter(|o| is_live(o)).count() as u64;
        let pack_plan = PackPlan {
            pack: *pack,
            bytes,
            live_bytes,
        };
        // A pack holding what a reader has leased stays where it is: the reader knows its
        // chunks by their place in it.
        let leased_here = || {
            objects
                .iter()
                .any(|(id, kind, _)| leased.contains(&(*id, *kind)))
        };
        if live_bytes == 0 {
            plan.delete.push(pack_plan);
        } else if rewritten_in.contains(pack) {
            // A chunk in it is stored anew: the pack goes, its other live objects copied.
            plan.repack.push(pack_plan);
        } else if live_bytes * 2 <= total && !leased_here() {
            plan.repack.push(pack_plan);
        } else if live_bytes < total {
            plan.kept_with_garbage.push(pack_plan);
        }
    }
    // Packs the catalog names but which hold no object rows at all (every object was also
    // in an older pack) are garbage too.
    for (pack, bytes) in &plan.named_packs {
        if !by_pack.contains_key(pack) {
            plan.delete.push(PackPlan {
                pack: *pack,
                bytes: *bytes,
                live_bytes: 0,
            });
        }
    }
    plan.delete.sort_by_key(|p| p.pack);
    plan.repack.sort_by_key(|p| p.pack);
    plan.kept_with_garbage.sort_by_key(|p| p.pack);
    // The chunks stored whole first, in the pass's order (a head's chunks in file order, so
    // its frames hold neighbouring chunks), then the deltas stored anew, then the other live
    // objects pack by pack.
    let repacked: HashSet<ObjectId> = plan.repack.iter().map(|p| p.pack).collect();
    let whole_copied = plan.encodings.whole_order.iter().filter(|chunk| {
        live.contains(&(**chunk, ObjectKind::Chunk))
            && storage
                .get(*chunk)
                .is_some_and(|s| repacked.contains(&s.pack))
    });
    let deltas_stored = plan
        .encodings
        .rewrites
        .iter()
        .filter(|r| !r.bases.is_empty())
        .map(|r| &r.chunk);
    let mut first: Vec<(ObjectId, ObjectKind, u32)> = Vec::new();
    let mut placed: HashSet<ObjectId> = HashSet::new();
    for chunk in whole_copied.chain(deltas_stored) {
        if let Some(s) = storage.get(chunk)
            && placed.insert(*chunk)
        {
            first.push((*chunk, ObjectKind::Chunk, s.length));
        }
    }
    let rest: Vec<(ObjectId, ObjectKind, u32)> = plan
        .repack
        .iter()
        .flat_map(|p| by_pack[&p.pack].iter().filter(|o| is_live(o)).copied())
        .filter(|(id, kind, _)| !(*kind == ObjectKind::Chunk && placed.contains(id)))
        .collect();
    for (id, kind, _) in &rest {
        if *kind == ObjectKind::Chunk
            && let Some(now) = storage.get(id)
            && !now.bases.is_empty()
        {
            plan.kept_deltas.insert(*id, now.clone());
        }
    }
    plan.copy = first;
    plan.copy.extend(rest);
    reuse_whole_frames(store, &mut plan, &by_pack)?;
    plan.orphans = orphans(store, &plan.named_packs, grace)?;
    Ok(plan)
}

/// The smallest frame a repack copies byte for byte (raw bytes): a quarter of a full one.
const REUSED_FRAME_MIN: usize = FRAME_TARGET / 4;

/// Finds the plain frames of the packs `plan` repacks whose every object it copies as it is
/// (live, neither rewritten nor a kept delta, and located by the catalog in that pack), and
/// records them in [`GcPlan::reused_frames`].
fn reuse_whole_frames(
    store: &Store,
    plan: &mut GcPlan,
    by_pack: &HashMap<ObjectId, Vec<(ObjectId, ObjectKind, u32)>>,
) -> Result<()> {
    let as_is: HashSet<(ObjectId, ObjectKind)> = plan
        .copy
        .iter()
        .filter(|(id, kind, _)| {
            *kind != ObjectKind::Chunk
                || (plan.encodings.rewrite(id).is_none() && !plan.kept_deltas.contains_key(id))
        })
        .map(|(id, kind, _)| (*id, *kind))
        .collect();
    for pack in &plan.repack {
        let Some(held) = by_pack.get(&pack.pack) else {
            continue;
        };
        let held: HashSet<(ObjectId, ObjectKind)> =
            held.iter().map(|(id, kind, _)| (*id, *kind)).collect();
        let path = crate::pack::writer::pack_path(&store.packs_dir(), &pack.pack);
        let file = std::fs::File::open(&path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        let index = crate::pack::reader::read_index(&file, &path)?;
        let mut objects: Vec<Vec<(ObjectId, ObjectKind, u32, u32)>> =
            vec![Vec::new(); index.frames.len()];
        for object in &index.objects {
            if let Some(frame) = objects.get_mut(object.frame as usize) {
                frame.push((object.id, object.kind, object.offset, object.length));
            }
        }
        for (record, objects) in index.frames.iter().zip(objects) {
            // Small frames (a commit's metadata, a reader's last data frame) are merged into
            // fuller ones instead: fewer frame records, and zstd sees more at once.
            let whole = record.compression != crate::pack::format::Compression::Delta
                && record.raw_length as usize >= REUSED_FRAME_MIN
                && !objects.is_empty()
                && objects.iter().all(|(id, kind, _, _)| {
                    as_is.contains(&(*id, *kind))
                        && held.contains(&(*id, *kind))
                        && !plan.reused.contains_key(&(*id, *kind))
                });
            if !whole {
                continue;
            }
            let at = plan.reused_frames.len();
            for (id, kind, _, _) in &objects {
                plan.reused.insert((*id, *kind), at);
            }
            plan.reused_frames.push(ReusedFrame {
                pack: pack.pack,
                record: *record,
                objects,
            });
        }
    }
    Ok(())
}

/// The pack files in the packs directory that the catalog (`named`) does not name, each
/// marked deleted when older than `grace` and gc can account for what it holds.
fn orphans(
    store: &Store,
    named: &std::collections::HashMap<ObjectId, u64>,
    grace: Duration,
) -> Result<Vec<OrphanFile>> {
    let mut orphans = Vec::new();
    let now = std::time::SystemTime::now();
    let accounting = super::repair::PackAccounting::new(store);
    if let Ok(dir) = std::fs::read_dir(store.packs_dir()) {
        for entry in dir.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let is_named = pack_id_of(&name).is_some_and(|id| named.contains_key(&id));
            if is_named {
                continue;
            }
            let meta = entry.metadata().ok();
            let age = meta
                .as_ref()
                .and_then(|m| m.modified().ok())
                .and_then(|t| now.duration_since(t).ok())
                .unwrap_or_default();
            // No cleanup deletes a pack whose contents it cannot account for: one holding a
            // version the ref log names that the catalog lacks (forgotten by the catalog, or
            // committed by a run killed before its catalog transaction), or one that is not a
            // readable pack at all, stays.
            let mut deleted = age >= grace;
            let mut unreadable = false;
            let mut holds_versions = false;
            if deleted && name.ends_with(".pack") {
                match accounting.forgotten_versions(&entry.path())? {
                    None => {
                        deleted = false;
                        unreadable = true;
                    }
                    Some(forgotten) if !forgotten.is_empty() => {
                        deleted = false;
                        holds_versions = true;
                    }
                    Some(_) => {}
                }
            }
            orphans.push(OrphanFile {
                name,
                bytes: meta.map_or(0, |m| m.len()),
                age_seconds: age.as_secs(),
                deleted,
                unreadable,
                holds_versions,
            });
        }
    }
    orphans.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(orphans)
}

/// Copies the live objects of the packs `plan` repacks into `sink`, storing the chunks the
/// plan rewrites as it says (whole, or deltas against their new bases) and keeping the other
/// deltas against the bases they have; returns the packs it sealed and what it stored anew.
/// On an error, what the sink wrote is deleted.
fn copy_live(
    store: &Store,
    plan: &GcPlan,
    sink: PackSink,
    progress: &dyn Progress,
) -> Result<(Vec<crate::pack::PackFile>, DeltaReport)> {
    let mut report = DeltaReport::default();
    let copied = (|| {
        let mut reader = store.reader();
        let mut bases_cache = BaseCache::default();
        let mut compressor = crate::pack::DeltaCompressor::default();
        // Chunks and metadata (trees, file maps, versions) in frames of their own, as a
        // commit writes them, so a fetch of metadata downloads no chunk. Chunks rewritten
        // whole (a head's) at gc's level, in the pass's order.
        let mut chunks = FrameBuilder::default();
        let mut whole = FrameBuilder::default();
        let mut metadata = FrameBuilder::default();
        let mut reused = vec![false; plan.reused_frames.len()];
        for (id, kind, length) in &plan.copy {
            crate::interrupt::check()?;
            if let Some(&at) = plan.reused.get(&(*id, *kind)) {
                progress.advance(u64::from(*length));
                if !std::mem::replace(&mut reused[at], true) {
                    sink.add(reused_frame(store, &plan.reused_frames[at])?)?;
                }
                continue;
            }
            let bytes = reader.bytes(id, *kind)?;
            progress.advance(bytes.len() as u64);
            let rewrite = (*kind == ObjectKind::Chunk)
                .then(|| plan.encodings.rewrite(id))
                .flatten();
            let kept = rewrite
                .is_none()
                .then(|| plan.kept_deltas.get(id))
                .flatten();
            let delta_bases = match rewrite {
                Some(rewrite) => Some(&rewrite.bases[..]).filter(|b| !b.is_empty()),
                None => kept.map(|k| &k.bases[..]),
            };
            if let Some(bases) = delta_bases {
                let prefix = bases_cache.prefix(&mut reader, bases)?;
                // A delta frame of this chunk alone is copied as it is stored (checked
                // against the prefix as a received one is), not compressed again.
                let planned = match (rewrite, kept) {
                    (Some(r), _) => r.delta.clone(),
                    (None, Some(k)) if k.frame_raw == k.length => {
                        Some(std::sync::Arc::new(stored_frame(store, k)?))
                    }
                    _ => None,
                };
                let mut one = FrameBuilder::default();
                one.push(*id, *kind, &bytes);
                let frame = match planned {
                    Some(stored) => crate::pack::EncodedFrame::verified_delta(
                        stored.as_ref().clone(),
                        bytes.len() as u32,
                        vec![(*id, *kind, 0, bytes.len() as u32)],
                        bases.to_vec(),
                        &prefix,
                    )
                    .map(|(frame, _)| frame)
                    .map_err(|detail| Error::corrupt("gc's planned delta", detail))?,
                    None => one
                        .encode_delta(
                            &mut compressor,
                            rewrite.map_or(GC_DELTA_LEVEL, |r| r.level),
                            &prefix,
                            bases.to_vec(),
                        )
                        .map_err(|source| Error::Io {
                            path: store.temp_dir(),
                            source,
                        })?,
                };
                if rewrite.is_some() {
                    report.rewritten_as_deltas += 1;
                    report.delta_raw_bytes += bytes.len() as u64;
                    report.delta_stored_bytes += frame.stored_len() as u64;
                }
                sink.add(frame)?;
                continue;
            }
            if rewrite.is_some() {
                report.rewritten_whole += 1;
            }
            // Only chunks stored anew are compressed at gc's high level: a plain chunk that
            // a repack copies stays at level 3 (a repack of a large store costs what it did;
            // level 19 runs at a few MB/s).
            let (frame, level) = if rewrite.is_some() {
                (&mut whole, GC_WHOLE_LEVEL)
            } else if *kind == ObjectKind::Chunk {
                (&mut chunks, 3)
            } else {
                (&mut metadata, 3)
            };
            frame.push(*id, *kind, &bytes);
            if frame.len() >= FRAME_TARGET {
                sink.add(frame.encode(level))?;
            }
        }
        for (frame, level) in [
            (&mut whole, GC_WHOLE_LEVEL),
            (&mut chunks, 3),
            (&mut metadata, 3),
        ] {
            if !frame.is_empty() {
                sink.add(frame.encode(level))?;
            }
        }
        Ok::<_, Error>(())
    })();
    match copied {
        Ok(()) => Ok((sink.finish()?, report)),
        Err(e) => {
            sink.abandon(store);
            Err(e)
        }
    }
}

/// `frame` as stored in its pack, checked as a received frame is (it decompresses to its
/// raw length and every object in it hashes to its id).
fn reused_frame(store: &Store, frame: &ReusedFrame) -> Result<crate::pack::EncodedFrame> {
    use std::os::unix::fs::FileExt;
    let path = crate::pack::writer::pack_path(&store.packs_dir(), &frame.pack);
    let io = |source| Error::Io {
        path: path.clone(),
        source,
    };
    // Bounded before anything is allocated (`verified` then checks the stored length
    // exactly): the raw length within the format's cap, the stored length within zstd's
    // worst case for it.
    let record = &frame.record;
    if record.raw_length > crate::pack::format::MAX_FRAME_RAW
        || u64::from(record.stored_length)
            > u64::from(record.raw_length) + u64::from(record.raw_length / 128) + 4096
    {
        return Err(Error::corrupt(
            &path,
            format!(
                "frame at offset {} is larger than the format allows",
                record.offset
            ),
        ));
    }
    let file = std::fs::File::open(&path).map_err(io)?;
    let mut stored = vec![0u8; record.stored_length as usize];
    file.read_exact_at(&mut stored, record.offset).map_err(io)?;
    crate::pack::EncodedFrame::verified(
        stored,
        record.raw_length,
        record.compression,
        frame.objects.clone(),
    )
    .map_err(|detail| {
        Error::corrupt(
            &path,
            format!("frame at offset {}: {detail}", record.offset),
        )
    })
}

/// The stored bytes of the frame `chunk` is in, read from its pack file.
fn stored_frame(store: &Store, chunk: &crate::catalog::ChunkStorage) -> Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let path = crate::pack::writer::pack_path(&store.packs_dir(), &chunk.pack);
    let io = |source| Error::Io {
        path: path.clone(),
        source,
    };
    let file = std::fs::File::open(&path).map_err(io)?;
    let mut stored = vec![0u8; chunk.frame_stored as usize];
    file.read_exact_at(&mut stored, chunk.frame_offset)
        .map_err(io)?;
    Ok(stored)
}

/// The raw bytes of the chunks recently used as bases, so that the neighbouring deltas of a
/// file, which share bases, read each base once.
#[derive(Default)]
struct BaseCache {
    recent: std::collections::VecDeque<(ObjectId, std::rc::Rc<Vec<u8>>)>,
}

impl BaseCache {
    const SLOTS: usize = 32;

    /// The reference prefix of `bases`: their raw bytes, concatenated in order.
    fn prefix(
        &mut self,
        reader: &mut crate::store::ObjectReader<'_>,
        bases: &[ObjectId],
    ) -> Result<Vec<u8>> {
        let mut prefix = Vec::new();
        for base in bases {
            let found = self
                .recent
                .iter()
                .find(|(id, _)| id == base)
                .map(|(_, b)| b.clone());
            let bytes = match found {
                Some(bytes) => bytes,
                None => {
                    let bytes = std::rc::Rc::new(reader.bytes(base, ObjectKind::Chunk)?);
                    if self.recent.len() >= Self::SLOTS {
                        self.recent.pop_front();
                    }
                    self.recent.push_back((*base, bytes.clone()));
                    bytes
                }
            };
            prefix.extend_from_slice(&bytes);
        }
        Ok(prefix)
    }
}

/// The dry run: reports `plan` as [`execute`] would, changing nothing. The repack runs
/// into a sink that writes nothing, so the report states exactly the packs (ids, sizes)
/// the real run writes, and so the bytes it frees.
///
/// # Errors
/// As [`gc`].
pub fn measure(
    store: &Store,
    _data: &ExclusiveDataLock,
    plan: &GcPlan,
    progress: &dyn Progress,
) -> Result<GcReport> {
    progress.start("sizing", plan.copy_bytes(), Unit::Bytes);
    let (sealed, deltas) = copy_live(store, plan, PackSink::measuring(), progress)?;
    progress.phase("planning");
    Ok(plan.report(&sealed, true, 0, deltas))
}

/// Carries `plan` out, in an order that makes a kill at any point safe: writes the missing
/// outboards, copies the live objects of packs to repack into new, durable packs, swaps the
/// catalog from the old packs to the new in one transaction, and only then deletes files.
///
/// # Errors
/// As [`gc`].
pub fn execute(
    store: &mut Store,
    _data: &ExclusiveDataLock,
    plan: &GcPlan,
    progress: &dyn Progress,
) -> Result<GcReport> {
    // Data committed before outboards existed gets them here (the upgrade path; see
    // docs/format.md), so that the next push sends them to remotes. Their packs are all
    // live: the plan's lists stay as they are.
    progress.phase("writing outboards");
    let outboards_written = super::ingest::write_missing_outboards(store, &plan.outboards)?;
    // An outboard pack just written can be byte-identical to an unnamed leftover of a killed
    // gc or push (the same outboards in the same order): that file is named now, no longer
    // an orphan to delete or to count as deleted in the report.
    let replanned;
    let plan = if outboards_written > 0 {
        let mut now = plan.clone();
        let named: HashSet<ObjectId> = store
            .catalog()
            .packs()?
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        now.orphans
            .retain(|orphan| !pack_id_of(&orphan.name).is_some_and(|id| named.contains(&id)));
        replanned = now;
        &replanned
    } else {
        plan
    };

    // 1. Copy the live objects of packs to repack into new, durable packs.
    progress.start("repacking", plan.copy_bytes(), Unit::Bytes);
    let sink = PackSink::new(&store.packs_dir(), &store.temp_dir());
    let copied = copy_live(store, plan, sink, progress);
    progress.phase("deleting");
    let (sealed, deltas) = copied?;
    let report = plan.report(&sealed, false, outboards_written, deltas);

    // 2. One transaction: the catalog forgets the old packs and names the new ones.
    let dropped: HashSet<ObjectId> = plan
        .delete
        .iter()
        .chain(&plan.repack)
        .map(|p| p.pack)
        .collect();
    {
        let _lock = store.lock_head(_data)?;
        let packs_dir = store.packs_dir();
        let writer = store.catalog_mut().writer()?;
        writer.drop_packs(&dropped)?;
        for pack in &sealed {
            writer.add_pack(&pack.read_index(&packs_dir)?)?;
        }
        // A stat-cache entry vouches for content only while the store holds it.
        writer.drop_unheld_stat_entries()?;
        writer.commit()?;
    }
    // 3. Only now delete files, never one the catalog names now: a repack can write a pack
    // byte-identical to an unnamed one a killed gc left (same objects, same order), and the
    // new pack then has that file's name. [`Outcome::of`] counted exactly these.
    let named: HashSet<ObjectId> = store
        .catalog()
        .packs()?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    for pack in dropped.iter().filter(|p| !named.contains(p)) {
        remove_pack_file(&crate::pack::writer::pack_path(&store.packs_dir(), pack))?;
    }
    for orphan in plan.orphans.iter().filter(|o| o.deleted) {
        let now_named = pack_id_of(&orphan.name).is_some_and(|id| named.contains(&id));
        if !now_named {
            remove_pack_file(&store.packs_dir().join(&orphan.name))?;
        }
    }
    Ok(report)
}

/// What carrying out a plan does to the packs directory, computed once from the plan and the
/// packs the repack writes (or, in a dry run, would write: the same ids and sizes).
struct Outcome {
    /// Pack files deleted: dropped packs and old unnamed files, except those a new pack
    /// takes the name of (the same bytes).
    deleted_files: u64,
    /// Bytes of the files deleted minus the bytes of new pack files.
    bytes_freed: i64,
}

impl Outcome {
    fn of(plan: &GcPlan, sealed: &[crate::pack::PackFile]) -> Outcome {
        let named = &plan.named_packs;
        let new: HashSet<ObjectId> = sealed.iter().map(|p| p.id).collect();
        let orphan_id = |o: &OrphanFile| pack_id_of(&o.name);
        let mut deleted_files = 0u64;
        let mut deleted_bytes = 0u64;
        for pack in plan.delete.iter().chain(&plan.repack) {
            if !new.contains(&pack.pack) {
                deleted_files += 1;
                deleted_bytes += pack.bytes;
            }
        }
        for orphan in plan.orphans.iter().filter(|o| o.deleted) {
            if !orphan_id(orphan).is_some_and(|id| new.contains(&id)) {
                deleted_files += 1;
                deleted_bytes += orphan.bytes;
            }
        }
        // A new pack whose file is already there (named, or an unnamed leftover with the
        // same bytes) adds nothing on disk.
        let existing: HashSet<ObjectId> = named
            .keys()
            .copied()
            .chain(plan.orphans.iter().filter_map(orphan_id))
            .collect();
        let written: u64 = sealed
            .iter()
            .filter(|p| !existing.contains(&p.id))
            .map(|p| p.size)
            .sum();
        Outcome {
            deleted_files,
            bytes_freed: deleted_bytes as i64 - written as i64,
        }
    }
}

fn remove_pack_file(path: &std::path::Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::retention::{self, RemoveOptions};
    use crate::progress::NoProgress;

    /// A store in `dir` with datasets `a` and `b`, each committed from a directory of its
    /// own (deleted after, so no workspace holds them); returns the packs `a`'s commit wrote.
    fn two_datasets(dir: &std::path::Path) -> (Store, HashSet<ObjectId>) {
        let mut store = Store::init(dir).unwrap();
        let packs = |store: &Store| -> HashSet<ObjectId> {
            store
                .catalog()
                .packs()
                .unwrap()
                .into_iter()
                .map(|(id, _)| id)
                .collect()
        };
        let mut a_packs = HashSet::new();
        for (name, seed) in [("a", 1u8), ("b", 2u8)] {
            let data = dir.join(name);
            std::fs::create_dir_all(&data).unwrap();
            let bytes: Vec<u8> = (0..300_000u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ seed)
                .collect();
            std::fs::write(data.join("f.bin"), bytes).unwrap();
            let before = packs(&store);
            let options = crate::ops::commit::CommitOptions::new(name);
            crate::ops::commit::commit(&mut store, &data, &options, &NoProgress).unwrap();
            if name == "a" {
                a_packs = packs(&store).difference(&before).copied().collect();
            }
            std::fs::remove_dir_all(&data).unwrap();
        }
        (store, a_packs)
    }

    fn files(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_plan_frees_the_removed_datasets_packs_and_keeps_the_others() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, a_packs) = two_datasets(dir.path());
        assert!(!a_packs.is_empty());
        retention::remove(&mut store, "a", &RemoveOptions::default()).unwrap();
        let lock = store.lock_data_exclusive().unwrap();
        let plan = plan(
            &store,
            &lock,
            &GcOptions::with_grace(Duration::from_secs(3600)),
            &NoProgress,
        )
        .unwrap();
        assert_eq!((plan.live_versions, plan.removed_versions), (1, 1));
        // a's packs go (its version object, kept for the log, is copied out); b's stay.
        let freed: HashSet<ObjectId> = plan
            .delete
            .iter()
            .chain(&plan.repack)
            .map(|p| p.pack)
            .collect();
        assert_eq!(freed, a_packs);
        assert!(plan.kept_with_garbage.is_empty());
        assert!(!plan.copy.is_empty());
        assert!(
            plan.copy
                .iter()
                .all(|(_, kind, _)| matches!(kind, ObjectKind::Version | ObjectKind::Provenance))
        );
        assert_eq!(
            plan.copy_bytes(),
            plan.copy.iter().map(|o| u64::from(o.2)).sum::<u64>()
        );
        assert!(plan.orphans.is_empty() && plan.outboards.is_empty());
        assert!(!plan.is_empty());
    }

    #[test]
    fn planning_and_measuring_change_nothing_and_measure_what_execution_does() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = two_datasets(dir.path());
        retention::remove(&mut store, "a", &RemoveOptions::default()).unwrap();
        let packs_dir = store.packs_dir();
        let before = (files(&packs_dir), store.catalog().packs().unwrap());
        let lock = store.lock_data_exclusive().unwrap();
        let first = plan(
            &store,
            &lock,
            &GcOptions::with_grace(Duration::ZERO),
            &NoProgress,
        )
        .unwrap();
        let measured = measure(&store, &lock, &first, &NoProgress).unwrap();
        assert_eq!(
            before,
            (files(&packs_dir), store.catalog().packs().unwrap())
        );
        let executed = execute(&mut store, &lock, &first, &NoProgress).unwrap();
        let mut as_run = serde_json::to_value(&measured).unwrap();
        as_run["dry_run"] = false.into();
        assert!(measured.dry_run && !executed.dry_run);
        assert_eq!(as_run, serde_json::to_value(&executed).unwrap());
        assert!(executed.bytes_freed > 0);
        // Carried out, the plan leaves nothing to do.
        let again = plan(
            &store,
            &lock,
            &GcOptions::with_grace(Duration::ZERO),
            &NoProgress,
        )
        .unwrap();
        assert!(again.is_empty(), "{again:?}");
        assert_eq!(again.live_objects, first.live_objects);
        assert_eq!(again.removed_versions, 1);
    }

    /// Rows of a growing CSV: `days` rows for each of 20 entities.
    fn table(days: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for entity in 0..20u64 {
            for day in 0..days as u64 {
                let h = (entity * 1_000 + day).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                out.extend_from_slice(
                    format!("e{entity},{day},{},{}\n", h % 99_991, h >> 50).as_bytes(),
                );
            }
        }
        out
    }

    /// Versions A then B of dataset `ds` (a growing table), gc'd: B whole, A as deltas
    /// against B's chunks. Returns the store and the two version ids.
    fn a_delta_chain(dir: &std::path::Path) -> (Store, ObjectId, ObjectId) {
        let mut store = Store::init(dir).unwrap();
        let data = dir.join("data");
        let mut ids = Vec::new();
        for days in [400, 404] {
            std::fs::create_dir_all(&data).unwrap();
            std::fs::write(data.join("t.csv"), table(days)).unwrap();
            let options = crate::ops::commit::CommitOptions::new("ds");
            let report =
                crate::ops::commit::commit(&mut store, &data, &options, &NoProgress).unwrap();
            ids.push(report.version);
        }
        std::fs::remove_dir_all(&data).unwrap();
        let report = gc(&mut store, &GcOptions::default(), &NoProgress).unwrap();
        assert!(report.deltas.rewritten_as_deltas > 0, "{report:?}");
        (store, ids[0], ids[1])
    }

    fn delta_chunks(store: &Store) -> usize {
        let storage = store.catalog().chunk_storage().unwrap();
        storage.values().filter(|s| !s.bases.is_empty()).count()
    }

    fn read_all(store: &Store, version: &ObjectId) -> Result<u64> {
        let mut reader = store.reader();
        let root = reader.version(version)?.tree;
        let mut bytes = 0;
        for entry in crate::tree::flatten(&mut reader, &root)? {
            if matches!(entry.kind, crate::tree::FlatKind::File { .. }) {
                let mut sink = Vec::new();
                reader.write_file(&entry.id, entry.size, None, &mut sink)?;
                bytes += sink.len() as u64;
            }
        }
        Ok(bytes)
    }

    #[test]
    fn a_base_only_a_kept_delta_needs_stays_live() {
        // A is stored as deltas against B's chunks. B is removed and the dataset names no
        // head (as `cache prune --allow-data-loss --keep-last 0` can leave it), so no pass
        // of the reverse deltas meets A: its chunks keep their encoding, and B's chunks are
        // reachable only as their bases. gc keeps them, and A reads back.
        let dir = tempfile::tempdir().unwrap();
        let (mut store, a, b) = a_delta_chain(dir.path());
        let before = read_all(&store, &a).unwrap();
        {
            let writer = store.catalog_mut().writer().unwrap();
            writer.mark_removed(&[b]).unwrap();
            writer.clear_head("ds").unwrap();
            writer.commit().unwrap();
        }
        let lock = store.lock_data_exclusive().unwrap();
        let planned = plan(
            &store,
            &lock,
            &GcOptions::with_grace(Duration::ZERO),
            &NoProgress,
        )
        .unwrap();
        assert!(planned.encodings.rewrites.is_empty());
        let b_chunks = store
            .catalog()
            .delta_bases_of(
                &store
                    .catalog()
                    .object_ids(ObjectKind::Chunk)
                    .unwrap()
                    .into_iter()
                    .collect::<Vec<_>>(),
            )
            .unwrap();
        assert!(!b_chunks.is_empty());
        execute(&mut store, &lock, &planned, &NoProgress).unwrap();
        drop(lock);
        for chunk in &b_chunks {
            assert!(
                store
                    .catalog()
                    .has_object(chunk, ObjectKind::Chunk)
                    .unwrap()
            );
        }
        assert_eq!(read_all(&store, &a).unwrap(), before);
    }

    #[test]
    fn a_repack_keeps_a_delta_whose_bases_stay_against_them() {
        // The pack holding A's deltas is repacked (a version in it removed): A's chunks are
        // copied as deltas against the same bases, and read back.
        let dir = tempfile::tempdir().unwrap();
        let (mut store, a, _) = a_delta_chain(dir.path());
        let before = read_all(&store, &a).unwrap();
        let deltas_before = delta_chunks(&store);
        let lock = store.lock_data_exclusive().unwrap();
        let mut planned = plan(
            &store,
            &lock,
            &GcOptions::with_grace(Duration::ZERO),
            &NoProgress,
        )
        .unwrap();
        assert!(planned.is_empty(), "{planned:?}");
        // Repack every pack (as a mostly dead pack would be).
        let by_pack = store.catalog().objects_by_pack().unwrap();
        let storage = store.catalog().chunk_storage().unwrap();
        for (pack, objects) in &by_pack {
            planned.repack.push(PackPlan {
                pack: *pack,
                bytes: 0,
                live_bytes: 0,
            });
            for object in objects {
                planned.copy.push(*object);
                if let Some(now) = storage.get(&object.0).filter(|s| !s.bases.is_empty()) {
                    planned.kept_deltas.insert(object.0, now.clone());
                }
            }
        }
        assert!(!planned.kept_deltas.is_empty());
        execute(&mut store, &lock, &planned, &NoProgress).unwrap();
        drop(lock);
        let deltas_after = delta_chunks(&store);
        assert_eq!(deltas_after, deltas_before);
        assert!(deltas_after > 0);
        assert_eq!(read_all(&store, &a).unwrap(), before);
    }

    #[test]
    fn unnamed_files_are_deleted_only_past_the_grace_period() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = two_datasets(dir.path());
        let stray = store.packs_dir().join("stray.tmp");
        std::fs::write(&stray, b"left by a killed run").unwrap();
        let lock = store.lock_data_exclusive().unwrap();
        let young = plan(
            &store,
            &lock,
            &GcOptions::with_grace(Duration::from_secs(3600)),
            &NoProgress,
        )
        .unwrap();
        assert_eq!(young.orphans.len(), 1);
        assert_eq!(young.orphans[0].name, "stray.tmp");
        assert!(!young.orphans[0].deleted);
        assert!(young.is_empty());
        let old = plan(
            &store,
            &lock,
            &GcOptions::with_grace(Duration::ZERO),
            &NoProgress,
        )
        .unwrap();
        assert!(old.orphans[0].deleted && !old.is_empty());
        let report = execute(&mut store, &lock, &old, &NoProgress).unwrap();
        assert_eq!(report.pack_files_deleted, 1);
        assert_eq!(report.bytes_freed, 20);
        assert!(!stray.exists());
    }
}
