//! `dsv.Version` (a version open for reading) and the native half of `dsv.File`.

use std::sync::{Arc, Mutex};

use dsv::Error;
use dsv::ObjectId;
use dsv::read::{FileHandle, Selection, VersionHandle, VersionListing};
use dsv::shard::ShardSpec;
use dsv::tree::{FlatEntry, FlatKind};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBytes, PyDict, PyString};

use crate::errors::{Failure, Raise, Res};
use crate::fork::ForkLocal;
use crate::store_state::StoreState;

/// One version of a dataset, open for reading without a checkout: list, stat, open and read
/// its files, take a worker's shard. Files whose data is only on a remote are fetched when
/// first opened and kept in the store, for every later reader on the machine.
#[pyclass(module = "dsv._dsv", name = "Version", frozen)]
pub struct PyVersion {
    /// The Python `Store` it was opened from (returned by `store`, pickled with it).
    store: Py<PyAny>,
    /// That store's state.
    state: Arc<StoreState>,
    revision: String,
    id: ObjectId,
    /// The dataset that holds it (a rename changes it; `meta.dataset` keeps the old name).
    dataset: String,
    meta: dsv::object::Version,
    files: usize,
    size_bytes: u64,
    /// The version's listing: plain data, used in every process. A forked child opens the
    /// version again from it ([`dsv::read::ReadEngine::reopen`]) without reading a tree.
    listing: VersionListing,
    handle: Mutex<ForkLocal<Arc<VersionHandle>>>,
}

impl PyVersion {
    /// A version of `store` (a Python `Store` whose state is `state`), opened as `revision`.
    /// Its paths are listed (`len`, `files` and indexing need them): call
    /// [`VersionHandle::entries`] first, without the GIL.
    pub fn new(
        py: Python<'_>,
        store: Py<PyAny>,
        state: Arc<StoreState>,
        revision: String,
        handle: VersionHandle,
    ) -> PyResult<PyVersion> {
        let (files, size_bytes) = handle
            .files()
            .raise(py)?
            .fold((0, 0), |(n, bytes), e| (n + 1, bytes + e.size));
        let listing = handle.listing().raise(py)?;
        Ok(PyVersion {
            store,
            state,
            revision,
            id: handle.id(),
            dataset: handle.dataset().to_string(),
            meta: handle.version().clone(),
            files,
            size_bytes,
            listing,
            handle: Mutex::new(ForkLocal::new(Arc::new(handle))),
        })
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, ForkLocal<Arc<VersionHandle>>> {
        self.handle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The version handle of this process; opened again (without the GIL) in a forked child.
    fn handle(&self, py: Python<'_>) -> PyResult<Arc<VersionHandle>> {
        self.state.check_open("version").raise(py)?;
        if let Some(handle) = self.slot().get() {
            return Ok(handle.clone());
        }
        py.detach(|| self.reopen()).raise(py)
    }

    /// As [`PyVersion::handle`], for use without the GIL.
    fn handle_detached(&self) -> Res<Arc<VersionHandle>> {
        self.state.check_open("version")?;
        if let Some(handle) = self.slot().get() {
            return Ok(handle.clone());
        }
        self.reopen()
    }

    /// This process's handle, made from the listing the version was opened with: a new
    /// lease and one catalog query, no tree read (a forked worker reads as fast as its parent).
    fn reopen(&self) -> Res<Arc<VersionHandle>> {
        let engine = self.state.engine()?;
        let handle = Arc::new(engine.reopen(&self.listing)?);
        let mut slot = self.slot();
        match slot.get() {
            Some(made) => Ok(made.clone()),
            None => {
                *slot = ForkLocal::new(handle.clone());
                Ok(handle)
            }
        }
    }

    fn not_found(&self, path: &str) -> Failure {
        Failure::Dsv(Error::PathNotFound {
            revision: self.revision.clone(),
            path: path.to_string(),
        })
    }
}

/// `include` as Python gives it: `None`, one glob, or a list of globs.
fn globs(include: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
    match include {
        None => Ok(Vec::new()),
        Some(value) if value.is_none() => Ok(Vec::new()),
        Some(value) if value.is_instance_of::<PyString>() => Ok(vec![value.extract()?]),
        Some(value) => value.extract(),
    }
}

fn kind_name(kind: &FlatKind) -> &'static str {
    match kind {
        FlatKind::File { .. } => "file",
        FlatKind::Dir => "directory",
        FlatKind::Symlink { .. } => "symlink",
    }
}

/// An entry as a dict: `path`, `type` (`file`, `directory`, `symlink`), `size`, `id`, and
/// `executable` (files) or `target` (symlinks).
fn entry_dict<'py>(py: Python<'py>, entry: &FlatEntry) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    dict.set_item("path", &entry.path)?;
    dict.set_item("type", kind_name(&entry.kind))?;
    dict.set_item("size", entry.size)?;
    dict.set_item("id", entry.id.to_hex())?;
    match &entry.kind {
        FlatKind::File { executable } => dict.set_item("executable", *executable)?,
        FlatKind::Symlink { target } => dict.set_item("target", target)?,
        FlatKind::Dir => {}
    }
    Ok(dict)
}

