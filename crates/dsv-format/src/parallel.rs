//! Parallel loops over scoped threads, for the I/O-bound stages (stat, hash, write, download).

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
