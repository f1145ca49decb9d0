//! `dsv push`: whole local packs go up, then refs move by compare-and-swap. The shared
//! pieces (pack indexes, the ref cache, retries) are in [`super`].
//!
//! # push
//!
//! `push()`:
//!
//! 1. **Targets.** Every dataset's head, or the one revision given.
//! 2. **Refresh the pack indexes** (`refresh_indexes`, as in fetch step 2, [`super::fetch()`]): LIST `packs/` and
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
//! 6. **Record** the uploaded packs in `remote_packs` (one transaction, each pack's index read
//!    back from its file as it is recorded, so one index is in memory at a time). An uploaded
//!    pack is a local pack: its remote row shares the local index (`local_index`, see
//!    [`super`] "What the store records"), and only its objects that `objects` locates in
//!    another local pack get `remote_objects` rows.
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

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::{Transfer, is_ancestor, open, refresh_indexes, remote_ref, same_etag};
use crate::catalog::{RemoteRecord, RemoteRef};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::progress::{Progress, Unit};
use crate::remote::{RefName, RefState, Remote};
use crate::revision::Revision;
use crate::store::Store;
use crate::tree::{Reached, walk_reachable};

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

pub(super) fn record_ref(store: &mut Store, remote: i64, reference: &RemoteRef) -> Result<()> {
    let writer = store.catalog_mut().writer()?;
    writer.set_remote_ref(remote, reference)?;
    writer.commit()
}

/// A remote's refs as listed by one LIST request, read lazily: a ref whose ETag matches the
/// one recorded at the last fetch or push is not downloaded again.
pub(super) struct RemoteRefs<'a> {
    remote: &'a Remote,
    listed: Vec<(RefName, RefState)>,
    recorded: Vec<RemoteRef>,
}

impl<'a> RemoteRefs<'a> {
    pub(super) fn list(store: &Store, record: &RemoteRecord, remote: &'a Remote) -> Result<Self> {
        Ok(RemoteRefs {
            remote,
            listed: remote.list_refs()?,
            recorded: store.catalog().remote_refs(record.id)?,
        })
    }

    /// Every ref listed, with its state as listed.
    pub(super) fn listed(&self) -> &[(RefName, RefState)] {
        &self.listed
    }

    /// The version `name` names on the remote and its state, `None` when absent.
    pub(super) fn current(&self, name: &RefName) -> Result<Option<(ObjectId, RefState)>> {
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

/// Calls `need` for every object reachable from `version` that remote `remote` lacks (as
/// this store's record of its indexes says; `None`: a remote known to hold nothing, so every
/// object is needed without asking the catalog): the version, its provenance object, trees,
/// file maps and chunks, and the same for each parent until one the remote holds. A file's
/// outboard is needed where `has_outboard` says one exists; a file of several chunks
/// without one is handed to `lacking_outboard`. Trees and file maps are read from this
/// store (a push has them; a copy fetched them first).
///
/// # Errors
/// [`Error::MissingObject`] for metadata this store lacks; `need`'s errors.
pub(super) fn walk_missing_on(
    store: &Store,
    remote: Option<i64>,
    version: &ObjectId,
    has_outboard: &dyn Fn(&ObjectId) -> Result<bool>,
    lacking_outboard: &mut dyn FnMut(ObjectId),
    need: &mut dyn FnMut(ObjectId, ObjectKind) -> Result<()>,
) -> Result<()> {
    let catalog = store.catalog();
    let mut reader = store.reader();
    let holds = |id: &ObjectId, kind: ObjectKind| -> Result<bool> {
        match remote {
            Some(remote) => Ok(catalog.remote_locate(remote, id, kind)?.is_some()),
            None => Ok(false),
        }
    };
    let mut need = |id: &ObjectId, kind: ObjectKind| -> Result<()> {
        if !holds(id, kind)? {
            need(*id, kind)?;
        }
        Ok(())
    };
    let mut seen_trees = HashSet::new();
    let mut next = Some(*version);
    while let Some(id) = next {
        if holds(&id, ObjectKind::Version)? && id != *version {
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
                        if has_outboard(&id)? {
                            need(&id, ObjectKind::Outboard)?;
                        } else {
                            lacking_outboard(id);
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
    Ok(())
}

/// Every local pack holding an object reachable from `version` that `record`'s remote
/// lacks ([`walk_missing_on`]).
fn objects_to_send(
    store: &Store,
    record: &RemoteRecord,
    version: &ObjectId,
    lacking_outboards: &mut Vec<ObjectId>,
) -> Result<HashSet<ObjectId>> {
    let catalog = store.catalog();
    let mut packs = HashSet::new();
    walk_missing_on(
        store,
        Some(record.id),
        version,
        &|id| catalog.has_object(id, ObjectKind::Outboard),
        &mut |id| lacking_outboards.push(id),
        &mut |id, kind| {
            let location = catalog
                .locate(&id, kind)?
                .ok_or_else(|| Error::MissingObject {
                    id: id.to_hex(),
                    what: kind.name(),
                })?;
            packs.insert(location.frame.pack);
            Ok(())
        },
    )?;
    Ok(packs)
}

/// How to push ([`push`]).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct PushOptions {
    /// Overwrite remote heads and tags that are not ancestors of what is pushed (`--force`).
    pub force: bool,
    /// Requests in flight (default [`crate::remote::DEFAULT_JOBS`]).
    pub requests: usize,
}

impl Default for PushOptions {
    fn default() -> PushOptions {
        PushOptions {
            force: false,
            requests: crate::remote::DEFAULT_JOBS,
        }
    }
}

/// `dsv push`: uploads what the remote lacks for each dataset's head (or for `only`), then
/// moves the remote heads by compare-and-swap and creates the tags of the pushed versions.
///
/// A head moves only forward: if the remote's head is not an ancestor of the pushed version
/// the push is refused ([`Error::RemoteDiverged`]) unless `options.force`; the same error reports a
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
    options: &PushOptions,
    progress: &dyn Progress,
) -> Result<PushReport> {
    let PushOptions {
        force,
        requests: jobs,
    } = *options;
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
        && crate::ops::ingest::write_missing_outboards(store, &lacking_outboards)? > 0
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
