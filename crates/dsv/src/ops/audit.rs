//! Reproducibility audits: is a directory bit-identical to a version? And lock files, which
//! pin the exact versions a training run used so the run can be checked or rebuilt later.
//!
//! An audit reads the directory and compares every file's content id (BLAKE3 of its bytes)
//! with the version's tree. By default the workspace's stat cache vouches for files whose
//! size, mtime, ctime, inode and mode are unchanged (the same rule as `status`, racy entries
//! re-hashed); `full` re-hashes every file. An audit never changes the directory, its
//! record or its stat cache (`audit --lock` may fetch a pinned version's metadata from a
//! remote the lock names, as `checkout --lock` does).
//!
//! # What an audit trusts
//!
//! `audit()` compares a directory with a version's trees, walked in step with it
//! (`status::compare_with_disk`, `tree::StreamingDiff`), the comparison `status` uses, and adds every entry dsv cannot version as a mismatch. What it
//! trusts:
//!
//! - **The version:** its trees, read through `ObjectReader`, so hash-checked. No chunk is
//!   read: an audit compares content ids, so a store holding only the version's metadata can
//!   audit a directory.
//! - **The directory:** every file is hashed (BLAKE3 of its bytes) except those the stat cache
//!   vouches for. The stat cache is used only when the version audited is the one the store
//!   recorded for the directory (its last commit or checkout), and only for entries that pass
//!   the unchanged and racy checks of The stat cache (`workspace`). Against any other
//!   version every file is read. With `--full`, nothing is taken from the stat cache.
//!
//! Apart from the fetch a lock file may need (below), an audit writes nothing to the store, and
//! it leaves the stat cache as it was. It takes no lock, so a checkout into the directory during
//! an audit can make it report differences.
//!
//! A lock file (`docs/format.md#lock-files`) pins versions by id and root tree.
//! `resolve_lock` runs before anything is written: for each pinned version this store has not
//! recorded, it fetches each configured remote whose URL equals one the lock lists, until the
//! version is recorded (the only way `audit --lock` writes to the store), then checks that the
//! version belongs to the pinned dataset and names the pinned tree. `checkout --lock` then
//! checks out each dataset in turn, downloading its missing chunks just before; a failure in one
//! dataset leaves those before it checked out.
//!
//! `verify --full` reassembles every distinct file held here of every version walked and checks
//! it whole; without `--full`, a file map listing the wrong chunks with the right lengths would
//! pass.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::catalog::unix_now;
use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;
use crate::object::ObjectKind;
use crate::progress::Progress;
use crate::revision::{Revision, check_name};
use crate::store::Store;
use crate::tree::{self, ChangeKind};
use crate::workspace;

/// One file that differs from the version.
#[derive(Debug, Clone, Serialize)]
pub struct Mismatch {
    /// Relative, `/`-separated path.
    pub path: String,
    /// Added (only on disk), modified, or deleted (only in the version).
    pub change: ChangeKind,
    /// The version's content id for the path (file id, or BLAKE3 of a symlink's target).
    pub expected: Option<ObjectId>,
    /// The content id found on disk.
    pub actual: Option<ObjectId>,
    /// The version's size in bytes.
    pub expected_size: Option<u64>,
    /// The size found on disk, in bytes.
    pub actual_size: Option<u64>,
}

/// A report a reviewer can keep: what was compared, how, and every difference.
#[derive(Debug, Clone, Serialize)]
pub struct AuditReport {
    /// The directory audited (canonical).
    pub dir: PathBuf,
    /// The dataset.
    pub dataset: String,
    /// The version the directory was compared with.
    pub version: ObjectId,
    /// Its root tree.
    pub tree: ObjectId,
    /// Where the version came from: `workspace` (the version the directory was last
    /// committed or checked out as), `revision` (`--against`) or `lock` (a lock file).
    pub claimed_by: &'static str,
    /// Files and symlinks in the version.
    pub files: u64,
    /// Bytes of the version's files.
    pub bytes: u64,
    /// Whether every file was re-hashed (`--full`) instead of trusting the stat cache.
    pub full: bool,
    /// Files read and hashed for this audit.
    pub files_hashed: u64,
    /// True when the directory holds exactly the version: same paths, kinds, modes, bytes.
    pub identical: bool,
    /// Every difference, sorted by path.
    pub mismatches: Vec<Mismatch>,
    /// When the audit ran, Unix seconds.
    pub audited_at: i64,
    /// How long it took, in seconds.
    pub seconds: f64,
    /// The dsv that ran it.
    pub dsv_version: &'static str,
}

/// How an audit reads the directory.
#[derive(Debug, Clone, Copy)]
pub struct AuditOptions {
    /// Re-hash every file instead of trusting the stat cache (`--full`).
    pub full: bool,
    /// Files hashed at once.
    pub jobs: usize,
}

