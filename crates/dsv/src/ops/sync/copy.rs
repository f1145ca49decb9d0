//! `dsv copy REV... --from SRC --to DST`: a version goes from one remote to another without
//! its data landing on local disk; DST's refs move last, as push moves them.
//!
//! # copy
//!
//! `copy()`:
//!
//! 1. **Refs.** One LIST of SRC's `refs/` and one of DST's (the ref cache of push: a ref whose
//!    ETag equals the one recorded here is not read again). Each revision resolves on SRC:
//!    `DATASET` is SRC's head, `DATASET@TAG` SRC's tag (which is copied too); an id prefix or
//!    `~N` resolves among the versions fetched from SRC (step 2 first).
//! 2. **Nothing to do?** When DST's head of each dataset already names the version and every
//!    tag of SRC to copy already names the same version on DST, the copy ends here: two
//!    LISTs (plus a GET of any ref this store has not seen), no payload byte.
//! 3. **Metadata.** The versions' trees and file maps are fetched from SRC into this store
//!    (as `dsv fetch SRC` does: they are small, and the walk reads them) unless this store
//!    already records every version (it pushed them, or fetched them before); when SRC's
//!    recorded indexes list a delta frame, DST's `format` key is raised to 3 (as push does,
//!    not in a dry run); then DST is seen as a writer sees it (`transfer::writer_view`, the writers' rule of `dsv gc
//!    --remote`: DST's `format` key is checked, `marks/` listed, and DST's pack indexes
//!    refreshed without the marked packs: one LIST, a GET of each new `.idx`). What
//!    this store recorded of SRC is checked against one LIST of SRC's packs in step 6: an
//!    object it does not locate there, or a pack SRC no longer lists, fetches from SRC again
//!    (refs, indexes, metadata) and plans once more.
//! 4. **Check every head first**, before any byte moves: DST's head must be the version, an
//!    ancestor of it (fast-forward), or a descendant (left alone, `ahead`); anything else is
//!    [`Error::RemoteDiverged`] unless `--force`. A DST head this store has never seen has
//!    DST's metadata fetched first, so it can be placed in the version's history.
//! 5. **Closure.** From each version back along its parents, stopping at the first version
//!    DST holds (on a collected DST, one with a `format` key, all of them: it keeps a
//!    version's data only while a ref reaches it), every version, provenance object, tree,
//!    file map, outboard and chunk that DST's recorded indexes lack or hold only in marked
//!    packs (`super::push::walk_missing_on`, the walk push makes; the DST packs holding the
//!    rest are remembered as relied on), each located in SRC's indexes. An object SRC does
//!    not hold is [`Error::MissingObject`]. **Closures** (a delta is never stored anywhere
//!    without its bases): each chunk needed that SRC holds in a delta frame brings the
//!    frame's bases (transitively, through SRC's recorded frames) that DST lacks; a chunk
//!    DST holds in a delta frame needs that frame's bases on DST too; and a SRC pack copied
//!    whole (step 6) carries all its delta frames, so their bases go too (repeated until no
//!    object is added). A base SRC lacks is [`Error::Corrupt`] naming SRC.
//! 6. **Plan.** Per SRC pack, the bytes of the frames needed. A pack whose needed frames make
//!    up at least half of it ([`WHOLE_PACK_SHARE`]) is copied whole under its own name,
//!    unless DST has a mark on that name; from any other, only the needed frames are taken
//!    (a pack so built that comes out under a marked name stops the copy:
//!    [`Error::RemoteCollected`]).
//!    Before anything moves, every file map of the closure is proven as SRC holds it
//!    (`prove::prove_forwarded`): one this store holds, proven, byte for byte the same needs
//!    nothing more; any other has its chunks (read here, else ranged GETs from SRC) joined
//!    and hashed against the file id. A map that does not reassemble its file stops the copy
//!    ([`Error::Corrupt`] naming SRC): nothing is sent, no ref moves.
//! 7. **Whole packs** ([`Remote::copy_packs_from`]): a server-side copy when SRC and DST are
//!    prefixes of one bucket reached the same way, else a streamed GET -> PUT, every byte
//!    hashed in flight and compared with the pack's name and `.idx` before the upload
//!    completes; the `.idx` goes up after its pack. `jobs` packs in flight.
//! 8. **Frames of packs partly needed**: ranged GETs of the needed frames (neighbours merged,
//!    as a fetch merges them), each frame checked as a fetch checks it (it decompresses to its
//!    length, every object hashes to its id), appended byte for byte to new packs built in
//!    memory ([`crate::pack_sink::PackSink::in_memory`]) and uploaded with their `.idx`.
//!    Batches of at most [`BATCH_BYTES`] of frames, so memory stays bounded. A delta frame
//!    is checked against its bases (decoded, every chunk hashed) before it is sent: the
//!    bases' raw bytes come from frames of this copy (kept across batches while a delta
//!    still to come names them), else from this store; a base neither holds (one DST has
//!    already) is read from SRC only to check the delta, and not sent. When anything sent
//!    holds a delta frame, DST's `format` key is first raised to 3 (as push does).
//! 9. **Record and check.** DST's indexes are refreshed again (without marked packs); every
//!    pack the plan wrote there must now be listed (so every object of the closure is), else
//!    the copy stops before any ref moves. Then `marks/` is listed again: a pack relied on or
//!    copied that a gc marked meanwhile stops the copy ([`Error::RemoteCollected`], exit 4; a
//!    re-run sends it again).
//! 10. **Move refs** on DST as push does (a view older than half DST's grace is checked again
//!     first; compare-and-swap on the ETag listed in step 1;
//!     created, updated, forced or up-to-date), the head first, then each tag of SRC that names
//!     the version or one of its ancestors (a tag naming another version on DST is
//!     `rejected` unless `--force`).
//!
//! Steps 1 to 6 are [`plan`] (a [`CopyPlan`]: each SRC pack whole or by frames, each DST
//! ref's move, checked to cover every pack and every head; nothing written to DST), steps 7
//! to 10 [`execute`]. `--dry-run` is the plan's report ([`CopyPlan::report`]); it still
//! fetches SRC's metadata into this store and records DST's indexes, as steps 3 and 5 do,
//! and, when DST's head is a version this store does not know, DST's refs and metadata.
//!
//! A copy killed at any point leaves DST's refs as they were or moved to data DST holds;
//! a re-run moves only what DST still lacks (whole packs keep their names, and packs built
//! from frames are found by the next run's refresh of DST's indexes).

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::push::{PushedRef, RemoteRefs, record_ref, walk_missing_on};
use super::{MAX_SPAN, Transfer, is_ancestor, open, remote_ref};
use crate::catalog::RemoteRecord;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::pack::format::{Compression, FrameRecord};
use crate::pack_sink::{PACK_TARGET, PackSink};
use crate::progress::{NoProgress, Progress, Unit};
use crate::remote::{RefName, RefState, Remote};
use crate::revision::Revision;
use crate::store::{SharedDataLock, Store};

/// A pack whose needed frames make up at least this share of its bytes is copied whole
/// (one request, or a server-side copy); below it, only the needed frames are taken.
pub const WHOLE_PACK_SHARE: f64 = 0.5;

/// Frames of packs partly needed are taken in batches of at most this many bytes (plus one
/// frame): each batch's packs are built in memory and uploaded before the next begins.
pub const BATCH_BYTES: u64 = 2 * PACK_TARGET;

