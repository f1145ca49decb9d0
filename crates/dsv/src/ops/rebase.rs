//! `rebase`: replay a dataset's local versions onto another version (a remote's head, as
//! `dsv pull --rebase` does, or any version: `dsv rebase mnist@v3`), when the two lines
//! changed different paths.
//!
//! 1. Find the common ancestor: the newest version of the head's line that ONTO's line
//!    also holds, walking parent links with a set of the versions seen (a cycle in a damaged
//!    catalog ends the walk, never loops). The local versions are those after it, oldest
//!    first.
//! 2. Plan, at the path level (a three-way merge of flat listings, [`merge_listings`]):
//!    the ancestor's listing is the base, the head's is ours, ONTO's is theirs. A path
//!    changed on both sides to different entries is a conflict (a deletion against a
//!    change, too); the same change on both sides is not. A file or symlink on one side
//!    at a path under which the other side has entries is a conflict. A [`Resolution`]
//!    (`--ours`, `--theirs`, whole or per path) settles a path both changed by taking one
//!    side's entry, in the lines as a whole and in each replayed version alike; the report
//!    lists what it settled (`resolved`). Any conflict left: the report lists them, nothing
//!    is written. Then each local version is replayed in turn
//!    (base: its parent; ours: it; theirs: the version replayed before it, ONTO first), as
//!    `git rebase` picks commits; a local version whose changes ONTO already has is
//!    dropped.
//!    Steps 1 and 2 are [`plan`]: it reads the catalog and the trees and writes nothing; the
//!    [`RebasePlan`] holds a decision per local version ([`ReplayDecision`]: replayed as a
//!    new version, or dropped), the new versions and the trees they need that the store
//!    lacks, and is checked to decide every local version in order before it is used. A
//!    dry run reports it. [`execute`] carries out steps 3 and 4.
//! 3. Record: the plan's trees and versions go into new packs; under the head lock the head
//!    is checked to be the one planned from (else [`Error::HeadMoved`], nothing recorded),
//!    then one catalog transaction records the versions and moves the head (the ref log
//!    records the move).
//! 4. The workspace of the caller's directory, if it held the old head, follows: checked
//!    out at the new head when clean ([`follow_head`]), left alone (and said so) when not.
//!
//! A new version keeps the replayed one's message, author and source, and gets a new time.
//! It keeps the replayed version's import provenance only when its tree is the replayed
//! version's own: a tree that also holds ONTO's changes is no longer what the import's source
//! gave, and provenance claiming so would let `dsv update` treat the edits as the source's.
//! The new time: it is a snapshot that never existed before (its tree holds ONTO's changes
//! too) and it comes after its parent, ONTO, in the dataset's line; keeping the old time
//! would make it older than its own parent, and age-based cleanup would treat it so. The
//! replayed versions stay in the store (off the head's line, as `dsv log` shows them), with
//! their tags.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::following::{Following, forget_following, interrupted_following, record_following};
use super::history::common_ancestor;
use super::ingest::{PackSink, TreeWriter};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::{ObjectKind, Version};
use crate::progress::Progress;
use crate::store::{SharedDataLock, Store};
use crate::tree::{self, ChangeKind, FlatEntry, FlatKind};

/// How to rebase.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RebaseOptions {
    /// How ONTO is named in reports (`origin/mnist`, `mnist@v3`).
    pub onto_name: String,
    /// Plan only: report what would be replayed (and any conflicts), record nothing.
    pub dry_run: bool,
    /// A directory whose workspace follows the head when it holds the old head and is clean
    /// (the CLI passes the current directory).
    pub workspace: Option<PathBuf>,
    /// Parallel workers of the workspace's status and checkout.
    pub jobs: usize,
    /// Requests in flight when the workspace's checkout fetches data.
    pub requests: usize,
    /// How paths both lines changed are settled (none: they are conflicts).
    pub resolution: Resolution,
}

/// A side of a rebase: ours is the local line (the head's versions being replayed), theirs
/// is ONTO's line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Side {
    /// The local line's entry.
    Ours,
    /// ONTO's line's entry.
    Theirs,
}

/// How a rebase settles paths both lines changed differently ([`ConflictReason::BothChanged`]):
/// by taking one side's entry (a deletion included), for every such path (`all`) or for
/// the paths given and what lies below them (`paths`, which win over `all`; of several
/// matching, the longest). A file on one side where the other has entries below it
/// ([`ConflictReason::FileAndDirectory`]) is never settled this way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolution {
    /// The side for every path both changed.
    pub all: Option<Side>,
    /// The side for a path and everything below it.
    pub paths: Vec<(String, Side)>,
}

impl Resolution {
    /// The side settling a conflict at `path`, if any.
    pub fn side_for(&self, path: &str) -> Option<Side> {
        self.paths
            .iter()
            .filter(|(p, _)| {
                let p = p.trim_end_matches('/');
                path == p || is_below(path, p)
            })
            .max_by_key(|(p, _)| p.len())
            .map(|(_, side)| *side)
            .or(self.all)
    }
}

impl RebaseOptions {
    /// Options naming ONTO `onto_name`: no dry run, no workspace, default parallelism.
    pub fn new(onto_name: impl Into<String>) -> RebaseOptions {
        RebaseOptions {
            onto_name: onto_name.into(),
            dry_run: false,
            workspace: None,
            jobs: super::checkout::CheckoutOptions::default().jobs,
            requests: crate::remote::DEFAULT_JOBS,
            resolution: Resolution::default(),
        }
    }
}

/// What a rebase did (or, for a dry run or a conflict, would do).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RebaseStatus {
    /// ONTO is the head or one of its ancestors: nothing to do.
    UpToDate,
    /// The head is an ancestor of ONTO (or the dataset had none): it moves to ONTO.
    FastForward,
    /// Local versions were replayed onto ONTO.
    Rebased,
    /// Both lines changed the same paths differently: nothing was changed.
    Conflict,
}

/// One local version and what replaying it made.
#[derive(Debug, Clone, Serialize)]
pub struct Replayed {
    /// The local version replayed.
    pub from: ObjectId,
    /// The new version (`None` when dropped, or in a dry run).
    pub version: Option<ObjectId>,
    /// Its message (kept).
    pub message: String,
    /// False when ONTO already had all its changes, so no version was made for it.
    pub kept: bool,
}

/// A path both lines changed in ways that do not go together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Conflict {
    /// The path.
    pub path: String,
    /// Why.
    pub reason: ConflictReason,
    /// What the local line did at the path since the common ancestor (`None`: nothing).
    pub ours: Option<ChangeKind>,
    /// What ONTO's line did at the path since the common ancestor (`None`: nothing).
    pub theirs: Option<ChangeKind>,
    /// The side taken, for a conflict settled by the rebase's [`Resolution`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resolved: Option<Side>,
}

/// Why a path is a conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ConflictReason {
    /// Both lines changed the path, to different entries (or one deleted it).
    BothChanged,
    /// One line has a file or symlink at the path, the other entries below it.
    FileAndDirectory,
}

/// What happened to the workspace of the caller's directory when the head moved.
#[derive(Debug, Clone, Serialize)]
pub struct WorkspaceFollow {
    /// The workspace's directory.
    pub dir: PathBuf,
    /// `moved`: checked out at the new head; `dirty`: it has uncommitted changes, so it
    /// was left alone (still at the old head); `would-move`: a dry run's plan.
    pub status: &'static str,
    /// The version it holds now.
    pub version: ObjectId,
    /// Its uncommitted changes (`dirty` only).
    pub changes: u64,
}

/// The outcome of [`rebase`].
#[derive(Debug, Clone, Serialize)]
pub struct RebaseReport {
    /// The dataset.
    pub dataset: String,
    /// ONTO as named.
    pub onto: String,
    /// ONTO's version.
    pub onto_version: ObjectId,
    /// The common ancestor of the head and ONTO.
    pub base: Option<ObjectId>,
    /// The head before.
    pub old_head: Option<ObjectId>,
    /// The head after (for a dry run, the head it would have when known: a fast-forward's;
    /// `None` for a conflict and a dry run's new versions).
    pub head: Option<ObjectId>,
    /// What was done.
    pub status: RebaseStatus,
    /// True for a dry run: nothing was recorded.
    pub dry_run: bool,
    /// The local versions replayed, oldest first.
    pub replayed: Vec<Replayed>,
    /// The conflicts (status `conflict`), in path order.
    pub conflicts: Vec<Conflict>,
    /// The paths both lines changed that the [`Resolution`] settled, each with the side
    /// taken, in path order (the lines as a whole).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resolved: Vec<Conflict>,
    /// The local version whose replay conflicted, when the conflict is that version's
    /// alone (the lines as a whole merge, but a version on the way does not: it changed a
    /// path that a later one changed back).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub conflict_in: Option<ObjectId>,
    /// The workspace of the caller's directory, when it held the old head.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<WorkspaceFollow>,
}

