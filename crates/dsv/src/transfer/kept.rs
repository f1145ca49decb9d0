//! What a download keeps to check delta frames, within a memory budget.
//!
//! A delta frame is checked against the raw bytes of its bases (1 to 8 chunks, at most
//! [`crate::pack::format::MAX_DELTA_PREFIX`] bytes together). A download keeps the bases the
//! deltas of it still to be checked name, and the stored bytes of each delta whose bases have
//! not arrived yet. What it keeps is bounded, whatever the remote sends:
//! - each base is let go as soon as the last delta naming it is checked ([`BaseStore::used`]);
//! - a delta is checked as soon as its bases are at hand ([`BaseStore::next_ready`]), not once
//!   the download ends;
//! - past [`delta_memory`] bytes (256 MiB unless the front end sets another figure with
//!   [`set_delta_memory`]), what is kept goes to an unnamed file in the store's temp directory
//!   ([`KeptBytes`]), which the system removes when the download ends (or its process dies).
//!
//! The file holds at most the raw bytes of the bases the download's deltas name and the
//! stored bytes of its deltas: no more than the data asked for, decompressed. It never takes
//! the last 5% of its disk's free space and 16 MiB (as an import keeps): a remote whose small
//! frames name huge bases fails the download with an I/O error rather than filling the disk.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{Error, IoResultExt, Result};
use crate::id::ObjectId;

/// The bytes a download (or `verify --remote --full`) keeps in memory to check delta
/// frames, unless the front end sets another figure: 256 MiB.
pub const DEFAULT_DELTA_MEMORY: u64 = 256 * 1024 * 1024;

/// The figure [`delta_memory`] gives (process-wide).
static DELTA_MEMORY: AtomicU64 = AtomicU64::new(DEFAULT_DELTA_MEMORY);

/// Sets the bytes every later download of this process keeps in memory to check delta frames
/// (bases and deltas waiting for them); past it they are kept in an unnamed file in the
/// store's temp directory. 0 keeps nothing in memory. The CLI sets it from
/// `DSV_DELTA_MEMORY`; the default is [`DEFAULT_DELTA_MEMORY`].
pub fn set_delta_memory(bytes: u64) {
    DELTA_MEMORY.store(bytes, Ordering::Relaxed);
}

/// The bytes a download keeps in memory to check delta frames ([`set_delta_memory`]).
pub fn delta_memory() -> u64 {
    DELTA_MEMORY.load(Ordering::Relaxed)
}

/// Bytes kept by [`KeptBytes`]: in memory, in its file, or not at all (a base larger than any
/// delta's prefix may be: only its length is kept, and a delta naming it fails its check).
#[derive(Debug, Clone)]
pub(crate) enum Held {
    Memory(Arc<Vec<u8>>),
    Disk { offset: u64, length: u64 },
    TooLarge { length: u64 },
}

impl Held {
    /// The length of the bytes held, in bytes.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Held::Memory(bytes) => bytes.len() as u64,
            Held::Disk { length, .. } | Held::TooLarge { length } => *length,
        }
    }
}

/// Byte strings kept in memory up to `limit` bytes, and past it in an unnamed file in
/// `spill_dir` (created at the first byte past the limit).
#[derive(Debug)]
pub(crate) struct KeptBytes {
    limit: u64,
    in_memory: u64,
    peak: u64,
    spill_dir: Option<PathBuf>,
    spill: Option<(std::fs::File, u64)>,
    /// The file may grow to this many bytes before the free space is asked again.
    room: u64,
    /// The bytes free to this process in a directory (`statvfs`; replaced in tests).
    free_space: fn(&Path) -> Result<u64>,
}

/// How much the file grows, at most, between two looks at the free space: 64 MiB.
const ROOM_STEP: u64 = 64 * 1024 * 1024;