/// How to copy ([`copy`]).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct CopyOptions {
    /// Overwrite DST's heads and tags that are not ancestors of what is copied (`--force`).
    pub force: bool,
    /// Requests in flight on each remote (default [`crate::remote::DEFAULT_JOBS`]).
    pub requests: usize,
    /// Plan and report; write nothing to DST and move no ref (`--dry-run`).
    pub dry_run: bool,
}

impl Default for CopyOptions {
    fn default() -> CopyOptions {
        CopyOptions {
            force: false,
            requests: crate::remote::DEFAULT_JOBS,
            dry_run: false,
        }
    }
}

/// What a copy sent (or, planned, sends), and how.
#[derive(Debug, Default, Clone, Serialize)]
pub struct CopyPlanned {
    /// Versions DST lacked.
    pub versions: u64,
    /// Objects DST lacked (versions, trees, file maps, outboards, chunks).
    pub objects: u64,
    /// SRC packs copied whole under their own names.
    pub whole_packs: u64,
    /// Of those, packs the provider copied itself (no byte passed through this machine).
    pub server_side: u64,
    /// SRC packs from which only the needed frames were taken.
    pub partial_packs: u64,
    /// Frames taken from those packs.
    pub frames: u64,
    /// Bytes read from SRC for DST: the whole packs' sizes and the needed frames' stored
    /// bytes.
    pub bytes: u64,
}

/// The outcome of `dsv copy`.
#[derive(Debug, Serialize)]
pub struct CopyReport {
    /// The remote copied from.
    pub from: String,
    /// The remote copied to.
    pub to: String,
    /// True when only planned (`--dry-run`): nothing was written to DST and no ref moved;
    /// `refs` then says what a copy would do to each.
    pub dry_run: bool,
    /// DST's heads and tags after the copy (`status` as in push, plus `ahead`: DST's head
    /// already descends from the version, and stays).
    pub refs: Vec<PushedRef>,
    /// What DST lacked and how it went.
    pub planned: CopyPlanned,
    /// Every SRC pack holding objects DST lacked: copied whole, or only its needed frames.
    pub packs: Vec<PlannedSourcePack>,
    /// What DST received: packs written there (whole or built from frames), their bytes,
    /// their objects, and requests sent to DST.
    pub transfer: Transfer,
    /// Requests sent to SRC.
    pub source_requests: u64,
    /// Bytes read from SRC to prove the file maps the copy forwards (each map's frame, and
    /// the chunks of a map not proven here that this store lacks).
    pub proof_bytes: u64,
}

/// One revision resolved on SRC.
#[derive(Debug, Clone)]
struct Target {
    dataset: String,
    version: ObjectId,
}

/// How a copy takes one SRC pack that holds objects DST lacks ([`PlannedSourcePack::action`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SourcePackAction {
    /// Copied whole under its own name (its needed frames make up at least
    /// [`WHOLE_PACK_SHARE`] of it, and DST has no mark on that name).
    Whole,
    /// Only its needed frames are read, into new packs built in memory.
    Frames,
}

/// One SRC pack holding objects DST lacks, and how the copy takes it.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedSourcePack {
    /// The pack id (on SRC).
    pub pack: ObjectId,
    /// Its size on SRC, bytes.
    pub size: u64,
    /// Whole, or only the frames needed.
    pub action: SourcePackAction,
    /// Frames of it that hold objects DST lacks.
    pub frames: u64,
    /// Bytes that travel: the whole pack, or its needed frames' stored bytes.
    pub bytes: u64,
}

/// One DST ref as the copy moves it: the state listed in step 1 and the decision.
#[derive(Debug, Clone)]
struct RefMove {
    name: RefName,
    /// The version the ref names after the move (the one it keeps when `ahead` or
    /// `rejected`).
    version: ObjectId,
    /// The version it named when listed (reported for heads only).
    previous: Option<ObjectId>,
    /// `created`, `updated`, `forced`, `up-to-date`, `ahead` or `rejected`.
    status: &'static str,
    /// Its state when listed (the compare-and-swap's expectation).
    state: Option<RefState>,
}

impl RefMove {
    fn reported(&self) -> PushedRef {
        PushedRef {
            dataset: self.name.dataset.clone(),
            tag: self.name.tag.clone(),
            version: self.version,
            previous: if self.name.tag.is_none() {
                self.previous
            } else {
                None
            },
            status: self.status,
        }
    }
}

/// What `dsv copy` will do, decided by [`plan`] before any byte moves (steps 1 to 6): every
/// SRC pack holding what DST lacks, whole or by frames ([`CopyPlan::packs`]), and every DST
/// ref's move ([`CopyPlan::refs`]); carried out by [`execute`] (steps 7 to 10). A dry run
/// renders it ([`CopyPlan::report`]).
pub struct CopyPlan {
    /// The remote copied from.
    pub from: String,
    /// The remote copied to.
    pub to: String,
    /// DST's heads and tags as the copy leaves them (statuses as in [`CopyReport::refs`]).
    pub refs: Vec<PushedRef>,
    /// What DST lacks, and how it goes (`server_side` is known only once sent: 0 here).
    pub planned: CopyPlanned,
    /// Every SRC pack holding objects DST lacks, with its decision.
    pub packs: Vec<PlannedSourcePack>,
    /// Bytes read from SRC to prove the file maps the copy forwards.
    pub proof_bytes: u64,
    src_record: RemoteRecord,
    src: Remote,
    dst_record: RemoteRecord,
    dst: Remote,
    options: CopyOptions,
    /// `None` when everything is in place (nothing to send, no ref to move).
    sending: Option<Sending>,
    moves: Vec<RefMove>,
}

impl std::fmt::Debug for CopyPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopyPlan")
            .field("from", &self.from)
            .field("to", &self.to)
            .field("refs", &self.refs)
            .field("planned", &self.planned)
            .field("packs", &self.packs)
            .finish_non_exhaustive()
    }
}

/// What [`execute`] sends: DST as a writer saw it, the packs relied on, the whole packs and
/// the frames of the others.
struct Sending {
    view: crate::transfer::WriterView,
    relied: HashSet<ObjectId>,
    whole: Vec<(ObjectId, u64)>,
    partial: PartialFrames,
    /// The decision for each SRC pack, as reported.
    packs: Vec<PlannedSourcePack>,
}

impl CopyPlan {
    /// What the copy would do, as `--dry-run` reports it: nothing written to DST, no ref
    /// moved.
    pub fn report(&self) -> CopyReport {
        let transfer = Transfer {
            requests: self.dst.requests(),
            ..Transfer::default()
        };
        CopyReport {
            from: self.from.clone(),
            to: self.to.clone(),
            dry_run: true,
            refs: self.refs.clone(),
            planned: self.planned.clone(),
            packs: self.packs.clone(),
            transfer,
            source_requests: self.src.requests(),
            proof_bytes: self.proof_bytes,
        }
    }
}