/// The result of a three-way merge of listings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Merged {
    /// The merged listing in [`crate::walk::path_order`], directories included (those that
    /// only hold merged entries are made), ready for [`tree::TreeBuilder`]; meaningless when
    /// there are conflicts.
    pub entries: Vec<FlatEntry>,
    /// The conflicts, in path order.
    pub conflicts: Vec<Conflict>,
    /// The conflicts a [`Resolution`] settled (each with its side), in path order.
    pub resolved: Vec<Conflict>,
}

/// Whether two entries at one path are the same: both absent, or the same kind (mode and
/// symlink target included) and, for a file or symlink, the same content. Directories are
/// the same whatever they hold (their contents are compared path by path).
fn same(a: Option<&FlatEntry>, b: Option<&FlatEntry>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => a.kind == b.kind && (a.kind == FlatKind::Dir || a.id == b.id),
        _ => false,
    }
}

/// What a side did at a path since the base.
fn change(base: Option<&FlatEntry>, side: Option<&FlatEntry>) -> Option<ChangeKind> {
    match (base, side) {
        _ if same(base, side) => None,
        (None, _) => Some(ChangeKind::Added),
        (_, None) => Some(ChangeKind::Deleted),
        _ => Some(ChangeKind::Modified),
    }
}

/// True when `path` lies below directory path `dir`.
fn is_below(path: &str, dir: &str) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path.as_bytes()[dir.len()] == b'/'
}

/// The three-way merge of listings `base`, `ours` and `theirs` (each in
/// [`crate::walk::path_order`], as [`tree::flatten`] gives them), path by path: where both
/// sides agree, or only one changed the path, that side's entry is taken; where both changed
/// it differently, it is a [`ConflictReason::BothChanged`] conflict. A file or symlink taken
/// at a path under which entries are taken too is a [`ConflictReason::FileAndDirectory`]
/// conflict; a directory that only its new entries need (one side deleted it, the other
/// added into it) is made again.
pub fn merge_listings<'a>(
    base: &'a [FlatEntry],
    ours: &'a [FlatEntry],
    theirs: &'a [FlatEntry],
) -> Merged {
    merge_listings_resolving(base, ours, theirs, &Resolution::default())
}

/// [`merge_listings`], with the paths both sides changed differently settled by
/// `resolution` where it names a side (listed in [`Merged::resolved`]).
pub fn merge_listings_resolving<'a>(
    base: &'a [FlatEntry],
    ours: &'a [FlatEntry],
    theirs: &'a [FlatEntry],
    resolution: &Resolution,
) -> Merged {
    use std::cmp::Ordering;
    let mut resolved = Vec::new();
    let mut picked: Vec<(FlatEntry, Option<ChangeKind>, Option<ChangeKind>)> = Vec::new();
    let mut conflicts = Vec::new();
    let (mut i, mut j, mut k) = (0, 0, 0);
    loop {
        let heads = [base.get(i), ours.get(j), theirs.get(k)];
        let Some(path) = heads
            .iter()
            .flatten()
            .map(|e| e.path.as_str())
            .min_by(|a, b| crate::walk::path_order(a, b))
        else {
            break;
        };
        let path = path.to_string();
        let at = |e: Option<&'a FlatEntry>| -> Option<&'a FlatEntry> {
            e.filter(|e| crate::walk::path_order(&e.path, &path) == Ordering::Equal)
        };
        let (b, o, t) = (at(heads[0]), at(heads[1]), at(heads[2]));
        i += usize::from(b.is_some());
        j += usize::from(o.is_some());
        k += usize::from(t.is_some());
        let (ours_change, theirs_change) = (change(b, o), change(b, t));
        let taken = if same(o, t) || theirs_change.is_none() {
            o
        } else if ours_change.is_none() {
            t
        } else {
            let side = resolution.side_for(&path);
            let conflict = Conflict {
                path,
                reason: ConflictReason::BothChanged,
                ours: ours_change,
                theirs: theirs_change,
                resolved: side,
            };
            match side {
                Some(Side::Ours) => {
                    resolved.push(conflict);
                    o
                }
                Some(Side::Theirs) => {
                    resolved.push(conflict);
                    t
                }
                None => {
                    conflicts.push(conflict);
                    continue;
                }
            }
        };
        if let Some(entry) = taken {
            picked.push((entry.clone(), ours_change, theirs_change));
        }
    }
    // Directories on every taken entry's path, and no entry below a file or symlink.
    let mut entries = Vec::with_capacity(picked.len());
    let mut open: Vec<String> = Vec::new();
    let mut blocker: Option<(String, Option<ChangeKind>, Option<ChangeKind>, bool)> = None;
    for (entry, ours_change, theirs_change) in picked {
        if let Some((file, o, t, reported)) = &mut blocker {
            if is_below(&entry.path, file) {
                if !*reported {
                    *reported = true;
                    conflicts.push(Conflict {
                        path: file.clone(),
                        reason: ConflictReason::FileAndDirectory,
                        ours: *o,
                        theirs: *t,
                        resolved: None,
                    });
                }
                continue;
            }
            blocker = None;
        }
        while open.last().is_some_and(|dir| !is_below(&entry.path, dir)) {
            open.pop();
        }
        let start = open.last().map_or(0, |dir| dir.len() + 1);
        for (at, _) in entry.path[start..].match_indices('/') {
            let dir = entry.path[..start + at].to_string();
            entries.push(FlatEntry {
                path: dir.clone(),
                kind: FlatKind::Dir,
                size: 0,
                id: ObjectId([0; 32]),
            });
            open.push(dir);
        }
        if entry.kind == FlatKind::Dir {
            open.push(entry.path.clone());
        } else {
            blocker = Some((entry.path.clone(), ours_change, theirs_change, false));
        }
        entries.push(entry);
    }
    conflicts.sort_by(|a, b| crate::walk::path_order(&a.path, &b.path));
    Merged {
        entries,
        conflicts,
        resolved,
    }
}

/// Rebases dataset `dataset`'s head onto version `onto` (see the module's docs): [`plan`],
/// then [`execute`], under the data lock held shared; a dry run ([`RebaseOptions::dry_run`])
/// reports the plan and writes nothing.
///
/// # Errors
/// [`Error::DatasetNotFound`] (no such dataset, and nothing to fast-forward: the dataset is
/// made when ONTO is given); [`Error::RevisionNotFound`] when ONTO is not in the catalog;
/// [`Error::NoCommonVersion`]; [`Error::HeadMoved`]; reading trees ([`Error::MissingObject`],
/// [`Error::Corrupt`]); writing packs ([`Error::Io`]); errors of the workspace's status
/// (before anything is recorded: nothing changed) and of its checkout (after the head
/// moved: the versions are recorded, and `dsv checkout` finishes).
pub fn rebase(
    store: &mut Store,
    dataset: &str,
    onto: &ObjectId,
    options: &RebaseOptions,
    progress: &dyn Progress,
) -> Result<RebaseReport> {
    crate::revision::check_name("dataset", dataset)?;
    // A rebase killed while its workspace followed the head: finished first.
    let resumed = match &options.workspace {
        Some(dir) if !options.dry_run => resume_following(
            store,
            dir,
            &FollowOptions::new(options.jobs, options.requests),
            progress,
        )?,
        _ => None,
    };
    let data_lock = store.lock_data_shared()?;
    let plan = plan(store, &data_lock, dataset, onto, options, progress)?;
    let mut report = if options.dry_run {
        let mut report = plan.report(true);
        if let (Some(dir), Some(old), Some(_)) = (&options.workspace, plan.old_head, plan.new_head)
        {
            report.workspace = would_follow(store, dir, dataset, &old)?;
        }
        report
    } else {
        execute(store, data_lock, &plan, options, progress)?
    };
    if report.workspace.is_none() {
        report.workspace = resumed;
    }
    Ok(report)
}

