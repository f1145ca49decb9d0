//! Reproducibility audits: is a directory bit-identical to a version? `audit --lock` audits
//! each directory a lock file pins; the lock files themselves (making, reading, resolving)
//! are [`super::lock_file`].
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
//! (`disk::compare_with_disk`, `tree::StreamingDiff`), the comparison `status` uses, and adds every entry dsv cannot version as a mismatch. What it
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
//! A lock file (`docs/format.md#lock-files`) pins versions by id and root tree; how `audit
//! --lock` and `checkout --lock` resolve it is in [`super::lock_file`].
//!
//! `verify --full` reassembles every distinct file held here of every version walked and checks
//! it whole; without `--full`, a file map listing the wrong chunks with the right lengths would
//! pass.

use std::path::{Path, PathBuf};

use serde::Serialize;

// `ops::checkout` (`checkout --lock`) reaches the lock file functions by their old path.
pub use super::lock_file::{read_lock, resolve_lock};
use crate::catalog::unix_now;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::progress::Progress;
use crate::revision::Revision;
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
    let compared = super::disk::compare_with_disk(
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
