//! Fetched data a reader can use before the catalog knows it: the read engine's fetches in
//! flight ([`Landing`]) and the background recording of the packs they wrote ([`Recorder`]).
//!
//! A fetch of remote frames ends by writing and syncing a new pack. Recording that pack in
//! the catalog (one SQLite transaction under the store lock, two `fsync`s) used to end the
//! fetch too, so every reader waiting for a piece of a file also waited for that
//! bookkeeping, one fetch after another under the store lock. Now:
//!
//! 1. A fetch claims the chunks it downloads ([`Landing::claim`]); another thread of the same
//!    engine that wants one of them waits for that fetch instead of taking its stripe locks
//!    ([`Landing::wait_for`]).
//! 2. Once the pack is sealed (synced and renamed into `packs/`), the fetch puts its frames
//!    in the frame cache and its chunks' places in the landed table ([`Landing::land`]):
//!    from then on readers of this engine locate them there ([`Landing::locate`]).
//! 3. The pack goes to the [`Recorder`] with the fetch's stripe locks and its shared data
//!    lock. The recorder records every pack queued meanwhile in one transaction, then lets
//!    the locks go and forgets the landed places. Until then another process that wants the
//!    same frames waits on the stripe locks, then finds them in the catalog: a frame is still
//!    downloaded once per machine. No gc or eviction removes a pack not recorded yet (the
//!    data lock stays shared until it is).
//!
//! Crash safety: a pack is synced before any reader uses it and before it is recorded. A
//! process killed between the two leaves a whole pack that no catalog row names: garbage for
//! gc's orphan sweep, or catalogued again by `dsv repair` (which checks every pack whole);
//! the next read fetches the chunks again. Nothing is served that was not checked: the
//! frames in the cache are the ones the fetch checked, and a pack read back from disk is
//! checked as every local pack is.
//!
//! [`Recorder::flush`] waits for the queue to drain: the engine calls it when it is dropped
//! (so a `dsv cat` records what it fetched before the process exits), before a cache limit's
//! eviction, and before a fork.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex};

use crate::catalog::ObjectLocation;
use crate::error::Result;
use crate::id::ObjectId;
use crate::pack::PackFile;
use crate::store::{SharedDataLock, Store, StripeLock};

/// The chunks this engine's fetches are downloading now, and those in packs written but
/// not yet recorded.
#[derive(Default)]
pub(super) struct Landing {
    state: Mutex<LandingState>,
    changed: Condvar,
}

#[derive(Default)]
struct LandingState {
    /// Chunks a fetch of this engine has claimed and is downloading.
    fetching: HashSet<ObjectId>,
    /// Chunks in sealed packs not recorded yet, with their places.
    landed: HashMap<ObjectId, ObjectLocation>,
}

/// Chunks claimed by one fetch ([`Landing::claim`]); released when dropped, whether the
/// fetch landed them or failed.
pub(super) struct Claim<'a> {
    landing: &'a Landing,
    chunks: Vec<ObjectId>,
}

impl Claim<'_> {
    /// The chunks claimed.
    pub(super) fn chunks(&self) -> &[ObjectId] {
        &self.chunks
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        let mut state = self.landing.lock();
        for id in &self.chunks {
            state.fetching.remove(id);
        }
        drop(state);
        self.landing.changed.notify_all();
    }
}

impl Landing {
    fn lock(&self) -> std::sync::MutexGuard<'_, LandingState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where chunk `id` is, when a fetch of this engine landed it and it is not recorded yet.
    pub(super) fn locate(&self, id: &ObjectId) -> Option<ObjectLocation> {
        self.lock().landed.get(id).copied()
    }

    /// Of `wanted`: claims for the caller those no fetch of this engine is downloading and
    /// none landed (returned in the claim), and returns those another fetch is downloading
    /// now (wait for them with [`Landing::wait_for`]). Landed chunks are in neither.
    pub(super) fn claim(&self, wanted: &[ObjectId]) -> (Claim<'_>, Vec<ObjectId>) {
        let mut state = self.lock();
        let mut mine = Vec::new();
        let mut others = Vec::new();
        for id in wanted {
            if state.landed.contains_key(id) {
                continue;
            }
            if state.fetching.contains(id) {
                others.push(*id);
            } else {
                state.fetching.insert(*id);
                mine.push(*id);
            }
        }
        (
            Claim {
                landing: self,
                chunks: mine,
            },
            others,
        )
    }

