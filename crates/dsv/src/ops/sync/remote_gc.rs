//! A remote's garbage: removing its refs (`dsv rm --remote`, `dsv tag -d --remote`),
//! collecting what no ref reaches (`dsv gc --remote`, lock-free, two-phase), and checking it
//! (`dsv verify --remote`). The argument that no ref can name deleted data is in
//! docs/format.md ("Remote garbage collection"); the keys in docs/format.md ("Remote
//! layout").
//!
//! # gc --remote
//!
//! `gc_remote()`, after rustic's prune (mark, wait, delete), with no lock:
//!
//! 1. **Format.** The remote's `format` key is read; a newer format than this dsv knows is
//!    refused. A real run writes `{"format":F,"grace_seconds":G}` (compare-and-swap) when it
//!    is absent, names a longer grace or an older format, and the guard pack before it, so
//!    that dsv binaries built before remote gc refuse the remote. F is 3 (`FORMAT_DELTAS`)
//!    when a pack of the remote holds a delta frame, else 2 (a format 3 stays 3).
//! 2. **Clock, marks.** The `clock` key is rewritten and its Last-Modified read: the server's
//!    time, against which every mark's age is measured. Then `marks/` is listed.
//! 3. **Refs and metadata**, after the marks: a fetch (`fetch_with`), which reads every ref
//!    and brings every version, tree and file map into the local store.
//! 4. **Reachability.** From every ref's version: the version, its parents, provenance,
//!    trees, file maps, outboards and chunks are live.
//! 5. **Indexes.** `packs/` is listed and every complete pack's `.idx` read (in memory, one
//!    record per object): which packs hold each live object.
//! 6. **Homes.** Each live object's home is one unmarked pack holding it: a pack not
//!    worth repacking first, then the smallest id. An object no unmarked pack holds makes
//!    every marked pack holding it needed. A pack is needed when it is some object's home
//!    (or so needed). **Closures**: the bases of every delta frame in a needed pack (or in
//!    an unmarked pack younger than the grace: a writer's upload, maybe) are live too, and
//!    so on until no pack is added (`Model::decide`): no pack holding a base a kept delta
//!    names is marked or deleted, so every delta frame left on the remote can be decoded.
//! 7. **Repack.** An unmarked pack that is some object's home but whose frames holding live
//!    objects are less than half its size: those frames are downloaded, checked, written
//!    into new packs and uploaded (`.pack` then `.idx`); the old pack is then no object's
//!    home, and step 8 marks it. A pack holding a delta frame is not repacked (its frames
//!    could be checked only with their bases downloaded too): it stays whole while needed.
//! 8. **Act.** An unmarked pack not needed, whose keys are older than the grace, is marked
//!    (`marks/<id>`, create-only; a pack younger than the grace may be a writer's upload in
//!    flight, and waits). A marked pack needed is rescued (its mark deleted). A marked pack
//!    not needed whose mark is older than the grace is deleted: `.idx`, then `.pack`, then
//!    the mark; only while this run is younger than half the grace (else the deletions
//!    are deferred to the next run). A mark whose pack is gone is deleted past the grace,
//!    and so is, on a file:// remote, a staging file (`KEY#N`) a killed upload left.
//!
//! The run is [`plan`] then [`execute`]. [`plan`] reads (steps 1 to 6, and step 8's
//! decisions: every pack listed gets exactly one [`PackAction`], checked before anything
//! changes) and writes only the `clock` key; [`execute`] writes the format key (step 1), then
//! repacks (checking that no pack it then marks or deletes is needed once the new packs are
//! written) and acts. `--dry-run` is the plan's report ([`RemoteGcPlan::report`]): one
//! branch in [`gc_remote`]. Every age is measured against the remote's clock plus
//! [`RemoteGcOptions::clock_offset`] (zero but in tests, which let a grace pass without
//! waiting).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::fetch_with;
pub use super::prove::RemoteProblem;
use super::{Transfer, open, refresh_indexes};
use crate::catalog::RemoteRecord;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::pack::{EncodedFrame, FrameRecord, ObjectRecord};
use crate::progress::{Progress, Unit};
use crate::remote::collect::{FORMAT_DELTAS, FORMAT_GC, REMOTE_FORMAT, RemoteFormat};
use crate::remote::{self, RefName, Remote};
use crate::store::{SharedDataLock, Store};
use crate::tree::{Reached, walk_reachable};

/// A pack's share of live bytes below which `gc --remote` repacks it: half.
pub const REPACK_BELOW_LIVE: f64 = 0.5;

/// One ref removed (or not) by [`remove_remote_refs`].
#[derive(Debug, Serialize)]
pub struct RemovedRemoteRef {
    /// The dataset.
    pub dataset: String,
    /// The tag, `None` for the head.
    pub tag: Option<String>,
    /// The version it named when read.
    pub version: ObjectId,
    /// `deleted`, or `changed` (another writer moved or deleted it after it was read; it
    /// was left as it is).
    pub status: &'static str,
}

/// The outcome of `dsv rm --remote` and `dsv tag -d --remote`.
#[derive(Debug, Serialize)]
pub struct RemoveRemoteReport {
    /// The remote.
    pub remote: String,
    /// The refs, tags first, then the head.
    pub refs: Vec<RemovedRemoteRef>,
    /// Requests made to the remote.
    pub requests: u64,
}

/// Removes refs of remote `name`: tag `tag` of `dataset`, or (for `None`) every tag of
/// `dataset` and then its head. Each deletion is a compare-and-swap on the ETag read
/// ([`Remote::delete_ref`]); a ref another writer changed meanwhile is left and reported
/// `changed`. The data stays until `dsv gc --remote`.
///
/// # Errors
/// [`Error::RevisionNotFound`] when the remote has no such ref; [`Error::Remote`];
/// [`Error::Corrupt`] for a malformed ref.
pub fn remove_remote_refs(
    store: &mut Store,
    name: &str,
    dataset: &str,
    tag: Option<&str>,
) -> Result<RemoveRemoteReport> {
    crate::revision::check_name("dataset", dataset)?;
    if let Some(tag) = tag {
        crate::revision::check_name("tag", tag)?;
    }
    let (record, remote) = open(store, name)?;
    let mut names: Vec<RefName> = remote
        .list_refs()?
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| n.dataset == dataset && tag.is_none_or(|t| n.tag.as_deref() == Some(t)))
        .collect();
    // Tags first: a removal stopped part-way leaves the head.
    names.sort_by_key(|n| n.tag.is_none());
    let mut refs = Vec::new();
    for ref_name in names {
        let Some((version, state)) = remote.get_ref(&ref_name)? else {
            continue;
        };
        let status = if remote.delete_ref(&ref_name, &state)? {
            let writer = store.catalog_mut().writer()?;
            writer.remove_remote_ref(record.id, &ref_name.dataset, ref_name.tag.as_deref())?;
            writer.commit()?;
            "deleted"
        } else {
            "changed"
        };
        refs.push(RemovedRemoteRef {
            dataset: ref_name.dataset,
            tag: ref_name.tag,
            version,
            status,
        });
    }
    if refs.is_empty() {
        return Err(Error::RevisionNotFound {
            closest: None,
            revision: match tag {
                Some(tag) => format!("{name}/{dataset}@{tag}"),
                None => format!("{name}/{dataset}"),
            },
        });
    }
    Ok(RemoveRemoteReport {
        remote: record.name,
        refs,
        requests: remote.requests(),
    })
}

/// How to collect a remote's garbage ([`gc_remote`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RemoteGcOptions {
    /// Plan and report; mark, rescue, repack and delete nothing (`--dry-run`).
    pub dry_run: bool,
    /// How long a pack stays marked before it may be deleted, and how old an unreferenced
    /// pack must be before it is marked (`--grace`, default 24 hours).
    pub grace: Duration,
    /// Copy the live frames of packs less than half live into new packs.
    pub repack: bool,
    /// Requests in flight.
    pub requests: usize,
    /// Added to the remote's clock as read: the run decides (marks, deletes, frees) as if
    /// this much more time had passed since every pack and mark was written. Zero (the
    /// default) for a real collection; a test sets it to see a grace pass without waiting.
    /// Anything else breaks the writers' rule (docs/format.md, "Remote garbage collection":
    /// a pack may go before a writer's re-check is due): never on a remote writers use.
    pub clock_offset: Duration,
}

impl Default for RemoteGcOptions {
    fn default() -> RemoteGcOptions {
        RemoteGcOptions {
            dry_run: false,
            grace: Duration::from_secs(crate::transfer::DEFAULT_REMOTE_GRACE_SECONDS),
            repack: true,
            requests: crate::remote::DEFAULT_JOBS,
            clock_offset: Duration::ZERO,
        }
    }
}

/// Packs of one kind of action, with their total size.
#[derive(Debug, Default, Clone, Serialize)]
pub struct PackSet {
    /// How many.
    pub count: u64,
    /// Their `.pack` sizes, summed, in bytes.
    pub bytes: u64,
    /// The pack ids, in order.
    pub packs: Vec<ObjectId>,
}

impl PackSet {
    fn add(&mut self, id: ObjectId, bytes: u64) {
        self.count += 1;
        self.bytes += bytes;
        self.packs.push(id);
    }
}

/// The outcome of `dsv gc --remote`.
#[derive(Debug, Serialize)]
pub struct RemoteGcReport {
    /// The remote.
    pub remote: String,
    /// True when nothing was changed (`--dry-run`).
    pub dry_run: bool,
    /// The grace period, seconds.
    pub grace_seconds: u64,
    /// Refs read (every head and tag).
    pub refs: u64,
    /// Live objects (reached from a ref).
    pub live_objects: u64,
    /// Live objects no pack of the remote holds (a damaged remote: `dsv verify --remote`).
    pub missing_objects: u64,
    /// Packs kept: some live object's home.
    pub live: PackSet,
    /// Packs marked by this run (unreferenced).
    pub marked: PackSet,
    /// Packs already marked, not yet past the grace.
    pub waiting: PackSet,
    /// Unreferenced packs younger than the grace (possibly a writer's upload in flight):
    /// not marked yet.
    pub young: PackSet,
    /// Marked packs a ref reaches again: their marks deleted.
    pub rescued: PackSet,
    /// Packs deleted (`.idx`, `.pack`, mark).
    pub deleted: PackSet,
    /// Packs less than half live whose live frames were copied into new packs (marked
    /// then, by this run).
    pub repacked: PackSet,
    /// Packs written by the repacking.
    pub written: PackSet,
    /// Marks whose pack is gone, deleted.
    pub stale_marks: u64,
    /// On a file:// remote: staging files (`KEY#N`) a killed upload left, older than the
    /// grace, deleted.
    pub staging_files: u64,
    /// True when this run took longer than half the grace before deleting: the deletions
    /// were left to the next run.
    pub deferred: bool,
    /// The remote's clock when this run read its marks (RFC 3339, UTC, seconds): every age
    /// (of a pack, of a mark) is measured against it, never against this machine's clock.
    pub server_time: String,
    /// Bytes this run deleted (`deleted.bytes`; 0 with `--dry-run`, which deletes nothing).
    pub freed_bytes: u64,
    /// Bytes of unreferenced packs still on the remote, freed by later runs (the sum of
    /// `frees`).
    pub pending_bytes: u64,
    /// When the space of the unreferenced packs still on the remote frees: one entry per
    /// state and minute, earliest first.
    pub frees: Vec<PendingFree>,
    /// Requests and bytes.
    pub transfer: Transfer,
}

