//! `dsv fetch`: refs, pack indexes and metadata from one remote; local heads and tags never
//! move. Also the fetch that pull, clone and `checkout --lock` start with (`fetch_with`).
//! How frames are downloaded is in [`super`] ("Downloading frames").
//!
//! # fetch
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
//!    ("Downloading frames" in [`super`]).
//! 4. **Record**, under the store lock: every version object the store now holds but has not
//!    recorded (`unrecorded_versions`) is read through `ObjectReader` (hash-checked) and
//!    recorded without moving any head, creating its dataset, without a head, if it is new;
//!    then one transaction deletes the refs the remote no longer has and records the others.
//!
//! Local heads and tags never move in a fetch.

use serde::Serialize;

use super::{Transfer, download, open, refresh_indexes, remote_ref, same_etag};
use crate::catalog::{RemoteRecord, RemoteRef};
use crate::error::{Error, Result};
use crate::object::ObjectKind;
use crate::progress::Progress;
use crate::remote::Remote;
use crate::store::{SharedDataLock, Store};

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

/// How to fetch ([`fetch`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct FetchOptions {
    /// Requests in flight (default [`crate::remote::DEFAULT_JOBS`]).
    pub requests: usize,
}

impl Default for FetchOptions {
    fn default() -> FetchOptions {
        FetchOptions {
            requests: crate::remote::DEFAULT_JOBS,
        }
    }
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
    options: &FetchOptions,
    progress: &dyn Progress,
) -> Result<FetchReport> {
    let data_lock = store.lock_data_shared()?;
    let (record, remote) = open(store, name)?;
    fetch_with(
        store,
        &data_lock,
        &record,
        &remote,
        options.requests,
        progress,
    )
}

/// [`fetch`] under the shared data lock `data`, which the caller holds.
pub(super) fn fetch_with(
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
    let _lock = store.lock_head(data)?;
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
        // cannot hold is refused before any command lists it (this process's own ulimit
        // is for the listing to check: another process may list it).
        for id in ids {
            let version = reader.version(&id)?;
            crate::object::check_servable(&id, version.files)?;
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