/// Reads of at most this many bytes are read into a buffer, then copied into the `bytes`
/// object, under one release of the GIL (a copy costs less than a second hand-off).
const SMALL_READ: u64 = 256 * 1024;

/// Reads `buf.len()` bytes of `file` at `offset`.
fn read_exact_at(file: &FileHandle, offset: u64, buf: &mut [u8]) -> Res<()> {
    let mut done = 0;
    while done < buf.len() {
        let n = file.read_at(offset + done as u64, &mut buf[done..])?;
        if n == 0 {
            return Err(Failure::Dsv(Error::Internal {
                detail: format!(
                    "{}: the file ended at byte {} of {}",
                    file.entry().path,
                    offset + done as u64,
                    file.size()
                ),
            }));
        }
        done += n;
    }
    Ok(())
}

/// `count` bytes of `file` from `offset` as a Python `bytes`, read without the GIL straight
/// into the new object.
fn read_bytes<'py>(
    py: Python<'py>,
    file: &FileHandle,
    offset: u64,
    count: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    PyBytes::new_with(py, count, |buf| {
        py.detach(|| read_exact_at(file, offset, buf)).raise(py)
    })
}

static FILE_CLASS: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

#[pymethods]
impl PyVersion {
    /// The version's id (64 hex digits).
    #[getter]
    fn id(&self) -> String {
        self.id.to_hex()
    }

    /// The dataset it belongs to.
    #[getter]
    fn dataset(&self) -> &str {
        &self.dataset
    }

    /// The revision it was opened as (`mnist@v3`).
    #[getter]
    fn revision(&self) -> &str {
        &self.revision
    }

    /// The commit message.
    #[getter]
    fn message(&self) -> &str {
        &self.meta.message
    }

    /// Who made it.
    #[getter]
    fn author(&self) -> &str {
        &self.meta.author
    }

    /// When it was made, in seconds since the Unix epoch.
    #[getter]
    fn time(&self) -> i64 {
        self.meta.time
    }

    /// The id of the previous version of the dataset, or `None`.
    #[getter]
    fn parent(&self) -> Option<String> {
        self.meta.parent.map(|p| p.to_hex())
    }

    /// Its root tree's id (64 hex digits): what a lock file and a lineage record pin beside
    /// the version id.
    #[getter]
    fn tree(&self) -> String {
        self.meta.tree.to_hex()
    }

    /// The tags of its dataset that name it, sorted (read from the store's catalog now).
    #[getter]
    fn tags(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let store = &self.state;
        let id = self.id;
        py.detach(|| -> Res<Vec<String>> { Ok(store.writable()?.catalog().tags_of(&id)?) })
            .raise(py)
    }