/// What a rebase will do, decided by [`plan`] before anything is written and carried out
/// by [`execute`] (or reported as it is by a dry run). Plain data: nothing in it refers to
/// the store.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RebasePlan {
    /// The dataset whose head moves.
    pub dataset: String,
    /// ONTO as named in reports.
    pub onto_name: String,
    /// ONTO's version.
    pub onto: ObjectId,
    /// The head planned from; [`execute`] records nothing if the head is another by then.
    pub old_head: Option<ObjectId>,
    /// The common ancestor of the head and ONTO.
    pub base: Option<ObjectId>,
    /// What the rebase does: up to date, a fast-forward, a replay, or a conflict.
    pub status: RebaseStatus,
    /// The head after the rebase: ONTO for a fast-forward, the last replayed version (or
    /// ONTO when every local version was dropped) for a replay, `None` otherwise.
    pub new_head: Option<ObjectId>,
    /// One decision per local version, oldest first (a replay only; empty otherwise).
    pub steps: Vec<ReplayStep>,
    /// The trees the new versions need that the store lacks, with their encodings, each
    /// once: what [`execute`] writes before the versions.
    pub trees: Vec<(ObjectId, Vec<u8>)>,
    /// The conflicts (status `conflict`), in path order.
    pub conflicts: Vec<Conflict>,
    /// The paths both lines changed that the [`Resolution`] settled (the lines as a whole).
    pub resolved: Vec<Conflict>,
    /// The local version whose replay conflicted, when the lines as a whole merge.
    pub conflict_in: Option<ObjectId>,
}

/// One local version of a rebase and what [`plan`] decided for it.
#[derive(Debug, Clone)]
pub struct ReplayStep {
    /// The local version.
    pub from: ObjectId,
    /// Its message (kept by the new version).
    pub message: String,
    /// What becomes of it.
    pub decision: ReplayDecision,
}

/// What a rebase does with one local version.
#[derive(Debug, Clone)]
pub enum ReplayDecision {
    /// Replayed as a new version: its id and the version [`execute`] writes.
    Replay(ObjectId, Box<Version>),
    /// ONTO already has all its changes: no version is made for it.
    Drop,
}

impl RebasePlan {
    /// The new versions, oldest first, with their ids.
    pub fn made(&self) -> impl Iterator<Item = (&ObjectId, &Version)> {
        self.steps.iter().filter_map(|step| match &step.decision {
            ReplayDecision::Replay(id, version) => Some((id, version.as_ref())),
            ReplayDecision::Drop => None,
        })
    }

    /// The report of this plan: a dry run's (`dry_run`: new versions unnamed, since a real
    /// run stamps them with its own time), or a real run's before the workspace follows.
    pub fn report(&self, dry_run: bool) -> RebaseReport {
        let all_dropped = self.made().next().is_none();
        let head = match self.status {
            RebaseStatus::UpToDate => self.old_head,
            RebaseStatus::Conflict => None,
            RebaseStatus::FastForward => Some(self.onto),
            RebaseStatus::Rebased if dry_run => all_dropped.then_some(self.onto),
            RebaseStatus::Rebased => self.new_head,
        };
        RebaseReport {
            dataset: self.dataset.clone(),
            onto: self.onto_name.clone(),
            onto_version: self.onto,
            base: self.base,
            old_head: self.old_head,
            head,
            status: self.status,
            dry_run,
            replayed: self
                .steps
                .iter()
                .map(|step| Replayed {
                    from: step.from,
                    version: match &step.decision {
                        ReplayDecision::Replay(id, _) if !dry_run => Some(*id),
                        _ => None,
                    },
                    message: step.message.clone(),
                    kept: matches!(step.decision, ReplayDecision::Replay(..)),
                })
                .collect(),
            conflicts: self.conflicts.clone(),
            resolved: self.resolved.clone(),
            conflict_in: self.conflict_in,
            workspace: None,
        }
    }
}

/// Decides what rebasing `dataset`'s head onto `onto` does, writing nothing: finds the
/// common ancestor and the local versions, merges the lines as a whole (every conflict at
/// once), then replays each local version in memory, building its trees (the ones the store
/// lacks are kept in the plan) and its new version. Under the data lock `_data`, held shared
/// until the plan is carried out, so the trees it found stay.
///
/// # Errors
/// As [`rebase`], but none of the workspace's or of writing; [`Error::Internal`] when the
/// plan leaves a local version undecided (a bug).
pub fn plan(
    store: &Store,
    _data: &SharedDataLock,
    dataset: &str,
    onto: &ObjectId,
    options: &RebaseOptions,
    progress: &dyn Progress,
) -> Result<RebasePlan> {
    if store.catalog().version(onto)?.is_none() {
        return Err(Error::RevisionNotFound {
            closest: None,
            revision: options.onto_name.clone(),
        });
    }
    if store.catalog().removed_at(onto)?.is_some() {
        return Err(Error::VersionRemoved {
            version: onto.to_hex(),
        });
    }
    let old_head = store.catalog().head_or_none(dataset)?;
    let mut plan = RebasePlan {
        dataset: dataset.to_string(),
        onto_name: options.onto_name.clone(),
        onto: *onto,
        old_head,
        base: None,
        status: RebaseStatus::UpToDate,
        new_head: None,
        steps: Vec::new(),
        trees: Vec::new(),
        conflicts: Vec::new(),
        resolved: Vec::new(),
        conflict_in: None,
    };
    let Some(head) = old_head else {
        plan.status = RebaseStatus::FastForward;
        plan.new_head = Some(*onto);
        return Ok(plan);
    };
    let (base, local) = common_ancestor(store.catalog(), &head, onto)?;
    let Some(base) = base else {
        return Err(Error::NoCommonVersion {
            dataset: dataset.to_string(),
            onto: options.onto_name.clone(),
        });
    };
    plan.base = Some(base);
    // A removed version's trees may be freed: say so, rather than report a missing object.
    for id in std::iter::once(&base).chain(local.iter()) {
        if store.catalog().removed_at(id)?.is_some() {
            return Err(Error::VersionRemoved {
                version: id.to_hex(),
            });
        }
    }
    if base == *onto {
        // ONTO is on the head's line already.
        return Ok(plan);
    }
    if local.is_empty() {
        plan.status = RebaseStatus::FastForward;
        plan.new_head = Some(*onto);
        return Ok(plan);
    }
    progress.phase("merging");
    replay(store, &mut plan, &head, &local, &options.resolution)?;
    check_decided(store, &plan, &local)?;
    Ok(plan)
}

/// The version `id` as the catalog holds it.
fn version_of(store: &Store, id: &ObjectId) -> Result<Version> {
    Ok(store.catalog().version_record(id)?.version)
}

/// Fills `plan` for a replay of `local` (oldest first) from `head`'s line onto ONTO: the
/// lines as a whole are merged first (a conflict there ends it), then each local version
/// against the one replayed before it, as `git rebase` picks commits.
fn replay(
    store: &Store,
    plan: &mut RebasePlan,
    head: &ObjectId,
    local: &[ObjectId],
    resolution: &Resolution,
) -> Result<()> {
    let base = plan.base.expect("a replay has a common ancestor");
    let onto_version = version_of(store, &plan.onto)?;
    let (base_entries, head_entries, onto_entries) = {
        let mut reader = store.reader();
        (
            tree::flatten(&mut reader, &version_of(store, &base)?.tree)?,
            tree::flatten(&mut reader, &version_of(store, head)?.tree)?,
            tree::flatten(&mut reader, &onto_version.tree)?,
        )
    };
    // The lines as a whole first: every conflict at once.
    let whole = merge_listings_resolving(&base_entries, &head_entries, &onto_entries, resolution);
    drop(head_entries);
    plan.resolved = whole.resolved;
    if !whole.conflicts.is_empty() {
        plan.status = RebaseStatus::Conflict;
        plan.conflicts = whole.conflicts;
        return Ok(());
    }
    drop(whole.entries);
    let mut previous_entries = base_entries;
    let mut current_entries = onto_entries;
    let mut current_tree = onto_version.tree;
    let mut parent = plan.onto;
    let mut planned_trees = std::collections::HashSet::new();
    let time = crate::catalog::unix_now();
    for id in local {
        crate::interrupt::check()?;
        let version = version_of(store, id)?;
        let ours = tree::flatten(&mut store.reader(), &version.tree)?;
        let merged =
            merge_listings_resolving(&previous_entries, &ours, &current_entries, resolution);
        if !merged.conflicts.is_empty() {
            plan.status = RebaseStatus::Conflict;
            plan.conflicts = merged.conflicts;
            plan.conflict_in = Some(*id);
            plan.steps.clear();
            plan.trees.clear();
            return Ok(());
        }
        let mut builder = tree::TreeBuilder::new();
        let mut emit = |tree_id: ObjectId, bytes: Vec<u8>| -> Result<()> {
            if !store.catalog().has_object(&tree_id, ObjectKind::Tree)?
                && planned_trees.insert(tree_id)
            {
                plan.trees.push((tree_id, bytes));
            }
            Ok(())
        };
        for entry in merged.entries.iter().cloned() {
            builder.push(entry, &mut emit)?;
        }
        let (root, files, bytes) = builder.finish(&mut emit)?;
        let decision = if root == current_tree {
            ReplayDecision::Drop
        } else {
            let new = Version {
                dataset: plan.dataset.clone(),
                tree: root,
                parent: Some(parent),
                author: version.author.clone(),
                time,
                files,
                bytes,
                source: version.source.clone(),
                // Only a tree the import made is vouched for by its provenance.
                provenance: version.provenance.filter(|_| root == version.tree),
                message: version.message.clone(),
            };
            parent = new.id();
            current_tree = root;
            ReplayDecision::Replay(parent, Box::new(new))
        };
        plan.steps.push(ReplayStep {
            from: *id,
            message: version.message,
            decision,
        });
        previous_entries = ours;
        current_entries = merged.entries;
    }
    plan.status = RebaseStatus::Rebased;
    plan.new_head = Some(parent);
    Ok(())
}

