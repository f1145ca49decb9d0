//! `dsv push`: whole local packs go up, then refs move by compare-and-swap. The shared
//! pieces (pack indexes, the ref cache, retries) are in [`super`].
//!
//! # push
//!
//! `push()`:
//!
//! 1. **Targets.** Every dataset's head, or the revisions given (one per dataset).
//! 2. **The writer's view** (`transfer::writer_view`): GET the `format` key (a newer format
//!    than this dsv knows is `Error::RemoteFormatTooNew`), LIST `marks/`, then refresh the
//!    pack indexes as in fetch step 2 ([`super::fetch()`]) without the marked packs: LIST
//!    `packs/` and GET each `.idx` not seen yet (all of them again when a recorded pack is
//!    gone or marked), so the store knows what the remote holds now and may rely on.
//! 3. **Check every head first.** One LIST of `refs/` gives every ref's ETag (`RemoteRefs`);
//!    a ref whose ETag equals the one recorded here is taken from the catalog, any other is
//!    read with a GET. For each target, if the remote head is neither the version pushed nor
//!    an ancestor of it (following parents in this store's version table), that dataset is
//!    refused (`behind` when the pushed version is an ancestor of the remote's head, else
//!    `diverged`; the CLI exits 4) and left out of the push, unless `--force`; the other
//!    datasets are pushed.
//! 4. **Walk** (`objects_to_send`). For each target whose remote head differs (on a collected
//!    remote, one with a `format` key, every target: its tags may be created, and the remote
//!    keeps data only while a ref names it): from the version back along its parents,
//!    stopping at the first older version the remote holds (on a collected remote, all of
//!    them: a version object there says nothing of its data), every version, its provenance object if it has one, tree (each distinct tree once), file
//!    map (files of two or more chunks) and chunk. Each object the remote's recorded indexes
//!    lack (or hold only in marked packs) is located locally
//!    (`Catalog::locate`), and the pack holding it is added to the set to upload. An object
//!    this store lacks is `MissingObject`.
//!
//!    **Closures** (a delta is never stored anywhere without its bases): a chunk the remote
//!    holds in a delta frame needs that frame's bases there too (transitively, through the
//!    remote's recorded frames), and every delta frame of every pack to upload (a pack goes
//!    up whole, frames of other versions included) needs its bases (read from the pack's
//!    index). Each base the remote holds is relied on; each it lacks adds the local pack
//!    holding it, whose delta frames are then examined in turn, until no pack is added
//!    (`close_over_bases`).
//! 5. **Upload** (`Remote::put_packs`), `jobs` packs at a time. For each pack, the local index
//!    is read and checked again (`read_tail`). When a pack to upload holds a delta frame
//!    (pack format 2), the remote's `format` key is first raised to 3 (`FORMAT_DELTAS`, a
//!    compare-and-swap, the guard pack written first; a remote at 3 already is left alone):
//!    a dsv that knows only remote format 2 then refuses to write there
//!    (`RemoteFormatTooNew`), and one older still stops on the guard pack or on the `.idx`
//!    end magic `DSVPEND2`. A remote whose key appears this way counts as collected for
//!    the rest of the push (step 7 walks again). A pack smaller than `MULTIPART_THRESHOLD`
//!    (32 MiB) goes up in one create-only PUT; a larger one as a multipart upload in parts
//!    of `PART_SIZE` (8 MiB), `PARTS_IN_FLIGHT` (4) parts at a time. Then its `.idx` (the
//!    pack's tail) goes up with a create-only PUT, so the `.idx` appears only once the pack
//!    is complete. Progress counts each pack's bytes when it is done.
//! 6. **Record** the uploaded packs in `remote_packs` (one transaction, each pack's index read
//!    back from its file as it is recorded, so one index is in memory at a time). An uploaded
//!    pack is a local pack: its remote row shares the local index (`local_index`, see
//!    [`super`] "What the store records"), and only its objects that `objects` locates in
//!    another local pack get `remote_objects` rows. A local pack whose id the remote has
//!    marked goes up as a fresh copy (`fresh_copy`: its frames and one extra unreferenced
//!    chunk, so another id) from a temporary directory.
//! 7. **Re-check the marks** (`WriterView::recheck`): GET `format`, LIST `marks/`. If a
//!    remote pack the push relies on (holding an object it did not send, or one it sent) is
//!    marked now, the store forgets it and steps 4 to 6 run again for what it held (at most
//!    `MAX_SEND_ROUNDS`, then `Error::RemoteCollected`, exit 4, no ref moved).
//! 8. **Move refs**, one dataset at a time (before each ref, a view older than half the
//!    remote's grace is checked again: `Error::RemoteCollected` if a relied-on pack was
//!    marked). A head that names the pushed version is left
//!    alone (`up-to-date`). A head that is an ancestor is moved by compare-and-swap with the
//!    ETag (and object version) read in step 3 (`updated`); a missing head is created with a
//!    create-only put (`created`); with `--force`, a head that is not an ancestor is
//!    overwritten unconditionally (`forced`). A compare-and-swap that fails (another writer
//!    moved the ref after step 3) refuses that dataset (`diverged`, its tags left alone),
//!    and the next dataset's refs move. Then each local tag of the
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

