//! `dsv pull`, and the remote step of `dsv checkout REMOTE/NAME`
//! ([`prepare_remote_revision`]): the ref cache, a fetch when it misses, the chunks the
//! version lacks ([`super::fetch_missing`]), then a fast-forward (or rebase) of the head.
//!
//! # pull, and checkout of `REMOTE/NAME`
//!
//! `prepare_remote_revision()`, then:
//!
//! 1. **Ref cache.** For a head or a tag, one HEAD request on the ref (see "The ref
//!    cache" in [`super`]). On a hit nothing more is asked about refs or metadata; otherwise
//!    the whole remote is fetched ([`super::fetch()`]). For an id prefix no ref is consulted, and the
//!    remote is fetched only when the prefix matches no version recorded here.
//! 2. **Resolve** the revision against the recorded refs (or the recorded versions, for an id
//!    prefix), then follow `~N` along recorded parents.
//! 3. **Missing chunks** (`fetch_missing`). Walk the version's trees (local now); for each
//!    file, or with `--include` each file whose path matches a glob, list its chunk ids from
//!    its file map (`ObjectReader::chunk_ids`), and keep those this store lacks. Then ask the
//!    named remote first and the others in read order, each for what the ones before it
//!    did not serve, passing over a remote that fails ("Fallback" in
//!    `crate::transfer`): if the remote's recorded indexes lack any of the missing chunks,
//!    its pack indexes are refreshed first; then the frames holding the chunks are
//!    downloaded ("Downloading frames" in [`super`]). A file
//!    with neither its chunk nor its file map here (a map rejected by its proof) is asked for
//!    as a file map; when any map was asked for, one more round lists and fetches the chunks
//!    the new maps name. A chunk every remote missed is `MissingObject` (exit 5); when one
//!    failed and none served it, the first failure (`Error::RemotesFailed`).
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
//! `pull --dry-run` is [`plan`] (a [`PullPlan`]): the remote's refs read (one LIST, a GET of
//! each ref this store has not seen), then, from this store alone, the head's fate, the
//! chunks missing under `--include` with their bytes in the remote's recorded frames, and the
//! tags copied or kept. Nothing is downloaded or written; the head's fate and the chunks are
//! unknown while the version's metadata is not here. With `--rebase`, the rebase is planned
//! after fetching that metadata (steps 1 and 2 only) when this store lacks it.
//!
//! A checkout of a local revision in a store that has remotes runs step 3 for its version
//! (the remotes in read order) before checking out. With every chunk already here, it sends
//! no request.

use serde::Serialize;

use super::{Transfer, fetch_missing_under, fetch_with, is_ancestor, open, same_etag};
use crate::catalog::{RemoteRecord, RemoteRef};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::progress::Progress;
use crate::remote::RefName;
use crate::revision::{MIN_PREFIX, Revision};
use crate::store::Store;
use crate::transfer::RemoteRevision;
use crate::tree::{Reached, walk_reachable};

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
    /// True for `pull --dry-run`: nothing was downloaded or changed (with `--rebase`, only
    /// the metadata the rebase plan needs, when this store lacked it); `plan` says what a
    /// pull would do.
    pub dry_run: bool,
    /// `pull --dry-run`: what a pull would do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<PullPlan>,
    /// `pull --rebase` when the local head had diverged (or a dry run): the local versions
    /// replayed onto the pulled one, or the conflicts that stopped it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rebase: Option<crate::ops::rebase::RebaseReport>,
    /// The workspace of the caller's directory when it held the old head: checked out at
    /// the new head, or left alone because it has uncommitted changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<crate::ops::rebase::WorkspaceFollow>,
}

/// How to pull ([`pull`]).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct PullOptions {
    /// Only the files whose path matches one of these globs.
    pub include: Vec<String>,
    /// Requests in flight.
    pub requests: usize,
    /// When the local head has versions the pulled one lacks, replay them onto it
    /// ([`crate::ops::rebase::rebase`]) instead of keeping the local head.
    pub rebase: bool,
    /// Only plan ([`plan`]): download nothing, move no head, record nothing. With `rebase`,
    /// the rebase is planned too, after fetching the pulled version's metadata (no chunk)
    /// when this store lacks it.
    pub dry_run: bool,
    /// A directory whose workspace follows the head when it held the old one and is clean
    /// (the CLI passes the current directory).
    pub workspace: Option<std::path::PathBuf>,
    /// Parallel workers of the workspace's status and checkout.
    pub jobs: usize,
    /// With `rebase`: how paths both lines changed are settled.
    pub resolution: crate::ops::rebase::Resolution,
}