/// Unreferenced packs of a remote that a later `dsv gc --remote` run deletes, and from when
/// ([`RemoteGcReport::frees`]).
#[derive(Debug, Clone, Serialize)]
pub struct PendingFree {
    /// `now`: deletable by a run now (`--dry-run`'s deletions, or deletions a run deferred);
    /// `marked`: marked (by this run, or an earlier one), deleted by a run after
    /// `frees_after`; `unmarked` (`--dry-run` only): a real run now would mark them;
    /// `young`: unreferenced but younger than the grace (possibly a writer's upload in
    /// flight), marked by a run after `marks_after`, deleted by a run a grace after that
    /// mark (if no ref names them by then).
    pub state: &'static str,
    /// How many packs.
    pub count: u64,
    /// Their `.pack` sizes, summed, in bytes.
    pub bytes: u64,
    /// The pack ids, in order.
    pub packs: Vec<ObjectId>,
    /// `young` only: the earliest time a run marks them (RFC 3339, UTC, rounded up to the
    /// minute).
    pub marks_after: Option<String>,
    /// The earliest time a run deletes them (RFC 3339, UTC, rounded up to the minute; the
    /// remote's clock): for `young` packs, when a run marks them at `marks_after` exactly.
    pub frees_after: String,
}

/// RFC 3339 in UTC, to the second, of `ms` milliseconds after the epoch.
fn rfc3339(ms: i64) -> String {
    let seconds = u64::try_from(ms.max(0) / 1000).unwrap_or(0);
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + Duration::from_secs(seconds))
        .to_string()
}

/// `ms` rounded up to the next whole minute.
fn ceil_minute(ms: i64) -> i64 {
    ms.saturating_add(59_999)
        .div_euclid(60_000)
        .saturating_mul(60_000)
}

/// The groups of [`RemoteGcReport::frees`]: packs with their state, size and the times
/// (milliseconds, the remote's clock) a run may mark and delete them.
#[derive(Default)]
struct Schedule {
    groups: BTreeMap<(i64, &'static str, Option<i64>), PendingFree>,
}

impl Schedule {
    fn add(
        &mut self,
        state: &'static str,
        id: ObjectId,
        bytes: u64,
        marks_after: Option<i64>,
        frees_after: i64,
    ) {
        let marks_after = marks_after.map(ceil_minute);
        let frees_after = ceil_minute(frees_after);
        let group = self
            .groups
            .entry((frees_after, state, marks_after))
            .or_insert_with(|| PendingFree {
                state,
                count: 0,
                bytes: 0,
                packs: Vec::new(),
                marks_after: marks_after.map(rfc3339),
                frees_after: rfc3339(frees_after),
            });
        group.count += 1;
        group.bytes += bytes;
        group.packs.push(id);
    }

    fn finish(self) -> Vec<PendingFree> {
        self.groups.into_values().collect()
    }
}

/// One pack as the collector sees it.
#[derive(Clone)]
struct PackState {
    size: u64,
    complete: bool,
    modified_ms: i64,
    mark_ms: Option<i64>,
    frames: Vec<FrameRecord>,
    objects: Vec<ObjectRecord>,
    /// The bases of its delta frames, by frame index (empty for a pack of format 1).
    bases: HashMap<u32, Vec<ObjectId>>,
}

impl PackState {
    /// Whether the pack holds a delta frame.
    fn has_deltas(&self) -> bool {
        !self.bases.is_empty()
    }
}

/// Everything a pass of the collector decides from.
#[derive(Clone)]
struct Model {
    packs: BTreeMap<ObjectId, PackState>,
}

/// The packs needed, and those worth repacking, as step 6 decides.
struct Decision {
    /// The live objects: those the refs reach and the bases of every delta frame in a pack
    /// that stays (transitively).
    live: HashSet<(ObjectId, ObjectKind)>,
    needed: HashSet<ObjectId>,
    /// Needed unmarked packs whose live frames are less than half their size, each with the
    /// frames holding objects whose home it is.
    repack: BTreeMap<ObjectId, Vec<usize>>,
    missing: u64,
}

impl Model {
    /// Stored bytes of the frames holding a `live` object, per pack.
    fn live_bytes(&self, live: &HashSet<(ObjectId, ObjectKind)>) -> HashMap<ObjectId, u64> {
        self.packs
            .iter()
            .map(|(id, pack)| {
                let frames: HashSet<u32> = pack
                    .objects
                    .iter()
                    .filter(|o| live.contains(&(o.id, o.kind)))
                    .map(|o| o.frame)
                    .collect();
                let bytes = frames
                    .iter()
                    .filter_map(|f| pack.frames.get(*f as usize))
                    .map(|f| u64::from(f.stored_length))
                    .sum();
                (*id, bytes)
            })
            .collect()
    }

    /// The remote format a collection of this remote needs: [`FORMAT_DELTAS`] when some
    /// complete pack holds a delta frame, else [`FORMAT_GC`].
    fn format(&self) -> u32 {
        if self
            .packs
            .values()
            .any(|pack| pack.complete && pack.has_deltas())
        {
            FORMAT_DELTAS
        } else {
            FORMAT_GC
        }
    }

    /// Step 6 with the closure rule: the packs needed by the objects the refs reach
    /// (`reached`) and by the bases of every delta frame in a pack that stays (a needed pack,
    /// or one of `staying`: unmarked packs younger than the grace, possibly a writer's upload
    /// whose refs are not written yet), transitively, until no pack is added. So no pack
    /// holding a base that a kept delta frame names is marked or deleted (a delta is never
    /// left on the remote without its bases), whether the delta's own chunk is live or not
    /// (`verify --remote --full` decodes every frame of every pack). `retiring`: packs
    /// treated as marked (repacked ones).
    fn decide(
        &self,
        reached: &HashSet<(ObjectId, ObjectKind)>,
        repack: bool,
        retiring: &HashSet<ObjectId>,
        staying: &HashSet<ObjectId>,
    ) -> Decision {
        let mut live = reached.clone();
        loop {
            let decision = self.decide_once(&live, repack, retiring);
            let mut grown = false;
            for id in decision.needed.iter().chain(staying) {
                let Some(pack) = self.packs.get(id) else {
                    continue;
                };
                for bases in pack.bases.values() {
                    for base in bases {
                        grown |= live.insert((*base, ObjectKind::Chunk));
                    }
                }
            }
            if !grown {
                return Decision { live, ..decision };
            }
        }
    }

    /// Step 6 for a given set of live objects (see [`Model::decide`]).
    fn decide_once(
        &self,
        live: &HashSet<(ObjectId, ObjectKind)>,
        repack: bool,
        retiring: &HashSet<ObjectId>,
    ) -> Decision {
        let live_bytes = self.live_bytes(live);
        // A pack holding delta frames is not repacked here: its frames would need their
        // bases downloaded to be checked. It stays whole while any object of it is needed.
        let candidate = |id: &ObjectId, pack: &PackState| -> bool {
            repack
                && !pack.has_deltas()
                && pack.mark_ms.is_none()
                && (live_bytes.get(id).copied().unwrap_or(0) as f64)
                    < REPACK_BELOW_LIVE * pack.size as f64
        };
        // Holders of each live object: (unmarked non-candidates, unmarked candidates, marked).
        let mut holders: HashMap<(ObjectId, ObjectKind), [Vec<ObjectId>; 3]> = HashMap::new();
        for (id, pack) in &self.packs {
            if !pack.complete {
                continue;
            }
            let class = if pack.mark_ms.is_some() || retiring.contains(id) {
                2
            } else if candidate(id, pack) {
                1
            } else {
                0
            };
            for object in &pack.objects {
                let key = (object.id, object.kind);
                if live.contains(&key) {
                    holders.entry(key).or_default()[class].push(*id);
                }
            }
        }
        let mut needed = HashSet::new();
        let mut repack_frames: BTreeMap<ObjectId, HashSet<u32>> = BTreeMap::new();
        let mut homes: HashMap<(ObjectId, ObjectKind), ObjectId> = HashMap::new();
        let mut missing = 0;
        for key in live {
            let Some([plain, candidates, marked]) = holders.get(key) else {
                // Outboards are optional: a remote may lack them.
                if key.1 != ObjectKind::Outboard {
                    missing += 1;
                }
                continue;
            };
            if let Some(home) = plain.iter().min() {
                needed.insert(*home);
            } else if let Some(home) = candidates.iter().min() {
                needed.insert(*home);
                homes.insert(*key, *home);
            } else {
                needed.extend(marked.iter().copied());
            }
        }
        for (key, home) in homes {
            let pack = &self.packs[&home];
            for object in &pack.objects {
                if (object.id, object.kind) == key {
                    repack_frames.entry(home).or_default().insert(object.frame);
                }
            }
        }
        Decision {
            live: HashSet::new(),
            needed,
            repack: repack_frames
                .into_iter()
                .map(|(id, frames)| {
                    let mut frames: Vec<usize> = frames.into_iter().map(|f| f as usize).collect();
                    frames.sort_unstable();
                    (id, frames)
                })
                .collect(),
            missing,
        }
    }
}

/// What `dsv gc --remote` does with one pack of the remote ([`PlannedPack::action`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum PackAction {
    /// Some live object's home: kept.
    Keep,
    /// Unreferenced (or repacked first) and at least a grace old: marked now.
    Mark,
    /// Unreferenced but younger than the grace (possibly a writer's upload in flight): left
    /// unmarked until a later run.
    Young,
    /// Marked, and a ref reaches it again: its mark is deleted.
    Rescue,
    /// Marked, not needed, its mark younger than the grace (plus a second): left.
    Wait,
    /// Marked, not needed, its mark at least a grace (plus a second) old: deleted (`.idx`,
    /// `.pack`, then the mark), unless the run has taken half the grace by then.
    Delete,
}

