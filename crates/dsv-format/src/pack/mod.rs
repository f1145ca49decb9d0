//! Pack files: many objects (chunks, file maps, trees, versions) in few large files.
//!
//! A pack is `header | frame* | index | trailer` (byte layout in [`format`] and
//! `docs/format.md`). A frame holds the raw bytes of one or more neighbouring objects,
//! compressed together with zstd (RFC 8878) when that shrinks them, so small chunks still
//! compress well and a reader decompresses one frame to reach any object inside it. The
//! index at the end lists every frame and object, so a pack describes itself: every chunk,
//! file map, tree and version can be recovered from the packs alone (dataset heads, tags and
//! workspaces live only in the catalog). A pack's id is the BLAKE3 hash of the whole file, and its
//! file name is that id: packs are immutable and written once, durably, before the catalog
//! names them ([`writer::PackWriter::finish`]).

pub mod format;
pub mod reader;
pub mod writer;

pub use format::{Compression, FrameBases, FrameRecord, ObjectRecord, PackIndex};
pub use reader::{BaseLookup, DeltaMap, FrameLocation, PackReader};
pub use writer::{DeltaCompressor, EncodedFrame, FrameBuilder, PackFile, PackWriter, SealedPack};

/// Opens for reading a file that a listing of one of the store's directories found (a lease,
/// a pack): never follows a symlink and never waits on a FIFO or a device, so a stray
/// non-regular file there cannot hang a command that holds the store's locks.
///
/// # Errors
/// The open's error (`ELOOP` for a symlink); [`std::io::ErrorKind::InvalidInput`] when the
/// file is not a regular file.
pub fn open_listed_file(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    crate::store_file::open_read(path)
}