impl PullOptions {
    /// Plain pull options: everything, `requests` in flight, no rebase, no workspace.
    pub fn new(requests: usize) -> PullOptions {
        PullOptions {
            requests,
            jobs: crate::ops::checkout::CheckoutOptions::default().jobs,
            ..PullOptions::default()
        }
    }
}

/// Resolves `revision` against `record`'s refs as recorded (heads, tags) or the versions
/// this store knows (id prefixes), then walks `~N`.
pub(crate) fn resolve_remote(
    store: &Store,
    record: &RemoteRecord,
    revision: &Revision,
) -> Result<ObjectId> {
    let text = format!("{}/{revision}", record.name);
    let not_found = || Error::RevisionNotFound {
        closest: None,
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
/// [`Error::RevisionNotFound`]; as [`super::fetch()`] and [`super::fetch_missing`].
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
    transfer.add_moved(&got);
    transfer.requests = remote.requests() + got.requests;
    Ok(PullReport {
        remote: record.name.clone(),
        dataset: revision.dataset.clone(),
        version,
        ref_cache,
        head: None,
        transfer,
        dry_run: false,
        plan: None,
        rebase: None,
        workspace: None,
    })
}

/// `dsv pull`: [`prepare_remote_revision`], then a fast-forward of the local head to the
/// pulled version (no head, or the head is an ancestor) and the remote's tags of the dataset
/// that do not clash with local ones; then, with `options.rebase` and a local head that
/// has diverged, [`crate::ops::rebase::rebase`] onto the pulled version; when the head moved, the
/// workspace of `options.workspace` follows it if it held the old head and is clean
/// ([`crate::ops::rebase::follow_head`]). A dry run ([`plan`]) downloads nothing and changes nothing.
///
/// # Errors
/// As [`prepare_remote_revision`] and [`crate::ops::rebase::rebase`]. Conflicts are no error: the report's
/// `rebase` lists them, and nothing was changed.
pub fn pull(
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
    let mut rebase_options = crate::ops::rebase::RebaseOptions::new(onto_name);
    rebase_options.dry_run = options.dry_run;
    rebase_options.workspace = options.workspace.clone();
    rebase_options.jobs = options.jobs;
    rebase_options.requests = options.requests;
    rebase_options.resolution = options.resolution.clone();
    if options.dry_run {
        return dry_run(store, target, options, &rebase_options, progress);
    }
    // A real pull moves the head when it can, and rebases when the lines diverged.
    let mut report = fast_forward(store, target, &options.include, options.requests, progress)?;
    if options.rebase && matches!(report.head, Some(HeadUpdate::Diverged)) {
        report.rebase = Some(crate::ops::rebase::rebase(
            store,
            &report.dataset,
            &report.version,
            &rebase_options,
            progress,
        )?);
    } else if matches!(report.head, Some(HeadUpdate::Moved))
        && let (Some(dir), Some(old)) = (&options.workspace, old_head)
    {
        report.workspace = crate::ops::rebase::follow_head(
            store,
            dir,
            &dataset,
            &old,
            &report.version,
            &crate::ops::rebase::FollowOptions::new(options.jobs, options.requests),
            progress,
        )?;
    }
    Ok(report)
}

/// `pull --dry-run`: the [`plan`]'s report; with `--rebase`, the rebase planned too (the
/// pulled version's metadata fetched first when this store lacks it: the plan needs its trees).
fn dry_run(
    store: &mut Store,
    target: &RemoteRevision,
    options: &PullOptions,
    rebase_options: &crate::ops::rebase::RebaseOptions,
    progress: &dyn Progress,
) -> Result<PullReport> {
    let fetch_options = super::FetchOptions {
        requests: options.requests,
    };
    let planned = match plan(store, target, options) {
        // A revision only the remote's history resolves (`~N`, an id prefix) needs the
        // metadata here first: `--rebase` fetches it anyway, then plans again.
        Err(Error::RevisionNotFound { .. }) if options.rebase => {
            super::fetch(store, &target.remote, &fetch_options, progress)?;
            plan(store, target, options)?
        }
        planned => planned?,
    };
    let mut report = planned.report();
    if options.rebase {
        if !planned.metadata_here {
            let fetched = super::fetch(store, &target.remote, &fetch_options, progress)?;
            report.transfer = fetched.transfer;
        }
        report.rebase = Some(crate::ops::rebase::rebase(
            store,
            &report.dataset,
            &report.version,
            rebase_options,
            progress,
        )?);
    }
    Ok(report)
}

/// Each `--include` pattern (`include`, compiled: `globs`) must select a file of `version`:
/// a typo is an error, not an empty pull.
fn check_include(
    store: &Store,
    target: &RemoteRevision,
    version: &ObjectId,
    include: &[String],
    globs: &globset::GlobSet,
) -> Result<()> {
    let mut matched = vec![false; include.len()];
    let mut reader = store.reader();
    let root = reader.version(version)?.tree;
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
    )
}

