//! `dsv.Store` and `dsv.clone`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dsv::Error;
use dsv::ops::{checkout, commit, compose, sync};
use dsv::progress::NoProgress;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::errors::{Failure, Raise, Res, cancellable};
use crate::store_state::{Origin, StoreState};
use crate::version::PyVersion;

/// A dsv store (its `.dsv` directory), open for reading versions, committing and checking
/// out. `Store()` finds the nearest store from the working directory upward (or `DSV_STORE`),
/// as the CLI does; `Store(path)` starts the search at `path`.
#[pyclass(module = "dsv._dsv", name = "Store", frozen)]
pub struct PyStore {
    state: Arc<StoreState>,
}

impl std::ops::Deref for PyStore {
    type Target = StoreState;

    fn deref(&self) -> &StoreState {
        &self.state
    }
}

impl PyStore {
    /// Opens the store found from `start`.
    fn open(start: &Path) -> Res<PyStore> {
        let root = dsv::Store::find_root(start)?;
        PyStore::open_root(root, None)
    }

    /// Opens the store whose `.dsv` directory is `root`.
    fn open_root(root: PathBuf, origin: Option<Origin>) -> Res<PyStore> {
        Ok(PyStore {
            state: Arc::new(StoreState::open_root(root, origin)?),
        })
    }
}

/// The per-user cache directory: `DSV_CACHE`, else `$XDG_CACHE_HOME/dsv`, else
/// `~/.cache/dsv`, else `dsv-cache` in the system's temporary directory.
#[pyfunction]
pub fn default_cache_dir() -> PathBuf {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("DSV_CACHE") {
        return PathBuf::from(dir);
    }
    if let Some(dir) = var("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("dsv");
    }
    if let Some(home) = var("HOME") {
        return PathBuf::from(home).join(".cache").join("dsv");
    }
    std::env::temp_dir().join("dsv-cache")
}

/// The directory to start looking for a store from: `path`, else `DSV_STORE`, else the
/// working directory.
fn start_dir(path: Option<PathBuf>) -> Res<PathBuf> {
    crate::use_aws_profile_from_environment();
    if let Some(path) = path {
        return Ok(path);
    }
    if let Some(env) = std::env::var_os("DSV_STORE").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(env));
    }
    std::env::current_dir().map_err(|source| {
        Failure::Dsv(Error::Io {
            path: PathBuf::from("."),
            source,
        })
    })
}

/// Serializes a library report and parses it as Python objects (the CLI's `--json` twin).
fn to_python(py: Python<'_>, report: &impl serde::Serialize) -> PyResult<Py<PyAny>> {
    let text = serde_json::to_string(report).map_err(|e| {
        pyo3::exceptions::PyRuntimeError::new_err(format!("cannot encode a report: {e}"))
    })?;
    Ok(PyModule::import(py, "json")?
        .call_method1("loads", (text,))?
        .unbind())
}

#[pymethods]
impl PyStore {
    #[new]
    #[pyo3(signature = (path = None))]
    pub(crate) fn new(py: Python<'_>, path: Option<PathBuf>) -> PyResult<Self> {
        py.detach(|| PyStore::open(&start_dir(path)?)).raise(py)
    }

