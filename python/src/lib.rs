//! `dsv._dsv`: the native half of the `dsv` Python package, a thin front end over the
//! library as the CLI is (`src/cli`): it parses nothing the library parses, prints nothing,
//! and turns library errors into Python exceptions carrying the CLI's hints.
//!
//! - `store::PyStore` opens a store and keeps one [`dsv::read::ReadEngine`] (frame cache,
//!   remote fetch) per process; commit, checkout and clone call the library's operations.
//! - `version::PyVersion` is one version open for reading (`VersionHandle`), and
//!   `version::PyFileHandle` one file of it (`FileHandle`); `dsv.File` (Python) wraps the
//!   latter as an `io.RawIOBase`.
//! - Every call that touches the disk or the network releases the GIL (`Python::detach`).
//! - Fork safety: see `fork`. Pickling (for `spawn` workers) carries the store's path and
//!   the version's id, never open state.
//! - [`run_cli`] is the `dsv` command itself ([`dsv_cli::run`], the code the `dsv` binary
//!   runs): the package's `dsv` script calls it, so one build gives both.

#![forbid(unsafe_code)]

mod errors;
mod fork;
mod store;
mod store_state;
mod version;

use pyo3::prelude::*;

/// The order of `n` items for `key`: a Fisher–Yates shuffle driven by BLAKE3's extendable
/// output of `key` (`dsv.torch` passes the version id, the seed and the epoch), so the same
/// key gives the same order on every machine, Python version and platform. The library's
/// [`dsv::ops::lineage::permutation`], which `dsv audit --lineage` replays.
#[pyfunction]
fn permutation(py: Python<'_>, n: usize, key: &str) -> Vec<usize> {
    py.detach(|| dsv::ops::lineage::permutation(n, key.as_bytes()))
}

/// The digest of a list of ids (paths) a lineage record carries: `blake3:` and the hex
/// BLAKE3 of each id followed by a NUL byte ([`dsv::ops::lineage::ids_digest`]).
#[pyfunction]
fn ids_digest(py: Python<'_>, ids: Vec<String>) -> String {
    py.detach(|| dsv::ops::lineage::ids_digest(ids.iter().map(String::as_str)))
}

/// The hex BLAKE3 of `data` (the hash of a lock file a lineage record names).
#[pyfunction]
fn blake3_hex(py: Python<'_>, data: &[u8]) -> String {
    py.detach(|| blake3::hash(data).to_hex().to_string())
}

/// Runs the `dsv` command line `argv` (the program name first) in this process, without the
/// GIL, and returns its exit status: the package's `dsv` script (`dsv._cli.main`). It prints
/// to the process's stdout and stderr and installs the CLI's Ctrl-C/SIGTERM handler (which
/// replaces Python's): call it only from a process that runs one command.
#[pyfunction]
fn run_cli(py: Python<'_>, argv: Vec<std::ffi::OsString>) -> u8 {
    py.detach(|| dsv_cli::run(argv))
}

/// Called by `os.register_at_fork(before=...)` (see `dsv/__init__.py`): waits until no fetch
/// of this process holds a lock file, and holds new ones back until the fork is done, so a
/// child never inherits a held lock.
#[pyfunction]
fn _before_fork(py: Python<'_>) {
    py.detach(dsv::read::before_fork)
}

/// Called after a fork, in the parent and in the child: fetches may start again.
#[pyfunction]
fn _after_fork() {
    dsv::read::after_fork()
}

/// Tells the library where the AWS profile is, as the AWS CLI (and the CLI's
/// `use_aws_profile_from_environment`) finds it: `AWS_PROFILE` (else `AWS_DEFAULT_PROFILE`),
/// `AWS_CONFIG_FILE`, `AWS_SHARED_CREDENTIALS_FILE`, `HOME`. Called at import and again
/// whenever a store is opened or cloned, so a change to `os.environ` in between counts.
pub(crate) fn use_aws_profile_from_environment() {
    dsv::remote::aws_profile::set_source(Some(
        dsv::remote::aws_profile::AwsProfileSource::from_variables(|name| std::env::var_os(name)),
    ));
}

#[pymodule]
fn _dsv(m: &Bound<'_, PyModule>) -> PyResult<()> {
    use_aws_profile_from_environment();
    m.add_class::<store::PyStore>()?;
    m.add_class::<version::PyVersion>()?;
    m.add_class::<version::PyFileHandle>()?;
    m.add_function(wrap_pyfunction!(store::clone, m)?)?;
    m.add_function(wrap_pyfunction!(store::open_remote, m)?)?;
    m.add_function(wrap_pyfunction!(store::default_cache_dir, m)?)?;
    m.add_function(wrap_pyfunction!(store::_open_remote_again, m)?)?;
    m.add_function(wrap_pyfunction!(store::reopen_version, m)?)?;
    m.add_function(wrap_pyfunction!(permutation, m)?)?;
    m.add_function(wrap_pyfunction!(ids_digest, m)?)?;
    m.add_function(wrap_pyfunction!(blake3_hex, m)?)?;
    m.add_function(wrap_pyfunction!(run_cli, m)?)?;
    m.add_function(wrap_pyfunction!(_before_fork, m)?)?;
    m.add_function(wrap_pyfunction!(_after_fork, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("__build__", dsv_cli::VERSION)?;
    Ok(())
}