/// [`prepare_remote_revision`], then moves the local head of the dataset to the pulled
/// version when that is a fast-forward (the local head is absent or an ancestor), and copies
/// the remote's tags of the dataset that do not clash with local ones.
fn fast_forward(
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
        check_include(store, target, &report.version, include, globs)?;
    }
    let record = store.catalog().remote(&target.remote)?;
    let _lock = store.lock_head_alone()?;
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

/// What `pull` would do with one tag of the remote's dataset ([`PullPlan::tags`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TagAction {
    /// No local tag of that name: the pull copies it.
    Copy,
    /// A local tag of that name exists: left as it is.
    Kept,
}

/// One tag of the remote's dataset and what a pull does with it.
#[derive(Debug, Clone, Serialize)]
pub struct PlannedTag {
    /// The tag.
    pub tag: String,
    /// The version it names on the remote.
    pub version: ObjectId,
    /// Copied, or kept as this store has it.
    pub action: TagAction,
}

/// What `dsv pull` would do, decided by [`plan`] from the remote's refs (read) and what this
/// store holds, changing nothing: no pack, no ref, no catalog row written, no workspace
/// touched. `pull --dry-run` renders it.
#[derive(Debug, Clone, Serialize)]
pub struct PullPlan {
    /// The remote.
    pub remote: String,
    /// The dataset.
    pub dataset: String,
    /// The version a pull would pull (the remote's ref as read now).
    pub version: ObjectId,
    /// `hit`: the recorded ref is current and its version here, a pull asks nothing more
    /// about refs; `refresh`: a pull fetches refs and metadata first; `not-a-ref`: an id.
    pub ref_cache: RefCache,
    /// Whether this store holds the version's metadata (trees, file maps): when not, a pull
    /// fetches it first, and what the head does and which chunks come are known only then.
    pub metadata_here: bool,
    /// What a pull does to the local head: `moved` (none, or an ancestor of the version),
    /// `up-to-date`, `diverged` (kept; `--rebase` replays it); `None` when the version is not
    /// here and a local head exists (known once its metadata is fetched).
    pub head: Option<HeadUpdate>,
    /// Chunks (and file maps) of the version, under `--include`, that this store lacks;
    /// `None` when the metadata is not here.
    pub missing_objects: Option<u64>,
    /// Bytes of the remote's frames holding them and the bases of their delta frames that
    /// this store lacks, as this store last recorded the remote's indexes (neighbouring
    /// frames a fetch merges add the gaps between them); `None` when the metadata is not
    /// here.
    pub missing_bytes: Option<u64>,
    /// Of `missing_objects`, those the recorded indexes do not locate (a pull refreshes the
    /// remote's indexes first, or asks the other remotes).
    pub unlocated_objects: Option<u64>,
    /// The remote's tags of the dataset, each copied or kept.
    pub tags: Vec<PlannedTag>,
    /// Requests made to plan (a LIST of the refs, a GET of each ref this store has not
    /// seen, a HEAD of the pulled ref).
    pub requests: u64,
}