/// The bytes free to an unprivileged user in `dir`'s file system (`statvfs`: `f_bavail` ×
/// `f_frsize`).
///
/// # Errors
/// [`Error::Io`] when the file system cannot be asked.
fn statvfs_free(dir: &Path) -> Result<u64> {
    let stat = nix::sys::statvfs::statvfs(dir).map_err(|errno| Error::Io {
        path: dir.to_path_buf(),
        source: std::io::Error::from(errno),
    })?;
    #[allow(clippy::useless_conversion)] // the field types differ between platforms
    Ok(u64::from(stat.blocks_available()).saturating_mul(u64::from(stat.fragment_size())))
}

impl KeptBytes {
    /// At most `limit` bytes in memory; past it in `spill_dir` (`None`: past it is an error).
    pub(crate) fn new(limit: u64, spill_dir: Option<&Path>) -> KeptBytes {
        KeptBytes {
            limit,
            in_memory: 0,
            peak: 0,
            spill_dir: spill_dir.map(Path::to_path_buf),
            spill: None,
            room: 0,
            free_space: statvfs_free,
        }
    }

    /// Keeps `bytes`: in memory while the total stays within the limit, else in the file.
    ///
    /// # Errors
    /// [`Error::Io`] writing the file; [`Error::Internal`] past the limit with no directory
    /// given.
    pub(crate) fn put(&mut self, bytes: Vec<u8>) -> Result<Held> {
        let length = bytes.len() as u64;
        if self.in_memory + length <= self.limit {
            self.in_memory += length;
            self.peak = self.peak.max(self.in_memory);
            return Ok(Held::Memory(Arc::new(bytes)));
        }
        let Some(dir) = &self.spill_dir else {
            return Err(Error::Internal {
                detail: format!(
                    "checking the delta frames of this download needs more than the {} bytes \
                     it may keep in memory, and no directory was given to keep the rest in",
                    self.limit
                ),
            });
        };
        if self.spill.is_none() {
            let file = tempfile::tempfile_in(dir).at(dir)?;
            self.spill = Some((file, 0));
        }
        let (file, end) = self.spill.as_mut().expect("opened above");
        // Never past 95% of the free space (less 16 MiB, as an import keeps): a remote whose
        // small frames name huge bases fails here rather than filling the disk.
        if *end + length > self.room {
            let free = (self.free_space)(dir)?;
            let bound = free.saturating_sub(free / 20).saturating_sub(16 << 20);
            if length > bound {
                return Err(Error::Io {
                    path: dir.clone(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::StorageFull,
                        format!(
                            "checking this download's delta frames keeps {} bytes here past \
                             the {} bytes of memory allowed (DSV_DELTA_MEMORY), and {length} \
                             more would leave less than 5% of the {free} bytes free",
                            *end, self.limit
                        ),
                    ),
                });
            }
            self.room = *end + bound.min(ROOM_STEP.max(length));
        }
        let offset = *end;
        file.write_all_at(&bytes, offset).at(dir)?;
        *end += length;
        Ok(Held::Disk { offset, length })
    }

    /// The bytes `held` keeps.
    ///
    /// # Errors
    /// [`Error::Io`] reading the file; [`Error::Internal`] for a [`Held::TooLarge`].
    pub(crate) fn get<'h>(&self, held: &'h Held) -> Result<Cow<'h, [u8]>> {
        match held {
            Held::Memory(bytes) => Ok(Cow::Borrowed(bytes.as_slice())),
            Held::Disk { offset, length } => {
                let (Some((file, _)), Some(dir)) = (&self.spill, &self.spill_dir) else {
                    return Err(internal("kept bytes name a file never written"));
                };
                let mut bytes = vec![0; *length as usize];
                file.read_exact_at(&mut bytes, *offset).at(dir)?;
                Ok(Cow::Owned(bytes))
            }
            Held::TooLarge { length } => Err(internal(&format!(
                "{length} bytes too large to keep were asked for"
            ))),
        }
    }

    /// Lets `held` go (its memory is counted free; a file's bytes stay until the download
    /// ends).
    pub(crate) fn release(&mut self, held: &Held) {
        if let Held::Memory(bytes) = held {
            self.in_memory = self.in_memory.saturating_sub(bytes.len() as u64);
        }
    }

    /// Bytes in memory now.
    #[cfg(test)]
    pub(crate) fn in_memory(&self) -> u64 {
        self.in_memory
    }

    /// The most bytes held in memory at once.
    #[cfg(test)]
    pub(crate) fn peak(&self) -> u64 {
        self.peak
    }

    /// Bytes written to the file.
    #[cfg(test)]
    pub(crate) fn spilled(&self) -> u64 {
        self.spill.as_ref().map_or(0, |(_, end)| *end)
    }
}

