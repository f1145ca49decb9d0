//! Backing files for FUSE passthrough: a file read whole once through the mount is then read
//! by the kernel from a plain local copy, at page-cache speed.
//!
//! ```text
//! first open (cached mode) ─► reads served by the engine, as without passthrough; each
//!   served (verified) byte is also written at its offset into DIR/INODE.partial
//! the last missing range written ─► renamed DIR/INODE: complete
//! next open, no cached-mode open of the inode left ─► FOPEN_PASSTHROUGH with the complete
//!   file as backing file: the kernel reads it directly (its page cache, large folios) and
//!   sends dsv no read
//! ```
//!
//! Why materialize from the bytes a reader was served, not at open: nothing is read twice
//! (the copy costs one write of bytes already in memory), an open never waits, and a file
//! read only in part (a few samples of a large file) costs the disk nothing more; a file
//! read whole once is the one read again (the next epoch).
//!
//! The kernel ties an inode to one I/O mode at a time: while a cached-mode open of it
//! exists, a passthrough open fails (and the other way round), and every passthrough open of
//! an inode must name the same backing file. So the mode of each open is decided per inode
//! under one lock: passthrough only when no cached-mode open of that inode is counted, and
//! then with the inode's one [`BackingId`] while any passthrough open is counted. The
//! kernel counts a file's release before it sends `RELEASE`, so these counts lag the
//! kernel's only in the safe direction. That lag would make a file read whole and opened
//! again at once (its `RELEASE` still on its way) cached once more; so an open that finds
//! only cached-mode opens that were all closed (`FLUSH`, which `close` waits for) waits a
//! moment (`RELEASE_WAIT`) for their `RELEASE`.
//!
//! Bounded: the files' sizes (sparse while partial) never add up to more than the budget;
//! room is made by deleting the least recently opened backing files no open uses. The
//! directory belongs to this mount (`.dsv/tmp/mount-PID-N`) and is removed at unmount; one
//! left by a killed mount is removed by the next mount (and by the store's temp cleanup,
//! `Store::remove_stale_temp_packs` in dsv-store: commit, import, rebase).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use dsv::id::ObjectId;
use fuser::{BackingId, ReplyOpen};

use crate::TARGET;

/// Files smaller than this are not materialized: reading them from the page cache of the
/// FUSE file costs about what it costs from a local file (the open, which passthrough does
/// not save, dominates), and each would cost a file on disk.
pub(crate) const MIN_BACKED_BYTES: u64 = 1024 * 1024;

/// The default budget's share of the free space of the store's file system (1/10).
const DEFAULT_SHARE_OF_FREE: u64 = 10;

/// The default budget's cap: 64 GiB.
pub(crate) const DEFAULT_CAP_BYTES: u64 = 64 * 1024 * 1024 * 1024;

/// How long an open waits for the `RELEASE` of cached-mode opens of its file that were
/// closed already (`FLUSH`) before it is answered in cached mode. Only one wait per file
/// until one of its opens is released, so a file held open by a process that closed a
/// duplicate (a forked child, a memory map) costs one wait, not one per open.
pub(crate) const RELEASE_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// The prefix of a mount's backing directory under the store's `tmp/`: `mount-PID-N`.
pub(crate) const DIR_PREFIX: &str = "mount-";

/// The budget for backing files in `dir`'s file system: `requested` (`None`: a tenth of
/// its free space, at most `DEFAULT_CAP_BYTES`), never more than half its free space, so
/// that the copies never fill the store's disk; 0 when the free space cannot be read.
pub fn budget(dir: &Path, requested: Option<u64>) -> u64 {
    let free = match nix::sys::statvfs::statvfs(dir) {
        #[allow(clippy::useless_conversion)] // the field types differ between platforms
        Ok(stat) => {
            u64::from(stat.blocks_available()).saturating_mul(u64::from(stat.fragment_size()))
        }
        Err(error) => {
            tracing::info!(target: TARGET, %error, dir = %dir.display(), "mount: cannot read the free space for passthrough's backing files");
            return 0;
        }
    };
    match requested {
        None => (free / DEFAULT_SHARE_OF_FREE).min(DEFAULT_CAP_BYTES),
        Some(bytes) if bytes > free / 2 => {
            tracing::warn!(target: TARGET, requested = bytes, free,
                "mount: the passthrough cache asked for is more than half the free space of the store's disk; using half of it");
            free / 2
        }
        Some(bytes) => bytes,
    }
}

