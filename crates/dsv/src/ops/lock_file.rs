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
    /// Its backend settings (`--option KEY=VALUE`: `endpoint`, `region`, ...), never a
    /// credential (a key or value [`crate::remote::check_options`] refuses is left out).
    /// Written only when there are some; a reading store matches its remotes by URL and, when
    /// an `endpoint` is given here, by it (one bucket name on two servers is two remotes).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub options: BTreeMap<String, String>,
}

impl LockedRemote {
    /// True when the configured remote `remote` is this one: the same URL and, when the lock
    /// names an endpoint, the same endpoint (`endpoint` or any alias spelling of it). A lock
    /// that names no endpoint (as every lock before options were kept) matches any endpoint.
    pub fn matches(&self, remote: &crate::catalog::RemoteRecord) -> bool {
        remote.url == self.url
            && endpoint(&self.options)
                .is_none_or(|pinned| endpoint(&remote.options) == Some(pinned))
    }
}

/// The endpoint a remote's options name, if any (`endpoint`, `aws_endpoint`,
/// `aws_endpoint_url`, any case), without a trailing `/`.
fn endpoint(options: &BTreeMap<String, String>) -> Option<&str> {
    options
        .iter()
        .find(|(key, _)| {
            matches!(
                key.to_ascii_lowercase().as_str(),
                "endpoint" | "endpoint_url" | "aws_endpoint" | "aws_endpoint_url"
            )
        })
        .map(|(_, value)| value.trim_end_matches('/'))
}

/// The options of a remote that a lock file may hold: every one but those naming a
/// credential (the catalog holds none; checked again here, one key at a time).
fn shareable_options(options: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    options
        .iter()
        .filter(|(key, value)| {
            let one = BTreeMap::from([((*key).clone(), (*value).clone())]);
            crate::remote::check_options(&one).is_ok()
        })
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// Pins `revisions` (one per dataset) in a lock file.
///
/// # Errors
/// Revision errors; [`Error::InvalidLock`] when two revisions name one dataset.
pub fn lock(store: &Store, revisions: &[Revision]) -> Result<LockFile> {
    let resolved = revisions
        .iter()
        .map(|revision| Ok((revision.dataset.clone(), revision.resolve(store.catalog())?)))
        .collect::<Result<Vec<_>>>()?;
    pin(store, &resolved)
}

/// Pins revisions given as text (one per dataset), each a local revision (`mnist@v1`) or a
/// remote's (`REMOTE/NAME[@REV]`: `origin/covid@v10`, resolved against that remote's heads
/// and tags as last fetched, with no request: `dsv fetch` first for the newest), in a lock
/// file. A remote's version must be recorded here (a fetch records every version it names).
///
/// # Errors
/// As [`lock`]; [`Error::RemoteNotFound`] for an unknown remote;
/// [`Error::RevisionNotFound`] for a ref that remote does not have.
pub fn lock_named(store: &Store, revisions: &[String]) -> Result<LockFile> {
    let mut resolved = Vec::new();
    for text in revisions {
        match crate::transfer::RemoteRevision::parse(text)? {
            Some(target) => {
                let record = store.catalog().remote(&target.remote)?;
                let version = super::sync::resolve_remote(store, &record, &target.revision)?;
                resolved.push((target.revision.dataset.clone(), version));
            }
            None => {
                let revision = Revision::parse(text)?;
                let version = revision.resolve(store.catalog())?;
                resolved.push((revision.dataset.clone(), version));
            }
        }
    }
    pin(store, &resolved)
}

/// The configured remotes known (as last fetched or pushed) to hold version `version`, in
/// the store's order, as a lock file or a lineage record names them: name, URL and the
/// options that are no credential. Nothing is contacted.
///
/// # Errors
/// Catalog errors.
pub fn holding_remotes(store: &Store, version: &ObjectId) -> Result<Vec<LockedRemote>> {
    let mut remotes = Vec::new();
    for remote in store.catalog().remotes()? {
        if store
            .catalog()
            .remote_locate(remote.id, version, ObjectKind::Version)?
            .is_some()
        {
            remotes.push(LockedRemote {
                options: shareable_options(&remote.options),
                name: remote.name,
                url: remote.url,
            });
        }
    }
    Ok(remotes)
}

/// The lock file pinning each (dataset, version) of `resolved`.
fn pin(store: &Store, resolved: &[(String, ObjectId)]) -> Result<LockFile> {
    let mut datasets = BTreeMap::new();
    for (dataset, version) in resolved {
        let version = *version;
        let record = store.catalog().version_record(&version)?;
        if record.version.dataset != *dataset {
            return Err(Error::RevisionNotFound {
                revision: format!("{dataset}@{}", version.to_hex()),
                closest: None,
            });
        }
        let remotes = holding_remotes(store, &version)?;
        let pinned = LockedVersion {
            version,
            tree: record.version.tree,
            files: record.version.files,
            bytes: record.version.bytes,
            remotes,
        };
        if datasets.insert(dataset.clone(), pinned).is_some() {
            return Err(Error::InvalidLock {
                path: PathBuf::from("-"),
                reason: format!("dataset {dataset:?} is named twice"),
            });
        }
    }
    Ok(LockFile {
        dsv_lock: LOCK_FORMAT,
        datasets,
    })
}

/// The most bytes a lock file may hold (16 MiB: a lock pins one entry of a few hundred
/// bytes per dataset); a longer file is refused before it is parsed.
pub const MAX_LOCK_BYTES: u64 = 16 << 20;

/// Reads and checks a lock file: a regular file (a symlink to one is followed) of at most
/// [`MAX_LOCK_BYTES`], opened without waiting (a FIFO given as the lock is refused, never
/// waited on).
///
/// # Errors
/// [`Error::Io`]; [`Error::InvalidLock`] when it is not a regular file, is longer than
/// [`MAX_LOCK_BYTES`], or is not a dsv lock file of a known format, or names an invalid
/// dataset.
pub fn read_lock(path: &Path) -> Result<LockFile> {
    let invalid = |reason: String| Error::InvalidLock {
        path: path.to_path_buf(),
        reason,
    };
    let text = read_bounded_text(path, MAX_LOCK_BYTES, "lock file", invalid)?;
    parse_lock(&text, path)
}

/// The UTF-8 text of a file a user names (a lock file, a lineage record): a regular file (a
/// symlink to one is followed) of at most `limit` bytes, opened without waiting, so a FIFO
/// is refused and never waited on. `what` names the kind of file in the reasons, which
/// `invalid` turns into the kind's error.
///
/// # Errors
/// [`Error::Io`]; `invalid(reason)` when it is not a regular file, is longer than `limit`,
/// or is not UTF-8.
pub(crate) fn read_bounded_text(
    path: &Path,
    limit: u64,
    what: &str,
    invalid: impl Fn(String) -> Error,
) -> Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .at(path)?;
    if !file.metadata().at(path)?.is_file() {
        return Err(invalid(format!(
            "it is not a regular file (a FIFO, a directory or a device); give the {what} itself"
        )));
    }
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes).at(path)?;
    if bytes.len() as u64 > limit {
        return Err(invalid(format!(
            "it is longer than {} MiB, more than any {what}",
            limit >> 20
        )));
    }
    String::from_utf8(bytes).map_err(|_| invalid("it is not UTF-8 text".into()))
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