/// One pack of the remote and what [`plan`] decided for it.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedPack {
    /// Its `.pack` size in bytes (0 when only its `.idx` is listed).
    pub size: u64,
    /// What the run does with it.
    pub action: PackAction,
    /// Its live frames are first copied into new packs (step 7); it is then marked.
    pub repack: bool,
}

/// What `dsv gc --remote` will do on one remote, decided by [`plan`] from what the remote
/// holds (its refs, marks and pack indexes, read first) without changing it, and carried out
/// by [`execute`]; a dry run renders it ([`RemoteGcPlan::report`]). Every pack listed under
/// `packs/` has exactly one decision ([`RemoteGcPlan::packs`]).
pub struct RemoteGcPlan {
    /// The remote's name.
    pub remote: String,
    /// The grace period.
    pub grace: Duration,
    /// The time every age is measured against: the remote's clock when the marks were
    /// listed, plus [`RemoteGcOptions::clock_offset`]; Unix milliseconds.
    pub now_ms: i64,
    /// Refs read (every head and tag).
    pub refs: u64,
    /// Objects the refs reach, and the bases (transitively) of the delta frames of the packs
    /// that stay.
    pub live_objects: u64,
    /// The remote format a real run writes (at least): [`FORMAT_DELTAS`] when a pack holds
    /// a delta frame, else [`FORMAT_GC`].
    pub format: u32,
    /// Live objects no complete pack holds (a damaged remote).
    pub missing_objects: u64,
    /// Every pack listed under `packs/`, with its decision.
    pub packs: BTreeMap<ObjectId, PlannedPack>,
    /// Marks whose pack is gone and which are older than the grace (plus a second): deleted.
    pub stale_marks: Vec<ObjectId>,
    /// On a file:// remote: staging files a killed upload left, older than the grace: deleted.
    pub staging_files: u64,
    options: RemoteGcOptions,
    record: RemoteRecord,
    backend: Remote,
    /// When `now_ms` was read, on this machine's monotonic clock.
    started: Instant,
    model: Model,
    /// The live objects, closed under delta bases ([`Model::decide`]).
    live: HashSet<(ObjectId, ObjectKind)>,
    /// The frames of each pack to repack that are some live object's home.
    repack_frames: BTreeMap<ObjectId, Vec<usize>>,
}

impl std::fmt::Debug for RemoteGcPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteGcPlan")
            .field("remote", &self.remote)
            .field("grace", &self.grace)
            .field("now_ms", &self.now_ms)
            .field("refs", &self.refs)
            .field("packs", &self.packs)
            .field("stale_marks", &self.stale_marks)
            .finish_non_exhaustive()
    }
}

/// `dsv gc --remote`: deletes what no ref of remote `name` reaches, in two phases, without a
/// lock (see the module's documentation): [`plan`], then [`execute`], or with
/// `options.dry_run` the plan's [`RemoteGcPlan::report`] (which writes only the `clock` key).
///
/// # Errors
/// [`Error::RemoteFormatTooNew`]; [`Error::Remote`]; [`Error::Corrupt`] for a malformed
/// index or ref; [`Error::MissingObject`] when a ref's trees cannot be read (nothing is
/// marked then); [`Error::Interrupted`].
pub fn gc_remote(
    store: &mut Store,
    name: &str,
    options: &RemoteGcOptions,
    progress: &dyn Progress,
) -> Result<RemoteGcReport> {
    let data = store.lock_data_shared()?;
    let plan = plan(store, &data, name, options, progress)?;
    if options.dry_run {
        Ok(plan.report())
    } else {
        execute(store, &data, plan, progress)
    }
}

/// Steps 1 to 6 (and 8's decisions): reads the remote's format (a newer one is refused), its
/// clock, marks, refs (fetching their metadata into this store, as `dsv fetch` does) and pack
/// indexes, and decides for every pack what a run does with it. Writes only the remote's
/// `clock` key; marks, deletes, repacks nothing.
///
/// # Errors
/// As [`gc_remote`].
pub fn plan(
    store: &mut Store,
    data: &SharedDataLock,
    name: &str,
    options: &RemoteGcOptions,
    progress: &dyn Progress,
) -> Result<RemoteGcPlan> {
    let (record, remote) = open(store, name)?;
    let grace_ms = millis(options.grace);
    progress.phase("reading the remote's format");
    check_format(&remote)?;
    progress.phase("listing the remote's gc marks");
    // The deletions' decisions rest on what is read from here on.
    let started = Instant::now();
    let now_ms = remote
        .server_now_ms()?
        .saturating_add(millis(options.clock_offset));
    let marks = remote.list_marks()?;
    progress.phase("reading the remote's refs and metadata");
    let (refs, live) = live_objects(store, data, &record, &remote, options.requests, progress)?;
    progress.phase("reading the remote's pack indexes");
    let model = read_model(&remote, &marks, options.requests)?;
    let staying = young_packs(&model, now_ms, grace_ms);
    let decision = model.decide(&live, options.repack, &HashSet::new(), &staying);
    let live = decision.live.clone();
    let packs = decide_packs(&model, &decision, now_ms, grace_ms);
    let stale_marks = marks
        .iter()
        .filter(|(id, mark)| !model.packs.contains_key(id) && now_ms - **mark >= grace_ms + 1000)
        .map(|(id, _)| *id)
        .collect();
    let staging_files = remote.remove_staging_files(staging_age(options), true)?;
    let plan = RemoteGcPlan {
        remote: record.name.clone(),
        grace: options.grace,
        now_ms,
        refs,
        live_objects: live.len() as u64,
        format: model.format(),
        missing_objects: decision.missing,
        packs,
        stale_marks,
        staging_files,
        options: options.clone(),
        record,
        backend: remote,
        started,
        model,
        live,
        repack_frames: decision.repack,
    };
    check_decided(&plan.model, &plan.packs)?;
    Ok(plan)
}

/// Unmarked packs younger than the grace: a writer's upload in flight, maybe, whose delta
/// frames' bases stay as if the pack were needed ([`Model::decide`]).
fn young_packs(model: &Model, now_ms: i64, grace_ms: i64) -> HashSet<ObjectId> {
    model
        .packs
        .iter()
        .filter(|(_, pack)| pack.mark_ms.is_none() && now_ms - pack.modified_ms < grace_ms)
        .map(|(id, _)| *id)
        .collect()
}

/// Unix milliseconds of a duration, saturating.
fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// How old a staging file must be (by this machine's clock) to be deleted: the grace, less
/// the clock offset.
fn staging_age(options: &RemoteGcOptions) -> Duration {
    options.grace.saturating_sub(options.clock_offset)
}

/// Step 8's decisions, one per pack of `model`: a pack some live object needs is kept (or
/// rescued, when marked); a pack to repack and any other unneeded pack a grace old is marked,
/// a younger one waits; a marked pack not needed is deleted once its mark is a grace and a
/// second old (Last-Modified may be rounded down), else it waits.
fn decide_packs(
    model: &Model,
    decision: &Decision,
    now_ms: i64,
    grace_ms: i64,
) -> BTreeMap<ObjectId, PlannedPack> {
    let mut packs = BTreeMap::new();
    for (id, pack) in &model.packs {
        let repack = decision.repack.contains_key(id);
        // A pack to repack is no object's home once its frames are copied.
        let needed = decision.needed.contains(id) && !repack;
        let action = match (pack.mark_ms, needed) {
            (None, true) => PackAction::Keep,
            (None, false) if repack || now_ms - pack.modified_ms >= grace_ms => PackAction::Mark,
            (None, false) => PackAction::Young,
            (Some(_), true) => PackAction::Rescue,
            (Some(mark), false) if now_ms - mark >= grace_ms + 1000 => PackAction::Delete,
            (Some(_), false) => PackAction::Wait,
        };
        packs.insert(
            *id,
            PlannedPack {
                size: pack.size,
                action,
                repack,
            },
        );
    }
    packs
}

/// Every pack `model` lists has one decision in `packs`, and the decisions agree with what the
/// remote holds: only a marked pack is rescued, waits or is deleted; only an unmarked one is
/// kept, marked or left young; a pack to repack is marked.
fn check_decided(model: &Model, packs: &BTreeMap<ObjectId, PlannedPack>) -> Result<()> {
    let wrong = |id: &ObjectId, what: &str| Error::Internal {
        detail: format!("gc --remote planned pack {} {what}", id.short()),
    };
    if let Some(id) = model.packs.keys().find(|id| !packs.contains_key(id)) {
        return Err(wrong(id, "without a decision"));
    }
    for (id, planned) in packs {
        let Some(pack) = model.packs.get(id) else {
            return Err(wrong(id, "that the remote does not list"));
        };
        let marked = pack.mark_ms.is_some();
        let fits = match planned.action {
            PackAction::Keep | PackAction::Mark | PackAction::Young => !marked,
            PackAction::Rescue | PackAction::Wait | PackAction::Delete => marked,
        };
        if !fits || (planned.repack && planned.action != PackAction::Mark) {
            return Err(wrong(id, &format!("to {:?}", planned.action)));
        }
    }
    Ok(())
}

impl RemoteGcPlan {
    /// The packs whose decision is `action`, in id order, with their sizes.
    pub fn with_action(&self, action: PackAction) -> Vec<(ObjectId, u64)> {
        self.packs
            .iter()
            .filter(|(_, p)| p.action == action)
            .map(|(id, p)| (*id, p.size))
            .collect()
    }

    /// When a mark dated `mark_ms` may be deleted: a whole second past the grace.
    fn after_grace(&self, mark_ms: i64) -> i64 {
        mark_ms
            .saturating_add(millis(self.grace))
            .saturating_add(1000)
    }