use super::{Transfer, is_ancestor, open, remote_ref, same_etag};
use crate::catalog::{RemoteRecord, RemoteRef};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::pack::format::Compression;
use crate::progress::{Progress, Unit};
use crate::remote::{RefName, RefState, Remote};
use crate::revision::Revision;
use crate::store::Store;
use crate::transfer::{WriterView, fresh_copy, writer_view};
use crate::tree::{Reached, walk_reachable};

/// One dataset's ref after a push.
#[derive(Debug, Clone, Serialize)]
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

/// One dataset's outcome of a push.
#[derive(Debug, Serialize)]
pub struct PushedDataset {
    /// The dataset.
    pub dataset: String,
    /// The version pushed (its head here, or the revision given).
    pub version: ObjectId,
    /// The version the remote's head named before the push, if it had one.
    pub previous: Option<ObjectId>,
    /// `pushed` (the head created or moved, or a tag created or moved), `up-to-date` (the
    /// remote had the head and every tag already), `behind` (refused: the remote's head is
    /// newer on the same line), or `diverged` (refused: the remote has versions of the
    /// dataset this store lacks, or another writer moved its head during the push).
    pub status: &'static str,
    /// Why it was refused (`behind`, `diverged`); `None` otherwise.
    pub error: Option<String>,
    /// What to do about a refusal; `None` otherwise.
    pub hint: Option<String>,
}

impl PushedDataset {
    /// True when the push of this dataset was refused (nothing of it moved on the remote).
    pub fn refused(&self) -> bool {
        matches!(self.status, "behind" | "diverged")
    }

    fn refused_by(
        dataset: &str,
        version: ObjectId,
        previous: Option<ObjectId>,
        error: &Error,
    ) -> Self {
        PushedDataset {
            dataset: dataset.to_string(),
            version,
            previous,
            status: if matches!(error, Error::PushBehind { .. }) {
                "behind"
            } else {
                "diverged"
            },
            error: Some(error.to_string()),
            hint: error.hints().into_iter().next(),
        }
    }
}

