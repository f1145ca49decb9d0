//! Library errors as Python exceptions.
//!
//! The exception classes live in Python (`dsv/errors.py`), so that they can also derive from
//! the built-in classes a Python caller expects (`PathNotFound` is a `FileNotFoundError`,
//! `InvalidShard` a `ValueError`); this module picks the class for an [`Error`] and builds
//! the message the CLI would print: the error, its causes, and its hints.

use dsv::Error;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyModule;

/// The Python class (in `dsv.errors`) an error is raised as: the library's table states it
/// ([`Error::python_class`]), beside the error's kind and hint.
pub fn class_name(error: &Error) -> &'static str {
    error.python_class()
}

static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The `dsv.errors` module.
fn errors_module(py: Python<'_>) -> PyResult<&Bound<'_, PyModule>> {
    ERRORS
        .get_or_try_init(py, || Ok(PyModule::import(py, "dsv.errors")?.unbind()))
        .map(|m| m.bind(py))
}

/// Raises `class` of `dsv.errors` with `message` (and `kind`, `causes`, `hints` attributes).
pub fn raise(
    py: Python<'_>,
    class: &str,
    message: String,
    kind: &str,
    causes: Vec<String>,
    hints: Vec<String>,
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let class = errors_module(py)?.getattr(class)?;
        let value = class.call1((message.clone(),))?;
        value.setattr("kind", kind)?;
        value.setattr("causes", causes.clone())?;
        value.setattr("hints", hints.clone())?;
        Ok(PyErr::from_value(value))
    };
    build().unwrap_or_else(|e| e)
}

/// The Python exception for a library error: the CLI's message, causes and hints (the
/// library's [`dsv::error::causes`] and [`Error::hints`], as the CLI prints them).
pub fn to_py(py: Python<'_>, error: Error) -> PyErr {
    let class = class_name(&error);
    let kind = error.kind().name();
    let causes = dsv::error::causes(&error);
    let hints = error.hints();
    let mut message = error.to_string();
    for cause in &causes {
        message.push_str("\n  caused by: ");
        message.push_str(cause);
    }
    for hint in &hints {
        message.push_str("\n\nhint: ");
        message.push_str(hint);
    }
    raise(py, class, message, kind, causes, hints)
}

/// Why a call failed, made without the GIL (inside `Python::detach`) and raised with it.
pub enum Failure {
    /// A library error.
    Dsv(Error),
    /// The store was closed (`Store.close()`); names what was used.
    Closed(&'static str),
    /// A bad argument, raised as the named class of `dsv.errors`.
    Invalid(&'static str, String),
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure::Dsv(error)
    }
}

/// The result of work done without the GIL.
pub type Res<T> = Result<T, Failure>;

impl Failure {
    /// The Python exception.
    pub fn into_py_err(self, py: Python<'_>) -> PyErr {
        match self {
            Failure::Dsv(error) => to_py(py, error),
            Failure::Closed(what) => raise(
                py,
                "StoreClosed",
                format!("I/O operation on a closed store ({what})"),
                "user",
                Vec::new(),
                Vec::new(),
            ),
            Failure::Invalid(class, message) => {
                raise(py, class, message, "user", Vec::new(), Vec::new())
            }
        }
    }
}

/// Raises a failure as a Python exception.
pub trait Raise<T> {
    /// The value, or the failure as a Python exception.
    fn raise(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> Raise<T> for Res<T> {
    fn raise(self, py: Python<'_>) -> PyResult<T> {
        warn_fallbacks(py);
        self.map_err(|e| e.into_py_err(py))
    }
}

impl<T> Raise<T> for dsv::Result<T> {
    fn raise(self, py: Python<'_>) -> PyResult<T> {
        warn_fallbacks(py);
        self.map_err(|e| to_py(py, e))
    }
}

/// Warns (`warnings.warn`, a `UserWarning`) of each remote that failed while another served
/// instead, once per remote and process, as the CLI does on stderr
/// (`dsv::transfer::fallback::take_fallbacks`). A warning filter that turns it into an
/// error is not allowed to fail the read that was served.
fn warn_fallbacks(py: Python<'_>) {
    for fallback in dsv::transfer::fallback::take_fallbacks() {
        let text = format!(
            "remote {:?} failed, read from {:?} instead: {}",
            fallback.failed,
            fallback.served,
            dsv::redact::text(&fallback.error)
        );
        let Ok(text) = std::ffi::CString::new(text.replace('\0', " ")) else {
            continue;
        };
        let category = py.get_type::<pyo3::exceptions::PyUserWarning>();
        let _ = PyErr::warn(py, &category, &text, 1);
    }
}

/// Runs `work` (a long operation: commit, checkout, clone, a remote lookup) without the GIL,
/// on a helper thread under a cancellation token, while this thread keeps answering Python's
/// signals: a Ctrl-C (`KeyboardInterrupt`) cancels the token, the operation stops at its next
/// consistent point (as the CLI's does), and the `KeyboardInterrupt` is raised.
pub fn cancellable<T: Send>(py: Python<'_>, work: impl FnOnce() -> Res<T> + Send) -> PyResult<T> {
    let token = dsv::interrupt::CancelToken::new();
    let (done, finished) = std::sync::mpsc::channel::<()>();
    // A receiver is not `Sync`; the waits below lend it to a GIL-free closure.
    let finished = std::sync::Mutex::new(finished);
    std::thread::scope(|scope| {
        let worker = scope.spawn(|| {
            let result = token.run(work);
            let _ = done.send(());
            result
        });
        let interrupted = loop {
            let over = py.detach(|| {
                let finished = finished.lock().unwrap_or_else(|e| e.into_inner());
                finished.recv_timeout(std::time::Duration::from_millis(50))
                    != Err(std::sync::mpsc::RecvTimeoutError::Timeout)
            });
            if over {
                break None;
            }
            if let Err(signal) = py.check_signals() {
                token.cancel();
                break Some(signal);
            }
        };
        let result = py.detach(|| worker.join());
        match (interrupted, result) {
            (Some(signal), _) => Err(signal),
            (None, Ok(result)) => result.raise(py),
            (None, Err(_)) => Err(pyo3::exceptions::PyRuntimeError::new_err(
                "a dsv operation panicked (a bug in dsv): please report it",
            )),
        }
    })
}
