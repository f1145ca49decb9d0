//! A file's lstat as the stat cache records and compares it ([`Stat`]): the walk takes it,
//! the catalog stores it (`catalog::StatEntry`), the workspace rules judge it
//! (`workspace::entry`).

use std::os::unix::fs::MetadataExt;

/// The lstat fields the stat cache compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Length in bytes.
    pub size: u64,
    /// Modification time, ns since the epoch.
    pub mtime_ns: i64,
    /// Status-change time, ns since the epoch.
    pub ctime_ns: i64,
    /// Inode number.
    pub inode: u64,
    /// `st_mode`.
    pub mode: u32,
}

impl Stat {
    /// The fields of `metadata` (from `symlink_metadata`).
    pub fn of(metadata: &std::fs::Metadata) -> Stat {
        Stat::from_raw(
            metadata.len(),
            (metadata.mtime(), metadata.mtime_nsec()),
            (metadata.ctime(), metadata.ctime_nsec()),
            metadata.ino(),
            metadata.mode(),
        )
    }

    /// The fields of a `struct stat` from `fstatat(2)` or `fstat(2)`.
    pub(crate) fn of_file_stat(stat: &nix::sys::stat::FileStat) -> Stat {
        Stat::from_raw(
            stat.st_size as u64,
            (stat.st_mtime, stat.st_mtime_nsec),
            (stat.st_ctime, stat.st_ctime_nsec),
            stat.st_ino,
            stat.st_mode,
        )
    }

    /// The fields of a `struct stat`: times as (seconds, nanoseconds) since the epoch. A time
    /// past what i64 nanoseconds hold (after 2262, or before 1677: `touch -d` sets such
    /// times) saturates, so that it stays comparable with itself instead of overflowing.
    fn from_raw(size: u64, mtime: (i64, i64), ctime: (i64, i64), inode: u64, mode: u32) -> Stat {
        let nanoseconds = |(seconds, nanos): (i64, i64)| {
            seconds.saturating_mul(1_000_000_000).saturating_add(nanos)
        };
        Stat {
            size,
            mtime_ns: nanoseconds(mtime),
            ctime_ns: nanoseconds(ctime),
            inode,
            mode,
        }
    }
}
