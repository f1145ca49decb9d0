//! `workspace ls` / `workspace forget`: the directories this store committed from or checked
//! out into, which hold their versions (from `rm` and cleanup) until the user lets them go.
//!
//! One of three workspace modules, each one concern: this one holds the user's commands over
//! the records; the records themselves (catalog rows) are `catalog/workspaces.rs`
//! ([`crate::catalog::Workspace`]); when a stat cache entry is trusted is
//! [`crate::workspace`].

use std::path::{Component, Path, PathBuf};

use crate::catalog::Workspace;
use crate::error::{Error, Result};
use crate::store::Store;

/// Every workspace record, by path.
///
/// # Errors
/// [`Error::Catalog`].
pub fn list(store: &Store) -> Result<Vec<Workspace>> {
    store.catalog().workspaces()
}

/// Forgets the workspace record of `dir` (which need not exist any more): its version is no
/// longer held by it, and its stat cache goes. The directory itself is not touched. Returns
/// the record forgotten.
///
/// # Errors
/// [`Error::NotAWorkspace`] when the store has no record of `dir`; [`Error::Catalog`].
pub fn forget(store: &mut Store, dir: &Path) -> Result<Workspace> {
    let key = record_key(dir);
    let record = store
        .catalog()
        .workspaces()?
        .into_iter()
        .find(|w| Path::new(&w.path) == key)
        .ok_or_else(|| Error::NotAWorkspace {
            path: dir.to_path_buf(),
            store: store.root().to_path_buf(),
        })?;
    // Takes no other lock and reads no pack: need not wait for a gc (see crate::store).
    let _lock = store.lock_workspace_alone(&record.path)?;
    let writer = store.catalog_mut().writer()?;
    writer.forget_workspace(&record.path)?;
    writer.commit()?;
    // The link a checkout outside the store's tree wrote goes with the record, so commands
    // run there no longer find this store (best effort: a read-only directory keeps it).
    if let Err(error) = crate::workspace::remove_store_link(Path::new(&record.path), store.root()) {
        tracing::debug!(%error, "the workspace's store link was not removed");
    }
    Ok(record)
}

/// The path a record of `dir` has: its canonical path when it exists, else its absolute path
/// with `.` and `..` resolved lexically.
fn record_key(dir: &Path) -> PathBuf {
    if let Ok(canonical) = std::fs::canonicalize(dir) {
        return canonical;
    }
    let absolute = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut out = PathBuf::new();
    for component in absolute.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The workspace that holds `dir`: the record of `dir` itself, else of its nearest parent
/// directory that has one (as git finds the repository from a subdirectory); as
/// [`crate::catalog::Catalog::enclosing_workspace`].
///
/// # Errors
/// [`Error::NotADirectory`] when `dir` does not exist; [`Error::Catalog`].
pub fn enclosing(store: &Store, dir: &Path) -> Result<Option<Workspace>> {
    store.catalog().enclosing_workspace(dir)
}

/// What `dsv commit` with its directory and dataset left out means, as git's `commit` inside a
/// work tree: the directory defaults to the workspace enclosing `current_dir`, the dataset to
/// the one that workspace holds. Returns (directory to commit, dataset).
///
/// - `dir` given, `dataset` given: those.
/// - `dir` given, no `dataset`: the dataset of `dir`'s own workspace record.
/// - no `dir`: the workspace enclosing `current_dir` (its root), with `dataset` or its own.
///
/// # Errors
/// [`Error::NotAWorkspace`] when no `dir` is given and `current_dir` is in no workspace;
/// [`Error::DatasetRequired`] when the dataset cannot be known (a directory never committed);
/// [`Error::NotADirectory`]; [`Error::Catalog`].
pub fn commit_target(
    store: &Store,
    dir: Option<&Path>,
    dataset: Option<&str>,
    current_dir: &Path,
) -> Result<(PathBuf, String)> {
    let (dir, record) = match dir {
        Some(dir) => {
            let (_, key) = crate::workspace::canonical_dir(dir)?;
            (dir.to_path_buf(), store.catalog().workspace(&key)?)
        }
        None => {
            let record = enclosing(store, current_dir)?.ok_or_else(|| Error::NotAWorkspace {
                path: current_dir.to_path_buf(),
                store: store.root().to_path_buf(),
            })?;
            (PathBuf::from(&record.path), Some(record))
        }
    };
    match (dataset, record.and_then(|r| r.dataset)) {
        (Some(name), _) => Ok((dir, name.to_string())),
        (None, Some(held)) => Ok((dir, held)),
        (None, None) => Err(Error::DatasetRequired { dir }),
    }
}

/// Links workspace `dir` to `store` when it lies outside the store's directory tree (its
/// `.dsv` file, [`workspace::write_store_link`]), so commands run inside it find the store.
/// Best effort: a directory that cannot take the file (read-only) only loses that.
pub(crate) fn link_store(store: &Store, dir: &Path) {
    if let Err(error) = crate::workspace::write_store_link(dir, store.root()) {
        tracing::debug!(%error, "the workspace's store link was not written");
    }
}