/// The outcome of `dsv push`.
#[derive(Debug, Serialize)]
pub struct PushReport {
    /// The remote.
    pub remote: String,
    /// Each dataset pushed (or refused), in the order of the targets: by name, or the
    /// revisions' order.
    pub datasets: Vec<PushedDataset>,
    /// How many datasets were refused (`behind` or `diverged`).
    pub refused: u64,
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

/// Calls `need` for every object reachable from `version` that remote `remote` lacks as
/// `view` sees it (an object only in packs a `gc --remote` marked is lacking:
/// `transfer::writer_view`): the version, its provenance object, trees, file maps and
/// chunks, and the same for each parent: every parent on a collected remote
/// ([`WriterView::collected`]: it keeps a version's data only while a ref reaches it, so a
/// version object there says nothing of its trees and chunks), else until one it holds.
/// The remote packs holding what is not handed to `need` go into `relied`. A file's outboard is needed where `has_outboard` says one exists; a
/// file of several chunks without one is handed to `lacking_outboard`. Trees and file maps
/// are read from this store (a push has them; a copy fetched them first).
///
/// # Errors
/// [`Error::MissingObject`] for metadata this store lacks; `need`'s errors.
pub(super) fn walk_missing_on(
    store: &Store,
    on: &mut WalkedRemote<'_>,
    version: &ObjectId,
    has_outboard: &dyn Fn(&ObjectId) -> Result<bool>,
    lacking_outboard: &mut dyn FnMut(ObjectId),
    need: &mut dyn FnMut(ObjectId, ObjectKind) -> Result<()>,
) -> Result<()> {
    let (view, remote, relied) = (on.view, on.remote, &mut *on.relied);
    let held_deltas = &mut on.held_deltas;
    let catalog = store.catalog();
    let mut reader = store.reader();
    let mut holds = |id: &ObjectId, kind: ObjectKind| -> Result<bool> {
        match view.locate_frame(catalog, remote, id, kind)? {
            Some(location) => {
                relied.insert(location.pack);
                // Held as a delta: its bases must be there too (`close_over_bases`).
                if location.frame.compression == Compression::Delta {
                    held_deltas.push(*id);
                }
                Ok(true)
            }
            None => Ok(false),
        }
    };
    let mut need = |holds: &mut dyn FnMut(&ObjectId, ObjectKind) -> Result<bool>,
                    id: &ObjectId,
                    kind: ObjectKind|
     -> Result<()> {
        if !holds(id, kind)? {
            need(*id, kind)?;
        }
        Ok(())
    };
    let mut seen_trees = HashSet::new();
    let mut next = Some(*version);
    while let Some(id) = next {
        if !view.collected() && id != *version && holds(&id, ObjectKind::Version)? {
            break;
        }
        need(&mut holds, &id, ObjectKind::Version)?;
        let version = reader.version(&id)?;
        if let Some(provenance) = &version.provenance {
            need(&mut holds, provenance, ObjectKind::Provenance)?;
        }
        walk_reachable(
            &mut reader,
            &version.tree,
            Some(&mut seen_trees),
            &mut |reached| match reached {
                Reached::Tree(tree) => need(&mut holds, &tree, ObjectKind::Tree),
                Reached::File { id, chunks, .. } => {
                    if chunks.len() > 1 {
                        need(&mut holds, &id, ObjectKind::FileMap)?;
                        // An outboard travels where there is one (a store made before
                        // outboards has none until `dsv repair` writes them).
                        if has_outboard(&id)? {
                            need(&mut holds, &id, ObjectKind::Outboard)?;
                        } else {
                            lacking_outboard(id);
                        }
                    }
                    chunks
                        .iter()
                        .try_for_each(|chunk| need(&mut holds, chunk, ObjectKind::Chunk))
                }
            },
        )?;
        next = version.parent;
    }
    Ok(())
}

/// The remote a [`walk_missing_on`] walks against: what it holds as a writer sees it, and
/// the packs of it the walk relies on (those holding what it does not hand to `need`).
pub(super) struct WalkedRemote<'a> {
    /// The writer's view of the remote.
    pub(super) view: &'a WriterView,
    /// The remote's catalog id.
    pub(super) remote: i64,
    /// Remote packs relied on, added to by the walk.
    pub(super) relied: &'a mut HashSet<ObjectId>,
    /// Chunks the walk found on the remote in delta frames, added to by the walk: the
    /// caller makes sure their bases are there too ([`close_over_bases`]).
    pub(super) held_deltas: Vec<ObjectId>,
}

impl<'a> WalkedRemote<'a> {
    /// A walk against remote `remote` as `view` sees it, relying on packs into `relied`.
    pub(super) fn new(
        view: &'a WriterView,
        remote: i64,
        relied: &'a mut HashSet<ObjectId>,
    ) -> Self {
        WalkedRemote {
            view,
            remote,
            relied,
            held_deltas: Vec::new(),
        }
    }
}

