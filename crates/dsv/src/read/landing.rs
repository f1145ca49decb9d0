//! Fetched data a reader can use before the catalog knows it: the read engine's fetches in
//! flight ([`Landing`]) and the group commit that records the packs they wrote
//! ([`Recorder`]).
//!
//! A fetch of remote frames ends by writing and syncing a new pack, and recording it in the
//! catalog (one SQLite transaction under the store lock, with its `fsync`s). Every reader that
//! wanted a chunk of it used to wait for all of that, and fetches recorded one after another.
//! Now:
//!
//! 1. A fetch claims the chunks it downloads ([`Landing::claim`]); another thread of the same
//!    engine that wants one of them waits for that fetch instead of taking its stripe locks
//!    ([`Landing::wait_for`]).
//! 2. Once the pack is sealed (synced and renamed into `packs/`), the fetch puts its frames
//!    in the frame cache and its chunks' places in the landed table ([`Landing::land`]), and
//!    lets its claim go: from then on readers of this engine locate the chunks there
//!    ([`Landing::locate`]) and read them, while the fetch records the pack.
//! 3. Recording is a group commit ([`Recorder::record_and_wait`]): concurrent fetches'
//!    packs go into one transaction. The fetch keeps its stripe locks and its shared data
//!    lock until its pack is recorded, so another process that wants the same frames waits
//!    on the stripes and then finds them in the catalog (a frame is still downloaded once per
//!    machine), and no gc or eviction removes a pack not recorded yet. The landed places are
//!    forgotten after the commit, and looked up before the catalog (never missed between).
//!
//! Crash safety: a pack is synced before any reader uses it and before it is recorded. A
//! process killed between the two leaves a whole pack that no catalog row names: garbage for
//! gc's orphan sweep, or catalogued again by `dsv repair` (which checks every pack whole);
//! the next read fetches the chunks again. Nothing is served that was not checked: the
//! frames in the cache are the ones the fetch checked, and a pack read back from disk is
//! checked as every local pack is.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};

use crate::catalog::ObjectLocation;
use crate::error::Result;
use crate::id::ObjectId;
use crate::pack::SealedPack;
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
    /// Chunks a fetch of this engine has claimed and is downloading, with the number of its
    /// claim (a claim lets go of its own entries only: the chunk may be claimed again by
    /// another fetch once it landed and was recorded).
    fetching: HashMap<ObjectId, u64>,
    /// Claims made so far.
    claims: u64,
    /// Chunks in sealed packs not recorded yet, with their places.
    landed: HashMap<ObjectId, ObjectLocation>,
}