    /// The store's `.dsv` directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.root().to_path_buf()
    }

    /// The URL of the remote this store is the node-local clone of ([`open_remote`]), else
    /// `None`.
    #[getter]
    fn remote(&self) -> Option<String> {
        self.origin.as_ref().map(|o| o.url.clone())
    }

    /// True once `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.is_closed()
    }

    /// Opens version `revision` for reading: any revision the CLI takes (`mnist`,
    /// `mnist@v3`, `mnist@<id prefix>`, `mnist@v3~1`), and `REMOTE/NAME[@REV]`, whose ref is
    /// checked on the remote and whose metadata is fetched (no file data: files are fetched
    /// when first read).
    fn version(slf: &Bound<'_, Self>, revision: &str) -> PyResult<PyVersion> {
        open_version(slf, revision, revision)
    }

    /// Commits directory `dir` as a new version of `dataset` (created if new), as
    /// `dsv commit DIR --dataset NAME -m MESSAGE [--tag TAG] [--force]`; returns the report
    /// `dsv commit --json` prints (`version`, `created`, `files`, `bytes`, ...). `author`
    /// defaults to the CLI's (`DSV_AUTHOR`, `$USER@host`, git's identity, the uid's name);
    /// `force=True` commits a directory inside another workspace of the same dataset, which
    /// is otherwise refused (`dsv.InsideWorkspace`).
    #[pyo3(signature = (dir, *, dataset, message, **options))]
    fn commit(
        &self,
        py: Python<'_>,
        dir: PathBuf,
        dataset: String,
        message: String,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Py<PyAny>> {
        let flags = CommitFlags::from_keywords(options)?;
        let report = cancellable(py, || -> Res<_> {
            let mut store = self.writable()?;
            let mut options = commit::CommitOptions::new(dataset);
            options.message = message;
            options.tag = flags.tag;
            options.allow_empty = flags.allow_empty;
            options.author = Some(flags.author.unwrap_or_else(dsv_cli::default_author));
            options.allow_nested = flags.force;
            Ok(commit::commit(&mut store, &dir, &options, &NoProgress)?)
        })?;
        to_python(py, &report)
    }

    /// Checks out `revision` into `dir` (created if missing), as `dsv checkout REV DIR
    /// [--force]`: data only on a remote is downloaded first. Returns the report `dsv checkout
    /// --json` prints.
    #[pyo3(signature = (revision, dir, *, force = false))]
    fn checkout(
        &self,
        py: Python<'_>,
        revision: &str,
        dir: PathBuf,
        force: bool,
    ) -> PyResult<Py<PyAny>> {
        let outcome = cancellable(py, || -> Res<_> {
            let mut store = self.writable()?;
            let mut options = checkout::CheckoutOptions::default();
            options.force = force;
            Ok(compose::checkout_from_anywhere(
                &mut store,
                revision,
                &dir,
                &options,
                dsv::remote::DEFAULT_JOBS,
                &NoProgress,
            )?)
        })?;
        to_python(py, &outcome)
    }

    /// Sets the store's cache limit, as `dsv cache limit SIZE` does: bytes (an `int`) or a
    /// size such as `"10GiB"` or `"500MB"`; `None` removes it. A store setting (in
    /// `.dsv/config.toml`), so every reader of this store honours it, worker processes and
    /// the mount included: after a fetch from a remote brings the store's packs over the
    /// limit, the least recently used data a remote holds is evicted (never data no remote
    /// holds). Data already held over a new limit is evicted at once. Raises `ValueError`
    /// for 0 or a size that does not parse.
    #[pyo3(signature = (limit))]
    fn set_cache_limit(&self, py: Python<'_>, limit: Option<Bound<'_, PyAny>>) -> PyResult<()> {
        let bytes = match limit {
            None => None,
            Some(value) => {
                if let Ok(n) = value.extract::<u64>() {
                    Some(n)
                } else if let Ok(text) = value.extract::<String>() {
                    Some(dsv::ops::cache::parse_size(&text).map_err(|reason| {
                        pyo3::exceptions::PyValueError::new_err(format!("cache_limit: {reason}"))
                    })?)
                } else {
                    return Err(pyo3::exceptions::PyValueError::new_err(format!(
                        "cache_limit: expected a number of bytes or a size such as \"10GiB\", got {}",
                        value.repr()?
                    )));
                }
            }
        };
        if bytes == Some(0) {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "cache_limit: expected at least 1 byte (None removes the limit)",
            ));
        }
        py.detach(|| -> Res<()> {
            let mut store = self.writable()?;
            dsv::ops::cache::set_limit(&store, bytes)?;
            if let Some(limit) = bytes {
                dsv::ops::cache::enforce_limit(&mut store, limit, &Default::default())?;
            }
            Ok(())
        })
        .raise(py)
    }

    /// The store's cache limit in bytes (`dsv cache limit`), or `None`.
    #[getter]
    fn cache_limit(&self, py: Python<'_>) -> PyResult<Option<u64>> {
        py.detach(|| -> Res<Option<u64>> {
            self.check_open("store")?;
            Ok(dsv::ops::cache::limit(&dsv::Store::open(self.root())?)?)
        })
        .raise(py)
    }

    /// Releases the store's read engine (its catalog connection and cached frames). Every
    /// later call on the store, or on a version or file opened from it, raises
    /// `dsv.StoreClosed`. Closing twice is allowed.
    fn close(&self, py: Python<'_>) {
        py.detach(|| self.state.close());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> bool {
        self.close(py);
        false
    }

    /// Pickles as the store's path (a worker process opens it again); the clone of a remote
    /// pickles as `open_remote`'s arguments (the URL, the cache directory if one was named,
    /// the remote options), so a worker on another machine opens its own node's clone.
    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<(Py<PyAny>, Py<PyTuple>)> {
        let py = slf.py();
        let store = slf.get();
        store.check_open("store").raise(py)?;
        match &store.origin {
            None => Ok((
                slf.get_type().into_any().unbind(),
                (store.root().to_path_buf(),).into_pyobject(py)?.unbind(),
            )),
            Some(origin) => Ok((
                PyModule::import(py, "dsv._dsv")?
                    .getattr("_open_remote_again")?
                    .unbind(),
                (
                    origin.url.clone(),
                    origin.cache.clone(),
                    origin.options.clone(),
                )
                    .into_pyobject(py)?
                    .unbind(),
            )),
        }
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { " (closed)" } else { "" };
        match &self.origin {
            Some(origin) => format!(
                "dsv.open_remote({:?}) at {:?}{state}",
                origin.url,
                self.root().display().to_string()
            ),
            None => format!("dsv.Store({:?}){state}", self.root().display().to_string()),
        }
    }
}