    /// The report's parts that a dry run and a real run share: the packs kept, waiting,
    /// young, rescued and marked (with those repacked first), and when the young and waiting
    /// ones free.
    fn base_report(&self, dry_run: bool) -> (RemoteGcReport, Schedule) {
        let mut report = RemoteGcReport {
            remote: self.remote.clone(),
            dry_run,
            grace_seconds: self.grace.as_secs(),
            refs: self.refs,
            live_objects: self.live_objects,
            missing_objects: self.missing_objects,
            live: PackSet::default(),
            marked: PackSet::default(),
            waiting: PackSet::default(),
            young: PackSet::default(),
            rescued: PackSet::default(),
            deleted: PackSet::default(),
            repacked: PackSet::default(),
            written: PackSet::default(),
            stale_marks: 0,
            staging_files: 0,
            deferred: false,
            server_time: rfc3339(self.now_ms),
            freed_bytes: 0,
            pending_bytes: 0,
            frees: Vec::new(),
            transfer: Transfer::default(),
        };
        let mut schedule = Schedule::default();
        let grace_ms = millis(self.grace);
        for (id, planned) in &self.packs {
            let pack = &self.model.packs[id];
            if planned.repack {
                report.repacked.add(*id, planned.size);
            }
            match planned.action {
                PackAction::Keep => report.live.add(*id, planned.size),
                PackAction::Mark => report.marked.add(*id, planned.size),
                PackAction::Young => {
                    report.young.add(*id, planned.size);
                    let marks_after = pack.modified_ms.saturating_add(grace_ms);
                    let frees_after = self.after_grace(ceil_minute(marks_after));
                    schedule.add("young", *id, planned.size, Some(marks_after), frees_after);
                }
                PackAction::Rescue => report.rescued.add(*id, planned.size),
                PackAction::Wait => {
                    report.waiting.add(*id, planned.size);
                    let frees_after = self.after_grace(pack.mark_ms.unwrap_or(self.now_ms));
                    schedule.add("marked", *id, planned.size, None, frees_after);
                }
                PackAction::Delete => {}
            }
        }
        (report, schedule)
    }

    /// What a run would do, as `--dry-run` reports it: the packs it would mark, rescue,
    /// repack and delete, and when the space of each unreferenced pack frees.
    pub fn report(&self) -> RemoteGcReport {
        let (mut report, mut schedule) = self.base_report(true);
        for (id, size) in self.with_action(PackAction::Delete) {
            report.deleted.add(id, size);
            schedule.add("now", id, size, None, self.now_ms);
        }
        for (id, size) in self.with_action(PackAction::Mark) {
            schedule.add("unmarked", id, size, None, self.after_grace(self.now_ms));
        }
        report.stale_marks = self.stale_marks.len() as u64;
        report.staging_files = self.staging_files;
        report.transfer.requests = self.backend.requests();
        report.set_schedule(schedule);
        report
    }
}

/// Steps 1, 7 and 8 of a real run: writes the remote's format, repacks, then rescues, marks
/// and deletes as `plan` decided (deletions only while the run is younger than half the
/// grace, else left to the next run), deletes stale marks and staging files, and refreshes
/// this store's record of the remote's indexes. `_data`: the data lock [`plan`] ran under,
/// still held.
///
/// # Errors
/// As [`gc_remote`]; [`Error::Internal`] when a pack the plan marks or deletes turns out to be
/// needed once the repacked packs are written (nothing is marked or deleted then).
pub fn execute(
    store: &mut Store,
    _data: &SharedDataLock,
    plan: RemoteGcPlan,
    progress: &dyn Progress,
) -> Result<RemoteGcReport> {
    progress.phase("writing the remote's format");
    write_format(&plan.backend, plan.grace, plan.format)?;
    let (mut report, mut schedule) = plan.base_report(false);
    if !plan.repack_frames.is_empty() {
        progress.phase("repacking");
        repack_planned(store, &plan, &mut report, progress)?;
    }
    let (remote, options) = (&plan.backend, &plan.options);
    let to_mark = plan.with_action(PackAction::Mark);
    let to_rescue = plan.with_action(PackAction::Rescue);
    let to_delete = plan.with_action(PackAction::Delete);
    progress.start(
        "marking",
        (to_mark.len() + to_rescue.len() + to_delete.len()) as u64,
        Unit::Files,
    );
    for (id, _) in &to_rescue {
        remote.delete_key(&remote::mark_key(id))?;
        progress.advance(1);
    }
    for (id, _) in &to_mark {
        remote.put_mark(id)?;
        progress.advance(1);
    }
    // The marks just written are dated no later than now on the remote's clock (a mark is
    // deleted a whole second past the grace: Last-Modified may be rounded down).
    let marked_by = plan.now_ms.saturating_add(millis(plan.started.elapsed()));
    for (id, size) in &to_mark {
        schedule.add("marked", *id, *size, None, plan.after_grace(marked_by));
    }
    for (id, size) in to_delete {
        // A run longer than half the grace may have read refs a writer has moved since
        // (docs/format.md, "Remote garbage collection"): it deletes nothing more.
        // (A grace of zero promises that no writer runs: nothing to defer for.)
        if report.deferred
            || (!options.grace.is_zero() && plan.started.elapsed() > options.grace / 2)
        {
            report.deferred = true;
            schedule.add("now", id, size, None, plan.now_ms);
            continue;
        }
        crate::interrupt::check()?;
        remote.delete_key(&remote::index_key(&id))?;
        remote.delete_key(&remote::pack_key(&id))?;
        remote.delete_key(&remote::mark_key(&id))?;
        report.deleted.add(id, size);
        progress.advance(1);
    }
    if !report.deferred {
        for id in &plan.stale_marks {
            remote.delete_key(&remote::mark_key(id))?;
            report.stale_marks += 1;
        }
        // A staging file older than the grace belongs to no running writer (each finishes
        // its upload within half of it).
        report.staging_files = remote.remove_staging_files(staging_age(options), false)?;
    }
    progress.finish();
    // The store forgets the deleted packs (and records the new ones).
    refresh_indexes(store, &plan.record, remote, options.requests)?;
    report.transfer.requests = remote.requests();
    report.freed_bytes = report.deleted.bytes;
    report.set_schedule(schedule);
    Ok(report)
}

/// Step 7 of a real run: copies the live frames of the packs to repack into new packs
/// (uploaded, kept: reported `written` and `live`), then checks that with them written no
/// pack the plan marks or deletes is needed.
fn repack_planned(
    store: &Store,
    plan: &RemoteGcPlan,
    report: &mut RemoteGcReport,
    progress: &dyn Progress,
) -> Result<()> {
    let written = repack(
        store,
        &plan.backend,
        &plan.model,
        &plan.repack_frames,
        &plan.options,
        progress,
    )?;
    let mut model = plan.model.clone();
    for (id, size, frames, objects) in written {
        report.written.add(id, size);
        report.live.add(id, size);
        report.transfer.packs += 1;
        report.transfer.bytes += size;
        model.packs.insert(
            id,
            PackState {
                size,
                complete: true,
                modified_ms: plan.now_ms,
                mark_ms: None,
                frames,
                objects,
                // Repacking copies no delta frame (a pack holding one is not repacked).
                bases: HashMap::new(),
            },
        );
    }
    let retiring = plan.repack_frames.keys().copied().collect();
    let staying = young_packs(&model, plan.now_ms, millis(plan.grace));
    let after = model.decide(&plan.live, false, &retiring, &staying);
    let acted_on = |action: PackAction| !matches!(action, PackAction::Keep | PackAction::Rescue);
    if let Some(id) = plan
        .packs
        .iter()
        .find(|(id, p)| acted_on(p.action) && after.needed.contains(id))
        .map(|(id, _)| id)
    {
        return Err(Error::Internal {
            detail: format!(
                "gc --remote: pack {} is needed once repacked; nothing marked or deleted",
                id.short()
            ),
        });
    }
    Ok(())
}

impl RemoteGcReport {
    fn set_schedule(&mut self, schedule: Schedule) {
        self.frees = schedule.finish();
        self.pending_bytes = self.frees.iter().map(|f| f.bytes).sum();
    }
}

/// Step 1's check: a format newer than this dsv knows is refused. Returns the format read.
fn check_format(remote: &Remote) -> Result<Option<(RemoteFormat, crate::remote::RefState)>> {
    let current = remote.get_format()?;
    if let Some((format, _)) = &current
        && format.format > REMOTE_FORMAT
    {
        return Err(Error::RemoteFormatTooNew {
            remote: remote.name().to_string(),
            found: format.format,
            known: REMOTE_FORMAT,
        });
    }
    Ok(current)
}

/// Step 1 of a real run: writes the format key (and the guard pack) when absent, naming a
/// longer grace than `grace`, or older than `format` (compare-and-swap, retried), refusing a
/// newer format than this dsv knows. A remote of a newer format than `format` keeps it.
fn write_format(remote: &Remote, grace: Duration, format: u32) -> Result<()> {
    let grace = grace.as_secs().max(1);
    for _ in 0..8 {
        let current = check_format(remote)?;
        if current
            .as_ref()
            .is_some_and(|(found, _)| found.grace_seconds <= grace && found.format >= format)
        {
            return Ok(());
        }
        let wanted = RemoteFormat {
            format: current
                .as_ref()
                .map_or(format, |(found, _)| found.format.max(format)),
            grace_seconds: current
                .as_ref()
                .map_or(grace, |(found, _)| found.grace_seconds.min(grace)),
        };
        if remote.put_format(&wanted, current.as_ref().map(|(_, state)| state))? {
            return Ok(());
        }
    }
    Err(Error::RemoteCollected {
        remote: remote.name().to_string(),
        operation: "gc",
    })
}

/// Steps 3 and 4: fetches refs and metadata, and returns how many refs there are and every
/// object they reach.
fn live_objects(
    store: &mut Store,
    data: &SharedDataLock,
    record: &RemoteRecord,
    remote: &Remote,
    jobs: usize,
    progress: &dyn Progress,
) -> Result<(u64, HashSet<(ObjectId, ObjectKind)>)> {
    let fetched = fetch_with(store, data, record, remote, jobs, progress)?;
    let roots: Vec<ObjectId> = fetched.refs.iter().map(|r| r.version).collect();
    Ok((fetched.refs.len() as u64, reachable(store, &roots)?))
}