/// Copies `revisions` (each `DATASET`, `DATASET@TAG`, `DATASET@ID-PREFIX`, with `~N`) from
/// remote `from` to remote `to`: DST receives the closure it lacks (see the module's
/// rustdoc), then its refs move by compare-and-swap. [`plan`], then [`execute`], or with
/// `options.dry_run` the plan's report (nothing written to DST, no ref moved; this store
/// still fetches SRC's metadata and records DST's indexes, as a real copy does).
///
/// # Errors
/// [`Error::RemoteNotFound`]; [`Error::InvalidRemote`] when `from` and `to` are one remote;
/// [`Error::DatasetNotFound`] / [`Error::RevisionNotFound`] when SRC lacks a revision;
/// [`Error::RemoteDiverged`] (DST's head is not an ancestor and no `--force`, or another
/// writer moved it meanwhile); [`Error::MissingObject`] (SRC lacks an object the version
/// needs); [`Error::Corrupt`] (SRC's bytes are not what their names say: nothing of them
/// is kept on DST); [`Error::Remote`]; [`Error::Interrupted`].
pub fn copy(
    store: &mut Store,
    revisions: &[String],
    from: &str,
    to: &str,
    options: &CopyOptions,
    progress: &dyn Progress,
) -> Result<CopyReport> {
    let data = store.lock_data_shared()?;
    let plan = plan(store, &data, revisions, (from, to), options, progress)?;
    if options.dry_run {
        Ok(plan.report())
    } else {
        execute(store, &data, plan, progress)
    }
}

/// Steps 1 to 6: resolves the revisions on SRC, fetches their metadata into this store when
/// it lacks it, reads DST as a writer sees it, checks every DST head, finds the closure DST
/// lacks, proves its file maps, and decides per SRC pack (whole or frames) and per DST ref.
/// Writes nothing to either remote. `remotes`: (SRC, DST).
///
/// # Errors
/// As [`copy`].
pub fn plan(
    store: &mut Store,
    data: &SharedDataLock,
    revisions: &[String],
    remotes: (&str, &str),
    options: &CopyOptions,
    progress: &dyn Progress,
) -> Result<CopyPlan> {
    let (src_record, src) = open(store, remotes.0)?;
    let (dst_record, dst) = open(store, remotes.1)?;
    if src_record.id == dst_record.id {
        return Err(Error::InvalidRemote {
            what: "name",
            value: remotes.1.to_string(),
            reason: "--from and --to name the same remote".into(),
        });
    }
    let ends = Ends {
        src_record,
        src,
        dst_record,
        dst,
        force: options.force,
        jobs: options.requests,
        data,
        progress,
    };
    let revisions: Vec<Revision> = revisions
        .iter()
        .map(|text| Revision::parse(text))
        .collect::<Result<_>>()?;
    ends.phase("listing refs");
    let src_refs = RemoteRefs::list(store, &ends.src_record, &ends.src)?;
    let dst_refs = RemoteRefs::list(store, &ends.dst_record, &ends.dst)?;
    let mut fetched = false;
    let targets = resolve_targets(store, &ends, &src_refs, &revisions, &mut fetched)?;

    // Step 2: every ref already in place?
    let already = targets.iter().try_fold(true, |all, target| {
        Ok::<_, Error>(all && in_place(&src_refs, &dst_refs, target)?)
    })?;
    if already {
        let mut moves = Vec::new();
        for target in &targets {
            moves.extend(unmoved_refs(&src_refs, &dst_refs, target)?);
        }
        return Ok(ends.into_plan(options, moves, None, CopyPlanned::default(), 0));
    }
    let (sending, planned, proof_bytes) = plan_sending(
        store,
        &ends,
        &dst_refs,
        &targets,
        (fetched, options.dry_run),
    )?;
    let mut moves = Vec::new();
    for target in &targets {
        moves.extend(decide_refs(
            store, &src_refs, &dst_refs, target, ends.force,
        )?);
    }
    let plan = ends.into_plan(options, moves, Some(sending), planned, proof_bytes);
    plan.check_decided(&targets)?;
    Ok(plan)
}

/// Steps 3 to 6: metadata here (fetched unless this store already records every version: a
/// stale record shows as a missing object in step 5 or 6, which fetches then), DST seen as a
/// writer sees it (docs/format.md, "Remote garbage collection": DST's format is
/// checked, and objects only in packs a `gc --remote` marked count as absent), every head
/// checked, the closure DST lacks located in SRC, its file maps proven, and SRC's packs
/// split into whole and partly needed ones.
fn plan_sending(
    store: &mut Store,
    ends: &Ends<'_>,
    dst_refs: &RemoteRefs<'_>,
    targets: &[Target],
    (mut fetched, dry_run): (bool, bool),
) -> Result<(Sending, CopyPlanned, u64)> {
    if !fetched
        && targets.iter().try_fold(false, |any, t| {
            Ok::<_, Error>(any || store.catalog().version(&t.version)?.is_none())
        })?
    {
        ends.fetch_source(store)?;
        fetched = true;
    }
    // SRC holds delta frames (pack format 2): DST's `format` key is raised to 3 before DST
    // is seen as a writer sees it, so the walk below already treats DST as collected (a
    // key appearing during the copy would stop it: `WriterView::recheck`).
    if !dry_run
        && store
            .catalog()
            .remote_has_delta_frames(ends.src_record.id)?
    {
        ends.dst.ensure_format(
            crate::remote::collect::FORMAT_DELTAS,
            crate::transfer::DEFAULT_REMOTE_GRACE_SECONDS,
            "copy",
        )?;
    }
    ends.phase("reading the destination's pack indexes");
    let view = crate::transfer::writer_view(store, &ends.dst_record, &ends.dst, ends.jobs)?;
    let mut relied = HashSet::new();
    check_heads(store, ends, dst_refs, targets)?;

    ends.phase("finding what the destination lacks");
    let mut listed: HashMap<ObjectId, u64> = ends.src.list_packs()?.into_iter().collect();
    let mut plan = |store: &mut Store, listed: &HashMap<ObjectId, u64>| {
        let sides = (&ends.src_record, &ends.dst_record);
        plan_closure(store, sides, &view, &mut relied, targets, listed)
    };
    let closure = match plan(store, &listed) {
        // What this store recorded of SRC is older than SRC: read it again, once.
        Err(Error::MissingObject { .. }) if !fetched => {
            ends.fetch_source(store)?;
            listed = ends.src.list_packs()?.into_iter().collect();
            plan(store, &listed)?
        }
        other => other?,
    };
    tracing::debug!(objects = closure.needed.len(), "copy: closure found");
    // Step 6b: the file maps it forwards are proven first (a map keyed by its file's id
    // could list another file's chunks): a wrong one stops the copy before any byte moves.
    ends.phase("proving the file maps");
    let proof_bytes =
        super::prove::prove_forwarded(store, &ends.src_record, &ends.src, &closure.needed)?;
    let (whole, partial, packs) = split_packs(closure.per_pack, &listed, &view);
    let mut planned = CopyPlanned {
        versions: closure.versions,
        objects: closure.needed.len() as u64,
        whole_packs: whole.len() as u64,
        bytes: packs.iter().map(|p| p.bytes).sum(),
        ..CopyPlanned::default()
    };
    for pack in packs
        .iter()
        .filter(|p| p.action == SourcePackAction::Frames)
    {
        planned.partial_packs += 1;
        planned.frames += pack.frames;
    }
    let sending = Sending {
        view,
        relied,
        whole,
        partial,
        packs,
    };
    Ok((sending, planned, proof_bytes))
}

