//! Read-only queries: log, show, ls, cat, diff; and tagging.

use crate::catalog::{DatasetSummary, VersionRecord};
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::revision::{Revision, check_name};
use crate::store::Store;
use crate::tree::{self, Change, FlatEntry, FlatKind};

/// A version with its tags.
#[derive(Debug, Clone, serde::Serialize)]
pub struct VersionInfo {
    /// The version.
    #[serde(flatten)]
    pub record: VersionRecord,
    /// Tags naming it.
    pub tags: Vec<String>,
    /// When it was removed (`dsv rm`; Unix seconds); absent while its data is kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed_at: Option<i64>,
}

fn info(store: &Store, id: &ObjectId) -> Result<VersionInfo> {
    let record = store.catalog().version_record(id)?;
    Ok(VersionInfo {
        tags: store.catalog().tags_of(id)?,
        removed_at: store.catalog().removed_at(id)?,
        record,
    })
}

/// The versions of `dataset` from its head back along parents, newest first, at most `limit`.
///
/// # Errors
/// [`Error::DatasetNotFound`], catalog errors.
pub fn log(store: &Store, dataset: &str, limit: Option<usize>) -> Result<Vec<VersionInfo>> {
    check_name("dataset", dataset)?;
    let mut out = Vec::new();
    let mut next = store.catalog().head(dataset)?;
    while let Some(id) = next {
        if limit.is_some_and(|l| out.len() >= l) {
            break;
        }
        let version = info(store, &id)?;
        next = version.record.version.parent;
        out.push(version);
    }
    Ok(out)
}

/// One version, with its tags; its object in the pack is read and checked against the catalog.
///
/// # Errors
/// Revision errors; [`Error::Corrupt`] when the stored object disagrees with the catalog.
pub fn show(store: &Store, revision: &Revision) -> Result<VersionInfo> {
    let id = revision.resolve(store.catalog())?;
    let version = info(store, &id)?;
    let stored = store.reader().version(&id)?;
    if stored != version.record.version {
        return Err(Error::corrupt(
            store.catalog().path(),
            format!("version {} differs from its stored object", id.short()),
        ));
    }
    Ok(version)
}

/// A version with the provenance of its files (`dsv show --provenance`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ShownProvenance {
    /// The version.
    #[serde(flatten)]
    pub version: VersionInfo,
    /// Where its files came from; `null` for a committed version.
    pub provenance: Option<crate::object::Provenance>,
}

/// The provenance of `version`, read (and hash-checked) from the store; `None` for a
/// version that was committed, not imported.
///
/// # Errors
/// [`Error::MissingObject`], [`Error::Corrupt`].
pub fn provenance(
    store: &Store,
    version: &VersionInfo,
) -> Result<Option<crate::object::Provenance>> {
    version
        .record
        .version
        .provenance
        .map(|id| store.reader().provenance(&id))
        .transpose()
}

/// One version as [`show`] gives it, with the provenance of its files
/// (`dsv show --provenance`; `None` for a committed version).
///
/// # Errors
/// As [`show`] and [`provenance`].
pub fn show_provenance(store: &Store, revision: &Revision) -> Result<ShownProvenance> {
    let version = show(store, revision)?;
    Ok(ShownProvenance {
        provenance: provenance(store, &version)?,
        version,
    })
}

/// Every dataset with its head.
///
/// # Errors
/// Catalog errors.
pub fn datasets(store: &Store) -> Result<Vec<DatasetSummary>> {
    store.catalog().datasets()
}

/// The entries of `revision` under `path` ("" = everything), depth-first.
///
/// # Errors
/// Revision errors; [`Error::PathNotFound`].
pub fn ls(store: &Store, revision: &Revision, path: &str) -> Result<Vec<FlatEntry>> {
    let id = revision.resolve(store.catalog())?;
    let root = info(store, &id)?.record.version.tree;
    let reader = &mut store.reader();
    let entry = tree::lookup(reader, &root, path)?.ok_or_else(|| Error::PathNotFound {
        revision: revision.to_string(),
        path: path.to_string(),
    })?;
    if entry.kind != FlatKind::Dir {
        return Ok(vec![entry]);
    }
    let prefix = if entry.path.is_empty() {
        String::new()
    } else {
        format!("{}/", entry.path)
    };
    let mut entries = tree::flatten(reader, &entry.id)?;
    for e in &mut entries {
        e.path = format!("{prefix}{}", e.path);
    }
    Ok(entries)
}

/// What changed from `old` to `new` (`old` = `None`: from `new`'s parent).
#[derive(Debug, Clone, serde::Serialize)]
pub struct DiffReport {
    /// The older version (`None` when `new` is a dataset's first).
    pub old: Option<ObjectId>,
    /// The newer version.
    pub new: ObjectId,
    /// Changed paths, sorted.
    pub changes: Vec<Change>,
}

/// Diffs two revisions, or one against its parent.
///
/// # Errors
/// Revision errors.
pub fn diff(store: &Store, old: Option<&Revision>, new: &Revision) -> Result<DiffReport> {
    let new_id = new.resolve(store.catalog())?;
    let new_info = info(store, &new_id)?;
    let old_id = match old {
        Some(revision) => Some(revision.resolve(store.catalog())?),
        None => new_info.record.version.parent,
    };
    let old_tree = old_id
        .map(|id| info(store, &id).map(|i| i.record.version.tree))
        .transpose()?;
    let changes = tree::diff(
        &mut store.reader(),
        old_tree.as_ref(),
        Some(&new_info.record.version.tree),
    )?;
    Ok(DiffReport {
        old: old_id,
        new: new_id,
        changes,
    })
}

/// Names `revision` as `tag` in its dataset (replacing an existing tag only with `force`).
///
/// # Errors
/// [`Error::InvalidName`], revision errors, [`Error::TagExists`].
pub fn tag(store: &mut Store, revision: &Revision, tag: &str, force: bool) -> Result<ObjectId> {
    check_name("tag", tag)?;
    let id = revision.resolve(store.catalog())?;
    let writer = store.catalog_mut().writer()?;
    writer.set_tag(&revision.dataset, tag, &id, force)?;
    writer.commit()?;
    Ok(id)
}