/// [`KeptBytes`] shared with the threads that check a download's frames.
pub(crate) type SharedKept = Arc<Mutex<KeptBytes>>;

/// Locks `kept` (a poisoned lock is taken as it is: its counts stay consistent).
pub(crate) fn lock(kept: &SharedKept) -> std::sync::MutexGuard<'_, KeptBytes> {
    kept.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The bases a download's delta frames need, kept in [`KeptBytes`], and the deltas waiting
/// for them (by a number their owner gives each): a base is kept while a delta that names it
/// is still to be checked (or until the end, for those [`BaseStore::keep_until_end`]), and a
/// delta is ready once every base it names is at hand.
#[derive(Debug)]
pub(crate) struct BaseStore {
    pub(crate) kept: SharedKept,
    known: HashMap<ObjectId, Held>,
    /// Deltas, waiting or still to come, naming each base.
    uses: HashMap<ObjectId, u32>,
    until_end: HashSet<ObjectId>,
    /// For each base not at hand, the deltas waiting for it.
    blocked: HashMap<ObjectId, Vec<u64>>,
    /// For each waiting delta, how many of its bases are not at hand.
    missing: HashMap<u64, usize>,
    ready: Vec<u64>,
}

impl BaseStore {
    /// Keeps at most `limit` bytes in memory, the rest in `spill_dir`.
    pub(crate) fn new(limit: u64, spill_dir: Option<&Path>) -> BaseStore {
        BaseStore {
            kept: Arc::new(Mutex::new(KeptBytes::new(limit, spill_dir))),
            known: HashMap::new(),
            uses: HashMap::new(),
            until_end: HashSet::new(),
            blocked: HashMap::new(),
            missing: HashMap::new(),
            ready: Vec::new(),
        }
    }

    /// Bases to keep until the end (deltas of a later download of the operation name them).
    pub(crate) fn keep_until_end(&mut self, bases: impl IntoIterator<Item = ObjectId>) {
        self.until_end.extend(bases);
    }

    /// A delta naming `bases` will be checked: they are kept until it is ([`BaseStore::used`]).
    pub(crate) fn will_use(&mut self, bases: &[ObjectId]) {
        for base in distinct(bases) {
            *self.uses.entry(base).or_default() += 1;
        }
    }

    /// True when a delta still to be checked names `id` (or it is kept until the end).
    pub(crate) fn wanted(&self, id: &ObjectId) -> bool {
        self.uses.get(id).is_some_and(|n| *n > 0) || self.until_end.contains(id)
    }