    /// The configured remotes known (as last fetched or pushed) to hold it, in the store's
    /// order: dicts with ``name``, ``url`` and ``options`` (the settings that are no
    /// credential), as a lock file names them. Nothing is contacted.
    #[getter]
    fn remotes<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let store = &self.state;
        let id = self.id;
        let remotes = py
            .detach(|| -> Res<_> {
                Ok(dsv::ops::lock_file::holding_remotes(
                    &store.writable()?,
                    &id,
                )?)
            })
            .raise(py)?;
        remotes
            .into_iter()
            .map(|remote| {
                let dict = PyDict::new(py);
                dict.set_item("name", remote.name)?;
                dict.set_item("url", remote.url)?;
                dict.set_item("options", remote.options)?;
                Ok(dict)
            })
            .collect()
    }

    /// The store it was opened from.
    #[getter]
    fn store(&self, py: Python<'_>) -> Py<PyAny> {
        self.store.clone_ref(py)
    }

    /// Total bytes of its regular files.
    #[getter]
    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// The number of regular files.
    fn __len__(&self) -> usize {
        self.files
    }

    /// True when `path` is a regular file of the version.
    fn __contains__(&self, py: Python<'_>, path: &str) -> PyResult<bool> {
        let handle = self.handle(py)?;
        Ok(handle
            .stat(path)
            .raise(py)?
            .is_some_and(|e| matches!(e.kind, FlatKind::File { .. })))
    }

    /// The paths of its regular files, sorted; with `include` (a glob such as `train/**`, or
    /// a list of them), only those matching one.
    #[pyo3(signature = (include = None))]
    fn files(&self, py: Python<'_>, include: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<String>> {
        let mut selection = Selection::default();
        selection.include = globs(include)?;
        let handle = self.handle(py)?;
        let chosen = handle.select(&selection).raise(py)?;
        Ok(chosen.into_iter().map(|e| e.path.clone()).collect())
    }

    /// The files worker `rank` of `world_size` reads: the same assignment as the CLI's
    /// `--shard RANK/WORLD_SIZE` and `dsv shards` (balanced by bytes, disjoint, covering every
    /// file once, the same on every machine), of the files `include` selects.
    #[pyo3(signature = (rank, world_size, include = None))]
    fn shard(
        &self,
        py: Python<'_>,
        rank: i64,
        world_size: i64,
        include: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<String>> {
        let spec = format!("{rank}/{world_size}")
            .parse::<ShardSpec>()
            .raise(py)?;
        let mut selection = Selection::default();
        selection.include = globs(include)?;
        selection.shard = Some(spec);
        let handle = self.handle(py)?;
        let chosen = handle.select(&selection).raise(py)?;
        Ok(chosen.into_iter().map(|e| e.path.clone()).collect())
    }

    /// What `path` is: a dict with `path`, `type` (`file`, `directory` or `symlink`),
    /// `size`, `id`, and `executable` (files) or `target` (symlinks). Raises
    /// `dsv.PathNotFound` when the version has no such path.
    fn stat<'py>(&self, py: Python<'py>, path: &str) -> PyResult<Bound<'py, PyDict>> {
        let handle = self.handle(py)?;
        match handle.stat(path).raise(py)? {
            Some(entry) => entry_dict(py, &entry),
            None => Err(self.not_found(path).into_py_err(py)),
        }
    }

    /// The entries directly inside directory `path` (`""` for the top), as `stat` gives them.
    #[pyo3(signature = (path = ""))]
    fn listdir<'py>(&self, py: Python<'py>, path: &str) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let handle = self.handle(py)?;
        let entries = handle.list(path).raise(py)?;
        entries.into_iter().map(|e| entry_dict(py, e)).collect()
    }

    /// Every entry below directory `path` (`""`: the whole version), recursively, in
    /// depth-first order with siblings sorted, as `stat` gives them: one pass over the
    /// listing (what `find` and `glob` of `dsv.fsspec` answer from). A file gives itself.
    /// Raises `dsv.PathNotFound` when the version has no `path`.
    #[pyo3(signature = (path = ""))]
    fn walk<'py>(&self, py: Python<'py>, path: &str) -> PyResult<Vec<Bound<'py, PyDict>>> {
        let handle = self.handle(py)?;
        let entries = handle.walk(path).raise(py)?;
        entries.iter().map(|e| entry_dict(py, e)).collect()
    }

    /// Opens file `path` for reading: a `dsv.File`, a binary file object (`read`,
    /// `readinto`, `seek`, `tell`). Data only on a remote is fetched first.
    fn open(slf: &Bound<'_, Self>, path: &str) -> PyResult<Py<PyAny>> {
        let py = slf.py();
        let version = slf.get();
        let file = py
            .detach(|| -> Res<_> { Ok(version.handle_detached()?.open(path)?) })
            .raise(py)?;
        let handle = PyFileHandle {
            version: slf.clone().unbind(),
            path: path.to_string(),
            size: file.size(),
            file: Mutex::new(ForkLocal::new(Arc::new(file))),
        };
        let class = FILE_CLASS.get_or_try_init(py, || -> PyResult<_> {
            Ok(PyModule::import(py, "dsv._file")?.getattr("File")?.unbind())
        })?;
        Ok(class.bind(py).call1((handle,))?.unbind())
    }

    /// The bytes `[start, end)` of file `path` (`end=None`: to the end), as the CLI's `dsv
    /// cat REV:PATH --range START..END`: an `end` past the size reads to the end; a `start`
    /// at or past the end of a non-empty file raises `dsv.RangeNotSatisfiable`.
    #[pyo3(signature = (path, start = 0, end = None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        path: &str,
        start: i64,
        end: Option<i64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        if start < 0 || end.is_some_and(|e| e < 0) {
            return Err(PyValueError::new_err(
                "start and end are byte offsets and must not be negative",
            ));
        }
        if end.is_some_and(|e| e < start) {
            return Err(PyValueError::new_err("start must not exceed end"));
        }
        let handle = self.handle(py)?;
        // One release of the GIL for the whole read of a small file (the common sample):
        // each release and re-acquire is a hand-off between loader threads. Larger reads go
        // straight into the new `bytes` object instead of through a copy.
        enum Read {
            Small(Vec<u8>),
            Large(FileHandle, u64, u64),
        }
        let read = py
            .detach(|| -> Res<Read> {
                // One lookup: opening says which error a path that is not a file gets.
                let file = handle.open(path)?;
                let size = file.size();
                let start = start as u64;
                if start >= size && size > 0 {
                    return Err(Failure::Dsv(Error::RangeNotSatisfiable {
                        path: path.to_string(),
                        start,
                        size,
                    }));
                }
                let end = end.map_or(size, |e| (e as u64).min(size));
                let start = start.min(size);
                if end - start > SMALL_READ {
                    return Ok(Read::Large(file, start, end));
                }
                let mut buf = vec![0u8; (end - start) as usize];
                read_exact_at(&file, start, &mut buf)?;
                Ok(Read::Small(buf))
            })
            .raise(py)?;
        match read {
            Read::Small(bytes) => Ok(PyBytes::new(py, &bytes)),
            Read::Large(file, start, end) => PyBytes::new_with(py, (end - start) as usize, |buf| {
                py.detach(|| read_exact_at(&file, start, buf)).raise(py)
            }),
        }
    }

    /// Fetches the data of files `paths` that this store does not hold from its remotes, in
    /// one round of parallel requests, and keeps it (as a read would, file by file). Returns
    /// the bytes downloaded: 0, contacting nothing, when the data is here or the store has no
    /// remote. `dsv.torch` calls it ahead of its reads.
    fn prefetch(&self, py: Python<'_>, paths: Vec<String>) -> PyResult<u64> {
        py.detach(|| -> Res<u64> {
            let handle = self.handle_detached()?;
            let paths: Vec<&str> = paths.iter().map(String::as_str).collect();
            Ok(handle.prefetch(&paths)?)
        })
        .raise(py)
    }

    /// Pickles as its store (a path, or a remote-backed store's `open_remote` arguments)
    /// and the version's id: a worker process, on this machine or another, opens it again.
    fn __reduce__(&self, py: Python<'_>) -> PyResult<(Py<PyAny>, ReopenArgs)> {
        self.state.check_open("version").raise(py)?;
        let reopen = PyModule::import(py, "dsv._dsv")?.getattr("reopen_version")?;
        Ok((
            reopen.unbind(),
            (
                self.store.clone_ref(py),
                self.dataset.clone(),
                self.id.to_hex(),
                self.revision.clone(),
            ),
        ))
    }

    fn __repr__(&self) -> String {
        format!(
            "dsv.Version({:?}, id={:?}, files={}, size_bytes={})",
            self.revision,
            self.id.short(),
            self.files,
            self.size_bytes
        )
    }
}