/// Opens version `revision` of `store` for reading, shown as `shown` (the revision a pickled
/// version was first opened as). A remote-backed store ([`open_remote`]) resolves a name on
/// its remote, and an exact `NAME@ID` locally first (no request when the clone knows it).
pub(crate) fn open_version(
    slf: &Bound<'_, PyStore>,
    revision: &str,
    shown: &str,
) -> PyResult<PyVersion> {
    let py = slf.py();
    let store = slf.get();
    // The clone of a remote resolves names on the remote: its head and tags now.
    let on_remote;
    let revision = match &store.origin {
        Some(_) if sync::RemoteRevision::parse(revision).raise(py)?.is_none() => {
            on_remote = format!("origin/{revision}");
            on_remote.as_str()
        }
        _ => revision,
    };
    let handle = cancellable(py, || -> Res<_> {
        let exact = match sync::RemoteRevision::parse(revision)? {
            Some(target) => {
                let mut writable = store.writable()?;
                // Metadata only: an include that matches no file fetches no chunk.
                let nothing = globset::GlobSetBuilder::new()
                    .build()
                    .expect("an empty set builds");
                let prepared = sync::prepare_remote_revision(
                    &mut writable,
                    &target,
                    Some(&nothing),
                    dsv::remote::DEFAULT_JOBS,
                    &NoProgress,
                )?;
                format!("{}@{}", prepared.dataset, prepared.version.to_hex())
            }
            None => revision.to_string(),
        };
        let handle = store.engine()?.version(&exact)?;
        handle.entries()?;
        Ok(handle)
    })?;
    PyVersion::new(
        py,
        slf.clone().into_any().unbind(),
        store.state.clone(),
        shown.to_string(),
        handle,
    )
}

/// Opens version `id` of `dataset` in `store` (how a pickled `Version` comes back in another
/// process): the same version, whatever the remote's refs say now.
#[pyfunction]
pub fn reopen_version(
    store: &Bound<'_, PyStore>,
    dataset: String,
    id: String,
    revision: String,
) -> PyResult<PyVersion> {
    open_version(store, &format!("{dataset}@{id}"), &revision)
}