    /// Every base [`BaseStore::wanted`].
    pub(crate) fn wanted_set(&self) -> HashSet<ObjectId> {
        self.uses
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(id, _)| *id)
            .chain(self.until_end.iter().copied())
            .collect()
    }

    /// True when base `id` is at hand.
    pub(crate) fn has(&self, id: &ObjectId) -> bool {
        self.known.contains_key(id)
    }

    /// The bases at hand.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.known.len()
    }

    /// Base `id`'s bytes, kept in `held`, arrived: kept when wanted and not at hand yet
    /// (deltas waiting for it may become ready), else let go.
    pub(crate) fn arrived(&mut self, id: ObjectId, held: Held) {
        if !self.wanted(&id) || self.known.contains_key(&id) {
            lock(&self.kept).release(&held);
            return;
        }
        self.known.insert(id, held);
        for item in self.blocked.remove(&id).unwrap_or_default() {
            if let Some(missing) = self.missing.get_mut(&item) {
                *missing -= 1;
                if *missing == 0 {
                    self.missing.remove(&item);
                    self.ready.push(item);
                }
            }
        }
    }

    /// [`BaseStore::arrived`] for bytes not yet kept (`id`'s, checked): kept only when wanted.
    ///
    /// # Errors
    /// [`KeptBytes::put`]'s.
    pub(crate) fn arrived_bytes(&mut self, id: ObjectId, bytes: &[u8]) -> Result<()> {
        if !self.wanted(&id) || self.known.contains_key(&id) {
            return Ok(());
        }
        let held = keep_base(&self.kept, bytes)?;
        self.arrived(id, held);
        Ok(())
    }

    /// Delta `item`, naming `bases`, waits for those not at hand; ready at once when none is
    /// missing.
    pub(crate) fn wait(&mut self, item: u64, bases: &[ObjectId]) {
        let mut missing = 0;
        for base in distinct(bases) {
            if !self.known.contains_key(&base) {
                self.blocked.entry(base).or_default().push(item);
                missing += 1;
            }
        }
        if missing == 0 {
            self.ready.push(item);
        } else {
            self.missing.insert(item, missing);
        }
    }

    /// A delta whose bases are all at hand, if any.
    pub(crate) fn next_ready(&mut self) -> Option<u64> {
        self.ready.pop()
    }

    /// The bytes of `bases`, end to end, as a delta's prefix; `Err(length)` when together
    /// they hold more than `limit` bytes (nothing read then).
    ///
    /// # Errors
    /// [`KeptBytes::get`]'s; [`Error::Internal`] for a base not at hand.
    pub(crate) fn prefix(
        &self,
        bases: &[ObjectId],
        limit: u64,
    ) -> Result<std::result::Result<Vec<u8>, u64>> {
        let mut length = 0;
        for base in bases {
            length += self.held(base)?.len();
        }
        if length > limit {
            return Ok(Err(length));
        }
        let kept = lock(&self.kept);
        let mut prefix = Vec::with_capacity(length as usize);
        for base in bases {
            prefix.extend_from_slice(&kept.get(self.held(base)?)?);
        }
        Ok(Ok(prefix))
    }

    fn held(&self, base: &ObjectId) -> Result<&Held> {
        self.known
            .get(base)
            .ok_or_else(|| internal(&format!("base {} is not at hand", base.short())))
    }

    /// A delta naming `bases` was checked (or given up): each base no delta still to be
    /// checked names is let go.
    pub(crate) fn used(&mut self, bases: &[ObjectId]) {
        for base in distinct(bases) {
            let Some(uses) = self.uses.get_mut(&base) else {
                continue;
            };
            *uses = uses.saturating_sub(1);
            if *uses == 0 {
                self.uses.remove(&base);
                if !self.until_end.contains(&base)
                    && let Some(held) = self.known.remove(&base)
                {
                    lock(&self.kept).release(&held);
                }
            }
        }
    }

    /// The bases a waiting delta lacks: the first of those `bases` not at hand.
    pub(crate) fn first_missing(&self, bases: &[ObjectId]) -> Option<ObjectId> {
        bases.iter().find(|b| !self.known.contains_key(b)).copied()
    }

    /// Lets everything go.
    pub(crate) fn clear(&mut self) {
        let mut kept = lock(&self.kept);
        for held in self.known.values() {
            kept.release(held);
        }
        drop(kept);
        self.known.clear();
        self.uses.clear();
        self.until_end.clear();
        self.blocked.clear();
        self.missing.clear();
        self.ready.clear();
    }
}

/// Keeps a base's `bytes` in `kept`: only its length when it is larger than any delta's
/// prefix may be (a delta naming it fails its check on that length).
///
/// # Errors
/// [`KeptBytes::put`]'s.
pub(crate) fn keep_base(kept: &SharedKept, bytes: &[u8]) -> Result<Held> {
    if bytes.len() as u64 > crate::pack::format::MAX_DELTA_PREFIX {
        return Ok(Held::TooLarge {
            length: bytes.len() as u64,
        });
    }
    lock(kept).put(bytes.to_vec())
}