/// Steps 7 to 10 of `plan`: the whole packs and frames sent, DST's indexes refreshed (every
/// pack written listed, no pack relied on marked), then DST's refs moved as planned.
///
/// # Errors
/// As [`copy`]. `_data`: the data lock [`plan`] ran under, still held.
pub fn execute(
    store: &mut Store,
    data: &SharedDataLock,
    plan: CopyPlan,
    progress: &dyn Progress,
) -> Result<CopyReport> {
    let CopyPlan {
        mut planned,
        refs,
        proof_bytes,
        src_record,
        src,
        dst_record,
        dst,
        options,
        sending,
        moves,
        ..
    } = plan;
    let ends = Ends {
        src_record,
        src,
        dst_record,
        dst,
        force: options.force,
        jobs: options.requests,
        data,
        progress,
    };
    let Some(mut sending) = sending else {
        return Ok(ends.report(refs, planned, Transfer::default(), 0, Vec::new()));
    };
    let (mut transfer, written) = send(store, &ends, &mut sending, &mut planned)?;
    ends.phase("moving the destination's refs");
    let view = &mut sending.view;
    view.reindex(store, &ends.dst_record, &ends.dst, ends.jobs)?;
    let listed_on_dst = store.catalog().remote_packs(ends.dst_record.id)?;
    if let Some(pack) = written.iter().find(|pack| !listed_on_dst.contains(pack)) {
        return Err(Error::Internal {
            detail: format!(
                "remote {} does not list pack {} after the copy; no ref moved",
                ends.dst_record.name,
                pack.short()
            ),
        });
    }
    if !view.recheck(&ends.dst, &sending.relied)?.is_empty() {
        return Err(ends.collected());
    }
    transfer.objects = planned.objects;

    // Step 10: refs, head first, then tags.
    let mut refs = Vec::new();
    for planned_move in &moves {
        if planned_move.name.tag.is_none()
            && view.stale()
            && !view.recheck(&ends.dst, &sending.relied)?.is_empty()
        {
            return Err(ends.collected());
        }
        refs.push(apply_move(store, &ends, planned_move)?);
    }
    Ok(ends.report(refs, planned, transfer, proof_bytes, sending.packs))
}

/// The two remotes of a copy, opened, with the copy's settings and the data lock it holds.
struct Ends<'a> {
    src_record: RemoteRecord,
    src: Remote,
    dst_record: RemoteRecord,
    dst: Remote,
    force: bool,
    /// Requests in flight on each remote.
    jobs: usize,
    data: &'a SharedDataLock,
    progress: &'a dyn Progress,
}

impl Ends<'_> {
    fn phase(&self, phase: &str) {
        self.progress.phase(phase);
        tracing::debug!(phase, "copy");
    }

    /// Step 3's fetch: SRC's refs, indexes and the metadata this store lacks.
    fn fetch_source(&self, store: &mut Store) -> Result<()> {
        self.phase("fetching metadata");
        super::fetch::fetch_with(
            store,
            self.data,
            &self.src_record,
            &self.src,
            self.jobs,
            self.progress,
        )
        .map(|_| ())
    }

    /// A pack relied on was marked by a `gc --remote` meanwhile.
    fn collected(&self) -> Error {
        Error::RemoteCollected {
            remote: self.dst_record.name.clone(),
            operation: "copy",
        }
    }

    /// The report of a copy carried out (or found in place).
    fn report(
        &self,
        refs: Vec<PushedRef>,
        planned: CopyPlanned,
        mut transfer: Transfer,
        proof_bytes: u64,
        packs: Vec<PlannedSourcePack>,
    ) -> CopyReport {
        transfer.requests = self.dst.requests();
        CopyReport {
            from: self.src_record.name.clone(),
            to: self.dst_record.name.clone(),
            dry_run: false,
            refs,
            planned,
            packs,
            transfer,
            source_requests: self.src.requests(),
            proof_bytes,
        }
    }

    /// The plan of a copy, these ends moved into it.
    fn into_plan(
        self,
        options: &CopyOptions,
        moves: Vec<RefMove>,
        sending: Option<Sending>,
        planned: CopyPlanned,
        proof_bytes: u64,
    ) -> CopyPlan {
        CopyPlan {
            from: self.src_record.name.clone(),
            to: self.dst_record.name.clone(),
            refs: moves.iter().map(RefMove::reported).collect(),
            planned,
            packs: sending.as_ref().map_or_else(Vec::new, |s| s.packs.clone()),
            proof_bytes,
            src_record: self.src_record,
            src: self.src,
            dst_record: self.dst_record,
            dst: self.dst,
            options: *options,
            sending,
            moves,
        }
    }
}

/// Step 1: each revision as SRC names it. SRC's refs name `DATASET` and `DATASET@TAG`
/// directly; an id prefix or `~N` needs SRC's metadata here (fetched once, `fetched` set).
fn resolve_targets(
    store: &mut Store,
    ends: &Ends<'_>,
    src_refs: &RemoteRefs<'_>,
    revisions: &[Revision],
    fetched: &mut bool,
) -> Result<Vec<Target>> {
    let from = &ends.src_record.name;
    let mut targets = Vec::new();
    for revision in revisions {
        let direct = if revision.ancestors > 0 {
            None
        } else if revision.base == "latest" {
            let head = RefName {
                dataset: revision.dataset.clone(),
                tag: None,
            };
            Some(
                src_refs
                    .current(&head)?
                    .ok_or_else(|| Error::DatasetNotFound {
                        name: format!("{} (on remote {from})", revision.dataset),
                        closest: None,
                    })?,
            )
        } else {
            src_refs.current(&RefName {
                dataset: revision.dataset.clone(),
                tag: Some(revision.base.clone()),
            })?
        };
        let version = match direct {
            Some((version, _)) => version,
            None => {
                if !*fetched {
                    ends.fetch_source(store)?;
                    *fetched = true;
                }
                resolve_on(store, src_refs, revision, from)?
            }
        };
        targets.push(Target {
            dataset: revision.dataset.clone(),
            version,
        });
    }
    Ok(targets)
}

/// Step 4: every DST head is the version, an ancestor or a descendant of it, or the copy is
/// refused before any byte moves (unless `--force`). A DST head this store has never seen
/// (written there by another store) fetches DST's metadata first, to be placed in history.
fn check_heads(
    store: &mut Store,
    ends: &Ends<'_>,
    dst_refs: &RemoteRefs<'_>,
    targets: &[Target],
) -> Result<()> {
    let head_of = |target: &Target| RefName {
        dataset: target.dataset.clone(),
        tag: None,
    };
    for target in targets {
        if let Some((dst_head, _)) = dst_refs.current(&head_of(target))?
            && store.catalog().version(&dst_head)?.is_none()
        {
            super::fetch::fetch_with(
                store,
                ends.data,
                &ends.dst_record,
                &ends.dst,
                ends.jobs,
                ends.progress,
            )?;
            break;
        }
    }
    for target in targets {
        if let Some((dst_head, _)) = dst_refs.current(&head_of(target))?
            && dst_head != target.version
            && !is_ancestor(store, &dst_head, &target.version)?
            && !is_ancestor(store, &target.version, &dst_head)?
            && !ends.force
        {
            return Err(Error::RemoteDiverged {
                remote: ends.dst_record.name.clone(),
                dataset: target.dataset.clone(),
            });
        }
    }
    Ok(())
}

/// The frames of packs partly needed, by (pack, offset).
type PartialFrames = BTreeMap<(ObjectId, u64), (FrameRecord, i64)>;