/// Every object reachable from `roots`: each version and its parents, provenance, trees,
/// file maps, outboards and chunks.
fn reachable(store: &Store, roots: &[ObjectId]) -> Result<HashSet<(ObjectId, ObjectKind)>> {
    let mut live = HashSet::new();
    let mut reader = store.reader();
    let mut seen_trees = HashSet::new();
    let mut pending: Vec<ObjectId> = roots.to_vec();
    while let Some(id) = pending.pop() {
        if !live.insert((id, ObjectKind::Version)) {
            continue;
        }
        let version = reader.version(&id)?;
        if let Some(provenance) = version.provenance {
            live.insert((provenance, ObjectKind::Provenance));
        }
        if let Some(parent) = version.parent {
            pending.push(parent);
        }
        walk_reachable(
            &mut reader,
            &version.tree,
            Some(&mut seen_trees),
            &mut |reached| {
                match reached {
                    Reached::Tree(tree) => {
                        live.insert((tree, ObjectKind::Tree));
                    }
                    Reached::File { id, chunks, .. } => {
                        if chunks.len() > 1 {
                            live.insert((id, ObjectKind::FileMap));
                            live.insert((id, ObjectKind::Outboard));
                        }
                        for chunk in chunks {
                            live.insert((chunk, ObjectKind::Chunk));
                        }
                    }
                }
                Ok(())
            },
        )?;
    }
    Ok(live)
}

/// Step 5: every pack of the remote with its index (complete packs: frames, objects, the
/// bases of its delta frames) and its mark.
fn read_model(remote: &Remote, marks: &BTreeMap<ObjectId, i64>, jobs: usize) -> Result<Model> {
    let listed = remote.list_all_packs()?;
    let complete: Vec<(ObjectId, u64)> = listed
        .iter()
        .filter_map(|(id, p)| p.pack_size.filter(|_| p.has_index).map(|size| (*id, size)))
        .collect();
    let tails = remote.get_many(
        complete
            .iter()
            .map(|(id, size)| (remote::index_key(id), tail_limit(*size)))
            .collect(),
        jobs,
    )?;
    let mut indexes: HashMap<ObjectId, crate::pack::PackIndex> = HashMap::new();
    for ((id, size), tail) in complete.iter().zip(tails) {
        let parsed = crate::pack::reader::parse_tail(&tail, *size).map_err(|detail| {
            Error::corrupt(
                format!("{}:{}", remote.name(), remote::index_key(id)),
                detail,
            )
        })?;
        indexes.insert(*id, parsed);
    }
    let mut packs = BTreeMap::new();
    for (id, listed) in listed {
        let crate::pack::PackIndex {
            frames,
            objects,
            deltas,
        } = indexes.remove(&id).unwrap_or_default();
        let bases: HashMap<u32, Vec<ObjectId>> = deltas
            .into_iter()
            .map(|delta| (delta.frame, delta.bases))
            .collect();
        packs.insert(
            id,
            PackState {
                size: listed.pack_size.unwrap_or(0),
                complete: listed.has_index && listed.pack_size.is_some(),
                modified_ms: listed.modified_ms,
                mark_ms: marks.get(&id).copied(),
                frames,
                objects,
                bases,
            },
        );
    }
    Ok(Model { packs })
}

/// The longest `.idx` of a pack of `size` bytes: the pack after its header, and at most the
/// longest index plus trailer.
fn tail_limit(size: u64) -> u64 {
    size.saturating_sub(crate::pack::format::HEADER_LEN)
        .min(crate::pack::format::MAX_INDEX_LEN + crate::pack::format::TRAILER_LEN)
}

/// A frame and its objects (id, kind, offset, length).
type FrameMembers = (FrameRecord, Vec<(ObjectId, ObjectKind, u32, u32)>);

/// A pack's index as read: id, size, frames, objects, the `.idx` bytes, and the bases of its
/// delta frames by frame index.
type ReadIndex = (
    ObjectId,
    u64,
    Vec<FrameRecord>,
    Vec<ObjectRecord>,
    bytes::Bytes,
    HashMap<u32, Vec<ObjectId>>,
);

/// A pack written by the repacking: id, size, frames, objects.
type Written = (ObjectId, u64, Vec<FrameRecord>, Vec<ObjectRecord>);

/// Step 7: downloads `frames` of each pack, checks them, writes them into new packs (sealed
/// at the usual target size) in a temporary directory, and uploads those.
fn repack(
    store: &Store,
    remote: &Remote,
    model: &Model,
    frames: &BTreeMap<ObjectId, Vec<usize>>,
    options: &RemoteGcOptions,
    progress: &dyn Progress,
) -> Result<Vec<Written>> {
    let dir = tempfile::Builder::new()
        .prefix("remote-gc-")
        .tempdir_in(store.temp_dir())
        .map_err(|source| Error::Io {
            path: store.temp_dir(),
            source,
        })?;
    let mut ranges = Vec::new();
    let mut members: HashMap<(ObjectId, u64), FrameMembers> = HashMap::new();
    for (pack_id, indexes) in frames {
        let pack = &model.packs[pack_id];
        for &index in indexes {
            let frame = pack.frames[index];
            let objects = pack
                .objects
                .iter()
                .filter(|o| o.frame as usize == index)
                .map(|o| (o.id, o.kind, o.offset, o.length))
                .collect();
            ranges.push((
                *pack_id,
                frame.offset..frame.offset + u64::from(frame.stored_length),
            ));
            members.insert((*pack_id, frame.offset), (frame, objects));
        }
    }
    let total: u64 = ranges.iter().map(|(_, r)| r.end - r.start).sum();
    progress.start("repack", total, Unit::Bytes);
    let members = std::sync::Arc::new(members);
    let name = remote.name().to_string();
    let check = std::sync::Arc::new(
        move |pack: ObjectId,
              range: std::ops::Range<u64>,
              bytes: bytes::Bytes|
              -> Result<EncodedFrame> {
            let (frame, objects) = &members[&(pack, range.start)];
            EncodedFrame::verified(
                bytes.to_vec(),
                frame.raw_length,
                frame.compression,
                objects.clone(),
            )
            .map_err(|detail| {
                Error::corrupt(
                    format!("{name}:{}", remote::pack_key(&pack)),
                    format!("frame at offset {}: {detail}", frame.offset),
                )
            })
        },
    );
    let mut written = Vec::new();
    let mut writer: Option<crate::pack::PackWriter> = None;
    let seal = |writer: crate::pack::PackWriter, written: &mut Vec<Written>| -> Result<()> {
        let sealed = writer.finish()?;
        written.push((sealed.id, sealed.size, sealed.frames, sealed.objects));
        Ok(())
    };
    remote.get_ranges(ranges, options.requests, check, |frame: EncodedFrame| {
        let stored = frame.stored_len() as u64;
        let current = match writer.as_mut() {
            Some(current) => current,
            None => writer.insert(crate::pack::PackWriter::create(dir.path(), dir.path())?),
        };
        current.add_frame(frame)?;
        if current.size() >= crate::pack_sink::PACK_TARGET {
            seal(writer.take().expect("open"), &mut written)?;
        }
        progress.advance(stored);
        Ok(())
    })?;
    if let Some(open) = writer.take() {
        seal(open, &mut written)?;
    }
    let uploads = written
        .iter()
        .map(|(id, ..)| (*id, crate::pack::writer::pack_path(dir.path(), id)))
        .collect();
    remote.put_packs(uploads, options.requests, &|_| {})?;
    Ok(written)
}

/// How to check a remote ([`verify_remote`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RemoteVerifyOptions {
    /// Download every pack whole and check it against its id and index (`--full`); else
    /// check a sample: each pack's first and last frame.
    pub full: bool,
    /// Requests in flight.
    pub requests: usize,
}

impl Default for RemoteVerifyOptions {
    fn default() -> RemoteVerifyOptions {
        RemoteVerifyOptions {
            full: false,
            requests: crate::remote::DEFAULT_JOBS,
        }
    }
}

/// The outcome of `dsv verify --remote`.
#[derive(Debug, Serialize)]
pub struct RemoteVerifyReport {
    /// The remote.
    pub remote: String,
    /// Whether every pack was downloaded whole (`--full`).
    pub full: bool,
    /// Refs checked.
    pub refs: u64,
    /// Objects the refs reach, each found in a complete pack.
    pub objects: u64,
    /// Complete packs checked.
    pub packs: u64,
    /// Frames downloaded and checked.
    pub frames: u64,
    /// Bytes downloaded for the checks.
    pub bytes: u64,
    /// Packs with a gc mark (still present; counted among `packs`).
    pub marked: u64,
    /// Pack keys without their pair (an upload cut short, a deletion part-way): not used.
    pub incomplete: u64,
    /// With `--full`: distinct files of the refs checked; each file map the remote holds
    /// for one was proven (its chunks, joined, hash to the file id). 0 without `--full`.
    pub files: u64,
    /// What is wrong; empty when the remote is sound.
    pub problems: Vec<RemoteProblem>,
    /// Requests made.
    pub requests: u64,
}

/// `dsv verify --remote`: every ref of remote `name` names a version whose whole closure
/// (the objects [`gc_remote`] counts live, outboards aside) is in the remote's complete
/// packs, and every complete pack's index parses and its frames check (a sample, or with
/// `options.full` every byte: the pack hashes to its id, its tail equals its `.idx`, every
/// frame decompresses and every object hashes to its id; then every file of every ref has
/// each file map the remote holds for it proven against the file id, its chunks read here or
/// from the remote: `prove::RemoteMaps`). Metadata is fetched into this store first, as
/// `dsv fetch` does.
///
/// # Errors
/// [`Error::Remote`]; [`Error::Interrupted`]. Damage is reported as problems, not errors.
pub fn verify_remote(
    store: &mut Store,
    name: &str,
    options: &RemoteVerifyOptions,
    progress: &dyn Progress,
) -> Result<RemoteVerifyReport> {
    let data = store.lock_data_shared()?;
    let (record, remote) = open(store, name)?;
    let mut problems = Vec::new();
    progress.phase("reading the remote's pack indexes");
    let read = read_indexes(&remote, options.requests, &mut problems)?;
    // Refs: each one's closure in the packs.
    progress.phase("reading the remote's refs and metadata");
    let fetched = fetch_with(store, &data, &record, &remote, options.requests, progress)?;
    let refs: Vec<(String, ObjectId)> = fetched
        .refs
        .iter()
        .map(|r| match &r.tag {
            Some(tag) => (format!("{}@{tag}", r.dataset), r.version),
            None => (r.dataset.clone(), r.version),
        })
        .collect();
    let objects = check_refs(store, &refs, &read.held, &mut problems);
    // Packs: a sample of frames, or every byte.
    let mut checker = PackChecker {
        remote: &remote,
        full: options.full,
        problems: &mut problems,
        maps: super::prove::RemoteMaps::default(),
        frames: 0,
        bytes: 0,
        held: &read.held,
        deltas: DeltaChecks::new(&read.indexes, &store.temp_dir()),
    };
    checker.check_all(&read.indexes, progress)?;
    let PackChecker {
        maps,
        frames,
        mut bytes,
        ..
    } = checker;
    // With --full, every file of every ref: each file map the remote holds for it is proven
    // against the file id (its chunks joined and hashed), as a checkout would prove it.
    let mut files = 0;
    if options.full {
        progress.phase("proving the file maps");
        let (proven, downloaded) =
            maps.prove_refs(store, &record, &remote, &refs, &mut problems)?;
        files = proven;
        bytes += downloaded;
    }
    Ok(RemoteVerifyReport {
        remote: record.name,
        full: options.full,
        refs: refs.len() as u64,
        objects,
        packs: read.indexes.len() as u64,
        frames,
        bytes,
        marked: read.marked,
        incomplete: read.incomplete,
        files,
        problems,
        requests: remote.requests(),
    })
}

