//! Cooperative cancellation, per operation: a caller makes a [`CancelToken`], runs an
//! operation under it ([`CancelToken::run`]), and calls [`CancelToken::cancel`] from any
//! thread (the CLI's Ctrl-C handler, a Python `KeyboardInterrupt`, a timeout) to stop it.
//! Long loops call [`check`] and stop with [`Error::Interrupted`] at a point where the store
//! is consistent.
//!
//! The token travels with the operation, not with the process: it is the current thread's
//! (set by [`CancelToken::run`]), and the library's worker threads run under their caller's
//! token. A cancelled operation leaves no flag behind: the next operation, under a new token
//! or none, runs normally.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};

/// Cancels the operations run under it (and under its clones). Cheap to clone; `Send + Sync`.
#[derive(Clone, Debug, Default)]
pub struct CancelToken {
    cancelled: Arc<AtomicBool>,
}

thread_local! {
    static CURRENT: RefCell<Option<CancelToken>> = const { RefCell::new(None) };
}

impl CancelToken {
    /// A token not yet cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Asks every operation running under this token to stop at its next check.
    pub fn cancel(&self) {
        self.cancelled.store(true, Ordering::SeqCst);
    }

    /// True once [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// Runs `operation` on this thread under this token: [`check`] inside it (and in the
    /// worker threads it starts) answers [`Error::Interrupted`] once the token is cancelled.
    /// The thread's previous token is restored afterwards.
    pub fn run<R>(&self, operation: impl FnOnce() -> R) -> R {
        run_under(Some(self.clone()), operation)
    }
}

/// The token the current thread runs under, if any: hand it to [`run_under`] in a thread
/// that works for this one.
pub fn current() -> Option<CancelToken> {
    CURRENT.with(|current| current.borrow().clone())
}

/// Runs `operation` under `token` (as [`CancelToken::run`]; `None` runs it under none).
pub fn run_under<R>(token: Option<CancelToken>, operation: impl FnOnce() -> R) -> R {
    struct Restore(Option<CancelToken>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            CURRENT.with(|current| *current.borrow_mut() = previous);
        }
    }
    let previous = CURRENT.with(|current| current.replace(token));
    let _restore = Restore(previous);
    operation()
}

/// Returns [`Error::Interrupted`] once the current operation's token is cancelled.
///
/// # Errors
/// [`Error::Interrupted`].
pub fn check() -> Result<()> {
    if requested() {
        Err(Error::Interrupted)
    } else {
        Ok(())
    }
}

/// True once the current operation's token is cancelled.
pub fn requested() -> bool {
    CURRENT.with(|current| {
        current
            .borrow()
            .as_ref()
            .is_some_and(CancelToken::is_cancelled)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_cancels_only_its_own_operations() {
        let token = CancelToken::new();
        token.cancel();
        assert!(matches!(token.run(check), Err(Error::Interrupted)));
        // Outside it, and under a fresh token, nothing is left set.
        assert!(check().is_ok());
        assert!(CancelToken::new().run(check).is_ok());
    }
}