/// Decides what `pull` would do (see [`PullPlan`]): reads the remote's refs (one LIST, a GET
/// of each this store has not seen) and this store's catalog, trees and file maps; writes
/// nothing, here or on the remote.
///
/// # Errors
/// [`Error::RevisionNotFound`] when the remote has no such ref (or an id prefix or `~N`
/// this store cannot resolve: `dsv fetch` first); [`Error::Remote`]; as
/// `crate::read::glob_set` for a bad `--include`, and, when the metadata is here, as a
/// pull for a pattern that selects no file.
pub fn plan(store: &Store, target: &RemoteRevision, options: &PullOptions) -> Result<PullPlan> {
    let _data = store.lock_data_shared()?;
    let (record, remote) = open(store, &target.remote)?;
    let revision = &target.revision;
    let refs = super::push::RemoteRefs::list(store, &record, &remote)?;
    let by_name = crate::id::is_hex_prefix(&revision.base) && revision.base.len() >= MIN_PREFIX;
    let (version, ref_cache) = if by_name && revision.base != "latest" {
        (resolve_remote(store, &record, revision)?, RefCache::NotARef)
    } else {
        let name = RefName {
            dataset: revision.dataset.clone(),
            tag: (revision.base != "latest").then(|| revision.base.clone()),
        };
        let not_found = || Error::RevisionNotFound {
            closest: None,
            revision: format!("{}/{revision}", record.name),
        };
        let (mut id, state) = refs.current(&name)?.ok_or_else(not_found)?;
        let stored = store
            .catalog()
            .remote_ref(record.id, &name.dataset, name.tag.as_deref())?;
        let hit = stored.is_some_and(|s| {
            s.version == id
                && same_etag(s.etag.as_deref(), state.etag.as_deref())
                && s.last_modified == state.last_modified
        }) && store.catalog().version(&id)?.is_some();
        for _ in 0..revision.ancestors {
            id = store
                .catalog()
                .version(&id)?
                .and_then(|r| r.version.parent)
                .ok_or_else(not_found)?;
        }
        let cache = if hit {
            RefCache::Hit
        } else {
            RefCache::Refresh
        };
        (id, cache)
    };
    let metadata_here = store.catalog().version(&version)?.is_some();
    let head = match store.catalog().head_or_none(&revision.dataset)? {
        None => Some(HeadUpdate::Moved),
        Some(head) if head == version => Some(HeadUpdate::UpToDate),
        Some(_) if !metadata_here => None,
        Some(head) if is_ancestor(store, &head, &version)? => Some(HeadUpdate::Moved),
        Some(_) => Some(HeadUpdate::Diverged),
    };
    let (missing_objects, missing_bytes, unlocated_objects) = if metadata_here {
        let globs = (!options.include.is_empty())
            .then(|| crate::read::glob_set(&options.include))
            .transpose()?;
        if let Some(globs) = &globs {
            check_include(store, target, &version, &options.include, globs)?;
        }
        let missing = crate::transfer::missing_chunks(store, &[version], globs.as_ref())?;
        let (bytes, unlocated) = located_bytes(store, record.id, &missing)?;
        (Some(missing.len() as u64), Some(bytes), Some(unlocated))
    } else {
        (None, None, None)
    };
    let mut tags = Vec::new();
    for (name, _) in refs.listed() {
        let (Some(tag), true) = (&name.tag, name.dataset == revision.dataset) else {
            continue;
        };
        let Some((named, _)) = refs.current(name)? else {
            continue;
        };
        let kept = store.catalog().tag(&revision.dataset, tag)?.is_some();
        tags.push(PlannedTag {
            tag: tag.clone(),
            version: named,
            action: if kept {
                TagAction::Kept
            } else {
                TagAction::Copy
            },
        });
    }
    Ok(PullPlan {
        remote: record.name.clone(),
        dataset: revision.dataset.clone(),
        version,
        ref_cache,
        metadata_here,
        head,
        missing_objects,
        missing_bytes,
        unlocated_objects,
        tags,
        requests: remote.requests(),
    })
}

/// The stored bytes of the distinct remote frames (as recorded) holding `objects` and the
/// bases of their delta frames that this store lacks, and how many of `objects` the
/// recorded indexes do not locate.
fn located_bytes(
    store: &Store,
    remote: i64,
    objects: &[(ObjectId, crate::object::ObjectKind)],
) -> Result<(u64, u64)> {
    let mut unlocated = 0;
    for (id, kind) in objects {
        if store.catalog().remote_locate(remote, id, *kind)?.is_none() {
            unlocated += 1;
        }
    }
    // The frames a pull downloads: those holding the objects, and the bases of their deltas.
    let frames = crate::transfer::frames_of(store.catalog(), remote, objects)?;
    let bytes = frames
        .values()
        .map(|(frame, ..)| u64::from(frame.stored_length))
        .sum();
    Ok((bytes, unlocated))
}

