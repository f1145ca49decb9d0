//! `dsv clone`: a new store, the remote as `origin`, a fetch, every dataset's head and tags.
//! Only metadata is downloaded.
//!
//! # clone
//!
//! `clone()`: `Store::init_staged` beside the target directory's `.dsv`, `add_remote("origin", URL)`, a fetch,
//! then, under the store lock, a check that every fetched ref names a version now recorded
//! (`check_ref_target`: otherwise `Error::Corrupt` naming `origin:refs/heads/NAME` or
//! `origin:refs/tags/NAME/TAG`), and one transaction sets each dataset's head to the remote's head
//! and creates the remote's tags of those datasets. Only metadata is downloaded; chunks come
//! when a checkout or pull needs them. Then the store is renamed into place as `.dsv`: a
//! reader sees no store or a whole clone. If any step fails, the staged store is removed
//! (and the directory, if clone created it and it is empty). A store already there whose
//! `origin` has the same URL (an earlier clone, or a concurrent one that finished first) is
//! the clone, reported with `existing: true`; any other store is `StoreExists`.

use std::collections::BTreeMap;

use serde::Serialize;

use super::{Transfer, add_remote, fetch_with};
use crate::catalog::RemoteRef;
use crate::error::{Error, Result};
use crate::id::ObjectId;
use crate::progress::Progress;
use crate::remote::{self, Remote};
use crate::store::Store;

/// The outcome of `dsv clone`.
#[derive(Debug, Serialize)]
pub struct CloneReport {
    /// The new store's directory.
    pub store: std::path::PathBuf,
    /// The remote's name in the new store (`origin`).
    pub remote: String,
    /// The URL cloned.
    pub url: String,
    /// Each dataset and its head.
    pub datasets: BTreeMap<String, ObjectId>,
    /// Metadata downloaded (chunks come when first needed).
    pub transfer: Transfer,
    /// True when `store` was a clone of `url` already (made earlier, or by another process
    /// cloning there at the same time): it was left as it is, and `datasets` are its heads.
    pub existing: bool,
}

/// Records one remote ref as now known.
/// Fails (naming the remote's ref) when a ref fetched from `remote` names a version the
/// fetch did not bring: the remote does not hold it (a damaged or hostile remote).
fn check_ref_target(
    catalog: &crate::catalog::Catalog,
    remote: &str,
    reference: &RemoteRef,
) -> Result<()> {
    if catalog.version(&reference.version)?.is_some() {
        return Ok(());
    }
    let key = match &reference.tag {
        Some(tag) => format!("refs/tags/{}/{tag}", reference.dataset),
        None => format!("refs/heads/{}", reference.dataset),
    };
    Err(Error::corrupt(
        format!("{remote}:{key}"),
        format!(
            "names version {}, which the remote does not hold",
            reference.version.short()
        ),
    ))
}

/// The directory `clone` creates when none is given: the URL's last path element
/// (`s3://b/team/mnist` → `mnist`, `s3://b` → `b`), relative to the current directory.
///
/// # Errors
/// [`Error::CloneDirUnnamed`] when that element names no new directory (`.`, `..`,
/// nothing, `.dsv`, the scheme of `file:///`): the store would land in the current or
/// parent directory.
pub fn default_clone_dir(url: &str) -> Result<std::path::PathBuf> {
    let path = url.split_once("://").map_or(url, |(_, rest)| rest);
    let name = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
    if crate::object::check_name(name).is_err() || crate::walk::check_reserved_name(name).is_err() {
        return Err(Error::CloneDirUnnamed {
            url: url.to_string(),
            name: name.to_string(),
        });
    }
    Ok(std::path::PathBuf::from(name))
}

/// How to clone ([`clone`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CloneOptions {
    /// The options of remote `origin` (`--option KEY=VALUE`), checked as `remote add` checks
    /// them.
    pub remote_options: BTreeMap<String, String>,
    /// Requests in flight (default [`crate::remote::DEFAULT_JOBS`]).
    pub requests: usize,
}

impl Default for CloneOptions {
    fn default() -> CloneOptions {
        CloneOptions {
            remote_options: BTreeMap::new(),
            requests: crate::remote::DEFAULT_JOBS,
        }
    }
}

