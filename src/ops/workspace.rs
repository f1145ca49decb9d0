//! `workspace ls` / `workspace forget`: the directories this store committed from or checked
//! out into, which hold their versions (from `rm` and cleanup) until the user lets them go.

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
        })?;
    let _lock = store.lock_workspace(&record.path)?;
    let writer = store.catalog_mut().writer()?;
    writer.forget_workspace(&record.path)?;
    writer.commit()?;
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
