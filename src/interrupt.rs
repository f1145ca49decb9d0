//! Cooperative cancellation: the CLI's Ctrl-C handler calls [`request`]; long loops call
//! [`check`] and stop with [`Error::Interrupted`] at a point where the store is consistent.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};

static REQUESTED: AtomicBool = AtomicBool::new(false);

/// Asks every running operation to stop at its next check.
pub fn request() {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Returns [`Error::Interrupted`] once [`request`] was called.
///
/// # Errors
/// [`Error::Interrupted`].
pub fn check() -> Result<()> {
    if REQUESTED.load(Ordering::Relaxed) {
        Err(Error::Interrupted)
    } else {
        Ok(())
    }
}

/// True once [`request`] was called.
pub fn requested() -> bool {
    REQUESTED.load(Ordering::Relaxed)
}
