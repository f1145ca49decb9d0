//! Read-only queries: log, show, ls, diff, datasets. Changing names (tag, reset, rename) is
//! [`super::refs`]; reading file bytes (`cat`, `export`) is [`crate::read`] and
//! [`super::export`].
//!
//! # diff, step by step
//!
//! `ops/inspect.rs`, `DiffSides::resolve`: resolve both revisions. With one revision, use its
//! parent (`old` is `null` for a dataset's first version). Then `DiffSides::each`
//! (`tree::diff_each`) walks both root trees in step by name, depth first: a stack of open
//! directories, one frame (both sides' trees) per level. It descends only into subdirectories
//! whose tree ids differ, so identical subtrees cost nothing, and hands each change over as
//! it is found, in path order (an entry's own change before what is below it). Nothing but
//! the trees on the current path is held: the CLI prints each change as it comes
//! (`dsv_cli::ui::Listing`), so a diff of millions of changes takes the memory of a small one.
//! `ls` streams the same way (`inspect::ls_each` over `tree::walk_tree`).

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
    /// In a log: true for a version that is not the head or one of its ancestors (a line
    /// left by `dsv reset` or by a commit from an older workspace, or versions fetched from
    /// a remote and not pulled); absent when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub off_head_line: bool,
}

fn info(store: &Store, id: &ObjectId) -> Result<VersionInfo> {
    let record = store.catalog().version_record(id)?;
    Ok(VersionInfo {
        tags: store.catalog().tags_of(id)?,
        removed_at: store.catalog().removed_at(id)?,
        record,
        off_head_line: false,
    })
}

/// The versions of `dataset`: from its head back along parents, then every other version of
/// it in the store (other lines: `off_head_line`), newest first; at most `limit` in all.
/// Moving the head (`dsv reset`, a commit from an older workspace) never hides a version.
///
/// # Errors
/// [`Error::DatasetNotFound`], catalog errors.
pub fn log(store: &Store, dataset: &str, limit: Option<usize>) -> Result<Vec<VersionInfo>> {
    check_name("dataset", dataset)?;
    let full = |out: &Vec<VersionInfo>| limit.is_some_and(|l| out.len() >= l);
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut next = store.catalog().head(dataset)?;
    while let Some(id) = next {
        // A parent chain is finite (ids hash their parents); `seen` guards a damaged catalog.
        if full(&out) || !seen.insert(id) {
            break;
        }
        let version = info(store, &id)?;
        next = version.record.version.parent;
        out.push(version);
    }
    for id in store.catalog().versions_of(dataset)? {
        if full(&out) {
            break;
        }
        if seen.insert(id) {
            let mut version = info(store, &id)?;
            version.off_head_line = true;
            out.push(version);
        }
    }
    Ok(out)
}