/// Makes sure the remote `on` walks will hold every chunk of `roots` with its bases,
/// transitively (a delta is never stored anywhere without its bases): each chunk the remote
/// holds (as `on.view` sees it) is relied on, and if it is a delta there, its bases there
/// are visited; each chunk it lacks is handed to `need` (the caller sends it), and its bases
/// where the caller will send it from (`source_bases`: empty for a plain frame) are visited.
/// `seen` carries the chunks visited across calls.
///
/// # Errors
/// [`Error::Catalog`]; `need`'s and `source_bases`' errors.
pub(super) fn close_over_bases(
    catalog: &crate::catalog::Catalog,
    on: &mut WalkedRemote<'_>,
    roots: impl IntoIterator<Item = ObjectId>,
    seen: &mut HashSet<ObjectId>,
    source_bases: &mut dyn FnMut(&ObjectId) -> Result<Vec<ObjectId>>,
    need: &mut dyn FnMut(ObjectId) -> Result<()>,
) -> Result<()> {
    let mut pending: Vec<ObjectId> = roots.into_iter().collect();
    while let Some(id) = pending.pop() {
        if !seen.insert(id) {
            continue;
        }
        match on
            .view
            .locate_frame(catalog, on.remote, &id, ObjectKind::Chunk)?
        {
            Some(location) => {
                on.relied.insert(location.pack);
                if location.frame.compression == Compression::Delta {
                    pending.extend(catalog.remote_frame_bases(location.frame_row)?);
                }
            }
            None => {
                need(id)?;
                pending.extend(source_bases(&id)?);
            }
        }
    }
    Ok(())
}

/// Every local pack holding an object reachable from `version` that `record`'s remote lacks
/// as `view` sees it (an object only in marked packs is lacking), through every parent
/// ([`walk_missing_on`]). The remote packs holding the rest go into `relied`.
fn objects_to_send(
    store: &Store,
    record: &RemoteRecord,
    view: &WriterView,
    version: &ObjectId,
    lacking_outboards: &mut Vec<ObjectId>,
    relied: &mut HashSet<ObjectId>,
) -> Result<HashSet<ObjectId>> {
    let catalog = store.catalog();
    let mut packs = HashSet::new();
    let mut on = WalkedRemote::new(view, record.id, relied);
    // The local pack holding an object the remote lacks.
    let pack_of = |id: ObjectId, kind: ObjectKind| -> Result<ObjectId> {
        let location = catalog
            .locate(&id, kind)?
            .ok_or_else(|| Error::MissingObject {
                id: id.to_hex(),
                what: kind.name(),
            })?;
        Ok(location.frame.pack)
    };
    walk_missing_on(
        store,
        &mut on,
        version,
        &|id| catalog.has_object(id, ObjectKind::Outboard),
        &mut |id| lacking_outboards.push(id),
        &mut |id, kind| {
            packs.insert(pack_of(id, kind)?);
            Ok(())
        },
    )?;
    // Closures: the bases of every delta the remote relies on or receives must be there or
    // go with it. Chunks held there as deltas first; then every delta frame of every pack
    // sent (whole packs go up, with frames of other versions too), until no pack is added.
    let mut seen = HashSet::new();
    let held = std::mem::take(&mut on.held_deltas);
    close_over_bases(
        catalog,
        &mut on,
        held,
        &mut seen,
        &mut |_| Ok(Vec::new()),
        &mut |id| {
            packs.insert(pack_of(id, ObjectKind::Chunk)?);
            Ok(())
        },
    )?;
    let mut examined = HashSet::new();
    loop {
        let unexamined: Vec<ObjectId> = packs
            .iter()
            .filter(|pack| !examined.contains(*pack))
            .copied()
            .collect();
        if unexamined.is_empty() {
            break;
        }
        for pack in unexamined {
            examined.insert(pack);
            let bases = local_pack_bases(store, &pack)?;
            close_over_bases(
                catalog,
                &mut on,
                bases,
                &mut seen,
                // A base sent goes up in its local pack, examined in the next round.
                &mut |_| Ok(Vec::new()),
                &mut |id| {
                    packs.insert(pack_of(id, ObjectKind::Chunk)?);
                    Ok(())
                },
            )?;
        }
    }
    Ok(packs)
}