/// Chunks claimed by one fetch ([`Landing::claim`]); released when dropped, whether the
/// fetch landed them or failed.
pub(super) struct Claim<'a> {
    landing: &'a Landing,
    number: u64,
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
            if state.fetching.get(id) == Some(&self.number) {
                state.fetching.remove(id);
            }
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
        state.claims += 1;
        let number = state.claims;
        let mut mine = Vec::new();
        let mut others = Vec::new();
        for id in wanted {
            if state.landed.contains_key(id) {
                continue;
            }
            if state.fetching.contains_key(id) {
                others.push(*id);
            } else {
                state.fetching.insert(*id, number);
                mine.push(*id);
            }
        }
        (
            Claim {
                landing: self,
                number,
                chunks: mine,
            },
            others,
        )
    }

    /// Waits until no fetch of this engine is downloading any of `chunks` (each landed, or
    /// its fetch failed and the caller fetches it again).
    pub(super) fn wait_for(&self, chunks: &[ObjectId]) {
        let mut state = self.lock();
        while chunks.iter().any(|id| state.fetching.contains_key(id)) {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Makes `places` (chunks of sealed packs) visible to this engine's readers, and wakes
    /// those waiting for them (they are no longer being downloaded).
    pub(super) fn land(&self, places: impl IntoIterator<Item = (ObjectId, ObjectLocation)>) {
        let mut state = self.lock();
        for (id, location) in places {
            state.fetching.remove(&id);
            state.landed.insert(id, location);
        }
        drop(state);
        self.changed.notify_all();
    }

    /// Waits until none of `chunks` is being downloaded or landed by a fetch of this engine
    /// (each recorded, or its fetch failed): for readers that look in the catalog only.
    pub(super) fn wait_recorded(&self, chunks: &[ObjectId]) {
        let mut state = self.lock();
        while chunks
            .iter()
            .any(|id| state.fetching.contains_key(id) || state.landed.contains_key(id))
        {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Forgets the landed places of `chunks` that lie in `packs` (recorded now, or never to
    /// be): a place another fetch landed since, in a pack of its own, stays.
    fn forget(&self, chunks: &[ObjectId], packs: &[SealedPack]) {
        let mut state = self.lock();
        for id in chunks {
            if state
                .landed
                .get(id)
                .is_some_and(|at| packs.iter().any(|pack| pack.id == at.frame.pack))
            {
                state.landed.remove(id);
            }
        }
        drop(state);
        self.changed.notify_all();
    }
}

/// A fetch's sealed packs waiting to be recorded, with the locks that keep other processes
/// from downloading the same frames (stripes) and gc or eviction from removing the packs
/// (data, shared) until they are.
pub(super) struct Recording {
    /// The packs, sealed and synced in `packs/`.
    pub(super) packs: Vec<SealedPack>,
    /// The remote they came from (file maps among them are recorded as unproven).
    pub(super) remote: String,
    /// Their chunks' landed places, forgotten once recorded.
    pub(super) chunks: Vec<ObjectId>,
    /// Held until recorded (only dropped).
    pub(super) _stripes: Vec<StripeLock>,
    /// Held until recorded (only dropped).
    pub(super) _data: SharedDataLock,
}

/// Records fetched packs in the catalog as a group commit: a fetch that lands a pack submits
/// it and waits until it is recorded; whichever submitter finds no recording under way
/// records everything queued (its own and those that arrived meanwhile) in one transaction,
/// while the others wait. So concurrent fetches share one transaction and its `fsync`s, and
/// a fetch returns only once its pack is recorded: a process that ends right after (a
/// `DataLoader` worker leaves by `os._exit`, running no destructor) loses nothing it
/// fetched. Readers waiting for the chunks do not wait for this: they read them landed.
pub(super) struct Recorder {
    store: Arc<Mutex<Store>>,
    landing: Arc<Landing>,
    queue: Mutex<RecorderQueue>,
    done: Condvar,
}

#[derive(Default)]
struct RecorderQueue {
    waiting: Vec<(u64, Recording)>,
    /// A submitter is recording a batch now.
    working: bool,
    /// Tickets handed out so far.
    issued: u64,
    /// Every ticket up to this one is recorded (or failed).
    finished: u64,
    /// Why the recordings of these tickets failed, for their submitters to take.
    failures: HashMap<u64, crate::error::Error>,
}

impl Recorder {
    pub(super) fn new(store: Arc<Mutex<Store>>, landing: Arc<Landing>) -> Recorder {
        Recorder {
            store,
            landing,
            queue: Mutex::new(RecorderQueue::default()),
            done: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RecorderQueue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records `recording` with whatever else is queued, and returns once it is recorded.
    /// Its locks go when it is.
    ///
    /// # Errors
    /// Its recording's own error ([`crate::error::Error::Io`], [`crate::error::Error::Catalog`]):
    /// a batch that fails is recorded again one recording at a time, so each submitter gets
    /// its own outcome. Nothing of a failed recording is recorded; its pack stays on disk,
    /// named by no catalog row (gc's orphan sweep removes it).
    pub(super) fn record_and_wait(&self, recording: Recording) -> Result<()> {
        let mut queue = self.lock();
        queue.issued += 1;
        let ticket = queue.issued;
        queue.waiting.push((ticket, recording));
        loop {
            if queue.finished >= ticket {
                return queue.failures.remove(&ticket).map_or(Ok(()), Err);
            }
            if !queue.working {
                break;
            }
            queue = self.done.wait(queue).unwrap_or_else(|e| e.into_inner());
        }
        // No recording under way: this submitter records the queue, batch after batch,
        // until its own ticket is done.
        queue.working = true;
        while queue.finished < ticket {
            let batch = std::mem::take(&mut queue.waiting);
            let last = batch.last().map_or(queue.finished, |(ticket, _)| *ticket);
            drop(queue);
            let mut failures = Vec::new();
            if let Err(error) = self.record_caught(&batch) {
                if batch.len() == 1 {
                    failures.push((batch[0].0, error));
                } else {
                    for (ticket, recording) in &batch {
                        let one = [(0, recording)];
                        if let Err(error) = self.record_caught(&one) {
                            failures.push((*ticket, error));
                        }
                    }
                }
            }
            for (_, recording) in &batch {
                self.landing.forget(&recording.chunks, &recording.packs);
            }
            // The locks go now (after the catalog committed): another process waiting on a
            // stripe finds the frames recorded.
            drop(batch);
            queue = self.lock();
            queue.failures.extend(failures);
            queue.finished = queue.finished.max(last);
            self.done.notify_all();
        }
        queue.working = false;
        // Another submitter may have queued meanwhile and be waiting for a recorder.
        self.done.notify_all();
        queue.failures.remove(&ticket).map_or(Ok(()), Err)
    }

    /// [`Recorder::record`], a panic in it taken as its error: the waiting submitters must
    /// not wait for ever on a leader that unwound.
    fn record_caught<R: std::borrow::Borrow<Recording>>(&self, batch: &[(u64, R)]) -> Result<()> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.record(batch)))
            .unwrap_or_else(|_| {
                Err(crate::error::Error::IoOperation {
                    operation: "recording fetched packs",
                    source: std::io::Error::other("the recording panicked"),
                })
            })
    }

    fn record<R: std::borrow::Borrow<Recording>>(&self, batch: &[(u64, R)]) -> Result<()> {
        let mut store = self.store.lock().unwrap_or_else(|e| e.into_inner());
        let groups: Vec<(&[SealedPack], &str)> = batch
            .iter()
            .map(|(_, r)| {
                let r = r.borrow();
                (r.packs.as_slice(), r.remote.as_str())
            })
            .collect();
        crate::transfer::record_fetched_indexes(&mut store, &groups)
    }
}
