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
    /// With `rebase`: fetch, then only plan (no head moves, nothing recorded).
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
        rebase: None,
        workspace: None,
    })
}

/// `dsv pull`: [`prepare_remote_revision`], then a fast-forward of the local head to the
/// pulled version (no head, or the head is an ancestor) and the remote's tags of the dataset
/// that do not clash with local ones; then, with `options.rebase` and a local head that
/// has diverged, [`crate::ops::rebase::rebase`] onto the pulled version; when the head moved, the
/// workspace of `options.workspace` follows it if it held the old head and is clean
/// ([`crate::ops::rebase::follow_head`]). A dry run fetches and plans, and moves nothing.
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
    // A dry run moves no head: it fetches ONTO and plans the rebase. A real pull moves the
    // head when it can, and rebases when the lines diverged.
    let dry_rebase = options.rebase && options.dry_run;
    let mut report = if dry_rebase {
        prepare_remote_revision(store, target, None, options.requests, progress)?
    } else {
        fast_forward(store, target, &options.include, options.requests, progress)?
    };
    if dry_rebase || (options.rebase && matches!(report.head, Some(HeadUpdate::Diverged))) {
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
