//! Retention: which versions the store keeps. `rm` marks versions removed (their data goes
//! at the next `gc`), `pin` and `unpin` hold a version against `rm` and `cache prune`.
//!
//! `rm` refuses (`VersionHeld`) a dataset's head named on its own, a version a live pin
//! holds, one a workspace holds (a directory the store recorded with it that still exists and
//! is the same directory), and a tagged one without `force`; the message names every holder.
//! Each change is one catalog transaction under the store lock. What `gc` then keeps and
//! frees, and why a removal is safe against running operations, is in [`super::gc`]; the
//! catalog side is `catalog/retention.rs`; eviction (`cache prune`) is [`super::cache`].

use serde::Serialize;

use crate::catalog::Pin;
use crate::error::{Error, Holder, Result};
use crate::id::ObjectId;
use crate::revision::Revision;
use crate::store::Store;

/// What `rm` did.
#[derive(Debug, Clone, Serialize)]
pub struct RemoveReport {
    /// The dataset.
    pub dataset: String,
    /// Versions marked removed.
    pub removed: Vec<ObjectId>,
    /// Tags dropped with them.
    pub tags_dropped: Vec<String>,
}

/// Why a version must be kept, if it must: every live pin, and every workspace (a directory
/// that exists, the same one as recorded) that holds it, named in one sentence.
fn held_by(store: &Store, id: &ObjectId, pins: &[Pin]) -> Result<Vec<Holder>> {
    let now = crate::catalog::unix_now();
    let mut holders: Vec<Holder> = pins
        .iter()
        .filter(|p| p.version == *id && p.until.is_none_or(|u| u > now))
        .map(|pin| Holder::Pin {
            reason: pin.reason.clone(),
        })
        .collect();
    holders.extend(
        store
            .catalog()
            .workspace_versions()?
            .into_iter()
            .filter(|(_, version)| version == id)
            .map(|(path, _)| Holder::Workspace { path }),
    );
    Ok(holders)
}

fn held(id: &ObjectId, holders: Vec<Holder>) -> Error {
    Error::VersionHeld {
        version: id.short(),
        holders,
    }
}

/// How to remove ([`remove`]).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct RemoveOptions {
    /// Remove tagged versions too, dropping their tags (`--force`).
    pub force: bool,
}

/// `dsv rm NAME@REV` (one version, not the head) or `dsv rm NAME` (every version; the
/// dataset's head is cleared). The data is freed by the next `gc`; the log keeps the
/// versions, marked removed.
///
/// # Errors
/// [`Error::VersionHeld`] for a pinned version or one a directory holds; also for a tagged
/// version without `options.force` (tags are dropped with `force`) or a dataset's head (a
/// head is removed only with the whole dataset); revision errors.
pub fn remove(store: &mut Store, target: &str, options: &RemoveOptions) -> Result<RemoveReport> {
    let pins = store.catalog().pins()?;
    let (dataset, ids) = if target.contains('@') || target.contains('~') {
        let revision = Revision::parse(target)?;
        let id = revision.resolve(store.catalog())?;
        if store.catalog().head(&revision.dataset)? == Some(id) {
            return Err(held(
                &id,
                vec![Holder::Head {
                    dataset: revision.dataset.clone(),
                }],
            ));
        }
        (revision.dataset, vec![id])
    } else {
        crate::revision::check_name("dataset", target)?;
        let mut ids = Vec::new();
        let mut next = store.catalog().head(target)?;
        while let Some(id) = next {
            ids.push(id);
            next = store.catalog().version_record(&id)?.version.parent;
        }
        (target.to_string(), ids)
    };
    let mut tags = Vec::new();
    for id in &ids {
        let holders = held_by(store, id, &pins)?;
        if !holders.is_empty() {
            return Err(held(id, holders));
        }
        let named = store.catalog().tags_of(id)?;
        if !named.is_empty() && !options.force {
            return Err(held(
                id,
                vec![Holder::Tags {
                    dataset: dataset.clone(),
                    tags: named,
                }],
            ));
        }
        tags.extend(named);
    }
    let _lock = store.lock_head_alone()?;
    let writer = store.catalog_mut().writer()?;
    writer.mark_removed(&ids)?;
    if !target.contains('@') && !target.contains('~') {
        writer.clear_head(&dataset)?;
    }
    writer.commit()?;
    Ok(RemoveReport {
        dataset,
        removed: ids,
        tags_dropped: tags,
    })
}

/// Pins `revision` so no `rm` or cleanup removes it, until `until` (Unix seconds) if given.
///
/// # Errors
/// Revision errors.
pub fn pin(
    store: &mut Store,
    revision: &Revision,
    reason: &str,
    until: Option<i64>,
) -> Result<Pin> {
    // Resolved, written and read back under the store lock (as tag, rename and rm are).
    let _lock = store.lock_head_alone()?;
    let id = revision.resolve(store.catalog())?;
    let writer = store.catalog_mut().writer()?;
    writer.pin(&id, reason, until)?;
    writer.commit()?;
    store
        .catalog()
        .pins()?
        .into_iter()
        .find(|p| p.version == id)
        .ok_or_else(|| Error::Internal {
            detail: format!("version {} was pinned, yet no pin names it", id.short()),
        })
}

/// Removes the pin of `revision`.
///
/// # Errors
/// [`Error::RevisionNotFound`] when it is not pinned; revision errors.
pub fn unpin(store: &mut Store, revision: &Revision) -> Result<ObjectId> {
    let _lock = store.lock_head_alone()?;
    let id = revision.resolve(store.catalog())?;
    let writer = store.catalog_mut().writer()?;
    let had = writer.unpin(&id)?;
    writer.commit()?;
    if !had {
        return Err(Error::RevisionNotFound {
            closest: None,
            revision: format!("{revision} (among the pins)"),
        });
    }
    Ok(id)
}