fn internal(detail: &str) -> Error {
    Error::Internal {
        detail: detail.to_string(),
    }
}

/// `ids` without repeats, in their first order.
fn distinct(ids: &[ObjectId]) -> Vec<ObjectId> {
    let mut seen = HashSet::new();
    ids.iter().copied().filter(|id| seen.insert(*id)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ObjectId {
        ObjectId::of(&[n])
    }

    #[test]
    fn bytes_past_the_limit_go_to_the_file_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut kept = KeptBytes::new(10, Some(dir.path()));
        let a = kept.put(vec![1; 6]).unwrap();
        let b = kept.put(vec![2; 6]).unwrap();
        assert!(matches!(a, Held::Memory(_)));
        assert!(matches!(b, Held::Disk { .. }));
        assert_eq!(kept.in_memory(), 6);
        assert_eq!(kept.get(&b).unwrap().as_ref(), &[2; 6]);
        kept.release(&a);
        assert_eq!(kept.in_memory(), 0);
        let c = kept.put(vec![3; 10]).unwrap();
        assert!(matches!(c, Held::Memory(_)));
        assert_eq!(kept.peak(), 10);
        assert_eq!(kept.spilled(), 6);
        // The file has no name: nothing is left in the directory.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let mut no_dir = KeptBytes::new(4, None);
        let error = no_dir.put(vec![0; 5]).unwrap_err().to_string();
        assert!(error.contains("more than the 4 bytes"), "{error}");
    }

    #[test]
    fn the_file_stops_short_of_filling_its_disk() {
        let dir = tempfile::tempdir().unwrap();
        let mut kept = KeptBytes::new(0, Some(dir.path()));
        // A disk of 200 MiB free when the download starts, less what the file holds.
        static FREE: AtomicU64 = AtomicU64::new(200 << 20);
        kept.free_space = |_| Ok(FREE.load(Ordering::Relaxed));
        let mut written = 0;
        let error = loop {
            match kept.put(vec![7; 8 << 20]) {
                Ok(_) => {
                    written += 8 << 20;
                    FREE.store((200 << 20) - written, Ordering::Relaxed);
                }
                Err(error) => break error,
            }
            assert!(written < 200 << 20, "the disk was filled");
        };
        let detail = format!("{error}: {}", std::error::Error::source(&error).unwrap());
        assert!(detail.contains("less than 5%"), "{detail}");
        // What is left free: at least 5% of it and 16 MiB.
        let free: u64 = (200 << 20) - written;
        assert!(free >= 16 << 20, "{free} bytes left free");
        assert_eq!(kept.spilled(), written);
    }

    #[test]
    fn a_base_is_let_go_after_the_last_delta_naming_it_and_deltas_become_ready_as_bases_arrive() {
        let mut store = BaseStore::new(1 << 20, None);
        store.will_use(&[id(1), id(2)]);
        store.will_use(&[id(1)]);
        store.wait(10, &[id(1), id(2), id(1)]);
        store.wait(11, &[id(1)]);
        assert_eq!(store.next_ready(), None);
        // Not wanted: let go at once.
        store.arrived_bytes(id(3), &[3; 100]).unwrap();
        assert!(!store.has(&id(3)));
        store.arrived_bytes(id(1), &[1; 100]).unwrap();
        assert_eq!(store.next_ready(), Some(11));
        assert_eq!(store.next_ready(), None);
        store.arrived_bytes(id(2), &[2; 50]).unwrap();
        assert_eq!(store.next_ready(), Some(10));
        assert_eq!(lock(&store.kept).in_memory(), 150);
        let prefix = store.prefix(&[id(2), id(1)], 1000).unwrap().unwrap();
        assert_eq!(prefix.len(), 150);
        assert_eq!(store.prefix(&[id(2), id(1)], 149).unwrap(), Err(150));
        store.used(&[id(1)]);
        assert!(store.has(&id(1)));
        store.used(&[id(1), id(2), id(1)]);
        assert_eq!(store.len(), 0);
        assert_eq!(lock(&store.kept).in_memory(), 0);
    }
}
