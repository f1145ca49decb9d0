//! Workspaces and the stat cache: deciding, without reading a file, whether it still holds
//! its workspace's version's content at its path.
//!
//! One of three workspace modules, each one concern: this one holds the rules (when a stat
//! cache entry is trusted, racy timestamps, a directory's identity); the rows that record a
//! workspace, its version and its stat cache are `catalog/workspaces.rs`
//! ([`crate::catalog::Workspace`]); the user's commands over those records (`dsv workspace
//! ls`, `dsv workspace forget`) are `dsv::ops::workspace`.
//!
//! A cached entry names no file id (schema 11): it vouches that the file at its path holds
//! the content of the file the workspace's version has there, and readers take the id from
//! that version's tree, walked in step with the directory. Every writer keeps that true:
//! commit writes entries for the files it read (their content is the new version's), checkout
//! for the files it wrote or kept (the target's), status for files that still hold their
//! version's content; entries at paths whose content the new version does not have are
//! deleted in the same transaction that moves the workspace's version.
//!
//! An entry is trusted when the file's size, mtime, ctime, inode and mode are all unchanged.
//! A stat taken within one timestamp tick of the file's last modification is "racy": the file
//! could be modified again with the same mtime, so such a stat is never written (the racy-git
//! rule, <https://git-scm.com/docs/racy-git>); [`entry`] decides. Checkout waits out the
//! margin once, then re-stats what it wrote and caches only files whose stat did not change,
//! so a fresh checkout is trusted (on filesystems with whole-second timestamps the 2 s margin
//! still applies, and its files are hashed once more by the next status or commit).
//!
//! # The rules of the stat cache
//!
//! `workspace.rs` and the `stat_cache` table. For each regular file a workspace holds, the cache
//! stores what `lstat` returned when the file was last found (hashed or written) to hold the
//! content of the workspace's version at its path: size, mtime (ns), ctime (ns), inode and
//! `st_mode`, under the path's key. It names no file id (schema 11): the entry vouches for the
//! file the workspace's version (`workspaces.version`) has at the same path, and the readers
//! take the id from that version's tree, walked in step with the directory (status and audit
//! walk it anyway; commit walks it from the first vouched file; checkout walks it as "the version
//! checked out before"). A vouched file whose version has no file of the same size at its path
//! is hashed.
//!
//! 1. **Settled when written:** `workspace::entry(stat, checked_ns)` gives an entry only when
//!    `changed + margin <= checked_ns`, `changed` being the later of the stat's mtime and ctime
//!    and `checked_ns` a time no later than when the stat was taken. The margin is 100 ms
//!    (`RACY_MARGIN_NS`), or 2 s (`COARSE_RACY_MARGIN_NS`) when the mtime or the ctime is a
//!    whole number of seconds (a filesystem with coarse timestamps; or a file whose mtime a tool
//!    set, as tar does, which costs at most a hash more within 2 s of its ctime). A file changed within the margin before its
//!    stat was taken could be changed again without changing its stat, so no entry is written
//!    for it (an old entry at its path is deleted) and it is hashed again next time. This is
//!    git's racy-timestamp rule; the ctime counts too because a tool can set the mtime back
//!    (`touch -d`, `cp -p`, `rsync -t`), so a file written and back-dated twice within one tick
//!    would otherwise show one stat for two contents. Before schema 11 the entry kept
//!    `checked_ns` and was checked on read (on the mtime only).
//! 2. **The stat of the file read:** a file hashed after its walk's lstat (status, audit, the
//!    checkout plan: `status::hash_files`) gets an entry only when the `fstat` of the file it
//!    read, taken after the last byte (`workspace::hash_open_file`), equals the walk's
//!    stat. Otherwise the file at that path was replaced or written while the command ran (a
//!    directory renamed away and back keeps its files' ctimes), and an entry for the walk's
//!    stat could vouch for a file that was never read. Commit's ingest does the same
//!    (`ingest::read_file`): a file whose size or mtime moved while it was read fails the
//!    commit ("changed while it was being read"); one whose stat moved otherwise (another inode,
//!    or only the ctime: a hard link, `touch -a`) is committed as read but gets no entry.
//! 3. **Unchanged when read:** an entry (`StatEntry`, the same type as the walk's `Stat`)
//!    vouches when it equals the current lstat: size, mtime, ctime, inode and mode.
//!
//! **Invariant:** an entry at a path vouches that the file there, while its stat is unchanged,
//! holds the content the workspace's version has at that path, and that version is whole in the
//! store. Commit relies on it: a file with a trusted cache entry is neither read nor looked up
//! in the catalog, and its content is not stored again. The version is whole while the
//! workspace's directory exists (`rm` and `cache prune` keep it), and
//! `Catalog::stat_cache_in_order` gives no entry at all when the workspace's version is removed,
//! evicted or unrecorded; `gc` deletes such workspaces' entries in its catalog transaction. A
//! workspace record is used only for the directory it was made for (device, inode, birth time
//! of its root): a directory made again at the same path gets no stat cache, and its next
//! commit or checkout deletes the old one. The workspace's version changes only in the
//! transactions of commit and checkout, and each keeps every entry true for the version it
//! records:
//!
//! - **commit:** the new version's tree is the directory as walked: a vouched file keeps the
//!   id of the old version's entry, which the new version then has at the same path, and every
//!   file it read still holding the walk's stat gets a fresh entry (the time before the walk as
//!   `checked_ns`). It deletes
//!   entries for paths that are no longer regular files or that the walk left out
//!   (`--exclude`, `.dsvignore`). A file modified less than the margin before the commit
//!   started gets no entry, and is read again by the next commit or status.
//! - **status:** of the files it hashed, only those that still hold the content the
//!   workspace's version has at their path (the time before the scan as `checked_ns`). A
//!   modified or added file is not cached, so the next commit reads and stores it.
//! - **checkout:** a kept file's entry stays only where the target has the same content at
//!   that path (the plan keeps a file only then); every file it wrote gets an entry when its
//!   stat did not change between its rename and a re-stat taken after one 100 ms wait (the time
//!   after the wait as `checked_ns`; a file whose stat changed loses its entry), and the files
//!   it hashed and kept, which hold the target's content, get one (the time before its scan).
//!   It deletes the entries of every path that is not a file of the target. On a filesystem
//!   with whole-second timestamps, the 2 s margin applies and these files get no entry until
//!   hashed again.

