//! How large a version may be (files, directories) and what listing one whole costs in
//! memory: pure numbers, below the errors that cite them (`Error::VersionTooLarge`).
//! [`super`] re-exports them.

/// The most regular files and symlinks one version may hold (2^25 = 33,554,432): commit and
/// import refuse more, and a version (or a directory entry) claiming more is corrupt. A walk
/// that lists every path holds one entry per path in memory, so this bounds it.
pub const MAX_VERSION_FILES: u64 = 1 << 25;
/// The most directories one version may hold (2^22 = 4,194,304), the root not counted: commit
/// and import refuse more, and a walk that meets more stops with `Error::Corrupt`.
pub const MAX_VERSION_DIRS: u64 = 1 << 22;

/// Bytes a version's whole listing holds in memory per entry (file, symlink or directory),
/// for the commands that list it whole (`shards`, `--shard`, `mount`, the Python package):
/// about 150 bytes an entry, and the growth of the list. Measured: 615 MB for `dsv shards`
/// of 2^20 files and 2^20 directories (293 bytes an entry).
pub const LISTED_BYTES_PER_ENTRY: u64 = 300;

/// The most files a version fetched from a remote may hold on a machine with `memory` bytes
/// of memory: those whose listing (a file and, up to [`MAX_VERSION_DIRS`], a directory per
/// file, at [`LISTED_BYTES_PER_ENTRY`]) takes at most half of it, never more than
/// [`MAX_VERSION_FILES`] (24 GiB: the full 2^25; 8 GiB: 10,122,253). A remote's version that
/// claims more could be fetched but not served here.
pub fn servable_files(memory: u64) -> u64 {
    let entries = memory / 2 / LISTED_BYTES_PER_ENTRY;
    // f files take f + min(f, MAX_VERSION_DIRS) entries at most.
    let files = if entries <= 2 * MAX_VERSION_DIRS {
        entries / 2
    } else {
        entries - MAX_VERSION_DIRS
    };
    files.min(MAX_VERSION_FILES)
}