/// Makes sure this store records version `version`: when it does not, fetches each
/// configured remote that is one of `remotes` (matched as [`LockedRemote::matches`] says), in
/// the store's order, until the version is recorded. Returns the name of the remote it came
/// from, `None` when it was here already or no remote supplied it (the caller checks the
/// catalog). Shared by lock files and lineage records ([`super::lineage`]).
///
/// # Errors
/// As [`super::sync::fetch()`]; catalog errors.
pub fn fetch_pinned(
    store: &mut Store,
    version: &ObjectId,
    remotes: &[LockedRemote],
    jobs: usize,
    progress: &dyn Progress,
) -> Result<Option<String>> {
    if store.catalog().version(version)?.is_some() {
        return Ok(None);
    }
    let configured = store.catalog().remotes()?;
    for remote in configured
        .iter()
        .filter(|r| remotes.iter().any(|l| l.matches(r)))
    {
        let options = super::sync::FetchOptions { requests: jobs };
        super::sync::fetch(store, &remote.name, &options, progress)?;
        if store.catalog().version(version)?.is_some() {
            return Ok(Some(remote.name.clone()));
        }
    }
    Ok(None)
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
        fetch_pinned(store, &pinned.version, &pinned.remotes, jobs, progress)?;
        let Some(record) = store.catalog().version(&pinned.version)? else {
            return Err(Error::LockedVersionUnknown {
                dataset: dataset.clone(),
                version: pinned.version.to_hex(),
                // What `dsv remote add NAME ...` needs to reach each: the URL and its options.
                remotes: pinned
                    .remotes
                    .iter()
                    .map(|r| {
                        let mut line = r.url.clone();
                        for (key, value) in &r.options {
                            line.push_str(&format!(" --option {key}={value}"));
                        }
                        line
                    })
                    .collect(),
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
