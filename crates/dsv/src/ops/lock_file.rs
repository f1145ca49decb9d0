//! Lock files: a user's JSON that pins the exact versions a training run used, by id and root
//! tree, so the run can be checked (`dsv audit --lock`, [`super::audit::audit_lock`]) or
//! rebuilt (`dsv checkout --lock`) later. Unrelated to the store's `flock` files
//! ([`crate::store`]). Byte layout: `docs/format.md#lock-files`.
//!
//! [`lock`] makes one from revisions; [`read_lock`] and [`parse_lock`] read and check one.
//! [`resolve_lock`] runs before anything is written: for each pinned version this store has
//! not recorded, it fetches each configured remote whose URL equals one the lock lists, until
//! the version is recorded (the only way `audit --lock` writes to the store), then checks
//! that the version belongs to the pinned dataset and names the pinned tree. `checkout
//! --lock` then checks out each dataset in turn, downloading its missing chunks just before;
//! a failure in one dataset leaves those before it checked out.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::progress::Progress;
use crate::revision::{Revision, check_name};
use crate::store::Store;

/// The format tag of lock files this dsv writes and reads.
pub const LOCK_FORMAT: u32 = 1;

/// A lock file: the exact versions a job uses, kept with its code (JSON).
///
/// ```json
/// { "dsv_lock": 1,
///   "datasets": { "mnist": { "version": "<64 hex>", "tree": "<64 hex>", "files": 70000,
///                            "bytes": 123, "remotes": [ { "name": "origin", "url": "s3://b/p" } ] } } }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockFile {
    /// Always [`LOCK_FORMAT`].
    pub dsv_lock: u32,
    /// Each dataset's pinned version.
    pub datasets: BTreeMap<String, LockedVersion>,
}

/// One pinned version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedVersion {
    /// The version id.
    pub version: ObjectId,
    /// Its root tree (a second check: the version object names it).
    pub tree: ObjectId,
    /// Files and symlinks in it.
    pub files: u64,
    /// Bytes of its files.
    pub bytes: u64,
    /// Remotes known to hold it when the lock was made (where to fetch it from).
    pub remotes: Vec<LockedRemote>,
}

/// A remote named in a lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedRemote {
    /// Its name in the store that made the lock.
    pub name: String,
    /// Its URL.
    pub url: String,
}

/// Pins `revisions` (one per dataset) in a lock file.
///
/// # Errors
/// Revision errors; [`Error::InvalidLock`] when two revisions name one dataset.
pub fn lock(store: &Store, revisions: &[Revision]) -> Result<LockFile> {
    let mut datasets = BTreeMap::new();
    for revision in revisions {
        let version = revision.resolve(store.catalog())?;
        let record = store.catalog().version_record(&version)?;
        let mut remotes = Vec::new();
        for remote in store.catalog().remotes()? {
            if store
                .catalog()
                .remote_locate(remote.id, &version, ObjectKind::Version)?
                .is_some()
            {
                remotes.push(LockedRemote {
                    name: remote.name,
                    url: remote.url,
                });
            }
        }
        let pinned = LockedVersion {
            version,
            tree: record.version.tree,
            files: record.version.files,
            bytes: record.version.bytes,
            remotes,
        };
        if datasets.insert(revision.dataset.clone(), pinned).is_some() {
            return Err(Error::InvalidLock {
                path: PathBuf::from("-"),
                reason: format!("dataset {:?} is named twice", revision.dataset),
            });
        }
    }
    Ok(LockFile {
        dsv_lock: LOCK_FORMAT,
        datasets,
    })
}

/// Reads and checks a lock file.
///
/// # Errors
/// [`Error::Io`]; [`Error::InvalidLock`] when it is not a dsv lock file of a known format or
/// names an invalid dataset.
pub fn read_lock(path: &Path) -> Result<LockFile> {
    let text = std::fs::read_to_string(path).at(path)?;
    parse_lock(&text, path)
}

/// Parses and checks the text of lock file `path` (named in errors), as [`read_lock`] does.
/// Public so the decoding of lock files can be fuzzed.
///
/// # Errors
/// As [`read_lock`], less [`Error::Io`].
pub fn parse_lock(text: &str, path: &Path) -> Result<LockFile> {
    let invalid = |reason: String| Error::InvalidLock {
        path: path.to_path_buf(),
        reason,
    };
    let lock: LockFile = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
    if lock.dsv_lock != LOCK_FORMAT {
        return Err(invalid(format!(
            "lock format {} is not {LOCK_FORMAT}: made by another dsv",
            lock.dsv_lock
        )));
    }
    if lock.datasets.is_empty() {
        return Err(invalid("it pins no dataset".into()));
    }
    for name in lock.datasets.keys() {
        check_name("dataset", name)?;
    }
    Ok(lock)
}

/// Checks that this store knows every version `lock` pins, fetching metadata from a
/// configured remote with a URL the lock names when it does not, and that each version
/// names the pinned tree. Returns the (dataset, version) pairs.
///
/// # Errors
/// [`Error::LockedVersionUnknown`] when no configured remote supplies a pinned version;
/// [`Error::InvalidLock`] when a version's tree is not the pinned one; as
/// [`super::sync::fetch()`].
pub fn resolve_lock(
    store: &mut Store,
    path: &Path,
    lock: &LockFile,
    jobs: usize,
    progress: &dyn Progress,
) -> Result<Vec<(String, ObjectId)>> {
    let mut out = Vec::new();
    for (dataset, pinned) in &lock.datasets {
        if store.catalog().version(&pinned.version)?.is_none() {
            let configured = store.catalog().remotes()?;
            for remote in configured
                .iter()
                .filter(|r| pinned.remotes.iter().any(|l| l.url == r.url))
            {
                let options = super::sync::FetchOptions { requests: jobs };
                super::sync::fetch(store, &remote.name, &options, progress)?;
                if store.catalog().version(&pinned.version)?.is_some() {
                    break;
                }
            }
        }
        let Some(record) = store.catalog().version(&pinned.version)? else {
            return Err(Error::LockedVersionUnknown {
                dataset: dataset.clone(),
                version: pinned.version.to_hex(),
                remotes: pinned.remotes.iter().map(|r| r.url.clone()).collect(),
            });
        };
        if record.version.tree != pinned.tree || record.version.dataset != *dataset {
            return Err(Error::InvalidLock {
                path: path.to_path_buf(),
                reason: format!(
                    "version {} is not the {dataset} version with tree {} the lock pins",
                    pinned.version.short(),
                    pinned.tree.short()
                ),
            });
        }
        out.push((dataset.clone(), pinned.version));
    }
    Ok(out)
}
