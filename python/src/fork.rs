//! Fork safety: state made in one process is never used, nor dropped, in a child.
//!
//! A PyTorch `DataLoader` with `num_workers > 0` forks the training process (on Linux, by
//! default) with the objects of this package already open: a store's SQLite connection, the
//! read engine's locks and cached frames, a version's lease. SQLite forbids using a
//! connection across `fork()`, and dropping one there would release or rewrite what the
//! parent still relies on. So every piece of such state is kept in a [`ForkLocal`], which
//! records the process that made it: in any other process it reads as absent (the caller
//! makes its own, lazily) and, when replaced or dropped, it is leaked rather than dropped.
//! The parent's copy is untouched; the child's copies of its pages are freed when it exits.

/// A value that belongs to the process that made it.
pub struct ForkLocal<T> {
    pid: u32,
    value: Option<T>,
}

impl<T> ForkLocal<T> {
    /// Nothing yet.
    pub fn empty() -> Self {
        ForkLocal {
            pid: std::process::id(),
            value: None,
        }
    }

    /// `value`, owned by this process.
    pub fn new(value: T) -> Self {
        ForkLocal {
            pid: std::process::id(),
            value: Some(value),
        }
    }

    /// The value, when it was made by this process.
    pub fn get(&self) -> Option<&T> {
        if self.pid == std::process::id() {
            self.value.as_ref()
        } else {
            None
        }
    }

    /// Drops the value now (when this process made it; leaks it otherwise).
    pub fn clear(&mut self) {
        *self = ForkLocal::empty();
    }
}

impl<T> Drop for ForkLocal<T> {
    fn drop(&mut self) {
        if self.pid != std::process::id() {
            // Made by the parent process: never run its destructor here.
            std::mem::forget(self.value.take());
        }
    }
}