/// `dsv clone`: a new store in `dir` with remote `origin` at `url`, its refs, pack indexes
/// and metadata, and local heads and tags at the remote's. No chunk is downloaded: a
/// checkout fetches what it needs.
///
/// `dir` must not lie inside a store's `.dsv` directory (see
/// [`crate::walk::check_workspace_dir`]); [`default_clone_dir`] names one from the URL.
///
/// The new store is made beside `dir/.dsv` and renamed into place once whole
/// ([`Store::init_staged`]): another process sees no store there or a whole clone. A store
/// already in `dir` whose remote `origin` has this URL (an earlier clone, or another process
/// cloning into `dir` at the same time and finishing first) is the clone: it is left as it
/// is and reported with `existing: true` ("clone if missing" in many workers at once).
///
/// # Errors
/// [`Error::Unsupported`] for a `dir` inside a store's directory; [`Error::StoreExists`]
/// when `dir` holds a store that is not a clone of `url`; [`Error::InvalidRemote`], as
/// [`super::fetch()`]. A failed clone leaves nothing behind.
pub fn clone(
    url: &str,
    dir: &std::path::Path,
    options: &CloneOptions,
    progress: &dyn Progress,
) -> Result<CloneReport> {
    let jobs = options.requests;
    let options = &options.remote_options;
    // Never inside a store's own directory: dsv alone writes there.
    crate::walk::check_workspace_dir(dir)?;
    let url = &remote::url_from_path(url);
    remote::check_url(url)?;
    remote::check_options(options)?;
    let existed = dir.exists();
    // "Clone if missing": a store here that is already a clone of this URL is this clone.
    if let Some(report) = existing_clone(dir, url)? {
        return Ok(report);
    }
    // Made beside and renamed into place: another process sees no store or a whole clone.
    let mut staged = Store::init_staged(dir)?;
    let result = (|| {
        let store = staged.store();
        let record = add_remote(store, "origin", url, options)?;
        let remote = Remote::open(&record)?;
        let data_lock = store.lock_data_shared()?;
        let fetched = fetch_with(store, &data_lock, &record, &remote, jobs, progress)?;
        let _lock = store.lock_head(&data_lock)?;
        for reference in &fetched.refs {
            check_ref_target(store.catalog(), &record.name, reference)?;
        }
        let writer = store.catalog_mut().writer()?;
        let mut datasets = BTreeMap::new();
        for reference in &fetched.refs {
            if reference.tag.is_none() {
                writer.set_head(&reference.dataset, &reference.version)?;
                datasets.insert(reference.dataset.clone(), reference.version);
            }
        }
        for reference in &fetched.refs {
            if let Some(tag) = &reference.tag
                && datasets.contains_key(&reference.dataset)
            {
                writer.set_tag(&reference.dataset, tag, &reference.version, true)?;
            }
        }
        writer.commit()?;
        Ok(CloneReport {
            store: std::path::PathBuf::new(),
            remote: record.name.clone(),
            url: url.to_string(),
            datasets,
            transfer: fetched.transfer,
            existing: false,
        })
    })();
    let published = result.and_then(|report| match staged.publish() {
        Ok(_) => Ok(report),
        // Another process cloned here meanwhile: the same URL's clone is this one.
        Err(Error::StoreExists { path }) => match existing_clone(dir, url)? {
            Some(existing) => Ok(CloneReport {
                transfer: report.transfer,
                ..existing
            }),
            None => Err(Error::StoreExists { path }),
        },
        Err(e) => Err(e),
    });
    match published {
        Ok(mut report) => {
            report.store = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
            Ok(report)
        }
        Err(e) => {
            if !existed {
                // Only when empty: another process's clone may be there now.
                let _ = std::fs::remove_dir(dir);
            }
            Err(e)
        }
    }
}

/// The directory [`clone_cached`] keeps the clone of remote `url` (with remote `options`) in:
/// `CACHE/remotes/KEY`, where KEY is the first 32 hex digits of the BLAKE3 hash of the URL and
/// the options (sorted `KEY=VALUE` lines), so two endpoints behind one `s3://` URL never share
/// a clone.
pub fn cached_clone_dir(
    cache_dir: &std::path::Path,
    url: &str,
    options: &BTreeMap<String, String>,
) -> std::path::PathBuf {
    let url = remote::url_from_path(url);
    let mut hasher = blake3::Hasher::new();
    hasher.update(url.as_bytes());
    for (key, value) in options {
        hasher.update(b"\n");
        hasher.update(key.as_bytes());
        hasher.update(b"=");
        hasher.update(value.as_bytes());
    }
    let key = hasher.finalize().to_hex();
    cache_dir.join("remotes").join(&key.as_str()[..32])
}