/// Step 6: packs whose needed frames make up at least [`WHOLE_PACK_SHARE`] of them go whole
/// (id and size), unless DST has marked that id (a copy under it would change nothing, and
/// the marked pack may be deleted); from the others, only the needed frames. Returns the
/// whole packs, the frames of the others, and the decision for each pack.
fn split_packs(
    per_pack: FramesPerPack,
    listed: &HashMap<ObjectId, u64>,
    view: &crate::transfer::WriterView,
) -> (Vec<(ObjectId, u64)>, PartialFrames, Vec<PlannedSourcePack>) {
    let mut whole = Vec::new();
    let mut partial = PartialFrames::new();
    let mut packs = Vec::new();
    for (pack, frames) in per_pack {
        let size = listed[&pack];
        let needed_bytes: u64 = frames
            .values()
            .map(|(f, _)| u64::from(f.stored_length))
            .sum();
        let action =
            if needed_bytes as f64 >= WHOLE_PACK_SHARE * size as f64 && !view.is_marked(&pack) {
                SourcePackAction::Whole
            } else {
                SourcePackAction::Frames
            };
        packs.push(PlannedSourcePack {
            pack,
            size,
            action,
            frames: frames.len() as u64,
            bytes: match action {
                SourcePackAction::Whole => size,
                SourcePackAction::Frames => needed_bytes,
            },
        });
        match action {
            SourcePackAction::Whole => whole.push((pack, size)),
            SourcePackAction::Frames => {
                for (offset, frame) in frames {
                    partial.insert((pack, offset), frame);
                }
            }
        }
    }
    (whole, partial, packs)
}

/// Steps 7 and 8: whole packs copied, the needed frames of the others repacked in memory and
/// uploaded, batch by batch. Returns what DST received and the ids of every pack written
/// there (all of them relied on from now).
///
/// # Errors
/// As [`copy`]; [`Error::RemoteCollected`] when a pack built from frames comes out under an
/// id DST has marked.
fn send(
    store: &Store,
    ends: &Ends<'_>,
    sending: &mut Sending,
    planned: &mut CopyPlanned,
) -> Result<(Transfer, Vec<ObjectId>)> {
    let (src, dst, jobs, progress) = (&ends.src, &ends.dst, ends.jobs, ends.progress);
    let whole = std::mem::take(&mut sending.whole);
    let partial = std::mem::take(&mut sending.partial);
    let (view, relied) = (&sending.view, &mut sending.relied);
    let whole_bytes: u64 = whole.iter().map(|(_, size)| size).sum();
    let partial_bytes: u64 = partial
        .values()
        .map(|(f, _)| u64::from(f.stored_length))
        .sum();
    tracing::debug!(
        whole = whole.len(),
        partial = partial.len(),
        "copy: planned"
    );
    let mut transfer = Transfer::default();
    let catalog = store.catalog();
    // Delta frames (pack format 2) go only to a remote that says it may hold them (remote
    // format 3, set first, as push sets it).
    let mut deltas = partial
        .values()
        .any(|(frame, _)| frame.compression == Compression::Delta);
    for (pack, _) in &whole {
        deltas = deltas
            || !catalog
                .remote_pack_delta_bases(ends.src_record.id, pack)?
                .is_empty();
    }
    if deltas {
        dst.ensure_format(
            crate::remote::collect::FORMAT_DELTAS,
            crate::transfer::DEFAULT_REMOTE_GRACE_SECONDS,
            "copy",
        )?;
    }
    progress.start("copy", whole_bytes + partial_bytes, Unit::Bytes);
    let mut written: Vec<ObjectId> = whole.iter().map(|(id, _)| *id).collect();
    relied.extend(written.iter().copied());
    if !whole.is_empty() {
        let counts = dst.copy_packs_from(src, whole, jobs, &|bytes| progress.advance(bytes))?;
        planned.server_side = counts.server_side;
        transfer.packs += counts.server_side + counts.streamed;
        transfer.bytes += counts.bytes;
    }
    if partial.is_empty() {
        return Ok((transfer, written));
    }
    // Frames of a pack DST has marked, rebuilt in their order, would make that pack again
    // under its marked id: such batches start with a salt frame.
    let from_marked =
        |batch: &[crate::transfer::Span]| batch.iter().any(|span| view.is_marked(&span.pack()));
    // Every delta frame is checked against its bases before it is sent: those of this copy
    // (kept across batches), else this store's; a base DST holds already that neither has
    // is read from SRC only to check the delta (`check_only`), not sent.
    let (check_only, expected) = delta_checks(catalog, &ends.src_record, &partial)?;
    let mut bases =
        crate::transfer::DeltaBases::carried(Some(&store.packs_dir()), &store.temp_dir());
    bases.expect(expected);
    bases.check_only(check_only.keys().copied().collect());
    let mut frames = partial;
    frames.extend(check_only);
    for batch in batches(crate::transfer::spans(frames, MAX_SPAN)) {
        let sink = PackSink::in_memory();
        if from_marked(&batch) {
            sink.add(crate::transfer::salt_frame(&ends.dst_record.name))?;
        }
        let got = crate::transfer::fetch_spans(
            catalog,
            src,
            &batch,
            jobs,
            (&sink, None),
            &mut bases,
            &NoProgress,
        )?;
        let packs: Vec<(ObjectId, bytes::Bytes, usize)> = sink
            .finish_in_memory()?
            .into_iter()
            .map(|(pack, bytes)| {
                let index_offset = index_offset(&bytes);
                (pack.id, bytes::Bytes::from(bytes), index_offset)
            })
            .collect();
        if let Some((marked, ..)) = packs.iter().find(|(id, ..)| view.is_marked(id)) {
            // The same frames in the same order: the marked pack's own id.
            return Err(Error::RemoteCollected {
                remote: format!("{} (pack {})", ends.dst_record.name, marked.short()),
                operation: "copy",
            });
        }
        relied.extend(packs.iter().map(|(id, ..)| *id));
        written.extend(packs.iter().map(|(id, ..)| *id));
        transfer.packs += packs.len() as u64;
        transfer.bytes += packs.iter().map(|(_, b, _)| b.len() as u64).sum::<u64>();
        dst.put_packs_in_memory(packs, jobs, &|_| {})?;
        progress.advance(got.bytes);
    }
    // A delta whose bases never came: nothing names what was sent, no ref moves.
    bases.finish()?;
    Ok((transfer, written))
}

/// For the delta frames of `partial` (SRC's frames a copy sends), the frames of SRC that
/// hold their bases (transitively) which neither `partial` nor this store holds, by (pack,
/// offset): read only to check the deltas. And every base those deltas name.
///
/// # Errors
/// [`Error::Corrupt`] naming SRC when it lacks a base; [`Error::Catalog`].
fn delta_checks(
    catalog: &crate::catalog::Catalog,
    src: &RemoteRecord,
    partial: &PartialFrames,
) -> Result<(PartialFrames, HashSet<ObjectId>)> {
    let mut check_only = PartialFrames::new();
    let mut expected = HashSet::new();
    let mut pending: Vec<i64> = partial
        .values()
        .filter(|(frame, _)| frame.compression == Compression::Delta)
        .map(|(_, row)| *row)
        .collect();
    if pending.is_empty() {
        return Ok((check_only, expected));
    }
    let mut sent = HashSet::new();
    for (_, row) in partial.values() {
        for (id, kind, ..) in catalog.remote_frame_objects(*row)? {
            if kind == ObjectKind::Chunk {
                sent.insert(id);
            }
        }
    }
    let mut seen = HashSet::new();
    while let Some(row) = pending.pop() {
        for base in catalog.remote_frame_bases(row)? {
            expected.insert(base);
            if !seen.insert(base)
                || sent.contains(&base)
                || catalog.has_object(&base, ObjectKind::Chunk)?
            {
                continue;
            }
            let location = catalog
                .remote_locate(src.id, &base, ObjectKind::Chunk)?
                .ok_or_else(|| {
                    Error::corrupt(
                        format!("remote {}", src.name),
                        format!(
                            "a delta frame names base chunk {}, which the remote does not hold",
                            base.short()
                        ),
                    )
                })?;
            let key = (location.pack, location.frame.offset);
            if partial.contains_key(&key) || check_only.contains_key(&key) {
                continue;
            }
            check_only.insert(key, (location.frame, location.frame_row));
            if location.frame.compression == Compression::Delta {
                pending.push(location.frame_row);
            }
        }
    }
    Ok((check_only, expected))
}

