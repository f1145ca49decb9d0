//! A small parallel map over scoped threads, for the I/O-bound stages (stat, hash, write).

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::Result;

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
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new(vec![None; items.len()]);
    let jobs = jobs.clamp(1, items.len().max(1));
    let outcomes: Vec<Result<()>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some(item) = items.get(index) else {
                            return Ok(());
                        };
                        let outcome = crate::interrupt::check().and_then(|()| f(item));
                        match outcome {
                            Ok(value) => {
                                results.lock().expect("no panics while holding the lock")[index] =
                                    Some(value)
                            }
                            Err(error) => {
                                next.store(items.len(), Ordering::Relaxed);
                                return Err(error);
                            }
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker panicked"))
            .collect()
    });
    for outcome in outcomes {
        outcome?;
    }
    Ok(results
        .into_inner()
        .expect("no panics while holding the lock")
        .into_iter()
        .map(|r| r.expect("every item ran"))
        .collect())
}