/// Every local version got one decision, in order, and the decisions make one line: each
/// new version's parent is the version made before it (ONTO first), the new head is the
/// last, and each new version's root tree is in the store or among the plan's trees. A
/// conflict or a plan that replays nothing decides no version.
fn check_decided(store: &Store, plan: &RebasePlan, local: &[ObjectId]) -> Result<()> {
    let wrong = |what: String| Error::Internal {
        detail: format!("rebase of {} planned {what}", plan.dataset),
    };
    if plan.status != RebaseStatus::Rebased {
        return match plan.steps.first() {
            Some(step) => Err(wrong(format!(
                "version {} in a {:?}",
                step.from.short(),
                plan.status
            ))),
            None => Ok(()),
        };
    }
    let decided: Vec<ObjectId> = plan.steps.iter().map(|step| step.from).collect();
    if decided != local {
        return Err(wrong(format!(
            "{} decisions for {} local versions",
            decided.len(),
            local.len()
        )));
    }
    let planned_trees: std::collections::HashSet<&ObjectId> =
        plan.trees.iter().map(|(id, _)| id).collect();
    let mut parent = plan.onto;
    for (id, version) in plan.made() {
        if version.parent != Some(parent) || version.id() != *id {
            return Err(wrong(format!("version {} off the line", id.short())));
        }
        if !planned_trees.contains(&version.tree)
            && !store
                .catalog()
                .has_object(&version.tree, ObjectKind::Tree)?
        {
            return Err(wrong(format!(
                "version {} without its tree {}",
                id.short(),
                version.tree.short()
            )));
        }
        parent = *id;
    }
    if plan.new_head != Some(parent) {
        return Err(wrong("a head that is not its last version".to_string()));
    }
    Ok(())
}

/// Carries out `plan` (made by [`plan`] under `data_lock`): decides first whether the
/// workspace of [`RebaseOptions::workspace`] follows (its status; an error here changes
/// nothing), writes the plan's trees and versions into new packs, then records them and
/// moves the head under the head lock, after checking the head is still the one planned
/// from; then releases `data_lock` and the workspace follows, taking the locks a checkout
/// takes. A plan that moves nothing (up to date, a conflict) is reported as it is.
///
/// # Errors
/// As [`rebase`].
pub fn execute(
    store: &mut Store,
    data_lock: SharedDataLock,
    plan: &RebasePlan,
    options: &RebaseOptions,
    progress: &dyn Progress,
) -> Result<RebaseReport> {
    let mut report = plan.report(false);
    let Some(new_head) = plan.new_head else {
        return Ok(report);
    };
    // The plan is plain data a caller may have changed or kept across locks: checked again
    // against the store, under this data lock, before anything is written.
    if let (RebaseStatus::Rebased, Some(old_head)) = (plan.status, plan.old_head) {
        let (_, local) = common_ancestor(store.catalog(), &old_head, &plan.onto)?;
        check_decided(store, plan, &local)?;
    }
    let follow_options = FollowOptions::new(options.jobs, options.requests);
    // Whether the workspace will follow is decided before anything is written: only a
    // clean one is (a dirty one's files never move, so a record of its move would only
    // block its commits).
    let ready = match (&options.workspace, plan.old_head) {
        (Some(dir), Some(old)) => {
            ready_to_follow(store, dir, &plan.dataset, &old, follow_options, progress)?
        }
        _ => None,
    };
    let sink = write_objects(store, plan)?;
    let following = match (&ready, plan.old_head) {
        (Some(Ready::Clean(key)), Some(old)) => Some(Following {
            workspace: key.clone(),
            dataset: plan.dataset.clone(),
            from: old,
            to: new_head,
        }),
        _ => None,
    };
    record(store, &data_lock, plan, new_head, sink, following.as_ref())?;
    // The new head names everything the rebase wrote, so gc keeps it without the data lock;
    // following the head takes the locks a checkout takes, in their order (never the data
    // lock while this one is held).
    drop(data_lock);
    report.workspace = match (ready, following) {
        (Some(Ready::Dirty(dirty)), _) => Some(dirty),
        (Some(Ready::Clean(_)), Some(following)) => {
            move_recorded(store, &following, follow_options, progress)?
        }
        _ => None,
    };
    Ok(report)
}

/// Writes the plan's trees, then its new versions, into new packs (`None` when it makes
/// nothing); on an error the packs written are deleted.
fn write_objects(store: &Store, plan: &RebasePlan) -> Result<Option<PackSink>> {
    if plan.trees.is_empty() && plan.made().next().is_none() {
        return Ok(None);
    }
    store.remove_stale_temp_packs()?;
    let sink = PackSink::new(&store.packs_dir(), &store.temp_dir());
    let written = (|| {
        let mut writer =
            TreeWriter::new(super::ingest::IngestOptions::default().compression_level)?;
        for (id, bytes) in &plan.trees {
            writer.add(store, &sink, *id, bytes)?;
        }
        for (id, version) in plan.made() {
            writer.add_version(&sink, *id, &version.encode())?;
        }
        writer.flush(&sink)
    })();
    match written {
        Ok(()) => Ok(Some(sink)),
        Err(e) => {
            sink.abandon(store);
            Err(e)
        }
    }
}

/// Records the plan's packs (`sink`) and versions and moves the head to `new_head` under
/// the head lock, after checking the head is still `plan.old_head` (else
/// [`Error::HeadMoved`]: nothing recorded, the packs deleted); `following`, the workspace's
/// move, is recorded before the head moves, so a rebase killed from there on is finished by
/// the next run (or explained by `status`).
fn record(
    store: &mut Store,
    data_lock: &SharedDataLock,
    plan: &RebasePlan,
    new_head: ObjectId,
    sink: Option<PackSink>,
    following: Option<&Following>,
) -> Result<()> {
    let lock = store.lock_head(data_lock)?;
    if store.catalog().head_or_none(&plan.dataset)? != plan.old_head {
        // Abandoning takes the store lock itself.
        drop(lock);
        if let Some(sink) = sink {
            sink.abandon(store);
        }
        return Err(Error::HeadMoved {
            dataset: plan.dataset.clone(),
        });
    }
    let packs = match sink {
        Some(sink) => sink.finish()?,
        None => Vec::new(),
    };
    let recorded = (|| {
        if let Some(following) = following {
            record_following(store, following)?;
        }
        let packs_dir = store.packs_dir();
        let writer = store.catalog_mut().writer()?;
        for pack in &packs {
            writer.add_pack(&pack.read_index(&packs_dir)?)?;
        }
        for (id, version) in plan.made() {
            writer.record_version(id, version)?;
        }
        writer.set_head(&plan.dataset, &new_head)?;
        writer.commit()
    })();
    if let Err(e) = recorded {
        if let Some(following) = following {
            forget_following(store, &following.workspace);
        }
        super::ingest::remove_unrecorded_packs(store, &packs);
        return Err(e);
    }
    Ok(())
}