/// How one open of a file is served.
pub(crate) enum OpenMode {
    /// By dsv: the kernel sends reads (and keeps what they return in the FUSE file's page
    /// cache, `FOPEN_KEEP_CACHE`).
    Cached,
    /// By the kernel from the backing file.
    Passthrough,
}

/// The backing files of one mount.
pub(crate) struct Backings {
    dir: PathBuf,
    budget: u64,
    /// Whether opens may be answered with passthrough: the kernel granted it at `INIT`, and
    /// no backing open has failed since.
    enabled: AtomicBool,
    state: Mutex<State>,
    /// Notified at each release.
    released: Condvar,
    /// Whether an open may wait for a release ([`RELEASE_WAIT`]): another serving thread
    /// must be there to receive it.
    may_wait: bool,
    /// Opens answered with passthrough (a count for the log).
    passthrough_opens: AtomicU64,
}

#[derive(Default)]
struct State {
    inodes: HashMap<u64, InodeState>,
    /// Bytes the backing files hold or may hold (their sizes, partial ones included).
    used: u64,
    /// The clock of least-recently-used eviction (one tick per open).
    tick: u64,
    /// Inodes whose backing file could not be written: not tried again by this mount.
    failed: HashSet<u64>,
}

#[derive(Default)]
struct InodeState {
    cached_opens: u32,
    /// Those of `cached_opens` closed once already (`FLUSH`): their `RELEASE` may be coming.
    cached_flushed: u32,
    /// An open waited for `RELEASE`s in vain: no open waits again until a release.
    waited_in_vain: bool,
    passthrough_opens: u32,
    /// The backing id every passthrough open of the inode names, while one is counted.
    backing_id: Option<Arc<BackingId>>,
    file: Option<Arc<BackingFile>>,
    last_use: u64,
}

impl InodeState {
    fn idle(&self) -> bool {
        self.cached_opens == 0 && self.passthrough_opens == 0
    }
}

/// One file's copy: written while partial, complete once every byte is.
struct BackingFile {
    size: u64,
    partial: PathBuf,
    complete_path: PathBuf,
    file: File,
    /// The byte ranges written, `start -> end`, disjoint and not touching.
    covered: Mutex<BTreeMap<u64, u64>>,
    complete: AtomicBool,
}

impl BackingFile {
    /// Records `[start, end)` as written; true when that makes the file whole.
    fn cover(&self, start: u64, end: u64) -> bool {
        let mut covered = self.covered.lock().unwrap_or_else(|e| e.into_inner());
        // Whole already: another read completed it (and renames the copy), not this one.
        if covered.get(&0).is_some_and(|e| *e >= self.size) {
            return false;
        }
        let (mut start, mut end) = (start, end);
        // Merge with every range that overlaps or touches [start, end).
        let touching: Vec<(u64, u64)> = covered
            .range(..=end)
            .rev()
            .take_while(|(_, e)| **e >= start)
            .map(|(s, e)| (*s, *e))
            .collect();
        for (s, e) in touching {
            covered.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        covered.insert(start, end);
        start == 0 && end >= self.size
    }

    fn path(&self) -> &Path {
        if self.complete.load(Ordering::Acquire) {
            &self.complete_path
        } else {
            &self.partial
        }
    }
}

impl Backings {
    /// Backing files in `dir` (made by the caller, owned by this mount), `budget` bytes at
    /// most, for a mount served by `threads` threads. Off until [`Backings::enable`].
    pub fn new(dir: PathBuf, budget: u64, threads: usize) -> Backings {
        Backings {
            dir,
            budget,
            enabled: AtomicBool::new(false),
            state: Mutex::new(State::default()),
            released: Condvar::new(),
            may_wait: threads > 1,
            passthrough_opens: AtomicU64::new(0),
        }
    }

    /// The directory of the backing files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The byte budget.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// Passthrough granted by the kernel: opens may use it from now on.
    pub(crate) fn enable(&self) {
        self.enabled.store(true, Ordering::Release);
    }

