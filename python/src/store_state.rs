//! What a `Store` and the `Version`s and files opened from it share: the store's directory,
//! where it came from, whether it was closed, and this process's read engine
//! ([`StoreState`]). A `Store` holds it, and so does each `Version` (beside the Python
//! `Store` object it returns and pickles), so neither class's module names the other's
//! for it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use dsv::read::{ReadEngine, ReadOptions};

use crate::errors::{Failure, Res};
use crate::fork::ForkLocal;

/// The state of an open store, shared by its `Store` object and what was opened from it.
pub struct StoreState {
    root: PathBuf,
    /// Set for the node-local clone of a remote (`open_remote`): how to open it again in
    /// another process or on another machine (pickling), and which remote names resolve on.
    pub origin: Option<Origin>,
    closed: AtomicBool,
    /// This process's read engine (made again, lazily, in a forked child).
    engine: Mutex<ForkLocal<ReadEngine>>,
}

impl StoreState {
    /// Opens the store whose `.dsv` directory is `root`.
    pub fn open_root(root: PathBuf, origin: Option<Origin>) -> Res<StoreState> {
        let engine = ReadEngine::open(&root, ReadOptions::default())?;
        Ok(StoreState {
            root,
            origin,
            closed: AtomicBool::new(false),
            engine: Mutex::new(ForkLocal::new(engine)),
        })
    }

    /// The `.dsv` directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Fails once the store is closed.
    pub fn check_open(&self, what: &'static str) -> Res<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Failure::Closed(what))
        } else {
            Ok(())
        }
    }

    /// This process's read engine, made on first use in each process. May open the catalog:
    /// call it without the GIL.
    pub fn engine(&self) -> Res<ReadEngine> {
        self.check_open("store")?;
        if let Some(engine) = self.lock_engine().get() {
            return Ok(engine.clone());
        }
        // Made outside the lock: a thread holding the GIL may be waiting for it.
        let engine = ReadEngine::open(&self.root, ReadOptions::default())?;
        let mut slot = self.lock_engine();
        match slot.get() {
            Some(made) => Ok(made.clone()),
            None => {
                *slot = ForkLocal::new(engine.clone());
                Ok(engine)
            }
        }
    }

    pub fn lock_engine(&self) -> std::sync::MutexGuard<'_, ForkLocal<ReadEngine>> {
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the store was closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Closes the store: every later use of it, or of a version or file opened from it,
    /// fails; this process's read engine is let go.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.lock_engine().clear();
    }

    /// A store handle for one operation that writes (commit, checkout, a remote fetch).
    pub fn writable(&self) -> Res<dsv::Store> {
        self.check_open("store")?;
        Ok(dsv::Store::open(&self.root)?)
    }
}

/// How `open_remote` was called: what a pickled remote-backed store carries (never a path
/// of this machine unless the caller named the cache directory).
#[derive(Clone)]
pub struct Origin {
    /// The URL of the remote.
    pub url: String,
    /// The cache directory as given (`None`: each machine's default).
    pub cache: Option<PathBuf>,
    /// The remote's options.
    pub options: BTreeMap<String, String>,
}