impl PullPlan {
    /// The plan as `pull --dry-run` reports it: the version, the ref cache and the head as a
    /// pull would leave them, nothing downloaded.
    pub fn report(&self) -> PullReport {
        PullReport {
            remote: self.remote.clone(),
            dataset: self.dataset.clone(),
            version: self.version,
            ref_cache: self.ref_cache,
            head: self.head,
            transfer: Transfer {
                requests: self.requests,
                ..Transfer::default()
            },
            dry_run: true,
            plan: Some(self.clone()),
            rebase: None,
            workspace: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::ops::commit::{CommitOptions, commit};
    use crate::ops::sync::{FetchOptions, PushOptions, add_remote, fetch, push};
    use crate::progress::NoProgress;

    fn commit_file(store: &mut Store, dir: &Path, name: &str, size: usize, tag: Option<&str>) {
        let data = dir.join("data");
        std::fs::create_dir_all(&data).unwrap();
        let bytes: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(data.join(name), bytes).unwrap();
        let mut options = CommitOptions::new("ds");
        options.tag = tag.map(str::to_string);
        commit(store, &data, &options, &NoProgress).unwrap();
    }

    /// The store's files that a plan must leave alone: the pack files, and the catalog's rows
    /// a pull writes (heads, tags, recorded refs and packs).
    fn state(store: &Store) -> (usize, Vec<String>) {
        let packs = std::fs::read_dir(store.packs_dir()).unwrap().count();
        let catalog = store.catalog();
        let mut rows: Vec<String> = catalog
            .datasets()
            .unwrap()
            .into_iter()
            .map(|d| format!("{}={:?}", d.name, d.head))
            .collect();
        for remote in catalog.remotes().unwrap() {
            rows.push(format!("{:?}", catalog.remote_refs(remote.id).unwrap()));
            let mut packs: Vec<ObjectId> = catalog
                .remote_packs(remote.id)
                .unwrap()
                .into_iter()
                .collect();
            packs.sort();
            rows.push(format!("{packs:?}"));
        }
        rows.push(format!("{:?}", catalog.tag("ds", "v2").unwrap()));
        (packs, rows)
    }

    /// Each decision of the pull plan, against a file:// remote: a version whose metadata is
    /// not here (the head's fate unknown, a tag to copy), the same once fetched (moved, the
    /// chunks to download), after the pull (up to date, nothing missing, the tag kept), and a
    /// local head with versions of its own (diverged). No plan changes the store.
    #[test]
    fn a_pull_plan_decides_the_head_chunks_and_tags_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let remote_dir = dir.path().join("remote");
        std::fs::create_dir_all(&remote_dir).unwrap();
        let url = format!("file://{}", remote_dir.display());
        let mut alice = Store::init(&dir.path().join("alice")).unwrap();
        let mut bob = Store::init(&dir.path().join("bob")).unwrap();
        add_remote(&mut alice, "origin", &url, &Default::default()).unwrap();
        add_remote(&mut bob, "origin", &url, &Default::default()).unwrap();
        let push_options = PushOptions {
            force: false,
            requests: 2,
        };
        commit_file(&mut alice, dir.path(), "a", 100_000, None);
        push(&mut alice, "origin", &[], &push_options, &NoProgress).unwrap();
        let target = RemoteRevision::parse("origin/ds").unwrap().unwrap();
        let options = PullOptions::new(2);
        pull(&mut bob, &target, &options, &NoProgress).unwrap();
        commit_file(&mut alice, dir.path(), "b", 300_000, Some("v2"));
        push(&mut alice, "origin", &[], &push_options, &NoProgress).unwrap();

        let before = state(&bob);
        let unknown = plan(&bob, &target, &options).unwrap();
        assert_eq!(state(&bob), before, "planning changed the store");
        assert_eq!(unknown.ref_cache, RefCache::Refresh);
        assert!(!unknown.metadata_here);
        assert_eq!(unknown.head, None);
        assert_eq!(unknown.missing_objects, None);
        assert_eq!(unknown.tags.len(), 1);
        assert_eq!(unknown.tags[0].action, TagAction::Copy);

        fetch(&mut bob, "origin", &FetchOptions::default(), &NoProgress).unwrap();
        let before = state(&bob);
        let known = plan(&bob, &target, &options).unwrap();
        assert_eq!(state(&bob), before, "planning changed the store");
        assert_eq!(known.version, unknown.version);
        assert_eq!(known.ref_cache, RefCache::Hit);
        assert_eq!(known.head, Some(HeadUpdate::Moved));
        assert!(known.missing_objects.unwrap() > 0);
        assert_eq!(known.unlocated_objects, Some(0));
        assert!(known.missing_bytes.unwrap() > 0);

        let pulled = pull(&mut bob, &target, &options, &NoProgress).unwrap();
        assert_eq!(pulled.head, known.head);
        let done = plan(&bob, &target, &options).unwrap();
        assert_eq!(done.head, Some(HeadUpdate::UpToDate));
        assert_eq!(done.missing_objects, Some(0));
        assert_eq!(done.tags[0].action, TagAction::Kept);

        // Bob's own version beside the remote's: diverged.
        commit_file(&mut bob, dir.path(), "c", 10, None);
        let diverged = plan(&bob, &target, &options).unwrap();
        assert_eq!(diverged.head, Some(HeadUpdate::Diverged));
    }
}