/// Whether a workspace follows a moved head ([`ready_to_follow`]).
enum Ready {
    /// It holds the old head and has no uncommitted changes: it moves (its key).
    Clean(String),
    /// It holds the old head but has uncommitted changes: it is left alone (the report).
    Dirty(WorkspaceFollow),
}

/// The workspace enclosing `dir`, when it holds version `old` of `dataset`, with whether it
/// is clean (its status, computed with `options.jobs` workers); `None` when no workspace
/// encloses `dir` or it holds another version.
fn ready_to_follow(
    store: &mut Store,
    dir: &Path,
    dataset: &str,
    old: &ObjectId,
    options: FollowOptions,
    progress: &dyn Progress,
) -> Result<Option<Ready>> {
    let Some(workspace) = holding(store, dir, dataset, old)? else {
        return Ok(None);
    };
    let workspace_dir = PathBuf::from(&workspace.path);
    let status_options = super::status::StatusOptions { jobs: options.jobs };
    let status = super::status::status(store, &workspace_dir, &status_options, progress)?;
    if !status.changes.is_empty() {
        return Ok(Some(Ready::Dirty(WorkspaceFollow {
            dir: workspace_dir,
            status: "dirty",
            version: *old,
            changes: status.changes.len() as u64,
        })));
    }
    Ok(Some(Ready::Clean(workspace.path)))
}

/// Moves a clean workspace whose move `following` was just recorded: [`move_following`],
/// but the record is forgotten when the move cannot begin (the workspace holds another
/// version by now, or uncommitted changes appeared in the way: the checkout refuses those
/// before it changes anything, so no file moved). `None` when it holds another version.
fn move_recorded(
    store: &mut Store,
    following: &Following,
    options: FollowOptions,
    progress: &dyn Progress,
) -> Result<Option<WorkspaceFollow>> {
    let holds_from = store
        .catalog()
        .workspace(&following.workspace)?
        .is_some_and(|w| {
            w.dataset.as_deref() == Some(following.dataset.as_str())
                && w.version == Some(following.from)
        });
    if !holds_from {
        forget_following(store, &following.workspace);
        return Ok(None);
    }
    let moved = move_following(store, following, options, progress)?;
    if moved.status == "dirty" {
        forget_following(store, &following.workspace);
    }
    Ok(Some(moved))
}

/// The workspace enclosing `dir` when it holds version `old` of `dataset`.
fn holding(
    store: &Store,
    dir: &Path,
    dataset: &str,
    old: &ObjectId,
) -> Result<Option<crate::catalog::Workspace>> {
    if !dir.is_dir() {
        return Ok(None);
    }
    Ok(super::workspace::enclosing(store, dir)?
        .filter(|w| w.dataset.as_deref() == Some(dataset) && w.version == Some(*old)))
}

/// A dry run's answer for the workspace of `dir`: it would move if it holds the old head.
fn would_follow(
    store: &Store,
    dir: &Path,
    dataset: &str,
    old: &ObjectId,
) -> Result<Option<WorkspaceFollow>> {
    Ok(holding(store, dir, dataset, old)?.map(|w| WorkspaceFollow {
        dir: PathBuf::from(w.path),
        status: "would-move",
        version: *old,
        changes: 0,
    }))
}

/// How a workspace follows a moved head ([`follow_head`]).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct FollowOptions {
    /// Parallel workers of the workspace's status and checkout.
    pub jobs: usize,
    /// Requests in flight when the checkout fetches what it lacks.
    pub requests: usize,
}

impl Default for FollowOptions {
    fn default() -> FollowOptions {
        FollowOptions {
            jobs: super::checkout::CheckoutOptions::default().jobs,
            requests: crate::remote::DEFAULT_JOBS,
        }
    }
}

impl FollowOptions {
    /// `jobs` workers and `requests` requests in flight.
    pub fn new(jobs: usize, requests: usize) -> FollowOptions {
        FollowOptions { jobs, requests }
    }
}

/// After dataset `dataset`'s head moved from `old` to `new`: the workspace enclosing `dir`,
/// when it holds `old`, is checked out at `new` if it has no uncommitted changes (fetching
/// from the store's remotes what the checkout lacks), and left alone otherwise. `None` when
/// no workspace encloses `dir` or it holds another version.
///
/// # Errors
/// As [`super::status::status`] and [`super::checkout::checkout_fetching`], but for
/// uncommitted changes found by the checkout ([`Error::Conflict`]): reported as `dirty`.
pub fn follow_head(
    store: &mut Store,
    dir: &Path,
    dataset: &str,
    old: &ObjectId,
    new: &ObjectId,
    options: &FollowOptions,
    progress: &dyn Progress,
) -> Result<Option<WorkspaceFollow>> {
    let key = match ready_to_follow(store, dir, dataset, old, *options, progress)? {
        None => return Ok(None),
        Some(Ready::Dirty(dirty)) => return Ok(Some(dirty)),
        Some(Ready::Clean(key)) => key,
    };
    // Recorded before the first file changes, and only for a clean workspace.
    let following = Following {
        workspace: key,
        dataset: dataset.to_string(),
        from: *old,
        to: *new,
    };
    record_following(store, &following)?;
    move_recorded(store, &following, *options, progress)
}

/// Checks out `following.to` into its workspace (which holds `following.from`, and may hold
/// some of `to`'s files already: a checkout keeps a file equal to the target's and replaces
/// one equal to the version it held), then forgets the record; `dirty` when uncommitted
/// changes are in the way (the record stays, for `status` to explain).
fn move_following(
    store: &mut Store,
    following: &Following,
    options: FollowOptions,
    progress: &dyn Progress,
) -> Result<WorkspaceFollow> {
    let dir = PathBuf::from(&following.workspace);
    let checkout_options = super::checkout::CheckoutOptions {
        jobs: options.jobs,
        ..Default::default()
    };
    let revision = crate::revision::Revision {
        dataset: following.dataset.clone(),
        base: following.to.to_hex(),
        ancestors: 0,
    };
    match super::checkout::checkout_fetching(
        store,
        &revision,
        &dir,
        &checkout_options,
        options.requests,
        progress,
    ) {
        Ok(_) => {
            forget_following(store, &following.workspace);
            Ok(WorkspaceFollow {
                dir,
                status: "moved",
                version: following.to,
                changes: 0,
            })
        }
        Err(Error::Conflict { total, .. }) => Ok(WorkspaceFollow {
            dir,
            status: "dirty",
            version: following.from,
            changes: total as u64,
        }),
        Err(e) => Err(e),
    }
}