/// `dsv clone URL PATH`: a new store at `path` whose remote `origin` is `url`, with its
/// datasets' heads and tags and their metadata; no file data (reads fetch what they need).
/// `options` are the remote's settings (`dsv remote add --option KEY=VALUE`). Returns the
/// new store.
#[pyfunction]
#[pyo3(signature = (url, path, *, options = None))]
pub fn clone(
    py: Python<'_>,
    url: &str,
    path: PathBuf,
    options: Option<BTreeMap<String, String>>,
) -> PyResult<PyStore> {
    crate::use_aws_profile_from_environment();
    cancellable(py, || -> Res<_> {
        let mut clone_options = sync::CloneOptions::default();
        clone_options.remote_options = options.unwrap_or_default();
        let report = sync::clone(url, &path, &clone_options, &NoProgress)?;
        PyStore::open(&report.store)
    })
}

/// The store through which a machine reads remote `url` without a store of its own: the
/// node-local clone of the remote's metadata in cache directory `cache` (default: `DSV_CACHE`,
/// else `$XDG_CACHE_HOME/dsv`, else `~/.cache/dsv`), made on first use. However many
/// processes of a node open it at once, one clones (under a file lock) and the others use
/// that clone. Revisions resolve on the remote (`store.version("mnist@v3")` reads the
/// remote's tag now); file data is fetched when first read and kept for every process of the
/// node. `options` are the remote's settings (`dsv remote add --option KEY=VALUE`). The store
/// pickles as these arguments, so a worker on another machine opens its own node's clone.
#[pyfunction]
#[pyo3(signature = (url, *, cache = None, options = None))]
pub fn open_remote(
    py: Python<'_>,
    url: &str,
    cache: Option<PathBuf>,
    options: Option<BTreeMap<String, String>>,
) -> PyResult<PyStore> {
    crate::use_aws_profile_from_environment();
    let origin = Origin {
        url: url.to_string(),
        cache,
        options: options.unwrap_or_default(),
    };
    cancellable(py, || -> Res<_> {
        let cache_dir = origin.cache.clone().unwrap_or_else(default_cache_dir);
        let mut clone_options = sync::CloneOptions::default();
        clone_options.remote_options = origin.options.clone();
        let report = sync::clone_cached(&origin.url, &cache_dir, &clone_options, &NoProgress)?;
        let root = report.store.join(dsv::store::STORE_DIR);
        PyStore::open_root(root, Some(origin.clone()))
    })
}

/// How a pickled remote-backed store comes back ([`open_remote`] with positional arguments).
#[pyfunction]
pub fn _open_remote_again(
    py: Python<'_>,
    url: &str,
    cache: Option<PathBuf>,
    options: BTreeMap<String, String>,
) -> PyResult<PyStore> {
    open_remote(py, url, cache, Some(options))
}

/// The optional keyword arguments of `Store.commit`: `tag=None`, `allow_empty=False`,
/// `author=None`, `force=False`.
#[derive(Default)]
struct CommitFlags {
    tag: Option<String>,
    allow_empty: bool,
    author: Option<String>,
    force: bool,
}

impl CommitFlags {
    /// Reads the keywords, as Python would bind them: a keyword it does not know, or a value
    /// of the wrong type, raises `TypeError`.
    fn from_keywords(keywords: Option<&Bound<'_, PyDict>>) -> PyResult<CommitFlags> {
        let mut flags = CommitFlags::default();
        let Some(keywords) = keywords else {
            return Ok(flags);
        };
        for (key, value) in keywords.iter() {
            let key: String = key.extract()?;
            let wrong = |expected: &str| {
                pyo3::exceptions::PyTypeError::new_err(format!(
                    "commit(): {key} must be {expected}"
                ))
            };
            match key.as_str() {
                "tag" => flags.tag = value.extract().map_err(|_| wrong("a str or None"))?,
                "author" => flags.author = value.extract().map_err(|_| wrong("a str or None"))?,
                "allow_empty" => {
                    flags.allow_empty = value.extract().map_err(|_| wrong("a bool"))?
                }
                "force" => flags.force = value.extract().map_err(|_| wrong("a bool"))?,
                _ => {
                    return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                        "commit() got an unexpected keyword argument '{key}'"
                    )));
                }
            }
        }
        Ok(flags)
    }
}
