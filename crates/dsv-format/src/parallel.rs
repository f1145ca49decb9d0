//! Parallel loops over scoped threads, for the I/O-bound stages (stat, hash, write, download).
//!
//! Why not a shared pool (rayon; weighed for issue 26, kept as is):
//! - `jobs` is a per-call concurrency of blocking work, above the core count on purpose
//!   (checkout writes with `min(3 x cores, 12)` threads, imports keep `jobs` requests in
//!   flight): a global pool sized to the cores would cut it, and a pool built per call starts
//!   the same threads as a scope does, without its fallback when the system refuses a thread
//!   (the threads started do the work).
//! - [`for_each_with`] gives each worker one state, `init` once and `finish` once (a commit's
//!   or import's `StreamWriter`, whose `finish` queues its partly filled frames). rayon's
//!   `for_each_init` calls `init` once per split job, with no `finish`: more writers, more
//!   partial frames, other packs on disk.
//! - Workers block (disk, network, a bounded channel to the ingest compressors, the shared
//!   tokio runtime's `block_on`): blocking tasks in a fixed pool shared with other operations
//!   (a mount's reads, nested loops such as the walk's) starve or deadlock them, and a thread
//!   that steals work while it waits runs another operation under its own thread-locals (the
//!   cancel token of [`crate::interrupt`], a per-thread pack reader).
//!
//! The other threads of the library are single ones with one job each (the walk's lister and
//! the status' stat-cache reader feeding bounded channels, the ingest compressors, the FUSE
//! session, a thread to leave a caller's tokio runtime), not pools; background work nobody
//! waits on (read-ahead) already runs on the one tokio runtime's blocking pool.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::Result;

/// The most worker threads (or requests in flight) dsv uses, whatever it is asked for: the
/// CLI refuses `--jobs` above it, and the library clamps to it so that a huge count never
/// overflows a queue size or exhausts the threads a process may start.
pub const MAX_JOBS: usize = 256;

/// `jobs` brought into `1..=MAX_JOBS`.
pub fn clamp_jobs(jobs: usize) -> usize {
    jobs.clamp(1, MAX_JOBS)
}

/// Applies `f` to every item on `jobs` scoped threads, keeping input order; stops at the
/// first error (checking for Ctrl-C between items).
///
/// # Errors
/// The first error `f` returns, or [`crate::Error::Interrupted`].
pub fn map<T: Sync, R: Send + Clone>(
    items: &[T],
    jobs: usize,
    f: impl Fn(&T) -> Result<R> + Sync,
) -> Result<Vec<R>> {
    let results: Mutex<Vec<Option<R>>> = Mutex::new(vec![None; items.len()]);
    for_each_with(
        items,
        jobs,
        || Ok(()),
        |(), index, item| {
            let value = f(item)?;
            results.lock().expect("no panics while holding the lock")[index] = Some(value);
            Ok(())
        },
        |()| {},
    )?;
    Ok(results
        .into_inner()
        .expect("no panics while holding the lock")
        .into_iter()
        .map(|r| r.expect("every item ran"))
        .collect())
}

/// Runs `f(state, index, item)` for every item on `jobs` scoped threads. Each thread makes
/// its own state with `init` (a catalog connection, a pack writer) and hands it to `finish`
/// once no item is left. The first error stops every thread at its next item (Ctrl-C is
/// checked between items).
///
/// # Errors
/// The first error of `init` or `f`, or [`crate::Error::Interrupted`].
pub fn for_each_with<T: Sync, S>(
    items: &[T],
    jobs: usize,
    init: impl Fn() -> Result<S> + Sync,
    f: impl Fn(&mut S, usize, &T) -> Result<()> + Sync,
    finish: impl Fn(S) + Sync,
) -> Result<()> {
    let next = AtomicUsize::new(0);
    let jobs = clamp_jobs(jobs).min(items.len().max(1));
    let run = || -> Result<()> {
        let mut state = init()?;
        loop {
            let index = next.fetch_add(1, Ordering::Relaxed);
            let Some(item) = items.get(index) else {
                finish(state);
                return Ok(());
            };
            crate::interrupt::check()?;
            f(&mut state, index, item)?;
        }
    };
    let token = crate::interrupt::current();
    let outcomes: Vec<Result<()>> = std::thread::scope(|scope| {
        let mut handles = Vec::with_capacity(jobs);
        for _ in 0..jobs {
            let token = token.clone();
            let spawned = std::thread::Builder::new().spawn_scoped(scope, || {
                let outcome = crate::interrupt::run_under(token, run);
                if outcome.is_err() {
                    next.store(items.len(), Ordering::Relaxed);
                }
                outcome
            });
            match spawned {
                Ok(handle) => handles.push(handle),
                // The system allows no more threads: the ones started do the work.
                Err(_) if !handles.is_empty() => break,
                Err(source) => return vec![Err(thread_error(source))],
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .collect()
    });
    outcomes.into_iter().collect()
}

/// The error of a thread that could not be started (the system's thread limit).
pub fn thread_error(source: std::io::Error) -> crate::Error {
    crate::Error::IoOperation {
        operation: "starting a worker thread",
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use crate::interrupt::CancelToken;

    #[test]
    fn worker_threads_run_under_their_callers_token() {
        let token = CancelToken::new();
        let items: Vec<u32> = (0..64).collect();
        let outcome = token.run(|| {
            for_each_with(
                &items,
                4,
                || Ok(()),
                |_, index, _| {
                    if index == 3 {
                        token.cancel();
                    }
                    Ok(())
                },
                |_| {},
            )
        });
        assert!(matches!(outcome, Err(Error::Interrupted)));
    }
}