    /// Whether opens may be answered with passthrough now.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Acquire)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Decides how an open of inode `ino` is served and counts it; for
    /// [`OpenMode::Passthrough`], the backing id to answer with. A failed backing open
    /// (the kernel refuses it: no privilege, a backing file system stacked too deep)
    /// turns passthrough off for the rest of the mount, logged once, and the open is
    /// served by dsv.
    pub fn open(&self, ino: u64, reply: &ReplyOpen) -> (OpenMode, Option<Arc<BackingId>>) {
        let mut state = self.lock();
        if let Some(entry) = state.inodes.get_mut(&ino)
            && self.may_wait
            && self.enabled()
            && entry.cached_opens > 0
            && entry.cached_opens == entry.cached_flushed
            && !entry.waited_in_vain
            && entry
                .file
                .as_ref()
                .is_some_and(|f| f.complete.load(Ordering::Acquire))
        {
            let (waited, timeout) = self
                .released
                .wait_timeout_while(state, RELEASE_WAIT, |state| {
                    state.inodes.get(&ino).is_some_and(|e| e.cached_opens > 0)
                })
                .unwrap_or_else(|e| e.into_inner());
            state = waited;
            if timeout.timed_out()
                && let Some(entry) = state.inodes.get_mut(&ino)
            {
                entry.waited_in_vain = true;
            }
        }
        state.tick += 1;
        let tick = state.tick;
        let entry = state.inodes.entry(ino).or_default();
        entry.last_use = tick;
        let ready = entry
            .file
            .as_ref()
            .filter(|f| f.complete.load(Ordering::Acquire))
            .cloned();
        // While passthrough opens of the inode are counted, every open must be one (with the
        // same backing id), even after passthrough was turned off for later files: the
        // kernel fails a cached-mode open of an inode in passthrough mode.
        if let Some(id) = &entry.backing_id {
            entry.passthrough_opens += 1;
            self.passthrough_opens.fetch_add(1, Ordering::Relaxed);
            return (OpenMode::Passthrough, Some(id.clone()));
        }
        if let (true, 0, Some(file)) = (self.enabled(), entry.cached_opens, ready) {
            let opened = File::open(&file.complete_path).and_then(|f| reply.open_backing(&f));
            match opened {
                Ok(id) => {
                    let id = Arc::new(id);
                    entry.backing_id = Some(id.clone());
                    entry.passthrough_opens += 1;
                    self.passthrough_opens.fetch_add(1, Ordering::Relaxed);
                    return (OpenMode::Passthrough, Some(id));
                }
                Err(error) => {
                    if self.enabled.swap(false, Ordering::AcqRel) {
                        tracing::warn!(target: TARGET, %error,
                            "mount: a passthrough backing file could not be opened or was refused by the kernel; reads are served by dsv from now on"
                        );
                    }
                }
            }
        }
        entry.cached_opens += 1;
        (OpenMode::Cached, None)
    }

    /// Counts the first close (`FLUSH`) of an open of `ino` served as `mode`.
    pub(crate) fn flushed(&self, ino: u64, mode: &OpenMode) {
        if let OpenMode::Cached = mode
            && let Some(entry) = self.lock().inodes.get_mut(&ino)
        {
            entry.cached_flushed += 1;
        }
    }

    /// Counts the release of an open of `ino` served as `mode`, `flushed` or not.
    pub fn release(&self, ino: u64, mode: &OpenMode, flushed: bool) {
        let mut state = self.lock();
        self.released.notify_all();
        let Some(entry) = state.inodes.get_mut(&ino) else {
            return;
        };
        entry.waited_in_vain = false;
        match mode {
            OpenMode::Cached => {
                entry.cached_opens = entry.cached_opens.saturating_sub(1);
                if flushed {
                    entry.cached_flushed = entry.cached_flushed.saturating_sub(1);
                }
            }
            OpenMode::Passthrough => {
                entry.passthrough_opens = entry.passthrough_opens.saturating_sub(1);
                if entry.passthrough_opens == 0 {
                    // Closes the kernel's reference (FUSE_DEV_IOC_BACKING_CLOSE); the
                    // next passthrough open registers the file again.
                    entry.backing_id = None;
                }
            }
        }
        if entry.idle() && entry.file.is_none() {
            state.inodes.remove(&ino);
        }
    }

