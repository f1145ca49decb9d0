//! `dsv.Store` and `dsv.clone`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use dsv::Error;
use dsv::ops::{checkout, commit, sync};
use dsv::progress::NoProgress;
use dsv::read::{ReadEngine, ReadOptions};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::errors::{Failure, Raise, Res, cancellable};
use crate::fork::ForkLocal;
use crate::version::PyVersion;

/// A dsv store (its `.dsv` directory), open for reading versions, committing and checking
/// out. `Store()` finds the nearest store from the working directory upward (or `DSV_STORE`),
/// as the CLI does; `Store(path)` starts the search at `path`.
#[pyclass(module = "dsv._dsv", name = "Store", frozen)]
pub struct PyStore {
    root: PathBuf,
    closed: AtomicBool,
    /// This process's read engine (made again, lazily, in a forked child).
    engine: Mutex<ForkLocal<ReadEngine>>,
}

impl PyStore {
    /// Opens the store found from `start`.
    fn open(start: &Path) -> Res<PyStore> {
        let root = dsv::Store::find_root(start)?;
        let engine = ReadEngine::open(&root, ReadOptions::default())?;
        Ok(PyStore {
            root,
            closed: AtomicBool::new(false),
            engine: Mutex::new(ForkLocal::new(engine)),
        })
    }

    /// The `.dsv` directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Fails once the store is closed.
    pub fn check_open(&self, what: &'static str) -> Res<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Failure::Closed(what))
        } else {
            Ok(())
        }
    }

    /// This process's read engine, made on first use in each process. May open the catalog:
    /// call it without the GIL.
    pub fn engine(&self) -> Res<ReadEngine> {
        self.check_open("store")?;
        if let Some(engine) = self.lock_engine().get() {
            return Ok(engine.clone());
        }
        // Made outside the lock: a thread holding the GIL may be waiting for it.
        let engine = ReadEngine::open(&self.root, ReadOptions::default())?;
        let mut slot = self.lock_engine();
        match slot.get() {
            Some(made) => Ok(made.clone()),
            None => {
                *slot = ForkLocal::new(engine.clone());
                Ok(engine)
            }
        }
    }

    fn lock_engine(&self) -> std::sync::MutexGuard<'_, ForkLocal<ReadEngine>> {
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A store handle for one operation that writes (commit, checkout, a remote fetch).
    pub fn writable(&self) -> Res<dsv::Store> {
        self.check_open("store")?;
        Ok(dsv::Store::open(&self.root)?)
    }
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
        self.root.clone()
    }

    /// True once `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Opens version `revision` for reading: any revision the CLI takes (`mnist`,
    /// `mnist@v3`, `mnist@<id prefix>`, `mnist@v3~1`), and `REMOTE/NAME[@REV]`, whose ref is
    /// checked on the remote and whose metadata is fetched (no file data: files are fetched
    /// when first read).
    fn version(slf: &Bound<'_, Self>, revision: &str) -> PyResult<PyVersion> {
        let py = slf.py();
        let store = slf.get();
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
        PyVersion::new(py, slf.clone().unbind(), revision.to_string(), handle)
    }

    /// Commits directory `dir` as a new version of `dataset` (created if new), as
    /// `dsv commit DIR --dataset NAME -m MESSAGE [--tag TAG] [--force]`; returns the report
    /// `dsv commit --json` prints (`version`, `created`, `files`, `bytes`, ...). `author`
    /// defaults to the CLI's (`DSV_AUTHOR`, `$USER@host`, git's identity, the uid's name);
    /// `force=True` commits a directory inside another workspace of the same dataset, which
    /// is otherwise refused (`dsv.InsideWorkspace`).
    #[pyo3(signature = (dir, *, dataset, message, tag = None, allow_empty = false, author = None, force = false))]
    #[allow(clippy::too_many_arguments)]
    fn commit(
        &self,
        py: Python<'_>,
        dir: PathBuf,
        dataset: String,
        message: String,
        tag: Option<String>,
        allow_empty: bool,
        author: Option<String>,
        force: bool,
    ) -> PyResult<Py<PyAny>> {
        let report = cancellable(py, || -> Res<_> {
            let mut store = self.writable()?;
            let mut options = commit::CommitOptions::new(dataset);
            options.message = message;
            options.tag = tag;
            options.allow_empty = allow_empty;
            options.author = Some(author.unwrap_or_else(dsv_cli::default_author));
            options.allow_nested = force;
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
            Ok(checkout::checkout_from_anywhere(
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

    /// Releases the store's read engine (its catalog connection and cached frames). Every
    /// later call on the store, or on a version or file opened from it, raises
    /// `dsv.StoreClosed`. Closing twice is allowed.
    fn close(&self, py: Python<'_>) {
        self.closed.store(true, Ordering::Release);
        py.detach(|| self.lock_engine().clear());
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> bool {
        self.close(py);
        false
    }

    /// Pickles as the store's path (a worker process opens it again).
    fn __reduce__(slf: &Bound<'_, Self>) -> PyResult<(Py<PyAny>, (PathBuf,))> {
        let py = slf.py();
        slf.get().check_open("store").raise(py)?;
        Ok((
            slf.get_type().into_any().unbind(),
            (slf.get().root.clone(),),
        ))
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { " (closed)" } else { "" };
        format!("dsv.Store({:?}){state}", self.root.display().to_string())
    }
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
