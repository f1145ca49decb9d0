//! The records a checkout spills to an unnamed temporary file instead of holding them per
//! file ([`RecordSpill`]): the inodes staging wrote, read back by applying; the lstats
//! applying took, read back when recording. Shared by the stage and apply steps.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{IoResultExt, Result};
use crate::walk::Stat;

/// Fixed-size records of a checkout, `N` bytes each, spilled in order to an unnamed temporary
/// file (removed by the system whatever happens) and read back in the same order, so that
/// nothing is held per file. A write that fails (a full disk) is not an error: applying must
/// run to its end; [`RecordSpill::read_back`] then gives `None`, and the files concerned get
/// no stat cache entry (hashed next time). Two spills:
/// - the staged inodes ([`INODE_RECORD`] bytes: the inode of each file staged, 0 for a
///   symlink, u64 little-endian), in the order applying replays them;
/// - the lstat of each file and symlink renamed into place ([`STAT_RECORD`] bytes: a tag, 0
///   a symlink, 1 a file, then for a file size (u64), mtime and ctime (i64, ns), inode (u64)
///   and mode (u32), little-endian; zeros for a symlink), read when recording.
pub(super) struct RecordSpill<const N: usize> {
    file: Option<std::io::BufWriter<File>>,
    path: PathBuf,
}

/// The bytes of one staged inode in a [`RecordSpill`].
pub(super) const INODE_RECORD: usize = 8;

/// The bytes of one lstat in a [`RecordSpill`].
pub(super) const STAT_RECORD: usize = 37;

impl<const N: usize> RecordSpill<N> {
    pub(super) fn create(temp_dir: &Path) -> Result<RecordSpill<N>> {
        let file = tempfile::tempfile_in(temp_dir).at(temp_dir)?;
        Ok(RecordSpill {
            file: Some(std::io::BufWriter::with_capacity(1 << 20, file)),
            path: temp_dir.to_path_buf(),
        })
    }

    pub(super) fn push(&mut self, record: &[u8; N]) {
        if let Some(file) = &mut self.file
            && let Err(error) = file.write_all(record)
        {
            tracing::debug!(%error, "a checkout spill failed: written files are not cached");
            self.file = None;
        }
    }

    /// A reader of what was pushed, from the first record; `None` when a write failed.
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read from its start.
    pub(super) fn read_back(self) -> Result<Option<SpilledRecords<N>>> {
        let Some(writer) = self.file else {
            return Ok(None);
        };
        let Ok(mut file) = writer.into_inner() else {
            return Ok(None);
        };
        std::io::Seek::rewind(&mut file).at(&self.path)?;
        Ok(Some(SpilledRecords {
            file: std::io::BufReader::with_capacity(1 << 20, file),
            path: self.path,
        }))
    }
}

/// A [`RecordSpill`]'s records, read back in order.
pub(super) struct SpilledRecords<const N: usize> {
    file: std::io::BufReader<File>,
    path: PathBuf,
}

impl<const N: usize> SpilledRecords<N> {
    /// The next record.
    ///
    /// # Errors
    /// [`Error::Io`], also when the spill ends early.
    pub(super) fn next(&mut self) -> Result<[u8; N]> {
        let mut record = [0u8; N];
        std::io::Read::read_exact(&mut self.file, &mut record).at(&self.path)?;
        Ok(record)
    }
}

/// A staged inode as a [`RecordSpill`] record (0: none, a symlink).
pub(super) fn inode_record(inode: u64) -> [u8; INODE_RECORD] {
    inode.to_le_bytes()
}

/// The staged inode of an [`inode_record`]: `None` for a symlink.
pub(super) fn inode_of(record: [u8; INODE_RECORD]) -> Option<u64> {
    Some(u64::from_le_bytes(record)).filter(|inode| *inode != 0)
}

/// An lstat as a [`RecordSpill`] record (`None`: a symlink).
pub(super) fn stat_record(stat: Option<Stat>) -> [u8; STAT_RECORD] {
    let mut record = [0u8; STAT_RECORD];
    if let Some(stat) = stat {
        record[0] = 1;
        record[1..9].copy_from_slice(&stat.size.to_le_bytes());
        record[9..17].copy_from_slice(&stat.mtime_ns.to_le_bytes());
        record[17..25].copy_from_slice(&stat.ctime_ns.to_le_bytes());
        record[25..33].copy_from_slice(&stat.inode.to_le_bytes());
        record[33..37].copy_from_slice(&stat.mode.to_le_bytes());
    }
    record
}

/// The lstat of a [`stat_record`]: `None` for a symlink.
pub(super) fn stat_of(record: [u8; STAT_RECORD]) -> Option<Stat> {
    if record[0] == 0 {
        return None;
    }
    let u64_at = |at: usize| u64::from_le_bytes(record[at..at + 8].try_into().unwrap_or_default());
    Some(Stat {
        size: u64_at(1),
        mtime_ns: u64_at(9) as i64,
        ctime_ns: u64_at(17) as i64,
        inode: u64_at(25),
        mode: u32::from_le_bytes(record[33..37].try_into().unwrap_or_default()),
    })
}
