//! Names: the refs that point at versions. `tag` names a version, `tags` lists the names,
//! `delete_tag` drops one, `reset` moves a dataset's head, `rename` renames a dataset.
//!
//! Each change is one catalog transaction under the store lock (the ref log line appended
//! first), so it resolves and writes against the newest state: a rename between resolving a
//! revision and writing its tag cannot leave the tag naming a dataset that is gone. No
//! change takes the data lock or touches a version's data: removing versions (`rm`) and
//! pinning them are retention ([`super::retention`]).

use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::revision::{Revision, check_name};
use crate::store::Store;

use super::inspect::datasets;

/// What [`reset`] did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ResetReport {
    /// The dataset.
    pub dataset: String,
    /// The head before (`None`: the dataset had none).
    pub from: Option<ObjectId>,
    /// The head now.
    pub to: ObjectId,
}

/// Moves dataset `dataset`'s local head to the version `revision` names (any version of it:
/// an older one, or one on another line such as a fetched remote's), as `git reset` moves a
/// branch. No version is deleted: the line the head leaves stays in the store and in
/// [`super::inspect::log`]. Workspaces keep the versions they hold; the next commit from one descends from
/// its own version.
///
/// # Errors
/// Revision errors (`revision` must name a version of `dataset`);
/// [`Error::VersionRemoved`] when it was removed by `dsv rm` (its data may be gone).
pub fn reset(store: &mut Store, dataset: &str, revision: &Revision) -> Result<ResetReport> {
    check_name("dataset", dataset)?;
    if revision.dataset != dataset {
        return Err(Error::InvalidRevision {
            revision: revision.to_string(),
            reason: format!(
                "it names a version of {}, not of {dataset}",
                revision.dataset
            ),
        });
    }
    let _lock = store.lock_head_alone()?;
    let from = store.catalog().head(dataset)?;
    let to = revision.resolve(store.catalog())?;
    if store.catalog().removed_at(&to)?.is_some() {
        return Err(Error::VersionRemoved {
            version: to.short(),
        });
    }
    if from != Some(to) {
        let writer = store.catalog_mut().writer()?;
        writer.set_head(dataset, &to)?;
        writer.commit()?;
    }
    Ok(ResetReport {
        dataset: dataset.to_string(),
        from,
        to,
    })
}

/// A tag and the version it names.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TagInfo {
    /// The dataset.
    pub dataset: String,
    /// The tag.
    pub tag: String,
    /// The version it names.
    pub version: ObjectId,
}

/// The tags of `dataset`, sorted, or of every dataset when `None` (by dataset, then tag).
///
/// # Errors
/// [`Error::DatasetNotFound`]; catalog errors.
pub fn tags(store: &Store, dataset: Option<&str>) -> Result<Vec<TagInfo>> {
    let names = match dataset {
        Some(name) => {
            check_name("dataset", name)?;
            store.catalog().head(name)?;
            vec![name.to_string()]
        }
        None => datasets(store)?.into_iter().map(|d| d.name).collect(),
    };
    let mut out = Vec::new();
    for name in names {
        for (tag, version) in store.catalog().tags(&name)? {
            out.push(TagInfo {
                dataset: name.clone(),
                tag,
                version,
            });
        }
    }
    Ok(out)
}

/// Deletes tag `tag` of `dataset` (the version keeps its data; only the name goes).
///
/// # Errors
/// [`Error::DatasetNotFound`]; [`Error::RevisionNotFound`] when there is no such tag.
pub fn delete_tag(store: &mut Store, dataset: &str, tag: &str) -> Result<TagInfo> {
    check_name("dataset", dataset)?;
    store.catalog().head(dataset)?;
    let _lock = store.lock_head_alone()?;
    let writer = store.catalog_mut().writer()?;
    let version = writer
        .delete_tag(dataset, tag)?
        .ok_or_else(|| Error::RevisionNotFound {
            closest: None,
            revision: format!("{dataset}@{tag}"),
        })?;
    writer.commit()?;
    Ok(TagInfo {
        dataset: dataset.to_string(),
        tag: tag.to_string(),
        version,
    })
}

/// Renames dataset `old` to `new`: its versions, head, tags and workspaces follow; `new`
/// must be unused (no dataset of that name with any version, even removed). Versions already
/// made keep the name they were made under inside their (content-addressed, immutable)
/// objects; a remote gets the new name with the next push.
///
/// # Errors
/// [`Error::InvalidName`], [`Error::DatasetNotFound`] (`old`), [`Error::DatasetExists`]
/// (`new`).
pub fn rename(store: &mut Store, old: &str, new: &str) -> Result<()> {
    check_name("dataset", old)?;
    check_name("dataset", new)?;
    let _lock = store.lock_head_alone()?;
    store.catalog().head(old)?;
    if old == new {
        return Ok(());
    }
    if store.catalog().has_dataset(new)? {
        return Err(Error::DatasetExists {
            name: new.to_string(),
        });
    }
    let writer = store.catalog_mut().writer()?;
    writer.rename_dataset(old, new)?;
    writer.commit()
}

/// How to tag ([`tag`]).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct TagOptions {
    /// Move the tag when it already names another version (otherwise
    /// [`Error::TagExists`]).
    pub force: bool,
}

/// Names `revision` as `tag` in its dataset (replacing an existing tag only with
/// `options.force`).
///
/// # Errors
/// [`Error::InvalidName`], revision errors, [`Error::TagExists`].
pub fn tag(
    store: &mut Store,
    revision: &Revision,
    tag: &str,
    options: &TagOptions,
) -> Result<ObjectId> {
    check_name("tag", tag)?;
    // Resolved and written under the store lock, as rename and reset are: a rename between
    // the two would leave the tag naming a dataset that is gone.
    let _lock = store.lock_head_alone()?;
    let id = revision.resolve(store.catalog())?;
    let writer = store.catalog_mut().writer()?;
    writer.set_tag(&revision.dataset, tag, &id, options.force)?;
    writer.commit()?;
    Ok(id)
}