/// The version `revision` names and its ancestors, newest first, along parents (as `git log
/// REV`); at most `limit`. Unlike [`log`], no version off that line is listed.
///
/// # Errors
/// Revision errors ([`Error::DatasetNotFound`], [`Error::RevisionNotFound`], ...), catalog
/// errors.
pub fn log_from(
    store: &Store,
    revision: &Revision,
    limit: Option<usize>,
) -> Result<Vec<VersionInfo>> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut next = Some(revision.resolve(store.catalog())?);
    while let Some(id) = next {
        // A parent chain is finite (ids hash their parents); `seen` guards a damaged catalog.
        if limit.is_some_and(|l| out.len() >= l) || !seen.insert(id) {
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
    if !version.record.agrees_with(&stored) {
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

/// Every dataset that has a head, sorted by name. A dataset whose versions were all removed
/// (`dsv rm NAME`) is not listed, nor one whose versions were only fetched from a remote
/// (`dsv fetch` lists those).
///
/// # Errors
/// Catalog errors.
pub fn datasets(store: &Store) -> Result<Vec<DatasetSummary>> {
    let mut all = store.catalog().datasets()?;
    all.retain(|d| d.head.is_some());
    Ok(all)
}

/// The entries of `revision` under `path` ("" = everything), depth-first: [`ls_each`]
/// collected.
///
/// # Errors
/// As [`ls_each`].
pub fn ls(store: &Store, revision: &Revision, path: &str) -> Result<Vec<FlatEntry>> {
    let mut entries = Vec::new();
    ls_each(store, revision, path, |entry| {
        entries.push(entry);
        Ok(())
    })?;
    Ok(entries)
}

/// Hands each entry of `revision` under `path` ("" = everything) to `visit`, depth-first
/// (siblings sorted by name bytes), as the trees are read: only the trees on the current
/// path are held, so a listing of millions of entries costs the version's depth, not its
/// size. A file's `path` is its whole path in the version.
///
/// # Errors
/// Revision errors; [`Error::PathNotFound`]; [`Error::Corrupt`] for a tree past the limits
/// ([`tree::walk_tree`]); the first error of `visit`.
pub fn ls_each(
    store: &Store,
    revision: &Revision,
    path: &str,
    mut visit: impl FnMut(FlatEntry) -> Result<()>,
) -> Result<()> {
    let id = revision.resolve(store.catalog())?;
    let root = info(store, &id)?.record.version.tree;
    let reader = &mut store.reader();
    let entry = tree::lookup(reader, &root, path)?.ok_or_else(|| Error::PathNotFound {
        revision: revision.to_string(),
        path: path.to_string(),
    })?;
    if entry.kind != FlatKind::Dir {
        return visit(entry);
    }
    let prefix = if entry.path.is_empty() {
        String::new()
    } else {
        format!("{}/", entry.path)
    };
    for found in tree::walk_tree(reader, &entry.id)? {
        let mut found = found?;
        if !prefix.is_empty() {
            found.path.insert_str(0, &prefix);
        }
        visit(found)?;
    }
    Ok(())
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
    /// Tree objects read to find them: only the trees on changed paths (and the two roots),
    /// however many files the versions hold.
    pub trees_read: u64,
}

/// Diffs two revisions, or one against its parent, renames detected:
/// [`DiffSides::each_with_renames`] collected.
///
/// # Errors
/// Revision errors; as [`tree::diff_each`].
pub fn diff(store: &Store, old: Option<&Revision>, new: &Revision) -> Result<DiffReport> {
    let sides = DiffSides::resolve(store, old, new)?;
    let mut changes = Vec::new();
    let trees_read = sides.each_with_renames(store, |change| {
        changes.push(change);
        Ok(())
    })?;
    Ok(DiffReport {
        old: sides.old,
        new: sides.new,
        changes,
        trees_read,
    })
}

/// The two versions a diff compares, resolved, before any change is found.
#[derive(Debug, Clone)]
pub struct DiffSides {
    /// The older version (`None` when the newer is a dataset's first).
    pub old: Option<ObjectId>,
    /// The newer version.
    pub new: ObjectId,
    old_tree: Option<ObjectId>,
    new_tree: ObjectId,
}

impl DiffSides {
    /// Resolves `old` (`None`: `new`'s parent) and `new`.
    ///
    /// # Errors
    /// Revision errors.
    pub fn resolve(store: &Store, old: Option<&Revision>, new: &Revision) -> Result<DiffSides> {
        let new_id = new.resolve(store.catalog())?;
        let new_info = info(store, &new_id)?;
        let old_id = match old {
            Some(revision) => Some(revision.resolve(store.catalog())?),
            None => new_info.record.version.parent,
        };
        let old_tree = old_id
            .map(|id| info(store, &id).map(|i| i.record.version.tree))
            .transpose()?;
        Ok(DiffSides {
            old: old_id,
            new: new_id,
            old_tree,
            new_tree: new_info.record.version.tree,
        })
    }

    /// Hands each change to `visit` in [`crate::walk::path_order`] as it is found, holding
    /// only the trees on the current path ([`tree::diff_each`]); returns the trees read.
    ///
    /// # Errors
    /// As [`tree::diff_each`].
    pub fn each(&self, store: &Store, visit: impl FnMut(Change) -> Result<()>) -> Result<u64> {
        tree::diff_each(
            &mut store.reader(),
            self.old_tree.as_ref(),
            Some(&self.new_tree),
            visit,
        )
    }

    /// As [`DiffSides::each`], with renames detected: a file deleted and a file added with
    /// the same content, kind and mode ([`tree::pair_renames`]) are handed over as one
    /// [`tree::ChangeKind::Renamed`] change, at the added file's place. The changes still
    /// stream: a first walk keeps only the deleted files (none deleted: no rename, no more
    /// walks), a second the added files sharing a deleted one's content, and the third hands
    /// the changes over; memory goes with the files deleted, not with all the changes.
    /// Returns the trees the last walk read.
    ///
    /// # Errors
    /// As [`tree::diff_each`].
    pub fn each_with_renames(
        &self,
        store: &Store,
        mut visit: impl FnMut(Change) -> Result<()>,
    ) -> Result<u64> {
        let mut deleted = Vec::new();
        self.each(store, |change| {
            if change.change == tree::ChangeKind::Deleted
                && let Some(entry) = change.old.filter(|e| tree::rename_key(e).is_some())
            {
                deleted.push(entry);
            }
            Ok(())
        })?;
        if deleted.is_empty() {
            return self.each(store, visit);
        }
        let keys: std::collections::HashSet<_> =
            deleted.iter().filter_map(tree::rename_key).collect();
        let mut added = Vec::new();
        self.each(store, |change| {
            if change.change == tree::ChangeKind::Added
                && let Some(entry) = change
                    .new
                    .filter(|e| tree::rename_key(e).is_some_and(|key| keys.contains(&key)))
            {
                added.push(entry);
            }
            Ok(())
        })?;
        let pairs = tree::pair_renames(deleted, added);
        let from: std::collections::HashSet<String> =
            pairs.iter().map(|(old, _)| old.path.clone()).collect();
        let mut renamed: std::collections::HashMap<String, tree::FlatEntry> = pairs
            .into_iter()
            .map(|(old, new)| (new.path, old))
            .collect();
        self.each(store, |change| match change.change {
            tree::ChangeKind::Deleted if from.contains(&change.path) => Ok(()),
            tree::ChangeKind::Added => match (renamed.remove(&change.path), change.new) {
                (Some(old), Some(new)) => visit(Change::renamed(old, new)),
                (_, new) => visit(Change { new, ..change }),
            },
            _ => visit(change),
        })
    }
}