use std::fs::File;
use std::path::Path;

use crate::catalog::StatEntry;
use crate::error::{IoResultExt, Result};
use crate::id::ObjectId;
use crate::stat::Stat;

/// How long after its mtime a stat must have been taken to be trusted, for filesystems with
/// nanosecond timestamps (Linux updates them at tick granularity, ≤ 10 ms).
pub const RACY_MARGIN_NS: i64 = 100_000_000;
/// The margin for timestamps with whole seconds only (a coarse filesystem).
pub(crate) const COARSE_RACY_MARGIN_NS: i64 = 2_000_000_000;

/// The margin that applies to a file whose mtime is `mtime_ns`.
pub(crate) fn racy_margin(mtime_ns: i64) -> i64 {
    if mtime_ns % 1_000_000_000 == 0 {
        COARSE_RACY_MARGIN_NS
    } else {
        RACY_MARGIN_NS
    }
}

/// The stat cache entry for a file whose lstat `stat` was taken no earlier than `checked_ns`
/// (nanoseconds since the epoch), or `None` when that stat is racy and must not be cached
/// (the caller deletes the path's entry instead): taken within `racy_margin` of the file's
/// last change, the later of its mtime and its ctime (the coarse margin when either time is
/// a whole second). The ctime counts because a tool can set
/// the mtime back (`touch -d`, `cp -p`, `rsync -t`): a file written and given an old mtime
/// twice within one timestamp tick would otherwise show one stat for two contents.
pub fn entry(stat: &Stat, checked_ns: i64) -> Option<StatEntry> {
    let changed = stat.mtime_ns.max(stat.ctime_ns);
    // Coarse when either time is: the margin of the coarser of the two.
    let margin = racy_margin(stat.mtime_ns).max(racy_margin(stat.ctime_ns));
    let settled = changed.saturating_add(margin) <= checked_ns;
    settled.then_some(*stat)
}

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Opens the regular file at `path` for reading, as a walk found it: its last name is not
/// followed and the open never waits (`O_NOFOLLOW | O_NONBLOCK`), and anything but a regular
/// file is refused, so a symlink or a FIFO put there since the walk is an error, not a read
/// elsewhere or a hang.
///
/// # Errors
/// [`crate::Error::Io`], also when it is not a regular file.
pub fn open_regular(path: &Path) -> Result<File> {
    match crate::store_file::open_read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Err(not_regular(path)),
        other => other.at(path),
    }
}

/// The error for a path that is no longer a regular file.
fn not_regular(path: &Path) -> crate::Error {
    crate::Error::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(
            "not a regular file (it was replaced while dsv read the directory)",
        ),
    }
}