/// What `verify --remote` read of the remote's packs: every complete pack's index that
/// parses, the objects they hold, and the packs marked or incomplete.
struct IndexesRead {
    indexes: Vec<ReadIndex>,
    held: HashSet<(ObjectId, ObjectKind)>,
    /// Listed packs with a gc mark.
    marked: u64,
    /// Pack keys without their pair.
    incomplete: u64,
}

/// `verify --remote`'s first step: lists the packs and marks and reads every complete pack's
/// `.idx`; an index that does not parse (or a listing of bad keys) is a problem, not an
/// error.
fn read_indexes(
    remote: &Remote,
    jobs: usize,
    problems: &mut Vec<RemoteProblem>,
) -> Result<IndexesRead> {
    let listed = remote.list_all_packs()?;
    let marks = remote.list_marks()?;
    let complete: Vec<(ObjectId, u64)> = listed
        .iter()
        .filter_map(|(id, p)| p.pack_size.filter(|_| p.has_index).map(|size| (*id, size)))
        .collect();
    let tails = remote.get_many(
        complete
            .iter()
            .map(|(id, size)| (remote::index_key(id), tail_limit(*size)))
            .collect(),
        jobs,
    );
    let tails = match tails {
        Ok(tails) => tails,
        Err(e @ Error::Corrupt { .. }) => {
            problems.push(RemoteProblem {
                what: "packs/".into(),
                detail: e.to_string(),
            });
            Vec::new()
        }
        Err(e) => return Err(e),
    };
    let mut held = HashSet::new();
    let mut indexes = Vec::new();
    for ((id, size), tail) in complete.iter().zip(tails) {
        match crate::pack::reader::parse_tail(&tail, *size) {
            Ok(crate::pack::PackIndex {
                frames,
                objects,
                deltas,
            }) => {
                held.extend(objects.iter().map(|o| (o.id, o.kind)));
                let bases = deltas.into_iter().map(|d| (d.frame, d.bases)).collect();
                indexes.push((*id, *size, frames, objects, tail, bases));
            }
            Err(detail) => problems.push(RemoteProblem {
                what: remote::index_key(id).to_string(),
                detail,
            }),
        }
    }
    Ok(IndexesRead {
        indexes,
        held,
        marked: marks.keys().filter(|id| listed.contains_key(id)).count() as u64,
        incomplete: (listed.len() - complete.len()) as u64,
    })
}

/// Each ref (`what`, version): the objects its version reaches, outboards aside, must all be
/// `held` by a complete pack; a ref whose closure lacks some, or cannot be read, is a
/// problem. Returns how many objects the refs reach.
fn check_refs(
    store: &Store,
    refs: &[(String, ObjectId)],
    held: &HashSet<(ObjectId, ObjectKind)>,
    problems: &mut Vec<RemoteProblem>,
) -> u64 {
    let mut objects = 0;
    for (what, version) in refs {
        match reachable(store, &[*version]) {
            Ok(live) => {
                let mut lacking: Vec<&(ObjectId, ObjectKind)> = live
                    .iter()
                    .filter(|key| key.1 != ObjectKind::Outboard && !held.contains(key))
                    .collect();
                objects += live.len() as u64;
                lacking.sort_by_key(|(id, kind)| (*id, *kind as u8));
                if let Some((id, kind)) = lacking.first() {
                    problems.push(RemoteProblem {
                        what: what.clone(),
                        detail: format!(
                            "names version {} whose {} {} (and {} more objects) no complete pack holds",
                            version.short(),
                            kind.name(),
                            id.short(),
                            lacking.len() - 1
                        ),
                    });
                }
            }
            Err(e) => problems.push(RemoteProblem {
                what: what.clone(),
                detail: format!(
                    "names version {} whose objects cannot be read: {e}",
                    version.short()
                ),
            }),
        }
    }
    objects
}

/// `verify --remote`'s check of the packs: each pack's first and last frame, or with `full`
/// the whole pack (against its id and `.idx`) and every frame; what is wrong goes into
/// `problems`, the file maps of checked frames (with `full`) into `maps`.
struct PackChecker<'a> {
    remote: &'a Remote,
    full: bool,
    problems: &'a mut Vec<RemoteProblem>,
    maps: super::prove::RemoteMaps,
    /// Frames checked.
    frames: u64,
    /// Bytes downloaded.
    bytes: u64,
    /// The objects the complete packs hold (a delta frame's bases must be among them).
    held: &'a HashSet<(ObjectId, ObjectKind)>,
    /// With `full`: the delta frames, decoded once every pack is read.
    deltas: DeltaChecks,
}

/// `verify --remote --full`'s delta frames: each decoded against its bases as soon as they are
/// read (a base may lie in a pack read later). The raw bytes of a chunk are kept only while a
/// delta frame of the remote still to be decoded names it as a base (from plain frames as they
/// are checked, from delta frames as they are decoded), and the stored bytes of each delta
/// frame only until its bases are read: within [`crate::transfer::delta_memory`] bytes of
/// memory, the rest in an unnamed file in the store's temp directory, as a download keeps them.
struct DeltaChecks {
    bases: crate::transfer::kept::BaseStore,
    /// Delta frames read, waiting for their bases, by arrival number.
    pending: BTreeMap<u64, PendingDelta>,
    arrivals: u64,
}

/// A delta frame `verify --remote --full` read and decodes once its bases are read
/// ([`DeltaChecks`]): pack key, frame, stored bytes (kept), objects (id, kind, offset,
/// length), bases.
type PendingDelta = (
    String,
    FrameRecord,
    crate::transfer::kept::Held,
    Vec<(ObjectId, ObjectKind, u32, u32)>,
    Vec<ObjectId>,
);

/// A delta frame as `verify --remote --full` read it: pack key, frame, stored bytes, objects
/// (id, kind, offset, length), bases.
type ReadDelta = (
    String,
    FrameRecord,
    Vec<u8>,
    Vec<(ObjectId, ObjectKind, u32, u32)>,
    Vec<ObjectId>,
);

impl DeltaChecks {
    /// The checks of the delta frames of `indexes`, keeping what is past the memory budget
    /// in `temp_dir`.
    fn new(indexes: &[ReadIndex], temp_dir: &std::path::Path) -> DeltaChecks {
        let mut bases =
            crate::transfer::kept::BaseStore::new(crate::transfer::delta_memory(), Some(temp_dir));
        for index in indexes {
            for frame_bases in index.5.values() {
                bases.will_use(frame_bases);
            }
        }
        DeltaChecks {
            bases,
            pending: BTreeMap::new(),
            arrivals: 0,
        }
    }

    /// True when a delta frame still to be decoded names chunk `id` as a base.
    fn wanted(&self, id: &ObjectId) -> bool {
        self.bases.wanted(id)
    }

    /// Keeps the raw bytes of the wanted bases among `members` of a checked frame's `raw`.
    ///
    /// # Errors
    /// [`Error::Io`] keeping them on disk.
    fn keep(&mut self, raw: &[u8], members: &[(ObjectId, ObjectKind, u32, u32)]) -> Result<()> {
        for (id, kind, offset, length) in members {
            if *kind == ObjectKind::Chunk
                && self.bases.wanted(id)
                && let Some(bytes) = raw.get(*offset as usize..(*offset + *length) as usize)
            {
                self.bases.arrived_bytes(*id, bytes)?;
            }
        }
        Ok(())
    }

    /// A delta frame read (pack key, frame, stored bytes, members, bases): it waits for its
    /// bases.
    ///
    /// # Errors
    /// [`Error::Io`] keeping its bytes on disk.
    fn add(&mut self, (key, frame, stored, members, bases): ReadDelta) -> Result<()> {
        let stored = crate::transfer::kept::lock(&self.bases.kept).put(stored)?;
        let number = self.arrivals;
        self.arrivals += 1;
        self.bases.wait(number, &bases);
        self.pending
            .insert(number, (key, frame, stored, members, bases));
        Ok(())
    }

    /// Decodes the pending delta frames whose bases are read (a base decoded serves the
    /// next); each failure is a problem. A base no delta still to be decoded names is let go.
    ///
    /// # Errors
    /// [`Error::Io`] reading or writing what is kept on disk.
    fn resolve(&mut self, problems: &mut Vec<RemoteProblem>) -> Result<()> {
        while let Some(number) = self.bases.next_ready() {
            let Some((key, frame, stored, members, bases)) = self.pending.remove(&number) else {
                continue;
            };
            let stored_bytes = {
                let mut kept = crate::transfer::kept::lock(&self.bases.kept);
                let bytes = kept.get(&stored)?.into_owned();
                kept.release(&stored);
                bytes
            };
            let limit = crate::pack::format::MAX_DELTA_PREFIX;
            let decoded = match self.bases.prefix(&bases, limit)? {
                Err(length) => Err(format!(
                    "its bases hold {length} bytes, more than the {limit} a delta's prefix may"
                )),
                Ok(prefix) => EncodedFrame::verified_delta(
                    stored_bytes,
                    frame.raw_length,
                    members.clone(),
                    bases.clone(),
                    &prefix,
                )
                .map(|(_, raw)| raw),
            };
            match decoded {
                Ok(raw) => self.keep(&raw, &members)?,
                Err(detail) => problems.push(RemoteProblem {
                    what: key,
                    detail: format!("frame at offset {}: {detail}", frame.offset),
                }),
            }
            self.bases.used(&bases);
        }
        Ok(())
    }