/// Audits `dir` against `version` of `dataset`, or, when `target` is `None`, against the
/// version the store recorded for the directory (its last commit or checkout).
///
/// # Errors
/// [`Error::NotADirectory`], [`Error::NotAWorkspace`] (no target and no record),
/// [`Error::WorkspaceVersionRemoved`] (no target, and the recorded version was removed),
/// [`Error::MissingObject`] when the version's trees are not here, read errors.
pub fn audit(
    store: &Store,
    dir: &Path,
    target: Option<(&str, ObjectId, &'static str)>,
    options: &AuditOptions,
    progress: &dyn Progress,
) -> Result<AuditReport> {
    let AuditOptions { full, jobs } = *options;
    let started = std::time::Instant::now();
    let (dir, key) = workspace::canonical_dir(dir)?;
    let _data_lock = store.lock_data_shared()?;
    let recorded = store.catalog().workspace(&key)?;
    let (dataset, version, claimed_by) = match target {
        Some((dataset, version, why)) => (dataset.to_string(), version, why),
        None => match &recorded {
            Some(ws) => match (&ws.dataset, ws.version) {
                // As status: the claim is of a version the user removed, nothing to restore.
                (Some(_), Some(version)) if store.catalog().removed_at(&version)?.is_some() => {
                    return Err(Error::WorkspaceVersionRemoved {
                        dir: dir.clone(),
                        version: version.to_hex(),
                    });
                }
                (Some(dataset), Some(version)) => (dataset.clone(), version, "workspace"),
                _ => {
                    return Err(Error::NotAWorkspace {
                        path: dir.clone(),
                        store: store.root().to_path_buf(),
                    });
                }
            },
            None => {
                return Err(Error::NotAWorkspace {
                    path: dir.clone(),
                    store: store.root().to_path_buf(),
                });
            }
        },
    };
    let record = store.catalog().version_record(&version)?;
    // The stat cache may vouch only for the version this directory was recorded with.
    let cache_of = match &recorded {
        Some(ws) if !full && ws.version == Some(version) => Some(ws.id),
        _ => None,
    };
    let mut reader = store.reader();
    let compared = super::status::compare_with_disk(
        &dir,
        store.catalog().path(),
        cache_of,
        tree::walk_version(&mut reader, &record.version)?,
        jobs,
        progress,
    )?;
    let mut mismatches: Vec<Mismatch> = compared
        .changes
        .into_iter()
        .map(|change| Mismatch {
            path: change.path,
            change: change.change,
            expected: change.old.as_ref().map(|e| e.id),
            actual: change.new.as_ref().map(|e| e.id),
            expected_size: change.old.as_ref().map(|e| e.size),
            actual_size: change.new.as_ref().map(|e| e.size),
        })
        .collect();
    // Entries dsv cannot version (sockets, devices, escaping symlinks) are differences too.
    for entry in compared.unsupported {
        mismatches.push(Mismatch {
            path: entry.path,
            change: ChangeKind::Added,
            expected: None,
            actual: None,
            expected_size: None,
            actual_size: Some(entry.stat.size),
        });
    }
    mismatches.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(AuditReport {
        dir,
        dataset,
        version,
        tree: record.version.tree,
        claimed_by,
        files: record.version.files,
        bytes: record.version.bytes,
        full,
        files_hashed: compared.hashed.len() as u64,
        identical: mismatches.is_empty(),
        mismatches,
        audited_at: unix_now(),
        seconds: started.elapsed().as_secs_f64(),
        dsv_version: env!("CARGO_PKG_VERSION"),
    })
}

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

/// Audits `dir` against `against` (resolved here), or, when it is `None`, against the
/// version the store recorded for the directory, as [`audit`] does. The report's
/// `claimed_by` is `revision` or `workspace`.
///
/// # Errors
/// Revision errors ([`Error::DatasetNotFound`], [`Error::RevisionNotFound`], …); as
/// [`audit`].
pub fn audit_against(
    store: &Store,
    dir: &Path,
    against: Option<&Revision>,
    options: &AuditOptions,
    progress: &dyn Progress,
) -> Result<AuditReport> {
    let target = match against {
        Some(revision) => Some((
            revision.dataset.as_str(),
            revision.resolve(store.catalog())?,
        )),
        None => None,
    };
    audit(
        store,
        dir,
        target.map(|(dataset, id)| (dataset, id, "revision")),
        options,
        progress,
    )
}

/// What `audit --lock` reports: one audit per dataset the lock pins. The fields are in name
/// order, as the JSON of `audit --lock` has always listed them.
#[derive(Debug, Clone, Serialize)]
pub struct LockAuditReport {
    /// Each pinned dataset's audit of `DIR/NAME`, in dataset name order.
    pub datasets: Vec<AuditReport>,
    /// True when every directory holds exactly its pinned version.
    pub identical: bool,
    /// The lock file, as given.
    pub lock: PathBuf,
}

/// Audits `dir/NAME` against each version lock file `lock_path` pins: reads and checks the
/// lock ([`read_lock`]), makes sure this store knows every pinned version, fetching metadata
/// from a remote the lock names when it does not ([`resolve_lock`]), then [`audit`]s each
/// directory. Nothing is written but fetched metadata.
///
/// # Errors
/// As [`read_lock`], [`resolve_lock`] and [`audit`] (a missing `dir/NAME` is
/// [`Error::NotADirectory`]).
pub fn audit_lock(
    store: &mut Store,
    lock_path: &Path,
    dir: &Path,
    options: &AuditOptions,
    progress: &dyn Progress,
) -> Result<LockAuditReport> {
    let lock = read_lock(lock_path)?;
    let pinned = resolve_lock(store, lock_path, &lock, options.jobs, progress)?;
    let mut datasets = Vec::new();
    for (dataset, version) in &pinned {
        let target = Some((dataset.as_str(), *version, "lock"));
        datasets.push(audit(store, &dir.join(dataset), target, options, progress)?);
    }
    Ok(LockAuditReport {
        identical: datasets.iter().all(|r| r.identical),
        datasets,
        lock: lock_path.to_path_buf(),
    })
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
/// [`super::sync::fetch`].
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
                super::sync::fetch(store, &remote.name, jobs, progress)?;
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
