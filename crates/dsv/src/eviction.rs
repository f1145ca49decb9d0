//! The cache limit's eviction: after a read engine's fetch brings a store's packs over its
//! limit (`dsv cache limit`, [`crate::ops::cache::set_limit`]), least-recently-used packs of
//! data a remote holds go. Below `read` and `ops`, both of which use it.
//!
//! A store setting (`[cache] limit` in `.dsv/config.toml`, bytes) that every read through the
//! read engine honours: after a fetch from a remote brings the store's packs over the limit,
//! the fetching reader evicts least-recently-used packs that hold only chunks a remote lists
//! (`Catalog::remote_held_packs`) until the packs fit. The unit is a whole pack: the read
//! engine writes one pack per fetch (a few MiB at most), so a fetched pack holds only what a
//! remote holds. A pack's last use is its file's modification time: set when it is written
//! and whenever a reader opens it (`PackReader`).
//!
//! - Never data no remote holds: a pack holding any object other than a chunk (trees, file
//!   maps, versions, outboards), or a chunk no remote's index (as this store last read it)
//!   lists, is never a candidate. Those still count toward the limit.
//! - Never a base a delta here needs: a pack holding a chunk that a delta frame of another
//!   pack names as a base (`Catalog::packs_holding_bases_of_others`) is not a candidate, so
//!   every delta kept here reads from what is here. A delta goes with its pack; its bases
//!   may go once no delta of a kept pack names them.
//! - Never what a reader in flight holds: the packs the evicting fetch just wrote are kept
//!   (its reader is about to read them), and so are the packs of every reading thread's
//!   latest fetch, in any process (a shared `flock` on each, held until that thread fetches
//!   again; `held_by_a_reader`); a reader elsewhere that holds a pack open keeps
//!   reading it (an unlinked file lives until closed; a `PackReader` holds at most
//!   `MAX_OPEN_PACKS` open), frames in the read engine's frame cache stay in memory, and a
//!   reader that finds a located chunk's pack gone locates it again and fetches it again
//!   (`FileState::copy` in `read/file.rs`).
//! - Every other user of packs holds the data lock shared (commit, checkout, import, status,
//!   push, fetch, gc's exclusive): eviction takes the data lock exclusive without waiting
//!   long (polled for at most `EVICT_LOCK_WAIT`), and skips this round when it cannot (the
//!   next fetch tries again). So a commit never deduplicates against a chunk evicted under it,
//!   and a checkout's fetched packs stay while it runs.
//! - Crash safety: one catalog transaction forgets the packs (`drop_packs`, as gc does: a
//!   pushed pack's index is copied to its remote's rows first), then the files are deleted.
//!   A kill between leaves unnamed pack files, which gc deletes past its grace period; the
//!   catalog never names a deleted pack.

use std::collections::HashSet;
use std::time::Duration;

use serde::Serialize;

use crate::error::Result;
use crate::id::ObjectId;
use crate::store::Store;

/// How long an eviction waits, at most, for the data lock that other operations hold shared.
pub const EVICT_LOCK_WAIT: Duration = Duration::from_millis(500);

/// What one [`enforce_limit`] did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Eviction {
    /// Packs evicted.
    pub packs: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Bytes of packs held after.
    pub held_bytes: u64,
    /// Whether the data lock was taken (false: another operation held it for longer than
    /// [`EVICT_LOCK_WAIT`] and nothing was evicted this time).
    pub locked: bool,
}

/// Evicts least-recently-used packs that hold only chunks a remote holds until the store's
/// packs fit in `limit` bytes (down to nine tenths of it, when a pack that size is there), never a pack in `keep` (those a reader is about to read). See
/// the notes above [`EVICT_LOCK_WAIT`]: the catalog forgets the packs first, then the files
/// go; a later read of their chunks fetches them again.
///
/// # Errors
/// Catalog and I/O errors.
pub fn enforce_limit(store: &mut Store, limit: u64, keep: &HashSet<ObjectId>) -> Result<Eviction> {
    let before = held_bytes(store.catalog())?;
    if before <= limit {
        return Ok(Eviction {
            held_bytes: before,
            locked: true,
            ..Eviction::default()
        });
    }
    if !refresh_remote_listings(store)? {
        return Ok(Eviction {
            held_bytes: before,
            ..Eviction::default()
        });
    }
    match take_eviction_lock(store.root())? {
        Some(data) => enforce_limit_under(store, &data, limit, keep),
        None => Ok(Eviction {
            held_bytes: before,
            ..Eviction::default()
        }),
    }
}