/// What a pickled `Version` carries: its store (which pickles itself), the dataset, the
/// version id and the revision it was opened as.
type ReopenArgs = (Py<PyAny>, String, String, String);

/// One open file of a version: the native half of `dsv.File`.
#[pyclass(module = "dsv._dsv", name = "_FileHandle", frozen)]
pub struct PyFileHandle {
    version: Py<PyVersion>,
    path: String,
    size: u64,
    file: Mutex<ForkLocal<Arc<FileHandle>>>,
}

impl PyFileHandle {
    fn file(&self, py: Python<'_>) -> PyResult<Arc<FileHandle>> {
        let version = self.version.get();
        version.state.check_open("file").raise(py)?;
        if let Some(file) = self.file.lock().unwrap_or_else(|e| e.into_inner()).get() {
            return Ok(file.clone());
        }
        // A forked child: open the file again in this process.
        let file = py
            .detach(|| -> Res<_> { Ok(Arc::new(version.handle_detached()?.open(&self.path)?)) })
            .raise(py)?;
        let mut slot = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if slot.get().is_none() {
            *slot = ForkLocal::new(file.clone());
        }
        Ok(file)
    }
}

#[pymethods]
impl PyFileHandle {
    /// The file's size in bytes.
    #[getter]
    fn size(&self) -> u64 {
        self.size
    }

    /// Its path in the version.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// The version it belongs to.
    #[getter]
    fn version(&self, py: Python<'_>) -> Py<PyVersion> {
        self.version.clone_ref(py)
    }

    /// Up to `count` bytes from `offset` (all to the end when `count` is `None` or
    /// negative); `b""` at or past the end.
    #[pyo3(signature = (offset, count = None))]
    fn read_at<'py>(
        &self,
        py: Python<'py>,
        offset: u64,
        count: Option<i64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let file = self.file(py)?;
        let left = self.size.saturating_sub(offset);
        let count = match count {
            Some(n) if n >= 0 => (n as u64).min(left),
            _ => left,
        };
        read_bytes(py, &file, offset, count as usize)
    }
}
