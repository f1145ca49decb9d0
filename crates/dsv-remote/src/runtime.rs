//! The process's one tokio runtime, which drives every remote and import source.
//!
//! The library's API is blocking, and it must work from any thread, including a thread that
//! already runs inside a caller's tokio runtime (an async web service, a Jupyter kernel with
//! an event loop), where tokio's own `block_on` panics ("Cannot start a runtime from within
//! a runtime"). [`Runtime::block_on`] therefore runs the future on the shared runtime from
//! a plain thread: the calling thread itself, or, inside a caller's runtime, a scoped thread
//! made for that call.
//!
//! The runtime is made on first need ([`shared`]) and kept for the life of the process, so
//! opening a remote costs no thread start-up. A child made by `fork()` (a PyTorch
//! `DataLoader` worker) does not inherit the parent's runtime threads: [`shared`] sees the
//! process id change and makes the child its own. The parent's runtime is never dropped in
//! the child (dropping would wait for threads that do not exist there).

use std::future::Future;
use std::sync::{Arc, Mutex};

use crate::error::{IoResultExt, Result};

/// A handle on the shared runtime. Cheap to clone; `Send + Sync`.
#[derive(Clone, Debug)]
pub struct Runtime {
    inner: Arc<tokio::runtime::Runtime>,
}

/// The runtime and the process that made it.
static SHARED: Mutex<Option<(u32, Runtime)>> = Mutex::new(None);

/// Worker threads of the shared runtime. Remote I/O is network-bound and its CPU work
/// (hashing, decompression) runs on the caller's threads, so two suffice.
const WORKER_THREADS: usize = 2;

/// The process's runtime, made on first call (and again in a forked child).
///
/// # Errors
/// [`crate::Error::IoOperation`] when the runtime's threads cannot be started.
pub fn shared() -> Result<Runtime> {
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if let Some((owner, runtime)) = shared.as_ref()
        && *owner == pid
    {
        return Ok(runtime.clone());
    }
    let runtime = Runtime {
        inner: Arc::new(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(WORKER_THREADS)
                .thread_name("dsv-io")
                .enable_all()
                .build()
                .during("starting the tokio runtime")?,
        ),
    };
    if let Some((_, inherited)) = shared.replace((pid, runtime.clone())) {
        // Made by the parent process: its threads are not in this one.
        std::mem::forget(inherited);
    }
    Ok(runtime)
}

impl Runtime {
    /// Runs `future` to completion on the shared runtime and returns its output. Callable
    /// from any thread, inside a caller's tokio runtime too (the future then runs on the
    /// shared runtime from a scoped thread, so the caller's runtime is blocked, never
    /// re-entered). Must not be called from a task of the shared runtime itself.
    pub fn block_on<F>(&self, future: F) -> F::Output
    where
        F: Future + Send,
        F::Output: Send,
    {
        if tokio::runtime::Handle::try_current().is_err() {
            return self.inner.block_on(future);
        }
        let token = crate::interrupt::current();
        std::thread::scope(|scope| {
            let run = || crate::interrupt::run_under(token, || self.inner.block_on(future));
            match scope.spawn(run).join() {
                Ok(output) => output,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        })
    }

    /// Runs `work` on the runtime's pool of blocking threads, in the background (its
    /// result is dropped): for work nobody waits on, such as read-ahead.
    pub fn spawn_blocking(&self, work: impl FnOnce() + Send + 'static) {
        drop(self.inner.spawn_blocking(work));
    }

    /// Enters the runtime's context on this thread until the guard drops (for clients that
    /// take their timers from the current runtime when built).
    pub fn enter(&self) -> tokio::runtime::EnterGuard<'_> {
        self.inner.enter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_runtime_per_process() {
        let a = shared().unwrap();
        let b = shared().unwrap();
        assert!(Arc::ptr_eq(&a.inner, &b.inner));
    }

    #[test]
    fn block_on_works_inside_a_callers_runtime() {
        let caller = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let ours = shared().unwrap();
        let value = caller.block_on(async { ours.block_on(async { 7 }) });
        assert_eq!(value, 7);
    }
}