/// Resolves `revision` among the versions this store fetched from SRC: the base is SRC's
/// head or tag, or an id prefix; then `~N` parents.
fn resolve_on(
    store: &Store,
    src_refs: &RemoteRefs<'_>,
    revision: &Revision,
    from: &str,
) -> Result<ObjectId> {
    let text = revision.to_string();
    let not_found = || Error::RevisionNotFound {
        closest: None,
        revision: format!("{text} (on remote {from})"),
    };
    let named = |tag: Option<String>| {
        src_refs.current(&RefName {
            dataset: revision.dataset.clone(),
            tag,
        })
    };
    let mut id = if revision.base == "latest" {
        named(None)?.ok_or_else(not_found)?.0
    } else if let Some((id, _)) = named(Some(revision.base.clone()))? {
        id
    } else {
        let prefix = Revision {
            dataset: revision.dataset.clone(),
            base: revision.base.clone(),
            ancestors: 0,
        };
        // Tags and heads of this store do not count: only an id prefix is looked up here.
        if store
            .catalog()
            .tag(&prefix.dataset, &prefix.base)?
            .is_some()
        {
            return Err(not_found());
        }
        prefix.resolve(store.catalog())?
    };
    for _ in 0..revision.ancestors {
        let version = store.catalog().version(&id)?.ok_or_else(not_found)?;
        id = version.version.parent.ok_or_else(not_found)?;
    }
    Ok(id)
}

/// The tags of SRC in `target`'s dataset, each with the version it names.
fn source_tags(src_refs: &RemoteRefs<'_>, dataset: &str) -> Vec<RefName> {
    src_refs
        .listed()
        .iter()
        .filter(|(name, _)| name.dataset == dataset && name.tag.is_some())
        .map(|(name, _)| name.clone())
        .collect()
}

/// True when DST's head of `target`'s dataset names its version and every tag of SRC in the
/// dataset is on DST too (whether a tag DST lacks belongs to the version's history is known
/// only from the metadata, so any such tag sends the copy down the full path).
fn in_place(src_refs: &RemoteRefs<'_>, dst_refs: &RemoteRefs<'_>, target: &Target) -> Result<bool> {
    let head = RefName {
        dataset: target.dataset.clone(),
        tag: None,
    };
    if dst_refs.current(&head)?.map(|(id, _)| id) != Some(target.version) {
        return Ok(false);
    }
    let listed_on_dst = |name: &RefName| dst_refs.listed().iter().any(|(n, _)| n == name);
    Ok(source_tags(src_refs, &target.dataset)
        .iter()
        .all(listed_on_dst))
}

/// The refs of a target already in place, reported `up-to-date` (not recorded again).
fn unmoved_refs(
    src_refs: &RemoteRefs<'_>,
    dst_refs: &RemoteRefs<'_>,
    target: &Target,
) -> Result<Vec<RefMove>> {
    let mut refs = vec![RefMove {
        name: RefName {
            dataset: target.dataset.clone(),
            tag: None,
        },
        version: target.version,
        previous: Some(target.version),
        status: "up-to-date",
        state: None,
    }];
    for tag in source_tags(src_refs, &target.dataset) {
        if let (Some((named, _)), Some((there, state))) =
            (src_refs.current(&tag)?, dst_refs.current(&tag)?)
            && there == named
        {
            refs.push(RefMove {
                name: tag,
                version: named,
                previous: Some(named),
                status: "up-to-date",
                state: Some(state),
            });
        }
    }
    Ok(refs)
}

/// The frames each SRC pack holds of what the targets need and DST lacks.
type FramesPerPack = BTreeMap<ObjectId, BTreeMap<u64, (FrameRecord, i64)>>;

/// What [`plan_closure`] found.
struct PlannedClosure {
    /// Every object the targets need that DST lacks.
    needed: Vec<(ObjectId, ObjectKind)>,
    /// How many of them are versions.
    versions: u64,
    /// The frames holding them, per SRC pack.
    per_pack: FramesPerPack,
}

/// Steps 5 and 6: every object the targets need that DST lacks, how many versions, and the
/// frames holding them per SRC pack (every such pack among `listed`, SRC's packs now).
///
/// # Errors
/// [`Error::MissingObject`] for metadata this store lacks, an object SRC's recorded indexes
/// lack, or a pack they name that SRC no longer lists; [`Error::Catalog`].
fn plan_closure(
    store: &Store,
    (src, dst): (&RemoteRecord, &RemoteRecord),
    view: &crate::transfer::WriterView,
    relied: &mut HashSet<ObjectId>,
    targets: &[Target],
    listed: &HashMap<ObjectId, u64>,
) -> Result<PlannedClosure> {
    let catalog = store.catalog();
    let (mut needed, versions, held_deltas) =
        closure_missing(store, src, dst, view, relied, targets)?;
    // Closures: the chunks needed and those DST holds as deltas bring their bases.
    let mut in_needed: HashSet<(ObjectId, ObjectKind)> = needed.iter().copied().collect();
    let mut seen = HashSet::new();
    let roots: Vec<ObjectId> = needed
        .iter()
        .filter(|(_, kind)| *kind == ObjectKind::Chunk)
        .map(|(id, _)| *id)
        .chain(held_deltas)
        .collect();
    let sides = (src, dst);
    close_on_source(
        catalog,
        sides,
        view,
        relied,
        roots,
        &mut seen,
        (&mut needed, &mut in_needed),
    )?;
    let mut examined = HashSet::new();
    loop {
        let per_pack = frames_per_pack(catalog, src, &needed, listed)?;
        // A pack copied whole carries all its delta frames: their bases go too.
        let whole: Vec<ObjectId> = split_packs(per_pack.clone(), listed, view)
            .0
            .into_iter()
            .map(|(pack, _)| pack)
            .filter(|pack| examined.insert(*pack))
            .collect();
        let before = needed.len();
        for pack in whole {
            let bases = catalog.remote_pack_delta_bases(src.id, &pack)?;
            close_on_source(
                catalog,
                sides,
                view,
                relied,
                bases,
                &mut seen,
                (&mut needed, &mut in_needed),
            )?;
        }
        if needed.len() == before {
            return Ok(PlannedClosure {
                needed,
                versions,
                per_pack,
            });
        }
    }
}