/// Reads again every remote's pack listing (packs gone from a remote forgotten, new ones
/// indexed) before an eviction chooses: a pack is evictable only while a remote lists its
/// chunks, and a listing this store read earlier may name packs a `gc --remote` elsewhere
/// has since deleted (evicting on it could delete the only copy of a version never pushed
/// that shares those chunks). `false` when a remote could not be opened or listed: nothing
/// is evicted then (the next fetch tries again).
///
/// # Errors
/// Catalog errors listing the remotes.
pub(crate) fn refresh_remote_listings(store: &mut Store) -> Result<bool> {
    for record in store.catalog().remotes()? {
        let Ok(remote) = crate::remote::Remote::open(&record) else {
            return Ok(false);
        };
        // Any failure (the remote's, or recording its listing) leaves the old listing in
        // doubt: evict nothing this round.
        if crate::transfer::refresh_indexes(store, &record, &remote, crate::remote::DEFAULT_JOBS)
            .is_err()
        {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Bytes of every pack the catalog names.
///
/// # Errors
/// Catalog errors.
pub fn held_bytes(catalog: &crate::catalog::Catalog) -> Result<u64> {
    Ok(catalog.packs()?.iter().map(|(_, size)| size).sum())
}

/// The data lock of the store `root`, exclusive, polled for at most [`EVICT_LOCK_WAIT`]:
/// `None` when other operations held it shared all that time.
///
/// # Errors
/// I/O errors of the lock file.
pub fn take_eviction_lock(
    root: &std::path::Path,
) -> Result<Option<crate::store::ExclusiveDataLock>> {
    let started = std::time::Instant::now();
    loop {
        if let Some(lock) = crate::store::ExclusiveDataLock::try_take_at(root)? {
            return Ok(Some(lock));
        }
        if started.elapsed() >= EVICT_LOCK_WAIT {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// [`enforce_limit`] with the data lock already held exclusive (by
/// [`take_eviction_lock`]); takes the store lock for its transaction.
///
/// # Errors
/// Catalog and I/O errors.
pub fn enforce_limit_under(
    store: &mut Store,
    _data: &crate::store::ExclusiveDataLock,
    limit: u64,
    keep: &HashSet<ObjectId>,
) -> Result<Eviction> {
    let lock = store.lock_head(_data)?;
    // Under both locks nothing adds or drops a pack: measure, then choose.
    let mut total = held_bytes(store.catalog())?;
    let packs_dir = store.packs_dir();
    // A base that a delta of another pack names stays with it: reading the delta here needs
    // it here (a remote holding the base does not help a local read).
    let bases_of_others = store.catalog().packs_holding_bases_of_others()?;
    let mut candidates: Vec<(std::time::SystemTime, ObjectId, u64)> = store
        .catalog()
        .remote_held_packs()?
        .into_iter()
        .filter(|(id, _)| !keep.contains(id) && !bases_of_others.contains(id))
        .map(|(id, size)| {
            let used = std::fs::metadata(crate::pack::writer::pack_path(&packs_dir, &id))
                .and_then(|m| m.modified())
                .unwrap_or(std::time::UNIX_EPOCH);
            (used, id, size)
        })
        .collect();
    candidates.sort();
    let mut chosen = HashSet::new();
    let mut bytes = 0;
    // Down to a tenth under the limit: the next evictions wait until that much more was
    // fetched (choosing the candidates scans the catalog's objects).
    let target = limit - limit / 10;
    for (_, id, size) in candidates {
        if total <= target {
            break;
        }
        if held_by_a_reader(&crate::pack::writer::pack_path(&packs_dir, &id)) {
            continue;
        }
        chosen.insert(id);
        bytes += size;
        total = total.saturating_sub(size);
    }
    if !chosen.is_empty() {
        let writer = store.catalog_mut().writer()?;
        writer.drop_packs(&chosen)?;
        // A stat-cache entry vouches for content only while the store holds it.
        writer.drop_unheld_stat_entries()?;
        writer.commit()?;
        drop(lock);
        for id in &chosen {
            let path = crate::pack::writer::pack_path(&packs_dir, id);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(crate::Error::Io { path, source }),
            }
        }
    }
    Ok(Eviction {
        packs: chosen.len() as u64,
        bytes,
        held_bytes: total,
        locked: true,
    })
}

/// Whether a reader holds the pack at `path`: the read engine holds a shared `flock` on the
/// packs of each thread's latest fetch until that thread fetches again (taken before the
/// fetch lets go of the data lock), so a reader of another process that just fetched a
/// pack reads it before anyone evicts it. A pack whose file cannot be opened is not held.
fn held_by_a_reader(path: &std::path::Path) -> bool {
    let Ok(file) = std::fs::File::open(path) else {
        return false;
    };
    matches!(file.try_lock(), Err(std::fs::TryLockError::WouldBlock))
}