/// True when the local pack at `path` holds a delta frame (pack format 2), read from its
/// index.
///
/// # Errors
/// [`Error::Io`], [`Error::Corrupt`] for a pack whose index does not check.
fn has_delta_frames(path: &std::path::Path) -> Result<bool> {
    let file = crate::store_file::open_read(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(!crate::pack::reader::read_index(&file, path)?
        .deltas
        .is_empty())
}

/// Every base chunk the delta frames of local pack `pack` name (read from its index).
///
/// # Errors
/// [`Error::Io`], [`Error::Corrupt`] for a pack whose index does not check.
fn local_pack_bases(store: &Store, pack: &ObjectId) -> Result<Vec<ObjectId>> {
    let path = crate::pack::writer::pack_path(&store.packs_dir(), pack);
    let file = crate::store_file::open_read(&path).map_err(|source| Error::Io {
        path: path.clone(),
        source,
    })?;
    let index = crate::pack::reader::read_index(&file, &path)?;
    Ok(index
        .deltas
        .into_iter()
        .flat_map(|frame| frame.bases)
        .collect())
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

/// `dsv push`: uploads what the remote lacks for each dataset's head (or for the revisions
/// `only` names, at most one per dataset; empty: every dataset's head), then moves the
/// remote heads by compare-and-swap and creates the tags of the pushed versions.
///
/// Each dataset is pushed on its own. A head moves only forward: if the remote's head is
/// not an ancestor of the pushed version, that dataset is refused (reported `behind` or
/// `diverged` in [`PushReport::datasets`], with the error and its hint) unless
/// `options.force`, and the others are pushed; a race lost to another writer on a head
/// refuses that dataset the same way. Data is uploaded before any ref moves, so a ref never
/// names a version whose objects the remote lacks; an interrupted push leaves only
/// unreferenced packs, and a re-run skips them.
///
/// # Errors
/// [`Error::InvalidRevision`] for two revisions of one dataset, [`Error::Remote`],
/// [`Error::MissingObject`] (a version whose data this store does not hold), revision
/// errors, [`Error::RemoteCollected`], [`Error::Interrupted`].
pub fn push(
    store: &mut Store,
    name: &str,
    only: &[Revision],
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
    let targets = push_targets(store, only)?;
    let view = writer_view(store, &record, &remote, jobs)?;
    let remote_refs = RemoteRefs::list(store, &record, &remote)?;
    let mut session = PushSession {
        record: &record,
        remote: &remote,
        view,
        jobs,
        force,
        relied: HashSet::new(),
    };
    // Check every head first: a dataset refused uploads nothing.
    let (plans, mut datasets) = session.check_heads(store, &remote_refs, &targets)?;
    let mut transfer = session.send_all(store, &plans, progress)?;
    progress.phase("moving the remote's refs");
    let mut refs = Vec::new();
    for plan in plans {
        datasets.push(session.move_dataset(store, &remote_refs, plan, &mut refs)?);
    }
    // In the targets' order.
    datasets.sort_by_key(|d| targets.iter().position(|(name, _)| *name == d.dataset));
    transfer.requests = remote.requests();
    Ok(PushReport {
        remote: record.name.clone(),
        refused: datasets.iter().filter(|d| d.refused()).count() as u64,
        datasets,
        refs,
        transfer,
    })
}

/// The datasets a push moves, each with its version: every dataset's head, or the
/// revisions `only` names (at most one per dataset).
fn push_targets(store: &Store, only: &[Revision]) -> Result<Vec<(String, ObjectId)>> {
    if only.is_empty() {
        return Ok(store
            .catalog()
            .datasets()?
            .into_iter()
            .filter_map(|d| d.head.map(|head| (d.name, head)))
            .collect());
    }
    let mut targets: Vec<(String, ObjectId)> = Vec::new();
    for revision in only {
        if targets
            .iter()
            .any(|(dataset, _)| *dataset == revision.dataset)
        {
            return Err(Error::InvalidRevision {
                revision: revision.to_string(),
                reason: format!(
                    "a second revision of dataset {:?}: a push moves its head to one version",
                    revision.dataset
                ),
            });
        }
        targets.push((revision.dataset.clone(), revision.resolve(store.catalog())?));
    }
    Ok(targets)
}

/// A push under way: the remote, a writer's view of it, the settings, and the packs of the
/// remote it relies on (objects it did not send, packs it sent).
struct PushSession<'a> {
    record: &'a RemoteRecord,
    remote: &'a Remote,
    view: WriterView,
    jobs: usize,
    force: bool,
    relied: HashSet<ObjectId>,
}

impl PushSession<'_> {
    /// Every target's head checked against the remote's, before any byte moves: a head that
    /// is the version or an ancestor of it (or any, with `force`) is planned; any other
    /// refuses its dataset (`behind` when the version is an ancestor of the remote's head,
    /// else `diverged`).
    fn check_heads(
        &self,
        store: &Store,
        remote_refs: &RemoteRefs<'_>,
        targets: &[(String, ObjectId)],
    ) -> Result<(Vec<Plan>, Vec<PushedDataset>)> {
        let mut plans = Vec::new();
        let mut refused = Vec::new();
        for (dataset, version) in targets {
            let ref_name = RefName {
                dataset: dataset.clone(),
                tag: None,
            };
            let current = remote_refs.current(&ref_name)?;
            if let Some((remote_head, _)) = &current
                && remote_head != version
                && !is_ancestor(store, remote_head, version)?
                && !self.force
            {
                // On one line, only older: say so (pulling would not help).
                let error = if is_ancestor(store, version, remote_head)? {
                    Error::PushBehind {
                        remote: self.record.name.clone(),
                        dataset: dataset.clone(),
                        version: version.short(),
                    }
                } else {
                    Error::RemoteDiverged {
                        remote: self.record.name.clone(),
                        dataset: dataset.clone(),
                    }
                };
                let head = Some(*remote_head);
                refused.push(PushedDataset::refused_by(dataset, *version, head, &error));
                continue;
            }
            plans.push((ref_name, *version, current));
        }
        Ok((plans, refused))
    }

    /// Sends what the remote lacks for `plans`, in rounds, until no pack relied on is marked
    /// (the writers' rule, checked right before refs move); [`Error::RemoteCollected`] after
    /// [`MAX_SEND_ROUNDS`].
    fn send_all(
        &mut self,
        store: &mut Store,
        plans: &[Plan],
        progress: &dyn Progress,
    ) -> Result<Transfer> {
        let mut transfer = Transfer::default();
        let mut round = 0;
        while !plans.is_empty() {
            round += 1;
            let to = Destination {
                record: self.record,
                remote: self.remote,
                view: &self.view,
                jobs: self.jobs,
            };
            let sent = send_round(store, &to, plans, &mut self.relied, progress)?;
            transfer.add_moved(&sent);
            progress.phase("checking the remote's gc marks");
            if self.view.recheck(self.remote, &self.relied)?.is_empty() {
                break;
            }
            if round == MAX_SEND_ROUNDS {
                return Err(self.collected());
            }
            self.view
                .reindex(store, self.record, self.remote, self.jobs)?;
        }
        Ok(transfer)
    }

    /// A gc marked a pack this push relies on.
    fn collected(&self) -> Error {
        Error::RemoteCollected {
            remote: self.record.name.clone(),
            operation: "push",
        }
    }

    /// A writer whose last check of the marks is older than half the grace checks again
    /// before moving a ref: a pack relied on marked meanwhile stops the push.
    fn check_fresh(&mut self) -> Result<()> {
        if self.view.stale() && !self.view.recheck(self.remote, &self.relied)?.is_empty() {
            return Err(self.collected());
        }
        Ok(())
    }

    /// Moves one dataset's head (compare-and-swap with the state listed) and then its tags
    /// (those of the version and its ancestors); each ref moved goes into `refs`. A head
    /// another writer moved since it was listed refuses the dataset, and the next ones still
    /// move.
    fn move_dataset(
        &mut self,
        store: &mut Store,
        remote_refs: &RemoteRefs<'_>,
        (ref_name, version, current): Plan,
        refs: &mut Vec<PushedRef>,
    ) -> Result<PushedDataset> {
        self.check_fresh()?;
        let remote = self.remote;
        let previous = current.as_ref().map(|(id, _)| *id);
        let moved = match &current {
            Some((head, state)) if *head == version => Ok(("up-to-date", state.clone())),
            Some((head, state)) => {
                if is_ancestor(store, head, &version)? {
                    remote
                        .update_ref(&ref_name, &version, Some(state))
                        .map(|state| ("updated", state))
                } else {
                    Ok(("forced", remote.force_ref(&ref_name, &version)?))
                }
            }
            None => remote
                .update_ref(&ref_name, &version, None)
                .map(|state| ("created", state)),
        };
        let (status, state) = match moved {
            Ok(moved) => moved,
            Err(error @ Error::RemoteDiverged { .. }) => {
                let dataset = &ref_name.dataset;
                return Ok(PushedDataset::refused_by(
                    dataset, version, previous, &error,
                ));
            }
            Err(error) => return Err(error),
        };
        // Recorded at once: a failure on a later ref leaves this store knowing what moved.
        record_ref(
            store,
            self.record.id,
            &remote_ref(&ref_name, version, &state),
        )?;
        refs.push(PushedRef {
            dataset: ref_name.dataset.clone(),
            tag: None,
            version,
            previous,
            status,
        });
        let tags_moved = self.move_tags(store, remote_refs, &ref_name.dataset, version, refs)?;
        Ok(PushedDataset {
            dataset: ref_name.dataset.clone(),
            version,
            previous,
            status: if status == "up-to-date" && !tags_moved {
                "up-to-date"
            } else {
                "pushed"
            },
            error: None,
            hint: None,
        })
    }

    /// The tags of `version` and its ancestors, each created, kept (`up-to-date`), forced
    /// (with `force`) or `rejected` (naming another version on the remote); each goes into
    /// `refs`. Returns whether any was created or forced.
    fn move_tags(
        &mut self,
        store: &mut Store,
        remote_refs: &RemoteRefs<'_>,
        dataset: &str,
        version: ObjectId,
        refs: &mut Vec<PushedRef>,
    ) -> Result<bool> {
        let mut moved = false;
        let mut next = Some(version);
        while let Some(id) = next {
            for tag in store.catalog().tags_of(&id)? {
                let tag_name = RefName {
                    dataset: dataset.to_string(),
                    tag: Some(tag.clone()),
                };
                self.check_fresh()?;
                let remote = self.remote;
                let (status, state, named) = match remote_refs.current(&tag_name)? {
                    Some((named, state)) if named == id => ("up-to-date", state, id),
                    Some(_) if self.force => ("forced", remote.force_ref(&tag_name, &id)?, id),
                    Some((named, state)) => ("rejected", state, named),
                    None => ("created", remote.update_ref(&tag_name, &id, None)?, id),
                };
                record_ref(store, self.record.id, &remote_ref(&tag_name, named, &state))?;
                moved |= matches!(status, "created" | "forced");
                refs.push(PushedRef {
                    dataset: dataset.to_string(),
                    tag: Some(tag),
                    version: named,
                    previous: None,
                    status,
                });
            }
            next = store.catalog().version(&id)?.and_then(|r| r.version.parent);
        }
        Ok(moved)
    }
}