    /// Writes `data`, bytes `offset..` of inode `ino` (a file of `size` bytes) just served
    /// by the engine (verified), into the inode's backing file, making one (within the
    /// budget) if it has none and this read starts the file (a reader that starts
    /// elsewhere is unlikely to read it whole); renames it complete once every byte is
    /// written. Does nothing when passthrough is off, the file is too small or too large
    /// for the budget, or already complete.
    ///
    /// Before a copy is called complete it is hashed whole and compared with the file's id
    /// (`id`): passthrough serves it without dsv seeing a byte, so what was put together
    /// from many writes is checked once, as a checkout checks a file it wrote in segments.
    /// A copy that does not match is dropped (the file stays served by dsv).
    pub fn record(&self, ino: u64, id: &ObjectId, size: u64, offset: u64, data: &[u8]) {
        if data.is_empty() || size < MIN_BACKED_BYTES || size > self.budget || !self.enabled() {
            return;
        }
        let Some(file) = self.file_for(ino, size, offset == 0) else {
            return;
        };
        if file.complete.load(Ordering::Acquire) {
            return;
        }
        let end = offset + data.len() as u64;
        let whole = file
            .file
            .write_all_at(data, offset)
            .map(|()| file.cover(offset, end));
        match whole {
            Ok(false) => {}
            Ok(true) => match Self::check_copy(&file, id)
                .and_then(|()| std::fs::rename(&file.partial, &file.complete_path))
            {
                Ok(()) => {
                    file.complete.store(true, Ordering::Release);
                    tracing::debug!(target: TARGET, ino, size, "mount: backing file complete; the next open is passthrough");
                }
                Err(error) => self.fail(ino, &file, &error),
            },
            Err(error) => self.fail(ino, &file, &error),
        }
    }

    /// Whether the copy `file`, whole now, hashes to the file id `id`.
    fn check_copy(file: &BackingFile, id: &ObjectId) -> std::io::Result<()> {
        match dsv::workspace::hash_open_file(&file.file, &file.partial) {
            Ok((found, _)) if found == *id => Ok(()),
            Ok(_) => Err(std::io::Error::other(
                "the copy does not hash to the file's id",
            )),
            Err(error) => Err(std::io::Error::other(error.to_string())),
        }
    }

    /// The backing file of `ino`, made now if it has none and `make` (room made by
    /// evicting idle ones); `None` when there is none, no room or it cannot be made.
    fn file_for(&self, ino: u64, size: u64, make: bool) -> Option<Arc<BackingFile>> {
        let mut state = self.lock();
        if let Some(file) = state.inodes.get(&ino).and_then(|e| e.file.clone()) {
            return Some(file);
        }
        if !make || state.failed.contains(&ino) {
            return None;
        }
        if !self.make_room(&mut state, size) {
            return None;
        }
        let partial = self.dir.join(format!("{ino}.partial"));
        let complete_path = self.dir.join(ino.to_string());
        // Readable by this process alone (the kernel reads it with this process's rights).
        let made = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&partial)
            .and_then(|file| file.set_len(size).map(|()| file));
        match made {
            Ok(file) => {
                let file = Arc::new(BackingFile {
                    size,
                    partial,
                    complete_path,
                    file,
                    covered: Mutex::new(BTreeMap::new()),
                    complete: AtomicBool::new(false),
                });
                state.used += size;
                state.inodes.entry(ino).or_default().file = Some(file.clone());
                Some(file)
            }
            Err(error) => {
                tracing::info!(target: TARGET, ino, %error, path = %partial.display(), "mount: cannot make a backing file; this file is served by dsv");
                let _ = std::fs::remove_file(&partial);
                state.failed.insert(ino);
                None
            }
        }
    }

    /// Deletes idle backing files, least recently opened first, until `size` more bytes fit
    /// the budget; false when they cannot.
    fn make_room(&self, state: &mut State, size: u64) -> bool {
        while state.used + size > self.budget {
            let oldest = state
                .inodes
                .iter()
                .filter(|(_, e)| e.idle() && e.file.is_some())
                .min_by_key(|(_, e)| e.last_use)
                .map(|(ino, _)| *ino);
            let Some(ino) = oldest else {
                return false;
            };
            if let Some(entry) = state.inodes.remove(&ino)
                && let Some(file) = entry.file
            {
                state.used -= file.size;
                if let Err(error) = std::fs::remove_file(file.path()) {
                    tracing::debug!(target: TARGET, %error, path = %file.path().display(), "mount: cannot delete an evicted backing file");
                }
            }
        }
        true
    }