    /// Waits until no fetch of this engine is downloading any of `chunks` (each landed, or
    /// its fetch failed and the caller fetches it again).
    pub(super) fn wait_for(&self, chunks: &[ObjectId]) {
        let mut state = self.lock();
        while chunks.iter().any(|id| state.fetching.contains(id)) {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Makes `places` (chunks of sealed packs) visible to this engine's readers.
    pub(super) fn land(&self, places: impl IntoIterator<Item = (ObjectId, ObjectLocation)>) {
        self.lock().landed.extend(places);
    }

    /// Forgets the landed places of `chunks` (recorded now, or never to be).
    fn forget(&self, chunks: &[ObjectId]) {
        let mut state = self.lock();
        for id in chunks {
            state.landed.remove(id);
        }
    }
}

/// A fetch's sealed packs waiting to be recorded, with the locks that keep other processes
/// from downloading the same frames (stripes) and gc or eviction from removing the packs
/// (data, shared) until they are.
pub(super) struct Recording {
    /// The packs, sealed and synced in `packs/`.
    pub(super) packs: Vec<PackFile>,
    /// The remote they came from (file maps among them are recorded as unproven).
    pub(super) remote: String,
    /// Their chunks' landed places, forgotten once recorded.
    pub(super) chunks: Vec<ObjectId>,
    /// Held until recorded (only dropped).
    pub(super) _stripes: Vec<StripeLock>,
    /// Held until recorded (only dropped).
    pub(super) _data: SharedDataLock,
    /// Counts as a fetch holding lock files until recorded, so a fork waits for it (only
    /// dropped).
    pub(super) _in_fetch: super::fetch::InFetch,
}

/// Records fetched packs in the background, every recording queued meanwhile in one
/// transaction. One worker thread at most, started when work arrives and ended when the
/// queue is empty.
pub(super) struct Recorder {
    store: Arc<Mutex<Store>>,
    landing: Arc<Landing>,
    queue: Mutex<RecorderQueue>,
    idle: Condvar,
}

#[derive(Default)]
struct RecorderQueue {
    waiting: Vec<Recording>,
    /// A worker is running (it takes everything waiting before it ends).
    working: bool,
}

impl Recorder {
    pub(super) fn new(store: Arc<Mutex<Store>>, landing: Arc<Landing>) -> Arc<Recorder> {
        Arc::new(Recorder {
            store,
            landing,
            queue: Mutex::new(RecorderQueue::default()),
            idle: Condvar::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RecorderQueue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `recording`; starts the worker when none runs. If no thread can be started,
    /// records it now, on this thread.
    pub(super) fn submit(self: &Arc<Self>, recording: Recording) {
        let mut queue = self.lock();
        queue.waiting.push(recording);
        if queue.working {
            return;
        }
        queue.working = true;
        drop(queue);
        let worker = Arc::clone(self);
        let started = std::thread::Builder::new()
            .name("dsv-record".into())
            .spawn(move || worker.work());
        if started.is_err() {
            self.work();
        }
    }

    /// Records batches until the queue is empty. The last batch's locks go only after the
    /// worker is marked ended: a fork waits until no recording holds lock files
    /// ([`super::fetch::before_fork`]), and the child must not inherit a queue that says a
    /// worker (not copied into it) is running.
    fn work(&self) {
        let mut batch = std::mem::take(&mut self.lock().waiting);
        loop {
            if let Err(error) = self.record(&batch) {
                tracing::warn!(
                    target: "dsv::read",
                    %error,
                    packs = batch.iter().map(|r| r.packs.len()).sum::<usize>(),
                    "fetched packs could not be recorded; their chunks are fetched again when read"
                );
            }
            for recording in &batch {
                self.landing.forget(&recording.chunks);
            }
            let mut queue = self.lock();
            let next = std::mem::take(&mut queue.waiting);
            if next.is_empty() {
                queue.working = false;
                drop(queue);
                self.idle.notify_all();
                // The locks go now (after the catalog commits): another process waiting on
                // a stripe finds the frames recorded.
                drop(batch);
                return;
            }
            drop(queue);
            drop(batch);
            batch = next;
        }
    }

    fn record(&self, batch: &[Recording]) -> Result<()> {
        let mut store = self.store.lock().unwrap_or_else(|e| e.into_inner());
        let groups: Vec<(&[PackFile], &str)> = batch
            .iter()
            .map(|r| (r.packs.as_slice(), r.remote.as_str()))
            .collect();
        crate::transfer::record_fetched_groups(&mut store, &groups)
    }

    /// Waits until everything queued so far is recorded (or failed).
    pub(super) fn flush(&self) {
        let mut queue = self.lock();
        while queue.working {
            queue = self.idle.wait(queue).unwrap_or_else(|e| e.into_inner());
        }
    }
}