/// One ref to move: its name, the version it will name, what it names now and its state.
type Plan = (RefName, ObjectId, Option<(ObjectId, RefState)>);

/// Rounds of sending before a push gives up on a remote whose gc keeps marking the packs it
/// relies on ([`Error::RemoteCollected`]).
const MAX_SEND_ROUNDS: u32 = 4;

/// The remote a push sends to: its record, the opened remote, the writer's view of it, and
/// the requests in flight.
struct Destination<'a> {
    record: &'a RemoteRecord,
    remote: &'a Remote,
    view: &'a WriterView,
    jobs: usize,
}

/// One round of a push's sending: what `to.view` says the remote lacks for `plans` goes up
/// (a local pack whose id is marked there as a fresh copy under a new id), and is recorded
/// in `remote_packs`. The remote packs relied on and those sent go into `relied`.
fn send_round(
    store: &mut Store,
    to: &Destination<'_>,
    plans: &[Plan],
    relied: &mut HashSet<ObjectId>,
    progress: &dyn Progress,
) -> Result<Transfer> {
    let (record, remote, view, jobs) = (to.record, to.remote, to.view, to.jobs);
    let mut packs = HashSet::new();
    let mut lacking_outboards = Vec::new();
    // Outboards written here since the last push (`gc` writes those that data committed
    // before them lacks) travel even when the remote's head is already this version. On a
    // collected remote every target is walked, even one its head names already: the push
    // may create tags of it, and the remote keeps its data only while a ref names it
    // (another writer may delete that head meanwhile), so the push relies only on packs it
    // checked.
    let outboards_pending = store.catalog().outboards_missing_on(record.id)?;
    for (_, version, current) in plans {
        if !view.collected()
            && !outboards_pending
            && current.as_ref().is_some_and(|(head, _)| head == version)
        {
            continue;
        }
        packs.extend(objects_to_send(
            store,
            record,
            view,
            version,
            &mut lacking_outboards,
            relied,
        )?);
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
    // A local pack whose id the remote has marked goes up as a fresh copy: a create-only
    // put of the marked key would change nothing, and the marked pack may be deleted.
    let fresh_dir = tempfile::Builder::new()
        .prefix("push-")
        .tempdir_in(store.temp_dir())
        .map_err(|source| Error::Io {
            path: store.temp_dir(),
            source,
        })?;
    let mut uploads: Vec<(ObjectId, std::path::PathBuf)> = Vec::new();
    for id in &packs {
        let path = crate::pack::writer::pack_path(&store.packs_dir(), id);
        if view.is_marked(id) {
            uploads.push(fresh_copy(store, &path, fresh_dir.path())?);
        } else {
            uploads.push((*id, path));
        }
    }
    let mut sizes = HashMap::new();
    for (id, path) in &uploads {
        let size = std::fs::metadata(path)
            .map_err(|source| Error::Io {
                path: path.clone(),
                source,
            })?
            .len();
        sizes.insert(*id, size);
    }
    let total: u64 = sizes.values().sum();
    let mut transfer = Transfer {
        packs: uploads.len() as u64,
        bytes: total,
        ..Transfer::default()
    };
    // A pack with delta frames (pack format 2) goes only to a remote that says it may hold
    // them (remote format 3), set before the first such upload: a dsv that knows only an
    // older format then refuses to write here, instead of pushing deltas' bases away.
    if uploads.iter().try_fold(false, |any, (_, path)| {
        Ok::<_, Error>(any || has_delta_frames(path)?)
    })? {
        remote.ensure_format(
            crate::remote::collect::FORMAT_DELTAS,
            crate::transfer::DEFAULT_REMOTE_GRACE_SECONDS,
            "push",
        )?;
    }
    progress.start("upload", total, Unit::Bytes);
    remote.put_packs(uploads.clone(), jobs, &|bytes| progress.advance(bytes))?;
    // One uploaded pack's index in memory at a time.
    let writer = store.catalog_mut().writer()?;
    for (id, path) in &uploads {
        let file = crate::store_file::open_read(path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        let index = crate::pack::reader::read_index(&file, path)?;
        transfer.objects += index.objects.len() as u64;
        writer.add_remote_pack(
            record.id,
            id,
            sizes[id],
            &index.frames,
            &index.objects,
            &index.deltas,
        )?;
        relied.insert(*id);
    }
    writer.commit()?;
    Ok(transfer)
}