/// The frames of SRC's packs holding `needed`, per pack (every such pack among `listed`).
///
/// # Errors
/// [`Error::MissingObject`] for an object SRC's recorded indexes lack, or a pack they name
/// that SRC no longer lists; [`Error::Catalog`].
fn frames_per_pack(
    catalog: &crate::catalog::Catalog,
    src: &RemoteRecord,
    needed: &[(ObjectId, ObjectKind)],
    listed: &HashMap<ObjectId, u64>,
) -> Result<FramesPerPack> {
    let (frames, missing) = catalog.remote_frames_holding(src.id, needed)?;
    if let Some((id, kind)) = missing {
        return Err(Error::MissingObject {
            id: id.to_hex(),
            what: kind.name(),
        });
    }
    let mut per_pack = FramesPerPack::new();
    for (pack, frame, row) in frames {
        if !listed.contains_key(&pack) {
            return Err(Error::MissingObject {
                id: pack.to_hex(),
                what: "pack",
            });
        }
        per_pack
            .entry(pack)
            .or_default()
            .insert(frame.offset, (frame, row));
    }
    Ok(per_pack)
}

/// Every object the targets need that DST lacks (step 5), how many versions DST lacks, and
/// the chunks DST holds in delta frames (whose bases DST must hold too). An outboard travels
/// where SRC holds one.
#[allow(clippy::type_complexity)]
fn closure_missing(
    store: &Store,
    src: &RemoteRecord,
    dst: &RemoteRecord,
    view: &crate::transfer::WriterView,
    relied: &mut HashSet<ObjectId>,
    targets: &[Target],
) -> Result<(Vec<(ObjectId, ObjectKind)>, u64, Vec<ObjectId>)> {
    let catalog = store.catalog();
    let mut needed = Vec::new();
    let mut seen = HashSet::new();
    let mut versions = 0;
    let mut held_deltas = Vec::new();
    for target in targets {
        let mut on = super::push::WalkedRemote::new(view, dst.id, relied);
        walk_missing_on(
            store,
            &mut on,
            &target.version,
            &|id| {
                Ok(catalog
                    .remote_locate(src.id, id, ObjectKind::Outboard)?
                    .is_some())
            },
            &mut |_| {},
            &mut |id, kind| {
                if seen.insert((id, kind)) {
                    versions += u64::from(kind == ObjectKind::Version);
                    needed.push((id, kind));
                }
                Ok(())
            },
        )?;
        held_deltas.append(&mut on.held_deltas);
    }
    Ok((needed, versions, held_deltas))
}

/// What a copy must send (in order) and the same as a set, filled together.
type Needed<'a> = (
    &'a mut Vec<(ObjectId, ObjectKind)>,
    &'a mut HashSet<(ObjectId, ObjectKind)>,
);

/// The closure rule for a copy (a delta is never stored anywhere without its bases): every
/// chunk of `roots` that DST lacks is added to `needed` (once: `listed` holds what is in it)
/// with its bases on SRC, transitively; a chunk DST holds in a delta frame has its bases on
/// DST visited the same way (`super::push::close_over_bases`).
///
/// # Errors
/// [`Error::Corrupt`] naming SRC when a delta frame there names a base SRC lacks;
/// [`Error::Catalog`].
fn close_on_source(
    catalog: &crate::catalog::Catalog,
    (src, dst): (&RemoteRecord, &RemoteRecord),
    view: &crate::transfer::WriterView,
    relied: &mut HashSet<ObjectId>,
    roots: Vec<ObjectId>,
    seen: &mut HashSet<ObjectId>,
    (needed, listed): Needed<'_>,
) -> Result<()> {
    let mut on = super::push::WalkedRemote::new(view, dst.id, relied);
    super::push::close_over_bases(
        catalog,
        &mut on,
        roots,
        seen,
        &mut |id| {
            let location = catalog
                .remote_locate(src.id, id, ObjectKind::Chunk)?
                .ok_or_else(|| {
                    Error::corrupt(
                        format!("remote {}", src.name),
                        format!(
                            "a delta frame names base chunk {}, which the remote does not \
                             hold (the remote is damaged: a delta is never stored without \
                             its bases)",
                            id.short()
                        ),
                    )
                })?;
            if location.frame.compression == Compression::Delta {
                catalog.remote_frame_bases(location.frame_row)
            } else {
                Ok(Vec::new())
            }
        },
        &mut |id| {
            if listed.insert((id, ObjectKind::Chunk)) {
                needed.push((id, ObjectKind::Chunk));
            }
            Ok(())
        },
    )
}

/// Spans cut into batches of at most [`BATCH_BYTES`] (a larger span is a batch of its own).
fn batches(spans: Vec<crate::transfer::Span>) -> Vec<Vec<crate::transfer::Span>> {
    let mut batches: Vec<Vec<crate::transfer::Span>> = Vec::new();
    let mut bytes = 0;
    for span in spans {
        let len = span.len();
        if batches.is_empty() || bytes + len > BATCH_BYTES {
            batches.push(Vec::new());
            bytes = 0;
        }
        bytes += len;
        batches.last_mut().expect("just pushed").push(span);
    }
    batches
}

/// Where a sealed pack's index begins: its trailer (the last 56 bytes) gives the index
/// length. The pack was built here, so its trailer is well formed.
fn index_offset(pack: &[u8]) -> usize {
    let trailer_len = crate::pack::format::TRAILER_LEN as usize;
    let trailer = &pack[pack.len() - trailer_len..];
    let index_length = u64::from_le_bytes(trailer[8..16].try_into().expect("8 bytes"));
    pack.len() - trailer_len - index_length as usize
}

/// Decides how DST's head of `target`'s dataset moves (from the state listed in step 1), then
/// how SRC's tags naming the version or one of its ancestors go: `up-to-date`, `ahead` (DST's
/// head descends from the version; kept unless `force`), `updated` (a fast-forward),
/// `forced`, `created`; a tag naming another version on DST is `rejected` unless `force`.
fn decide_refs(
    store: &Store,
    src_refs: &RemoteRefs<'_>,
    dst_refs: &RemoteRefs<'_>,
    target: &Target,
    force: bool,
) -> Result<Vec<RefMove>> {
    let head = RefName {
        dataset: target.dataset.clone(),
        tag: None,
    };
    let version = target.version;
    let current = dst_refs.current(&head)?;
    let previous = current.as_ref().map(|(id, _)| *id);
    let (status, kept) = match &current {
        Some((there, _)) if *there == version => ("up-to-date", None),
        Some((there, _)) if is_ancestor(store, &version, there)? && !force => {
            ("ahead", Some(*there))
        }
        Some((there, _)) if is_ancestor(store, there, &version)? => ("updated", None),
        Some(_) => ("forced", None),
        None => ("created", None),
    };
    let mut moves = vec![RefMove {
        name: head,
        version: kept.unwrap_or(version),
        previous,
        status,
        state: current.map(|(_, state)| state),
    }];
    // Tags of SRC naming the version or an ancestor.
    let mut lineage = HashSet::new();
    let mut next = Some(version);
    while let Some(id) = next {
        lineage.insert(id);
        next = store.catalog().version(&id)?.and_then(|r| r.version.parent);
    }
    for tag in source_tags(src_refs, &target.dataset) {
        let Some((named, _)) = src_refs.current(&tag)? else {
            continue;
        };
        if !lineage.contains(&named) {
            continue;
        }
        let there = dst_refs.current(&tag)?;
        let (status, now) = match &there {
            Some((there, _)) if *there == named => ("up-to-date", named),
            Some(_) if force => ("forced", named),
            Some((there, _)) => ("rejected", *there),
            None => ("created", named),
        };
        moves.push(RefMove {
            name: tag,
            version: now,
            previous: there.as_ref().map(|(id, _)| *id),
            status,
            state: there.map(|(_, state)| state),
        });
    }
    Ok(moves)
}