/// The file id of the open `file` (all of it, read from offset 0 with `pread`, so a handle
/// shared with writers at their own offsets can be hashed), and its stat (`fstat`) taken
/// after the last byte was read; `path` names it in errors. A stat cache entry may be written
/// for a stat taken before (by a walk) only when this stat equals it: the file at that path
/// may have been replaced (a directory renamed away and back keeps its files' ctimes) or
/// written while it was read.
///
/// # Errors
/// [`crate::Error::Io`], also when `file` is not a regular file (a FIFO or a device put in a
/// file's place is never read).
pub fn hash_open_file(file: &File, path: &Path) -> Result<(ObjectId, Stat)> {
    use std::os::unix::fs::FileExt;
    if !file.metadata().at(path)?.is_file() {
        return Err(not_regular(path));
    }
    let mut hasher = blake3::Hasher::new();
    let mut buffer = vec![0; 256 * 1024];
    let mut offset = 0u64;
    loop {
        let n = file.read_at(&mut buffer, offset).at(path)?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
        offset += n as u64;
    }
    let read = Stat::of(&file.metadata().at(path)?);
    Ok((hasher.finalize().into(), read))
}

/// The canonical absolute path of `dir` as the catalog keys workspaces.
///
/// # Errors
/// [`crate::Error::NoSuchPath`] when it does not exist; [`crate::Error::NotADirectory`] when
/// it is not a directory;
/// [`crate::Error::Unsupported`] when the path is not UTF-8 or lies inside a `.dsv` store
/// directory ([`crate::walk::check_workspace_dir`]).
pub fn canonical_dir(dir: &Path) -> Result<(std::path::PathBuf, String)> {
    let canonical = std::fs::canonicalize(dir).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            crate::Error::NoSuchPath {
                path: dir.to_path_buf(),
            }
        } else {
            crate::Error::NotADirectory {
                path: dir.to_path_buf(),
            }
        }
    })?;
    if !canonical.is_dir() {
        return Err(crate::Error::NotADirectory {
            path: dir.to_path_buf(),
        });
    }
    crate::walk::check_workspace_dir(&canonical)?;
    let key = canonical
        .to_str()
        .ok_or_else(|| crate::Error::Unsupported {
            path: canonical.clone(),
            reason: "the path is not valid UTF-8".into(),
        })?
        .to_string();
    Ok((canonical, key))
}

// A workspace's link to its store lives with the other names dsv gives a meaning (the walk
// and the store read it, below this module).
pub use crate::names::{
    STORE_LINK_MAX_BYTES, STORE_LINK_PREFIX, read_store_link, remove_store_link, write_store_link,
};

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(mtime_ns: i64) -> Stat {
        Stat {
            size: 10,
            mtime_ns,
            ctime_ns: mtime_ns,
            inode: 7,
            mode: 0o100644,
        }
    }

    #[test]
    fn only_settled_stats_are_cached_and_trusted_only_when_unchanged() {
        let s = stat(1_000_000_123);
        assert!(entry(&s, 1_000_000_123 + RACY_MARGIN_NS).is_some());
        // Racy: the stat was taken too soon after the last modification.
        assert_eq!(entry(&s, 1_000_000_124), None);
        assert_eq!(entry(&s, 1_000_000_123 + RACY_MARGIN_NS - 1), None);
        // Any changed field distrusts the entry.
        let settled = entry(&s, i64::MAX / 2).unwrap();
        assert_eq!(settled, s);
        for changed in [
            Stat { size: 11, ..s },
            Stat {
                mtime_ns: s.mtime_ns + 1,
                ..s
            },
            Stat {
                ctime_ns: s.ctime_ns + 1,
                ..s
            },
            Stat { inode: 8, ..s },
            Stat {
                mode: 0o100755,
                ..s
            },
        ] {
            assert_ne!(settled, changed);
        }
        // A recent ctime makes the stat racy whatever the mtime says (`touch -d`).
        let backdated = Stat {
            ctime_ns: 1_000_000_123 + 5 * RACY_MARGIN_NS,
            ..s
        };
        assert_eq!(entry(&backdated, 1_000_000_123 + 2 * RACY_MARGIN_NS), None);
        assert!(entry(&backdated, 1_000_000_123 + 6 * RACY_MARGIN_NS).is_some());
        // A whole-second mtime gets the coarse margin even beside a finer ctime.
        let coarse_mtime = Stat {
            mtime_ns: 5_000_000_000,
            ctime_ns: 5_000_000_001,
            ..s
        };
        assert_eq!(entry(&coarse_mtime, 5_000_000_001 + RACY_MARGIN_NS), None);
        assert!(entry(&coarse_mtime, 5_000_000_001 + COARSE_RACY_MARGIN_NS).is_some());
        // Whole-second timestamps get the coarse margin.
        let coarse = stat(5_000_000_000);
        assert_eq!(entry(&coarse, 5_000_000_000 + RACY_MARGIN_NS), None);
        assert!(entry(&coarse, 5_000_000_000 + COARSE_RACY_MARGIN_NS).is_some());
    }
}