    /// Gives up the backing file of `ino` after `error` writing it.
    fn fail(&self, ino: u64, file: &Arc<BackingFile>, error: &std::io::Error) {
        tracing::info!(target: TARGET, ino, %error, "mount: cannot write a backing file; this file is served by dsv");
        let mut state = self.lock();
        if let Some(entry) = state.inodes.get_mut(&ino)
            && entry.file.as_ref().is_some_and(|f| Arc::ptr_eq(f, file))
        {
            entry.file = None;
            state.used -= file.size;
        }
        state.failed.insert(ino);
        let _ = std::fs::remove_file(&file.partial);
        let _ = std::fs::remove_file(&file.complete_path);
    }

    /// Opens answered with passthrough so far.
    pub(crate) fn passthrough_opens(&self) -> u64 {
        self.passthrough_opens.load(Ordering::Relaxed)
    }
}

/// Makes this mount's backing directory under `temp_dir` (`mount-PID-N`, the first `N`
/// free; mode 0700, its files 0600: the version's bytes are this user's to read), after
/// removing those of mounts whose process is gone.
///
/// # Errors
/// As [`std::fs::create_dir`].
pub(crate) fn make_dir(temp_dir: &Path) -> std::io::Result<PathBuf> {
    remove_stale_dirs(temp_dir);
    let pid = std::process::id();
    let mut n = 0u32;
    loop {
        let dir = temp_dir.join(format!("{DIR_PREFIX}{pid}-{n}"));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(error) if error.kind() == std::io::ErrorKind::AlreadyExists && n < 10_000 => {
                n += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

/// Removes the backing directories under `temp_dir` of mounts whose process is gone
/// (killed: a mount that ends removes its own).
fn remove_stale_dirs(temp_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(temp_dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(owner) = name
            .to_str()
            .and_then(|n| n.strip_prefix(DIR_PREFIX))
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if owner != std::process::id() && !Path::new("/proc").join(owner.to_string()).exists() {
            match std::fs::remove_dir_all(entry.path()) {
                Ok(()) => {
                    tracing::debug!(target: TARGET, path = %entry.path().display(), "mount: removed a killed mount's backing files");
                }
                Err(error) => {
                    tracing::debug!(target: TARGET, %error, path = %entry.path().display(), "mount: cannot remove a killed mount's backing files");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backing(size: u64) -> (tempfile::TempDir, BackingFile) {
        let dir = tempfile::tempdir().unwrap();
        let partial = dir.path().join("1.partial");
        let file = File::create(&partial).unwrap();
        let b = BackingFile {
            size,
            complete_path: dir.path().join("1"),
            partial,
            file,
            covered: Mutex::new(BTreeMap::new()),
            complete: AtomicBool::new(false),
        };
        (dir, b)
    }

    #[test]
    fn coverage_merges_ranges_in_any_order() {
        let (_dir, b) = backing(100);
        assert!(!b.cover(50, 60));
        assert!(!b.cover(0, 10));
        assert!(!b.cover(60, 100));
        assert!(!b.cover(5, 20));
        assert!(!b.cover(30, 40));
        assert_eq!(
            b.covered.lock().unwrap().clone(),
            BTreeMap::from([(0, 20), (30, 40), (50, 100)])
        );
        assert!(!b.cover(20, 30));
        assert!(b.cover(40, 50), "whole");
        assert!(
            !b.cover(0, 100),
            "whole already: only the read that completed it renames"
        );
        assert_eq!(
            b.covered.lock().unwrap().clone(),
            BTreeMap::from([(0, 100)])
        );
    }

    #[test]
    fn stale_dirs_of_dead_processes_are_removed_and_others_kept() {
        let temp = tempfile::tempdir().unwrap();
        // A pid no process has (above the kernel's pid_max limit of 2^22).
        let dead = temp
            .path()
            .join(format!("{DIR_PREFIX}{}-0", (1u32 << 22) + 5));
        std::fs::create_dir(&dead).unwrap();
        std::fs::write(dead.join("7"), b"x").unwrap();
        let other = temp.path().join("pack-1-2");
        std::fs::write(&other, b"x").unwrap();
        let mine = make_dir(temp.path()).unwrap();
        assert!(!dead.exists());
        assert!(other.exists());
        assert!(mine.is_dir());
        let second = make_dir(temp.path()).unwrap();
        assert_ne!(mine, second, "a second mount of this process gets its own");
    }
}