/// Carries out one planned ref move on DST (compare-and-swap with the state listed in step 1)
/// and records the ref as DST now holds it (an `ahead` head is not recorded).
fn apply_move(store: &mut Store, ends: &Ends<'_>, planned: &RefMove) -> Result<PushedRef> {
    let (dst, name, version) = (&ends.dst, &planned.name, &planned.version);
    let state = match (planned.status, &planned.state) {
        ("ahead", _) => None,
        ("up-to-date" | "rejected", Some(state)) => Some(state.clone()),
        ("updated", Some(state)) => Some(dst.update_ref(name, version, Some(state))?),
        ("forced", _) => Some(dst.force_ref(name, version)?),
        ("created", None) => Some(dst.update_ref(name, version, None)?),
        (status, state) => {
            return Err(Error::Internal {
                detail: format!("copy planned ref {name:?} {status} with state {state:?}"),
            });
        }
    };
    if let Some(state) = state {
        record_ref(
            store,
            ends.dst_record.id,
            &remote_ref(name, *version, &state),
        )?;
    }
    Ok(planned.reported())
}

impl CopyPlan {
    /// Every target's head has a move; every SRC pack holding what DST lacks is taken exactly
    /// one way (whole or by frames), and the report lists each.
    fn check_decided(&self, targets: &[Target]) -> Result<()> {
        let wrong = |what: String| Error::Internal {
            detail: format!("copy planned {what}"),
        };
        for target in targets {
            let head = |m: &RefMove| m.name.dataset == target.dataset && m.name.tag.is_none();
            if !self.moves.iter().any(head) {
                return Err(wrong(format!("no move of {}'s head", target.dataset)));
            }
        }
        let Some(sending) = &self.sending else {
            return Ok(());
        };
        let whole: HashSet<ObjectId> = sending.whole.iter().map(|(id, _)| *id).collect();
        let partial: HashSet<ObjectId> = sending.partial.keys().map(|(id, _)| *id).collect();
        if let Some(id) = whole.intersection(&partial).next() {
            return Err(wrong(format!(
                "pack {} both whole and by frames",
                id.short()
            )));
        }
        for pack in &self.packs {
            let taken = match pack.action {
                SourcePackAction::Whole => whole.contains(&pack.pack),
                SourcePackAction::Frames => partial.contains(&pack.pack),
            };
            if !taken {
                return Err(wrong(format!(
                    "pack {} without a decision",
                    pack.pack.short()
                )));
            }
        }
        if self.packs.len() != whole.len() + partial.len() {
            return Err(wrong("packs taken without a decision".into()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::ops::commit::{CommitOptions, commit};
    use crate::ops::sync::{PushOptions, add_remote, push};

    /// Every file under `dir`, with its bytes.
    fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
        fn walk(dir: &Path, into: &mut BTreeMap<PathBuf, Vec<u8>>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(&path, into);
                } else {
                    into.insert(path.clone(), std::fs::read(&path).unwrap());
                }
            }
        }
        let mut into = BTreeMap::new();
        walk(dir, &mut into);
        into
    }

    /// Commits `content` as `name` in `dataset` (with `tag`).
    fn commit_file(store: &mut Store, dir: &Path, name: &str, content: &[u8], tag: Option<&str>) {
        let data = dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::write(data.join(name), content).unwrap();
        let mut options = CommitOptions::new("ds");
        options.tag = tag.map(str::to_string);
        commit(store, &data, &options, &NoProgress).unwrap();
    }

    fn push_to(store: &mut Store, remote: &str) {
        let options = PushOptions {
            force: false,
            requests: 2,
        };
        push(store, remote, &[], &options, &NoProgress).unwrap();
    }

    fn statuses(refs: &[PushedRef]) -> Vec<(Option<String>, &'static str)> {
        refs.iter().map(|r| (r.tag.clone(), r.status)).collect()
    }

    /// A store with remotes `src` and `dst` (directories in `dir`): `ds`'s first version on
    /// both, its second (tagged `v2`) on `src` only.
    fn two_remotes(dir: &Path) -> Store {
        let mut store = Store::init(&dir.join("store")).unwrap();
        for name in ["src", "dst"] {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            let url = format!("file://{}", dir.join(name).display());
            add_remote(&mut store, name, &url, &Default::default()).unwrap();
        }
        commit_file(&mut store, dir, "a", &[1; 100_000], None);
        push_to(&mut store, "src");
        push_to(&mut store, "dst");
        commit_file(&mut store, dir, "b", &[2; 200_000], Some("v2"));
        push_to(&mut store, "src");
        store
    }

    /// The plan decides each DST ref (the head a fast-forward, the tag created) and each SRC
    /// pack (the second version's pack, all of it needed: whole), writes nothing to DST, and
    /// is what execute then does; once in place, the plan sends nothing.
    #[test]
    fn a_plan_writes_nothing_and_execute_does_what_it_planned() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = two_remotes(dir.path());
        let before = files(&dir.path().join("dst"));
        let data = store.lock_data_shared().unwrap();
        let revisions = ["ds".to_string()];
        let options = CopyOptions::default();
        let planned = plan(
            &mut store,
            &data,
            &revisions,
            ("src", "dst"),
            &options,
            &NoProgress,
        )
        .unwrap();
        assert_eq!(
            statuses(&planned.refs),
            vec![(None, "updated"), (Some("v2".into()), "created")]
        );
        assert_eq!(planned.packs.len(), 1, "{planned:?}");
        assert_eq!(planned.packs[0].action, SourcePackAction::Whole);
        assert_eq!(planned.planned.versions, 1);
        assert!(planned.report().dry_run);
        assert_eq!(
            files(&dir.path().join("dst")),
            before,
            "planning wrote to dst"
        );
        let packs = planned.packs.clone();
        let report = execute(&mut store, &data, planned, &NoProgress).unwrap();
        assert!(!report.dry_run);
        assert_eq!(
            statuses(&report.refs),
            vec![(None, "updated"), (Some("v2".into()), "created")]
        );
        assert_eq!(report.transfer.packs, 1);
        let pack = dir
            .path()
            .join(format!("dst/packs/{}.pack", packs[0].pack.to_hex()));
        assert!(pack.exists(), "the whole pack went under its own name");
        // In place now: nothing to send, every ref up to date.
        let again = plan(
            &mut store,
            &data,
            &revisions,
            ("src", "dst"),
            &options,
            &NoProgress,
        )
        .unwrap();
        assert!(again.packs.is_empty());
        assert!(again.refs.iter().all(|r| r.status == "up-to-date"));
    }

    /// A DST head that descends from the version copied stays (`ahead`) unless forced (then
    /// `forced`); SRC's tag of a later version is not copied with an older one.
    #[test]
    fn a_head_ahead_stays_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = two_remotes(dir.path());
        // DST holds the second version: the first is behind its head.
        push_to(&mut store, "dst");
        let data = store.lock_data_shared().unwrap();
        let revisions = ["ds~1".to_string()];
        let planned = plan(
            &mut store,
            &data,
            &revisions,
            ("src", "dst"),
            &CopyOptions::default(),
            &NoProgress,
        )
        .unwrap();
        assert_eq!(statuses(&planned.refs), vec![(None, "ahead")]);
        let force = CopyOptions {
            force: true,
            ..CopyOptions::default()
        };
        let forced = plan(
            &mut store,
            &data,
            &revisions,
            ("src", "dst"),
            &force,
            &NoProgress,
        )
        .unwrap();
        assert_eq!(statuses(&forced.refs), vec![(None, "forced")]);
    }
}