/// The node-local clone of remote `url` in cache directory `cache_dir` (at
/// [`cached_clone_dir`]), made on first use: what a worker of a cluster that knows only the
/// remote's URL reads through. One process per machine clones: the others wait on the lock
/// file `CACHE/remotes/KEY.lock` (flock, released by the kernel if the cloner dies) and then
/// find the clone made (`existing: true`). A clone already there is used as it is, without
/// a request; its refs are refreshed when a remote revision is resolved through it.
///
/// # Errors
/// As [`clone`]; [`Error::Io`] when the cache directory or its lock file cannot be made.
pub fn clone_cached(
    url: &str,
    cache_dir: &std::path::Path,
    options: &CloneOptions,
    progress: &dyn Progress,
) -> Result<CloneReport> {
    use crate::error::IoResultExt;
    let url = &remote::url_from_path(url);
    let dir = cached_clone_dir(cache_dir, url, &options.remote_options);
    // The common case, every process after the first: the clone is there.
    if let Some(report) = existing_clone(&dir, url)? {
        return Ok(report);
    }
    let parent = dir.parent().unwrap_or(cache_dir);
    std::fs::create_dir_all(parent).at(parent)?;
    let lock_path = dir.with_extension("lock");
    let lock = crate::store_file::open_lock(&lock_path).at(&lock_path)?;
    lock.lock().at(&lock_path)?;
    // Another process may have cloned while this one waited.
    let report = match existing_clone(&dir, url)? {
        Some(report) => report,
        None => clone(url, &dir, options, progress)?,
    };
    drop(lock);
    Ok(report)
}

/// The report of a clone already made: the store in `dir` when its remote `origin` has URL
/// `url` (made by an earlier clone, or by another process cloning at the same time), its
/// heads as they are, nothing transferred. `None` when `dir` holds no store.
///
/// # Errors
/// [`Error::StoreExists`] when the store there is not a clone of `url`; as [`Store::open`].
fn existing_clone(dir: &std::path::Path, url: &str) -> Result<Option<CloneReport>> {
    let root = dir.join(crate::store::STORE_DIR);
    if !root.join("catalog.db").is_file() {
        return Ok(None);
    }
    let store = Store::open(&root)?;
    let same = store
        .catalog()
        .remotes()?
        .into_iter()
        .find(|r| r.name == "origin")
        .is_some_and(|origin| origin.url == url);
    if !same {
        return Err(Error::StoreExists { path: root });
    }
    let datasets = store
        .catalog()
        .datasets()?
        .into_iter()
        .filter_map(|d| Some((d.name, d.head?)))
        .collect();
    Ok(Some(CloneReport {
        store: std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()),
        remote: "origin".into(),
        url: url.to_string(),
        datasets,
        transfer: Transfer::default(),
        existing: true,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cached_clone_is_one_directory_per_url_and_options() {
        let cache = std::path::Path::new("/cache");
        let none = BTreeMap::new();
        let mut endpoint = BTreeMap::new();
        endpoint.insert("endpoint".to_string(), "http://127.0.0.1:9000".to_string());
        let a = cached_clone_dir(cache, "s3://b/datasets", &none);
        assert_eq!(a, cached_clone_dir(cache, "s3://b/datasets", &none));
        assert!(a.starts_with("/cache/remotes"));
        assert_eq!(a.file_name().unwrap().len(), 32);
        // Another URL, or the same URL at another endpoint, is another remote.
        assert_ne!(a, cached_clone_dir(cache, "s3://b/other", &none));
        assert_ne!(a, cached_clone_dir(cache, "s3://b/datasets", &endpoint));
    }

    #[test]
    fn a_clone_is_named_after_the_urls_last_element_unless_that_names_no_new_directory() {
        assert_eq!(
            default_clone_dir("s3://b/team/mnist/").unwrap(),
            std::path::Path::new("mnist")
        );
        assert_eq!(
            default_clone_dir("s3://b").unwrap(),
            std::path::Path::new("b")
        );
        for url in ["file:///", "s3://b/..", "s3://b/.dsv", "s3://b/."] {
            assert!(
                matches!(default_clone_dir(url), Err(Error::CloneDirUnnamed { .. })),
                "{url}"
            );
        }
    }
}