    /// Decodes what is left, then each frame whose bases never came (a base no pack holds, or
    /// a cycle) is a problem.
    ///
    /// # Errors
    /// As [`DeltaChecks::resolve`].
    fn finish(&mut self, problems: &mut Vec<RemoteProblem>) -> Result<()> {
        self.resolve(problems)?;
        for (key, frame, _, _, bases) in std::mem::take(&mut self.pending).into_values() {
            let unread: Vec<String> = bases
                .iter()
                .filter(|base| !self.bases.has(base))
                .map(|base| base.short())
                .collect();
            problems.push(RemoteProblem {
                what: key,
                detail: format!(
                    "delta frame at offset {}: its bases {} cannot be read (no pack holds them, or a delta cycle)",
                    frame.offset,
                    unread.join(", ")
                ),
            });
        }
        self.bases.clear();
        Ok(())
    }
}

impl PackChecker<'_> {
    /// Checks every pack of `indexes`, with progress.
    fn check_all(&mut self, indexes: &[ReadIndex], progress: &dyn Progress) -> Result<()> {
        let total: u64 = if self.full {
            indexes.iter().map(|(_, size, ..)| *size).sum()
        } else {
            indexes.len() as u64
        };
        let unit = if self.full { Unit::Bytes } else { Unit::Files };
        progress.start("checking packs", total, unit);
        for index in indexes {
            crate::interrupt::check()?;
            self.check(index)?;
            // The deltas whose bases this pack brought, decoded now: what waits stays small.
            self.deltas.resolve(self.problems)?;
            progress.advance(if self.full { index.1 } else { 1 });
        }
        self.deltas.finish(self.problems)?;
        progress.finish();
        Ok(())
    }

    /// Checks one pack: its sample of frames, or all of it.
    fn check(&mut self, (id, size, frames, objects, tail, bases): &ReadIndex) -> Result<()> {
        let key = remote::pack_key(id).to_string();
        let chosen: Vec<usize> = if self.full {
            (0..frames.len()).collect()
        } else {
            let mut sample = vec![0, frames.len().saturating_sub(1)];
            sample.dedup();
            sample.retain(|f| *f < frames.len());
            sample
        };
        let body = if self.full {
            self.whole_pack(id, *size, tail, &key)?
        } else {
            None
        };
        for index in chosen {
            let frame = frames[index];
            let delta_bases = bases.get(&(index as u32));
            if let Some(delta_bases) = delta_bases {
                // Each base must be on the remote; a sample checks that much (decoding needs
                // the bases' frames), `full` decodes the frame once every pack is read.
                for base in delta_bases {
                    if !self.held.contains(&(*base, ObjectKind::Chunk)) {
                        self.problems.push(RemoteProblem {
                            what: key.clone(),
                            detail: format!(
                                "delta frame at offset {}: its base {} is in no complete pack",
                                frame.offset,
                                base.short()
                            ),
                        });
                    }
                }
                if !self.full {
                    self.frames += 1;
                    continue;
                }
            }
            let stored = match &body {
                Some(body) => frame_range(&frame)
                    .and_then(|range| body.get(range))
                    .map(<[u8]>::to_vec),
                None if self.full => None,
                None => self.get_frame(id, &frame, &key),
            };
            let Some(stored) = stored else {
                continue;
            };
            let members: Vec<(ObjectId, ObjectKind, u32, u32)> = objects
                .iter()
                .filter(|o| o.frame as usize == index)
                .map(|o| (o.id, o.kind, o.offset, o.length))
                .collect();
            self.frames += 1;
            if let Some(delta_bases) = delta_bases {
                self.deltas
                    .add((key.clone(), frame, stored, members, delta_bases.clone()))?;
                continue;
            }
            self.check_frame(id, &frame, stored, members, &key)?;
        }
        Ok(())
    }

    /// With `full`: the whole pack, checked against its id and its `.idx` (a mismatch is a
    /// problem; an unreadable pack is one too, and `None`).
    fn whole_pack(
        &mut self,
        id: &ObjectId,
        size: u64,
        tail: &bytes::Bytes,
        key: &str,
    ) -> Result<Option<bytes::Bytes>> {
        let mut problem = |detail: String| {
            self.problems.push(RemoteProblem {
                what: key.to_string(),
                detail,
            });
        };
        match self.remote.get_pack(id, size) {
            Ok(body) => {
                self.bytes += body.len() as u64;
                if ObjectId::of(&body) != *id {
                    problem("its bytes do not hash to its id".into());
                }
                if !body.ends_with(tail) || body.len() as u64 != size {
                    problem("its tail differs from its .idx".into());
                }
                Ok(Some(body))
            }
            Err(e @ (Error::Corrupt { .. } | Error::Remote { .. })) => {
                problem(e.to_string());
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// One frame's stored bytes, by a ranged GET (a failure is a problem, and `None`).
    fn get_frame(&mut self, id: &ObjectId, frame: &FrameRecord, key: &str) -> Option<Vec<u8>> {
        let range = frame.offset..frame.offset + u64::from(frame.stored_length);
        let mut got = None;
        let fetched = self.remote.get_ranges(
            vec![(*id, range)],
            1,
            std::sync::Arc::new(|_, _, bytes: bytes::Bytes| Ok(bytes)),
            |b| {
                got = Some(b.to_vec());
                Ok(())
            },
        );
        if let Err(e) = fetched {
            self.problems.push(RemoteProblem {
                what: key.to_string(),
                detail: e.to_string(),
            });
        }
        if let Some(got) = &got {
            self.bytes += got.len() as u64;
        }
        got
    }

    /// Checks one frame: it decompresses to its length and every object in it hashes to its
    /// id; with `full`, its file maps are kept, to be proven later, and the bases in it that
    /// delta frames name ([`DeltaChecks::keep`]).
    ///
    /// # Errors
    /// [`Error::Io`] keeping bases on disk (a frame that fails its check is a problem).
    fn check_frame(
        &mut self,
        id: &ObjectId,
        frame: &FrameRecord,
        stored: Vec<u8>,
        members: Vec<(ObjectId, ObjectKind, u32, u32)>,
        key: &str,
    ) -> Result<()> {
        let (raw_length, compression) = (frame.raw_length, frame.compression);
        let bases_in = self.full
            && members
                .iter()
                .any(|(member, ..)| self.deltas.wanted(member));
        let checked = if self.full && (bases_in || super::prove::RemoteMaps::wants(&members)) {
            let kept = members.clone();
            match EncodedFrame::verified_with_raw(stored, raw_length, compression, members) {
                Ok((_, raw)) => {
                    self.deltas.keep(&raw, &kept)?;
                    if super::prove::RemoteMaps::wants(&kept) {
                        self.maps.add(id, &raw, &kept);
                    }
                    Ok(())
                }
                Err(detail) => Err(detail),
            }
        } else {
            EncodedFrame::verified(stored, raw_length, compression, members).map(|_| ())
        };
        if let Err(detail) = checked {
            self.problems.push(RemoteProblem {
                what: key.to_string(),
                detail: format!("frame at offset {}: {detail}", frame.offset),
            });
        }
        Ok(())
    }
}

/// A frame's byte range within its pack, as `usize` (`None` when it does not fit).
fn frame_range(frame: &FrameRecord) -> Option<std::ops::Range<usize>> {
    let start = usize::try_from(frame.offset).ok()?;
    Some(start..start.checked_add(frame.stored_length as usize)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pack::Compression;
    use crate::progress::NoProgress;

    const GRACE_MS: i64 = 60_000;
    const NOW_MS: i64 = 10_000_000;

    fn id(n: u8) -> ObjectId {
        ObjectId([n; 32])
    }

    /// A complete pack of `frames` frames of 100 bytes, object `objects[i]` in frame `i`.
    fn pack(frames: u32, objects: &[u8], modified_ms: i64, mark_ms: Option<i64>) -> PackState {
        PackState {
            size: u64::from(frames) * 100,
            complete: true,
            modified_ms,
            mark_ms,
            frames: (0..frames)
                .map(|f| FrameRecord {
                    offset: u64::from(f) * 100,
                    stored_length: 100,
                    raw_length: 100,
                    compression: Compression::None,
                })
                .collect(),
            objects: objects
                .iter()
                .enumerate()
                .map(|(frame, n)| ObjectRecord {
                    id: id(*n),
                    kind: ObjectKind::Chunk,
                    frame: frame as u32,
                    offset: 0,
                    length: 10,
                })
                .collect(),
            bases: HashMap::new(),
        }
    }

    /// A pack like [`pack`] whose frame `frame` is a delta frame with `bases`.
    fn delta_pack(
        frames: u32,
        objects: &[u8],
        modified_ms: i64,
        deltas: &[(u32, &[u8])],
    ) -> PackState {
        let mut state = pack(frames, objects, modified_ms, None);
        for (frame, bases) in deltas {
            state.frames[*frame as usize].compression = Compression::Delta;
            state
                .bases
                .insert(*frame, bases.iter().map(|n| id(*n)).collect());
        }
        state
    }

    /// The closure rule: a pack whose only live use is holding a base of a delta frame in a
    /// kept pack (transitively: a base of a base) is kept, not marked; a base named only by
    /// a delta frame in a pack that goes is not; a young pack's delta frames keep their
    /// bases; and the collection needs format 3 once a pack holds a delta frame.
    #[test]
    fn bases_of_kept_delta_frames_are_live() {
        let old = NOW_MS - GRACE_MS;
        // Head chunk 130 (pack 3) is a delta against 120 (pack 2), itself a delta against
        // 110 (pack 1). Nothing the refs reach is in packs 1 and 2. Pack 4 (dead) holds a
        // delta against 140 (pack 5): both go. Pack 6 (young, unreferenced) holds a delta
        // against 160 (pack 7): pack 7 stays.
        let reached: HashSet<(ObjectId, ObjectKind)> =
            [(id(130), ObjectKind::Chunk)].into_iter().collect();
        let model = model(
            vec![
                (1, pack(1, &[110], old, None)),
                (2, delta_pack(1, &[120], old, &[(0, &[110])])),
                (3, delta_pack(1, &[130], old, &[(0, &[120])])),
                (4, delta_pack(1, &[141], old, &[(0, &[140])])),
                (5, pack(1, &[140], old, None)),
                (6, delta_pack(1, &[161], NOW_MS - 10, &[(0, &[160])])),
                (7, pack(1, &[160], old, None)),
            ],
            &reached,
        );
        let staying = young_packs(&model, NOW_MS, GRACE_MS);
        assert_eq!(staying, HashSet::from([id(6)]));
        let decision = model.decide(&reached, true, &HashSet::new(), &staying);
        let packs = decide_packs(&model, &decision, NOW_MS, GRACE_MS);
        check_decided(&model, &packs).unwrap();
        let actions: Vec<(u8, PackAction)> =
            packs.iter().map(|(id, p)| (id.0[0], p.action)).collect();
        assert_eq!(
            actions,
            vec![
                (1, PackAction::Keep),
                (2, PackAction::Keep),
                (3, PackAction::Keep),
                (4, PackAction::Mark),
                (5, PackAction::Mark),
                (6, PackAction::Young),
                (7, PackAction::Keep),
            ]
        );
        assert!(decision.live.contains(&(id(110), ObjectKind::Chunk)));
        assert_eq!(decision.missing, 0);
        assert_eq!(model.format(), FORMAT_DELTAS);
        // Without the closure the bases' packs would be marked (what the rule prevents).
        let bare = model.decide_once(&reached, true, &HashSet::new());
        assert!(!bare.needed.contains(&id(1)) && !bare.needed.contains(&id(2)));
        // A base no pack holds is counted missing (a damaged remote).
        let model = super::tests::model(
            vec![(3, delta_pack(1, &[130], old, &[(0, &[120])]))],
            &reached,
        );
        let decision = model.decide(&reached, true, &HashSet::new(), &HashSet::new());
        assert_eq!(decision.missing, 1);
        // A pack holding a delta frame is not repacked, however little of it is live.
        let model = super::tests::model(
            vec![
                (1, pack(1, &[120], old, None)),
                (3, delta_pack(10, &[130, 131, 132], old, &[(0, &[120])])),
            ],
            &reached,
        );
        let decision = model.decide(&reached, true, &HashSet::new(), &HashSet::new());
        assert!(decision.repack.is_empty());
        assert!(decision.needed.contains(&id(1)) && decision.needed.contains(&id(3)));
        // No delta frame: format 2.
        let model = super::tests::model(vec![(1, pack(1, &[130], old, None))], &reached);
        assert_eq!(model.format(), FORMAT_GC);
    }

    /// The model of `packs`.
    fn model(packs: Vec<(u8, PackState)>, _live: &HashSet<(ObjectId, ObjectKind)>) -> Model {
        Model {
            packs: packs.into_iter().map(|(n, pack)| (id(n), pack)).collect(),
        }
    }

    /// Each decision of step 8, one pack each: kept, marked (old, unreferenced), young,
    /// rescued (marked, needed), deleted (mark past the grace and a second), waiting (mark
    /// within it), repacked (a tenth live: marked after its live frame is copied); and every
    /// pack got exactly one decision.
    #[test]
    fn every_pack_gets_the_decision_its_state_calls_for() {
        let live: HashSet<(ObjectId, ObjectKind)> = [101, 104, 107]
            .into_iter()
            .map(|n| (id(n), ObjectKind::Chunk))
            .collect();
        let old = NOW_MS - GRACE_MS;
        let model = model(
            vec![
                (1, pack(1, &[101], old, None)),
                (2, pack(1, &[102], old, None)),
                (3, pack(1, &[103], NOW_MS - GRACE_MS + 1, None)),
                (4, pack(1, &[104], old, Some(old))),
                (5, pack(1, &[105], old, Some(NOW_MS - GRACE_MS - 1000))),
                (6, pack(1, &[106], old, Some(NOW_MS - GRACE_MS - 999))),
                (7, pack(10, &[107, 117, 127], old, None)),
            ],
            &live,
        );
        let decision = model.decide(&live, true, &HashSet::new(), &HashSet::new());
        let packs = decide_packs(&model, &decision, NOW_MS, GRACE_MS);
        check_decided(&model, &packs).unwrap();
        let actions: Vec<(u8, PackAction, bool)> = packs
            .iter()
            .map(|(id, p)| (id.0[0], p.action, p.repack))
            .collect();
        assert_eq!(
            actions,
            vec![
                (1, PackAction::Keep, false),
                (2, PackAction::Mark, false),
                (3, PackAction::Young, false),
                (4, PackAction::Rescue, false),
                (5, PackAction::Delete, false),
                (6, PackAction::Wait, false),
                (7, PackAction::Mark, true),
            ]
        );
        assert_eq!(
            decision.repack[&id(7)],
            vec![0],
            "only the live frame is copied"
        );
        assert_eq!(decision.missing, 0);
        // Without repacking, the mostly dead pack is kept as it is.
        let decision = model.decide(&live, false, &HashSet::new(), &HashSet::new());
        let packs = decide_packs(&model, &decision, NOW_MS, GRACE_MS);
        assert_eq!(packs[&id(7)].action, PackAction::Keep);
        // A live object no pack holds is counted missing; an object two unmarked packs
        // hold keeps the smaller id only.
        let mut live = live;
        live.insert((id(200), ObjectKind::Chunk));
        let model = super::tests::model(
            vec![
                (8, pack(1, &[101], old, None)),
                (9, pack(1, &[101], old, None)),
            ],
            &live,
        );
        let decision = model.decide(&live, true, &HashSet::new(), &HashSet::new());
        let packs = decide_packs(&model, &decision, NOW_MS, GRACE_MS);
        assert_eq!(decision.missing, 3, "104, 107 and 200 are in no pack");
        assert_eq!(
            (packs[&id(8)].action, packs[&id(9)].action),
            (PackAction::Keep, PackAction::Mark)
        );
    }

    /// A decision that does not fit the pack's state, or a pack without one, is refused.
    #[test]
    fn a_pack_without_a_fitting_decision_is_refused() {
        let model = model(vec![(1, pack(1, &[101], 0, None))], &HashSet::new());
        let planned = |action, repack| {
            BTreeMap::from([(
                id(1),
                PlannedPack {
                    size: 100,
                    action,
                    repack,
                },
            )])
        };
        check_decided(&model, &planned(PackAction::Mark, true)).unwrap();
        for (action, repack) in [
            (PackAction::Delete, false),
            (PackAction::Rescue, false),
            (PackAction::Keep, true),
        ] {
            assert!(matches!(
                check_decided(&model, &planned(action, repack)),
                Err(Error::Internal { .. })
            ));
        }
        assert!(check_decided(&model, &BTreeMap::new()).is_err());
    }

    /// Against a file:// remote in a temporary directory: a plan changes nothing on the remote
    /// but its `clock` key; its dry-run report lists what the real run then marks; with the
    /// clock a grace ahead, the next plan deletes the marked pack and execute deletes it,
    /// keeping the referenced dataset's pack.
    #[test]
    fn plan_then_execute_marks_then_deletes_what_no_ref_reaches() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::init(&dir.path().join("store")).unwrap();
        for (dataset, content) in [("keep", "kept bytes"), ("drop", "dropped bytes")] {
            let data = dir.path().join(dataset);
            std::fs::create_dir_all(&data).unwrap();
            std::fs::write(data.join("f"), content).unwrap();
            crate::ops::commit::commit(
                &mut store,
                &data,
                &crate::ops::commit::CommitOptions::new(dataset),
                &NoProgress,
            )
            .unwrap();
        }
        let remote_dir = dir.path().join("remote");
        std::fs::create_dir_all(&remote_dir).unwrap();
        let url = format!("file://{}", remote_dir.display());
        super::super::add_remote(&mut store, "origin", &url, &Default::default()).unwrap();
        let push = crate::ops::sync::PushOptions {
            force: false,
            requests: 2,
        };
        crate::ops::sync::push(&mut store, "origin", &[], &push, &NoProgress).unwrap();
        remove_remote_refs(&mut store, "origin", "drop", None).unwrap();
        // Every file of the remote but the clock key, with its bytes.
        fn files(dir: &std::path::Path, into: &mut BTreeMap<std::path::PathBuf, Vec<u8>>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    files(&path, into);
                } else if path.file_name().is_some_and(|n| n != "clock") {
                    into.insert(path.clone(), std::fs::read(&path).unwrap());
                }
            }
        }
        let snapshot = || {
            let mut into = BTreeMap::new();
            files(&remote_dir, &mut into);
            into
        };
        let before = snapshot();
        // Packs this small are mostly index: none is worth repacking here.
        let mut options = RemoteGcOptions {
            grace: Duration::from_secs(3600),
            repack: false,
            ..RemoteGcOptions::default()
        };
        // Just pushed: both packs younger than the grace.
        let data = store.lock_data_shared().unwrap();
        let young = plan(&mut store, &data, "origin", &options, &NoProgress).unwrap();
        assert_eq!(young.with_action(PackAction::Young).len(), 1, "{young:?}");
        assert_eq!(young.with_action(PackAction::Keep).len(), 1, "{young:?}");
        // A grace later (by the clock offset): the dropped dataset's pack is marked.
        options.clock_offset = Duration::from_secs(3601);
        let planned = plan(&mut store, &data, "origin", &options, &NoProgress).unwrap();
        let to_mark = planned.with_action(PackAction::Mark);
        assert_eq!(to_mark.len(), 1, "{planned:?}");
        let report = planned.report();
        assert!(report.dry_run);
        assert_eq!(report.marked.packs, vec![to_mark[0].0]);
        assert_eq!(snapshot(), before, "planning changed the remote");
        let marked = execute(&mut store, &data, planned, &NoProgress).unwrap();
        assert_eq!(marked.marked.packs, vec![to_mark[0].0]);
        assert!(
            remote_dir
                .join("marks")
                .join(to_mark[0].0.to_hex())
                .exists()
        );
        // Now (no offset), the mark is within its grace: the pack waits.
        options.clock_offset = Duration::ZERO;
        let waiting = plan(&mut store, &data, "origin", &options, &NoProgress).unwrap();
        assert_eq!(waiting.with_action(PackAction::Wait), to_mark);
        // A grace (and a second) after the mark: deleted, and the kept pack stays.
        options.clock_offset = Duration::from_secs(3601);
        let due = plan(&mut store, &data, "origin", &options, &NoProgress).unwrap();
        assert_eq!(due.with_action(PackAction::Delete), to_mark);
        let kept = due.with_action(PackAction::Keep);
        let deleted = execute(&mut store, &data, due, &NoProgress).unwrap();
        assert_eq!(deleted.deleted.packs, vec![to_mark[0].0]);
        let pack_file = |id: &ObjectId| remote_dir.join(format!("packs/{}.pack", id.to_hex()));
        assert!(!pack_file(&to_mark[0].0).exists());
        assert!(pack_file(&kept[0].0).exists());
    }
}