/// Finishes the interrupted move ([`Following`]) of the workspace enclosing `dir`, if one
/// stands: checks out its `to` there, keeping the files already written and carrying over
/// uncommitted changes as any checkout does (`dirty`, the record kept, when they are in the
/// way). `None` when there is nothing to finish.
///
/// # Errors
/// As [`super::checkout::checkout_fetching`], but [`Error::Conflict`] (`dirty`).
pub fn resume_following(
    store: &mut Store,
    dir: &Path,
    options: &FollowOptions,
    progress: &dyn Progress,
) -> Result<Option<WorkspaceFollow>> {
    if !dir.is_dir() {
        return Ok(None);
    }
    let Some(workspace) = super::workspace::enclosing(store, dir)? else {
        return Ok(None);
    };
    let Some(following) = interrupted_following(store, &workspace.path)? else {
        return Ok(None);
    };
    Ok(Some(move_following(store, &following, *options, progress)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::following::following_path;
    use crate::ops::history::ahead_behind;

    fn file(path: &str, content: &str) -> FlatEntry {
        FlatEntry {
            path: path.into(),
            kind: FlatKind::File { executable: false },
            size: content.len() as u64,
            id: ObjectId::of(content.as_bytes()),
        }
    }

    fn dir(path: &str) -> FlatEntry {
        FlatEntry {
            path: path.into(),
            kind: FlatKind::Dir,
            size: 0,
            id: ObjectId([0; 32]),
        }
    }

    fn paths(merged: &Merged) -> Vec<String> {
        merged
            .entries
            .iter()
            .map(|e| match e.kind {
                FlatKind::Dir => format!("{}/", e.path),
                _ => e.path.clone(),
            })
            .collect()
    }

    fn conflicts(merged: &Merged) -> Vec<(&str, ConflictReason)> {
        merged
            .conflicts
            .iter()
            .map(|c| (c.path.as_str(), c.reason))
            .collect()
    }

    #[test]
    fn a_move_on_one_side_and_a_deletion_on_the_other_both_land() {
        let base = [dir("a"), file("a/x", "x"), file("a/y", "y"), file("z", "z")];
        // Ours moved a/x to b/x; theirs deleted z.
        let ours = [
            dir("a"),
            file("a/y", "y"),
            dir("b"),
            file("b/x", "x"),
            file("z", "z"),
        ];
        let theirs = [dir("a"), file("a/x", "x"), file("a/y", "y")];
        let merged = merge_listings(&base, &ours, &theirs);
        assert_eq!(merged.conflicts, []);
        assert_eq!(paths(&merged), ["a/", "a/y", "b/", "b/x"]);
        // Symmetric.
        let merged = merge_listings(&base, &theirs, &ours);
        assert_eq!(merged.conflicts, []);
        assert_eq!(paths(&merged), ["a/", "a/y", "b/", "b/x"]);
    }

    #[test]
    fn different_changes_to_one_path_conflict_and_the_same_change_does_not() {
        let base = [file("f", "0"), file("g", "0")];
        let ours = [file("f", "1"), file("g", "2")];
        let theirs = [file("f", "1"), file("g", "3")];
        let merged = merge_listings(&base, &ours, &theirs);
        assert_eq!(conflicts(&merged), [("g", ConflictReason::BothChanged)]);
        assert_eq!(merged.conflicts[0].ours, Some(ChangeKind::Modified));
        // Both added the same file: no conflict; different files: one.
        let merged = merge_listings(&[], &[file("n", "a")], &[file("n", "a")]);
        assert_eq!(
            (paths(&merged), merged.conflicts),
            (vec!["n".into()], vec![])
        );
        let merged = merge_listings(&[], &[file("n", "a")], &[file("n", "b")]);
        assert_eq!(conflicts(&merged), [("n", ConflictReason::BothChanged)]);
        // Both deleted: gone, no conflict.
        let merged = merge_listings(&[file("d", "0")], &[], &[]);
        assert_eq!((paths(&merged), merged.conflicts), (vec![], vec![]));
    }

    #[test]
    fn a_deletion_against_a_change_conflicts_either_way() {
        let base = [file("f", "0")];
        let merged = merge_listings(&base, &[], &[file("f", "1")]);
        assert_eq!(merged.conflicts[0].ours, Some(ChangeKind::Deleted));
        assert_eq!(merged.conflicts[0].theirs, Some(ChangeKind::Modified));
        let merged = merge_listings(&base, &[file("f", "1")], &[]);
        assert_eq!(conflicts(&merged), [("f", ConflictReason::BothChanged)]);
        // A mode change is a change.
        let mut executable = file("f", "0");
        executable.kind = FlatKind::File { executable: true };
        let merged = merge_listings(&base, &[executable], &[file("f", "1")]);
        assert_eq!(conflicts(&merged), [("f", ConflictReason::BothChanged)]);
    }

    #[test]
    fn a_file_where_the_other_side_adds_below_is_a_conflict() {
        let base = [dir("a"), file("a/x", "x")];
        // Theirs turned the directory a into a file; ours added a/b.
        let ours = [dir("a"), file("a/b", "b"), file("a/x", "x")];
        let theirs = [file("a", "file")];
        let merged = merge_listings(&base, &ours, &theirs);
        assert_eq!(
            conflicts(&merged),
            [("a", ConflictReason::FileAndDirectory)]
        );
        assert_eq!(merged.conflicts[0].theirs, Some(ChangeKind::Modified));
        let merged = merge_listings(&base, &theirs, &ours);
        assert_eq!(
            conflicts(&merged),
            [("a", ConflictReason::FileAndDirectory)]
        );
        // A file turned into a directory on one side, the file changed on the other.
        let merged = merge_listings(
            &[file("a", "0")],
            &[dir("a"), file("a/b", "b")],
            &[file("a", "1")],
        );
        assert_eq!(conflicts(&merged), [("a", ConflictReason::BothChanged)]);
    }

    #[test]
    fn a_directory_one_side_deleted_is_made_again_for_what_the_other_added() {
        let base = [dir("a"), file("a/x", "x"), file("b", "b")];
        let ours: [FlatEntry; 1] = [file("b", "b")];
        let theirs = [
            dir("a"),
            file("a/new", "n"),
            file("a/x", "x"),
            file("b", "b"),
        ];
        let merged = merge_listings(&base, &ours, &theirs);
        assert_eq!(merged.conflicts, []);
        assert_eq!(paths(&merged), ["a/", "a/new", "b"]);
        // Nested, and in path order around names that sort between ("a.txt" after "a/…").
        let merged = merge_listings(
            &[file("a.txt", "t")],
            &[dir("a"), dir("a/b"), file("a/b/c", "c"), file("a.txt", "t")],
            &[file("a.txt", "u")],
        );
        assert_eq!(merged.conflicts, []);
        assert_eq!(paths(&merged), ["a/", "a/b/", "a/b/c", "a.txt"]);
        // Empty directories are entries like files.
        let merged = merge_listings(&[], &[dir("e")], &[]);
        assert_eq!(paths(&merged), ["e/"]);
    }

    #[test]
    fn a_resolution_settles_paths_both_changed_by_side_and_the_longest_path_wins() {
        let base = [dir("d"), file("d/x", "0"), file("f", "0"), file("g", "0")];
        let ours = [dir("d"), file("d/x", "1"), file("f", "1"), file("g", "1")];
        let theirs = [dir("d"), file("d/x", "2"), file("f", "2")];
        let resolution = Resolution {
            all: Some(Side::Ours),
            paths: vec![("d/".into(), Side::Theirs), ("g".into(), Side::Theirs)],
        };
        let merged = merge_listings_resolving(&base, &ours, &theirs, &resolution);
        assert_eq!(merged.conflicts, []);
        // d/x from theirs (its directory), f ours (bare), g theirs: deleted.
        assert_eq!(paths(&merged), ["d/", "d/x", "f"]);
        let ids: Vec<_> = merged.entries.iter().map(|e| e.id).collect();
        assert_eq!(ids[1], ObjectId::of(b"2"));
        assert_eq!(ids[2], ObjectId::of(b"1"));
        let settled: Vec<_> = merged
            .resolved
            .iter()
            .map(|c| (c.path.as_str(), c.resolved))
            .collect();
        assert_eq!(
            settled,
            [
                ("d/x", Some(Side::Theirs)),
                ("f", Some(Side::Ours)),
                ("g", Some(Side::Theirs))
            ]
        );
        // Without one, the same paths conflict; a file against entries below it always does.
        assert_eq!(merge_listings(&base, &ours, &theirs).conflicts.len(), 3);
        let all_theirs = Resolution {
            all: Some(Side::Theirs),
            paths: Vec::new(),
        };
        let merged = merge_listings_resolving(
            &[dir("a"), file("a/x", "x")],
            &[dir("a"), file("a/b", "b"), file("a/x", "x")],
            &[file("a", "file")],
            &all_theirs,
        );
        assert_eq!(
            conflicts(&merged),
            [("a", ConflictReason::FileAndDirectory)]
        );
    }

    #[test]
    fn the_merged_listing_builds_the_tree_a_commit_of_it_would() {
        let base = [dir("a"), file("a/x", "x"), file("z", "z")];
        let ours = [dir("a"), file("a/x", "x2"), file("z", "z")];
        let theirs = [dir("a"), file("a/x", "x"), dir("d"), file("d/e", "e")];
        let merged = merge_listings(&base, &ours, &theirs);
        let expected = [dir("a"), file("a/x", "x2"), dir("d"), file("d/e", "e")];
        assert_eq!(
            tree::build(&merged.entries).root,
            tree::build(&expected).root
        );
    }

    /// The head checked under the head lock is not the one planned from: nothing is
    /// recorded, the packs written for the rebase are deleted (without waiting on the lock
    /// the check holds), and the head stays.
    #[test]
    fn a_head_moved_meanwhile_records_nothing_and_deletes_the_rebases_packs() {
        let (_dir, mut store, head) = store_with_version(&[("f", "f")]);
        let packs = |store: &Store| std::fs::read_dir(store.packs_dir()).unwrap().count();
        let before = packs(&store);
        let built = tree::build(&[file("new", "content of a rebase")]);
        let mut plan = up_to_date_plan(head);
        plan.old_head = Some(ObjectId([9; 32]));
        plan.status = RebaseStatus::FastForward;
        plan.trees = built.trees.clone();
        let sink = write_objects(&store, &plan).unwrap();
        let data_lock = store.lock_data_shared().unwrap();
        let result = record(&mut store, &data_lock, &plan, head, sink, None);
        assert!(matches!(result, Err(Error::HeadMoved { .. })), "{result:?}");
        assert_eq!(store.catalog().head_or_none("d").unwrap(), Some(head));
        assert_eq!(packs(&store), before);
    }

    /// A store with dataset `d` committed from a directory holding `files`, and its version.
    fn store_with_version(files: &[(&str, &str)]) -> (tempfile::TempDir, Store, ObjectId) {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        for (name, content) in files {
            std::fs::write(data.join(name), content).unwrap();
        }
        let mut store = Store::init(dir.path()).unwrap();
        let version = commit_dir(&mut store, &data);
        (dir, store, version)
    }

    /// Commits `data` as dataset `d`.
    fn commit_dir(store: &mut Store, data: &Path) -> ObjectId {
        commit_with(store, data, "")
    }

    /// Commits `data` as dataset `d` with message `message`.
    fn commit_with(store: &mut Store, data: &Path, message: &str) -> ObjectId {
        let mut options = crate::ops::commit::CommitOptions::new("d");
        options.message = message.to_string();
        crate::ops::commit::commit(store, data, &options, &crate::progress::NoProgress)
            .unwrap()
            .version
    }

    /// Writes `files` into a new directory `name` of `root`.
    fn directory(root: &Path, name: &str, files: &[(&str, &str)]) -> PathBuf {
        let dir = root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        for (file, content) in files {
            std::fs::write(dir.join(file), content).unwrap();
        }
        dir
    }

    /// Moves `d`'s head back to `version`.
    fn reset_to(store: &mut Store, version: &ObjectId) {
        let revision = crate::revision::Revision {
            dataset: "d".into(),
            base: version.to_hex(),
            ancestors: 0,
        };
        crate::ops::refs::reset(store, "d", &revision).unwrap();
    }

    /// A plan of `d` onto `onto` that does nothing.
    fn up_to_date_plan(onto: ObjectId) -> RebasePlan {
        RebasePlan {
            dataset: "d".into(),
            onto_name: "elsewhere".into(),
            onto,
            old_head: Some(onto),
            base: Some(onto),
            status: RebaseStatus::UpToDate,
            new_head: None,
            steps: Vec::new(),
            trees: Vec::new(),
            conflicts: Vec::new(),
            resolved: Vec::new(),
            conflict_in: None,
        }
    }

    /// Dataset `d` is a line base -> ours1 -> ours2 (committed from one directory) and
    /// `theirs` a child of base (committed from another, the head then reset): the plan decides
    /// ours1 and ours2 in order, drops none, builds its trees in memory, writes nothing, and
    /// carrying it out records exactly the versions planned.
    #[test]
    fn a_plan_decides_every_local_version_writes_nothing_and_execute_records_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::init(dir.path()).unwrap();
        let elsewhere = directory(dir.path(), "elsewhere", &[("shared", "base")]);
        let base = commit_dir(&mut store, &elsewhere);
        std::fs::write(elsewhere.join("theirs"), "theirs").unwrap();
        let theirs = commit_dir(&mut store, &elsewhere);
        // Back to base, then the local line, from a directory of its own.
        reset_to(&mut store, &base);
        let here = directory(dir.path(), "here", &[("shared", "base"), ("ours1", "1")]);
        let ours1 = commit_dir(&mut store, &here);
        std::fs::write(here.join("ours2"), "2").unwrap();
        let ours2 = commit_dir(&mut store, &here);
        assert_eq!(store.catalog().head_or_none("d").unwrap(), Some(ours2));
        let snapshot = |store: &Store| {
            let mut names: Vec<String> = std::fs::read_dir(store.packs_dir())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            (names, std::fs::read(store.root().join("reflog")).unwrap())
        };
        let before = snapshot(&store);
        let options = RebaseOptions::new("theirs");
        let data_lock = store.lock_data_shared().unwrap();
        let plan = plan(
            &store,
            &data_lock,
            "d",
            &theirs,
            &options,
            &crate::progress::NoProgress,
        )
        .unwrap();
        assert_eq!(snapshot(&store), before, "planning wrote nothing");
        let parent = |id: &ObjectId| store.catalog().version_record(id).unwrap().version.parent;
        assert_eq!(
            (parent(&ours1), parent(&theirs)),
            (Some(base), Some(base)),
            "{plan:?}"
        );
        assert_eq!(plan.status, RebaseStatus::Rebased);
        assert_eq!(plan.base, Some(base));
        let decided: Vec<ObjectId> = plan.steps.iter().map(|s| s.from).collect();
        assert_eq!(decided, [ours1, ours2]);
        let made: Vec<ObjectId> = plan.made().map(|(id, _)| *id).collect();
        assert_eq!(made.len(), 2);
        assert_eq!(plan.new_head, Some(made[1]));
        assert!(!plan.trees.is_empty(), "the merged trees are new");
        // A dry run's report names no new version.
        let dry = plan.report(true);
        assert!(dry.replayed.iter().all(|r| r.version.is_none() && r.kept));
        assert_eq!(dry.head, None);
        let report = execute(
            &mut store,
            data_lock,
            &plan,
            &options,
            &crate::progress::NoProgress,
        )
        .unwrap();
        assert_eq!(report.head, plan.new_head);
        assert_eq!(store.catalog().head_or_none("d").unwrap(), plan.new_head);
        let recorded = store.catalog().version_record(&made[1]).unwrap().version;
        assert_eq!(recorded.parent, Some(made[0]));
        let first = store.catalog().version_record(&made[0]).unwrap().version;
        assert_eq!(first.parent, Some(theirs));
    }

    /// A local version whose changes ONTO already has is dropped, and a change both lines
    /// made differently is a conflict that decides no version; the check refuses a plan
    /// missing a decision.
    #[test]
    fn a_plan_drops_what_onto_has_and_a_conflict_decides_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::init(dir.path()).unwrap();
        let elsewhere = directory(dir.path(), "elsewhere", &[("f", "base")]);
        let base = commit_dir(&mut store, &elsewhere);
        std::fs::write(elsewhere.join("f"), "same change").unwrap();
        let theirs = commit_with(&mut store, &elsewhere, "theirs");
        reset_to(&mut store, &base);
        let here = directory(dir.path(), "here", &[("f", "same change")]);
        let ours = commit_with(&mut store, &here, "ours");
        assert_ne!(ours, theirs, "another version of the same tree");
        let data_lock = store.lock_data_shared().unwrap();
        let options = RebaseOptions::new("theirs");
        let progress = crate::progress::NoProgress;
        let dropped = plan(&store, &data_lock, "d", &theirs, &options, &progress).unwrap();
        assert_eq!(dropped.status, RebaseStatus::Rebased);
        assert!(matches!(
            dropped.steps[..],
            [ReplayStep {
                decision: ReplayDecision::Drop,
                ..
            }]
        ));
        assert_eq!(dropped.new_head, Some(theirs));
        assert!(dropped.trees.is_empty());
        // Undecided: the check says so.
        let mut undecided = dropped.clone();
        undecided.steps.clear();
        assert!(matches!(
            check_decided(&store, &undecided, &[ours]),
            Err(Error::Internal { .. })
        ));
        drop(data_lock);
        // A different change to the same file: a conflict, no decision.
        reset_to(&mut store, &base);
        let other = directory(dir.path(), "other", &[("f", "another change")]);
        commit_dir(&mut store, &other);
        let data_lock = store.lock_data_shared().unwrap();
        let conflict = plan(&store, &data_lock, "d", &theirs, &options, &progress).unwrap();
        assert_eq!(conflict.status, RebaseStatus::Conflict);
        assert!(conflict.steps.is_empty() && conflict.new_head.is_none());
        assert_eq!(conflict.conflicts[0].path, "f");
    }

    #[test]
    fn the_common_ancestor_is_found_and_unrelated_lines_have_none() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::init(dir.path()).unwrap();
        let version = |parent: Option<ObjectId>, message: &str| Version {
            dataset: "d".into(),
            tree: ObjectId([1; 32]),
            parent,
            author: "a".into(),
            time: 0,
            files: 0,
            bytes: 0,
            source: "s".into(),
            provenance: None,
            message: message.into(),
        };
        let root = version(None, "root");
        let root_id = root.id();
        let ours1 = version(Some(root_id), "ours1");
        let ours2 = version(Some(ours1.id()), "ours2");
        let theirs = version(Some(root_id), "theirs");
        let writer = store.catalog_mut().writer().unwrap();
        for v in [&root, &ours1, &ours2, &theirs] {
            writer.record_version(&v.id(), v).unwrap();
        }
        writer.commit().unwrap();
        let (base, local) = common_ancestor(store.catalog(), &ours2.id(), &theirs.id()).unwrap();
        assert_eq!(base, Some(root_id));
        assert_eq!(local, [ours1.id(), ours2.id()]);
        assert_eq!(
            ahead_behind(store.catalog(), &ours2.id(), &theirs.id()).unwrap(),
            Some((2, 1))
        );
        // Unrelated lines share nothing.
        let other = version(None, "other");
        let writer = store.catalog_mut().writer().unwrap();
        writer.record_version(&other.id(), &other).unwrap();
        writer.commit().unwrap();
        let (base, _) = common_ancestor(store.catalog(), &ours2.id(), &other.id()).unwrap();
        assert_eq!(base, None);
    }

    /// A store whose dataset `d` has version `a` (committed from workspace `ws`, which holds
    /// it) and `b`, a child of `a` with the same tree, recorded as the head: the state a
    /// rebase killed after the head moved (from `a` to `b`) and before the workspace moved
    /// leaves, with its record of the move.
    struct Moved {
        _dir: tempfile::TempDir,
        store: Store,
        ws: PathBuf,
        key: String,
        a: ObjectId,
        b: ObjectId,
    }

    fn moved() -> Moved {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("f"), "f").unwrap();
        let mut store = Store::init(dir.path()).unwrap();
        let a = crate::ops::commit::commit(
            &mut store,
            &ws,
            &crate::ops::commit::CommitOptions::new("d"),
            &crate::progress::NoProgress,
        )
        .unwrap()
        .version;
        let mut version = store.catalog().version(&a).unwrap().unwrap().version;
        version.parent = Some(a);
        version.message = "rebased".into();
        let b = version.id();
        let writer = store.catalog_mut().writer().unwrap();
        writer.record_version(&b, &version).unwrap();
        writer.set_head("d", &b).unwrap();
        writer.commit().unwrap();
        let key = std::fs::canonicalize(&ws)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        record_following(
            &store,
            &Following {
                workspace: key.clone(),
                dataset: "d".into(),
                from: a,
                to: b,
            },
        )
        .unwrap();
        Moved {
            _dir: dir,
            store,
            ws,
            key,
            a,
            b,
        }
    }

    /// A recorded move whose target the head was reset away from no longer counts: neither
    /// `status` nor the next rebase moves the workspace to the abandoned version.
    #[test]
    fn a_recorded_move_to_a_version_the_head_was_reset_away_from_does_not_count() {
        let mut m = moved();
        let found = interrupted_following(&m.store, &m.key).unwrap();
        assert_eq!(found.map(|f| f.to), Some(m.b));
        // `dsv reset d A`: B is abandoned.
        let writer = m.store.catalog_mut().writer().unwrap();
        writer.set_head("d", &m.a).unwrap();
        writer.commit().unwrap();
        assert_eq!(interrupted_following(&m.store, &m.key).unwrap(), None);
        let resumed = resume_following(
            &mut m.store,
            &m.ws,
            &FollowOptions::new(1, 1),
            &crate::progress::NoProgress,
        )
        .unwrap();
        assert!(resumed.is_none(), "{resumed:?}");
        let workspace = m.store.catalog().workspace(&m.key).unwrap().unwrap();
        assert_eq!(workspace.version, Some(m.a));
    }

    /// Reading a record that does not count yet (a rebase between recording its move and
    /// moving the head: the target is not in the catalog) leaves it in place.
    #[test]
    fn reading_a_record_that_does_not_count_keeps_it() {
        let m = moved();
        let path = following_path(&m.store, &m.key);
        let early = Following {
            workspace: m.key.clone(),
            dataset: "d".into(),
            from: m.a,
            to: ObjectId([7; 32]),
        };
        record_following(&m.store, &early).unwrap();
        assert_eq!(interrupted_following(&m.store, &m.key).unwrap(), None);
        assert!(path.exists(), "a reader deleted a live rebase's record");
    }

    /// Checking out the version the workspace holds (giving up the move) forgets the record,
    /// so `commit` there is no longer refused.
    #[test]
    fn checking_out_the_old_version_again_forgets_the_recorded_move() {
        let mut m = moved();
        assert!(interrupted_following(&m.store, &m.key).unwrap().is_some());
        let revision = crate::revision::Revision::parse(&format!("d@{}", m.a.to_hex())).unwrap();
        crate::ops::checkout::checkout(
            &mut m.store,
            &revision,
            &m.ws,
            &crate::ops::checkout::CheckoutOptions::default(),
            &crate::progress::NoProgress,
        )
        .unwrap();
        assert_eq!(interrupted_following(&m.store, &m.key).unwrap(), None);
        assert!(!following_path(&m.store, &m.key).exists());
    }

    /// Says whether a record of a workspace's move existed at any progress event (the
    /// workspace's status reports some): where a kill would leave it.
    struct RecordWatch {
        following: PathBuf,
        events: std::sync::atomic::AtomicU64,
        seen: std::sync::atomic::AtomicBool,
    }

    impl RecordWatch {
        fn look(&self) {
            self.events
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if std::fs::read_dir(&self.following).is_ok_and(|mut d| d.next().is_some()) {
                self.seen.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }

    impl crate::progress::Progress for RecordWatch {
        fn start(&self, _phase: &str, _total: u64, _unit: crate::progress::Unit) {
            self.look();
        }
        fn advance(&self, _amount: u64) {}
        fn finish(&self) {}
        fn phase(&self, _text: &str) {
            self.look();
        }
    }

    /// A rebase from a workspace with uncommitted changes records no move for it at any
    /// point (a kill while its status is computed would leave a record that blocks its
    /// commits and names edits as moved files), and leaves it alone.
    #[test]
    fn a_rebase_records_no_move_for_a_workspace_with_uncommitted_changes() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("f"), "f").unwrap();
        let mut store = Store::init(dir.path()).unwrap();
        let commit = |store: &mut Store| {
            crate::ops::commit::commit(
                store,
                &ws,
                &crate::ops::commit::CommitOptions::new("d"),
                &crate::progress::NoProgress,
            )
            .unwrap()
            .version
        };
        let base = commit(&mut store);
        std::fs::write(ws.join("g"), "ours").unwrap();
        let ours = commit(&mut store);
        // Theirs: another child of base, with base's tree.
        let mut theirs = store.catalog().version(&base).unwrap().unwrap().version;
        theirs.parent = Some(base);
        theirs.message = "theirs".into();
        let theirs_id = theirs.id();
        let writer = store.catalog_mut().writer().unwrap();
        writer.record_version(&theirs_id, &theirs).unwrap();
        writer.commit().unwrap();
        // An uncommitted edit.
        std::fs::write(ws.join("f"), "edited").unwrap();
        let watch = RecordWatch {
            following: store.root().join("following"),
            events: std::sync::atomic::AtomicU64::new(0),
            seen: std::sync::atomic::AtomicBool::new(false),
        };
        let mut options = RebaseOptions::new("theirs");
        options.workspace = Some(ws.clone());
        let report = rebase(&mut store, "d", &theirs_id, &options, &watch).unwrap();
        assert_ne!(report.head, Some(ours));
        let workspace = report.workspace.unwrap();
        assert_eq!(workspace.status, "dirty");
        assert!(watch.events.load(std::sync::atomic::Ordering::SeqCst) > 0);
        assert!(
            !watch.seen.load(std::sync::atomic::Ordering::SeqCst),
            "a move of the dirty workspace was recorded"
        );
        let key = std::fs::canonicalize(&ws)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert_eq!(interrupted_following(&store, &key).unwrap(), None);
        assert_eq!(std::fs::read(ws.join("f")).unwrap(), b"edited");
    }
}
